"""The CUDA toolkit of the CUDA variants: NVIDIA's wheels, pinned by ci/cuda-toolkit.lock.

The lock is in pip's --require-hashes format (one `name==version --hash=sha256:...` per wheel).
The wheels are installed with pip into the shared cache (paths.cache_dir(), never the system
or a Python environment), one folder per lock content (`cuda-<nvcc version>-<lock hash>`), so a
changed lock installs beside the old one and a build using that one is never disturbed. pip
checks every wheel's SHA-256 before installing anything: a mismatch stops the build with pip's
message, which names the wheel and shows the expected and the downloaded hash.

All the wheels unpack into nvidia/cu<major>/ (bin/, include/, lib/, nvvm/): that folder is the
toolkit root CMake's FindCUDAToolkit and GGML's recipe take (conf user.sam3d:cuda_toolkit). The
wheels ship only versioned libraries (libcudart.so.13); FindCUDAToolkit looks for the
unversioned names, so the install adds those links, and their libraries are in lib/ where
nvcc's own nvcc.profile links from lib64/ (CUDA's usual layout), so lib64 links to lib. They
ship no libcuda.so (the driver's):
the recipe builds GGML with GGML_CUDA_NO_VMM, which needs none.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..core import paths
from ..core.errors import Sam3dError
from . import conan_lock

LOCK = Path("ci") / "cuda-toolkit.lock"

# What each wheel must provide under the toolkit root (what GGML's CUDA build uses from it),
# and why: a lock without the wheel, or an install without the file, fails naming both.
PIECES: dict[str, tuple[str, tuple[str, ...]]] = {
    "nvidia-cuda-nvcc": (
        "nvcc and its tools",
        ("bin/nvcc", "bin/ptxas", "bin/fatbinary", "bin/nvlink", "bin/cudafe++"),
    ),
    "nvidia-nvvm": ("nvcc's front end cicc and libdevice", ("nvvm/bin/cicc", "nvvm/libdevice/libdevice.10.bc")),
    "nvidia-cuda-crt": ("nvcc's host headers", ("include/crt/host_config.h",)),
    "nvidia-cuda-cccl": ("CUB, Thrust and libcu++", ("include/cccl/cub/cub.cuh",)),
    "nvidia-cuda-runtime": (
        "the CUDA runtime",
        ("include/cuda_runtime.h", "lib/libcudart.so.{major}", "lib/libcudart_static.a", "lib/libcudadevrt.a"),
    ),
    "nvidia-cublas": ("cuBLAS", ("include/cublas_v2.h", "lib/libcublas.so.{major}", "lib/libcublasLt.so.{major}")),
}
# The unversioned names FindCUDAToolkit looks for -> the wheel's versioned file.
LINKS = ("libcudart.so", "libcublas.so", "libcublasLt.so")
# Versioned like the toolkit (major.minor = nvcc's); cuBLAS has its own minor versions and only
# shares the major (its soname).
SAME_MINOR = ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-cccl", "nvidia-cuda-runtime")
STAMP = ".sam3d-installed"

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+-]*)$")


class CudaToolkitError(Sam3dError):
    pass


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...]


@dataclass(frozen=True)
class Toolkit:
    """An installed toolkit: ``root`` is the toolkit root (bin/nvcc), ``ident`` its identity
    (folder name: nvcc's version and the lock's hash) as GGML's package_id records it."""

    root: Path
    version: str
    ident: str

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"


def lock_path() -> Path:
    return paths.root() / LOCK


def read_lock(path: Path) -> list[Pin]:
    """The pins of a lock in pip's --require-hashes format; CudaToolkitError naming the line for
    an entry without an exact version (==) or without a sha256 hash."""
    try:
        text = path.read_text()
    except OSError as e:
        raise CudaToolkitError(f"cannot read the CUDA toolkit lock {path}: {e.strerror}") from None
    pins = []
    for entry in re.sub(r"\\\n", " ", text).splitlines():
        entry = entry.split("#", 1)[0].strip()
        if not entry:
            continue
        spec, *opts = entry.split()
        m = _PIN.match(spec)
        if not m:
            raise CudaToolkitError(
                f"{path}: {spec!r} is not pinned to one version: write NAME==VERSION --hash=sha256:..."
            )
        hashes = tuple(o.removeprefix("--hash=sha256:") for o in opts if o.startswith("--hash=sha256:"))
        if not hashes:
            raise CudaToolkitError(
                f"{path}: {spec} has no --hash=sha256:...: add the wheel's hash "
                f"(`pip download --no-deps {spec}` then `pip hash` on the file)"
            )
        pins.append(Pin(m.group(1).lower().replace("_", "-"), m.group(2), hashes))
    return pins


def runtime_wheels(lock: Path | None = None) -> list[str]:
    """The lock's pins of the wheels a CUDA variant needs at run time ("nvidia-cuda-runtime==...",
    "nvidia-cublas==..."): what the GPU bundle names when the GPU machine lacks them."""
    return [
        f"{p.name}=={p.version}"
        for p in read_lock(lock or lock_path())
        if p.name in ("nvidia-cuda-runtime", "nvidia-cublas")
    ]


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def check_lock(pins: list[Pin], path: Path) -> Pin:
    """The nvcc pin, once every piece GGML's CUDA build needs is pinned and their versions agree
    (the toolkit's major.minor for nvcc, nvvm, crt, cccl and the runtime; the major for cuBLAS);
    CudaToolkitError naming the missing or mismatched wheel and the fix otherwise."""
    by_name = {p.name: p for p in pins}
    for name, (what, _) in PIECES.items():
        if name not in by_name:
            raise CudaToolkitError(
                f"{path} pins no {name} ({what}), which GGML's CUDA build needs: add "
                f"`{name}==VERSION --hash=sha256:...` matching nvidia-cuda-nvcc's version"
            )
    nvcc = by_name["nvidia-cuda-nvcc"]
    for name in SAME_MINOR:
        if _major_minor(by_name[name].version) != _major_minor(nvcc.version):
            raise CudaToolkitError(
                f"{path}: {name}=={by_name[name].version} does not match nvidia-cuda-nvcc=="
                f"{nvcc.version} (CUDA {_major_minor(nvcc.version)}): pin the {name} release of "
                f"CUDA {_major_minor(nvcc.version)}"
            )
    cublas = by_name["nvidia-cublas"]
    if cublas.version.split(".")[0] != nvcc.version.split(".")[0]:
        raise CudaToolkitError(
            f"{path}: nvidia-cublas=={cublas.version} is not for CUDA {nvcc.version.split('.')[0]} "
            f"(nvidia-cuda-nvcc=={nvcc.version}): pin an nvidia-cublas {nvcc.version.split('.')[0]}.x"
        )
    return nvcc


def install_dir(path: Path | None = None, cache: Path | None = None) -> tuple[Path, str]:
    """(the folder the lock installs into, nvcc's version): <cache>/cuda-<nvcc version>-<the
    first 12 hex digits of the lock's SHA-256>."""
    path = path or lock_path()
    nvcc = check_lock(read_lock(path), path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return (cache or paths.cache_dir()) / f"cuda-{nvcc.version}-{digest}", nvcc.version


def _root_of(folder: Path, version: str) -> Path:
    return folder / "nvidia" / f"cu{version.split('.')[0]}"


def verify(folder: Path, pins: list[Pin], version: str) -> Path:
    """The toolkit root of an installed folder once every pinned wheel is installed at its
    pinned version and every piece's files are there; CudaToolkitError naming the first
    missing or mismatched piece and the fix otherwise."""
    fix = f"remove {folder} and build again to reinstall it from {LOCK}"
    installed = {}
    for d in folder.glob("*.dist-info"):
        m = re.match(r"^(.+)-([^-]+)\.dist-info$", d.name)
        if m:
            installed[m.group(1).lower().replace("_", "-")] = m.group(2)
    for p in pins:
        if p.name not in installed:
            raise CudaToolkitError(f"the CUDA toolkit in {folder} lacks {p.name} {p.version}: {fix}")
        if installed[p.name] != p.version:
            raise CudaToolkitError(
                f"the CUDA toolkit in {folder} has {p.name} {installed[p.name]}, {LOCK} pins {p.version}: {fix}"
            )
    root = _root_of(folder, version)
    major = version.split(".")[0]
    for name, (what, files) in PIECES.items():
        for f in files:
            if not (root / f.format(major=major)).exists():
                raise CudaToolkitError(
                    f"the CUDA toolkit in {folder} lacks {f.format(major=major)} ({what}, from the wheel {name}): {fix}"
                )
    # The links the install adds (FindCUDAToolkit's unversioned names, nvcc.profile's lib64).
    for rel in ("lib64", *(f"lib/{name}" for name in LINKS)):
        if not (root / rel).exists():
            raise CudaToolkitError(f"the CUDA toolkit in {folder} lacks {rel} (a link its install adds): {fix}")
    return root


def nvcc_release(nvcc: Path) -> str:
    """nvcc's "release X.Y" from --version; CudaToolkitError when it does not run."""
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise CudaToolkitError(f"{nvcc} does not run ({e}): remove {nvcc.parents[3]} and build again") from None
    m = re.search(r"release (\d+\.\d+)", out.stdout)
    if out.returncode != 0 or not m:
        detail = (out.stderr or out.stdout).strip() or "no output"
        raise CudaToolkitError(
            f"{nvcc} --version failed (exit {out.returncode}: {detail}): remove {nvcc.parents[3]} and build again"
        )
    return m.group(1)


def pip_install(lock: Path, target: Path) -> None:
    """The wheels of ``lock`` (pip's --require-hashes format) installed into ``target``, nowhere else."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "-q",
        "--no-deps",
        "--require-hashes",
        "--only-binary=:all:",
        "--no-compile",
        "--target",
        str(target),
        "-r",
        str(lock),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        lines = [
            ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip() and not ln.startswith("WARNING: Location")
        ]
        detail = "\n".join("    " + ln for ln in lines[-20:])
        raise CudaToolkitError(
            f"pip could not install the wheels of {lock} (exit {r.returncode}); "
            f"a hash mismatch means the wheel is not the one the lock pins "
            f"(fix the lock only after checking the new wheel):\n{detail}"
        )


def _add_links(root: Path, major: str) -> None:
    """lib64 -> lib (nvcc.profile's -L$(TOP)/lib64) and the unversioned library names."""
    if not (root / "lib64").is_symlink():
        (root / "lib64").symlink_to("lib")
    for name in LINKS:
        link = root / "lib" / name
        if not link.is_symlink():
            link.unlink(missing_ok=True)
            link.symlink_to(f"{name}.{major}")


def ensure_toolkit(lock: Path | None = None, cache: Path | None = None) -> Toolkit:
    """The toolkit of the lock, installed into the cache first when missing (holding the shared
    cache's lock; pip checks every hash), with the unversioned library links; verified on
    every call (pieces, versions, nvcc's release)."""
    lock = lock or lock_path()
    folder, version = install_dir(lock, cache)
    pins = read_lock(lock)
    if not (folder / STAMP).is_file():
        with conan_lock.held(paths.conan_home()):
            if not (folder / STAMP).is_file():
                _install(lock, folder, pins, version)
    root = verify(folder, pins, version)
    release = nvcc_release(root / "bin" / "nvcc")
    if release != _major_minor(version):
        raise CudaToolkitError(
            f"{root / 'bin' / 'nvcc'} reports release {release}, {LOCK} pins nvidia-cuda-nvcc "
            f"{version}: remove {folder} and build again"
        )
    return Toolkit(root=root, version=version, ident=folder.name)


def _install(lock: Path, folder: Path, pins: list[Pin], version: str) -> None:
    print(f"sam3d: installing the CUDA toolkit {version} ({len(pins)} wheels of {LOCK}) into {folder} ...", flush=True)
    t0 = time.monotonic()
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    try:
        pip_install(lock, tmp)
        _add_links(_root_of(tmp, version), version.split(".")[0])
        verify(tmp, pins, version)
        (tmp / STAMP).write_text(hashlib.sha256(lock.read_bytes()).hexdigest() + "\n")
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())
    print(
        f"sam3d: installed the CUDA toolkit {version} ({size / 2**20:.0f} MiB) in {time.monotonic() - t0:.0f} s",
        flush=True,
    )
