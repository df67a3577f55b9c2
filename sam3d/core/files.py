"""Writing and reading the files a run leaves: one atomic writer for files and one for folders,
one JSON Schema check, and the one rule for file names that a file from another machine names."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import Sam3dError


def check_schema(doc: Any, schema: Mapping, source: str, error: type[Sam3dError] = Sam3dError, hint: str = "") -> Any:
    """``doc`` unchanged when it follows the JSON Schema ``schema``; otherwise ``error`` naming
    ``source`` and the field (a dotted path such as rows[0].samples[3].wall_ms) of the most
    relevant problem jsonschema finds, then ``hint``."""
    import jsonschema  # off the start-up path of every command

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


def read_json(path: Path, error: type[Sam3dError] = Sam3dError, untrusted: bool = False) -> Any:
    """The JSON document in ``path``; ``error`` naming the file (and line) when it cannot be
    read, decoded or parsed. ``untrusted``: a file of another machine's folder (read_untrusted)."""
    if untrusted:
        text = decode(read_untrusted(path, error), str(path), error)
    else:
        try:
            text = decode(path.read_bytes(), str(path), error)
        except OSError as e:
            raise error(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(
            f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); "
            "a truncated file means the run that wrote it did not finish"
        ) from None


# The most a file that another machine's run leaves may hold: the bundle's run.pyz writes files
# well under it (summary.json, driver and probe outputs, GoogleTest reports).
MAX_UNTRUSTED_BYTES = 16 * 2**20


def read_untrusted(path: Path, error: type[Sam3dError] = Sam3dError, limit: int = MAX_UNTRUSTED_BYTES) -> bytes:
    """The bytes of a file that a folder from another machine holds (inside() gives its path):
    opened without following a symbolic link, and only when it is a regular file of at most
    ``limit`` bytes; ``error`` naming the file and what it is otherwise. A path the user typed
    is not read this way: it is taken as typed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise error(
                f"{path}: is a symbolic link: refused (a run's folder holds its own files; copy the file itself there)"
            ) from None
        raise error(f"{path}: cannot read: {e.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise error(f"{path}: not a regular file: refused")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise error(f"{path}: larger than {limit // 2**20} MiB, more than a run writes: refused")
    return data


def decode(data: bytes, source: str, error: type[Sam3dError] = Sam3dError) -> str:
    """``data`` as UTF-8 text; ``error`` naming ``source`` and the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(
            f"{source}: not UTF-8 text (byte {e.start}: {data[e.start : e.start + 1]!r}); "
            "a result or run file is UTF-8 JSON"
        ) from None


def inside(folder: Path, name: Any, field: str, error: type[Sam3dError] = Sam3dError) -> Path:
    """folder/name for a file name that a file from another machine gives (``field`` names
    where): one plain name in that folder, never a path (no '/', no '..', not hidden)."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or "\0" in name or name.startswith("."):
        raise error(
            f"{folder}: {field} is {name!r}: expected the name of a file in that folder (no '/', '..' or leading '.')"
        )
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


# A folder being written (staged_folder) and an old one being replaced, beside the final folder:
# ".<name>.new-<pid>" and ".<name>.old-<pid>". Readers of evidence skip hidden folders.
_SIBLING = r"\.{}\.(new|old)-(\d+)"
# Errors that mean the disk, not the input: "could not be written; nothing was replaced".
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(p: Path) -> None:
    """Removes a folder, file or symbolic link (never what a link points to)."""
    if p.is_symlink() or not p.is_dir():
        p.unlink(missing_ok=True)
    else:
        shutil.rmtree(p, ignore_errors=True)


def _siblings(final: Path) -> list[tuple[str, int, Path]]:
    """(kind "new" or "old", pid, path) of every staged or old folder beside ``final``."""
    pattern = re.compile(_SIBLING.format(re.escape(final.name)))
    found = [(m, p) for p in final.parent.iterdir() if (m := pattern.fullmatch(p.name))]
    return sorted((m.group(1), int(m.group(2)), p) for m, p in found)


def recover_folder(final: Path) -> None:
    """Undoes what a killed staged_folder left beside ``final`` (SIGKILL, a power cut; an
    exception, Ctrl-C or SIGTERM cleans up itself): a staged folder of a process no longer
    running is removed; an old folder moved aside by such a process is moved back when ``final``
    is missing (the kill came between the two renames: the old evidence is restored) and removed
    when ``final`` is there (the kill came after them)."""
    if not final.parent.is_dir():
        return
    for kind, pid, p in _siblings(final):
        if pid != os.getpid() and _pid_alive(pid):
            continue  # another command is writing this folder right now
        if kind == "old" and not final.exists() and not final.is_symlink():
            os.rename(p, final)
        else:
            _remove(p)


def _commit(staged: Path, final: Path, force: bool) -> None:
    """Moves ``staged`` into place as ``final``. Without ``force`` only onto nothing or an empty
    folder (rename(2) refuses a non-empty one: another command of the same name got there
    first); with it, a folder there is renamed aside first and removed once the new one is in
    place, and an exception between the two renames moves it back."""
    if not force:
        try:
            os.rename(staged, final)
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise FileExistsError(errno.EEXIST, "another command wrote it meanwhile", str(final)) from None
            raise
        return
    old = final.parent / f".{final.name}.old-{os.getpid()}"
    try:
        if final.exists():
            os.rename(final, old)
        os.rename(staged, final)
    except BaseException:
        if old.exists() and not final.exists():
            os.rename(old, final)
        raise
    _remove(old)


@contextlib.contextmanager
def staged_folder(
    final: Path,
    force: bool = False,
    error: type[Sam3dError] = Sam3dError,
    on_abort: Callable[[Path], None] | None = None,
) -> Iterator[Path]:
    """Yields an empty folder beside ``final`` (``.<name>.new-<pid>``) to write the whole output
    into; when the block ends normally it becomes ``final`` (_commit: with ``force`` replacing a
    folder there, without it only nothing or an empty folder; a kill between the two renames of a
    replacement is undone by recover_folder, which the next command runs). When the block or the
    move raises (an error, Ctrl-C, SIGTERM through the command line's handler, a full disk),
    ``on_abort`` may keep what it wants of the staged folder elsewhere, the staged folder is
    removed and ``final`` is left as it was; an OSError of the move or of a full or read-only disk
    is reported as ``error`` naming ``final``. The caller checks first whether ``final`` may be
    replaced (paths.new_folder)."""
    staged = final.parent / f".{final.name}.new-{os.getpid()}"
    _remove(staged)
    committing = False
    try:
        staged.mkdir(parents=True)
        yield staged
        committing = True
        _commit(staged, final, force)
    except BaseException as e:
        if on_abort is not None and staged.is_dir():
            with contextlib.suppress(Exception):
                on_abort(staged)
        _remove(staged)
        if isinstance(e, OSError) and (committing or e.errno in _NO_ROOM):
            where = f": {e.filename}" if e.filename and str(e.filename) != str(final) else ""
            raise error(f"{final} could not be written ({e.strerror or e}{where}); nothing was replaced") from None
        raise
