"""The benchmark runner: its environment flag policy and how driver output becomes a result file."""

import copy
import json
import os
import subprocess

import pytest

from sam3d.cli import bench as bench_cli
from sam3d.core import profile, variants
from sam3d.core.errors import NotBuilt
from sam3d.results import checks, record
from sam3d.running import bench, driver
from sam3d.tools import provenance

RELEASE = variants.get("release")
CPU_ASAN = variants.get("cpu-asan")


# ---------------------------------------------------------------- environment flag policy
@pytest.mark.parametrize("inherited", ["0", "2", "yes", "", "1"])
def test_inherited_flag_is_replaced_by_1(inherited):
    env = driver.driver_env(RELEASE, {"PATH": "/usr/bin", "SAM3D_BATCHED_TRANSFERS": inherited})
    assert env["SAM3D_BATCHED_TRANSFERS"] == "1"
    assert env["PATH"] == "/usr/bin"


def test_flag_is_set_when_not_inherited_and_sanitizer_env_kept():
    env = driver.driver_env(CPU_ASAN, {"PATH": "/usr/bin"})
    assert env["SAM3D_BATCHED_TRANSFERS"] == "1"
    assert "halt_on_error=1" in env["ASAN_OPTIONS"] and "halt_on_error=1" in env["UBSAN_OPTIONS"]


def test_vulkan_variant_gets_lavapipe_without_gpu(monkeypatch):
    monkeypatch.setattr(driver.ctest.system, "has_nvidia_gpu", lambda: False)
    env = driver.driver_env(RELEASE, {"SAM3D_BATCHED_TRANSFERS": "0"})
    assert env["GGML_VK_VISIBLE_DEVICES"] == "0"
    assert env["SAM3D_BATCHED_TRANSFERS"] == "1"


CUDA_ASAN = variants.get("cuda-asan")


@pytest.mark.parametrize("gpu", [False, True])
def test_cuda_cases_must_find_a_device_where_an_nvidia_gpu_is(monkeypatch, gpu):
    monkeypatch.setattr(driver.ctest.system, "has_nvidia_gpu", lambda: gpu)
    assert driver.ctest.test_env(CUDA_ASAN, {}).get("SAM3D_REQUIRE_CUDA_DEVICE") == ("1" if gpu else None)
    assert "SAM3D_REQUIRE_CUDA_DEVICE" not in driver.ctest.test_env(RELEASE, {})


# Inherited values that would change what a run measures (device/host.py RUNNER_REMOVED_ENV).
INHERITED = {
    "GGML_CUDA_NO_PINNED": "1",
    "CUDA_LAUNCH_BLOCKING": "1",
    "GGML_CUDA_ENABLE_UNIFIED_MEMORY": "1",
    "GGML_CUDA_REGISTER_HOST": "1",
    "GGML_CUDA_DEVICES": "2",
    "GGML_CUDA_P2P": "1",
    "GGML_VK_PERF_LOGGER": "1",
    "GGML_VK_DISABLE_ASYNC": "1",
    "GGML_VK_ASYNC_USE_TRANSFER_QUEUE": "1",
    "GGML_VK_SERIALIZE_SUBMISSIONS": "1",
    "GGML_CUDA_DISABLE_GRAPHS": "1",
    "SAM3D_BATCHED_TRANSFERS": "0",
}


@pytest.mark.parametrize("v", [RELEASE, CUDA_ASAN, variants.get("cuda-release")], ids=lambda v: v.name)
def test_inherited_backend_flags_are_removed_and_device_selection_kept(v):
    base = dict(INHERITED, PATH="/usr/bin", CUDA_VISIBLE_DEVICES="1", GGML_VK_VISIBLE_DEVICES="0")
    env = driver.driver_env(v, base)
    assert not set(INHERITED) - {"SAM3D_BATCHED_TRANSFERS"} & set(env), env
    assert env["SAM3D_BATCHED_TRANSFERS"] == "1"
    assert (env["CUDA_VISIBLE_DEVICES"], env["GGML_VK_VISIBLE_DEVICES"]) == ("1", "0")
    tests = driver.ctest.test_env(v, base)
    assert not set(INHERITED) & set(tests)


def test_asan_leaves_the_shadow_gap_to_the_cuda_driver_in_cuda_variants_only():
    """google/sanitizers#629: the CUDA driver maps memory in ASan's shadow gap."""
    assert "protect_shadow_gap=0" in driver.ctest.test_env(CUDA_ASAN, {})["ASAN_OPTIONS"]
    assert "protect_shadow_gap" not in driver.ctest.test_env(CPU_ASAN, {})["ASAN_OPTIONS"]
    assert "detect_leaks=1" in driver.ctest.test_env(CUDA_ASAN, {})["ASAN_OPTIONS"]


def test_gpu_runner_env_for_cuda_requires_a_device_and_strips_inherited_flags(monkeypatch, tmp_path):
    from sam3d.device import run as device_run
    from sam3d.running import bundle

    bundle.pack_program(tmp_path)  # the registry's sanitizer options beside run.pyz
    monkeypatch.setattr(device_run, "HERE", tmp_path)
    monkeypatch.setattr(os, "environ", dict(INHERITED, LD_LIBRARY_PATH="/x"))
    vm = {"sanitizer": "AddressUndefinedBehavior", "backends": ["cuda"], "cuda_libs": ["libcudart.so.13"]}
    env = device_run.variant_env("cuda-asan", vm, ["/cuda/lib"])
    assert env["SAM3D_REQUIRE_CUDA_DEVICE"] == "1"
    assert "protect_shadow_gap=0" in env["ASAN_OPTIONS"]
    assert env["LSAN_OPTIONS"].startswith(f"suppressions={tmp_path / 'lsan.supp'}:")
    assert env["LD_LIBRARY_PATH"] == f"{tmp_path / 'cuda-asan' / 'lib'}:/cuda/lib:/x"
    assert not set(INHERITED) & set(env)
    vk = device_run.variant_env("release", {"sanitizer": None})  # a manifest before CUDA: Vulkan
    assert "SAM3D_REQUIRE_CUDA_DEVICE" not in vk


def test_gpu_runner_preloads_what_the_manifest_names_ahead_of_an_inherited_preload(monkeypatch, tmp_path):
    """vulkan-asan's runs preload the registry's vulkan_preload (docs/gpu.md, "vulkan-asan on
    NVIDIA"); a missing library or a path ld.so would split stops run.pyz, naming it."""
    from sam3d.device import run as device_run
    from sam3d.running import bundle

    monkeypatch.setattr(os, "environ", {"LD_PRELOAD": "/other.so"})
    lib = tmp_path / "vulkan-asan" / "lib" / "libsam3d_keep_loaded.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    bundle.pack_program(tmp_path)
    monkeypatch.setattr(device_run, "HERE", tmp_path)
    vm = {
        "sanitizer": "AddressUndefinedBehavior",
        "backends": ["vulkan"],
        "preload": ["vulkan-asan/lib/libsam3d_keep_loaded.so"],
    }
    assert device_run.variant_env("vulkan-asan", vm)["LD_PRELOAD"] == f"{lib}:/other.so"
    assert device_run.variant_env("release", {"sanitizer": None}).get("LD_PRELOAD") == "/other.so"
    lib.unlink()
    with pytest.raises(SystemExit, match=f"vulkan-asan: {lib} is missing"):
        device_run.variant_env("vulkan-asan", vm)
    spaced = tmp_path / "GPU runs"
    (spaced / "vulkan-asan" / "lib").mkdir(parents=True)
    (spaced / "vulkan-asan" / "lib" / "libsam3d_keep_loaded.so").write_bytes(b"")
    bundle.pack_program(spaced)
    monkeypatch.setattr(device_run, "HERE", spaced)
    with pytest.raises(SystemExit, match="space or colon cannot be preloaded"):
        device_run.variant_env("vulkan-asan", vm)
    assert variants.get("vulkan-asan").preloads == ("sam3d_keep_loaded",)
    assert variants.get("cuda-asan").preloads == variants.get("release").preloads == ()


def test_the_bundle_packs_each_preload_where_run_py_and_ctest_find_it(monkeypatch, tmp_path):
    """A bundle of a variant with preloads carries each library in its lib/, the manifest names it
    relative to run.pyz, and the runner's LD_PRELOAD is that file; ctest's is the build's."""
    from sam3d.device import run as device_run
    from sam3d.running import bundle

    v = variants.get("vulkan-asan")
    libs = driver.ctest.preload_libs(v)
    if not all(p.is_file() for p in libs.values()) or not (driver.ctest.build_folder(v) / "tests" / "device").is_dir():
        pytest.skip("vulkan-asan is not built (python -m sam3d build vulkan-asan)")
    assert driver.ctest.test_env(v, {})["LD_PRELOAD"] == ":".join(str(p) for p in libs.values())
    bundle.make(tmp_path, [v], limit=None)
    stage = tmp_path / bundle.BUNDLE_NAME
    vm = json.loads((stage / "manifest.json").read_text())["variants"][v.name]
    assert vm["preload"] == [f"{v.name}/lib/{name}" for name in libs]
    for rel in vm["preload"]:  # the keeper (debug info split off, as every packed file's)
        assert (
            " T dlclose"
            in subprocess.run(
                ["nm", "-D", "--defined-only", str(stage / rel)], capture_output=True, text=True, check=True
            ).stdout
        )
    monkeypatch.setattr(device_run, "HERE", stage)
    monkeypatch.setattr(os, "environ", {})
    assert device_run.variant_env(v.name, vm)["LD_PRELOAD"] == ":".join(str(stage / r) for r in vm["preload"])


def test_gpu_runner_finds_cuda_libraries_in_a_python_environments_nvidia_folders(tmp_path, monkeypatch):
    """The layouts of NVIDIA's wheels: nvidia/cu13/lib (CUDA 13) and nvidia/<name>/lib (CUDA 12);
    a missing soname is named with the other versions seen."""
    from sam3d.device import run as device_run

    site = tmp_path / "opt" / "lib" / "python3.12" / "site-packages"
    for rel in (
        "nvidia/cu13/lib/libcudart.so.13",
        "nvidia/cu13/lib/libcublas.so.13",
        "nvidia/cublas/lib/libcublasLt.so.12",
    ):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text("")
    python = tmp_path / "python3"
    python.write_text(f"#!/bin/sh\necho '[\"{site}\"]'\n")
    python.chmod(0o755)
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    # This machine's own places (/usr/local/cuda, ldconfig) are searched too: keep only the environment's.
    dirs = [d for d in device_run.cuda_lib_dirs([str(python)]) if tmp_path in d.parents]
    assert dirs == [site / "nvidia/cu13/lib", site / "nvidia/cublas/lib"]
    found, problems = device_run.find_cuda_libs(["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13"], dirs)
    assert found == {"libcudart.so.13": site / "nvidia/cu13/lib", "libcublas.so.13": site / "nvidia/cu13/lib"}
    assert len(problems) == 1 and problems[0].startswith("libcublasLt.so.13 not found (other versions: ")
    assert "libcublasLt.so.12" in problems[0]


def test_gpu_runner_names_the_wheels_to_install_when_cuda_libraries_are_missing(monkeypatch):
    from sam3d.device import run as device_run

    monkeypatch.setattr(device_run, "cuda_lib_dirs", lambda pythons: [])
    vm = {"cuda_libs": ["libcudart.so.13"], "cuda_runtime_wheels": ["nvidia-cuda-runtime==13.0.96"]}
    info, why = device_run.cuda_check(vm, [])
    assert info is None
    assert why.startswith("libcudart.so.13 not found. Searched LD_LIBRARY_PATH")
    assert "ENV/bin/pip install nvidia-cuda-runtime==13.0.96" in why and "--cuda-python" in why
    assert device_run.cuda_check({"cuda_libs": []}, []) == ({"lib_dirs": []}, None)


def test_base_environment_is_not_modified():
    base = {"SAM3D_BATCHED_TRANSFERS": "0"}
    driver.driver_env(RELEASE, base)
    assert base == {"SAM3D_BATCHED_TRANSFERS": "0"}


def test_backends_per_variant():
    assert driver.backends(CPU_ASAN) == ["cpu"]
    assert driver.backends(RELEASE) == ["cpu", "vulkan"]


# ---------------------------------------------------------------- result wrapping
def _counters(async_up, async_down, sync_up, sync_down, pinned, fallbacks=None):
    fb = {k: 0 for k in record.FALLBACK_REASONS}
    fb.update(fallbacks or {})
    return {
        "async_uploads": async_up,
        "sync_uploads": sync_up,
        "async_downloads": async_down,
        "sync_downloads": sync_down,
        "bytes_uploaded": profile.UPLOAD_BYTES,
        "bytes_downloaded": profile.DOWNLOAD_BYTES,
        "pinned_batches": pinned,
        "fallbacks": fb,
    }


def _samples(n, sha="a" * 64, wall=10.0):
    return [
        {
            "image": i,
            "wall_ms": wall + i,
            "enqueue_ms": 1.0,
            "synchronize_ms": 2.0,
            "copy_ms": 0.5,
            "sync_path_ms": 3.0,
            "outputs_sha256": sha if i % 2 == 0 else "b" * 64,
        }
        for i in range(n)
    ]


def _doc(vulkan=True, images=3):
    on = _counters(199, 232, 3, 1, 82) if vulkan else _counters(0, 0, 202, 233, 0, {"no_async_caps": 82})
    return {
        "tool": "sam3d_bench",
        "backend": "Vulkan" if vulkan else "CPU",
        "device": "llvmpipe (LLVM 15.0.6, 256 bits)" if vulkan else "Intel Xeon",
        "caps": {"async": vulkan, "host_buffer": vulkan, "buffer_from_host_ptr": False, "events": vulkan},
        "protocol": {"warmups": 1, "images": images, "interleaved": True},
        "profile": {"path": "p.json", "name": profile.NAME, "version": 1, "sha256": "c" * 64},
        "rows": [
            {"batching": "on", "samples": _samples(images), "counters": on},
            {"batching": "off", "samples": _samples(images), "counters": _counters(0, 0, 202, 233, 0)},
        ],
        "extra": {
            "peak_rss_bytes": 1,
            "problems": [],
            "modes": {"on": {"static_fallback": "none" if vulkan else "no_async_caps"}},
        },
    }


COMMON = dict(
    prof={"path": str(profile.RELATIVE_PATH), "sha256": "c" * 64, "version": 1},
    machine_info={"hostname": "h", "cpu": "c", "os": "o", "glibc": "2.36"},
    commit="0" * 40,
    build={
        "compile_flags": ["-O2", "-DNDEBUG"],
        "build_type": "Release",
        "sanitizer": None,
        "ggml_version": "0.20.2",
        "glslc": None,
    },
)


def _wrap(backend, doc, reason=None, variant=RELEASE, **kw):
    """cli/bench.py wrap() of a run of ``variant``; ``backend``: the driver's --backend value."""
    name = next(b for b in variant.backends if b.lower() == backend)
    return bench_cli.wrap(variant.name, name, doc, reason=reason, **COMMON, **kw)


def test_wrap_fills_the_schema_and_keeps_driver_rows():
    doc = _doc()
    r = _wrap("vulkan", doc, extra={"run_name": "x"})
    d = r.document()
    assert d["schema"] == r.schema_ == "sam3d-bench-result/5"
    assert (r.variant, r.backend, r.status, r.reason) == ("release", "Vulkan", "ok", None)
    assert d["device"] == doc["device"] and d["caps"] == doc["caps"] and d["rows"] == doc["rows"]
    assert d["protocol"] == {"warmups": 1, "images": 3, "interleaved": True}
    assert d["profile"] == COMMON["prof"]
    assert d["extra"]["peak_rss_bytes"] == 1 and d["extra"]["run_name"] == "x"
    assert set(d) == {
        "schema",
        "variant",
        "status",
        "reason",
        "machine",
        "build",
        "git_commit",
        "profile",
        "backend",
        "layout",
        "order",
        "transfer_only",
        "transfer_queue",
        "duplex",
        "device",
        "caps",
        "protocol",
        "rows",
        "extra",
    }
    # a driver that names no configuration: the defaults, written out
    assert r.configuration() == {
        "layout": "scattered",
        "order": "profile",
        "transfer_only": False,
        "transfer_queue": False,
        "duplex": "off",
    }
    assert record.parse(d) == r


def test_failed_build_keeps_a_result_with_the_reason():
    r = _wrap("cpu", None, reason="build failed: conan exit 1", variant=CPU_ASAN)
    assert r.status == "failed" and r.reason == "build failed: conan exit 1" and r.rows == []
    assert record.parse(r.document()) == r
    with pytest.raises(record.ResultError):  # no reason: an ok result, which needs the driver's output
        _wrap("cpu", None, variant=CPU_ASAN)


def test_wrap_records_a_transfer_only_or_areas_replay_as_its_configuration():
    """A replay without compute is its own configuration (transfer_only), so is one in the areas
    layout (layout "areas"), one issuing its graphs by dependency level (order "levels"), and one
    with GGML's Vulkan transfer queue (transfer_queue): the record's fields, taken out of the
    driver's extra; the backend stays GGML's own name."""

    def config(**extra):
        doc = _doc()
        doc["extra"].update(extra)
        r = _wrap("vulkan", doc)
        assert record.parse(r.document()) == r
        assert not set(extra) & set(r.document()["extra"])
        return r.backend, r.layout, r.order, r.transfer_only, r.transfer_queue

    assert config() == ("Vulkan", "scattered", "profile", False, False)
    assert config(transfer_only=True) == ("Vulkan", "scattered", "profile", True, False)
    assert config(transfer_only=False, layout="scattered") == ("Vulkan", "scattered", "profile", False, False)
    assert config(layout="areas") == ("Vulkan", "areas", "profile", False, False)
    assert config(layout="areas", transfer_only=True) == ("Vulkan", "areas", "profile", True, False)
    assert config(vulkan_transfer_queue=True) == ("Vulkan", "scattered", "profile", False, True)
    assert config(vulkan_transfer_queue=False) == ("Vulkan", "scattered", "profile", False, False)
    assert config(vulkan_transfer_queue=True, layout="areas", transfer_only=True) == (
        "Vulkan",
        "areas",
        "profile",
        True,
        True,
    )
    assert config(graph_order="levels") == ("Vulkan", "scattered", "levels", False, False)
    assert config(graph_order="profile", layout="areas") == ("Vulkan", "areas", "profile", False, False)
    assert config(vulkan_transfer_queue=True, layout="areas", graph_order="levels", transfer_only=True) == (
        "Vulkan",
        "areas",
        "levels",
        True,
        True,
    )
    doc = _doc()
    doc["extra"].update(duplex="off", layout="areas")
    r = _wrap("vulkan", doc)
    assert (r.duplex, r.layout, "duplex" in r.document()["extra"]) == ("off", "areas", False)
    assert _wrap("vulkan", _doc()).duplex == "off"  # a driver that names none: the driver's default
    with pytest.raises(record.ResultError, match="duplex"):
        config(duplex="both")
    with pytest.raises(record.ResultError, match="order"):
        config(graph_order="random")
    with pytest.raises(record.ResultError, match="layout"):
        config(layout="descriptors")
    failed = _wrap("vulkan", None, reason="driver crashed")
    assert failed.backend == "Vulkan" and failed.device is None and "device" not in failed.document()
    with pytest.raises(record.ResultError, match="a failed result needs a non-empty reason"):
        record.parse(dict(failed.document(), reason=""))


def test_a_driver_document_that_does_not_fit_the_record_is_a_failed_result_with_the_reason():
    """cli/bench.py result_of(): the reason names the field; the rows are dropped."""
    doc = _doc(True)
    doc["rows"].append(dict(copy.deepcopy(doc["rows"][0]), batching="turbo"))
    r = bench_cli.result_of(RELEASE, "vulkan", doc, None, **COMMON)
    assert r.status == "failed" and r.rows == [] and r.backend == "Vulkan"
    assert r.reason.startswith("driver output does not fit the result record: ") and "rows[2].batching" in r.reason


def test_check_accepts_batched_vulkan_and_cpu_fallback():
    assert checks.check(_wrap("vulkan", _doc(True))) == []
    assert checks.check(_wrap("cpu", _doc(False))) == []


def test_check_names_wrong_counts_bytes_and_output_mismatch():
    doc = _doc(True)
    doc["rows"][0]["counters"]["async_uploads"] = 198
    doc["rows"][0]["counters"]["sync_uploads"] = 4
    doc["rows"][1]["counters"]["bytes_downloaded"] -= 4
    doc["rows"][0]["samples"][2]["outputs_sha256"] = "d" * 64
    p = checks.check(_wrap("vulkan", doc))
    text = "\n".join(p)
    assert "async_uploads 198 (expected 199)" in text and "sync_uploads 4 (expected 3)" in text
    assert "batching off: 33,193,136 bytes up / 32,403,592 down" in text
    assert "outputs differ between batching on and off for images [2]" in text


def test_check_cpu_without_fallback_count_fails():
    doc = _doc(False)
    doc["rows"][0]["counters"]["fallbacks"]["no_async_caps"] = 0
    p = checks.check(_wrap("cpu", doc))
    assert p == ["batching on per image: fallbacks.no_async_caps 0 (expected 82)"]


def test_flags_of_keeps_build_flags_only():
    cmd = [
        "/usr/bin/g++",
        "-DGGML_SHARED",
        "-I/x",
        "-isystem",
        "/y",
        "-O1",
        "-g",
        "-fno-omit-frame-pointer",
        "-fsanitize=address,undefined",
        "-std=gnu++17",
        "-Wall",
        "-o",
        "a.o",
        "-c",
        "a.cpp",
        "-O1",
    ]
    assert provenance.flags_of(cmd) == [
        "-O1",
        "-g",
        "-fno-omit-frame-pointer",
        "-fsanitize=address,undefined",
        "-std=gnu++17",
    ]


def test_build_info_reads_compile_commands(tmp_path, monkeypatch):
    folder = tmp_path / "build" / "cpu-asan" / "Debug"
    folder.mkdir(parents=True)

    def entry(f, flags):
        return {
            "directory": str(folder),
            "file": f"/r/native/{f}",
            "command": f"/usr/bin/g++ {flags} -o x.o -c /r/native/{f}",
        }

    (folder / "compile_commands.json").write_text(
        json.dumps(
            [
                entry("src/transfer.cpp", "-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined"),
                entry("bench/sam3d_bench.cpp", "-O1 -g -fsanitize=address,undefined"),
            ]
        )
    )
    monkeypatch.setattr(provenance.paths, "root", lambda: tmp_path)
    build, extra, problems = provenance.build_info(CPU_ASAN, None)
    assert build["compile_flags"] == ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined"]
    assert (build["build_type"], build["sanitizer"], build["ggml_version"]) == (
        "Debug",
        "AddressUndefinedBehavior",
        "0.20.2",
    )
    assert problems == [
        "native/bench/sam3d_bench.cpp was compiled without the variant's -fno-omit-frame-pointer "
        "(compile_commands.json); rebuild: python -m sam3d build cpu-asan"
    ]


def test_run_name_is_a_safe_new_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.paths, "diagnostics_dir", lambda: tmp_path)
    assert bench.run_dir_for("bench-1") == tmp_path / "bench-1"
    with pytest.raises(bench.BenchError, match="use letters"):
        bench.run_dir_for("../x")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "f").write_text("")
    with pytest.raises(bench.BenchError, match="already exists"):
        bench.run_dir_for("used")


def test_write_result_is_readable_json(tmp_path):
    r = _wrap("cpu", copy.deepcopy(_doc(False)))
    p = record.write(tmp_path / "release-cpu.json", r)
    assert json.loads(p.read_text()) == r.document()
    assert record.read(p) == r


def _with_extra_modes(doc, vulkan=True):
    off = doc["rows"][1]
    for mode in ("zerocopy", "queued"):
        row = copy.deepcopy(doc["rows"][0])
        row["batching"] = mode
        row["samples"] = copy.deepcopy(off["samples"])
        doc["rows"].append(row)
        doc["extra"]["modes"][mode] = {"static_fallback": "none" if vulkan else "no_async_caps"}
    return doc


def test_check_accepts_extra_driver_modes():
    for vulkan in (True, False):
        doc = _with_extra_modes(_doc(vulkan), vulkan)
        r = _wrap("vulkan" if vulkan else "cpu", doc)
        assert checks.check(r) == []


def test_check_names_extra_mode_counts_bytes_and_outputs():
    doc = _with_extra_modes(_doc(True))
    doc["rows"][2]["counters"]["pinned_batches"] = 81
    doc["rows"][2]["counters"]["fallbacks"]["oversized"] = 1
    doc["rows"][3]["counters"]["bytes_uploaded"] -= 4
    doc["rows"][3]["samples"][1]["outputs_sha256"] = "e" * 64
    text = "\n".join(checks.check(_wrap("vulkan", doc)))
    assert "batching zerocopy per image: pinned_batches 81 (expected 82), fallbacks.oversized 1 (expected 0)" in text
    assert "batching queued: 33,193,132 bytes up" in text
    assert "outputs differ between batching queued and off for images [1]" in text


def test_check_rejects_unknown_modes_and_missing_on():
    doc = _doc(True)
    doc["rows"][0]["batching"] = "zerocopy"
    assert "expected rows for batching on and off" in checks.check(_wrap("vulkan", doc))[0]
    doc = _doc(True)
    doc["rows"].append(dict(copy.deepcopy(doc["rows"][0]), batching="turbo"))
    with pytest.raises(record.ResultError, match=r"rows\[2\]\.batching"):  # a mode the record does not know
        _wrap("vulkan", doc)


def test_check_names_the_optional_rows_beside_the_required_ones():
    """The required rows (record.REQUIRED_ROWS) and, optionally, every other row the record knows."""
    doc = _doc(True)
    doc["rows"][0]["batching"] = "zerocopy"
    assert checks.check(_wrap("vulkan", doc)) == [
        "expected rows for batching on and off (and optionally zerocopy, queued), got ['off', 'zerocopy']"
    ]
    no_rows = record.parse({"schema": record.SCHEMA, "variant": "release", "status": "failed", "reason": "x"})
    assert checks.check(no_rows) == ["expected rows for batching on and off (and optionally zerocopy, queued), got []"]


def test_check_without_extra_expects_every_batched_row_batched():
    """ "extra" is optional (the record): without it no mode has a static fallback, so every
    row beside off must be batched, and no driver problem is reported."""

    def without_extra(r):
        d = r.document()
        del d["extra"]
        return record.parse(d)

    r = without_extra(_wrap("vulkan", _doc(True)))
    assert checks.check(r) == []
    r = without_extra(_wrap("cpu", _doc(False)))
    assert checks.check(r) == [
        "batching on per image: async_uploads 0 (expected 199), async_downloads 0 "
        "(expected 232), sync_uploads 202 (expected 3), sync_downloads 233 (expected 1), "
        "pinned_batches 0 (expected 82), fallbacks.no_async_caps 82 (expected 0)"
    ]


def test_check_reports_the_drivers_own_problems_first():
    doc = _doc(True)
    doc["extra"]["problems"] = ["replay: graph 7 left 4 bytes unread"]
    doc["rows"][0]["counters"]["pinned_batches"] = 81
    assert checks.check(_wrap("vulkan", doc)) == [
        "driver: replay: graph 7 left 4 bytes unread",
        "batching on per image: pinned_batches 81 (expected 82)",
    ]


def test_check_counts_an_image_present_in_one_row_only_as_differing():
    """Every image's outputs are compared with off's, paired by image: one only off has and one
    only on has both differ, though their hashes match."""
    doc = _doc(True)
    doc["rows"][0]["samples"][2]["image"] = 7
    assert checks.check(_wrap("vulkan", doc)) == ["outputs differ between batching on and off for images [2, 7]"]


def test_a_static_fallback_of_a_reason_the_counters_lack_counts_zero_of_it():
    doc = _doc(False)
    doc["extra"]["modes"]["on"]["static_fallback"] = "no_such_reason"
    assert checks.check(_wrap("cpu", doc)) == [
        "batching on per image: fallbacks.no_async_caps 82 (expected 0), fallbacks.no_such_reason 0 (expected 82)"
    ]


# ---------------------------------------------------------------- the driver's mode table and output schema
def test_driver_mode_table_names_the_schemas_rows():
    """The modes are declared once, in the driver; its rows are the record's. Needs a built
    driver (`nox -s build`): skips without one."""
    try:
        table = driver.mode_table(list(variants.VARIANTS))
    except NotBuilt as e:
        pytest.skip(str(e))
    assert [m["name"] for m in table] == ["staged", "off", "zerocopy", "queued"]
    assert sorted(m["row"] for m in table) == sorted(record.BATCHING)
    assert {m["row"] for m in table if m["required"]} == set(record.REQUIRED_ROWS)
    assert [m["row"] for m in driver.mode_table(list(variants.VARIANTS), "queued,off,staged")] == [
        "on",
        "off",
        "queued",
    ]
    with pytest.raises(driver.DriverError, match=r"^--modes 'off': off and staged are required"):
        driver.mode_table(list(variants.VARIANTS), "off")


def test_modes_without_a_built_driver_name_the_build_command(tmp_path, monkeypatch):
    monkeypatch.setattr(driver.paths, "root", lambda: tmp_path)
    with pytest.raises(
        driver.NotBuilt, match=r"not built for cpu-asan: build it first \(python -m sam3d build cpu-asan\)"
    ):
        driver.mode_table([CPU_ASAN], "off,staged")


def test_driver_output_must_carry_its_schema(tmp_path):
    p = tmp_path / "driver.json"
    p.write_text(json.dumps({**_doc(), "schema": driver.OUTPUT_SCHEMA}))
    assert driver.read_output(p)["rows"] == _doc()["rows"]
    p.write_text(json.dumps(_doc()))
    with pytest.raises(driver.DriverError, match="has schema None, expected 'sam3d-bench-driver/4'"):
        driver.read_output(p)
    p.write_text("{")
    with pytest.raises(driver.DriverError, match="is not JSON"):
        driver.read_output(p)


def test_junit_counts_read_googletest_xml(tmp_path):
    """The GPU runner's counts from a real GoogleTest XML report: the device tests skip without
    a GPU, a normal case passes, and a filter naming no case leaves an empty report."""
    from sam3d.device import run as device_run
    from sam3d.tools import ctest as ctest_tool

    folder = ctest_tool.build_folder(variants.get("release"))
    device = folder / "tests" / "device" / "sam3d_device_tests"
    normal = folder / "tests" / "sam3d_normal_tests"
    if not device.is_file():
        pytest.skip("release is not built (python -m sam3d build release)")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", GGML_VK_VISIBLE_DEVICES="none")
    runs = (
        (device, "DeviceTwoGpus.*"),
        (normal, "Environment.DefaultOptionsReadBatchingFromTheEnvironment"),
        (normal, "NoSuchCase.*"),
    )
    counts = []
    for i, (binary, filt) in enumerate(runs):
        report = tmp_path / f"r{i}.xml"
        subprocess.run(
            [str(binary), f"--gtest_filter={filt}", f"--gtest_output=xml:{report}"],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        counts.append(device_run.junit_counts(report))
    assert counts == [(0, 0, 1), (1, 0, 0), (0, 0, 0)]


def test_a_bundle_per_variant_holds_the_common_files_its_folder_and_its_manifest(tmp_path):
    """bundle._pack, as make() calls it per variant when one bundle would pass the limit."""
    import tarfile

    from sam3d.running import bundle

    stage = tmp_path / "stage"
    for rel in (
        "run.pyz",
        "sanitizers.json",
        "lsan.supp",
        "release/bin/sam3d_bench",
        "cuda-release/lib/libggml-cuda.so",
    ):
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        (stage / rel).write_text(rel)
    (stage / "manifest.json").write_text("{}")
    manifest = {"bundle": "sam3d-device", "variants": {"cuda-release": {"cuda_libs": ["libcudart.so.13"]}}}
    tarball = bundle._pack(stage, tmp_path / "b.tar.gz", "sam3d-device-cuda-release", manifest)
    with tarfile.open(tarball) as t:
        names = sorted(n for n in t.getnames() if not t.getmember(n).isdir())
        packed = json.loads(t.extractfile("sam3d-device-cuda-release/manifest.json").read())
    assert names == [
        "sam3d-device-cuda-release/" + n
        for n in ("cuda-release/lib/libggml-cuda.so", "lsan.supp", "manifest.json", "run.pyz", "sanitizers.json")
    ]
    assert packed == manifest


def test_bundles_split_per_variant_above_the_limit_and_refuse_one_still_over_it(tmp_path):
    """bundle._split: within the limit one bundle; above it one per variant; a variant's own
    bundle over the limit stops with its name and size (incompressible payloads)."""
    from sam3d.running import bundle

    stage = tmp_path / "stage"
    sizes = {"release": 3000, "cuda-release": 9000}
    for name, n in sizes.items():
        (stage / name / "bin").mkdir(parents=True)
        (stage / name / "bin" / "payload").write_bytes(os.urandom(n))
    (stage / "run.pyz").write_text("run")
    manifest = {"bundle": "sam3d-device", "variants": {name: {} for name in sizes}}
    out = tmp_path / "out"
    out.mkdir()
    split = bundle._split
    assert [t.name for t in split(stage, out, manifest, None)] == ["sam3d-device.tar.gz"]
    assert [t.name for t in split(stage, out, manifest, 20_000)] == ["sam3d-device.tar.gz"]
    assert [t.name for t in split(stage, out, manifest, 11_000)] == [
        "sam3d-device-release.tar.gz",
        "sam3d-device-cuda-release.tar.gz",
    ]
    with pytest.raises(
        bundle.BundleError,
        match=r"even one variant per bundle: sam3d-device-cuda-release\.tar\.gz "
        r"\(0\.0 MiB\)\. Build fewer CUDA architectures",
    ):
        split(stage, out, manifest, 6000)


@pytest.mark.parametrize(
    "archs, cc, runs",
    [
        ("90-real", (9, 0), True),
        ("90-real", (8, 0), False),
        ("90-real", (10, 0), False),
        ("80-real", (8, 6), True),
        ("86-real", (8, 0), False),
        ("90a-real", (9, 0), True),
        ("90a", (10, 0), False),
        ("80-virtual", (9, 0), True),
        ("90-virtual", (8, 9), False),
        ("80", (12, 0), True),
        ("80-real;90-real", (9, 0), True),
        ("native", (7, 5), True),
        ("", (9, 0), False),
    ],
)
def test_cuda_code_runs_on_a_compute_capability_by_nvidias_rules(archs, cc, runs):
    from sam3d.device import run as device_run

    assert device_run.runs_on(archs, cc) is runs


def _run_driver(*args, profile_path=None, timeout=300):
    """The release variant's sam3d_bench on the committed profile (or ``profile_path``) with
    ``args``, as the runner starts it (driver_env); skips where release is not built."""
    exe = driver.path(RELEASE)
    if not exe.is_file():
        pytest.skip("release is not built (python -m sam3d build release)")
    return subprocess.run(
        [str(exe), "--profile", str(profile_path or profile.path()), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env=driver.driver_env(RELEASE, dict(os.environ)),
    )


def test_the_driver_records_the_order_it_issued_and_its_levels_are_the_python_twin_s(tmp_path):
    """sam3d_bench --order levels writes the graphs' names in the order it issued them
    (extra.issue_order, which the limit model counts); for the results written before it, the
    model recomputes the order with sam3d/core/profile.py's level_order, which must agree."""
    p = profile.load()
    out = tmp_path / "o.json"
    r = _run_driver(
        *("--backend", "cpu", "--warmups", "0", "--images", "1", "--order", "levels", "--transfer-only"),
        *("--out", str(out)),
    )
    assert r.returncode == 0, r.stderr
    issued = json.loads(out.read_text())["extra"]["issue_order"]
    assert issued == [p["graphs"][g]["name"] for g in profile.level_order(p)]
    assert issued != [g["name"] for g in p["graphs"]]


def test_the_driver_records_the_duplex_mode_asked_and_what_each_session_got(tmp_path):
    """sam3d_bench --duplex passes the mode to the batched sessions and records it (extra.duplex,
    the record's duplex) with, per mode, whether the session had its second backend
    (sam3d_session_duplex) and the second backend's calls: a session without one makes none. A
    mode the driver does not know is refused in one line naming the choices."""
    base = ("--warmups", "1", "--images", "2", "--transfer-only")
    for backend, duplex in (("cpu", "on"), ("vulkan", "on"), ("vulkan", "off")):
        out = tmp_path / f"{backend}-{duplex}.json"
        r = _run_driver(
            *base,
            *("--backend", backend, "--modes", "off,staged,queued", "--duplex", duplex, "--out", str(out)),
            timeout=600,
        )
        if backend == "vulkan" and "no Vulkan device" in r.stderr:
            continue
        assert r.returncode == 0, r.stderr
        doc = driver.read_output(out)
        assert doc["extra"]["duplex"] == duplex
        for mode, facts in doc["extra"]["modes"].items():
            assert isinstance(facts["session_duplex"], bool), mode
            if not facts["session_duplex"]:
                assert (facts["duplex_calls_per_image"], facts["duplex_event_records_per_image"]) == (0, 0), mode
        if duplex == "off":
            assert not any(f["session_duplex"] for f in doc["extra"]["modes"].values())
        rec = _wrap(backend, doc)
        assert (
            rec.duplex == duplex
            and rec.extra.modes["queued"].session_duplex is doc["extra"]["modes"]["queued"]["session_duplex"]
        )
    r = _run_driver(*base, "--duplex", "both", timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip() == "sam3d_bench: error: --duplex both: expected one of off, auto, on"


def test_the_driver_refuses_an_upload_fed_twice(tmp_path):
    """The driver's own profile loader (native/bench/profile.cpp) lets each upload take at most
    one earlier download, as sam3d/core/profile.py does: the replay and the probes ask one
    place (GraphSpec::feeder) which download feeds an upload."""
    p = profile.load()
    g = next(g for g in p["graphs"] if g["depends_on_downloads"])
    g["depends_on_downloads"].append(dict(g["depends_on_downloads"][0]))
    f = tmp_path / "fed-twice.json"
    f.write_text(json.dumps(p))
    out = tmp_path / "o.json"
    r = _run_driver(
        "--backend", "cpu", "--warmups", "0", "--images", "1", "--out", str(out), profile_path=f, timeout=120
    )
    upload = g["depends_on_downloads"][0]["upload"]
    assert r.returncode == 1 and f"upload {upload} is fed twice" in r.stderr, r.stderr
    assert not out.exists()


def test_the_areas_layout_makes_one_copy_per_graph_and_direction_but_one_per_feeder_read(tmp_path):
    """docs/benchmark.md, "Coalesced copies and I/O areas": in the areas layout each graph's
    downloads are one GGML copy; with one piece per call, so is a staged call's input; a
    zero-copy call's inputs are one copy per earlier graph whose downloads it reads (one if it
    reads none): its fed inputs and its own lie as far apart as their slots. The synchronous
    encoder copies per descriptor. Counted per image by the core (extra.modes), on Vulkan
    (lavapipe without a GPU); every mode's outputs are the same bytes."""
    p = profile.load()
    out = tmp_path / "o.json"
    r = _run_driver(
        *("--backend", "vulkan", "--modes", "off,staged,zerocopy,queued", "--layout", "areas", "--order", "levels"),
        *("--staging-piece-bytes", "max", "--transfer-only", "--warmups", "0", "--images", "1", "--out", str(out)),
    )
    if "no Vulkan device" in r.stderr:
        pytest.skip("no Vulkan device (mesa-vulkan-drivers)")
    assert r.returncode == 0, r.stderr
    extra = json.loads(out.read_text())["extra"]
    batched = [g for g in p["graphs"] if not g["synchronous"]]
    encoder = sum(len(g["uploads"]) + len(g["downloads"]) for g in p["graphs"] if g["synchronous"])
    feeders = sum(max(1, len({d["graph"] for d in g["depends_on_downloads"]})) for g in batched)
    descriptors = sum(len(g["uploads"]) + len(g["downloads"]) for g in p["graphs"])
    copies = {mode: m["ggml_copies_per_image"] for mode, m in extra["modes"].items()}
    assert copies == {
        "off": descriptors,
        "on": 2 * len(batched) + encoder,
        "zerocopy": feeders + len(batched) + encoder,
        "queued": feeders + len(batched) + encoder,
    }
    assert extra["problems"] == [] and extra["outputs_identical_on_off"] is True


@pytest.mark.parametrize("gpu", [False, True])
def test_a_named_cuda_variant_runs_its_cuda_backend_only_with_an_nvidia_gpu(monkeypatch, tmp_path, capsys, gpu):
    """The runner asks left_out_here() as bench's default set does: without an NVIDIA GPU the CUDA
    backend is skipped in one line and the CPU backend still runs (here: fails, nothing is built)."""
    monkeypatch.setattr(driver.ctest.system, "has_nvidia_gpu", lambda: gpu)
    monkeypatch.setenv("SAM3D_ROOT", str(tmp_path))
    v = variants.get("cuda-release")
    f = bench.Facts(prof={}, machine={}, commit="c", dirty=False)
    ran = [
        (r.variant.name, r.backend)
        for r in bench.runs([v], tmp_path / "run", f, run_name="run", images=1, warmups=0, build=False)
    ]
    skipped = [ln for ln in capsys.readouterr().out.splitlines() if "skipped, no NVIDIA GPU here" in ln]
    assert ran == ([("cuda-release", "cpu"), ("cuda-release", "cuda")] if gpu else [("cuda-release", "cpu")])
    assert len(skipped) == (0 if gpu else 1)


def test_a_runs_evidence_keeps_the_reports_of_its_own_variants_only(tmp_path, monkeypatch):
    """ctest-<label>-<variant>.xml: a release run keeps release's reports (every label, the
    validation layer's too) and not cuda-release's, whose name also ends in "release"."""
    monkeypatch.setenv("SAM3D_ROOT", str(tmp_path))
    reports = tmp_path / "build" / "reports"
    reports.mkdir(parents=True)
    for name in (
        "ctest-normal-release.xml",
        "ctest-normal-vulkan-validation-release.xml",
        "ctest-normal-cuda-release.xml",
        "ctest-device-cuda-release.xml",
        "pytest.xml",
    ):
        (reports / name).write_text("<testsuites/>")
    out = tmp_path / "run"
    bench_cli._keep_reports([variants.get("release")], out)
    assert sorted(p.name for p in (out / "reports").iterdir()) == [
        "ctest-normal-release.xml",
        "ctest-normal-vulkan-validation-release.xml",
        "pytest.xml",
    ]
