"""The build step every command shares: prerequisites, then `conan build` per variant."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from ..core import paths
from ..core.variants import Variant
from ..device import host
from . import ccache, conan, ctest, system


def prepare(vs: list[Variant]) -> None:
    """System packages, the compiler cache, the project's Conan home and profiles (each build
    exports the GGML recipe)."""
    system.ensure_packages(vs)
    ccache.install()
    conan.ensure_home(vs)


def runs_here(vs: list[Variant]) -> tuple[list[Variant], list[Variant]]:
    """(the variants whose every backend runs on this machine, the others): a CUDA variant's CUDA
    backend needs an NVIDIA GPU (GGML's CUDA backend has no CPU fallback); Vulkan always runs,
    on a GPU or on Mesa's lavapipe. build, ctest and bench with no variant named take the first
    list only, so a first run does not spend most of its time building what it cannot run here."""
    gpu = system.has_nvidia_gpu()
    left = [v for v in vs if v.cuda and not gpu]
    return [v for v in vs if v not in left], left


def built_here(v: Variant) -> bool:
    """Whether the variant's build folder holds what a finished build leaves: its CTest suite, the
    core's library and compile_commands.json (the registry's ``built`` says something else: that
    the variant has been built and tested at all, so it may take roles)."""
    d = paths.build_dir(v.name, v.build_type)
    return all((d / f).is_file() for f in ("CTestTestfile.cmake", "libsam3d_core.a", "compile_commands.json"))


def left_out_line(command: str, left: list[Variant]) -> str:
    """The one line a command with no variant named prints for the variants runs_here() left out."""
    return (
        f"sam3d {command}: left out {', '.join(v.name for v in left)}: CUDA needs an NVIDIA GPU and there is "
        f"none here; name it to {command} it anyway (`python -m sam3d {command} {left[0].name}`: its CPU "
        "parts), or pack the GPU variants for a GPU machine (`python -m sam3d bundle`)"
    )


def log_path(v: Variant) -> Path:
    """The log of the variant's last real build (one that compiled something, or failed); a
    build with nothing to do leaves it alone and logs to noop_log_path()."""
    return paths.logs_dir() / f"build-{v.name}.log"


def noop_log_path(v: Variant) -> Path:
    return paths.logs_dir() / f"build-{v.name}.noop.log"


def _seconds_path(v: Variant) -> Path:
    return paths.logs_dir() / f"build-{v.name}.seconds"


# Progress: a line every PROGRESS_S seconds while a build runs; a file compiling for longer
# than SLOW_S is named.
PROGRESS_S = 15.0
SLOW_S = 60.0
_NINJA = re.compile(r"^\[(\d+)/(\d+)\] ")
_SOURCE = re.compile(r"\s-c\s+(\S+\.(?:c|cc|cpp|cxx|comp|glsl))(?:\s|$)")


def _compiling(since: dict[str, float]) -> list[tuple[str, float]]:
    """(source file, seconds) of every compiler this process started (through Conan, CMake and
    ninja) that is running now, longest first; ``since`` keeps when each was first seen."""
    me, parent, cmdline = os.getpid(), {}, {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            cmdline[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    now, found = time.monotonic(), {}
    for pid, cmd in cmdline.items():
        m = _SOURCE.search(cmd)
        if not m:
            continue
        p, hops = pid, 0
        while p not in (me, 0, 1) and hops < 32:
            p, hops = parent.get(p, 0), hops + 1
        if p == me:
            found[m.group(1)] = now - since.setdefault(m.group(1), now)
    for gone in set(since) - set(found):
        del since[gone]
    return sorted(found.items(), key=lambda kv: -kv[1])


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


class _Progress(threading.Thread):
    """Prints "[i/n] variant: 3m10s, [412/1034] ..." every PROGRESS_S seconds while ``log``
    grows: the last ninja [n/m] step, the previous real build's duration when known, and the
    file compiling for longer than SLOW_S (if any)."""

    def __init__(self, tag: str, log: Path, previous: float | None):
        super().__init__(daemon=True)
        self.tag, self.log, self.previous = tag, log, previous
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.step = ""

    def run(self) -> None:
        since: dict[str, float] = {}
        offset = 0
        while not self.stop.wait(PROGRESS_S):
            try:
                with open(self.log, encoding="utf-8", errors="replace") as f:
                    f.seek(offset)
                    text = f.read()
                    offset = f.tell()
            except OSError:
                text = ""
            for line in text.splitlines():
                if _NINJA.match(line):
                    self.step = _NINJA.match(line).group(0).strip()
            slow = [(src, t) for src, t in _compiling(since) if t >= SLOW_S]
            line = f"{self.tag}: {_minutes(time.monotonic() - self.t0)}"
            if self.step:
                line += f", ninja {self.step}"
            if self.previous:
                line += f" (last real build: {_minutes(self.previous)})"
            if slow:
                line += f"; compiling {Path(slow[0][0]).name} for {_minutes(slow[0][1])}"
            print(line, flush=True)


def _did_work(log: Path) -> bool:
    try:
        return any(_NINJA.match(line) for line in log.read_text(errors="replace").splitlines())
    except OSError:
        return False


def build_variants(vs: list[Variant]) -> list[tuple[str, str]]:
    """Builds each variant (GGML only when its Conan binary is missing; the core and the driver
    incrementally), printing "[i/n] variant: ..." progress, a line every PROGRESS_S seconds
    while it builds, and after a real build what the compiler cache answered; returns
    (variant, failure) pairs. A build that compiled nothing keeps the last real build's log
    (log_path) and its duration."""
    prepare(vs)
    failed = []
    for i, v in enumerate(vs, 1):
        tag = f"[{i}/{len(vs)}] {v.name}"
        log, current = log_path(v), paths.logs_dir() / f"build-{v.name}.current.log"
        current.unlink(missing_ok=True)
        try:
            previous = float(_seconds_path(v).read_text())
        except (OSError, ValueError):
            previous = None
        t0 = time.monotonic()
        print(
            f"{tag}: building GGML (if missing) and the core ..."
            + (f" (last real build: {_minutes(previous)})" if previous else ""),
            flush=True,
        )
        compiled = paths.logs_dir() / f"build-{v.name}.ccache-stats"  # ccache's log of this build's compiles
        progress = _Progress(tag, current, previous)
        progress.start()
        error = None
        try:
            with ccache.build_log(compiled):
                conan.build(v, log=current)
            ctest.write_presets(v)
        except conan.ConanError as e:
            error = str(e).replace(str(current), str(log))
        finally:
            progress.stop.set()
            progress.join()
        seconds = time.monotonic() - t0
        kept = log if error or _did_work(current) else noop_log_path(v)
        current.replace(kept)
        if kept == log and not error:
            _seconds_path(v).write_text(f"{seconds:.1f}\n")
        if error:
            print(f"{tag}: FAILED: {error}", flush=True)
            print(indented(host.log_tail(log, 30)), flush=True)
            failed.append((v.name, error))
        else:
            print(
                f"{tag}: built in {seconds:.1f} s"
                + (
                    f" (log: {log}); {ccache.log_stats(compiled).line()}"
                    if kept == log
                    else f" (nothing to compile; the last real build's log: {log})"
                ),
                flush=True,
            )
    return failed


def indented(lines: list[str]) -> str:
    """Log lines as the console shows them under a failed step."""
    return "\n".join("    " + line for line in lines)
