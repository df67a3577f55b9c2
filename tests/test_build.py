"""What the builds produced: flags in compile_commands.json, one GGML binary per variant,
instrumentation of GGML's libraries, and the sdist hash check of the GGML recipe.

These read the build outputs: `nox -s tests` builds every variant before pytest runs.
"""

import json
import shlex
import shutil
import subprocess

import pytest

from sam3d.core import paths, variants
from sam3d.tools import conan

OPT_LEVELS = {"-O0", "-O1", "-O2", "-O3", "-Os", "-Ofast", "-Og"}


def _ggml_package(v):
    return conan.ggml_package_folder(v)


def _commands(path):
    assert path.is_file(), f"{path} missing: run `nox -s build` first"
    return [shlex.split(e["command"]) for e in json.loads(path.read_text())]


def _check_flags(v, commands, where):
    assert commands, where
    for argv in commands:
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


@pytest.mark.parametrize("name", variants.NAMES)
def test_core_compile_flags_are_the_variants(name):
    v = variants.get(name)
    cmds = _commands(paths.build_dir(v.name, v.build_type) / "compile_commands.json")
    _check_flags(v, cmds, f"core ({v.name})")


@pytest.mark.parametrize("name", variants.NAMES)
def test_ggml_compile_flags_are_the_variants(name):
    v = variants.get(name)
    cmds = _commands(_ggml_package(v) / "res" / "compile_commands.json")
    _check_flags(v, cmds, f"GGML ({v.name})")
    # GGML's own Vulkan backend is built exactly in the Vulkan variants.
    assert any("ggml-vulkan.cpp" in " ".join(c) for c in cmds) == v.vulkan


def test_one_ggml_binary_per_variant():
    _, pkgs = conan.ggml_packages()
    folders = {conan.ggml_package_folder(v) for v in variants.VARIANTS}  # exactly one match each
    assert len(folders) == len(variants.VARIANTS)
    assert len(pkgs) >= len(variants.VARIANTS)


def _dynamic_symbols(lib):
    r = subprocess.run(["nm", "-D", str(lib)], capture_output=True, text=True, check=True)
    return r.stdout


@pytest.mark.parametrize("name", variants.NAMES)
def test_ggml_libraries_instrumented_as_the_variant_says(name):
    v = variants.get(name)
    libs = sorted((_ggml_package(v) / "lib").glob("libggml*.so"))
    assert {p.name for p in libs} >= {"libggml.so", "libggml-base.so", "libggml-cpu.so"}
    for lib in libs:
        syms = _dynamic_symbols(lib)
        assert ("__asan_" in syms) == v.asan, f"{lib}: ASan instrumentation should be {v.asan}"
        assert ("__ubsan_handle" in syms) == v.ubsan, f"{lib}: UBSan instrumentation should be {v.ubsan}"
        assert ("__tsan_" in syms) == v.tsan, f"{lib}: TSan instrumentation should be {v.tsan}"


def test_wrong_sdist_hash_stops_with_both_hashes(tmp_path):
    recipe = tmp_path / "ggml"
    shutil.copytree(paths.root() / "conan" / "recipes" / "ggml", recipe)
    data = recipe / "conandata.yml"
    good = "e47ff53506342959ffb3ce15380b82828fea10ec5f208f9ef6915895f1a7a176"
    bad = "0" * 64
    data.write_text(data.read_text().replace(good, bad))
    env = conan.env()
    env["CONAN_HOME"] = str(tmp_path / "home")
    r = subprocess.run([paths.tool("conan"), "source", str(recipe), "--version", "0.20.2"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert bad in out and good in out, out[-2000:]
