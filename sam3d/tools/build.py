"""The build step every command shares: prerequisites, then `conan build` per variant."""

from __future__ import annotations

import time

from ..core import host, paths
from ..core.variants import Variant
from . import conan, ctest, system


def prepare(vs: list[Variant]) -> None:
    """System packages, the project's Conan home and profiles (each build exports the GGML recipe)."""
    system.ensure_packages(vs)
    conan.ensure_home(vs)


def log_path(v: Variant):
    return paths.logs_dir() / f"build-{v.name}.log"


def build_variants(vs: list[Variant]) -> list[tuple[str, str]]:
    """Builds each variant (GGML only when its Conan binary is missing; the core and the driver
    incrementally), printing "[i/n] variant: ..." progress; returns (variant, failure) pairs."""
    prepare(vs)
    failed = []
    for i, v in enumerate(vs, 1):
        log = log_path(v)
        log.unlink(missing_ok=True)
        t0 = time.monotonic()
        print(f"[{i}/{len(vs)}] {v.name}: building GGML (if missing) and the core ... (log: {log})", flush=True)
        try:
            conan.build(v, log=log)
            ctest.write_presets(v)
            print(f"[{i}/{len(vs)}] {v.name}: built in {time.monotonic() - t0:.1f} s", flush=True)
        except conan.ConanError as e:
            print(f"[{i}/{len(vs)}] {v.name}: FAILED: {e}", flush=True)
            print(indented(host.log_tail(log, 30)), flush=True)
            failed.append((v.name, str(e)))
    return failed


def indented(lines: list[str]) -> str:
    """Log lines as the console shows them under a failed step."""
    return "\n".join("    " + line for line in lines)
