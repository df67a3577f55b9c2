#!/usr/bin/env python3
"""Runs the sam3d device bundle on a GPU machine: device tests and the benchmark.

Usage: python3 sam3d-device/run.py --out DIR [--images N] [--warmups N] [--cuda-python PYTHON] [VARIANT...]

Needs only python3 (standard library) and the GPU driver: the bundle carries the binaries,
GGML's libraries, the Vulkan loader and sanitizer runtimes. CUDA variants also need the CUDA
runtime and cuBLAS of their major version (the manifest's cuda_libs), which the bundle does
not carry: run.py finds them on this machine (CUDA_LIBS_HELP says where it looks) and stops
naming what is missing and how to install it. Per variant it runs
  - the device tests (GoogleTest) of each GPU backend, plainly and, on Vulkan, once more with
    GGML_VK_PERF_LOGGER=1 (GGML's kernel timestamps: a diagnostic, never production latency;
    marked n/a for CUDA),
  - the benchmark driver on device 0 of each GPU backend (--modes, the transfer floor; with
    --transfer-only also a replay without compute), and right after each driver run the
    independent floor probe (sam3d_floor_probe) on the same device for the profile's bytes,
and writes into DIR: summary.json (machine, manifest, test counts, file names), the test
reports (GoogleTest XML, in JUnit form), the driver outputs and logs. Each file stays well under 16 MiB.
Back on the build machine: `python -m sam3d device-import DIR`.
"""

import argparse
import ctypes
import glob
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

if __package__:  # imported as part of the sam3d package
    from ..core.host import log_tail, machine, runner_env, sanitizer_env
else:  # run.py of the bundle: sam3d/core/host.py is packed beside it as host.py
    from host import log_tail, machine, runner_env, sanitizer_env  # pylint: disable=import-error

HERE = Path(__file__).resolve().parent
# Where NVIDIA's Vulkan ICD manifest may be when the system loader's search path lacks it.
NVIDIA_ICDS = ("/usr/share/vulkan/icd.d/nvidia_icd.json", "/etc/vulkan/icd.d/nvidia_icd.json",
               "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json")


# Where the CUDA runtime and cuBLAS may be, in this order (the first folder holding a soname wins).
CUDA_LIBS_HELP = ("LD_LIBRARY_PATH; $CUDA_HOME, $CUDA_PATH and /usr/local/cuda (lib64/, lib/); the system's "
                  "library path (ldconfig -p); the nvidia/*/lib folders of Python environments: this python3's, "
                  "each --cuda-python interpreter's, and /opt/*/.venv, /opt/*, ~/.venv")


def _site_packages(python):
    """The site-packages folders of a Python interpreter ([] when it does not run)."""
    try:
        out = subprocess.run([python, "-c", "import json, site, sys; print(json.dumps(site.getsitepackages() "
                              "+ [p for p in sys.path if p.endswith('-packages')]))"],
                             capture_output=True, text=True, timeout=60).stdout
        return [Path(p) for p in json.loads(out)]
    except (OSError, ValueError, subprocess.SubprocessError):
        return []


def cuda_lib_dirs(pythons=()):
    """Candidate folders for the CUDA runtime and cuBLAS, in search order (CUDA_LIBS_HELP)."""
    dirs = [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            dirs += [Path(home) / "lib64", Path(home) / "lib"]
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=60).stdout
        dirs += [Path(m.group(1)).parent for m in re.finditer(r"=> (/\S+)", out)]
    except (OSError, subprocess.SubprocessError):
        pass
    sites = _site_packages(sys.executable)
    for python in pythons:
        sites += _site_packages(python)
    for pattern in ("/opt/*/.venv/lib/python3*/site-packages", "/opt/*/lib/python3*/site-packages",
                    str(Path.home() / ".venv/lib/python3*/site-packages")):
        sites += [Path(p) for p in sorted(glob.glob(pattern))]
    for site in sites:
        dirs += [Path(p) for p in sorted(glob.glob(str(site / "nvidia" / "*" / "lib")))]
    seen, out = set(), []
    for d in dirs:
        if d not in seen and d.is_dir():
            seen.add(d)
            out.append(d)
    return out


def find_cuda_libs(sonames, dirs):
    """({soname: folder} of those found, [problems]): each soname in the first folder of ``dirs``
    holding it; a problem names each one missing, with what of another version was seen."""
    found, problems = {}, []
    for soname in sonames:
        where = next((d for d in dirs if (d / soname).exists()), None)
        if where is not None:
            found[soname] = where
            continue
        stem = soname.split(".so")[0]
        others = sorted({str(p) for d in dirs for p in d.glob(f"{stem}.so.*")})
        problems.append(f"{soname} not found" + (f" (other versions: {', '.join(others[:3])})" if others else ""))
    return found, problems


def runs_on(architectures, cc):
    """Whether CUDA code built for CMAKE_CUDA_ARCHITECTURES ``architectures`` (e.g. "90-real",
    "80;90-virtual") runs on a device of compute capability ``cc`` (major, minor). NVIDIA's
    rules: SASS for X.Y ("XY-real", or plain "XY") runs on X.Z with Z >= Y, and only on X.Y
    when arch-specific ("XYa"); PTX ("XY-virtual", or plain "XY") is compiled by the driver
    for any cc >= X.Y. "all", "all-major" and "native" cover the device."""
    for a in re.split(r"[;,]", architectures or ""):
        a = a.strip()
        if a in ("all", "all-major", "native"):
            return True
        m = re.fullmatch(r"(\d+)(\d)([af]?)(-real|-virtual)?", a)
        if not m:
            continue
        arch = (int(m.group(1)), int(m.group(2)))
        sass = m.group(4) != "-virtual"
        ptx = m.group(4) != "-real" and not m.group(3)
        if sass and arch[0] == cc[0] and (arch[1] == cc[1] if m.group(3) else arch[1] <= cc[1]):
            return True
        if ptx and arch <= tuple(cc):
            return True
    return False


def cuda_check(vm, pythons):
    """The CUDA libraries of a variant's manifest entry ``vm`` on this machine: ({"lib_dirs",
    "runtime_version", "driver_version", "devices"}, None), or (None, why) naming what is missing
    and how to install it. The runtime is loaded (ctypes) to ask its version, the driver's CUDA
    version and the device count, so a driver older than the runtime is named here."""
    need = vm.get("cuda_libs") or []
    if not need:
        return {"lib_dirs": []}, None
    found, problems = find_cuda_libs(need, cuda_lib_dirs(pythons))
    wheels = " ".join(vm.get("cuda_runtime_wheels") or ["nvidia-cuda-runtime", "nvidia-cublas"])
    if problems:
        return None, ("; ".join(problems) + f". Searched {CUDA_LIBS_HELP}. Install them into a Python environment "
                      f"(python3 -m venv ENV && ENV/bin/pip install {wheels}) and pass --cuda-python ENV/bin/python3, "
                      "or point CUDA_HOME at a CUDA toolkit of that major version")
    cudart = next(s for s in need if s.startswith("libcudart.so"))
    try:
        lib = ctypes.CDLL(str(found[cudart] / cudart))
        runtime, drv, n = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        lib.cudaRuntimeGetVersion(ctypes.byref(runtime))
        lib.cudaDriverGetVersion(ctypes.byref(drv))
        err = lib.cudaGetDeviceCount(ctypes.byref(n))
    except (OSError, AttributeError) as e:
        return None, f"{found[cudart] / cudart} does not load: {e}"
    info = {"lib_dirs": sorted({str(d) for d in found.values()}), "runtime_version": runtime.value,
            "driver_version": drv.value, "devices": n.value if err == 0 else 0}
    if drv.value == 0:
        return None, ("no NVIDIA driver: libcuda.so.1 (the driver's) is not on this machine's library path; "
                      "install the NVIDIA driver, or add the folder holding libcuda.so.1 to LD_LIBRARY_PATH")
    if drv.value < runtime.value:
        return None, (f"the driver supports CUDA {drv.value // 1000}.{drv.value % 1000 // 10}, the runtime in "
                      f"{found[cudart]} is CUDA {runtime.value // 1000}.{runtime.value % 1000 // 10}: the bundle's "
                      f"CUDA code was built for that runtime ({wheels}), so update the NVIDIA driver to one for CUDA "
                      f"{runtime.value // 1000}.{runtime.value % 1000 // 10} or newer")
    if err != 0 or n.value == 0:
        return None, f"the CUDA runtime in {found[cudart]} sees no device (cudaGetDeviceCount error {err})"
    archs = vm.get("cuda_architectures")
    info["compute_capabilities"] = []
    for dev in range(n.value):
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        lib.cudaDeviceGetAttribute(ctypes.byref(major), 75, dev)  # cudaDevAttrComputeCapabilityMajor
        lib.cudaDeviceGetAttribute(ctypes.byref(minor), 76, dev)  # cudaDevAttrComputeCapabilityMinor
        cc = (major.value, minor.value)
        info["compute_capabilities"].append(f"{cc[0]}.{cc[1]}")
        if archs and not runs_on(archs, cc):
            return None, (f"CUDA device {dev} has compute capability {cc[0]}.{cc[1]}; this variant's GGML holds "
                          f"code for CMAKE_CUDA_ARCHITECTURES {archs} only: add {cc[0]}{cc[1]}-real to the variant's "
                          "cuda_architectures (sam3d/core/variants.py) and build and bundle it again")
    return info, None


def variant_env(name, vm, cuda_dirs=()):
    """The environment of a variant's binaries: its lib/ (and the CUDA libraries' folders) first
    on LD_LIBRARY_PATH, the inherited flags of host.RUNNER_REMOVED_ENV removed, the
    sanitizer options of the build machine's tests; CUDA cases must find a device."""
    env = runner_env(dict(os.environ))
    lib = [str(HERE / name / "lib"), *cuda_dirs]
    env["LD_LIBRARY_PATH"] = ":".join(lib + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
    if not any(Path(p).is_file() for p in NVIDIA_ICDS[:2]) and Path(NVIDIA_ICDS[2]).is_file():
        env.setdefault("VK_DRIVER_FILES", NVIDIA_ICDS[2])
    backends = vm.get("backends", ["vulkan"])
    if "cuda" in backends:
        env["SAM3D_REQUIRE_CUDA_DEVICE"] = "1"
    # As in the test environment of the build machine: any report is fatal, except the upstream
    # ones the project's suppression files (packed beside run.py) name.
    env.update(sanitizer_env(vm["sanitizer"], HERE, cuda="cuda" in backends))
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


# The normal suite's cases that need a CUDA device (GGML's CUDA facts, the rig's CUDA cases):
# they skip on the build machine, so the GPU machine runs them, a missing device failing them.
NORMAL_TESTS = "sam3d_normal_tests"
NORMAL_CUDA_CASES = "GgmlContractCuda.*:*/cuda"
TEST_RUNS = {"plain": ("sam3d_device_tests", "device-tests"),
             "perf_logger": ("sam3d_device_tests", "device-tests-perf-logger"),
             "normal_cuda": (NORMAL_TESTS, "normal-tests-cuda")}


def run_tests(name, env, out, kind, gtest_filter=None):
    """One GoogleTest run of TEST_RUNS[kind] (its binary, its report and log names)."""
    binary, tag = TEST_RUNS[kind]
    perf_logger = kind == "perf_logger"
    report = out / f"{name}-{tag}.xml"
    log = out / f"{name}-{tag}.log"
    env = dict(env)
    if perf_logger:
        env["GGML_VK_PERF_LOGGER"] = "1"
    t0 = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.run([str(HERE / name / "bin" / binary), f"--gtest_output=xml:{report}"]
                            + ([f"--gtest_filter={gtest_filter}"] if gtest_filter else []),
                            env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    try:
        counts = junit_counts(report) if report.is_file() else (0, 0, 0)
    except ET.ParseError:  # a crashed run leaves a partial report: its log says why
        counts = (0, 0, 0)
    text = log.read_text(errors="replace")
    # The CUDA devices the binary itself sees (GGML's ggml_cuda_init line), per variant: an ASan
    # build must see as many as the release build.
    m = re.search(r"ggml_cuda_init: found (\d+) CUDA devices", text)
    cuda_devices = int(m.group(1)) if m else None
    # GGML's perf logger prints per-op kernel timestamps; keep their total as a diagnostic.
    kernel_ms = None
    if perf_logger:
        total = 0.0
        for line in text.splitlines():
            m = re.search(r"Total time: ([0-9.]+) (us|ms)", line)
            if m:
                total += float(m.group(1)) / (1000.0 if m.group(2) == "us" else 1.0)
        kernel_ms = total or None
    return {"exit_code": rc, "passed": counts[0], "failed": counts[1], "skipped": counts[2],
            "seconds": round(time.monotonic() - t0, 1), "report": report.name, "log": log.name,
            "perf_logger": perf_logger, "diagnostic_kernel_timestamp_total_ms": kernel_ms,
            "cuda_devices": cuda_devices}


def tests_ok(t):
    """Prints a test run's counts; whether it passed. On the GPU machine every case must run:
    all skipped means no GPU was found."""
    devices = f"; GGML sees {t['cuda_devices']} CUDA device(s)" if t.get("cuda_devices") is not None else ""
    print(f"    {t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped ({t['seconds']} s){devices}", flush=True)
    return t["exit_code"] == 0 and t["failed"] == 0 and t["passed"] > 0


def profile_bytes():
    """(upload bytes, download bytes) of the bundle's profile.json: every graph's sizes summed."""
    graphs = json.loads((HERE / "profile.json").read_text())["graphs"]
    return sum(sum(g["uploads"]) for g in graphs), sum(sum(g["downloads"]) for g in graphs)


def run_probe(name, env, out, tag, backend):
    """The floor probe on device 0 of ``backend``; its JSON (stdout) in DIR/<tag>.floor-probe.json."""
    up, down = profile_bytes()
    dst = out / f"{tag}.floor-probe.json"
    log = out / f"{tag}.floor-probe.log"
    with open(dst, "w") as f, open(log, "w") as err:
        rc = subprocess.run([str(HERE / name / "bin" / "sam3d_floor_probe"), "--backend", backend, "--device", "0",
                             "--upload-bytes", str(up), "--download-bytes", str(down)],
                            env=env, stdout=f, stderr=err).returncode
    r = {"floor_probe": dst.name if rc == 0 else None, "floor_probe_log": log.name}
    if rc != 0:
        r["floor_probe_error"] = f"sam3d_floor_probe exit {rc}: " + " | ".join(log_tail(log, 3))
    return r


def run_bench(name, env, out, backend, images, warmups, modes, transfer_only, staging=()):
    """One sam3d_bench run; `staging`: its --staging-* and --layout flags, as given to run.py."""
    env = dict(env, SAM3D_BATCHED_TRANSFERS="1")  # the benchmark's "on" session reads it
    tag = f"{name}-{backend}" + ("-transfer-only" if transfer_only else "")
    dst = out / f"{tag}.driver.json"
    log = out / f"{tag}.driver.log"
    t0 = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.run([str(HERE / name / "bin" / "sam3d_bench"), "--profile", str(HERE / "profile.json"),
                             "--backend", backend, "--device", "0", "--images", str(images),
                             "--warmups", str(warmups), "--out", str(dst)]
                            + (["--modes", modes] if modes else []) + (["--transfer-only"] if transfer_only else [])
                            + list(staging),
                            env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    r = {"backend": backend, "exit_code": rc, "seconds": round(time.monotonic() - t0, 1), "log": log.name,
         "driver_output": dst.name if dst.is_file() else None}
    if rc != 0:
        r["error"] = f"sam3d_bench exit {rc}: " + " | ".join(log_tail(log, 3))
    r.update(run_probe(name, env, out, tag, backend))
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
    p.add_argument("--staging-piece-bytes", metavar="N|max",
                   help="the batched sessions' piece of the staged path (sam3d_bench --staging-piece-bytes; "
                        "default: the core's)")
    p.add_argument("--staging-copy-threads", metavar="N",
                   help="the batched sessions' threads copying each piece (sam3d_bench --staging-copy-threads; "
                        "default: the core's)")
    p.add_argument("--layout", choices=("scattered", "areas"),
                   help="the replay's device layout (sam3d_bench --layout; default: the profile's, scattered)")
    p.add_argument("--cuda-python", action="append", default=[], metavar="PYTHON",
                   help="a Python interpreter whose environment has NVIDIA's CUDA runtime and cuBLAS wheels "
                        "(searched for CUDA variants' libraries; repeatable)")
    p.add_argument("variants", nargs="*", help=f"of {', '.join(manifest['variants'])} (default: all)")
    a = p.parse_args()
    names = a.variants or list(manifest["variants"])
    staging = [x for flag, v in (("--staging-piece-bytes", a.staging_piece_bytes),
                                 ("--staging-copy-threads", a.staging_copy_threads),
                                 ("--layout", a.layout)) if v for x in (flag, v)]
    unknown = [n for n in names if n not in manifest["variants"]]
    if unknown:
        sys.exit(f"run.py: unknown variant(s) {unknown}; this bundle has {', '.join(manifest['variants'])}")
    a.out.mkdir(parents=True, exist_ok=True)
    summary = {"machine": machine(), "manifest": manifest, "variants": {}}
    ok = True
    for i, name in enumerate(names, 1):
        vm = manifest["variants"][name]
        backends = vm.get("backends", ["vulkan"])
        v = {}
        cuda, why = cuda_check(vm, a.cuda_python)
        if why:
            print(f"[{i}/{len(names)}] {name}: FAILED: the CUDA libraries: {why}", flush=True)
            summary["variants"][name] = {"error": f"the CUDA libraries: {why}", "bench": []}
            ok = False
            continue
        if vm.get("cuda_libs"):
            v["cuda"] = cuda
            print(f"[{i}/{len(names)}] {name}: CUDA runtime {cuda['runtime_version']}, driver {cuda['driver_version']}, "
                  f"{cuda['devices']} device(s), from {', '.join(cuda['lib_dirs'])}", flush=True)
        env = variant_env(name, vm, cuda["lib_dirs"])
        if not a.skip_tests:
            for perf in (False, True):
                print(f"[{i}/{len(names)}] {name}: device tests{' (GGML_VK_PERF_LOGGER=1)' if perf else ''}", flush=True)
                if perf and "vulkan" not in backends:
                    v.setdefault("device_tests", {})["perf_logger"] = {
                        "exit_code": 0, "passed": 0, "failed": 0, "skipped": 0, "report": None,
                        "not_applicable": "GGML_VK_PERF_LOGGER is the Vulkan backend's; this variant has none",
                        "diagnostic_kernel_timestamp_total_ms": None}
                    print("    n/a (GGML's perf logger is Vulkan's)", flush=True)
                    continue
                # With the perf logger only the Vulkan cases: the variable means nothing to CUDA.
                kind = "perf_logger" if perf else "plain"
                t = run_tests(name, env, a.out, kind, "*vulkan*:DeviceTwoGpus.*" if perf else None)
                ok &= tests_ok(t)
                v.setdefault("device_tests", {})[kind] = t
            if "cuda" in backends:
                print(f"[{i}/{len(names)}] {name}: the normal suite's CUDA cases ({NORMAL_CUDA_CASES})", flush=True)
                t = run_tests(name, env, a.out, "normal_cuda", NORMAL_CUDA_CASES)
                ok &= tests_ok(t)
                v["device_tests"]["normal_cuda"] = t
        v["bench"] = []
        for backend in backends:
            for transfer_only in (False, True) if a.transfer_only else (False,):
                what = "transfer-only replay" if transfer_only else "benchmark"
                print(f"[{i}/{len(names)}] {name}: {backend} {what} ({a.modes or 'default modes'}; {a.warmups} warm-ups, "
                      f"{a.images} images)", flush=True)
                b = run_bench(name, env, a.out, backend, a.images, a.warmups, a.modes, transfer_only, staging)
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
