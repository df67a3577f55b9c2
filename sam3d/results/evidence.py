"""The evidence folder of a run: generated/diagnostics/<run-name>/ with table.md, timings.png,
results/*.json, and NOT-ACCEPTED when it is not accepted evidence."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from ..core.files import write_atomic
from . import limits, record, stats
from .checks import problems
from .record import Record
from .rows import ReportError, cell, config_words, hosts, ms, rows
from .table import render

TABLE_FILE = "table.md"
PLOT_FILE = "timings.png"
RESULTS_SUBDIR = "results"
NOT_ACCEPTED_FILE = "NOT-ACCEPTED"

# timings.png's look (sizes, widths, transparency, fonts, resolution), apart from what it shows
# (tests/test_limits.py reads the figure: panels, labels, samples, bars, scales).
_FIGURE_WIDTH_IN, _ROW_HEIGHT_IN, _PANEL_HEIGHT_IN, _TITLE_HEIGHT_IN = 11, 0.45, 0.5, 1.2
_DPI = 100
_GRID = {"axis": "x", "alpha": 0.3}
_FAILED_TEXT = {"va": "center", "fontsize": 8}
_BOX = {"orientation": "horizontal", "widths": 0.6, "showfliers": False}
_SAMPLES = {"s": 8, "alpha": 0.6, "color": "tab:blue", "zorder": 3}
_BAR = {"linewidth": 2, "zorder": 4}
_BAR_HALF_HEIGHT = 0.4
# The samples' vertical offsets from their row's line (in rows, within +-1/8), one per sample
# in turn: spread so that equal times stay visible.
_JITTER = tuple(0.25 * (((k * 7) % 11) / 10 - 0.5) for k in range(11))
_TICK_FONT, _TITLE_FONT, _LEGEND_FONT = 7, 10, 8


def plot(results: Iterable[Record], path: str | os.PathLike, title: str | None = None) -> Path:
    """A PNG of the per-image wall times: one panel per backend and configuration (CPU; Vulkan;
    Vulkan, areas, levels, transfer-only; ...: the record's fields), its rows in table order, so
    each result's modes sit side by side; the panels of one backend share one ms axis, so its
    configurations compare at a glance (logarithmic when their times span more than 20x, as
    sanitizer variants beside release do). Each row: a horizontal box (quartiles,
    whiskers at 1.5 IQR) with every sample drawn over it, the transfer floor of its run as a
    black bar and its modelled limit (results/limits.py) as a red bar, labelled by variant,
    device (its first 32 characters), batching and, from several hosts, host. A failed row
    says FAILED and why, in red at the panel's left edge. Agg renderer (savefig picks it for a
    .png; no display needed).
    Creates the parent folders of ``path``; returns it."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    results = list(results)
    all_rows = rows(results)
    if not all_rows:
        raise ReportError("no results to plot")
    multi_host = len(hosts(results)) > 1
    groups: dict[tuple, list] = {}
    for w in all_rows:
        groups.setdefault((w.result.backend or "-", *config_words(w.result)), []).append(w)
    sizes = [len(g) for g in groups.values()]
    fig = Figure(
        figsize=(_FIGURE_WIDTH_IN, _TITLE_HEIGHT_IN + _ROW_HEIGHT_IN * sum(sizes) + _PANEL_HEIGHT_IN * len(sizes)),
        layout="constrained",
    )
    axes = fig.subplots(len(groups), 1, squeeze=False, gridspec_kw={"height_ratios": [n + 1 for n in sizes]})[:, 0]
    # Each backend's panels: one ms range over everything they draw (samples, floors, limits).
    spans: dict[str, list[float]] = {}
    panels: dict[str, list] = {}
    for ax, (group, members) in zip(axes, groups.items()):
        span = spans.setdefault(group[0], [])
        panels.setdefault(group[0], []).append(ax)
        ax.grid(**_GRID)
        labels = []
        for y, w in enumerate(members):
            variant, _, device = w.result.key()
            labels.append(" ".join([variant, device[:32], w.mode or "-"] + ([w.host] if multi_host else [])))
            if not w.ok:
                ax.text(
                    0.01,
                    y,
                    f"FAILED: {w.result.reason[:100]}",
                    transform=ax.get_yaxis_transform(),
                    color="tab:red",
                    **_FAILED_TEXT,
                )
                continue
            xs = w.wall_ms
            span.extend(xs)
            ax.boxplot([xs], positions=[y], **_BOX)
            ax.scatter(xs, [y + _JITTER[k % len(_JITTER)] for k in range(len(xs))], **_SAMPLES)
            floor = limits.floor_ms(w.result)
            if floor is not None:
                span.append(floor)
                ax.vlines(floor, y - _BAR_HALF_HEIGHT, y + _BAR_HALF_HEIGHT, color="black", **_BAR)
            lim = limits.limit(w.result, w.data)
            if lim is not None:
                span.append(lim.ms)
                ax.vlines(lim.ms, y - _BAR_HALF_HEIGHT, y + _BAR_HALF_HEIGHT, color="tab:red", **_BAR)
            s = stats.summarize(xs)
            labels[-1] += f"\nmedian {ms(s.median)}" + (f", {s.median / lim.ms:.2f}x limit" if lim else "")
        ax.set_yticks(range(len(members)), labels, fontsize=_TICK_FONT)
        ax.set_ylim(len(members) - 0.5, -0.5)
        ax.set_title(", ".join(group), fontsize=_TITLE_FONT, loc="left")
        ax.set_xlabel("wall time per image (ms)")
    for backend, span in spans.items():
        if not span:
            continue  # its rows all failed: no times to fit
        low, high = min(span), max(span)  # both > 0, as every wall time, floor and limit is
        log = high / low > 20
        for ax in panels[backend]:
            if log:
                ax.set_xscale("log")
                ax.set_xlim(low / 1.25, high * 1.25)
            else:
                ax.set_xlim(0, high * 1.05)
    fig.legend(
        handles=[
            Line2D([], [], color="black", linewidth=_BAR["linewidth"], label="transfer floor (same run)"),
            Line2D([], [], color="tab:red", linewidth=_BAR["linewidth"], label="modelled limit of the mode"),
        ],
        loc="outside upper right",
        fontsize=_LEGEND_FONT,
        ncols=2,
    )
    fig.suptitle(title or "per-image wall time")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=_DPI)
    return p


def markers(files: Iterable[Path]) -> list[Path]:
    """The NOT-ACCEPTED markers of the evidence folders result ``files`` lie in (the folder
    holding a result file, or the one holding its results/): evidence read from a folder that is
    not accepted is not accepted either, wherever it is copied."""
    folders = {Path(f).resolve().parent for f in files}
    return sorted({m for d in folders for m in (d / NOT_ACCEPTED_FILE, d.parent / NOT_ACCEPTED_FILE) if m.is_file()})


def _result_filename(i: int, r: Record) -> str:
    variant, backend, _ = r.key()
    # At most 120 characters before ".json": a long hostname or device must not make the name
    # one the file system refuses.
    name = "-".join([f"{i:02d}", variant, backend, *config_words(r), r.host() or "unknown"])[:120] + ".json"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def write_evidence(
    results: Iterable[Record],
    run_dir: str | os.PathLike,
    accepted: bool = True,
    reason: str | None = None,
    title: str | None = None,
) -> Path:
    """Writes the evidence folder and returns it.

    run_dir is the folder itself, normally the staged folder (core/files.py staged_folder) of
    paths.diagnostics_dir() / <run-name>; ``title`` is the run name (default: run_dir's). Written:
    table.md (the render() table under the run name), timings.png (plot()), results/*.json
    (every result, the one place a run's results are written). Other files in run_dir (logs,
    reports) are left alone. run_dir is new: a command writes it whole into a staged folder.

    The folder is accepted evidence only when ``accepted`` is true AND problems(results) is
    empty (no failed result, no output mismatch). Otherwise a NOT-ACCEPTED file holds the
    reasons (the caller's ``reason`` first) and table.md opens with "NOT ACCEPTED".
    ``accepted=False`` needs a reason.
    """
    results = list(results)
    if not accepted and not (reason and reason.strip()):
        raise ReportError("write_evidence(accepted=False) needs a reason; it goes into NOT-ACCEPTED")
    d = Path(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    reasons = ([reason.strip()] if not accepted else []) + problems(results)

    rd = d / RESULTS_SUBDIR
    rd.mkdir(exist_ok=True)
    for i, r in enumerate(results, 1):
        record.write(rd / _result_filename(i, r), r)

    title = title or d.name
    if results:
        plot(results, d / PLOT_FILE, title=title)
    head = [f"# {title}", ""]
    if reasons:
        head += ["**NOT ACCEPTED** as evidence:", ""] + [f"- {cell(x)}" for x in reasons] + [""]
    body = render(results) if results else "no results\n"
    write_atomic(d / TABLE_FILE, "\n".join(head + [body]))
    if reasons:
        write_atomic(d / NOT_ACCEPTED_FILE, "\n".join(reasons) + "\n")
    return d
