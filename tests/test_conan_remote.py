"""The optional Conan remote against a real conan_server on 127.0.0.1 (tests/conan_server.py):
one Conan home uploads, a fresh one downloads the same binary instead of building it; a binary
for another glibc is not taken; a remote that stops answering means a local build and one
warning; wrong credentials one line; a failed upload leaves nothing a download would take.
The small recipe tests/data/tinylib stands in for GGML, through the code paths GGML takes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import conan_server
import pytest

from sam3d.core import variants
from sam3d.tools import conan, conan_remote

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "tinylib"
V = variants.get("cpu-asan")


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A running conan_server, configured as the project's remote with its user's credentials."""
    s = conan_server.start(tmp_path / "server")
    monkeypatch.setenv(conan_remote.REMOTE_ENV, s.url)
    monkeypatch.setenv(conan_remote.USER_ENV, conan_server.USER)
    monkeypatch.setenv(conan_remote.PASSWORD_ENV, s.password)
    monkeypatch.setattr(conan, "_remote_down", False)
    yield s
    s.stop()


def _use_home(tmp_path: Path, name: str, monkeypatch) -> Path:
    home = tmp_path / name
    monkeypatch.setenv("SAM3D_CONAN_HOME", str(home))
    conan.ensure_home([V])
    conan.run(["export", str(TINY)])
    return home


def _resolve(tmp_path: Path, name: str, command: str = "install") -> tuple[dict, str]:
    """Runs `conan install --requires tinylib` (or `create` of it) as builds run, with the remote;
    returns (tinylib's graph node, the log)."""
    log, graph = tmp_path / f"{name}.log", tmp_path / f"{name}.graph.json"
    what = ["--requires=tinylib/0.1"] if command == "install" else [str(TINY)]
    conan.run_with_remote(
        [command, *what, *conan.profile_args(V), "--build=missing", "--format=json", "--out-file", str(graph)], log=log
    )
    nodes = json.loads(graph.read_text())["graph"]["nodes"].values()
    (node,) = [n for n in nodes if str(n["ref"]).startswith("tinylib/")]
    return node, log.read_text()


def _checksums(node: dict) -> dict[str, str]:
    folder = Path(conan.run(["cache", "path", f"{node['ref']}:{node['package_id']}"]).strip())
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _publish_tiny(tmp_path: Path, monkeypatch) -> tuple[dict, dict[str, str]]:
    _use_home(tmp_path, "home-a", monkeypatch)
    node, log = _resolve(tmp_path, "a", command="create")
    assert node["binary"] == "Build" and "tinylib: compiling" in log
    conan.upload_graph(tmp_path / "a.graph.json", tmp_path / "a.log")
    return node, _checksums(node)


def test_a_fresh_home_downloads_the_published_binary_instead_of_building_it(tmp_path, monkeypatch, server):
    built, sums = _publish_tiny(tmp_path, monkeypatch)
    assert built["info"]["settings"]["os.glibc"] == conan_remote.glibc_version()
    _use_home(tmp_path, "home-b", monkeypatch)
    got, log = _resolve(tmp_path, "b")
    assert got["binary"] == "Download" and "tinylib: compiling" not in log, log
    assert (got["package_id"], got["prev"]) == (built["package_id"], built["prev"])
    assert _checksums(got) == sums


@pytest.mark.parametrize("setting, other", [("os.glibc", "2.17"), ("compiler.version", "11")])
def test_a_binary_built_against_another_glibc_or_compiler_version_is_not_taken(
    tmp_path, monkeypatch, server, setting, other
):
    built, _ = _publish_tiny(tmp_path, monkeypatch)
    assert built["info"]["settings"][setting] != other
    # Another machine: its glibc, or its compiler's major version in the variant's profile.
    if setting == "os.glibc":
        monkeypatch.setattr(conan_remote, "glibc_version", lambda: other)
    else:
        monkeypatch.setattr(conan, "compiler_version", lambda compiler="gcc": other)
    _use_home(tmp_path, "home-b", monkeypatch)
    got, log = _resolve(tmp_path, "b")
    assert got["binary"] == "Build" and "tinylib: compiling" in log
    assert got["package_id"] != built["package_id"]
    assert got["info"]["settings"][setting] == other


def test_a_remote_that_stopped_answering_means_a_local_build_and_one_warning(tmp_path, monkeypatch, server, capsys):
    _publish_tiny(tmp_path, monkeypatch)
    capsys.readouterr()
    server.stop()
    for name in ("home-b", "home-c"):  # a second build in the same run does not ask (or warn) again
        _use_home(tmp_path, name, monkeypatch)
        got, log = _resolve(tmp_path, name)
        assert got["binary"] == "Build" and "tinylib: compiling" in log
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1, warnings
    assert f"the Conan remote sam3d ({server.url}) failed" in warnings[0]
    assert "building here without it" in warnings[0]


def test_wrong_password_is_one_line_naming_the_variables(tmp_path, server):
    env = {k: v for k, v in os.environ.items() if k != "SAM3D_CONAN_HOME"}
    env.update({"SAM3D_CONAN_HOME": str(tmp_path / "home"), conan_remote.PASSWORD_ENV: "wrong"})
    r = subprocess.run(
        [sys.executable, "-m", "sam3d", "publish", "release"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith("sam3d publish: the Conan remote sam3d") and "refused the credentials" in line
    assert conan_remote.USER_ENV in line and conan_remote.PASSWORD_ENV in line


def test_an_upload_that_fails_leaves_nothing_a_download_would_take(tmp_path, monkeypatch, server):
    _use_home(tmp_path, "home-a", monkeypatch)
    built, _ = _resolve(tmp_path, "a", command="create")
    name, rrev = built["ref"].split("#")
    # The server cannot store the package's manifest (Conan uploads it last): the upload fails
    # after the archive and conaninfo.txt have arrived.
    blocker = (
        server.data / name / "_" / "_" / rrev / "package" / built["package_id"] / built["prev"] / "conanmanifest.txt"
    )
    blocker.mkdir(parents=True)
    with pytest.raises(conan.ConanError) as e:
        conan.upload_graph(tmp_path / "a.graph.json", tmp_path / "a.log")
    assert "refused the credentials" not in str(e.value)
    assert (blocker.parent / "conan_package.tgz").is_file()  # half of it is there, unlisted
    listed = json.loads(conan.run(["list", f"{name}#{rrev}:*", "-r", conan_remote.NAME, "--format=json"]))
    assert listed[conan_remote.NAME][name]["revisions"][rrev].get("packages", {}) == {}
    _use_home(tmp_path, "home-b", monkeypatch)
    got, log = _resolve(tmp_path, "b")
    assert got["binary"] == "Build" and "tinylib: compiling" in log
    # Once the server can store it, the same upload completes and is downloaded.
    blocker.rmdir()
    monkeypatch.setenv("SAM3D_CONAN_HOME", str(tmp_path / "home-a"))
    conan.upload_graph(tmp_path / "a.graph.json", tmp_path / "a.log")
    _use_home(tmp_path, "home-c", monkeypatch)
    got, _ = _resolve(tmp_path, "c")
    assert got["binary"] == "Download" and got["prev"] == built["prev"]
