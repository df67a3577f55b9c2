"""Running the benchmark: the driver in every variant and backend that can run here.

For each variant the runner builds what is missing (tools/build.py), then runs the driver
(running/driver.py) once per backend: CPU always, Vulkan in Vulkan variants (a real GPU, or
Mesa's lavapipe through GGML_VK_VISIBLE_DEVICES=0), CUDA in CUDA variants where there is an
NVIDIA GPU (elsewhere it says so and skips: CUDA has no CPU implementation). The driver replays
the committed transfer profile (core/profile.py) with batching on and off in one process,
interleaved per image; the floor probe (sam3d_floor_probe) runs right after it on the same
device, for the same bytes, and its output goes into the run's extra as "floor_probe" (its
failure as "floor_probe_error").

Environment flag policy: the driver runs in the variant's test environment (sanitizer options,
Vulkan device selection); any inherited SAM3D_BATCHED_TRANSFERS is removed and the runner sets
SAM3D_BATCHED_TRANSFERS=1 itself, for the benchmark's "on" runs.

runs() yields one DriverRun per (variant, backend), as each finishes: the driver's document
(or why there is none) and the facts of how it was built. Turning them into result files,
the table and the evidence folder is the reading layer's (sam3d/results/), put together by
the CLI's bench command (sam3d/cli/bench.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..core import paths, profile
from ..core.errors import NotBuilt, Sam3dError
from ..core.variants import Variant
from ..tools import build as building
from ..tools import provenance
from . import driver

# The environment variables a result records (the rest of the environment is not provenance).
RECORDED_ENV = ("SAM3D_", "GGML_", "CUDA_", "ASAN_", "UBSAN_", "LSAN_")


class BenchError(Sam3dError):
    pass


@dataclass(frozen=True)
class Facts:
    """What every result of one run shares: the profile, the machine, the checkout."""

    prof: dict  # {"path", "sha256", "version"} of the profile file
    machine: dict
    commit: str
    dirty: bool


@dataclass
class DriverRun:
    """One driver run: its document (None when it wrote none) and why it failed (None when it
    did not), with the build facts (the result schema's "build") and extra diagnostics."""

    variant: Variant
    backend: str  # the driver's --backend value
    tag: str  # "[i/n] variant Backend", as the console names it
    doc: dict | None = None
    reason: str | None = None
    build: dict | None = None
    extra: dict = field(default_factory=dict)
    ran: bool = False  # whether the driver ran (else the build or its facts failed first)
    seconds: float = 0.0


def facts() -> Facts:
    """Reads and checks the committed profile (a broken one stops the run before anything is
    built) and records the machine and the checkout."""
    prof_path = profile.path()
    prof_doc = profile.load(prof_path)
    commit, dirty = provenance.git_commit()
    return Facts(
        prof={"path": str(profile.RELATIVE_PATH), "sha256": profile.sha256(prof_path), "version": prof_doc["version"]},
        machine=provenance.machine(),
        commit=commit,
        dirty=dirty,
    )


def default_run_name() -> str:
    return "bench-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


def run_dir_for(name: str, force: bool = False) -> Path:
    """generated/diagnostics/<name>/ (paths.new_folder: a safe name, new unless ``force``)."""
    return paths.new_folder(name, "--name", paths.diagnostics_dir(), force, BenchError)


def require_built(vs: list[Variant]) -> None:
    """NotBuilt naming the first variant whose driver, floor probe or compile_commands.json (the
    build facts every result records) is missing, and the command that builds it: a run with
    --no-build refuses before it makes its run folder, as ctest and fuzz do."""
    for v in vs:
        need = (
            driver.path(v),
            driver.path(v, driver.PROBE),
            paths.build_dir(v.name, v.build_type) / "compile_commands.json",
        )
        missing = next((p for p in need if not p.is_file()), None)
        if missing is not None:
            raise NotBuilt(
                f"{v.name} is not built ({missing} is missing): build it first (python -m sam3d build {v.name}), "
                "or leave --no-build out"
            )


def runs(
    vs: list[Variant],
    rd: Path,
    f: Facts,
    *,
    run_name: str,
    images: int,
    warmups: int,
    driver_args: tuple[str, ...] = (),
    build: bool = True,
) -> Iterator[DriverRun]:
    """Builds (unless ``build`` is false), then runs the driver per variant and backend, with its
    raw output and log in rd/logs/ (rd: the staged folder of the run ``run_name``; what the
    results say of the logs is relative to it); yields each DriverRun as it finishes."""
    logs = rd / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    build_failed: dict[str, str] = {}
    if build:
        build_failed = dict(building.build_variants(vs))
        for v in vs:
            src = building.log_path(v)
            if src.is_file():
                shutil.copyfile(src, logs / src.name)
    glslc = provenance.glslc_version() if any(v.vulkan for v in vs) else None
    jobs = [(v, b) for v in vs for b in driver.backends(v)]
    _, no_cuda = building.runs_here(vs)  # their CUDA rows come from the GPU bundle
    for v in no_cuda:
        print(
            f"{v.name} CUDA: skipped, no NVIDIA GPU here (pack it for a GPU machine: python -m sam3d bundle)",
            flush=True,
        )
    jobs = [(v, b) for v, b in jobs if not (b == "cuda" and v in no_cuda)]
    for i, (v, b) in enumerate(jobs, 1):
        run = DriverRun(
            v,
            b,
            f"[{i}/{len(jobs)}] {v.name} {driver.backend_name(v, b)}",
            extra={"git_dirty": f.dirty, "run_name": run_name},
        )
        if v.name in build_failed:
            run.reason = f"build failed: {build_failed[v.name]}"
        else:
            try:
                run.build, run.extra["build"], problems = provenance.build_info(v, glslc if b == "vulkan" else None)
                if problems:
                    run.reason = "; ".join(problems)
            except Sam3dError as e:
                run.reason = str(e)
            if run.reason is None and not driver.path(v).is_file():
                run.reason = f"{driver.path(v)} is missing after the build: see logs/{building.log_path(v).name}"
        if run.reason is not None:
            print(f"{run.tag}: FAILED before running: {run.reason}", flush=True)
            yield run
            continue
        yield _run_driver(run, rd, f, images=images, warmups=warmups, driver_args=driver_args)


def _run_driver(
    run: DriverRun, rd: Path, f: Facts, *, images: int, warmups: int, driver_args: tuple[str, ...]
) -> DriverRun:
    v, b = run.variant, run.backend
    raw = rd / "logs" / f"driver-{v.name}-{b}.json"
    log = rd / "logs" / f"bench-{v.name}-{b}.log"
    env = driver.driver_env(v)
    print(
        f"{run.tag}: {warmups} warm-ups + {images} images per mode, batching on/off interleaved (log: {log})",
        flush=True,
    )
    raw.unlink(missing_ok=True)
    run.ran = True
    rc, run.seconds = driver.run(
        v, b, raw, log, images=images, warmups=warmups, prof_path=profile.path(), env=env, driver_args=driver_args
    )
    run.extra["driver_wall_s"] = round(run.seconds, 3)
    run.extra["driver_log"] = str(log.relative_to(rd))
    run.extra["environment"] = {k: env[k] for k in sorted(env) if k.startswith(RECORDED_ENV)}
    if raw.is_file():
        try:
            run.doc = driver.read_output(raw)
        except driver.DriverError as e:
            run.reason = str(e)
    if rc != 0 and run.reason is None:
        run.reason = f"{driver.NAME} exit {rc}: {driver.error_line(log)}"
    if run.doc is not None and run.doc.get("profile", {}).get("sha256") != f.prof["sha256"]:
        run.reason = (run.reason + "; " if run.reason else "") + "the driver read a different profile file"
    probe, why = driver.run_probe(
        v,
        b,
        rd / "logs" / f"floor-probe-{v.name}-{b}.log",
        env=env,
        upload_bytes=profile.UPLOAD_BYTES,
        download_bytes=profile.DOWNLOAD_BYTES,
    )
    run.extra["floor_probe"] = probe
    if why is not None:
        run.extra["floor_probe_error"] = why
    return run
