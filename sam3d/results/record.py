"""The benchmark result record: one per (variant, backend, configuration, device) driver run.

This module is the format's one statement. The pydantic models below are the record; the
JSON Schema sam3d/results/result.schema.json and docs/results.md are generated from them by
`python -m sam3d generate` (drift-checked by tests/test_generated.py). All times are in
milliseconds, sizes in bytes.

Reading: a result file is parsed, migrated and validated once, by read() (or parse() for a
document already in memory); everything downstream takes Records. Version 5 is written;
versions 1-4 are read and migrated to the record at load (see _migrate): the configuration of
versions 1-3 from the ``extra`` fields they carry, the backend-name suffixes they were written
with only as a fallback; version 4 lacks the duplex field. A file of any other version is
refused naming the versions read. A version is bumped when a field is added where the record
names every field (an older reader refuses the file), so that the older reader names the
version instead of the field.

Writing: cli/bench.py wrap() makes a record from the driver's output document
(native/bench/output.cpp, schema sam3d-bench-driver/4), write() writes it atomically
(core/files.py).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..core.errors import Sam3dError
from ..core.files import decode, write_atomic

SCHEMA = "sam3d-bench-result/5"
# The versions read, newest first: the one written, then those migrated at load.
READABLE = (
    "sam3d-bench-result/5",
    "sam3d-bench-result/4",
    "sam3d-bench-result/3",
    "sam3d-bench-result/2",
    "sam3d-bench-result/1",
)
# The version before the duplex field: its configuration is already in the record's fields.
BEFORE_DUPLEX = "sam3d-bench-result/4"
# The version without limits: its floor is the earlier one-block measurement (the table notes it).
WITHOUT_LIMITS = "sam3d-bench-result/1"
SCHEMA_FILE = Path(__file__).with_name("result.schema.json")
_VERSIONED = re.compile(r"sam3d-bench-result/(\d+)")

Text = Annotated[str, Field(pattern=r"\S", description="a non-empty string")]
Count = Annotated[int, Field(ge=0)]
# A time: finite, not negative, and below a million seconds (a larger one is a broken clock, and
# would overflow the plot's axis).
MAX_MS = 1e9
Ms = Annotated[float, Field(ge=0, le=MAX_MS, allow_inf_nan=False, description="a number of ms in [0, 1e9]")]
Batching = Literal["off", "on", "zerocopy", "queued"]


class ResultError(Sam3dError, ValueError):
    """A result file (or document) that does not follow the record; the message names the
    file and the field."""


class _Model(BaseModel):
    # strict: no string-to-number or number-to-bool coercion; a field the record does not name is
    # an error (a typo must not pass), except where a model says "extra diagnostics".
    model_config = ConfigDict(strict=True, extra="forbid")


class _Open(BaseModel):
    """A model that keeps fields it does not name (diagnostics the driver adds)."""

    model_config = ConfigDict(strict=True, extra="allow")


# --- the configuration and the run's facts ---------------------------------------------------


class Machine(_Open):
    """The host that ran the driver (running/bench.py facts(), run.py on the GPU machine)."""

    hostname: Text
    cpu: str | None = None
    os: str | None = None
    glibc: str | None = None
    gpu: str | None = Field(None, description="nvidia-smi's name list, when it has one")


class Build(_Open):
    compile_flags: list[str]
    build_type: Text
    sanitizer: Text | None = None
    ggml_version: Text
    glslc: str | None = None


class ProfileRef(_Model):
    path: Text
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="64 lower-case hex digits")]
    version: Count


class Caps(_Model):
    """The device's GGML capabilities the core checks (docs/contract.md)."""

    async_: bool = Field(alias="async")
    host_buffer: bool
    buffer_from_host_ptr: bool
    events: bool


class Protocol(_Model):
    warmups: Count
    images: Count
    interleaved: bool | None = None


# --- the measurements ----------------------------------------------------------------------


class Sample(_Model):
    """One timed image of one row."""

    image: Count
    wall_ms: Annotated[
        float,
        Field(gt=0, le=MAX_MS, allow_inf_nan=False, description="the image's wall time, > 0 (ratios divide by it)"),
    ]
    enqueue_ms: Ms
    synchronize_ms: Ms
    copy_ms: Ms
    sync_path_ms: Ms
    outputs_sha256: Text


class Fallbacks(_Model):
    """The core's fallback counters per image, by reason (docs/contract.md rule 8); a reason
    added by a later core is kept."""

    model_config = ConfigDict(strict=True, extra="allow")
    __pydantic_extra__: dict[str, Count] = Field(init=False)
    no_async_caps: Count
    foreign_host_buffer: Count
    oversized: Count
    pinned_unavailable: Count

    def items(self) -> list[tuple[str, int]]:
        """(reason, count) of every reason, the four named first."""
        return [*((k, getattr(self, k)) for k in FALLBACK_REASONS), *(self.model_extra or {}).items()]


class Counters(_Model):
    """The core's counters per image (the same every image)."""

    async_uploads: Count
    sync_uploads: Count
    async_downloads: Count
    sync_downloads: Count
    bytes_uploaded: Count
    bytes_downloaded: Count
    pinned_batches: Count
    fallbacks: Fallbacks


class Row(_Model):
    """One batching mode of a run, measured in the same process as the others: "off" (GGML's
    blocking tensor_set/compute/get), "on" (the spec's staged batch), "zerocopy" (callers fill
    pinned slots), "queued" (calls share synchronizations); `sam3d_bench --list-modes`."""

    batching: Batching
    samples: list[Sample] = Field(description="timed images only, in run order")
    counters: Counters

    @property
    def wall_ms(self) -> list[float]:
        return [s.wall_ms for s in self.samples]

    @property
    def outputs(self) -> dict[int, str]:
        return {s.image: s.outputs_sha256 for s in self.samples}


# --- the limit probes (native/bench/probes.cpp; results/limits.py reads them) ---------------


class Series(_Open):
    """One probed quantity: best_median_ms (the smallest block median: its value), its block
    medians and samples (ms)."""

    best_median_ms: Ms
    block_medians_ms: list[Ms]
    samples_ms: list[Ms]
    median_ms: Ms | None = None
    n: Count | None = None


class SelfCheck(_Open):
    """The floor's self-check as wrap() recorded it (limits.floor_check; the table recomputes it)."""

    ok: bool
    both_ms: Ms
    max_alone_ms: Ms
    sum_alone_ms: Ms
    low_tolerance_ms: Ms | None = Field(None, description="absent in files migrated from version 2")
    high_tolerance_ms: Ms | None = Field(None, description="absent in files migrated from version 2")


class GbPerS(_Open):
    upload: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    download: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    both: Annotated[float, Field(ge=0, allow_inf_nan=False)]


class TransferFloor(_Open):
    """The profile's bytes as one async upload and one async download from the host buffer
    type's memory, one synchronize: median_ms is its value. Only median_ms in files migrated
    from version 1 (the earlier one-block measurement)."""

    median_ms: Ms
    upload_bytes: Count | None = None
    download_bytes: Count | None = None
    alignment: Count | None = None
    both: Series | None = None
    upload: Series | None = None
    download: Series | None = None
    duplex: Series | None = Field(None, description="both directions on two backends of the device at once")
    gb_per_s: GbPerS | None = None
    self_check: SelfCheck | None = None


class RoundTrips(_Open):
    download: Series = Field(description="4 bytes downloaded + synchronize")
    graph: Series = Field(description="a one-node graph + synchronize")
    download_event: Series | None = None
    graph_event: Series | None = None
    back_to_back: Series | None = None
    back_to_back_graphs: Count | None = None


class StagingMemcpy(_Open):
    """A plain memcpy of the staged path's bytes on the 'on' session's copy threads."""

    median_ms: Ms
    upload_bytes: Count
    download_bytes: Count
    gb_per_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    threads: Count | None = None


class GgmlCalls(_Open):
    """The modes' GGML calls timed without the core (transfer-only runs)."""

    copies: Series
    zerocopy: Series
    zerocopy_cold: Series
    queued: Series | None
    queued_cold: Series | None
    queued_no_upload_wait: Series | None = None
    queued_synchronize: Series | None = None
    queued_two_backends: Series | None = None
    queued_levels: Series | None = None
    copies_per_image: Count


class FloorProbe(_Open):
    """sam3d_floor_probe's output (native/bench/floor_probe.cpp, plain GGML): the floor's cross-check."""

    schema_: Literal["sam3d-floor-probe/1"] = Field(alias="schema")
    median_ms: Ms | None


class ExcludedMs(_Model):
    slot_writes: list[Ms]
    slot_reads: list[Ms]


class ModeFacts(_Open):
    """The driver's facts of one row's mode: calls, the core's GGML calls and waits per image,
    the untimed host ms of zerocopy and queued."""

    calls_per_image: Count | None = None
    staging_alignment: Count | None = None
    static_fallback: str | None = None
    ggml_copies_per_image: Count | None = None
    synchronizes_per_image: Count | None = None
    event_records_per_image: Count | None = None
    event_waits_per_image: Count | None = None
    event_synchronizes_per_image: Count | None = None
    duplex_calls_per_image: Count | None = Field(
        None, description="queued calls whose downloads ran on the second backend (core 0.8.0 on)"
    )
    duplex_event_records_per_image: Count | None = Field(None, description="event records on the second backend")
    duplex_event_waits_per_image: Count | None = Field(None, description="event waits the second backend made")
    session_duplex: bool | None = Field(
        None, description="whether the row's session had its second backend (sam3d_session_duplex)"
    )
    dependency_wait_points_per_image: Count | None = None
    ring_wait_points_per_image: Count | None = None
    end_wait_points_per_image: Count | None = None
    excluded_ms: ExcludedMs | None = None
    slot_fill_and_read_ms_excluded: list[Ms] | None = Field(None, description="version 1: the excluded ms' sum")


class Extra(_Open):
    """The run's measurements beyond the rows (the limit probes typed) and its diagnostics
    (driver overhead, peak RSS, the environment, logs: kept as written)."""

    transfer_floor: TransferFloor | None = None
    round_trips: RoundTrips | None = None
    staging_memcpy: StagingMemcpy | None = None
    ggml_calls: GgmlCalls | None = None
    floor_probe: FloorProbe | None = None
    floor_probe_error: str | None = None
    modes: dict[str, ModeFacts] = Field(default_factory=dict)
    problems: list[str] = Field(default_factory=list, description="what the driver found wrong")
    issue_order: list[str] | None = Field(
        None,
        description="the graphs' names in the order the driver issued them (its --order); absent in "
        "files written before the driver recorded it",
    )


# The configuration fields beyond variant, backend and device: a row of the table is one value
# of each (the table shows a column per field that differs between rows, the plot a panel per
# combination). Defaults are the driver's.
CONFIGURATION = ("layout", "order", "transfer_only", "transfer_queue", "duplex")


class Record(_Model):
    """One benchmark result. An "ok" result has every field (extra optional) and at least one
    row of protocol.images samples; a "failed" one needs a reason, and has what it got to
    (a build failure has no device)."""

    # What the validator below checks that a JSON Schema can say too: a failed result's reason,
    # an ok result's fields (the rows' samples, duplicates and images are the reader's alone).
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={
            "allOf": [
                {
                    "if": {"properties": {"status": {"const": "failed"}}},
                    "then": {"required": ["reason"], "properties": {"reason": {"type": "string", "pattern": r"\S"}}},
                    "else": {
                        "required": [
                            "machine",
                            "build",
                            "git_commit",
                            "profile",
                            "backend",
                            "device",
                            "caps",
                            "protocol",
                            "rows",
                        ],
                        "properties": {"rows": {"minItems": 1}},
                    },
                }
            ]
        },
    )

    schema_: Literal["sam3d-bench-result/5"] = Field(alias="schema")
    migrated_from: (
        Literal["sam3d-bench-result/4", "sam3d-bench-result/3", "sam3d-bench-result/2", "sam3d-bench-result/1"] | None
    ) = Field(None, description="the version of the file this record was read from, when older")
    variant: Text = Field(description="a name of sam3d/core/variants.py")
    status: Literal["ok", "failed"]
    reason: str | None = Field(None, description="why a failed result failed")
    backend: Text | None = Field(None, description="GGML's backend: CPU, Vulkan or CUDA")
    device: Text | None = Field(None, description="GGML's device description")
    layout: Literal["scattered", "areas"] = Field(
        "scattered",
        description="the device layout (sam3d_bench --layout): areas = one declared area per graph's "
        "inputs and outputs (coalesced copies, docs/contract.md rule 10)",
    )
    order: Literal["profile", "levels"] = Field(
        "profile", description="the order the graphs are issued in (sam3d_bench --order)"
    )
    transfer_only: bool = Field(False, description="the replay without compute (sam3d_bench --transfer-only)")
    transfer_queue: bool = Field(
        False, description="GGML's Vulkan transfers on their own queue (GGML_VK_ASYNC_USE_TRANSFER_QUEUE=1)"
    )
    duplex: Literal["auto", "off", "on"] = Field(
        "off",
        description="the batched sessions' duplex mode as asked (sam3d_bench --duplex; docs/contract.md, rule "
        "11); whether a row used the second backend is its mode's duplex_calls_per_image. Files before the "
        "field read as off, their driver's only behaviour (one queue before core 0.8.0)",
    )
    machine: Machine | None = None
    build: Build | None = None
    git_commit: Text | None = Field(None, description="of the checkout that built the driver")
    profile: ProfileRef | None = None
    caps: Caps | None = None
    protocol: Protocol | None = None
    rows: list[Row] = Field(default_factory=list, description="one per batching mode")
    extra: Extra = Field(default_factory=Extra)

    @model_validator(mode="after")
    def _complete(self) -> Record:
        if self.status == "failed":
            if not (self.reason and self.reason.strip()):
                raise ValueError("reason: a failed result needs a non-empty reason")
        else:
            missing = [
                k
                for k in ("machine", "build", "git_commit", "profile", "backend", "device", "caps", "protocol")
                if getattr(self, k) is None
            ]
            if missing:
                raise ValueError(f"{missing[0]}: an ok result needs it")
            if not self.rows:
                raise ValueError("rows: an ok result needs at least one row")
        if self.migrated_from in (None, BEFORE_DUPLEX):
            suffix = next((x for x, _, _ in _SUFFIXES if (self.backend or "").endswith(x)), None)
            if suffix is not None:
                raise ValueError(
                    f"backend: ends in {suffix!r}, a configuration suffix of versions 1-3; from version 4 on "
                    "the backend is named alone and the configuration in its fields (docs/results.md)"
                )
            old = next((k for k in CONFIGURATION_FACTS if k in (self.extra.model_extra or {})), None)
            if old is not None:
                raise ValueError(
                    f"extra.{old}: a configuration fact; from version 4 on the record has it as its field "
                    f"{CONFIGURATION_FACTS[old]!r}"
                )
        floor = self.extra.transfer_floor
        check = floor.self_check if floor is not None else None
        if check is not None and self.migrated_from not in ("sam3d-bench-result/2", WITHOUT_LIMITS):
            for k in ("low_tolerance_ms", "high_tolerance_ms"):
                if getattr(check, k) is None:
                    raise ValueError(
                        f"extra.transfer_floor.self_check.{k}: required from version 3 on "
                        "(absent only in files migrated from version 2)"
                    )
        seen: set[str] = set()
        for i, row in enumerate(self.rows):
            if row.batching in seen:
                raise ValueError(f"rows[{i}].batching: {row.batching!r} appears twice; one row per batching mode")
            seen.add(row.batching)
            if self.status == "ok" and len(row.samples) != self.protocol.images:
                raise ValueError(
                    f"rows[{i}].samples: has {len(row.samples)} entries but protocol.images is {self.protocol.images}"
                )
            images: set[int] = set()
            for j, s in enumerate(row.samples):
                if s.image in images:
                    raise ValueError(f"rows[{i}].samples[{j}].image: image {s.image} appears twice in rows[{i}]")
                images.add(s.image)
        return self

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def key(self) -> tuple[str, str, str]:
        """(variant, backend, device); "-" for what a failed result does not record."""
        return (self.variant, self.backend or "-", self.device or "-")

    def configuration(self) -> dict[str, Any]:
        """The configuration fields (CONFIGURATION) and their values."""
        return {k: getattr(self, k) for k in CONFIGURATION}

    def host(self) -> str | None:
        """The machine a result was measured on: its hostname, with its GPU (nvidia-smi's first
        name) or else its CPU, since hostnames alone repeat across machines (e.g. "vm")."""
        if self.machine is None:
            return None
        gpu = (self.machine.gpu or "").splitlines()
        what = gpu[0].split(",")[0].strip() if gpu else (self.machine.cpu or "")
        return f"{self.machine.hostname} ({what})" if what else self.machine.hostname

    def profile_sha256(self) -> str | None:
        return self.profile.sha256 if self.profile else None

    def document(self) -> dict:
        """The record as the JSON document it reads from and writes to."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True) | {"schema": SCHEMA}


FALLBACK_REASONS = tuple(k for k in Fallbacks.model_fields)
BATCHING: tuple[str, ...] = Batching.__args__
# Rows every driver run has: each row is compared with "off", the others also with "on".
REQUIRED_ROWS = ("off", "on")


def json_schema() -> dict:
    """The JSON Schema of the version written (result.schema.json is this, generated)."""
    s = Record.model_json_schema(by_alias=True)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA,
        **s,
        "description": Record.__doc__.strip().replace("\n    ", " ")
        + " Generated from sam3d/results/record.py by `python -m sam3d generate`; versions 1-4 are read and "
        "migrated to this one (docs/results.md).",
    }


# --- reading ---------------------------------------------------------------------------------

_HINT = f" (the result record {SCHEMA}: docs/results.md)"
# The backend-name suffixes versions 1-3 wrote for a configuration, each with the field and
# value it stood for, in the order they are stripped (the reverse of the order they were
# appended): read only where the file's extra lacks the field (_migrate).
_SUFFIXES = (
    (" (transfer-only)", "transfer_only", True),
    (" levels", "order", "levels"),
    (" areas", "layout", "areas"),
    (" transfer queue", "transfer_queue", True),
)
# The run facts (the driver's extra, run.py's summary entry; versions 1-3 kept them in extra)
# that are the record's configuration fields: fact -> field.
CONFIGURATION_FACTS = {
    "transfer_only": "transfer_only",
    "graph_order": "order",
    "layout": "layout",
    "vulkan_transfer_queue": "transfer_queue",
    "duplex": "duplex",
}


def configuration_of(facts: dict) -> dict:
    """Takes the configuration facts out of ``facts`` (a run's extra) and returns them as the
    record's fields (null facts left out); their values are checked as the fields'."""
    out = {}
    for fact, field in CONFIGURATION_FACTS.items():
        value = facts.pop(fact, None)
        if value is not None:
            out[field] = value
    return out


def _migrate(doc: dict) -> dict:
    """An older document as a version-5 one, migrated_from set. Version 4 has its configuration in
    the record's fields already and lacks only duplex (the field's default, off, its driver's
    only behaviour; a suffix or an old extra field stays refused, as version 4 refused it).
    Versions 1-3: the configuration fields from extra (the suffixes of the backend name where
    extra lacks them). Version 2 and 1 lack fields version 4 made optional (the self-check's
    tolerances, the limit probes)."""
    out = dict(doc)
    if out["schema"] == BEFORE_DUPLEX:
        return {**out, "migrated_from": BEFORE_DUPLEX, "schema": SCHEMA}
    extra = out.get("extra")
    extra = dict(extra) if isinstance(extra, dict) else extra  # not an object: the record says so
    backend = out.get("backend")
    for suffix, field, value in _SUFFIXES:
        if isinstance(backend, str) and backend.endswith(suffix):
            backend = backend[: -len(suffix)]
            out[field] = value
    if isinstance(extra, dict):
        out.update(configuration_of(extra))
    if backend is not None:
        out["backend"] = backend
    out["extra"] = extra
    out["migrated_from"] = out["schema"]
    out["schema"] = SCHEMA
    # Version 1-3 failed results wrote absent facts as null; the record leaves them out.
    return {k: v for k, v in out.items() if v is not None or k == "reason"}


def _where(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(the document)"


def parse(doc: Any, source: str = "<result>") -> Record:
    """The record of a result document (a parsed JSON value) of any version READABLE, migrated;
    ResultError names ``source`` and the first missing or bad field."""
    if not isinstance(doc, dict):
        raise ResultError(f"{source}: expected a JSON object, got {type(doc).__name__}")
    version = doc.get("schema")
    if version not in READABLE:
        m = _VERSIONED.fullmatch(str(version))
        versions = " or ".join(v.rsplit("/", 1)[1] for v in READABLE)
        problem = (
            "missing"
            if version is None
            else f"is {version!r}: "
            + (
                f"written by schema version {m.group(1)}; this reader reads version {versions} ({SCHEMA} is "
                "written): re-run the benchmark (or device-import) with this checkout, or read the file with a "
                "checkout of its version"
                if m
                else f"expected {SCHEMA!r}"
            )
        )
        raise ResultError(f"{source}: field 'schema': {problem}{_HINT}")
    try:
        return Record.model_validate(doc if version == SCHEMA else _migrate(doc))
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = _where(first["loc"])
        msg = first["msg"].removeprefix("Value error, ")
        if where == "(the document)" and ": " in msg:  # the record's own checks name their field
            where, msg = msg.split(": ", 1)
        raise ResultError(f"{source}: field {where!r}: {msg}{_HINT}") from None


def parse_text(data: bytes, source: str) -> Record:
    """The record of a result file's bytes (read()); undecodable bytes and JSON errors are
    ResultError naming ``source``."""
    text = decode(data, source, ResultError)
    try:
        doc = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except _NotJson as e:
        raise ResultError(f"{source}: {e}{_HINT}") from None
    except json.JSONDecodeError as e:
        raise ResultError(
            f"{source}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); a truncated file "
            f"means the run that wrote it did not finish{_HINT}"
        ) from None
    except RecursionError:
        raise ResultError(f"{source}: nested too deeply to be a result file{_HINT}") from None
    except ValueError as e:  # an integer past Python's digit limit
        raise ResultError(f"{source}: not a result file: {e}{_HINT}") from None
    if _depth(doc) > MAX_DEPTH:
        raise ResultError(f"{source}: nested more than {MAX_DEPTH} levels deep: not a result file{_HINT}")
    return parse(doc, source)


# The deepest nesting a result file has is 6 levels; past this one it is not a result file (and
# could not be written back: pydantic's serializer stops at a depth too).
MAX_DEPTH = 32


class _NotJson(ValueError):
    pass


def _no_constant(name: str):
    raise _NotJson(f"{name} is not JSON (a time must be a finite number)")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        twice = next(k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i]))
        raise _NotJson(f"the key {twice!r} appears twice in one object (JSON readers differ on which wins)")
    return out


def _depth(doc: Any) -> int:
    """The nesting depth of a JSON value (an object or array inside one is 2), without recursion."""
    deepest, todo = 0, [(doc, 1)]
    while todo:
        node, d = todo.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, d)
            todo.extend((v, d + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def read(path: str | os.PathLike) -> Record:
    """Reads one result file; ResultError names the file and the bad field."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ResultError(f"{p}: no such result file") from None
    except OSError as e:
        raise ResultError(f"{p}: cannot be read: {e.strerror or e}") from None
    return parse_text(data, str(p))


# A result file's own "schema" field (a JSON Schema's "$id" or "const" naming the version is not).
_NAMES_SCHEMA = re.compile(r'"schema"\s*:\s*"sam3d-bench-result/\d+"')


def result_files(folder: str | os.PathLike) -> list[Path]:
    """Every result file under ``folder`` (recursively, sorted by path): each ``*.json`` whose
    text has a "schema" field naming a sam3d-bench-result version (any version: read() refuses
    one it does not read, and names a truncated file rather than letting it vanish), and each
    one that cannot be opened or names a version but does not parse (read() names why). Other
    JSON files (compile_commands.json, result.schema.json) are skipped, and so is anything under
    a hidden folder (an evidence folder being written or replaced, core/files.py staged_folder).
    A result file is parsed once, by read(), not here."""
    found = []
    for f in sorted(Path(folder).rglob("*.json")):
        if not f.is_file() or any(part.startswith(".") for part in f.relative_to(folder).parts):
            continue
        try:
            head = f.read_bytes()
        except OSError:
            found.append(f)  # unreadable: read() names the file and why, rather than it vanishing
            continue
        text = head.decode("utf-8", errors="replace")
        if _NAMES_SCHEMA.search(text):
            found.append(f)
        elif _VERSIONED.search(text):
            # names a version elsewhere: a JSON Schema or a list (skipped), or a result too
            # damaged to show its field (kept, for read() to name)
            try:
                json.loads(text)
            except (ValueError, RecursionError):
                found.append(f)
    return found


def files_of(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The result files of files and folders, in the order given (folders: result_files()).
    Raises ResultError when a path does not exist or a folder holds no result file."""
    out: list[Path] = []
    for given in paths:
        p = Path(given)
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            files = result_files(p)
            if not files:
                raise ResultError(
                    f"{p}: folder holds no sam3d-bench-result result files (*.json, searched recursively)"
                )
            out.extend(files)
        else:
            raise ResultError(f"{p}: no such file or folder")
    return out


def read_many(paths: Iterable[str | os.PathLike]) -> list[Record]:
    """Records from files and folders (files_of()). A file that mentions the schema but does
    not read is an error, not skipped (a truncated result must not vanish)."""
    return [read(f) for f in files_of(paths)]


# --- writing ---------------------------------------------------------------------------------


def write(path: str | os.PathLike, record: Record) -> Path:
    """Writes ``record`` to ``path`` atomically (core/files.py write_atomic), so readers never see
    a partial file: its JSON, one field per line indented one space per level (so results diff
    line by line), ending in a newline. Creates the parent folders. Returns the path."""
    return write_atomic(path, json.dumps(record.document(), indent=1) + "\n")


def failed(record: Record, reason: str) -> Record:
    """``record`` marked failed with ``reason`` (its rows kept)."""
    return parse({**record.document(), "status": "failed", "reason": reason}, f"the {record.variant} result")
