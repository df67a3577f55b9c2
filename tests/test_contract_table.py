"""docs/contract.md's "Rules, tests, mutants" table resolves: every test it names is a test of the
normal suite or the fuzz target, and every mutant it names is one of native/mutants.toml or a
generated one (sam3d mutants --generated --dry-run)."""

from __future__ import annotations

import re

from sam3d.core import paths
from sam3d.running import generated_mutants, mutants

TEST_MACRO = re.compile(r"^\s*TEST(?:_F|_P)?\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)
ADD_TEST = re.compile(r"add_test\(\s*NAME\s+([\w.]+)")
OWN_TESTS = re.compile(r'"([A-Z]\w*\.\w+)\|')  # native/tests/CMakeLists.txt's tests with their own environment


def _table() -> list[list[str]]:
    text = (paths.root() / "docs" / "contract.md").read_text()
    section = text.split("## Rules, tests, mutants", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [[c.strip() for c in row.strip().strip("|").split(" | ")] for row in rows[1:]]


def _native_tests() -> set[str]:
    names: set[str] = set()
    native = paths.root() / "native"
    for f in native.rglob("*.cpp"):
        names |= {f"{suite}.{case}" for suite, case in TEST_MACRO.findall(f.read_text(errors="replace"))}
    for f in native.rglob("CMakeLists.txt"):
        text = f.read_text()
        names |= set(ADD_TEST.findall(text)) | set(OWN_TESTS.findall(text))
    return names


def test_the_table_has_a_row_per_rule_with_tests_and_mutants():
    rows = _table()
    assert len(rows) >= 15
    for row in rows:
        assert len(row) == 4, row[0]
        assert re.search(r"`[A-Z]\w*\.\w+`", row[2]), f"rule {row[0]} names no test"


def test_every_test_the_table_names_exists():
    known = _native_tests()
    named = {n for row in _table() for n in re.findall(r"`([A-Z]\w*\.\w+)`", row[2])}
    assert len(named) > 100
    missing = sorted(named - known)
    assert not missing, f"docs/contract.md names tests that do not exist: {missing}"


def test_every_mutant_the_table_names_exists():
    known = {m.name for m in mutants.load()} | {g.name for g in generated_mutants.generate()}
    named = {n for row in _table() for n in re.findall(r"`([a-z][\w-]*)`", row[3])}
    assert len(named) > 40
    missing = sorted(named - known)
    assert not missing, f"docs/contract.md names mutants that do not exist: {missing}"
