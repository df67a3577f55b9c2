"""The host a run happens on: its facts, the sanitizer options its binaries run with, its logs.

Standard library only (sam3d/device/): the GPU bundle's run.pyz carries it, so the GPU machine,
which has nothing but python3, records the same machine facts and runs the binaries with the
same sanitizer options as the build machine's tests.
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
        gpu = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu,
        "os": os_name,
        "glibc": os.confstr("CS_GNU_LIBC_VERSION"),
        "gpu": gpu,
    }


# Environment variables that change how GGML's backends transfer, or which devices they show,
# and so what a test or benchmark measures: every runner (the tests, the benchmark driver, the
# GPU bundle's run.pyz) removes them when inherited, and a run that wants one sets it itself
# (the benchmark's "on" session: SAM3D_BATCHED_TRANSFERS=1; a CTest case: its own ENVIRONMENT).
# The core's own default is unchanged by this: batching is off unless the session option or
# SAM3D_BATCHED_TRANSFERS says otherwise (docs/benchmark.md, "Environment flag policy").
# GGML 0.20.2's variables of this kind (its getenv calls in ggml-vulkan.cpp and ggml-cuda/):
#   GGML_VK_PERF_LOGGER        Vulkan: per-op timestamps, a sync per op (the perf-logger tests set it)
#   GGML_VK_DISABLE_ASYNC      Vulkan: no async transfers (the core takes the synchronous path)
#   GGML_VK_ASYNC_USE_TRANSFER_QUEUE  Vulkan: async copies on a dedicated transfer queue (a CTest case sets it)
#   GGML_VK_SERIALIZE_SUBMISSIONS     Vulkan: every submission waits for the one before
#   GGML_VK_MAX_NODES_PER_SUBMIT      Vulkan: how many graph nodes one submission holds
#   GGML_VK_PREFER_HOST_MEMORY, GGML_VK_ALLOW_SYSMEM_FALLBACK, GGML_VK_DISABLE_HOST_VISIBLE_VIDMEM
#                              Vulkan: where device buffers and host-visible memory come from
#   GGML_VK_SYNC_LOGGER        Vulkan: logs every synchronization
#   GGML_CUDA_NO_PINNED        CUDA: the host buffer type hands out plain CPU memory (no pinned staging)
#   GGML_CUDA_REGISTER_HOST    CUDA: host memory registered for the device (a zero-copy path of GGML's own)
#   GGML_CUDA_ENABLE_UNIFIED_MEMORY  CUDA: device buffers in managed memory (transfers become page faults)
#   GGML_CUDA_DEVICES          CUDA: virtual devices beyond the physical ones
#   GGML_CUDA_P2P              CUDA: peer access between devices
#   GGML_CUDA_DISABLE_GRAPHS, GGML_CUDA_GRAPH_OPT, GGML_CUDA_DISABLE_FUSION, GGML_CUDA_PDL
#                              CUDA: how a graph is launched (CUDA graphs, fusion, programmatic launch)
#   CUDA_LAUNCH_BLOCKING       CUDA runtime: every launch and async copy waits (nothing overlaps)
RUNNER_REMOVED_ENV = (
    "SAM3D_BATCHED_TRANSFERS",
    "GGML_VK_PERF_LOGGER",
    "GGML_VK_DISABLE_ASYNC",
    "GGML_VK_ASYNC_USE_TRANSFER_QUEUE",
    "GGML_VK_SERIALIZE_SUBMISSIONS",
    "GGML_VK_MAX_NODES_PER_SUBMIT",
    "GGML_VK_PREFER_HOST_MEMORY",
    "GGML_VK_ALLOW_SYSMEM_FALLBACK",
    "GGML_VK_DISABLE_HOST_VISIBLE_VIDMEM",
    "GGML_VK_SYNC_LOGGER",
    "GGML_CUDA_NO_PINNED",
    "GGML_CUDA_REGISTER_HOST",
    "GGML_CUDA_ENABLE_UNIFIED_MEMORY",
    "GGML_CUDA_DEVICES",
    "GGML_CUDA_P2P",
    "GGML_CUDA_DISABLE_GRAPHS",
    "GGML_CUDA_GRAPH_OPT",
    "GGML_CUDA_DISABLE_FUSION",
    "GGML_CUDA_PDL",
    "CUDA_LAUNCH_BLOCKING",
)


def runner_env(base: dict[str, str]) -> dict[str, str]:
    """A copy of ``base`` without the inherited flags of RUNNER_REMOVED_ENV."""
    return {k: v for k, v in base.items() if k not in RUNNER_REMOVED_ENV}


def sanitizer_env(runtime: dict, sanitizer: str | None, suppressions: Path, cuda: bool = False) -> dict[str, str]:
    """The sanitizer runtime options for binaries built with Conan's ``compiler.sanitizer``
    value ``sanitizer`` (None: none), from ``runtime``, the variant registry's table
    (core/variants.py sanitizer_runtime(); in the GPU bundle its copy, run.RUNTIME_FILE): any
    report is fatal. ``suppressions`` is the folder holding the suppression files. With ``cuda``
    (a variant with GGML's CUDA backend), each sanitizer's CUDA options are added."""
    if not sanitizer:
        return {}
    table = runtime[sanitizer]
    env = {var: opts.replace("{dir}", str(suppressions)) for var, opts in table["env"]}
    for var, opts in table["cuda"] if cuda else ():
        env[var] = f"{env[var]}:{opts}" if var in env else opts
    return env


def with_preload(env: dict[str, str], libs: list[Path]) -> dict[str, str]:
    """``env`` with ``libs`` preloaded ahead of any LD_PRELOAD it has (the registry's
    vulkan_preload: core/variants.py). Each library must exist, and its path must hold no space or
    colon: ld.so splits LD_PRELOAD at both and would drop the library with only a warning."""
    for lib in libs:
        if not lib.is_file():
            raise FileNotFoundError(
                f"{lib} is missing: the variant's runs preload it (build the variant, or pack the bundle, again)"
            )
        if any(c.isspace() or c == ":" for c in str(lib)):
            raise ValueError(
                f"{lib}: a path with a space or colon cannot be preloaded (LD_PRELOAD splits at "
                "both); move the build or the unpacked bundle to a path without them"
            )
    if libs:
        env["LD_PRELOAD"] = ":".join([str(p) for p in libs] + ([env["LD_PRELOAD"]] if env.get("LD_PRELOAD") else []))
    return env


def log_tail(path: Path, n: int) -> list[str]:
    """The last ``n`` non-blank lines of a log ([] when it cannot be read)."""
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []
    return lines[-n:]
