"""Structural diff of two captures in fixed categories: added / removed / increased / decreased /
unchanged (the same names in CLI flags, JSON keys and table headers)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Any

from cgtool.errors import UsageError
from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.names import demangle, short_name
from cgtool.inspect.topo import analyze


class Change(str, Enum):
    ADDED = "added"  # present in B only
    REMOVED = "removed"  # present in A only
    INCREASED = "increased"  # count or value grew from A to B
    DECREASED = "decreased"  # count or value shrank
    UNCHANGED = "unchanged"  # the same in both


@dataclass(frozen=True)
class Row:
    section: str  # "kernel", "node_type", "edge_type", "metric"
    key: str
    a: float
    b: float
    change: Change

    def to_json(self) -> dict[str, Any]:
        return {"section": self.section, "key": self.key, "a": self.a, "b": self.b, "change": self.change.value}


def _change(a: float, b: float, present_a: bool = True, present_b: bool = True) -> Change:
    if not present_a:
        return Change.ADDED
    if not present_b:
        return Change.REMOVED
    return Change.INCREASED if b > a else Change.DECREASED if b < a else Change.UNCHANGED


def _counter_rows(section: str, ca: Counter[str], cb: Counter[str]) -> list[Row]:
    return [Row(section, k, ca.get(k, 0), cb.get(k, 0), _change(ca.get(k, 0), cb.get(k, 0), k in ca, k in cb))
            for k in sorted(set(ca) | set(cb))]


@dataclass
class GraphDiff:
    rows: list[Row]

    def by_change(self, section: str | None = None) -> dict[str, list[Row]]:
        out: dict[str, list[Row]] = {c.value: [] for c in Change}
        for r in self.rows:
            if section is None or r.section == section:
                out[r.change.value].append(r)
        return out

    def changed(self) -> bool:
        return any(r.change is not Change.UNCHANGED for r in self.rows)

    def counts(self) -> dict[Change, int]:
        """How many rows have each kind of change."""
        return {c: sum(1 for r in self.rows if r.change is c) for c in Change}

    def to_json(self) -> dict[str, Any]:
        return {"summary": {c.value: n for c, n in self.counts().items()}, "rows": [r.to_json() for r in self.rows]}


def _by_source(g: GraphData) -> Counter[str]:
    """Nodes per (source line, kernel): where kernels repeat, the line tells them apart."""
    out: Counter[str] = Counter()
    for n in g.nodes:
        label = g.source_label(n.index)
        if label is not None:
            out[f"{label} {short_name(n.kernel_name, 1 << 30) if n.kernel_name else n.node_type.value}"] += 1
    return out


def diff(a: GraphData, b: GraphData) -> GraphDiff:
    def kernels(g: GraphData) -> Counter[str]:
        # Keyed by the full demangled name: kernels that differ only in a template argument
        # (Gelu vs clamp elementwise kernels) stay apart. Renderers shorten for display.
        return Counter(demangle(n.kernel_name) for n in g.nodes if n.kernel_name)

    ta, tb = analyze(a), analyze(b)
    rows = _counter_rows("kernel", kernels(a), kernels(b))
    rows += _counter_rows("node_type", Counter(ta.nodes_by_type), Counter(tb.nodes_by_type))
    rows += _counter_rows("edge_type", Counter(ta.edges_by_type), Counter(tb.edges_by_type))
    la, lb = _by_source(a), _by_source(b)
    if la and lb:  # both recorded with source lines: match nodes by the line that made them
        rows += _counter_rows("source", la, lb)
    metrics = {
        "nodes": (ta.nodes, tb.nodes),
        "edges": (ta.edges, tb.edges),
        "kernels": (sum(kernels(a).values()), sum(kernels(b).values())),
        "distinct_kernels": (ta.distinct_kernels, tb.distinct_kernels),
        "depth": (ta.depth, tb.depth),
        "max_level_width": (ta.max_level_width, tb.max_level_width),
        "critical_path_nodes": (len(ta.critical_path), len(tb.critical_path)),
        "redundant_edges": (len(ta.redundant_edges), len(tb.redundant_edges)),
    }
    rows += [Row("metric", k, x, y, _change(x, y)) for k, (x, y) in metrics.items()]
    return GraphDiff(rows)


#: Conditions for ``cgtool diff --fail-on``: name -> (section, key or None for any, changes that fail).
FAIL_CONDITIONS: dict[str, tuple[str, str | None, tuple[Change, ...]]] = {
    "any": ("*", None, (Change.ADDED, Change.REMOVED, Change.INCREASED, Change.DECREASED)),
    "kernels-increased": ("metric", "kernels", (Change.INCREASED,)),
    "nodes-increased": ("metric", "nodes", (Change.INCREASED,)),
    "edges-increased": ("metric", "edges", (Change.INCREASED,)),
    "depth-increased": ("metric", "depth", (Change.INCREASED,)),
    "width-decreased": ("metric", "max_level_width", (Change.DECREASED,)),
    "kernel-added": ("kernel", None, (Change.ADDED,)),
    "kernel-removed": ("kernel", None, (Change.REMOVED,)),
}


def failed_conditions(d: GraphDiff, conditions: list[str]) -> list[str]:
    bad = [c for c in conditions if c not in FAIL_CONDITIONS]
    if bad:
        raise UsageError(f"Unknown --fail-on condition {bad[0]!r}. Choose from: {', '.join(FAIL_CONDITIONS)}.")
    hit = []
    for c in conditions:
        section, key, changes = FAIL_CONDITIONS[c]
        for r in d.rows:
            if (section == "*" or r.section == section) and (key is None or r.key == key) and r.change in changes:
                hit.append(c)
                break
    return hit
