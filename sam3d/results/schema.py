"""The benchmark result file: one JSON file per (variant, backend, device) run.

Schema "sam3d-bench-result/3" (all times in milliseconds, sizes in bytes):

{
  "schema": "sam3d-bench-result/3",
  "variant": "release",                 # sam3d/core/variants.py name
  "status": "ok" | "failed",            # failed: "reason" says why, "rows" may be empty
  "reason": null | "build failed: ...",
  "machine": {"hostname": str, "cpu": str, "os": str, "glibc": str},
  "build": {"compile_flags": [str], "build_type": str, "sanitizer": str|null,
            "ggml_version": "0.20.2", "glslc": str|null},
  "git_commit": str,                    # of the checkout that built the driver
  "profile": {"path": str, "sha256": str, "version": int},
  "backend": "CPU" | "Vulkan",
  "device": str,                        # GGML device description, e.g. "NVIDIA H200"
  "caps": {"async": bool, "host_buffer": bool, "buffer_from_host_ptr": bool, "events": bool},
  "protocol": {"warmups": int, "images": int, "interleaved": true},
  "rows": [                             # one per batching mode, measured in the same process
    {
      "batching": "off" | "on" | "zerocopy" | "queued",  # see BATCHING
      "samples": [                      # timed images only, in run order
        {"image": int, "wall_ms": float, "enqueue_ms": float, "synchronize_ms": float,
         "copy_ms": float, "sync_path_ms": float, "outputs_sha256": str}
      ],
      "counters": {                     # per image (the same every image), core counter names
        "async_uploads": int, "sync_uploads": int, "async_downloads": int, "sync_downloads": int,
        "bytes_uploaded": int, "bytes_downloaded": int, "pinned_batches": int,
        "fallbacks": {"no_async_caps": int, "foreign_host_buffer": int, "oversized": int,
                      "pinned_unavailable": int}
      }
    }
  ],
  "extra": {                           # optional diagnostics: driver overhead, peak RSS, ...
    "transfer_floor": null | {"median_ms", "both", "upload", "download", "gb_per_s", "alignment",
                              "self_check": {"ok", ...}, ...},  # version 2: the limit probes;
                              # version 3: self_check's low_tolerance_ms, high_tolerance_ms (required)
    "ggml_calls": null | {"copies", "zerocopy", "zerocopy_cold", "queued", "queued_cold",
                          "copies_per_image"},  # version 3
    "round_trips": {"download", "graph", ...}, "staging_memcpy": {"median_ms", ...},
    "floor_probe": null | {"schema": "sam3d-floor-probe/1", "median_ms", ...},
    "modes": {"<row>": {"calls_per_image", "excluded_ms": {"slot_writes", "slot_reads"}, ...}}
  }
}

The format is the JSON Schema sam3d/results/result.schema.json (packaged with sam3d; the
constants below are read from it); validate() checks it with jsonschema and adds what a JSON
Schema cannot say. A change of the format is a new schema version: SCHEMA and the file's
"$id" and "schema" enum. Version 3 (version 2's limit probes in "extra", typed, plus the modes'
GGML calls without the core and the floor self-check's tolerance) is written; version 2 is still
read (without those), and version 1 (READABLE: its rows render, without limits); readers refuse files of any other
version naming the one they need. Readers: load(), load_many(), result_files(); writers: wrap() (a result from the
driver's document), write() (atomic). The table: sam3d/results/table.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.errors import Sam3dError
from ..core.files import check_schema, decode, read_json, write_atomic
from ..core.variants import Variant
from .limits import floor_check

SCHEMA = "sam3d-bench-result/3"
# The versions this reader reads: the one it writes, then the older ones it still renders.
READABLE = ("sam3d-bench-result/3", "sam3d-bench-result/2", "sam3d-bench-result/1")
# The version without limits: its floor is the earlier measurement (the table notes it).
WITHOUT_LIMITS = "sam3d-bench-result/1"
# The format as a JSON Schema (packaged with sam3d): the one place that names the fields.
SCHEMA_FILE = Path(__file__).with_name("result.schema.json")
JSON_SCHEMA: dict = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
_DEFS = JSON_SCHEMA["$defs"]

STATUSES = tuple(JSON_SCHEMA["properties"]["status"]["enum"])
# Row names ("batching"), as the driver's mode table (`sam3d_bench --list-modes`, "row") names
# them: "off" (ggml_backend_tensor_set/compute/get), "on" (the staged batch of the spec's
# design), and the beyond-the-spec rows of `sam3d_bench --modes`: "zerocopy" (callers fill
# pinned slots) and "queued" (calls share synchronizations).
BATCHING = tuple(_DEFS["row"]["properties"]["batching"]["enum"])
# Rows every driver run has: each row is compared with "off", the others also with "on".
REQUIRED_ROWS = ("off", "on")
TRANSFER_ONLY = " (transfer-only)"  # appended to the backend of a replay without compute
AREAS = " areas"  # appended to the backend of a replay in the areas layout (sam3d_bench --layout areas)
# Appended to the backend of a replay issuing its graphs by dependency level (sam3d_bench
# --order levels, extra.graph_order; docs/benchmark.md, "Issue order").
LEVELS = " levels"
# Appended to the backend of a Vulkan replay with GGML's dedicated transfer queue (run.py
# --vulkan-transfer-queue: GGML_VK_ASYNC_USE_TRANSFER_QUEUE=1, extra.vulkan_transfer_queue).
TRANSFER_QUEUE = " transfer queue"
FALLBACK_REASONS = tuple(_DEFS["row"]["properties"]["counters"]["properties"]["fallbacks"]["required"])
COUNTERS = tuple(k for k in _DEFS["row"]["properties"]["counters"]["required"] if k != "fallbacks")
SAMPLE_TIMES = tuple(k for k in _DEFS["sample"]["required"] if k.endswith("_ms"))
CAPS = tuple(JSON_SCHEMA["properties"]["caps"]["required"])
_VERSIONED = re.compile(r"sam3d-bench-result/(\d+)")


class ResultError(Sam3dError, ValueError):
    """A result file (or dict) that does not follow the schema; the message names the file and
    the field."""


_HINT = f" (schema {SCHEMA}: sam3d/results/{SCHEMA_FILE.name})"


def _fail(source: str, field: str, problem: str) -> None:
    raise ResultError(f"{source}: field {field!r}: {problem}{_HINT}")


def validate(result: Any, source: str = "<result>") -> dict:
    """Checks ``result`` against schema sam3d-bench-result/3 (or 2 or 1) and returns it unchanged.

    The JSON Schema (result.schema.json, with jsonschema) checks the fields: an "ok" result
    needs every field (except "extra") and at least one row with at least one sample; a
    "failed" result needs schema, variant, status and a non-empty reason, and its other fields
    are checked when present and not null (a build failure has no device). Then what a JSON
    Schema cannot say: each row of an ok result has protocol.images samples, no batching mode
    twice, no image index twice in a row, every time finite. A result of a version not in
    READABLE is refused naming the versions this reader reads. Raises ResultError naming
    ``source`` and the first missing or bad field.
    """
    if not isinstance(result, dict):
        raise ResultError(f"{source}: expected a JSON object, got {type(result).__name__}")
    if "schema" not in result:
        _fail(source, "schema", "missing")
    if result["schema"] not in READABLE:
        m = _VERSIONED.fullmatch(str(result["schema"]))
        versions = " or ".join(v.rsplit("/", 1)[1] for v in READABLE)
        _fail(source, "schema", f"is {result['schema']!r}: " + (
            f"written by schema version {m.group(1)}; this reader needs version {versions} ({SCHEMA} is "
            "written): re-run the benchmark (or device-import) with this checkout, or read the file with a "
            "checkout of its version" if m else f"expected {SCHEMA!r}"))
    failed = result.get("status") == "failed"
    # A failed result's null fields are fields it does not have.
    doc = {k: v for k, v in result.items() if v is not None} if failed else result
    check_schema(doc, JSON_SCHEMA, source, ResultError, _HINT)
    images = (doc.get("protocol") or {}).get("images")
    seen: set[str] = set()
    for i, row in enumerate(doc.get("rows") or []):
        w = f"rows[{i}]"
        if row["batching"] in seen:
            _fail(source, f"{w}.batching", f"{row['batching']!r} appears twice; one row per batching mode")
        seen.add(row["batching"])
        if not failed and len(row["samples"]) != images:
            _fail(source, f"{w}.samples", f"has {len(row['samples'])} entries but protocol.images is {images}")
        imgs: set[int] = set()
        for j, sample in enumerate(row["samples"]):
            if sample["image"] in imgs:
                _fail(source, f"{w}.samples[{j}].image", f"image {sample['image']} appears twice in {w}")
            imgs.add(sample["image"])
            for k in SAMPLE_TIMES:
                if not math.isfinite(sample[k]):
                    _fail(source, f"{w}.samples[{j}].{k}", f"must be a finite number >= 0, got {sample[k]!r}")
    return result


def _parse(path: Path) -> Any:
    return read_json(path, ResultError)


def load(path: str | os.PathLike) -> dict:
    """Reads and validates one result file; ResultError names the file and the bad field."""
    p = Path(path)
    if not p.is_file():
        raise ResultError(f"{p}: no such result file")
    return validate(_parse(p), str(p))


def _canonical(result: dict) -> str:
    return hashlib.sha256(json.dumps(result, sort_keys=True).encode()).hexdigest()


def result_files(folder: str | os.PathLike) -> list[Path]:
    """Every result file under ``folder`` (recursively, sorted by path): each ``*.json`` whose
    "schema" is sam3d-bench-result/N, of any version N (load() refuses a version it does not
    read, naming the one it needs). Other JSON files (e.g. compile_commands.json) are
    skipped, and so is anything under a hidden folder (an evidence folder being written or
    replaced); a file that mentions the schema and does not decode or parse is an error (a
    truncated result must not vanish silently): ResultError names it."""
    found = []
    for f in sorted(Path(folder).rglob("*.json")):
        if not f.is_file() or any(part.startswith(".") for part in f.relative_to(folder).parts):
            continue  # hidden: a folder being written or replaced (core/files.py staged_folder)
        try:
            data = f.read_bytes()
        except OSError:
            continue
        mentioned = _VERSIONED.search(data.decode("utf-8", errors="replace"))
        if mentioned is None:
            continue
        text = decode(data, str(f), ResultError)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ResultError(f"{f}: mentions {mentioned.group(0)} but is not valid JSON (line {e.lineno}: "
                              f"{e.msg}); delete or re-run it") from None
        if isinstance(data, dict) and _VERSIONED.fullmatch(str(data.get("schema"))):
            found.append(f)
    return found


def load_many(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """Results from files and folders, in the order given (folders: result_files()).

    A file named explicitly must be a valid result file. The same result reached twice
    (overlapping paths, or an evidence folder's copy next to its original) is kept once.
    Raises ResultError when a path does not exist, a folder holds no result file, or a result
    is invalid.
    """
    out: list[dict] = []
    seen: set[str] = set()
    for given in paths:
        p = Path(given)
        if p.is_file():
            files = [p]
        elif p.is_dir():
            files = result_files(p)
            if not files:
                raise ResultError(f"{p}: folder holds no sam3d-bench-result result files (*.json, searched "
                                  "recursively)")
        else:
            raise ResultError(f"{p}: no such file or folder")
        for f in files:
            result = load(f)
            key = _canonical(result)
            if key not in seen:
                seen.add(key)
                out.append(result)
    return out


def write(path: str | os.PathLike, result: dict) -> Path:
    """Validates ``result`` and writes it to ``path`` atomically (core/files.py), so readers
    never see a partial file: its JSON, one field per line indented one space per level (so
    results diff line by line), ending in a newline. Creates the parent folders. Returns the
    path."""
    validate(result, str(path))
    return write_atomic(path, json.dumps(result, indent=1) + "\n")


def wrap(v: Variant, backend: str, doc: dict | None, *, status: str, reason: str | None, prof: dict,
         machine_info: dict, commit: str, build: dict | None, extra: dict | None = None) -> dict:
    """A result of this schema from the driver's output document (schema sam3d-bench-driver/3;
    None when the driver produced none: the result is then "failed" with no rows). ``backend``
    is the driver's --backend value; ``prof`` the profile's {"path", "sha256", "version"};
    ``extra`` is merged over the driver's own extra (the floor probe's output goes there, as
    "floor_probe"). The floor's self-check (limits.floor_check) is recorded in it as
    transfer_floor.self_check."""
    name = next(b for b in v.backends if b.lower() == backend)
    r: dict = {
        "schema": SCHEMA,
        "variant": v.name,
        "status": status,
        "reason": reason,
        "machine": machine_info,
        "build": build,
        "git_commit": commit,
        "profile": {"path": prof["path"], "sha256": prof["sha256"], "version": prof["version"]},
        "backend": name,
    }
    # The run's facts: the driver's, or where it wrote nothing, the runner's (``extra``).
    facts = {**((doc.get("extra") or {}) if doc is not None else {}), **(extra or {})}
    if facts.get("vulkan_transfer_queue"):
        # GGML's Vulkan transfers on their own queue: their own configuration.
        r["backend"] += TRANSFER_QUEUE
    if facts.get("layout") == "areas":
        # Per-graph I/O areas (coalesced copies, docs/contract.md rule 10): their own configuration.
        r["backend"] += AREAS
    if facts.get("graph_order") == "levels":
        # Another issue order of the same graphs (its own mandatory waits): its own configuration.
        r["backend"] += LEVELS
    if facts.get("transfer_only"):
        # A replay without compute is its own configuration in the table.
        r["backend"] += TRANSFER_ONLY
    if doc is not None:
        r.update({"device": doc["device"] or name, "caps": doc["caps"], "protocol": doc["protocol"],
                  "rows": doc["rows"]})
        x = dict(doc.get("extra") or {})
    else:
        r["rows"] = []
        x = {}
    x.update(extra or {})
    check = floor_check(x.get("transfer_floor"))
    if check is not None:
        x["transfer_floor"] = {**x["transfer_floor"], "self_check": check.as_dict()}
    r["extra"] = x
    if status == "failed" and not reason:
        raise ValueError("a failed result needs a reason")
    return r


def base_backend(result: dict) -> str:
    """The backend's name without the transfer-only, levels, areas and transfer-queue marks."""
    name = str(result.get("backend") or "-")
    for mark in (TRANSFER_ONLY, LEVELS, AREAS, TRANSFER_QUEUE):
        name = name[: -len(mark)] if name.endswith(mark) else name
    return name


def key(result: dict) -> tuple[str, str, str]:
    """(variant, backend, device) of a result; "-" for what a failed result does not record."""
    return (result["variant"], result.get("backend") or "-", result.get("device") or "-")


def hostname(result: dict) -> str | None:
    """The machine a result was measured on: its hostname, with its GPU (nvidia-smi's first
    name) or else its CPU, since hostnames alone repeat across machines (e.g. "vm")."""
    m = result.get("machine")
    if not isinstance(m, dict) or not m.get("hostname"):
        return None
    gpu = (m.get("gpu") or "").splitlines()
    what = gpu[0].split(",")[0].strip() if gpu else (m.get("cpu") or "")
    return f"{m['hostname']} ({what})" if what else m["hostname"]


def profile_sha256(result: dict) -> str | None:
    p = result.get("profile")
    return p.get("sha256") if isinstance(p, dict) else None
