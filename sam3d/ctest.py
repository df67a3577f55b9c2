"""Running a variant's CTest suites with the sanitizer and Vulkan environment it needs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from . import paths, system
from .variants import Variant

SUPPRESSIONS = Path("native") / "sanitizers"


def test_env(v: Variant, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment tests of variant `v` run in.

    Any sanitizer report is fatal: ASan/LSan halt on the first error; UBSan is compiled
    recoverable (so suppressions work) and made fatal with halt_on_error=1. Without an NVIDIA
    GPU, GGML_VK_VISIBLE_DEVICES=0 lets GGML use Mesa's lavapipe (GGML skips CPU-type Vulkan
    devices unless the variable is set). SAM3D_BATCHED_TRANSFERS is removed: tests choose.
    """
    env = dict(os.environ if base is None else base)
    env.pop("SAM3D_BATCHED_TRANSFERS", None)
    supp = paths.root() / SUPPRESSIONS
    if v.asan:
        env["ASAN_OPTIONS"] = "halt_on_error=1:abort_on_error=0:detect_leaks=1:strict_string_checks=1:" \
                              "detect_stack_use_after_return=1:check_initialization_order=1"
        env["LSAN_OPTIONS"] = f"suppressions={supp / 'lsan.supp'}:print_suppressions=0"
    if v.ubsan:
        env["UBSAN_OPTIONS"] = f"halt_on_error=1:print_stacktrace=1:suppressions={supp / 'ubsan.supp'}"
    if v.vulkan and not system.has_nvidia_gpu():
        env.setdefault("GGML_VK_VISIBLE_DEVICES", "0")
    return env


def build_folder(v: Variant) -> Path:
    return paths.build_dir(v.name, v.build_type)


def run(v: Variant, label: str, log: Path | None = None, extra: list[str] | None = None) -> int:
    """`ctest -L <label>` in the variant's build folder; fails when no test matches."""
    folder = build_folder(v)
    if not (folder / "CTestTestfile.cmake").is_file():
        raise FileNotFoundError(f"{folder} has no CTest suite: build the variant first (nox -s build -- {v.name})")
    cmd = [paths.tool("ctest"), "--test-dir", str(folder), "-L", label, "--no-tests=error", "--output-on-failure",
           "--timeout", "300", *(extra or [])]
    env = test_env(v)
    if log is None:
        return subprocess.run(cmd, env=env).returncode
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        return subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
