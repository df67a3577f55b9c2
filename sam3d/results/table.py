"""The benchmark table: one Markdown ("pipe") table over any set of results.

The layout follows llama.cpp's scripts/compare-llama-bench.py: one row per configuration, and
columns whose value is the same in every row leave the table for a caption line ("all rows:
backend=CPU, n=20"). Statistics: results/stats.py (p95 nearest-rank, speedup as the median of
paired ratios with their IQR); limits: results/limits.py. Also the device-test table of a GPU
run (device_tests).
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tabulate as tabulate_module
from pydantic import BaseModel, Field
from tabulate import tabulate

from ..core import profile
from . import limits, record, stats
from .checks import across_backends, output_checks
from .record import WITHOUT_LIMITS, Counters, Record
from .rows import CONFIG_HEADERS, ReportError, cell, config_cell, config_words, hosts, ms, rows, sibling
from .rows import TableRow as Row

REPORT_SCHEMA = "sam3d-report/1"


def _speedups(all_rows: Sequence[Row]) -> dict[int, stats.Speedup]:
    """Each non-off row (by id) -> speedup against the off row of the same result, paired by image index."""
    out = {}
    for w in all_rows:
        if w.mode in ("off", None):
            continue
        off = sibling(all_rows, w, "off")
        if off is None:
            continue
        on_ms = {s.image: s.wall_ms for s in w.data.samples}
        off_ms = {s.image: s.wall_ms for s in off.data.samples}
        common = sorted(set(on_ms) & set(off_ms))
        if not common:
            continue
        out[id(w)] = stats.speedup([off_ms[i] for i in common], [on_ms[i] for i in common])
    return out


def _savings(all_rows: Sequence[Row]) -> dict[int, tuple[float, float]]:
    """Each row beyond the staged design (the schema's rows other than REQUIRED_ROWS: zero-copy,
    queued), by id -> the per-image time it saves over "on": median(on wall_ms) - median(row
    wall_ms) of the same result, in ms, and as a share of on."""
    out = {}
    for w in all_rows:
        if w.mode in (*record.REQUIRED_ROWS, None) or not w.ok:
            continue
        on = sibling(all_rows, w, "on")
        if on is None or not on.ok:
            continue
        on_ms = stats.median(on.wall_ms)
        saved = on_ms - stats.median(w.wall_ms)
        out[id(w)] = (saved, saved / on_ms)
    return out


def _fallbacks(counters: Counters) -> str:
    return ", ".join(f"{k}={n}" for k, n in counters.fallbacks.items() if n) or "none"


def _bytes(counters: Counters) -> str:
    up, down = counters.bytes_uploaded, counters.bytes_downloaded
    mark = "" if (up, down) == (profile.UPLOAD_BYTES, profile.DOWNLOAD_BYTES) else " *"
    return f"{up:,} / {down:,}{mark}"


def floor_ratio(result: Record, median_ms: float) -> str:
    """The row's median over the transfer floor measured in the same run (limits.floor_ms), or
    "" without one: "2.6x (1.410)"."""
    floor = limits.floor_ms(result)
    return f"{median_ms / floor:.1f}x ({ms(floor)})" if floor is not None else ""


def limit_ratio(lim: limits.Limit | None, median_ms: float) -> str:
    """The row's median over its modelled limit (limits.limit): "1.75x (2.920)", or ""; a limit on
    the duplex floor says so and keeps the serial one beside it: "2.10x (1.380 duplex floor; 1.53x
    serial 1.900)"."""
    if lim is None:
        return ""
    text = f"{median_ms / lim.ms:.2f}x ({ms(lim.ms)}"
    if lim.floor == "duplex":
        text += f" duplex floor; {median_ms / lim.serial_ms:.2f}x serial {ms(lim.serial_ms)}"
    return text + ")"


def _floor_cell(result: Record, median_ms: float) -> str:
    """floor_ratio, flagged when the floor's self-check failed."""
    text = floor_ratio(result, median_ms)
    check = limits.floor_check(result.extra.transfer_floor)
    return f"{text}; self-check FAILED" if text and check is not None and not check.ok else text


def _waits(lim: limits.Limit | None) -> str:
    """ "made/mandatory" waits per image, with the excess flagged: "52/56", "60/56 **+4**"."""
    if lim is None:
        return ""
    made = "?" if lim.waits_made is None else str(lim.waits_made)
    return f"{made}/{lim.round_trips}" + (f" **+{lim.excess}**" if lim.excess else "")


def _excluded(w: Row) -> str:
    """The zerocopy and queued rows' untimed host ms per image (medians): the producer's writes
    into slots + the consumer's reads out of them."""
    got = limits.excluded_ms(w.result, w.mode)
    if got is None or not got[0]:
        return ""
    writes, reads = got
    if not reads:
        return ms(stats.median(writes))
    return f"{ms(stats.median(writes))} + {ms(stats.median(reads))}"


def _limit_notes(all_rows: Sequence[Row], table: list[dict[str, str]], multi_host: bool) -> list[str]:
    """The notes on floors and limits: what the columns mean (the model), one line of each
    result's same-run terms, and every floor self-check failure and floor-probe disagreement."""
    notes = []
    if any(row.get("x floor") for row in table):
        notes.append(
            "x floor: median over the transfer floor measured in the same run (the profile's bytes as "
            "one async upload and one async download from the host buffer type's memory, offsets aligned, "
            "one synchronize; sampled after every image, the smallest of its block medians; ms in "
            "parentheses); its self-check: both directions within [max, sum] of each direction alone."
        )
    if any(row.get("x limit") for row in table):
        notes.append(
            "x limit: median over the mode's modelled limit from the same run's measurements and the "
            "profile (ms in parentheses): staged = G x RT + the slower of the floor and the staged copies at "
            "plain memcpy speed on the session's copy threads (they overlap, piece by piece); "
            "zerocopy = floor + G x RT; queued = floor + W x RT; G = the profile's graphs, W = the "
            "mandatory waits (dependency points, the synchronous graph's blocking uploads, compute and "
            "downloads, ring waits where the bytes in flight exceed 32 MiB, the end); RT = the download "
            "round trip on transfer-only rows, the graph round trip with compute; floor = the serial "
            "transfer floor, or the same run's duplex floor (both directions at once on two backends) where the "
            "row's session used duplex (duplex calls > 0) and that floor is the smaller: \"duplex floor\", with "
            "the limit on the serial floor beside it. waits: made/mandatory "
            "per image, **+N** marks waits beyond the model. docs/benchmark.md, "
            "\"Transfer floor, round trips and limits\"."
        )
    if any(row.get("excluded ms") for row in table):
        notes.append(
            "excluded ms: per-image host ms the zerocopy and queued rows do not time (medians): the "
            "producer's writes into slots + the consumer's reads out of them; the staged row times its "
            "copies, the off row GGML's."
        )
    seen: set[int] = set()
    for w in all_rows:
        if not w.ok or id(w.result) in seen:
            continue
        seen.add(id(w.result))
        where = " ".join([*w.result.key()[:2], *config_words(w.result)]) + (f" {w.host}" if multi_host else "")
        line = limits.describe(w.result)
        if line:
            notes.append(f"limits, {where}: {line}.")
        check = limits.floor_check(w.result.extra.transfer_floor)
        if check is not None and not check.ok:
            notes.append(
                f"WARNING: {where}: the transfer floor's {check}: both directions together must take "
                "at least the slower direction alone and at most the two alone in sequence."
            )
        gap = limits.probe_gap(w.result)
        if gap is not None and abs(gap[1]) > limits.PROBE_TOLERANCE:
            notes.append(
                f"WARNING: {where}: the driver's floor {ms(limits.floor_ms(w.result))} ms and "
                f"sam3d_floor_probe's {ms(gap[0])} ms differ by {gap[1]:+.1%} (more than "
                f"{limits.PROBE_TOLERANCE:.0%})."
            )
        why = w.result.extra.floor_probe_error
        if why and limits.floor_ms(w.result) is not None:
            notes.append(f"WARNING: {where}: no floor cross-check: {cell(why)}")
        if w.result.migrated_from == WITHOUT_LIMITS and limits.floor_ms(w.result) is not None:
            notes.append(
                f"{where}: a {WITHOUT_LIMITS} result: its floor is the earlier measurement (one "
                "block after the replay, unaligned download offset), and it has no limits."
            )
    return notes


def _profile(result: Record) -> str:
    p = result.profile
    return f"{p.sha256[:12]} v{p.version}" if p is not None else "-"


@dataclass(frozen=True)
class Column:
    header: str
    align: str = "left"
    movable: bool = True  # may move to the caption when identical in every row


def layout(
    columns: list[Column], table: list[dict[str, str]], keep: set[str] = frozenset()
) -> tuple[list[Column], list[str]]:
    """Splits columns into those shown and caption items: a movable column whose non-empty
    value is the same in every row that has one becomes "header=value" in the caption (a failed
    row has no numbers, so it does not keep "n" in the table); a column that is empty in every
    row is dropped. Columns in ``keep`` always stay."""
    shown, caption = [], []
    for c in columns:
        values = {row.get(c.header, "") for row in table} - {""}
        if not values:
            continue
        if c.movable and c.header not in keep and len(values) == 1:
            caption.append(f"{c.header}={values.pop()}")
        else:
            shown.append(c)
    return shown, caption


def tabulate_rows(shown: list[Column], table: list[dict[str, str]], padding: int | None = None) -> str:
    """The pipe table of ``table``'s cells in the ``shown`` columns; ``padding``: tabulate's
    minimum padding of a header (None: its default of 2)."""
    if padding is not None:
        saved, tabulate_module.MIN_PADDING = tabulate_module.MIN_PADDING, padding
        try:
            return tabulate_rows(shown, table)
        finally:
            tabulate_module.MIN_PADDING = saved
    return tabulate(
        [[cell(row.get(c.header, "")) for c in shown] for row in table],
        headers=[c.header for c in shown],
        tablefmt="pipe",
        colalign=[c.align for c in shown],
        disable_numparse=True,
    )


@dataclass
class Table:
    """The rows of the one table (dicts of cells by column header), its columns, the columns
    always shown (an output mismatch), and the notes below it."""

    columns: list[Column]
    rows: list[dict[str, str]]
    keep: set[str]
    notes: list[str]


def build(results: Iterable[Record]) -> Table:
    """The one table over any set of result records (ReportError when empty).

    One row per (variant, backend, device, batching) of each result; a failed result keeps one
    row with "FAILED: <reason>" where the numbers would be. Columns: machine (only when the
    results come from more than one host), variant, backend, device, batching, run (only when
    two results share the same configuration and host), median ms, p95 ms (nearest-rank),
    min-max ms, n, async up/down, sync up/down, bytes up/down, fallbacks (nonzero reasons
    only), speedup (on rows: median(off)/median(on) with the IQR of paired per-image ratios),
    outputs identical, profile. Numbers (median ms to excluded ms, but fallbacks) are
    right-aligned, names and words left-aligned. A column that reads the same in every row moves
    to the caption (layout), except run and each row's own measurements (median, p95 and min-max
    ms, speedup, saved vs on ms, x floor, x limit, waits, excluded ms), which stay in the table.
    Notes state the statistics' rules, the profile's byte totals and every mismatch and failure.
    """
    results = list(results)
    if not results:
        raise ReportError("no results to report: pass result files or folders holding them")
    all_rows = rows(results)
    multi_host = len(hosts(results)) > 1
    confs = Counter((*w.result.key(), *w.result.configuration().values(), w.host, w.mode) for w in all_rows)
    # A configuration field gets a column only where some row is not at its default (a table of
    # default runs shows none); the same value in every row moves to the caption (layout()).
    configs = [
        k
        for k in record.CONFIGURATION
        if any(r.configuration()[k] != record.Record.model_fields[k].default for r in results)
    ]
    duplicated = any(n > 1 for n in confs.values())
    outputs, warnings = output_checks(all_rows, multi_host)
    backend_notes, backend_warnings = across_backends(all_rows, multi_host)
    warnings += backend_warnings
    speedups = _speedups(all_rows)
    savings = _savings(all_rows)

    columns = (
        ([Column("machine")] if multi_host else [])
        + [Column("variant"), Column("backend"), Column("device")]
        + [Column(CONFIG_HEADERS[k]) for k in configs]
        + [Column("batching")]
        + ([Column("run", movable=False)] if duplicated else [])
        + [
            Column("median ms", "right", False),
            Column("p95 ms", "right", False),
            Column("min-max ms", "right", False),
            Column("n", "right"),
            Column("async up/down", "right"),
            Column("sync up/down", "right"),
            Column("bytes up/down", "right"),
            Column("fallbacks"),
            Column("speedup", "right", False),
            Column("saved vs on ms", "right", False),
            Column("x floor", "right", False),
            Column("x limit", "right", False),
            Column("waits", "right", False),
            Column("excluded ms", "right", False),
            Column("outputs identical"),
            Column("profile"),
        ]
    )

    table = []
    for w in all_rows:
        r = w.result
        variant, backend, device = r.key()
        cells = {
            "machine": w.host,
            "variant": variant,
            "backend": backend,
            "device": device,
            **{CONFIG_HEADERS[k]: config_cell(r.configuration()[k]) for k in configs},
            "batching": w.mode or "-",
            "run": f"#{w.index}",
            "profile": _profile(r),
            "outputs identical": outputs[id(w)],
        }
        if w.ok:
            s = stats.summarize(w.wall_ms)
            c = w.data.counters
            lim = limits.limit(r, w.data)
            cells.update(
                {
                    "median ms": ms(s.median),
                    "p95 ms": ms(s.p95),
                    "min-max ms": f"{ms(s.min)}-{ms(s.max)}",
                    "n": str(s.n),
                    "async up/down": f"{c.async_uploads}/{c.async_downloads}",
                    "sync up/down": f"{c.sync_uploads}/{c.sync_downloads}",
                    "bytes up/down": _bytes(c),
                    "fallbacks": _fallbacks(c),
                    "speedup": str(speedups[id(w)]) if id(w) in speedups else "",
                    "saved vs on ms": f"{savings[id(w)][0]:.3f} ({savings[id(w)][1]:.0%})" if id(w) in savings else "",
                    "x floor": _floor_cell(r, s.median),
                    "x limit": limit_ratio(lim, s.median),
                    "waits": _waits(lim),
                    "excluded ms": _excluded(w),
                }
            )
        else:
            cells["median ms"] = f"FAILED: {r.reason}"
        table.append(cells)

    keep = {"outputs identical"} if any("NO" in row["outputs identical"] for row in table) else set()
    notes = [
        "times: per-image wall ms; p95 is nearest-rank (the ceil(0.95 n)-th smallest); "
        "speedup = the median of the paired per-image ratios off[i]/row[i] of the same run, with their "
        "IQR (25th-75th percentile, numpy linear)."
    ]
    notes.append(
        f"bytes per image; the SAM3D transfer profile's totals are {profile.UPLOAD_BYTES:,} uploaded "
        f"and {profile.DOWNLOAD_BYTES:,} downloaded"
        + (
            "; * marks rows that differ from them."
            if any(row.get("bytes up/down", "").endswith("*") for row in table)
            else "."
        )
    )
    if any(row.get("saved vs on ms") for row in table):
        notes.append(
            "saved vs on: median(on) - median(row) per image, ms (share of on): what zero-copy or "
            "queued calls save over the spec's staged design in the same run."
        )
    notes += _limit_notes(all_rows, table, multi_host)
    notes += backend_notes
    if duplicated:
        notes.append("run: #i is the i-th result given; two results share a configuration and host.")
    for w in all_rows:
        if not w.ok:
            notes.append(f"FAILED: {w.label(multi_host)}: {cell(w.result.reason)} (no timings)")
    for text in warnings:
        notes.append(f"WARNING: {text}")
    return Table(columns, table, keep, notes)


def render(results: Iterable[Record], title: str | None = None) -> str:
    """The one table as Markdown (table.md): columns identical in every row move to the caption
    line above the table (a column showing an output mismatch never moves), the notes below."""
    t = build(results)
    shown, caption = layout(t.columns, t.rows, keep=t.keep)
    lines = []
    if title:
        lines += [f"## {title}", ""]
    if caption:
        lines += ["all rows: " + ", ".join(caption), ""]
    lines.append(tabulate_rows(shown, t.rows))
    lines.append("")
    lines += [f"- {n}" for n in t.notes]
    return "\n".join(lines) + "\n"


class ReportRow(BaseModel):
    """One row of `sam3d report --format json`: a batching mode of one result (batching None:
    a failed result without rows). Times in ms; None where the row has no such number."""

    variant: str
    backend: str
    device: str
    configuration: dict[str, str | bool] = Field(description="the record's configuration fields")
    batching: str | None
    host: str
    status: Literal["ok", "failed"]
    reason: str | None = None
    n: int | None = None
    median_ms: float | None = None
    p95_ms: float | None = Field(None, description="nearest-rank")
    min_ms: float | None = None
    max_ms: float | None = None
    speedup: float | None = Field(None, description="median of the paired per-image ratios off/row")
    speedup_iqr: tuple[float, float] | None = None
    saved_vs_on_ms: float | None = None
    floor_ms: float | None = None
    limit_ms: float | None = None
    limit_floor: Literal["serial", "duplex"] | None = Field(
        None, description="the floor the limit counts: the serial transfer floor, or the duplex floor"
    )
    serial_limit_ms: float | None = Field(None, description="the limit on the serial floor")
    waits_made: int | None = None
    waits_mandatory: int | None = None
    counters: record.Counters | None = None
    outputs_identical: bool | None = Field(None, description="None: nothing to compare against, or failed")


class ReportDocument(BaseModel):
    """`sam3d report --format json`: the one table's rows as numbers, and its notes as text."""

    schema_: Literal["sam3d-report/1"] = Field(alias="schema")
    rows: list[ReportRow]
    notes: list[str]


def document(results: Iterable[Record]) -> ReportDocument:
    """The one table as data (`report --format json`): numbers as numbers, no Markdown."""
    results = list(results)
    t = build(results)
    all_rows = rows(results)
    outputs, _ = output_checks(all_rows)  # read only for whether a row matched, never for the labels in its text
    speedups, savings = _speedups(all_rows), _savings(all_rows)
    out = []
    for w in all_rows:
        r = w.result
        row = ReportRow(
            variant=r.variant,
            backend=r.key()[1],
            device=r.key()[2],
            configuration=r.configuration(),
            batching=w.mode,
            host=w.host,
            status=r.status,
            reason=r.reason,
            outputs_identical={"yes": True, "n/a": None, "": None}.get(outputs[id(w)], False),
        )
        if w.ok:
            s = stats.summarize(w.wall_ms)
            lim = limits.limit(r, w.data)
            sp = speedups.get(id(w))
            row = row.model_copy(
                update={
                    "n": s.n,
                    "median_ms": s.median,
                    "p95_ms": s.p95,
                    "min_ms": s.min,
                    "max_ms": s.max,
                    "speedup": sp.ratio if sp else None,
                    "speedup_iqr": (sp.iqr_low, sp.iqr_high) if sp else None,
                    "saved_vs_on_ms": savings[id(w)][0] if id(w) in savings else None,
                    "floor_ms": limits.floor_ms(r),
                    "limit_ms": lim.ms if lim else None,
                    "limit_floor": lim.floor if lim else None,
                    "serial_limit_ms": lim.serial_ms if lim else None,
                    "waits_made": lim.waits_made if lim else None,
                    "waits_mandatory": lim.round_trips if lim else None,
                    "counters": w.data.counters,
                }
            )
        out.append(row)
    return ReportDocument(schema=REPORT_SCHEMA, rows=out, notes=[n.replace("**", "") for n in t.notes])


# The terminal's table: short headers, and the columns dropped in this order while the table is
# wider than TERMINAL_WIDTH (never those naming a row); table.md keeps every column.
TERMINAL_WIDTH = 120
SHORT = {
    "median ms": "median",
    "p95 ms": "p95",
    "min-max ms": "min-max",
    "async up/down": "async u/d",
    "sync up/down": "sync u/d",
    "bytes up/down": "bytes u/d",
    "fallbacks": "fallbk",
    "speedup": "speedup",
    "saved vs on ms": "saved",
    "x floor": "x floor",
    "x limit": "x limit",
    "excluded ms": "excl",
    "outputs identical": "same out",
}
DROP_ORDER = (
    "profile",
    "bytes up/down",
    "min-max ms",
    "excluded ms",
    "waits",
    "sync up/down",
    "async up/down",
    "x floor",
    "n",
    "saved vs on ms",
    "fallbacks",
    "x limit",
)


def _short_cell(header: str, text: str) -> str:
    if header == "speedup":
        return text.split(" (", 1)[0]  # "1.05x (IQR 1.05-1.05)" -> "1.05x"
    if header in ("saved vs on ms", "x floor", "x limit"):
        return text.split(" (", 1)[0]
    if header in ("device", "machine") and len(text) > 20:
        return text[:19] + "~"
    if text.startswith("FAILED: "):
        return "FAILED (below)"  # the reason is in the FAILED note
    return text


def render_terminal(results: Iterable[Record], full: Path | str | None = None, width: int = TERMINAL_WIDTH) -> str:
    """The one table for a terminal of ``width`` columns: abbreviated headers and cells, columns
    dropped (DROP_ORDER) until it fits; the caption wrapped; the full table is in ``full``."""
    t = build(results)
    shown, caption = layout(t.columns, t.rows, keep=t.keep)
    rows = [{SHORT.get(k, k): _short_cell(k, v) for k, v in row.items()} for row in t.rows]
    cols = [Column(SHORT.get(c.header, c.header), c.align, c.movable) for c in shown]
    dropped = []
    text = tabulate_rows(cols, rows, padding=0)
    for header in DROP_ORDER:
        if max(map(len, text.splitlines())) <= width:
            break
        name = SHORT.get(header, header)
        if any(c.header == name for c in cols) and header not in t.keep:
            cols = [c for c in cols if c.header != name]
            dropped.append(name)
            text = tabulate_rows(cols, rows, padding=0)
    lines = textwrap.wrap("all rows: " + ", ".join(caption), width, subsequent_indent="  ") if caption else []
    lines += [text]
    notes = [n for n in t.notes if n.startswith(("FAILED", "WARNING"))]
    lines += [textwrap.shorten(f"- {n}", width, placeholder=" ...") for n in notes]
    if dropped or full:
        lines.append(
            textwrap.shorten(
                (f"(not shown here: {', '.join(dropped)}; " if dropped else "(")
                + (f"every column and note: {full})" if full else "every column: the table.md of the evidence folder)"),
                width,
                placeholder=" ...)",
            )
        )
    return "\n".join(lines) + "\n"


def _kernel_ms(total: float | None) -> str:
    return ms(total) if total else ""


def _found(t: dict, key: str) -> str:
    """A checker column's cell: its count, "?" when the checker ran but left no count, else blank."""
    if key in t:
        return "?" if t[key] is None else str(t[key])
    return ""


def device_tests(machine: dict, runs: Sequence[tuple[str, str, dict]]) -> str:
    """The device-test table of a GPU run: one row per (variant, run kind, counts) as the
    bundle's run.pyz reports them ("passed", "failed", "skipped", "cuda_devices": the CUDA devices
    GGML saw in that binary, a column only when some run has it,
    "diagnostic_kernel_timestamp_total_ms"); a run marked "not_applicable" (the perf-logger run
    of a variant without Vulkan) shows n/a. Runs under a GPU checker (run.pyz --vulkan-validation,
    --compute-sanitizer; docs/gpu-checks.md) add a column per checker: the validation layer's
    messages and compute-sanitizer's errors of the run (a canary's row counts what it was meant
    to provoke)."""
    cuda = any(t.get("cuda_devices") is not None for _, _, t in runs)
    checks = [
        (key, title)
        for key, title in (
            ("validation_messages", "validation messages"),
            ("sanitizer_errors", "compute-sanitizer errors"),
        )
        if any(key in t for _, _, t in runs)
    ]
    columns = (
        [
            Column("variant"),
            Column("run"),
            Column("passed", "right"),
            Column("failed", "right"),
            Column("skipped", "right"),
        ]
        + ([Column("CUDA devices (GGML's)", "right")] if cuda else [])
        + [Column(title, "right") for _, title in checks]
        + [Column("kernel timestamps ms (diagnostic)", "right")]
    )
    table = []
    for variant, kind, t in runs:
        if t.get("not_applicable"):
            table.append({"variant": variant, "run": kind, **{c.header: "n/a" for c in columns[2:]}})
            continue
        row = {
            "variant": variant,
            "run": kind,
            "passed": str(t["passed"]),
            "failed": str(t["failed"]),
            "skipped": str(t["skipped"]),
            "CUDA devices (GGML's)": "" if t.get("cuda_devices") is None else str(t["cuda_devices"]),
            "kernel timestamps ms (diagnostic)": _kernel_ms(t.get("diagnostic_kernel_timestamp_total_ms")),
        }
        row.update({title: _found(t, key) for key, title in checks})
        table.append(row)
    return (
        "\n".join(
            [
                f"# Device tests on {machine['hostname']} ({machine.get('gpu', '')})",
                "",
                tabulate_rows(columns, table) if table else "no device tests",
                "",
                "The kernel timestamp total is GGML_VK_PERF_LOGGER's sum over the test run: a diagnostic "
                "with an extra synchronization before compute, never production latency.",
            ]
        )
        + "\n"
    )
