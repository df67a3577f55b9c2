"""The program run on the GPU machine (sam3d/device/, the bundle's run.pyz): it runs from its
zipapp alone, takes the modes, layouts and orders from each variant's driver, and its checkers
replay every configuration the driver lists, after canaries that must be caught. The GPU parts
are stand-ins here: a driver, tests and a compute-sanitizer that log what they were asked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sam3d.device import gpu_checks
from sam3d.device import run as device_run
from sam3d.running import bundle

# What the stand-in driver lists: a layout and a mode beyond today's, as a new one would be.
LISTED = {
    "modes": ["off", "staged", "fancy"],
    "layouts": ["scattered", "areas", "tiles"],
    "orders": ["profile", "levels"],
    # A default named unlike the real driver's: run.pyz takes the choices and the default from the driver.
    "duplex": ["single", "auto", "on"],
}

FAKE_BINARY = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path
name, args = Path(sys.argv[0]).name, sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps([name, *args]) + "\\n")
if name == "sam3d_bench":
    if "--list-modes" in args:
        listed = {json.dumps(LISTED)}
        print(json.dumps({{"schema": "{device_run.LIST_SCHEMA}", **{{k: [{{"name": n, "description": ""}} for n in v]
                                                                    for k, v in listed.items()}}}}))
        sys.exit(0)
    Path(args[args.index("--out") + 1]).write_text("{{}}")
elif name == "sam3d_floor_probe":
    print("{{}}")
elif name != "{gpu_checks.CUDA_CANARY}":
    report = next(a for a in args if a.startswith("--gtest_output=xml:")).split(":", 1)[1]
    Path(report).write_text('<testsuites><testsuite><testcase name="a"/></testsuite></testsuites>')
"""

# compute-sanitizer: runs the command after its options; reports the canaries' faults (the areas
# canary's read of unwritten gaps only without FAKE_MISS, as if the flag no longer left them so).
FAKE_SANITIZER = f"""#!{sys.executable}
import os, subprocess, sys
args = sys.argv[1:]
cmd = args[args.index("--print-limit") + 2:]
rc = subprocess.run(cmd).returncode
fault = cmd[0].endswith("{gpu_checks.CUDA_CANARY}") or (
    "--uninitialized-areas" in cmd and not os.environ.get("FAKE_MISS"))
if fault:
    print("========= Uninitialized access at 0x7f00 on access by cudaMemcpy source")
print(f"========= ERROR SUMMARY: {{int(fault)}} errors")
sys.exit({gpu_checks.ERROR_EXIT} if fault else rc)
"""


def _bundle(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """A bundle folder with one CUDA variant "cu" of stand-in binaries, as HERE; (its folder, the log)."""
    stage = tmp_path / "bundle"
    (stage / "cu" / "bin").mkdir(parents=True)
    for name in (
        "sam3d_bench",
        "sam3d_floor_probe",
        "sam3d_device_tests",
        device_run.NORMAL_TESTS,
        gpu_checks.CUDA_CANARY,
    ):
        (stage / "cu" / "bin" / name).write_text(FAKE_BINARY)
        (stage / "cu" / "bin" / name).chmod(0o755)
    (stage / "profile.json").write_text(json.dumps({"graphs": [{"uploads": [4], "downloads": [8]}]}))
    (stage / "compute-sanitizer").write_text(FAKE_SANITIZER)
    (stage / "compute-sanitizer").chmod(0o755)
    (stage / "manifest.json").write_text(
        json.dumps({"variants": {"cu": {"sanitizer": None, "backends": ["cuda"], "cuda_libs": []}}})
    )
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setattr(device_run, "HERE", stage)
    monkeypatch.setattr(device_run, "machine", lambda: {"hostname": "gpu"})
    monkeypatch.setattr(
        device_run,
        "checkers",
        lambda a, out: (
            None,
            [
                (t, gpu_checks.sanitizer_command(stage / "compute-sanitizer", t, []), {})
                for t in (a.compute_sanitizer or "").split(",")
                if t
            ],
        ),
    )
    return stage, log


def _calls(log: Path, name: str) -> list[list[str]]:
    return [c[1:] for c in map(json.loads, log.read_text().splitlines()) if c[0] == name]


def _flag(call: list[str], flag: str) -> str | None:
    return call[call.index(flag) + 1] if flag in call else None


def test_the_bundle_s_program_runs_from_its_zipapp_alone(tmp_path):
    """python3 -I run.pyz: no sam3d on the path, nothing but the archive and the bundle's files."""
    bundle.pack_program(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"variants": {"release": {}}}))
    r = subprocess.run(
        [sys.executable, "-I", str(tmp_path / bundle.PROGRAM), "--help"], capture_output=True, text=True, cwd="/"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: run.pyz") and "--compute-sanitizer" in r.stdout and "of release" in r.stdout
    r = subprocess.run(
        [sys.executable, "-I", str(tmp_path / bundle.PROGRAM), "--out", str(tmp_path / "o"), "nope"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert r.returncode == 1
    assert r.stderr.strip() == "run.pyz: unknown variant(s) ['nope']; this bundle has release"


def test_initcheck_replays_every_layout_order_and_mode_the_driver_lists_after_both_canaries(tmp_path, monkeypatch):
    _, log = _bundle(tmp_path, monkeypatch)
    out = tmp_path / "out"
    assert device_run.main(["--out", str(out), "--compute-sanitizer", "initcheck"]) == 0
    replays = [c for c in _calls(log, "sam3d_bench") if "--list-modes" not in c and "--uninitialized-areas" not in c]
    assert sorted((_flag(c, "--layout"), _flag(c, "--order"), "--transfer-only" in c) for c in replays) == sorted(
        (x, o, t) for x in LISTED["layouts"] for o in LISTED["orders"] for t in (False, True)
    )
    assert {(_flag(c, "--modes"), _flag(c, "--images"), _flag(c, "--backend")) for c in replays} == {
        ("off,staged,fancy", "1", "cuda")
    }
    (canary,) = [c for c in _calls(log, "sam3d_bench") if "--uninitialized-areas" in c]
    assert _flag(canary, "--layout") == "areas" and _flag(canary, "--modes") == "off,staged,fancy"
    summary = json.loads((out / "summary.json").read_text())["variants"]["cu"]
    assert {k: c["caught"] for k, c in summary["canaries"].items()} == {
        "initcheck": True,
        "initcheck-uninitialized-areas": True,
    }
    assert len(summary["checked_replays"]) == 12 and all(b["sanitizer_errors"] == 0 for b in summary["checked_replays"])
    assert len({b["driver_output"] for b in summary["checked_replays"]}) == 12  # a file each


def test_an_areas_canary_initcheck_no_longer_reports_fails_the_run(tmp_path, monkeypatch, capsys):
    _, log = _bundle(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_MISS", "1")
    assert device_run.main(["--out", str(tmp_path / "out"), "--compute-sanitizer", "initcheck"]) == 1
    assert "canary sam3d_bench" in capsys.readouterr().out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())["variants"]["cu"]
    assert summary["canaries"]["initcheck-uninitialized-areas"]["caught"] is False
    assert summary["canaries"]["initcheck"]["caught"] is True
    # memcheck has no areas canary: the driver runs under it only for the replays.
    log.unlink()
    assert device_run.main(["--out", str(tmp_path / "out2"), "--compute-sanitizer", "memcheck"]) == 1  # no leak report
    assert not [c for c in _calls(log, "sam3d_bench") if "--uninitialized-areas" in c]


def test_a_plain_run_takes_the_driver_s_defaults_or_all_it_lists(tmp_path, monkeypatch):
    _, log = _bundle(tmp_path, monkeypatch)
    assert device_run.main(["--out", str(tmp_path / "out"), "--skip-tests"]) == 0
    (call,) = [c for c in _calls(log, "sam3d_bench") if "--list-modes" not in c]
    assert (_flag(call, "--layout"), _flag(call, "--order"), _flag(call, "--modes")) == ("scattered", "profile", None)
    log.unlink()
    assert (
        device_run.main(
            [
                "--out",
                str(tmp_path / "out"),
                "--skip-tests",
                "--transfer-only",
                "--modes",
                "all",
                "--layout",
                "all",
                "--order",
                "all",
            ]
        )
        == 0
    )
    calls = [c for c in _calls(log, "sam3d_bench") if "--list-modes" not in c]
    assert sorted((_flag(c, "--layout"), _flag(c, "--order"), "--transfer-only" in c) for c in calls) == sorted(
        (x, o, t) for x in LISTED["layouts"] for o in LISTED["orders"] for t in (False, True)
    )
    assert {_flag(c, "--modes") for c in calls} == {"off,staged,fancy"}
    assert len(_calls(log, "sam3d_floor_probe")) == len(calls)


def test_the_checked_replays_take_fewer_when_named_and_refuse_what_the_driver_does_not_list(tmp_path, monkeypatch):
    _, log = _bundle(tmp_path, monkeypatch)
    assert (
        device_run.main(
            [
                "--out",
                str(tmp_path / "out"),
                "--compute-sanitizer",
                "initcheck",
                "--layout",
                "tiles",
                "--order",
                "levels",
                "--modes",
                "off,staged",
            ]
        )
        == 0
    )
    replays = [c for c in _calls(log, "sam3d_bench") if "--list-modes" not in c and "--uninitialized-areas" not in c]
    assert sorted(
        (_flag(c, "--layout"), _flag(c, "--order"), _flag(c, "--modes"), "--transfer-only" in c) for c in replays
    ) == [("tiles", "levels", "off,staged", False), ("tiles", "levels", "off,staged", True)]
    for flag, value in (("--layout", "scattered,rows"), ("--order", "random"), ("--modes", "off,staged,turbo")):
        with pytest.raises(SystemExit) as e:
            device_run.main(["--out", str(tmp_path / "out"), "--skip-tests", flag, value])
        listed = LISTED[flag[2:] + ("s" if flag != "--modes" else "")]
        assert str(e.value) == (
            f"run.pyz: {flag} {value!r}: give distinct names of {', '.join(listed)} (the "
            "driver's `sam3d_bench --list-modes`), comma-separated"
        )


def test_a_driver_that_does_not_list_fails_its_variant_with_what_it_said(tmp_path, monkeypatch):
    stage, _ = _bundle(tmp_path, monkeypatch)
    (stage / "cu" / "bin" / "sam3d_bench").write_text("#!/bin/sh\necho 'sam3d_bench: error: bad' >&2\nexit 1\n")
    assert device_run.main(["--out", str(tmp_path / "out"), "--skip-tests"]) == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())["variants"]["cu"]
    assert summary["error"] == (
        f"`sam3d_bench --list-modes` did not print its {device_run.LIST_SCHEMA} list: sam3d_bench: error: bad"
    )
    # Its schema's list without the duplex modes (or with none of them): the variant fails in one line.
    for duplex in ("", ', "duplex": []'):
        doc = (
            f'{{"schema": "{device_run.LIST_SCHEMA}", "modes": [{{"name": "off"}}], '
            f'"layouts": [{{"name": "a"}}], "orders": [{{"name": "p"}}]{duplex}}}'
        )
        (stage / "cu" / "bin" / "sam3d_bench").write_text(f"#!/bin/sh\necho '{doc}'\n")
        assert device_run.main(["--out", str(tmp_path / "out"), "--skip-tests"]) == 1
        summary = json.loads((tmp_path / "out" / "summary.json").read_text())["variants"]["cu"]
        assert summary["error"] == (
            f"`sam3d_bench --list-modes` printed a {device_run.LIST_SCHEMA} list without modes, layouts, orders or "
            "duplex modes"
        )


def test_duplex_reaches_every_driver_run_and_its_summary_entry(tmp_path, monkeypatch):
    """--duplex is the batched sessions' duplex mode: passed to each driver run, the checked
    replays' too, and recorded in each summary entry (the result record's duplex where the driver
    wrote nothing); without it the driver gets no flag and the entry names the driver's default (the
    first its --list-modes lists), a run's file names name only a mode other than that default, and
    a mode the driver does not list is refused in one line naming those it does."""
    _, log = _bundle(tmp_path, monkeypatch)
    out = tmp_path / "out"
    assert device_run.main(["--out", str(out), "--skip-tests", "--duplex", "auto", "--layout", "all"]) == 0
    calls = [c for c in _calls(log, "sam3d_bench") if "--list-modes" not in c]
    assert [_flag(c, "--duplex") for c in calls] == ["auto"] * len(LISTED["layouts"])
    entries = json.loads((out / "summary.json").read_text())["variants"]["cu"]["bench"]
    assert [(e["duplex"], e["driver_output"].endswith("-duplex-auto.driver.json")) for e in entries] == [
        ("auto", True)
    ] * len(LISTED["layouts"])
    log.unlink()
    assert (
        device_run.main(["--out", str(tmp_path / "checked"), "--compute-sanitizer", "initcheck", "--duplex", "on"]) == 0
    )
    replays = [c for c in _calls(log, "sam3d_bench") if "--list-modes" not in c and "--uninitialized-areas" not in c]
    assert replays and {_flag(c, "--duplex") for c in replays} == {"on"}  # the areas canary keeps its own flags
    log.unlink()
    assert device_run.main(["--out", str(tmp_path / "plain"), "--skip-tests"]) == 0
    (call,) = [c for c in _calls(log, "sam3d_bench") if "--list-modes" not in c]
    assert "--duplex" not in call
    (entry,) = json.loads((tmp_path / "plain" / "summary.json").read_text())["variants"]["cu"]["bench"]
    assert entry["duplex"] == "single" and "-duplex-" not in entry["driver_output"]
    for wrong in ("both", "all", "off"):
        with pytest.raises(SystemExit) as e:
            device_run.main(["--out", str(out), "--skip-tests", "--duplex", wrong])
        assert str(e.value).count("\n") == 0 and "single, auto, on" in str(e.value)


def test_the_program_outside_a_bundle_says_in_one_line_where_it_runs():
    """run.py beside no manifest.json (a checkout, not a bundle): one line naming the bundle
    command and exit 1, even for --help, whose variant list comes from the manifest."""
    r = subprocess.run([sys.executable, "-m", "sam3d.device", "--help"], capture_output=True, text=True, check=False)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "no manifest.json" in r.stderr and "python -m sam3d bundle" in r.stderr
