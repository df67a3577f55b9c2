"""sam3d/'s layers (docs/architecture.md, "The layers of `sam3d/`"): every import goes down the fixed layer order, or
stays in its layer, and the imports form no cycle; the GPU machine's program (device/, layer 0)
imports the standard library only. Read from the source with ast, so a lazy import inside a
function counts as much as one at the top."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sam3d"

# Bottom up. A module's layer is its subpackage's; the modules directly in sam3d/ are the
# package itself (nothing in it), `python -m sam3d` and `python -m sam3d.ci`.
LAYERS = {"device": 0, "core": 1, "tools": 2, "running": 3, "results": 4, "cli": 5}
TOP_LEVEL = {"sam3d": 1, "sam3d.__main__": 5, "sam3d.ci": 5}
# Which layers each layer may import (its own included). Reading results (4) uses only the
# core (and the device program's host facts): results from any machine are read without the
# tools or the runners.
MAY_USE = {0: {0}, 1: {0, 1}, 2: {0, 1, 2}, 3: {0, 1, 2, 3}, 4: {0, 1, 4}, 5: {0, 1, 2, 3, 4, 5}}
NAMES = {v: k for k, v in LAYERS.items()}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def imports(root: Path, outside: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """{module: the sam3d modules it imports} for every .py file under root (the package);
    ``outside``, when given, gets {module: the top-level names of what else it imports}."""
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    out: dict[str, set[str]] = {}
    for name, path in files.items():
        found: set[str] = set()
        base = name if _is_package(path) else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    pkg = base.split(".")
                    pkg = pkg[: len(pkg) - (node.level - 1)]
                    mod = ".".join(pkg + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [(mod, a.name) for a in node.names]
            else:
                continue
            for mod, attr in targets:
                if attr is not None and f"{mod}.{attr}" in files:
                    mod = f"{mod}.{attr}"  # `from . import x` of a module x
                if mod in files:
                    found.add(mod)
                elif outside is not None and mod != "__future__":
                    outside.setdefault(name, set()).add(mod.split(".")[0])
        out[name] = found - {name}
    return out


def layer(module: str) -> int:
    if module in TOP_LEVEL:
        return TOP_LEVEL[module]
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in LAYERS:
        raise AssertionError(
            f"{module} belongs to no layer: put it in one of {', '.join(LAYERS)} (tests/test_layers.py)"
        )
    return LAYERS[parts[1]]


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports that go up the layer order, skip into a layer not allowed, or reach the CLI."""
    out = []
    for mod, deps in sorted(graph.items()):
        for dep in sorted(deps):
            a, b = layer(mod), layer(dep)
            if b not in MAY_USE[a]:
                out.append(
                    f"{mod} (layer {a}) imports {dep} (layer {b}); layer {a} may use layers {sorted(MAY_USE[a])}"
                )
            elif dep.startswith("sam3d.cli") and not mod.startswith("sam3d.cli") and mod != "sam3d.__main__":
                out.append(f"{mod} imports the CLI ({dep}): nothing but `python -m sam3d` imports it")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles, each as the path that closes it."""
    found, state = [], {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = "open"
        for d in sorted(graph.get(m, ())):
            if state.get(d) == "open":
                found.append(stack[stack.index(d) :] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_every_module_has_a_layer():
    for mod in imports(PACKAGE):
        assert layer(mod) in MAY_USE


def test_imports_go_down_the_layer_order():
    assert violations(imports(PACKAGE)) == []


def test_imports_have_no_cycle():
    assert cycles(imports(PACKAGE)) == []


def standard_library_only(outside: dict[str, set[str]], layer_name: str) -> list[str]:
    """The imports of a layer's modules that are neither sam3d's nor the standard library's."""
    return [
        f"{mod} imports {dep}, which is not in the standard library"
        for mod, deps in sorted(outside.items())
        if mod.split(".")[1:2] == [layer_name]
        for dep in sorted(deps)
        if dep not in sys.stdlib_module_names
    ]


def test_the_gpu_machine_s_program_uses_the_standard_library_only():
    """device/ runs on a machine with nothing but python3 (the bundle's run.pyz)."""
    outside: dict[str, set[str]] = {}
    imports(PACKAGE, outside)
    assert "subprocess" in outside["sam3d.device.run"]
    assert standard_library_only(outside, "device") == []


def test_the_walk_sees_relative_lazy_and_module_imports():
    graph = imports(PACKAGE)
    assert "sam3d.device.gpu_checks" in graph["sam3d.device.run"]  # `from . import gpu_checks`
    assert "sam3d.tools.provenance" in graph["sam3d.running.bench"]  # `from ..tools import provenance`
    assert "sam3d.cli.main" in graph["sam3d.cli"]


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "sam3d"
    for rel, text in {"__init__.py": "", **files}.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        for parent in p.relative_to(root).parents:
            (root / parent / "__init__.py").touch()
        p.write_text(text)
    return root


def test_the_checks_find_an_upward_import_a_sideways_one_and_a_cycle(tmp_path):
    root = _tree(
        tmp_path,
        {
            "core/paths.py": "from ..tools import conan\n",
            "tools/conan.py": "from ..core import paths\n",
            "results/table.py": "def f():\n    from ..running import bench\n",
            "running/bench.py": "from sam3d.cli import main\n",
            "cli/main.py": "from ..results import table\n",
        },
    )
    graph = imports(root)
    problems = violations(graph)
    assert problems == [
        "sam3d.core.paths (layer 1) imports sam3d.tools.conan (layer 2); layer 1 may use layers [0, 1]",
        "sam3d.results.table (layer 4) imports sam3d.running.bench (layer 3); layer 4 may use layers [0, 1, 4]",
        "sam3d.running.bench (layer 3) imports sam3d.cli.main (layer 5); layer 3 may use layers [0, 1, 2, 3]",
    ]
    assert cycles(graph) == [
        ["sam3d.cli.main", "sam3d.results.table", "sam3d.running.bench", "sam3d.cli.main"],
        ["sam3d.core.paths", "sam3d.tools.conan", "sam3d.core.paths"],
    ]


def test_a_third_party_import_in_the_device_program_is_named(tmp_path):
    root = _tree(
        tmp_path,
        {
            "device/run.py": "import json\nfrom . import host\n",
            "device/host.py": "import yaml\n",
            "core/paths.py": "import yaml\n",
        },
    )
    outside: dict[str, set[str]] = {}
    imports(root, outside)
    assert standard_library_only(outside, "device") == [
        "sam3d.device.host imports yaml, which is not in the standard library"
    ]


def test_a_module_outside_the_layers_is_named(tmp_path):
    root = _tree(tmp_path, {"stray.py": ""})
    with pytest.raises(AssertionError, match="sam3d.stray belongs to no layer"):
        [layer(m) for m in imports(root)]
