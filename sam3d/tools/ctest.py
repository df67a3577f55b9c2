"""Running a variant's CTest suites with the sanitizer and Vulkan environment it needs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ..core import host, paths
from ..core.errors import NotBuilt, Sam3dError
from ..core.variants import Variant
from . import system

SUPPRESSIONS = Path("native") / "sanitizers"


def test_env(v: Variant, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment tests of variant `v` run in: `base` (default os.environ) with the
    variant's sanitizer options (core/host.py: any report is fatal). Without an NVIDIA GPU,
    GGML_VK_VISIBLE_DEVICES=0 lets GGML use Mesa's lavapipe (GGML skips CPU-type Vulkan devices
    unless the variable is set). SAM3D_BATCHED_TRANSFERS is removed: tests choose.
    """
    env = dict(os.environ if base is None else base)
    env.pop("SAM3D_BATCHED_TRANSFERS", None)
    env.update(host.sanitizer_env(v.sanitizer, paths.root() / SUPPRESSIONS))
    if v.vulkan and not system.has_nvidia_gpu():
        env.setdefault("GGML_VK_VISIBLE_DEVICES", "0")
    return env


def build_folder(v: Variant) -> Path:
    return paths.build_dir(v.name, v.build_type)


def labels(v: Variant) -> tuple[list[str], str]:
    """(the CTest labels of variant ``v``, where they come from): `ctest --print-labels` in its
    build folder when it has a CTest suite, else the labels native/'s CMake lists give a
    variant like it (normal and bench in every variant, device with Vulkan)."""
    folder = build_folder(v)
    if (folder / "CTestTestfile.cmake").is_file():
        r = subprocess.run([paths.tool("ctest"), "--test-dir", str(folder), "--print-labels"],
                           capture_output=True, text=True, check=False)
        if r.returncode == 0 and "All Labels:" in r.stdout:
            return sorted(line.strip() for line in r.stdout.split("All Labels:", 1)[1].splitlines()
                          if line.strip()), f"ctest --print-labels in {folder}"
    return sorted(("normal", "bench") + (("device",) if v.vulkan else ())), "native/'s CMake lists (not built yet)"


def check_label(vs: list[Variant], label: str) -> None:
    """Refuses, before any build, a label one of the variants cannot have, listing its labels."""
    for v in vs:
        have, source = labels(v)
        if label not in have:
            raise Sam3dError(f"{v.name} has no CTest label {label!r}; its labels: {', '.join(have)} "
                             f"(from {source})")


def run(v: Variant, label: str, log: Path | None = None, extra: list[str] | None = None) -> int:
    """`ctest -L <label>` in the variant's build folder; fails when no test matches."""
    folder = build_folder(v)
    if not (folder / "CTestTestfile.cmake").is_file():
        raise NotBuilt(f"{folder} has no CTest suite: build the variant first (nox -s build -- {v.name})")
    cmd = [paths.tool("ctest"), "--test-dir", str(folder), "-L", label, "--no-tests=error", "--output-on-failure",
           "--timeout", "300", *(extra or [])]
    env = test_env(v)
    if log is None:
        return subprocess.run(cmd, env=env, check=False).returncode
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        return subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
