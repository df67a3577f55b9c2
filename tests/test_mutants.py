"""The mutant list's checks (sam3d/running/mutants.py) and how killers are matched."""

from __future__ import annotations

import pytest

from sam3d.running import mutants

GOOD = """
[[mutant]]
name = "bound"
variant = "release"
file = "native/src/plan.cpp"
find = "if (need > SAM3D_STAGING_BOUND_BYTES) {"
replace = "if (need >= SAM3D_STAGING_BOUND_BYTES) {"
killed_by = ["Transfers.ExactBoundBatchesAndOneAlignedUnitOverFallsBack"]
"""


TABLE = """# contract

## Rules, tests, mutants

| rule | paths with their own code | tests that kill its mutants | mutants |
| --- | --- | --- | --- |
| 3 | run | `Transfers.ExactBoundBatchesAndOneAlignedUnitOverFallsBack` | `bound`; generated: `plan-relational-6fef75e2` |
| A5 | queued | `Queued.FullRingFallsBackInsteadOfWaiting` | `ring` |
"""  # noqa: E501


def _load(tmp_path, text, table=TABLE):
    p = tmp_path / "mutants.toml"
    p.write_text(text)
    (tmp_path / "contract.md").write_text(table)
    return mutants.load(p, tmp_path / "contract.md")


def test_the_committed_list_loads_and_each_mutant_takes_its_rule_from_the_contract_s_table():
    ms = mutants.load()
    assert len(ms) >= 20
    rules = mutants.table_rules()
    assert all(rules[m.name] == [m.rule] for m in ms)
    assert {m.rule for m in ms} >= {"1", "2", "3", "10", "A6"}


def test_a_good_entry_loads_with_the_rule_of_the_row_naming_it(tmp_path):
    (m,) = _load(tmp_path, GOOD)
    assert (m.name, m.rule, m.variant) == ("bound", "3", "release")
    (m,) = _load(tmp_path, GOOD.replace('name = "bound"', 'name = "ring"').replace('variant = "release"\n', ''))
    assert (m.name, m.rule, m.variant) == ("ring", "A5", "release")  # release when not given


@pytest.mark.parametrize(
    "table, message",
    [
        (TABLE.replace("`bound`; ", ""), r"mutant 'bound': no row of docs/contract.md's table"),
        (TABLE.replace("`ring`", "`ring`, `bound`"), "rows 3, A5 of docs/contract.md's table"),
        (TABLE.replace("## Rules, tests, mutants", "## Mutants"), "no section '## Rules, tests, mutants'"),
    ],
)
def test_a_mutant_the_table_does_not_name_once_is_refused(tmp_path, table, message):
    with pytest.raises(mutants.MutantError, match=message):
        _load(tmp_path, GOOD, table)


@pytest.mark.parametrize(
    "change, message",
    [
        (('variant = "release"', 'rule = "3"'), r"unknown field rule \(fields: name, variant"),
        (('variant = "release"', 'variant = "nope"'), "unknown variant 'nope'"),
        (('find = "if (need > SAM3D_STAGING_BOUND_BYTES) {"', 'find = "{"'), "must occur exactly once"),
        (('find = "if (need > SAM3D_STAGING_BOUND_BYTES) {"', 'find = "no such text"'), "occurs 0 times"),
        (('file = "native/src/plan.cpp"', 'file = "sam3d/__init__.py"'), "is not a file of native/"),
        (
            ('killed_by = ["Transfers.ExactBoundBatchesAndOneAlignedUnitOverFallsBack"]', 'killed_by = []'),
            "killed_by must name at least one test",
        ),
        (('name = "bound"\n', ''), r"mutant\[0\]: missing name"),
    ],
)
def test_bad_entries_are_refused_naming_the_mutant_and_field(tmp_path, change, message):
    with pytest.raises(mutants.MutantError, match=message):
        _load(tmp_path, GOOD.replace(*change))


def test_a_name_used_twice_is_refused(tmp_path):
    with pytest.raises(mutants.MutantError, match="used twice"):
        _load(tmp_path, GOOD + GOOD)


@pytest.mark.parametrize(
    "expected, killer, hit",
    [
        ("Transfers.X", "Backends/Transfers.X/cpu_staged", True),
        ("Transfers.X", "Transfers.X", True),
        ("Transfers.X", "Backends/Transfers.XY/cpu", False),
        ("Transfers.X", "Backends/Other.X/cpu", False),
    ],
)
def test_killers_match_parameterized_googletest_names(expected, killer, hit):
    assert mutants.kills(expected, killer) is hit


def test_the_scratch_copy_keeps_executables_executable(tmp_path, monkeypatch):
    """CTest runs the tests through native/tests/launch.sh: a copy without its execute bit
    fails the scratch build's test discovery with "permission denied"."""
    root = tmp_path / "checkout"
    (root / "native" / "tests").mkdir(parents=True)
    (root / "cmake").mkdir()
    launcher = root / "native" / "tests" / "launch.sh"
    launcher.write_text("#!/bin/sh\nexec \"$@\"\n")
    launcher.chmod(0o755)
    (root / "native" / "CMakeLists.txt").write_text("project(x)\n")
    monkeypatch.setenv("SAM3D_ROOT", str(root))
    dest = tmp_path / "scratch"
    mutants._sync_sources(dest)
    assert (dest / "native" / "tests" / "launch.sh").stat().st_mode & 0o777 == 0o755
    assert (dest / "native" / "CMakeLists.txt").stat().st_mode & 0o111 == 0
    launcher.chmod(0o644)  # and a change of the bits alone is copied too
    mutants._sync_sources(dest)
    assert (dest / "native" / "tests" / "launch.sh").stat().st_mode & 0o777 == 0o644


def test_the_timeout_under_a_mutant_follows_the_unmutated_suite_s_slowest_test(tmp_path):
    """A hanging mutant costs the per-test timeout: four times the slowest unmutated test, at
    least 30 s; 120 s when the unmutated suite left no usable report."""

    def report(*times):
        p = tmp_path / "baseline.xml"
        p.write_text(
            "<testsuite>"
            + "".join(f'<testcase name="T.c{i}" time="{t}"/>' for i, t in enumerate(times))
            + "</testsuite>"
        )
        return p

    assert mutants.suite_timeout(report(0.5, 1.1)) == 30
    assert mutants.suite_timeout(report(11.7, 1.4, 0.2)) == pytest.approx(46.8)
    assert mutants.suite_timeout(report()) == 120
    assert mutants.suite_timeout(tmp_path / "missing.xml") == 120
    (tmp_path / "bad.xml").write_text("<testsuite><testcase")
    assert mutants.suite_timeout(tmp_path / "bad.xml") == 120


def test_a_test_stopped_at_the_timeout_is_named_so(tmp_path, monkeypatch):
    """CTest's report says "Timeout" for a test it stopped: the kill names it with " (timeout)"
    (the generated campaign keeps no kill record for it), and kills() still matches it."""
    junit = tmp_path / "r.xml"
    junit.write_text(
        '<testsuite><testcase name="A.b" status="fail"><failure message="Timeout"/></testcase>'
        '<testcase name="C.d  # GetParam() = x" status="fail"><failure message="Failed"/></testcase>'
        '<testcase name="E.f" status="run"/></testsuite>'
    )
    monkeypatch.setattr(mutants.ctest, "test_env", lambda v: {})
    monkeypatch.setattr(mutants.paths, "tool", lambda name: name)
    report = junit.read_text()

    def ctest_writes_the_report(*a, **k):  # stands for the CTest run _suite starts
        junit.write_text(report)
        return 0

    monkeypatch.setattr(mutants, "_run", ctest_writes_the_report)
    failed, passed = mutants._suite(None, tmp_path, junit, None)
    assert failed == ["A.b (timeout)", "C.d"] and passed == 1
    assert mutants.kills("A.b", "A.b (timeout)") and mutants.kills("A.b", "Backends/A.b/cpu (timeout)")
    assert not mutants.kills("A.b", "A.bc (timeout)")
