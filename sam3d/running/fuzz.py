"""`python -m sam3d fuzz`: the libFuzzer target of the C API (native/fuzz), run by hand or in CI.

The target runs in the one variant that declares the fuzz role (core/variants.py). It
runs over the seed corpus and the findings in native/fuzz/ (read only); the inputs libFuzzer
adds go to build/fuzz/corpus/, a failing input to build/fuzz/artifacts/. The normal suite
replays every kept input (CTest Fuzz.capi_kept_inputs), then runs the same target for a fixed
number of inputs (Fuzz.capi_2000_runs).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ..core import paths, variants
from ..core.errors import Sam3dError
from ..tools import ctest

SEEDS = (Path("native") / "fuzz" / "corpus", Path("native") / "fuzz" / "findings")


class FuzzError(Sam3dError):
    pass


def variant() -> variants.Variant:
    """The variant the fuzz target runs in (its role), which builds it."""
    vs = variants.with_role(variants.FUZZ)
    if len(vs) != 1:
        raise FuzzError(f"{len(vs)} variants declare the fuzz role in sam3d/core/variants.py (want 1)")
    return vs[0]


def executable(v: variants.Variant) -> Path:
    return ctest.build_folder(v) / "fuzz" / "sam3d_fuzz_capi"


def work_dir() -> Path:
    return paths.root() / "build" / "fuzz"


def command(exe: Path, work: Path, max_total_time: int | None, runs: int | None) -> list[str]:
    seeds = [str(paths.root() / s) for s in SEEDS]
    budget = [f"-max_total_time={max_total_time}"] if max_total_time is not None else []
    budget += [f"-runs={runs}"] if runs is not None else []
    # The flags of native/fuzz/run_fuzzer.cmake (the normal suite's run), which says why.
    return [
        str(exe),
        str(work / "corpus"),
        *seeds,
        *budget,
        "-max_len=512",
        "-timeout=30",
        "-entropic=0",
        "-print_final_stats=1",
        f"-artifact_prefix={work / 'artifacts'}/",
    ]


def run(max_total_time: int | None, runs: int | None) -> int:
    """Runs the built target with the variant's sanitizer environment; returns its exit status."""
    v = variant()
    exe = executable(v)
    if not exe.is_file():
        raise FuzzError(f"{exe} missing: build the variant first (python -m sam3d build {v.name})")
    work = work_dir()
    shutil.rmtree(work, ignore_errors=True)
    (work / "corpus").mkdir(parents=True)
    (work / "artifacts").mkdir()
    cmd = command(exe, work, max_total_time, runs)
    print(f"$ {' '.join(cmd)}", flush=True)
    return subprocess.run(cmd, env=ctest.test_env(v), cwd=work, check=False).returncode
