"""Comparing two runs: per matching row, median(B)/median(A) and a Mann-Whitney U test of the
per-image samples; a row changed when the difference is significant and at least the minimum
effect; beside them each side's x floor and x limit (results/limits.py). Runs of different
profiles or machines are refused unless forced."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from . import checks, limits, record, stats
from .evidence import markers
from .gate import ALPHA, FAIL_ON, MIN_EFFECT, UNMET
from .record import Record
from .rows import CONFIG_HEADERS, MODE_ORDER, ReportError, TableRow, config_cell, config_words, ms, order_key, rows
from .table import Column, layout, tabulate_rows


class ProfileMismatch(ReportError):
    """Two runs measured different profile files; compared only when forced."""


class MachineMismatch(ReportError):
    """Two runs were measured on different machines; compared only when forced."""


COMPARISON_SCHEMA = "sam3d-comparison/1"


class Side(BaseModel):
    """One side's row of a comparison: its median and same-run ratios (ms; None where it has no
    numbers), or why it failed."""

    median_ms: float | None = None
    x_floor: float | None = None
    floor_ms: float | None = None
    x_limit: float | None = None
    limit_ms: float | None = None
    failed: str | None = None


class Line(BaseModel):
    """One compared configuration: the record's configuration fields, the batching ("-": a
    failed result without rows), each side (None: absent), B/A, the test's p and the verdict
    (VERDICTS)."""

    variant: str
    backend: str
    device: str
    configuration: dict[str, str | bool]
    batching: str
    verdict: Literal["slower", "faster", "no change", "only in A", "only in B", "not comparable (failed)"]
    a: Side | None
    b: Side | None
    ratio: float | None = None
    p: float | None = None


def _side(w: TableRow | None) -> Side | None:
    if w is None:
        return None
    if not w.ok:
        return Side(failed=w.result.reason)  # a failed record's reason is never empty (record.py)
    med = stats.median(w.wall_ms)
    floor, lim = limits.floor_ms(w.result), limits.limit(w.result, w.data)
    return Side(
        median_ms=med,
        floor_ms=floor,
        x_floor=med / floor if floor else None,
        limit_ms=lim.ms if lim else None,
        x_limit=med / lim.ms if lim else None,
    )


def _cells(line: Line, configs: Sequence[str]) -> dict[str, str]:
    """The Markdown table's cells of one line."""
    out = {
        "variant": line.variant,
        "backend": line.backend,
        "device": line.device,
        **{CONFIG_HEADERS[k]: config_cell(line.configuration[k]) for k in configs},
        "batching": line.batching,
        "change": f"**{line.verdict}**" if line.verdict in ("slower", "faster") else line.verdict,
    }
    for name, side in (("A", line.a), ("B", line.b)):
        if side is None:
            continue
        out[f"{name} median ms"] = f"FAILED: {side.failed}" if side.failed else ms(side.median_ms)
        if side.x_floor is not None:
            out[f"{name} x floor"] = f"{side.x_floor:.1f}x ({ms(side.floor_ms)})"
        if side.x_limit is not None:
            out[f"{name} x limit"] = f"{side.x_limit:.2f}x ({ms(side.limit_ms)})"
    if line.ratio is not None:
        out.update({"B/A": f"{line.ratio:.3f}", "p": f"{line.p:.2g}"})
    return out


@dataclass
class Comparison:
    """The lines of B against A and the test's settings."""

    where_a: str
    where_b: str
    lines: list[Line] = field(default_factory=list)
    min_effect: float = MIN_EFFECT
    alpha: float = ALPHA
    forced: list[str] = field(default_factory=list)
    not_accepted: list[str] = field(default_factory=list)  # "A (where): why", per side not accepted

    def changed(self, fail_on: str = "any") -> list[Line]:
        """The lines whose verdict --fail-on ``fail_on`` fails on."""
        return [x for x in self.lines if x.verdict in FAIL_ON[fail_on]]

    def unmet(self, accept: Sequence[str] = ()) -> list[str]:
        """What a gate fails on besides changed rows, each named (UNMET's kinds), less the kinds
        in ``accept``."""
        out = [
            f"{' '.join([x.variant, x.backend, x.device, *config_words(x.configuration), x.batching])}: {x.verdict}"
            for x in self.lines
            for kind, verdicts in UNMET.items()
            if kind not in accept and x.verdict in verdicts
        ]
        return out + (
            [f"not accepted evidence: {x}" for x in self.not_accepted] if "not-accepted" not in accept else []
        )

    def _configs(self) -> list[str]:
        return [
            k
            for k in record.CONFIGURATION
            if any(x.configuration[k] != record.Record.model_fields[k].default for x in self.lines)
        ]

    def markdown(self) -> str:
        configs = self._configs()
        columns = (
            [Column("variant"), Column("backend"), Column("device")]
            + [Column(CONFIG_HEADERS[k]) for k in configs]
            + [Column("batching")]
            + [Column(h, "right", False) for h in ("A median ms", "B median ms", "B/A", "p")]
            + [Column("change", movable=False)]
            + [Column(h, "right", False) for h in ("A x floor", "B x floor", "A x limit", "B x limit")]
        )
        table = [_cells(x, configs) for x in self.lines]
        shown, caption = layout(columns, table)
        lines = [f"A: {self.where_a}", f"B: {self.where_b}", ""]
        lines += [f"WARNING: forced: {text}" for text in self.forced] + ([""] if self.forced else [])
        lines += [f"WARNING: not accepted evidence: {x}" for x in self.not_accepted] + (
            [""] if self.not_accepted else []
        )
        if caption:
            lines += ["all rows: " + ", ".join(caption), ""]
        lines += [
            tabulate_rows(shown, table),
            "",
            "- B/A = median(B)/median(A) of per-image wall ms; p = two-sided Mann-Whitney U test "
            "(scipy.stats.mannwhitneyu) of the two runs' samples; a row is slower or faster when "
            f"p < {self.alpha:g} and B/A differs from 1 by at least {self.min_effect:.0%}.",
            "- x floor, x limit: each side's median over its own run's transfer floor and its mode's "
            "modelled limit (ms in parentheses; docs/benchmark.md, \"Transfer floor, round trips and limits\").",
            f"- {len(self.changed())} of {len(self.lines)} rows changed.",
        ]
        return "\n".join(lines) + "\n"

    def document(self) -> ComparisonDocument:
        """The comparison as data (`compare --format json`): numbers as numbers, no Markdown."""
        return ComparisonDocument(
            schema=COMPARISON_SCHEMA,
            a=self.where_a,
            b=self.where_b,
            min_effect=self.min_effect,
            alpha=self.alpha,
            forced=self.forced,
            not_accepted=self.not_accepted,
            rows=self.lines,
            changed=len(self.changed()),
        )

    def json(self) -> str:
        return json.dumps(self.document().model_dump(mode="json", by_alias=True), indent=1) + "\n"


class ComparisonDocument(BaseModel):
    """`sam3d compare --format json`: run B against run A, one row per compared configuration;
    changed counts the rows slower or faster."""

    schema_: Literal["sam3d-comparison/1"] = Field(alias="schema")
    a: str
    b: str
    min_effect: float
    alpha: float
    forced: list[str]
    not_accepted: list[str]
    rows: list[Line]
    changed: int


def _by_config(results: Sequence[Record], side: str, where: str) -> dict[tuple, TableRow]:
    out: dict[tuple, TableRow] = {}
    for w in rows(results):
        k = (*w.result.key(), *w.result.configuration().values(), w.mode or "-")
        if k in out:
            label = " ".join([*w.result.key(), *config_words(w.result), w.mode or "-"])
            raise ReportError(
                f"{side} ({where}) holds two results for {label} (hosts {out[k].host}, {w.host}); "
                "compare needs one result per configuration on each side: pass one run's folder"
            )
        out[k] = w
    return out


def _profiles(results: Sequence[Record], side: str, where: str) -> set[str]:
    shas = {s for s in (r.profile_sha256() for r in results) if s}
    if len(shas) > 1:
        raise ProfileMismatch(
            f"{side} ({where}) mixes results from {len(shas)} profiles "
            f"({', '.join(sorted(shas))}); a run uses one profile file"
        )
    return shas


def _machines(results: Sequence[Record]) -> set[str]:
    return {h for h in (r.host() for r in results) if h}


def compare_results(
    a: Sequence[Record],
    b: Sequence[Record],
    where_a: str = "A",
    where_b: str = "B",
    *,
    min_effect: float = MIN_EFFECT,
    alpha: float = ALPHA,
    force: bool = False,
) -> Comparison:
    """The Comparison of run B against run A (see compare())."""
    pa, pb = _profiles(a, "A", where_a), _profiles(b, "B", where_b)
    forced = []
    if pa and pb and pa != pb:
        text = f"A ({where_a}) used profile sha256 {next(iter(pa))}, B ({where_b}) used {next(iter(pb))}"
        if not force:
            raise ProfileMismatch(
                f"refusing to compare runs on different profiles: {text}; re-run one side "
                "with the other's profile file (--force compares anyway)"
            )
        forced.append(f"different profiles: {text}")
    ma, mb = _machines(a), _machines(b)
    if ma and mb and ma != mb:
        text = f"A ({where_a}) ran on {', '.join(sorted(ma))}, B ({where_b}) on {', '.join(sorted(mb))}"
        if not force:
            raise MachineMismatch(
                f"refusing to compare runs of different machines: {text}; compare runs of "
                "one machine (--force compares anyway)"
            )
        forced.append(f"different machines: {text}")
    ra, rb = _by_config(a, "A", where_a), _by_config(b, "B", where_b)

    def failed_peer(k: tuple, other: dict[tuple, TableRow]) -> TableRow | None:
        """The other side's failed result for the same variant, backend and configuration (its
        device may be unknown): it stands against every batching row."""
        return next(
            (
                w
                for ok_, w in other.items()
                if not w.ok and ok_[:2] == k[:2] and ok_[3:-1] == k[3:-1] and ok_[2] in (k[2], "-")
            ),
            None,
        )

    used: set[int] = set()
    pairs: dict[tuple, tuple[TableRow | None, TableRow | None]] = {}
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
        raise ReportError(
            f"A ({where_a}) and B ({where_b}) share no configuration (variant, backend, device, "
            f"{', '.join(CONFIG_HEADERS.values())}, batching): nothing to compare; "
            "compare runs of the same variants and configurations on the same device"
        )

    def sort_key(k: tuple) -> tuple:
        w = pairs[k][0] or pairs[k][1]
        # Table order (rows.py): a failed result's row ("-", no batching) after the batching rows.
        return (*order_key(w.result), MODE_ORDER[None if k[-1] == "-" else k[-1]])

    out = Comparison(str(where_a), str(where_b), min_effect=min_effect, alpha=alpha, forced=forced)
    for k in sorted(pairs, key=sort_key):
        wa, wb = pairs[k]
        w = wa or wb
        found: dict = {}
        if wa is None or wb is None:
            found["verdict"] = "only in A" if wb is None else "only in B"
        elif not (wa.ok and wb.ok):
            found["verdict"] = "not comparable (failed)"
        else:
            c = stats.change(wa.wall_ms, wb.wall_ms, min_effect=min_effect, alpha=alpha)
            found = {"ratio": c.ratio, "p": c.p, "verdict": c.verdict}
        out.lines.append(
            Line(
                variant=k[0],
                backend=k[1],
                device=k[2],
                configuration=w.result.configuration(),
                batching=k[-1],
                a=_side(wa),
                b=_side(wb),
                **found,
            )
        )
    return out


def compare(folder_a: str | os.PathLike, folder_b: str | os.PathLike, **options) -> Comparison:
    """B against A: per matching (variant, backend, device, batching) row, the two medians, their
    ratio B/A and the Mann-Whitney U p-value of the per-image samples (stats.change); a row is
    slower or faster when significant (p < alpha) and at least min_effect away from 1. Rows on
    one side only, or failed, are listed as such. Raises ProfileMismatch / MachineMismatch when
    the two folders' results come from different profiles or machines (unless force=True), and
    ReportError/ResultError for unusable folders. ``options``: min_effect, alpha, force."""
    sides = []
    for side, where in (("A", folder_a), ("B", folder_b)):
        files = record.files_of([where])
        results = [record.read(f) for f in files]
        sides.append((side, where, files, results))
    c = compare_results(sides[0][3], sides[1][3], str(folder_a), str(folder_b), **options)
    for side, where, files, results in sides:
        c.not_accepted += [f"{side} ({where}): {why}" for why in _not_accepted(files, results)]
    return c


def _not_accepted(files: Sequence[Path], results: Sequence[Record]) -> list[str]:
    """Why one side is not accepted evidence: the NOT-ACCEPTED marker of each evidence folder its
    result ``files`` lie in (the folder holding a result file, or the one holding its results/),
    and the output checks its ok results fail (a failed result is the gate's "failed")."""
    return [f"{m} is there" for m in markers(files)] + checks.problems([r for r in results if r.ok])
