"""The Conan home's lock (sam3d/tools/conan_lock.py): one holder at a time, a visible wait, a
timeout naming the holder, a killed holder leaving the cache usable, and two builds from one
empty Conan home at once (a small recipe, tests/data/tinylib, stands in for GGML)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sam3d.tools import conan_lock

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "tinylib"

HOLD = """
import sys, time
from pathlib import Path
from sam3d.tools import conan_lock
with conan_lock.held(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""

# One build of the small recipe as `python -m sam3d build` does GGML: the home and its
# profiles, the exported recipe, then a consumer resolving it with --build=missing.
BUILD = """
import sys
from pathlib import Path
from sam3d.core import variants
from sam3d.tools import conan
v = variants.get("cpu-asan")
conan.ensure_home([v])
log = Path(sys.argv[2])
conan.run(["export", sys.argv[1]], log=log)
conan.run_with_remote(["install", "--requires=tinylib/0.1", *conan.profile_args(v), "--build=missing"], log=log)
"""


def _env(home: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("SAM3D_CONAN_REMOTE")}
    e["SAM3D_CONAN_HOME"] = str(home)
    return e


def _wait_for(path: Path, text: str, proc: subprocess.Popen, limit: float = 60) -> str:
    deadline = time.monotonic() + limit
    while True:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        assert proc.poll() is None, f"exited {proc.returncode} before printing {text!r}: {content}"
        assert time.monotonic() < deadline, f"{text!r} not printed: {content}"
        time.sleep(0.05)


def test_a_held_lock_times_out_naming_the_holder_and_a_killed_holder_frees_it(tmp_path):
    home = tmp_path / "conan2"
    out = tmp_path / "holder.out"
    with open(out, "w") as f:
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(home)], cwd=ROOT, stdout=f, env=_env(home))
    try:
        _wait_for(out, "held", holder)
        with pytest.raises(conan_lock.ConanLockTimeout) as e:
            with conan_lock.held(home, timeout=0.5):
                pass
        assert f"held by PID {holder.pid}, clone {ROOT}" in str(e.value)
        assert conan_lock.TIMEOUT_ENV in str(e.value)
        holder.send_signal(signal.SIGKILL)  # no cleanup runs: the kernel drops its flock
        holder.wait()
    finally:
        holder.kill()
        holder.wait()
    with conan_lock.held(home, timeout=5):
        assert (home / conan_lock.LOCK_FILE).read_text() == f"PID {os.getpid()}, clone {ROOT}\n"


def test_the_lock_is_reentrant_within_a_thread_and_exclusive_between_threads(tmp_path):
    other: list[BaseException] = []

    def take():
        try:
            with conan_lock.held(tmp_path, timeout=0.3):
                pass
        except conan_lock.ConanLockTimeout as e:
            other.append(e)

    with conan_lock.held(tmp_path, timeout=1):
        with conan_lock.held(tmp_path, timeout=1):
            inner = (tmp_path / conan_lock.LOCK_FILE).read_text()
        t = threading.Thread(target=take)
        t.start()
        t.join()
        assert len(other) == 1 and f"held by PID {os.getpid()}" in str(other[0])
        assert conan_lock._held == {(threading.get_ident(), tmp_path / conan_lock.LOCK_FILE): 1}
    assert inner.startswith(f"PID {os.getpid()},")
    assert not conan_lock._held


def test_two_builds_into_one_empty_home_both_succeed_and_build_once(tmp_path):
    """Both builds start while this test holds the lock, so both must wait (and say so); once it
    is released they run one after the other: the first builds tinylib, the second finds it."""
    home = tmp_path / "conan2"
    procs = []
    with conan_lock.held(home, timeout=1):
        for i in (1, 2):
            err = tmp_path / f"build{i}.err"
            with open(err, "w") as f:
                procs.append(
                    (
                        subprocess.Popen(
                            [sys.executable, "-c", BUILD, str(TINY), str(tmp_path / f"build{i}.log")],
                            cwd=ROOT,
                            stdout=f,
                            stderr=subprocess.STDOUT,
                            env=_env(home),
                        ),
                        err,
                    )
                )
        for p, err in procs:
            waiting = _wait_for(err, "waiting for the Conan cache", p)
            assert f"(held by PID {os.getpid()}, clone {ROOT})" in waiting
    for p, err in procs:
        assert p.wait(timeout=120) == 0, err.read_text()
    logs = [(tmp_path / f"build{i}.log").read_text() for i in (1, 2)]
    assert sum(log.count("tinylib: compiling") for log in logs) == 1, logs
    assert all("Install finished successfully" in log for log in logs)
    listed = subprocess.run(
        [str(Path(sys.executable).with_name("conan")), "list", "tinylib/0.1:*"],
        env={**_env(home), "CONAN_HOME": str(home)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout.count("compiler.sanitizer: AddressUndefinedBehavior") == 1, listed.stdout
