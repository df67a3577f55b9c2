"""Writing and reading the files a run leaves: one atomic writer, one log tail."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
