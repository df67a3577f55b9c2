"""The rows every reading of results shares: one per batching mode of each result.

Results are dicts in schema sam3d-bench-result/3 (results/schema.py). The table order is the
variant list's, then backend, device, host, input order, then the schema's batching order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..core import variants
from ..core.errors import Sam3dError
from . import schema as res

MODE_ORDER = {**{m: i for i, m in enumerate(res.BATCHING)}, None: len(res.BATCHING)}


class ReportError(Sam3dError, ValueError):
    """Results that cannot be rendered, checked or compared as asked."""


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


def variant_rank(name: str) -> int:
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
    out.sort(key=lambda w: (variant_rank(w.result["variant"]), *res.key(w.result), w.host, w.index,
                            MODE_ORDER[w.mode]))
    return out


def hosts(results: Sequence[dict]) -> set[str]:
    return {h for h in (res.hostname(r) for r in results) if h}


def sibling(all_rows: Sequence[Row], w: Row, mode: str) -> Row | None:
    """The row of batching `mode` from the same result as `w`, or None."""
    return next((o for o in all_rows if o.result is w.result and o.mode == mode), None)


def ms(x: float) -> str:
    return f"{x:.3f}"


def cell(text: str) -> str:
    """One Markdown table cell: no line breaks, '|' escaped."""
    return re.sub(r"\s*\n\s*", " ", str(text)).replace("|", "\\|")
