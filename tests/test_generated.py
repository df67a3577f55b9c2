"""What is derived from the code stays derived: the generated files and page parts (`python -m
sam3d generate`), the facts other files repeat from the variant registry (the CMake canary list,
the GGML recipe's sanitizer switches, the bundle's sanitizer options), the result schema
version the pages and docstrings name, and the README's test command that .ci/run runs. And a
throwaway variant, added to a temporary copy of the checkout, reaches profiles, presets, the CI
matrix and the README table with no other edit than its registry entry."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sam3d.cli import generate
from sam3d.cli.main import parser
from sam3d.core import variants
from sam3d.device import host, run
from sam3d.results import record
from sam3d.running import bundle
from sam3d.tools import ggml_package

ROOT = Path(__file__).resolve().parent.parent


def test_every_derived_file_matches_the_code():
    stale = [str(f.relative_to(ROOT)) for f in generate.drift(ROOT, parser())]
    assert stale == [], f"run `{generate.COMMAND}`: {stale} drifted from the code"


def test_the_record_s_schemas_and_fields_are_among_the_derived_files():
    """`generate` writes the JSON Schemas of the result record and of `report` and `compare`'s
    JSON output, and the record's field tables in docs/results.md: each a valid JSON Schema of
    the document's own version."""
    import jsonschema

    from sam3d.results import compare, table

    schemas = {
        "sam3d/results/result.schema.json": record.SCHEMA,
        "docs/schemas/report.schema.json": table.REPORT_SCHEMA,
        "docs/schemas/comparison.schema.json": compare.COMPARISON_SCHEMA,
    }
    assert set(schemas) <= set(generate.FILES)
    assert set(generate.BLOCKS["docs/results.md"]) == {"record"}
    assert {"variants", "schema"} <= set(generate.BLOCKS["README.md"])
    for rel, schema_id in schemas.items():
        written = json.loads((ROOT / rel).read_text())
        jsonschema.Draft202012Validator.check_schema(written)
        assert written["$id"] == schema_id, rel
    assert record.SCHEMA in generate.schema_line()
    fields = generate.record_fields()
    for model in (record.Record, record.Row, record.Sample, record.Counters):
        assert f"### {model.__name__}\n" in fields
    assert "| `transfer_only` |" in fields and "| `layout` |" in fields


def test_the_check_fails_on_a_drifted_block(tmp_path):
    text = (ROOT / "README.md").read_text()
    drifted = generate.fill(text, "variants", "| variant |\n| --- |\n| `gone` |")
    assert generate.fill(drifted, "variants", generate.variant_table()) == text
    with pytest.raises(generate.MissingMarker):
        generate.fill(text.replace(generate.end("variants"), ""), "variants", "x")


def test_cmake_canaries_are_the_registry_s():
    """native/tests/CMakeLists.txt adds a canary per -fsanitize= name it finds in the flags."""
    cmake = (ROOT / "native" / "tests" / "CMakeLists.txt").read_text()
    found = dict(
        re.findall(
            r'if\(CMAKE_CXX_FLAGS MATCHES "-fsanitize=\[\^ \]\*(\w+)"\)\s*\n'
            r'\s*list\(APPEND canaries "([^"]+)"\)',
            cmake,
        )
    )
    assert found == {s.fsanitize: "|".join(s.canary) for s in variants.SANITIZERS}
    for s in variants.SANITIZERS:
        assert (ROOT / "native" / "tests" / "canaries" / f"{s.canary[0]}.cpp").is_file(), s.key
        assert (ROOT / variants.SUPPRESSIONS_DIR / s.suppressions).is_file(), s.key


def test_cmake_builds_each_vulkan_preload_where_the_registry_preloads_it():
    """native/CMakeLists.txt adds native/sanitizers/ with Vulkan and exactly the -fsanitize= names
    whose sanitizer has a vulkan_preload; that folder defines each such target."""
    cmake = (ROOT / "native" / "CMakeLists.txt").read_text()
    (cond,) = re.findall(r"if\(SAM3D_VULKAN AND ([^\n]+)\)\n\s*add_subdirectory\(sanitizers\)", cmake)
    assert set(re.findall(r'-fsanitize=\[\^ \]\*(\w+)', cond)) == {
        s.fsanitize for s in variants.SANITIZERS if s.vulkan_preload
    }
    targets = set(
        re.findall(r"add_library\((\w+) MODULE", (ROOT / "native" / "sanitizers" / "CMakeLists.txt").read_text())
    )
    assert {s.vulkan_preload for s in variants.SANITIZERS if s.vulkan_preload} <= targets


def test_ggml_recipe_switches_are_the_registry_s():
    """The recipe's generate() sets GGML_SANITIZE_* from compiler.sanitizer and the cuda option;
    each expression, evaluated for every setting, gives what Variant.ggml_switches says."""
    recipe = (ROOT / ggml_package.RECIPE / "conanfile.py").read_text()
    exprs = dict(re.findall(r'"(GGML_SANITIZE_\w+)": (.+),\n', recipe))
    assert set(exprs) == {s.ggml_switch for s in variants.SANITIZERS}
    for setting in (None, *variants.SANITIZER_SETTINGS):
        for cuda in (False, True):
            scope = {"sanitizer": setting or "", "self": SimpleNamespace(options=SimpleNamespace(cuda=cuda))}
            got = {k: bool(eval(e, {}, scope)) for k, e in exprs.items()}
            v = variants.Variant(
                name="x", summary="", build_type="Debug", opt_flags=(), roles=(), sanitizer=setting, cuda=cuda
            )
            assert got == v.ggml_switches, (setting, cuda)


def test_the_bundle_s_sanitizer_options_are_the_registry_s(tmp_path):
    """run.pyz reads the registry's sanitizer options from the file the bundle writes beside it
    (run.RUNTIME_FILE): for every setting the same options as the build machine's tests."""
    bundle.pack_program(tmp_path)
    packed = json.loads((tmp_path / run.RUNTIME_FILE).read_text())
    for setting in (None, *variants.SANITIZER_SETTINGS):
        for cuda in (False, True):
            assert host.sanitizer_env(packed, setting, tmp_path, cuda) == host.sanitizer_env(
                variants.sanitizer_runtime(), setting, tmp_path, cuda
            )
    asan = host.sanitizer_env(packed, "Address", tmp_path, cuda=True)
    assert asan["ASAN_OPTIONS"].endswith(":protect_shadow_gap=0")
    assert asan["LSAN_OPTIONS"].startswith(f"suppressions={tmp_path / 'lsan.supp'}:")


def _texts():
    """The pages and the package's sources that may name a result schema version, with their
    text: record.py, which lists the versions it still reads, left out, and so is the field
    table docs/results.md has generated from it."""
    pages = [ROOT / "README.md", ROOT / "ci" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for p in pages:
        text = p.read_text()
        if p == ROOT / "docs" / "results.md":
            head, rest = text.split(generate.begin("record"), 1)
            text = head + rest.split(generate.end("record"), 1)[1]
        yield p, text
    yield from (
        (p, p.read_text())
        for p in sorted((ROOT / "sam3d").rglob("*.py"))
        if p != ROOT / "sam3d" / "results" / "record.py"
    )


def test_pages_and_docstrings_name_the_current_result_schema():
    """record.py alone lists the versions it still reads; everything else names the one it writes."""
    wrong = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p, text in _texts()
        for m in re.finditer(r"sam3d-bench-result/\d+", text)
        if m.group(0) != record.SCHEMA
    ]
    assert wrong == [], f"the code writes {record.SCHEMA}"


def test_ci_run_runs_the_test_command_the_readme_names():
    stages = (ROOT / "ci" / "stages.sh").read_text()
    (command,) = re.findall(r'^ci_test_command\(\) \{ echo "(.+)"; \}$', stages, re.M)
    assert re.search(r"^ci_run_test\(\) \{ \$\(ci_test_command\); \}$", stages, re.M)
    assert f"\n    {command}\n" in (ROOT / "README.md").read_text()
    assert re.search(r"^\[ \$rc -ne 0 \] \|\| ci_stage test ", (ROOT / ".ci" / "run").read_text(), re.M)


def test_commands_that_take_the_default_set_say_so():
    """Every command that names no variant takes the default set (variants.select): its help, and
    its session's docstring, say so rather than "every variant" (the generated pages show both)."""
    sessions = generate.sessions_table()
    for name, text, _ in generate._subcommands(parser()):
        if name in ("build", "publish", "ctest"):
            assert "default set" in text, name
    for name in ("build", "publish", "sanitize", "tests", "bench"):
        row = next(line for line in sessions.splitlines() if line.startswith(f"| `nox -s {name}` |"))
        assert "default set" in row and "every variant" not in row, name


# --- a throwaway variant in a temporary copy ---------------------------------------------------

THROWAWAY = '''    Variant(
        name="cpu-throwaway",
        summary="CPU backend, ASan, -O2 (a test's throwaway)",
        build_type="RelWithDebInfo",
        opt_flags=("-O2", "-g"),
        roles=(DEFAULT, CI),
        sanitizer="Address",
    ),
'''


def _copy(tmp: Path) -> Path:
    root = tmp / "checkout"
    for rel in ("sam3d", "docs", "conan", "native/tests", "ci", ".github"):
        shutil.copytree(ROOT / rel, root / rel, ignore=shutil.ignore_patterns("__pycache__"))
    for rel in ("README.md", "noxfile.py", "conanfile.py", "native/CMakeLists.txt"):
        shutil.copy2(ROOT / rel, root / rel)
    return root


def _py(root: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, SAM3D_ROOT=str(root), PYTHONPATH=str(root))
    return subprocess.run(
        [sys.executable, *args], cwd=root, env=env, input=stdin, capture_output=True, text=True, timeout=120
    )


def test_a_new_registry_entry_is_the_only_edit_a_variant_needs(tmp_path):
    root = _copy(tmp_path)
    reg = root / "sam3d" / "core" / "variants.py"
    text = reg.read_text()
    assert text.count("\n)\n\nNAMES") == 1
    reg.write_text(text.replace("\n)\n\nNAMES", "\n" + THROWAWAY.rstrip("\n") + "\n)\n\nNAMES"))

    r = _py(root, "-m", "sam3d", "generate", "--check")
    assert r.returncode == 1 and "README.md differs from the code" in r.stdout, r.stdout + r.stderr
    r = _py(root, "-m", "sam3d", "generate")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _py(root, "-m", "sam3d", "generate", "--check").returncode == 0

    # The README table and the variants page.
    for page in ("README.md", "docs/variants.md"):
        assert "| `cpu-throwaway` |" in (root / page).read_text(), page
    # The CI matrix, as the workflow's matrix job makes it.
    records = _py(root, "-m", "sam3d", "variants", "--json")
    assert records.returncode == 0 and "cpu-throwaway" in records.stdout, records.stderr
    m = json.loads(_py(root, "-m", "sam3d.ci", "matrix", "-", stdin=records.stdout).stdout)
    mine = [e for e in m["include"] if e["variant"] == "cpu-throwaway"]
    assert [(e["os"], e["sanitize"], e["run_name"]) for e in mine] == [
        (o, True, f"ci-cpu-throwaway-{o}") for o in ("debian12", "debian13")
    ]
    # Its Conan profile and its CMake test preset.
    folder = root / "build" / "cpu-throwaway" / "RelWithDebInfo" / "generators"
    folder.mkdir(parents=True)
    (folder / "CMakePresets.json").write_text(json.dumps({"testPresets": [{"name": "conan-relwithdebinfo"}]}))
    probe = _py(
        root,
        "-c",
        "import json; from sam3d.core import variants; from sam3d.tools import conan, ctest\n"
        "v = variants.get('cpu-throwaway')\n"
        "print(json.dumps([conan.profile_text(v, '12'), ctest.test_preset(v),"
        " [x.name for x in variants.select(None)]]))",
    )
    assert probe.returncode == 0, probe.stderr
    profile, preset, default = json.loads(probe.stdout)
    assert "compiler.sanitizer=Address" in profile and "['const.cpu-throwaway']" in profile
    assert "-fsanitize=address" in profile and "-O2 -g -DNDEBUG" in profile
    assert preset["name"] == "cpu-throwaway" and "ASAN_OPTIONS" in preset["environment"]
    assert "cpu-throwaway" in default
