"""System prerequisites: Debian/Ubuntu packages, and Vulkan headers new enough for GGML.

Packages are checked with dpkg-query. Missing ones are installed with apt-get when running as
root on Debian/Ubuntu; otherwise SystemPrerequisiteError names the exact packages to install.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..core import paths
from ..core.errors import Sam3dError
from ..core.variants import Variant

# What every variant needs: the compiler (with libasan/libubsan), GoogleTest, and for the
# benchmark driver (native/bench) a JSON parser and SHA-256 from OpenSSL's libcrypto.
BASE_PACKAGES = ("g++", "libgtest-dev", "nlohmann-json3-dev", "libssl-dev")
# GGML's Vulkan backend: shader compiler, loader + headers, SPIR-V headers (find_package
# SPIRV-Headers CONFIG in ggml-vulkan's CMakeLists.txt), and Mesa's lavapipe for machines
# without a GPU; libegl1, libglvnd0 and libglx0 go into the GPU bundle (sam3d/running/bundle.py, GLVND_LIBS).
VULKAN_PACKAGES = ("glslc", "libvulkan-dev", "spirv-headers", "mesa-vulkan-drivers", "libegl1", "libglvnd0", "libglx0")

# GGML 0.20.2's Vulkan backend uses VK_EXT_layer_settings (vk::LayerSettingEXT), first in
# Vulkan-Headers 1.3.261; Debian 12 ships 1.3.239. Debian 13's libvulkan-dev is used instead,
# unpacked into the shared cache (the system is not changed).
VULKAN_HEADERS_MIN = (1, 3, 261)
VULKAN_DEV_SUITE = "trixie"
VULKAN_DEV_VERSION = "1.4.309.0-1"
VULKAN_DEV_SHA256 = "8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a"


class SystemPrerequisiteError(Sam3dError):
    pass


class HashMismatch(Sam3dError):
    pass


# Clang variants: the distribution's clang; its UBSan/ASan runtimes are in
# libclang-rt-<major>-dev and its llvm-symbolizer in llvm-<major> (both only recommended by
# clang on Debian), added once clang is there. Without the symbolizer compiler-rt's reports name
# no function ("WARNING: invalid path to external symbolizer!", Debian 13).
CLANG_PACKAGES = ("clang",)


def clang_major() -> str | None:
    """The major version of the installed `clang`, or None."""
    try:
        r = subprocess.run(["clang", "-dumpversion"], capture_output=True, text=True)
    except OSError:
        return None
    return r.stdout.strip().split(".")[0] if r.returncode == 0 else None


def required_packages(variants: list[Variant]) -> list[str]:
    pkgs = list(BASE_PACKAGES)
    if any(v.vulkan for v in variants):
        pkgs += VULKAN_PACKAGES
    if any(v.compiler == "clang" for v in variants):
        pkgs += CLANG_PACKAGES
        major = clang_major()
        if major:
            pkgs += [f"libclang-rt-{major}-dev", f"llvm-{major}"]
    return pkgs


def clang_symbolizer() -> Path | None:
    """The llvm-symbolizer of the installed clang (Debian's llvm-<major>), or None."""
    major = clang_major()
    path = Path(f"/usr/lib/llvm-{major}/bin/llvm-symbolizer") if major else None
    return path if path is not None and path.is_file() else None


def missing_packages(packages: list[str]) -> list[str]:
    """Packages dpkg does not report as installed."""
    if shutil.which("dpkg-query") is None:
        raise SystemPrerequisiteError(
            "dpkg-query not found: this project supports Debian and Ubuntu; install the "
            f"equivalents of: {' '.join(packages)}"
        )
    missing = []
    for p in packages:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True)
        if r.returncode != 0 or "install ok installed" not in r.stdout:
            missing.append(p)
    return missing


def ensure_packages(variants: list[Variant], install: bool | None = None) -> None:
    """Install (as root, with apt-get) or name the missing system packages."""
    _ensure(required_packages(variants), install)
    # clang's runtime package is named after its version: known only once clang is installed.
    _ensure(required_packages(variants), install)


def _ensure(packages: list[str], install: bool | None) -> None:
    missing = missing_packages(packages)
    if not missing:
        return
    if install is None:
        install = os.geteuid() == 0 and shutil.which("apt-get") is not None
    if not install:
        raise SystemPrerequisiteError(
            f"missing system packages: {' '.join(missing)}; install them with: "
            f"sudo apt-get install -y {' '.join(missing)}"
        )
    print(f"sam3d: installing system packages with apt-get: {' '.join(missing)} ...", flush=True)
    t0 = time.monotonic()
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    output = []
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        output += (r.stdout + r.stderr).splitlines()
        if r.returncode != 0:
            tail = "\n".join("    " + line for line in [ln for ln in output if ln.strip()][-20:])
            print(f"sam3d: `{' '.join(cmd[:2])}` failed with exit code {r.returncode}:\n{tail}", flush=True)
            raise SystemPrerequisiteError(
                f"could not install the system packages {' '.join(missing)} "
                f"(`{' '.join(cmd)}` exit {r.returncode}; its output is above)"
            )
    print(f"sam3d: installed {len(missing)} system packages in {time.monotonic() - t0:.0f} s", flush=True)


def vulkan_header_version(include_dir: Path) -> tuple[int, int, int] | None:
    """VK_HEADER_VERSION_COMPLETE of <include_dir>/vulkan/vulkan_core.h, or None."""
    core = include_dir / "vulkan" / "vulkan_core.h"
    if not core.is_file():
        return None
    text = core.read_text(errors="replace")
    m = re.search(r"#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION\(0, (\d+), (\d+), VK_HEADER_VERSION\)", text)
    p = re.search(r"#define VK_HEADER_VERSION (\d+)", text)
    if not (m and p):
        return None
    return int(m.group(1)), int(m.group(2)), int(p.group(1))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_sha256(path: Path, expected: str) -> None:
    actual = sha256_file(path)
    if actual != expected:
        raise HashMismatch(f"{path.name}: sha256 mismatch: expected {expected}, got {actual}")


def debian_archive_uri() -> str:
    """The Debian archive address this machine's own apt sources use (read, never hard-coded)."""
    candidates = [
        Path("/etc/apt/sources.list.d/debian.sources"),
        Path("/etc/apt/sources.list"),
        *sorted(Path("/etc/apt/sources.list.d").glob("*")),
    ]
    for f in candidates:
        if not f.is_file():
            continue
        text = f.read_text(errors="replace")
        for m in re.finditer(r"^URIs:\s*(\S+)", text, re.M):
            if m.group(1).rstrip("/").endswith("/debian"):
                return m.group(1)
        for m in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+", text, re.M):
            if m.group(1).rstrip("/").endswith("/debian"):
                return m.group(1)
    raise SystemPrerequisiteError(
        "no Debian archive found in /etc/apt/sources.list*: cannot fetch libvulkan-dev "
        f"{VULKAN_DEV_VERSION}; install Vulkan headers >= {'.'.join(map(str, VULKAN_HEADERS_MIN))} "
        "and set SAM3D_VULKAN_INCLUDE_DIR to their include folder"
    )


@dataclass(frozen=True)
class DebianPackage:
    """A Debian package pinned by version and SHA-256, fetched from ``suite`` of the Debian
    archive this machine's apt sources name, whatever the machine's own release."""

    name: str
    version: str
    sha256: str
    suite: str = "trixie"


LIBVULKAN_DEV = DebianPackage("libvulkan-dev", VULKAN_DEV_VERSION, VULKAN_DEV_SHA256, VULKAN_DEV_SUITE)


def debian_package(pkg: DebianPackage, dest: Path | None = None) -> Path:
    """``pkg`` unpacked (dpkg -x) into ``dest`` (default: <cache>/debian/<name>/<version>), fetched
    once with apt-get download (private source list and package lists, so the system is not
    changed) and checked against its SHA-256; returns ``dest``."""
    dest = dest or paths.cache_dir() / "debian" / pkg.name / pkg.version
    done = dest / ".sha256"
    if done.is_file() and done.read_text().strip() == pkg.sha256:
        return dest
    print(f"sam3d: fetching Debian {pkg.suite}'s {pkg.name} {pkg.version} into {dest}", flush=True)
    uri = debian_archive_uri()
    with tempfile.TemporaryDirectory(prefix="sam3d-apt-") as tmp:
        t = Path(tmp)
        (t / "lists" / "partial").mkdir(parents=True)
        (t / "cache" / "archives" / "partial").mkdir(parents=True)
        (t / "sources.list").write_text(
            f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {uri} {pkg.suite} main\n"
        )
        opts = [
            f"-oDir::Etc::SourceList={t}/sources.list",
            "-oDir::Etc::SourceParts=/dev/null",
            f"-oDir::State::Lists={t}/lists",
            f"-oDir::Cache={t}/cache",
            "-oAPT::Architecture=amd64",
            "-oAPT::Sandbox::User=root",
            "-q",
        ]
        r = subprocess.run(["apt-get", *opts, "update"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise SystemPrerequisiteError(
                f"apt-get update of Debian {pkg.suite} from {uri} failed (fetching "
                f"{pkg.name}): {r.stderr.strip()[-300:]}"
            )
        r = subprocess.run(
            ["apt-get", *opts, "download", f"{pkg.name}={pkg.version}"],
            cwd=t,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if r.returncode != 0:
            raise SystemPrerequisiteError(
                f"apt-get download {pkg.name}={pkg.version} from Debian {pkg.suite} failed: {r.stderr.strip()[-300:]}. "
                f"When {pkg.suite} has moved on to a newer {pkg.name}, pin that one (its version and the SHA-256 "
                "of its .deb) in sam3d/tools/system.py"
            )
        deb = next(t.glob(f"{pkg.name}_*.deb"))
        check_sha256(deb, pkg.sha256)
        # Unpacked beside dest under a name of its own, then renamed: a process fetching the same
        # package at the same time never sees (or removes) this one's half.
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        subprocess.run(["dpkg", "-x", str(deb), str(part)], check=True)
        (part / ".sha256").write_text(pkg.sha256 + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        try:
            part.rename(dest)
        except OSError:  # another process renamed its copy first: the same checked bytes
            shutil.rmtree(part, ignore_errors=True)
    return dest


def vulkan_include_dir() -> Path | None:
    """An include folder with Vulkan headers new enough for GGML, or None when the system's are.

    $SAM3D_VULKAN_INCLUDE_DIR wins. Otherwise, when /usr/include's headers are too old (Debian
    12), Debian 13's libvulkan-dev (LIBVULKAN_DEV) is unpacked into the shared cache.
    """
    env = os.environ.get("SAM3D_VULKAN_INCLUDE_DIR")
    if env:
        return Path(env)
    sysver = vulkan_header_version(Path("/usr/include"))
    if sysver is not None and sysver >= VULKAN_HEADERS_MIN:
        return None
    dest = paths.cache_dir() / "vulkan-headers" / VULKAN_DEV_VERSION
    inc = dest / "usr" / "include"
    if vulkan_header_version(inc) is not None:
        return inc
    print(f"sam3d: system Vulkan headers are {sysver}", flush=True)
    debian_package(LIBVULKAN_DEV, dest)
    if vulkan_header_version(inc) is None:
        raise SystemPrerequisiteError(f"unpacked libvulkan-dev has no vulkan_core.h under {inc}")
    return inc


def has_nvidia_gpu() -> bool:
    return (
        Path("/dev/nvidia0").exists()
        or shutil.which("nvidia-smi") is not None
        and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    )
