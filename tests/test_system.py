"""System prerequisites: package checks, Vulkan header detection, hash checks."""

import hashlib

import pytest

from sam3d.core import variants
from sam3d.tools import system


def test_vulkan_variants_need_the_vulkan_packages():
    cpu = system.required_packages([variants.get("cpu-asan")])
    assert "glslc" not in cpu and "libgtest-dev" in cpu
    allv = system.required_packages(list(variants.VARIANTS))
    for p in ("glslc", "libvulkan-dev", "spirv-headers", "mesa-vulkan-drivers", "libegl1", "clang"):
        assert p in allv
    assert "clang" not in system.required_packages([variants.get("release")])


def test_clang_runtime_package_follows_the_installed_clang(monkeypatch):
    monkeypatch.setattr(system, "clang_major", lambda: "19")
    pkgs = system.required_packages([variants.get("vulkan-ubsan")])
    assert "libclang-rt-19-dev" in pkgs and "llvm-19" in pkgs  # llvm-19: the symbolizer
    monkeypatch.setattr(system, "clang_major", lambda: None)
    pkgs = system.required_packages([variants.get("vulkan-ubsan")])
    assert "clang" in pkgs and not any(p.startswith("libclang-rt") for p in pkgs)


def test_missing_package_is_named(monkeypatch):
    monkeypatch.setattr(system, "BASE_PACKAGES", ("g++", "sam3d-no-such-package"))
    with pytest.raises(system.SystemPrerequisiteError) as e:
        system.ensure_packages([variants.get("cpu-asan")], install=False)
    msg = str(e.value)
    assert "sam3d-no-such-package" in msg
    assert "apt-get install -y sam3d-no-such-package" in msg
    assert "g++" not in msg.split("missing system packages:")[1].split(";")[0]


def test_vulkan_header_version_parses(tmp_path):
    (tmp_path / "vulkan").mkdir()
    (tmp_path / "vulkan" / "vulkan_core.h").write_text(
        "#define VK_HEADER_VERSION 309\n"
        "#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, 1, 4, VK_HEADER_VERSION)\n"
    )
    assert system.vulkan_header_version(tmp_path) == (1, 4, 309)
    assert system.vulkan_header_version(tmp_path / "nothing") is None


def test_fetched_vulkan_headers_are_new_enough():
    inc = system.vulkan_include_dir()
    found = (
        system.vulkan_header_version(inc)
        if inc
        else system.vulkan_header_version(__import__("pathlib").Path("/usr/include"))
    )
    assert found is not None and found >= system.VULKAN_HEADERS_MIN


def test_hash_mismatch_shows_both_hashes(tmp_path):
    f = tmp_path / "x.deb"
    f.write_bytes(b"not the package")
    actual = hashlib.sha256(b"not the package").hexdigest()
    with pytest.raises(system.HashMismatch) as e:
        system.check_sha256(f, system.VULKAN_DEV_SHA256)
    assert system.VULKAN_DEV_SHA256 in str(e.value) and actual in str(e.value)


def test_clang_variants_name_the_installed_clang_s_symbolizer(monkeypatch, tmp_path):
    """A Clang variant's runs point each of its sanitizers at clang's llvm-symbolizer; a GCC
    variant's (its runtimes symbolize themselves) and a machine without one set nothing."""
    from sam3d.tools import ctest

    fake = tmp_path / "llvm-symbolizer"
    fake.write_text("")
    monkeypatch.setattr(system, "clang_symbolizer", lambda: fake)
    env = ctest.test_env(variants.get("cpu-asan"), base={})
    assert env["ASAN_SYMBOLIZER_PATH"] == env["UBSAN_SYMBOLIZER_PATH"] == str(fake)
    assert "TSAN_SYMBOLIZER_PATH" not in env
    assert not any(k.endswith("_SYMBOLIZER_PATH") for k in ctest.test_env(variants.get("cpu-tsan"), base={}))
    monkeypatch.setattr(system, "clang_symbolizer", lambda: None)
    assert not any(k.endswith("_SYMBOLIZER_PATH") for k in ctest.test_env(variants.get("cpu-asan"), base={}))


def test_the_clang_symbolizer_is_the_one_of_clang_s_version(monkeypatch):
    monkeypatch.setattr(system, "clang_major", lambda: "0")
    assert system.clang_symbolizer() is None  # no llvm-0 here
