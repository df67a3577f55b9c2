"""The variant registry (invariants over it, never its list of names) and the Conan profiles made from it."""

import re
import subprocess
import sys
from dataclasses import replace

import pytest
import yaml

from sam3d.core import paths, variants
from sam3d.tools import conan


def test_the_registry_is_consistent():
    assert variants.problems() == []


def test_flags_follow_the_sanitizers_and_the_build_type():
    for v in variants.VARIANTS:
        cfg = v.opt_flags + (() if v.build_type == "Debug" else ("-DNDEBUG",))
        san = ("-fsanitize=" + ",".join(s.fsanitize for s in v.sanitizers),) if v.sanitizer else ()
        assert v.compile_flags == cfg + san, v.name
        assert (v.asan, v.ubsan, v.tsan) == tuple(
            variants.sanitizer(k) in v.sanitizers for k in ("address", "undefined", "thread")
        )
        assert v.backends == ("CPU",) + (("Vulkan",) if v.vulkan else ()) + (("CUDA",) if v.cuda else ())
        assert v.canaries == tuple(s.canary for s in v.sanitizers)


def test_cuda_flags_give_nvcc_its_own_and_the_host_compiler_the_rest():
    for v in variants.VARIANTS:
        own = [f for f in v.config_flags if f.startswith(("-O", "-D")) or f == "-g"]
        host = [f for f in v.config_flags if f not in own]
        # -Xcompiler splits its value at commas: one -fsanitize= per sanitizer.
        want = own + [f"-Xcompiler={f}" for f in host] + [f"-Xcompiler=-fsanitize={s.fsanitize}" for s in v.sanitizers]
        assert list(v.cuda_flags) == want, v.name
        assert not any("," in f for f in v.cuda_flags if f.startswith("-Xcompiler="))


def test_roles_are_declared_and_what_each_needs_is_checked():
    fuzz = variants.with_role(variants.FUZZ)
    assert len(fuzz) == 1 and fuzz[0].compiler == "clang" and fuzz[0].asan
    for role in (variants.BUNDLE, variants.DEVICE):
        assert all(v.gpu for v in variants.with_role(role))
    assert all(v.built for v in variants.VARIANTS if v.roles)
    assert variants.select(None) == variants.with_role(variants.DEFAULT)
    # A role is declared, never inferred: a second Clang+ASan variant does not take the fuzz role ...
    twin = replace(fuzz[0], name="twin", roles=(variants.CI,))
    assert variants.problems(variants.VARIANTS + (twin,)) == [] and not twin.fuzz
    # ... and the checks catch what cannot work.
    bad = [
        replace(fuzz[0], name="b1", roles=(variants.FUZZ,)),
        replace(fuzz[0], name="b2", roles=(variants.BUNDLE,)),
        replace(fuzz[0], name="b3", roles=(variants.CI,), built=False),
        replace(fuzz[0], name="b4", roles=(), sanitizer="Memory"),
    ]
    found = variants.problems(variants.VARIANTS + tuple(bad))
    assert any("2 variants declare the fuzz role" in p for p in found)
    assert any(p.startswith("b2: the bundle and device roles need a GPU") for p in found)
    assert any(p.startswith("b3: not yet built") for p in found)
    assert any(p.startswith("b4: compiler.sanitizer 'Memory'") for p in found)


def test_sanitizer_settings_are_their_sanitizers_parts():
    keys = [s.key for s in variants.SANITIZERS]
    for setting, parts in variants.SANITIZER_SETTINGS.items():
        assert setting == "".join(variants.sanitizer(k).conan for k in sorted(parts, key=keys.index))
    assert {v.sanitizer for v in variants.sanitizer_variants()} <= set(variants.SANITIZER_SETTINGS)


def test_gpu_variants_are_those_with_a_gpu_backend():
    assert variants.gpu_variants() == [v for v in variants.VARIANTS if v.vulkan or v.cuda]
    for v in variants.VARIANTS:
        assert v.ggml_switches == {s.ggml_switch: s in v.sanitizers and not v.cuda for s in variants.SANITIZERS}


def test_cuda_profile_names_the_toolkit_and_the_architectures(tmp_path):
    tk = conan.cuda.Toolkit(root=tmp_path / "nvidia" / "cu13", version="13.0.88", ident="cuda-13.0.88-abc")
    for v in variants.VARIANTS:
        p = _profile_dict(conan.profile_text(v, "12", None, tk if v.cuda else None))
        o, c = p["options"], p["conf"]
        assert o["ggml/*:cuda"] == o["sam3d-core/*:cuda"] == str(v.cuda)
        assert o.get("ggml/*:cuda_architectures") == (v.cuda_architectures if v.cuda else None)
        assert c.get("user.sam3d:cuda_toolkit") == (str(tk.root) if v.cuda else None)
        assert c.get("user.sam3d:cuda_toolkit_id") == ("cuda-13.0.88-abc" if v.cuda else None)
        flags = eval(c["tools.cmake.cmaketoolchain:extra_variables"])  # a Python literal, as Conan reads it
        cu = flags.get(f"CMAKE_CUDA_FLAGS_{v.build_type.upper()}")
        assert (cu["value"] if cu else None) == (" ".join(v.cuda_flags) if v.cuda else None)
    with pytest.raises(conan.ConanError, match="needs the installed toolkit"):
        conan.profile_text(variants.get("cuda-release"), "12")


def test_every_sanitizer_setting_is_a_conan_setting():
    """Each compiler.sanitizer value of the registry is declared in conan/settings_user.yml."""
    declared = yaml.safe_load((paths.root() / "conan" / "settings_user.yml").read_text())["compiler"]
    for v in variants.sanitizer_variants():
        assert v.sanitizer in declared[v.compiler]["sanitizer"], v.name
    assert set(variants.SANITIZER_SETTINGS) <= set(declared["gcc"]["sanitizer"]) & set(declared["clang"]["sanitizer"])


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
    names = list(variants.NAMES)
    assert variants.select(names[::-1]) == list(variants.VARIANTS)
    assert variants.select([]) == [v for v in variants.VARIANTS if v.default_local]
    for v in variants.VARIANTS:
        assert variants.select([v.name]) == [v]  # any variant by name, with or without roles


def test_cli_unknown_variant_fails_at_once():
    r = subprocess.run(
        [sys.executable, "-m", "sam3d", "build", "no-such-variant"], capture_output=True, text=True, timeout=30
    )
    assert r.returncode != 0
    assert "unknown variant 'no-such-variant'" in r.stderr + r.stdout
    assert ", ".join(variants.NAMES) in r.stderr + r.stdout


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


def entries_breaking_the_rule(text: str, may_name: str) -> list[str]:
    """The entries of a suppression file that break its sanitizer's rule (variants.SANITIZERS
    may_suppress): an entry is `<kind>:<frame>` naming what ``may_name`` matches, right after a
    comment giving its cause."""
    bad, previous = [], ""
    for line in (ln.strip() for ln in text.splitlines()):
        if line and not line.startswith("#"):
            m = re.fullmatch(r"[\w-]+:(\S+)", line)
            if not m or not re.search(may_name, m.group(1)) or not previous.startswith("#"):
                bad.append(line)
        previous = line
    return bad


@pytest.mark.parametrize("s", variants.SANITIZERS, ids=lambda s: s.key)
def test_suppressions_name_only_what_their_sanitizer_allows_each_with_its_cause(s):
    text = (paths.root() / variants.SUPPRESSIONS_DIR / s.suppressions).read_text()
    assert entries_breaking_the_rule(text, s.may_suppress[0]) == []


def test_the_rule_catches_a_bad_entry():
    sample = (
        "# cuInit's driver state, freed at exit by the driver (NVIDIA)\nleak:libcuda.so\n"
        "leak:libcublasLt.so\n# GGML\nleak:ggml_backend_cuda_init\nleak:\n"
    )
    may = variants.sanitizer("address").may_suppress[0]
    assert entries_breaking_the_rule(sample, may) == ["leak:libcublasLt.so", "leak:ggml_backend_cuda_init", "leak:"]
    # NVIDIA's driver modules and the Khronos layer may be named; GGML's and the core's libraries,
    # or another layer, may not.
    sample = (
        "# the driver\nleak:libnvidia-eglcore.so\n# the layer\nleak:libVkLayer_khronos_validation.so\n"
        "# GGML\nleak:libggml-vulkan.so\n# core\nleak:libsam3d_core\n# other\nleak:libVkLayer_MESA_device_select.so\n"
    )
    assert entries_breaking_the_rule(sample, may) == [
        "leak:libggml-vulkan.so",
        "leak:libsam3d_core",
        "leak:libVkLayer_MESA_device_select.so",
    ]
