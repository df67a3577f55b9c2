"""`python -m sam3d bundle` / `device-import`: GPU runs on a machine with only a driver and python3.

The GPU machine has neither a package registry nor build tools, so the work is split in two:

1. Here, `make()` packs the GPU variants (those with the bundle role, or the ones named) into
   one relocatable bundle, build/bundle/sam3d-device.tar.gz: per variant the device tests, the benchmark
   driver and the floor probe, GGML's libraries and the shared libraries they need that a bare GPU host may lack
   (the Vulkan loader, sanitizer runtimes, libcrypto), with debug info split off into
   build/bundle/sam3d-device-debug.tar.gz; the transfer profile; a manifest of the build
   (machine, glslc, git commit, flags, file hashes); and the program run there, run.pyz: the
   sam3d.device package (sam3d/device/) as one zipapp, which needs only python3. Every ELF
   file's required glibc is checked against GLIBC_MAX.
   The CUDA runtime and cuBLAS (hundreds of MiB) are not packed: the manifest names the
   sonames a variant needs (``cuda_libs``) and run.pyz finds them on the GPU machine. When the
   bundle would pass BUNDLE_LIMIT compressed, each variant gets its own instead,
   build/bundle/sam3d-device-<variant>.tar.gz (folder sam3d-device-<variant>/). GGML's
   libraries are found through the record the variant's build left (sam3d/tools/ggml_package.py):
   packing calls no Conan, so it never waits for the Conan home's lock while another clone builds.
2. There, `python3 sam3d-device/run.pyz --out DIR` runs the device tests (plain and with
   GGML_VK_PERF_LOGGER=1) and the benchmark, and writes raw files (each well under 16 MiB).
3. Back here, `python -m sam3d device-import` (sam3d/cli/bench.py) reads them back
   (read_summary(), driver_output()) and wraps the raw driver output into result records
   (sam3d/results/record.py), with the build facts from the manifest and the GPU
   host's machine facts, rendered like the results of `nox -s bench`.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import zipapp
from pathlib import Path

from .. import device
from ..core import paths, profile, variants
from ..core.errors import NotBuilt, Sam3dError
from ..core.files import check_schema, inside, read_json, read_untrusted
from ..device import gpu_checks, run
from ..tools import checkers, ctest, cuda, ggml_package, provenance, system
from . import driver

# The program run on the GPU machine: the sam3d.device package as one zipapp.
PROGRAM = "run.pyz"

BUNDLE_NAME = "sam3d-device"
# What one transfer to the GPU machine may carry, compressed: above it, a bundle per variant.
BUNDLE_LIMIT = 64 * 2**20
# Ubuntu 24.04's glibc, the GPU machine's (issue facts); Debian 13 builds need 2.41.
GLIBC_MAX = (2, 39)
# Libraries a bare GPU host has (glibc, the C++ runtime, which must not be older than the
# NVIDIA driver's needs) and so are never shipped.
SYSTEM_LIBS = re.compile(r"^(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^.]*|libstdc\+\+|libgcc_s)\.so")
# The CUDA runtime, cuBLAS and the driver's libcuda: never packed (the first two are hundreds of
# MiB; libcuda must be the driver's own). The GPU machine provides them (run.pyz finds them).
CUDA_LIBS = re.compile(r"^lib(cudart|cublas|cublasLt|cuda|nvrtc|nvJitLink)\.so")


# NVIDIA's Vulkan driver (libGLX_nvidia.so.0) loads libglvnd's libraries at run time (not as
# NEEDED entries): on the H200 host without libEGL.so.1 vkCreateInstance fails with
# VK_ERROR_INCOMPATIBLE_DRIVER. Debian packages libegl1, libglvnd0, libglx0.
GLVND_LIBS = {"libEGL.so.1": "libegl1", "libGLdispatch.so.0": "libglvnd0", "libGLX.so.0": "libglx0"}
GLVND_DIR = Path("/usr/lib/x86_64-linux-gnu")


class BundleError(Sam3dError):
    pass


def default_variants() -> list[variants.Variant]:
    """The variants a bundle packs when none is named: those declaring the bundle role."""
    return variants.with_role(variants.BUNDLE)


def pack_program(stage: Path) -> Path:
    """PROGRAM in ``stage``: the sam3d.device package as a zipapp (its __main__.py the archive's),
    run as `python3 run.pyz`, with the sanitizer options of the registry beside it
    (run.RUNTIME_FILE: the bundle has no core/variants.py). Returns the archive."""
    src = Path(device.__file__).parent
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(src, root / "sam3d" / "device", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(src.parent / "__init__.py", root / "sam3d" / "__init__.py")
        shutil.copy2(src / "__main__.py", root / "__main__.py")
        zipapp.create_archive(root, stage / PROGRAM, interpreter="/usr/bin/env python3")
    (stage / run.RUNTIME_FILE).write_text(json.dumps(variants.sanitizer_runtime(), indent=1) + "\n")
    return stage / PROGRAM


def pack_checkers(stage: Path, vs: list[variants.Variant]) -> dict:
    """The GPU checkers run.pyz's --vulkan-validation and --compute-sanitizer use: the validation
    layer's library and manifest in validation/ (with Vulkan variants), the compute-sanitizer
    wheel's files in compute-sanitizer/ (with CUDA variants). Returns their manifest entry."""
    out = {}
    if any(v.vulkan for v in vs):
        lib, manifest = checkers.validation_layer()
        (stage / "validation").mkdir()
        for f in (lib, manifest):
            shutil.copy2(f, stage / "validation" / f.name)
        out["validation_layer"] = f"{checkers.VALIDATION_LAYERS.name} {checkers.VALIDATION_LAYERS.version}"
    if any(v.cuda for v in vs):
        root = checkers.sanitizer_files()
        (stage / "compute-sanitizer").mkdir()
        for f in [*(root / "bin").iterdir(), *(root / "lib").iterdir()]:
            shutil.copy2(f, stage / "compute-sanitizer" / f.name)
        out["compute_sanitizer"] = f"{checkers.SANITIZER_WHEEL} {checkers.sanitizer_pin().version}"
    return out


def _run(cmd: list[str]) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BundleError(f"`{' '.join(cmd)}` failed: {r.stderr.strip()}")
    return r.stdout


def _needed_libs(elf: Path, env: dict[str, str]) -> dict[str, Path]:
    """{soname: resolved path} that ldd reports for an ELF file."""
    r = subprocess.run(["ldd", str(elf)], capture_output=True, text=True, env=env)
    out = {}
    for line in r.stdout.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        if m:
            out[m.group(1)] = Path(m.group(2))
        elif "not found" in line:
            raise BundleError(f"{elf}: {line.strip()}")
    return out


def glibc_required(elf: Path) -> tuple[int, int]:
    """The highest GLIBC_x.y version an ELF file's symbols require (objdump -T)."""
    best = (0, 0)
    for m in re.finditer(r"GLIBC_(\d+)\.(\d+)", _run(["objdump", "-T", str(elf)])):
        best = max(best, (int(m.group(1)), int(m.group(2))))
    return best


def _split_debug(elf: Path, debug_dir: Path) -> None:
    """Moves DWARF into debug_dir/<name>.debug and links it back (gnu-debuglink)."""
    dbg = debug_dir / (elf.name + ".debug")
    _run(["objcopy", "--only-keep-debug", str(elf), str(dbg)])
    _run(["objcopy", "--strip-debug", "--add-gnu-debuglink=" + str(dbg), str(elf)])


def make(
    out_dir: Path | None = None, vs: list[variants.Variant] | None = None, limit: int | None = BUNDLE_LIMIT
) -> list[Path]:
    """Builds the bundle from the already-built GPU variants (the bundle role's, or `vs`); returns the
    tarballs' paths: one, or one per variant when one would pass ``limit`` bytes (None: one)."""
    out_dir = out_dir or paths.root() / "build" / "bundle"
    stage = out_dir / BUNDLE_NAME
    debug = out_dir / f"{BUNDLE_NAME}-debug"
    for d in (stage, debug):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    prof = {"sha256": profile.sha256(), "version": profile.load()["version"]}
    shutil.copy2(profile.path(), stage / "profile.json")
    pack_program(stage)
    for supp in sorted((paths.root() / "native" / "sanitizers").glob("*.supp")):  # what sanitizer_env names
        shutil.copy2(supp, stage / supp.name)
    commit, dirty = provenance.git_commit()
    manifest: dict = {
        "bundle": BUNDLE_NAME,
        "git_commit": commit,
        "git_dirty": dirty,
        "build_machine": provenance.machine(),
        "glslc": provenance.glslc_version(),
        "glibc_max": ".".join(map(str, GLIBC_MAX)),
        "profile": {"path": "profile.json", "sha256": prof["sha256"], "version": prof["version"]},
        "variants": {},
    }
    vs = vs or default_variants()
    manifest["checkers"] = pack_checkers(stage, vs)
    for v in vs:
        if not v.gpu:
            raise BundleError(
                f"{v.name} has no GPU backend; GPU variants: {', '.join(g.name for g in variants.gpu_variants())}"
            )
        build = paths.build_dir(v.name, v.build_type)
        binaries = {
            "sam3d_device_tests": build / "tests" / "device" / "sam3d_device_tests",
            driver.NAME: driver.path(v),
            driver.PROBE: driver.path(v, driver.PROBE),
        }
        if v.cuda:  # its CUDA cases (GGML contract and rig) need a CUDA device: run.pyz runs them there
            binaries[run.NORMAL_TESTS] = build / "tests" / run.NORMAL_TESTS
        for canary, backend in ((gpu_checks.VULKAN_CANARY, v.vulkan), (gpu_checks.CUDA_CANARY, v.cuda)):
            if backend:  # what run.pyz's checkers must report first (native/tests/canaries/)
                binaries[canary] = build / "tests" / canary
        for src in binaries.values():
            if not src.is_file():
                raise NotBuilt(f"{src} is missing: build the variant first (python -m sam3d build {v.name})")
        vdir = stage / v.name
        (vdir / "bin").mkdir(parents=True)
        (vdir / "lib").mkdir()
        (debug / v.name).mkdir()
        # GGML's libraries: the package the variant's build recorded (no Conan call, no lock).
        env = dict(os.environ, LD_LIBRARY_PATH=str(ggml_package.read(v).lib_dir))
        # The closure of what the binaries need, by soname (ldd resolves transitive needs).
        libs: dict[str, Path] = {}
        for src in binaries.values():
            libs.update({k: p for k, p in _needed_libs(src, env).items() if not SYSTEM_LIBS.match(k)})
        cuda_libs = sorted(k for k in libs if CUDA_LIBS.match(k))
        for k in cuda_libs:
            del libs[k]
        for soname, package in GLVND_LIBS.items() if v.vulkan else ():
            if not (GLVND_DIR / soname).exists():
                raise BundleError(f"{GLVND_DIR / soname} is missing: install the Debian package {package}")
            libs[soname] = GLVND_DIR / soname
        # What its runs preload (the registry's vulkan_preload), from the build's native/sanitizers/.
        preload = ctest.preload_libs(v)
        for soname, src in preload.items():
            if not src.is_file():
                raise NotBuilt(f"{src} is missing: build the variant first (python -m sam3d build {v.name})")
            libs[soname] = src
        files = []
        for name, src in binaries.items():
            dst = vdir / "bin" / name
            shutil.copy2(src, dst)
            files.append(dst)
        for soname, src in sorted(libs.items()):
            dst = vdir / "lib" / soname
            shutil.copy2(src.resolve(), dst)
            files.append(dst)
        too_new = []
        for f in files:
            f.chmod(0o755)
            _split_debug(f, debug / v.name)
            need = glibc_required(f)
            if need > GLIBC_MAX:
                too_new.append(f"{f.name} needs GLIBC_{need[0]}.{need[1]}")
        if too_new:
            raise BundleError(
                f"binaries need a glibc newer than {manifest['glibc_max']} (the GPU host's): "
                + "; ".join(too_new)
                + ". Build the bundle on Debian 12."
            )
        b, x, problems = provenance.build_info(v, manifest["glslc"])
        if problems:
            raise BundleError("; ".join(problems))
        manifest["variants"][v.name] = {
            "build": b,
            "extra": x,
            "sanitizer": v.sanitizer,
            "backends": [bk.lower() for bk in v.backends if bk != "CPU"],
            "cuda_libs": cuda_libs,
            # run.pyz sets LD_PRELOAD to these (relative to the bundle's top folder).
            "preload": [f"{v.name}/lib/{soname}" for soname in preload],
            # CMAKE_CUDA_ARCHITECTURES of its GGML: run.pyz checks the GPU's compute capability against it.
            "cuda_architectures": v.cuda_architectures if v.cuda else None,
            # What provides them, as run.pyz's error names it: the lock's pins of the runtime wheels.
            "cuda_runtime_wheels": cuda.runtime_wheels() if cuda_libs else [],
            "files": {str(f.relative_to(stage)): system.sha256_file(f) for f in files},
        }
    (stage / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    for old in out_dir.glob(f"{BUNDLE_NAME}*.tar.gz"):
        old.unlink()
    with tarfile.open(out_dir / f"{BUNDLE_NAME}-debug.tar.gz", "w:gz") as t:
        t.add(debug, arcname=f"{BUNDLE_NAME}-debug")
    return _split(stage, out_dir, manifest, limit)


def _split(stage: Path, out_dir: Path, manifest: dict, limit: int | None) -> list[Path]:
    """The bundles of stage: one, or one per variant when one would pass ``limit`` bytes
    compressed (None: one, whatever its size); BundleError when a bundle is over it still."""
    tarball = _pack(stage, out_dir / f"{BUNDLE_NAME}.tar.gz", BUNDLE_NAME, manifest)
    if limit is None or tarball.stat().st_size <= limit:
        return [tarball]
    tarballs = [tarball]
    if len(manifest["variants"]) > 1:
        tarball.unlink()
        tarballs = [
            _pack(
                stage,
                out_dir / f"{BUNDLE_NAME}-{name}.tar.gz",
                f"{BUNDLE_NAME}-{name}",
                {**manifest, "variants": {name: vm}},
            )
            for name, vm in manifest["variants"].items()
        ]
    over = [f"{t.name} ({t.stat().st_size / 2**20:.1f} MiB)" for t in tarballs if t.stat().st_size > limit]
    if over:
        raise BundleError(
            f"over the {limit / 2**20:g} MiB one transfer to the GPU machine carries, even one "
            f"variant per bundle: {', '.join(over)}. Build fewer CUDA architectures (the variant's "
            "cuda_architectures), or pass --limit-mib 0 where the transfer has no limit"
        )
    return tarballs


# The checkers' folders (pack_checkers) and the backend whose variants use them.
CHECKER_DIRS = {"validation": "vulkan", "compute-sanitizer": "cuda"}


def _pack(stage: Path, tarball: Path, top: str, manifest: dict) -> Path:
    """stage's common files, the folders of the manifest's variants (and of the checkers they
    use: CHECKER_DIRS) and the manifest itself into ``tarball`` under the folder ``top``."""
    backends = {b for vm in manifest["variants"].values() for b in vm.get("backends", ())}
    with tarfile.open(tarball, "w:gz") as t:
        for f in sorted(stage.iterdir()):
            wanted = f.name in manifest["variants"] or CHECKER_DIRS.get(f.name) in backends
            if f.name == "manifest.json" or (f.is_dir() and not wanted):
                continue
            t.add(f, arcname=f"{top}/{f.name}")
        data = (json.dumps(manifest, indent=1) + "\n").encode()
        info = tarfile.TarInfo(f"{top}/manifest.json")
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        t.addfile(info, io.BytesIO(data))
    return tarball


# What device-import reads of run.pyz's summary.json (a file from another machine: every name in
# it that becomes a path is a plain name; hostname and variant names are checked names).
_NAME = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]*$"}
_COUNT = {"type": "integer", "minimum": 0}
# What a checker found in a run: the layer's message count, compute-sanitizer's error count (null:
# the tool left no summary).
_FOUND = {
    "validation_messages": _COUNT,
    "sanitizer_errors": {"type": ["integer", "null"], "minimum": 0},
    "layer_loaded": {"type": "boolean"},
}
SUMMARY_SCHEMA = {
    "type": "object",
    "required": ["machine", "manifest", "variants"],
    "properties": {
        "machine": {"type": "object", "required": ["hostname"], "properties": {"hostname": _NAME}},
        "manifest": {
            "type": "object",
            "required": ["profile", "variants", "git_commit", "build_machine"],
            "properties": {
                "profile": {"type": "object", "required": ["sha256", "version"]},
                "git_commit": {"type": "string"},
                "build_machine": {"type": "object"},
                "variants": {
                    "type": "object",
                    "propertyNames": _NAME,
                    "additionalProperties": {
                        "type": "object",
                        "required": ["build", "extra"],
                        "properties": {"build": {"type": "object"}, "extra": {"type": "object"}},
                    },
                },
            },
        },
        "variants": {
            "type": "object",
            "propertyNames": _NAME,
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "error": {"type": "string"},
                    "bench": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "driver_output": {"type": ["string", "null"]},
                                "error": {"type": "string"},
                                "floor_probe": {"type": ["string", "null"]},
                                "floor_probe_error": {"type": "string"},
                                "backend": {"enum": ["vulkan", "cuda"]},
                                # the driver's names (the result record checks them)
                                "layout": _NAME,
                                "graph_order": _NAME,
                                "transfer_only": {"type": "boolean"},
                                "vulkan_transfer_queue": {"type": "boolean"},
                                "duplex": _NAME,
                            },
                        },
                    },
                    "device_tests": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "object",
                            "required": ["exit_code", "passed", "failed", "skipped"],
                            "properties": {
                                "exit_code": {"type": "integer"},
                                "passed": _COUNT,
                                "failed": _COUNT,
                                "skipped": _COUNT,
                                "report": {"type": ["string", "null"]},
                                "not_applicable": {"type": "string"},
                                **_FOUND,
                            },
                        },
                    },
                    # The GPU checkers' runs (run.pyz --vulkan-validation, --compute-sanitizer).
                    "canaries": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "object",
                            "required": ["exit_code", "caught", "checker"],
                            "properties": {
                                "exit_code": {"type": "integer"},
                                "caught": {"type": "boolean"},
                                "checker": {"type": "string"},
                                **_FOUND,
                            },
                        },
                    },
                    "checked_replays": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["backend", "exit_code", "checker"],
                            "properties": {
                                "backend": {"enum": ["vulkan", "cuda"]},
                                "exit_code": {"type": "integer"},
                                "checker": {"type": "string"},
                                **_FOUND,
                            },
                        },
                    },
                },
            },
        },
    },
}


def read_summary(raw_dir: Path) -> dict:
    """raw_dir/summary.json, as the bundle's run.pyz wrote it, checked against SUMMARY_SCHEMA
    (BundleError naming the file and the field) and with every variant it names a variant of
    this checkout and of its manifest."""
    summary_path = raw_dir / "summary.json"
    if not summary_path.exists() and not summary_path.is_symlink():
        raise BundleError(f"{summary_path} is missing: pass the folder the bundle's run.pyz wrote (--out)")
    summary = check_schema(
        read_json(summary_path, BundleError, untrusted=True),
        SUMMARY_SCHEMA,
        str(summary_path),
        BundleError,
        "; it is the file the bundle's run.pyz writes",
    )
    for name in summary["variants"]:
        if name not in summary["manifest"]["variants"]:
            raise BundleError(
                f"{summary_path}: field 'variants.{name}': not in the manifest's variants "
                f"({', '.join(summary['manifest']['variants'])})"
            )
        try:
            variants.get(name)
        except variants.UnknownVariant as e:
            raise BundleError(f"{summary_path}: field 'variants.{name}': {e}") from None
    return summary


def _entry_file(raw_dir: Path, entry: dict, key: str) -> tuple[Path, str] | None:
    """(path, text) of the file a benchmark entry of summary.json names under ``key``, read only
    from raw_dir (a name with '/' or '..' is refused) as files.read_untrusted reads (a link, a
    non-regular file or one over the bound is refused); None when it names none or the file is
    missing."""
    name = entry.get(key)
    raw = inside(raw_dir, name, f"summary.json's {key}", BundleError) if name is not None else None
    if raw is None or (not raw.exists() and not raw.is_symlink()):
        return None
    return raw, read_untrusted(raw, BundleError).decode("utf-8", errors="replace")


# The facts of a bench run that run.pyz records in its summary entry (device/run.py run_bench()), which
# device-import gives the result when the driver wrote no output of its own: they decide the
# configuration fields of the record (cli/bench.py wrap()).
RUN_FACTS = ("layout", "graph_order", "transfer_only", "vulkan_transfer_queue", "duplex")


def driver_output(raw_dir: Path, entry: dict) -> tuple[dict | None, str | None]:
    """(the driver's document, None) for one benchmark entry of summary.json, or (None, why)."""
    raw = _entry_file(raw_dir, entry, "driver_output")
    if raw is None:
        return None, entry.get("error") or "the driver wrote no output"
    try:
        return driver.read_output(*raw), None
    except driver.DriverError as e:
        return None, str(e)


def probe_output(raw_dir: Path, entry: dict) -> dict:
    """The extra of one benchmark entry's result from its floor probe: {"floor_probe": its
    document or None} and, without one, "floor_probe_error" saying why."""
    raw = _entry_file(raw_dir, entry, "floor_probe")
    if raw is None:
        return {
            "floor_probe": None,
            "floor_probe_error": entry.get("floor_probe_error") or "the bundle ran no floor probe",
        }
    try:
        return {"floor_probe": driver.read_probe(*raw)}
    except driver.DriverError as e:
        return {"floor_probe": None, "floor_probe_error": str(e)}
