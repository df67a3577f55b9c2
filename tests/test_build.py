"""What the builds produced: flags in compile_commands.json, one GGML binary per variant,
instrumentation of GGML's libraries, and the sdist hash check of the GGML recipe.

These read the build outputs: `nox -s tests` builds the default set before pytest runs, and
each variant with a build folder is checked (pytest alone on a fresh clone checks none);
GGML's package is the one each build recorded (sam3d/tools/ggml_package.py).
"""

import json
import shlex
import shutil
import struct
import subprocess

import pytest

from sam3d.core import paths, variants
from sam3d.tools import conan, cuda, ggml_package

OPT_LEVELS = {"-O0", "-O1", "-O2", "-O3", "-Os", "-Ofast", "-Og"}
# The variants built here: the default set after `nox -s tests`, and any built by name.
BUILT = [v.name for v in variants.VARIANTS if paths.build_dir(v.name, v.build_type).is_dir()]


def _ggml_package(v):
    return ggml_package.read(v).package_folder


def _commands(path):
    assert path.is_file(), f"{path} missing: run `nox -s build` first"
    return [shlex.split(e["command"]) for e in json.loads(path.read_text())]


def _check_cuda_flags(v, argv, where):
    """An nvcc line: the variant's CUDA flags (Variant.cuda_flags), never a bare -fsanitize=
    (nvcc refuses it), and the variant's architectures only."""
    for flag in v.cuda_flags:
        assert flag in argv, f"{where}: {flag} missing from {argv}"
    assert not any(a.startswith("-fsanitize=") for a in argv), f"{where}: {argv}"
    archs = sorted({a.split("=")[-1] for a in argv if a.startswith("--generate-code=") or a.startswith("-arch")})
    assert archs, f"{where}: no target architecture in {argv}"


def _check_flags(v, commands, where):
    assert commands, where
    for argv in commands:
        if any(a.endswith(".cu") for a in argv):
            _check_cuda_flags(v, argv, where)
            continue
        if not any(a.endswith((".c", ".cpp", ".cc")) for a in argv):
            continue
        opts = [a for a in argv if a in OPT_LEVELS]
        assert opts == [v.opt_flags[0]], f"{where}: {v.name} wants {v.opt_flags[0]}, got {opts} in {argv}"
        for flag in v.compile_flags:
            assert flag in argv, f"{where}: {flag} missing from {argv}"
        has_san = any(a.startswith("-fsanitize=") for a in argv)
        assert has_san == (v.sanitizer is not None), f"{where}: sanitizer flags {argv}"
        if v.asan:
            assert "-fsanitize=address" in " ".join(argv)


@pytest.mark.parametrize("name", BUILT)
def test_core_compile_flags_are_the_variants(name):
    v = variants.get(name)
    cmds = _commands(paths.build_dir(v.name, v.build_type) / "compile_commands.json")
    _check_flags(v, cmds, f"core ({v.name})")


@pytest.mark.parametrize("name", BUILT)
def test_ggml_compile_flags_are_the_variants(name):
    v = variants.get(name)
    cmds = _commands(_ggml_package(v) / "res" / "compile_commands.json")
    _check_flags(v, cmds, f"GGML ({v.name})")
    # GGML's own Vulkan and CUDA backends are built exactly in their variants.
    assert any("ggml-vulkan.cpp" in " ".join(c) for c in cmds) == v.vulkan
    assert any("ggml-cuda.cu" in " ".join(c) for c in cmds) == v.cuda


@pytest.mark.skipif(len(BUILT) < 2, reason="fewer than two variants built here")
def test_one_ggml_binary_per_variant():
    records = [ggml_package.read(variants.get(n)) for n in BUILT]
    assert len({r.package_id for r in records}) == len({r.package_folder for r in records}) == len(BUILT)


def _dynamic_symbols(lib):
    r = subprocess.run(["nm", "-D", str(lib)], capture_output=True, text=True, check=True)
    return r.stdout


@pytest.mark.parametrize("name", BUILT)
def test_ggml_libraries_instrumented_as_the_variant_says(name):
    v = variants.get(name)
    libs = sorted((_ggml_package(v) / "lib").glob("libggml*.so"))
    assert {p.name for p in libs} >= {"libggml.so", "libggml-base.so", "libggml-cpu.so"}
    assert ("libggml-cuda.so" in {p.name for p in libs}) == v.cuda
    for lib in libs:
        syms = _dynamic_symbols(lib)
        assert ("__asan_" in syms) == v.asan, f"{lib}: ASan instrumentation should be {v.asan}"
        assert ("__ubsan_handle" in syms) == v.ubsan, f"{lib}: UBSan instrumentation should be {v.ubsan}"
        assert ("__tsan_" in syms) == v.tsan, f"{lib}: TSan instrumentation should be {v.tsan}"


def test_wrong_sdist_hash_stops_with_both_hashes(tmp_path):
    recipe = tmp_path / "ggml"
    shutil.copytree(paths.root() / ggml_package.RECIPE, recipe)
    data = recipe / "conandata.yml"
    good = "e47ff53506342959ffb3ce15380b82828fea10ec5f208f9ef6915895f1a7a176"
    bad = "0" * 64
    data.write_text(data.read_text().replace(good, bad))
    env = conan.env()
    env["CONAN_HOME"] = str(tmp_path / "home")
    r = subprocess.run(
        [paths.tool("conan"), "source", str(recipe), "--version", "0.20.2"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert bad in out and good in out, out[-2000:]


def _fatbin_entries(lib, tmp_path):
    """(kind, sm) of every entry of the .nv_fatbin section of an ELF file: kind 1 is PTX, 2 is
    SASS (an ELF cubin). The section holds one fatbin per translation unit: a 16-byte header
    (magic 0xBA55ED50, version, header size, size of its entries), then entries each with a
    header (kind u16, header size u32 at 4, payload size u64 at 8, arch u32 at 28)."""
    blob = tmp_path / "fatbin"
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", str(lib), str(blob)], check=True)
    data, out, pos = blob.read_bytes(), [], 0
    while pos + 16 <= len(data):
        magic, _, header, size = struct.unpack_from("<IHHQ", data, pos)
        if magic != 0xBA55ED50:  # padding between fatbins
            pos += 8
            continue
        entry, end = pos + header, pos + header + size
        while entry < end:
            kind, _, eheader, payload = struct.unpack_from("<HHIQ", data, entry)
            (arch,) = struct.unpack_from("<I", data, entry + 28)
            out.append((kind, arch))
            entry += eheader + payload
        pos = end
    return out


@pytest.mark.parametrize("name", [n for n in BUILT if variants.get(n).cuda])
def test_cuda_code_is_sass_for_the_variants_architectures(name, tmp_path):
    """libggml-cuda.so carries device code for exactly the variant's architectures, as SASS
    only (no PTX: PTX from an nvcc newer than the driver would not load there)."""
    v = variants.get(name)
    entries = _fatbin_entries(_ggml_package(v) / "lib" / "libggml-cuda.so", tmp_path)
    assert entries, "no device code in libggml-cuda.so"
    assert {kind for kind, _ in entries} == {2}, f"PTX entries: {[e for e in entries if e[0] != 2][:5]}"
    assert {arch for _, arch in entries} == {int(a.split("-")[0]) for a in v.cuda_architectures.split(";")}


def test_cuda_toolkit_is_the_locked_one():
    """The toolkit the CUDA variants built with: the lock's wheels, verified (sam3d/tools/cuda.py)."""
    tk = cuda.ensure_toolkit()
    assert tk.version == "13.0.88" and cuda.nvcc_release(tk.nvcc) == "13.0"
    assert tk.ident == cuda.install_dir()[0].name
