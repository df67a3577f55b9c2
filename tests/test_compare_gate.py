"""`sam3d compare` as a gate, on real result files: tests/data/cpu-asan-run{1,2}.json are two
consecutive `sam3d bench --no-build --images 100 --warmups 3 cpu-asan` runs of one build on the
project's 2-core machine while other builds ran on it (load average 7-8): run 1 was measured
under more load, and run 2 is really about 35 % faster. tests/data/cpu-asan-pair-{a,b}.json are
two such runs of one build started at the same moment (`--images 100 --warmups 3`, load average
1-3), so that both saw the same machine."""

import copy
import json
import shutil
from pathlib import Path

import pytest

from sam3d import cli
from sam3d.results import record

DATA = Path(__file__).parent / "data"


def _folder(tmp_path, name, result):
    """A folder holding ``result`` (a result document) as its one result file."""
    record.write(tmp_path / name / "result.json", record.parse(result))
    return str(tmp_path / name)


def _load(name):
    """A result file of tests/data as the document of its record (version 1, migrated)."""
    return record.read(DATA / name).document()


def _numbers(doc):
    """Asserts `compare --format json`'s numbers are JSON numbers and its text has no Markdown."""
    assert "**" not in json.dumps(doc)
    assert isinstance(doc["min_effect"], float) and isinstance(doc["alpha"], float)
    assert isinstance(doc["changed"], int)
    for r in doc["rows"]:
        assert isinstance(r["ratio"], float) and isinstance(r["p"], float)
        for side in (r["a"], r["b"]):
            assert isinstance(side["median_ms"], float) and side["failed"] is None, side
    return doc


def _scaled(result, factor, reverse=False):
    r = copy.deepcopy(result)
    for row in r["rows"]:
        walls = [s["wall_ms"] for s in row["samples"]]
        for s, w in zip(row["samples"], reversed(walls) if reverse else walls):
            s["wall_ms"] = w * factor
    return r


@pytest.fixture
def run1():
    return _load("cpu-asan-run2.json")


def test_two_real_runs_of_one_build_at_the_same_time_are_no_change(tmp_path, capsys):
    """Two real runs of the same build under the same load: no row changed, exit 0 even with
    --fail-on any (B/A 0.97 and 0.99, p 0.6-0.7)."""
    a = _folder(tmp_path, "a", _load("cpu-asan-pair-a.json"))
    b = _folder(tmp_path, "b", _load("cpu-asan-pair-b.json"))
    assert cli.main(["compare", "--fail-on", "any", "--format", "json", a, b]) == 0
    rows = _numbers(json.loads(capsys.readouterr().out))["rows"]
    assert [(r["batching"], r["verdict"]) for r in rows] == [("off", "no change"), ("on", "no change")]
    assert all(r["p"] > 0.05 for r in rows)
    assert all(0.95 < r["ratio"] < 1.0 for r in rows)


def test_the_same_samples_in_another_order_are_no_change(tmp_path, run1, capsys):
    """The run against its own samples in reverse image order (the same distribution): every
    row B/A 1.000, p 1, exit 0 even with --fail-on any."""
    a = _folder(tmp_path, "a", run1)
    b = _folder(tmp_path, "b", _scaled(run1, 1.0, reverse=True))
    assert cli.main(["compare", "--fail-on", "any", "--format", "json", a, b]) == 0
    doc = _numbers(json.loads(capsys.readouterr().out))
    assert [(r["batching"], r["ratio"], r["verdict"]) for r in doc["rows"]] == [
        ("off", 1.0, "no change"),
        ("on", 1.0, "no change"),
    ]
    assert all(r["a"]["median_ms"] == r["b"]["median_ms"] for r in doc["rows"])


def test_samples_made_10_percent_slower_fail_the_gate(tmp_path, run1, capsys):
    """The quieter run's 100 samples per row made 10 % slower: significant (Mann-Whitney p
    below 1e-4) and beyond the 5 % minimum effect."""
    a = _folder(tmp_path, "a", run1)
    b = _folder(tmp_path, "b", _scaled(run1, 1.10))
    assert cli.main(["compare", "--fail-on", "slower", a, b]) == 1
    out, err = capsys.readouterr()
    assert out.count("**slower**") == 2 and "| 1.100 |" in out
    assert "sam3d compare: 2 row(s) slower: cpu-asan CPU off B/A 1.100" in err
    assert cli.main(["compare", "--fail-on", "faster", a, b]) == 0  # slower is not faster
    assert cli.main(["compare", a, b]) == 0  # no --fail-on: a report
    # 10 % is below a minimum effect of 15 %
    assert cli.main(["compare", "--fail-on", "slower", "--min-effect", "0.15", a, b]) == 0


def test_two_real_runs_under_different_load(tmp_path, run1, capsys):
    """Run 1 (more load) against run 2: faster, which --fail-on slower lets pass and --fail-on
    faster or any does not; the other way round it is slower."""
    a = _folder(tmp_path, "a", _load("cpu-asan-run1.json"))
    b = _folder(tmp_path, "b", run1)
    assert cli.main(["compare", "--fail-on", "slower", "--format", "json", a, b]) == 0
    rows = _numbers(json.loads(capsys.readouterr().out))["rows"]
    assert {r["verdict"] for r in rows} == {"faster"} and all(0.6 < r["ratio"] < 0.7 for r in rows)
    assert all(r["ratio"] == pytest.approx(r["b"]["median_ms"] / r["a"]["median_ms"]) for r in rows)
    assert cli.main(["compare", "--fail-on", "faster", a, b]) == 1
    assert cli.main(["compare", "--fail-on", "any", a, b]) == 1
    assert cli.main(["compare", "--fail-on", "slower", b, a]) == 1


def test_one_run_gate_on_not_slower_than_off(tmp_path, run1):
    """sam3d.ci gate (the CI job's speed gate): the real run passes (on and off within noise);
    its on row made 10 % slower fails."""
    from sam3d import ci

    assert ci.gate(Path(_folder(tmp_path, "ok", run1))) == []
    slow = copy.deepcopy(run1)
    for s in next(r for r in slow["rows"] if r["batching"] == "on")["samples"]:
        s["wall_ms"] *= 1.10
    problems = ci.gate(Path(_folder(tmp_path, "slow", slow)))
    assert len(problems) == 1 and "CPU batching on is slower than off" in problems[0]


def _failed(result):
    r = copy.deepcopy(result)
    r.update(status="failed", reason="the driver exited 1", rows=[])
    return r


def test_the_gate_fails_closed_on_a_failed_run_a_one_sided_row_and_a_not_accepted_folder(
    tmp_path, run1, capsys, monkeypatch
):
    """--fail-on any exits 1 naming each: B's run failed; B lacks a row A has; B's folder is
    marked NOT-ACCEPTED. --accept lets each kind pass, and only that kind."""
    a = _folder(tmp_path, "a", run1)
    failed = _folder(tmp_path, "failed", _failed(run1))
    assert cli.main(["compare", "--fail-on", "any", a, failed]) == 1
    err = capsys.readouterr().err
    assert "the gate cannot pass" in err and "not comparable (failed)" in err
    assert cli.main(["compare", "--fail-on", "any", "--accept", "failed", a, failed]) == 0

    one_row = copy.deepcopy(run1)
    one_row["rows"] = [r for r in one_row["rows"] if r["batching"] == "off"]
    b = _folder(tmp_path, "one-row", one_row)
    assert cli.main(["compare", "--fail-on", "any", a, b]) == 1
    assert "cpu-asan CPU" in (err := capsys.readouterr().err) and ": only in A" in err
    assert cli.main(["compare", "--fail-on", "any", "--accept", "missing", a, b]) == 0
    capsys.readouterr()

    marked = Path(_folder(tmp_path, "marked", run1))
    (marked / "NOT-ACCEPTED").write_text("a variant failed to build\n")
    assert cli.main(["compare", "--fail-on", "any", a, str(marked)]) == 1
    out, err = capsys.readouterr()
    assert "WARNING: not accepted evidence: B (" in out and "NOT-ACCEPTED is there" in err
    assert cli.main(["compare", "--fail-on", "any", "--accept", "missing,failed", a, str(marked)]) == 1
    assert cli.main(["compare", "--fail-on", "any", "--accept", "not-accepted", a, str(marked)]) == 0
    # the marker of an evidence folder below the one named, or named through its results/ from inside it
    parent = tmp_path / "parent"
    shutil.copytree(marked, parent / "marked")
    assert cli.main(["compare", "--fail-on", "any", a, str(parent)]) == 1
    monkeypatch.chdir(marked)
    assert cli.main(["compare", "--fail-on", "any", a, "."]) == 1
    assert cli.main(["compare", "--fail-on", "any", a, "result.json"]) == 1
    capsys.readouterr()
    # without --fail-on it stays a report, and --accept without it is refused
    assert cli.main(["compare", a, failed]) == 0
    assert cli.main(["compare", "--accept", "failed", a, failed]) == 2
    assert "--accept says what a gate lets pass: it needs --fail-on" in capsys.readouterr().err


def test_each_side_that_is_not_accepted_is_named_before_the_table(tmp_path, run1, capsys):
    """A and B both marked NOT-ACCEPTED: the comparison names each side with its folder and its
    marker, A first, as warnings under the sides' names and a blank line before the caption;
    the gate names both, and --format json lists both."""
    a, b = (Path(_folder(tmp_path, name, run1)) for name in ("a", "b"))
    for folder in (a, b):
        (folder / "NOT-ACCEPTED").write_text("a device test failed\n")
    why = [f"A ({a}): {a.resolve() / 'NOT-ACCEPTED'} is there", f"B ({b}): {b.resolve() / 'NOT-ACCEPTED'} is there"]
    assert cli.main(["compare", "--fail-on", "any", str(a), str(b)]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[:6] == [
        f"A: {a}",
        f"B: {b}",
        "",
        *(f"WARNING: not accepted evidence: {x}" for x in why),
        "",
    ]
    assert out.splitlines()[6].startswith("all rows: variant=cpu-asan")
    assert all(f"not accepted evidence: {x}" in err for x in why)
    assert cli.main(["compare", "--format", "json", str(a), str(b)]) == 0
    assert json.loads(capsys.readouterr().out)["not_accepted"] == why


@pytest.mark.parametrize(
    "argv", [["--alpha", "0"], ["--alpha", "1"], ["--alpha", "-0.1"], ["--accept", "slower"], ["--accept", ""]]
)
def test_the_gate_s_settings_outside_their_range_are_refused(tmp_path, run1, capsys, argv):
    a = _folder(tmp_path, "a", run1)
    with pytest.raises(SystemExit) as e:
        cli.main(["compare", "--fail-on", "any", *argv, a, a])
    assert e.value.code == 2 and argv[0] in capsys.readouterr().err


def test_the_one_run_gate_fails_on_a_failed_result_and_on_an_empty_folder(tmp_path, run1):
    from sam3d import ci

    problems = ci.gate(Path(_folder(tmp_path, "failed", _failed(run1))))
    assert len(problems) == 1 and "CPU failed: the driver exited 1" in problems[0]
    (tmp_path / "empty").mkdir()
    assert ci.gate(tmp_path / "empty") == [
        f"{tmp_path / 'empty'}: no result files: nothing shows the run was not slower"
    ]


def test_the_one_run_gate_counts_a_failed_result_that_is_not_utf8(tmp_path, run1):
    """A result file that mentions the schema but does not decode is an error, not skipped."""
    from sam3d import ci
    from sam3d.results.record import ResultError

    folder = Path(_folder(tmp_path, "ok", run1))
    failed = json.dumps(_failed(run1)).replace("the driver exited 1", "the driver exited \\u00ff")
    (folder / "failed.json").write_bytes(failed.replace("\\u00ff", "\udcff").encode("utf-8", "surrogateescape"))
    with pytest.raises(ResultError, match="failed.json: not UTF-8 text"):
        ci.gate(folder)
