"""The benchmark result file: one JSON file per (variant, backend, device) run.

Schema "sam3d-bench-result/1" (all times in milliseconds, sizes in bytes):

{
  "schema": "sam3d-bench-result/1",
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
  "extra": {}                           # optional diagnostics: driver overhead, peak RSS, floor...
}

Rules the readers enforce (validate()): an "ok" result has every field above except "extra",
at least one row, each batching mode at most once, and exactly protocol.images samples per
row, each with a distinct "image" index (on and off pair by that index). A "failed" result
needs only schema, variant, status and a non-empty reason; whatever else it records is checked
too. Readers: load(), load_many(), result_files(); writers: wrap() (a result from the driver's
document), write() (atomic). The table: sam3d/results/table.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..core.errors import Sam3dError
from ..core.files import write_atomic
from ..core.variants import Variant

SCHEMA = "sam3d-bench-result/1"

STATUSES = ("ok", "failed")
# Row names ("batching"), as the driver's mode table (`sam3d_bench --list-modes`, "row") names
# them: "off" (ggml_backend_tensor_set/compute/get), "on" (the staged batch of the spec's
# design), and the beyond-the-spec rows of `sam3d_bench --modes`: "zerocopy" (callers fill
# pinned slots) and "queued" (calls share synchronizations).
BATCHING = ("off", "on", "zerocopy", "queued")
# Rows every driver run has: each row is compared with "off", the others also with "on".
REQUIRED_ROWS = ("off", "on")
FALLBACK_REASONS = ("no_async_caps", "foreign_host_buffer", "oversized", "pinned_unavailable")
COUNTERS = ("async_uploads", "sync_uploads", "async_downloads", "sync_downloads",
            "bytes_uploaded", "bytes_downloaded", "pinned_batches")
SAMPLE_TIMES = ("wall_ms", "enqueue_ms", "synchronize_ms", "copy_ms", "sync_path_ms")
CAPS = ("async", "host_buffer", "buffer_from_host_ptr", "events")


class ResultError(Sam3dError, ValueError):
    """A result file (or dict) that does not follow the schema; the message names the file and
    the field."""


class _Checker:
    def __init__(self, source: str):
        self.source = source

    def fail(self, field: str, problem: str) -> None:
        raise ResultError(f"{self.source}: field {field!r}: {problem} "
                          f"(schema {SCHEMA}: see the docstring of sam3d/results/schema.py)")

    def get(self, obj: Mapping, key: str, where: str) -> Any:
        field = f"{where}.{key}" if where else key
        if key not in obj:
            self.fail(field, "missing")
        return obj[key]

    def typed(self, obj: Mapping, key: str, where: str, kinds: tuple, what: str,
              optional: bool = False) -> Any:
        field = f"{where}.{key}" if where else key
        if optional and obj.get(key) is None:
            return None
        v = self.get(obj, key, where)
        # bool is an int subclass: never accept it where a number is meant, or vice versa.
        ok = isinstance(v, kinds) and not (isinstance(v, bool) and bool not in kinds)
        if not ok:
            self.fail(field, f"expected {what}, got {type(v).__name__} {v!r:.60}")
        return v

    def string(self, obj, key, where, optional=False, nonempty=True):
        v = self.typed(obj, key, where, (str,), "a string", optional)
        if v is not None and nonempty and not v.strip():
            self.fail(f"{where}.{key}" if where else key, "is empty")
        return v

    def integer(self, obj, key, where, minimum=0):
        v = self.typed(obj, key, where, (int,), "an integer")
        if v < minimum:
            self.fail(f"{where}.{key}" if where else key, f"must be >= {minimum}, got {v}")
        return v

    def number(self, obj, key, where):
        v = self.typed(obj, key, where, (int, float), "a number (ms)")
        if not math.isfinite(v) or v < 0:
            self.fail(f"{where}.{key}" if where else key, f"must be a finite number >= 0, got {v!r}")
        return v

    def mapping(self, obj, key, where, optional=False):
        return self.typed(obj, key, where, (dict,), "an object", optional)

    def listing(self, obj, key, where):
        return self.typed(obj, key, where, (list,), "a list")

    def objects(self, items: list, where: str):
        """(field name, item) of each entry of a list that must hold objects."""
        for i, item in enumerate(items):
            w = f"{where}[{i}]"
            if not isinstance(item, dict):
                self.fail(w, f"expected an object, got {type(item).__name__}")
            yield w, item


def validate(result: Any, source: str = "<result>") -> dict:
    """Checks ``result`` against schema sam3d-bench-result/1 and returns it unchanged.

    An "ok" result needs every field of the schema (except "extra"), at least one row, no
    batching mode twice, and each row's sample count equal to protocol.images. A "failed"
    result needs schema, variant, status and a non-empty reason; its other fields are checked
    only when present (a build failure has no device). Raises ResultError naming ``source``
    and the first missing or bad field.
    """
    c = _Checker(source)
    if not isinstance(result, dict):
        raise ResultError(f"{source}: expected a JSON object, got {type(result).__name__}")
    schema = c.get(result, "schema", "")
    if schema != SCHEMA:
        c.fail("schema", f"is {schema!r}, expected {SCHEMA!r}; this reader understands only that version")
    c.string(result, "variant", "")
    status = c.get(result, "status", "")
    if status not in STATUSES:
        c.fail("status", f"is {status!r}, expected one of {', '.join(STATUSES)}")
    failed = status == "failed"
    if failed:
        c.string(result, "reason", "")
    else:
        c.string(result, "reason", "", optional=True, nonempty=False)

    def need(key: str) -> bool:
        return not failed or result.get(key) is not None

    if need("machine"):
        m = c.mapping(result, "machine", "")
        c.string(m, "hostname", "machine")
        for k in ("cpu", "os", "glibc"):
            c.string(m, k, "machine", optional=True, nonempty=False)
    if need("build"):
        b = c.mapping(result, "build", "")
        flags = c.listing(b, "compile_flags", "build")
        for i, f in enumerate(flags):
            if not isinstance(f, str):
                c.fail(f"build.compile_flags[{i}]", f"expected a string, got {f!r:.60}")
        c.string(b, "build_type", "build")
        c.string(b, "sanitizer", "build", optional=True)
        c.string(b, "ggml_version", "build")
    if need("git_commit"):
        c.string(result, "git_commit", "")
    if need("profile"):
        p = c.mapping(result, "profile", "")
        c.string(p, "path", "profile")
        sha = c.string(p, "sha256", "profile")
        if len(sha) != 64 or any(ch not in "0123456789abcdef" for ch in sha):
            c.fail("profile.sha256", f"expected 64 lower-case hex digits, got {sha!r:.80}")
        c.integer(p, "version", "profile")
    if need("backend"):
        c.string(result, "backend", "")
    if need("device"):
        c.string(result, "device", "")
    if need("caps"):
        caps = c.mapping(result, "caps", "")
        for k in CAPS:
            c.typed(caps, k, "caps", (bool,), "true or false")
    images = None
    if need("protocol"):
        pr = c.mapping(result, "protocol", "")
        c.integer(pr, "warmups", "protocol")
        images = c.integer(pr, "images", "protocol", minimum=1 if not failed else 0)
    if need("rows"):
        rows = c.listing(result, "rows", "")
        if not failed and not rows:
            c.fail("rows", "is empty; an ok result has at least one batching mode")
        seen = set()
        for w, row in c.objects(rows, "rows"):
            mode = c.get(row, "batching", w)
            if mode not in BATCHING:
                c.fail(f"{w}.batching", f"is {mode!r}, expected one of {', '.join(BATCHING)}")
            if mode in seen:
                c.fail(f"{w}.batching", f"{mode!r} appears twice; one row per batching mode")
            seen.add(mode)
            samples = c.listing(row, "samples", w)
            if not failed and not samples:
                c.fail(f"{w}.samples", "is empty; an ok result times at least one image")
            if not failed and images is not None and len(samples) != images:
                c.fail(f"{w}.samples", f"has {len(samples)} entries but protocol.images is {images}")
            imgs = set()
            for ws, s in c.objects(samples, f"{w}.samples"):
                img = c.integer(s, "image", ws)
                if img in imgs:
                    c.fail(f"{ws}.image", f"image {img} appears twice in {w}")
                imgs.add(img)
                for k in SAMPLE_TIMES:
                    c.number(s, k, ws)
                c.string(s, "outputs_sha256", ws)
            cnt = c.mapping(row, "counters", w)
            for k in COUNTERS:
                c.integer(cnt, k, f"{w}.counters")
            fb = c.mapping(cnt, "fallbacks", f"{w}.counters")
            for k in FALLBACK_REASONS:
                c.integer(fb, k, f"{w}.counters.fallbacks")
            for k in fb:
                if k not in FALLBACK_REASONS:
                    c.integer(fb, k, f"{w}.counters.fallbacks")
    if result.get("extra") is not None:
        c.mapping(result, "extra", "")
    return result


def _parse(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ResultError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ResultError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); "
                          "a truncated file means the run that wrote it did not finish") from None


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
    "schema" is sam3d-bench-result/1. Other JSON files (e.g. compile_commands.json) are
    skipped, but a file that mentions the schema and does not parse is an error (a truncated
    result must not vanish silently): ResultError names it."""
    found = []
    for f in sorted(Path(folder).rglob("*.json")):
        if not f.is_file():
            continue
        try:
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if SCHEMA not in text:
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ResultError(f"{f}: mentions {SCHEMA} but is not valid JSON (line {e.lineno}: "
                              f"{e.msg}); delete or re-run it") from None
        if isinstance(data, dict) and data.get("schema") == SCHEMA:
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
                raise ResultError(f"{p}: folder holds no {SCHEMA} result files (*.json, searched recursively)")
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
    never see a partial file. Creates the parent folders. Returns the path."""
    validate(result, str(path))
    return write_atomic(path, json.dumps(result, indent=1) + "\n")


def wrap(v: Variant, backend: str, doc: dict | None, *, status: str, reason: str | None, prof: dict,
         machine_info: dict, commit: str, build: dict | None, extra: dict | None = None) -> dict:
    """A result of this schema from the driver's output document (schema sam3d-bench-driver/1;
    None when the driver produced none: the result is then "failed" with no rows). ``backend``
    is the driver's --backend value; ``prof`` the profile's {"path", "sha256", "version"};
    ``extra`` is merged over the driver's own extra."""
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
    if doc is not None and (doc.get("extra") or {}).get("transfer_only"):
        # A replay without compute is its own configuration in the table.
        r["backend"] += " (transfer-only)"
    if doc is not None:
        r.update({"device": doc["device"] or name, "caps": doc["caps"], "protocol": doc["protocol"],
                  "rows": doc["rows"]})
        x = dict(doc.get("extra") or {})
    else:
        r["rows"] = []
        x = {}
    x.update(extra or {})
    r["extra"] = x
    if status == "failed" and not reason:
        raise ValueError("a failed result needs a reason")
    return r


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
