"""The benchmark table, its plot, the evidence folder, and run-to-run comparison.

render(results) -> str         one Markdown ("pipe") table over any set of result dicts
plot(results, path) -> Path    per-image wall-time distributions, one box per table row (PNG)
problems(results) -> [str]     why a set of results is not accepted evidence (failed, outputs differ)
write_evidence(results, run_dir, accepted, reason) -> Path
                               generated/diagnostics/<run-name>/: table.md, timings.png,
                               results/*.json, and NOT-ACCEPTED when it is not accepted
compare(folder_a, folder_b) -> str
                               medians of B over A per matching row, changes beyond the runs'
                               own spread flagged; refuses runs on different profiles

Results are dicts in schema sam3d-bench-result/1 (sam3d/results.py). The layout follows
llama.cpp's scripts/compare-llama-bench.py: one row per configuration, and columns whose value
is the same in every row leave the table for a caption line ("all rows: backend=CPU, n=20").
Statistics: sam3d/stats.py (p95 nearest-rank, speedup with the IQR of paired ratios).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from . import results as res
from . import stats, variants

# design.md, "The SAM3D transfer profile": bytes per image of the full profile.
PROFILE_BYTES_UPLOADED = 33_193_136
PROFILE_BYTES_DOWNLOADED = 32_403_596

TABLE_FILE = "table.md"
PLOT_FILE = "timings.png"
RESULTS_SUBDIR = "results"
NOT_ACCEPTED_FILE = "NOT-ACCEPTED"

MODE_ORDER = {**{m: i for i, m in enumerate(res.BATCHING)}, None: len(res.BATCHING)}


class ReportError(ValueError):
    pass


class ProfileMismatch(ReportError):
    """Two runs measured different profile files; their timings are never compared (design.md)."""


@dataclass
class Row:
    """One table row: one batching mode of one result, or a failed result (mode None)."""

    result: dict
    index: int            # 1-based position of the result in the input
    mode: str | None
    data: dict | None     # the schema's row object; None for a failed result

    @property
    def ok(self) -> bool:
        return self.data is not None

    @property
    def wall_ms(self) -> list[float]:
        return [s["wall_ms"] for s in self.data["samples"]] if self.data else []

    @property
    def outputs(self) -> dict[int, str]:
        return {s["image"]: s["outputs_sha256"] for s in self.data["samples"]} if self.data else {}

    @property
    def host(self) -> str:
        return res.hostname(self.result) or "-"

    def label(self, with_host: bool = False) -> str:
        parts = [*res.key(self.result)] + ([self.mode] if self.mode else [])
        if with_host:
            parts.append(self.host)
        return " ".join(parts)


def _variant_rank(name: str) -> int:
    return variants.NAMES.index(name) if name in variants.NAMES else len(variants.NAMES)


def rows(results: Sequence[dict]) -> list[Row]:
    """The table rows in table order: variant list order (unknown variants after, by name),
    backend, device, host, input order, then off before on."""
    out = []
    for i, r in enumerate(results, 1):
        if r["status"] == "ok":
            out.extend(Row(r, i, row["batching"], row) for row in r["rows"])
        else:
            out.append(Row(r, i, None, None))
    out.sort(key=lambda w: (_variant_rank(w.result["variant"]), *res.key(w.result), w.host, w.index,
                            MODE_ORDER[w.mode]))
    return out


def _hosts(results: Sequence[dict]) -> set[str]:
    return {h for h in (res.hostname(r) for r in results) if h}


def _diff(a: dict[int, str], b: dict[int, str]) -> tuple[int, int]:
    """(images whose outputs differ or exist on one side only, images on either side)."""
    imgs = set(a) | set(b)
    return sum(1 for i in imgs if a.get(i) != b.get(i)), len(imgs)


def _arith_group(w: Row) -> tuple:
    """Rows expected to produce identical bytes: same backend, device and profile (the core's
    contract: batching on is byte-identical to off; the variants differ in instrumentation and
    optimisation, not in the arithmetic the backend runs)."""
    return (res.key(w.result)[1], res.key(w.result)[2], res.profile_sha256(w.result))


def output_checks(all_rows: Sequence[Row], with_host: bool = False) -> tuple[dict[int, str], list[str]]:
    """The "outputs identical" cell per row (by id) and one warning line per mismatch.

    - on vs off of the same result: every image's outputs_sha256 must be equal (paired by image).
    - across results with the same backend, device and profile: each row's per-image hashes
      must equal the group's most common set (ties: the first row in table order), so the odd
      one out is the one marked.
    A row with nothing to compare against says "n/a"; a failed row is blank.
    """
    cells: dict[int, str] = {}
    warnings: list[str] = []
    ok_rows = [w for w in all_rows if w.ok]
    groups: dict[tuple, list[Row]] = {}
    for w in ok_rows:
        groups.setdefault(_arith_group(w), []).append(w)
    reference: dict[tuple, Row] = {}
    for g, members in groups.items():
        counts = Counter(frozenset(w.outputs.items()) for w in members)
        best = max(counts.values())
        reference[g] = next(w for w in members if counts[frozenset(w.outputs.items())] == best)
    for w in all_rows:
        if not w.ok:
            cells[id(w)] = ""
            continue
        parts = []
        compared = False
        # Every mode is checked against the same result's off row (off against its first other row).
        partner = next((o for o in ok_rows if o.result is w.result and o is not w
                        and (o.mode == "off" or w.mode == "off")), None)
        if partner is not None:
            compared = True
            d, n = _diff(w.outputs, partner.outputs)
            if d:
                parts.append(f"**NO**: {w.mode if w.mode != 'off' else partner.mode}/off differ ({d}/{n} images)")
                if w.mode != "off":
                    warnings.append(f"outputs differ between batching {w.mode} and off: {w.label(with_host)} "
                                    f"({d}/{n} images)")
        g = _arith_group(w)
        ref = reference[g]
        if len(groups[g]) > 1:
            compared = True
            if ref.result is not w.result:  # the same result's other mode: the on/off check above
                d, n = _diff(w.outputs, ref.outputs)
                if d:
                    parts.append(f"**NO**: differs from {ref.label(with_host)} ({d}/{n} images)")
                    warnings.append(f"outputs of {w.label(with_host)} differ from {ref.label(with_host)} "
                                    f"({d}/{n} images; same backend, device and profile)")
        cells[id(w)] = "; ".join(parts) if parts else ("yes" if compared else "n/a")
    return cells, warnings


def _sibling(all_rows: Sequence[Row], w: Row, mode: str) -> Row | None:
    """The row of batching `mode` from the same result as `w`, or None."""
    return next((o for o in all_rows if o.result is w.result and o.mode == mode), None)


def _speedups(all_rows: Sequence[Row]) -> dict[int, stats.Speedup]:
    """Each non-off row (by id) -> speedup against the off row of the same result, paired by image index."""
    out = {}
    for w in all_rows:
        if w.mode in ("off", None):
            continue
        off = _sibling(all_rows, w, "off")
        if off is None:
            continue
        on_ms = {s["image"]: s["wall_ms"] for s in w.data["samples"]}
        off_ms = {s["image"]: s["wall_ms"] for s in off.data["samples"]}
        common = sorted(set(on_ms) & set(off_ms))
        if not common:
            continue
        out[id(w)] = stats.speedup([off_ms[i] for i in common], [on_ms[i] for i in common])
    return out


def _savings(all_rows: Sequence[Row]) -> dict[int, str]:
    """Each zerocopy/queued row (by id) -> the per-image time it saves over the spec's design:
    median(on wall_ms) - median(row wall_ms) of the same result, in ms and as a share of on."""
    out = {}
    for w in all_rows:
        if w.mode not in ("zerocopy", "queued") or not w.ok:
            continue
        on = _sibling(all_rows, w, "on")
        if on is None or not on.ok:
            continue
        on_ms = stats.median(on.wall_ms)
        saved = on_ms - stats.median(w.wall_ms)
        out[id(w)] = f"{saved:.3f} ({saved / on_ms:.0%})"
    return out


def _ms(x: float) -> str:
    return f"{x:.3f}"


def _fallbacks(counters: dict) -> str:
    fb = counters["fallbacks"]
    known = [k for k in res.FALLBACK_REASONS if fb.get(k)]
    extra = sorted(k for k in fb if k not in res.FALLBACK_REASONS and fb[k])
    return ", ".join(f"{k}={fb[k]}" for k in known + extra) or "none"


def _bytes(counters: dict) -> str:
    up, down = counters["bytes_uploaded"], counters["bytes_downloaded"]
    mark = "" if (up, down) == (PROFILE_BYTES_UPLOADED, PROFILE_BYTES_DOWNLOADED) else " *"
    return f"{up:,} / {down:,}{mark}"


def _floor_ratio(result: dict, median_ms: float) -> str:
    """The row's median over the transfer floor measured in the same run (the profile's bytes
    as two large pinned copies; sam3d_bench's extra.transfer_floor), or "" without one."""
    floor = (result.get("extra") or {}).get("transfer_floor")
    if not isinstance(floor, dict) or not floor.get("median_ms"):
        return ""
    return f"{median_ms / floor['median_ms']:.1f}x ({_ms(floor['median_ms'])})"


def _profile(result: dict) -> str:
    p = result.get("profile")
    return f"{p['sha256'][:12]} v{p['version']}" if isinstance(p, dict) else "-"


def _cell(text: str) -> str:
    """One Markdown table cell: no line breaks, '|' escaped."""
    return re.sub(r"\s*\n\s*", " ", str(text)).replace("|", "\\|")


@dataclass(frozen=True)
class Column:
    header: str
    align: str = "left"
    movable: bool = True  # may move to the caption when identical in every row


def _layout(columns: list[Column], table: list[dict[str, str]], keep: set[str] = frozenset()
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


def _tabulate(shown: list[Column], table: list[dict[str, str]]) -> str:
    return tabulate([[_cell(row.get(c.header, "")) for c in shown] for row in table],
                    headers=[c.header for c in shown], tablefmt="pipe",
                    colalign=[c.align for c in shown], disable_numparse=True)


def render(results: Iterable[dict], title: str | None = None) -> str:
    """One Markdown table over any set of results (validated first; ReportError when empty).

    One row per (variant, backend, device, batching) of each result; a failed result keeps one
    row with "FAILED: <reason>" where the numbers would be. Columns: machine (only when the
    results come from more than one host), variant, backend, device, batching, run (only when
    two results share the same configuration and host), median ms, p95 ms (nearest-rank),
    min-max ms, n, async up/down, sync up/down, bytes up/down, fallbacks (nonzero reasons
    only), speedup (on rows: median(off)/median(on) with the IQR of paired per-image ratios),
    outputs identical, profile. Columns identical in every row move to the caption line above
    the table; a column showing an output mismatch never moves. Notes below the table state
    the statistics' rules, the profile's byte totals and every mismatch and failure.
    """
    results = [res.validate(r, f"result #{i}") for i, r in enumerate(results, 1)]
    if not results:
        raise ReportError("no results to report: pass result files or folders holding them")
    all_rows = rows(results)
    multi_host = len(_hosts(results)) > 1
    confs = Counter((*res.key(w.result), w.host, w.mode) for w in all_rows)
    duplicated = any(n > 1 for n in confs.values())
    outputs, warnings = output_checks(all_rows, multi_host)
    speedups = _speedups(all_rows)
    savings = _savings(all_rows)

    columns = ([Column("machine")] if multi_host else []) + [
        Column("variant"), Column("backend"), Column("device"), Column("batching")] + (
        [Column("run", movable=False)] if duplicated else []) + [
        Column("median ms", "right", False), Column("p95 ms", "right", False),
        Column("min-max ms", "right", False), Column("n", "right"),
        Column("async up/down", "right"), Column("sync up/down", "right"),
        Column("bytes up/down", "right"), Column("fallbacks"),
        Column("speedup", "right", False), Column("saved vs on ms", "right", False),
        Column("x floor", "right", False),
        Column("outputs identical"), Column("profile")]

    table = []
    for w in all_rows:
        r = w.result
        variant, backend, device = res.key(r)
        cells = {"machine": w.host, "variant": variant, "backend": backend, "device": device,
                 "batching": w.mode or "-", "run": f"#{w.index}", "profile": _profile(r),
                 "outputs identical": outputs[id(w)]}
        if w.ok:
            s = stats.summarize(w.wall_ms)
            c = w.data["counters"]
            cells.update({
                "median ms": _ms(s.median), "p95 ms": _ms(s.p95),
                "min-max ms": f"{_ms(s.min)}-{_ms(s.max)}", "n": str(s.n),
                "async up/down": f"{c['async_uploads']}/{c['async_downloads']}",
                "sync up/down": f"{c['sync_uploads']}/{c['sync_downloads']}",
                "bytes up/down": _bytes(c), "fallbacks": _fallbacks(c),
                "speedup": str(speedups[id(w)]) if id(w) in speedups else "",
                "saved vs on ms": savings.get(id(w), ""),
                "x floor": _floor_ratio(r, s.median)})
        else:
            cells["median ms"] = f"FAILED: {r['reason']}"
        table.append(cells)

    mismatch = {"outputs identical"} if any("NO" in row["outputs identical"] for row in table) else set()
    shown, caption = _layout(columns, table, keep=mismatch)
    lines = []
    if title:
        lines += [f"## {title}", ""]
    if caption:
        lines += ["all rows: " + ", ".join(caption), ""]
    lines.append(_tabulate(shown, table))
    lines.append("")
    notes = ["times: per-image wall ms; p95 is nearest-rank (the ceil(0.95 n)-th smallest); "
             "speedup = median(off)/median(on) of the same run, IQR = 25th-75th percentile "
             "(numpy linear) of the paired per-image off/on ratios."]
    notes.append(f"bytes per image; the SAM3D transfer profile's totals are {PROFILE_BYTES_UPLOADED:,} uploaded "
                 f"and {PROFILE_BYTES_DOWNLOADED:,} downloaded"
                 + ("; * marks rows that differ from them." if any(
                     row.get("bytes up/down", "").endswith("*") for row in table) else "."))
    if any(row.get("saved vs on ms") for row in table):
        notes.append("saved vs on: median(on) - median(row) per image, ms (share of on): what zero-copy or "
                     "queued calls save over the spec's staged design in the same run.")
    if any(row.get("x floor") for row in table):
        notes.append("x floor: median over the transfer floor measured in the same run (the profile's bytes "
                     "as one host-to-device and one device-to-host copy from pinned memory, asynchronous or "
                     "synchronous, whichever is faster; its median ms in parentheses).")
    if duplicated:
        notes.append("run: #i is the i-th result given; two results share a configuration and host.")
    for w in all_rows:
        if not w.ok:
            notes.append(f"FAILED: {w.label(multi_host)}: {_cell(w.result['reason'])} (no timings)")
    for text in warnings:
        notes.append(f"WARNING: {text}")
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def problems(results: Iterable[dict]) -> list[str]:
    """Why these results are not accepted evidence: each failed result and each output
    mismatch (on vs off, or across results with the same backend, device and profile).
    Empty when the results are acceptable."""
    results = [res.validate(r, f"result #{i}") for i, r in enumerate(results, 1)]
    all_rows = rows(results)
    out = [f"{w.label(True)} failed: {w.result['reason']}" for w in all_rows if not w.ok]
    _, warnings = output_checks(all_rows, True)
    return out + warnings


def plot(results: Iterable[dict], path: str | os.PathLike, title: str | None = None) -> Path:
    """A PNG of the per-image wall times: one panel per table row, in table order, labelled like
    the row, each with its own ms axis (variants differ several-fold, a shared axis would flatten
    every box): a horizontal box (quartiles, whiskers at 1.5 IQR) with every sample drawn over
    it, and a line at the median. A failed row's panel says FAILED and why. Agg renderer (no
    display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    results = list(results)
    all_rows = rows(results)
    if not all_rows:
        raise ReportError("no results to plot")
    multi_host = len(_hosts(results)) > 1
    fig = Figure(figsize=(10, 0.6 + 0.9 * len(all_rows)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(all_rows), 1, squeeze=False)[:, 0]
    for ax, w in zip(axes, all_rows):
        ax.grid(axis="x", alpha=0.3)
        if not w.ok:
            ax.set_xticks([])
            ax.text(0.01, 0, f"FAILED: {w.result['reason'][:100]}", transform=ax.get_yaxis_transform(),
                    va="center", color="tab:red")
        else:
            xs = w.wall_ms
            ax.boxplot([xs], positions=[0], orientation="horizontal", widths=0.7, showfliers=False)
            ax.scatter(xs, [0.3 * (((k * 7) % 11) / 10 - 0.5) for k in range(len(xs))], s=10, alpha=0.7,
                       color="tab:blue", zorder=3)
            s = stats.summarize(xs)
            ax.text(1.0, 1.0, f"median {_ms(s.median)}  p95 {_ms(s.p95)}  n={s.n}", transform=ax.transAxes,
                    ha="right", va="bottom", fontsize=8)
        ax.set_yticks([0], [w.label(multi_host)])
        ax.set_ylim(-0.6, 0.6)
    axes[-1].set_xlabel("wall time per image (ms)")
    fig.suptitle(title or "per-image wall time")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=100)
    return p


def _result_filename(i: int, r: dict) -> str:
    variant, backend, _ = res.key(r)
    name = f"{i:02d}-{variant}-{backend}-{res.hostname(r) or 'unknown'}.json"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def write_evidence(results: Iterable[dict], run_dir: str | os.PathLike, accepted: bool = True,
                   reason: str | None = None) -> Path:
    """Writes the evidence folder (design.md, "Evidence") and returns it.

    run_dir is the folder itself, normally paths.diagnostics_dir() / <run-name>. Written:
    table.md (the render() table under the run name), timings.png (plot()), results/*.json
    (a copy of every result, written atomically; stale copies in results/ are removed). Other
    files in run_dir (logs, per-sample JSON written by the runner) are left alone.

    The folder is accepted evidence only when ``accepted`` is true AND problems(results) is
    empty (no failed result, no output mismatch). Otherwise a NOT-ACCEPTED file holds the
    reasons (the caller's ``reason`` first) and table.md opens with "NOT ACCEPTED"; an accepted
    write removes a NOT-ACCEPTED file left by an earlier one. ``accepted=False`` needs a reason.
    """
    results = [res.validate(r, f"result #{i}") for i, r in enumerate(results, 1)]
    if not accepted and not (reason and reason.strip()):
        raise ReportError("write_evidence(accepted=False) needs a reason; it goes into NOT-ACCEPTED")
    d = Path(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    reasons = ([reason.strip()] if not accepted else []) + problems(results)

    rd = d / RESULTS_SUBDIR
    rd.mkdir(exist_ok=True)
    for old in rd.glob("*.json"):
        old.unlink()
    for i, r in enumerate(results, 1):
        res.write(rd / _result_filename(i, r), r)

    if results:
        plot(results, d / PLOT_FILE, title=d.name)
    head = [f"# {d.name}", ""]
    if reasons:
        head += ["**NOT ACCEPTED** as evidence:", ""] + [f"- {_cell(x)}" for x in reasons] + [""]
    body = render(results) if results else "no results\n"
    _write_text(d / TABLE_FILE, "\n".join(head + [body]))
    marker = d / NOT_ACCEPTED_FILE
    if reasons:
        _write_text(marker, "\n".join(reasons) + "\n")
    else:
        marker.unlink(missing_ok=True)
    return d


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# Comparison of two runs

def _by_config(results: Sequence[dict], side: str, where: str) -> dict[tuple, Row]:
    out: dict[tuple, Row] = {}
    for w in rows(results):
        k = (*res.key(w.result), w.mode or "-")
        if k in out:
            raise ReportError(
                f"{side} ({where}) holds two results for {' '.join(k)} (hosts {out[k].host}, {w.host}); "
                "compare needs one result per configuration on each side: pass one run's folder")
        out[k] = w
    return out


def _profiles(results: Sequence[dict], side: str, where: str) -> set[str]:
    shas = {s for s in (res.profile_sha256(r) for r in results) if s}
    if len(shas) > 1:
        raise ProfileMismatch(f"{side} ({where}) mixes results from {len(shas)} profiles "
                              f"({', '.join(sorted(shas))}); a run uses one profile file")
    return shas


def compare_results(a: Sequence[dict], b: Sequence[dict], where_a: str = "A", where_b: str = "B") -> str:
    """The comparison table of run B against run A (see compare())."""
    a = [res.validate(r, f"{where_a} result #{i}") for i, r in enumerate(a, 1)]
    b = [res.validate(r, f"{where_b} result #{i}") for i, r in enumerate(b, 1)]
    pa, pb = _profiles(a, "A", where_a), _profiles(b, "B", where_b)
    if pa and pb and pa != pb:
        raise ProfileMismatch(
            f"refusing to compare runs on different profiles: A ({where_a}) used profile sha256 "
            f"{next(iter(pa))}, B ({where_b}) used {next(iter(pb))}; runs on different profiles are "
            "never compared; re-run one side with the "
            "other's profile file")
    ra, rb = _by_config(a, "A", where_a), _by_config(b, "B", where_b)

    def failed_peer(k: tuple, other: dict[tuple, Row]) -> Row | None:
        """The other side's failed result for the same variant and backend (its device may be
        unknown): it stands against both batching rows."""
        return next((w for ok_, w in other.items() if not w.ok and ok_[:2] == k[:2]
                     and ok_[2] in (k[2], "-")), None)

    used: set[int] = set()
    pairs: dict[tuple, tuple[Row | None, Row | None]] = {}
    for k in set(ra) | set(rb):
        wa, wb = ra.get(k), rb.get(k)
        if wa is not None and wb is None and wa.ok:
            wb = failed_peer(k, rb)
        elif wb is not None and wa is None and wb.ok:
            wa = failed_peer(k, ra)
        if wa is not None and wb is not None and (not wa.ok or not wb.ok) and (wa.mode or wb.mode):
            used.update(id(w) for w in (wa, wb) if not w.ok)
        pairs[k] = (wa, wb)
    for k, (wa, wb) in list(pairs.items()):
        # a failed result present on one side only, already shown against the other side's rows
        if (wa is None) != (wb is None) and id(wa or wb) in used:
            del pairs[k]
    if not any(wa is not None and wb is not None for wa, wb in pairs.values()):
        raise ReportError(f"A ({where_a}) and B ({where_b}) share no configuration (variant, backend, "
                          "device, batching): nothing to compare; compare runs of the same variants on "
                          "the same device")
    keys = sorted(pairs, key=lambda k: (_variant_rank(k[0]), k[0], k[1], k[2], MODE_ORDER.get(k[3], 2)))
    table = []
    flagged = 0
    for k in keys:
        wa, wb = pairs[k]
        cells = dict(zip(("variant", "backend", "device", "batching"), k))
        if wa is None or wb is None:
            cells["change"] = "only in A" if wb is None else "only in B"
            side = wa or wb
            cells["A median ms" if wb is None else "B median ms"] = (
                _ms(stats.median(side.wall_ms)) if side.ok else f"FAILED: {side.result['reason']}")
        elif not (wa.ok and wb.ok):
            cells["A median ms"] = _ms(stats.median(wa.wall_ms)) if wa.ok else f"FAILED: {wa.result['reason']}"
            cells["B median ms"] = _ms(stats.median(wb.wall_ms)) if wb.ok else f"FAILED: {wb.result['reason']}"
            cells["change"] = "not comparable (failed)"
        else:
            ratio, lo, hi = stats.change_band(wa.wall_ms, wb.wall_ms)
            cells["A median ms"] = _ms(stats.median(wa.wall_ms))
            cells["B median ms"] = _ms(stats.median(wb.wall_ms))
            cells["B/A"] = f"{ratio:.3f}"
            cells["band"] = f"{lo:.3f}-{hi:.3f}"
            if ratio > hi:
                cells["change"] = "**slower** (beyond spread)"
                flagged += 1
            elif ratio < lo:
                cells["change"] = "**faster** (beyond spread)"
                flagged += 1
            else:
                cells["change"] = "within spread"
        table.append(cells)
    columns = [Column("variant"), Column("backend"), Column("device"), Column("batching"),
               Column("A median ms", "right", False), Column("B median ms", "right", False),
               Column("B/A", "right", False), Column("band", "right", False), Column("change", movable=False)]
    shown, caption = _layout(columns, table)
    lines = [f"A: {where_a}", f"B: {where_b}", ""]
    if caption:
        lines += ["all rows: " + ", ".join(caption), ""]
    lines += [_tabulate(shown, table), "",
              "- B/A = median(B)/median(A) of per-image wall ms; band = 1 +/- (half-IQR(A)/median(A) + "
              "half-IQR(B)/median(B)), quartiles by numpy's linear method; a ratio outside the band is a "
              "change beyond the runs' own spread (their interquartile ranges no longer overlap).",
              f"- {flagged} of {len(table)} rows changed beyond the spread."]
    return "\n".join(lines) + "\n"


def compare(folder_a: str | os.PathLike, folder_b: str | os.PathLike) -> str:
    """A Markdown table of B against A: per matching (variant, backend, device, batching) row,
    the two medians, their ratio B/A and the band of the runs' own spread (stats.change_band);
    rows outside the band are flagged slower/faster. Rows present on one side only, or failed,
    are listed as such. Raises ProfileMismatch when the two folders' results were made from
    different profiles (profile.sha256), and ReportError/ResultError for unusable folders."""
    a = res.load_many([folder_a])
    b = res.load_many([folder_b])
    return compare_results(a, b, str(folder_a), str(folder_b))
