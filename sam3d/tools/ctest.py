"""Running a variant's CTest suites with the sanitizer and Vulkan environment it needs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ..core import paths
from ..core.errors import NotBuilt, Sam3dError
from ..core.files import write_if_changed
from ..core.variants import Variant, sanitizer_runtime, sanitizers_of
from ..device import host
from . import system

SUPPRESSIONS = Path("native") / "sanitizers"
# What every CTest run of a variant adds (python -m sam3d ctest; test_preset says the same).
TIMEOUT_S = 300
OPTIONS = ("--no-tests=error", "--output-on-failure", "--timeout", str(TIMEOUT_S))
PRESETS_FILE = "sam3d-presets.json"
USER_PRESETS = Path("native") / "CMakeUserPresets.json"


def test_env(v: Variant, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment tests of variant `v` run in: `base` (default os.environ) with the
    variant's sanitizer options (device/host.py: any report is fatal). Without an NVIDIA GPU,
    GGML_VK_VISIBLE_DEVICES=0 lets GGML use Mesa's lavapipe (GGML skips CPU-type Vulkan devices
    unless the variable is set); with one, a CUDA variant's CUDA cases must find a device
    (SAM3D_REQUIRE_CUDA_DEVICE=1). The inherited flags of host.RUNNER_REMOVED_ENV
    (SAM3D_BATCHED_TRANSFERS, GGML's transfer-changing Vulkan and CUDA flags) are removed:
    tests choose. The variant's preloads (preload_libs) are in LD_PRELOAD, as run.pyz sets them.
    A Clang variant's sanitizers name the installed clang's llvm-symbolizer (system.py), so every
    report names its functions.
    """
    env = host.runner_env(dict(os.environ if base is None else base))
    env.update(host.sanitizer_env(sanitizer_runtime(), v.sanitizer, paths.root() / SUPPRESSIONS, cuda=v.cuda))
    symbolizer = system.clang_symbolizer() if v.compiler == "clang" else None
    for s in sanitizers_of(v.sanitizer) if symbolizer else ():
        env[s.symbolizer_env] = str(symbolizer)
    try:
        host.with_preload(env, list(preload_libs(v).values()))
    except FileNotFoundError as e:
        raise NotBuilt(str(e)) from None
    except ValueError as e:
        raise Sam3dError(str(e)) from None
    gpu = system.has_nvidia_gpu()
    if v.vulkan and not gpu:
        env.setdefault("GGML_VK_VISIBLE_DEVICES", "0")
    if v.cuda and gpu:
        env.setdefault("SAM3D_REQUIRE_CUDA_DEVICE", "1")  # CUDA cases fail, not skip, without a device
    return env


def build_folder(v: Variant) -> Path:
    return paths.build_dir(v.name, v.build_type)


def preload_libs(v: Variant) -> dict[str, Path]:
    """What every run of ``v``'s binaries preloads (Variant.preloads, the registry's
    vulkan_preload): file name -> the library its build made (native/sanitizers/)."""
    return {f"lib{t}.so": build_folder(v) / "sanitizers" / f"lib{t}.so" for t in v.preloads}


def test_preset(v: Variant, label: str = "normal") -> dict:
    """The CMake test preset ``v.name``: `ctest --preset <variant>` (in native/) runs like
    `python -m sam3d ctest -L <label> <variant>`, with the same options (OPTIONS), JUnit report
    (junit_path) and environment (test_env's additions; host.RUNNER_REMOVED_ENV unset). It
    inherits Conan's test preset of the build folder (GGML's library path)."""
    conan_presets = json.loads((build_folder(v) / "generators" / "CMakePresets.json").read_text())
    env: dict[str, str | None] = dict(test_env(v, base={}))
    env.update(dict.fromkeys(host.RUNNER_REMOVED_ENV))
    return {
        "name": v.name,
        "displayName": f"{v.name}: ctest -L {label} as python -m sam3d ctest runs it",
        "inherits": conan_presets["testPresets"][0]["name"],
        "environment": env,
        "filter": {"include": {"label": label}},
        "output": {"outputOnFailure": True, "outputJUnitFile": str(junit_path(v, label))},
        "execution": {"noTestsAction": "error", "timeout": TIMEOUT_S},
    }


def write_presets(v: Variant) -> Path:
    """Writes the variant's test preset into its build folder (PRESETS_FILE) and includes that
    file from native/CMakeUserPresets.json (Conan's file, which keeps other includes)."""
    folder = build_folder(v)
    path = folder / PRESETS_FILE
    write_if_changed(
        path,
        json.dumps(
            {"version": 6, "include": ["generators/CMakePresets.json"], "testPresets": [test_preset(v)]}, indent=1
        )
        + "\n",
    )
    user = paths.root() / USER_PRESETS
    data = json.loads(user.read_text()) if user.is_file() else {"version": 4, "vendor": {"conan": {}}}
    rel = os.path.relpath(path, user.parent)
    if rel not in data.setdefault("include", []):
        data["include"].append(rel)
        write_if_changed(user, json.dumps(data, indent=4))
    return path


def labels(v: Variant) -> tuple[list[str], str]:
    """(the CTest labels of variant ``v``, where they come from): `ctest --print-labels` in its
    build folder when it has a CTest suite, else the labels native/'s CMake lists give a
    variant like it (normal and bench in every variant, device with a GPU backend)."""
    folder = build_folder(v)
    if (folder / "CTestTestfile.cmake").is_file():
        r = subprocess.run(
            [paths.tool("ctest"), "--test-dir", str(folder), "--print-labels"],
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode == 0 and "All Labels:" in r.stdout:
            return sorted(
                line.strip() for line in r.stdout.split("All Labels:", 1)[1].splitlines() if line.strip()
            ), f"ctest --print-labels in {folder}"
    return declared_labels(v), "native/'s CMake lists (not built yet)"


def declared_labels(v: Variant) -> list[str]:
    """The CTest labels native/'s CMake lists give a variant: normal and bench in every one,
    device with a GPU backend (native/tests/CMakeLists.txt: SAM3D_VULKAN OR SAM3D_CUDA)."""
    return sorted(("normal", "bench") + (("device",) if v.gpu else ()))


def check_label(vs: list[Variant], label: str) -> None:
    """Refuses, before any build, a label one of the variants cannot have, listing its labels."""
    for v in vs:
        have, source = labels(v)
        if label not in have:
            raise Sam3dError(f"{v.name} has no CTest label {label!r}; its labels: {', '.join(have)} (from {source})")


def junit_path(v: Variant, label: str) -> Path:
    """Where `ctest -L <label>` of variant ``v`` writes its JUnit XML report."""
    return paths.reports_dir() / f"ctest-{label}-{v.name}.xml"


def run(
    v: Variant,
    label: str,
    log: Path | None = None,
    extra: list[str] | None = None,
    env: dict[str, str] | None = None,
    report: str | None = None,
) -> int:
    """`ctest -L <label>` in the variant's build folder, with a JUnit XML report (junit_path, or
    the name ``report`` for junit_path's label); ``env``: added to test_env(). Fails when no test
    matches."""
    folder = build_folder(v)
    if not (folder / "CTestTestfile.cmake").is_file():
        raise NotBuilt(f"{folder} has no CTest suite: build the variant first (python -m sam3d build {v.name})")
    junit = junit_path(v, report or label)
    junit.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        paths.tool("ctest"),
        "--test-dir",
        str(folder),
        "-L",
        label,
        *OPTIONS,
        "--output-junit",
        str(junit),
        *(extra or []),
    ]
    env = dict(test_env(v), **(env or {}))
    if log is None:
        return subprocess.run(cmd, env=env, check=False).returncode
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        return subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
