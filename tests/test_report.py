"""sam3d.results: the record (read/parse/write, migration), the table, checks, plot, evidence and compare."""

import json
import re
from pathlib import Path

import pytest
from conftest import limits_extra, records

from sam3d import cli
from sam3d.results import checks, compare, evidence, record, table
from sam3d.results.record import ResultError
from sam3d.results.rows import ReportError

DATA = Path(__file__).parent / "data"

# Hand-made timings: off 100.0..101.9 ms, on 95.0..96.9 ms (20 images, run order shuffled).
OFF = [100.0 + 0.1 * i for i in (3, 17, 0, 9, 12, 5, 19, 1, 14, 7, 10, 2, 16, 8, 4, 18, 11, 6, 15, 13)]
ON = [x - 5.0 for x in OFF]


def render(results, title=None):
    """table.render of results: records, or result documents parsed right before (conftest records())."""
    return table.render([r if isinstance(r, record.Record) else records(r)[0] for r in results], title=title)


def save(path, doc):
    """A result document written as a result file (record.write of its record)."""
    return record.write(path, records(doc)[0])


def parse(md):
    """(caption items, header, rows as dicts) of the first pipe table in md."""
    lines = md.splitlines()
    caption = {}
    for line in lines:
        if line.startswith("all rows: "):
            for item in re.split(r", (?=[a-z][a-z /-]*=)", line[len("all rows: ") :]):
                k, v = item.split("=", 1)
                caption[k] = v
            break
    tab = [line for line in lines if line.startswith("|")]

    def split(line):
        return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]

    header = split(tab[0])
    return caption, header, [dict(zip(header, split(line))) for line in tab[2:]]


def by(rows, **kw):
    found = [r for r in rows if all(r.get(k) == v for k, v in kw.items())]
    assert len(found) == 1, (kw, rows)
    return found[0]


# --- the table ----------------------------------------------------------------------------


def test_result_files_of_every_version_render_their_configuration_as_columns():
    """The real result files of versions 1-3 (tests/data/README.md) read, each migrated from its
    version; in one table their backend is GGML's plain name and the configuration the old
    backend suffixes named ("CUDA areas levels (transfer-only)", "Vulkan transfer queue") is in
    the configuration columns; where every row has the same value it moves to the caption."""
    files = sorted(DATA.glob("cpu-asan-*.json")) + sorted(DATA.glob("v2-*.json")) + sorted(DATA.glob("v3-*.json"))
    assert [f.name for f in files] == [
        "cpu-asan-pair-a.json",
        "cpu-asan-pair-b.json",
        "cpu-asan-run1.json",
        "cpu-asan-run2.json",
        "v2-vulkan-areas-levels-transfer-only.json",
        "v3-cuda-areas-levels-transfer-only.json",
        "v3-lavapipe-areas-levels-transfer-only.json",
        "v3-vulkan-transfer-queue.json",
    ]
    rs = [record.read(f) for f in files]
    assert [r.migrated_from for r in rs] == ["sam3d-bench-result/1"] * 4 + ["sam3d-bench-result/2"] + [
        "sam3d-bench-result/3"
    ] * 3
    assert all(r.schema_ == record.SCHEMA and r.ok for r in rs)
    md = table.render(rs)
    caption, header, rows = parse(md)
    assert {"layout", "order", "transfer-only", "transfer queue"} <= set(header)
    assert not {"layout", "order", "transfer-only", "transfer queue", "backend"} & set(caption)
    assert {r["backend"] for r in rows} == {"CPU", "Vulkan", "CUDA"}  # no suffix left
    assert "(transfer-only)" not in md

    def config(**kw):
        found = [r for r in rows if all(r[k] == v for k, v in kw.items())]
        assert found, kw
        return {(r["layout"], r["order"], r["transfer-only"], r["transfer queue"]) for r in found}, [
            r["batching"] for r in found
        ]

    h100 = "NVIDIA H100 80GB HBM3"
    # v3-cuda-areas-levels-transfer-only: CUDA, layout areas, order levels, transfer-only
    assert config(variant="cuda-release", backend="CUDA", device=h100) == (
        {("areas", "levels", "yes", "no")},
        ["off", "on", "zerocopy", "queued"],
    )
    # v3-vulkan-transfer-queue: Vulkan, on the transfer queue, default layout and order, with compute
    assert config(variant="release", backend="Vulkan", device=h100, **{"transfer queue": "yes"}) == (
        {("scattered", "profile", "no", "yes")},
        ["off", "on", "zerocopy", "queued"],
    )
    # v2-vulkan-areas-levels-transfer-only: Vulkan, areas, levels, transfer-only (from its suffixes)
    assert config(variant="release", backend="Vulkan", device=h100, layout="areas") == (
        {("areas", "levels", "yes", "no")},
        ["off", "on", "zerocopy", "queued"],
    )
    assert config(variant="release", backend="Vulkan", device="llvmpipe (LLVM 15.0.6, 256 bits)") == (
        {("areas", "levels", "yes", "no")},
        ["off", "on", "zerocopy", "queued"],
    )
    assert config(variant="cpu-asan", backend="CPU") == ({("scattered", "profile", "no", "no")}, ["off", "on"] * 4)
    # the labels name the configuration after the device
    assert "- limits, cuda-release CUDA areas levels transfer-only vm (NVIDIA H100 80GB HBM3): floor 1.194 ms" in md
    # one configuration in every row: the caption, not a column
    same = table.render([rs[4], rs[5]])
    caption, header, rows = parse(same)
    assert (caption["layout"], caption["order"], caption["transfer-only"]) == ("areas", "levels", "yes")
    assert not {"layout", "order", "transfer-only", "transfer queue"} & set(header) and "transfer queue" not in caption
    assert {(r["variant"], r["backend"]) for r in rows} == {("release", "Vulkan"), ("cuda-release", "CUDA")}
    assert same.startswith("all rows: ") and "layout=areas, order=levels, transfer-only=yes" in same.splitlines()[0]


def test_single_run_layout(make_result):
    caption, header, rows = parse(render([make_result(on_ms=ON, off_ms=OFF)]))
    # identical in every row -> caption, not columns
    assert caption["variant"] == "release"
    assert caption["backend"] == "CPU"
    assert caption["n"] == "20"
    assert caption["fallbacks"] == "none"
    assert caption["outputs identical"] == "yes"
    assert caption["bytes up/down"] == "33,193,136 / 32,403,596"
    for moved in ("variant", "backend", "device", "n", "machine"):
        assert moved not in header
    assert header[:4] == ["batching", "median ms", "p95 ms", "min-max ms"]
    off, on = by(rows, batching="off"), by(rows, batching="on")
    # median of 100.0..101.9 = (100.9 + 101.0) / 2; p95 = 19th smallest = 101.8
    assert (off["median ms"], off["p95 ms"], off["min-max ms"]) == ("100.950", "101.800", "100.000-101.900")
    assert (on["median ms"], on["p95 ms"], on["min-max ms"]) == ("95.950", "96.800", "95.000-96.900")
    assert (on["async up/down"], on["sync up/down"]) == ("199/232", "3/1")
    assert (off["async up/down"], off["sync up/down"]) == ("0/0", "202/233")
    # speedup only on the on row: 100.95 / 95.95 = 1.0521; paired ratios 1.0516..1.0526
    assert off["speedup"] == ""
    assert on["speedup"] == "1.05x (IQR 1.05-1.05)"


def test_varying_columns_stay_in_table(make_result):
    rs = [
        make_result(variant="release", backend="CPU", device="Test CPU", on_ms=ON, off_ms=OFF),
        make_result(
            variant="release",
            backend="Vulkan",
            device="NVIDIA H200",
            on_ms=ON[:19],
            off_ms=OFF[:19],
            fallbacks={"oversized": 2},
        ),
    ]
    caption, header, rows = parse(render(rs))
    assert {"backend", "device", "n", "fallbacks"} <= set(header)
    assert "backend" not in caption and "n" not in caption
    assert caption["variant"] == "release"
    vk_on = by(rows, backend="Vulkan", batching="on")
    assert vk_on["n"] == "19"
    assert vk_on["fallbacks"] == "oversized=2"  # only nonzero reasons
    assert by(rows, backend="CPU", batching="on")["fallbacks"] == "none"


def test_row_order_follows_variant_list(make_result):
    rs = [make_result(variant="release", on_ms=ON, off_ms=OFF), make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF)]
    _, _, rows = parse(render(rs))
    assert [(r["variant"], r["batching"]) for r in rows] == [
        ("cpu-asan", "off"),
        ("cpu-asan", "on"),
        ("release", "off"),
        ("release", "on"),
    ]


def test_machine_column_only_for_several_hosts(make_result):
    one = [
        make_result(host="box1", on_ms=ON, off_ms=OFF),
        make_result(variant="cpu-asan", host="box1", on_ms=ON, off_ms=OFF),
    ]
    caption, header, _ = parse(render(one))
    assert "machine" not in header
    two = [
        make_result(host="box1", on_ms=ON, off_ms=OFF),
        make_result(variant="cpu-asan", host="box2", on_ms=ON, off_ms=OFF),
    ]
    caption, header, rows = parse(render(two))
    assert header[0] == "machine"
    assert by(rows, variant="cpu-asan", batching="on")["machine"] == "box2 (Test CPU)"
    assert by(rows, variant="release", batching="off")["machine"] == "box1 (Test CPU)"


def test_failed_result_keeps_its_row(make_result):
    rs = [
        make_result(on_ms=ON, off_ms=OFF),
        make_result(
            variant="vulkan-ubsan",
            backend="Vulkan",
            status="failed",
            reason="ctest exit 8 | UBSan",
            on_ms=None,
            off_ms=None,
        ),
    ]
    md = render(rs)
    _, header, rows = parse(md)
    failed = by(rows, variant="vulkan-ubsan")
    assert failed["median ms"] == "FAILED: ctest exit 8 | UBSan"
    assert failed["p95 ms"] == "" and failed["batching"] == "-"
    assert by(rows, variant="release", batching="on")["median ms"] == "95.950"
    assert "FAILED: vulkan-ubsan Vulkan" in md
    assert checks.problems(records(*rs)) == [
        "vulkan-ubsan Vulkan Test CPU host-a (Test CPU) failed: ctest exit 8 | UBSan"
    ]
    assert checks.problems(records(*rs[:1])) == []


def test_on_off_mismatch_is_shown(make_result):
    outs = [f"o{i}" for i in range(20)]
    bad = list(outs)
    bad[3] = "different"
    rs = [make_result(on_ms=ON, off_ms=OFF, outputs=outs, on_outputs=bad)]
    md = render(rs)
    caption, header, rows = parse(md)
    assert "outputs identical" in header  # never moved to the caption when it shows a mismatch
    assert by(rows, batching="on")["outputs identical"] == "**NO**: on/off differ (1/20 images)"
    assert by(rows, batching="off")["outputs identical"] == "**NO**: on/off differ (1/20 images)"  # both sides
    assert "WARNING: outputs differ between batching on and off: release CPU Test CPU on (1/20 images)" in md
    assert checks.problems(records(*rs))


def test_problems_name_the_host_and_the_result_at_fault(make_result):
    """problems() says where each mismatch was measured (the host with its CPU) and names a
    result that is not one by its 1-based position; across backends the odd rows are marked
    against the first row (table order: CPU, CUDA, Vulkan) of the most common outputs."""
    outs = [f"o{i}" for i in range(20)]
    bad = list(outs)
    bad[3] = "different"
    rs = [make_result(on_ms=ON, off_ms=OFF, outputs=outs, on_outputs=bad)]
    assert checks.problems(records(*rs)) == [
        "outputs differ between batching on and off: release CPU Test CPU on host-a (Test CPU) (1/20 images)"
    ]
    vk = [
        make_result(backend=b, device=d, host="host-b", on_ms=ON, off_ms=OFF, outputs=o)
        for b, d, o in (("Vulkan", "GPU", outs), ("CUDA", "GPU", outs), ("CPU", "Test CPU", bad))
    ]
    assert [p for p in checks.problems(records(*vk)) if "across" in p or "exact in F32" in p] == [
        f"outputs of release CPU Test CPU {m} host-b (Test CPU) differ from release CUDA GPU off host-b (Test CPU) "
        "(1/20 images; the replay with compute is exact in F32, so every backend must give the same bytes)"
        for m in ("off", "on")
    ]


def test_one_result_alone_is_compared_on_against_off(make_result):
    """Each row of a result is compared with the same result's off row (off with its first
    other row): with nothing else in its group, "yes" (the report document's true); a result of
    one row has nothing: "n/a" (null). diff() counts the images whose outputs differ or that
    one side lacks, over all images."""
    one = records(make_result(on_ms=ON, off_ms=OFF))
    assert {w["batching"]: w["outputs identical"] for w in table.build(one).rows} == {"off": "yes", "on": "yes"}
    assert {w.batching: w.outputs_identical for w in table.document(one).rows} == {"off": True, "on": True}
    lone = records(make_result(on_ms=None, off_ms=OFF))
    assert [w["outputs identical"] for w in table.build(lone).rows] == ["n/a"]
    assert [w.outputs_identical for w in table.document(lone).rows] == [None]
    assert checks.diff({0: "a", 1: "b"}, {1: "b", 2: "c"}) == (2, 3)
    assert checks.diff({0: "a", 1: "b"}, {0: "a", 1: "x"}) == (1, 2)


def test_output_checks_name_hosts_only_when_asked_and_join_two_findings(make_result):
    """Two results of one backend, device and profile: the odd one is marked against the other
    (a group of two is compared too); a row both unlike its off row and unlike the group shows
    both findings; hosts are named only when asked (with_host), also across backends."""
    from sam3d.results.rows import rows as table_rows

    outs = [f"o{i}" for i in range(20)]
    odd = ["x"] * 20
    a = make_result(on_ms=None, off_ms=OFF, outputs=outs, host="h1")
    b = make_result(variant="cpu-asan", on_ms=None, off_ms=OFF, outputs=odd, host="h2")
    cells, warnings = checks.output_checks(table_rows(records(a, b)))
    # a tie (one against one): the first in table order (cpu-asan) is the reference
    assert sorted(cells.values()) == ["**NO**: differs from cpu-asan CPU Test CPU off (20/20 images)", "yes"]
    assert warnings == [
        "outputs of release CPU Test CPU off differ from cpu-asan CPU Test CPU off (20/20 images; "
        "same backend, device and profile)"
    ]
    hosted, warned = checks.output_checks(table_rows(records(a, b)), True)
    assert "**NO**: differs from cpu-asan CPU Test CPU off h2 (Test CPU) (20/20 images)" in hosted.values()
    assert warned == [
        "outputs of release CPU Test CPU off h1 (Test CPU) differ from cpu-asan CPU Test CPU off h2 "
        "(Test CPU) (20/20 images; same backend, device and profile)"
    ]
    both = make_result(variant="vulkan-ubsan", on_ms=ON, off_ms=OFF, outputs=outs, on_outputs=odd)
    ref = make_result(on_ms=ON, off_ms=OFF, outputs=outs)
    again = make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF, outputs=outs)
    cells, _ = checks.output_checks(table_rows(records(both, ref, again)))
    assert (
        "**NO**: on/off differ (20/20 images); **NO**: differs from cpu-asan CPU Test CPU off (20/20 images)"
        in cells.values()
    )
    vk = make_result(backend="Vulkan", device="GPU", on_ms=None, off_ms=OFF, outputs=odd, host="h1")
    notes, warned = checks.across_backends(table_rows(records(a, vk, dict(a, variant="cpu-asan"))))
    assert notes == [] and warned == [
        "outputs of release Vulkan GPU off differ from cpu-asan CPU Test CPU off (20/20 images; the replay with "
        "compute is exact in F32, so every backend must give the same bytes)"
    ]


def test_across_backends_notes_each_replay_group_with_several_backends(make_result):
    """One note per replay group (transfer-only, with compute: the record's transfer_only) whose
    rows span backends; a group of one backend says nothing and does not stop the others."""
    from sam3d.results.rows import rows as table_rows

    t = make_result(variant="cpu-asan", backend="CPU", transfer_only=True, on_ms=ON, off_ms=OFF)
    c1 = make_result(on_ms=ON, off_ms=OFF)
    c2 = make_result(backend="Vulkan", device="GPU", on_ms=ON, off_ms=OFF)
    notes, warned = checks.across_backends(table_rows(records(t, c1, c2)))
    assert warned == [] and notes == [
        "outputs across backends (replay with compute): the 4 rows of CPU, Vulkan are "
        "identical image by image (the replay's arithmetic is exact in F32)"
    ]


def test_a_cell_is_one_line_with_its_pipes_escaped():
    from sam3d.results.rows import cell

    assert cell("a \n  b|c\n") == "a b\\|c "


def test_cross_variant_mismatch_marks_the_odd_one(make_result):
    outs = [f"o{i}" for i in range(20)]
    odd = ["x"] * 20
    rs = [
        make_result(variant="release", on_ms=ON, off_ms=OFF, outputs=outs),
        make_result(variant="vulkan-ubsan", on_ms=ON, off_ms=OFF, outputs=outs),
        make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF, outputs=odd),
    ]
    _, header, rows = parse(render(rs))
    assert by(rows, variant="release", batching="on")["outputs identical"] == "yes"
    assert by(rows, variant="vulkan-ubsan", batching="off")["outputs identical"] == "yes"
    cell = by(rows, variant="cpu-asan", batching="on")["outputs identical"]
    assert cell.startswith("**NO**: differs from ") and cell.endswith("(20/20 images)")
    # a different device is different arithmetic: not compared
    rs2 = [
        make_result(variant="release", on_ms=ON, off_ms=OFF, outputs=outs),
        make_result(variant="cpu-asan", device="Other CPU", on_ms=ON, off_ms=OFF, outputs=odd),
    ]
    caption, header, _ = parse(render(rs2))
    assert caption.get("outputs identical") == "yes"


def test_outputs_are_compared_across_backends_per_replay(make_result):
    """Transfer-only results (the record's transfer_only) are their own replay: compared across
    backends with each other, not with the replay with compute; the table shows the plain
    backend and a transfer-only column, and the labels name the configuration after the device."""
    outs = [f"o{i}" for i in range(20)]
    pattern = [f"t{i}" for i in range(20)]  # transfer-only: its own replay, other bytes
    rs = [
        make_result(backend="CPU", on_ms=ON, off_ms=OFF, outputs=outs),
        make_result(backend="Vulkan", device="GPU", on_ms=ON, off_ms=OFF, outputs=outs),
        make_result(backend="Vulkan", transfer_only=True, device="GPU", on_ms=ON, off_ms=OFF, outputs=pattern),
        make_result(backend="CUDA", transfer_only=True, device="GPU", on_ms=ON, off_ms=OFF, outputs=pattern),
    ]
    md = render(rs)
    assert "outputs across backends (replay with compute): the 4 rows of CPU, Vulkan are identical" in md
    assert "outputs across backends (transfer-only replay): the 4 rows of CUDA, Vulkan are identical" in md
    assert checks.problems(records(*rs)) == []
    caption, header, rows = parse(md)
    assert "transfer-only" in header and "transfer-only" not in caption  # yes in some rows, no in others
    assert {r["backend"] for r in rows} == {"CPU", "Vulkan", "CUDA"}  # no suffix
    assert [(r["backend"], r["device"], r["transfer-only"]) for r in rows if r["batching"] == "off"] == [
        ("CPU", "Test CPU", "no"),
        ("CUDA", "GPU", "yes"),
        ("Vulkan", "GPU", "no"),
        ("Vulkan", "GPU", "yes"),
    ]
    odd = list(pattern)
    odd[7] = "wrong"  # CUDA's on and off agree with each other, not with Vulkan's
    rs[3] = make_result(backend="CUDA", transfer_only=True, device="GPU", on_ms=ON, off_ms=OFF, outputs=odd)
    rs.append(
        make_result(
            variant="vulkan-ubsan",
            backend="Vulkan",
            transfer_only=True,
            device="GPU",
            on_ms=ON,
            off_ms=OFF,
            outputs=pattern,
        )
    )
    md = render(rs)
    assert "outputs across backends (transfer-only replay)" not in md
    assert "outputs across backends (replay with compute): the 4 rows" in md
    want = [
        f"outputs of release CUDA GPU transfer-only {m} differ from vulkan-ubsan Vulkan GPU transfer-only "
        "off (1/20 images; the transfer-only replay is exact in F32, so every backend must give the same bytes)"
        for m in ("off", "on")
    ]
    assert [f"WARNING: {w}" in md for w in want] == [True, True]
    assert len([p for p in checks.problems(records(*rs)) if "CUDA GPU transfer-only" in p and "differ from" in p]) == 2


def test_off_only_result_has_no_speedup_and_na_outputs(make_result):
    caption, header, rows = parse(render([make_result(on_ms=None, off_ms=OFF)]))
    assert "speedup" not in header and "speedup" not in caption
    assert caption["outputs identical"] == "n/a"


def test_bytes_differing_from_profile_are_marked(make_result):
    md = render([make_result(on_ms=ON, off_ms=OFF, bytes_up=1000, bytes_down=2000)])
    caption, _, _ = parse(md)
    assert caption["bytes up/down"] == "1,000 / 2,000 *"
    assert "33,193,136 uploaded and 32,403,596 downloaded; * marks rows" in md


def test_duplicate_configuration_gets_a_run_column(make_result):
    rs = [make_result(on_ms=ON, off_ms=OFF), make_result(on_ms=[x + 1 for x in ON], off_ms=OFF)]
    _, header, rows = parse(render(rs))
    assert "run" in header
    assert [r["run"] for r in rows] == ["#1", "#1", "#2", "#2"]


def test_render_refuses_nothing_and_invalid():
    with pytest.raises(ReportError, match="no results"):
        render([])
    with pytest.raises(ResultError, match="result #1: field 'schema': missing"):
        record.parse({"variant": "release"}, "result #1")  # render takes records: a document is parsed first


# --- result files ---------------------------------------------------------------------------


def test_write_and_load_roundtrip(tmp_path, make_result):
    r = records(make_result(on_ms=ON, off_ms=OFF))[0]
    p = record.write(tmp_path / "sub" / "r.json", r)
    assert record.read(p) == r
    assert [f.name for f in (tmp_path / "sub").iterdir()] == ["r.json"]  # no temporary left behind


def test_write_refuses_invalid_and_keeps_old_file(tmp_path, make_result):
    """A document that does not fit the record never becomes one (parse() names the field), so
    nothing is written: the old file stays as it was, and no temporary is left behind."""
    p = save(tmp_path / "r.json", make_result(on_ms=ON, off_ms=OFF))
    before = p.read_text()
    bad = make_result(on_ms=ON, off_ms=OFF)
    del bad["rows"][1]["samples"][4]["wall_ms"]
    with pytest.raises(ResultError, match=r"r\.json: field 'rows\[1\]\.samples\[4\]\.wall_ms': Field required"):
        record.write(p, record.parse(bad, str(p)))
    assert p.read_text() == before
    assert [f.name for f in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r.pop("backend"), "field 'backend': an ok result needs it"),
        (
            lambda r: r.update(schema="sam3d-bench-result/0"),
            "field 'schema': is 'sam3d-bench-result/0': written by schema version 0; this reader reads "
            "version 5 or 4 or 3 or 2 or 1 (sam3d-bench-result/5 is written): re-run the benchmark (or "
            "device-import) with this checkout, or read the file with a checkout of its version (the result record",
        ),
        (lambda r: r.update(schema="other"), "field 'schema': is 'other': expected 'sam3d-bench-result/5'"),
        (
            lambda r: r["extra"].update(round_trips={"download": {"best_median_ms": 0.03}}),
            "field 'extra.round_trips.download.block_medians_ms': Field required",
        ),
        (lambda r: r.update(status="maybe"), "field 'status': Input should be 'ok' or 'failed'"),
        (
            lambda r: r["profile"].update(sha256="xyz"),
            "field 'profile.sha256': String should match pattern '^[0-9a-f]{64}$'",
        ),
        (
            lambda r: r["rows"][0]["samples"][2].update(wall_ms="fast"),
            "field 'rows[0].samples[2].wall_ms': Input should be a valid number",
        ),
        (
            lambda r: r["rows"][0]["samples"][2].update(wall_ms=-1.0),
            "field 'rows[0].samples[2].wall_ms': Input should be greater than 0",
        ),
        (
            lambda r: r["rows"][0]["samples"][2].update(wall_ms=float("nan")),
            "NaN is not JSON (a time must be a finite number)",
        ),
        (
            lambda r: r["rows"][0]["samples"][3].update(image=2),
            "field 'rows[0].samples[3].image': image 2 appears twice",
        ),
        (lambda r: r["rows"][0]["samples"].pop(), "field 'rows[0].samples': has 19 entries but protocol.images is 20"),
        (lambda r: r["rows"][1].update(batching="off"), "field 'rows[1].batching': 'off' appears twice"),
        (
            lambda r: r["rows"][1]["counters"]["fallbacks"].pop("oversized"),
            "field 'rows[1].counters.fallbacks.oversized': Field required",
        ),
        (
            lambda r: r["rows"][1]["counters"].update(async_uploads=True),
            "field 'rows[1].counters.async_uploads': Input should be a valid integer",
        ),
        (lambda r: r.update(rows=[]), "field 'rows': an ok result needs at least one row"),
        (lambda r: r["machine"].update(hostname=""), "field 'machine.hostname': String should match pattern"),
    ],
)
def test_load_names_file_and_field(tmp_path, make_result, mutate, message):
    r = make_result(on_ms=ON, off_ms=OFF)
    mutate(r)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(r))
    with pytest.raises(ResultError) as e:
        record.read(p)
    assert str(e.value).startswith(f"{p}: ")
    assert message in str(e.value)
    assert str(e.value).endswith("(the result record sam3d-bench-result/5: docs/results.md)")


def test_the_schema_file_is_a_valid_json_schema_and_packaged():
    """result.schema.json is the record's JSON Schema (generated), of the version written; the
    versions read are that one and the three migrated."""
    import jsonschema

    written = json.loads(record.SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(written)
    assert written == record.json_schema()
    assert written["properties"]["schema"]["const"] == record.SCHEMA
    assert written["$id"] == record.SCHEMA == record.READABLE[0] == "sam3d-bench-result/5"
    assert record.READABLE == tuple(f"sam3d-bench-result/{v}" for v in (5, 4, 3, 2, 1))
    assert record.BATCHING == ("off", "on", "zerocopy", "queued")
    pyproject = (record.SCHEMA_FILE.parents[2] / "pyproject.toml").read_text()
    assert '"result.schema.json"' in pyproject


def test_failed_result_needs_a_reason(tmp_path, make_result):
    r = make_result(status="failed", reason=None, on_ms=None, off_ms=None)
    with pytest.raises(ResultError, match="^x.json: field 'reason': a failed result needs a non-empty reason"):
        record.parse(r, "x.json")
    minimal = {"schema": record.SCHEMA, "variant": "release", "status": "failed", "reason": "conan install failed"}
    got = record.parse(minimal)
    assert got.document() == minimal and not got.ok and got.rows == []


def test_load_bad_json(tmp_path):
    """A file that mentions the schema and is not JSON: read() names it, and a folder holding it
    is an error, not skipped."""
    p = tmp_path / "t.json"
    p.write_text('{"schema": "sam3d-bench-result/1", "rows": [')
    with pytest.raises(ResultError, match=r"t\.json: not valid JSON"):
        record.read(p)
    with pytest.raises(ResultError, match=r"t\.json: not valid JSON"):
        record.read_many([tmp_path])


def test_load_many_merges_files_and_folders(tmp_path, make_result):
    a = make_result(variant="release", on_ms=ON, off_ms=OFF)
    b = make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF)
    c = make_result(variant="vulkan-ubsan", backend="Vulkan", on_ms=ON, off_ms=OFF)
    save(tmp_path / "ci" / "job1" / "deep" / "release.json", a)
    save(tmp_path / "ci" / "job2" / "cpu-asan.json", b)
    (tmp_path / "ci" / "job2" / "compile_commands.json").write_text('[{"file": "x.c"}]')
    (tmp_path / "ci" / "job2" / "notes.txt").write_text("not json")
    single = save(tmp_path / "elsewhere" / "vk.json", c)
    got = record.read_many([tmp_path / "ci", single])
    assert [r.variant for r in got] == ["release", "cpu-asan", "vulkan-ubsan"]  # folders sorted by path
    assert got == records(a, b, c)
    _, header, rows = parse(render(got))
    assert {r["variant"] for r in rows} == {"release", "cpu-asan", "vulkan-ubsan"}
    assert len(rows) == 6


def test_load_many_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        ResultError,
        match=r"^.*empty: folder holds no sam3d-bench-result result files "
        r"\(\*\.json, searched recursively\)$",
    ):
        record.read_many([tmp_path / "empty"])
    with pytest.raises(ResultError, match="no such file or folder"):
        record.read_many([tmp_path / "missing"])


def test_result_files_and_loading_edges(tmp_path, make_result):
    """result_files(): every *.json whose schema is sam3d-bench-result/N of any version, sorted
    by path, skipping other and unreadable files and JSON that only mentions the schema; a file
    that mentions it and does not decode is kept, for read() to name; read() and parse() name
    what is wrong."""
    r = make_result(on_ms=ON, off_ms=OFF)
    save(tmp_path / "b" / "copy.json", r)
    save(tmp_path / "a" / "orig.json", r)
    old = dict(r, schema="sam3d-bench-result/9")
    (tmp_path / "a" / "z-old.json").write_text(json.dumps(old))
    (tmp_path / "a" / "list.json").write_text('["sam3d-bench-result/3"]')
    (tmp_path / "a" / "binary.json").write_bytes(b"\xff\xfe no result")
    (tmp_path / "a" / "dir.json").mkdir()
    assert [p.relative_to(tmp_path).as_posix() for p in record.result_files(tmp_path)] == [
        "a/orig.json",
        "a/z-old.json",
        "b/copy.json",
    ]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "binary.json").write_bytes(b"\xff\xfe sam3d-bench-result/3")  # a result that does not decode
    assert record.result_files(tmp_path / "c") == [tmp_path / "c" / "binary.json"]
    with pytest.raises(ResultError, match=r"c/binary\.json: not UTF-8 text \(byte 0: "):
        record.read_many([tmp_path / "c"])
    assert record.read_many([tmp_path / "a" / "orig.json", tmp_path / "b"]) == records(r, r)  # each file read
    with pytest.raises(
        ResultError,
        match=r"z-old\.json: field 'schema': is 'sam3d-bench-result/9': written by "
        r"schema version 9; this reader reads version 5 or 4 or 3 or 2 or 1",
    ):
        record.read_many([tmp_path / "a"])
    with pytest.raises(ResultError, match=r"missing\.json: no such result file$"):
        record.read(tmp_path / "missing.json")
    with pytest.raises(ResultError, match=r"^x\.json: expected a JSON object, got list$"):
        record.parse([], "x.json")
    with pytest.raises(ResultError, match=r"^<result>: field 'schema': missing"):
        record.parse({})


def test_result_files_skip_the_records_own_json_schema():
    """The package's result.schema.json names the version as its $id, not as a result's
    "schema": not a result file, so a folder holding it reads as holding none."""
    assert record.result_files(record.SCHEMA_FILE.parent) == []
    with pytest.raises(ResultError, match="folder holds no sam3d-bench-result result files"):
        record.read_many([record.SCHEMA_FILE.parent])


def test_result_files_are_read_as_utf8_whatever_the_locale(monkeypatch, tmp_path, make_result):
    """A result file is JSON, so UTF-8 (RFC 8259): read as such under a Latin-1 locale too
    (simulated: the encoding Python takes when none is given made Latin-1). Its non-ASCII
    text reads back unchanged, and result_files() still skips a file that is not UTF-8."""
    import io

    text_encoding = io.text_encoding
    monkeypatch.setattr(io, "text_encoding", lambda enc, *a: "latin-1" if enc is None else text_encoding(enc, *a))
    r = make_result(device="Radeon\u2122 Graphics", on_ms=ON, off_ms=OFF)
    (tmp_path / "r.json").write_bytes(json.dumps(r, ensure_ascii=False).encode("utf-8"))
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe no result")
    assert record.read(tmp_path / "r.json").device == "Radeon\u2122 Graphics"
    assert record.result_files(tmp_path) == [tmp_path / "r.json"]
    assert record.read_many([tmp_path]) == records(r)


def test_a_result_file_that_cannot_be_read_is_named_with_the_systems_reason():
    """read() of a file the system cannot read: ResultError names the file and the reason, once."""
    import errno
    import os

    p = Path("/proc/self/mem")  # a file whose read at offset 0 fails with EIO
    if not p.is_file():
        pytest.skip("no /proc/self/mem")
    with pytest.raises(ResultError) as e:
        record.read(p)
    assert str(e.value) == f"{p}: cannot be read: {os.strerror(errno.EIO)}"


def test_a_truncated_result_file_says_what_truncation_means(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('{"schema": "sam3d-bench-result/3", "rows": [')  # 44 characters: line 1 ends at column 45
    with pytest.raises(ResultError) as e:
        record.read(p)
    assert str(e.value) == (
        f"{p}: not valid JSON (line 1, column 45: Expecting value); "
        "a truncated file means the run that wrote it did not finish "
        "(the result record sam3d-bench-result/5: docs/results.md)"
    )


def test_an_ok_results_null_field_is_refused_a_failed_ones_is_absent(make_result):
    """An ok result needs every fact: a null one is refused, naming the field; a failed
    result's null facts count as absent."""
    r = make_result(on_ms=ON, off_ms=OFF)
    r["device"] = None
    with pytest.raises(ResultError, match=r"^x\.json: field 'device': an ok result needs it"):
        record.parse(r, "x.json")
    failed = make_result(status="failed", reason="driver crashed", on_ms=None, off_ms=None)
    failed["device"] = None
    got = record.parse(failed)
    assert got.device is None and got.key() == ("release", "CPU", "-")


def test_write_keeps_one_field_per_line_indented_one_space_per_level(tmp_path, make_result):
    """write(): the file is the record's JSON, one field per line indented one space per level
    (results diff line by line), ending in a newline."""
    r = make_result(on_ms=ON, off_ms=OFF)
    lines = save(tmp_path / "r.json", r).read_text().split("\n")
    assert lines[0] == "{" and lines[1] == ' "schema": "sam3d-bench-result/5",' and lines[-2:] == ["}", ""]
    assert ' "machine": {' in lines and '  "hostname": "host-a",' in lines
    assert json.loads("\n".join(lines)) == r


def test_a_machine_is_named_by_hostname_and_gpu_or_cpu(make_result):
    """Hostnames repeat across machines: the first GPU's name (nvidia-smi's first field) or else
    the CPU goes beside it; without a machine there is no host. A result without a backend or
    device (a failed build) is keyed "-"; a version-3 result's backend suffix is its
    configuration, read into the record's field."""
    r = make_result(off_ms=OFF)
    assert records(r)[0].host() == "host-a (Test CPU)"
    r["machine"]["gpu"] = "NVIDIA H200, 580.1, 5\nNVIDIA H100, 580.1, 5"
    assert records(r)[0].host() == "host-a (NVIDIA H200)"
    r["machine"].update(gpu="", cpu="")
    assert records(r)[0].host() == "host-a"
    assert records(r)[0].key() == ("release", "CPU", "Test CPU")
    failed = record.parse({"schema": record.SCHEMA, "variant": "release", "status": "failed", "reason": "x"})
    assert failed.key() == ("release", "-", "-") and failed.profile_sha256() is None and failed.host() is None
    old = record.parse(
        {
            "schema": "sam3d-bench-result/3",
            "variant": "release",
            "status": "failed",
            "reason": "x",
            "backend": "CUDA areas",
        }
    )
    assert (old.key(), old.layout, old.migrated_from) == (("release", "CUDA", "-"), "areas", "sam3d-bench-result/3")


# --- evidence -------------------------------------------------------------------------------


def test_write_evidence_accepted(tmp_path, make_result):
    rs = [make_result(on_ms=ON, off_ms=OFF), make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF)]
    (tmp_path / "run1").mkdir()
    (tmp_path / "run1" / "build.log").write_text("kept")
    d = evidence.write_evidence(records(*rs), tmp_path / "run1")
    assert d == tmp_path / "run1"
    assert not (d / "NOT-ACCEPTED").exists()
    assert (d / "build.log").read_text() == "kept"
    assert (d / "timings.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (d / "table.md").read_text()
    assert table.startswith("# run1\n")
    assert "NOT ACCEPTED" not in table
    assert render(rs) in table
    assert sorted(record.read_many([d / "results"]), key=lambda r: r.variant) == sorted(
        records(*rs), key=lambda r: r.variant
    )
    assert sorted(p.name for p in d.iterdir()) == ["build.log", "results", "table.md", "timings.png"]


def test_write_evidence_failed_run_not_accepted(tmp_path, make_result):
    rs = [
        make_result(on_ms=ON, off_ms=OFF),
        make_result(
            variant="vulkan-ubsan", status="failed", reason="build failed: glslc missing", on_ms=None, off_ms=None
        ),
    ]
    d = evidence.write_evidence(records(*rs), tmp_path / "run2")
    marker = (d / "NOT-ACCEPTED").read_text()
    assert "build failed: glslc missing" in marker
    table = (d / "table.md").read_text()
    assert "**NOT ACCEPTED** as evidence" in table
    assert "FAILED: build failed: glslc missing" in table
    assert len(list((d / "results").glob("*.json"))) == 2
    assert (d / "timings.png").is_file()


def test_write_evidence_caller_reason(tmp_path, make_result):
    rs = records(make_result(on_ms=ON, off_ms=OFF))
    with pytest.raises(
        ReportError,
        match=r"^write_evidence\(accepted=False\) needs a reason; it goes into "
        r"NOT-ACCEPTED$",
    ):
        evidence.write_evidence(rs, tmp_path / "r", accepted=False)
    d = evidence.write_evidence(rs, tmp_path / "r", accepted=False, reason="GGML_VK_PERF_LOGGER assert (SIGABRT)")
    assert (d / "NOT-ACCEPTED").read_text() == "GGML_VK_PERF_LOGGER assert (SIGABRT)\n"


def test_write_evidence_page_files_and_reasons(tmp_path, make_result, monkeypatch):
    """The evidence folder (sam3d/results/evidence.py): table.md opens with the run's name and,
    when not accepted, the reasons as a list (the caller's first, each one Markdown cell);
    NOT-ACCEPTED holds them one a line; each result is written as
    NN-variant-backend-[configuration words-]host.json (1-based, what a file name cannot hold as
    "_", "unknown" without a host); other files are left alone; no results give "no results"."""
    titles = []
    monkeypatch.setattr(evidence, "plot", lambda rs, path, title=None: titles.append((path.name, title)))
    a = make_result(on_ms=ON, off_ms=OFF, host="host a")
    b = make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF)
    b["machine"] = None
    b["status"], b["reason"], b["rows"] = "failed", "build | failed", []
    c = make_result(backend="CUDA", device="GPU", layout="areas", transfer_only=True, on_ms=ON, off_ms=OFF)
    d = tmp_path / "run3"
    (d / "results").mkdir(parents=True)
    (d / "results" / "notes.txt").write_text("kept")
    evidence.write_evidence(records(a, b, c), d, accepted=False, reason="  GPU lost  ")
    reasons = ["GPU lost", "cpu-asan CPU Test CPU - failed: build | failed"]
    assert (d / "NOT-ACCEPTED").read_text() == "\n".join(reasons) + "\n"
    table = (d / "table.md").read_text()
    assert table.startswith(
        "\n".join(
            [
                "# run3",
                "",
                "**NOT ACCEPTED** as evidence:",
                "",
                "- GPU lost",
                "- cpu-asan CPU Test CPU - failed: build \\| failed",
                "",
                "",
            ]
        )
    )
    assert table.endswith(render([a, b, c]))
    assert sorted(p.name for p in (d / "results").iterdir()) == [
        "01-release-CPU-host_a_Test_CPU_.json",
        "02-cpu-asan-CPU-unknown.json",
        "03-release-CUDA-areas-transfer-only-host-a_Test_CPU_.json",
        "notes.txt",
    ]
    assert record.read(d / "results" / "03-release-CUDA-areas-transfer-only-host-a_Test_CPU_.json") == records(c)[0]
    assert titles == [("timings.png", "run3")]  # the picture is titled by its run (drawn in test_limits.py)
    empty = evidence.write_evidence([], tmp_path / "none")
    assert (empty / "table.md").read_text() == "# none\n\nno results\n"


# --- compare --------------------------------------------------------------------------------


def test_compare_flags_a_real_change(tmp_path, make_result):
    save(tmp_path / "a" / "r.json", make_result(on_ms=ON, off_ms=OFF))
    save(tmp_path / "b" / "r.json", make_result(on_ms=[x * 0.9 for x in ON], off_ms=[x + 0.05 for x in OFF]))
    md = compare.compare(tmp_path / "a", tmp_path / "b").markdown()
    _, header, rows = parse(md)
    on, off = by(rows, batching="on"), by(rows, batching="off")
    assert on["change"] == "**faster**"
    assert on["B/A"] == "0.900"
    assert off["change"] == "no change"  # +0.05 ms: +0.05 %, far below the 5 % minimum effect
    assert "1 of 2 rows changed" in md


def test_compare_one_sided_and_failed_rows(tmp_path, make_result):
    save(tmp_path / "a" / "r.json", make_result(on_ms=ON, off_ms=OFF))
    save(tmp_path / "a" / "x.json", make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF))
    save(tmp_path / "b" / "r.json", make_result(status="failed", reason="timeout", on_ms=None, off_ms=None))
    _, _, rows = parse(compare.compare(tmp_path / "a", tmp_path / "b").markdown())
    assert by(rows, variant="cpu-asan", batching="on")["change"] == "only in A"
    for mode in ("on", "off"):  # the failed B result stands against both of A's rows
        row = by(rows, variant="release", batching=mode)
        assert (row["B median ms"], row["change"]) == ("FAILED: timeout", "not comparable (failed)")
    assert by(rows, variant="release", batching="on")["A median ms"] == "95.950"
    assert [r for r in rows if r["batching"] == "-"] == []


def test_compare_refuses_different_profiles(tmp_path, make_result, capsys):
    save(tmp_path / "a" / "r.json", make_result(on_ms=ON, off_ms=OFF, profile_sha="a" * 64))
    save(tmp_path / "b" / "r.json", make_result(on_ms=ON, off_ms=OFF, profile_sha="b" * 64))
    with pytest.raises(compare.ProfileMismatch) as e:
        compare.compare(tmp_path / "a", tmp_path / "b")
    assert "a" * 64 in str(e.value) and "b" * 64 in str(e.value)
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert "refusing to compare runs on different profiles" in capsys.readouterr().err
    assert cli.main(["compare", "--force", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "WARNING: forced: different profiles" in capsys.readouterr().out


def test_compare_refuses_different_machines(tmp_path, make_result, capsys):
    save(tmp_path / "a" / "r.json", make_result(on_ms=ON, off_ms=OFF, host="host-a"))
    save(tmp_path / "b" / "r.json", make_result(on_ms=ON, off_ms=OFF, host="host-b"))
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "refusing to compare runs of different machines" in err and "host-b (Test CPU)" in err
    assert cli.main(["compare", "--force", "--format", "json", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["forced"][0].startswith("different machines") and len(doc["rows"]) == 2


def test_compare_markdown_and_json_name_both_sides_and_the_settings(tmp_path, make_result):
    """The comparison (docs/getting-started.md, `sam3d compare A B`): each side named by the
    folder given, the forced differences first, the caption, the table, then the rule for
    slower/faster with the test's alpha and minimum effect; --format json holds the same rows
    (no "verdict" column in the table: it is the change cell), numbers as numbers and no
    Markdown, and the count changed."""
    save(tmp_path / "a" / "r.json", make_result(on_ms=ON, off_ms=OFF, host="host-a"))
    save(tmp_path / "b" / "r.json", make_result(on_ms=[x * 0.9 for x in ON], off_ms=OFF, host="host-b"))
    c = compare.compare(tmp_path / "a", tmp_path / "b", force=True, min_effect=0.08, alpha=0.01)
    lines = c.markdown().splitlines()
    forced = (
        f"WARNING: forced: different machines: A ({tmp_path / 'a'}) ran on host-a (Test CPU), "
        f"B ({tmp_path / 'b'}) on host-b (Test CPU)"
    )
    assert lines[:5] == [f"A: {tmp_path / 'a'}", f"B: {tmp_path / 'b'}", "", forced, ""]
    assert lines[5].startswith("all rows: variant=release, backend=CPU, device=Test CPU") and lines[6] == ""
    assert lines[7].startswith("| batching ") and "verdict" not in lines[7]
    assert lines[11:] == [
        "",
        "- B/A = median(B)/median(A) of per-image wall ms; p = two-sided Mann-Whitney U test "
        "(scipy.stats.mannwhitneyu) of the two runs' samples; a row is slower or faster when p < 0.01 and B/A "
        "differs from 1 by at least 8%.",
        "- x floor, x limit: each side's median over its own run's transfer floor and its mode's modelled limit "
        "(ms in parentheses; docs/benchmark.md, \"Transfer floor, round trips and limits\").",
        "- 1 of 2 rows changed.",
    ]
    doc = json.loads(c.json())
    assert c.json() == json.dumps(doc, indent=1) + "\n"  # one key a line, as the result files
    assert doc["schema"] == "sam3d-comparison/1" and "schema_" not in doc  # docs/results.md
    assert {k: doc[k] for k in ("a", "b", "min_effect", "alpha", "forced", "changed")} == {
        "a": str(tmp_path / "a"),
        "b": str(tmp_path / "b"),
        "min_effect": 0.08,
        "alpha": 0.01,
        "forced": [forced.removeprefix("WARNING: forced: ")],
        "changed": 1,
    }
    assert [(r["batching"], r["verdict"]) for r in doc["rows"]] == [("off", "no change"), ("on", "faster")]
    on = doc["rows"][1]
    assert (on["variant"], on["backend"], on["device"]) == ("release", "CPU", "Test CPU")
    assert on["configuration"] == {
        "layout": "scattered",
        "order": "profile",
        "transfer_only": False,
        "transfer_queue": False,
        "duplex": "off",
    }
    assert on["a"]["median_ms"] == pytest.approx(95.95) and on["b"]["median_ms"] == pytest.approx(86.355)
    assert on["ratio"] == pytest.approx(0.9) and isinstance(on["p"], float) and on["p"] < 0.01
    assert on["a"]["failed"] is None and on["a"]["x_floor"] is None  # CPU: no floor
    assert "**" not in c.json()
    unforced = compare.compare(tmp_path / "a", tmp_path / "a").markdown().splitlines()
    assert unforced[:3] == [f"A: {tmp_path / 'a'}", f"B: {tmp_path / 'a'}", ""] and unforced[3].startswith("all rows: ")


# --- CLI ------------------------------------------------------------------------------------


def test_cli_report(tmp_path, make_result, capsys):
    save(tmp_path / "in" / "a.json", make_result(on_ms=ON, off_ms=OFF))
    save(tmp_path / "other.json", make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF))
    rc = cli.main(
        [
            "report",
            "--name",
            "merged",
            "--out",
            str(tmp_path / "diag"),
            str(tmp_path / "in"),
            str(tmp_path / "other.json"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    _, _, rows = parse(out)
    assert {r["variant"] for r in rows} == {"release", "cpu-asan"}
    d = tmp_path / "diag" / "merged"
    assert (d / "table.md").is_file() and (d / "timings.png").is_file()
    assert not (d / "NOT-ACCEPTED").exists()
    assert f"evidence in {d}" in out


def test_cli_report_failed_and_bad_input(tmp_path, make_result, capsys):
    save(tmp_path / "in" / "f.json", make_result(status="failed", reason="boom", on_ms=None, off_ms=None))
    assert cli.main(["report", "--name", "f", "--out", str(tmp_path), str(tmp_path / "in")]) == 1
    assert (tmp_path / "f" / "NOT-ACCEPTED").read_text().strip().endswith("boom")
    assert cli.main(["report", "--out", str(tmp_path), str(tmp_path / "nope")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_floor_column_is_the_median_over_the_same_runs_floor(make_result):
    r = make_result(on_ms=ON, off_ms=OFF)
    r["extra"]["transfer_floor"] = limits_extra(floor=5.0, upload=3.0, download=2.5)["transfer_floor"]
    caption, header, rows = parse(render([r, make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF)]))
    assert "x floor" in header
    rel = [row for row in rows if row.get("variant") == "release"]
    asan = [row for row in rows if row.get("variant") == "cpu-asan"]
    # off median 100.95 / 5.0 = 20.19 -> "20.2x"; on 95.95 / 5.0 = 19.19 -> "19.2x"
    assert by(rel, batching="off")["x floor"] == "20.2x (5.000)"
    assert by(rel, batching="on")["x floor"] == "19.2x (5.000)"
    assert all(row["x floor"] == "" for row in asan)


def test_no_floor_column_without_a_floor(make_result):
    _, header, _ = parse(render([make_result(on_ms=ON, off_ms=OFF)]))
    assert "x floor" not in header


def test_extra_modes_get_rows_speedups_and_output_checks(make_result):
    import copy

    r = make_result(on_ms=ON, off_ms=OFF)
    zc = copy.deepcopy(next(row for row in r["rows"] if row["batching"] == "on"))
    zc["batching"] = "zerocopy"
    for s in zc["samples"]:
        s["wall_ms"] -= 45.0  # 50.95 median vs off 100.95 -> 1.98x
    zc["samples"][3]["outputs_sha256"] = "corrupt"
    r["rows"].append(zc)
    out = render([r])
    _, header, rows = parse(out)
    z = by(rows, batching="zerocopy")
    assert z["median ms"] == "50.950"
    assert z["speedup"].startswith("1.98x")
    assert "**NO**" in z["outputs identical"] and "1/20" in z["outputs identical"]
    assert by(rows, batching="on")["outputs identical"] == "yes"
    assert [row["batching"] for row in rows] == ["off", "on", "zerocopy"]
    assert "outputs differ between batching zerocopy and off" in out
    # saved vs on: on median 95.95 - 50.95 = 45.000 ms, 45 / 95.95 = 47%; only extra-mode rows
    assert z["saved vs on ms"] == "45.000 (47%)"
    assert by(rows, batching="on")["saved vs on ms"] == "" and by(rows, batching="off")["saved vs on ms"] == ""


def test_table_cells_of_fallbacks_profile_and_pairs(make_result):
    """fallbacks: the nonzero reasons, the record's first in its order, then unknown ones by
    name, else "none" (the report document: the counters as recorded); profile: its sha256's
    first 12 digits and version, "-" without one; speedup: the paired per-image ratios of the
    images both rows timed."""
    import copy

    r = make_result(
        on_ms=[10.0] * 20, off_ms=[20.0] * 20, fallbacks={"oversized": 2, "no_async_caps": 1, "zeta": 3, "alpha": 0}
    )
    off = next(row for row in r["rows"] if row["batching"] == "off")
    for smp in off["samples"]:
        smp["image"] += 1  # off timed images 1..20, on 0..19: 19 pairs
    off["samples"][-1]["wall_ms"] = 1000.0  # image 20: no pair, so no effect
    rows = {w["batching"]: w for w in table.build(records(r)).rows}
    assert rows["on"]["fallbacks"] == "no_async_caps=1, oversized=2, zeta=3"
    assert rows["off"]["fallbacks"] == "none"
    assert rows["on"]["speedup"] == "2.00x (IQR 2.00-2.00)"
    assert rows["on"]["profile"] == "aaaaaaaaaaaa v1"
    doc = {w.batching: w for w in table.document(records(r)).rows}
    assert doc["on"].counters.fallbacks.items() == [
        ("no_async_caps", 1),
        ("foreign_host_buffer", 0),
        ("oversized", 2),
        ("pinned_unavailable", 0),
        ("zeta", 3),
        ("alpha", 0),
    ]
    assert (doc["on"].speedup, doc["on"].speedup_iqr) == (2.0, (2.0, 2.0)) and doc["off"].speedup is None
    failed = make_result(variant="cpu-asan", status="failed", reason="x", on_ms=None, off_ms=None)
    del failed["profile"]
    assert [w["profile"] for w in table.build(records(failed)).rows] == ["-"]
    lone = copy.deepcopy(r)
    lone["rows"] = [off]  # no on row: no speedup, nothing saved
    assert table.build(records(lone)).rows[0]["speedup"] == ""
    assert table.document(records(lone)).rows[0].speedup is None


def test_render_lays_out_title_caption_table_and_notes(make_result):
    """table.md's shape: "## title", the caption line, the table, then the notes as a list,
    each part after a blank line, ending in a newline."""
    md = render([make_result(on_ms=ON, off_ms=OFF)], title="run-3")
    lines = md.split("\n")
    assert lines[:4] == ["## run-3", "", lines[2], ""] and lines[2].startswith("all rows: variant=release, ")
    assert lines[4].startswith("| batching ") and md.endswith(".\n") and not md.endswith("\n\n")
    first_note = next(i for i, ln in enumerate(lines) if ln.startswith("- "))
    assert lines[first_note - 1] == "" and lines[first_note - 2].startswith("| on ")
    assert render([make_result(on_ms=ON, off_ms=OFF)]).startswith("all rows: ")


def test_rows_without_their_off_or_on_sibling_render_without_speedup_or_saving(make_result):
    """A speedup needs the off row of the same result, a saving its on row: a result without
    them (a partial run) still renders, those cells empty."""
    import copy

    r = make_result(on_ms=ON, off_ms=OFF)
    on = copy.deepcopy(r["rows"][1])
    zc = dict(copy.deepcopy(on), batching="zerocopy")
    only_on = dict(r, rows=[on])
    no_on = dict(copy.deepcopy(r), rows=[copy.deepcopy(r["rows"][0]), zc])
    rows = table.build(records(only_on)).rows
    assert [(w["batching"], w["speedup"]) for w in rows] == [("on", "")]
    assert [(w.batching, w.speedup, w.median_ms) for w in table.document(records(only_on)).rows] == [
        ("on", None, pytest.approx(95.95))
    ]
    rows = {w["batching"]: w for w in table.build(records(no_on)).rows}
    assert rows["zerocopy"]["saved vs on ms"] == "" and rows["zerocopy"]["speedup"].startswith("1.05x")
    doc = {w.batching: w for w in table.document(records(no_on)).rows}
    assert doc["zerocopy"].saved_vs_on_ms is None and doc["zerocopy"].speedup == pytest.approx(1.05, abs=0.005)


def test_no_saving_column_without_extra_modes(make_result):
    _, header, _ = parse(render([make_result(on_ms=ON, off_ms=OFF)]))
    assert "saved vs on ms" not in header


def test_machines_with_one_hostname_are_told_apart_by_gpu_or_cpu(make_result):
    a = make_result(host="vm", on_ms=ON, off_ms=OFF)
    b = make_result(variant="cpu-asan", host="vm", on_ms=ON, off_ms=OFF)
    b["machine"]["gpu"] = "NVIDIA H200, 580.159.04, 5, 16\nNVIDIA H200, 580.159.04, 5, 16"
    _, header, rows = parse(render([a, b]))
    assert header[0] == "machine"
    assert by(rows, variant="cpu-asan", batching="on")["machine"] == "vm (NVIDIA H200)"
    assert by(rows, variant="release", batching="on")["machine"] == "vm (Test CPU)"


def test_compare_refuses_a_side_that_is_not_one_run(make_record):
    """Each side must be one run: one result per configuration (the record's configuration
    fields count: one result of each is one run's) and one profile file
    (sam3d/results/compare.py); a side and a result are named in the refusal."""
    one = make_record(on_ms=ON, off_ms=OFF, host="host-a")
    again = make_record(on_ms=ON, off_ms=OFF, host="host-b")
    with pytest.raises(ReportError) as e:
        compare.compare_results([one, again], [one], "runs/a", "runs/b", force=True)
    assert str(e.value) == (
        "A (runs/a) holds two results for release CPU Test CPU off (hosts host-a (Test CPU), "
        "host-b (Test CPU)); compare needs one result per configuration on each side: pass "
        "one run's folder"
    )
    areas = [
        make_record(on_ms=ON, off_ms=OFF, host=h, layout="areas", transfer_only=True) for h in ("host-a", "host-b")
    ]
    with pytest.raises(ReportError) as e:
        compare.compare_results([one, *areas], [one], "runs/a", "runs/b", force=True)
    assert str(e.value).startswith(
        "A (runs/a) holds two results for release CPU Test CPU areas transfer-only off "
        "(hosts host-a (Test CPU), host-b (Test CPU)); "
    )
    assert [x.verdict for x in compare.compare_results([one, areas[0]], [one, areas[0]]).lines] == ["no change"] * 4
    other = make_record(variant="cpu-asan", on_ms=ON, off_ms=OFF, profile_sha="b" * 64)
    with pytest.raises(compare.ProfileMismatch) as e:
        compare.compare_results([one], [one, other], "runs/a", "runs/b")
    assert str(e.value) == (
        f"B (runs/b) mixes results from 2 profiles ({'a' * 64}, {'b' * 64}); a run uses one profile file"
    )
    # two failed results of one configuration: the row a failed result stands as has no batching ("-")
    failed = [make_record(status="failed", reason=why, on_ms=None, off_ms=None) for why in ("crash", "timeout")]
    with pytest.raises(ReportError) as e:
        compare.compare_results(failed, [one], "runs/a", "runs/b")
    assert str(e.value).startswith(
        "A (runs/a) holds two results for release CPU Test CPU - (hosts host-a (Test CPU), host-a (Test CPU)); "
    )
    # without names the sides are called A and B
    c = compare.compare_results([one], [one])
    assert (c.where_a, c.where_b) == ("A", "B") and c.markdown().startswith("A: A\nB: B\n")


def test_compare_refusals_name_each_side_its_folder_and_the_fix(make_record):
    """Both sides are checked alike, and each refusal says how to go on (docs/getting-started.md:
    runs of different profiles or machines are refused unless --force)."""
    one = make_record(on_ms=ON, off_ms=OFF, host="host-a")
    with pytest.raises(ReportError, match=r"^B \(runs/b\) holds two results for release CPU Test CPU off "):
        compare.compare_results(
            [one], [one, make_record(on_ms=ON, off_ms=OFF, host="host-b")], "runs/a", "runs/b", force=True
        )
    other = make_record(variant="cpu-asan", on_ms=ON, off_ms=OFF, profile_sha="b" * 64)
    with pytest.raises(compare.ProfileMismatch, match=r"^A \(runs/a\) mixes results from 2 profiles"):
        compare.compare_results([one, other], [one], "runs/a", "runs/b")
    with pytest.raises(compare.ProfileMismatch) as e:
        compare.compare_results([one], [make_record(on_ms=ON, off_ms=OFF, profile_sha="b" * 64)], "runs/a", "runs/b")
    assert str(e.value) == (
        f"refusing to compare runs on different profiles: A (runs/a) used profile sha256 "
        f"{'a' * 64}, B (runs/b) used {'b' * 64}; re-run one side with the other's profile file "
        "(--force compares anyway)"
    )
    two_hosts = [one, make_record(variant="cpu-asan", on_ms=ON, off_ms=OFF, host="host-b")]
    three = [
        make_record(on_ms=ON, off_ms=OFF, host="host-c"),
        make_record(variant="cpu-asan", on_ms=ON, off_ms=OFF, host="host-d"),
    ]
    with pytest.raises(compare.MachineMismatch) as e:
        compare.compare_results(two_hosts, three, "runs/a", "runs/b")
    assert str(e.value) == (
        "refusing to compare runs of different machines: A (runs/a) ran on host-a (Test CPU), "
        "host-b (Test CPU), B (runs/b) on host-c (Test CPU), host-d (Test CPU); compare runs of "
        "one machine (--force compares anyway)"
    )


def test_a_row_label_names_the_host_only_when_asked(make_result):
    from sam3d.results.rows import rows

    on = [w for w in rows(records(make_result(on_ms=ON, off_ms=OFF))) if w.mode == "on"][0]
    assert on.label() == "release CPU Test CPU on"
    assert on.label(with_host=True) == "release CPU Test CPU on host-a (Test CPU)"


def test_compare_a_failed_result_stands_against_the_other_sides_rows_of_its_device(make_result):
    """A failed result on one side stands against both batching rows of the other side's result
    of the same variant and backend, when its device is the same or unknown (a build failure
    has none), on either side; a failed result of another device does not."""
    ok = make_result(backend="Vulkan", device="GPU-1", on_ms=ON, off_ms=OFF)

    def failed(device):
        r = make_result(backend="Vulkan", device=device, status="failed", reason="crash", on_ms=None, off_ms=None)
        r["device"] = device
        return r

    for a, b in (([ok], [failed("GPU-1")]), ([failed("GPU-1")], [ok]), ([ok], [failed(None)]), ([failed(None)], [ok])):
        lines = compare.compare_results(records(*a), records(*b)).lines
        assert [(x.batching, x.verdict) for x in lines] == [
            ("off", "not comparable (failed)"),
            ("on", "not comparable (failed)"),
        ]
    other = make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF)
    lines = compare.compare_results(records(other, ok), records(other, failed("GPU-2"))).lines
    assert [(x.variant, x.device, x.batching, x.verdict) for x in lines] == [
        ("cpu-asan", "Test CPU", "off", "no change"),
        ("cpu-asan", "Test CPU", "on", "no change"),
        ("release", "GPU-1", "off", "only in A"),
        ("release", "GPU-1", "on", "only in A"),
        ("release", "GPU-2", "-", "only in B"),
    ]


def test_compare_rows_follow_the_tables_order(make_result):
    """Rows in table order (rows.py): the variant list's order (unknown variants after, by
    name), then backend, device, then the record's batching order off, on, zerocopy, queued."""
    import copy

    def res(variant, backend, device, extra_modes=()):
        r = make_result(variant=variant, backend=backend, device=device, on_ms=ON, off_ms=OFF)
        for m in extra_modes:
            row = copy.deepcopy(r["rows"][1])
            row["batching"] = m
            r["rows"].append(row)
        return r

    rs = [
        res("zz-x", "CPU", "d"),
        res("aa-x", "CPU", "d"),
        res("release", "Vulkan", "Alpha"),
        res("release", "CPU", "Zeta"),
        res("release", "CPU", "B-dev", ("queued", "zerocopy")),
        res("vulkan-ubsan", "CPU", "d"),
    ]
    rs = records(*rs)
    order = [(x.variant, x.backend, x.device, x.batching) for x in compare.compare_results(rs, rs).lines]
    assert order == [
        ("vulkan-ubsan", "CPU", "d", "off"),
        ("vulkan-ubsan", "CPU", "d", "on"),
        ("release", "CPU", "B-dev", "off"),
        ("release", "CPU", "B-dev", "on"),
        ("release", "CPU", "B-dev", "zerocopy"),
        ("release", "CPU", "B-dev", "queued"),
        ("release", "CPU", "Zeta", "off"),
        ("release", "CPU", "Zeta", "on"),
        ("release", "Vulkan", "Alpha", "off"),
        ("release", "Vulkan", "Alpha", "on"),
        ("aa-x", "CPU", "d", "off"),
        ("aa-x", "CPU", "d", "on"),
        ("zz-x", "CPU", "d", "off"),
        ("zz-x", "CPU", "d", "on"),
    ]


def test_compare_a_failed_result_beside_its_configurations_rows_comes_last(make_result):
    """As in the table, a failed result's row follows the batching rows of its configuration
    (it once sorted between on and zerocopy, tied with zerocopy)."""
    import copy

    ok = make_result(on_ms=ON, off_ms=OFF)
    for m in ("zerocopy", "queued"):
        row = copy.deepcopy(ok["rows"][1])
        row["batching"] = m
        ok["rows"].append(row)
    failed = make_result(status="failed", reason="crash", on_ms=None, off_ms=None)
    lines = compare.compare_results(records(ok, failed), records(ok)).lines
    assert [(x.batching, x.verdict) for x in lines] == [
        ("off", "no change"),
        ("on", "no change"),
        ("zerocopy", "no change"),
        ("queued", "no change"),
        ("-", "only in A"),
    ]


def test_compare_cells_of_one_sided_failed_and_compared_rows(make_record):
    """Each side's median where it has one (None: no such side), FAILED and the reason where it
    failed; B/A, p and the change from the Mann-Whitney U test at the alpha given; in the
    Markdown, ms to three places, B/A to three, the change in bold when slower or faster."""
    a = make_record(on_ms=ON, off_ms=OFF)
    b = make_record(on_ms=[x * 0.9 for x in ON], off_ms=OFF)
    only_a = make_record(variant="cpu-asan", on_ms=ON, off_ms=OFF)
    only_b = make_record(variant="vulkan-ubsan", on_ms=ON, off_ms=OFF)
    c = compare.compare_results([a, only_a], [b, only_b])
    lines = {(x.variant, x.batching): x for x in c.lines}
    on = lines[("release", "on")]
    assert (on.a.median_ms, on.b.median_ms, on.ratio, on.verdict) == (
        pytest.approx(95.95),
        pytest.approx(86.355),
        pytest.approx(0.9),
        "faster",
    )
    assert (lines[("cpu-asan", "on")].a.median_ms, lines[("cpu-asan", "on")].b) == (pytest.approx(95.95), None)
    assert (lines[("vulkan-ubsan", "on")].a, lines[("vulkan-ubsan", "on")].b.median_ms) == (None, pytest.approx(95.95))
    _, _, cells = parse(c.markdown())
    on = by(cells, variant="release", batching="on")
    assert (on["A median ms"], on["B median ms"], on["B/A"], on["change"]) == (
        "95.950",
        "86.355",
        "0.900",
        "**faster**",
    )
    p = lines[("release", "on")].p  # the test's p, to two significant digits
    assert on["p"] == f"{p:.2g}" and float(on["p"]) == pytest.approx(p, rel=0.05) and p < 0.05
    assert (by(cells, variant="cpu-asan", batching="on")["p"], by(cells, variant="cpu-asan", batching="on")["B/A"]) == (
        "",
        "",
    )  # one side only: no ratio, no test
    assert (
        by(cells, variant="cpu-asan", batching="on")["A median ms"],
        by(cells, variant="cpu-asan", batching="on")["B median ms"],
    ) == ("95.950", "")
    assert (
        by(cells, variant="vulkan-ubsan", batching="on")["A median ms"],
        by(cells, variant="vulkan-ubsan", batching="on")["B median ms"],
    ) == ("", "95.950")
    strict = {x.batching: x for x in compare.compare_results([a], [b], alpha=1e-30).lines}
    assert strict["on"].verdict == "no change" and strict["on"].p > 1e-30
    failed_a = make_record(status="failed", reason="timeout", on_ms=None, off_ms=None)
    c = compare.compare_results([failed_a], [b])
    for x in c.lines:
        assert (x.a.failed, x.a.median_ms, x.verdict) == ("timeout", None, "not comparable (failed)")
        assert x.b.median_ms == pytest.approx({"off": 100.95, "on": 86.355}[x.batching]) and x.b.failed is None
    for row in parse(c.markdown())[2]:
        assert (row["A median ms"], row["change"]) == ("FAILED: timeout", "not comparable (failed)")
        assert row["B median ms"] == {"off": "100.950", "on": "86.355"}[row["batching"]]


def test_compare_shows_a_column_per_configuration_field_off_its_default(make_record):
    """As the table (docs/results.md, "Configuration"): a configuration field gets a column only
    where some row is not at its default, each row's value in it ("yes"/"no" for a flag); a
    field at its default in every row shows nowhere, and the same value in every row moves to
    the caption."""

    def run(**configuration):
        return [make_record(on_ms=ON, off_ms=OFF), make_record(on_ms=ON, off_ms=OFF, **configuration)]

    caption, header, rows = parse(
        compare.compare_results(
            run(layout="areas", transfer_only=True), run(layout="areas", transfer_only=True)
        ).markdown()
    )
    assert header[:3] == ["layout", "transfer-only", "batching"]
    assert [(r["layout"], r["transfer-only"], r["batching"]) for r in rows] == [
        ("areas", "yes", "off"),
        ("areas", "yes", "on"),
        ("scattered", "no", "off"),
        ("scattered", "no", "on"),
    ]
    assert not {"order", "transfer queue"} & (set(caption) | set(header))
    caption, header, _ = parse(
        compare.compare_results(run(transfer_queue=True)[1:], run(transfer_queue=True)[1:]).markdown()
    )
    assert caption["transfer queue"] == "yes" and not {"layout", "order", "transfer-only"} & (
        set(caption) | set(header)
    )
    caption, header, _ = parse(compare.compare_results(run()[:1], run()[:1]).markdown())  # default runs
    assert list(caption) == ["variant", "backend", "device"] and header[0] == "batching"


def test_compare_numbers_are_right_aligned_and_each_sides_ratios_stay_in_the_table(make_result):
    """Medians, B/A, p and each side's x floor and x limit are right-aligned numbers, the names
    left-aligned (as in the table); a side's x floor and x limit are its rows' own
    measurements, kept in the table even where only one row has one (off has no limit)."""
    from sam3d.core import profile

    def run():
        r = make_result(backend="Vulkan", device="GPU", on_ms=ON, off_ms=OFF, profile_sha=profile.sha256())
        r["extra"] = limits_extra()
        return records(r)

    md = compare.compare_results(run(), run()).markdown()
    caption, header, rows = parse(md)
    assert header == [
        "batching",
        "A median ms",
        "B median ms",
        "B/A",
        "p",
        "change",
        "A x floor",
        "B x floor",
        "A x limit",
        "B x limit",
    ]
    assert [(r["A x limit"], r["B x limit"]) for r in rows] == [("", ""), ("13.11x (7.320)", "13.11x (7.320)")]
    assert by(rows, batching="off")["A x floor"] == "67.3x (1.500)"  # 100.95 / 1.5
    rule = next(line for line in md.splitlines() if line.startswith("|:") or line.startswith("|-"))
    marks = [c.strip() for c in rule.strip("|").split("|")]
    assert {
        h: ("right" if m.endswith(":") and not m.startswith(":") else "left" if m.startswith(":") else "?")
        for h, m in zip(header, marks)
    } == {
        "batching": "left",
        "A median ms": "right",
        "B median ms": "right",
        "B/A": "right",
        "p": "right",
        "change": "left",
        "A x floor": "right",
        "B x floor": "right",
        "A x limit": "right",
        "B x limit": "right",
    }


def test_compare_failed_results_on_both_sides_stand_as_one_row(make_record):
    """A failed result has no batching: its row's batching is "-" on both sides."""
    fa = make_record(status="failed", reason="timeout", on_ms=None, off_ms=None)
    fb = make_record(status="failed", reason="crash", on_ms=None, off_ms=None)
    c = compare.compare_results([fa], [fb])
    (line,) = c.lines
    assert (line.batching, line.a.failed, line.b.failed, line.verdict) == (
        "-",
        "timeout",
        "crash",
        "not comparable (failed)",
    )
    assert (line.a.median_ms, line.b.median_ms, line.ratio, line.p) == (None, None, None, None)
    caption, _, (row,) = parse(c.markdown())  # one row: its batching is in the caption
    assert (caption["batching"], row["A median ms"], row["B median ms"], row["change"]) == (
        "-",
        "FAILED: timeout",
        "FAILED: crash",
        "not comparable (failed)",
    )


def test_compare_without_a_common_configuration_is_an_error(tmp_path, make_result):
    save(tmp_path / "a" / "r.json", make_result(on_ms=ON, off_ms=OFF))
    save(tmp_path / "b" / "r.json", make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF))
    with pytest.raises(ReportError) as e:
        compare.compare(tmp_path / "a", tmp_path / "b")
    assert str(e.value) == (
        f"A ({tmp_path / 'a'}) and B ({tmp_path / 'b'}) share no configuration (variant, "
        "backend, device, layout, order, transfer-only, transfer queue, duplex, batching): nothing to "
        "compare; compare runs of the same variants and configurations on the same device"
    )


def test_terminal_table_fits_120_columns(make_result):
    from sam3d.results import table

    rs = [
        make_result(variant=v, backend=b, device=d, host=h, on_ms=ON, off_ms=OFF, fallbacks={"oversized": 2})
        for v in ("release", "cpu-asan")
        for b, d in (("CPU", "Test CPU"), ("Vulkan", "llvmpipe (LLVM 19.1.7, 256 bits)"))
        for h in ("host-a", "host-b")
    ]
    rs.append(
        make_result(
            variant="vulkan-ubsan", status="failed", reason="build failed: " + "x" * 200, on_ms=None, off_ms=None
        )
    )
    rs = records(*rs)
    full = render(rs)
    assert max(map(len, full.splitlines())) > 120  # table.md keeps every column
    term = table.render_terminal(rs, full="generated/diagnostics/x/table.md")
    assert max(map(len, term.splitlines())) <= 120
    _, header, rows = parse(term)
    assert {"variant", "backend", "batching", "median", "p95", "speedup"} <= set(header)
    assert by(rows, variant="release", backend="CPU", batching="on", machine="host-a (Test CPU)")["median"] == "95.950"
    assert "generated/diagnostics/x/table.md" in term


def test_terminal_table_shortens_cells_but_keeps_their_numbers(make_result):
    """The terminal's table (sam3d/results/table.py, TERMINAL_WIDTH): speedup, saved, x floor
    and x limit keep their first number (the parenthesised part is in table.md), a device or
    machine name over 20 characters is cut to 19 and "~", a failed row points at its note."""
    from sam3d.results.table import _short_cell

    assert _short_cell("speedup", "1.05x (IQR 1.05-1.05)") == "1.05x"
    assert _short_cell("saved vs on ms", "45.000 (47%)") == "45.000"
    assert _short_cell("x floor", "2.6x (1.410) (x)") == "2.6x"
    assert _short_cell("x limit", "1.75x (2.920)") == "1.75x"
    assert _short_cell("median ms", "1.75 (2.920)") == "1.75 (2.920)"
    assert _short_cell("device", "a" * 20) == "a" * 20
    assert _short_cell("machine", "m" * 21) == "m" * 19 + "~"
    assert _short_cell("device", "llvmpipe (LLVM 19.1.7, 256 bits)") == "llvmpipe (LLVM 19.1~"
    assert _short_cell("median ms", "FAILED: build failed: conan exit 1") == "FAILED (below)"


def test_terminal_table_drops_columns_in_order_until_it_fits_and_says_which(make_result):
    """render_terminal (sam3d/results/table.py): columns leave in DROP_ORDER while the table is
    wider than the terminal, and only then (a table exactly as wide stays whole); each column is
    as wide as its widest cell; the caption wraps with an indent; of the notes only FAILED and
    WARNING ones, each cut to the width; a last line names the dropped columns and where the
    full table is."""
    from sam3d.results import table

    outs = [f"o{i}" for i in range(20)]
    bad = ["x"] + outs[1:]
    rs = [
        make_result(
            variant=v,
            host=h,
            on_ms=ON,
            off_ms=OFF,
            outputs=outs,
            on_outputs=bad if (v, h) == ("cpu-asan", "host-b") else outs,
            profile_sha=("b" if h == "host-b" else "a") * 64,
        )
        for v in ("release", "cpu-asan")
        for h in ("host-a", "host-b")
    ]
    rs.append(
        make_result(
            variant="vulkan-ubsan", status="failed", reason="build failed: " + "x" * 200, on_ms=None, off_ms=None
        )
    )
    rs = records(*rs)
    wide = table.render_terminal(rs, width=1000)
    lines = wide.splitlines()
    tab = [ln for ln in lines if ln.startswith("|")]
    width = max(map(len, tab))
    assert wide.endswith("\n") and not any(ln.startswith("(") for ln in lines)  # nothing dropped, no file named
    cells = [[c for c in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in tab]
    for col in zip(*cells):
        assert len(col[1]) == 2 + max(
            len(c.strip()) for i, c in enumerate(col) if i != 1
        )  # widest cell + a space each side
    exact = table.render_terminal(rs, width=width).splitlines()  # exactly as wide: it fits
    assert [ln for ln in exact if ln.startswith("|")] == tab and not exact[-1].startswith("(not shown")
    notes = [ln for ln in lines if ln.startswith("- ")]
    assert notes and all(ln.startswith(("- FAILED", "- WARNING")) for ln in notes)
    assert any(ln.startswith("- WARNING: outputs differ between batching on and off") for ln in notes)
    assert next(ln for ln in notes if ln.startswith("- FAILED")).endswith("x" * 200 + " (no timings)")

    narrow = table.render_terminal(rs, full="x/table.md", width=width - 1).splitlines()
    assert all(len(ln) <= width - 1 for ln in narrow)
    caption = [ln for ln in narrow[: narrow.index(next(ln for ln in narrow if ln.startswith("|")))]]
    assert caption[0].startswith("all rows: ") and all(ln.startswith("  ") for ln in caption[1:])
    failed = next(ln for ln in narrow if ln.startswith("- FAILED"))
    assert failed.endswith(" ...") and len(failed) <= width - 1
    last = narrow[-1]
    assert last.startswith("(not shown here: ") and last.endswith("; every column and note: x/table.md)")
    dropped = last[len("(not shown here: ") : last.index(";")].split(", ")
    present = [
        table.SHORT.get(h, h) for h in table.DROP_ORDER if table.SHORT.get(h, h) in [c.strip() for c in cells[0]]
    ]
    assert dropped == present[: len(dropped)] and dropped[0] == "profile"  # two profiles: shown, and first to go
    header = [c.strip() for c in re.split(r"(?<!\\)\|", next(ln for ln in narrow if ln.startswith("|")))[1:-1]]
    assert not set(dropped) & set(header) and "same out" in header  # a mismatch keeps its column
    small = table.render_terminal(rs, width=60).splitlines()
    caption = small[: small.index(next(ln for ln in small if ln.startswith("|")))]
    assert len(caption) > 1 and caption[0].startswith("all rows: backend=CPU, ")
    assert all(ln.startswith("  ") for ln in caption[1:]) and all(len(ln) <= 60 for ln in caption)
    kept = [[c for c in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in narrow if ln.startswith("|")]
    for col in zip(*kept):  # after dropping too
        assert len(col[1]) == 2 + max(len(c.strip()) for i, c in enumerate(col) if i != 1)
    rule = next(ln for ln in narrow if ln.startswith("|:"))
    aligns = dict(zip(header, [c.strip() for c in rule.strip("|").split("|")]))
    assert aligns["median"].endswith(":") and not aligns["median"].startswith(":")  # numbers right-aligned
    assert aligns["variant"].startswith(":") and not aligns["variant"].endswith(":")
    assert table.render_terminal(rs, full="x/table.md", width=1000).splitlines()[-1] == (
        "(every column and note: x/table.md)"
    )  # nothing dropped
    cut = table.render_terminal(rs, full="x" * 300, width=width - 1).splitlines()[-1]
    assert cut.startswith("(not shown here: ") and cut.endswith(" ...)") and len(cut) <= width - 1
    unnamed = table.render_terminal(rs, width=width - 1).splitlines()[-1]
    assert unnamed == f"(not shown here: {', '.join(dropped)}; every column: the table.md of the evidence folder)"


def test_terminal_table_without_a_caption_has_no_caption_line(make_result):
    """No column holds one value in every row: no "all rows:" line."""
    from sam3d.results import table

    a = make_result(on_ms=ON, off_ms=OFF, fallbacks={"oversized": 1})
    b = make_result(
        variant="cpu-asan", backend="Vulkan", device="GPU", on_ms=None, off_ms=OFF[:3], profile_sha="b" * 64, bytes_up=1
    )
    term = table.render_terminal(records(a, b), width=1000)
    assert term.startswith("| variant ") and "all rows" not in term


def test_terminal_table_keeps_a_mismatch_column_even_when_every_row_shows_the_same(make_result):
    """As table.md: a column showing an output mismatch never moves to the caption."""
    from sam3d.results import table

    outs = [f"o{i}" for i in range(20)]
    r = make_result(on_ms=ON, off_ms=OFF, outputs=outs, on_outputs=["x"] + outs[1:])
    term = table.render_terminal(records(r))
    header = next(ln for ln in term.splitlines() if ln.startswith("|"))
    assert "same out" in header and "same out=" not in term


def test_report_json(tmp_path, make_result, capsys):
    """`report --format json` prints the report document (table.document, sam3d-report/1): one
    row per table row, numbers as numbers, the configuration as the record's fields, the notes
    as text without Markdown."""
    save(tmp_path / "in" / "a.json", make_result(on_ms=ON, off_ms=OFF))
    assert (
        cli.main(["report", "--format", "json", "--out", str(tmp_path / "d"), "--name", "j", str(tmp_path / "in")]) == 0
    )
    out = capsys.readouterr()
    text = out.out
    doc = json.loads(text)  # stdout is the document alone, for a pipe into jq
    assert out.err.startswith("sam3d report: 1 result(s); evidence in ")
    assert doc["schema"] == "sam3d-report/1" and "**" not in text
    assert {r["batching"]: r["median_ms"] for r in doc["rows"]} == {"off": 100.95, "on": 95.95}
    off, on = doc["rows"]
    assert (on["variant"], on["backend"], on["device"], on["host"], on["status"], on["reason"]) == (
        "release",
        "CPU",
        "Test CPU",
        "host-a (Test CPU)",
        "ok",
        None,
    )
    assert on["configuration"] == {
        "layout": "scattered",
        "order": "profile",
        "transfer_only": False,
        "transfer_queue": False,
        "duplex": "off",
    }
    # the table's cells, as numbers: p95 101.8/96.8, min-max, n, speedup 1.05x (IQR 1.05-1.05)
    assert (off["n"], off["p95_ms"], off["min_ms"], off["max_ms"]) == (20, 101.8, 100.0, 101.9)
    assert (on["n"], on["p95_ms"], on["min_ms"], on["max_ms"]) == (20, pytest.approx(96.8), 95.0, pytest.approx(96.9))
    assert off["speedup"] is None and on["speedup"] == pytest.approx(100.95 / 95.95, abs=1e-3)
    low, high = on["speedup_iqr"]  # of the paired ratios 1.0516..1.0526
    assert 1.0516 < low < on["speedup"] < high < 1.0526
    assert (on["outputs_identical"], on["floor_ms"], on["limit_ms"], on["saved_vs_on_ms"]) == (True, None, None, None)
    assert on["counters"] == {
        "async_uploads": 199,
        "sync_uploads": 3,
        "async_downloads": 232,
        "sync_downloads": 1,
        "bytes_uploaded": 33_193_136,
        "bytes_downloaded": 32_403_596,
        "pinned_batches": 82,
        "fallbacks": {"no_async_caps": 0, "foreign_host_buffer": 0, "oversized": 0, "pinned_unavailable": 0},
    }
    assert any(n.startswith("times: per-image wall ms") for n in doc["notes"])
    # the name is taken now: refused, and replaced with --force
    assert cli.main(["report", "--out", str(tmp_path / "d"), "--name", "j", str(tmp_path / "in")]) == 2
    assert "already exists: choose another --name or pass --force" in capsys.readouterr().err
    assert cli.main(["report", "--force", "--out", str(tmp_path / "d"), "--name", "j", str(tmp_path / "in")]) == 0


def test_report_document_holds_the_findings_as_values_without_markdown(make_result):
    """Where table.md marks a finding in Markdown (an output mismatch's **NO**, the limit note's
    **+N**), the report document holds a value (outputs_identical false, the limit and waits as
    numbers) and plain text; a failed row has no numbers, its reason instead."""
    import copy

    from sam3d.core import profile

    outs = [f"o{i}" for i in range(20)]
    r = make_result(
        backend="Vulkan",
        device="GPU",
        on_ms=ON,
        off_ms=OFF,
        outputs=outs,
        on_outputs=["x"] + outs[1:],
        profile_sha=profile.sha256(),
        transfer_only=True,
    )
    queued = copy.deepcopy(r["rows"][1])
    queued["batching"] = "queued"
    r["rows"].append(queued)
    r["extra"] = limits_extra()
    failed = make_result(variant="cpu-asan", status="failed", reason="a | b", on_ms=None, off_ms=None)
    rs = records(r, failed)
    t = table.build(rs)
    assert any("**" in n for n in t.notes) and any("**NO**" in row["outputs identical"] for row in t.rows)
    doc = table.document(rs)
    assert "**" not in json.dumps(doc.model_dump(mode="json", by_alias=True))
    assert doc.notes == [n.replace("**", "") for n in t.notes]
    rows = {(w.variant, w.batching): w for w in doc.rows}
    assert [rows[("release", m)].outputs_identical for m in ("off", "on", "queued")] == [False, False, False]
    assert rows[("release", "on")].configuration == {
        "layout": "scattered",
        "order": "profile",
        "transfer_only": True,
        "transfer_queue": False,
        "duplex": "off",
    }
    q = rows[("release", "queued")]
    assert q.floor_ms == 1.5 and isinstance(q.limit_ms, float) and q.limit_ms > q.floor_ms
    assert isinstance(q.waits_mandatory, int) and q.waits_mandatory > 0
    # waits made/mandatory per image (docs/benchmark.md): on makes one per call over G = 83 graphs; queued
    # transfer-only its 50 dependency + 0 ring + 1 end wait points and 3 + 1 synchronous copies over W = 55
    on = rows[("release", "on")]
    assert [(x.waits_made, x.waits_mandatory) for x in (on, q)] == [(83, 83), (55, 55)]
    assert [w["waits"] for w in t.rows if w["variant"] == "release"] == ["", "83/83", "55/55"]
    assert rows[("release", "off")].waits_made is None and rows[("cpu-asan", None)].waits_made is None
    f = rows[("cpu-asan", None)]
    assert (f.status, f.reason, f.median_ms, f.n, f.counters, f.outputs_identical) == (
        "failed",
        "a | b",
        None,
        None,
        None,
        None,
    )


def test_device_test_table_rounds_the_kernel_total_and_marks_n_a():
    from sam3d.results.table import device_tests

    md = device_tests(
        {"hostname": "vm", "gpu": "NVIDIA H200"},
        [
            ("release", "plain", {"passed": 168, "failed": 0, "skipped": 1}),
            (
                "release",
                "perf_logger",
                {"passed": 168, "failed": 0, "skipped": 1, "diagnostic_kernel_timestamp_total_ms": 10.199039999999998},
            ),
            ("cuda-release", "perf_logger", {"not_applicable": True}),
        ],
    )
    lines = [line for line in md.splitlines() if line.startswith("| ")][1:]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert cells == [
        ["release", "plain", "168", "0", "1", ""],
        ["release", "perf_logger", "168", "0", "1", "10.199"],
        ["cuda-release", "perf_logger", "n/a", "n/a", "n/a", "n/a"],
    ]


def test_device_test_table_page_right_aligns_every_count():
    """The page (docs/gpu-checks.md): its title names the machine and its GPU, the counts,
    CUDA devices, checkers' findings and kernel total are numbers, right-aligned; a run
    without a CUDA device count leaves that cell blank; no runs say so; the note follows."""
    from sam3d.results.table import device_tests

    md = device_tests(
        {"hostname": "vm", "gpu": "NVIDIA H200"},
        [
            (
                "cuda-release",
                "plain",
                {
                    "passed": 168,
                    "failed": 0,
                    "skipped": 1,
                    "cuda_devices": 1,
                    "sanitizer_errors": 0,
                    "diagnostic_kernel_timestamp_total_ms": 2.5,
                },
            ),
            ("release", "plain", {"passed": 7, "failed": 1, "skipped": 0}),
        ],
    ).splitlines()
    assert md[:2] == ["# Device tests on vm (NVIDIA H200)", ""]
    header, rule = md[2], md[3]
    heads = [c.strip() for c in header.strip("|").split("|")]
    assert heads == [
        "variant",
        "run",
        "passed",
        "failed",
        "skipped",
        "CUDA devices (GGML's)",
        "compute-sanitizer errors",
        "kernel timestamps ms (diagnostic)",
    ]
    aligns = [c.strip() for c in rule.strip("|").split("|")]
    assert [a.startswith(":") for a in aligns] == [True, True] + [False] * 6
    assert all(a.endswith(":") for a in aligns[2:])
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in md[4:6]]
    assert rows == [
        ["cuda-release", "plain", "168", "0", "1", "1", "0", "2.500"],
        ["release", "plain", "7", "1", "0", "", "", ""],
    ]
    assert md[6:] == [
        "",
        "The kernel timestamp total is GGML_VK_PERF_LOGGER's sum over the test run: a diagnostic "
        "with an extra synchronization before compute, never production latency.",
    ]
    na = device_tests(
        {"hostname": "vm"},
        [
            ("release", "perf_logger", {"not_applicable": True}),
            ("release", "plain", {"passed": 1, "failed": 0, "skipped": 0}),
        ],
    )
    assert [ln.split("|")[2].strip() for ln in na.splitlines() if ln.startswith("| release")] == [
        "perf_logger",
        "plain",
    ]
    empty = device_tests({"hostname": "vm"}, []).splitlines()
    assert empty[:4] == ["# Device tests on vm ()", "", "no device tests", ""]


def test_device_test_table_shows_the_cuda_devices_ggml_saw_when_known():
    from sam3d.results.table import device_tests

    md = device_tests(
        {"hostname": "vm"},
        [
            ("cuda-release", "plain", {"passed": 168, "failed": 0, "skipped": 1, "cuda_devices": 1}),
            ("cuda-asan", "plain", {"passed": 168, "failed": 0, "skipped": 1, "cuda_devices": 1}),
        ],
    )
    assert "CUDA devices (GGML's)" in md
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines() if line.startswith("| cuda")]
    assert [r[5] for r in rows] == ["1", "1"]


def test_an_empty_report_says_what_to_pass():
    with pytest.raises(ReportError, match=r"^no results to report: pass result files or folders holding them$"):
        table.build([])


def test_the_saved_and_run_notes_say_what_their_columns_mean(make_result):
    """saved vs on (docs/getting-started.md: the zerocopy and queued rows beyond the spec's
    staged design, each with the per-image time it saves over on) and run (table.build: only
    when two results share a configuration and host), each note in full."""
    import copy

    r = make_result(on_ms=ON, off_ms=OFF)
    zc = dict(copy.deepcopy(r["rows"][1]), batching="zerocopy")
    r["rows"].append(zc)
    notes = table.build(records(r, copy.deepcopy(r))).notes
    assert table.document(records(r, copy.deepcopy(r))).notes == notes  # no Markdown in these
    assert (
        "saved vs on: median(on) - median(row) per image, ms (share of on): what zero-copy or queued calls "
        "save over the spec's staged design in the same run."
    ) in notes
    assert "run: #i is the i-th result given; two results share a configuration and host." in notes


def test_results_from_two_hosts_name_the_host_in_every_finding(make_result):
    """With a machine column (results from more than one host) each output mismatch, in its
    cell and its warning, and each failure names the host it was measured on, as
    checks.problems() does."""
    outs = [f"o{i}" for i in range(20)]
    bad = list(outs)
    bad[3] = "different"
    rs = [
        make_result(host="box1", on_ms=ON, off_ms=OFF, outputs=outs, on_outputs=bad),
        make_result(backend="Vulkan", device="GPU", host="box2", on_ms=ON, off_ms=OFF, outputs=bad),
        make_result(backend="CUDA", device="GPU", host="box2", on_ms=ON, off_ms=OFF, outputs=outs),
        make_result(variant="vulkan-ubsan", host="box2", status="failed", reason="boom", on_ms=None, off_ms=None),
    ]
    t = table.build(records(*rs))
    assert t.columns[0].header == "machine"
    assert {w.host for w in table.document(records(*rs)).rows} == {"box1 (Test CPU)", "box2 (Test CPU)"}
    notes = t.notes
    assert (
        "WARNING: outputs differ between batching on and off: release CPU Test CPU on box1 (Test CPU) (1/20 images)"
    ) in notes
    # across backends Vulkan's rows are the odd ones against the first row of the majority (CPU off)
    for m in ("off", "on"):
        assert (
            f"WARNING: outputs of release Vulkan GPU {m} box2 (Test CPU) differ from release CPU Test CPU off "
            "box1 (Test CPU) (1/20 images; the replay with compute is exact in F32, so every backend must give "
            "the same bytes)"
        ) in notes
    assert "FAILED: vulkan-ubsan CPU Test CPU box2 (Test CPU): boom (no timings)" in notes
    assert sorted(p.split(" failed:")[0] for p in checks.problems(records(*rs)) if " failed:" in p) == [
        "vulkan-ubsan CPU Test CPU box2 (Test CPU)"
    ]


def test_each_results_speedup_and_saving_come_from_its_own_rows(make_result):
    """A row's speedup needs its own result's off row and images both timed, a saving its own
    result's on row: a result without them, first in table order, leaves those cells empty (the
    report document: null) and the next result's cells as they are (off 100.95 / on 95.95 =
    1.05x; zerocopy 45 ms less)."""
    import copy

    full = make_result(on_ms=ON, off_ms=OFF)
    zc = dict(copy.deepcopy(full["rows"][1]), batching="zerocopy")
    for s in zc["samples"]:
        s["wall_ms"] -= 45.0
    full["rows"].append(zc)
    no_off = make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF)
    no_off["rows"] = [no_off["rows"][1]]
    apart = make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF)
    for s in apart["rows"][0]["samples"]:
        s["image"] += 20  # off timed images 20..39, on 0..19: no pair
    no_on = make_result(variant="cpu-asan", on_ms=ON, off_ms=OFF)
    no_on["rows"] = [no_on["rows"][0], dict(copy.deepcopy(zc), batching="queued")]
    for first in (no_off, apart, no_on):
        rs = records(first, full)
        rows = {(w["variant"], w["batching"]): w for w in table.build(rs).rows}
        assert all(w["speedup"] == "" for (v, m), w in rows.items() if v == "cpu-asan" and m != "queued")
        assert rows[("release", "on")]["speedup"] == "1.05x (IQR 1.05-1.05)"
        assert rows[("release", "zerocopy")]["saved vs on ms"] == "45.000 (47%)"
        doc = {(w.variant, w.batching): w for w in table.document(rs).rows}
        assert all(w.speedup is None for (v, m), w in doc.items() if v == "cpu-asan" and m != "queued")
        assert doc[("release", "on")].speedup == pytest.approx(100.95 / 95.95, abs=1e-3)
        assert doc[("release", "zerocopy")].saved_vs_on_ms == pytest.approx(45.0)
    assert rows[("cpu-asan", "queued")]["saved vs on ms"] == ""
    assert doc[("cpu-asan", "queued")].saved_vs_on_ms is None


def test_a_report_of_results_from_a_folder_not_accepted_is_not_accepted_either(tmp_path, make_result, capsys):
    """Copying results out of a NOT-ACCEPTED evidence folder does not launder them: the new folder
    is marked too, naming the marker it inherits, and a gate on it fails."""
    src = tmp_path / "run"
    save(src / "results" / "a.json", make_result(on_ms=ON, off_ms=OFF))
    (src / "NOT-ACCEPTED").write_text("release: device tests (plain) 4 failed\n")
    assert cli.main(["report", "--out", str(tmp_path), "--name", "again", str(src)]) == 1
    marker = (tmp_path / "again" / "NOT-ACCEPTED").read_text()
    assert marker.startswith(f"an input's evidence folder is not accepted: {src.resolve() / 'NOT-ACCEPTED'}")
    capsys.readouterr()
    assert cli.main(["compare", "--fail-on", "any", str(src), str(tmp_path / "again")]) == 1
    assert "not accepted evidence" in capsys.readouterr().err


def test_a_long_hostname_gives_a_file_name_the_file_system_takes(tmp_path, make_result):
    save(tmp_path / "in" / "a.json", make_result(on_ms=ON, off_ms=OFF, host="h" * 300))
    assert cli.main(["report", "--out", str(tmp_path), "--name", "long", str(tmp_path / "in")]) == 0
    (written,) = (tmp_path / "long" / "results").iterdir()
    assert len(written.name) == 125 and written.name.startswith("01-release-CPU-hhh")
    assert record.read(written).machine.hostname == "h" * 300
