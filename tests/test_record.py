"""The result record (sam3d/results/record.py, docs/results.md): what a reader of result files
observes. Real result files of every version read and migrate to the configuration they were
measured in; anything else is one ResultError naming the file and the field; a record survives
being written and read again unchanged."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from conftest import records
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sam3d.results import record

DATA = Path(__file__).parent / "data"
# Real result files (tests/data/README.md says where each comes from) and the configuration
# each was measured in.
FIXTURES = {
    "cpu-asan-run1.json": ("sam3d-bench-result/1", "CPU", "scattered", "profile", False, False),
    "v2-vulkan-areas-levels-transfer-only.json": ("sam3d-bench-result/2", "Vulkan", "areas", "levels", True, False),
    "v3-cuda-areas-levels-transfer-only.json": ("sam3d-bench-result/3", "CUDA", "areas", "levels", True, False),
    "v3-lavapipe-areas-levels-transfer-only.json": ("sam3d-bench-result/3", "Vulkan", "areas", "levels", True, False),
    "v3-vulkan-transfer-queue.json": ("sam3d-bench-result/3", "Vulkan", "scattered", "profile", False, True),
}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_every_version_reads_with_its_configuration_as_fields(name):
    version, backend, layout, order, transfer_only, transfer_queue = FIXTURES[name]
    r = record.read(DATA / name)
    assert (r.migrated_from, r.backend) == (version, backend)
    assert r.configuration() == {
        "layout": layout,
        "order": order,
        "transfer_only": transfer_only,
        "transfer_queue": transfer_queue,
        "duplex": "off",  # before the field: one queue in those cores
    }
    assert r.ok and r.rows and all(len(row.samples) == r.protocol.images for row in r.rows)


def test_a_suffix_is_read_only_where_extra_lacks_the_field():
    """Version 2 carried transfer_only in extra but not the layout or order: those come from the
    backend's suffixes, and an extra field that says otherwise wins over a suffix."""
    doc = json.loads((DATA / "v2-vulkan-areas-levels-transfer-only.json").read_text())
    assert doc["backend"] == "Vulkan areas levels (transfer-only)" and "layout" not in doc["extra"]
    doc["extra"]["transfer_only"] = False
    r = record.parse(doc)
    assert (r.backend, r.layout, r.order, r.transfer_only) == ("Vulkan", "areas", "levels", False)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_a_record_written_and_read_again_is_unchanged(name, tmp_path):
    r = record.read(DATA / name)
    back = record.read(record.write(tmp_path / "r.json", r))
    assert back == r and back.document() == r.document()
    assert back.document()["schema"] == record.SCHEMA and back.migrated_from == r.migrated_from


def test_the_written_version_round_trips_as_written(make_result):
    doc = make_result(off_ms=[2.0, 2.5], on_ms=[1.0, 1.5], layout="areas", transfer_queue=True)
    assert record.parse(copy.deepcopy(doc)).document() == doc


def _doc():
    return json.loads((DATA / "v3-cuda-areas-levels-transfer-only.json").read_text())


def _set(doc: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(doc)
    node = out
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return out


def _drop(doc: dict, path: tuple) -> dict:
    out = copy.deepcopy(doc)
    node = out
    for k in path[:-1]:
        node = node[k]
    del node[path[-1]]
    return out


# What a user sees for a file that does not fit: the file, the field, the problem.
BAD = [
    (
        "schema 6",
        lambda d: _set(d, ("schema",), "sam3d-bench-result/6"),
        "field 'schema': is 'sam3d-bench-result/6': written by schema version 6; this reader reads version 5 or 4",
    ),
    ("no schema", lambda d: _drop(d, ("schema",)), "field 'schema': missing"),
    (
        "a string for a time",
        lambda d: _set(d, ("rows", 1, "samples", 0, "wall_ms"), "1.5"),
        "field 'rows[1].samples[0].wall_ms': Input should be a valid number",
    ),
    (
        "a negative count",
        lambda d: _set(d, ("rows", 0, "counters", "sync_uploads"), -1),
        "field 'rows[0].counters.sync_uploads': Input should be greater than or equal to 0",
    ),
    (
        "an unknown top-level field",
        lambda d: _set(d, ("hostname",), "x"),
        "field 'hostname': Extra inputs are not permitted",
    ),
    (
        "a mode twice",
        lambda d: _set(d, ("rows", 0, "batching"), "off"),
        "field 'rows[1].batching': 'off' appears twice",
    ),
    (
        "a sample missing",
        lambda d: _set(d, ("rows", 0, "samples"), d["rows"][0]["samples"][:-1]),
        "field 'rows[0].samples': has 4 entries but protocol.images is 5",
    ),
    ("an ok result without a device", lambda d: _drop(d, ("device",)), "field 'device': an ok result needs it"),
    (
        "a failed result without a reason",
        lambda d: _set(d, ("status",), "failed"),
        "field 'reason': a failed result needs a non-empty reason",
    ),
    (
        "an unknown mode",
        lambda d: _set(d, ("rows", 0, "batching"), "fast"),
        "field 'rows[0].batching': Input should be 'off', 'on', 'zerocopy' or 'queued'",
    ),
    (
        "a floor as text",
        lambda d: _set(d, ("extra", "transfer_floor", "median_ms"), "1.2"),
        "field 'extra.transfer_floor.median_ms': Input should be a valid number",
    ),
]


@pytest.mark.parametrize("case, change, message", BAD, ids=[c[0] for c in BAD])
def test_a_document_that_does_not_fit_is_one_error_naming_the_field(case, change, message):
    with pytest.raises(record.ResultError) as e:
        record.parse(change(_doc()), "r.json")
    assert str(e.value).startswith(f"r.json: {message}"), str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "data, words",
    [
        (b"\xff\xfe{", "not UTF-8 text"),
        (b'{"schema": "sam3d-bench-result/5",', "not valid JSON (line 1"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b"[" * 100_000, "nested too deeply to be a result file"),
    ],
    ids=["not utf-8", "truncated", "a list", "deep"],
)
def test_bytes_that_are_not_a_result_are_one_error(tmp_path, data, words):
    f = tmp_path / "r.json"
    f.write_bytes(data)
    with pytest.raises(record.ResultError) as e:
        record.read(f)
    assert str(e.value).startswith(str(f)) and words in str(e.value), str(e.value)


# --- properties --------------------------------------------------------------------------------

SOURCES = {name: (DATA / name).read_bytes() for name in FIXTURES}


def _paths(node, prefix=()):
    """Every (path, value) in a JSON document."""
    yield prefix, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


def _accepts_or_refuses(data: bytes) -> None:
    """The reader's contract on any bytes: a record, or ResultError; a record round-trips."""
    try:
        r = record.parse_text(data, "r.json")
    except record.ResultError as e:
        assert str(e).startswith("r.json") and "\n" not in str(e)
        return
    assert record.parse(r.document()) == r


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(name=st.sampled_from(sorted(SOURCES)), data=st.data())
def test_truncated_or_flipped_bytes_are_a_record_or_the_readers_error(name, data):
    raw = bytearray(SOURCES[name])
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    else:
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= data.draw(st.integers(1, 255))
    _accepts_or_refuses(bytes(raw))


JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


@PROPERTY
@given(name=st.sampled_from(sorted(SOURCES)), data=st.data())
def test_changed_added_or_missing_fields_are_a_record_or_the_readers_error(name, data):
    doc = json.loads(SOURCES[name])
    for _ in range(data.draw(st.integers(1, 3))):
        path, value = data.draw(st.sampled_from(list(_paths(doc))))
        what = data.draw(st.sampled_from(["type", "add", "drop"]))
        if what == "type" and path:
            doc = _set(doc, path, data.draw(JSON_VALUES))
        elif what == "add" and isinstance(value, dict):
            doc = _set(doc, (*path, data.draw(st.text(min_size=1, max_size=12))), data.draw(JSON_VALUES))
        elif what == "drop" and path and isinstance(path[-1], str):
            doc = _drop(doc, path)
    _accepts_or_refuses(json.dumps(doc).encode())


def test_records_helper_reads_documents_like_files(make_result):
    """The tests' own helper (conftest.records) is the reader: a bad document fails there too."""
    with pytest.raises(record.ResultError):
        records(make_result(off_ms=[1.0], on_ms=[1.0], layout="diagonal"))


# --- what a version-4 or -5 file may not say, and JSON that readers disagree on ---------------


def _v4() -> dict:
    """A version-5 document as the benchmark writes one (not migrated)."""
    doc = record.read(DATA / "v3-cuda-areas-levels-transfer-only.json").document()
    del doc["migrated_from"]
    return doc


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda d: d.update(backend="CUDA areas"),
            "field 'backend': ends in ' areas', a configuration suffix of "
            "versions 1-3; from version 4 on the backend is named alone",
        ),
        (lambda d: d.update(backend="Vulkan (transfer-only)"), "field 'backend': ends in ' (transfer-only)'"),
        (
            lambda d: d["extra"].update(graph_order="levels"),
            "field 'extra.graph_order': a configuration fact; from version 4 on the record has it as its field 'order'",
        ),
        (
            lambda d: d["rows"][0]["samples"][0].update(wall_ms=0.0),
            "field 'rows[0].samples[0].wall_ms': Input should be greater than 0",
        ),
        (
            lambda d: d["rows"][0]["samples"][0].update(wall_ms=1e308),
            "field 'rows[0].samples[0].wall_ms': Input should be less than or equal to 1000000000",
        ),
    ],
    ids=["suffix", "transfer-only suffix", "old field", "zero wall", "huge wall"],
)
@pytest.mark.parametrize("schema", ["sam3d-bench-result/5", "sam3d-bench-result/4"])
def test_a_version_4_file_says_its_configuration_once_and_its_times_are_plausible(change, message, schema):
    doc = _v4() | {"schema": schema}
    change(doc)
    with pytest.raises(record.ResultError) as e:
        record.parse(doc, "r.json")
    assert str(e.value).startswith(f"r.json: {message}"), str(e.value)


def test_a_version_4_file_reads_as_the_drivers_default_duplex_and_a_version_4_reader_would_refuse_a_5():
    """Version 4 had no duplex field: its rows read as "off" (their driver's only behaviour) and
    migrated; a version-5 file names its duplex, which a version-4 reader (a record naming every
    field) would refuse, hence the version."""
    doc = _v4()
    assert doc["schema"] == "sam3d-bench-result/5" and "duplex" not in doc
    old = record.parse(doc | {"schema": "sam3d-bench-result/4"})
    assert (old.duplex, old.migrated_from) == ("off", "sam3d-bench-result/4")
    assert old.configuration() == record.parse(doc).configuration()
    on = record.parse(doc | {"duplex": "on"})
    assert on.configuration()["duplex"] == "on" and on.migrated_from is None
    with pytest.raises(record.ResultError, match="field 'duplex': Input should be 'auto', 'off' or 'on'"):
        record.parse(doc | {"duplex": "yes"}, "r.json")


def test_a_version_3_flag_that_is_not_a_boolean_is_refused_not_guessed():
    doc = json.loads((DATA / "v3-vulkan-transfer-queue.json").read_text())
    doc["extra"]["vulkan_transfer_queue"] = "false"
    with pytest.raises(record.ResultError, match="field 'transfer_queue': Input should be a valid boolean"):
        record.parse(doc, "r.json")


@pytest.mark.parametrize(
    "text, words",
    [
        (
            '{"schema": "sam3d-bench-result/5", "status": "failed", "status": "ok"}',
            "the key 'status' appears twice in one object",
        ),
        ('{"schema": "sam3d-bench-result/5", "extra": {"x": Infinity}}', "Infinity is not JSON"),
        ('{"schema": "sam3d-bench-result/5", "n": 1' + "0" * 5000 + "}", "not a result file: Exceeds the limit"),
        (
            '{"schema": "sam3d-bench-result/5", "extra": {"x": ' + "[" * 40 + "]" * 40 + "}}",
            "nested more than 32 levels deep",
        ),
    ],
    ids=["duplicate key", "Infinity", "5000 digits", "deep extra"],
)
def test_json_that_readers_would_read_differently_or_not_write_back_is_refused(text, words):
    with pytest.raises(record.ResultError) as e:
        record.parse_text(text.encode(), "r.json")
    assert str(e.value).startswith("r.json: ") and words in str(e.value), str(e.value)


def test_the_json_schema_refuses_what_it_can_say_of_the_record():
    """result.schema.json (for other readers of the files) refuses a file without its schema, a
    failed result without a reason and an ok one without its rows, as the reader does."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(record.json_schema())
    good = _v4()
    assert not list(validator.iter_errors(good))
    for bad in (
        {k: v for k, v in good.items() if k != "schema"},
        {**good, "status": "failed"},
        {k: v for k, v in good.items() if k != "rows"},
    ):
        assert list(validator.iter_errors(bad)), bad.keys()
        with pytest.raises(record.ResultError):
            record.parse(bad)


def test_the_run_facts_the_gpu_runner_records_are_the_records_configuration():
    """run.py records these facts for device-import (running/bundle.py RUN_FACTS); the record takes
    each as one configuration field."""
    from sam3d.running import bundle

    assert set(bundle.RUN_FACTS) == set(record.CONFIGURATION_FACTS)
    assert set(record.CONFIGURATION_FACTS.values()) == set(record.CONFIGURATION)


# --- what the reader and the writer keep, and where a folder's results are found ------------


def test_a_document_nested_32_levels_reads_and_writes_back_and_33_is_refused(tmp_path):
    """Nesting past 32 levels is refused (docs/results.md); 32 itself is a result like any
    other: it reads, and the record written reads back the same."""

    def nested(levels: int) -> bytes:
        doc = _v4()  # 1 level; extra 2; the list in it 3 and on
        doc["extra"]["deep"] = json.loads("[" * (levels - 2) + "]" * (levels - 2))
        return json.dumps(doc).encode()

    r = record.parse_text(nested(32), "r.json")
    assert record.read(record.write(tmp_path / "r.json", r)) == r
    with pytest.raises(record.ResultError, match="^r.json: nested more than 32 levels deep"):
        record.parse_text(nested(33), "r.json")


def test_parsing_a_document_leaves_it_as_it_was():
    """parse() reads the document it is given (a version-3 one carries its configuration in
    extra, which the record takes out as fields): the caller's document is not changed."""
    doc = json.loads((DATA / "v3-cuda-areas-levels-transfer-only.json").read_text())
    before = copy.deepcopy(doc)
    assert record.parse(doc).configuration() == {
        "layout": "areas",
        "order": "levels",
        "transfer_only": True,
        "transfer_queue": False,
        "duplex": "off",
    }
    assert doc == before
    assert record.parse(doc).configuration() == record.parse(before).configuration()  # and reads the same again


def test_an_older_result_written_again_keeps_its_reason_field():
    """A version 1-3 result written again (the results/ copy `sam3d report` makes) is version 5
    with the reason it was read with: an ok result says null, as the benchmark writes one; the
    other facts those versions wrote as null are left out."""
    for name in sorted(FIXTURES):
        assert json.loads((DATA / name).read_text())["reason"] is None
        written = record.read(DATA / name).document()
        assert written["schema"] == record.SCHEMA and written["reason"] is None, name
    failed = json.loads((DATA / "v3-vulkan-transfer-queue.json").read_text())
    failed.update(status="failed", reason="the driver crashed", device=None, caps=None, protocol=None, rows=[])
    written = record.parse(failed).document()
    assert written["reason"] == "the driver crashed"
    assert not {"device", "caps", "protocol"} & set(written)


def test_a_drivers_nan_diagnostic_is_written_as_json_the_reader_reads(tmp_path):
    """The driver's output is read with Python's json module, which takes NaN; a diagnostic in
    its extra that is NaN (no field of the record, which refuses it) is written as null, so
    the result file is JSON that read() reads back."""
    from test_bench import COMMON, RELEASE
    from test_bench import _doc as driver_doc

    from sam3d.cli import bench

    doc = driver_doc()
    doc["extra"]["gpu_temperature_c"] = json.loads("NaN")
    r = bench.wrap(RELEASE.name, "Vulkan", doc, reason=None, **COMMON)
    back = record.read(record.write(tmp_path / "r.json", r))
    assert back.extra.model_extra["gpu_temperature_c"] is None
    assert back.rows == r.rows and back.status == "ok"


def test_a_run_whose_checks_find_problems_is_a_failed_result_naming_them():
    """cli/bench.py result_of(): a driver run whose output the checks find wrong is kept as a
    "failed" result whose reason lists the problems, its rows kept; it reads back so."""
    from test_bench import COMMON, RELEASE
    from test_bench import _doc as driver_doc

    from sam3d.cli import bench

    doc = driver_doc()
    doc["extra"]["problems"] = ["replay: graph 7 left 4 bytes unread"]
    r = bench.result_of(RELEASE, "vulkan", doc, None, **COMMON)
    assert (r.status, r.reason, r.ok) == ("failed", "driver: replay: graph 7 left 4 bytes unread", False)
    assert [row.batching for row in r.rows] == ["on", "off"]
    back = record.parse(r.document())
    assert (back.status, back.reason, len(back.rows)) == ("failed", r.reason, 2)


def test_a_folders_result_files_leave_hidden_folders_out_and_go_past_an_unreadable_file(tmp_path, monkeypatch):
    """A folder is searched recursively for result files; hidden folders (an evidence folder
    being written, .<run-name>.new-<pid>) are skipped (docs/results.md), and a file that cannot
    be read does not end the search: the result files after it are found."""
    text = (DATA / "v3-vulkan-transfer-queue.json").read_text()
    for rel in ("run/results/a.json", "run/results/b.json", ".run.new-7/results/a.json", "run/.old/c.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert record.result_files(tmp_path) == [tmp_path / "run/results/a.json", tmp_path / "run/results/b.json"]
    assert record.result_files(tmp_path / "run") == [tmp_path / "run/results/a.json", tmp_path / "run/results/b.json"]

    read_bytes = Path.read_bytes

    def unreadable_a(self):
        if self.name == "a.json":
            raise PermissionError(13, "Permission denied", str(self))
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", unreadable_a)
    assert tmp_path / "run/results/b.json" in record.result_files(tmp_path)


def test_an_unreadable_result_file_is_named_not_skipped(tmp_path, monkeypatch):
    """A result file the reader cannot open (permissions; here injected, since root reads
    anything) is named with the reason, not left out of the table."""
    f = tmp_path / "run" / "results" / "r.json"
    f.parent.mkdir(parents=True)
    f.write_bytes((DATA / "v3-vulkan-transfer-queue.json").read_bytes())
    real = Path.read_bytes

    def read_bytes(self):
        if self == f:
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    assert record.result_files(tmp_path) == [f]
    with pytest.raises(record.ResultError, match=r"r\.json: cannot be read: Permission denied"):
        record.read_many([tmp_path])


def test_marking_a_record_failed_checks_it_like_any_other():
    r = record.read(DATA / "v3-vulkan-transfer-queue.json")
    assert record.failed(r, "outputs differ").reason == "outputs differ"
    with pytest.raises(record.ResultError) as e:
        record.failed(r, " ")
    assert str(e.value).startswith("the release result: field 'reason': a failed result needs a non-empty reason")
