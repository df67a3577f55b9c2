"""Each mode's modelled limit: what the mode could reach on this device, from the same run's
measurements and the profile file only (no term measured through the core).

The model (docs/benchmark.md, "Transfer floor, round trips and limits"; the table's notes say
it too), all in ms per image:

    staged   = G x RT + max(floor, memcpy)
    zerocopy = floor + G x RT
    queued   = floor + W x RT
    off      = no limit

- floor: the driver's transfer floor (extra.transfer_floor.median_ms, native/bench/probes.cpp):
  the profile's bytes as one async upload and one async download from the host buffer type, one
  synchronize, the smallest of its block medians (the serial floor: one queue moves one
  direction at a time). None on a device without a host buffer type (CPU): then no mode has a
  limit. A row whose session used duplex counts the duplex floor instead (duplex_floor_ms()).
- RT: a round trip (extra.round_trips): rows with compute use the graph round trip (a one-node
  graph + synchronize), transfer-only rows the download round trip (4 bytes + synchronize).
- G: the profile's graphs (83): one synchronization per call.
- memcpy: a plain memcpy of the staged path's bytes, descriptor by descriptor, on the 'on'
  session's copy threads (extra.staging_memcpy.median_ms, .threads): the staged design's copies
  at memcpy speed. The staged path
  copies in pieces, each piece's copy running while the previous piece transfers
  (docs/contract.md, rule 2), so copies and DMA overlap at best completely: the slower of the
  two counts (floor + memcpy was the limit while the copies ran before and after the DMA).
- W: the mandatory waits of queued calls, from the profile (mandatory_waits()): the dependency
  points (a graph whose upload takes a download not yet waited, or a synchronous graph with
  queued work before it), the synchronous graph's own blocking steps (each upload, its compute
  on rows with compute, each download), ring waits only where the bytes the profile keeps in
  flight would exceed the 32 MiB staging bound, and the wait at the end.

The waits a mode made (the driver's counts) are reported beside the mandatory ones; any excess
is flagged. A cost GGML adds per submit (round_trips.back_to_back) is a diagnostic only.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from ..core import profile as profiles
from . import stats
from .record import BATCHING, Record, Row, Series, TransferFloor

# How far the floor probe (native/bench/floor_probe.cpp) may be from the floor.
PROBE_TOLERANCE = 0.05
LIMITED_MODES = ("on", "zerocopy", "queued")


# The most a self-check bound may be missed by, as a share of the floor, however noisy the run.
FLOOR_CHECK_MAX_TOLERANCE = 0.01


@dataclass(frozen=True)
class FloorCheck:
    """The floor's self-check: both directions together (ms) must lie within
    [max(upload alone, download alone), upload alone + download alone] of the same run, each
    bound to within the run's resolution of the quantities it compares (see floor_check)."""

    both_ms: float
    low_ms: float
    high_ms: float
    low_tolerance_ms: float = 0.0
    high_tolerance_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.low_ms - self.low_tolerance_ms <= self.both_ms <= self.high_ms + self.high_tolerance_ms

    @property
    def strict(self) -> bool:
        """Within the bounds without the tolerances."""
        return self.low_ms <= self.both_ms <= self.high_ms

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "both_ms": self.both_ms,
            "max_alone_ms": self.low_ms,
            "sum_alone_ms": self.high_ms,
            "low_tolerance_ms": self.low_tolerance_ms,
            "high_tolerance_ms": self.high_tolerance_ms,
        }

    def __str__(self) -> str:
        bounds = f"{self.low_ms:.3f} <= {self.both_ms:.3f} <= {self.high_ms:.3f} ms"
        if self.strict:
            return f"self-check ok: {bounds}"
        low = self.both_ms < self.low_ms
        miss = self.low_ms - self.both_ms if low else self.both_ms - self.high_ms
        tol = self.low_tolerance_ms if low else self.high_tolerance_ms
        what = "below the slower direction alone" if low else "above the two alone in sequence"
        verdict = "ok within the run's resolution" if self.ok else "FAILED"
        return f"self-check {verdict}: both {miss:.4f} ms {what} (tolerance {tol:.4f} ms; {bounds})"


def resolution_ms(series: Series) -> float:
    """How finely a probed quantity is known: the gap between its best and second-best block
    medians (its value is the best); 0 with one block, which gives no second value."""
    m = sorted(series.block_medians_ms)
    return m[1] - m[0] if len(m) > 1 else 0.0


def floor_check(floor: TransferFloor | None) -> FloorCheck | None:
    """The self-check of a driver floor (extra.transfer_floor of schema 2 or 3: "both",
    "upload" and "download", each with its best_median_ms and block medians); None without one
    (or a schema-1 floor). Each bound may be missed by the resolutions (resolution_ms) of the
    quantities it compares, at most FLOOR_CHECK_MAX_TOLERANCE of the floor: the low bound by
    both's and the slower direction's, the high bound by all three's. So a bound missed by less
    than the run's own spread is not a failure (an H200 run read both 1.1968 ms against a sum
    of 1.1957 ms, with a high tolerance of 0.0046 ms), and a faulty floor still is."""
    if floor is None or floor.both is None or floor.upload is None or floor.download is None:
        return None
    up, down, both = (s.best_median_ms for s in (floor.upload, floor.download, floor.both))
    res = {k: resolution_ms(getattr(floor, k)) for k in ("both", "upload", "download")}
    cap = FLOOR_CHECK_MAX_TOLERANCE * both
    low_tol = min(cap, res["both"] + (res["upload"] if up >= down else res["download"]))
    high_tol = min(cap, res["both"] + res["upload"] + res["download"])
    return FloorCheck(
        both_ms=both, low_ms=max(up, down), high_ms=up + down, low_tolerance_ms=low_tol, high_tolerance_ms=high_tol
    )


@dataclass(frozen=True)
class Waits:
    """Mandatory waits of queued calls per image (see mandatory_waits)."""

    dependency: int  # before a graph whose input takes a download not yet waited, or a synchronous graph
    synchronous: int  # the synchronous graphs' blocking uploads, computes and downloads
    ring: int  # where the bytes in flight would exceed the staging bound
    end: int  # the end of the image (0 or 1)

    @property
    def total(self) -> int:
        return self.dependency + self.synchronous + self.ring + self.end

    def __str__(self) -> str:
        return (
            f"{self.total} ({self.dependency} dependency + {self.synchronous} synchronous + "
            f"{self.ring} ring + {self.end} end)"
        )


def _aligned(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def mandatory_waits(
    prof: dict,
    *,
    compute: bool,
    alignment: int,
    bound: int = profiles.STAGING_BOUND_BYTES,
    order: Sequence[int] | None = None,
) -> Waits:
    """The waits queued calls cannot avoid in one image of ``prof`` (a profile dict: its
    "graphs", each with uploads, downloads, synchronous, depends_on_downloads) issued in
    ``order`` (position -> graph index; None: the profile's order).

    Walking the graphs in that order, with the queued graphs not yet waited:
    - a graph whose upload takes the download of a graph not yet waited, or a synchronous graph
      with queued graphs before it, waits for them: one dependency wait (all earlier queued
      graphs complete with it, since calls execute in submission order);
    - a synchronous graph makes its blocking steps: one per upload and download, and one for its
      compute when the row computes (``compute``);
    - the staging ring holds, for each queued graph not yet waited, its slots (its independent
      uploads and its downloads, each rounded up to ``alignment``), and the download slots of
      waited graphs that a later graph still reads; when the next graph's slots would take it
      over ``bound``, the oldest queued graph is waited: one ring wait each;
    - one wait at the end when any queued graph is not yet waited.
    """
    graphs = prof["graphs"] if order is None else [prof["graphs"][i] for i in order]
    index = {g["name"]: i for i, g in enumerate(graphs)}
    last_reader: dict[int, int] = {}
    for i, g in enumerate(graphs):
        for d in g["depends_on_downloads"]:
            last_reader[index[d["graph"]]] = max(last_reader.get(index[d["graph"]], -1), i)

    def slots(i: int) -> tuple[int, int]:
        g = graphs[i]
        fed = {d["upload"] for d in g["depends_on_downloads"]}
        ups = sum(_aligned(s, alignment) for u, s in enumerate(g["uploads"]) if u not in fed)
        return ups, sum(_aligned(s, alignment) for s in g["downloads"])

    pending: list[int] = []  # queued graphs not yet waited, oldest first
    kept: dict[int, int] = {}  # waited graph -> download slot bytes still read by a later graph
    dependency = synchronous = ring = 0

    def wait_through(end: int) -> None:
        while pending and pending[0] < end:
            j = pending.pop(0)
            if last_reader.get(j, -1) > j:
                kept[j] = slots(j)[1]

    for i, g in enumerate(graphs):
        end = i if g["synchronous"] else 0
        for d in g["depends_on_downloads"]:
            end = max(end, index[d["graph"]] + 1)
        if pending and pending[0] < end:
            dependency += 1
            wait_through(end)
        for j in [j for j in kept if last_reader[j] < i]:
            del kept[j]  # released after its last reader's submit
        need = sum(slots(i))
        while pending and sum(sum(slots(j)) for j in pending) + sum(kept.values()) + need > bound:
            ring += 1
            wait_through(pending[0] + 1)
        if g["synchronous"]:
            synchronous += len(g["uploads"]) + len(g["downloads"]) + (1 if compute else 0)
            if last_reader.get(i, -1) > i:
                kept[i] = slots(i)[1]  # complete on return; its downloads stay held for a later reader
        else:
            pending.append(i)
    return Waits(dependency=dependency, synchronous=synchronous, ring=ring, end=1 if pending else 0)


@functools.cache
def _committed() -> tuple[str, dict]:
    return profiles.sha256(), profiles.load()


def profile_of(result: Record) -> dict | None:
    """The profile file a result was measured with, when this checkout has it (the committed
    profile, by SHA-256); None otherwise (the model then has no graphs to count)."""
    sha, prof = _committed()
    return prof if result.profile_sha256() == sha else None


def issued(prof: dict, names: list[str]) -> list[int] | None:
    """The issue order a result records (its graphs' names, extra.issue_order) as positions ->
    graph indices of ``prof``; None when the names are not the profile's graphs, each once."""
    index = {g["name"]: i for i, g in enumerate(prof["graphs"])}
    return [index[n] for n in names] if sorted(names) == sorted(index) else None


@dataclass(frozen=True)
class Limit:
    """One row's modelled limit (ms) and its terms, with the waits the mode made (None when the
    result does not record them) and the mandatory ones."""

    mode: str
    floor_ms: float
    round_trip: str  # "graph" or "download"
    round_trip_ms: float
    round_trips: int  # G (staged, zerocopy) or W (queued)
    memcpy_ms: float  # staged only; 0 otherwise
    waits_made: int | None
    waits: Waits | None  # queued only
    # Which floor floor_ms is: "serial" (the transfer floor) or "duplex" (duplex_floor_ms()), and
    # the serial floor, which a duplex row's table cell keeps beside its limit.
    floor: str = "serial"
    serial_floor_ms: float | None = None

    def _with(self, floor_ms: float) -> float:
        # staged: copies overlap the DMA (module docstring), so the slower of the two counts.
        return self.round_trips * self.round_trip_ms + max(floor_ms, self.memcpy_ms)

    @property
    def ms(self) -> float:
        return self._with(self.floor_ms)

    @property
    def serial_ms(self) -> float:
        """The same limit on the serial floor (ms): ms itself unless the row counts the duplex floor."""
        return self._with(self.floor_ms if self.serial_floor_ms is None else self.serial_floor_ms)

    @property
    def excess(self) -> int:
        return max(0, self.waits_made - self.round_trips) if self.waits_made is not None else 0


def floor_ms(result: Record) -> float | None:
    """The run's transfer floor in ms, or None."""
    floor = result.extra.transfer_floor
    return floor.median_ms if floor is not None and floor.median_ms else None


def duplex_floor_ms(result: Record, row: Row) -> float | None:
    """The floor a row's limit counts instead of the serial one when its session used duplex, or
    None: the same run's duplex floor (extra.transfer_floor.duplex, the floor's upload and download
    on two backends of the device at once, smallest block median) where the row's counters show
    duplex calls (extra.modes[row].duplex_calls_per_image > 0: its queued calls' downloads ran on
    the session's second backend) and that duplex floor is below the serial floor and below the
    two directions each alone, added (the backend overlaps the two directions: the smaller counts).
    The rule is docs/benchmark.md's "The modelled limit of each mode" (the duplex limit); a backend
    that does not overlap the directions (Vulkan's one queue) measures a duplex floor at or above
    the serial one, so its rows keep the serial floor whatever their session did. The sum of the
    two alone guards against a serial floor that failed its own self-check (slower than the two
    directions alone): a duplex floor below that one shows a broken serial probe, not overlap."""
    x = result.extra
    facts = x.modes.get(row.batching)
    floor = x.transfer_floor
    if facts is None or not facts.duplex_calls_per_image or floor is None or floor.duplex is None:
        return None
    both = floor.duplex.best_median_ms
    serial = floor.median_ms
    if floor.upload is not None and floor.download is not None:
        serial = min(serial, floor.upload.best_median_ms + floor.download.best_median_ms)
    return both if both < serial else None


def _waits_made(result: Record, mode: str, row: Row) -> int | None:
    """The waits the mode made per image, as the driver counted them: one per call for staged
    and zerocopy; for queued its wait points (dependency, ring, end) plus the synchronous path's
    blocking steps (the row's synchronous uploads and downloads, and one compute per synchronous
    graph on rows with compute)."""
    m = result.extra.modes.get(mode)
    if m is None:
        return None
    if mode != "queued":
        return m.calls_per_image
    points = (m.dependency_wait_points_per_image, m.ring_wait_points_per_image, m.end_wait_points_per_image)
    if any(k is None for k in points):
        return None
    prof = profile_of(result)
    computes = 0 if result.transfer_only or prof is None else sum(g["synchronous"] for g in prof["graphs"])
    return sum(points) + row.counters.sync_uploads + row.counters.sync_downloads + computes


def limit(result: Record, row: Row | None) -> Limit | None:
    """The modelled limit of one row of ``result``, or None: no row (a failed result), off, no
    floor (CPU), no round trips (a result migrated from version 1) or a profile this checkout
    does not have. Its floor is the serial one, or the duplex floor (duplex_floor_ms())."""
    x = result.extra
    floor, rts, prof = floor_ms(result), x.round_trips, profile_of(result)
    if row is None or row.batching not in LIMITED_MODES or floor is None or rts is None or prof is None:
        return None
    mode = row.batching
    kind = "download" if result.transfer_only else "graph"
    rt = getattr(rts, kind).best_median_ms
    memcpy = 0.0
    waits = None
    if mode == "queued":
        facts = x.modes.get(mode)
        alignment = (facts.staging_alignment if facts else None) or 1
        order = (
            issued(prof, x.issue_order)
            if x.issue_order is not None
            else (profiles.level_order(prof) if result.order == "levels" else None)
        )  # files before issue_order
        waits = mandatory_waits(prof, compute=kind == "graph", alignment=alignment, order=order)
        count = waits.total
    else:
        count = len(prof["graphs"])
        if mode == "on":
            if x.staging_memcpy is None:
                return None  # the staged limit's copy term was not measured
            memcpy = x.staging_memcpy.median_ms
    both = duplex_floor_ms(result, row)
    return Limit(
        mode=mode,
        floor_ms=floor if both is None else both,
        floor="serial" if both is None else "duplex",
        serial_floor_ms=floor,
        round_trip=kind,
        round_trip_ms=rt,
        round_trips=count,
        memcpy_ms=memcpy,
        waits_made=_waits_made(result, mode, row),
        waits=waits,
    )


def probe_gap(result: Record) -> tuple[float, float] | None:
    """(the floor probe's median ms, the driver floor's relative distance from it) when the run
    has both, else None."""
    probe = result.extra.floor_probe
    floor = floor_ms(result)
    if probe is None or not probe.median_ms or floor is None:
        return None
    return probe.median_ms, floor / probe.median_ms - 1.0


def excluded_ms(result: Record, mode: str | None) -> tuple[list[float], list[float]] | None:
    """Per timed image, the host ms a zerocopy or queued row does not time: (the producer's
    writes into slots, the consumer's reads out of them); None for other rows. A result
    migrated from version 1 records their sum only: (sums, [])."""
    m = result.extra.modes.get(mode)  # None (a failed result's row) names no mode
    if m is None:
        return None
    if m.excluded_ms is not None:
        return m.excluded_ms.slot_writes, m.excluded_ms.slot_reads
    if m.slot_fill_and_read_ms_excluded is not None:
        return m.slot_fill_and_read_ms_excluded, []
    return None


# How far below the slower direction alone a duplex sample may lie before it is a measurement
# fault rather than noise: 1% (the floor self-check's largest tolerance, docs/benchmark.md).
DUPLEX_TOLERANCE = 0.01


def duplex(floor: TransferFloor) -> str | None:
    """The floor's two directions at once on two backends of the device (transfer_floor.duplex,
    the duplex floor of rows whose session used duplex, duplex_floor_ms(); docs/benchmark.md
    "Transfer floor, round trips and limits"), against each direction alone: the share of the
    faster direction's time that was hidden, (upload + download - duplex) / min(upload,
    download), all smallest block medians; None without the probe. 1 is full overlap, 0 none,
    below 0 the two contended. Physics bounds it above: both directions cannot take less than
    the slower one alone, so a duplex more than 1% below it is flagged as a measurement fault."""
    if floor.duplex is None or floor.upload is None or floor.download is None:
        return None
    up, down, both = (s.best_median_ms for s in (floor.upload, floor.download, floor.duplex))
    share = (up + down - both) / min(up, down) if min(up, down) > 0 else 0.0
    known = floor.upload_bytes is not None and floor.download_bytes is not None and both > 0
    # no figure without both byte counts (or in no time)
    rate = f" = {(floor.upload_bytes + floor.download_bytes) / (both * 1e6):.1f} GB/s" if known else ""
    fault = both < max(up, down) * (1 - DUPLEX_TOLERANCE)
    return (
        f"duplex (upload and download on two backends at once) {both:.3f} ms{rate}, "
        f"{share:.0%} of the faster direction hidden"
        + (" (**below the slower direction alone: a measurement fault**)" if fault else "")
    )


def _rows(result: Record) -> list[Row]:
    """The result's rows in the record's batching order."""
    return sorted(result.rows, key=lambda r: BATCHING.index(r.batching))


def describe(result: Record) -> str | None:
    """One line of the same-run terms of a result's limits (for the table's notes), or None
    when it has none: the floor per direction and its self-check, the probe, the round trips,
    the staging memcpy, the mandatory waits of queued, each limited row's x floor and x limit,
    and as diagnostics GGML's alternatives and the core's host time per image."""
    x = result.extra
    floor, rts = x.transfer_floor, x.round_trips
    if floor_ms(result) is None or rts is None or None in (floor.gb_per_s, floor.upload, floor.download):
        return None
    g = floor.gb_per_s
    parts = [
        f"floor {floor.median_ms:.3f} ms (upload alone {floor.upload.best_median_ms:.3f} ms = "
        f"{g.upload:.1f} GB/s, download alone {floor.download.best_median_ms:.3f} ms = "
        f"{g.download:.1f} GB/s, both {g.both:.1f} GB/s; {floor_check(floor)})"
    ]
    dx = duplex(floor)
    if dx:
        parts.append(dx)
    gap = probe_gap(result)
    if gap is not None:
        parts.append(f"sam3d_floor_probe {gap[0]:.3f} ms ({gap[1]:+.1%})")
    parts.append(f"RT download {rts.download.best_median_ms:.4f} ms, graph {rts.graph.best_median_ms:.4f} ms")
    mc = x.staging_memcpy
    if mc is not None:
        # its GB/s as the driver measured them (optional in the record): no figure without them
        parts.append(
            f"staging memcpy {mc.median_ms:.3f} ms" + (f" ({mc.gb_per_s:.1f} GB/s)" if mc.gb_per_s is not None else "")
        )
    ratios = []
    for row in _rows(result):
        lim = limit(result, row)
        if lim is None:
            continue
        med = stats.median(row.wall_ms)
        ratios.append(
            f"{row.batching} {med / lim.serial_floor_ms:.2f}x floor, {med / lim.ms:.2f}x limit {lim.ms:.3f} ms"
            + (
                f" (duplex floor {lim.floor_ms:.3f} ms; on the serial floor {med / lim.serial_ms:.2f}x "
                f"{lim.serial_ms:.3f} ms)"
                if lim.floor == "duplex"
                else ""
            )
        )
        if lim.waits is not None:
            parts.append(f"queued mandatory waits {lim.waits}")
    if ratios:
        parts.append("; ".join(ratios))
    diag = []
    if rts.download_event is not None and rts.graph_event is not None:
        diag.append(
            f"event-wait RT download {rts.download_event.best_median_ms:.4f} ms, graph "
            f"{rts.graph_event.best_median_ms:.4f} ms"
        )
    b2b = rts.back_to_back
    if b2b is not None and (rts.back_to_back_graphs or 0) > 1:
        n = rts.back_to_back_graphs
        per = (b2b.best_median_ms - rts.graph.best_median_ms) / (n - 1)
        diag.append(f"{n} graphs back to back {b2b.best_median_ms:.4f} ms ({per:+.4f} ms per graph after the first)")
    calls = ggml_calls(result)
    if calls:
        diag.append(calls)
    per_image = calls_per_image(result)
    if per_image:
        diag.append(per_image)
    split = [
        f"{row.batching} " + "/".join(f"{stats.median([getattr(smp, k) for smp in row.samples]):.3f}" for k in _SPLIT)
        for row in _rows(result)
        if row.batching in LIMITED_MODES
    ]
    if split:
        diag.append(
            "host ms per image in enqueue/waits/copies/synchronous path (the core's counters, medians): "
            + ", ".join(split)
        )
    if diag:
        parts.append("diagnostics (not in any limit): " + "; ".join(diag))
    return "; ".join(parts)


_SPLIT = ("enqueue_ms", "synchronize_ms", "copy_ms", "sync_path_ms")


def ggml_calls(result: Record) -> str | None:
    """The modes' GGML calls timed without the core (extra.ggml_calls, transfer-only runs;
    native/bench/probes.cpp) against the floor and the rows, or None: the profile's copies as
    separate async copies before one synchronize, against the floor (both the smallest block
    median): what each copy costs beyond the floor's 2; then the zerocopy and queued rows' own
    GGML calls with the replay's untimed slot writes and reads (cold: without them), medians of
    all samples, each with the row's median minus it: what the core and the replay's
    bookkeeping add."""
    c = result.extra.ggml_calls
    floor = floor_ms(result)
    if c is None or floor is None:
        return None
    n = c.copies_per_image
    copies = c.copies.best_median_ms
    out = [
        f"GGML's calls alone (no core): the profile's {n} copies, one synchronize {copies:.3f} ms "
        f"({(copies - floor) / max(n - 2, 1) * 1e3:+.2f} us per copy over the floor's 2)"
    ]
    med = {row.batching: stats.median(row.wall_ms) for row in result.rows}
    queued = result.extra.modes.get("queued")
    for mode in ("zerocopy", "queued"):
        if getattr(c, mode) is not None:
            key = mode
            if (
                mode == "queued"
                and c.queued_no_upload_wait is not None
                and queued is not None
                and queued.event_waits_per_image == 0
            ):
                key = "queued_no_upload_wait"  # the core enqueued no event wait (one in-order queue)
            t = stats.median(getattr(c, key).samples_ms)
            cold = getattr(c, f"{mode}_cold")
            out.append(
                f"{mode}'s calls {t:.3f} ms"
                + (" (without the event waits)" if key != mode else "")
                + (f" (cold {stats.median(cold.samples_ms):.3f}{', with them' if key != mode else ''})" if cold else "")
                + (f", the row {med[mode] - t:+.3f} ms" if mode in med else "")
            )
    alt = [
        (k, n)
        for k, n in (
            ("queued", "with the event wait before uploads"),
            ("queued_no_upload_wait", "without it"),
            ("queued_synchronize", "with no event, every wait a synchronize"),
            ("queued_two_backends", "downloads on a second backend"),
            ("queued_levels", "graphs in dependency-level order"),
        )
        if getattr(c, k) is not None
    ]
    if len(alt) > 1:
        out.append("queued's calls " + ", ".join(f"{n} {stats.median(getattr(c, k).samples_ms):.3f}" for k, n in alt))
    return ", ".join(out) + " (medians)"


# The core's GGML calls per image that extra.modes records (native/bench/output.cpp, from the
# counters of docs/contract.md rule 8), in the order the table names them.
_PER_IMAGE = (
    ("ggml_copies_per_image", "copies"),
    ("synchronizes_per_image", "synchronizes"),
    ("event_records_per_image", "event records"),
    ("event_waits_per_image", "event waits"),
    ("event_synchronizes_per_image", "event synchronizes"),
)


# The second backend's per image (core 0.8.0 on), named after them where a row uses it.
_DUPLEX_PER_IMAGE = (
    ("duplex_calls_per_image", "duplex calls"),
    ("duplex_event_records_per_image", "its event records"),
    ("duplex_event_waits_per_image", "its event waits"),
)


def _counts(result: Record, names: Sequence[tuple[str, str]]) -> list[tuple[list[int], str]]:
    """Per row that records every count of ``names``: (the counts, "<row> a/b/c")."""
    out = []
    for row in _rows(result):
        m = result.extra.modes.get(row.batching)
        counts = [getattr(m, k) for k, _ in names] if m is not None else [None]
        if all(isinstance(n, int) for n in counts):
            out.append((counts, f"{row.batching} " + "/".join(map(str, counts))))
    return out


def calls_per_image(result: Record) -> str | None:
    """The core's GGML calls per image of each row (extra.modes: copies, synchronizes, event
    records, event waits, event synchronizes; core 0.6.0 on), then the second backend's (duplex
    calls, its event records and waits; core 0.8.0 on) of the rows that made any, or None when no
    row has the first five."""
    out = [text for _, text in _counts(result, _PER_IMAGE)]
    if not out:
        return None
    text = f"the core's GGML calls per image ({'/'.join(n for _, n in _PER_IMAGE)}): " + ", ".join(out)
    used = [text for counts, text in _counts(result, _DUPLEX_PER_IMAGE) if counts[0] > 0]
    if used:
        text += f", the second backend's ({'/'.join(n for _, n in _DUPLEX_PER_IMAGE)}): " + ", ".join(used)
    return text
