"""A Graphviz DOT a person can read, built from a graph export.

Nodes read ``#n name`` (``#n`` is the node id `cgtool deps` prints), with the source line when
the export records one (``cgtool record``); the full demangled name is in the tooltip. Shape and
colour follow the node type, the critical path is drawn bold red, and the inside of long linear
chains is folded into boxes (``report/fold.py``: the ends of every chain stay, so forks and joins
stay visible; ``collapse=0`` expands everything). With a trace, nodes are grouped into one cluster
per hardware channel (or stream), filled by measured duration, and fake dependencies are dashed
orange edges. A legend says all this in the picture. What is drawn comes from a ``GraphView``
(``cgtool.inspect.views``): the analysis is done there, once; this module only renders.
"""

from __future__ import annotations

import html
import io
import math
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence, TextIO

from cgtool.artifacts.graph import GraphData, NodeType
from cgtool.errors import UsageError
from cgtool.artifacts.names import demangle, short_name
from cgtool.inspect.topo import Topology
from cgtool.inspect.views import GraphView
from cgtool.report import words
from cgtool.report.fold import MAX_FOLD, MIN_FOLD, fold, source_detail, source_label
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


#: Fill colours for measured durations, fast to slow (log scale), as in the HTML report.
RAMP = ("#ffffe5", "#fff1a8", "#fec44f", "#fe9929", "#ec7014", "#cc4c02")
CRIT = "#d62728"
FAKE = "#ff7f0e"


def ramp(d: float, lo: float, hi: float) -> str:
    """The colour of duration ``d`` on a log scale from ``lo`` to ``hi``."""
    if not hi > lo > 0:
        return RAMP[2]
    t = max(0.0, min(1.0, math.log(max(d, lo) / lo) / math.log(hi / lo)))
    p = t * (len(RAMP) - 1)
    k = min(len(RAMP) - 2, int(p))
    a, b = RAMP[k], RAMP[k + 1]
    mix = [round(int(a[j:j + 2], 16) + (int(b[j:j + 2], 16) - int(a[j:j + 2], 16)) * (p - k)) for j in (1, 3, 5)]
    return "#" + "".join(f"{v:02x}" for v in mix)


def _us(v: float) -> str:
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.1f} µs"


def _legend(types: list[NodeType], durations: Mapping[int, float] | None, fakes: bool) -> str:
    """A DOT node holding the legend as an HTML-like table."""
    h = html.escape
    rows = [f'<tr><td><font color="{CRIT}"><b>━━</b></font></td><td align="left">critical path (bold red)</td></tr>',
            '<tr><td>▭ ▭</td><td align="left">folded chain: N nodes, #first…#last (dashed, rounded)</td></tr>',
            '<tr><td>#n</td><td align="left">node id, as <i>cgtool deps</i> prints it</td></tr>']
    if fakes:
        rows.append(f'<tr><td><font color="{FAKE}"><b>╌╌</b></font></td><td align="left">fake dependency: serialized '
                    "by the hardware, not the graph (dashed orange)</td></tr>")
    if durations:
        lo, hi = min(durations.values()), max(durations.values())
        cells = "".join(f'<td bgcolor="{c}">  </td>' for c in RAMP)
        rows.append(f'<tr><td><table border="0" cellspacing="0"><tr>{cells}</tr></table></td><td align="left">'
                    f"measured duration {h(_us(lo))} … {h(_us(hi))} (log)</td></tr>")
    else:
        for t in types:
            rows.append(f'<tr><td bgcolor="{STYLE[t][1]}">{h(STYLE[t][0])}</td><td align="left">{h(t.value)}</td></tr>')
    return ('  legend [shape=plaintext, style="", fontsize=9, label=<<table border="1" cellborder="0" '
            f'cellspacing="2" color="#adb5bd"><tr><td colspan="2"><b>legend</b></td></tr>{"".join(rows)}</table>>];\n')


def render_dot(
    g: GraphData,
    out: TextIO,
    *,
    topo: Topology | None = None,
    collapse: int = MIN_FOLD,
    max_fold: int = MAX_FOLD,
    lanes: Mapping[int, str] | None = None,
    durations: Mapping[int, float] | None = None,
    fakes: Sequence[tuple[int, int, int]] = (),
    title: str | None = None,
    legend: bool = True,
) -> None:
    """Write the DOT of ``g``: labels ``#n name`` (node id as `deps` prints it), the source line
    when the export records one, the measured duration; the critical path bold red; the inside
    of linear chains folded (``collapse`` 0: nothing folded) into pieces of at most ``max_fold``
    nodes; ``fakes`` (node index pairs and counts) as dashed orange edges; a legend."""
    crit = set(topo.critical_path) if topo else set()
    crit_edges = set(zip(topo.critical_path, topo.critical_path[1:])) if topo else set()
    folding = fold(g, collapse, max_fold)
    folded: dict[int, int] = {}  # node -> representative (first of its piece)
    for piece in folding.pieces:
        for i in piece:
            folded[i] = piece[0]
    run_of = {p[0]: p for p in folding.pieces}
    dur = dict(durations or {})
    lo, hi = (min(dur.values()), max(dur.values())) if dur else (0.0, 0.0)
    w = out.write
    w("digraph cgtool {\n")
    w(f'  label="{esc(title or g.source)}"; labelloc=t; rankdir=TB;\n')
    w('  node [fontname="Helvetica", fontsize=10, style=filled];\n  edge [color="#6c757d"];\n')

    def fill(i: int, default: str) -> str:
        return ramp(dur[i], lo, hi) if i in dur else ("#eeeeee" if dur else default)

    def node_stmt(i: int) -> str:
        n = g.nodes[i]
        shape, colour = STYLE[n.node_type]
        if i in run_of:
            run = run_of[i]
            names = Counter(short_name((g.nodes[j].kernel_name or g.nodes[j].node_type.value)[:MAX_TEXT * 4], 36) for j in run)
            top = ", ".join(f"{c}× {nm}" for nm, c in names.most_common(2))
            tot = sum(dur.get(j, 0.0) for j in run)
            label = (f"{len(run)} nodes #{g.nodes[run[0]].node_id}…#{g.nodes[run[-1]].node_id}\\n{esc(top)}"
                     + (f"\\nΣ {esc(_us(tot))}" if tot else ""))
            tip = esc(" → ".join(dict.fromkeys(short_name((g.nodes[j].kernel_name or g.nodes[j].node_type.value)[:MAX_TEXT * 4], 40)
                                                for j in run)))
            on = any(j in crit for j in run)
            f = ramp(tot / len(run), lo, hi) if tot else "#f1f3f5"
            return (f'  n{i} [shape=box, style="filled,rounded,dashed", fillcolor="{f}", label="{label}", '
                    f'tooltip="{tip}"{f", color={chr(34)}{CRIT}{chr(34)}, penwidth=2.5" if on else ""}];\n')
        name = short_name(n.kernel_name[:MAX_TEXT * 4], 44) if n.kernel_name else n.node_type.value
        lines = [f"#{n.node_id} {name}"]
        node_extra = g.node_extra(i)
        src, label_src = source_detail(node_extra), source_label(node_extra)
        if label_src:
            lines.append(label_src)
        if i in dur:
            lines.append(_us(dur[i]))
        label = "\\n".join(esc(x) for x in lines)
        tip = esc(((demangle(n.kernel_name) if len(n.kernel_name) <= MAX_TEXT * 4 else n.kernel_name) if n.kernel_name
                   else f"{n.node_type.value} #{n.node_id}")
                  + (f"\n{src}" if src else ""))
        extra = f', color="{CRIT}", penwidth=2.5' if i in crit else ""
        if n.node_type is NodeType.EMPTY and not src:
            return f'  n{i} [shape=point, width=0.12, xlabel="#{n.node_id}", tooltip="{tip}"{extra}];\n'
        return f'  n{i} [shape={shape}, fillcolor="{fill(i, colour)}", label="{label}", tooltip="{tip}"{extra}];\n'

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
        style = f' [color="{CRIT}", penwidth=2.5]' if (a, b) in crit_edges else ""
        w(f"  n{ra} -> n{rb}{style};\n")
    seen_fake: set[tuple[int, int]] = set()
    for a, b, count in fakes:
        ra, rb = folded.get(a, a), folded.get(b, b)
        if ra == rb or (ra, rb) in seen_fake:
            continue
        seen_fake.add((ra, rb))
        w(f'  n{ra} -> n{rb} [style=dashed, color="{FAKE}", penwidth=1.5, constraint=false, '
          f'tooltip="fake dependency: #{g.nodes[a].node_id} → #{g.nodes[b].node_id}, {count}× in the trace"];\n')
    if legend and g.nodes:
        types = sorted({nd.node_type for nd in g.nodes}, key=lambda t: list(NodeType).index(t))
        w(_legend(types, dur, bool(fakes)))
    w("}\n")


#: The rows of the figures a traced DOT's title carries (the words of ``report.words``).
TITLE_ROWS = ("traced replays", "span", "critical path", "fake dependencies", "waits behind unrelated work", "cannot tell",
              "estimated saving")


def dot_of_view(v: GraphView, *, collapse: int = MIN_FOLD, max_fold: int = MAX_FOLD, title: str | None = None) -> str:
    """The readable DOT of one graph view (``cgtool.inspect.views``): with a trace, nodes grouped by
    the lane they ran on, coloured by measured duration, fake dependencies drawn, and the trace's
    figures of this graph in the title."""
    label = title or v.label
    if v.figures is not None:
        label += "".join(f"\n{k}: {val}" for k, val in words.figure_rows(v.figures) if k in TITLE_ROWS)
    buf = io.StringIO()
    render_dot(v.graph, buf, topo=v.topology, collapse=collapse, max_fold=max_fold, lanes=v.lanes or None,
               durations=v.durations, fakes=v.fakes, title=label)
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
