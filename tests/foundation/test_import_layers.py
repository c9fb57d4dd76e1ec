"""The packages import each other only in the directions docs/architecture.md draws, and no modules import in a circle.

Every module under ``src/longhorizon`` is parsed with :mod:`ast` (nothing is imported); every import
statement counts, at module level or inside a function. A failure names the importing module, the line
and what it imports.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = "longhorizon"

# Families of seed systems: each reuses the layers below it and grows no loop of its own.
FAMILIES = {"lm", "offline", "games", "theory", "structured", "control", "evolution"}
BASE = {"config", "errors"}  # leaf modules: config imports errors, errors imports nothing
LIBRARY = {"runner", "engine", "algos", "envs", "tabular", "core", *BASE}

# Package (or top-level module) -> what it may import besides itself. docs/architecture.md has the same table.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "config": {"errors"},
    "core": set(),
    "envs": {"core", "tabular", *BASE},  # an .npz MDP file is an environment (envs/tabular.py)
    "tabular": {"core", "envs", *BASE},  # tabularizers enumerate the states of real environments
    "algos": {"core", "envs", "tabular", *BASE},
    "engine": {"algos", "core", "envs", "tabular", *BASE},
    "runner": {"engine", "algos", "core", "envs", "tabular", *BASE},
    **{family: set(LIBRARY) for family in FAMILIES},
    "cli": LIBRARY | FAMILIES,
    # reproductions build specs for the runner and the families' loops; they never drive an engine
    "repro": (LIBRARY - {"engine"}) | FAMILIES,
}
ALLOWED["control"] |= {"offline"}  # flow-matching policies (offline.flows) act in control tasks
ALLOWED["evolution"] |= {"lm"}  # ES fine-tuning of language-model policies
ALLOWED["games"] |= {"lm"}  # preference games played by language-model policies


def module_files() -> dict[str, tuple[Path, bool]]:
    """``{dotted module name: (file, is a package's __init__)}`` for every module of the library."""
    modules = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


MODULES = module_files()


def owner(module: str) -> str:
    """The package (or top-level module) of the layer table that ``module`` belongs to."""
    parts = module.split(".")
    if len(parts) == 1:
        return ROOT
    return "cli" if parts[1] == "__main__" else parts[1]  # `python -m longhorizon` is the command line


def resolve(name: str) -> str | None:
    """The library module that importing ``name`` runs (``pkg.mod.attr`` -> ``pkg.mod``), or None outside it."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> list[tuple[int, str]]:
    """``(line, imported library module)`` for every import statement in ``module``, functions included."""
    path, is_package = MODULES[module]
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import: resolved against the importing module's package
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        targets = {resolve(name) for name in names if name.split(".")[0] == ROOT} - {None, ROOT, module}
        # the importer's own parent packages have run before it anyway; of `from pkg import mod`, mod is named
        found += [(node.lineno, target) for target in targets if not module.startswith(target + ".")
                  and not any(other.startswith(target + ".") for other in targets)]
    return sorted(set(found))


GRAPH = {module: imports_of(module) for module in MODULES}


def test_the_layer_table_covers_every_package():
    owners = {owner(module) for module in MODULES} - {ROOT}
    assert owners <= set(ALLOWED), f"packages missing from ALLOWED (and docs/architecture.md): {owners - set(ALLOWED)}"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_what_its_layer_allows(package):
    allowed = ", ".join(sorted(ALLOWED[package])) or "nothing outside itself"
    bad = [f"{module}:{line} imports {target} ({package} may import {allowed})"
           for module, edges in GRAPH.items() if owner(module) == package
           for line, target in edges if owner(target) not in (package, ROOT) and owner(target) not in ALLOWED[package]]
    assert not bad, f"imports against docs/architecture.md's directions for {package}:\n" + "\n".join(bad)


def strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(graph[successor])))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def test_no_modules_import_each_other_in_a_circle():
    graph = {module: sorted({target for _, target in edges}) for module, edges in GRAPH.items()}
    circles = strongly_connected(graph)
    described = []
    for component in circles:
        members = set(component)
        edges = [f"{module}:{line} -> {target}" for module in component for line, target in GRAPH[module]
                 if target in members]
        described.append(" , ".join(component) + "\n    " + "\n    ".join(edges))
    assert not circles, "modules that import each other (also inside functions):\n" + "\n".join(described)


def test_the_checks_see_imports_inside_functions_and_circles():
    """The parser finds a function-level import, and the component search finds a circle and leaves a chain."""
    assert any(target == "longhorizon.runner.run" for _, target in GRAPH["longhorizon.cli"])  # imported inside train()
    assert strongly_connected({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert strongly_connected({"a": ["b"], "b": ["c"], "c": []}) == []
