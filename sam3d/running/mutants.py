"""The mutation check: each mutant of the core listed in native/mutants.toml must be killed.

A mutant is one single-site change of the core's source (an operator, a condition, a removed
statement, a constant), named with the contract rule it breaks (docs/contract.md), the path
that enforces the rule, the variant whose normal suite must kill it and the tests expected to.
Each mutant is applied to a scratch copy of native/ (build/mutants/src/), built with the
variant's own Conan toolchain and CMake cache (so GGML is the variant's Conan package), and the
variant's normal CTest suite runs with the variant's sanitizer environment.

A mutant counts only if it builds and still passes at least one test; it is killed when at
least one test fails, and the list is honest only if every expected test is among the killers.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
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
PATHS = ("run", "copying submit", "zero-copy", "queued", "reserve", "release", "wait", "create", "counters")
# Each CTest test may take this long under a mutant (a mutant can make a call hang).
TEST_TIMEOUT_S = 120


class MutantError(Sam3dError):
    """A mutant list that cannot be run as written (the message names the mutant and field)."""


@dataclass(frozen=True)
class Mutant:
    name: str
    rule: str
    path: str
    variant: str
    file: str
    find: str
    replace: str
    killed_by: tuple[str, ...]


@dataclass
class Outcome:
    mutant: Mutant
    verdict: str = ""                 # killed | survived | did not build | fails every test | expected killer passed
    killers: list[str] = field(default_factory=list)
    passed: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.verdict == "killed"


def load(path: Path | None = None) -> list[Mutant]:
    """The mutants of `path` (default native/mutants.toml), each checked against the tree."""
    path = path or paths.root() / LIST
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise MutantError(f"{path}: {e}") from None
    entries = data.get("mutant")
    if not isinstance(entries, list) or not entries:
        raise MutantError(f"{path}: no [[mutant]] tables")
    out: list[Mutant] = []
    seen: set[str] = set()
    for i, e in enumerate(entries):
        where = f"{path.name}: mutant[{i}]"
        missing = [k for k in ("name", "rule", "path", "variant", "file", "find", "replace", "killed_by") if k not in e]
        if missing:
            raise MutantError(f"{where}: missing {', '.join(missing)}")
        where = f"{path.name}: mutant {e['name']!r}"
        if e["name"] in seen:
            raise MutantError(f"{where}: the name is used twice")
        seen.add(e["name"])
        if e["path"] not in PATHS:
            raise MutantError(f"{where}: path {e['path']!r} is not one of {', '.join(PATHS)}")
        try:
            variants.get(e["variant"])
        except variants.UnknownVariant as err:
            raise MutantError(f"{where}: {err}") from None
        src = paths.root() / e["file"]
        if not src.is_file() or not e["file"].startswith("native/"):
            raise MutantError(f"{where}: file {e['file']!r} is not a file of native/")
        n = src.read_text().count(e["find"])
        if n != 1:
            raise MutantError(f"{where}: `find` occurs {n} times in {e['file']}; it must occur exactly once "
                              "(add surrounding text to make it unique)")
        if e["find"] == e["replace"]:
            raise MutantError(f"{where}: `replace` equals `find`")
        if not isinstance(e["killed_by"], list) or not e["killed_by"]:
            raise MutantError(f"{where}: killed_by must name at least one test")
        out.append(Mutant(e["name"], str(e["rule"]), e["path"], e["variant"], e["file"], e["find"], e["replace"],
                          tuple(e["killed_by"])))
    return out


def _scratch() -> Path:
    return paths.root() / "build" / "mutants"


def _sync_sources(dest: Path) -> None:
    """Makes `dest` a copy of what the core builds from (native/ and cmake/). A file is written
    only when its bytes differ, with a new modification time, so the scratch build recompiles
    exactly what changed since its last build: a mutant restored after its run, or one left
    behind by an interrupted run, is rebuilt (a copy keeping the source's old mtime would not be)."""
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
    for f in list(dest.rglob("*")):
        if f.is_file() and f.relative_to(dest) not in want:
            f.unlink()


def _configure(v: Variant, src: Path, build: Path, log) -> None:
    """Configures `build` from `src` exactly as the variant's own build folder was (its Conan preset)."""
    presets = paths.build_dir(v.name, v.build_type) / "generators" / "CMakePresets.json"
    if not presets.is_file():
        raise MutantError(f"{presets} is missing: build the variant first (nox -s build -- {v.name})")
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


def _suite(v: Variant, build: Path, junit: Path, log) -> tuple[list[str], int]:
    """Runs the normal suite; returns (failed test names, passed count)."""
    junit.unlink(missing_ok=True)
    _run([paths.tool("ctest"), "--test-dir", str(build), "-L", "normal", "--no-tests=error", "-j2",
          "--timeout", str(TEST_TIMEOUT_S), "--output-junit", str(junit)], log, env=ctest.test_env(v))
    if not junit.is_file():
        return ["(ctest wrote no report)"], 0
    failed, passed = [], 0
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "?").split("  # ")[0]  # GoogleTest's "# GetParam() = ..." comment
        status = case.get("status", "")
        if case.find("failure") is not None or case.find("error") is not None or status == "fail":
            failed.append(name)
        elif status != "notrun" and case.find("skipped") is None:
            passed += 1
    return failed, passed


def kills(expected: str, killer: str) -> bool:
    """Whether CTest test `killer` is the test `expected` names: the same name, or expected's
    Suite.Case inside a parameterized GoogleTest name (Prefix/Suite.Case/param)."""
    return re.fullmatch(rf"(?:[^/]+/)?{re.escape(expected)}(?:/[^/]+)?", killer) is not None


def run(selected: list[Mutant], progress=print) -> list[Outcome]:
    """Applies, builds and tests each mutant; the scratch tree is restored after each."""
    root = _scratch()
    src = root / "src"
    _sync_sources(src)
    root.mkdir(parents=True, exist_ok=True)
    outcomes: list[Outcome] = []
    by_variant: dict[str, list[Mutant]] = {}
    for m in selected:
        by_variant.setdefault(m.variant, []).append(m)
    total = len(selected)
    done = 0
    for name, ms in by_variant.items():
        v = variants.get(name)
        build = root / name
        log_path = paths.logs_dir() / f"mutants-{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "w") as log:
            _configure(v, src, build, log)
            progress(f"mutants: {name}: baseline build and suite (log: {log_path})")
            if _run([paths.tool("cmake"), "--build", str(build), "-j2"], log) != 0:
                raise MutantError(f"the unmutated core does not build in {name}: see {log_path}")
            failed, _ = _suite(v, build, root / f"{name}-baseline.xml", log)
            if failed:
                raise MutantError(f"the unmutated suite fails in {name} ({', '.join(failed[:5])}): fix it first")
            for m in ms:
                done += 1
                t0 = time.monotonic()
                target = src / m.file
                original = target.read_text()
                target.write_text(original.replace(m.find, m.replace, 1))
                o = Outcome(m)
                try:
                    log.write(f"\n=== mutant {m.name}\n")
                    if _run([paths.tool("cmake"), "--build", str(build), "-j2"], log) != 0:
                        o.verdict = "did not build"
                    else:
                        o.killers, o.passed = _suite(v, build, root / f"{name}-{m.name}.xml", log)
                        missing = [t for t in m.killed_by if not any(kills(t, k) for k in o.killers)]
                        if not o.killers:
                            o.verdict = "survived"
                        elif o.passed == 0:
                            o.verdict = "fails every test"
                        elif missing:
                            o.verdict = f"expected killer passed: {', '.join(missing)}"
                        else:
                            o.verdict = "killed"
                finally:
                    target.write_text(original)
                o.seconds = time.monotonic() - t0
                progress(f"mutants: [{done}/{total}] {m.name}: {o.verdict} ({o.seconds:.0f} s)")
                outcomes.append(o)
    return outcomes


def table(outcomes: list[Outcome]) -> str:
    rows = []
    for o in outcomes:
        k = o.killers
        shown = ", ".join(k[:3]) + (f" (+{len(k) - 3})" if len(k) > 3 else "")
        rows.append([o.mutant.name, o.mutant.rule, o.mutant.path, o.mutant.variant, o.verdict, shown])
    return tabulate(rows, headers=["mutant", "rule", "path", "variant", "result", "killed by"], tablefmt="pipe")
