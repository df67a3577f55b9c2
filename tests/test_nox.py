"""noxfile.py as nox's users see it: `nox -l`, tags, and a run outside the project's environment."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOX = str(Path(sys.executable).with_name("nox"))


def _nox(*args, env=None):
    return subprocess.run(
        [NOX, "-f", str(ROOT / "noxfile.py"), *args], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
    )


def _sessions(listing):
    """{session: (tags, description)} from `nox -l`'s "* name [tags] -> text" lines."""
    out = {}
    for line in listing.splitlines():
        if line[:2] in ("* ", "- ") and " -> " in line:
            head, text = line[2:].split(" -> ", 1)
            name, _, tags = head.partition(" ")
            out[name] = (tags.strip("[]").split(", "), text)
    return out


def test_every_description_is_one_complete_sentence():
    sessions = _sessions(_nox("-l").stdout)
    assert {"build", "sanitize", "tests", "bench", "report", "device", "bundle"} <= set(sessions)
    for name, (_, text) in sessions.items():
        assert text.endswith("."), (name, text)


def test_a_tag_selects_only_the_sessions_it_names():
    for tag, want in (
        ("bench", {"bench"}),
        ("report", {"report"}),
        ("device", {"device"}),
        ("test", {"tests", "sanitize", "validate"}),
    ):
        selected = {
            line[2:].split(" ")[0] for line in _nox("-t", tag, "-l").stdout.splitlines() if line.startswith("* ")
        }
        assert selected == want, tag


def test_outside_the_environment_a_session_stops_in_one_line():
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/bin:/bin"
    r = _nox("-s", "report", env=env)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "run `ci/bootstrap.sh nox ...` (e.g. ci/bootstrap.sh nox -s report)" in out
    assert "Traceback" not in out and "not found" not in out


def test_no_uv_probe_noise():
    # the environment ci/bootstrap.sh gives a session (its PATH and VIRTUAL_ENV), whoever runs pytest
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin", VIRTUAL_ENV=sys.prefix)
    r = _nox("-s", "report", "--", "--help", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "uv binary not found" not in r.stdout + r.stderr
    assert "usage: " in r.stdout


def test_plain_nox_runs_lint_alone_the_session_that_builds_nothing():
    """`nox -l` marks the sessions plain `nox` runs with "*": lint only, and lint names no sam3d
    command that builds (ruff and jscpd)."""
    listing = _nox("-l").stdout.splitlines()
    assert [line[2:].split(" ")[0] for line in listing if line.startswith("* ")] == ["lint"]
    src = (ROOT / "noxfile.py").read_text()
    body = src[src.index("def lint(") : src.index("\n@nox.session", src.index("def lint("))]
    assert '"ruff", "check"' in body and '"ruff", "format", "--check"' in body and "jscpd" in body
    assert "_sam3d(" not in body and "\"sam3d\"" not in body
