"""The record of a variant's GGML package (sam3d/tools/ggml_package.py), against a real Conan in
a temporary Conan home and a temporary checkout: a small recipe named ggml stands in for GGML's
and a small core conanfile requires it, so conan.build() runs as it does for the real variants.

A build records its GGML package as Conan has it; reading the record, and packing a bundle
from it (`sam3d bundle --no-build`), calls no Conan and takes no lock, so it does not wait while
another variant's build holds the Conan home's lock; a missing or stale record stops with the
variant's build command, and so does a record of another package than the variant asks for.
The variants are release, cpu-tsan and cuda-release: all GCC, and the stand-in recipes use no
Vulkan header and no nvcc (cuda-release's profile names a toolkit that is not installed, with
the id ci/cuda-toolkit.lock gives it), so no clang, Vulkan headers or CUDA toolkit are needed."""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from sam3d.core import paths, profile, variants
from sam3d.core.errors import NotBuilt
from sam3d.tools import conan, conan_lock, conan_remote, cuda, ggml_package

ROOT = Path(__file__).resolve().parent.parent
RELEASE, TSAN, CUDA = variants.get("release"), variants.get("cpu-tsan"), variants.get("cuda-release")
HOLD_ENV, FAIL_ENV = "SAM3D_TEST_GGML_HOLD", "SAM3D_TEST_CORE_FAIL"
CLI = importlib.import_module("sam3d.cli.main")  # the module: sam3d.cli.main is also its main()
COMMANDS = importlib.import_module("sam3d.cli.commands")

GGML_RECIPE = f'''
import os
import subprocess

from conan import ConanFile
from conan.tools.files import copy, save


class GgmlStandIn(ConanFile):
    """One small shared library, lib/libggml-base.so; its options, and the CUDA toolkit id in a
    CUDA binary's package_id, as GGML's recipe has them."""

    name = "ggml"
    package_type = "shared-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {{"vulkan": [True, False], "cuda": [True, False], "cuda_architectures": ["ANY"]}}
    default_options = {{"vulkan": False, "cuda": False, "cuda_architectures": "90-real"}}

    def configure(self):
        if not self.options.cuda:
            self.options.rm_safe("cuda_architectures")

    def package_id(self):
        if self.info.options.get_safe("cuda"):
            self.info.conf.define("{ggml_package.TOOLKIT_CONF}", self.conf.get("{ggml_package.TOOLKIT_CONF}"))

    def build(self):
        src = os.path.join(self.build_folder, "ggml.c")
        save(self, src, "int ggml_answer(void) {{ return 42; }}\\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", os.path.join(self.build_folder, "libggml-base.so"), src],
                       check=True)

    def package(self):
        copy(self, "libggml-base.so", self.build_folder, os.path.join(self.package_folder, "lib"))
'''

CORE = f'''
import os
import time

from conan import ConanFile
from conan.errors import ConanException


class CoreStandIn(ConanFile):
    """Requires GGML and builds nothing, in every `conan build`: with {FAIL_ENV} set, its build
    fails; with {HOLD_ENV} naming a folder, it writes <folder>/building, then waits (at most
    120 s) for <folder>/release."""

    name = "sam3d-core"
    version = "0.1.0"
    settings = "os", "arch", "compiler", "build_type"
    options = {{"vulkan": [True, False], "cuda": [True, False]}}
    default_options = {{"vulkan": False, "cuda": False}}

    def requirements(self):
        self.requires("ggml/{conan.ggml_version()}")

    def build(self):
        if os.environ.get("{FAIL_ENV}"):
            raise ConanException("the core's build failed ({FAIL_ENV})")
        hold = os.environ.get("{HOLD_ENV}")
        if hold:
            open(os.path.join(hold, "building"), "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(os.path.join(hold, "release")):
                if time.monotonic() > deadline:
                    raise ConanException("not released within 120 s")
                time.sleep(0.05)
'''

# A variant's build in another process, as `python -m sam3d build` runs it (holding the lock).
BUILD = """
import sys
from pathlib import Path
from sam3d.core import variants
from sam3d.tools import conan
conan.build(variants.get(sys.argv[1]), Path(sys.argv[2]))
"""


def _checkout(root: Path) -> None:
    """The files of a checkout that conan.ensure_home(), conan.build(), ggml_package.read() and
    bundle.make() read."""
    recipe = root / ggml_package.RECIPE
    recipe.mkdir(parents=True)
    (recipe / "conanfile.py").write_text(GGML_RECIPE)
    (recipe / "conandata.yml").write_text(f'sources:\n  "{conan.ggml_version()}": {{}}\n')
    shutil.copy(ROOT / ggml_package.CONFIG, root / ggml_package.CONFIG)
    (root / "conanfile.py").write_text(CORE)
    shutil.copy(ROOT / "conan" / "settings_user.yml", root / "conan" / "settings_user.yml")
    for rel in (profile.RELATIVE_PATH, cuda.LOCK):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, root / rel)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The temporary checkout and Conan home, with release, cpu-tsan and cuda-release built
    (their records written by conan.build from Conan's graphs); ``log`` has each build's log
    path (its graph lies beside it)."""
    tmp = tmp_path_factory.mktemp("ggml-record")
    root, home = tmp / "checkout", tmp / "conan2"
    _checkout(root)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {
            "SAM3D_ROOT": root,
            "SAM3D_CACHE": tmp / "cache",
            "SAM3D_CONAN_HOME": home,
            "SAM3D_VULKAN_INCLUDE_DIR": tmp / "vulkan-include",
        }.items():
            mp.setenv(key, str(value))
        for key in (conan_remote.REMOTE_ENV, HOLD_ENV, FAIL_ENV):
            mp.delenv(key, raising=False)
        conan.ensure_home([RELEASE, TSAN])
        # cuda-release's profile as ensure_home writes it, less installing the toolkit it names.
        folder, version = cuda.install_dir()
        toolkit = cuda.Toolkit(root=tmp / "cuda-not-installed", version=version, ident=folder.name)
        (home / "profiles" / CUDA.profile_name).write_text(
            conan.profile_text(CUDA, conan.compiler_version(CUDA.compiler), toolkit=toolkit)
        )
        log = {v.name: tmp / f"build-{v.name}.log" for v in (RELEASE, TSAN, CUDA)}
        for v in (RELEASE, TSAN, CUDA):
            conan.build(v, log[v.name])
        yield SimpleNamespace(
            root=root, home=home, tmp=tmp, log=log, graph=log[RELEASE.name].with_suffix(".graph.json")
        )


@contextmanager
def _changed(path: Path, text: str):
    """``path`` holds ``text`` inside the block, its own text again after it."""
    before = path.read_text()
    path.write_text(text)
    try:
        yield
    finally:
        path.write_text(before)


def _record_with(v: variants.Variant, **change) -> str:
    """The text of the variant's record with top-level keys replaced."""
    return json.dumps({**json.loads(ggml_package.path(v).read_text()), **change})


def _forbid_conan(mp: pytest.MonkeyPatch) -> None:
    """Any Conan invocation or lock taken fails the test."""

    def forbidden(*args, **kwargs):
        raise AssertionError(f"Conan invoked or its lock taken: {args}")

    mp.setattr(conan, "_invoke", forbidden)
    mp.setattr(conan_lock, "held", forbidden)


@pytest.fixture
def no_conan(monkeypatch):
    _forbid_conan(monkeypatch)


def _lock_free(home: Path) -> bool:
    fd = os.open(home / conan_lock.LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _wait_for(path: Path, proc: subprocess.Popen, out: Path, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        assert proc.poll() is None, f"exited {proc.returncode} before {path} appeared: {out.read_text()}"
        assert time.monotonic() < deadline, f"{path} did not appear: {out.read_text()}"
        time.sleep(0.05)


def test_a_build_records_its_ggml_package_as_conan_has_it(built):
    rec = ggml_package.read(RELEASE)
    assert ggml_package.path(RELEASE) == built.root / "build" / "release" / "Release" / ggml_package.RECORD
    assert json.loads(ggml_package.path(RELEASE).read_text())["schema"] == ggml_package.SCHEMA_ID
    assert rec.ref == f"ggml/{conan.ggml_version()}"
    assert rec.libs == ("libggml-base.so",)
    assert rec.recipe_sha256 == ggml_package.recipe_sha256()
    full = f"{rec.ref}#{rec.recipe_revision}:{rec.package_id}#{rec.package_revision}"
    assert Path(conan.run(["cache", "path", full]).strip()) == rec.package_folder
    assert rec.package_folder.is_relative_to(built.home)
    assert (rec.settings["build_type"], rec.settings["compiler"], rec.options, rec.conf) == (
        "Release",
        "gcc",
        {"cuda": "False", "vulkan": "True"},
        {},
    )
    assert "compiler.sanitizer" not in rec.settings and "os.glibc" not in rec.settings
    assert ggml_package.read(TSAN).settings["compiler.sanitizer"] == "Thread"
    assert ggml_package.write(RELEASE, built.graph, rec.recipe_sha256) == rec == ggml_package.read(RELEASE)


def test_a_cuda_record_keeps_the_toolkit_id_and_goes_stale_with_the_toolkit_lock(built, no_conan):
    """A CUDA binary's package_id has the toolkit id (the recipe's package_id()); once
    ci/cuda-toolkit.lock changes, the variant asks for another toolkit, and its record built
    with the old one is refused (no toolkit is installed to see it)."""
    rec = ggml_package.read(CUDA)
    ident = cuda.install_dir()[0].name
    assert rec.conf == {ggml_package.TOOLKIT_CONF: ident}
    assert rec.options == {"cuda": "True", "cuda_architectures": CUDA.cuda_architectures, "vulkan": "False"}
    lock = built.root / cuda.LOCK
    with _changed(lock, lock.read_text() + "# another toolkit\n"):
        other = cuda.install_dir()[0].name
        with pytest.raises(NotBuilt) as e:
            ggml_package.read(CUDA)
    assert other != ident
    assert str(e.value) == (
        f"{ggml_package.path(CUDA)}: its GGML package ({rec.ref}:{rec.package_id}) has "
        f"conf.{ggml_package.TOOLKIT_CONF}={ident!r}, the variant asks for {other!r} now: "
        "rebuild it (python -m sam3d build cuda-release)"
    )
    ggml_package.read(CUDA)


@pytest.mark.parametrize(
    "group, name, value",
    [
        ("settings", "build_type", "Debug"),
        ("settings", "compiler", "clang"),
        ("settings", "compiler.sanitizer", "Thread"),
        ("settings", "os.glibc", "2.36"),
        ("options", "vulkan", "False"),
        ("options", "cuda", "True"),
        ("options", "cuda_architectures", "90-real"),
        ("conf", ggml_package.TOOLKIT_CONF, "cuda-13.0.88-000000000000"),
    ],
)
def test_a_record_of_another_binary_than_the_variant_asks_for_is_stale(built, no_conan, group, name, value):
    """What the variant's profile fixes of its GGML binary (the settings and options that differ
    between variants, os.glibc, the CUDA toolkit id): a record of a package with another value
    is refused, naming the key, both values and the build command."""
    rec = ggml_package.read(RELEASE)
    record = ggml_package.path(RELEASE)
    want = ggml_package.expected(RELEASE)[f"{group}.{name}"]
    want = "(unset)" if want is None else repr(want)
    with (
        _changed(record, _record_with(RELEASE, **{group: {**getattr(rec, group), name: value}})),
        pytest.raises(NotBuilt) as e,
    ):
        ggml_package.read(RELEASE)
    assert str(e.value) == (
        f"{record}: its GGML package ({rec.ref}:{rec.package_id}) has {group}.{name}={value!r}, "
        f"the variant asks for {want} now: rebuild it "
        "(python -m sam3d build release)"
    )


def test_a_remote_configured_since_the_build_makes_the_record_stale(built, no_conan, monkeypatch):
    """Without a remote binaries have no os.glibc setting, with one they have this machine's
    glibc (conan_remote.host_settings): a build from before the remote is another binary."""
    monkeypatch.setenv(conan_remote.REMOTE_ENV, "http://127.0.0.1:9/never-asked")
    with pytest.raises(NotBuilt) as e:
        ggml_package.read(RELEASE)
    assert f"has settings.os.glibc=(unset), the variant asks for {conan_remote.glibc_version()!r} now" in str(e.value)
    monkeypatch.delenv(conan_remote.REMOTE_ENV)
    ggml_package.read(RELEASE)


def test_a_record_is_read_at_once_while_another_build_holds_the_lock(built, monkeypatch):
    """cpu-tsan, built already, builds again (to the same log and graph as before) and waits
    inside its core's build, holding the Conan home's lock: its record is gone meanwhile (read()
    says a build of it may be running) and back after; release's record is read meanwhile, in
    well under a second and with Conan forbidden."""
    ggml_package.read(TSAN)
    hold, out = built.tmp / "hold", built.tmp / "build-cpu-tsan.out"
    hold.mkdir()
    with open(out, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-c", BUILD, TSAN.name, str(built.log[TSAN.name])],
            cwd=ROOT,
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, HOLD_ENV: str(hold)},
        )
    try:
        _wait_for(hold / "building", proc, out)
        assert not _lock_free(built.home)
        assert (built.home / conan_lock.LOCK_FILE).read_text() == f"PID {proc.pid}, clone {built.root}\n"
        with monkeypatch.context() as m:
            _forbid_conan(m)
            assert not ggml_package.path(TSAN).exists()  # a build in progress has no record
            with pytest.raises(NotBuilt) as e:
                ggml_package.read(TSAN)
            t0 = time.monotonic()
            rec = ggml_package.read(RELEASE)
            took = time.monotonic() - t0
        assert took < 1.0 and rec.lib_dir.is_dir()
        assert not _lock_free(built.home)  # still building: the read did not wait for it
    finally:
        (hold / "release").touch()
        rc = proc.wait(timeout=120)
    assert rc == 0, out.read_text()
    assert str(e.value) == (
        f"{ggml_package.path(TSAN)} is missing (or a build of it is running: PID {proc.pid} "
        "of this clone holds the Conan lock): build the variant first (python -m sam3d build cpu-tsan)"
    )
    assert ggml_package.read(TSAN).package_id != rec.package_id


def _fake_build(v: variants.Variant, lib_dir: Path, tmp: Path) -> None:
    """The files bundle.make() packs from a GPU variant's build folder: its binaries (one small
    program needing GGML's libggml-base.so, found only through LD_LIBRARY_PATH) and a
    compile_commands.json with the variant's flags."""
    src = tmp / "main.c"
    src.write_text("int ggml_answer(void);\nint main(void) { return ggml_answer() == 42 ? 0 : 1; }\n")
    exe = tmp / "program"
    subprocess.run(["gcc", "-o", str(exe), str(src), f"-L{lib_dir}", "-lggml-base"], check=True)
    build = ggml_package.path(v).parent
    for rel in (
        "tests/device/sam3d_device_tests",
        "tests/gpu_canary_vulkan",
        "bench/sam3d_bench",
        "bench/sam3d_floor_probe",
    ):
        (build / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(exe, build / rel)
    core = str(build.parents[2] / "native" / "src" / "core.cpp")
    (build / "compile_commands.json").write_text(
        json.dumps([{"directory": str(build), "file": core, "arguments": ["c++", *v.compile_flags, "-c", core]}])
    )


def test_bundle_no_build_packs_ggml_from_the_record_without_conan(built, no_conan, monkeypatch, tmp_path, capsys):
    """`sam3d bundle --no-build release` builds nothing, calls no Conan, and packs the library
    of the recorded package; without the record it stops with the build command. (A Vulkan
    variant's bundle packs libglvnd's libraries too: bundle.GLVND_LIBS, from the Debian
    packages system.VULKAN_PACKAGES installs.)"""
    monkeypatch.setattr(COMMANDS, "build_variants", lambda vs: pytest.fail(f"built {[v.name for v in vs]}"))
    _fake_build(RELEASE, ggml_package.read(RELEASE).lib_dir, tmp_path)
    assert CLI.main(["bundle", "--no-build", "release"]) == 0, capsys.readouterr().err
    with tarfile.open(built.root / "build" / "bundle" / "sam3d-device.tar.gz") as t:
        names = set(t.getnames())
        manifest = json.load(t.extractfile("sam3d-device/manifest.json"))
    assert "sam3d-device/release/lib/libggml-base.so" in names
    assert "release/lib/libggml-base.so" in manifest["variants"]["release"]["files"]
    record = ggml_package.path(RELEASE)
    text = record.read_text()
    record.unlink()
    try:
        assert CLI.main(["bundle", "--no-build", "release"]) == 2
    finally:
        record.write_text(text)
    assert f"{record} is missing: build the variant first (python -m sam3d build release)" in capsys.readouterr().err


def test_no_record_means_not_built(built, no_conan):
    v = variants.get("vulkan-ubsan")
    with pytest.raises(NotBuilt) as e:
        ggml_package.read(v)
    assert (
        str(e.value)
        == f"{ggml_package.path(v)} is missing: build the variant first (python -m sam3d build vulkan-ubsan)"
    )


@pytest.mark.parametrize("holder, running", [("this clone", True), ("another clone", False), ("a dead process", False)])
def test_a_missing_record_names_a_running_build_of_this_clone_only(built, no_conan, holder, running):
    """A build holds the Conan home's lock from removing its record to writing it again, and the
    lock file names the holder ("PID N, clone X") while it is held: read() reads that file, it
    asks for no lock, and says a build may be running only when a live process of this clone
    holds it."""
    v = variants.get("vulkan-ubsan")
    pid = {"a dead process": 2**22 + 1}.get(holder, os.getpid())
    clone = built.tmp / "other-clone" if holder == "another clone" else built.root
    with _changed(built.home / conan_lock.LOCK_FILE, f"PID {pid}, clone {clone}\n"), pytest.raises(NotBuilt) as e:
        ggml_package.read(v)
    said = f" (or a build of it is running: PID {pid} of this clone holds the Conan lock)"
    assert str(e.value) == (
        f"{ggml_package.path(v)} is missing{said if running else ''}: build the variant first "
        "(python -m sam3d build vulkan-ubsan)"
    )


def test_a_record_of_another_recipe_state_is_stale(built, no_conan):
    recipe = built.root / ggml_package.RECIPE / "conandata.yml"
    with _changed(recipe, recipe.read_text() + "# another state\n"), pytest.raises(NotBuilt) as e:
        ggml_package.read(RELEASE)
    assert "the GGML recipe (conan/recipes/ggml/all/) changed since the variant was built" in str(e.value)
    assert str(e.value).endswith("(python -m sam3d build release)")
    ggml_package.read(RELEASE)  # the same state again: fresh


def test_the_recipe_digest_is_of_what_conan_exports(built, no_conan, tmp_path):
    """recipe_sha256() is SHA-256 of `sha256sum conandata.yml conanfile.py`: names and
    contents, so swapping the two files' contents is another state; a file Conan does not
    export (an editor's swap file) is none."""
    folder = built.root / ggml_package.RECIPE
    listing = subprocess.run(
        ["sha256sum", "conandata.yml", "conanfile.py"], cwd=folder, capture_output=True, check=True
    ).stdout
    assert ggml_package.recipe_sha256() == hashlib.sha256(listing).hexdigest()
    data, recipe = folder / "conandata.yml", folder / "conanfile.py"
    with _changed(data, recipe.read_text()), _changed(recipe, data.read_text()):
        assert ggml_package.recipe_sha256() != hashlib.sha256(listing).hexdigest()
    stray = [folder / ".conanfile.py.swp", folder / "conanfile.py~", folder / "__pycache__" / "conanfile.pyc"]
    try:
        for f in stray:
            f.parent.mkdir(exist_ok=True)
            f.write_text("not exported\n")
        ggml_package.read(RELEASE)
    finally:
        for f in stray:
            f.unlink()


def test_the_checkout_s_recipe_index_serves_ggml_as_to_a_conan_user(monkeypatch, tmp_path):
    """In a Conan home of its own, after the remote add that docs/sharing.md names, the checkout's
    index gives ggml/<the core's version> (conan/recipes/ggml/config.yml), and what Conan takes of
    the recipe is ggml_package.EXPORTED and Conan's manifest, nothing else (no test_package/): its
    conandata.yml holds the sources of that version, as the checkout's does. The project's Conan
    home gets the very same recipe revision from the index."""

    def user_conan(*args: str) -> str:  # Conan as its user runs it: CONAN_HOME, the checkout as cwd
        return subprocess.run(
            [paths.tool("conan"), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "CONAN_HOME": str(tmp_path / "user")},
        ).stdout

    def revisions(listed: str) -> list[str]:
        return list(json.loads(listed)["Local Cache"][ref]["revisions"])

    user_conan("remote", "add", "sam3d-recipes", "conan", "--type=local-recipes-index")
    ref = f"{ggml_package.NAME}/{conan.ggml_version()}"
    user_conan("download", ref, "-r", "sam3d-recipes", "--only-recipe")
    export = Path(user_conan("cache", "path", ref).strip())
    assert sorted(p.name for p in export.iterdir()) == sorted((*ggml_package.EXPORTED, "conanmanifest.txt"))
    data = yaml.safe_load((ROOT / ggml_package.RECIPE / "conandata.yml").read_text())
    assert yaml.safe_load((export / "conandata.yml").read_text()) == data
    assert (export / "conanfile.py").read_bytes() == (ROOT / ggml_package.RECIPE / "conanfile.py").read_bytes()

    monkeypatch.setenv("SAM3D_ROOT", str(ROOT))  # this checkout, whatever the module's fixture set
    monkeypatch.setenv("SAM3D_CONAN_HOME", str(tmp_path / "project"))
    monkeypatch.delenv(conan_remote.REMOTE_ENV, raising=False)
    conan.ensure_home([TSAN])
    conan.run(["download", ref, "-r", conan_remote.INDEX_NAME, "--only-recipe"])
    assert revisions(conan.run(["list", f"{ref}#*", "--format=json"])) == revisions(
        user_conan("list", f"{ref}#*", "--format=json")
    )


def test_a_build_takes_the_index_s_recipe_over_a_newer_revision_in_the_cache(built):
    """Another clone sharing the Conan home may have put another revision of ggml/<version> in its
    cache since (here: exported, so it is the latest there): the next build of this checkout still
    builds against this checkout's recipe, its record names the index's revision, not that one."""
    before = ggml_package.read(RELEASE)
    other = built.tmp / "other-clone-recipe"
    shutil.copytree(built.root / ggml_package.RECIPE, other)
    with open(other / "conanfile.py", "a") as f:
        f.write("# another clone's recipe\n")
    ref = f"{ggml_package.NAME}/{conan.ggml_version()}"
    exported = json.loads(conan.run(["export", str(other), "--version", conan.ggml_version(), "--format=json"]))
    rrev = exported["reference"].split("#")[1]
    assert rrev != before.recipe_revision
    latest = json.loads(conan.run(["list", f"{ref}#latest", "--format=json"]))["Local Cache"][ref]["revisions"]
    assert list(latest) == [rrev]
    log = built.tmp / "build-release-again.log"
    conan.build(RELEASE, log)
    after = ggml_package.read(RELEASE)
    assert after.recipe_revision == before.recipe_revision
    assert after.package_folder == before.package_folder


@pytest.mark.parametrize("what", ["package folder", "library"])
def test_a_record_whose_package_is_gone_is_stale(built, no_conan, what):
    rec = ggml_package.read(RELEASE)
    gone = rec.package_folder if what == "package folder" else rec.lib_dir / "libggml-base.so"
    aside = gone.with_name(gone.name + ".aside")
    gone.rename(aside)
    try:
        with pytest.raises(NotBuilt) as e:
            ggml_package.read(RELEASE)
    finally:
        aside.rename(gone)
    assert f"{gone} of its GGML package ({rec.ref}:{rec.package_id}) is gone from the Conan cache" in str(e.value)
    assert str(e.value).endswith("(python -m sam3d build release)")


@pytest.mark.parametrize("schema", ["sam3d-ggml-package/0", "sam3d-ggml-package/1"])
def test_a_record_of_another_schema_is_stale(built, no_conan, schema):
    record = ggml_package.path(RELEASE)
    with _changed(record, _record_with(RELEASE, schema=schema)), pytest.raises(NotBuilt) as e:
        ggml_package.read(RELEASE)
    assert f"{record}: field 'schema'" in str(e.value) and str(e.value).endswith("(python -m sam3d build release)")


def _without_folder(node: dict, tmp: Path) -> None:
    del node["immutable_package_folder"]


def _without_lib(node: dict, tmp: Path) -> None:
    node["immutable_package_folder"] = str(tmp)


@pytest.mark.parametrize(
    "defect, expect",
    [
        (_without_folder, "field 'immutable_package_folder': missing; not the graph of `conan build --format=json`"),
        (_without_lib, "has no lib/ folder: the GGML recipe's package() must copy its libraries there"),
        (None, "2 ggml packages in the build's graph (want 1): the core's conanfile.py must require GGML once"),
    ],
)
def test_a_graph_the_record_cannot_be_taken_from_is_a_conan_error(built, monkeypatch, tmp_path, defect, expect):
    """conan.build() fails with ConanError, the error build_variants() fails one variant with
    (and goes on with the next), in one line naming the graph file, when the graph Conan wrote
    lacks what the record takes (here: edited after a real `conan build`, GGML's node without
    its package folder, a package folder without lib/, or GGML twice); no record is left."""
    real = conan.run_with_remote

    def damaged(args: list[str], log: Path) -> None:
        real(args, log)
        graph = Path(args[args.index("--out-file") + 1])
        doc = json.loads(graph.read_text())
        nodes = doc["graph"]["nodes"]
        ((key, node),) = [(k, n) for k, n in nodes.items() if n.get("name") == "ggml"]
        if defect is None:
            nodes[f"{key}-again"] = node
        else:
            defect(node, tmp_path)
        graph.write_text(json.dumps(doc))

    monkeypatch.setattr(conan, "run_with_remote", damaged)
    log = tmp_path / "build-release.log"
    record = ggml_package.path(RELEASE)
    with _changed(record, record.read_text()), pytest.raises(conan.ConanError) as e:
        try:
            conan.build(RELEASE, log)
        finally:
            assert not record.exists()
    assert str(e.value).startswith(f"{log.with_suffix('.graph.json')}: ") and expect in str(e.value)
    assert "\n" not in str(e.value)


def test_a_failed_build_leaves_no_record(built, monkeypatch):
    """A failed build writes to the log and graph paths of the good build before it: its record
    goes and stays gone, whatever that graph says; the next good build brings it back."""
    log = built.log[RELEASE.name]
    assert log.with_suffix(".graph.json").is_file() and ggml_package.read(RELEASE)
    monkeypatch.setenv(FAIL_ENV, "1")
    with pytest.raises(conan.ConanError):
        conan.build(RELEASE, log)
    assert not ggml_package.path(RELEASE).exists()
    monkeypatch.delenv(FAIL_ENV)
    conan.build(RELEASE, log)
    ggml_package.read(RELEASE)
