"""Writing and reading the files a run leaves: one atomic writer, one JSON Schema check, and
the one rule for file names that a file from another machine names."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema

from .errors import Sam3dError


def check_schema(doc: Any, schema: Mapping, source: str, error: type[Sam3dError] = Sam3dError,
                 hint: str = "") -> Any:
    """``doc`` unchanged when it follows the JSON Schema ``schema``; otherwise ``error`` naming
    ``source`` and the field (a dotted path such as rows[0].samples[3].wall_ms) of the most
    relevant problem jsonschema finds, then ``hint``."""
    problem = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    if problem is None:
        return doc
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in problem.absolute_path).lstrip(".")
    if problem.validator == "required":
        missing = next(k for k in problem.validator_value if k not in problem.instance)
        field, text = (f"{field}.{missing}" if field else missing), "missing"
    else:
        text = problem.message if len(problem.message) <= 160 else problem.message[:157] + "..."
        if isinstance(problem.schema, Mapping) and problem.schema.get("description"):
            text += f" (expected {problem.schema['description']})"
    raise error(f"{source}: field {field or '(top level)'!r}: {text}{hint}")


def read_json(path: Path, error: type[Sam3dError] = Sam3dError) -> Any:
    """The JSON document in ``path``; ``error`` naming the file (and line) when it cannot be
    read or parsed."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); "
                    "a truncated file means the run that wrote it did not finish") from None


def inside(folder: Path, name: Any, field: str, error: type[Sam3dError] = Sam3dError) -> Path:
    """folder/name for a file name that a file from another machine gives (``field`` names
    where): one plain name in that folder, never a path (no '/', no '..', not hidden)."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or "\0" in name or name.startswith("."):
        raise error(f"{folder}: {field} is {name!r}: expected the name of a file in that folder "
                    "(no '/', '..' or leading '.')")
    return folder / name


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """Writes ``text`` (UTF-8) to ``path`` through a temporary file in the same folder, flushed,
    fsynced and renamed over it, so a reader never sees a partial file. Creates the parent
    folders; the file's mode is 0644. Returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def write_if_changed(path: Path, text: str) -> None:
    """write_atomic, skipped when the file already holds exactly ``text`` (keeps its mtime)."""
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        write_atomic(path, text)
