"""The import graph of ``mosaic/`` and ``renderers/``: no module imports another that imports it
back, and every function-level import of a project module is an explicit, reasoned exception.

The walk reads every ``.py`` file with :mod:`ast` (nothing is imported) and takes as an edge
``A -> B`` every import in A of a project module B:

- imports anywhere in the file count: module-level ones, those under ``if TYPE_CHECKING:`` (a
  cycle for the type checker is a layering cycle all the same) and function-level (lazy) ones (a
  lazy import only hides a cycle until the function runs);
- relative imports are resolved against A's package; ``from P import name`` is an edge to the
  module ``P.name`` when that is a module of the project, to ``P`` otherwise;
- ``importlib.import_module("literal")`` counts like an import;
- importing ``P.sub`` is an edge to ``P.sub`` only, not to the package ``P`` whose ``__init__``
  Python also runs: a package ``__init__`` that re-exports its submodules would otherwise be a
  cycle with each of them.

On failure the test prints one cycle of each strongly connected group, e.g.
``mosaic.spec -> mosaic.holdout -> mosaic.spec``.

A function-level import of a project module is allowed only where :data:`LAZY` lists the pair
``(importer, imported)`` with one of the :data:`REASONS` (docs/DESIGN.md, "Lazy imports"), and the
reason is checked against the code: ``HELP`` pairs are imported by ``mosaic --help`` and would
load a module it does not; ``HEAVY`` pairs would load a heavy library (:data:`HEAVY_LIBS`) that
importing the importer does not.
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
    """``(level, module, names, kind)`` of every import statement in ``tree``, ``kind`` one of
    ``"module"``, ``"type_checking"`` (under ``if TYPE_CHECKING:``) and ``"lazy"`` (inside a
    function); ``importlib.import_module("x")`` gives ``(0, "x", [], kind)``."""
    stack = [(tree, "module")]
    while stack:
        node, kind = stack.pop()
        if isinstance(node, ast.Import):
            for a in node.names:
                yield 0, a.name, [], kind
        elif isinstance(node, ast.ImportFrom):
            yield node.level, node.module or "", [a.name for a in node.names], kind
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield 0, node.args[0].value, [], kind
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            kind = "lazy"
        if isinstance(node, ast.If) and _is_type_checking(node.test) and kind == "module":
            stack.extend((child, "type_checking") for child in node.body)
            stack.extend((child, kind) for child in node.orelse)
            stack.append((node.test, kind))
            continue
        stack.extend((child, kind) for child in ast.iter_child_nodes(node))


def import_edges(root: Path = ROOT, packages=PACKAGES) -> dict[tuple[str, str], set[str]]:
    """``{(module, what it imports): the kinds of import}`` (see :func:`_imports`). What it imports
    is a project module, or ``"<lib>"`` for a third-party top-level package."""
    files = module_files(root, packages)
    out: dict[tuple[str, str], set[str]] = {}
    for mod, f in files.items():
        package = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        for level, name, names, kind in _imports(ast.parse(f.read_text(), str(f))):
            if level:
                base = package.split(".")
                base = base[: len(base) - (level - 1)]
                name = ".".join(base + ([name] if name else []))
            targets = [f"{name}.{n}" for n in names if f"{name}.{n}" in files]
            if len(targets) < len(names) or not names:
                targets.append(name)
            for t in targets:
                if t in files and t != mod:
                    out.setdefault((mod, t), set()).add(kind)
                elif not level and t.split(".")[0] not in packages:
                    out.setdefault((mod, f"<{t.split('.')[0]}>"), set()).add(kind)
    return out


def import_graph(root: Path = ROOT, packages=PACKAGES) -> dict[str, set[str]]:
    """``{module: {project modules it imports}}``, every kind of import counted."""
    graph: dict[str, set[str]] = {m: set() for m in module_files(root, packages)}
    for a, b in import_edges(root, packages):
        if b in graph:
            graph[a].add(b)
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


#: heavy libraries: importing any of them costs seconds (torch alone about 2 s), so a module that
#: does not need one at import time imports the mosaic module that brings it inside a function
HEAVY_LIBS = ("torch", "torchvision", "diffusers", "transformers", "accelerate", "datasets", "pyarrow", "matplotlib",
              "ray", "safetensors", "scipy", "sklearn")

HELP = "keeps `mosaic --help` fast"
HEAVY = "keeps heavy libraries out of importing the importer"
PACKAGE = "the imported module's package imports the importer at module level"
REASONS = (HELP, HEAVY, PACKAGE)

#: every function-level import of a project module: ``(importer, imported): reason``
LAZY: dict[tuple[str, str], str] = {
    ("mosaic.claims", "mosaic.lab.data"): HEAVY,
    ("mosaic.cli.analyze", "mosaic.diagnostics.config"): HELP,
    ("mosaic.cli.analyze", "mosaic.diagnostics.runs"): HELP,
    ("mosaic.cli.analyze", "mosaic.io"): HELP,
    ("mosaic.cli.analyze", "mosaic.lab.config"): HELP,
    ("mosaic.cli.audit", "mosaic.audit"): HELP,
    ("mosaic.cli.audit", "mosaic.evaluation.quality"): HELP,
    ("mosaic.cli.audit", "mosaic.spec"): HELP,
    ("mosaic.cli.autoencoder", "mosaic.kinds"): HELP,
    ("mosaic.cli.autoencoder", "mosaic.lab.autoencoder"): HELP,
    ("mosaic.cli.autoencoder", "mosaic.lab.config"): HELP,
    ("mosaic.cli.autoencoder", "mosaic.lab.data"): HELP,
    ("mosaic.cli.autoencoder", "mosaic.lab.diffusion"): HELP,
    ("mosaic.cli.autoencoder", "mosaic.lab.diffusion.config"): HELP,
    ("mosaic.cli.autoencoder", "mosaic.lab.run"): HELP,
    ("mosaic.cli.autoencoder", "mosaic.spec"): HELP,
    ("mosaic.cli.autoencoder", "mosaic.torch_data"): HELP,
    ("mosaic.cli.common", "mosaic.io"): HELP,
    ("mosaic.cli.common", "mosaic.spec"): HELP,
    ("mosaic.cli.common", "mosaic.executors"): HELP,
    ("mosaic.cli.data", "mosaic.dataset"): HELP,
    ("mosaic.cli.data", "mosaic.layout_check"): HELP,
    ("mosaic.cli.data", "mosaic.executors"): HELP,
    ("mosaic.cli.data", "mosaic.parquet"): HELP,
    ("mosaic.cli.data", "mosaic.preview"): HELP,
    ("mosaic.cli.data", "mosaic.verify"): HELP,
    ("mosaic.cli.data", "renderers"): HELP,
    ("mosaic.cli.evaluate", "mosaic.foreign_names"): HELP,
    ("mosaic.cli.evaluate", "mosaic.evaluation"): HELP,
    ("mosaic.cli.evaluate", "mosaic.folder_kinds"): HELP,
    ("mosaic.cli.evaluate", "mosaic.evaluation.learned"): HELP,
    ("mosaic.cli.evaluate", "mosaic.evaluation.table"): HELP,
    ("mosaic.cli.evaluate", "mosaic.locks"): HELP,
    ("mosaic.cli.evaluate", "mosaic.spec"): HELP,
    ("mosaic.cli.evaluate", "mosaic.verify"): HELP,
    ("mosaic.cli.export", "mosaic.export"): HELP,
    ("mosaic.cli.export", "mosaic.parquet"): HELP,
    ("mosaic.cli.reproduce", "mosaic.verdicts"): HELP,
    ("mosaic.cli.reproduce", "mosaic.reproduce"): HELP,
    ("mosaic.cli.schema", "mosaic.file_schemas"): HELP,
    ("mosaic.cli.schema", "mosaic.io"): HELP,
    ("mosaic.cli.sweep", "mosaic.io"): HELP,
    ("mosaic.cli.sweep", "mosaic.locks"): HELP,
    ("mosaic.cli.splits", "mosaic.holdout"): HELP,
    ("mosaic.cli.splits", "mosaic.plots"): HELP,
    ("mosaic.cli.splits", "mosaic.splits"): HELP,
    ("mosaic.cli.sweep", "mosaic.verdicts"): HELP,
    ("mosaic.cli.sweep", "mosaic.lab.cost"): HELP,
    ("mosaic.cli.sweep", "mosaic.lab.cost_table"): HELP,
    ("mosaic.cli.sweep", "mosaic.lab.data"): HELP,
    ("mosaic.cli.sweep", "mosaic.report"): HELP,
    ("mosaic.cli.sweep", "mosaic.sweep"): HELP,
    ("mosaic.cli.sweep", "mosaic.trials"): HELP,
    ("mosaic.cli.train", "mosaic.evaluation.table"): HELP,
    ("mosaic.cli.train", "mosaic.evaluation.trial_scores"): HELP,
    ("mosaic.cli.train", "mosaic.lab.config"): HELP,
    ("mosaic.cli.train", "mosaic.lab.cost"): HELP,
    ("mosaic.cli.train", "mosaic.lab.cost_table"): HELP,
    ("mosaic.cli.train", "mosaic.lab.data"): HELP,
    ("mosaic.cli.train", "mosaic.lab.diffusion"): HELP,
    ("mosaic.cli.train", "mosaic.lab.diffusion.sampling"): HELP,
    ("mosaic.cli.train", "mosaic.lab.diffusion.scoring"): HELP,
    ("mosaic.cli.train", "mosaic.lab.run"): HELP,
    ("mosaic.cli.train", "mosaic.lab.transformer"): HELP,
    ("mosaic.cli.train", "mosaic.locks"): HELP,
    ("mosaic.cli.verify", "mosaic.against_spec"): HELP,
    ("mosaic.cli.verify", "mosaic.dataset"): HELP,
    ("mosaic.cli.verify", "mosaic.verify"): HELP,
    ("mosaic.dataset", "mosaic.parquet"): HEAVY,
    ("mosaic.against_spec", "mosaic.parquet"): HEAVY,
    ("mosaic.diagnostics.analyze", "mosaic.lab.transformer.data"): PACKAGE,
    ("mosaic.evaluation.folder", "mosaic.parquet"): HEAVY,
    ("mosaic.evaluation.check", "mosaic.evaluation.degrade"): HEAVY,
    ("mosaic.evaluation.load", "mosaic.evaluation.learned"): HEAVY,
    ("mosaic.evaluation.load", "mosaic.evaluation.parser"): HEAVY,
    ("mosaic.evaluation.quality", "mosaic.evaluation.degrade"): HEAVY,
    ("mosaic.evaluation.quality", "mosaic.evaluation.parser"): HEAVY,
    ("mosaic.file_schemas", "mosaic.lab.diffusion"): HEAVY,
    ("mosaic.file_schemas", "mosaic.lab.transformer"): HEAVY,
    ("mosaic.lab.autoencoder", "mosaic.lab.data"): HEAVY,
    ("mosaic.reproduce", "mosaic.lab.cost"): HEAVY,
    ("mosaic.reproduce", "mosaic.lab.data"): HEAVY,
    ("mosaic.torch_data", "mosaic.parquet"): HEAVY,
    ("mosaic.evaluation.trial_scores", "mosaic.diagnostics.runs"): HEAVY,
    ("mosaic.evaluation.trial_scores", "mosaic.lab.run_folder"): HEAVY,
    ("mosaic.lab.run_record", "mosaic.lab.run_folder"): HEAVY,
    ("mosaic.lab.run_record", "mosaic.lab.checkpoint"): HEAVY,
    ("mosaic.trial_runs", "mosaic.lab.diffusion.config"): HEAVY,
    ("mosaic.trial_runs", "mosaic.lab.transformer.config"): HEAVY,
    ("mosaic.trials", "mosaic.lab.data"): HEAVY,
    ("mosaic.trials", "mosaic.lab.diffusion"): HEAVY,
    ("mosaic.trials", "mosaic.lab.transformer"): HEAVY,
}

def runtime_closure(edges: dict[tuple[str, str], set[str]], start: set[str]) -> set[str]:
    """What importing ``start`` imports: modules and ``<lib>`` names, over module-level imports only
    (importing ``P.sub`` runs the package ``P`` too)."""
    adjacency: dict[str, list[str]] = {}
    for (a, b), kinds in edges.items():
        if "module" in kinds:
            adjacency.setdefault(a, []).append(b)
    out, todo = set(), list(start)
    while todo:
        m = todo.pop()
        if m in out:
            continue
        out.add(m)
        parts = m.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts)) if not m.startswith("<")]
        todo += adjacency.get(m, [])
    return out


def _packages_above(module: str, importer: str) -> list[str]:
    """The packages ``module`` is in that ``importer`` is not in (importing ``module`` runs them)."""
    parts = module.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if not (importer + ".").startswith(p + ".")]


def _heavy(closure: set[str]) -> set[str]:
    return {lib for lib in HEAVY_LIBS if f"<{lib}>" in closure}


def test_no_import_cycles():
    graph = import_graph()
    # the walk sees module-level, function-level and relative imports (so this test can fail)
    assert "mosaic.grammar" in graph["mosaic.spec"] and "mosaic.spec" in graph["mosaic.sampling"]
    assert "mosaic.lab.transformer.data" in graph["mosaic.diagnostics.analyze"]
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_every_function_level_import_is_allowed_with_a_reason():
    edges = import_edges()
    files = module_files(ROOT)
    lazy = {pair for pair, kinds in edges.items() if "lazy" in kinds and pair[1] in files}
    both = sorted(f"{a} -> {b}" for (a, b) in lazy if "module" in edges[(a, b)] )
    assert not both, "imported at module level and again inside a function (drop the inner import):\n" + "\n".join(both)
    missing = sorted(f"{a} -> {b}" for (a, b) in lazy - set(LAZY))
    assert not missing, ("function-level imports of mosaic modules not in LAZY (move them to module level, or list "
                         "them with a reason):\n" + "\n".join(missing))
    stale = sorted(f"{a} -> {b}" for (a, b), why in LAZY.items() if (a, b) not in lazy)
    assert not stale, "LAZY lists imports that are not function-level any more:\n" + "\n".join(stale)
    assert set(LAZY.values()) <= set(REASONS)
    help_closure = runtime_closure(edges, {"mosaic.cli"})
    wrong = []
    for (a, b), why in sorted(LAZY.items()):
        if (a, b) not in lazy:
            continue
        if why == HELP and not (a in help_closure and not runtime_closure(edges, {b}) <= help_closure):
            wrong.append(f"{a} -> {b}: {a} is not imported by `mosaic --help`, or {b} adds nothing to it")
        if why == PACKAGE and not any(a in runtime_closure(edges, {p}) for p in _packages_above(b, a)):
            wrong.append(f"{a} -> {b}: no package of {b} imports {a}")
        if why == HEAVY and not _heavy(runtime_closure(edges, {b})) - _heavy(runtime_closure(edges, {a})):
            wrong.append(f"{a} -> {b}: {b} brings no heavy library that {a} does not already import")
    assert not wrong, "LAZY reasons that do not hold (move these imports to module level):\n" + "\n".join(wrong)


def test_mosaic_help_imports_no_heavy_library():
    closure = runtime_closure(import_edges(), {"mosaic.cli"})
    assert not _heavy(closure) and {"mosaic.cli.train", "mosaic.errors"} <= closure
    assert "mosaic.lab.run" not in closure


def test_the_walk_finds_lazy_and_relative_cycles(tmp_path):
    pkg = tmp_path / "mosaic"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b  # a package re-export is no cycle\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mosaic import d\n"
                              "def f():\n    from .sub.b import g\n")
    (pkg / "sub" / "b.py").write_text("import mosaic.c\n")
    (pkg / "c.py").write_text("import importlib\nimportlib.import_module('mosaic.a')\n")
    (pkg / "d.py").write_text("import numpy\n")
    edges = import_edges(tmp_path, ("mosaic",))
    assert edges[("mosaic.a", "mosaic.d")] == {"type_checking"} and edges[("mosaic.a", "mosaic.sub.b")] == {"lazy"}
    assert edges[("mosaic.d", "<numpy>")] == {"module"}
    graph = import_graph(tmp_path, ("mosaic",))
    assert graph["mosaic.a"] == {"mosaic.sub.b", "mosaic.d"} and graph["mosaic.sub"] == {"mosaic.sub.b"}
    assert cycles(graph) == [["mosaic.a", "mosaic.sub.b", "mosaic.c", "mosaic.a"]]
    (pkg / "c.py").write_text("")
    assert cycles(import_graph(tmp_path, ("mosaic",))) == []
    (pkg / "d.py").write_text("import mosaic.a\n")  # a cycle through a TYPE_CHECKING import is a cycle
    assert cycles(import_graph(tmp_path, ("mosaic",))) == [["mosaic.a", "mosaic.d", "mosaic.a"]]
    closure = runtime_closure(import_edges(tmp_path, ("mosaic",)), {"mosaic.sub.b"})
    assert closure == {"mosaic.sub.b", "mosaic.sub", "mosaic", "mosaic.c"}  # the lazy and TYPE_CHECKING ones do not run


#: The house's module size (issue 26: a module over about 600 lines does two jobs; split it by job).
MAX_MODULE_LINES = 600


def test_no_module_is_over_the_house_size():
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
             for d in ("mosaic", "renderers") for p in (ROOT / d).rglob("*.py")}
    assert len(sizes) > 50 and sizes["mosaic/evaluation/parser.py"] > 300  # the walk reads the real tree
    over = sorted(f"{p}: {n} lines" for p, n in sizes.items() if n > MAX_MODULE_LINES)
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split each by job; docs/DESIGN.md):\n" + "\n".join(over)
