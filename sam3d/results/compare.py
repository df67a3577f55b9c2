"""Comparing two runs: medians of B over A per matching row, changes beyond the runs' own spread
flagged; runs on different profiles are refused."""

from __future__ import annotations

import os
from collections.abc import Sequence

from . import schema as res
from . import stats
from .rows import MODE_ORDER, ReportError, Row, ms, rows, variant_rank
from .table import Column, layout, tabulate_rows


class ProfileMismatch(ReportError):
    """Two runs measured different profile files; their timings are never compared."""


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
    keys = sorted(pairs, key=lambda k: (variant_rank(k[0]), k[0], k[1], k[2], MODE_ORDER.get(k[3], 2)))
    table = []
    flagged = 0
    for k in keys:
        wa, wb = pairs[k]
        cells = dict(zip(("variant", "backend", "device", "batching"), k))
        if wa is None or wb is None:
            cells["change"] = "only in A" if wb is None else "only in B"
            side = wa or wb
            cells["A median ms" if wb is None else "B median ms"] = (
                ms(stats.median(side.wall_ms)) if side.ok else f"FAILED: {side.result['reason']}")
        elif not (wa.ok and wb.ok):
            cells["A median ms"] = ms(stats.median(wa.wall_ms)) if wa.ok else f"FAILED: {wa.result['reason']}"
            cells["B median ms"] = ms(stats.median(wb.wall_ms)) if wb.ok else f"FAILED: {wb.result['reason']}"
            cells["change"] = "not comparable (failed)"
        else:
            ratio, lo, hi = stats.change_band(wa.wall_ms, wb.wall_ms)
            cells["A median ms"] = ms(stats.median(wa.wall_ms))
            cells["B median ms"] = ms(stats.median(wb.wall_ms))
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
    shown, caption = layout(columns, table)
    lines = [f"A: {where_a}", f"B: {where_b}", ""]
    if caption:
        lines += ["all rows: " + ", ".join(caption), ""]
    lines += [tabulate_rows(shown, table), "",
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
