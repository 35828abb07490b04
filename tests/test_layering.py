"""Core layering (issue 14): no import cycles, and dependencies point one way.

The import graph of the ``sqlweave`` package is read from the source with :mod:`ast` (nothing is
imported), once for module-level imports (what runs at import time) and once adding the imports
inside functions (deferred, but a cycle there is still two modules that need each other). Imports
under ``if TYPE_CHECKING:`` are left out: they never run. The direction is STYLE.md's:
signatures ← programs ← optimizers, and the core (``sqlweave/*`` but its facade, ``api.py``,
``cli.py`` and ``__init__.py``) and ``gnn`` know nothing of programs or optimizers. Data
synthesis (``sqlweave.synthesis``) stands above the programs (its round trip asks one), beside the
optimizers: only the facade and the optimizers' peers may import it.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Core modules allowed to reach up: the public API (with the compiled program and the compile
#: plan it stands on) and the CLI are a facade over every layer.
FACADE = {"sqlweave", "sqlweave.api", "sqlweave.compiled", "sqlweave.compile_plan", "sqlweave.cli"}
#: Core packages that are facade as a whole: the command line, one module per command.
FACADE_PACKAGES = ("sqlweave.cli.",)

#: (importing layer, imported layer) pairs that point the wrong way.
FORBIDDEN = {
    ("core", "programs"),
    ("core", "optimizers"),
    ("gnn", "programs"),
    ("gnn", "optimizers"),
    ("signatures", "programs"),
    ("signatures", "optimizers"),
    ("programs", "optimizers"),
    ("core", "synthesis"),
    ("gnn", "synthesis"),
    ("signatures", "synthesis"),
    ("programs", "synthesis"),
}


def package_folder(package: str, package_dir: dict[str, str]) -> Path:
    """The folder of ``package``: its own ``package-dir`` entry, else its parent's folder and
    its last name (``sqlweave.lm`` is ``sqlweave/lm/``)."""
    if package in package_dir:
        return REPO / package_dir[package]
    parent, _, last = package.rpartition(".")
    return package_folder(parent, package_dir) / last


def package_files() -> dict[str, Path]:
    """Module name -> source file, for every package pyproject lists, found through its
    ``package-dir`` (root folders map into the package: ``sqlweave.programs`` is ``programs/``;
    a subpackage such as ``sqlweave.lm`` lives in its parent's folder)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config["tool"]["setuptools"]
    package_dir = setuptools["package-dir"]
    files = {}
    for package in setuptools["packages"]:
        for path in sorted(package_folder(package, package_dir).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            files[name] = path
    return files


FILES = package_files()


def _target(name: str) -> str | None:
    """The package module an imported name lives in (``sqlweave.db.Database`` -> ``sqlweave.db``)."""
    while name and name not in FILES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(path: Path, module: str) -> tuple[set[str], set[str]]:
    """``(module-level, function-level)`` package modules imported by one file."""
    top: set[str] = set()
    deferred: set[str] = set()
    package = module if path.stem == "__init__" else module.rpartition(".")[0]

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                continue
            inside = in_function or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: resolve against this module's package
                    parts = package.split(".")
                    parts = parts[: len(parts) - child.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                names = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in FILES else base
                    for alias in child.names
                ]
            for name in names:
                target = _target(name) if name.startswith("sqlweave") else None
                if target and target != module:
                    (deferred if inside else top).add(target)
            visit(child, inside)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), False)
    return top, deferred - top


def import_graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """``(module-level graph, graph with function-level imports added)``."""
    top: dict[str, set[str]] = {}
    every: dict[str, set[str]] = {}
    for module, path in FILES.items():
        now, later = imports_of(path, module)
        top[module] = now
        every[module] = now | later
    return top, every


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``a -> b -> ... -> a``) per strongly connected component of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_one_cycle(graph, component) for component in components]


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    start = min(component)
    paths = {start: [start]}
    todo = [start]
    while todo:  # breadth first, inside the component, back to start
        v = todo.pop(0)
        for w in sorted(graph[v] & component):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                todo.append(w)
    return sorted(component)


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("programs", "signatures", "optimizers", "gnn", "synthesis"):
        return parts[1]
    return "core"


def wrong_way(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module in sorted(graph):
        if module in FACADE or module.startswith(FACADE_PACKAGES):
            continue
        for target in sorted(graph[module]):
            if (layer(module), layer(target)) in FORBIDDEN:
                out.append(f"{module} ({layer(module)}) imports {target} ({layer(target)})")
    return out


def _show(found: Iterable[list[str]]) -> str:
    return "; ".join(" -> ".join(cycle) for cycle in found)


TOP, EVERY = import_graphs()


def test_the_graph_covers_every_layer() -> None:
    layers = {layer(m) for m in FILES}
    assert layers == {"core", "programs", "signatures", "optimizers", "gnn", "synthesis"}
    assert "sqlweave.db" in TOP["sqlweave.metrics"]
    assert "sqlweave.programs.base" in TOP["sqlweave.programs.pet"]
    # a subpackage of the core is read module by module
    assert "sqlweave.lm.batch" in TOP["sqlweave.lm.engine"]
    assert "sqlweave.lm.engine" in TOP["sqlweave.lm"]


def test_no_cycle_among_module_level_imports() -> None:
    found = cycles(TOP)
    assert not found, f"import cycles at module level: {_show(found)}"


def test_no_cycle_with_function_level_imports() -> None:
    found = cycles(EVERY)
    assert not found, (
        f"import cycles through imports inside functions: {_show(found)} "
        "(move the shared piece to the lower module)"
    )


@pytest.mark.parametrize("graph", [TOP, EVERY], ids=["module-level", "function-level"])
def test_dependencies_point_one_way(graph: dict[str, set[str]]) -> None:
    found = wrong_way(graph)
    assert not found, "imports against the layering of STYLE.md:\n" + "\n".join(found)


def test_the_checks_see_a_cycle_and_a_wrong_way_import() -> None:
    # The detectors themselves, on a made-up graph.
    graph = {
        "sqlweave.a": {"sqlweave.b"},
        "sqlweave.b": {"sqlweave.c"},
        "sqlweave.c": {"sqlweave.a"},
        "sqlweave.programs.x": {"sqlweave.optimizers.y"},
        "sqlweave.optimizers.y": set(),
    }
    assert cycles(graph) == [["sqlweave.a", "sqlweave.b", "sqlweave.c", "sqlweave.a"]]
    assert wrong_way(graph) == [
        "sqlweave.programs.x (programs) imports sqlweave.optimizers.y (optimizers)"
    ]
