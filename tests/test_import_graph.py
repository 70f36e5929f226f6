"""cgtool's modules import each other without a cycle, deferred imports (inside functions) and
``TYPE_CHECKING`` ones included, and the layers hold: ``capture`` and ``inspect`` never import each
other, ``report`` imports no ``capture`` module, ``artifacts`` imports nothing above it. The graph is read from the source (``ast``), not from what one run happens to
import."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PKG = Path(__file__).resolve().parent.parent / "cgtool"


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
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


def import_graph() -> nx.DiGraph:
    modules = _modules()
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
