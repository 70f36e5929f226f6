"""cgtool's modules import each other without a cycle, deferred imports (inside functions) and
``TYPE_CHECKING`` ones included, and the layers hold: ``capture`` and ``inspect`` never import each
other, ``report`` imports no ``capture`` module, ``artifacts`` imports nothing above it. The graph
is read from the source (``ast``), not from what one run happens to import."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PKG = Path(__file__).resolve().parent.parent / "cgtool"


def _modules(pkg: Path = PKG) -> dict[str, Path]:
    out = {}
    for p in pkg.rglob("*.py"):
        parts = p.relative_to(pkg.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The cgtool modules ``name`` imports anywhere in its body: at the top, inside functions, and under
    ``if TYPE_CHECKING:`` (a circle of types is a circle of modules too). ``from a import b`` counts as
    an import of ``a.b`` where that is a module."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                out.add(f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod)
    return {m for m in out if m in modules and m != name}


def import_graph(pkg: Path = PKG) -> nx.DiGraph:
    modules = _modules(pkg)
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for name, path in modules.items():
        g.add_edges_from((name, m) for m in _imports(name, path, modules))
    return g


def test_the_graph_is_read_from_the_source():
    g = import_graph()
    # Imports known to be there, one deferred: the reader of the graph must see them all.
    assert g.has_edge("cgtool.inspect.deps", "cgtool.artifacts.trace")
    assert g.has_edge("cgtool.cli.demo", "cgtool.artifacts.trace")  # inside a function
    assert len(g) > 90 and g.number_of_edges() > 300


def test_a_deferred_or_type_checking_import_closes_a_cycle(tmp_path: Path):
    """The reader sees the imports a cycle hides in: inside a function, under TYPE_CHECKING, relative."""
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from toy.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .c import x\n")
    (pkg / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toy import a\n")
    g = import_graph(pkg)
    assert sorted(map(sorted, nx.simple_cycles(g))) == [["toy.a", "toy.sub.b", "toy.sub.c"]]


def test_no_import_cycles():
    g = import_graph()
    cycles = sorted(sorted(c) for c in nx.simple_cycles(g))
    assert not cycles, "import cycles (each a list of its modules):\n" + "\n".join(map(str, cycles[:20]))


def test_the_layers_import_one_way():
    g = import_graph()
    bad = [(a, b) for a, b in g.edges
           if (a.startswith("cgtool.capture") and b.startswith("cgtool.inspect"))
           or (a.startswith("cgtool.inspect") and b.startswith("cgtool.capture"))
           or (a.startswith("cgtool.report") and b.startswith("cgtool.capture"))
           or (a.startswith("cgtool.artifacts") and b.split(".")[1] in ("capture", "inspect", "report", "cli"))]
    assert not bad
