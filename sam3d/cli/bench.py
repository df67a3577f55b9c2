"""`python -m sam3d bench` and `device-import`: driver runs (sam3d/running/) become checked result
files, the table and the evidence folder (sam3d/results/)."""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

from ..core import paths, profile, variants
from ..core.files import inside, read_untrusted, staged_folder
from ..core.variants import Variant
from ..results import checks, evidence, limits, record, table
from ..running import bench as runner
from ..running import bundle, driver


def wrap(
    variant: str,
    backend: str,
    doc: dict | None,
    *,
    reason: str | None,
    prof: dict,
    machine_info: dict,
    commit: str,
    build: dict | None,
    extra: dict | None = None,
) -> record.Record:
    """The record of one driver run (results/record.py) from the driver's output document
    (native/bench/output.cpp, schema sam3d-bench-driver/4; None when it wrote none: the record
    is then "failed" with no rows): its device, caps, protocol and rows are validated here, as
    the record's. "failed" when ``reason`` is given. ``backend`` is GGML's backend name;
    ``prof`` the profile's {"path", "sha256", "version"}; ``extra`` (the runner's facts: the
    floor probe's output, run.pyz's flags) is merged over the driver's own extra, and the
    configuration (layout, graph_order, transfer_only, vulkan_transfer_queue, duplex) taken out of it
    into the record's fields. The floor's self-check (limits.floor_check) is recorded as
    extra.transfer_floor.self_check. Raises ResultError when the document does not fit."""
    x = {**((doc.get("extra") or {}) if doc is not None else {}), **(extra or {})}
    r: dict = {
        "schema": record.SCHEMA,
        "variant": variant,
        "status": "failed" if reason else "ok",
        "reason": reason,
        "machine": machine_info,
        "build": build,
        "git_commit": commit,
        "profile": {"path": prof["path"], "sha256": prof["sha256"], "version": prof["version"]},
        # every configuration field written out, the defaults too: a result file says it all
        "backend": backend,
        **{k: record.Record.model_fields[k].default for k in record.CONFIGURATION},
        **record.configuration_of(x),
    }
    if doc is not None:
        r.update(
            {
                "device": doc.get("device") or backend,
                "caps": doc.get("caps"),
                "protocol": doc.get("protocol"),
                "rows": doc.get("rows"),
            }
        )
    r["extra"] = x
    result = record.parse(
        {k: v for k, v in r.items() if v is not None or k == "reason"}, f"the {variant} {backend} run's result"
    )
    check = limits.floor_check(result.extra.transfer_floor)
    if check is not None:
        result.extra.transfer_floor.self_check = record.SelfCheck(**check.as_dict())
    return result


def result_of(v: Variant, backend: str, doc: dict | None, reason: str | None, **facts) -> record.Record:
    """The record of one driver run: "failed" with ``reason`` when there is one, else checked
    (results/checks.py) and "failed" with the problems found; a driver document that does not
    fit the record keeps the reason and loses its rows. ``backend``: the driver's --backend
    value; ``facts``: wrap()'s prof, machine_info, commit, build and extra."""
    name = next(b for b in v.backends if b.lower() == backend)
    if reason is None and doc is None:
        reason = "the driver wrote no output"
    try:
        r = wrap(v.name, name, doc, reason=reason, **facts)
    except record.ResultError as e:
        why = f"{reason + '; ' if reason else ''}driver output does not fit the result record: {e}"
        # The rows are lost; the configuration the driver reported is kept where it reads.
        said = (doc.get("extra") if isinstance(doc, dict) else None) or {}
        configured = {k: said[k] for k in record.CONFIGURATION_FACTS if k in said}
        try:
            return wrap(
                v.name, name, None, reason=why, **{**facts, "extra": {**configured, **(facts.get("extra") or {})}}
            )
        except record.ResultError:
            return wrap(v.name, name, None, reason=why, **facts)
    problems = checks.check(r) if r.ok else []
    return record.failed(r, "; ".join(problems)) if problems else r


def report_evidence(
    written: list[record.Record], staged: Path, final: Path, accepted: bool, reason: str | None
) -> None:
    """Writes the evidence folder into ``staged`` (core/files.py staged_folder of ``final``) and
    prints the table."""
    evidence.write_evidence(written, staged, accepted, reason, title=final.name)
    if written:
        print(table.render_terminal(written, full=final / evidence.TABLE_FILE), flush=True)


def _print_rows(r: record.Record) -> None:
    for row in r.rows:
        c = row.counters
        fb = ", ".join(f"{k}={n}" for k, n in c.fallbacks.items() if n) or "no fallbacks"
        print(
            f"      batching {row.batching:3}: median {statistics.median(row.wall_ms):9.3f} ms; per image "
            f"{c.async_uploads}/{c.async_downloads} async, {c.sync_uploads}/{c.sync_downloads} "
            f"sync up/down, {c.pinned_batches} pinned batches, {fb}; "
            f"{c.bytes_uploaded:,} B up, {c.bytes_downloaded:,} B down",
            flush=True,
        )


def bench(
    vs: list[Variant],
    *,
    name: str | None = None,
    images: int = 20,
    warmups: int = 5,
    driver_args: tuple[str, ...] = (),
    build: bool = True,
    force: bool = False,
) -> int:
    """Builds, runs and reports; returns the exit status (0 only when every result is ok).

    Each run writes generated/diagnostics/<run-name>/: one result file per (variant, backend)
    in results/ (the record, results/record.py), logs/ (driver output and stderr, build logs), the table and
    the evidence folder. A variant that fails to build or run keeps a result file with status
    "failed" and the reason; a run with any failure is kept, marked as not accepted evidence."""
    if not build:
        runner.require_built(vs)
    t_start = time.monotonic()
    f = runner.facts()
    run_name = name or runner.default_run_name()
    rd = runner.run_dir_for(run_name, force)
    print(f"sam3d bench: run {run_name} -> {rd}", flush=True)
    print(f"sam3d bench: profile {f.prof['path']} v{f.prof['version']} sha256 {f.prof['sha256']}", flush=True)
    written: list[record.Record] = []
    with staged_folder(rd, force, on_abort=lambda staged: _keep_logs(staged, run_name)) as out:
        for run in runner.runs(
            vs, out, f, run_name=run_name, images=images, warmups=warmups, driver_args=driver_args, build=build
        ):
            r = result_of(
                run.variant,
                run.backend,
                run.doc,
                run.reason,
                prof=f.prof,
                machine_info=f.machine,
                commit=f.commit,
                build=run.build,
                extra=run.extra,
            )
            written.append(r)
            if run.ran:
                print(f"{run.tag}: {r.status} in {run.seconds:.1f} s{': ' + r.reason if r.reason else ''}", flush=True)
            _print_rows(r)
        _keep_reports(vs, out)
        failed = [f"{r.variant} {r.backend}: {r.reason}" for r in written if not r.ok]
        accepted = not failed
        reason = None if accepted else f"{len(failed)} of {len(written)} runs failed: " + " / ".join(failed)
        report_evidence(written, out, rd, accepted, reason)
    print(
        f"sam3d bench: {len(written) - len(failed)}/{len(written)} runs ok in {time.monotonic() - t_start:.1f} s; "
        f"evidence: {rd}{'' if accepted else ' (NOT ACCEPTED)'}",
        flush=True,
    )
    return 0 if accepted else 1


def _keep_logs(staged: Path, run_name: str) -> None:
    """What an interrupted or failed run keeps of its staged folder: the driver and build logs,
    moved to build/logs/bench-<run-name>/ (the evidence folder is left as it was)."""
    if (staged / "logs").is_dir():
        kept = paths.logs_dir() / f"bench-{run_name}"
        shutil.rmtree(kept, ignore_errors=True)
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(staged / "logs", kept)
        print(f"sam3d bench: the run's logs are kept in {kept}", flush=True)


def _keep_reports(vs: list[Variant], rd: Path) -> None:
    """Copies the JUnit reports of the variants' test runs (build/reports: ctest-*-<variant>.xml,
    and pytest.xml) into the evidence folder's reports/."""
    names = {v.name for v in vs}
    # A report is its variant's whose name the file name ends with, the longest such name: so
    # ctest-normal-cuda-release.xml is cuda-release's, not release's.
    found = [
        f
        for f in sorted(paths.reports_dir().glob("ctest-*.xml"))
        if max((n for n in variants.NAMES if f.name.endswith(f"-{n}.xml")), key=len, default=None) in names
    ]
    found += [f for f in (paths.reports_dir() / "pytest.xml",) if f.is_file()]
    if found:
        (rd / "reports").mkdir(parents=True, exist_ok=True)
        for f in found:
            shutil.copyfile(f, rd / "reports" / f.name)


# What a run under a GPU checker counts (device/run.py check_counts()).
CHECKER_COUNTS = ("validation_messages", "sanitizer_errors")


def checker_findings(t: dict) -> str | None:
    """What a checker found in a run, in words (None: nothing, or no checker): a count above 0,
    or a compute-sanitizer run that left no summary."""
    if t.get("validation_messages"):
        return f"{t['validation_messages']} validation message(s)"
    if "sanitizer_errors" in t and t["sanitizer_errors"] != 0:
        return (
            "compute-sanitizer left no summary (the tool did not finish)"
            if t["sanitizer_errors"] is None
            else f"{t['sanitizer_errors']} compute-sanitizer error(s)"
        )
    return None


def device_import(
    raw_dirs: list[Path], name: str | None = None, force: bool = False
) -> tuple[Path, list[record.Record], bool]:
    """Wraps the bundle runner's raw files (each raw_dir/summary.json and the driver outputs) into
    result files in generated/diagnostics/<name>/ and renders the one table and the device-test
    table, of all the folders together (the runs of a matrix split over several run.pyz
    commands). Returns (evidence folder, results, accepted)."""
    summaries = [(raw_dir, bundle.read_summary(raw_dir)) for raw_dir in raw_dirs]
    rd = runner.run_dir_for(name or f"device-{summaries[0][1]['machine']['hostname']}", force)
    with staged_folder(rd, force) as out:
        written, reasons, tests = [], [], []
        for raw_dir, summary in summaries:
            _import_summary(raw_dir, summary, out, written, reasons, tests)
        accepted = not reasons
        report_evidence(written, out, rd, accepted, "; ".join(reasons) or None)
        text = table.device_tests(summaries[0][1]["machine"], tests)
        (out / "device-tests.md").write_text(text)
        print(text, flush=True)
    return rd, written, accepted


def _import_summary(raw_dir: Path, summary: dict, out: Path, written: list, reasons: list[str], tests: list) -> None:
    """One folder's runs: its results into ``written``, what keeps them from being accepted into
    ``reasons``, its device tests, canaries and checked replays into ``tests``."""
    manifest = summary["manifest"]
    prof = {**manifest["profile"], "path": str(profile.RELATIVE_PATH)}
    for vname, vrun in summary["variants"].items():
        v = variants.get(vname)
        vm = manifest["variants"][vname]
        extra = {
            **vm["extra"],
            "device_tests": vrun.get("device_tests"),
            "bundle_git_commit": manifest["git_commit"],
            "build_machine": manifest["build_machine"],
        }
        if vrun.get("error"):
            reasons.append(f"{vname}: {vrun['error']}")
        for entry in vrun.get("bench", []):
            backend = entry.get("backend", "vulkan")  # bundles before CUDA ran Vulkan only
            doc, why = bundle.driver_output(raw_dir, entry)
            r = result_of(
                v,
                backend,
                doc,
                why,
                prof=prof,
                machine_info=summary["machine"],
                commit=manifest["git_commit"],
                build=vm["build"],
                extra={
                    **extra,
                    **bundle.probe_output(raw_dir, entry),
                    **{k: entry[k] for k in bundle.RUN_FACTS if k in entry},
                },
            )
            if not r.ok:
                reasons.append(f"{vname}: {r.reason}")
            written.append(r)
        for kind, t in (vrun.get("device_tests") or {}).items():
            tests.append((vname, kind, t))
            if t.get("not_applicable"):
                continue
            if t.get("report"):  # the GoogleTest XML report, kept with the evidence
                src = inside(raw_dir, t["report"], "summary.json's device_tests report", bundle.BundleError)
                if src.exists() or src.is_symlink():
                    (out / "reports").mkdir(parents=True, exist_ok=True)
                    (out / "reports" / src.name).write_bytes(read_untrusted(src, bundle.BundleError))
            if t["failed"] or t["exit_code"] or not t["passed"]:
                reasons.append(
                    f"{vname}: device tests ({kind}) {t['passed']} passed, {t['failed']} failed, "
                    f"{t['skipped']} skipped, exit {t['exit_code']}"
                )
            if checker_findings(t):
                reasons.append(f"{vname}: device tests ({kind}): {checker_findings(t)}")
        for ctag, c in (vrun.get("canaries") or {}).items():
            tests.append(
                (
                    vname,
                    f"canary ({ctag})",
                    {
                        "exit_code": c["exit_code"],
                        "passed": int(c["caught"]),
                        "failed": int(not c["caught"]),
                        "skipped": 0,
                        **{k: c[k] for k in CHECKER_COUNTS if k in c},
                    },
                )
            )
            if not c["caught"]:
                reasons.append(
                    f"{vname}: the {ctag} canary went unreported (exit {c['exit_code']}): the checker is not live"
                )
        for b in vrun.get("checked_replays") or []:
            ok = b["exit_code"] == 0
            # Its configuration, as run.pyz recorded it (older summaries: the layout at most).
            layout = (
                "".join(f", {b[k]} {word}" for k, word in (("layout", "layout"), ("graph_order", "order")) if k in b)
                + (", transfer-only" if b.get("transfer_only") else "")
                + (f", duplex {b['duplex']}" if b.get("duplex", "off") != "off" else "")
            )
            tests.append(
                (
                    vname,
                    f"{b['backend']} replay, 1 image{layout} ({b['checker']})",
                    {
                        "exit_code": b["exit_code"],
                        "passed": int(ok),
                        "failed": int(not ok),
                        "skipped": 0,
                        **{k: b[k] for k in CHECKER_COUNTS if k in b},
                    },
                )
            )
            if not ok or checker_findings(b):
                reasons.append(
                    f"{vname}: the checked replay{layout} ({b['checker']}): exit {b['exit_code']}"
                    + (f", {checker_findings(b)}" if checker_findings(b) else "")
                )


def check_choices(vs: list[Variant], modes: str | None, duplex: str | None) -> None:
    """Refuses a --modes or --duplex value before any work, by the driver's own lists and message."""
    driver.mode_table(vs, modes, duplex)
