"""The host a run happens on: its facts, the sanitizer options its binaries run with, its logs.

Standard library only: the GPU bundle packs this file next to its run.py (sam3d/running/
bundle_run.py), so the GPU machine, which has nothing but python3, records the same machine
facts and runs the binaries with the same sanitizer options as the build machine's tests.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
from pathlib import Path


def machine() -> dict[str, str]:
    """Facts recorded in every result: hostname, CPU model, OS, glibc, and the GPU (name, driver,
    PCIe link) when nvidia-smi answers (else "")."""
    cpu = platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    os_name = platform.platform()
    try:
        m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', Path("/etc/os-release").read_text(), re.M)
        if m:
            os_name = f"{m.group(1)} (Linux {platform.release()})"
    except OSError:
        pass
    gpu = ""
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,pcie.link.gen.current,"
                              "pcie.link.width.current", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return {"hostname": socket.gethostname(), "cpu": cpu, "os": os_name,
            "glibc": os.confstr("CS_GNU_LIBC_VERSION"), "gpu": gpu}


def sanitizer_env(sanitizer: str | None, suppressions: Path) -> dict[str, str]:
    """The sanitizer runtime options for binaries built with Conan's ``compiler.sanitizer``
    value ``sanitizer`` (None: none). Any report is fatal: ASan and LSan halt on the first
    error; UBSan is compiled recoverable (so suppressions work) and made fatal with
    halt_on_error=1; TSan exits on its first report (halt_on_error=1) and shows where both
    mutexes of a lock-order inversion were taken. ``suppressions`` is the folder holding
    lsan.supp, ubsan.supp and tsan.supp."""
    env = {}
    if sanitizer and "Address" in sanitizer:
        env["ASAN_OPTIONS"] = ("halt_on_error=1:abort_on_error=0:detect_leaks=1:strict_string_checks=1:"
                               "detect_stack_use_after_return=1:check_initialization_order=1")
        env["LSAN_OPTIONS"] = f"suppressions={suppressions / 'lsan.supp'}:print_suppressions=0"
    if sanitizer and "UndefinedBehavior" in sanitizer:
        env["UBSAN_OPTIONS"] = f"halt_on_error=1:print_stacktrace=1:suppressions={suppressions / 'ubsan.supp'}"
    if sanitizer == "Thread":
        env["TSAN_OPTIONS"] = (f"halt_on_error=1:second_deadlock_stack=1:"
                               f"suppressions={suppressions / 'tsan.supp'}")
    return env


def log_tail(path: Path, n: int) -> list[str]:
    """The last ``n`` non-blank lines of a log ([] when it cannot be read)."""
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []
    return lines[-n:]
