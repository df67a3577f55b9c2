"""`python -m sam3d bench`: the benchmark in every variant and backend that can run here.

For each variant (sam3d/variants.py) the runner builds what is missing, then runs the driver
build/<variant>/<build_type>/bench/sam3d_bench (native/bench/sam3d_bench.cpp) once per backend:
CPU always, Vulkan in Vulkan variants (a real GPU, or Mesa's lavapipe through
GGML_VK_VISIBLE_DEVICES=0, see ctest.test_env). The driver replays the committed transfer
profile (sam3d/profile.py) with batching on and off in one process, interleaved per image.

Environment flag policy (../shared/design.md): the driver runs in the variant's test
environment (sanitizer options, Vulkan device selection); any inherited
SAM3D_BATCHED_TRANSFERS is removed and the runner sets SAM3D_BATCHED_TRANSFERS=1 itself, for
the benchmark's "on" runs (the driver's "off" session ignores the variable).

Each run writes generated/diagnostics/<run-name>/: one result file per (variant, backend) in
schema "sam3d-bench-result/1" (sam3d/results.py), logs/ (driver stderr, build logs), and then
the table and evidence through sam3d/report.py. A variant that fails to build or run keeps a
result file with status "failed" and the reason; a run with any failure is kept, marked as not
accepted evidence. Times are milliseconds, sizes bytes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from . import conan, ctest, paths, profile, results, variants

FLAG = "SAM3D_BATCHED_TRANSFERS"
DRIVER = "sam3d_bench"
GGML_VERSION = conan.GGML_REF.split("/")[1]
# Per image, over the 82 batched graphs (design.md, "The SAM3D transfer profile").
BATCHED_GRAPHS = profile.GRAPHS - profile.SYNC_GRAPHS
# A driver run may take long in sanitizer variants on lavapipe; beyond this it is a failure.
DRIVER_TIMEOUT_S = 3600


class BenchError(RuntimeError):
    pass


# sam3d_bench --modes names, in the driver's table order ("staged" writes the row "on").
DRIVER_MODES = ("staged", "off", "zerocopy", "queued")


def parse_modes(text: str) -> str:
    """Checks a sam3d_bench --modes value before anything is built or run, by the driver's own
    rule: comma-separated names from DRIVER_MODES, off and staged among them (every row is
    compared with off, zerocopy and queued also with staged). Returns it unchanged; ValueError
    names what is wrong."""
    names = text.split(",")
    unknown = [n for n in names if n not in DRIVER_MODES]
    if unknown:
        raise ValueError(f"--modes {text!r}: unknown mode {unknown[0]!r} (use {', '.join(DRIVER_MODES)})")
    if not {"off", "staged"} <= set(names):
        raise ValueError(f"--modes {text!r}: off and staged are required (every row is compared with off, "
                         "the zerocopy and queued rows also with staged)")
    return text


# ---------------------------------------------------------------- environment
def driver_env(v: variants.Variant, base: dict[str, str] | None = None) -> dict[str, str]:
    """The driver's environment: the variant's test environment (ctest.test_env), any inherited
    SAM3D_BATCHED_TRANSFERS removed, then SAM3D_BATCHED_TRANSFERS=1 for the "on" session."""
    env = ctest.test_env(v, base)
    env.pop(FLAG, None)
    env[FLAG] = "1"
    return env


def backends(v: variants.Variant) -> list[str]:
    """Driver --backend values for a variant: cpu, plus vulkan in Vulkan variants."""
    return ["cpu", "vulkan"] if v.vulkan else ["cpu"]


BACKEND_NAMES = {"cpu": "CPU", "vulkan": "Vulkan"}


def driver_path(v: variants.Variant) -> Path:
    return paths.build_dir(v.name, v.build_type) / "bench" / DRIVER


# ---------------------------------------------------------------- provenance
def machine() -> dict[str, str]:
    """Host facts recorded in every result: hostname, CPU, OS, glibc (and GPU, when nvidia-smi
    answers). The bundle's runner (stdlib only) records the same on the GPU machine."""
    from .bundle_run import machine as host_facts

    return host_facts()


def git_commit(root: Path | None = None) -> tuple[str, bool]:
    """(HEAD commit, whether tracked files differ from it); ("unknown", False) outside git."""
    root = root or paths.root()
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip() != ""
        return head, dirty
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def glslc_version() -> str | None:
    exe = shutil.which("glslc")
    if exe is None:
        return None
    r = subprocess.run([exe, "--version"], capture_output=True, text=True)
    first = (r.stdout or r.stderr).strip().splitlines()
    return first[0].strip() if first else None


# Compile-line options that say how code is built (not where files are).
_KEEP = re.compile(r"^-(O.*|g.*|f.*|m.*|std=.*|DNDEBUG|U.*)$")


def flags_of(command: list[str]) -> list[str]:
    """The optimisation/debug/instrumentation flags of one compile line, in order, deduplicated."""
    out: list[str] = []
    for a in command:
        if _KEEP.match(a) and a not in out:
            out.append(a)
    return out


def compile_commands_flags(v: variants.Variant) -> dict[str, list[str]]:
    """{source file (relative to native/): flags} for the core and the driver, read from
    build/<variant>/<build_type>/compile_commands.json (what the build really used)."""
    cc = paths.build_dir(v.name, v.build_type) / "compile_commands.json"
    if not cc.is_file():
        raise BenchError(f"{cc} is missing: build the variant first (nox -s build -- {v.name})")
    out: dict[str, list[str]] = {}
    for e in json.loads(cc.read_text()):
        f = e.get("file", "")
        for src in ("src/transfer.cpp", "bench/sam3d_bench.cpp"):
            if f.endswith("native/" + src):
                cmd = e.get("arguments") or shlex.split(e.get("command", ""))
                out[src] = flags_of(cmd)
    if "src/transfer.cpp" not in out:
        raise BenchError(f"{cc} has no entry for native/src/transfer.cpp: rebuild the variant")
    return out


def build_info(v: variants.Variant, glslc: str | None) -> tuple[dict, dict, list[str]]:
    """(the schema's "build" object, extra details, problems). compile_flags are the core's
    flags from compile_commands.json; every flag of the variant must be among them."""
    per_file = compile_commands_flags(v)
    core = per_file["src/transfer.cpp"]
    problems = []
    for src, fl in per_file.items():
        missing = [f for f in v.compile_flags if f not in fl]
        if missing:
            problems.append(f"native/{src} was compiled without the variant's {' '.join(missing)} "
                            f"(compile_commands.json); rebuild: nox -s build -- {v.name}")
    build = {"compile_flags": core, "build_type": v.build_type, "sanitizer": v.sanitizer,
             "ggml_version": GGML_VERSION, "glslc": glslc}
    extra = {"variant_compile_flags": list(v.compile_flags), "compile_commands_flags": per_file,
             "compile_commands": str(paths.build_dir(v.name, v.build_type) / "compile_commands.json")}
    return build, extra, problems


# ---------------------------------------------------------------- result files
def wrap(v: variants.Variant, backend: str, doc: dict | None, *, status: str, reason: str | None,
         prof: dict, machine_info: dict, commit: str, build: dict | None, extra: dict | None = None) -> dict:
    """A "sam3d-bench-result/1" result from the driver's JSON document (None when the driver
    produced none: the result is then "failed" with no rows)."""
    r: dict = {
        "schema": results.SCHEMA,
        "variant": v.name,
        "status": status,
        "reason": reason,
        "machine": machine_info,
        "build": build,
        "git_commit": commit,
        "profile": {"path": prof["path"], "sha256": prof["sha256"], "version": prof["version"]},
        "backend": BACKEND_NAMES[backend],
    }
    if doc is not None and (doc.get("extra") or {}).get("transfer_only"):
        # A replay without compute is its own configuration in the table.
        r["backend"] += " (transfer-only)"
    if doc is not None:
        r.update({
            "device": doc["device"] or BACKEND_NAMES[backend],
            "caps": doc["caps"],
            "protocol": doc["protocol"],
            "rows": doc["rows"],
        })
        x = dict(doc.get("extra") or {})
    else:
        r["rows"] = []
        x = {}
    x.update(extra or {})
    r["extra"] = x
    if status == "failed" and not reason:
        raise ValueError("a failed result needs a reason")
    return r


def check(r: dict) -> list[str]:
    """What is wrong with a driver result, against the profile totals and the core's contract:
    both modes present, bytes equal to the profile's in every row, outputs identical on/off
    per image, the off row all synchronous, the on row batched (199/232 async, 3/1 sync,
    82 pinned batches) unless the session's static fallback applies (then 82 fallbacks of that
    reason, everything synchronous). The driver's optional extra modes ("zerocopy", "queued":
    `sam3d_bench --modes`) are checked like "on": the same bytes and counters, and outputs
    identical to off per image."""
    EXTRA_MODES = ("zerocopy", "queued")  # rows written only with `sam3d_bench --modes ...`
    problems: list[str] = []
    rows = {row["batching"]: row for row in r.get("rows", [])}
    extra_modes = set(rows) - {"on", "off"}
    if not {"on", "off"} <= set(rows) or not extra_modes <= set(EXTRA_MODES):
        return [f"expected rows for batching on and off (and optionally {', '.join(EXTRA_MODES)}), "
                f"got {sorted(rows)}"]
    x = r.get("extra", {})
    problems += [f"driver: {p}" for p in x.get("problems", [])]
    for mode, row in rows.items():
        c = row["counters"]
        if c["bytes_uploaded"] != profile.UPLOAD_BYTES or c["bytes_downloaded"] != profile.DOWNLOAD_BYTES:
            problems.append(f"batching {mode}: {c['bytes_uploaded']:,} bytes up / {c['bytes_downloaded']:,} down "
                            f"per image; the profile moves {profile.UPLOAD_BYTES:,} / {profile.DOWNLOAD_BYTES:,}")
    on = {s["image"]: s["outputs_sha256"] for s in rows["on"]["samples"]}
    off = {s["image"]: s["outputs_sha256"] for s in rows["off"]["samples"]}
    differ = sorted(i for i in on.keys() | off.keys() if on.get(i) != off.get(i))
    if differ:
        problems.append(f"outputs differ between batching on and off for images {differ}")
    for mode in (m for m in EXTRA_MODES if m in rows):
        got = {s["image"]: s["outputs_sha256"] for s in rows[mode]["samples"]}
        differ = sorted(i for i in got.keys() | off.keys() if got.get(i) != off.get(i))
        if differ:
            problems.append(f"outputs differ between batching {mode} and off for images {differ}")

    def expect(mode: str, want: dict) -> None:
        c = rows[mode]["counters"]
        got = {k: (c["fallbacks"].get(k[10:], 0) if k.startswith("fallbacks.") else c[k]) for k in want}
        bad = [f"{k} {got[k]} (expected {want[k]})" for k in want if got[k] != want[k]]
        if bad:
            problems.append(f"batching {mode} per image: " + ", ".join(bad))

    no_fallbacks = {f"fallbacks.{k}": 0 for k in results.FALLBACK_REASONS}
    expect("off", {"async_uploads": 0, "async_downloads": 0, "sync_uploads": profile.UPLOADS,
                   "sync_downloads": profile.DOWNLOADS, "pinned_batches": 0, **no_fallbacks})
    for mode in ["on"] + [m for m in EXTRA_MODES if m in rows]:
        static = x.get("modes", {}).get(mode, {}).get("static_fallback", "none")
        if static == "none":
            expect(mode, {"async_uploads": profile.ASYNC_UPLOADS, "async_downloads": profile.ASYNC_DOWNLOADS,
                          "sync_uploads": profile.SYNC_UPLOADS, "sync_downloads": profile.SYNC_DOWNLOADS,
                          "pinned_batches": BATCHED_GRAPHS, **no_fallbacks})
        else:
            want = {"async_uploads": 0, "async_downloads": 0, "sync_uploads": profile.UPLOADS,
                    "sync_downloads": profile.DOWNLOADS, "pinned_batches": 0, **no_fallbacks}
            want[f"fallbacks.{static}"] = BATCHED_GRAPHS
            expect(mode, want)
    return problems


def write_result(path: Path, r: dict) -> Path:
    """Validates (sam3d/results.py, when it has validate()) and writes atomically."""
    validate = getattr(results, "validate", None)
    if validate is not None:
        validate(r, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(r, indent=1) + "\n")
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------- running
def _tail(path: Path, n: int = 1) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def _error_line(log: Path) -> str:
    """The most telling line of a driver log: its own error, a sanitizer summary, else the last line."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for pat in ("sam3d_bench: error:", "SUMMARY:", "runtime error:", "CHECK FAILED", "GGML_ASSERT"):
        hits = [ln.strip() for ln in lines if pat in ln]
        if hits:
            return hits[0] if pat != "CHECK FAILED" else "; ".join(hits)
    return _tail(log)


def run_driver(v: variants.Variant, backend: str, out: Path, log: Path, *, images: int, warmups: int,
               prof_path: Path, env: dict[str, str], driver_args: list[str] = ()) -> tuple[int, float]:
    """Runs the driver; its stderr (progress) goes to `log` and, per line, to a progress callback.
    Returns (exit status, wall seconds)."""
    cmd = [str(driver_path(v)), "--profile", str(prof_path), "--backend", backend, "--warmups", str(warmups),
           "--images", str(images), "--out", str(out), *driver_args]
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log, "w") as f:
        f.write(f"$ {FLAG}={env.get(FLAG)} {shlex.join(cmd)}\n")
        f.flush()
        p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.PIPE, text=True, errors="replace")
        assert p.stderr is not None
        last = 0.0
        for line in p.stderr:
            f.write(line)
            # Progress: at most one line every 2 s, plus the driver's summary and errors.
            now = time.monotonic()
            s = line.rstrip()
            if "median" in s or "error" in s or "CHECK" in s or now - last >= 2.0:
                if s.startswith("sam3d_bench:"):
                    print(f"      {s}", flush=True)
                    last = now
        try:
            rc = p.wait(timeout=DRIVER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
            f.write(f"\nsam3d bench: killed after {DRIVER_TIMEOUT_S} s\n")
    return rc, time.monotonic() - t0


def default_run_name() -> str:
    return "bench-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def run_dir_for(name: str) -> Path:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise BenchError(f"run name {name!r}: use letters, digits, '.', '_' and '-' (it names a folder)")
    d = paths.diagnostics_dir() / name
    if d.exists() and any(d.iterdir()):
        raise BenchError(f"{d} already exists: choose another --name or remove that folder")
    return d


def bench(vs: list[variants.Variant], *, name: str | None = None, images: int = 20, warmups: int = 5,
          driver_args: list[str] = (),
          build: bool = True) -> int:
    """Builds, runs and reports; returns the exit status (0 only when every result is ok)."""
    t_start = time.monotonic()
    prof_path = profile.path()
    prof_doc = profile.load(prof_path)  # a broken profile stops the run before anything is built
    prof = {"path": str(profile.RELATIVE_PATH), "sha256": profile.sha256(prof_path), "version": prof_doc["version"]}
    run_name = name or default_run_name()
    rd = run_dir_for(run_name)
    logs = rd / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    print(f"sam3d bench: run {run_name} -> {rd}", flush=True)
    print(f"sam3d bench: profile {prof['path']} v{prof['version']} sha256 {prof['sha256']}", flush=True)

    build_failed: dict[str, str] = {}
    if build:
        from .cli import build_variants  # the CLI owns the build step (Conan, logs, progress)

        # Conan builds GGML only when its binary is missing; the core and the driver are rebuilt
        # incrementally, so a stale driver is never measured.
        build_failed = dict(build_variants(vs))
        for v in vs:
            src = paths.logs_dir() / f"build-{v.name}.log"
            if src.is_file():
                shutil.copyfile(src, logs / src.name)

    info = machine()
    commit, dirty = git_commit()
    glslc = glslc_version() if any(v.vulkan for v in vs) else None
    jobs = [(v, b) for v in vs for b in backends(v)]
    written: list[dict] = []
    for i, (v, b) in enumerate(jobs, 1):
        tag = f"[{i}/{len(jobs)}] {v.name} {BACKEND_NAMES[b]}"
        out = rd / f"{v.name}-{b}.json"
        raw = logs / f"driver-{v.name}-{b}.json"
        log = logs / f"bench-{v.name}-{b}.log"
        common = dict(prof=prof, machine_info=info, commit=commit)
        extra = {"git_dirty": dirty, "run_name": run_name}
        build_obj = None
        reason = None
        if v.name in build_failed:
            reason = f"build failed: {build_failed[v.name]}"
        else:
            try:
                build_obj, bextra, bproblems = build_info(v, glslc if b == "vulkan" else None)
                extra["build"] = bextra
                if bproblems:
                    reason = "; ".join(bproblems)
            except BenchError as e:
                reason = str(e)
            if reason is None and not driver_path(v).is_file():
                reason = f"{driver_path(v)} is missing after the build: see {logs / f'build-{v.name}.log'}"
        if reason is not None:
            print(f"{tag}: FAILED before running: {reason}", flush=True)
            r = wrap(v, b, None, status="failed", reason=reason, build=build_obj, extra=extra, **common)
            write_result(out, r)
            written.append(r)
            continue
        env = driver_env(v)
        print(f"{tag}: {warmups} warm-ups + {images} images per mode, batching on/off interleaved "
              f"(log: {log})", flush=True)
        raw.unlink(missing_ok=True)
        rc, secs = run_driver(v, b, raw, log, images=images, warmups=warmups, prof_path=prof_path, env=env,
                              driver_args=driver_args)
        extra["driver_wall_s"] = round(secs, 3)
        extra["driver_log"] = str(log.relative_to(rd))
        extra["environment"] = {k: env[k] for k in sorted(env) if k.startswith(("SAM3D_", "GGML_", "ASAN_", "UBSAN_",
                                                                                  "LSAN_"))}
        doc = None
        if raw.is_file():
            try:
                doc = json.loads(raw.read_text())
            except json.JSONDecodeError as e:
                reason = f"driver output {raw} is not JSON: {e}"
        if rc != 0 and reason is None:
            reason = f"{DRIVER} exit {rc}: {_error_line(log)}"
        if doc is not None and doc.get("profile", {}).get("sha256") != prof["sha256"]:
            reason = (reason + "; " if reason else "") + "the driver read a different profile file"
        if doc is not None and reason is None:
            problems = check(wrap(v, b, doc, status="ok", reason=None, build=build_obj, extra=extra, **common))
            if problems:
                reason = "; ".join(problems)
        status = "ok" if reason is None else "failed"
        try:
            r = wrap(v, b, doc, status=status, reason=reason, build=build_obj, extra=extra, **common)
            write_result(out, r)
        except (ValueError, KeyError) as e:  # a malformed driver document: keep the reason, drop the rows
            reason = f"{reason + '; ' if reason else ''}driver output does not fit the result schema: {e}"
            r = wrap(v, b, None, status="failed", reason=reason, build=build_obj, extra=extra, **common)
            write_result(out, r)
        written.append(r)
        print(f"{tag}: {status} in {secs:.1f} s{': ' + reason if reason else ''}", flush=True)
        if doc is not None:
            for row in doc["rows"]:
                w = [s["wall_ms"] for s in row["samples"]]
                c = row["counters"]
                fb = ", ".join(f"{k}={n}" for k, n in c["fallbacks"].items() if n) or "no fallbacks"
                print(f"      batching {row['batching']:3}: median {statistics.median(w):9.3f} ms; per image "
                      f"{c['async_uploads']}/{c['async_downloads']} async, {c['sync_uploads']}/{c['sync_downloads']} "
                      f"sync up/down, {c['pinned_batches']} pinned batches, {fb}; "
                      f"{c['bytes_uploaded']:,} B up, {c['bytes_downloaded']:,} B down", flush=True)

    failed = [f"{r['variant']} {r['backend']}: {r['reason']}" for r in written if r["status"] != "ok"]
    accepted = not failed
    reason = None if accepted else f"{len(failed)} of {len(written)} runs failed: " + " / ".join(failed)
    report_evidence(written, rd, accepted, reason)
    print(f"sam3d bench: {len(written) - len(failed)}/{len(written)} runs ok in {time.monotonic() - t_start:.1f} s; "
          f"evidence: {rd}{'' if accepted else ' (NOT ACCEPTED)'}", flush=True)
    return 0 if accepted else 1


def report_evidence(written: list[dict], rd: Path, accepted: bool, reason: str | None) -> None:
    """Prints the table and writes the evidence folder through sam3d/report.py."""
    # --- sam3d/report.py: render(results) -> str, write_evidence(results, run_dir, accepted, reason) -> Path
    try:
        from . import report
        render, write_evidence = report.render, report.write_evidence
    except (ImportError, AttributeError) as e:
        print(f"sam3d bench: sam3d/report.py is not usable ({e}); result files are in {rd}, "
              "no table or evidence written", file=sys.stderr, flush=True)
        if not accepted:
            (rd / "NOT-ACCEPTED").write_text((reason or "failed") + "\n")
        return
    if written:
        print(render(written), flush=True)
    write_evidence(written, rd, accepted, reason)
