"""The Python mutation campaign: mutmut over sam3d/results/, the limits, statistics, comparison
and table arithmetic that every published number passes through (docs/mutation.md,
"The Python campaign").

mutmut (its settings: [tool.mutmut] in pyproject.toml) copies sam3d/ into mutants/, makes
every single-site mutant of sam3d/results/ it knows (operators, comparisons, constants,
strings, removed arguments and calls), and runs the tests that exercise each mutated function;
a mutant is killed when one of them fails. Its results stay in mutants/, so a later run tests
only the mutants of functions that changed.

The score is detected / (mutants - equivalents), where detected counts the killed mutants and
those that made the tests crash or run past mutmut's time limit. An equivalent mutant changes
no behaviour any caller can see; each is listed in EQUIVALENTS by the function it mutates and
the change it makes (the + lines of `mutmut show`), with the reason: mutmut numbers a
function's mutants in order, so a name shifts when the function changes, but the function and
the change stay as long as the mutated line does. The run fails on any survivor not listed
there, on a listed one that matches no survivor, and below TARGET.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from ..core import paths
from ..core.errors import Sam3dError

EQUIVALENTS = Path("sam3d") / "results" / "mutmut-equivalents.toml"
TARGET = 0.90
LOG = "mutants-python.log"
# mutmut's verdicts (mutmut/stats.py): what each counts as here.
DETECTED = ("killed", "timeout", "segfault", "caught by type check")
UNDETECTED = ("survived", "no tests")
BOOTSTRAP = "ci/bootstrap.sh python -m sam3d mutants --python"


class PyMutantError(Sam3dError):
    """A campaign that cannot run or be scored as configured (the message names the fix)."""


@dataclass(frozen=True)
class Equivalent:
    function: str  # mutmut's name of the mutated function: a mutant's name up to "__mutmut_"
    change: str
    reason: str


def function_of(mutant: str) -> str:
    """The function a mutant mutates ("sam3d.results.stats.x_median__mutmut_3" ->
    "sam3d.results.stats.x_median")."""
    return mutant.rsplit("__mutmut_", 1)[0]


@dataclass
class Score:
    """One campaign's verdicts: mutant name -> mutmut's status, the equivalents, and the change
    each survivor makes (mutant name -> `mutmut show`'s + lines)."""

    status: dict[str, str]
    equivalents: list[Equivalent]
    changes: dict[str, str]

    def names(self, *statuses: str) -> list[str]:
        return sorted(m for m, s in self.status.items() if s in statuses)

    def _listed(self, mutant: str) -> Equivalent | None:
        key = (function_of(mutant), self.changes.get(mutant))
        return next((e for e in self.equivalents if (e.function, e.change) == key), None)

    @property
    def detected(self) -> int:
        return len(self.names(*DETECTED))

    @property
    def equivalent(self) -> set[str]:
        """The survivors of this run that an entry lists (by function and change)."""
        return {m for m in self.names(*UNDETECTED) if self._listed(m) is not None}

    @property
    def scored(self) -> int:
        """The mutants the score is over: all but the equivalents."""
        return len(self.status) - len(self.equivalent)

    @property
    def ratio(self) -> float:
        return self.detected / self.scored if self.scored else 1.0

    @property
    def unexplained(self) -> list[str]:
        """Survivors (and mutants no test reaches) not listed as equivalent."""
        eq = self.equivalent
        return [m for m in self.names(*UNDETECTED) if m not in eq]

    @property
    def stale(self) -> list[Equivalent]:
        """Entries that match no survivor of this run: killed now, or the code changed (not those
        of a function whose mutants are not all checked yet)."""
        matched = {id(self._listed(m)) for m in self.names(*UNDETECTED)}
        waiting = {function_of(m) for m in self.unfinished}
        return [e for e in self.equivalents if id(e) not in matched and e.function not in waiting]

    @property
    def unfinished(self) -> list[str]:
        return sorted(m for m, s in self.status.items() if s not in DETECTED + UNDETECTED)

    @property
    def ok(self) -> bool:
        return not self.unexplained and not self.stale and not self.unfinished and self.ratio >= TARGET

    def table(self) -> str:
        """Per module of sam3d/results/: mutants, killed, timed out, equivalent, survived, not checked."""
        rows: dict[str, list[int]] = {}
        eq = self.equivalent
        for m, st in sorted(self.status.items()):
            row = rows.setdefault(m.split(".x")[0].removeprefix("sam3d.results."), [0] * 6)
            row[0] += 1
            if st in UNDETECTED:
                row[3 if m in eq else 4] += 1
            elif st in DETECTED:
                row[1 if st != "timeout" else 2] += 1
            else:
                row[5] += 1
        return tabulate(
            [[k, *v] for k, v in rows.items()],
            headers=["module", "mutants", "killed", "timed out", "equivalent", "survived", "not checked"],
            tablefmt="pipe",
        )

    def summary(self) -> str:
        n = len(self.status)
        eq = len(self.equivalent)
        rest = len(self.unfinished)
        return (
            f"{n} mutants: {len(self.names('killed'))} killed, {len(self.names('timeout'))} timed out, "
            f"{eq} equivalent, {len(self.names(*UNDETECTED)) - eq} survived"
            + (f", {rest} not checked" if rest else "")
            + "; score "
            f"{self.detected}/{self.scored} = {self.ratio:.1%} (target {TARGET:.0%})"
        )


def _mutmut() -> str:
    """The mutmut of this environment, or an error naming the command that installs it."""
    exe = Path(sys.executable).with_name("mutmut")
    if not exe.is_file():
        raise PyMutantError(
            f"mutmut is not installed in {Path(sys.executable).parent.parent}: run through "
            f"ci/bootstrap.sh, which installs requirements.lock (e.g. {BOOTSTRAP})"
        )
    return str(exe)


def load_equivalents(path: Path | None = None) -> list[Equivalent]:
    """The entries of EQUIVALENTS ([[equivalent]] tables: function, change, reason)."""
    path = path or paths.root() / EQUIVALENTS
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise PyMutantError(f"{path}: {e}") from None
    out: list[Equivalent] = []
    for i, e in enumerate(data.get("equivalent", [])):
        missing = [k for k in ("function", "change", "reason") if not str(e.get(k, "")).strip()]
        if missing:
            raise PyMutantError(f"{path.name}: equivalent[{i}]: missing {', '.join(missing)}")
        if (e["function"], e["change"].strip()) in {(x.function, x.change) for x in out}:
            raise PyMutantError(
                f"{path.name}: equivalent {e['function']!r} changing {e['change'].strip()!r} is listed twice"
            )
        out.append(Equivalent(e["function"], e["change"].strip(), " ".join(e["reason"].split())))
    return out


def run(names: list[str], jobs: int, log_path: Path, progress=print) -> None:
    """`mutmut run` (all mutants, or those ``names`` names: globs allowed) with ``jobs`` workers,
    its output in ``log_path``; every minute the last progress line is passed to ``progress``.

    mutmut keeps each verdict until the function it mutates changes, so a survivor of an earlier
    run would stand even after a test that kills it was added: those survivors are run again,
    by name, after the mutants that are new."""
    earlier = [m for m, s in (_statuses_if_any() or {}).items() if s in UNDETECTED] if not names else []
    refresh_data_files()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        _mutmut_run(names, jobs, log, log_path, progress)
        if earlier:
            progress(f"mutmut: the {len(earlier)} survivors of earlier runs again, against today's tests")
            _mutmut_run(earlier, jobs, log, log_path, progress)


def refresh_data_files(root: Path | None = None) -> list[Path]:
    """Copies sam3d/'s files that are not Python (result.schema.json, the equivalents list) into
    mutants/sam3d/ where they differ: mutmut copies those only into a mutants/ that lacks them,
    so a run after a change would test against the old copies. Returns the files copied."""
    root = root or paths.root()
    copied = []
    if not (root / "mutants").is_dir():
        return copied  # mutmut makes it whole
    for src in sorted((root / "sam3d").rglob("*")):
        if not src.is_file() or src.suffix in (".py", ".pyc") or "__pycache__" in src.parts:
            continue
        dst = root / "mutants" / src.relative_to(root)
        if not dst.is_file() or dst.read_bytes() != src.read_bytes():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
            copied.append(dst)
    return copied


def _mutmut_run(names: list[str], jobs: int, log, log_path: Path, progress) -> None:
    log.write(f"$ mutmut run --max-children {jobs} {' '.join(names)}\n")
    log.flush()
    proc = subprocess.Popen(
        [_mutmut(), "run", "--max-children", str(jobs), *names], cwd=paths.root(), stdout=log, stderr=subprocess.STDOUT
    )
    last = ""
    while True:
        try:  # a look every minute (every second until the first line), and one when mutmut ends
            proc.wait(timeout=60 if last else 1)
        except subprocess.TimeoutExpired:
            pass
        line = _last_status(log_path)
        if line and line != last:
            progress(f"mutmut: {line}")
            last = line
        if proc.returncode is not None:
            break
    if proc.returncode != 0:
        raise PyMutantError(f"mutmut run failed (exit {proc.returncode}): see {log_path}")


def _last_status(log_path: Path) -> str:
    """mutmut's latest progress line ("done/total" and the count of each verdict), spinner dropped."""
    try:
        text = log_path.read_text(errors="replace")[-4000:]
    except OSError:
        return ""
    lines = [x.strip() for x in re.split(r"[\r\n]", text) if re.search(r"\d+/\d+", x)]
    return re.sub(r"^[^\w]+", "", lines[-1]) if lines else ""


def _statuses_if_any() -> dict[str, str] | None:
    """statuses() of an earlier run, or None when mutants/ holds none."""
    if not (paths.root() / "mutants" / "mutmut-stats.json").is_file():
        return None
    return statuses()


def statuses() -> dict[str, str]:
    """Every mutant of the last run with mutmut's status (`mutmut results --all true`)."""
    out = subprocess.run([_mutmut(), "results", "--all", "true"], cwd=paths.root(), capture_output=True, text=True)
    if out.returncode != 0:
        raise PyMutantError(f"mutmut results failed (exit {out.returncode}): {out.stderr.strip()[-500:]}")
    found = dict(m.groups() for m in re.finditer(r"^\s+(\S+): (.+?)\s*$", out.stdout, re.M))
    if not found:
        raise PyMutantError("mutmut has no results: run the campaign first (sam3d mutants --python)")
    return found


def change(mutant: str) -> str:
    """The lines mutmut's mutant puts in place of the original (the + lines of `mutmut show`)."""
    out = subprocess.run([_mutmut(), "show", mutant], cwd=paths.root(), capture_output=True, text=True)
    if out.returncode != 0:
        raise PyMutantError(f"mutmut show {mutant} failed (exit {out.returncode}): {out.stderr.strip()[-500:]}")
    return added_lines(out.stdout)


def added_lines(diff: str) -> str:
    """The + lines of a unified diff, each stripped: a mutant's change."""
    return "\n".join(x[1:].strip() for x in diff.splitlines() if x.startswith("+") and not x.startswith("+++"))


def changes(path: Path, code: str, lines: set[int] | None = None) -> dict[str, str]:
    """Mutant name -> change of every mutant mutmut makes of `code`, the text of module `path`
    (sam3d/results/x.py), or only of `lines` (1-based): mutmut's own mutation and the diff
    `mutmut show` prints, without running a test (the names are the ones a run gives)."""
    from difflib import unified_diff

    import libcst as cst
    from mutmut.mutation.diff_apply import read_mutant_function, read_original_function
    from mutmut.mutation.file_mutation import mutate_file_contents

    mutated = mutate_file_contents(str(path), code, covered_lines=lines)
    module = cst.parse_module(mutated.code)
    prefix = ".".join(path.with_suffix("").parts) + "."
    out = {}
    for name in mutated.mutant_names:
        before, after = (
            cst.Module([f(module, name)]).code.strip().split("\n")
            for f in (read_original_function, read_mutant_function)
        )
        out[prefix + name] = added_lines("\n".join(unified_diff(before, after, lineterm="")))
    return out


def score(equivalents: list[Equivalent] | None = None) -> Score:
    """The Score of the last run, with the change of every survivor (`mutmut show` each: about a
    second a mutant)."""
    eqs = load_equivalents() if equivalents is None else equivalents
    status = statuses()
    return Score(status, eqs, {m: change(m) for m, s in status.items() if s in UNDETECTED})
