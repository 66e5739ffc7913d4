"""The package's layers, read from its source: no import cycle, and nothing low imports what stands above it.

Every import counts, the ones inside functions too (they are how cycles used to hide). The layers, from the top:
the command line; analysis (what reads finished runs); launch (starting ranks, serve, the shims, doctor); run (one
timing protocol, its patterns, rank 0's reporter); report (console and OSU text); transports; measure (what a run is
made of: plan, kernels, rows, stats, results); collectives (one spec per operation, which measure's kernels are
built from); control (control planes and the wire format); and the root's errors, argument types, buffer helpers and
lazy numpy. control/, collectives/, measure/ and transports/ must import nothing above them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "fabricbench"
# Top first. A module's layer is its sub-package, or its own name at the root.
LAYERS = ["__main__", "cli", "analysis", "launch", "run", "report", "transports", "measure", "collectives", "control"]
# The root's shared pieces (lazy: numpy at first use; buffers: filling, patterns and poison for every buffer;
# terminal: the one sanitiser of untrusted text; hostinfo: the CPUs a rank may use) and the package itself.
BASE = {"errors", "argtypes", "lazy", "buffers", "terminal", "hostinfo", ""}
GUARDED = ("control", "collectives", "measure", "transports")


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """{module: the package's modules it imports, anywhere in its body}; read once per package (callers only read)."""
    modules = {module_name(path, package): path for path in package.rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from a.b import c`: the module a.b.c where c is one, else a.b for the names it defines
                targets = [
                    f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                    for alias in node.names
                ]
            else:
                continue
            found |= {resolve(t) for t in targets if t.split(".")[0] == package.name}
        graph[name] = found - {None, name}
    return graph


def layer(module: str) -> int:
    """A module's layer: 0 is the top; the root's base pieces lie below every layer."""
    parts = module.split(".")[1:]
    head = parts[0] if parts else ""
    if head in BASE:
        return len(LAYERS)
    return LAYERS.index(head)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import of a module in a higher layer (a lower index) than the importer's."""
    return sorted((src, dst) for src, targets in graph.items() for dst in targets if layer(dst) < layer(src))


def test_every_module_has_a_layer():
    for module in import_graph():
        layer(module)  # ValueError names a module outside every layer


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("guarded", GUARDED)
def test_the_lower_layers_import_nothing_above_them(guarded):
    arrows = [(src, dst) for src, dst in upward(import_graph()) if src.split(".")[1] == guarded]
    assert arrows == []


def test_the_walk_finds_cycles_and_upward_imports_including_those_inside_functions(tmp_path):
    """The checks above can fail: a made-up package with an in-function cycle and an upward import."""
    package = tmp_path / "fabricbench"
    (package / "control").mkdir(parents=True)
    (package / "run").mkdir()
    for path in (package, package / "control", package / "run"):
        (path / "__init__.py").write_text("")
    (package / "control" / "plane.py").write_text("def f():\n    from fabricbench.run import runner\n")
    (package / "run" / "runner.py").write_text("import fabricbench.control.plane\n")
    graph = import_graph(package)
    assert graph["fabricbench.control.plane"] == {"fabricbench.run.runner"}
    assert cycles(graph) == [["fabricbench.control.plane", "fabricbench.run.runner"]]
    assert upward(graph) == [("fabricbench.control.plane", "fabricbench.run.runner")]
