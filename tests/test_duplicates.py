"""The duplicate-code check: pylint's duplicate-code checker over sam3d/ (threshold: .pylintrc,
6 similar lines) and jscpd over sam3d/ and native/bench/ (threshold: .jscpd.json, 0% of
runs of 6 lines / 50 tokens), both installed by ci/bootstrap.sh from the project's locks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JSCPD = ROOT / "ci" / "jscpd" / "node_modules" / ".bin" / "jscpd"


def _pylint(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylint", "--rcfile", str(ROOT / ".pylintrc"), *map(str, paths)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def _jscpd(*paths: Path) -> subprocess.CompletedProcess:
    assert JSCPD.is_file(), "jscpd is not installed: ci/bootstrap.sh installs it (npm ci in ci/jscpd)"
    return subprocess.run([str(JSCPD), "--config", str(ROOT / ".jscpd.json"), *map(str, paths)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_python_has_no_duplicate_code():
    r = _pylint(ROOT / "sam3d")
    assert (r.returncode, r.stdout.strip()) == (0, "")


def test_python_and_cpp_have_no_duplicate_code():
    r = _jscpd()  # the paths of .jscpd.json: sam3d/ and native/bench/
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Found 0 clones" in r.stdout


def test_the_checks_find_copied_code(tmp_path):
    """Both checks can fail: a copied module and a copied C++ file are found."""
    py, cpp = tmp_path / "py", tmp_path / "cpp"
    py.mkdir()
    cpp.mkdir()
    for name in ("a", "b"):
        shutil.copy(ROOT / "sam3d" / "results" / "stats.py", py / f"{name}.py")
        shutil.copy(ROOT / "native" / "bench" / "measure.cpp", cpp / f"{name}.cpp")
    r = _pylint(py / "a.py", py / "b.py")
    assert r.returncode != 0 and "R0801" in r.stdout
    for folder in (py, cpp):
        r = _jscpd(folder)
        assert r.returncode == 1 and "over threshold (0.0%)" in r.stdout + r.stderr
