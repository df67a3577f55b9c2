"""The evidence folder of a run: generated/diagnostics/<run-name>/ with table.md, timings.png,
results/*.json, and NOT-ACCEPTED when it is not accepted evidence."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from ..core.files import write_atomic
from . import schema as res
from . import stats
from .checks import problems
from .rows import ReportError, cell, hosts, ms, rows
from .table import render

TABLE_FILE = "table.md"
PLOT_FILE = "timings.png"
RESULTS_SUBDIR = "results"
NOT_ACCEPTED_FILE = "NOT-ACCEPTED"


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
    multi_host = len(hosts(results)) > 1
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
            ax.text(1.0, 1.0, f"median {ms(s.median)}  p95 {ms(s.p95)}  n={s.n}", transform=ax.transAxes,
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
    """Writes the evidence folder and returns it.

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
        head += ["**NOT ACCEPTED** as evidence:", ""] + [f"- {cell(x)}" for x in reasons] + [""]
    body = render(results) if results else "no results\n"
    write_atomic(d / TABLE_FILE, "\n".join(head + [body]))
    marker = d / NOT_ACCEPTED_FILE
    if reasons:
        write_atomic(marker, "\n".join(reasons) + "\n")
    else:
        marker.unlink(missing_ok=True)
    return d
