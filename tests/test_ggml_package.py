"""The record of a variant's GGML package (sam3d/tools/ggml_package.py), against a real Conan in
a temporary Conan home and a temporary checkout: a small recipe named ggml stands in for GGML's
and a small core conanfile requires it, so conan.build() runs as it does for the real variants.

A build records its GGML package as Conan has it; reading the record, and packing a bundle
from it (`sam3d bundle --no-build`), calls no Conan and takes no lock, so it does not wait while
another variant's build holds the Conan home's lock; a missing or stale record stops with the
variant's build command. The variants are release and cpu-tsan: both GCC, and the stand-in
recipes use no Vulkan header, so no clang, Vulkan headers or CUDA toolkit are needed."""

from __future__ import annotations

import fcntl
import importlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from sam3d.core import profile, variants
from sam3d.core.errors import NotBuilt
from sam3d.tools import conan, conan_lock, conan_remote, ggml_package

ROOT = Path(__file__).resolve().parent.parent
RELEASE, TSAN = variants.get("release"), variants.get("cpu-tsan")
HOLD_ENV, FAIL_ENV = "SAM3D_TEST_GGML_HOLD", "SAM3D_TEST_CORE_FAIL"
CLI = importlib.import_module("sam3d.cli.main")  # the module: sam3d.cli.main is also its main()

# What both stand-ins declare: the settings and the options every variant's profile sets for
# the ggml and sam3d-core packages (conan.profile_text).
PROFILED = '''    settings = "os", "arch", "compiler", "build_type"
    options = {"vulkan": [True, False], "cuda": [True, False]}
    default_options = {"vulkan": False, "cuda": False}'''

GGML_RECIPE = f'''
import os
import subprocess
import time

from conan import ConanFile
from conan.tools.files import copy, save


class GgmlStandIn(ConanFile):
    """One small shared library, lib/libggml-base.so. With {HOLD_ENV} naming a folder, its
    build writes <folder>/building, then waits (at most 120 s) for <folder>/release."""

    name = "ggml"
    package_type = "shared-library"
{PROFILED}

    def build(self):
        hold = os.environ.get("{HOLD_ENV}")
        if hold:
            save(self, os.path.join(hold, "building"), "")
            deadline = time.monotonic() + 120
            while not os.path.exists(os.path.join(hold, "release")):
                if time.monotonic() > deadline:
                    raise RuntimeError("not released within 120 s")
                time.sleep(0.05)
        src = os.path.join(self.build_folder, "ggml.c")
        save(self, src, "int ggml_answer(void) {{ return 42; }}\\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", os.path.join(self.build_folder, "libggml-base.so"), src],
                       check=True)

    def package(self):
        copy(self, "libggml-base.so", self.build_folder, os.path.join(self.package_folder, "lib"))
'''

CORE = f'''
import os

from conan import ConanFile
from conan.errors import ConanException


class CoreStandIn(ConanFile):
    """Requires GGML and builds nothing; with {FAIL_ENV} set, its build fails."""

    name = "sam3d-core"
    version = "0.1.0"
{PROFILED}

    def requirements(self):
        self.requires("ggml/{conan.ggml_version()}")

    def build(self):
        if os.environ.get("{FAIL_ENV}"):
            raise ConanException("the core's build failed ({FAIL_ENV})")
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
    """The files of a checkout that conan.ensure_home(), conan.build() and bundle.make() read."""
    recipe = root / ggml_package.RECIPE
    recipe.mkdir(parents=True)
    (recipe / "conanfile.py").write_text(GGML_RECIPE)
    (recipe / "conandata.yml").write_text(f'sources:\n  "{conan.ggml_version()}": {{}}\n')
    (root / "conanfile.py").write_text(CORE)
    shutil.copy(ROOT / "conan" / "settings_user.yml", root / "conan" / "settings_user.yml")
    (root / profile.RELATIVE_PATH).parent.mkdir(parents=True)
    shutil.copy(ROOT / profile.RELATIVE_PATH, root / profile.RELATIVE_PATH)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The temporary checkout and Conan home, with release built (its record written by
    conan.build from Conan's graph)."""
    tmp = tmp_path_factory.mktemp("ggml-record")
    root, home = tmp / "checkout", tmp / "conan2"
    _checkout(root)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {"SAM3D_ROOT": root, "SAM3D_CACHE": tmp / "cache", "SAM3D_CONAN_HOME": home,
                           "SAM3D_VULKAN_INCLUDE_DIR": tmp / "vulkan-include"}.items():
            mp.setenv(key, str(value))
        for key in (conan_remote.REMOTE_ENV, HOLD_ENV, FAIL_ENV):
            mp.delenv(key, raising=False)
        conan.ensure_home([RELEASE, TSAN])
        log = tmp / "build-release.log"
        conan.build(RELEASE, log)
        yield SimpleNamespace(root=root, home=home, tmp=tmp, graph=log.with_suffix(".graph.json"))


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
    assert ggml_package.write(RELEASE, built.graph, rec.recipe_sha256) == rec == ggml_package.read(RELEASE)


def test_a_record_is_read_at_once_while_another_build_holds_the_lock(built, monkeypatch):
    """cpu-tsan's build waits inside its GGML build, holding the Conan home's lock; release's
    record is read meanwhile, in well under a second and with Conan forbidden."""
    hold, out = built.tmp / "hold", built.tmp / "build-cpu-tsan.out"
    hold.mkdir()
    with open(out, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", BUILD, TSAN.name, str(built.tmp / "build-cpu-tsan.log")],
                                cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, HOLD_ENV: str(hold)})
    try:
        _wait_for(hold / "building", proc, out)
        assert not _lock_free(built.home)
        assert (built.home / conan_lock.LOCK_FILE).read_text() == f"PID {proc.pid}, clone {built.root}\n"
        assert not ggml_package.path(TSAN).exists()  # a build in progress has no record
        with monkeypatch.context() as m:
            _forbid_conan(m)
            t0 = time.monotonic()
            rec = ggml_package.read(RELEASE)
            took = time.monotonic() - t0
        assert took < 1.0 and rec.lib_dir.is_dir()
        assert not _lock_free(built.home)  # still building: the read did not wait for it
    finally:
        (hold / "release").touch()
        rc = proc.wait(timeout=120)
    assert rc == 0, out.read_text()
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
    for rel in ("tests/device/sam3d_device_tests", "bench/sam3d_bench", "bench/sam3d_floor_probe"):
        (build / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(exe, build / rel)
    core = str(build.parents[2] / "native" / "src" / "core.cpp")
    (build / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(build), "file": core, "arguments": ["c++", *v.compile_flags, "-c", core]}]))


def test_bundle_no_build_packs_ggml_from_the_record_without_conan(built, no_conan, monkeypatch, tmp_path, capsys):
    """`sam3d bundle --no-build release` builds nothing, calls no Conan, and packs the library
    of the recorded package; without the record it stops with the build command. (A Vulkan
    variant's bundle packs libglvnd's libraries too: bundle.GLVND_LIBS, from the Debian
    packages system.VULKAN_PACKAGES installs.)"""
    monkeypatch.setattr(CLI, "build_variants", lambda vs: pytest.fail(f"built {[v.name for v in vs]}"))
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
    assert f"{record} is missing: build the variant first (nox -s build -- release)" in capsys.readouterr().err


def test_no_record_means_not_built(built, no_conan):
    v = variants.get("vulkan-ubsan")
    with pytest.raises(NotBuilt) as e:
        ggml_package.read(v)
    assert str(e.value) == f"{ggml_package.path(v)} is missing: build the variant first (nox -s build -- vulkan-ubsan)"


def test_a_record_of_another_recipe_state_is_stale(built, no_conan):
    recipe = built.root / ggml_package.RECIPE / "conandata.yml"
    text = recipe.read_text()
    recipe.write_text(text + "# another state\n")
    try:
        with pytest.raises(NotBuilt) as e:
            ggml_package.read(RELEASE)
    finally:
        recipe.write_text(text)
    assert "the GGML recipe (conan/recipes/ggml/) changed since the variant was built" in str(e.value)
    assert str(e.value).endswith("(nox -s build -- release)")
    ggml_package.read(RELEASE)  # the same state again: fresh


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
    assert str(e.value).endswith("(nox -s build -- release)")


def test_a_record_of_another_schema_is_stale(built, no_conan):
    record = ggml_package.path(RELEASE)
    text = record.read_text()
    record.write_text(text.replace(ggml_package.SCHEMA_ID, "sam3d-ggml-package/0"))
    try:
        with pytest.raises(NotBuilt) as e:
            ggml_package.read(RELEASE)
    finally:
        record.write_text(text)
    assert f"{record}: field 'schema'" in str(e.value) and str(e.value).endswith("(nox -s build -- release)")


def test_a_failed_build_leaves_no_record(built, monkeypatch):
    monkeypatch.setenv(FAIL_ENV, "1")
    with pytest.raises(conan.ConanError):
        conan.build(RELEASE, built.tmp / "build-release-failed.log")
    assert not ggml_package.path(RELEASE).exists()
    monkeypatch.delenv(FAIL_ENV)
    conan.build(RELEASE, built.tmp / "build-release-again.log")
    ggml_package.read(RELEASE)
