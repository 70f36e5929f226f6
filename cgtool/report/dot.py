"""A Graphviz DOT a person can read, built from a graph export.

Kernel names are demangled and shortened (the full name is in the tooltip), node shape and colour
follow the node type, the critical path is drawn bold red, linear chains of at least
``collapse`` nodes fold into one node with a count (``collapse=0`` expands everything), and with
a trace, nodes are grouped into one cluster per hardware channel (or stream).
"""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path
from typing import Mapping, TextIO

from cgtool.artifacts.graph import GraphData, NodeType
from cgtool.artifacts.jsonio import DEFAULT_MAX_BYTES
from cgtool.errors import UsageError
from cgtool.artifacts.names import demangle, short_name
from cgtool.inspect.topo import Topology
from cgtool.text import shown

STYLE: dict[NodeType, tuple[str, str]] = {
    NodeType.KERNEL: ("box", "#cfe2ff"),
    NodeType.MEMCPY: ("cds", "#d1e7dd"),
    NodeType.MEMSET: ("cds", "#e2f0d9"),
    NodeType.HOST: ("hexagon", "#fff3cd"),
    NodeType.CHILD_GRAPH: ("box3d", "#e0cffc"),
    NodeType.EMPTY: ("point", "#adb5bd"),
    NodeType.WAIT_EVENT: ("invtriangle", "#f8d7da"),
    NodeType.EVENT_RECORD: ("triangle", "#f8d7da"),
    NodeType.MEM_ALLOC: ("folder", "#fde2c8"),
    NodeType.MEM_FREE: ("folder", "#fde2c8"),
    NodeType.OTHER: ("octagon", "#dee2e6"),
}


#: Longest text (characters) put in a DOT label or tooltip; longer names are cut with "…".
MAX_TEXT = 2000


def esc(s: str, limit: int = MAX_TEXT) -> str:
    """A DOT double-quoted string body that Graphviz reads back as ``s``: control characters (NUL,
    ESC, ...) shown as ``\\xNN``, backslashes, quotes and newlines escaped, cut at ``limit`` characters."""
    s = shown(s)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def chains(g: GraphData, min_len: int) -> list[list[int]]:
    """Maximal linear runs (each inner link one-in/one-out) of at least ``min_len`` nodes."""
    if min_len <= 1:
        return []
    nodes = g.nodes

    def linked(a: int, b: int) -> bool:
        return len(nodes[a].dependents) == 1 and len(nodes[b].dependencies) == 1

    out, seen = [], set()
    for nd in nodes:
        i = nd.index
        if i in seen:
            continue
        # start of a run: no linear predecessor
        if len(nd.dependencies) == 1 and linked(nd.dependencies[0], i):
            continue
        run = [i]
        while len(nodes[run[-1]].dependents) == 1 and linked(run[-1], nodes[run[-1]].dependents[0]):
            run.append(nodes[run[-1]].dependents[0])
        seen.update(run)
        if len(run) >= min_len:
            out.append(run)
    return out


def render_dot(
    g: GraphData,
    out: TextIO,
    *,
    topo: Topology | None = None,
    collapse: int = 4,
    lanes: Mapping[int, str] | None = None,
    title: str | None = None,
) -> None:
    crit = set(topo.critical_path) if topo else set()
    crit_edges = set(zip(topo.critical_path, topo.critical_path[1:])) if topo else set()
    folded: dict[int, int] = {}  # node -> representative (first of its chain)
    runs = chains(g, collapse)
    for run in runs:
        for i in run:
            folded[i] = run[0]
    run_of = {run[0]: run for run in runs}
    w = out.write
    w("digraph cgtool {\n")
    w(f'  label="{esc(title or g.source)}"; labelloc=t; rankdir=TB;\n')
    w('  node [fontname="Helvetica", fontsize=10, style=filled];\n  edge [color="#6c757d"];\n')

    def node_stmt(i: int) -> str:
        n = g.nodes[i]
        shape, fill = STYLE[n.node_type]
        if i in run_of:
            run = run_of[i]
            names = [short_name((g.nodes[j].kernel_name or g.nodes[j].node_type.value)[:MAX_TEXT * 4], 40) for j in run]
            label = f"{len(run)} nodes\\n{esc(names[0])}\\n…\\n{esc(names[-1])}"
            tip = esc(" → ".join(dict.fromkeys(names)))
            on = any(j in crit for j in run)
            return (f'  n{i} [shape=box, style="filled,rounded", fillcolor="{fill}", label="{label}", '
                    f'tooltip="{tip}"{", color=red, penwidth=2" if on else ""}];\n')
        if n.kernel_name:
            label = esc(short_name(n.kernel_name[:MAX_TEXT * 4], 48))
            tip = esc(demangle(n.kernel_name) if len(n.kernel_name) <= MAX_TEXT * 4 else n.kernel_name)
        else:
            label = esc(f"{n.node_type.value} #{n.node_id}")
            tip = label
        extra = ", color=red, penwidth=2" if i in crit else ""
        if n.node_type is NodeType.EMPTY:
            return f'  n{i} [shape=point, width=0.12, tooltip="{tip}"{extra}];\n'
        return f'  n{i} [shape={shape}, fillcolor="{fill}", label="{label}", tooltip="{tip}"{extra}];\n'

    reps = [i for i in range(len(g.nodes)) if folded.get(i, i) == i]
    if lanes:
        groups: dict[str, list[int]] = {}
        for i in reps:
            groups.setdefault(lanes.get(i, "not in trace"), []).append(i)
        for k, (lane, members) in enumerate(sorted(groups.items())):
            w(f'  subgraph cluster_{k} {{\n   label="{esc(lane)}"; style=dashed; color="#adb5bd";\n')
            for i in members:
                w("  " + node_stmt(i))
            w("  }\n")
    else:
        for i in reps:
            w(node_stmt(i))
    seen_edges: set[tuple[int, int]] = set()
    for a, b in g.edges():
        ra, rb = folded.get(a, a), folded.get(b, b)
        if ra == rb or (ra, rb) in seen_edges:
            continue
        seen_edges.add((ra, rb))
        style = ' [color=red, penwidth=2]' if (a, b) in crit_edges else ""
        w(f"  n{ra} -> n{rb}{style};\n")
    w("}\n")


def dot_of_file(graph: Path, trace: Path | None = None, *, collapse: int = 4,
                max_bytes: int | None = DEFAULT_MAX_BYTES) -> str:
    """The readable DOT of a graph export; with a trace, nodes grouped by the lane they ran on."""
    from cgtool.artifacts.trace import load_trace
    from cgtool.inspect.files import node_lanes
    from cgtool.inspect.topo import analyze

    g = GraphData.load(graph, max_bytes=max_bytes)
    lanes = node_lanes(g, load_trace(trace, max_bytes=max_bytes)) if trace else None
    buf = io.StringIO()
    render_dot(g, buf, topo=analyze(g), collapse=collapse, lanes=lanes, title=str(graph))
    return buf.getvalue()


def render_image(dot_path: Path, img: Path, fmt: str) -> str:
    """Render ``dot_path`` to ``img`` with Graphviz's ``dot`` program. Returns a note for the user
    when Graphviz is not installed (the .dot stays), "" when the image was written."""
    exe = shutil.which("dot")
    if exe is None:
        return (f"Graphviz's `dot` program is not installed, so {img} was not rendered; {dot_path} is "
                "written. Install Graphviz (`apt-get install graphviz`, `brew install graphviz` or "
                f"`conda install graphviz`) and run `dot -T{fmt} {dot_path} -o {img}`.")
    r = subprocess.run([exe, f"-T{fmt}", str(dot_path), "-o", str(img)], capture_output=True, text=True)
    if r.returncode != 0:
        raise UsageError(f"`dot -T{fmt}` failed: {r.stderr.strip()[:300]}")
    return ""
