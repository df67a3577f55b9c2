"""What makes results not accepted evidence: one result's counters and bytes against the profile
and the core's contract (check), and outputs compared across rows (output_checks, problems)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from ..core import profile
from . import record
from .record import Record
from .rows import TableRow as Row
from .rows import config_key, rows


def diff(a: dict[int, str], b: dict[int, str]) -> tuple[int, int]:
    """(images whose outputs differ or exist on one side only, images on either side)."""
    imgs = set(a) | set(b)
    return sum(1 for i in imgs if a.get(i) != b.get(i)), len(imgs)


def majority(members: Sequence[Row]) -> Row:
    """The first row (table order) of the most common per-image outputs: the reference the
    odd ones out are marked against."""
    counts = Counter(frozenset(w.outputs.items()) for w in members)
    best = max(counts.values())
    return next(w for w in members if counts[frozenset(w.outputs.items())] == best)


def arith_group(w: Row) -> tuple:
    """Rows expected to produce identical bytes: same backend, device and profile (the core's
    contract: batching on is byte-identical to off; the variants differ in instrumentation and
    optimisation, not in the arithmetic the backend runs)."""
    return (*w.result.key()[1:], config_key(w.result), w.result.profile_sha256())


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
        groups.setdefault(arith_group(w), []).append(w)
    reference = {g: majority(members) for g, members in groups.items()}
    for w in all_rows:
        if not w.ok:
            cells[id(w)] = ""
            continue
        parts = []
        compared = False
        # Every mode is checked against the same result's off row (off against its first other row).
        partner = next(
            (o for o in ok_rows if o.result is w.result and o is not w and (o.mode == "off" or w.mode == "off")), None
        )
        if partner is not None:
            compared = True  # pragma: no mutate (a row with a partner is in a group of two or more: set below too)
            d, n = diff(w.outputs, partner.outputs)
            if d:
                parts.append(f"**NO**: {w.mode if w.mode != 'off' else partner.mode}/off differ ({d}/{n} images)")
                if w.mode != "off":
                    warnings.append(
                        f"outputs differ between batching {w.mode} and off: {w.label(with_host)} ({d}/{n} images)"
                    )
        g = arith_group(w)
        ref = reference[g]
        if len(groups[g]) > 1:
            compared = True
            if ref.result is not w.result:  # the same result's other mode: the on/off check above
                d, n = diff(w.outputs, ref.outputs)
                if d:
                    parts.append(f"**NO**: differs from {ref.label(with_host)} ({d}/{n} images)")
                    warnings.append(
                        f"outputs of {w.label(with_host)} differ from {ref.label(with_host)} "
                        f"({d}/{n} images; same backend, device and profile)"
                    )
        cells[id(w)] = "; ".join(parts) if parts else ("yes" if compared else "n/a")
    return cells, warnings


def replay_group(w: Row) -> tuple:
    """Rows whose outputs must be identical on every backend: the same profile and the same
    replay (with compute, or transfer-only). The replay's arithmetic is exact in F32 (inputs are
    multiples of 0.25 in [-2, 2); only repeats, scaling by 0.5 and a few adds:
    native/bench/replay.cpp), so a backend that moves the right bytes computes the same ones."""
    return (w.result.transfer_only, w.result.profile_sha256())


def across_backends(all_rows: Sequence[Row], with_host: bool = False) -> tuple[list[str], list[str]]:
    """(notes, warnings) comparing outputs across backends: per replay group with rows of more
    than one backend, one note when every row matches the group's most common per-image hashes,
    else one warning per row that differs."""
    notes: list[str] = []
    warnings: list[str] = []
    groups: dict[tuple, list[Row]] = {}
    for w in all_rows:
        if w.ok:
            groups.setdefault(replay_group(w), []).append(w)
    for (transfer_only, _), members in groups.items():
        backends = sorted({w.result.backend for w in members})  # ok rows: an ok record names its backend
        if len(backends) < 2:
            continue
        ref = majority(members)
        kind = "transfer-only replay" if transfer_only else "replay with compute"
        # A row of the reference's own result is the on/off check's (output_checks).
        odd = [(w, *diff(w.outputs, ref.outputs)) for w in members if w.result is not ref.result]
        odd = [(w, d, n) for w, d, n in odd if d]
        if not odd:
            notes.append(
                f"outputs across backends ({kind}): the {len(members)} rows of {', '.join(backends)} "
                "are identical image by image (the replay's arithmetic is exact in F32)"
            )
        for w, d, n in odd:
            warnings.append(
                f"outputs of {w.label(with_host)} differ from {ref.label(with_host)} ({d}/{n} images; "
                f"the {kind} is exact in F32, so every backend must give the same bytes)"
            )
    return notes, warnings


def problems(results: Iterable[Record]) -> list[str]:
    """Why these results are not accepted evidence: each failed result and each output
    mismatch (on vs off, across results with the same backend, device and profile, or across
    backends for the same replay).
    Empty when the results are acceptable."""
    all_rows = rows(list(results))
    out = [f"{w.label(True)} failed: {w.result.reason}" for w in all_rows if not w.ok]
    _, warnings = output_checks(all_rows, True)
    return out + warnings + across_backends(all_rows, True)[1]


def check(r: Record) -> list[str]:
    """What is wrong with one driver result, against the profile totals and the core's
    contract: the required rows (record.REQUIRED_ROWS: on and off) present, bytes equal to the
    profile's in every row, every row's outputs identical to off per image, the off row all
    synchronous, every other row batched (199/232 async, 3/1 sync, 82 pinned batches) unless
    that mode's static fallback applies (then 82 fallbacks of that reason, everything
    synchronous)."""
    problems_: list[str] = []
    by_mode = {row.batching: row for row in r.rows}
    beyond = [m for m in record.BATCHING if m not in record.REQUIRED_ROWS]
    if not set(record.REQUIRED_ROWS) <= set(by_mode):
        return [
            f"expected rows for batching {' and '.join(reversed(record.REQUIRED_ROWS))} (and optionally "
            f"{', '.join(beyond)}), got {sorted(by_mode)}"
        ]
    problems_ += [f"driver: {p}" for p in r.extra.problems]
    for mode, row in by_mode.items():
        c = row.counters
        if c.bytes_uploaded != profile.UPLOAD_BYTES or c.bytes_downloaded != profile.DOWNLOAD_BYTES:
            problems_.append(
                f"batching {mode}: {c.bytes_uploaded:,} bytes up / {c.bytes_downloaded:,} down "
                f"per image; the profile moves {profile.UPLOAD_BYTES:,} / {profile.DOWNLOAD_BYTES:,}"
            )
    off = by_mode["off"].outputs
    for mode in (m for m in record.BATCHING if m in by_mode and m != "off"):
        got = by_mode[mode].outputs
        differ = sorted(i for i in got.keys() | off.keys() if got.get(i) != off.get(i))
        if differ:
            problems_.append(f"outputs differ between batching {mode} and off for images {differ}")

    def expect(mode: str, want: dict) -> None:
        c = by_mode[mode].counters
        fallbacks = dict(c.fallbacks.items())
        got = {k: (fallbacks.get(k[10:], 0) if k.startswith("fallbacks.") else getattr(c, k)) for k in want}
        bad = [f"{k} {got[k]} (expected {want[k]})" for k in want if got[k] != want[k]]
        if bad:
            problems_.append(f"batching {mode} per image: " + ", ".join(bad))

    no_fallbacks = {f"fallbacks.{k}": 0 for k in record.FALLBACK_REASONS}
    synchronous = {
        "async_uploads": 0,
        "async_downloads": 0,
        "sync_uploads": profile.UPLOADS,
        "sync_downloads": profile.DOWNLOADS,
        "pinned_batches": 0,
        **no_fallbacks,
    }
    expect("off", synchronous)
    for mode in (m for m in record.BATCHING if m in by_mode and m != "off"):
        facts = r.extra.modes.get(mode)
        static = (facts.static_fallback if facts else None) or "none"
        if static == "none":
            expect(
                mode,
                {
                    "async_uploads": profile.ASYNC_UPLOADS,
                    "async_downloads": profile.ASYNC_DOWNLOADS,
                    "sync_uploads": profile.SYNC_UPLOADS,
                    "sync_downloads": profile.SYNC_DOWNLOADS,
                    "pinned_batches": profile.BATCHED_GRAPHS,
                    **no_fallbacks,
                },
            )
        else:
            expect(mode, {**synchronous, f"fallbacks.{static}": profile.BATCHED_GRAPHS})
    return problems_
