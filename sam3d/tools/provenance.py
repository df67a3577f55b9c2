"""Provenance recorded with every result and in the GPU bundle's manifest: the machine, the git
commit, glslc, the CUDA toolkit, and how the variant was really built (compile_commands.json)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from ..core import paths
from ..core.errors import NotBuilt
from ..core.variants import Variant
from ..device.host import machine
from . import conan, cuda

__all__ = ["machine", "git_commit", "glslc_version", "flags_of", "compile_commands_flags", "build_info"]

# The folders of native/ whose files the measured binaries are built from.
MEASURED_SOURCES = ("src/", "bench/")
# Compile-line options that say how code is built (not where files are).
_KEEP = re.compile(r"^-(O.*|g.*|f.*|m.*|std=.*|DNDEBUG|U.*)$")


def git_commit(root: Path | None = None) -> tuple[str, bool]:
    """(HEAD commit, whether tracked files differ from it); ("unknown", False) outside git."""
    root = root or paths.root()
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = (
            subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            != ""
        )
        return head, dirty
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def glslc_version() -> str | None:
    """glslc's first --version line (it compiles GGML's Vulkan shaders), or None without glslc."""
    exe = shutil.which("glslc")
    if exe is None:
        return None
    r = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    first = (r.stdout or r.stderr).strip().splitlines()
    return first[0].strip() if first else None


def flags_of(command: list[str]) -> list[str]:
    """The optimisation/debug/instrumentation flags of one compile line, in order, deduplicated."""
    out: list[str] = []
    for a in command:
        if _KEEP.match(a) and a not in out:
            out.append(a)
    return out


def compile_commands_flags(v: Variant) -> dict[str, list[str]]:
    """{source file (relative to native/): flags} for the core (native/src/) and the benchmark
    drivers (native/bench/), read from build/<variant>/<build_type>/compile_commands.json (what
    the build really used), sorted by file."""
    cc = paths.build_dir(v.name, v.build_type) / "compile_commands.json"
    if not cc.is_file():
        raise NotBuilt(f"{cc} is missing: build the variant first (python -m sam3d build {v.name})")
    out: dict[str, list[str]] = {}
    for e in json.loads(cc.read_text()):
        _, sep, rel = e.get("file", "").rpartition("native/")
        if sep and rel.startswith(MEASURED_SOURCES):
            out[rel] = flags_of(e.get("arguments") or shlex.split(e.get("command", "")))
    if not any(f.startswith("src/") for f in out):
        raise NotBuilt(f"{cc} has no entry for native/src/: rebuild the variant (python -m sam3d build {v.name})")
    return dict(sorted(out.items()))


def build_info(v: Variant, glslc: str | None) -> tuple[dict, dict, list[str]]:
    """(the result schema's "build" object, extra details, problems). compile_flags are the
    core's flags (its first source file's) from compile_commands.json; every flag of the
    variant must be among each measured file's flags."""
    per_file = compile_commands_flags(v)
    core = next(fl for f, fl in per_file.items() if f.startswith("src/"))
    problems = []
    for src, fl in per_file.items():
        missing = [f for f in v.compile_flags if f not in fl]
        if missing:
            problems.append(
                f"native/{src} was compiled without the variant's {' '.join(missing)} "
                f"(compile_commands.json); rebuild: python -m sam3d build {v.name}"
            )
    build = {
        "compile_flags": core,
        "build_type": v.build_type,
        "sanitizer": v.sanitizer,
        "ggml_version": conan.ggml_version(),
        "glslc": glslc,
    }
    extra = {
        "variant_compile_flags": list(v.compile_flags),
        "compile_commands_flags": per_file,
        "compile_commands": str(paths.build_dir(v.name, v.build_type) / "compile_commands.json"),
    }
    if v.cuda:
        extra["cuda_toolkit"] = cuda.install_dir()[0].name
        extra["cuda_architectures"] = v.cuda_architectures
    return build, extra, problems
