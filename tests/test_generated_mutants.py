"""The generated mutation campaign's generator, names, pieces, equivalents and cache
(sam3d/running/generated_mutants.py); no build: the scratch build is replaced by a fake."""

from __future__ import annotations

import pytest

from sam3d.running import generated_mutants as gm
from sam3d.running import mutants

SNIPPET = """\
#include <vector>  // a < b in a comment
namespace sam3d {

void helper(Session & s);

size_t f(Session & s, size_t n, std::vector<int> * v) {
    const char * text = "a < b";  // nor in a string
    if (n < s.limit) {
        s.counters.calls += 1;
    }
    while (s.ready && n != 0) {
        --n;
    }
    s.ggml.synchronize(s.backend);
    helper(s);
    return n + 1;
}

}  // namespace sam3d
"""


def _changes(text: str, kind: str | None = None) -> set[tuple[str, str]]:
    helpers = gm.core_functions({"x.cpp": text})
    return {
        (g.before, g.after) for g in gm.mutants_of("native/src/x.cpp", text, helpers) if kind is None or g.kind == kind
    }


def test_relational_operators_get_their_boundary_and_negation():
    got = _changes(SNIPPET, "relational")
    assert got == {
        ("if (n < s.limit) {", "if (n <= s.limit) {"),
        ("if (n < s.limit) {", "if (n >= s.limit) {"),
        ("while (s.ready && n != 0) {", "while (s.ready && n == 0) {"),
    }


def test_conditions_are_negated_and_forced_except_a_lone_comparison_s_negation():
    got = _changes(SNIPPET, "condition")
    assert got == {
        ("if (n < s.limit) {", "if (true) {"),
        ("if (n < s.limit) {", "if (false) {"),
        ("while (s.ready && n != 0) {", "while (!(s.ready && n != 0)) {"),
        ("while (s.ready && n != 0) {", "while (true) {"),
        ("while (s.ready && n != 0) {", "while (false) {"),
    }


def test_counters_and_calls_of_ggml_and_core_helpers_are_removed():
    assert _changes(SNIPPET, "counter") == {("s.counters.calls += 1;", ";"), ("--n;", ";")}
    assert _changes(SNIPPET, "call") == {("s.ggml.synchronize(s.backend);", ";"), ("helper(s);", ";")}


def test_off_by_one_drops_a_one_and_moves_an_ordering_bound_the_other_way_from_its_boundary():
    assert _changes(SNIPPET, "off-by-one") == {
        ("return n + 1;", "return n;"),
        ("if (n < s.limit) {", "if (n < s.limit - 1) {"),
    }
    # <= and > move up; a right-hand side that is not a number moves not at all
    text = (
        "void g(Session & s, T * p) {\n    if (a <= b) {\n    }\n    if (c > d) {\n    }\n"
        "    if (p >= nullptr) {\n    }\n}\n"
    )
    assert _changes(text, "off-by-one") == {
        ("if (a <= b) {", "if (a <= b + 1) {"),
        ("if (c > d) {", "if (c > d + 1) {"),
    }


def test_comments_strings_templates_and_includes_are_not_mutated():
    text = SNIPPET
    for g in gm.mutants_of("native/src/x.cpp", text, set()):
        assert "a < b" not in g.find and "#include" not in g.find, g
    assert not _changes("std::vector<int> v; auto x = static_cast<uint8_t *>(p); y = a->b;\n", "relational")


def test_each_find_occurs_once_and_replace_is_find_with_one_change():
    text = (
        "void g(Session & s) {\n    if (n < m) {\n        x = 1;\n    }\n    if (n < m) {\n        x = 2;\n    }\n}\n"
    )
    ms = gm.mutants_of("native/src/x.cpp", text, set())
    assert len({g.name for g in ms}) == len(ms) == 2 * 5  # two identical sites: 2 relational, 1 off-by-one, 2 condition
    for g in ms:
        assert text.count(g.find) == 1
        assert text.replace(g.find, g.replace, 1) != text
    assert ms[0].line == 2 and ms[-1].line == 5


def test_the_whole_tree_gives_unique_names_and_finds():
    ms = gm.generate()
    assert len(ms) > 500 and len({g.name for g in ms}) == len(ms)
    texts = {f: (gm.paths.root() / f).read_text() for f in {g.file for g in ms}}
    assert all(texts[g.file].count(g.find) == 1 for g in ms)
    assert {g.kind for g in ms} == set(gm.KINDS)


def test_names_do_not_change_when_lines_move_but_do_when_the_site_changes():
    before = {g.name: g for g in gm.mutants_of("native/src/x.cpp", SNIPPET, {"helper"})}
    moved = SNIPPET.replace("namespace sam3d {\n", "namespace sam3d {\n\n// a new comment\nint unrelated();\n\n")
    after = {g.name: g for g in gm.mutants_of("native/src/x.cpp", moved, {"helper"})}
    assert set(before) == set(after)
    assert all(after[n].line == before[n].line + 4 for n in before)
    edited = SNIPPET.replace("if (n < s.limit)", "if (n < s.max)")
    renamed = set(before) - {g.name for g in gm.mutants_of("native/src/x.cpp", edited, {"helper"})}
    assert len(renamed) == 5  # the line's 2 relational, 2 condition and 1 off-by-one mutants


def test_pieces_split_the_mutants_without_overlap():
    ms = gm.generate(["native/src/ring.cpp", "native/src/plan.cpp"])
    pieces = [gm.shard(ms, f"{k}/3") for k in (1, 2, 3)]
    assert sorted(g.name for p in pieces for g in p) == sorted(g.name for g in ms)
    assert all(pieces)
    for bad in ("0/3", "4/3", "1-3", "x"):
        with pytest.raises(gm.GeneratedError, match="K/N"):
            gm.shard(ms, bad)


def test_an_unknown_file_is_refused_naming_the_files():
    with pytest.raises(gm.GeneratedError, match="native/src/ring.cpp"):
        gm.generate(["native/src/nope.cpp"])


# ---------------------------------------------------------------- equivalents


def _equivalents(tmp_path, body: str, ms):
    p = tmp_path / "eq.toml"
    p.write_text(body)
    return gm.load_equivalents(ms, p)


def test_equivalents_need_a_generated_name_and_a_checkable_reason(tmp_path):
    ms = gm.mutants_of("native/src/x.cpp", SNIPPET, {"helper"})
    name = ms[0].name
    reason = "the loop below recomputes the same value from scratch before any use"
    assert _equivalents(tmp_path, f'[[equivalent]]\nname = "{name}"\nreason = "{reason}"\n', ms) == {name: reason}
    with pytest.raises(gm.GeneratedError, match="no generated mutant has this name"):
        _equivalents(tmp_path, f'[[equivalent]]\nname = "x-relational-00000000"\nreason = "{reason}"\n', ms)
    with pytest.raises(gm.GeneratedError, match="not a note that it is hard to test"):
        _equivalents(tmp_path, f'[[equivalent]]\nname = "{name}"\nreason = "this one is hard to test, sorry"\n', ms)
    with pytest.raises(gm.GeneratedError, match="listed twice"):
        _equivalents(tmp_path, f'[[equivalent]]\nname = "{name}"\nreason = "{reason}"\n' * 2, ms)


def test_the_committed_equivalents_name_generated_mutants():
    ms = gm.generate()
    eq = gm.load_equivalents(ms)
    assert set(eq) <= {g.name for g in ms}


def test_the_curated_list_holds_no_change_a_generated_mutant_makes_in_release():
    """A curated mutant whose change a generated one makes goes (docs/mutation.md); one naming a
    sanitizer variant stays, since the generated campaign kills its twin in release. And each
    generated mutant the contract's table names for a rule is not listed equivalent."""
    ms = gm.generate()
    text = {}

    def mutated(file, find, replace):
        source = text.setdefault(file, (gm.paths.root() / file).read_text())
        return file, source.replace(find, replace, 1)

    made = {mutated(g.file, g.find, g.replace) for g in ms}
    curated = mutants.load()
    assert [m.name for m in curated if m.variant == "release" and mutated(m.file, m.find, m.replace) in made] == []
    named = set(mutants.table_rules()) - {m.name for m in curated}  # tests/test_contract_table.py: each exists
    assert named and not named & set(gm.load_equivalents(ms))


# ---------------------------------------------------------------- running and the cache


class FakeScratch:
    """Stands for mutants.Scratch: kills a mutant whose replace holds `killed`, fails to build
    one holding `broken`, and records what it was asked to build."""

    trials: list[str] = []
    entered: list[str] = []
    killer = "Suite.Case"

    def __init__(self, v, log_name="mutants", progress=print):
        self.v = v

    def __enter__(self):
        FakeScratch.entered.append(self.v.name)
        return self

    def __exit__(self, *exc):
        return None

    def trial(self, file, find, replace, name, stop_on_failure=False):
        FakeScratch.trials.append((self.v.name, name))
        if "broken" in replace:
            return False, [], 0
        if "true" in replace:
            return True, [FakeScratch.killer], 3
        return True, [], 4


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    src = tmp_path / "native" / "src"
    src.mkdir(parents=True)
    (tmp_path / "native" / "tests").mkdir()
    (tmp_path / "native" / "tests" / "test_a.cpp").write_text("// a test\n")
    (tmp_path / "native" / "CMakeLists.txt").write_text("project(x)\n")
    (tmp_path / "conanfile.py").write_text("")
    (src / "a.cpp").write_text("void f(S & s) {\n    if (s.ok) {\n        s.n += 1;\n    }\n}\n")
    (src / "b.cpp").write_text("void g(S & s) {\n    if (s.go) {\n        s.m -= 1;\n    }\n}\n")
    monkeypatch.setenv("SAM3D_ROOT", str(tmp_path))
    monkeypatch.setattr(mutants, "Scratch", FakeScratch)
    FakeScratch.trials, FakeScratch.entered, FakeScratch.killer = [], [], "Suite.Case"
    return tmp_path


def test_a_survivor_goes_on_to_the_next_variant_and_the_report_counts_each_verdict(checkout):
    ms = gm.generate()
    assert len(ms) == 2 * 4  # per file: the condition negated, forced true, forced false; the counter removed
    results = gm.run(ms, {}, ["release", "cpu-asan"], progress=lambda _: None)
    by = {r.mutant.name: r for r in results}
    forced_true = [r for r in results if r.mutant.after.endswith("(true) {")]
    assert all(r.verdict == "killed" and r.variants == ["release"] for r in forced_true)
    survivors = [r for r in results if r.verdict == "survived"]
    assert len(survivors) == 6 and all(r.variants == ["release", "cpu-asan"] for r in survivors)
    assert len(FakeScratch.trials) == 8 + 6
    killed, counted, score = gm.score(results)
    assert (killed, counted) == (2, 8) and score == 0.25
    text = gm.report(list(by.values()), ["release", "cpu-asan"], 1.0)
    assert "mutation score: 2/8 = 25.0%" in text and "native/src/a.cpp:3" in text


def test_a_rerun_builds_only_the_mutants_of_a_changed_file(checkout):
    ms = gm.generate()
    gm.run(ms, {}, ["release"], progress=lambda _: None)
    assert len(FakeScratch.trials) == 8
    FakeScratch.trials, FakeScratch.entered = [], []
    again = gm.run(gm.generate(), {}, ["release"], progress=lambda _: None)
    assert FakeScratch.trials == [] and FakeScratch.entered == []  # no scratch build at all
    assert sum(r.verdict == "killed" for r in again) == 2
    b = checkout / "native" / "src" / "b.cpp"
    b.write_text(b.read_text().replace("s.m -= 1;", "s.m -= 2;"))
    gm.run(gm.generate(), {}, ["release"], progress=lambda _: None)
    assert {n.split("-")[0] for _, n in FakeScratch.trials} == {"b"} and len(FakeScratch.trials) == 4
    # a test source changed: every mutant again
    FakeScratch.trials = []
    (checkout / "native" / "tests" / "test_a.cpp").write_text("// a new case\n")
    gm.run(gm.generate(), {}, ["release"], progress=lambda _: None)
    assert len(FakeScratch.trials) == 8


def test_equivalents_and_did_not_build_leave_the_score(checkout):
    ms = gm.generate()
    eq = {ms[0].name: "the reason a reviewer can check goes here, in full"}
    b = checkout / "native" / "src" / "b.cpp"
    b.write_text(b.read_text().replace("s.go", "s.broken"))
    ms = gm.generate()
    results = gm.run(ms, eq, ["release"], progress=lambda _: None)
    verdicts = [r.verdict for r in results]
    assert verdicts.count("equivalent") == 1
    assert verdicts.count("did not build") == 1  # b.cpp's negated condition, which keeps `s.broken`
    assert results[0].verdict == "equivalent" and results[0].reason.startswith("the reason")
    assert ("release", ms[0].name) not in FakeScratch.trials and len(FakeScratch.trials) == 7
    killed, counted, _ = gm.score(results)
    assert (killed, counted) == (2, 8 - 1 - 1)


def _rerun(checkout) -> int:
    """Runs the campaign again; how many mutants it built."""
    FakeScratch.trials = []
    gm.run(gm.generate(), {}, ["release"], progress=lambda _: None)
    return len(FakeScratch.trials)


@pytest.mark.parametrize("killer", ["Suite.Case", "Backends/Suite.Case/cpu_staged"])
def test_a_kill_is_kept_while_its_killer_s_file_and_the_shared_test_files_are_unchanged(checkout, killer):
    tests = checkout / "native" / "tests"
    (tests / "test_a.cpp").write_text("TEST_P(Suite, Case) {\n}\n")
    (tests / "test_b.cpp").write_text("TEST(Other, Case) {\n}\n")
    (tests / "rig.h").write_text("// shared\n")
    FakeScratch.killer = killer
    assert _rerun(checkout) == 8
    assert _rerun(checkout) == 0
    (tests / "test_b.cpp").write_text("TEST(Other, Case) {\n}\nTEST(Other, NewCase) {\n}\n")
    assert _rerun(checkout) == 6  # the survivors only: the 2 kills' killer is in test_a.cpp
    assert _rerun(checkout) == 0
    (tests / "test_a.cpp").write_text("TEST_P(Suite, Case) {\n    // changed\n}\n")
    assert _rerun(checkout) == 8
    (tests / "rig.h").write_text("// shared, changed\n")
    assert _rerun(checkout) == 8
    (checkout / "native" / "CMakeLists.txt").write_text("project(y)\n")
    assert _rerun(checkout) == 8


def test_a_fuzz_kill_depends_on_the_fuzz_sources_and_an_unknown_killer_keeps_no_kill(checkout):
    tests, fuzz = checkout / "native" / "tests", checkout / "native" / "fuzz"
    fuzz.mkdir()
    (fuzz / "model.cpp").write_text("// model\n")
    FakeScratch.killer = "Fuzz.capi_2000_runs"
    assert _rerun(checkout) == 8
    (tests / "test_b.cpp").write_text("TEST(Other, Case) {\n}\n")
    assert _rerun(checkout) == 6
    (fuzz / "model.cpp").write_text("// the model, changed\n")
    assert _rerun(checkout) == 8
    # defined in two files, or nowhere: no kill record, so any test change runs it again
    for killer, a in (("Twice.Case", "TEST(Twice, Case) {\n}\n"), ("SanitizerCanary.race_is_reported", "")):
        FakeScratch.killer = killer
        (tests / "test_a.cpp").write_text(a)
        (tests / "test_c.cpp").write_text(a + "// " + killer + "\n")
        assert _rerun(checkout) == 8
        (tests / "test_b.cpp").write_text((tests / "test_b.cpp").read_text() + "// more\n")
        assert _rerun(checkout) == 8


def test_a_run_that_no_longer_kills_drops_the_kill_record(checkout):
    """--fresh (or a changed mutant file) reruns a mutant; a run that does not kill it removes
    its kill record, so a later test change cannot bring the old kill back."""
    tests = checkout / "native" / "tests"
    (tests / "test_a.cpp").write_text("TEST(Suite, Case) {\n}\n")
    assert _rerun(checkout) == 8
    FakeScratch.killer = "Other.Case"  # no file defines it: a kill without a record
    FakeScratch.trials = []
    results = gm.run(gm.generate(), {}, ["release"], fresh=True, progress=lambda _: None)
    assert len(FakeScratch.trials) == 8 and sum(r.verdict == "killed" for r in results) == 2
    (tests / "test_b.cpp").write_text("TEST(Other, New) {\n}\n")
    assert _rerun(checkout) == 8  # the records of Suite.Case were dropped by the fresh run


@pytest.mark.parametrize("killer", ["Backends/Suite.Case/cpu", "Suite.Case (timeout)", "Fuzz.capi_2000_runs (timeout)"])
def test_a_suite_s_instantiation_counts_with_its_case_and_a_timeout_keeps_no_kill(checkout, killer):
    tests, fuzz = checkout / "native" / "tests", checkout / "native" / "fuzz"
    fuzz.mkdir()
    (tests / "test_a.cpp").write_text("TEST_P(Suite, Case) {\n}\n")
    (tests / "test_b.cpp").write_text("TEST(Other, Case) {\n}\nINSTANTIATE_TEST_SUITE_P(Backends, Suite, x);\n")
    (tests / "test_c.cpp").write_text("TEST(Third, Case) {\n}\n")
    FakeScratch.killer = killer
    assert _rerun(checkout) == 8
    (tests / "test_c.cpp").write_text("TEST(Third, Case) {\n}\n// changed\n")
    kept = 6 if "timeout" not in killer else 8
    assert _rerun(checkout) == kept
    (tests / "test_b.cpp").write_text("TEST(Other, Case) {\n}\nINSTANTIATE_TEST_SUITE_P(Backends, Suite, y);\n")
    assert _rerun(checkout) == 8
