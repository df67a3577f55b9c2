"""`python -m sam3d ctest --vulkan-validation`: a Vulkan variant's CTest suite under the Khronos
validation layer, synchronization validation included (docs/gpu-checks.md).

Every test runs with the layer in its process and the first message stops it
(gpu_checks.validation_env(fatal=True)), so a message fails the test it came from, as a
sanitizer report does. The suite's canary test (native/tests/canaries/vulkan_hazard.cpp) must
pass, with both its hazards reported, or the run fails: a layer that is not loaded, or runs
without synchronization validation or its submit-time checks, cannot pass. Where the host's glibc is older than
the layer's (Debian 12), each test executable starts under Debian 13's dynamic loader
(native/tests/launch.sh, SAM3D_TEST_LOADER; sam3d/tools/checkers.py).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ..core import paths
from ..core.errors import Sam3dError
from ..core.variants import Variant
from ..device import gpu_checks
from ..tools import checkers, ctest


class ValidationError(Sam3dError):
    pass


def environment(v: Variant, fatal: bool = True) -> dict[str, str]:
    """What a test of ``v`` runs with under the layer, beyond ctest.test_env(): the layer's
    environment (its manifest written into build/vulkan-validation/) and, where needed, the loader."""
    if not v.vulkan:
        raise ValidationError(f"{v.name} has no Vulkan backend: --vulkan-validation checks Vulkan variants only")
    library, manifest = checkers.validation_layer()
    layer_path = gpu_checks.layer_manifest(library, manifest, paths.root() / "build" / "vulkan-validation")
    supp = gpu_checks.suppressed_ids(paths.root() / ctest.SUPPRESSIONS / gpu_checks.VALIDATION_SUPPRESSIONS)
    env = gpu_checks.validation_env(layer_path, supp, fatal=fatal)
    loader = checkers.loader_prefix()
    if loader:
        env["SAM3D_TEST_LOADER"] = " ".join(loader)
        if v.asan:
            # Under the foreign loader LeakSanitizer cannot name the modules of its stacks (Mesa's
            # allocations show as "<unknown module>"), so no suppression can match them: leaks are
            # the plain run's to check (`sam3d ctest` of the same variant), not this one's.
            env["ASAN_OPTIONS"] = ctest.test_env(v)["ASAN_OPTIONS"] + ":detect_leaks=0"
    return env


def excluded(v: Variant, env: dict[str, str]) -> list[str]:
    """ctest arguments that leave out what ``env`` (environment()'s) turns off: the leak canary,
    where leak detection is off."""
    if v.asan and "detect_leaks=0" in env.get("ASAN_OPTIONS", ""):
        return ["-E", r"^SanitizerCanary\.leak_"]
    return []


CANARY_TEST = "GpuCanary.vulkan_hazard_is_reported"


def canary_verdict(junit: Path) -> str | None:
    """Why the run's canary test (CANARY_TEST, native/tests/CMakeLists.txt) does not prove the
    layer live, from the run's JUnit report; None when it passed (both hazards reported)."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as e:
        return f"no readable JUnit report {junit} ({e})"
    for t in root.iter("testcase"):
        if t.get("name") == CANARY_TEST:
            if t.find("failure") is not None or t.find("error") is not None:
                return f"{CANARY_TEST} failed: the layer did not report both hazards"
            if t.find("skipped") is not None or t.get("status") in ("notrun", "disabled"):
                return f"{CANARY_TEST} was skipped (no Vulkan device?)"
            return None
    return f"{CANARY_TEST} did not run (is the variant built with it?)"


def count_messages(log: Path) -> int:
    """The validation messages in a ctest log (each stopped its test, which printed it)."""
    return len(gpu_checks.MESSAGE.findall(log.read_text(errors="replace")))
