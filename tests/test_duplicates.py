"""The duplicate-code check of `nox -s lint`: jscpd over sam3d/ and native/bench/ (.jscpd.json:
runs of 6 lines or 50 tokens, threshold 0%), installed by ci/bootstrap.sh from
ci/jscpd/package-lock.json. The lint session runs it over the checkout; here, that it runs
clean there and that it can fail."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JSCPD = ROOT / "ci" / "jscpd" / "node_modules" / ".bin" / "jscpd"


def _jscpd(*paths: Path) -> subprocess.CompletedProcess:
    assert JSCPD.is_file(), "jscpd is not installed: ci/bootstrap.sh installs it (npm ci in ci/jscpd)"
    return subprocess.run(
        [str(JSCPD), "--config", str(ROOT / ".jscpd.json"), *map(str, paths)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_python_and_cpp_have_no_duplicate_code():
    r = _jscpd()  # the paths of .jscpd.json: sam3d/ and native/bench/
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Found 0 clones" in r.stdout


def test_the_check_finds_copied_code(tmp_path):
    """The check can fail: a copied Python module and a copied C++ file are each found."""
    py, cpp = tmp_path / "py", tmp_path / "cpp"
    py.mkdir()
    cpp.mkdir()
    for name in ("a", "b"):
        shutil.copy(ROOT / "sam3d" / "results" / "stats.py", py / f"{name}.py")
        shutil.copy(ROOT / "native" / "bench" / "measure.cpp", cpp / f"{name}.cpp")
    for folder in (py, cpp):
        r = _jscpd(folder)
        assert r.returncode == 1 and "over threshold (0.0%)" in r.stdout + r.stderr
