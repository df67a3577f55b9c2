#!/usr/bin/env python3
"""Runs the sam3d device bundle on a GPU machine: device tests and the benchmark.

Usage: python3 sam3d-device/run.py --out DIR [--images N] [--warmups N] [VARIANT...]

Needs only python3 (standard library) and the GPU driver: the bundle carries the binaries,
GGML's libraries, the Vulkan loader and sanitizer runtimes. Per variant it runs
  - the device tests (GoogleTest), once plainly and once with GGML_VK_PERF_LOGGER=1
    (GGML's kernel timestamps: a diagnostic, never production latency),
  - the benchmark driver on Vulkan device 0 (--modes, the transfer floor; with
    --transfer-only also a replay without compute), and right after each driver run the
    independent floor probe (sam3d_floor_probe) on the same device for the profile's bytes,
and writes into DIR: summary.json (machine, manifest, test counts, file names), the test
reports (GoogleTest XML, in JUnit form), the driver outputs and logs. Each file stays well under 16 MiB.
Back on the build machine: `python -m sam3d device-import DIR`.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

if __package__:  # imported as part of the sam3d package
    from ..core.host import log_tail, machine, sanitizer_env
else:  # run.py of the bundle: sam3d/core/host.py is packed beside it as host.py
    from host import log_tail, machine, sanitizer_env  # pylint: disable=import-error

HERE = Path(__file__).resolve().parent
# Where NVIDIA's Vulkan ICD manifest may be when the system loader's search path lacks it.
NVIDIA_ICDS = ("/usr/share/vulkan/icd.d/nvidia_icd.json", "/etc/vulkan/icd.d/nvidia_icd.json",
               "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json")


def variant_env(name, sanitizer):
    env = dict(os.environ)
    lib = HERE / name / "lib"
    env["LD_LIBRARY_PATH"] = str(lib) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    if not any(Path(p).is_file() for p in NVIDIA_ICDS[:2]) and Path(NVIDIA_ICDS[2]).is_file():
        env.setdefault("VK_DRIVER_FILES", NVIDIA_ICDS[2])
    env.pop("SAM3D_BATCHED_TRANSFERS", None)
    env.pop("GGML_VK_PERF_LOGGER", None)
    # As in the test environment of the build machine: any report is fatal, except the upstream
    # ones the project's suppression files (packed beside run.py) name.
    env.update(sanitizer_env(sanitizer, HERE))
    return env


def junit_counts(report_path):
    """(passed, failed, skipped) from a JUnit XML report (GoogleTest's XML, ctest --output-junit,
    pytest --junitxml): a <testcase> per case, with <failure> or <error> when it failed and
    <skipped> or result="skipped"/status="notrun" when it did not run."""
    passed = failed = skipped = 0
    for t in ET.parse(report_path).getroot().iter("testcase"):
        if t.find("failure") is not None or t.find("error") is not None:
            failed += 1
        elif t.find("skipped") is not None or t.get("result") == "skipped" or t.get("status") == "notrun":
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def run_tests(name, env, out, perf_logger):
    tag = "device-tests-perf-logger" if perf_logger else "device-tests"
    report = out / f"{name}-{tag}.xml"
    log = out / f"{name}-{tag}.log"
    env = dict(env)
    if perf_logger:
        env["GGML_VK_PERF_LOGGER"] = "1"
    t0 = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.run([str(HERE / name / "bin" / "sam3d_device_tests"), f"--gtest_output=xml:{report}"],
                            env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    try:
        counts = junit_counts(report) if report.is_file() else (0, 0, 0)
    except ET.ParseError:  # a crashed run leaves a partial report: its log says why
        counts = (0, 0, 0)
    # GGML's perf logger prints per-op kernel timestamps; keep their total as a diagnostic.
    kernel_ms = None
    if perf_logger:
        total = 0.0
        for line in log.read_text(errors="replace").splitlines():
            m = re.search(r"Total time: ([0-9.]+) (us|ms)", line)
            if m:
                total += float(m.group(1)) / (1000.0 if m.group(2) == "us" else 1.0)
        kernel_ms = total or None
    return {"exit_code": rc, "passed": counts[0], "failed": counts[1], "skipped": counts[2],
            "seconds": round(time.monotonic() - t0, 1), "report": report.name, "log": log.name,
            "perf_logger": perf_logger, "diagnostic_kernel_timestamp_total_ms": kernel_ms}


def profile_bytes():
    """(upload bytes, download bytes) of the bundle's profile.json: every graph's sizes summed."""
    graphs = json.loads((HERE / "profile.json").read_text())["graphs"]
    return sum(sum(g["uploads"]) for g in graphs), sum(sum(g["downloads"]) for g in graphs)


def run_probe(name, env, out, tag):
    """The floor probe on Vulkan device 0; its JSON (stdout) in DIR/<tag>.floor-probe.json."""
    up, down = profile_bytes()
    dst = out / f"{tag}.floor-probe.json"
    log = out / f"{tag}.floor-probe.log"
    with open(dst, "w") as f, open(log, "w") as err:
        rc = subprocess.run([str(HERE / name / "bin" / "sam3d_floor_probe"), "--backend", "vulkan", "--device", "0",
                             "--upload-bytes", str(up), "--download-bytes", str(down)],
                            env=env, stdout=f, stderr=err).returncode
    r = {"floor_probe": dst.name if rc == 0 else None, "floor_probe_log": log.name}
    if rc != 0:
        r["floor_probe_error"] = f"sam3d_floor_probe exit {rc}: " + " | ".join(log_tail(log, 3))
    return r


def run_bench(name, env, out, images, warmups, modes, transfer_only):
    env = dict(env, SAM3D_BATCHED_TRANSFERS="1")  # the benchmark's "on" session reads it
    tag = f"{name}-vulkan" + ("-transfer-only" if transfer_only else "")
    dst = out / f"{tag}.driver.json"
    log = out / f"{tag}.driver.log"
    t0 = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.run([str(HERE / name / "bin" / "sam3d_bench"), "--profile", str(HERE / "profile.json"),
                             "--backend", "vulkan", "--device", "0", "--images", str(images),
                             "--warmups", str(warmups), "--out", str(dst)]
                            + (["--modes", modes] if modes else []) + (["--transfer-only"] if transfer_only else []),
                            env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    r = {"exit_code": rc, "seconds": round(time.monotonic() - t0, 1), "log": log.name,
         "driver_output": dst.name if dst.is_file() else None}
    if rc != 0:
        r["error"] = f"sam3d_bench exit {rc}: " + " | ".join(log_tail(log, 3))
    r.update(run_probe(name, env, out, tag))
    return r


def main():
    manifest = json.loads((HERE / "manifest.json").read_text())
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--images", type=int, default=20)
    p.add_argument("--warmups", type=int, default=5)
    p.add_argument("--skip-tests", action="store_true")
    p.add_argument("--modes", help="benchmark modes (sam3d_bench --modes; default: the driver's default modes)")
    p.add_argument("--transfer-only", action="store_true",
                   help="also replay the transfers without compute (ratios to the transfer floor)")
    p.add_argument("variants", nargs="*", help=f"of {', '.join(manifest['variants'])} (default: all)")
    a = p.parse_args()
    names = a.variants or list(manifest["variants"])
    unknown = [n for n in names if n not in manifest["variants"]]
    if unknown:
        sys.exit(f"run.py: unknown variant(s) {unknown}; this bundle has {', '.join(manifest['variants'])}")
    a.out.mkdir(parents=True, exist_ok=True)
    summary = {"machine": machine(), "manifest": manifest, "variants": {}}
    ok = True
    for i, name in enumerate(names, 1):
        env = variant_env(name, manifest["variants"][name]["sanitizer"])
        v = {}
        if not a.skip_tests:
            for perf in (False, True):
                print(f"[{i}/{len(names)}] {name}: device tests{' (GGML_VK_PERF_LOGGER=1)' if perf else ''}", flush=True)
                t = run_tests(name, env, a.out, perf)
                print(f"    {t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped ({t['seconds']} s)", flush=True)
                v.setdefault("device_tests", {})["perf_logger" if perf else "plain"] = t
                # On the GPU machine every case must run: all skipped means no GPU was found.
                ok &= t["exit_code"] == 0 and t["failed"] == 0 and t["passed"] > 0
        v["bench"] = []
        for transfer_only in (False, True) if a.transfer_only else (False,):
            what = "transfer-only replay" if transfer_only else "benchmark"
            print(f"[{i}/{len(names)}] {name}: {what} ({a.modes or 'default modes'}; {a.warmups} warm-ups, "
                  f"{a.images} images)",
                  flush=True)
            b = run_bench(name, env, a.out, a.images, a.warmups, a.modes, transfer_only)
            print(f"    exit {b['exit_code']} ({b['seconds']} s)"
                  + (f"; floor probe: {b['floor_probe_error']}" if "floor_probe_error" in b else ""), flush=True)
            ok &= b["exit_code"] == 0
            v["bench"].append(b)
        summary["variants"][name] = v
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"run.py: {'ok' if ok else 'FAILED'}; raw results in {a.out}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
