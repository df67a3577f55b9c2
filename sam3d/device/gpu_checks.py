"""The GPU side's checkers: the Khronos validation layer over Vulkan runs and NVIDIA's
compute-sanitizer over CUDA runs (docs/gpu-checks.md).

Both run the same binaries the normal suite and the device tests run, with the checker around
them, and both count what the checker reports: any validation message or compute-sanitizer
error fails the run, as a sanitizer report does. Each has canaries
(native/tests/canaries/vulkan_hazard.cpp, cuda_faults.cpp): a run whose canary is not reported
fails too, so a checker that is not live cannot pass.

Standard library only (sam3d/device/): the GPU bundle's run.pyz carries it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

# --- Vulkan: the Khronos validation layer ---------------------------------------------------

LAYER = "VK_LAYER_KHRONOS_validation"
LAYER_LIBRARY = "libVkLayer_khronos_validation.so"
LAYER_MANIFEST = "VkLayer_khronos_validation.json"
# The layer's settings, as the layer reads them from the environment (VK_KHRONOS_VALIDATION_<SETTING>,
# the settings of its VkLayer_khronos_validation.json): core checks, synchronization validation with
# its submit-time checks (hazards between submissions, not only within one command buffer), errors
# and warnings, every message printed (no per-ID limit) to stdout, where each lands inside the
# GoogleTest case that caused it.
VALIDATION_SETTINGS = {
    "VK_INSTANCE_LAYERS": LAYER,
    "VK_KHRONOS_VALIDATION_VALIDATE_CORE": "true",
    "VK_KHRONOS_VALIDATION_VALIDATE_SYNC": "true",
    "VK_KHRONOS_VALIDATION_SYNCVAL_SUBMIT_TIME_VALIDATION": "true",
    "VK_KHRONOS_VALIDATION_REPORT_FLAGS": "error,warn",
    "VK_KHRONOS_VALIDATION_DEBUG_ACTION": "VK_DBG_LAYER_ACTION_LOG_MSG",
    "VK_KHRONOS_VALIDATION_ENABLE_MESSAGE_LIMIT": "false",
}
# What the Vulkan loader prints (VK_LOADER_DEBUG=layer) once it has put the layer into an instance:
# a loader silently leaves out a layer it cannot load, so a run counts as checked only with it.
LAYER_LOADED = re.compile(r'Insert instance layer "' + LAYER + '"')
# What the layer prints for each message: "Validation Error: [ SYNC-HAZARD-READ-AFTER-WRITE ] | MessageID = 0x...".
MESSAGE = re.compile(r"^Validation (Error|Warning): \[ ([^\]]+) \]", re.M)
# The Vulkan canary's two hazards: one within a command buffer, one between submissions (only
# submit-time validation sees the second).
VULKAN_CANARY = "gpu_canary_vulkan"
VULKAN_CANARY_IDS = ("SYNC-HAZARD-READ-AFTER-WRITE", "SYNC-HAZARD-WRITE-AFTER-READ")
# The suppression file (native/sanitizers/): message IDs the layer is told to drop
# (VK_KHRONOS_VALIDATION_MESSAGE_ID_FILTER), each after a comment naming its upstream cause.
VALIDATION_SUPPRESSIONS = "vulkan-validation.supp"


def suppressed_ids(path: Path) -> list[str]:
    """The message IDs of a suppression file: one per line, '#' starts a comment."""
    ids = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            ids.append(line)
    return ids


def layer_manifest(library: Path, manifest: Path, dest: Path) -> Path:
    """A copy of the layer's ``manifest`` in ``dest`` whose library_path is ``library``'s absolute
    path (the packaged manifest names a bare file, for the system's library path); returns the
    folder to put on VK_LAYER_PATH."""
    src = json.loads(manifest.read_text())
    src["layer"]["library_path"] = str(library.resolve())
    dest.mkdir(parents=True, exist_ok=True)
    (dest / LAYER_MANIFEST).write_text(json.dumps(src, indent=1) + "\n")
    return dest


def validation_env(
    layer_path: Path, suppressions: list[str], fatal: bool = False, prove_loaded: bool = False
) -> dict[str, str]:
    """The environment that loads the layer (its manifest's folder: layer_manifest()) with
    VALIDATION_SETTINGS into every Vulkan instance of the process, the suppressed IDs dropped.
    ``fatal``: the first message also stops the process (SIGTRAP, the layer's BREAK action), as a
    sanitizer report does: one CTest test per process, each failing on its own message.
    ``prove_loaded``: the loader logs its layers (LAYER_LOADED then shows the layer went in)."""
    env = dict(VALIDATION_SETTINGS, VK_LAYER_PATH=str(layer_path))
    if prove_loaded:
        env["VK_LOADER_DEBUG"] = "layer"
    if fatal:
        env["VK_KHRONOS_VALIDATION_DEBUG_ACTION"] += ",VK_DBG_LAYER_ACTION_BREAK"
    if suppressions:
        env["VK_KHRONOS_VALIDATION_MESSAGE_ID_FILTER"] = ",".join(suppressions)
    return env


_CASE = re.compile(r"^\[ RUN      \] (\S+)$")


def validation_messages(text: str) -> dict[str, list[str]]:
    """The message IDs the layer printed in a GoogleTest run's output, by the case that was
    running ("" for those before the first case: instance creation, discovery)."""
    out: dict[str, list[str]] = {}
    case = ""
    for line in text.splitlines():
        m = _CASE.match(line)
        if m:
            case = m.group(1)
            continue
        m = MESSAGE.match(line)
        if m:
            out.setdefault(case, []).append(m.group(2))
    return out


def vulkan_canary_caught(text: str) -> list[str]:
    """The canary's hazards missing from its output (empty: synchronization validation, its
    submit-time part included, is live)."""
    seen = {i for ids in validation_messages(text).values() for i in ids}
    return [i for i in VULKAN_CANARY_IDS if i not in seen]


# --- CUDA: compute-sanitizer ----------------------------------------------------------------

# Each tool with the options the runs give it. memcheck also checks the CUDA API's accesses to
# device memory (cudaMemcpy and cudaMemset ranges) and reports device allocations never freed.
TOOLS = {
    "memcheck": ("--check-api-memory-access", "yes", "--leak-check", "full"),
    "initcheck": (),
    "synccheck": (),
    "racecheck": (),
}
# compute-sanitizer's exit status when it reported an error (any other non-zero status is the
# program's own, or the tool's failure to start it).
ERROR_EXIT = 86
CUDA_CANARY = "gpu_canary_cuda"
# What a tool's canary output must show beyond its error count: memcheck's leak report (the
# canary resets its context while an allocation is held), so --leak-check is live too.
CUDA_CANARY_REPORTS = {"memcheck": re.compile(r"Leaked \d+ bytes")}
# The files of NVIDIA's nvidia-cuda-sanitizer-api wheel (nvidia/cu13/bin and lib), which run from
# one folder, as in the toolkit's compute-sanitizer/. The wheel lacks the two launcher helpers
# The driver's canary for initcheck: the areas layout with its areas left as allocated
# (sam3d_bench --uninitialized-areas; the replay clears them where it creates them), so a
# coalesced download span reads gap bytes nothing wrote (docs/contract.md, rule 10): initcheck
# must report those reads, or the areas replays' clean initcheck runs prove nothing.
AREAS_CANARY_TOOL = "initcheck"
AREAS_CANARY_LAYOUT = "areas"
AREAS_CANARY_FLAG = "--uninitialized-areas"
AREAS_CANARY_REPORT = re.compile(r"Uninitialized access.*cudaMemcpy source")


# compute-sanitizer starts its target through ("Target application terminated before first
# instrumented API call" without them): LAUNCHER_HELPERS come from the GPU machine's CUDA
# toolkit, checked to be the same release (same `--version` line).
LAUNCHER_HELPERS = ("TreeLauncherSubreaper", "TreeLauncherTargetLdPreloadHelper")


# compute-sanitizer starts its target with its injection library preloaded (LD_PRELOAD), ahead of
# the ASan runtime GCC links dynamically, which ASan refuses at start ("ASan runtime does not come
# first in initial library list") unless told not to check the order.
ASAN_UNDER_SANITIZER = "verify_asan_link_order=0"


class CheckerError(RuntimeError):
    pass


def sanitizer_version(binary: Path) -> str:
    """The "Version ..." line of `compute-sanitizer --version`."""
    if not binary.is_file():
        raise CheckerError(f"{binary} is missing")
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout
    lines = [ln for ln in out.splitlines() if ln.startswith("Version")]
    if not lines:
        raise CheckerError(f"{binary} --version printed no version line: {out.strip()[:200]!r}")
    return lines[0].strip()


def assemble_sanitizer(wheel_dir: Path, toolkit_dir: Path, dest: Path) -> Path:
    """compute-sanitizer in ``dest``: the wheel's files (wheel_dir, flat) and the toolkit's
    LAUNCHER_HELPERS (toolkit_dir/compute-sanitizer), refused unless both are one release.
    Returns the binary."""
    src = toolkit_dir / "compute-sanitizer"
    if not (wheel_dir / "compute-sanitizer").is_file():
        raise CheckerError(f"{wheel_dir} has no compute-sanitizer: this bundle was packed without a CUDA variant")
    missing = [h for h in LAUNCHER_HELPERS if not (src / h).is_file()]
    if missing:
        raise CheckerError(
            f"{src} has no {', '.join(missing)}: compute-sanitizer from the wheel needs the "
            "launcher helpers of a CUDA toolkit of the same release (pass its root with --cuda-toolkit)"
        )
    ours, theirs = sanitizer_version(wheel_dir / "compute-sanitizer"), sanitizer_version(src / "compute-sanitizer")
    if ours != theirs:
        raise CheckerError(
            f"the wheel's compute-sanitizer is {ours!r}, {src}'s {theirs!r}: the launcher helpers "
            "must come from the same release"
        )
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for f in wheel_dir.iterdir():
        shutil.copy2(f, dest / f.name)
    for h in LAUNCHER_HELPERS:
        shutil.copy2(src / h, dest / h)
    binary = dest / "compute-sanitizer"
    for f in (binary, *(dest / h for h in LAUNCHER_HELPERS)):
        f.chmod(0o755)
    return binary


def sanitizer_command(binary: Path, tool: str, argv: list[str]) -> list[str]:
    """``argv`` under compute-sanitizer's ``tool`` with TOOLS' options; exit ERROR_EXIT on a report."""
    if tool not in TOOLS:
        raise CheckerError(f"unknown compute-sanitizer tool {tool!r}; tools: {', '.join(TOOLS)}")
    return [
        str(binary),
        "--tool",
        tool,
        *TOOLS[tool],
        "--error-exitcode",
        str(ERROR_EXIT),
        "--print-limit",
        "10000",
        *argv,
    ]


_SUMMARY = re.compile(
    r"^========= (?:ERROR SUMMARY: (\d+) errors?|RACECHECK SUMMARY: \d+ hazards? displayed "
    r"\((\d+) errors?, \d+ warnings?\))",
    re.M,
)


def sanitizer_errors(text: str) -> int | None:
    """The errors compute-sanitizer counted in its summary line (None: no summary, the tool did
    not finish its run)."""
    found = [int(a or b) for a, b in _SUMMARY.findall(text)]
    return sum(found) if found else None
