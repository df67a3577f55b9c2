"""Runs the sam3d device bundle on a GPU machine: device tests and the benchmark.

Usage: python3 sam3d-device/run.pyz --out DIR [--images N] [--warmups N] [--cuda-python PYTHON] [VARIANT...]

Needs only python3 (standard library) and the GPU driver: the bundle carries the binaries,
GGML's libraries, the Vulkan loader and sanitizer runtimes. CUDA variants also need the CUDA
runtime and cuBLAS of their major version (the manifest's cuda_libs), which the bundle does
not carry: run.pyz finds them on this machine (CUDA_LIBS_HELP says where it looks) and stops
naming what is missing and how to install it. The modes, layouts and orders come from each
variant's driver (`sam3d_bench --list-modes`). Per variant it runs
  - the device tests (GoogleTest) of each GPU backend, plainly and, on Vulkan, once more with
    GGML_VK_PERF_LOGGER=1 (GGML's kernel timestamps: a diagnostic, never production latency;
    marked n/a for CUDA),
  - the benchmark driver on device 0 of each GPU backend (--modes, the transfer floor; with
    --transfer-only also a replay without compute), and right after each driver run the
    independent floor probe (sam3d_floor_probe) on the same device for the profile's bytes,
and writes into DIR: summary.json (machine, manifest, test counts, file names), the test
reports (GoogleTest XML, in JUnit form), the driver outputs and logs. Each file stays well under 16 MiB.
With --vulkan-validation the Vulkan variants' device tests and one-image replays (instead of the
benchmark) run under the Khronos validation layer the bundle carries, after its canary; with
--compute-sanitizer the CUDA variants' device tests, CUDA normal cases and one-image replays run
under each tool, each after its canaries (gpu_checks.py, docs/gpu-checks.md). The checked replays
cover every layout and order the driver lists, with compute and transfer-only, in every mode it
lists (unless --layout, --order or --modes name fewer).
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

from . import gpu_checks
from .host import log_tail, machine, runner_env, sanitizer_env, with_preload

# The bundle's folder: the one holding run.pyz, the zipapp python3 runs.
HERE = Path(sys.argv[0]).resolve().parent
# The sanitizer options of the variant registry (core/variants.py sanitizer_runtime()), which
# sam3d/running/bundle.py writes beside run.pyz: host.sanitizer_env reads them.
RUNTIME_FILE = "sanitizers.json"
# What `sam3d_bench --list-modes` prints (native/bench/options.cpp): its modes, layouts and orders.
LIST_SCHEMA = "sam3d-bench-modes/3"
# Where NVIDIA's Vulkan ICD manifest may be when the system loader's search path lacks it.
NVIDIA_ICDS = (
    "/usr/share/vulkan/icd.d/nvidia_icd.json",
    "/etc/vulkan/icd.d/nvidia_icd.json",
    "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json",
)


# Where the CUDA runtime and cuBLAS may be, in this order (the first folder holding a soname wins).
CUDA_LIBS_HELP = (
    "LD_LIBRARY_PATH; $CUDA_HOME, $CUDA_PATH and /usr/local/cuda (lib64/, lib/); the system's "
    "library path (ldconfig -p); the nvidia/*/lib folders of Python environments: this python3's, "
    "each --cuda-python interpreter's, and /opt/*/.venv, /opt/*, ~/.venv"
)


def _site_packages(python):
    """The site-packages folders of a Python interpreter ([] when it does not run)."""
    try:
        out = subprocess.run(
            [
                python,
                "-c",
                "import json, site, sys; print(json.dumps(site.getsitepackages() "
                "+ [p for p in sys.path if p.endswith('-packages')]))",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
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
    for pattern in (
        "/opt/*/.venv/lib/python3*/site-packages",
        "/opt/*/lib/python3*/site-packages",
        str(Path.home() / ".venv/lib/python3*/site-packages"),
    ):
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
        return None, (
            "; ".join(problems) + f". Searched {CUDA_LIBS_HELP}. Install them into a Python environment "
            f"(python3 -m venv ENV && ENV/bin/pip install {wheels}) and pass --cuda-python ENV/bin/python3, "
            "or point CUDA_HOME at a CUDA toolkit of that major version"
        )
    cudart = next(s for s in need if s.startswith("libcudart.so"))
    try:
        lib = ctypes.CDLL(str(found[cudart] / cudart))
        runtime, drv, n = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        lib.cudaRuntimeGetVersion(ctypes.byref(runtime))
        lib.cudaDriverGetVersion(ctypes.byref(drv))
        err = lib.cudaGetDeviceCount(ctypes.byref(n))
    except (OSError, AttributeError) as e:
        return None, f"{found[cudart] / cudart} does not load: {e}"
    info = {
        "lib_dirs": sorted({str(d) for d in found.values()}),
        "runtime_version": runtime.value,
        "driver_version": drv.value,
        "devices": n.value if err == 0 else 0,
    }
    if drv.value == 0:
        return None, (
            "no NVIDIA driver: libcuda.so.1 (the driver's) is not on this machine's library path; "
            "install the NVIDIA driver, or add the folder holding libcuda.so.1 to LD_LIBRARY_PATH"
        )
    if drv.value < runtime.value:
        return None, (
            f"the driver supports CUDA {drv.value // 1000}.{drv.value % 1000 // 10}, the runtime in "
            f"{found[cudart]} is CUDA {runtime.value // 1000}.{runtime.value % 1000 // 10}: the bundle's "
            f"CUDA code was built for that runtime ({wheels}), so update the NVIDIA driver to one for CUDA "
            f"{runtime.value // 1000}.{runtime.value % 1000 // 10} or newer"
        )
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
            return None, (
                f"CUDA device {dev} has compute capability {cc[0]}.{cc[1]}; this variant's GGML holds "
                f"code for CMAKE_CUDA_ARCHITECTURES {archs} only: add {cc[0]}{cc[1]}-real to the variant's "
                "cuda_architectures (sam3d/core/variants.py) and build and bundle it again"
            )
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
    # ones the project's suppression files (packed beside run.pyz) name.
    runtime = json.loads((HERE / RUNTIME_FILE).read_text()) if vm["sanitizer"] else {}
    env.update(sanitizer_env(runtime, vm["sanitizer"], HERE, cuda="cuda" in backends))
    # The registry's vulkan_preload (a dlclose keeping the Vulkan driver's modules mapped, so
    # LeakSanitizer names them; docs/gpu.md, "vulkan-asan on NVIDIA").
    try:
        return with_preload(env, [HERE / p for p in vm.get("preload", [])])
    except (OSError, ValueError) as e:
        sys.exit(f"run.pyz: {name}: {e}")


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
TEST_RUNS = {
    "plain": ("sam3d_device_tests", "device-tests"),
    "perf_logger": ("sam3d_device_tests", "device-tests-perf-logger"),
    "normal_cuda": (NORMAL_TESTS, "normal-tests-cuda"),
}


def run_tests(name, env, out, kind, gtest_filter=None, checker=None):
    """One GoogleTest run of TEST_RUNS[kind] (its binary, its report and log names); ``checker``:
    (tag, command prefix, environment) of a GPU checker to run it under (check_counts() reads
    its findings)."""
    binary, tag = TEST_RUNS[kind]
    perf_logger = kind == "perf_logger"
    ctag, prefix, cenv = checker or ("", [], {})
    tag += f"-{ctag}" if ctag else ""
    report = out / f"{name}-{tag}.xml"
    log = out / f"{name}-{tag}.log"
    env = dict(env, **cenv)
    if perf_logger:
        env["GGML_VK_PERF_LOGGER"] = "1"
    t0 = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.run(
            prefix
            + [str(HERE / name / "bin" / binary), f"--gtest_output=xml:{report}"]
            + ([f"--gtest_filter={gtest_filter}"] if gtest_filter else []),
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
        ).returncode
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
    return {
        "exit_code": rc,
        "passed": counts[0],
        "failed": counts[1],
        "skipped": counts[2],
        "seconds": round(time.monotonic() - t0, 1),
        "report": report.name,
        "log": log.name,
        "perf_logger": perf_logger,
        "diagnostic_kernel_timestamp_total_ms": kernel_ms,
        "cuda_devices": cuda_devices,
        **check_counts(ctag, text),
    }


def check_counts(ctag, text):
    """What a GPU checker found in a run's output: the validation layer's messages (count and
    IDs by case) or compute-sanitizer's error count (None: its summary is missing)."""
    if ctag == VALIDATION_TAG:
        by_case = gpu_checks.validation_messages(text)
        return {
            "checker": ctag,
            "validation_messages": sum(len(v) for v in by_case.values()),
            "validation_ids": by_case,
            "layer_loaded": bool(gpu_checks.LAYER_LOADED.search(text)),
        }
    if ctag:
        return {"checker": ctag, "sanitizer_errors": gpu_checks.sanitizer_errors(text)}
    return {}


VALIDATION_TAG = "vulkan-validation"


def checked_ok(t):
    """Whether a run under a checker found nothing, the checker being live in it: the loader put
    the layer in (a loader leaves out a layer it cannot load, silently), compute-sanitizer
    finished with its summary."""
    if t.get("checker") == VALIDATION_TAG:
        return t["validation_messages"] == 0 and t["layer_loaded"]
    if t.get("checker"):
        return t["sanitizer_errors"] == 0
    return True


def run_canary(name, env, out, checker, argv, label=None, report=None):
    """A checker's canary (gpu_checks.VULKAN_CANARY, CUDA_CANARY or the driver's areas canary)
    under it; "caught" when the checker reported what the canary does on purpose (``report``: a
    pattern its output must also show, beyond gpu_checks.CUDA_CANARY_REPORTS' for the tool).
    ``label`` names its log (default: the checker)."""
    ctag, prefix, cenv = checker
    log = out / f"{name}-canary-{label or ctag}.log"
    with open(log, "w") as f:
        rc = subprocess.run(
            prefix + [str(HERE / name / "bin" / argv[0]), *argv[1:]],
            env=dict(env, **cenv),
            stdout=f,
            stderr=subprocess.STDOUT,
        ).returncode
    text = log.read_text(errors="replace")
    r = check_counts(ctag, text)
    del r["checker"]
    if ctag == VALIDATION_TAG:
        r["missing"] = gpu_checks.vulkan_canary_caught(text)
        r["caught"] = rc == 0 and r["layer_loaded"] and not r["missing"]
    else:
        extra = report or gpu_checks.CUDA_CANARY_REPORTS.get(ctag)
        r["caught"] = (
            rc == gpu_checks.ERROR_EXIT and bool(r["sanitizer_errors"]) and (extra is None or bool(extra.search(text)))
        )
    shown = " ".join(a if "/" not in a else Path(a).name for a in argv)
    print(f"    canary {shown}: {'caught' if r['caught'] else 'NOT CAUGHT'} (exit {rc})", flush=True)
    return {"exit_code": rc, "log": log.name, "checker": ctag, **r}


def tests_ok(t):
    """Prints a test run's counts; whether it passed. On the GPU machine every case must run:
    all skipped means no GPU was found; under a checker, any finding fails it."""
    devices = f"; GGML sees {t['cuda_devices']} CUDA device(s)" if t.get("cuda_devices") is not None else ""
    found = (
        f"; {t['validation_messages']} validation message(s)"
        if "validation_messages" in t
        else f"; compute-sanitizer errors: {t['sanitizer_errors']}"
        if "sanitizer_errors" in t
        else ""
    )
    print(
        f"    {t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped ({t['seconds']} s){devices}{found}",
        flush=True,
    )
    return t["exit_code"] == 0 and t["failed"] == 0 and t["passed"] > 0 and checked_ok(t)


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
        rc = subprocess.run(
            [
                str(HERE / name / "bin" / "sam3d_floor_probe"),
                "--backend",
                backend,
                "--device",
                "0",
                "--upload-bytes",
                str(up),
                "--download-bytes",
                str(down),
            ],
            env=env,
            stdout=f,
            stderr=err,
        ).returncode
    r = {"floor_probe": dst.name if rc == 0 else None, "floor_probe_log": log.name}
    if rc != 0:
        r["floor_probe_error"] = f"sam3d_floor_probe exit {rc}: " + " | ".join(log_tail(log, 3))
    return r


def driver_lists(name, env):
    """({"modes", "layouts", "orders", "duplex"}: the names each lists, the default layout, order and
    duplex mode first, None) from the variant's driver (`sam3d_bench --list-modes`), or (None, why)."""
    r = subprocess.run(
        [str(HERE / name / "bin" / "sam3d_bench"), "--list-modes"], env=env, capture_output=True, text=True
    )
    try:
        doc = json.loads(r.stdout) if r.returncode == 0 else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("schema") != LIST_SCHEMA:
        said = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        return None, f"`sam3d_bench --list-modes` did not print its {LIST_SCHEMA} list: {said}"
    try:
        lists = {k: [x["name"] for x in doc[k]] for k in ("modes", "layouts", "orders", "duplex")}
    except (KeyError, TypeError):
        lists = {}
    if not lists or not all(lists.values()):
        return (
            None,
            f"`sam3d_bench --list-modes` printed a {LIST_SCHEMA} list without modes, layouts, orders or duplex modes",
        )
    return lists, None


def chosen(flag, value, listed, default):
    """The names a comma-separated run.pyz flag gives, each one the driver lists (``listed``;
    "all": every one); ``default`` when the flag was not given. Exits naming the choices on a
    wrong one."""
    if value is None:
        return default
    if value == "all":
        return listed
    names = value.split(",")
    if any(x not in listed for x in names) or len(set(names)) != len(names):
        sys.exit(
            f"run.pyz: {flag} {value!r}: give distinct names of {', '.join(listed)} (the driver's "
            "`sam3d_bench --list-modes`), comma-separated"
        )
    return names


def run_bench(
    name,
    env,
    out,
    backend,
    images,
    warmups,
    modes,
    transfer_only,
    layout,
    order,
    staging=(),
    checker=None,
    extra=(),
    *,
    duplex,
):
    """One sam3d_bench run in ``layout`` and ``order`` (its --layout and --order); `staging`: its
    --staging-* flags, as given to run.pyz; ``duplex``: (its --duplex value, the driver's default
    one), passed and named in the file names only where they differ; ``extra``: more flags. Under a
    ``checker`` (run_tests()) it is a checked replay: its findings, no floor probe."""
    duplex, default_duplex = duplex
    asked = duplex != default_duplex
    env = dict(env, SAM3D_BATCHED_TRANSFERS="1")  # the benchmark's "on" session reads it
    ctag, prefix, cenv = checker or ("", [], {})
    env.update(cenv)
    tag = (
        f"{name}-{backend}"
        + ("-transfer-only" if transfer_only else "")
        + (f"-{ctag}" if ctag else "")
        + f"-{layout}-{order}"
        + (f"-duplex-{duplex}" if asked else "")
    )
    dst = out / f"{tag}.driver.json"
    log = out / f"{tag}.driver.log"
    t0 = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.run(
            prefix
            + [
                str(HERE / name / "bin" / "sam3d_bench"),
                *bench_args(backend, images, warmups),
                "--out",
                str(dst),
                "--layout",
                layout,
                "--order",
                order,
            ]
            + (["--modes", modes] if modes else [])
            + (["--transfer-only"] if transfer_only else [])
            + list(staging)
            + (["--duplex", duplex] if asked else [])
            + list(extra),
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
        ).returncode
    r = {
        "backend": backend,
        "exit_code": rc,
        "seconds": round(time.monotonic() - t0, 1),
        "log": log.name,
        "driver_output": dst.name if dst.is_file() else None,
        # The run's facts, for device-import where the driver wrote nothing (bundle.RUN_FACTS).
        "layout": layout,
        "graph_order": order,
        "transfer_only": transfer_only,
        "vulkan_transfer_queue": backend == "vulkan" and "GGML_VK_ASYNC_USE_TRANSFER_QUEUE" in env,
        "duplex": duplex,
    }
    if rc != 0:
        r["error"] = f"sam3d_bench exit {rc}: " + " | ".join(log_tail(log, 3))
    if ctag:
        r.update(check_counts(ctag, log.read_text(errors="replace")))
    else:
        r.update(run_probe(name, env, out, tag, backend))
    return r


def bench_args(backend, images, warmups):
    """sam3d_bench's arguments for the bundle's profile on device 0 of ``backend``."""
    return [
        "--profile",
        str(HERE / "profile.json"),
        "--backend",
        backend,
        "--device",
        "0",
        "--images",
        str(images),
        "--warmups",
        str(warmups),
    ]


def checkers(a, out):
    """The GPU checkers run.pyz's flags ask for: (the validation layer's checker or None, the
    compute-sanitizer tools' checkers), each (tag, command prefix, environment)."""
    validation = None
    if a.vulkan_validation:
        layer_dir = HERE / "validation"
        if not (layer_dir / gpu_checks.LAYER_LIBRARY).is_file():
            sys.exit(
                f"run.pyz: {layer_dir} has no {gpu_checks.LAYER_LIBRARY}: this bundle was packed without a "
                "Vulkan variant, or before the validation layer was bundled"
            )
        layer = gpu_checks.layer_manifest(
            layer_dir / gpu_checks.LAYER_LIBRARY, layer_dir / gpu_checks.LAYER_MANIFEST, out / "validation-layer"
        )
        validation = (
            VALIDATION_TAG,
            [],
            gpu_checks.validation_env(
                layer, gpu_checks.suppressed_ids(HERE / gpu_checks.VALIDATION_SUPPRESSIONS), prove_loaded=True
            ),
        )
    tools = []
    if a.compute_sanitizer:
        names = list(gpu_checks.TOOLS) if a.compute_sanitizer == "all" else a.compute_sanitizer.split(",")
        unknown = [t for t in names if t not in gpu_checks.TOOLS]
        if unknown:
            sys.exit(
                f"run.pyz: unknown compute-sanitizer tool(s) {unknown}; tools: {', '.join(gpu_checks.TOOLS)} or all"
            )
        try:
            binary = gpu_checks.assemble_sanitizer(
                HERE / "compute-sanitizer", a.cuda_toolkit, out / "compute-sanitizer"
            )
        except gpu_checks.CheckerError as e:
            sys.exit(f"run.pyz: {e}")
        tools = [(t, gpu_checks.sanitizer_command(binary, t, []), {}) for t in names]
    return validation, tools


def checked_matrix(a, lists):
    """The checked replays' configurations: (transfer_only, layout, order) for compute and
    transfer-only and every layout and order the driver lists (or those --layout and --order
    name)."""
    layouts = chosen("--layout", a.layout, lists["layouts"], lists["layouts"])
    orders = chosen("--order", a.order, lists["orders"], lists["orders"])
    return [(t, x, o) for t in (False, True) for x in layouts for o in orders]


def run_checked(i, n, name, vm, env, a, lists, modes, duplex, validation, tools):
    """The checked runs of one variant: per checker its canaries, then the device tests (and the
    normal suite's CUDA cases) and a one-image replay under it in each configuration of
    checked_matrix(). Returns (its summary entries, whether all passed, whether it had anything
    to check)."""
    backends = vm.get("backends", ["vulkan"])
    v = {"canaries": {}, "device_tests": {}, "checked_replays": []}
    ok = True
    runs = []
    if validation and "vulkan" in backends:
        runs.append(
            (
                validation,
                [gpu_checks.VULKAN_CANARY],
                [("plain", None), ("perf_logger", "*vulkan*:DeviceTwoGpus.*")],
                "vulkan",
            )
        )
    asan = "ASAN_OPTIONS" in env
    for tag, prefix, cenv in tools if "cuda" in backends else ():
        if asan:
            cenv = dict(cenv, ASAN_OPTIONS=f"{env['ASAN_OPTIONS']}:{gpu_checks.ASAN_UNDER_SANITIZER}")
        runs.append(
            (
                (tag, prefix, cenv),
                [gpu_checks.CUDA_CANARY, tag],
                [("plain", None), ("normal_cuda", NORMAL_CUDA_CASES)],
                "cuda",
            )
        )
    matrix = checked_matrix(a, lists)
    modes = modes or ",".join(lists["modes"])
    for checker, canary, test_runs, backend in runs:
        print(f"[{i}/{n}] {name}: under {checker[0]}", flush=True)
        c = run_canary(name, env, a.out, checker, canary)
        v["canaries"][checker[0]] = c
        ok &= c["caught"]
        if checker[0] == gpu_checks.AREAS_CANARY_TOOL:  # the replay's own canary: an uncleared area's gaps read
            label = f"{checker[0]}-uninitialized-areas"
            c = run_canary(
                name,
                dict(env, SAM3D_BATCHED_TRANSFERS="1"),
                a.out,
                checker,
                [
                    "sam3d_bench",
                    *bench_args(backend, 1, 0),
                    "--modes",
                    ",".join(lists["modes"]),
                    "--layout",
                    gpu_checks.AREAS_CANARY_LAYOUT,
                    gpu_checks.AREAS_CANARY_FLAG,
                    "--out",
                    str(a.out / f"{name}-canary-{label}.driver.json"),
                ],
                label=label,
                report=gpu_checks.AREAS_CANARY_REPORT,
            )
            v["canaries"][label] = c
            ok &= c["caught"]
        for kind, gtest_filter in test_runs:
            t = run_tests(name, env, a.out, kind, gtest_filter, checker)
            ok &= tests_ok(t)
            v["device_tests"][f"{kind} ({checker[0]})"] = t
        for transfer_only, layout, order in matrix:
            b = run_bench(
                name, env, a.out, backend, 1, 0, modes, transfer_only, layout, order, checker=checker, duplex=duplex
            )
            found = b.get("validation_messages", b.get("sanitizer_errors"))
            print(
                f"    one-image replay {'without' if transfer_only else 'with'} compute, {layout} layout, {order} "
                f"order: exit {b['exit_code']}, findings {found} ({b['seconds']} s)",
                flush=True,
            )
            ok &= b["exit_code"] == 0 and b["driver_output"] is not None and checked_ok(b)
            v["checked_replays"].append(b)
    if not runs:
        v["not_applicable"] = "none of its backends is one the checkers asked for check"
        print(f"[{i}/{n}] {name}: nothing to check ({v['not_applicable']})", flush=True)
    return v, ok, bool(runs)


def parser(variant_names):
    p = argparse.ArgumentParser(prog="run.pyz", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--images", type=int, default=20)
    p.add_argument("--warmups", type=int, default=5)
    p.add_argument("--skip-tests", action="store_true")
    p.add_argument(
        "--modes",
        help="benchmark modes, comma-separated (sam3d_bench --modes, of those its --list-modes "
        "lists, or all; default: the driver's default modes, under a checker all)",
    )
    p.add_argument(
        "--transfer-only",
        action="store_true",
        help="also replay the transfers without compute (ratios to the transfer floor; the checked replays always do)",
    )
    p.add_argument(
        "--staging-piece-bytes",
        metavar="N|max",
        help="the batched sessions' piece of the staged path (sam3d_bench --staging-piece-bytes; default: the core's)",
    )
    p.add_argument(
        "--staging-copy-threads",
        metavar="N",
        help="the batched sessions' threads copying each piece (sam3d_bench --staging-copy-threads; "
        "default: the core's)",
    )
    p.add_argument(
        "--duplex",
        help="the batched sessions' duplex mode, downloads on a second backend of the device (sam3d_bench "
        "--duplex, one of those its --list-modes lists; default: the driver's; recorded in each run's summary "
        "entry: the result record's duplex)",
    )
    p.add_argument(
        "--layout",
        help="the replay's device layouts, comma-separated, each a run of its own in the order given "
        "(sam3d_bench --layout, of those its --list-modes lists, or all; default: the driver's "
        "default, scattered, under a checker all)",
    )
    p.add_argument(
        "--order",
        help="the orders the replay issues its graphs in, comma-separated, each a run of its own per layout "
        "(sam3d_bench --order, of those its --list-modes lists, or all; default: the driver's "
        "default, profile, under a checker all)",
    )
    p.add_argument(
        "--vulkan-transfer-queue",
        action="store_true",
        help="set GGML_VK_ASYNC_USE_TRANSFER_QUEUE=1 for the runs (GGML's Vulkan uploads and downloads on "
        "the device's dedicated transfer queue; recorded in each run's summary entry: the result record's "
        "transfer_queue)",
    )
    p.add_argument(
        "--cuda-python",
        action="append",
        default=[],
        metavar="PYTHON",
        help="a Python interpreter whose environment has NVIDIA's CUDA runtime and cuBLAS wheels "
        "(searched for CUDA variants' libraries; repeatable)",
    )
    p.add_argument(
        "--vulkan-validation",
        action="store_true",
        help="instead of the plain runs: the Vulkan variants' device tests and one-image replays (every "
        "layout and order, with compute and transfer-only) under the Khronos validation layer the "
        "bundle carries, after its canary (any message fails)",
    )
    p.add_argument(
        "--compute-sanitizer",
        metavar="TOOLS",
        help=f"instead of the plain runs: the CUDA variants' device tests, CUDA normal cases and one-image "
        f"replays (every layout and order, with compute and transfer-only) under each compute-sanitizer "
        f"tool (comma-separated of {', '.join(gpu_checks.TOOLS)}, or all), each after its canaries "
        "(any error fails)",
    )
    p.add_argument(
        "--cuda-toolkit",
        type=Path,
        default=Path("/usr/local/cuda"),
        help="a CUDA toolkit of the bundle's release, whose compute-sanitizer launcher helpers complete "
        "the wheel's (default: /usr/local/cuda)",
    )
    p.add_argument("variants", nargs="*", help=f"of {', '.join(variant_names)} (default: all)")
    return p


def main(argv=None):
    try:
        manifest = json.loads((HERE / "manifest.json").read_text())
    except FileNotFoundError:
        sys.exit(
            f"run.pyz: no manifest.json in {HERE}: this program runs from a GPU bundle; make one with "
            "`python -m sam3d bundle` and run its sam3d-device/run.pyz"
        )
    a = parser(manifest["variants"]).parse_args(argv)
    names = a.variants or list(manifest["variants"])
    staging = [
        x
        for flag, v in (
            ("--staging-piece-bytes", a.staging_piece_bytes),
            ("--staging-copy-threads", a.staging_copy_threads),
        )
        if v
        for x in (flag, v)
    ]
    unknown = [n for n in names if n not in manifest["variants"]]
    if unknown:
        sys.exit(f"run.pyz: unknown variant(s) {unknown}; this bundle has {', '.join(manifest['variants'])}")
    a.out.mkdir(parents=True, exist_ok=True)
    validation, tools = checkers(a, a.out)
    summary = {"machine": machine(), "manifest": manifest, "variants": {}}
    ok = True
    any_checked = False
    for i, name in enumerate(names, 1):
        vm = manifest["variants"][name]
        backends = vm.get("backends", ["vulkan"])
        v = {}
        cuda, why = cuda_check(vm, a.cuda_python)
        if why:
            why = f"the CUDA libraries: {why}"
        else:
            env = variant_env(name, vm, cuda["lib_dirs"])
            lists, why = driver_lists(name, env)
        if why:
            print(f"[{i}/{len(names)}] {name}: FAILED: {why}", flush=True)
            summary["variants"][name] = {"error": why, "bench": []}
            ok = False
            continue
        if vm.get("cuda_libs"):
            v["cuda"] = cuda
            print(
                f"[{i}/{len(names)}] {name}: CUDA runtime {cuda['runtime_version']}, driver {cuda['driver_version']}, "
                f"{cuda['devices']} device(s), from {', '.join(cuda['lib_dirs'])}",
                flush=True,
            )
        if a.vulkan_transfer_queue:
            env["GGML_VK_ASYNC_USE_TRANSFER_QUEUE"] = "1"  # after variant_env, which removes an inherited one
        modes = ",".join(chosen("--modes", a.modes, lists["modes"], [])) or None
        if a.duplex not in (None, *lists["duplex"]):
            sys.exit(
                f"run.pyz: --duplex {a.duplex!r}: give one of {', '.join(lists['duplex'])} (the driver's "
                "`sam3d_bench --list-modes`)"
            )
        duplex = (a.duplex or lists["duplex"][0], lists["duplex"][0])
        if validation or tools:
            checked, passed, ran = run_checked(i, len(names), name, vm, env, a, lists, modes, duplex, validation, tools)
            summary["variants"][name] = {**v, **checked}
            ok &= passed
            any_checked |= ran
            continue
        layouts = chosen("--layout", a.layout, lists["layouts"], lists["layouts"][:1])
        orders = chosen("--order", a.order, lists["orders"], lists["orders"][:1])
        if not a.skip_tests:
            for perf in (False, True):
                print(
                    f"[{i}/{len(names)}] {name}: device tests{' (GGML_VK_PERF_LOGGER=1)' if perf else ''}", flush=True
                )
                if perf and "vulkan" not in backends:
                    v.setdefault("device_tests", {})["perf_logger"] = {
                        "exit_code": 0,
                        "passed": 0,
                        "failed": 0,
                        "skipped": 0,
                        "report": None,
                        "not_applicable": "GGML_VK_PERF_LOGGER is the Vulkan backend's; this variant has none",
                        "diagnostic_kernel_timestamp_total_ms": None,
                    }
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
            for transfer_only, layout, order in [
                (t, x, o) for t in ((False, True) if a.transfer_only else (False,)) for x in layouts for o in orders
            ]:
                what = "transfer-only replay" if transfer_only else "benchmark"
                print(
                    f"[{i}/{len(names)}] {name}: {backend} {what}, {layout} layout, {order} order "
                    f"({modes or 'default modes'}; {a.warmups} warm-ups, {a.images} images)",
                    flush=True,
                )
                b = run_bench(
                    name,
                    env,
                    a.out,
                    backend,
                    a.images,
                    a.warmups,
                    modes,
                    transfer_only,
                    layout,
                    order,
                    staging,
                    duplex=duplex,
                )
                print(
                    f"    exit {b['exit_code']} ({b['seconds']} s)"
                    + (f"; floor probe: {b['floor_probe_error']}" if "floor_probe_error" in b else ""),
                    flush=True,
                )
                ok &= b["exit_code"] == 0
                v["bench"].append(b)
        summary["variants"][name] = v
    if (validation or tools) and not any_checked:
        print(
            "run.pyz: FAILED: none of the variants has a backend the checkers asked for check "
            "(--vulkan-validation: Vulkan; --compute-sanitizer: CUDA)",
            flush=True,
        )
        ok = False
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"run.pyz: {'ok' if ok else 'FAILED'}; raw results in {a.out}", flush=True)
    return 0 if ok else 1
