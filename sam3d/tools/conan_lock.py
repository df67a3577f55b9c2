"""One exclusive lock on the project's Conan home, held around every Conan invocation.

Conan's package cache is not safe for concurrent use, and every clone on a machine (and every
CI job under one user) shares the project's Conan home. So each `conan` command that sam3d runs
holds an flock(2) on <Conan home>/sam3d.lock for as long as it runs; a second clone waits,
printing who holds it, and gives up after SAM3D_CONAN_LOCK_TIMEOUT seconds (default 3600: a
cold GGML build of cuda-release is about 13 minutes on 2 cores, of cuda-asan longer;
docs/build-cache.md). Commands that only use what is built take no lock at all (ggml_package.py).
The kernel releases an flock when its holder
exits, however it exits (kill -9 included), so a dead holder never blocks the cache.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..core import paths
from ..core.errors import Sam3dError

LOCK_FILE = "sam3d.lock"
TIMEOUT_ENV = "SAM3D_CONAN_LOCK_TIMEOUT"
DEFAULT_TIMEOUT_S = 3600.0
POLL_S = 0.2

# (thread, lock file) this process holds -> nesting depth: an flock belongs to an open file, so a
# second open by the same thread would wait on itself (another thread's open waits, as it should).
_held: dict[tuple[int, Path], int] = {}


class ConanLockTimeout(Sam3dError):
    pass


def timeout_s() -> float:
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        return float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        raise Sam3dError(f"{TIMEOUT_ENV}={text!r}: want a number of seconds") from None


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


# What the holder writes into the lock file while it holds it (held()), and how it is read back.
_HOLDER = "PID {pid}, clone {clone}"
_HOLDER_RE = re.compile(r"PID (\d+), clone (.+)")


def live_holder_in(home: Path, clone: Path) -> int | None:
    """The PID of the live process of ``clone`` that holds the Conan home's lock now, as the lock
    file says (the lock is not asked for), else None."""
    m = _HOLDER_RE.fullmatch(holder(home / LOCK_FILE))
    if m and Path(m.group(2)) == clone and Path("/proc", m.group(1)).exists():
        return int(m.group(1))
    return None


def holder(path: Path) -> str:
    """Who holds the lock, as the holder wrote it ("PID N, clone X"), or "another process"."""
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "another process"


@contextmanager
def held(home: Path, timeout: float | None = None) -> Iterator[None]:
    """Hold the Conan home's lock (re-entrant within this process); waits with one message on
    stderr, and raises ConanLockTimeout after `timeout` seconds (default: timeout_s())."""
    path = home / LOCK_FILE
    key = (threading.get_ident(), path)
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if not _try_lock(fd):
            who = holder(path)
            limit = timeout_s() if timeout is None else timeout
            print(f"sam3d: waiting for the Conan cache {home} (held by {who}) ...", file=sys.stderr, flush=True)
            deadline = time.monotonic() + limit
            while not _try_lock(fd):
                if time.monotonic() >= deadline:
                    raise ConanLockTimeout(
                        f"the Conan cache {home} is still held by {holder(path)} after {limit:.0f} s: let that "
                        f"build finish (or end it), or wait longer with {TIMEOUT_ENV}=<seconds>"
                    )
                time.sleep(POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, (_HOLDER.format(pid=os.getpid(), clone=paths.root()) + "\n").encode(), 0)
        _held[key] = 1
        try:
            yield
        finally:
            del _held[key]
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the flock
