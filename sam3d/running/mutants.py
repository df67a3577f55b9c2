"""The curated mutation check: each mutant of the core listed in native/mutants.toml must be killed.

A mutant is one change of the core's source that no generated mutant makes
(generated_mutants.py; docs/mutation.md), named for the contract rule whose row of
docs/contract.md's table "Rules, tests, mutants" names it, the variant whose normal suite must
kill it (release unless given) and the tests expected to. Each mutant is applied to a scratch
copy of native/ (build/mutants/src/), built with the variant's own Conan toolchain and CMake
cache (so GGML is the variant's Conan package), and the variant's normal CTest suite runs with
the variant's sanitizer environment.

A mutant counts only if it builds and still passes at least one test; it is killed when at
least one test fails, and the list is honest only if every expected test is among the killers.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from tabulate import tabulate

from ..core import paths, variants
from ..core.errors import Sam3dError
from ..core.variants import Variant
from ..tools import ctest

LIST = Path("native") / "mutants.toml"
# The rule -> tests -> mutants table that gives each curated mutant its rule.
CONTRACT = Path("docs") / "contract.md"
TABLE = "## Rules, tests, mutants"
FIELDS = ("name", "variant", "file", "find", "replace", "killed_by")
REQUIRED = ("name", "file", "find", "replace", "killed_by")
# Each CTest test may take this long under a mutant (a mutant can make a call hang): the
# unmutated suite's slowest test times TIMEOUT_FACTOR, at least TEST_TIMEOUT_MIN_S (a hang
# costs that long; the slowest normal test takes about 1 s in release and 12 s in cpu-asan),
# and TEST_TIMEOUT_S before the unmutated suite has run.
TEST_TIMEOUT_S = 120
TEST_TIMEOUT_MIN_S = 30
TIMEOUT_FACTOR = 4
# Appended to a failed test's name when CTest stopped it at the timeout (its report's "Timeout").
TIMED_OUT = " (timeout)"


class MutantError(Sam3dError):
    """A mutant list that cannot be run as written (the message names the mutant and field)."""


@dataclass(frozen=True)
class Mutant:
    name: str
    rule: str
    variant: str
    file: str
    find: str
    replace: str
    killed_by: tuple[str, ...]


@dataclass
class Outcome:
    mutant: Mutant
    verdict: str = ""  # killed | survived | did not build | fails every test | expected killer passed
    killers: list[str] = field(default_factory=list)
    passed: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.verdict == "killed"


def table_rules(contract: Path | None = None) -> dict[str, list[str]]:
    """Mutant name -> the rules whose row of docs/contract.md's table "Rules, tests, mutants"
    names it (in backquotes, in the row's last cell)."""
    contract = contract or paths.root() / CONTRACT
    try:
        text = contract.read_text()
    except OSError as e:
        raise MutantError(f"{contract}: {e}") from None
    if TABLE not in text:
        raise MutantError(f"{contract}: no section {TABLE!r}: the curated mutants take their rules from its table")
    out: dict[str, list[str]] = {}
    for line in text.split(TABLE, 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) < 2 or cells[0] in ("rule", "") or set(cells[0]) <= set("-: "):
            continue
        for name in re.findall(r"`([a-z0-9-]+)`", cells[-1]):
            out.setdefault(name, []).append(cells[0])
    return out


def load(path: Path | None = None, contract: Path | None = None) -> list[Mutant]:
    """The mutants of `path` (default native/mutants.toml), each checked against the tree and
    given its rule by docs/contract.md's table (`contract`)."""
    path = path or paths.root() / LIST
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise MutantError(f"{path}: {e}") from None
    entries = data.get("mutant")
    if not isinstance(entries, list) or not entries:
        raise MutantError(f"{path}: no [[mutant]] tables")
    rules = table_rules(contract)
    out: list[Mutant] = []
    seen: set[str] = set()
    for i, e in enumerate(entries):
        where = f"{path.name}: mutant[{i}]"
        missing = [k for k in REQUIRED if k not in e]
        if missing:
            raise MutantError(f"{where}: missing {', '.join(missing)}")
        where = f"{path.name}: mutant {e['name']!r}"
        unknown = [k for k in e if k not in FIELDS]
        if unknown:
            raise MutantError(
                f"{where}: unknown field {', '.join(unknown)} (fields: {', '.join(FIELDS)}; the rule "
                f"is the row of {CONTRACT}'s table that names the mutant)"
            )
        if e["name"] in seen:
            raise MutantError(f"{where}: the name is used twice")
        seen.add(e["name"])
        rule = rules.get(e["name"], [])
        if len(rule) != 1:
            raise MutantError(
                f"{where}: {'no row' if not rule else 'rows ' + ', '.join(rule)} of {CONTRACT}'s "
                f"table {TABLE[3:]!r} {'names' if not rule else 'name'} it: name it in the mutants "
                "cell of the one rule it breaks"
            )
        variant = e.get("variant", "release")
        try:
            variants.get(variant)
        except variants.UnknownVariant as err:
            raise MutantError(f"{where}: {err}") from None
        src = paths.root() / e["file"]
        if not src.is_file() or not e["file"].startswith("native/"):
            raise MutantError(f"{where}: file {e['file']!r} is not a file of native/")
        n = src.read_text().count(e["find"])
        if n != 1:
            raise MutantError(
                f"{where}: `find` occurs {n} times in {e['file']}; it must occur exactly once "
                "(add surrounding text to make it unique)"
            )
        if e["find"] == e["replace"]:
            raise MutantError(f"{where}: `replace` equals `find`")
        if not isinstance(e["killed_by"], list) or not e["killed_by"]:
            raise MutantError(f"{where}: killed_by must name at least one test")
        out.append(Mutant(e["name"], rule[0], variant, e["file"], e["find"], e["replace"], tuple(e["killed_by"])))
    return out


def _scratch() -> Path:
    return paths.root() / "build" / "mutants"


def _sync_sources(dest: Path) -> None:
    """Makes `dest` a copy of what the core builds from (native/ and cmake/). A file is written
    only when its bytes differ, with a new modification time, so the scratch build recompiles
    exactly what changed since its last build: a mutant restored after its run, or one left
    behind by an interrupted run, is rebuilt (a copy keeping the source's old mtime would not be).
    Each copy keeps its source's permission bits (the tests' launcher must stay executable)."""
    want: set[Path] = set()
    for d in ("native", "cmake"):
        for f in (paths.root() / d).rglob("*"):
            if not f.is_file():
                continue
            rel = f.relative_to(paths.root())
            want.add(rel)
            target = dest / rel
            data = f.read_bytes()
            if not target.is_file() or target.read_bytes() != data:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            if target.stat().st_mode & 0o777 != f.stat().st_mode & 0o777:
                target.chmod(f.stat().st_mode & 0o777)  # an executable (tests/launch.sh) stays one
    for f in list(dest.rglob("*")):
        if f.is_file() and f.relative_to(dest) not in want:
            f.unlink()


def _configure(v: Variant, src: Path, build: Path, log) -> None:
    """Configures `build` from `src` exactly as the variant's own build folder was (its Conan preset)."""
    presets = paths.build_dir(v.name, v.build_type) / "generators" / "CMakePresets.json"
    if not presets.is_file():
        raise MutantError(f"{presets} is missing: build the variant first (python -m sam3d build {v.name})")
    preset = json.loads(presets.read_text())["configurePresets"][0]
    args = [paths.tool("cmake"), "-S", str(src / "native"), "-B", str(build), "-G", preset.get("generator", "Ninja")]
    toolchain = preset.get("toolchainFile") or preset.get("cacheVariables", {}).get("CMAKE_TOOLCHAIN_FILE")
    if toolchain:
        # A relative toolchain file is relative to the preset's build folder (CMake's rule).
        args.append(f"-DCMAKE_TOOLCHAIN_FILE={presets.parent.parent / toolchain}")
    for k, val in preset.get("cacheVariables", {}).items():
        if isinstance(val, dict):
            val = val.get("value")
        if isinstance(val, bool):
            val = "ON" if val else "OFF"
        args.append(f"-D{k}={val}")
    _run(args, log)


def _run(args: list[str], log, env: dict[str, str] | None = None) -> int:
    log.write(f"$ {' '.join(args)}\n")
    log.flush()
    return subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, env=env).returncode


def _suite(
    v: Variant, build: Path, junit: Path, log, stop_on_failure: bool = False, timeout: float = TEST_TIMEOUT_S
) -> tuple[list[str], int]:
    """Runs the normal suite, each test for at most `timeout` s; returns (failed test names,
    passed count). `stop_on_failure`: CTest starts no test after the first failure (enough to
    know a mutant is killed)."""
    junit.unlink(missing_ok=True)
    _run(
        [
            paths.tool("ctest"),
            "--test-dir",
            str(build),
            "-L",
            "normal",
            "--no-tests=error",
            "-j2",
            "--timeout",
            f"{timeout:.0f}",
            "--output-junit",
            str(junit),
            *(["--stop-on-failure"] if stop_on_failure else []),
        ],
        log,
        env=ctest.test_env(v),
    )
    if not junit.is_file():
        return ["(ctest wrote no report)"], 0
    failed, passed = [], 0
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "?").split("  # ")[0]  # GoogleTest's "# GetParam() = ..." comment
        status = case.get("status", "")
        if case.find("failure") is not None or case.find("error") is not None or status == "fail":
            timeout = case.find("failure") is not None and case.find("failure").get("message") == "Timeout"
            failed.append(name + (TIMED_OUT if timeout else ""))
        elif status != "notrun" and case.find("skipped") is None:
            passed += 1
    return failed, passed


def suite_timeout(junit: Path) -> float:
    """The per-test timeout for mutants from the unmutated suite's report: its slowest test's
    time times TIMEOUT_FACTOR, at least TEST_TIMEOUT_MIN_S; TEST_TIMEOUT_S without a report."""
    try:
        times = [float(c.get("time") or 0) for c in ET.parse(junit).getroot().iter("testcase")]
    except (OSError, ET.ParseError, ValueError):
        return TEST_TIMEOUT_S
    return max(TEST_TIMEOUT_MIN_S, TIMEOUT_FACTOR * max(times)) if times else TEST_TIMEOUT_S


def kills(expected: str, killer: str) -> bool:
    """Whether CTest test `killer` is the test `expected` names: the same name, or expected's
    Suite.Case inside a parameterized GoogleTest name (Prefix/Suite.Case/param), either timed
    out or not."""
    killer = killer.removesuffix(TIMED_OUT)
    return re.fullmatch(rf"(?:[^/]+/)?{re.escape(expected)}(?:/[^/]+)?", killer) is not None


class Scratch:
    """One variant's scratch build of the core (build/mutants/<variant>, from build/mutants/src/):
    configured from the variant's Conan preset, built and its normal suite passed unmutated on
    entering (else MutantError); `trial` applies one mutant, builds, runs the suite and restores
    the source. Its log is build/logs/<log_name>-<variant>.log."""

    def __init__(self, v: Variant, log_name: str = "mutants", progress=print):
        self.v = v
        self.root = _scratch()
        self.src = self.root / "src"
        self.build = self.root / v.name
        self.log_path = paths.logs_dir() / f"{log_name}-{v.name}.log"
        self.progress = progress
        self.timeout = float(TEST_TIMEOUT_S)

    def __enter__(self) -> Scratch:
        _sync_sources(self.src)
        self.root.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(self.log_path, "w")
        try:
            _configure(self.v, self.src, self.build, self.log)
            self.progress(f"mutants: {self.v.name}: baseline build and suite (log: {self.log_path})")
            if _run([paths.tool("cmake"), "--build", str(self.build), "-j2"], self.log) != 0:
                raise MutantError(f"the unmutated core does not build in {self.v.name}: see {self.log_path}")
            baseline = self.root / f"{self.v.name}-baseline.xml"
            failed, _ = _suite(self.v, self.build, baseline, self.log)
            if failed:
                raise MutantError(
                    f"the unmutated suite fails in {self.v.name} ({', '.join(failed[:5])}): "
                    f"fix it first (log: {self.log_path})"
                )
            self.timeout = suite_timeout(baseline)
            self.progress(f"mutants: {self.v.name}: each test may take {self.timeout:.0f} s under a mutant")
        except BaseException:
            self.log.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.log.close()

    def trial(
        self, file: str, find: str, replace: str, name: str, stop_on_failure: bool = False
    ) -> tuple[bool, list[str], int]:
        """(built, failed tests, passed count) of the core with `find` replaced in `file`."""
        target = self.src / file
        original = target.read_text()
        if original.count(find) != 1:
            raise MutantError(f"mutant {name}: its `find` occurs {original.count(find)} times in {file}")
        target.write_text(original.replace(find, replace, 1))
        try:
            self.log.write(f"\n=== mutant {name}\n")
            if _run([paths.tool("cmake"), "--build", str(self.build), "-j2"], self.log) != 0:
                return False, [], 0
            killers, passed = _suite(
                self.v, self.build, self.root / f"{self.v.name}-{name}.xml", self.log, stop_on_failure, self.timeout
            )
            return True, killers, passed
        finally:
            target.write_text(original)


def run(selected: list[Mutant], progress=print) -> list[Outcome]:
    """Applies, builds and tests each mutant; the scratch tree is restored after each."""
    outcomes: list[Outcome] = []
    by_variant: dict[str, list[Mutant]] = {}
    for m in selected:
        by_variant.setdefault(m.variant, []).append(m)
    total = len(selected)
    done = 0
    for name, ms in by_variant.items():
        with Scratch(variants.get(name), "mutants", progress) as scratch:
            for m in ms:
                done += 1
                t0 = time.monotonic()
                o = Outcome(m)
                built, o.killers, o.passed = scratch.trial(m.file, m.find, m.replace, m.name)
                missing = [t for t in m.killed_by if not any(kills(t, k) for k in o.killers)]
                if not built:
                    o.verdict = "did not build"
                elif not o.killers:
                    o.verdict = "survived"
                elif o.passed == 0:
                    o.verdict = "fails every test"
                elif missing:
                    o.verdict = f"expected killer passed: {', '.join(missing)}"
                else:
                    o.verdict = "killed"
                o.seconds = time.monotonic() - t0
                progress(f"mutants: [{done}/{total}] {m.name}: {o.verdict} ({o.seconds:.0f} s)")
                outcomes.append(o)
    return outcomes


def table(outcomes: list[Outcome]) -> str:
    rows = []
    for o in outcomes:
        k = o.killers
        shown = ", ".join(k[:3]) + (f" (+{len(k) - 3})" if len(k) > 3 else "")
        rows.append([o.mutant.name, o.mutant.rule, o.mutant.variant, o.verdict, shown])
    return tabulate(rows, headers=["mutant", "rule", "variant", "result", "killed by"], tablefmt="pipe")
