"""The CI matrix and the completeness check of .github/workflows/variants.yml.

The matrix is generated from the variant registry (core/variants.py records(), which `python -m
sam3d variants --json` prints): one job per variant that declares the ci role and per
container, so a registry entry with that role gets its jobs with no other edit. Each job's
results travel as the artifact ``results-<variant>-<os>``,
whose evidence folder is ``ci-<variant>-<os>`` (the bench run name); the final job downloads
every ``results-*`` artifact into one folder and checks here that each expected job left an
accepted result file before the merged table counts as complete.

    python -m sam3d.ci matrix [VARIANTS_JSON|-]        # the matrix, one line of JSON
    python -m sam3d.ci evidence-dirs FOLDER            # folders holding result files
    python -m sam3d.ci check FOLDER [--job NAME=RESULT ...] [--gpu true|false]
    python -m sam3d.ci junit FOLDER...                 # Markdown table of the JUnit reports' counts
    python -m sam3d.ci gate FOLDER                     # fail when a row is slower than off or failed (one run)
    python -m sam3d.ci baseline-run                    # run_id=<newest successful run of main>
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .core import variants as _variants
from .core.errors import Sam3dError
from .device.run import junit_counts
from .results.evidence import markers
from .results.record import ResultError, read, result_files
from .results.stats import change

# os slug (used in job, artifact and run names) -> the container image the job runs in.
CONTAINERS: dict[str, str] = {
    "debian12": "debian:12",
    "debian13": "debian:13",
}

ARTIFACT_PREFIX = "results-"
RUN_PREFIX = "ci-"
GPU_ARTIFACT = ARTIFACT_PREFIX + "gpu"
# GitHub job results (needs.<job>.result) that count as passed.
PASSED = "success"


@dataclass(frozen=True)
class Expected:
    """One matrix job whose result file the merge needs."""

    variant: str
    os: str

    @property
    def run_name(self) -> str:
        return f"{RUN_PREFIX}{self.variant}-{self.os}"

    @property
    def artifact(self) -> str:
        return f"{ARTIFACT_PREFIX}{self.variant}-{self.os}"


def _name(v: object) -> str:
    if isinstance(v, str):
        return v
    return v["name"] if isinstance(v, Mapping) else v.name  # type: ignore[index,attr-defined]


def matrix(records: Sequence[Mapping] | None = None, containers: Mapping[str, str] = CONTAINERS) -> dict:
    """The GitHub Actions matrix ({"include": [...]}) for the variant records, one entry per
    variant with the ci role and per container, in registry order."""
    if records is None:
        records = _variants.records()
    if any("roles" not in r for r in records):
        raise Sam3dError("variant records without roles: make them with `python -m sam3d variants --json`")
    include = []
    for r in records:
        if _variants.CI not in r["roles"]:
            continue
        for os_slug, image in containers.items():
            e = Expected(r["name"], os_slug)
            include.append(
                {
                    "variant": r["name"],
                    "os": os_slug,
                    "container": image,
                    "sanitizer": r.get("sanitizer"),
                    "sanitize": bool(r.get("sanitizer")),
                    "validate": bool(r.get("vulkan")),
                    "vulkan": bool(r.get("vulkan")),
                    "cuda": bool(r.get("cuda")),
                    "run_name": e.run_name,
                    "artifact": e.artifact,
                }
            )
    if not include:
        raise Sam3dError("no variant declares the ci role: no CI jobs to run")
    return {"include": include}


def expected_results(variants: Iterable | None = None, containers: Iterable[str] = CONTAINERS) -> list[Expected]:
    """The (variant, os) results the merge must find: variants are Variant objects, records of
    `variants --json`, or names (the variants with the ci role when None)."""
    if variants is None:
        variants = _variants.with_role(_variants.CI)
    oses = list(containers)
    return [Expected(_name(v), o) for v in variants for o in oses]


def evidence_dirs(folder: Path) -> list[Path]:
    """The folders that directly hold result files (what `python -m sam3d report` merges)."""
    return sorted({p.parent for p in result_files(folder)})


def _owner(path: Path, expected: Sequence[Expected]) -> Expected | None:
    parts = set(Path(path).parts)
    for e in expected:
        if e.run_name in parts or e.artifact in parts:
            return e
    return None


def check_complete(
    files: Iterable[Path | str], expected: Sequence[Expected] | None = None, require_gpu: bool = False
) -> list[str]:
    """Problems that make the merged table incomplete; empty when complete.

    files: the result files found (results/record.py result_files()), each read by the one
    reader. A result belongs to the expected job whose run name (ci-<variant>-<os>) or artifact
    name (results-<variant>-<os>) is a folder on its path. Each expected job needs at least one
    result of its own variant, and every result must have status "ok" (a failed run keeps its
    file, marked as not accepted).
    With require_gpu, the results-gpu artifact must hold an accepted result of every variant
    with the bundle role (what the GPU job's bundle packs) on each of its GPU backends. An
    evidence folder the files lie in that is marked NOT ACCEPTED (device tests or a checker
    that failed, where the results themselves are ok) is a problem too.
    """
    if expected is None:
        expected = expected_results()
    problems: list[str] = []
    found: dict[Expected, int] = {e: 0 for e in expected}
    gpu_ok: dict[tuple[str, str], int] = {
        (v.name, b): 0 for v in _variants.with_role(_variants.BUNDLE) for b in v.backends if b != "CPU"
    }
    files = [Path(f) for f in files]
    for f in files:
        try:
            r = read(f)
        except ResultError as e:
            problems.append(str(e))
            continue
        ok = r.ok
        if not ok:
            problems.append(f"{f}: variant {r.variant!r} status {r.status!r} ({r.reason})")
        if GPU_ARTIFACT in f.parts:
            key = (r.variant, r.backend or "-")
            gpu_ok[key] = gpu_ok.get(key, 0) + ok
            continue
        owner = _owner(f, expected)
        if owner is None:
            continue  # a result no matrix job stands for (e.g. a local run): merged, not required
        if r.variant != owner.variant:
            problems.append(f"{f}: in {owner.run_name} but for variant {r.variant!r}")
            continue
        found[owner] += ok
    problems += [f"{m}: the evidence folder is marked NOT ACCEPTED ({_first_line(m)})" for m in markers(files)]
    for e, n in found.items():
        if n == 0:
            problems.append(f"missing result: {e.variant} on {e.os} (no accepted result in artifact {e.artifact})")
    for (variant, backend), n in gpu_ok.items() if require_gpu else ():
        if n == 0:
            problems.append(
                f"missing result: {variant} {backend} from the GPU job (no accepted result in artifact {GPU_ARTIFACT})"
            )
    return problems


def _first_line(path: Path) -> str:
    try:
        return (path.read_text(errors="replace").splitlines() or ["empty"])[0]
    except OSError as e:
        return str(e)


def check_jobs(results: Mapping[str, str], optional: Iterable[str] = ()) -> list[str]:
    """Problems among GitHub job results (needs.<job>.result): every job must be 'success';
    an optional one may also be 'skipped'."""
    optional = set(optional)
    problems = []
    for job, result in results.items():
        if result == PASSED or (job in optional and result == "skipped"):
            continue
        problems.append(f"job {job}: {result or 'no result'}")
    return problems


def junit_table(folders: Iterable[Path]) -> str:
    """A Markdown table of every JUnit XML report (*.xml, recursively) under ``folders``: its
    passed, failed and skipped cases, and a total row; a report that does not parse is a
    failed row (a crashed run's partial file)."""
    lines = ["| report | passed | failed | skipped |", "| --- | ---: | ---: | ---: |"]
    total = [0, 0, 0]
    for folder in folders:
        for f in sorted(Path(folder).rglob("*.xml")):
            try:
                counts = junit_counts(f)
            except ET.ParseError as e:
                lines.append(f"| {f} | - | unreadable ({e}) | - |")
                total[1] += 1
                continue
            total = [a + b for a, b in zip(total, counts)]
            lines.append(f"| {f} | {counts[0]} | {counts[1]} | {counts[2]} |")
    lines.append(f"| **all** | {total[0]} | {total[1]} | {total[2]} |")
    return "\n".join(lines) + "\n"


def gate(folder: Path) -> list[str]:
    """What one run proves wrong about speed: every batched row of each ok result against the
    off row of the same result (stats.change: Mann-Whitney U and the minimum effect), a row
    significantly slower than off is a problem. Outputs and counters are checked by the
    benchmark itself (results/checks.py). It fails closed: a failed result, or a folder with
    none, is a problem too."""
    files = result_files(folder)
    problems = [] if files else [f"{folder}: no result files: nothing shows the run was not slower"]
    for f in files:
        r = read(f)
        if not r.ok:
            problems.append(f"{f.name}: {r.backend} failed: {r.reason}")
            continue
        by_mode = {row.batching: row.wall_ms for row in r.rows}
        for mode, wall in by_mode.items():
            if mode == "off" or "off" not in by_mode:
                continue
            c = change(by_mode["off"], wall)
            if c.verdict == "slower":
                problems.append(
                    f"{f.name}: {r.backend} batching {mode} is slower than off: median ratio "
                    f"{c.ratio:.3f}, Mann-Whitney p {c.p:.2g}"
                )
    return problems


def baseline_run(env: Mapping[str, str]) -> tuple[str, str]:
    """(run id, note) of the newest successful run of this workflow on main, asked of the
    GitHub API with $GH_TOKEN; ("", why) when there is none or the API cannot be asked."""
    api, repo, token = env.get("GITHUB_API_URL"), env.get("GITHUB_REPOSITORY"), env.get("GH_TOKEN")
    if not (api and repo and token):
        return "", "not on GitHub Actions (GITHUB_API_URL, GITHUB_REPOSITORY, GH_TOKEN): no baseline"
    url = f"{api}/repos/{repo}/actions/workflows/variants.yml/runs?branch=main&status=success&per_page=1"
    req = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            runs = json.load(resp).get("workflow_runs") or []
    except (OSError, ValueError) as e:
        return "", f"the GitHub API did not answer ({e}): no baseline"
    if not runs:
        return "", "no successful run of main yet: no baseline"
    return str(runs[0]["id"]), f"baseline: run {runs[0]['id']} of {runs[0].get('head_sha', '?')[:12]}"


def _parse_jobs(pairs: list[str]) -> dict[str, str]:
    jobs = {}
    for p in pairs:
        name, sep, result = p.partition("=")
        if not sep or not name:
            raise SystemExit(f"sam3d.ci: --job wants NAME=RESULT, got {p!r}")
        jobs[name] = result
    return jobs


def _truthy(s: str) -> bool:
    return s.strip().lower() in ("1", "true", "yes", "on")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sam3d.ci", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("matrix", help="print the job matrix as one line of JSON")
    s.add_argument(
        "variants_json",
        nargs="?",
        help="output of `python -m sam3d variants --json` ('-' for stdin; read from the variant list when left out)",
    )

    s = sub.add_parser("evidence-dirs", help="print the folders under FOLDER that hold result files")
    s.add_argument("folder", type=Path)

    s = sub.add_parser("junit", help="print a Markdown table of the JUnit reports' counts")
    s.add_argument("folders", nargs="+", type=Path)

    s = sub.add_parser("gate", help="fail when a batched row of a run is slower than its off row, or a result failed")
    s.add_argument("folder", type=Path)

    sub.add_parser("baseline-run", help="print run_id=<the newest successful run of main> (empty when none)")

    s = sub.add_parser("check", help="fail unless every expected job left an accepted result")
    s.add_argument("folder", type=Path, help="where the results-* artifacts were downloaded")
    s.add_argument(
        "--job",
        action="append",
        default=[],
        metavar="NAME=RESULT",
        help="a needed job's result; anything but success fails",
    )
    s.add_argument("--gpu", default="false", help="whether the GPU job was enabled (true/false)")

    args = p.parse_args(argv)
    try:
        return _command(args)
    except Sam3dError as e:  # one line, no traceback
        print(f"sam3d.ci {args.command}: {e}", file=sys.stderr)
        return 2


def _records(source: str | None) -> list | None:
    """The variant records of `sam3d variants --json` from a file, stdin ('-') or the list (None)."""
    if source is None:
        return None
    text = sys.stdin.read() if source == "-" else None
    if text is None:
        try:
            text = Path(source).read_text()
        except OSError as e:
            raise Sam3dError(f"{source}: cannot read: {e.strerror or e}") from None
    try:
        records = json.loads(text)
    except json.JSONDecodeError as e:
        raise Sam3dError(f"{source}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(records, list) or not all(
        isinstance(r, dict) and isinstance(r.get("name"), str) for r in records
    ):
        raise Sam3dError(f"{source}: expected the list of `python -m sam3d variants --json` (objects with a name)")
    return records


def _command(args: argparse.Namespace) -> int:
    if args.command == "matrix":
        print(json.dumps(matrix(_records(args.variants_json)), separators=(",", ":")))
        return 0
    if args.command == "gate":
        problems = gate(args.folder)
        for line in problems:
            print(f"  FAIL {line}")
        print(
            f"sam3d.ci gate: {args.folder}: "
            + ("no batched row slower than off" if not problems else f"{len(problems)} problem(s)")
        )
        return 1 if problems else 0
    if args.command == "baseline-run":
        run_id, note = baseline_run(os.environ)
        print(note, file=sys.stderr)
        print(f"run_id={run_id}")
        return 0
    if args.command == "junit":
        print(junit_table(args.folders), end="")
        return 0
    if args.command == "evidence-dirs":
        for d in evidence_dirs(args.folder):
            print(d)
        return 0
    # check
    gpu = _truthy(args.gpu)
    jobs = _parse_jobs(args.job)
    problems = check_jobs(jobs, optional=() if gpu else ("gpu", "bundle"))
    files = result_files(args.folder)
    problems += check_complete(files, require_gpu=gpu)
    expected = expected_results()
    print(
        f"sam3d.ci check: {len(files)} result files for {len(expected)} expected jobs"
        + (" + the GPU job" if gpu else "")
    )
    for line in problems:
        print(f"  FAIL {line}")
    print("sam3d.ci check: " + ("complete" if not problems else f"INCOMPLETE ({len(problems)} problems)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
