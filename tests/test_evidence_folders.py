"""Evidence folders are old or new, never half: a writer that fails or is interrupted (an error,
Ctrl-C, a full disk) leaves the previous folder or none, and its rerun is not refused
(core/files.py staged_folder, recover_folder; docs/benchmark.md, "Evidence"). Each case: the
command or the protocol step, what it returns or prints, and what is on disk afterwards."""

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sam3d import cli
from sam3d.core import files, paths
from sam3d.core.errors import Sam3dError
from sam3d.results import evidence

DATA = Path(__file__).parent / "data"
RESULT = DATA / "cpu-asan-run2.json"


def _old(folder: Path) -> Path:
    """An existing evidence folder to protect: one file whose text the tests look for."""
    folder.mkdir(parents=True)
    (folder / "table.md").write_text("the old table\n")
    return folder


def _intact(folder: Path) -> bool:
    siblings = sorted(p.name for p in folder.parent.iterdir())
    return (folder / "table.md").read_text() == "the old table\n" and siblings == [folder.name]


# ---------------------------------------------------------------- the protocol, step by step
def test_a_complete_block_replaces_the_old_folder_and_leaves_nothing_beside_it(tmp_path):
    final = _old(tmp_path / "out" / "keep")
    with files.staged_folder(final, force=True) as staged:
        assert staged.parent == final.parent and staged.name.startswith(".keep.new-")
        (staged / "table.md").write_text("new\n")
        assert (final / "table.md").read_text() == "the old table\n"  # untouched until the end
    assert (final / "table.md").read_text() == "new\n"
    assert sorted(p.name for p in final.parent.iterdir()) == ["keep"]


@pytest.mark.parametrize("raised", [KeyboardInterrupt, RuntimeError, Sam3dError])
def test_a_block_that_raises_leaves_the_old_folder_and_nothing_else(tmp_path, raised):
    final = _old(tmp_path / "out" / "keep")
    with pytest.raises(raised):
        with files.staged_folder(final) as staged:
            (staged / "table.md").write_text("half\n")
            raise raised("stop")
    assert _intact(final)


def test_a_full_disk_names_the_folder_and_says_nothing_was_replaced(tmp_path):
    final = _old(tmp_path / "out" / "keep")
    with pytest.raises(Sam3dError) as e:
        with files.staged_folder(final) as staged:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(staged / "timings.png"))
    assert str(e.value).startswith(f"{final} could not be written (No space left on device: ")
    assert str(e.value).endswith("; nothing was replaced")
    assert _intact(final)


def test_an_interrupt_between_the_two_renames_puts_the_old_folder_back(tmp_path, monkeypatch):
    final = _old(tmp_path / "out" / "keep")
    real = os.rename
    calls = []

    def rename(src, dst):
        calls.append(dst)
        if len(calls) == 2:  # the old folder moved aside, the new one not yet in place
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(files.os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        with files.staged_folder(final, force=True) as staged:
            (staged / "table.md").write_text("new\n")
    assert _intact(final)


def _dead_pid() -> str:
    return subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()


def test_a_kill_between_the_two_renames_is_undone_by_the_next_command(tmp_path):
    """What a writer killed between the two renames leaves: no folder, its old copy and the
    complete new one beside it. The next new_folder() puts the old one back and removes the
    dead writer's, so the folder is as before the killed run, and a rerun replaces it."""
    final = _old(tmp_path / "out" / "keep")
    pid = _dead_pid()
    final.rename(final.parent / f".keep.old-{pid}")
    (final.parent / f".keep.new-{pid}").mkdir()
    with pytest.raises(Sam3dError, match="already exists"):
        paths.new_folder("keep", "--name", final.parent)
    assert _intact(final)
    with files.staged_folder(paths.new_folder("keep", "--name", final.parent, force=True), force=True) as staged:
        (staged / "table.md").write_text("rerun\n")
    assert (final / "table.md").read_text() == "rerun\n"


def test_an_interrupt_after_the_renames_leaves_the_new_folder_and_the_next_command_clears_the_old(
    tmp_path, monkeypatch
):
    final = _old(tmp_path / "out" / "keep")

    def rmtree(path, ignore_errors=False):
        if ".keep.old-" in str(path):
            raise KeyboardInterrupt

    monkeypatch.setattr(files.shutil, "rmtree", rmtree)
    with pytest.raises(KeyboardInterrupt):
        with files.staged_folder(final, force=True) as staged:
            (staged / "table.md").write_text("new\n")
    monkeypatch.undo()
    assert (final / "table.md").read_text() == "new\n" and len(list(final.parent.iterdir())) == 2
    files.recover_folder(final)
    assert sorted(p.name for p in final.parent.iterdir()) == ["keep"]


def test_a_killed_writer_s_staged_folder_is_removed_by_the_next_command(tmp_path):
    final = _old(tmp_path / "out" / "keep")
    (final.parent / f".keep.new-{_dead_pid()}").mkdir()
    files.recover_folder(final)
    assert _intact(final)


def test_without_force_a_folder_another_command_wrote_meanwhile_is_not_replaced(tmp_path):
    """Two commands of the same name at once: the second to finish finds the folder taken and
    refuses, naming it; the first one's folder stays."""
    final = tmp_path / "out" / "keep"
    with pytest.raises(Sam3dError) as e:
        with files.staged_folder(final) as staged:
            (staged / "table.md").write_text("second\n")
            _old(final)  # the first command finished meanwhile
    assert str(e.value) == f"{final} could not be written (another command wrote it meanwhile); nothing was replaced"
    assert _intact(final)


def test_a_symbolic_link_or_a_file_at_the_name_is_refused_before_any_work(tmp_path):
    target = _old(tmp_path / "elsewhere")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "link").symlink_to(target)
    (tmp_path / "out" / "file").write_text("x")
    for name in ("link", "file"):
        with pytest.raises(Sam3dError, match="exists and is not a folder"):
            paths.new_folder(name, "--name", tmp_path / "out", force=True)
    assert (target / "table.md").read_text() == "the old table\n"


def test_a_name_longer_than_a_folder_name_can_be_is_refused(tmp_path):
    paths.new_folder("n" * paths.MAX_NAME, "--name", tmp_path)
    with pytest.raises(Sam3dError, match=f"--name is {paths.MAX_NAME + 1} characters long: use at most"):
        paths.new_folder("n" * (paths.MAX_NAME + 1), "--name", tmp_path)


def test_recovery_touches_only_its_own_name_s_siblings(tmp_path):
    """.x.old-5.old-<pid> is what a replacement of the folder "x.old-5" leaves, not one of x's."""
    pid = _dead_pid()
    other = _old(tmp_path / f".x.old-5.old-{pid}")
    files.recover_folder(tmp_path / "x")
    assert not (tmp_path / "x").exists() and (other / "table.md").is_file()


# ---------------------------------------------------------------- the commands
def _report(tmp_path, *inputs, name="keep"):
    return cli.main(["report", "--out", str(tmp_path / "out"), "--name", name, "--force", *map(str, inputs)])


def test_report_force_with_a_mistyped_input_keeps_the_old_folder(tmp_path, capsys):
    final = _old(tmp_path / "out" / "keep")
    assert _report(tmp_path, tmp_path / "no-such-file.json") == 2
    assert capsys.readouterr().err.startswith("sam3d report: ")
    assert _intact(final)


@pytest.mark.parametrize("point", ["write_evidence", "plot", "write_atomic"])
def test_report_interrupted_while_writing_keeps_the_old_folder_and_its_rerun_succeeds(
    tmp_path, capsys, monkeypatch, point
):
    final = _old(tmp_path / "out" / "keep")

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(evidence, point, interrupt)
    assert _report(tmp_path, RESULT) == 130
    assert capsys.readouterr().err == "sam3d report: interrupted\n"
    assert _intact(final)
    monkeypatch.undo()
    assert _report(tmp_path, RESULT) in (0, 1)
    assert (final / "table.md").read_text().startswith("# keep") and (final / "timings.png").is_file()


def test_report_on_a_full_disk_says_so_in_one_line_and_replaces_nothing(tmp_path, capsys, monkeypatch):
    final = _old(tmp_path / "out" / "keep")

    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(evidence, "write_atomic", full)
    assert _report(tmp_path, RESULT) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"sam3d report: {final} could not be written (No space left on device")
    assert line.endswith("nothing was replaced")
    assert _intact(final)


def test_report_terminated_keeps_the_old_folder_and_readers_skip_nothing_half(tmp_path):
    """SIGTERM (kill, timeout, systemd) unwinds like Ctrl-C: one line, exit 143, the old folder
    intact; and a staged folder, while it exists, is never read as evidence."""
    final = _old(tmp_path / "out" / "keep")
    script = (
        "import os, signal, sys\n"
        "from sam3d.results import evidence\n"
        "real = evidence.write_evidence\n"
        "def stop(*a, **k):\n"
        "    real(*a, **k)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "evidence.write_evidence = stop\n"
        "from sam3d.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "report",
            "--out",
            str(tmp_path / "out"),
            "--name",
            "keep",
            "--force",
            str(RESULT),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 143 and r.stderr == "sam3d report: terminated\n", r.stderr
    assert _intact(final)
    half = tmp_path / "out" / f".keep.new-{os.getpid()}"
    shutil.copytree(DATA, half / "results")
    from sam3d.results import record

    assert record.result_files(tmp_path / "out") == []


def test_device_import_interrupted_keeps_the_old_folder(tmp_path, capsys, monkeypatch):
    from test_cli import _summary

    from sam3d.cli import bench as bench_cmd

    raw = _summary(
        tmp_path,
        manifest__variants__release__build={
            "compile_flags": ["-O2"],
            "build_type": "Release",
            "ggml_version": "0.20.2",
        },
    )
    monkeypatch.setenv("SAM3D_ROOT", str(tmp_path / "root"))
    final = _old(paths.diagnostics_dir() / "dev")

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_cmd.table, "device_tests", interrupt)
    assert cli.main(["device-import", str(raw), "--name", "dev", "--force"]) == 130
    assert _intact(final)
    # a summary that does not fit the result record: refused, nothing replaced
    (tmp_path / "bad").mkdir()
    bad = _summary(tmp_path / "bad")
    assert cli.main(["device-import", str(bad), "--name", "dev", "--force"]) == 2
    assert "the release Vulkan run's result: field 'build.compile_flags': Field required" in capsys.readouterr().err
    assert _intact(final)
    monkeypatch.undo()
    monkeypatch.setenv("SAM3D_ROOT", str(tmp_path / "root"))
    cli.main(["device-import", str(raw), "--name", "dev", "--force"])
    assert (final / "device-tests.md").is_file() and len(list(final.parent.iterdir())) == 1


def test_a_real_sigint_during_a_benchmark_run_keeps_the_old_folder_and_the_logs(tmp_path):
    """`sam3d bench --no-build release --images 1 --warmups 0` stopped by SIGINT while its driver
    runs: one line, exit 130, the old evidence folder as it was, the driver's log kept in
    build/logs/bench-<name>/; the rerun succeeds. Needs release built."""
    from sam3d.core import variants
    from sam3d.running import bench as bench_runner

    try:
        bench_runner.require_built([variants.get("release")])
    except Sam3dError as e:
        pytest.skip(str(e))
    name = f"pytest-sigint-{os.getpid()}"
    final = _old(paths.diagnostics_dir() / name)
    kept = paths.logs_dir() / f"bench-{name}"
    cmd = [
        sys.executable,
        "-m",
        "sam3d",
        "bench",
        "--no-build",
        "--name",
        name,
        "--force",
        "--images",
        "1",
        "--warmups",
        "0",
        "release",
    ]
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        for line in p.stdout:
            if "warm-ups" in line:  # the first driver has started
                break
        time.sleep(0.2)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 130, out + err
        assert "Traceback" not in err and err.splitlines()[-1] == "sam3d bench: interrupted"
        assert (final / "table.md").read_text() == "the old table\n"
        assert not [q for q in final.parent.iterdir() if q.name.startswith(f".{name}.")]
        assert any(kept.glob("bench-release-*.log"))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert (final / "table.md").read_text().startswith(f"# {name}")
    finally:
        shutil.rmtree(final, ignore_errors=True)
        shutil.rmtree(kept, ignore_errors=True)
