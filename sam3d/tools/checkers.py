"""Where the GPU checkers come from: the Khronos validation layer and NVIDIA's compute-sanitizer
(sam3d/device/gpu_checks.py runs them; docs/gpu-checks.md).

- The validation layer is Debian 13's vulkan-validationlayers, the release of the Vulkan headers
  GGML is built with (system.VULKAN_DEV_VERSION), pinned by SHA-256 and unpacked into the shared
  cache. It needs glibc 2.38 and libstdc++ 14 (its GLIBC_2.38 and GLIBCXX_3.4.32 symbols): Debian
  13 and the GPU machine's Ubuntu 24.04 have them; on an older host (Debian 12: 2.36 and 12) the
  programs it checks run under Debian 13's dynamic loader with Debian 13's libc6, libstdc++6 and
  libgcc-s1 (LOADER_RUNTIME, pinned the same way) ahead of the system's libraries.
- compute-sanitizer is the nvidia-cuda-sanitizer-api wheel of the toolkit's CUDA release,
  pinned in ci/compute-sanitizer.lock and installed with pip into the shared cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from ..core import paths
from ..core.errors import Sam3dError
from . import conan_lock, cuda
from .system import DebianPackage, debian_package

VALIDATION_LAYERS = DebianPackage(
    "vulkan-validationlayers", "1.4.309.0-1", "ff7e18ef011ff448ac799daf16134a676ccf9c5987e1a9f4b779611ed5fc3b0d"
)
LAYER_NEEDS = {"glibc": (2, 38), "libstdc++": b"GLIBCXX_3.4.32"}
LOADER_RUNTIME = (
    DebianPackage("libc6", "2.41-12+deb13u5", "b59b0625cd1a791375d40dab23a4d5d3d0641e3d0a773501becdc3725b7f99cf"),
    DebianPackage("libstdc++6", "14.2.0-19", "ab1fa05837aa7a92aae748fd07a18a35f7d18bb4a71c4724fe2bbf0e32089de0"),
    DebianPackage("libgcc-s1", "14.2.0-19", "3c71917b490d1a17aed43196a2787a256ecf060526cdb20216a74bedc061b150"),
)
MULTIARCH = Path("usr") / "lib" / "x86_64-linux-gnu"
SANITIZER_LOCK = Path("ci") / "compute-sanitizer.lock"
SANITIZER_WHEEL = "nvidia-cuda-sanitizer-api"


class CheckerSetupError(Sam3dError):
    pass


def validation_layer() -> tuple[Path, Path]:
    """(the layer's library, its manifest), unpacked from VALIDATION_LAYERS."""
    root = debian_package(VALIDATION_LAYERS)
    lib = root / MULTIARCH / "libVkLayer_khronos_validation.so"
    manifest = root / "usr" / "share" / "vulkan" / "explicit_layer.d" / "VkLayer_khronos_validation.json"
    for f in (lib, manifest):
        if not f.is_file():
            raise CheckerSetupError(f"{VALIDATION_LAYERS.name} {VALIDATION_LAYERS.version} unpacked without {f}")
    return lib, manifest


def host_runs_layer(libstdcxx: Path = Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6")) -> bool:
    """Whether this host's glibc and libstdc++ are new enough for the layer (LAYER_NEEDS)."""
    glibc = tuple(int(x) for x in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2])
    try:
        has_cxx = LAYER_NEEDS["libstdc++"] in libstdcxx.read_bytes()
    except OSError:
        has_cxx = False
    return glibc >= LAYER_NEEDS["glibc"] and has_cxx


def loader_prefix() -> list[str]:
    """What a checked program's command starts with on this host: nothing where the layer runs
    on the system's libraries, else Debian 13's dynamic loader with LOADER_RUNTIME's folder
    searched first (the system's folders after it, as its default)."""
    if host_runs_layer():
        return []
    dirs = [debian_package(p) / MULTIARCH for p in LOADER_RUNTIME]
    loader = dirs[0] / "ld-linux-x86-64.so.2"
    if not loader.is_file():
        raise CheckerSetupError(f"{LOADER_RUNTIME[0].name} {LOADER_RUNTIME[0].version} unpacked without {loader}")
    return [str(loader), "--library-path", ":".join(str(d) for d in dirs)]


def sanitizer_pin(lock: Path | None = None) -> cuda.Pin:
    """SANITIZER_LOCK's pin of the wheel, refused unless it is of the toolkit's CUDA release
    (major.minor of ci/cuda-toolkit.lock's nvcc)."""
    lock = lock or paths.root() / SANITIZER_LOCK
    pin = next((p for p in cuda.read_lock(lock) if p.name == SANITIZER_WHEEL), None)
    if pin is None:
        raise CheckerSetupError(f"{lock} pins no {SANITIZER_WHEEL}")
    toolkit = cuda.check_lock(cuda.read_lock(cuda.lock_path()), cuda.lock_path())
    if pin.version.split(".")[:2] != toolkit.version.split(".")[:2]:
        raise CheckerSetupError(
            f"{lock} pins {SANITIZER_WHEEL} {pin.version}, the toolkit is CUDA "
            f"{'.'.join(toolkit.version.split('.')[:2])} (nvcc {toolkit.version}): pin the "
            "sanitizer of the toolkit's release"
        )
    return pin


def sanitizer_files(cache: Path | None = None) -> Path:
    """The folder of the wheel's compute-sanitizer (nvidia/cu<major>/bin, with lib/ beside it),
    installed from SANITIZER_LOCK first when missing."""
    lock = paths.root() / SANITIZER_LOCK
    pin = sanitizer_pin(lock)
    folder = (
        cache or paths.cache_dir()
    ) / f"compute-sanitizer-{pin.version}-{hashlib.sha256(lock.read_bytes()).hexdigest()[:12]}"
    stamp = folder / cuda.STAMP
    if not stamp.is_file():
        with conan_lock.held(paths.conan_home()):
            if not stamp.is_file():
                print(f"sam3d: installing {SANITIZER_WHEEL} {pin.version} into {folder}", flush=True)
                part = folder.with_name(folder.name + ".partial")  # renamed once complete
                shutil.rmtree(part, ignore_errors=True)
                cuda.pip_install(lock, part)
                (part / cuda.STAMP).write_text(pin.version + "\n")
                shutil.rmtree(folder, ignore_errors=True)
                part.rename(folder)
    root = folder / "nvidia" / f"cu{pin.version.split('.')[0]}"
    if not (root / "bin" / "compute-sanitizer").is_file():
        raise CheckerSetupError(
            f"{folder} has no compute-sanitizer under {root / 'bin'}: remove {folder} and run again"
        )
    return root
