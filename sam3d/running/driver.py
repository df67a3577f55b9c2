"""The benchmark driver, build/<variant>/<build_type>/bench/sam3d_bench (native/bench/), and the
independent floor probe beside it, sam3d_floor_probe.

Where they are, the environment they run in, the driver's mode table, one run of each, and
reading what they wrote. The driver owns its modes: `sam3d_bench --list-modes [--modes M]`
prints its mode table (schema "sam3d-bench-modes/3") or refuses M with the message it would
give, so the names and rules of --modes are written once, in the driver. Its output document
carries the schema id "sam3d-bench-driver/4", the probe's "sam3d-floor-probe/1", checked here.
Times are milliseconds, sizes bytes.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path

from ..core import paths
from ..core.errors import NotBuilt, Sam3dError
from ..core.variants import Variant
from ..device import host
from ..tools import ctest

NAME = "sam3d_bench"
PROBE = "sam3d_floor_probe"
FLAG = "SAM3D_BATCHED_TRANSFERS"
OUTPUT_SCHEMA = "sam3d-bench-driver/4"
PROBE_SCHEMA = "sam3d-floor-probe/1"
PROBE_TIMEOUT_S = 600
MODES_SCHEMA = "sam3d-bench-modes/3"
# A driver run may take long in sanitizer variants on lavapipe; beyond this it is a failure.
TIMEOUT_S = 3600


class DriverError(Sam3dError):
    """The driver refused its arguments, or wrote something that is not its output schema."""


def path(v: Variant, name: str = NAME) -> Path:
    """The driver (or, with ``name`` PROBE, the floor probe) of a variant's build."""
    return paths.build_dir(v.name, v.build_type) / "bench" / name


def backends(v: Variant) -> list[str]:
    """Driver --backend values for a variant: its backends' names in lower case."""
    return [b.lower() for b in v.backends]


def backend_name(v: Variant, backend: str) -> str:
    """The result's name ("CPU", "Vulkan") of a driver --backend value."""
    return next(b for b in v.backends if b.lower() == backend)


def driver_env(v: Variant, base: dict[str, str] | None = None) -> dict[str, str]:
    """The driver's environment: the variant's test environment (tools/ctest.py), any inherited
    SAM3D_BATCHED_TRANSFERS removed, then SAM3D_BATCHED_TRANSFERS=1 for the "on" session (the
    driver's "off" session ignores the variable)."""
    env = ctest.test_env(v, base)
    env.pop(FLAG, None)
    env[FLAG] = "1"
    return env


def mode_table(vs: list[Variant], modes: str | None = None, duplex: str | None = None) -> list[dict]:
    """The driver's mode table (every mode, or those of the --modes value ``modes``), from the
    first variant in ``vs`` whose driver is built: [{"name", "row", "required", "default",
    "description"}, ...]. DriverError carries the driver's own message when it refuses
    ``modes`` or the --duplex value ``duplex``; NotBuilt when no driver is built."""
    exe = next((path(v) for v in vs if path(v).is_file()), None)
    if exe is None:
        raise NotBuilt(
            f"the benchmark modes come from the driver (`{NAME} --list-modes`), which is not built "
            f"for {', '.join(v.name for v in vs)}: build it first (python -m sam3d build "
            f"{vs[0].name if vs else 'release'}), or leave --modes and --duplex out for the driver's defaults"
        )
    r = subprocess.run(
        [
            str(exe),
            "--list-modes",
            *(["--modes", modes] if modes is not None else []),
            *(["--duplex", duplex] if duplex is not None else []),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if r.returncode != 0:
        said = [ln for ln in r.stderr.splitlines() if ln.startswith(f"{NAME}: error: ")]
        raise DriverError(
            said[0].removeprefix(f"{NAME}: error: ")
            if said
            else f"`{exe} --list-modes` exit {r.returncode}: {r.stderr.strip()[-300:]}"
        )
    return _document(r.stdout, f"`{exe} --list-modes`", MODES_SCHEMA)["modes"]


def _document(text: str, where: str, schema: str) -> dict:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise DriverError(f"{where} is not JSON ({e}): rebuild the driver") from None
    if not isinstance(doc, dict) or doc.get("schema") != schema:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise DriverError(
            f"{where} has schema {got!r}, expected {schema!r}: rebuild the driver, or use "
            "a sam3d checkout of the same version as the driver"
        )
    return doc


def read_output(p: Path, text: str | None = None) -> dict:
    """The driver's output document (schema sam3d-bench-driver/4) in ``p`` (or ``text``, read from
    it already); DriverError otherwise."""
    return _document(p.read_text(errors="replace") if text is None else text, f"driver output {p}", OUTPUT_SCHEMA)


def run_probe(
    v: Variant, backend: str, log: Path, *, upload_bytes: int, download_bytes: int, env: dict[str, str]
) -> tuple[dict | None, str | None]:
    """Runs the floor probe once on device 0 of ``backend`` (the driver's --backend value, a
    GGML backend name in any case) for the profile's bytes; its stdout and stderr go to ``log``.
    Returns (its document, None), or (None, why it has none)."""
    cmd = [
        str(path(v, PROBE)),
        "--backend",
        backend,
        "--device",
        "0",
        "--upload-bytes",
        str(upload_bytes),
        "--download-bytes",
        str(download_bytes),
    ]
    if not Path(cmd[0]).is_file():
        return None, f"{cmd[0]} is missing: build the variant"
    try:
        r = subprocess.run(
            cmd, env=env, capture_output=True, text=True, errors="replace", timeout=PROBE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return None, f"{PROBE} did not finish in {PROBE_TIMEOUT_S} s"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"$ {shlex.join(cmd)}\n{r.stderr}{r.stdout}")
    if r.returncode != 0:
        said = [ln for ln in r.stderr.splitlines() if ln.startswith(f"{PROBE}: error: ")]
        return None, said[0] if said else f"{PROBE} exit {r.returncode}"
    try:
        return _document(r.stdout, f"`{PROBE}` output", PROBE_SCHEMA), None
    except DriverError as e:
        return None, str(e)


def read_probe(p: Path, text: str | None = None) -> dict:
    """The floor probe's document (schema sam3d-floor-probe/1) in ``p`` (or ``text``, read from it
    already); DriverError otherwise."""
    return _document(p.read_text(errors="replace") if text is None else text, f"floor probe output {p}", PROBE_SCHEMA)


def error_line(log: Path) -> str:
    """The most telling line of a driver log: its own error, a sanitizer summary, else the last line."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for pat in ("sam3d_bench: error:", "SUMMARY:", "runtime error:", "CHECK FAILED", "GGML_ASSERT"):
        hits = [ln.strip() for ln in lines if pat in ln]
        if hits:
            return hits[0] if pat != "CHECK FAILED" else "; ".join(hits)
    return " | ".join(host.log_tail(log, 1))


def run(
    v: Variant,
    backend: str,
    out: Path,
    log: Path,
    *,
    images: int,
    warmups: int,
    prof_path: Path,
    env: dict[str, str],
    driver_args: tuple[str, ...] = (),
) -> tuple[int, float]:
    """Runs the driver once; its stderr goes to ``log``, and its progress lines to the console (at
    most one every 2 s, plus its summary and errors). Returns (exit status, wall seconds)."""
    cmd = [
        str(path(v)),
        "--profile",
        str(prof_path),
        "--backend",
        backend,
        "--warmups",
        str(warmups),
        "--images",
        str(images),
        "--out",
        str(out),
        *driver_args,
    ]
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log, "w", encoding="utf-8") as f:
        f.write(f"$ {FLAG}={env.get(FLAG)} {shlex.join(cmd)}\n")
        f.flush()
        with subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.PIPE, text=True, errors="replace") as p:
            last = 0.0
            for line in p.stderr:
                f.write(line)
                now = time.monotonic()
                s = line.rstrip()
                if ("median" in s or "error" in s or "CHECK" in s or now - last >= 2.0) and s.startswith(f"{NAME}:"):
                    print(f"      {s}", flush=True)
                    last = now
            try:
                rc = p.wait(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
                f.write(f"\nsam3d bench: killed after {TIMEOUT_S} s\n")
    return rc, time.monotonic() - t0
