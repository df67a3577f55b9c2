"""The Python mutation campaign's bookkeeping (sam3d/running/pymutants.py): the equivalents
file, the score and what fails a run. The campaign itself: `sam3d mutants --python`."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from sam3d.cli.main import main as cli_main
from sam3d.running import pymutants
from sam3d.running.pymutants import Equivalent, Score

ENTRY = '''
[[equivalent]]
function = "sam3d.results.stats.x_median"
change = "return float(np.median(_values(samples)))"
reason = "the same"
'''


def _load(tmp_path, text):
    p = tmp_path / "eq.toml"
    p.write_text(text)
    return pymutants.load_equivalents(p)


def test_the_committed_equivalents_load_each_with_a_reason():
    for e in pymutants.load_equivalents():
        assert e.function.startswith("sam3d.results.") and "__mutmut_" not in e.function
        assert e.change and len(e.reason) > 20


def test_an_entry_loads(tmp_path):
    assert _load(tmp_path, ENTRY) == [
        Equivalent("sam3d.results.stats.x_median", "return float(np.median(_values(samples)))", "the same")
    ]


@pytest.mark.parametrize(
    "change, message",
    [
        (('reason = "the same"', 'reason = " "'), r"equivalent\[0\]: missing reason"),
        (('change = "return float(np.median(_values(samples)))"\n', ''), "missing change"),
    ],
)
def test_an_entry_without_its_change_or_reason_is_refused(tmp_path, change, message):
    with pytest.raises(pymutants.PyMutantError, match=message):
        _load(tmp_path, ENTRY.replace(*change))


def test_an_entry_listed_twice_is_refused(tmp_path):
    with pytest.raises(pymutants.PyMutantError, match="listed twice"):
        _load(tmp_path, ENTRY + ENTRY)


def test_the_equivalents_still_match_when_an_edit_renumbers_mutmut_s_mutants():
    """mutmut numbers a function's mutants in order, so a statement added above a mutated line
    renames its mutants (x_f__mutmut_24 becomes x_f__mutmut_26); the entries, keyed by the
    function and the change, still match the same mutants: the same equivalents, nothing stale.
    The mutants are mutmut's own, made from the committed sam3d/results/limits.py and from a
    copy with one line added at the top of mandatory_waits."""
    path = Path("sam3d") / "results" / "limits.py"
    function = "sam3d.results.limits.x_mandatory_waits"
    entries = [e for e in pymutants.load_equivalents() if e.function == function]
    assert len(entries) >= 2
    code = (pymutants.paths.root() / path).read_text()
    lines = code.splitlines(keepends=True)
    node = next(n for n in ast.parse(code).body if isinstance(n, ast.FunctionDef) and n.name == "mandatory_waits")
    first = node.body[1].lineno - 1  # the first statement after the docstring
    edited = "".join(lines[:first] + ["    shift = 1\n"] + lines[first:])

    def equivalent(text, added):
        changes = pymutants.changes(path, text, set(range(node.lineno, node.end_lineno + 1 + added)))
        mine = {m: c for m, c in changes.items() if pymutants.function_of(m) == function}
        s = Score({m: "survived" for m in mine}, entries, mine)
        assert s.stale == []
        return {mine[m]: m for m in s.equivalent}

    before, after = equivalent(code, 0), equivalent(edited, 1)
    assert sorted(before) == sorted(after) == sorted(e.change for e in entries)
    assert all(before[c] != after[c] for c in before)  # each renamed, each still listed


def _score(statuses, equivalents=(), changes=None):
    """A Score whose survivors each change "x" (or ``changes``' text), with entries listing the
    mutants in ``equivalents`` (by their function and that change)."""
    changes = {m: "x" for m, st in statuses.items() if st in pymutants.UNDETECTED} | (changes or {})
    return Score(
        dict(statuses),
        [Equivalent(pymutants.function_of(m), changes.get(m, "x"), "a reason") for m in equivalents],
        changes,
    )


def test_the_score_is_detected_over_all_but_the_equivalents():
    s = _score(
        {
            "f__mutmut_1": "killed",
            "f__mutmut_2": "killed",
            "g__mutmut_1": "timeout",
            "g__mutmut_2": "survived",
            "h__mutmut_1": "survived",
        },
        ["h__mutmut_1"],
        {"g__mutmut_2": "y"},
    )
    assert (s.detected, s.scored, s.ratio) == (3, 4, 0.75)
    assert s.unexplained == ["g__mutmut_2"] and not s.ok
    assert "5 mutants: 2 killed, 1 timed out, 1 equivalent, 1 survived; score 3/4 = 75.0%" in s.summary()


def test_a_run_passes_with_every_survivor_explained_at_90_percent():
    killed = {f"k__mutmut_{i}": "killed" for i in range(9)}
    assert _score({**killed, "e__mutmut_1": "survived"}, ["e__mutmut_1"]).ok
    # 9 of 10 scored detected: exactly the target.
    run = {**killed, "s__mutmut_1": "no tests", "e__mutmut_1": "survived"}
    assert _score(run, ["e__mutmut_1"]).ratio == 0.9
    assert not _score(run, ["e__mutmut_1"]).ok  # s is unexplained


def test_a_run_fails_below_the_target_even_with_every_survivor_listed():
    s = _score({"k__mutmut_1": "killed", "a__mutmut_1": "survived", "b__mutmut_1": "survived"}, ["a__mutmut_1"])
    assert s.ratio == 0.5 and not s.ok


def test_an_entry_matches_by_function_and_change_whatever_the_mutants_number():
    """An edit elsewhere in the function renumbers its mutants: the entry still matches the
    survivor that makes the listed change, and no other survivor of that function."""
    entry = Equivalent("sam3d.results.stats.x_median", "return None", "a reason")
    run = {"sam3d.results.stats.x_median__mutmut_7": "survived", "sam3d.results.stats.x_median__mutmut_8": "survived"}
    s = Score(
        run,
        [entry],
        {"sam3d.results.stats.x_median__mutmut_7": "return 0", "sam3d.results.stats.x_median__mutmut_8": "return None"},
    )
    assert s.equivalent == {"sam3d.results.stats.x_median__mutmut_8"}
    assert s.unexplained == ["sam3d.results.stats.x_median__mutmut_7"] and s.stale == []


def test_an_entry_that_matches_no_survivor_fails_the_run_unless_its_function_is_unchecked():
    killed = Equivalent("k", "x", "a reason")  # its mutant is killed now
    changed = Equivalent("c", "old line", "a reason")  # its line reads otherwise now
    waiting = Equivalent("n", "x", "a reason")  # its function's mutants are not all checked
    s = Score(
        {"k__mutmut_1": "killed", "c__mutmut_1": "survived", "n__mutmut_1": "not checked"},
        [killed, changed, waiting],
        {"c__mutmut_1": "new line"},
    )
    assert s.stale == [killed, changed] and not s.ok
    assert s.equivalent == set() and s.unexplained == ["c__mutmut_1"]


def test_an_unfinished_run_fails():
    s = _score({"k__mutmut_1": "killed", "n__mutmut_1": "not checked"})
    assert s.unfinished == ["n__mutmut_1"] and not s.ok


def test_without_mutmut_the_error_names_the_bootstrap(monkeypatch, tmp_path):
    monkeypatch.setattr(pymutants.sys, "executable", str(tmp_path / "bin" / "python"))
    with pytest.raises(pymutants.PyMutantError, match=r"run through ci/bootstrap.sh.*python -m sam3d mutants --python"):
        pymutants._mutmut()


def test_the_core_options_are_refused_with_python(capsys):
    assert cli_main(["mutants", "--python", "--no-build"]) == 2
    assert "--no-build: options of the core's mutants, not of --python" in capsys.readouterr().err


def test_the_table_counts_each_module_and_the_summary_what_is_not_checked():
    s = _score(
        {
            "sam3d.results.stats.x_median__mutmut_1": "killed",
            "sam3d.results.stats.x_median__mutmut_2": "survived",
            "sam3d.results.limits.xǁFloorCheckǁ__str____mutmut_3": "survived",
            "sam3d.results.limits.x_limit__mutmut_9": "timeout",
            "sam3d.results.limits.x_limit__mutmut_10": "not checked",
        },
        ["sam3d.results.limits.xǁFloorCheckǁ__str____mutmut_3"],
    )
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in s.table().splitlines()[2:]]
    assert rows == [["limits", "3", "0", "1", "1", "0", "1"], ["stats", "2", "1", "0", "0", "1", "0"]]
    assert s.unfinished == ["sam3d.results.limits.x_limit__mutmut_10"]
    assert ", 1 not checked; score 2/4 = 50.0%" in s.summary()


def test_last_belongs_to_python_and_takes_no_names(capsys):
    assert cli_main(["mutants", "--last"]) == 2
    assert "--last is an option of --python" in capsys.readouterr().err
    assert cli_main(["mutants", "--python", "--last", "sam3d.results.stats.*"]) == 2
    assert "it takes no mutant names" in capsys.readouterr().err


FAKE = r'''#!/usr/bin/env python3
"""A stand-in for mutmut: its verdicts in verdicts.json, every call logged to calls.txt."""
import json, sys
from pathlib import Path
here = Path.cwd()
with open(here / "calls.txt", "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\n")
verdicts = json.loads((here / "verdicts.json").read_text())
cmd = sys.argv[1]
if cmd == "results":
    for name, status in verdicts.items():
        print(f"    {name}: {status}")
elif cmd == "show":
    print(f"# {sys.argv[2]}: survived\n--- a\n+++ b\n@@ -1 +1 @@\n-    return x\n+    return None")
elif cmd == "run":
    print("⠋ 3/3  🎉 2 🫥 0  ⏰ 0  🤔 0  🙁 1  🔇 0  🧙 0")
    (here / "mutants").mkdir(exist_ok=True)
    (here / "mutants" / "mutmut-stats.json").write_text("{}")
'''


def test_a_run_reruns_earlier_survivors_and_the_score_reads_mutmuts_results(tmp_path, monkeypatch):
    """run(): `mutmut run`, then the survivors of the run before it again by name; score():
    `mutmut results --all true` and, for each survivor, the + lines of `mutmut show`."""
    fake = tmp_path / "mutmut"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    monkeypatch.setattr(pymutants, "_mutmut", lambda: str(fake))
    monkeypatch.setattr(pymutants.paths, "root", lambda: tmp_path)
    verdicts = {
        "sam3d.results.stats.x_median__mutmut_1": "killed",
        "sam3d.results.stats.x_median__mutmut_2": "survived",
        "sam3d.results.stats.x_p95__mutmut_1": "no tests",
    }
    (tmp_path / "verdicts.json").write_text(json.dumps(verdicts))
    lines = []
    pymutants.run([], 2, tmp_path / "log" / "m.log", progress=lines.append)
    assert (tmp_path / "calls.txt").read_text().splitlines() == ["run --max-children 2"]  # no earlier run
    assert lines == ["mutmut: 3/3  🎉 2 🫥 0  ⏰ 0  🤔 0  🙁 1  🔇 0  🧙 0"]
    pymutants.run([], 2, tmp_path / "log" / "m.log", progress=lines.append)
    assert (tmp_path / "calls.txt").read_text().splitlines()[1:] == [
        "results --all true",
        "run --max-children 2",
        "run --max-children 2 sam3d.results.stats.x_median__mutmut_2 sam3d.results.stats.x_p95__mutmut_1",
    ]
    eq = [
        Equivalent("sam3d.results.stats.x_median", "return None", "a reason"),
        Equivalent("sam3d.results.stats.x_p95", "return 0", "another reason"),
    ]
    s = pymutants.score(eq)
    assert s.status == verdicts and s.changes == {
        "sam3d.results.stats.x_median__mutmut_2": "return None",
        "sam3d.results.stats.x_p95__mutmut_1": "return None",
    }
    assert s.equivalent == {"sam3d.results.stats.x_median__mutmut_2"}
    assert s.unexplained == ["sam3d.results.stats.x_p95__mutmut_1"] and s.stale == [eq[1]]


def test_a_run_after_a_change_tests_against_todays_data_files(tmp_path):
    """mutmut copies sam3d/'s non-Python files only into a mutants/ that lacks them: the runner
    refreshes those that changed, so the schema a test compares against is today's."""
    (tmp_path / "sam3d" / "results").mkdir(parents=True)
    (tmp_path / "sam3d" / "results" / "result.schema.json").write_text('{"$id": "4"}')
    (tmp_path / "sam3d" / "results" / "record.py").write_text("x = 1\n")
    assert pymutants.refresh_data_files(tmp_path) == []  # no mutants/ yet: mutmut copies everything
    (tmp_path / "mutants" / "sam3d" / "results").mkdir(parents=True)
    (tmp_path / "mutants" / "sam3d" / "results" / "result.schema.json").write_text('{"$id": "3"}')
    (tmp_path / "mutants" / "sam3d" / "results" / "record.py").write_text("x = 'mutated'\n")
    assert pymutants.refresh_data_files(tmp_path) == [tmp_path / "mutants" / "sam3d" / "results" / "result.schema.json"]
    assert (tmp_path / "mutants" / "sam3d" / "results" / "result.schema.json").read_text() == '{"$id": "4"}'
    assert (tmp_path / "mutants" / "sam3d" / "results" / "record.py").read_text() == "x = 'mutated'\n"
    assert pymutants.refresh_data_files(tmp_path) == []
