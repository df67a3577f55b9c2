"""The GPU checkers (sam3d/device/gpu_checks.py, sam3d/tools/checkers.py, sam3d/running/validation.py):
what their runs read from the checkers' output, the environment the runners set, and the real
validation layer against the real canary on this machine's lavapipe."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sam3d.core import paths, variants
from sam3d.device import gpu_checks
from sam3d.running import validation
from sam3d.tools import checkers

# Output of the real tools, as seen on the H200 (compute-sanitizer 2025.3.1 over the canary) and
# here (the layer over the canary), cut to the lines that matter.
MEMCHECK = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at oob_store+0x50
cuda_faults memcheck: kernel oob_store ran (synchronize: 719)
========= ERROR SUMMARY: 1 error
"""
RACECHECK = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at shared_race+0x80
=========     and Write access at shared_race+0x80 [63 hazards]
cuda_faults racecheck: kernel shared_race ran (synchronize: 0)
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
CLEAN = "========= COMPUTE-SANITIZER\n[  PASSED  ] 12 tests.\n========= ERROR SUMMARY: 0 errors\n"
GTEST = """Validation Warning: [ WARNING-vkGetDeviceProcAddr-device ] | MessageID = 0x22b1fbac
[ RUN      ] Device.First
[       OK ] Device.First (3 ms)
[ RUN      ] Device.Second
Validation Error: [ SYNC-HAZARD-READ-AFTER-WRITE ] | MessageID = 0xe4d96472
vkCmdCopyBuffer(): READ_AFTER_WRITE hazard detected.
Validation Error: [ VUID-vkCmdCopyBuffer-srcBuffer-00118 ] | MessageID = 0x1
[  FAILED  ] Device.Second (5 ms)
"""


def test_sanitizer_summaries_are_counted_per_tool():
    assert gpu_checks.sanitizer_errors(MEMCHECK) == 1
    assert gpu_checks.sanitizer_errors(RACECHECK) == 1
    assert gpu_checks.sanitizer_errors(CLEAN) == 0
    # A run the tool did not finish has no summary: not "0 errors".
    assert (
        gpu_checks.sanitizer_errors(
            "========= COMPUTE-SANITIZER\n========= Error: Target application "
            "terminated before first instrumented API call\n"
        )
        is None
    )


def test_validation_messages_land_in_the_case_that_was_running():
    assert gpu_checks.validation_messages(GTEST) == {
        "": ["WARNING-vkGetDeviceProcAddr-device"],
        "Device.Second": ["SYNC-HAZARD-READ-AFTER-WRITE", "VUID-vkCmdCopyBuffer-srcBuffer-00118"],
    }
    assert gpu_checks.validation_messages("[ RUN      ] A.b\n[       OK ] A.b\n") == {}


def test_the_canary_verdict_names_each_missing_hazard():
    both = (
        "Validation Error: [ SYNC-HAZARD-READ-AFTER-WRITE ] | x\n"
        "Validation Error: [ SYNC-HAZARD-WRITE-AFTER-READ ] | y\n"
    )
    assert gpu_checks.vulkan_canary_caught(both) == []
    assert gpu_checks.vulkan_canary_caught(both.splitlines()[0]) == ["SYNC-HAZARD-WRITE-AFTER-READ"]
    assert gpu_checks.vulkan_canary_caught("") == list(gpu_checks.VULKAN_CANARY_IDS)


def test_validation_env_turns_on_sync_validation_and_fatal_adds_the_break_action(tmp_path):
    env = gpu_checks.validation_env(tmp_path, ["VUID-a", "SYNC-b"])
    assert env["VK_INSTANCE_LAYERS"] == gpu_checks.LAYER and env["VK_LAYER_PATH"] == str(tmp_path)
    assert env["VK_KHRONOS_VALIDATION_VALIDATE_SYNC"] == "true"
    assert env["VK_KHRONOS_VALIDATION_SYNCVAL_SUBMIT_TIME_VALIDATION"] == "true"
    assert env["VK_KHRONOS_VALIDATION_MESSAGE_ID_FILTER"] == "VUID-a,SYNC-b"
    assert "BREAK" not in env["VK_KHRONOS_VALIDATION_DEBUG_ACTION"]
    fatal = gpu_checks.validation_env(tmp_path, [], fatal=True)
    assert fatal["VK_KHRONOS_VALIDATION_DEBUG_ACTION"].split(",") == [
        "VK_DBG_LAYER_ACTION_LOG_MSG",
        "VK_DBG_LAYER_ACTION_BREAK",
    ]
    assert "VK_KHRONOS_VALIDATION_MESSAGE_ID_FILTER" not in fatal


def test_suppressions_are_ids_each_after_its_cause(tmp_path):
    f = tmp_path / "s.supp"
    f.write_text("# header\n\n# cause one\nVUID-x  # trailing\n")
    assert gpu_checks.suppressed_ids(f) == ["VUID-x"]
    text = (paths.root() / "native" / "sanitizers" / gpu_checks.VALIDATION_SUPPRESSIONS).read_text()
    previous = ""
    for line in (ln.strip() for ln in text.splitlines()):
        if line and not line.startswith("#"):
            assert previous.startswith("#"), f"{line}: no comment naming its cause before it"
        previous = line


def test_the_wheels_sanitizer_is_refused_without_the_toolkits_launcher_helpers(tmp_path):
    (tmp_path / "toolkit" / "compute-sanitizer").mkdir(parents=True)
    (tmp_path / "wheel").mkdir()
    with pytest.raises(gpu_checks.CheckerError, match="packed without a CUDA variant"):
        gpu_checks.assemble_sanitizer(tmp_path / "wheel", tmp_path / "toolkit", tmp_path / "out")
    (tmp_path / "wheel" / "compute-sanitizer").write_text("")
    with pytest.raises(gpu_checks.CheckerError, match="TreeLauncherSubreaper, TreeLauncherTargetLdPreloadHelper"):
        gpu_checks.assemble_sanitizer(tmp_path / "wheel", tmp_path / "toolkit", tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half-assembled
    cmd = gpu_checks.sanitizer_command(Path("/cs"), "memcheck", ["prog", "x"])
    assert cmd[:3] == ["/cs", "--tool", "memcheck"] and cmd[-2:] == ["prog", "x"]
    assert "--check-api-memory-access" in cmd and str(gpu_checks.ERROR_EXIT) in cmd
    with pytest.raises(gpu_checks.CheckerError, match="unknown compute-sanitizer tool"):
        gpu_checks.sanitizer_command(Path("/cs"), "memchek", [])


def test_the_sanitizer_wheel_is_of_the_toolkits_release(tmp_path):
    pin = checkers.sanitizer_pin()
    assert pin.name == checkers.SANITIZER_WHEEL
    lock = tmp_path / "cs.lock"
    lock.write_text(f"{checkers.SANITIZER_WHEEL}==12.9.79 --hash=sha256:{'0' * 64}\n")
    with pytest.raises(checkers.CheckerSetupError, match="pin the sanitizer of the toolkit's release"):
        checkers.sanitizer_pin(lock)


def test_runner_environment_loads_the_layer_and_refuses_variants_without_vulkan():
    vk = next(v for v in variants.VARIANTS if v.vulkan and not v.sanitizer)
    env = validation.environment(vk)
    assert env["VK_INSTANCE_LAYERS"] == gpu_checks.LAYER
    manifest = Path(env["VK_LAYER_PATH"]) / gpu_checks.LAYER_MANIFEST
    assert Path(json.loads(manifest.read_text())["layer"]["library_path"]).is_file()
    # On a host too old for the layer the tests start under Debian 13's loader; else as they are.
    assert ("SAM3D_TEST_LOADER" in env) == (not checkers.host_runs_layer())
    cpu = next(v for v in variants.VARIANTS if not v.gpu)
    with pytest.raises(validation.ValidationError, match="has no Vulkan backend"):
        validation.environment(cpu)


def _canary(tmp_path):
    if shutil.which("g++") is None or not Path("/usr/include/vulkan/vulkan.h").is_file():
        pytest.skip("needs g++ and libvulkan-dev (installed by `nox -s build` for the Vulkan variants)")
    exe = tmp_path / "vulkan_hazard"
    subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-O1",
            "-o",
            str(exe),
            str(paths.root() / "native" / "tests" / "canaries" / "vulkan_hazard.cpp"),
            "-lvulkan",
        ],
        check=True,
    )
    library, manifest = checkers.validation_layer()
    layer = gpu_checks.layer_manifest(library, manifest, tmp_path / "layer")
    return exe, layer


def test_the_real_layer_reports_both_canary_hazards_and_neither_without_sync_validation(tmp_path):
    exe, layer = _canary(tmp_path)
    base = dict(os.environ, GGML_VK_VISIBLE_DEVICES="0")

    def run(env):
        r = subprocess.run(checkers.loader_prefix() + [str(exe)], env=env, capture_output=True, text=True)
        if r.returncode == 77:
            pytest.skip("no Vulkan device (mesa-vulkan-drivers)")
        return r

    layer_env = dict(base, **gpu_checks.validation_env(layer, []))
    live = run(layer_env)
    assert live.returncode == 0 and gpu_checks.vulkan_canary_caught(live.stdout + live.stderr) == []
    off = run(dict(layer_env, VK_KHRONOS_VALIDATION_VALIDATE_SYNC="false"))
    assert gpu_checks.vulkan_canary_caught(off.stdout + off.stderr) == list(gpu_checks.VULKAN_CANARY_IDS)
    no_submit_time = run(dict(layer_env, VK_KHRONOS_VALIDATION_SYNCVAL_SUBMIT_TIME_VALIDATION="false"))
    assert gpu_checks.vulkan_canary_caught(no_submit_time.stdout) == ["SYNC-HAZARD-WRITE-AFTER-READ"]
    fatal = run(dict(base, **gpu_checks.validation_env(layer, [], fatal=True)))
    assert fatal.returncode != 0  # the layer's BREAK action stops the process at the first message


def _junit(tmp_path, body):
    f = tmp_path / "r.xml"
    f.write_text(f'<testsuite name="x">{body}</testsuite>')
    return f


def test_the_validation_run_needs_its_canary_test_to_have_passed(tmp_path):
    t = validation.CANARY_TEST
    assert validation.canary_verdict(_junit(tmp_path, f'<testcase name="{t}" status="run"/>')) is None
    assert "failed" in validation.canary_verdict(
        _junit(tmp_path, f'<testcase name="{t}"><failure message="x"/></testcase>')
    )
    assert "skipped" in validation.canary_verdict(
        _junit(tmp_path, f'<testcase name="{t}" status="notrun"><skipped/></testcase>')
    )
    assert "did not run" in validation.canary_verdict(_junit(tmp_path, '<testcase name="Other.case"/>'))
    assert "no readable JUnit report" in validation.canary_verdict(tmp_path / "missing.xml")


def test_the_device_table_has_a_column_per_checker_and_import_names_each_finding():
    from sam3d.cli.bench import checker_findings
    from sam3d.results import table

    counts = {"exit_code": 0, "passed": 5, "failed": 0, "skipped": 0}
    runs = [
        ("release", "plain", counts),
        ("release", "plain (vulkan-validation)", dict(counts, validation_messages=0)),
        ("cuda-release", "plain (memcheck)", dict(counts, sanitizer_errors=3)),
        ("cuda-release", "plain (racecheck)", dict(counts, sanitizer_errors=None)),
    ]
    lines = table.device_tests({"hostname": "h", "gpu": "g"}, runs).splitlines()
    header = next(ln for ln in lines if ln.startswith("| variant"))
    assert "validation messages" in header and "compute-sanitizer errors" in header
    rows = {ln.split("|")[2].strip(): [c.strip() for c in ln.split("|")] for ln in lines if ln.startswith("| ")}
    cells = header.split("|")
    col = [c.strip() for c in cells].index
    assert rows["plain (memcheck)"][col("compute-sanitizer errors")] == "3"
    assert rows["plain (racecheck)"][col("compute-sanitizer errors")] == "?"
    assert rows["plain"][col("validation messages")] == ""
    assert checker_findings(runs[2][2]) == "3 compute-sanitizer error(s)"
    assert checker_findings(runs[3][2]).startswith("compute-sanitizer left no summary")
    assert checker_findings(runs[1][2]) is None and checker_findings(counts) is None
    assert checker_findings({"validation_messages": 2}) == "2 validation message(s)"
    plain = table.device_tests({"hostname": "h"}, runs[:1])
    assert "validation messages" not in plain and "compute-sanitizer" not in plain


def test_a_checked_run_passes_only_with_the_checker_live_and_silent():
    from sam3d.device import run as device_run

    loaded = 'INFO | LAYER:     Insert instance layer "VK_LAYER_KHRONOS_validation" (/x.so)\n'
    ok = device_run.check_counts(device_run.VALIDATION_TAG, loaded + "[ RUN      ] A.b\n[       OK ] A.b\n")
    assert ok["layer_loaded"] and ok["validation_messages"] == 0 and device_run.checked_ok(ok)
    # A loader that could not load the layer leaves it out silently: no messages, and no proof.
    absent = device_run.check_counts(device_run.VALIDATION_TAG, "[ RUN      ] A.b\n[       OK ] A.b\n")
    assert absent["validation_messages"] == 0 and not device_run.checked_ok(absent)
    found = device_run.check_counts(device_run.VALIDATION_TAG, loaded + GTEST)
    assert found["validation_messages"] == 3 and not device_run.checked_ok(found)
    assert device_run.checked_ok(device_run.check_counts("memcheck", CLEAN))
    assert not device_run.checked_ok(device_run.check_counts("memcheck", MEMCHECK))
    assert not device_run.checked_ok(device_run.check_counts("racecheck", "no summary"))
    assert device_run.check_counts("", "anything") == {} and device_run.checked_ok({})


def test_each_bundle_carries_the_checkers_of_its_variants_backends(tmp_path):
    import tarfile

    from sam3d.running import bundle

    stage = tmp_path / "stage"
    for d in ("validation", "compute-sanitizer", "vk", "cu"):
        (stage / d).mkdir(parents=True)
        (stage / d / "f").write_text(d)
    (stage / "run.pyz").write_text("")
    manifest = {"variants": {"vk": {"backends": ["vulkan"]}, "cu": {"backends": ["cuda"]}}}
    names = {}
    for only in ("vk", "cu"):
        tb = bundle._pack(stage, tmp_path / f"{only}.tar.gz", "top", {"variants": {only: manifest["variants"][only]}})
        with tarfile.open(tb) as t:
            names[only] = {n.split("/")[1] for n in t.getnames() if n.count("/") >= 1}
    assert names["vk"] == {"run.pyz", "vk", "validation", "manifest.json"}
    assert names["cu"] == {"run.pyz", "cu", "compute-sanitizer", "manifest.json"}
