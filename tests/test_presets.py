"""CMake test presets: `ctest --preset <variant>` (in native/) runs as `python -m sam3d ctest` does."""

import os
import subprocess
from pathlib import Path

import pytest

from sam3d.core import paths, variants
from sam3d.tools import ctest

ROOT = Path(__file__).resolve().parents[1]
CTEST = paths.tool("ctest")


def _built(name):
    v = variants.get(name)
    if not (ctest.build_folder(v) / "CTestTestfile.cmake").is_file():
        pytest.skip(f"{name} is not built (python -m sam3d build {name})")
    ctest.write_presets(v)
    return v


@pytest.mark.parametrize("name", [v.name for v in variants.VARIANTS])
def test_preset_carries_the_test_environment(name, tmp_path):
    v = _built(name)
    p = ctest.test_preset(v)
    want = ctest.test_env(v, base={})
    assert {k: x for k, x in p["environment"].items() if x is not None} == want
    assert p["environment"]["SAM3D_BATCHED_TRANSFERS"] is None
    if v.ubsan:
        assert "halt_on_error=1" in want["UBSAN_OPTIONS"]
    # the same tests as `ctest -L normal` in the build folder
    listed = subprocess.run(
        [CTEST, "--preset", name, "-N", "--output-junit", str(tmp_path / "j.xml")],
        cwd=ROOT / "native",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[-1]
    direct = subprocess.run(
        [CTEST, "--test-dir", str(ctest.build_folder(v)), "-L", "normal", "-N"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[-1]
    assert listed == direct and listed.startswith("Total Tests: ")


def test_preset_fails_on_a_planted_ub_report(tmp_path, monkeypatch):
    """The UB canary as a plain test (no WILL_FAIL): UBSan is compiled recoverable, so only the
    environment makes its report fatal. Without it the test passes; with the preset, and with
    `python -m sam3d ctest`'s runner, it fails."""
    v = _built("cpu-asan")
    canary = ctest.build_folder(v) / "tests" / "sanitizer_canary_ub"
    (tmp_path / "CTestTestfile.cmake").write_text(
        f'add_test(planted_ub "{canary}")\nset_tests_properties(planted_ub PROPERTIES LABELS normal)\n'
    )
    junit = ["--output-junit", str(tmp_path / "junit.xml")]
    bare = {k: x for k, x in os.environ.items() if not k.endswith("SAN_OPTIONS")}
    plain = subprocess.run(
        [CTEST, "--test-dir", str(tmp_path), "-L", "normal", "-V"], env=bare, capture_output=True, text=True
    )
    assert plain.returncode == 0 and "runtime error: signed integer overflow" in plain.stdout
    preset = subprocess.run(
        [CTEST, "--preset", "cpu-asan", "--test-dir", str(tmp_path), *junit],
        cwd=ROOT / "native",
        env=bare,
        capture_output=True,
        text=True,
    )
    assert preset.returncode != 0, preset.stdout
    assert "runtime error: signed integer overflow" in preset.stdout and "planted_ub (Failed)" in preset.stdout
    monkeypatch.setattr(ctest, "build_folder", lambda _v: tmp_path)
    monkeypatch.setattr(ctest, "junit_path", lambda _v, _label: tmp_path / "sam3d.xml")
    monkeypatch.setattr(os, "environ", bare)
    log = tmp_path / "ctest.log"
    assert ctest.run(v, "normal", log=log) != 0
    assert "planted_ub (Failed)" in log.read_text()
