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

from . import checks, limits
from . import schema as res
from . import stats
from .evidence import NOT_ACCEPTED_FILE
from .rows import MODE_ORDER, ReportError, Row, ms, rows, variant_rank
from .table import Column, floor_ratio, layout, limit_ratio, tabulate_rows


class ProfileMismatch(ReportError):
    """Two runs measured different profile files; compared only when forced."""


class MachineMismatch(ReportError):
    """Two runs were measured on different machines; compared only when forced."""


# --fail-on: which verdicts make `compare` exit 1.
FAIL_ON = {"slower": ("slower",), "faster": ("faster",), "any": ("slower", "faster")}
# What else a gate (--fail-on) fails on unless --accept names it: a row on one side only, a failed
# result on either side, a side that is not accepted evidence (its folder's NOT-ACCEPTED marker,
# or results outside their own output checks: results/checks.py).
UNMET = {"missing": ("only in A", "only in B"), "failed": ("not comparable (failed)",), "not-accepted": ()}
MIN_EFFECT = 0.05
ALPHA = 0.05
COLUMNS = [Column("variant"), Column("backend"), Column("device"), Column("batching"),
           Column("A median ms", "right", False), Column("B median ms", "right", False),
           Column("B/A", "right", False), Column("p", "right", False), Column("change", movable=False),
           Column("A x floor", "right", False), Column("B x floor", "right", False),
           Column("A x limit", "right", False), Column("B x limit", "right", False)]


@dataclass
class Comparison:
    """The rows of B against A (each a dict of the COLUMNS' cells plus "verdict": slower,
    faster, no change, only in A, only in B or not comparable) and the test's settings."""

    where_a: str
    where_b: str
    rows: list[dict] = field(default_factory=list)
    min_effect: float = MIN_EFFECT
    alpha: float = ALPHA
    forced: list[str] = field(default_factory=list)
    not_accepted: list[str] = field(default_factory=list)  # "A (where): why", per side not accepted

    def changed(self, fail_on: str = "any") -> list[dict]:
        """The rows whose verdict --fail-on ``fail_on`` fails on."""
        return [r for r in self.rows if r["verdict"] in FAIL_ON[fail_on]]

    def unmet(self, accept: Sequence[str] = ()) -> list[str]:
        """What a gate fails on besides changed rows, each named (UNMET's kinds), less the kinds
        in ``accept``."""
        out = [f"{r['variant']} {r['backend']} {r['device']} {r['batching']}: {r['verdict']}"
               for r in self.rows for kind, verdicts in UNMET.items() if kind not in accept and r["verdict"] in verdicts]
        return out + ([f"not accepted evidence: {x}" for x in self.not_accepted] if "not-accepted" not in accept else [])

    def markdown(self) -> str:
        table = [{k: v for k, v in r.items() if k != "verdict"} for r in self.rows]
        shown, caption = layout(COLUMNS, table)
        lines = [f"A: {self.where_a}", f"B: {self.where_b}", ""]
        lines += [f"WARNING: forced: {text}" for text in self.forced] + ([""] if self.forced else [])
        lines += [f"WARNING: not accepted evidence: {x}" for x in self.not_accepted] + ([""] if self.not_accepted else [])
        if caption:
            lines += ["all rows: " + ", ".join(caption), ""]
        lines += [tabulate_rows(shown, table), "",
                  "- B/A = median(B)/median(A) of per-image wall ms; p = two-sided Mann-Whitney U test "
                  "(scipy.stats.mannwhitneyu) of the two runs' samples; a row is slower or faster when "
                  f"p < {self.alpha:g} and B/A differs from 1 by at least {self.min_effect:.0%}.",
                  "- x floor, x limit: each side's median over its own run's transfer floor and its mode's "
                  "modelled limit (ms in parentheses; docs/benchmark.md, \"Transfer floor, round trips and limits\").",
                  f"- {len(self.changed())} of {len(self.rows)} rows changed."]
        return "\n".join(lines) + "\n"

    def json(self) -> str:
        return json.dumps({"a": self.where_a, "b": self.where_b, "min_effect": self.min_effect,
                           "alpha": self.alpha, "forced": self.forced, "not_accepted": self.not_accepted,
                           "rows": self.rows,
                           "changed": len(self.changed())}, indent=1) + "\n"


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


def _ratios(side: str, w: Row | None) -> dict[str, str]:
    """The "<side> x floor" and "<side> x limit" cells of one side's row ({} without numbers)."""
    if w is None or not w.ok:
        return {}
    med = stats.median(w.wall_ms)
    return {f"{side} x floor": floor_ratio(w.result, med),
            f"{side} x limit": limit_ratio(limits.limit(w.result, w.mode, w.data), med)}


def _machines(results: Sequence[dict]) -> set[str]:
    return {h for h in (res.hostname(r) for r in results) if h}


def compare_results(a: Sequence[dict], b: Sequence[dict], where_a: str = "A", where_b: str = "B", *,
                    min_effect: float = MIN_EFFECT, alpha: float = ALPHA, force: bool = False) -> Comparison:
    """The Comparison of run B against run A (see compare())."""
    a = [res.validate(r, f"{where_a} result #{i}") for i, r in enumerate(a, 1)]
    b = [res.validate(r, f"{where_b} result #{i}") for i, r in enumerate(b, 1)]
    pa, pb = _profiles(a, "A", where_a), _profiles(b, "B", where_b)
    forced = []
    if pa and pb and pa != pb:
        text = (f"A ({where_a}) used profile sha256 {next(iter(pa))}, B ({where_b}) used {next(iter(pb))}")
        if not force:
            raise ProfileMismatch(f"refusing to compare runs on different profiles: {text}; re-run one side "
                                  "with the other's profile file (--force compares anyway)")
        forced.append(f"different profiles: {text}")
    ma, mb = _machines(a), _machines(b)
    if ma and mb and ma != mb:
        text = f"A ({where_a}) ran on {', '.join(sorted(ma))}, B ({where_b}) on {', '.join(sorted(mb))}"
        if not force:
            raise MachineMismatch(f"refusing to compare runs of different machines: {text}; compare runs of "
                                  "one machine (--force compares anyway)")
        forced.append(f"different machines: {text}")
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
    # Table order (rows.py): a failed result's row ("-", no batching) after the batching rows.
    keys = sorted(pairs, key=lambda k: (variant_rank(k[0]), k[0], k[1], k[2], MODE_ORDER[None if k[3] == "-" else k[3]]))
    out = Comparison(str(where_a), str(where_b), min_effect=min_effect, alpha=alpha, forced=forced)
    for k in keys:
        wa, wb = pairs[k]
        cells = dict(zip(("variant", "backend", "device", "batching"), k))
        if wa is None or wb is None:
            cells["verdict"] = cells["change"] = "only in A" if wb is None else "only in B"
            side = wa or wb
            cells["A median ms" if wb is None else "B median ms"] = (
                ms(stats.median(side.wall_ms)) if side.ok else f"FAILED: {side.result['reason']}")
        elif not (wa.ok and wb.ok):
            cells["A median ms"] = ms(stats.median(wa.wall_ms)) if wa.ok else f"FAILED: {wa.result['reason']}"
            cells["B median ms"] = ms(stats.median(wb.wall_ms)) if wb.ok else f"FAILED: {wb.result['reason']}"
            cells["verdict"] = cells["change"] = "not comparable (failed)"
        else:
            c = stats.change(wa.wall_ms, wb.wall_ms, min_effect=min_effect, alpha=alpha)
            cells.update({"A median ms": ms(stats.median(wa.wall_ms)), "B median ms": ms(stats.median(wb.wall_ms)),
                          "B/A": f"{c.ratio:.3f}", "p": f"{c.p:.2g}", "verdict": c.verdict,
                          "change": f"**{c.verdict}**" if c.verdict != "no change" else c.verdict})
        cells.update({**_ratios("A", wa), **_ratios("B", wb)})
        out.rows.append(cells)
    return out


def compare(folder_a: str | os.PathLike, folder_b: str | os.PathLike, **options) -> Comparison:
    """B against A: per matching (variant, backend, device, batching) row, the two medians, their
    ratio B/A and the Mann-Whitney U p-value of the per-image samples (stats.change); a row is
    slower or faster when significant (p < alpha) and at least min_effect away from 1. Rows on
    one side only, or failed, are listed as such. Raises ProfileMismatch / MachineMismatch when
    the two folders' results come from different profiles or machines (unless force=True), and
    ReportError/ResultError for unusable folders. ``options``: min_effect, alpha, force."""
    a = res.load_many([folder_a])
    b = res.load_many([folder_b])
    c = compare_results(a, b, str(folder_a), str(folder_b), **options)
    for side, where, results in (("A", folder_a, a), ("B", folder_b, b)):
        c.not_accepted += [f"{side} ({where}): {why}" for why in _not_accepted(Path(where), results)]
    return c


def _not_accepted(given: Path, results: Sequence[dict]) -> list[str]:
    """Why one side is not accepted evidence: the NOT-ACCEPTED marker of each evidence folder its
    result files lie in (the folder holding a result file, or the one holding its results/), and
    the output checks its ok results fail (a failed result is the gate's "failed")."""
    found = [given] if given.is_file() else res.result_files(given)
    folders = {f.resolve().parent for f in found}
    markers = sorted({m for d in folders for m in (d / NOT_ACCEPTED_FILE, d.parent / NOT_ACCEPTED_FILE) if m.is_file()})
    return [f"{m} is there" for m in markers] + checks.problems([r for r in results if r["status"] == "ok"])
