"""Where things live: the checkout, its build/ and generated/ folders, and the shared cache."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

from .errors import Sam3dError
from .files import recover_folder

# Run and evidence-folder names: they become folder names under generated/diagnostics/.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# The longest folder name a command takes: a file name has 255 bytes, the staged sibling
# (core/files.py staged_folder) adds ".", ".new-" and a pid.
MAX_NAME = 200


def root() -> Path:
    """The checkout: $SAM3D_ROOT, else the nearest folder above the cwd holding conanfile.py and
    native/, else the checkout this package lies in (an editable install)."""
    env = os.environ.get("SAM3D_ROOT")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / "conanfile.py").is_file() and (d / "native" / "CMakeLists.txt").is_file():
            return d
    return Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """Shared by every clone on this machine (outside any clone): $SAM3D_CACHE, else
    $XDG_CACHE_HOME/sam3d, else ~/.cache/sam3d."""
    env = os.environ.get("SAM3D_CACHE")
    if env:
        return Path(env).resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return (base / "sam3d").resolve()


def conan_home() -> Path:
    """The project's own Conan home (never the user's ~/.conan2): $SAM3D_CONAN_HOME or <cache>/conan2."""
    env = os.environ.get("SAM3D_CONAN_HOME")
    return Path(env).resolve() if env else cache_dir() / "conan2"


def build_dir(variant_name: str, build_type: str) -> Path:
    """The CMake build folder of a variant, as cmake_layout lays it out with build_folder_vars."""
    return root() / "build" / variant_name / build_type


def diagnostics_dir() -> Path:
    return root() / "generated" / "diagnostics"


def folder_name(name: str, what: str, parent: Path, error: type[Sam3dError] = Sam3dError) -> str:
    """``name`` when it is safe as one folder name under ``parent`` (letters, digits, '.', '_',
    '-'; no leading '.' or '-'); ``error`` naming ``what`` (e.g. "--name") otherwise."""
    if not _NAME.fullmatch(name):
        raise error(f"{what} {name!r}: use letters, digits, '.', '_' and '-' (it names a folder under {parent})")
    if len(name) > MAX_NAME:
        raise error(
            f"{what} is {len(name)} characters long: use at most {MAX_NAME} (it names a folder, and its "
            "staged sibling adds a few)"
        )
    return name


def new_folder(name: str, what: str, parent: Path, force: bool = False, error: type[Sam3dError] = Sam3dError) -> Path:
    """parent/name for a command's output folder (every command that names one: bench, report,
    device-import): ``name`` must be a safe folder name (folder_name) and the folder new or
    empty, or ``force`` given; an existing one is refused naming --force. Nothing is removed
    here: the command writes the folder through files.staged_folder, which replaces the old one
    only once the new one is complete. A crash of an earlier replacement is recovered first
    (files.recover_folder)."""
    d = parent / folder_name(name, what, parent, error)
    recover_folder(d)
    if d.is_symlink() or (d.exists() and not d.is_dir()):
        raise error(f"{d} exists and is not a folder (a file or a symbolic link): choose another {what} or remove it")
    if d.exists() and any(d.iterdir()) and not force:
        raise error(f"{d} already exists: choose another {what} or pass --force to replace it")
    return d


def tool(name: str) -> str:
    """A tool from this Python environment's bin folder (the bootstrap venv), else from PATH."""
    here = Path(sys.executable).with_name(name)
    if here.is_file():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise Sam3dError(f"{name} not found: run through ci/bootstrap.sh, which installs requirements.lock")
    return found


def logs_dir() -> Path:
    return root() / "build" / "logs"


def reports_dir() -> Path:
    """JUnit XML reports of every test run (ctest, pytest): uploaded by every CI job."""
    return root() / "build" / "reports"
