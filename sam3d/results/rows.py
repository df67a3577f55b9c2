"""The rows every reading of results shares: one per batching mode of each result record.

The table order is the variant list's, then backend, device, configuration, host, input order,
then the record's batching order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..core import variants
from ..core.errors import Sam3dError
from . import record
from .record import Record

MODE_ORDER = {**{m: i for i, m in enumerate(record.BATCHING)}, None: len(record.BATCHING)}
# How the table and the messages name a configuration value that is not the default.
CONFIG_WORDS = {
    "layout": {"areas": "areas"},
    "order": {"levels": "levels"},
    "transfer_only": {True: "transfer-only"},
    "transfer_queue": {True: "transfer queue"},
    "duplex": {"auto": "duplex auto", "on": "duplex on"},
}
# The configuration columns' headers.
CONFIG_HEADERS = {
    "layout": "layout",
    "order": "order",
    "transfer_only": "transfer-only",
    "transfer_queue": "transfer queue",
    "duplex": "duplex",
}


class ReportError(Sam3dError, ValueError):
    """Results that cannot be rendered, checked or compared as asked."""


def config_words(result: Record | dict) -> list[str]:
    """A result's (or a configuration's) values that are not the default, as words ("areas",
    "transfer-only"), in CONFIGURATION order."""
    configuration = result if isinstance(result, dict) else result.configuration()
    return [CONFIG_WORDS[k][v] for k, v in configuration.items() if v in CONFIG_WORDS[k]]


def config_cell(value) -> str:
    """One configuration column's cell: the value's word ("yes"/"no" for a flag)."""
    return ("yes" if value else "no") if isinstance(value, bool) else str(value)


def config_key(result: Record) -> tuple:
    return tuple(result.configuration().values())


@dataclass
class TableRow:
    """One table row: one batching mode of one result, or a failed result without rows (data None)."""

    result: Record
    index: int  # 1-based position of the result in the input
    data: record.Row | None  # the record's row; None for a failed result

    @property
    def mode(self) -> str | None:
        return self.data.batching if self.data is not None else None

    @property
    def ok(self) -> bool:
        return self.data is not None and self.result.ok

    @property
    def wall_ms(self) -> list[float]:
        return self.data.wall_ms if self.ok else []

    @property
    def outputs(self) -> dict[int, str]:
        return self.data.outputs if self.ok else {}

    @property
    def host(self) -> str:
        return self.result.host() or "-"

    def label(self, with_host: bool = False) -> str:
        parts = [*self.result.key(), *config_words(self.result)] + ([self.mode] if self.mode else [])
        if with_host:
            parts.append(self.host)
        return " ".join(parts)


def variant_rank(name: str) -> int:
    return variants.NAMES.index(name) if name in variants.NAMES else len(variants.NAMES)


def order_key(result: Record) -> tuple:
    """Where a result's rows go in the table: variant list order (unknown variants after, by
    name), backend, device, configuration."""
    return (variant_rank(result.variant), *result.key(), *(str(v) for v in config_key(result)))


def rows(results: Sequence[Record]) -> list[TableRow]:
    """The table rows in table order (order_key, then host, input order, then off before on).
    A failed result is one row (its rows, if any, are not measurements to show)."""
    out = []
    for i, r in enumerate(results, 1):
        if r.ok:
            out.extend(TableRow(r, i, row) for row in r.rows)
        else:
            out.append(TableRow(r, i, None))
    out.sort(key=lambda w: (*order_key(w.result), w.host, w.index, MODE_ORDER[w.mode]))
    return out


def hosts(results: Sequence[Record]) -> set[str]:
    return {h for h in (r.host() for r in results) if h}


def sibling(all_rows: Sequence[TableRow], w: TableRow, mode: str) -> TableRow | None:
    """The row of batching `mode` from the same result as `w`, or None."""
    return next((o for o in all_rows if o.result is w.result and o.mode == mode), None)


def ms(x: float) -> str:
    return f"{x:.3f}"


def cell(text: str) -> str:
    """One Markdown table cell: no line breaks, '|' escaped."""
    return re.sub(r"\s*\n\s*", " ", str(text)).replace("|", "\\|")
