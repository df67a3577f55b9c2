"""The modelled limits (sam3d/results/limits.py): the mandatory waits from the profile, the
limit arithmetic per mode, the floor's self-check, the floor probe's cross-check, and how the
table, compare and older result files show them. Values are chosen so that dropping a term or
inflating a count changes the asserted number."""

import copy
import json

import pytest
from conftest import limits_extra, records

from sam3d.cli import bench
from sam3d.core import profile
from sam3d.results import compare, limits, record, table
from sam3d.results.record import Series, TransferFloor

SHA = profile.sha256()
ON = [10.0 + 0.01 * i for i in range(20)]  # median 10.095
OFF = [20.0 + 0.01 * i for i in range(20)]


def _doc(make_result, transfer_only=False, **extra):
    """A Vulkan result document of the committed profile with on, off, zerocopy and queued rows
    (zerocopy median 6.095, queued median 5.095) and the limit probes of limits_extra(**extra);
    ``transfer_only``: the record's field of that name."""
    r = make_result(
        backend="Vulkan",
        device="Test GPU",
        on_ms=ON,
        off_ms=OFF,
        profile_sha=SHA,
        **({"transfer_only": True} if transfer_only else {}),
    )
    on = next(row for row in r["rows"] if row["batching"] == "on")
    for mode, less in (("zerocopy", 4.0), ("queued", 5.0)):
        row = copy.deepcopy(on)
        row["batching"] = mode
        for s in row["samples"]:
            s["wall_ms"] -= less
        r["rows"].append(row)
    r["extra"] = limits_extra(**extra)
    return r


def _rec(doc):
    """The record of one result document (edited by a test), read as a result file is."""
    (r,) = records(doc)
    return r


def _result(make_result, transfer_only=False, **extra):
    """_doc()'s record."""
    return _rec(_doc(make_result, transfer_only, **extra))


def _row(r, batching):
    """The row of ``r`` of that batching mode."""
    return next(row for row in r.rows if row.batching == batching)


def _recs(rs):
    """Records of documents or records."""
    return [_rec(r) if isinstance(r, dict) else r for r in rs]


def _cells(rs):
    """The table's cells (table.build) by (backend, batching)."""
    return {(row["backend"], row["batching"]): row for row in table.build(_recs(rs)).rows}


def _notes(rs):
    return table.build(_recs(rs)).notes


def _write_json(path, doc):
    """A result file as an older checkout wrote it (record.write writes the version-5 record)."""
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


# --- mandatory waits ------------------------------------------------------------------------


def test_mandatory_waits_of_the_committed_profile():
    """50 dependency points for 82 batched graphs (docs/getting-started.md, "The benchmark run"),
    the image encoder's synchronous path (3 uploads, 1 download, and its compute with compute),
    no ring waits (the profile keeps at most about 13.6 MiB in flight), the end."""
    prof = profile.load()
    w = limits.mandatory_waits(prof, compute=True, alignment=64)
    assert (w.dependency, w.synchronous, w.ring, w.end, w.total) == (50, 5, 0, 1, 56)
    t = limits.mandatory_waits(prof, compute=False, alignment=64)
    assert (t.synchronous, t.total) == (4, 55)
    assert str(w) == "56 (50 dependency + 5 synchronous + 0 ring + 1 end)"


def _graph(name, up, down, deps=(), synchronous=False):
    return {
        "name": name,
        "uploads": up,
        "downloads": down,
        "synchronous": synchronous,
        "depends_on_downloads": [{"upload": u, "graph": g, "download": d} for u, g, d in deps],
    }


MIB = 1 << 20


def test_ring_waits_only_where_bytes_in_flight_exceed_the_bound():
    # Four independent graphs of 12 MiB + 4 KiB: the third and the fourth each find 24 MiB in
    # flight, so each waits the oldest queued graph once.
    prof = {"graphs": [_graph(f"g{i}", [12 * MIB], [4096]) for i in range(4)]}
    w = limits.mandatory_waits(prof, compute=True, alignment=64)
    assert (w.dependency, w.synchronous, w.ring, w.end) == (0, 0, 2, 1)
    # With a bound of 64 MiB all four fit: no ring wait.
    assert limits.mandatory_waits(prof, compute=True, alignment=64, bound=64 * MIB).ring == 0


def test_kept_download_slots_and_dependencies_count_in_flight():
    # g2 reads g0's 12 MiB download: one dependency wait before g2 (g0 completes; its download
    # slots stay held for g2). g2's own 9 MiB then find g1 queued (12 MiB) and g0's kept 12 MiB:
    # 33 MiB > 32 MiB, so g1 is waited once (without the kept slots it would fit: no wait).
    prof = {
        "graphs": [
            _graph("g0", [4096], [12 * MIB]),
            _graph("g1", [4096], [12 * MIB]),
            _graph("g2", [12 * MIB, 9 * MIB], [4096], deps=[(0, "g0", 0)]),
        ]
    }
    w = limits.mandatory_waits(prof, compute=False, alignment=4096)
    assert (w.dependency, w.ring, w.end) == (1, 1, 1)
    # A synchronous graph after queued work waits for it (a dependency point) and counts its
    # blocking steps: 2 uploads + 1 download (+ 1 compute with compute); nothing is left at the end.
    prof["graphs"].append(_graph("enc", [4096, 4096], [4096], synchronous=True))
    w = limits.mandatory_waits(prof, compute=True, alignment=4096)
    assert (w.dependency, w.synchronous, w.ring, w.end) == (2, 4, 1, 0)


def test_level_order_keeps_feeders_first_and_synchronous_graphs_in_place():
    """sam3d_bench --order levels (native/bench/profile.cpp): between synchronous graphs by
    level (one more than the highest feeder's), ties in profile order."""
    prof = {
        "graphs": [
            _graph("a", [4], [4]),
            _graph("b", [4], [4], deps=[(0, "a", 0)]),
            _graph("c", [4], [4]),
            _graph("d", [4], [4], deps=[(0, "b", 0)]),
            _graph("e", [4], [4]),
            _graph("enc", [4], [4], synchronous=True),
            _graph("f", [4], [4], deps=[(0, "e", 0)]),
            _graph("g", [4], [4]),
        ]
    }
    # levels: a 1, b 2, c 1, d 3, e 1 | enc | f 2, g 1
    assert profile.level_order(prof) == [0, 2, 4, 1, 3, 5, 7, 6]
    assert profile.level_order({"graphs": prof["graphs"][:5]}) == [0, 2, 4, 1, 3]
    committed = profile.load()
    order = profile.level_order(committed)
    pos = {committed["graphs"][g]["name"]: k for k, g in enumerate(order)}
    assert sorted(order) == list(range(profile.GRAPHS)) and order[0] == 0  # the image encoder first
    assert all(pos[d["graph"]] < pos[g["name"]] for g in committed["graphs"] for d in g["depends_on_downloads"])


def test_mandatory_waits_follow_the_issue_order(make_result):
    """In dependency-level order the committed profile has 52 dependency points, not 50: the
    replay waits each feeder itself (graphs between it and the reader stay in flight), and
    levels put more graphs between them. A result's order field picks the order (a version-3
    file's extra.graph_order, migrated to it)."""
    prof = profile.load()
    w = limits.mandatory_waits(prof, compute=False, alignment=64, order=profile.level_order(prof))
    assert (w.dependency, w.synchronous, w.ring, w.end, w.total) == (52, 4, 0, 1, 57)
    assert limits.mandatory_waits(prof, compute=False, alignment=64, order=range(profile.GRAPHS)).total == 55
    # c reads a, d reads b: in profile order c waits a, then d waits b (2); with d first, its
    # wait completes a and b at once (1)
    four = {
        "graphs": [
            _graph("a", [4], [4]),
            _graph("b", [4], [4]),
            _graph("c", [4], [4], deps=[(0, "a", 0)]),
            _graph("d", [4], [4], deps=[(0, "b", 0)]),
        ]
    }
    assert limits.mandatory_waits(four, compute=False, alignment=4).dependency == 2
    assert limits.mandatory_waits(four, compute=False, alignment=4, order=[0, 1, 3, 2]).dependency == 1
    d = _doc(make_result, transfer_only=True, floor=1.5, rt_download=0.03)
    r = _rec(d)
    assert r.order == "profile" and limits.limit(r, _row(r, "queued")).round_trips == 55
    d["order"] = "levels"
    r = _rec(d)
    assert limits.limit(r, _row(r, "queued")).round_trips == 57
    assert limits.limit(r, _row(r, "zerocopy")).round_trips == 83
    d["order"] = "profile"
    r = _rec(d)
    assert limits.limit(r, _row(r, "queued")).round_trips == 55
    # the order the driver recorded it issued (extra.issue_order) is the one counted, whatever the
    # order field says; a file without it is counted in the order its field names
    names = [g["name"] for g in prof["graphs"]]
    d["order"] = "levels"
    d["extra"]["issue_order"] = names
    r = _rec(d)
    assert limits.limit(r, _row(r, "queued")).round_trips == 55
    d["extra"]["issue_order"] = [names[g] for g in profile.level_order(prof)]
    r = _rec(d)
    assert limits.limit(r, _row(r, "queued")).round_trips == 57
    assert limits.issued(prof, names[:-1]) is None and limits.issued(prof, names[:-1] + names[:1]) is None
    del d["extra"]["issue_order"]
    d["order"] = "profile"
    # a version-3 file: the order in extra.graph_order, transfer-only as the backend's suffix
    v3 = _doc(make_result, floor=1.5, rt_download=0.03)
    v3.update(schema="sam3d-bench-result/3", backend="Vulkan (transfer-only)")
    v3["extra"].update(graph_order="levels", transfer_only=True)
    r = _rec(v3)
    assert (r.backend, r.order, r.transfer_only) == ("Vulkan", "levels", True)
    assert limits.limit(r, _row(r, "queued")).round_trips == 57


def test_a_synchronous_graph_s_download_read_later_stays_in_flight():
    """The replay keeps a synchronous graph's output slots for a later reader too (replay.cpp,
    submit_slots): its 20 MiB stay held, so two queued graphs of 7 MiB after it meet the 32 MiB
    bound (20 + 7 + 7 > 32: one ring wait); without a reader they fit."""
    enc = _graph("enc", [4096], [20 * MIB], synchronous=True)
    queued = [_graph(f"g{i}", [7 * MIB], [4096]) for i in range(2)]
    reader = _graph("r", [20 * MIB], [4096], deps=[(0, "enc", 0)])
    w = limits.mandatory_waits({"graphs": [enc, *queued, reader]}, compute=False, alignment=4096)
    assert (w.dependency, w.ring) == (0, 1)
    w = limits.mandatory_waits({"graphs": [enc, *queued, _graph("r", [4096], [4096])]}, compute=False, alignment=4096)
    assert w.ring == 0


# --- the limit arithmetic -------------------------------------------------------------------


def test_limits_with_compute_use_the_graph_round_trip(make_result):
    r = _result(make_result, floor=1.5, rt_download=0.03, rt_graph=0.04, memcpy=4.0)
    on, zc, q = (limits.limit(r, _row(r, m)) for m in ("on", "zerocopy", "queued"))
    assert on.ms == pytest.approx(83 * 0.04 + max(1.5, 4.0))  # 7.32: the copies overlap the floor
    assert zc.ms == pytest.approx(1.5 + 83 * 0.04)  # 4.82
    assert q.ms == pytest.approx(1.5 + 56 * 0.04)  # 3.74
    assert (on.round_trip, q.round_trips, q.waits.total) == ("graph", 56, 56)
    assert limits.limit(r, _row(r, "off")) is None
    cells = _cells([r])
    assert cells[("Vulkan", "on")]["x limit"] == "1.38x (7.320)"  # 10.095 / 7.32
    assert cells[("Vulkan", "zerocopy")]["x limit"] == "1.26x (4.820)"  # 6.095 / 4.82
    assert cells[("Vulkan", "queued")]["x limit"] == "1.36x (3.740)"  # 5.095 / 3.74
    assert cells[("Vulkan", "off")]["x limit"] == ""
    assert cells[("Vulkan", "queued")]["x floor"] == "3.4x (1.500)"


def test_transfer_only_limits_use_the_download_round_trip(make_result):
    r = _result(make_result, transfer_only=True, floor=1.5, rt_download=0.03, rt_graph=0.04, memcpy=4.0)
    on, zc, q = (limits.limit(r, _row(r, m)).ms for m in ("on", "zerocopy", "queued"))
    assert (on, zc, q) == pytest.approx((83 * 0.03 + 4.0, 1.5 + 83 * 0.03, 1.5 + 55 * 0.03))


def test_staged_limit_counts_the_slower_of_floor_and_memcpy(make_result):
    # Pieces overlap the copies with the DMA (docs/contract.md, rule 2): a memcpy faster than
    # the floor leaves the floor.
    r = _result(make_result, floor=1.5, rt_download=0.03, rt_graph=0.04, memcpy=0.5)
    assert limits.limit(r, _row(r, "on")).ms == pytest.approx(83 * 0.04 + 1.5)


def test_waits_made_beside_the_mandatory_ones_and_excess_flagged(make_result):
    # queued made = dependency + ring + end + 3 sync uploads + 1 sync download + 1 encoder compute.
    r = _result(make_result, dependency=50, ring=0, end=1)
    assert limits.limit(r, _row(r, "queued")).waits_made == 56
    cells = _cells([r])
    assert cells[("Vulkan", "queued")]["waits"] == "56/56"
    assert cells[("Vulkan", "on")]["waits"] == "83/83" and cells[("Vulkan", "off")]["waits"] == ""
    inflated = _result(make_result, dependency=53, ring=1, end=1)
    lim = limits.limit(inflated, _row(inflated, "queued"))
    assert (lim.waits_made, lim.round_trips, lim.excess) == (60, 56, 4)
    assert lim.ms == pytest.approx(1.5 + 56 * 0.04)  # the limit counts the mandatory waits only
    assert _cells([inflated])[("Vulkan", "queued")]["waits"] == "60/56 **+4**"
    extra_calls = _result(make_result, calls=85)
    assert _cells([extra_calls])[("Vulkan", "zerocopy")]["waits"] == "85/83 **+2**"


# --- the duplex limit (docs/benchmark.md, "The modelled limit of each mode") -------------------


def _duplex_doc(make_result, duplex_ms, calls=None, transfer_only=False, **extra):
    """_doc() with the floor's duplex series at ``duplex_ms`` (None: not measured) and, per mode in
    ``calls``, that many duplex calls per image (the second backend's event records and waits
    beside them); the serial floor is 1.5 ms, RT graph 0.04, memcpy 4.0 unless ``extra`` says."""
    d = _doc(make_result, transfer_only, **extra)
    if duplex_ms is not None:
        d["extra"]["transfer_floor"]["duplex"] = _blocks(duplex_ms)
    for mode, n in (calls or {}).items():
        d["extra"]["modes"][mode].update(
            duplex_calls_per_image=n,
            duplex_event_records_per_image=n,
            duplex_event_waits_per_image=n,
            session_duplex=n > 0,
        )
    return d


def test_a_row_whose_session_used_duplex_counts_the_duplex_floor_where_it_is_below_the_serial_one(make_result):
    """Where the backend overlaps the directions (the same run's duplex floor, 0.66 ms, is below
    the serial floor, 1.5 ms) and the row's session used duplex (duplex calls > 0), its limit
    counts the duplex floor instead of the serial one: queued 0.66 + 56 x 0.04 = 2.9 ms instead of
    3.74; the table says which floor and keeps the serial limit beside it; x floor stays the
    serial floor's."""
    r = _rec(_duplex_doc(make_result, 0.66, {"queued": 82, "zerocopy": 0}))
    q = limits.limit(r, _row(r, "queued"))
    assert (q.floor, q.floor_ms, q.serial_floor_ms) == ("duplex", 0.66, 1.5)
    assert (q.ms, q.serial_ms) == pytest.approx((0.66 + 56 * 0.04, 1.5 + 56 * 0.04))
    zc = limits.limit(r, _row(r, "zerocopy"))  # no duplex call: the serial floor
    assert (zc.floor, zc.ms) == ("serial", pytest.approx(1.5 + 83 * 0.04))
    cells = _cells([r])
    assert cells[("Vulkan", "queued")]["x limit"] == "1.76x (2.900 duplex floor; 1.36x serial 3.740)"
    assert cells[("Vulkan", "zerocopy")]["x limit"] == "1.26x (4.820)"
    assert cells[("Vulkan", "queued")]["x floor"] == "3.4x (1.500)"
    (json_q,) = [x for x in table.document([r]).rows if x.batching == "queued"]
    assert (json_q.limit_floor, json_q.limit_ms, json_q.serial_limit_ms) == (
        "duplex",
        pytest.approx(2.9),
        pytest.approx(3.74),
    )
    side = compare.compare_results([r], [r]).lines
    assert [x.a.limit_ms for x in side if x.batching == "queued"] == [pytest.approx(2.9)]


def test_the_duplex_floor_replaces_the_serial_one_in_every_limited_mode(make_result):
    """The staged limit keeps the slower of the floor and the copies: with duplex calls the floor
    term is the duplex floor (a memcpy of 0.5 ms then leaves 0.66); transfer-only rows too."""
    r = _rec(_duplex_doc(make_result, 0.66, {"on": 3, "zerocopy": 83}, transfer_only=True, memcpy=0.5))
    on, zc = (limits.limit(r, _row(r, m)) for m in ("on", "zerocopy"))
    assert on.ms == pytest.approx(83 * 0.03 + 0.66) and on.serial_ms == pytest.approx(83 * 0.03 + 1.5)
    assert zc.ms == pytest.approx(0.66 + 83 * 0.03)


@pytest.mark.parametrize(
    "duplex_ms, calls, alone",
    [
        (1.6, {"queued": 82}, {}),  # the backend does not overlap the directions (Vulkan's one queue)
        (1.5, {"queued": 82}, {}),  # equal: not below the serial floor
        (None, {"queued": 82}, {}),  # the duplex floor was not measured
        (0.66, {"queued": 0}, {}),  # the session made no duplex call (duplex off, or no second backend)
        (0.66, {}, {}),  # a result before the duplex counters
        # below a serial floor that failed its self-check (1.5 against 0.5 + 0.5 alone), but not
        # below the two directions alone, added: no overlap (a lavapipe run measured this)
        (1.2, {"queued": 82}, {"upload": 0.5, "download": 0.5}),
    ],
)
def test_a_row_keeps_the_serial_floor_unless_both_conditions_hold(make_result, duplex_ms, calls, alone):
    r = _rec(_duplex_doc(make_result, duplex_ms, calls, **alone))
    q = limits.limit(r, _row(r, "queued"))
    assert (q.floor, q.floor_ms, q.ms, q.serial_ms) == ("serial", 1.5, pytest.approx(3.74), pytest.approx(3.74))
    assert _cells([r])[("Vulkan", "queued")]["x limit"] == "1.36x (3.740)"


def test_the_limits_note_names_a_duplex_rows_floor_and_the_second_backends_calls(make_result):
    """The same-run line gives a duplex row's limit on the duplex floor with its serial one beside
    it, and the second backend's calls per image of the rows that made any."""
    d = _duplex_doc(make_result, 0.66, {"queued": 82, "zerocopy": 0, "on": 0})
    for m in ("on", "zerocopy", "queued"):
        d["extra"]["modes"][m].update(
            ggml_copies_per_image=248,
            synchronizes_per_image=42,
            event_records_per_image=82,
            event_waits_per_image=0,
            event_synchronizes_per_image=91,
        )
    d["extra"]["modes"]["queued"]["duplex_event_waits_per_image"] = 41
    line = limits.describe(_rec(d))
    assert (
        f"queued {5.095 / 1.5:.2f}x floor, {5.095 / 2.9:.2f}x limit 2.900 ms (duplex floor 0.660 ms; on the "
        f"serial floor {5.095 / 3.74:.2f}x 3.740 ms)" in line
    )
    assert f"zerocopy {6.095 / 1.5:.2f}x floor, {6.095 / 4.82:.2f}x limit 4.820 ms;" in line
    assert line.count("duplex floor") == 1
    assert (
        "the core's GGML calls per image (copies/synchronizes/event records/event waits/event synchronizes): "
        "on 248/42/82/0/91, zerocopy 248/42/82/0/91, queued 248/42/82/0/91, the second backend's (duplex "
        "calls/its event records/its event waits): queued 82/82/41;" in line
    )
    d["extra"]["modes"]["queued"]["duplex_calls_per_image"] = 0
    assert "second backend" not in limits.describe(_rec(d))
    d["extra"]["modes"]["queued"]["duplex_calls_per_image"] = 1  # one call is a row that made any
    d["extra"]["modes"]["on"].update(duplex_calls_per_image=3, duplex_event_records_per_image=3)
    assert limits.calls_per_image(_rec(d)).endswith(
        "the second backend's (duplex calls/its event records/its event waits): on 3/3/0, queued 1/82/41"
    )


def test_the_table_shows_a_duplex_column_where_rows_differ(make_result):
    """The duplex mode asked is a configuration field: a column where some row is not at the
    driver's default (off), and rows of different modes are different configurations."""
    auto = _duplex_doc(make_result, 0.66, {"queued": 82}) | {"duplex": "auto"}
    off = _duplex_doc(make_result, 0.66, {"queued": 0})
    t = table.build(_recs([auto, off]))
    assert "duplex" in [c.header for c in t.columns]
    assert [row["duplex"] for row in t.rows if row["batching"] == "queued"] == ["auto", "off"]
    assert "duplex" not in [c.header for c in table.build(_recs([off])).columns]
    assert any(n.startswith("limits, release Vulkan duplex auto: ") for n in t.notes)


def test_no_limit_without_a_floor_or_another_profile(make_result):
    cpu = _rec(make_result(on_ms=ON, off_ms=OFF, profile_sha=SHA))  # CPU: no transfer floor
    t = table.build([cpu])
    assert "x limit" in [c.header for c in t.columns] and all(row["x limit"] == "" for row in t.rows)
    assert "x limit" not in table.render([cpu]).splitlines()[2]
    other = _doc(make_result)
    other["profile"]["sha256"] = "b" * 64
    other = _rec(other)
    assert limits.limit(other, _row(other, "queued")) is None


# --- the floor --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "both, up, down, ok",
    [
        (1.40, 0.80, 0.75, True),  # within [0.80, 1.55]
        (0.80, 0.80, 0.75, True),  # fully overlapped: the slower direction alone
        (1.55, 0.80, 0.75, True),  # fully serial: the sum
        (0.79, 0.80, 0.75, False),  # faster than the slower direction alone
        (1.56, 0.80, 0.75, False),  # slower than both alone in sequence
    ],
)
def test_floor_self_check(make_result, both, up, down, ok):
    r = _result(make_result, floor=both, upload=up, download=down)
    check = limits.floor_check(r.extra.transfer_floor)
    assert (check.ok, check.low_ms, check.high_ms) == (ok, max(up, down), pytest.approx(up + down))
    cell = _cells([r])[("Vulkan", "on")]["x floor"]
    notes = _notes([r])
    assert cell.endswith("self-check FAILED") != ok
    assert any("WARNING" in n and "self-check FAILED" in n for n in notes) != ok


def _blocks(*medians):
    """A probed series with these block medians; its samples differ from them, so a
    resolution read from the samples instead would differ too."""
    return {
        "best_median_ms": min(medians),
        "block_medians_ms": list(medians),
        "samples_ms": [m * k for m in medians for k in (0.9, 1.0, 1.3)],
    }


def _floor(both=None, upload=None, download=None, **more):
    """A transfer floor of these series (dicts as _blocks() gives them; None: absent), its
    value both's best block median."""
    series = {k: Series(**v) for k, v in (("both", both), ("upload", upload), ("download", download)) if v}
    return TransferFloor(median_ms=series["both"].best_median_ms if "both" in series else 1.0, **series, **more)


# The H200 run's block medians (ms): both missed the sum 0.6062 + 0.5895 = 1.1957 by 0.0011.
H200_UP = (0.7043, 0.6138, 0.6083, 0.6062)  # resolution 0.0021
H200_DOWN = (0.5916, 0.5908, 0.5903, 0.5895)  # resolution 0.0008


def test_wrap_records_the_self_check():
    from test_bench import COMMON, RELEASE
    from test_bench import _doc as driver_doc

    doc = driver_doc()
    doc["extra"].update(limits_extra(floor=1.6, upload=0.8, download=0.75))
    r = bench.wrap(RELEASE.name, "Vulkan", doc, reason=None, **COMMON)
    assert r.extra.transfer_floor.self_check.model_dump() == {
        "ok": False,
        "both_ms": 1.6,
        "max_alone_ms": 0.8,
        "sum_alone_ms": pytest.approx(1.55),
        "low_tolerance_ms": 0.0,
        "high_tolerance_ms": 0.0,
    }
    # the record as written reads back with its self-check
    assert record.parse(r.document()).extra.transfer_floor.self_check == r.extra.transfer_floor.self_check
    doc["extra"]["transfer_floor"].update(
        both=_blocks(1.2956, 1.2040, 1.1968, 1.1985),
        upload=_blocks(*H200_UP),
        download=_blocks(*H200_DOWN),
        median_ms=1.1968,
    )
    check = bench.wrap(RELEASE.name, "Vulkan", doc, reason=None, **COMMON).extra.transfer_floor.self_check
    assert check.ok and check.high_tolerance_ms == pytest.approx(0.0017 + 0.0021 + 0.0008)
    assert check.low_tolerance_ms == pytest.approx(0.0017 + 0.0021)  # both and the slower direction, upload


@pytest.mark.parametrize(
    "both, up, down, ok, strict",
    [
        # high bound: the H200 run, missed by 0.0011 within 0.0017 + 0.0021 + 0.0008 = 0.0046
        ((1.2956, 1.2040, 1.1968, 1.1985), H200_UP, H200_DOWN, True, False),
        # the same bound missed by 0.0111, more than the resolution
        ((1.2956, 1.2140, 1.2068, 1.2085), H200_UP, H200_DOWN, False, False),
        # one block gives no second value: no tolerance
        ((1.1968,), (0.6062,), (0.5895,), False, False),
        # low bound: both 0.6030 under the slower direction alone (0.6062) by 0.0032, more than
        # both's resolution 0.0010 + upload's 0.0021
        ((0.6030, 0.6040, 0.7, 0.7), H200_UP, H200_DOWN, False, False),
        # and by 0.0022, within 0.0010 + 0.0021 (the faster direction's resolution is not added)
        ((0.6040, 0.6050, 0.7, 0.7), H200_UP, H200_DOWN, True, False),
        # a noisy run: the resolutions (0.30 + 0.05 + 0.05) would allow 0.40 ms, the cap 1% of both
        ((1.30, 1.60, 1.62, 1.70), (0.60, 0.65, 0.7, 0.7), (0.59, 0.64, 0.7, 0.7), False, False),
        ((1.19, 1.49, 1.62, 1.70), (0.60, 0.65, 0.7, 0.7), (0.59, 0.64, 0.7, 0.7), True, True),
    ],
)
def test_floor_self_check_allows_the_runs_own_resolution(both, up, down, ok, strict):
    check = limits.floor_check(_floor(_blocks(*both), _blocks(*up), _blocks(*down)))
    assert check.high_ms == pytest.approx(min(up) + min(down)) and check.low_ms == max(min(up), min(down))
    assert (check.ok, check.strict) == (ok, strict)
    assert check.high_tolerance_ms <= 0.01 * check.both_ms and check.low_tolerance_ms <= 0.01 * check.both_ms
    text = str(check)
    assert text.startswith(
        "self-check ok within the run's resolution"
        if ok and not strict
        else "self-check ok:"
        if ok
        else "self-check FAILED"
    )


@pytest.mark.parametrize("probe, warned", [(1.5, False), (1.45, False), (1.42, True), (1.60, True)])
def test_floor_probe_disagreement_over_5_percent_is_noted(make_result, probe, warned):
    r = _result(make_result, floor=1.5, probe=probe)
    notes = _notes([r])
    assert any("sam3d_floor_probe" in n and n.startswith("WARNING") for n in notes) == warned
    line = next(n for n in notes if n.startswith("limits, "))
    assert f"sam3d_floor_probe {probe:.3f} ms ({1.5 / probe - 1:+.1%})" in line
    assert "queued mandatory waits 56 (50 dependency + 5 synchronous + 0 ring + 1 end)" in line
    assert "queued 3.40x floor, 1.36x limit 3.740 ms" in line  # 5.095 / 1.5, 5.095 / (1.5 + 56 x 0.04)


# --- accounting, compare, older results, plot -----------------------------------------------


def test_excluded_ms_beside_zerocopy_and_queued_rows(make_result):
    r = _result(make_result, writes=[0.5] * 19 + [9.0], reads=[0.25] * 20)
    cells = _cells([r])
    assert cells[("Vulkan", "zerocopy")]["excluded ms"] == "0.500 + 0.250"
    assert cells[("Vulkan", "queued")]["excluded ms"] == "0.500 + 0.250"
    assert cells[("Vulkan", "on")]["excluded ms"] == "" and cells[("Vulkan", "off")]["excluded ms"] == ""


def _series_of(ms):
    """A probed series whose median of all samples is ``ms`` and whose best block median is
    0.1 ms less."""
    return {
        "best_median_ms": ms - 0.1,
        "median_ms": ms,
        "block_medians_ms": [ms - 0.1, ms + 0.1],
        "samples_ms": [ms - 0.1, ms, ms + 0.1],
    }


def test_ggml_calls_without_the_core_are_shown_against_the_floor_and_the_rows(make_result):
    """The per-copy cost over the floor divides by the copies beyond the floor's 2, and each
    row's excess is its median minus its own calls (zerocopy median 6.095, queued 5.095)."""
    d = _doc(make_result, transfer_only=True, floor=1.4)
    d["extra"]["ggml_calls"] = {
        "copies": _series_of(2.9),
        "zerocopy": _series_of(5.0),
        "zerocopy_cold": _series_of(4.5),
        "queued": _series_of(4.6),
        "queued_cold": _series_of(4.2),
        "copies_per_image": 435,
    }
    notes = " ".join(_notes([d]))
    # copies against the floor: both the best block median (2.8 ms); the rows against medians
    assert "the profile's 435 copies, one synchronize 2.800 ms (+3.23 us per copy over the floor's 2)" in notes
    assert "zerocopy's calls 5.000 ms (cold 4.500), the row +1.095 ms" in notes
    assert "queued's calls 4.600 ms (cold 4.200), the row +0.495 ms" in notes
    d["extra"]["ggml_calls"].update(queued=None, queued_cold=None)  # a device without events
    assert "queued's calls" not in " ".join(_notes([d]))
    d["extra"]["ggml_calls"]["copies"] = {"best_median_ms": -1.0}
    with pytest.raises(record.ResultError, match="ggml_calls"):
        _rec(d)


def test_queued_calls_follow_the_event_waits_the_core_made(make_result):
    """The queued row is set against the calls the core made: without the event waits when its
    counters say it enqueued none (a backend of one in-order queue, docs/contract.md A6), with
    them otherwise; the three policies are listed side by side (medians of all samples)."""
    d = _doc(make_result, transfer_only=True, floor=1.4)
    d["extra"]["ggml_calls"] = {
        "copies": _series_of(2.9),
        "zerocopy": _series_of(5.0),
        "zerocopy_cold": _series_of(4.5),
        "queued": _series_of(4.6),
        "queued_cold": _series_of(4.2),
        "copies_per_image": 435,
        "queued_no_upload_wait": _series_of(4.4),
        "queued_synchronize": _series_of(4.9),
        "queued_two_backends": _series_of(4.3),
    }
    d["extra"]["modes"]["queued"]["event_waits_per_image"] = 0
    _rec(d)
    d["extra"]["ggml_calls"]["queued_levels"] = {"median_ms": "fast"}
    with pytest.raises(record.ResultError, match="ggml_calls"):
        _rec(d)  # optional, but a series when present
    d["extra"]["ggml_calls"]["queued_levels"] = None
    notes = " ".join(_notes([d]))
    assert "queued's calls 4.400 ms (without the event waits) (cold 4.200, with them), the row +0.695 ms" in notes
    assert (
        "queued's calls with the event wait before uploads 4.600, without it 4.400, "
        "with no event, every wait a synchronize 4.900, downloads on a second backend 4.300"
    ) in notes
    d["extra"]["modes"]["queued"]["event_waits_per_image"] = 49
    notes = " ".join(_notes([d]))
    assert "queued's calls 4.600 ms (cold 4.200), the row +0.495 ms" in notes


def test_the_cores_ggml_calls_per_image_are_listed_per_row(make_result):
    """extra.modes' per-image counts (the core's counters, rule 8) in the notes, for the rows
    that have all five; a row missing one is left out."""
    d = _doc(make_result)
    counts = {"on": (175, 82, 7, 0, 12), "queued": (320, 6, 82, 0, 130)}
    for mode, values in counts.items():
        d["extra"]["modes"][mode].update(
            zip(
                (
                    "ggml_copies_per_image",
                    "synchronizes_per_image",
                    "event_records_per_image",
                    "event_waits_per_image",
                    "event_synchronizes_per_image",
                ),
                values,
            )
        )
    notes = " ".join(_notes([d]))
    assert (
        "the core's GGML calls per image (copies/synchronizes/event records/event waits/event synchronizes): "
        "on 175/82/7/0/12, queued 320/6/82/0/130"
    ) in notes
    del d["extra"]["modes"]["on"]["event_waits_per_image"]
    notes = " ".join(_notes([d]))
    assert "on 175/" not in notes and "queued 320/6/82/0/130" in notes


@pytest.mark.parametrize(
    "duplex, hidden, fault",
    [
        (0.8, "100%", False),
        (0.85, "93%", False),
        (1.55, "0%", False),
        (1.2, "47%", False),
        (1.7, "-20%", False),
        (0.795, "101%", False),
        (0.7, "113%", True),
    ],
)
def test_duplex_says_how_much_of_the_faster_direction_was_hidden(make_result, duplex, hidden, fault):
    """Both directions on two backends at once against each alone (upload 0.8, download 0.75):
    (0.8 + 0.75 - duplex) / 0.75 of the faster direction hidden, negative when they contended;
    the GB/s are both directions' bytes over the duplex time; more than 1% below the slower
    direction alone (0.792 ms) is a measurement fault."""
    d = _doc(make_result, floor=1.5)
    d["extra"]["transfer_floor"]["duplex"] = {
        "best_median_ms": duplex,
        "block_medians_ms": [duplex],
        "median_ms": duplex,
        "n": 1,
        "samples_ms": [duplex],
    }
    notes = " ".join(_notes([d]))
    gbs = (33_193_136 + 32_403_596) / (duplex * 1e6)
    assert (
        f"duplex (upload and download on two backends at once) {duplex:.3f} ms = {gbs:.1f} GB/s, "
        f"{hidden} of the faster direction hidden" in notes
    )
    assert ("a measurement fault" in notes) == fault


def _duplex_floor(up, down, both, upload_bytes=1_000_000, download_bytes=580_000):
    return _floor(
        upload=_blocks(up),
        download=_blocks(down),
        duplex=Series(**_blocks(both)),
        upload_bytes=upload_bytes,
        download_bytes=download_bytes,
    )


def test_duplex_line_flags_a_fault_only_more_than_one_percent_below_the_slower_direction():
    """The whole duplex note, with and without the fault flag; exactly 1% below the slower
    direction alone is still physics, more than 1% is a measurement fault."""
    head = "duplex (upload and download on two backends at once) "
    assert (
        limits.duplex(_duplex_floor(0.8, 0.75, 0.8))
        == head + "0.800 ms = 2.0 GB/s, 100% of the faster direction hidden"
    )
    assert limits.duplex(_duplex_floor(0.8, 0.75, 0.79)) == (
        head + "0.790 ms = 2.0 GB/s, 101% of the faster direction hidden"
        " (**below the slower direction alone: a measurement fault**)"
    )
    # GB/s = bytes / (ms x 1e6): 2,250,001 bytes in 1 ms are 2.250001 GB/s, shown rounded up
    assert " 1.000 ms = 2.3 GB/s, " in limits.duplex(
        _duplex_floor(1.0, 0.75, 1.0, upload_bytes=2_000_001, download_bytes=250_000)
    )
    edge = 1.0 * (1 - limits.DUPLEX_TOLERANCE)
    assert "fault" not in limits.duplex(_duplex_floor(1.0, 0.5, edge))
    assert "fault" in limits.duplex(_duplex_floor(1.0, 0.5, edge * 0.999))


def test_duplex_of_zero_ms_times_renders(make_result):
    """The record takes 0 ms (times are >= 0): a direction of 0 ms has nothing to hide (0%),
    a duplex of 0 ms gives no GB/s figure (nothing measurable) and is below the slower direction,
    a fault; neither divides by zero."""
    assert "0% of the faster direction hidden" in limits.duplex(_duplex_floor(0.8, 0.0, 0.8))
    assert " 100%" not in limits.duplex(_duplex_floor(0.8, 0.0, 0.8))
    assert limits.duplex(_duplex_floor(0.8, 0.75, 0.0)).startswith(
        "duplex (upload and download on two backends at once) 0.000 ms, 207% of the faster direction hidden (**"
    )
    d = _doc(make_result, floor=1.5)
    d["extra"]["transfer_floor"]["download"] = _blocks(0.0)
    d["extra"]["transfer_floor"]["duplex"] = {
        "best_median_ms": 0.0,
        "block_medians_ms": [0.0],
        "median_ms": 0.0,
        "n": 1,
        "samples_ms": [0.0],
    }
    assert "duplex (upload and download on two backends at once) 0.000 ms, 0% of" in " ".join(_notes([d]))


def test_queued_policies_are_listed_side_by_side_only_when_several_were_timed(make_result):
    """The list of queued's call policies compares them: it needs two; with queued alone there
    is nothing to set it beside."""
    d = _doc(make_result, transfer_only=True, floor=1.4)
    d["extra"]["ggml_calls"] = {
        "copies": _series_of(2.9),
        "zerocopy": _series_of(5.0),
        "zerocopy_cold": _series_of(4.5),
        "queued": _series_of(4.6),
        "queued_cold": None,
        "copies_per_image": 435,
    }
    assert "queued's calls with" not in limits.ggml_calls(_rec(d))
    d["extra"]["ggml_calls"]["queued_synchronize"] = _series_of(4.9)
    assert (
        "queued's calls with the event wait before uploads 4.600, with no event, every wait a synchronize "
        "4.900 (medians)"
    ) in limits.ggml_calls(_rec(d))
    d["extra"]["ggml_calls"]["queued_two_backends"] = _series_of(4.3)
    assert (
        "with no event, every wait a synchronize 4.900, downloads on a second backend 4.300 (medians)"
        in limits.ggml_calls(_rec(d))
    )
    d["extra"]["ggml_calls"]["queued_levels"] = _series_of(4.1)
    assert "downloads on a second backend 4.300, graphs in dependency-level order 4.100 (medians)" in limits.ggml_calls(
        _rec(d)
    )


def test_compare_carries_x_floor_and_x_limit(make_result):
    """Each side's x floor and x limit: as numbers in the comparison's lines, and as cells of
    its Markdown table."""
    from test_report import parse

    a = _result(make_result, floor=1.5)
    b = _result(make_result, floor=2.0)
    c = compare.compare_results([a], [b])
    lines = {x.batching: x for x in c.lines}
    q = lines["queued"]
    assert (q.a.limit_ms, q.b.limit_ms, q.a.floor_ms, q.b.floor_ms) == pytest.approx((3.74, 4.24, 1.5, 2.0))
    assert (q.a.x_limit, q.b.x_limit) == pytest.approx((5.095 / 3.74, 5.095 / 4.24))
    assert (q.a.x_floor, q.b.x_floor) == pytest.approx((5.095 / 1.5, 5.095 / 2.0))
    assert (lines["off"].a.x_limit, lines["off"].a.limit_ms) == (None, None)
    _, _, md = parse(c.markdown())
    rows = {r["batching"]: r for r in md}
    assert rows["queued"]["A x limit"] == "1.36x (3.740)" and rows["queued"]["B x limit"] == "1.20x (4.240)"
    assert rows["queued"]["A x floor"] == "3.4x (1.500)" and rows["queued"]["B x floor"] == "2.5x (2.000)"
    assert rows["off"]["A x limit"] == ""


def test_schema_1_results_render_without_limits(tmp_path, make_result):
    old = _doc(make_result)
    old["schema"] = "sam3d-bench-result/1"
    old["extra"] = {
        "transfer_floor": {"median_ms": 2.0, "how": "async"},
        "modes": {"zerocopy": {"slot_fill_and_read_ms_excluded": [0.75] * 20}},
    }
    _write_json(tmp_path / "old.json", old)
    (loaded,) = record.read_many([tmp_path])
    assert loaded.migrated_from == "sam3d-bench-result/1"
    cells = _cells([loaded])
    assert cells[("Vulkan", "on")]["x floor"] == "5.0x (2.000)" and cells[("Vulkan", "on")]["x limit"] == ""
    assert cells[("Vulkan", "zerocopy")]["excluded ms"] == "0.750"
    assert any("sam3d-bench-result/1 result: its floor is the earlier measurement" in n for n in _notes([loaded]))


@pytest.mark.parametrize("schema", ["sam3d-bench-result/5", "sam3d-bench-result/4", "sam3d-bench-result/3"])
def test_a_version_3_self_check_needs_its_tolerances(make_result, schema):
    d = _doc(make_result)
    d["schema"] = schema
    d["extra"]["transfer_floor"]["self_check"] = {"ok": True, "both_ms": 1.5, "max_alone_ms": 0.8, "sum_alone_ms": 1.55}
    with pytest.raises(record.ResultError, match="low_tolerance_ms"):
        _rec(d)
    d["schema"] = "sam3d-bench-result/2"  # written before the tolerances existed
    assert _rec(d).extra.transfer_floor.self_check.low_tolerance_ms is None


def test_schema_2_results_render_their_limits_without_the_ggml_calls(tmp_path, make_result):
    """A version-2 file (no ggml_calls, a self-check without tolerance_ms) still renders with
    its limits; the self-check is recomputed with the tolerance from its block medians."""
    old = _doc(make_result, floor=1.56, upload=0.80, download=0.75)
    old.update(schema="sam3d-bench-result/2", backend="Vulkan (transfer-only)")  # version 2 named it so
    old["extra"]["transfer_only"] = True
    old["extra"]["transfer_floor"]["self_check"] = {
        "ok": False,
        "both_ms": 1.56,
        "max_alone_ms": 0.8,
        "sum_alone_ms": 1.55,
    }
    _write_json(tmp_path / "old.json", old)
    (loaded,) = record.read_many([tmp_path])
    assert (loaded.backend, loaded.transfer_only, loaded.migrated_from) == ("Vulkan", True, "sam3d-bench-result/2")
    cells = _cells([loaded])
    assert cells[("Vulkan", "queued")]["transfer-only"] == "yes"
    assert cells[("Vulkan", "queued")]["x limit"] == "1.59x (3.210)"  # 5.095 / (1.56 + 55 x 0.03)
    notes = " ".join(_notes([loaded]))
    assert "self-check FAILED" in notes and "GGML's calls alone" not in notes
    old["extra"]["ggml_calls"] = {"copies": {"best_median_ms": 2.0}}
    with pytest.raises(record.ResultError, match="ggml_calls"):
        _rec(old)  # checked when present, in version 2 as in 3


def test_plot_draws_every_backend_group(tmp_path, make_result):
    from sam3d.results import evidence

    rs = [_result(make_result), _rec(make_result(on_ms=ON, off_ms=OFF))]
    p = evidence.plot(rs, tmp_path / "t.png")
    assert p.stat().st_size > 10_000


def test_the_floor_probe_runs_beside_the_driver(tmp_path):
    """The runner's floor probe, for real on the CPU backend of the release build: the profile's
    bytes, and no floor on a device without a host buffer type."""
    from sam3d.core import variants
    from sam3d.running import driver

    release = variants.get("release")
    if not driver.path(release, driver.PROBE).is_file():
        pytest.skip("release is not built (python -m sam3d build release)")
    doc, why = driver.run_probe(
        release,
        "cpu",
        tmp_path / "p.log",
        upload_bytes=profile.UPLOAD_BYTES,
        download_bytes=profile.DOWNLOAD_BYTES,
        env={},
    )
    assert why is None and doc["schema"] == driver.PROBE_SCHEMA
    assert (doc["backend"], doc["upload_bytes"], doc["download_bytes"], doc["median_ms"]) == (
        "CPU",
        profile.UPLOAD_BYTES,
        profile.DOWNLOAD_BYTES,
        None,
    )
    assert "--upload-bytes 33193136 --download-bytes 32403596" in (tmp_path / "p.log").read_text()


# --- the rules at their edges (docs/benchmark.md, "Transfer floor, round trips and limits") ---


def test_ring_waits_only_over_the_bound_not_at_it():
    """ "ring waits only where the staging ring would hold more than 32 MiB": exactly 32 MiB in
    flight fits."""
    prof = {"graphs": [_graph(f"g{i}", [8 * MIB - 4096], [4096]) for i in range(4)]}  # 8 MiB each
    assert limits.mandatory_waits(prof, compute=True, alignment=4096).ring == 0
    prof["graphs"].append(_graph("g4", [4096], []))  # one slot more
    assert limits.mandatory_waits(prof, compute=True, alignment=4096).ring == 1


def test_slots_are_rounded_up_to_the_alignment():
    """Each slot counts rounded up to the staging alignment: three graphs of 10 MiB + 1 byte
    up and 1 byte down are 12 MiB each at a 1 MiB alignment (36 MiB: one ring wait), though
    their bytes (about 30 MiB) would fit."""
    prof = {"graphs": [_graph(f"g{i}", [10 * MIB + 1], [1]) for i in range(3)]}
    assert limits.mandatory_waits(prof, compute=False, alignment=MIB).ring == 1
    assert limits.mandatory_waits(prof, compute=False, alignment=1).ring == 0


def test_every_synchronous_graph_adds_its_blocking_steps():
    """Two synchronous graphs: each upload, download and (with compute) compute of both count."""
    prof = {"graphs": [_graph("a", [64, 64], [64], synchronous=True), _graph("b", [64], [64, 64], synchronous=True)]}
    assert limits.mandatory_waits(prof, compute=True, alignment=64).synchronous == (2 + 1 + 1) + (1 + 2 + 1)
    assert limits.mandatory_waits(prof, compute=False, alignment=64).synchronous == 3 + 3


def test_a_resolution_needs_two_block_medians():
    """The gap between the best and second-best block medians; two blocks are enough."""

    def series(*medians):
        return Series(best_median_ms=min(medians, default=0.0), block_medians_ms=list(medians), samples_ms=[])

    assert limits.resolution_ms(series(1.25, 1.0)) == 0.25
    assert limits.resolution_ms(series(1.5, 1.0, 1.125)) == 0.125
    assert limits.resolution_ms(series(1.0)) == 0.0
    assert limits.resolution_ms(series()) == 0.0


def test_a_failed_self_check_says_which_bound_by_how_much_and_the_tolerance():
    """Below [max(up, down), up + down] names the slower direction alone and the low tolerance;
    above it, the two in sequence and the high tolerance; the bounds follow."""
    below = limits.FloorCheck(both_ms=0.79, low_ms=0.80, high_ms=1.55, low_tolerance_ms=0.005, high_tolerance_ms=0.02)
    assert not below.ok
    assert str(below) == (
        "self-check FAILED: both 0.0100 ms below the slower direction alone "
        "(tolerance 0.0050 ms; 0.800 <= 0.790 <= 1.550 ms)"
    )
    above = limits.FloorCheck(both_ms=1.58, low_ms=0.80, high_ms=1.55, low_tolerance_ms=0.005, high_tolerance_ms=0.02)
    assert str(above) == (
        "self-check FAILED: both 0.0300 ms above the two alone in sequence "
        "(tolerance 0.0200 ms; 0.800 <= 1.580 <= 1.550 ms)"
    )
    within = limits.FloorCheck(both_ms=1.56, low_ms=0.80, high_ms=1.55, low_tolerance_ms=0.005, high_tolerance_ms=0.02)
    assert str(within).startswith("self-check ok within the run's resolution: both 0.0100 ms above")
    assert str(limits.FloorCheck(both_ms=1.4, low_ms=0.8, high_ms=1.55)) == "self-check ok: 0.800 <= 1.400 <= 1.550 ms"


def test_the_per_copy_cost_divides_by_the_copies_beyond_the_floors_two(make_result):
    """(copies - floor) / (n - 2): with 3 copies, the one beyond the floor's 2 carries it all;
    a mode without its row shows no row difference (zerocopy), one without its cold series no
    cold time (queued); the parts end "(medians)"."""
    d = _doc(make_result, transfer_only=True, floor=1.4)
    d["rows"] = [row for row in d["rows"] if row["batching"] != "zerocopy"]
    d["extra"]["ggml_calls"] = {
        "copies": _series_of(1.6),
        "zerocopy": _series_of(5.0),
        "zerocopy_cold": _series_of(4.5),
        "queued": _series_of(4.6),
        "queued_cold": None,
        "copies_per_image": 3,
    }
    assert limits.ggml_calls(_rec(d)) == (
        "GGML's calls alone (no core): the profile's 3 copies, one synchronize "
        "1.500 ms (+100.00 us per copy over the floor's 2), zerocopy's calls "
        "5.000 ms (cold 4.500), queued's calls 4.600 ms, the row +0.495 ms "
        "(medians)"
    )


def test_transfer_only_queued_waits_count_no_compute(make_result):
    """Transfer-only rows have no compute: the synchronous graph's blocking steps are its 3
    uploads and 1 download, so 50 dependency + 0 ring + 1 end + 4 = 55 made, 55 mandatory."""
    r = _result(make_result, transfer_only=True, dependency=50, ring=0, end=1)
    lim = limits.limit(r, _row(r, "queued"))
    assert (lim.waits_made, lim.round_trips, lim.excess) == (55, 55, 0)
    row = _cells([r])[("Vulkan", "queued")]
    assert (row["transfer-only"], row["waits"]) == ("yes", "55/55")


def test_the_limits_note_gives_every_same_run_term_and_each_rows_ratios(make_result):
    """The table's limits line (limits.describe): the floor per direction with its GB/s and
    self-check, the probe's distance, the round trips, the staging memcpy, the queued mandatory
    waits, each limited row's x floor and x limit, then the diagnostics outside every limit:
    the event-waited round trips, what each graph submitted back to back adds after the first,
    and the core's host ms per image (medians of the samples)."""
    d = _doc(make_result, floor=1.5, upload=0.8, download=0.75, probe=1.7)
    rts = d["extra"]["round_trips"]
    rts.update(
        download_event=_blocks(0.05), graph_event=_blocks(0.06), back_to_back=_blocks(0.35), back_to_back_graphs=8
    )
    line = limits.describe(_rec(d))
    up, down = 33_193_136, 32_403_596
    on, zc, q = 83 * 0.04 + 4.0, 1.5 + 83 * 0.04, 1.5 + 56 * 0.04
    medians = {"on": 10.095, "zerocopy": 6.095, "queued": 5.095}
    assert line == "; ".join(
        [
            f"floor 1.500 ms (upload alone 0.800 ms = {up / 0.8 / 1e6:.1f} GB/s, download alone 0.750 ms = "
            f"{down / 0.75 / 1e6:.1f} GB/s, both {(up + down) / 1.5 / 1e6:.1f} GB/s; "
            "self-check ok: 0.800 <= 1.500 <= 1.550 ms)",
            f"sam3d_floor_probe 1.700 ms ({1.5 / 1.7 - 1:+.1%})",
            "RT download 0.0300 ms, graph 0.0400 ms",
            f"staging memcpy 4.000 ms ({56_159_512 / 4.0 / 1e6:.1f} GB/s)",
            "queued mandatory waits 56 (50 dependency + 5 synchronous + 0 ring + 1 end)",
            f"on {medians['on'] / 1.5:.2f}x floor, {medians['on'] / on:.2f}x limit {on:.3f} ms",
            f"zerocopy {medians['zerocopy'] / 1.5:.2f}x floor, {medians['zerocopy'] / zc:.2f}x limit {zc:.3f} ms",
            f"queued {medians['queued'] / 1.5:.2f}x floor, {medians['queued'] / q:.2f}x limit {q:.3f} ms",
            "diagnostics (not in any limit): event-wait RT download 0.0500 ms, graph 0.0600 ms",
            f"8 graphs back to back 0.3500 ms ({(0.35 - 0.04) / 7:+.4f} ms per graph after the first)",
            "host ms per image in enqueue/waits/copies/synchronous path (the core's counters, medians): "
            + ", ".join(f"{m} 0.500/1.000/0.250/0.000" for m in ("on", "zerocopy", "queued")),
        ]
    )
    # one graph back to back says nothing per further graph; a CPU result (no floor) has no line
    rts["back_to_back_graphs"] = 1
    assert "back to back" not in limits.describe(_rec(d))
    assert limits.describe(_rec(make_result(on_ms=ON, off_ms=OFF, profile_sha=SHA))) is None


def test_the_tables_notes_state_the_rules(make_result):
    """The notes under the table say the rules of docs/benchmark.md ("Statistics", "Transfer
    floor, round trips and limits") and flag what is wrong, each in its own words."""
    r = _doc(make_result, floor=1.5, probe=1.7, writes=[0.5] * 20, reads=[0.25] * 20)
    r["extra"]["floor_probe_error"] = "probe | crashed"
    cpu = make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF, bytes_down=32_403_592)
    again = make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF, bytes_down=32_403_592)
    failed = make_result(variant="vulkan-ubsan", status="failed", reason="x | y", on_ms=None, off_ms=None)
    notes = _notes([r, cpu, again, failed])
    text = "\n".join(notes)
    for rule in (
        "p95 is nearest-rank (the ceil(0.95 n)-th smallest)",
        "speedup = the median of the paired per-image ratios off[i]/row[i] of the same run, with their "
        "IQR (25th-75th percentile, numpy linear)",
        "the SAM3D transfer profile's totals are 33,193,136 uploaded and 32,403,596 downloaded; * marks "
        "rows that differ from them.",
        "saved vs on: median(on) - median(row) per image, ms (share of on)",
        "x floor: median over the transfer floor measured in the same run",
        "the smallest of its block medians",
        "both directions within [max, sum] of each direction alone",
        "staged = G x RT + the slower of the floor and the staged copies at plain memcpy speed",
        "zerocopy = floor + G x RT; queued = floor + W x RT",
        "ring waits where the bytes in flight exceed 32 MiB",
        "**+N** marks waits beyond the model",
        "excluded ms: per-image host ms the zerocopy and queued rows do not time",
        "the producer's writes into slots + the consumer's reads out of them",
        f"WARNING: release Vulkan: the driver's floor 1.500 ms and sam3d_floor_probe's 1.700 ms differ by "
        f"{1.5 / 1.7 - 1:+.1%} (more than 5%).",
        "WARNING: release Vulkan: no floor cross-check: probe \\| crashed",
        "run: #i is the i-th result given; two results share a configuration and host.",
        "FAILED: vulkan-ubsan CPU Test CPU: x \\| y (no timings)",
    ):
        assert rule in text, rule
    assert notes[0].startswith("times: per-image wall ms; ") and notes[1].startswith("bytes per image; ")
    assert any(n.startswith("limits, release Vulkan: floor 1.500 ms") for n in notes)
    plain = "\n".join(_notes([make_result(on_ms=ON, off_ms=OFF)]))
    assert "32,403,596 downloaded." in plain and "* marks" not in plain and "run: #i" not in plain


def _drawn(monkeypatch, tmp_path, rs, title=None):
    """plot()'s figure, taken when it is saved; ``rs``: records or documents (parsed here)."""
    from matplotlib.figure import Figure

    from sam3d.results import evidence

    figs = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (figs.append(self), save(self, *a, **k))[1])
    assert evidence.plot(_recs(rs), tmp_path / "t.png", title=title) == tmp_path / "t.png"
    (fig,) = figs
    return fig


def test_plot_shows_each_rows_samples_floor_limit_and_median(monkeypatch, tmp_path, make_result):
    """timings.png (docs/benchmark.md, "Evidence"; sam3d/results/evidence.py): one panel per
    backend and configuration titled by them, its rows in table order, panels of different
    backends on ms axes of their own; each row's samples, its run's floor
    as a black bar and its mode's modelled limit as a red bar, labelled with its median and x
    limit; a failed row says FAILED and why; a panel whose times span more than 20x is
    logarithmic, else linear from 0."""
    import matplotlib.colors as mcolors

    vk = _result(make_result, floor=1.5)
    slow = make_result(variant="cpu-asan", on_ms=[x * 30 for x in ON], off_ms=OFF)
    cpu = make_result(on_ms=ON, off_ms=OFF)
    failed = make_result(
        variant="vulkan-ubsan",
        backend="Vulkan",
        device="Test GPU",
        status="failed",
        reason="r" * 150,
        on_ms=None,
        off_ms=None,
    )
    fig = _drawn(monkeypatch, tmp_path, [vk, slow, cpu, failed], title="run-7")
    assert fig._suptitle.get_text() == "run-7"
    panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
    assert [ax.get_title(loc="left") for ax in panels] == ["CPU", "Vulkan"]
    cpu_ax, vk_ax = panels
    assert cpu_ax.get_xlim() != vk_ax.get_xlim()
    assert [t.get_text() for t in cpu_ax.get_yticklabels()] == [  # the variant list's order
        "cpu-asan Test CPU off\nmedian 20.095",
        "cpu-asan Test CPU on\nmedian 302.850",
        "release Test CPU off\nmedian 20.095",
        "release Test CPU on\nmedian 10.095",
    ]
    labels = [t.get_text() for t in vk_ax.get_yticklabels()]
    assert labels == [
        "vulkan-ubsan Test GPU -",
        "release Test GPU off\nmedian 20.095",
        "release Test GPU on\nmedian 10.095, 1.38x limit",
        "release Test GPU zerocopy\nmedian 6.095, 1.26x limit",
        "release Test GPU queued\nmedian 5.095, 1.36x limit",
    ]
    assert vk_ax.get_ylim() == (4.5, -0.5)
    assert [t.get_text() for t in vk_ax.texts] == ["FAILED: " + "r" * 100]
    bars = [
        (round(seg[0][0], 3), round(seg[0][1], 2), mcolors.to_hex(c))
        for coll in vk_ax.collections
        if hasattr(coll, "get_segments")
        for seg, c in zip(coll.get_segments(), coll.get_colors())
    ]
    black, red = mcolors.to_hex("black"), mcolors.to_hex("tab:red")
    assert sorted(bars) == sorted(
        [(1.5, round(y - 0.4, 2), black) for y in range(1, 5)]
        + [
            (round(83 * 0.04 + 4.0, 3), 1.6, red),
            (round(1.5 + 83 * 0.04, 3), 2.6, red),
            (round(1.5 + 56 * 0.04, 3), 3.6, red),
        ]
    )
    dots = [coll for coll in vk_ax.collections if not hasattr(coll, "get_segments")]
    assert sorted(x for d in dots for x, _ in d.get_offsets()) == sorted(
        s.wall_ms for row in vk.rows for s in row.samples
    )
    assert all(abs(yv - round(yv)) <= 0.125 for d in dots for _, yv in d.get_offsets())
    assert vk_ax.get_xscale() == "linear" and vk_ax.get_xlim()[0] == 0  # 5.0 to 20.2 ms: under 20x
    assert cpu_ax.get_xscale() == "log"  # 10 to 305 ms: over 20x
    assert vk_ax.get_xlabel() == "wall time per image (ms)"
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert legend == ["transfer floor (same run)", "modelled limit of the mode"]
    assert _drawn(monkeypatch, tmp_path, [cpu])._suptitle.get_text() == "per-image wall time"


def test_plot_gives_each_configuration_of_a_backend_its_panel_on_the_backends_ms_axis(
    monkeypatch, tmp_path, make_result
):
    """Two configurations of one backend are two panels, titled by the backend and the
    configuration's words (the record's fields not at their default), sharing one ms axis
    (the same range and scale): it follows the times of both (here 1.0 to 20.2 ms, over 20x:
    logarithmic, though each panel alone spans under 20x), so the configurations compare at a
    glance; another backend keeps an axis of its own."""
    plain = _doc(make_result, floor=1.5)
    quick = [x / 10 for x in ON]  # 1.0 to 1.019 ms
    tuned = make_result(
        backend="Vulkan",
        device="Test GPU",
        on_ms=quick,
        off_ms=quick,
        profile_sha=SHA,
        layout="areas",
        order="levels",
        transfer_only=True,
    )
    cpu = make_result(on_ms=ON, off_ms=OFF)
    fig = _drawn(monkeypatch, tmp_path, [plain, tuned, cpu])
    fig.canvas.draw()
    panels = {ax.get_title(loc="left"): ax for ax in fig.axes if ax.get_title(loc="left")}
    assert sorted(panels) == ["CPU", "Vulkan", "Vulkan, areas, levels, transfer-only"]
    vk, vk_tuned, cpu_ax = panels["Vulkan"], panels["Vulkan, areas, levels, transfer-only"], panels["CPU"]
    assert [t.get_text().split("\n")[0] for t in vk_tuned.get_yticklabels()] == [
        "release Test GPU off",
        "release Test GPU on",
    ]
    assert len(vk.get_yticklabels()) == 4
    assert vk.get_xlim() == vk_tuned.get_xlim() and vk.get_xscale() == vk_tuned.get_xscale() == "log"
    low, high = vk.get_xlim()
    assert low <= 1.0 and high >= 20.19  # both panels' samples within the shared range
    assert cpu_ax.get_xlim() != vk.get_xlim() and cpu_ax.get_xscale() == "linear"
    # each configuration's samples in its own panel
    dots = {
        name: sorted(x for c in ax.collections if not hasattr(c, "get_segments") for x, _ in c.get_offsets())
        for name, ax in panels.items()
    }
    assert dots["Vulkan, areas, levels, transfer-only"] == sorted(quick + quick)
    assert min(dots["Vulkan"]) == 5.0
    # with one backend's times under 20x in all, the shared axis is linear from 0 in both panels
    tuned["rows"] = copy.deepcopy(plain["rows"][:2])
    fig = _drawn(monkeypatch, tmp_path, [plain, tuned])
    (a, b) = [ax for ax in fig.axes if ax.get_title(loc="left")]
    assert a.get_xlim() == b.get_xlim() and a.get_xlim()[0] == 0 and a.get_xlim()[1] >= 20.19
    assert a.get_xscale() == b.get_xscale() == "linear"


def test_plot_names_the_host_when_results_come_from_two(monkeypatch, tmp_path, make_result):
    rs = [make_result(on_ms=ON, off_ms=OFF, host="a"), make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF, host="b")]
    (ax,) = [ax for ax in _drawn(monkeypatch, tmp_path, rs).axes if ax.get_title(loc="left")]
    assert [t.get_text().split("\n")[0] for t in ax.get_yticklabels()] == [
        "cpu-asan Test CPU off b (Test CPU)",
        "cpu-asan Test CPU on b (Test CPU)",
        "release Test CPU off a (Test CPU)",
        "release Test CPU on a (Test CPU)",
    ]
    from sam3d.results import evidence

    with pytest.raises(evidence.ReportError, match="no results to plot"):
        evidence.plot([], tmp_path / "none.png")


def test_waits_unknown_to_the_driver_show_a_question_mark(make_result):
    """A queued row without the driver's wait counts: "?" made over the mandatory W, no excess."""
    d = _doc(make_result)
    del d["extra"]["modes"]["queued"]["ring_wait_points_per_image"]
    r = _rec(d)
    lim = limits.limit(r, _row(r, "queued"))
    assert (lim.waits_made, lim.excess) == (None, 0)
    assert _cells([r])[("Vulkan", "queued")]["waits"] == "?/56"


def test_no_self_check_or_probe_gap_without_their_measurements(make_result):
    """A floor without the three directions (none, or schema 1's median alone) has no
    self-check; a probe without a median, or a run without a floor, has no gap; with both the
    gap is floor / probe - 1."""
    assert limits.floor_check(None) is None and limits.floor_check(TransferFloor(median_ms=2.0)) is None
    assert limits.floor_check(_floor(_blocks(1.0), _blocks(1.0), _blocks(1.0))) is not None
    assert limits.floor_check(_floor(_blocks(1.0), _blocks(1.0), None)) is None
    d = _doc(make_result, floor=1.5, probe=1.2)
    assert limits.probe_gap(_rec(d)) == (1.2, pytest.approx(1.5 / 1.2 - 1.0))
    d["extra"]["floor_probe"]["median_ms"] = 0
    assert limits.probe_gap(_rec(d)) is None
    d["extra"]["floor_probe"]["median_ms"] = None  # the probe found no floor (a CPU device)
    assert limits.probe_gap(_rec(d)) is None
    cpu = make_result(on_ms=ON, off_ms=OFF, profile_sha=SHA)
    cpu["extra"] = {"floor_probe": {"schema": "sam3d-floor-probe/1", "median_ms": 1.0}}
    cpu = _rec(cpu)
    assert limits.probe_gap(cpu) is None and limits.floor_ms(cpu) is None


def test_plot_panels_grow_with_their_rows(monkeypatch, tmp_path, make_result):
    """The figure's layout: panels stacked in one column, each as tall as its rows plus one
    (its title and axis), the figure growing by the same height per row and per panel, laid
    out by matplotlib's constrained layout so labels fit."""

    def drawn(*backends):
        rs = [make_result(variant=v, backend=b, on_ms=ON, off_ms=OFF) for b, v in backends]
        return _drawn(monkeypatch, tmp_path, rs)

    two = drawn(("CPU", "release"))
    four = drawn(("CPU", "release"), ("CPU", "cpu-asan"))
    six = drawn(("CPU", "release"), ("CPU", "cpu-asan"), ("CPU", "vulkan-ubsan"))
    split = drawn(("CPU", "release"), ("Vulkan", "cpu-asan"))  # four rows in two panels
    h = {k: f.get_size_inches()[1] for k, f in (("2", two), ("4", four), ("6", six), ("2+2", split))}
    assert h["4"] - h["2"] == pytest.approx(h["6"] - h["4"]) and h["4"] > h["2"]
    assert h["2+2"] > h["4"]  # a panel adds height of its own
    assert len({f.get_size_inches()[0] for f in (two, four, six, split)}) == 1
    axes = [ax for ax in split.axes if ax.get_title(loc="left")]
    grid = axes[0].get_subplotspec().get_gridspec()
    assert (grid.nrows, grid.ncols, list(grid.get_height_ratios())) == (2, 1, [3, 3])
    assert (
        split.get_layout_engine() is not None and type(split.get_layout_engine()).__name__ == "ConstrainedLayoutEngine"
    )
    from sam3d.results import evidence

    with pytest.raises(evidence.ReportError, match="^no results to plot$"):
        evidence.plot([], tmp_path / "none.png")


def test_plot_rows_boxes_samples_and_failures_sit_on_their_row(monkeypatch, tmp_path, make_result):
    """Each row's box is horizontal at the row's height without fliers, its samples drawn over
    it, its device cut to 32 characters in the label; a failed row's FAILED text is red, at
    the panel's left edge; the figure holds the panels and nothing else."""
    import matplotlib.colors as mcolors

    long = "D" * 40
    ok = make_result(device=long, on_ms=ON + [100.0], off_ms=OFF + [1.0])  # outliers beyond 1.5 IQR
    ok["protocol"]["images"] = 21
    bad = make_result(variant="cpu-asan", device=long, status="failed", reason="oom", on_ms=None, off_ms=None)
    fig = _drawn(monkeypatch, tmp_path, [ok, bad])
    (ax,) = fig.axes
    assert [t.get_text().split("\n")[0] for t in ax.get_yticklabels()] == [
        "cpu-asan " + "D" * 32 + " -",
        "release " + "D" * 32 + " off",
        "release " + "D" * 32 + " on",
    ]
    (text,) = ax.texts
    assert text.get_position() == (0.01, 0) and text.get_transform() == ax.get_yaxis_transform()
    assert mcolors.to_hex(text.get_color()) == mcolors.to_hex("tab:red")
    # horizontal boxes: their two whiskers lie along the row, at its height
    flat = [ln.get_ydata()[0] for ln in ax.lines if len(set(ln.get_ydata())) == 1 and len(set(ln.get_xdata())) == 2]
    assert sorted(flat).count(1.0) >= 2 and sorted(flat).count(2.0) >= 2
    assert all(abs(y - round(y)) <= 0.3 + 1e-9 for ln in ax.lines for y in ln.get_ydata())
    assert not any(ln.get_marker() not in ("None", None, "") and len(ln.get_xdata()) for ln in ax.lines)  # no fliers
    dots = [c for c in ax.collections if not hasattr(c, "get_segments")]
    assert dots and all(d.get_zorder() > max(ln.get_zorder() for ln in ax.lines) for d in dots)


def test_plot_bars_span_their_row_over_the_samples_drawn_as_the_legend_keys_them(monkeypatch, tmp_path, make_result):
    """Each row's floor (black) and limit (red) bar is a vertical line across its own row,
    centred on it and short of the next (evidence.py: _BAR_HALF_HEIGHT), drawn over the
    samples; the legend keys them with lines of the bars' colours and widths."""
    import matplotlib.colors as mcolors

    from sam3d.results import evidence

    fig = _drawn(monkeypatch, tmp_path, [_result(make_result, floor=1.5)])
    (ax,) = fig.axes
    bars = [c for c in ax.collections if hasattr(c, "get_segments")]
    dots = [c for c in ax.collections if not hasattr(c, "get_segments")]
    segs = [(seg, mcolors.to_hex(c)) for b in bars for seg, c in zip(b.get_segments(), b.get_colors())]
    assert len(segs) == 4 + 3  # floors of on, zerocopy, queued, off; 3 limits
    for (x0, y0), (x1, y1) in (s for s, _ in segs):
        row = round((y0 + y1) / 2)
        assert x0 == x1 and (y0 + y1) / 2 == pytest.approx(row)
        assert y1 - y0 == pytest.approx(2 * evidence._BAR_HALF_HEIGHT) and 0 < y1 - y0 < 1
    assert min(b.get_zorder() for b in bars) > max(d.get_zorder() for d in dots)
    keys = {mcolors.to_hex(h.get_color()): h.get_linewidth() for lg in fig.legends for h in lg.legend_handles}
    black, red = mcolors.to_hex("black"), mcolors.to_hex("tab:red")
    assert set(keys) == {black, red}
    widths = {mcolors.to_hex(c): w for b in bars for c, w in zip(b.get_colors(), b.get_linewidths())}
    assert widths == keys


def test_plot_fixes_its_fonts_legend_place_and_resolution(monkeypatch, tmp_path, make_result):
    """timings.png's look is its own, whatever matplotlib's settings (evidence.py's constants):
    tick labels, panel titles, legend and FAILED text at their font sizes, the FAILED text
    centred on its row, the legend's two keys side by side above the panels, and the PNG
    _FIGURE_WIDTH_IN x _DPI pixels wide."""
    import matplotlib
    import matplotlib.text

    from sam3d.results import evidence

    failed = make_result(variant="cpu-asan", status="failed", reason="oom", on_ms=None, off_ms=None)
    with matplotlib.rc_context(
        {
            "font.size": 13,
            "axes.titlesize": 13,
            "legend.fontsize": 13,
            "legend.loc": "lower left",
            "figure.dpi": 50,
            "savefig.dpi": 50,
        }
    ):
        fig = _drawn(monkeypatch, tmp_path, [make_result(on_ms=ON, off_ms=OFF), failed])
        fig.canvas.draw()
    (ax,) = fig.axes
    assert {t.get_fontsize() for t in ax.get_yticklabels()} == {evidence._TICK_FONT}
    (title,) = [t for t in ax.findobj(matplotlib.text.Text) if t.get_text() == "CPU"]
    assert title.get_fontsize() == evidence._TITLE_FONT
    (text,) = ax.texts
    assert (text.get_fontsize(), text.get_verticalalignment()) == (evidence._FAILED_TEXT["fontsize"], "center")
    (legend,) = fig.legends
    assert {t.get_fontsize() for t in legend.get_texts()} == {evidence._LEGEND_FONT}
    a, b = (t.get_window_extent() for t in legend.get_texts())
    assert a.x1 < b.x0 and a.y0 == pytest.approx(b.y0)  # one row, two columns
    box = legend.get_window_extent()
    assert box.y0 >= ax.get_window_extent().y1 and box.x1 > fig.bbox.width / 2  # above the panel, right
    png = (tmp_path / "t.png").read_bytes()
    assert (
        png[:8] == b"\x89PNG\r\n\x1a\n"
        and int.from_bytes(png[16:20], "big") == evidence._FIGURE_WIDTH_IN * evidence._DPI
    )


def test_plot_spreads_each_rows_samples_in_turn_over_its_line(monkeypatch, tmp_path, make_result):
    """Sample k of a row is drawn at the row's line plus the k-th offset of evidence._JITTER
    (cycling), so equal times stay visible."""
    from sam3d.results import evidence

    fig = _drawn(monkeypatch, tmp_path, [make_result(on_ms=ON, off_ms=OFF)])
    (ax,) = fig.axes
    dots = [c for c in ax.collections if not hasattr(c, "get_segments")]
    assert [[round(yv, 9) for _, yv in d.get_offsets()] for d in dots] == [
        [round(row + evidence._JITTER[k % len(evidence._JITTER)], 9) for k in range(20)] for row in (0, 1)
    ]


@pytest.mark.parametrize("low, high, log", [(1.0, 20.0, False), (1.0, 20.5, True), (0.1, 3.0, True), (0.5, 5.0, False)])
def test_plot_goes_logarithmic_beyond_twenty_times(monkeypatch, tmp_path, make_result, low, high, log):
    """A panel is logarithmic when its times span more than 20x (exactly 20x stays linear, from
    0), sub-millisecond times included."""
    times = [low] + [high] * 19
    (ax,) = _drawn(monkeypatch, tmp_path, [make_result(on_ms=times, off_ms=times)]).axes
    assert ax.get_xscale() == ("log" if log else "linear")


def test_plot_creates_the_folders_it_writes_into(tmp_path, make_result):
    from sam3d.results import evidence

    p = evidence.plot([_rec(make_result(on_ms=ON, off_ms=OFF))], tmp_path / "new" / "deeper" / "t.png")
    assert p == tmp_path / "new" / "deeper" / "t.png" and p.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "both, up, down, ok",
    [
        # download the slower (0.70): the low tolerance is both's 0.002 + download's 0.001, not upload's 0.05
        ((0.6950, 0.6970), (0.60, 0.65), (0.700, 0.701), False),
        ((0.6975, 0.6995), (0.60, 0.65), (0.700, 0.701), True),
        # a tie (0.70 each way): the upload's resolution (0.05) is the slower direction's
        ((0.6950, 0.6970), (0.70, 0.75), (0.700, 0.701), True),
        # the cap is 1% of both, so it grows with the floor: 2 ms missed by 0.015 ms is within 0.01995
        ((1.995, 2.4), (1.0, 1.3), (0.98, 1.2), True),
    ],
)
def test_the_self_checks_low_tolerance_takes_the_slower_direction_and_the_cap_grows_with_the_floor(both, up, down, ok):
    check = limits.floor_check(_floor(_blocks(*both), _blocks(*up), _blocks(*down)))
    assert check.ok == ok


def test_back_to_back_graphs_are_shown_from_two_on(make_result):
    """(back to back - one graph) / (n - 1) per further graph, from n = 2; without the count, nothing."""
    d = _doc(make_result)
    rts = d["extra"]["round_trips"]
    rts.update(back_to_back=_blocks(0.10), back_to_back_graphs=2)
    assert f"2 graphs back to back 0.1000 ms ({0.10 - 0.04:+.4f} ms per graph after the first)" in limits.describe(
        _rec(d)
    )
    del rts["back_to_back_graphs"]
    assert "back to back" not in limits.describe(_rec(d))


def test_no_limit_without_a_row_and_no_memcpy_beyond_staged(make_result):
    """A limit belongs to a row; only the staged row counts the memcpy: zerocopy's limit with a
    floor under the memcpy is still floor + G x RT."""
    r = _result(make_result, floor=0.5, memcpy=4.0)
    assert limits.limit(r, None) is None
    zc = limits.limit(r, _row(r, "zerocopy"))
    assert zc.memcpy_ms == 0.0 and zc.ms == pytest.approx(0.5 + 83 * 0.04)


def test_a_limit_names_its_mode_and_terms(make_result):
    r = _result(make_result, transfer_only=True, floor=1.5, rt_download=0.03, memcpy=4.0)
    q = limits.limit(r, _row(r, "queued"))
    assert (q.mode, q.floor_ms, q.round_trip, q.round_trip_ms, q.round_trips, q.memcpy_ms) == (
        "queued",
        1.5,
        "download",
        0.03,
        55,
        0.0,
    )
    on = limits.limit(r, _row(r, "on"))
    assert (on.mode, on.round_trips, on.memcpy_ms, on.waits) == ("on", 83, 4.0, None)


def test_a_staging_memcpy_without_its_gb_per_s_shows_none(make_result):
    """gb_per_s is optional in the schema: without it the note gives the ms alone (it once
    said 0.0 GB/s)."""
    d = _doc(make_result)
    del d["extra"]["staging_memcpy"]["gb_per_s"]
    assert "; staging memcpy 4.000 ms; queued mandatory waits" in limits.describe(_rec(d))


# --- the table's columns and notes (table.build's docstring; docs/benchmark.md) --------------


def _header_and_aligns(md):
    """The header of table.md's pipe table and each column's alignment ("left"/"right")."""
    tab = [line for line in md.splitlines() if line.startswith("|")]
    header = [c.strip() for c in tab[0].strip("|").split("|")]
    rule = [c.strip() for c in tab[1].strip("|").split("|")]
    aligns = [
        "left"
        if c.startswith(":") and not c.endswith(":")
        else "right"
        if c.endswith(":") and not c.startswith(":")
        else c
        for c in rule
    ]
    return header, dict(zip(header, aligns))


def test_numbers_are_right_aligned_and_names_and_words_left(make_result):
    """Every column shown: two results (a Vulkan one with the floor, limits, extra modes and
    excluded ms; a CPU one of 19 images, other bytes and a fallback) differ in each but the
    variant and outputs; the numbers, from median ms to excluded ms, are right-aligned, the
    rest left."""
    r = _result(make_result, writes=[0.5] * 20, reads=[0.25] * 20)
    cpu = _rec(make_result(on_ms=ON[:19], off_ms=OFF[:19], bytes_down=32_403_592, fallbacks={"oversized": 2}))
    header, aligns = _header_and_aligns(table.render([r, cpu]))
    right = [
        "median ms",
        "p95 ms",
        "min-max ms",
        "n",
        "async up/down",
        "sync up/down",
        "bytes up/down",
        "speedup",
        "saved vs on ms",
        "x floor",
        "x limit",
        "waits",
        "excluded ms",
    ]
    left = ["backend", "device", "batching", "fallbacks", "profile"]
    assert sorted(header) == sorted(right + left)
    assert aligns == {**{h: "right" for h in right}, **{h: "left" for h in left}}


def test_a_rows_own_measurements_stay_in_the_table_when_every_row_reads_the_same(make_result):
    """A table of one queued row: the configuration and the counters move to the caption, its
    measurements stay, each its value: 5.095 / 1.5 x floor, 5.095 / (1.5 + 56 x 0.04) x limit,
    56 waits made of W = 56, writes + reads excluded."""
    from test_report import parse

    d = _doc(make_result, writes=[0.5] * 20, reads=[0.25] * 20)
    d["rows"] = [row for row in d["rows"] if row["batching"] == "queued"]
    caption, header, rows = parse(table.render([_rec(d)]))
    assert header == ["median ms", "p95 ms", "min-max ms", "x floor", "x limit", "waits", "excluded ms"]
    assert rows == [
        {
            "median ms": "5.095",
            "p95 ms": "5.180",
            "min-max ms": "5.000-5.190",
            "x floor": "3.4x (1.500)",
            "x limit": "1.36x (3.740)",
            "waits": "56/56",
            "excluded ms": "0.500 + 0.250",
        }
    ]
    assert (caption["batching"], caption["n"], caption["backend"]) == ("queued", "20", "Vulkan")


def test_the_notes_on_the_floor_limit_and_excluded_columns_say_the_model_in_full(make_result):
    """Each column's note, word for word as docs/benchmark.md ("Transfer floor, round trips and
    limits", "The modelled limit of each mode", "What each row times") states it: the floor's
    bytes, calls and sampling and its self-check; each mode's limit, G, W and RT and the waits
    cell; what the zerocopy and queued rows leave untimed."""
    notes = _notes([_result(make_result, writes=[0.5] * 20, reads=[0.25] * 20)])
    floor, limit, excluded = (
        next(n for n in notes if n.startswith(k)) for k in ("x floor:", "x limit:", "excluded ms:")
    )
    assert floor == (
        "x floor: median over the transfer floor measured in the same run (the profile's bytes as one "
        "async upload and one async download from the host buffer type's memory, offsets aligned, one "
        "synchronize; sampled after every image, the smallest of its block medians; ms in parentheses); "
        "its self-check: both directions within [max, sum] of each direction alone."
    )
    assert limit == (
        "x limit: median over the mode's modelled limit from the same run's measurements and the profile "
        "(ms in parentheses): staged = G x RT + the slower of the floor and the staged copies at plain "
        "memcpy speed on the session's copy threads (they overlap, piece by piece); zerocopy = floor + "
        "G x RT; queued = floor + W x RT; G = the profile's graphs, W = the mandatory waits (dependency "
        "points, the synchronous graph's blocking uploads, compute and downloads, ring waits where the "
        "bytes in flight exceed 32 MiB, the end); RT = the download round trip on transfer-only rows, "
        "the graph round trip with compute; floor = the serial transfer floor, or the same run's duplex "
        "floor (both directions at once on two backends) where the row's session used duplex (duplex calls "
        "> 0) and that floor is the smaller: \"duplex floor\", with the limit on the serial floor beside it. "
        "waits: made/mandatory per image, **+N** marks waits beyond "
        "the model. docs/benchmark.md, \"Transfer floor, round trips and limits\"."
    )
    assert excluded == (
        "excluded ms: per-image host ms the zerocopy and queued rows do not time (medians): the "
        "producer's writes into slots + the consumer's reads out of them; the staged row times its "
        "copies, the off row GGML's."
    )
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "benchmark.md").read_text()
    assert "\n## Transfer floor, round trips and limits\n" in doc  # the section the note names


def test_each_results_limits_line_comes_once_and_names_its_host_among_several(make_result):
    """One limits line per result, however many rows it has (a failed result has none), named
    by its configuration where it is not the default; with results from two hosts each line,
    and each warning about its floor, names the host."""
    a = _doc(make_result, floor=1.6, probe=1.2)  # self-check and probe both flagged
    b = _doc(make_result, floor=1.5)
    b["variant"] = "cpu-asan"
    failed = make_result(variant="vulkan-ubsan", status="failed", reason="x", on_ms=None, off_ms=None)
    notes = _notes([a, b, failed])
    assert [n.split(":")[0] for n in notes if n.startswith("limits, ")] == [
        "limits, cpu-asan Vulkan",
        "limits, release Vulkan",
    ]
    tuned = _doc(make_result, transfer_only=True, floor=1.5)
    tuned["layout"] = "areas"
    notes = _notes([a, tuned])
    assert [n.split(":")[0] for n in notes if n.startswith("limits, ")] == [
        "limits, release Vulkan areas transfer-only",
        "limits, release Vulkan",
    ]
    b["machine"]["hostname"] = "host-b"
    notes = _notes([a, b])
    assert [n.split(":")[0] for n in notes if n.startswith("limits, ")] == [
        "limits, cpu-asan Vulkan host-b (Test CPU)",
        "limits, release Vulkan host-a (Test CPU)",
    ]
    warned = [n for n in notes if n.startswith("WARNING: ")]
    assert len(warned) == 2 and all(n.startswith("WARNING: release Vulkan host-a (Test CPU): the ") for n in warned)


def test_a_failed_self_check_warns_why_the_floor_cannot_be_right(make_result):
    """A floor outside [the slower direction alone, both alone in sequence] is flagged with the
    bound's meaning (docs/benchmark.md: both must lie within [max(up, down), up + down])."""
    notes = _notes([_result(make_result, floor=1.6, upload=0.8, download=0.75)])
    (warning,) = [n for n in notes if n.startswith("WARNING: ")]
    assert warning.startswith("WARNING: release Vulkan: the transfer floor's self-check FAILED")
    assert warning.endswith(
        ": both directions together must take at least the slower direction alone and at most "
        "the two alone in sequence."
    )


def test_only_a_floor_is_cross_checked_and_only_a_schema_1_floor_is_the_earlier_measurement(make_result):
    """A probe error warns only where there is a floor to cross-check (not on a CPU result); the
    note on an older floor without limits is for schema-1 results with a floor: a schema-2
    result has its limits (test_schema_2_results_...), the current schema says nothing."""
    cpu = make_result(on_ms=ON, off_ms=OFF, profile_sha=SHA)
    cpu["extra"] = {"floor_probe_error": "no host buffer"}
    assert not any("cross-check" in n for n in _notes([cpu]))
    gpu = _doc(make_result)
    gpu["extra"]["floor_probe_error"] = "probe exit 1"
    assert "WARNING: release Vulkan: no floor cross-check: probe exit 1" in _notes([gpu])
    for schema in ("sam3d-bench-result/5", "sam3d-bench-result/4", "sam3d-bench-result/3", "sam3d-bench-result/2"):
        r = _doc(make_result)
        r["schema"] = schema
        assert not any("earlier measurement" in n or "no limits" in n for n in _notes([r])), schema
    old = _doc(make_result)
    old["schema"] = "sam3d-bench-result/1"
    old["extra"] = {"transfer_floor": {"median_ms": 2.0, "how": "async"}}
    (note,) = [n for n in _notes([old]) if "earlier measurement" in n]
    assert note.startswith("release Vulkan: a sam3d-bench-result/1 result: its floor is the earlier measurement")
    assert note.endswith(", and it has no limits.")  # record.py: version 1 renders without limits
    old["extra"] = {}
    assert not any("earlier measurement" in n for n in _notes([old]))


# --- the model's inputs where a result lacks some, and the plot's axes -----------------------


def test_the_queued_limit_rounds_slots_to_the_drivers_staging_alignment(make_result):
    """W counts ring waits with each slot rounded up to the staging alignment the driver
    reports for the queued row (extra.modes.queued.staging_alignment): the committed profile
    keeps about 13.6 MiB in flight, under the 32 MiB bound at any alignment up to 1 MiB (56
    waits), but its slots at a 2 MiB alignment overflow it (79). A result that does not
    record the alignment (or the queued row's facts at all) counts the bytes as they are."""
    d = _doc(make_result, floor=1.5, rt_graph=0.04)
    d["extra"]["modes"]["queued"]["staging_alignment"] = 2 * MIB
    r = _rec(d)
    lim = limits.limit(r, _row(r, "queued"))
    assert (lim.round_trips, lim.waits.ring, lim.ms) == (79, 30, pytest.approx(1.5 + 79 * 0.04))
    del d["extra"]["modes"]["queued"]["staging_alignment"]
    r = _rec(d)
    assert limits.limit(r, _row(r, "queued")).round_trips == 56
    del d["extra"]["modes"]["queued"]
    r = _rec(d)
    lim = limits.limit(r, _row(r, "queued"))
    assert (lim.round_trips, lim.waits_made, lim.ms) == (56, None, pytest.approx(1.5 + 56 * 0.04))


def test_no_self_check_or_duplex_without_each_direction_alone():
    """The self-check needs both directions together and each alone; the duplex line needs
    each alone to set the duplex against: a floor missing any one of them has neither."""
    up, down, both = _blocks(0.8), _blocks(0.75), _blocks(1.4)
    assert limits.floor_check(_floor(None, up, down)) is None
    assert limits.floor_check(_floor(both, None, down)) is None
    assert limits.floor_check(_floor(both, up, down)) is not None
    duplex = Series(**_blocks(1.0))
    assert limits.duplex(_floor(upload=up, duplex=duplex)) is None
    assert limits.duplex(_floor(download=down, duplex=duplex)) is None
    assert limits.duplex(_floor(upload=up, download=down, duplex=duplex)) is not None


def test_a_duplex_without_both_byte_counts_gives_no_rate():
    """The duplex GB/s are the floor's recorded bytes over the duplex time: a floor that does
    not record both byte counts gives no GB/s figure rather than a wrong one."""
    for up, down in ((None, None), (None, 580_000), (1_000_000, None)):
        line = limits.duplex(_duplex_floor(0.8, 0.75, 0.5, upload_bytes=up, download_bytes=down))
        assert line.startswith("duplex (upload and download on two backends at once) 0.500 ms, ") and "GB/s" not in line
    assert " 0.500 ms = 3.2 GB/s, " in limits.duplex(_duplex_floor(0.8, 0.75, 0.5))


def test_the_event_wait_round_trips_are_shown_only_as_a_pair(make_result):
    """The event-waited round trips (download and graph) are one diagnostic: a result that
    recorded only one of them shows neither, and its limits line is still written."""
    for only in ("download_event", "graph_event"):
        d = _doc(make_result)
        d["extra"]["round_trips"][only] = _blocks(0.05)
        line = limits.describe(_rec(d))
        assert line.startswith("floor 1.500 ms") and "event-wait" not in line, only


def test_a_failed_result_without_a_backend_has_a_panel_named_dash(monkeypatch, tmp_path, make_result):
    """A result that failed before it had a backend (a build failure) is drawn in a panel
    titled "-" (the table's word for what a failed result does not record), saying FAILED and
    why; the panels after it keep their own axes, fitted to their times."""
    build = make_result(
        status="failed", reason="build failed: conan exit 1", backend=None, device=None, on_ms=None, off_ms=None
    )
    fig = _drawn(monkeypatch, tmp_path, [build, make_result(on_ms=ON, off_ms=OFF)])
    panels = {ax.get_title(loc="left"): ax for ax in fig.axes if ax.get_title(loc="left")}
    assert list(panels) == ["-", "CPU"]
    assert [t.get_text() for t in panels["-"].texts] == ["FAILED: build failed: conan exit 1"]
    low, high = panels["CPU"].get_xlim()
    assert low == 0 and max(OFF) < high <= 1.1 * max(OFF)


@pytest.mark.parametrize("times", [ON + OFF, [1.0] * 10 + [30.0] * 10], ids=["linear", "log"])
def test_a_panels_axis_fits_its_times(monkeypatch, tmp_path, make_result, times):
    """The ms axis fits what the panel draws: linear from 0 to just past the slowest time, or
    on a logarithmic axis (over 20x) from just below the fastest to just past the slowest, so
    the times fill the panel."""
    (ax,) = _drawn(monkeypatch, tmp_path, [make_result(on_ms=times[:20], off_ms=times[20:] or times)]).axes
    low, high = ax.get_xlim()
    fast, slow = min(times), max(times)
    if ax.get_xscale() == "linear":
        assert low == 0 and slow < high <= 1.1 * slow
    else:
        assert fast / 1.5 <= low < fast and slow < high <= 1.5 * slow


def test_the_evidence_folder_is_made_with_the_folders_above_it(tmp_path, make_result):
    """write_evidence() makes the folder it is given, and those above it, as plot() and
    record.write() do for their files."""
    from sam3d.results import evidence

    d = evidence.write_evidence([_rec(make_result(on_ms=ON, off_ms=OFF))], tmp_path / "new" / "run-1")
    assert d == tmp_path / "new" / "run-1"
    assert (d / evidence.TABLE_FILE).is_file() and (d / evidence.PLOT_FILE).is_file()
    assert len(list((d / evidence.RESULTS_SUBDIR).glob("*.json"))) == 1


def test_a_run_without_a_measurement_a_term_needs_shows_no_such_term(make_result):
    """A run that did not record the staging memcpy has no staged limit (the other modes keep
    theirs), and one whose floor lacks a direction has no same-run terms line: the table
    renders, leaving out what was not measured."""
    d = _doc(make_result, floor=1.5)
    del d["extra"]["staging_memcpy"]
    (r,) = records(d)
    assert limits.limit(r, _row(r, "on")) is None and limits.limit(r, _row(r, "zerocopy")) is not None
    assert "x limit" in table.render([r])
    d = _doc(make_result, floor=1.5)
    del d["extra"]["transfer_floor"]["upload"]
    (r,) = records(d)
    assert limits.describe(r) is None and limits.floor_ms(r) == 1.5
    assert not any(n.startswith("limits, ") for n in table.build([r]).notes)
