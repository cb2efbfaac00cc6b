"""No import cycles in ``mosaic/`` and ``renderers/``: no module imports another that imports it back.

The walk reads every ``.py`` file with :mod:`ast` (nothing is imported) and takes as an edge
``A -> B`` every import in A of a project module B:

- imports anywhere in the file count, function-level (lazy) ones included: a lazy import only
  hides a cycle until the function runs;
- relative imports are resolved against A's package; ``from P import name`` is an edge to the
  module ``P.name`` when that is a module of the project, to ``P`` otherwise;
- ``importlib.import_module("literal")`` counts like an import;
- imports under ``if TYPE_CHECKING:`` do not count (they never run);
- importing ``P.sub`` is an edge to ``P.sub`` only, not to the package ``P`` whose ``__init__``
  Python also runs: a package ``__init__`` that re-exports its submodules would otherwise be a
  cycle with each of them.

On failure the test prints one cycle of each strongly connected group, e.g.
``mosaic.spec -> mosaic.holdout -> mosaic.spec``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mosaic", "renderers")


def module_files(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """``{dotted module name: file}`` of every module under the given top-level packages."""
    out = {}
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """``(level, module, names)`` of every import statement in ``tree``, skipping ``if TYPE_CHECKING:``
    bodies; ``importlib.import_module("x")`` gives ``(0, "x", [])``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                yield 0, a.name, []
        elif isinstance(node, ast.ImportFrom):
            yield node.level, node.module or "", [a.name for a in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield 0, node.args[0].value, []
        stack.extend(ast.iter_child_nodes(node))


def import_graph(root: Path = ROOT, packages=PACKAGES) -> dict[str, set[str]]:
    """``{module: {project modules it imports}}``."""
    files = module_files(root, packages)
    graph: dict[str, set[str]] = {}
    for mod, f in files.items():
        package = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        edges = set()
        for level, name, names in _imports(ast.parse(f.read_text(), str(f))):
            if level:
                base = package.split(".")
                base = base[: len(base) - (level - 1)]
                name = ".".join(base + ([name] if name else []))
            targets = [f"{name}.{n}" for n in names if f"{name}.{n}" in files]
            if len(targets) < len(names) or not names:
                targets.append(name)
            edges |= {t for t in targets if t in files and t != mod}
        graph[mod] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle ``[a, b, ..., a]`` per strongly connected group of two or more modules (Tarjan)."""
    index, low, on, stack, groups = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_through(min(g), graph, g) for g in groups]


def _cycle_through(start: str, graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest cycle ``[start, ..., start]`` inside ``group`` (breadth first)."""
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & group):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return path[::-1] + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in a strongly connected group but on no cycle")


def test_no_import_cycles():
    graph = import_graph()
    # the walk sees top-level, function-level and relative imports (so this test can fail)
    assert "mosaic.holdout" in graph["mosaic.spec"] and "mosaic.spec" in graph["mosaic.sampling"]
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_walk_finds_lazy_and_relative_cycles(tmp_path):
    pkg = tmp_path / "mosaic"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b  # a package re-export is no cycle\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mosaic import c\n"
                              "def f():\n    from .sub.b import g\n")
    (pkg / "sub" / "b.py").write_text("import mosaic.c\n")
    (pkg / "c.py").write_text("import importlib\nimportlib.import_module('mosaic.a')\n")
    graph = import_graph(tmp_path, ("mosaic",))
    assert graph["mosaic.a"] == {"mosaic.sub.b"} and graph["mosaic.sub"] == {"mosaic.sub.b"}
    assert cycles(graph) == [["mosaic.a", "mosaic.sub.b", "mosaic.c", "mosaic.a"]]
    (pkg / "c.py").write_text("")
    assert cycles(import_graph(tmp_path, ("mosaic",))) == []
