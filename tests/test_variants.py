"""The variant list and the Conan profiles generated from it."""

import re
import subprocess
import sys

import pytest
import yaml

from sam3d.core import paths, variants
from sam3d.tools import conan


def test_required_variants_and_their_flags():
    assert variants.NAMES == ("cpu-asan", "cpu-tsan", "vulkan-ubsan", "release", "cuda-release", "cuda-asan")
    asan = variants.get("cpu-asan")
    assert asan.compile_flags == ("-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined")
    assert (asan.asan, asan.ubsan, asan.tsan, asan.vulkan) == (True, True, False, False)
    tsan = variants.get("cpu-tsan")
    assert tsan.compile_flags == ("-O1", "-g", "-fsanitize=thread")
    assert (tsan.asan, tsan.ubsan, tsan.tsan, tsan.vulkan, tsan.build_type) == (False, False, True, False, "Debug")
    ub = variants.get("vulkan-ubsan")
    assert ub.compile_flags == ("-O2", "-g", "-DNDEBUG", "-fsanitize=undefined")
    assert (ub.asan, ub.ubsan, ub.tsan, ub.vulkan, ub.compiler) == (False, True, False, True, "clang")
    assert (asan.compiler, tsan.compiler, variants.get("release").compiler) == ("clang", "gcc", "gcc")
    assert [v.name for v in variants.VARIANTS if v.fuzz] == ["cpu-asan"]
    rel = variants.get("release")
    assert rel.compile_flags == ("-O2", "-DNDEBUG")
    assert (rel.sanitizer, rel.tsan, rel.vulkan, rel.backends) == (None, False, True, ("CPU", "Vulkan"))


def test_cuda_variants_and_their_flags():
    rel = variants.get("cuda-release")
    assert (rel.build_type, rel.compile_flags, rel.sanitizer) == ("Release", ("-O2", "-DNDEBUG"), None)
    assert (rel.cuda, rel.vulkan, rel.backends, rel.cuda_architectures) == (True, False, ("CPU", "CUDA"), "90-real")
    assert rel.cuda_flags == ("-O2", "-DNDEBUG")
    asan = variants.get("cuda-asan")
    assert asan.compile_flags == ("-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined")
    assert (asan.asan, asan.ubsan, asan.cuda, asan.compiler) == (True, True, True, "gcc")
    # nvcc takes -O and -g itself (host code); the rest reaches the host compiler, one
    # -fsanitize= per sanitizer since -Xcompiler splits its value at commas.
    assert asan.cuda_flags == ("-O1", "-g", "-Xcompiler=-fno-omit-frame-pointer", "-Xcompiler=-fsanitize=address",
                               "-Xcompiler=-fsanitize=undefined")
    assert [v.name for v in variants.gpu_variants()] == ["vulkan-ubsan", "release", "cuda-release", "cuda-asan"]
    assert not any(v.cuda for v in variants.VARIANTS[:4])


def test_cuda_profile_names_the_toolkit_and_the_architectures(tmp_path):
    tk = conan.cuda.Toolkit(root=tmp_path / "nvidia" / "cu13", version="13.0.88", ident="cuda-13.0.88-abc")
    for v in variants.VARIANTS:
        p = _profile_dict(conan.profile_text(v, "12", None, tk if v.cuda else None))
        o, c = p["options"], p["conf"]
        assert o["ggml/*:cuda"] == o["sam3d-core/*:cuda"] == str(v.cuda)
        assert o.get("ggml/*:cuda_architectures") == ("90-real" if v.cuda else None)
        assert c.get("user.sam3d:cuda_toolkit") == (str(tk.root) if v.cuda else None)
        assert c.get("user.sam3d:cuda_toolkit_id") == ("cuda-13.0.88-abc" if v.cuda else None)
        flags = eval(c["tools.cmake.cmaketoolchain:extra_variables"])  # a Python literal, as Conan reads it
        cu = flags.get(f"CMAKE_CUDA_FLAGS_{v.build_type.upper()}")
        assert (cu["value"] if cu else None) == (" ".join(v.cuda_flags) if v.cuda else None)
    with pytest.raises(conan.ConanError, match="needs the installed toolkit"):
        conan.profile_text(variants.get("cuda-release"), "12")


def test_every_sanitizer_setting_is_a_conan_setting():
    """Each compiler.sanitizer value a variant uses is declared in conan/settings_user.yml."""
    declared = yaml.safe_load((paths.root() / "conan" / "settings_user.yml").read_text())["compiler"]
    for v in variants.sanitizer_variants():
        assert v.sanitizer in declared[v.compiler]["sanitizer"], v.name
    assert set(variants.SANITIZER_FLAGS) <= set(declared["gcc"]["sanitizer"]) & set(declared["clang"]["sanitizer"])


def test_names_are_unique_and_profiles_distinct():
    assert len(set(variants.NAMES)) == len(variants.NAMES)
    tk = conan.cuda.Toolkit(root=paths.root(), version="13.0.88", ident="cuda-13.0.88-abc")
    texts = {conan.profile_text(v, "12", None, tk if v.cuda else None) for v in variants.VARIANTS}
    assert len(texts) == len(variants.VARIANTS)


def test_unknown_variant_lists_valid_names():
    with pytest.raises(variants.UnknownVariant) as e:
        variants.select(["release", "cpu-msan"])
    assert "'cpu-msan'" in str(e.value)
    for name in variants.NAMES:
        assert name in str(e.value)


def test_select_keeps_list_order():
    assert [v.name for v in variants.select(["release", "cpu-asan"])] == ["cpu-asan", "release"]
    assert variants.select([]) == [v for v in variants.VARIANTS if v.default_local]
    assert variants.select(["cuda-asan"]) == [variants.get("cuda-asan")]  # built by name always


def test_cli_unknown_variant_fails_at_once():
    r = subprocess.run([sys.executable, "-m", "sam3d", "build", "no-such-variant"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "unknown variant 'no-such-variant'" in r.stderr + r.stdout
    assert "cpu-asan, cpu-tsan, vulkan-ubsan, release, cuda-release, cuda-asan" in r.stderr + r.stdout


def _profile_dict(text):
    """[section] key=value lines of a Conan profile, as {section: {key: value}}."""
    out, section = {}, None
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out[section] = {}
        else:
            k, _, v = line.partition("=")
            out[section][k] = v
    return out


@pytest.mark.parametrize("name", variants.NAMES)
def test_profile_carries_the_variant(name):
    v = variants.get(name)
    tk = conan.cuda.Toolkit(root=paths.root(), version="13.0.88", ident="cuda-13.0.88-abc")
    p = _profile_dict(conan.profile_text(v, "12", None, tk if v.cuda else None))
    s, o, c = p["settings"], p["options"], p["conf"]
    assert s["build_type"] == v.build_type
    assert s["compiler"] == v.compiler and s["compiler.version"] == "12"
    cc = "clang++" if v.compiler == "clang" else "g++"
    assert f"'cpp': '{cc}'" in c["tools.build:compiler_executables"]
    assert s.get("compiler.sanitizer") == v.sanitizer
    assert o["ggml/*:vulkan"] == str(v.vulkan)
    assert o["sam3d-core/*:vulkan"] == str(v.vulkan)
    flags = eval(c["tools.cmake.cmaketoolchain:extra_variables"])  # a Python literal, as Conan reads it
    key = f"CMAKE_CXX_FLAGS_{v.build_type.upper()}"
    assert flags[key]["value"] == " ".join(v.config_flags)
    assert flags[key]["force"] is True
    assert eval(c["tools.build:cxxflags"]) == list(v.sanitize_flags)
    assert eval(c["tools.build:exelinkflags"]) == list(v.sanitize_flags)
    assert c["tools.cmake.cmake_layout:build_folder_vars"] == f"['const.{v.name}']"


def test_vulkan_include_dir_only_in_vulkan_profiles(tmp_path):
    tk = conan.cuda.Toolkit(root=tmp_path, version="13.0.88", ident="cuda-13.0.88-abc")
    for v in variants.VARIANTS:
        text = conan.profile_text(v, "12", tmp_path, tk if v.cuda else None)
        assert (f"user.sam3d:vulkan_include_dir={tmp_path}" in text) == v.vulkan


def lsan_entries_breaking_the_rule(text: str) -> list[str]:
    """The entries of an lsan.supp that break its rule (its header): an entry is `leak:<frame>`
    naming a frame in libcuda, libcudart or libcublas, right after a comment giving its cause."""
    bad, previous = [], ""
    for line in (ln.strip() for ln in text.splitlines()):
        if line and not line.startswith("#"):
            m = re.fullmatch(r"leak:(\S+)", line)
            if not m or not re.search(r"libcuda\b|libcudart|libcublas", m.group(1)) or not previous.startswith("#"):
                bad.append(line)
        previous = line
    return bad


def test_lsan_suppressions_name_only_nvidia_runtime_frames_each_with_its_cause():
    assert lsan_entries_breaking_the_rule((paths.root() / "native" / "sanitizers" / "lsan.supp").read_text()) == []
    sample = ("# cuInit's driver state, freed at exit by the driver (NVIDIA)\nleak:libcuda.so\n"
              "leak:libcublasLt.so\n# GGML\nleak:ggml_backend_cuda_init\nleak:\n")
    assert lsan_entries_breaking_the_rule(sample) == ["leak:libcublasLt.so", "leak:ggml_backend_cuda_init", "leak:"]
