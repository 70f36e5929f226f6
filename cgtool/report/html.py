"""`cgtool report`: one self-contained HTML page of graphs, a replay's timeline and bench plots.

Python lays the graph out (``report/layout.py``) and writes the data as one JSON block; a small
script (``assets/report.js``, inlined with its stylesheet, nothing fetched at view time) draws the
graph and the timeline as SVG, only what is in view when there is much (a 10,000-node graph draws
a few hundred elements at a time), and unfolds a folded piece on a click. The deps and topology
summaries and the bench plots (matplotlib SVG) are static HTML.
"""

from __future__ import annotations

import html
import json
import math
import os
from importlib import resources
from typing import Any, Sequence

from cgtool._version import __version__
from cgtool.artifacts.bench import WorkloadResult
from cgtool.artifacts.names import demangle, short_name
from cgtool.inspect.collectives import CollectiveFigures
from cgtool.inspect.gather import BenchView, Gathered
from cgtool.inspect.record_summary import RecordSummary
from cgtool.inspect.results import Lane
from cgtool.inspect.views import GraphView
from cgtool.report import words
from cgtool.report.tables import nodes_text
from cgtool.report.fold import MAX_FOLD, MIN_FOLD, fold, source_detail, source_label
from cgtool.report.layout import layered
from cgtool.text import plural

LOW32 = 0xFFFFFFFF


def _asset(name: str) -> str:
    return resources.files("cgtool.report").joinpath("assets", name).read_text(encoding="utf-8")


def _r(v: float) -> float:
    return round(v, 3)


def graph_data(v: GraphView, *, min_fold: int = MIN_FOLD, max_fold: int = MAX_FOLD) -> dict[str, Any]:
    """The JSON the page's script draws one graph section from."""
    g = v.graph
    n = len(g.nodes)
    lay = layered(g, fold(g, min_fold, max_fold))
    names, full, src, srcl = [], [], [], []
    for nd in g.nodes:
        if nd.kernel_name:
            names.append(short_name(nd.kernel_name, 44))
            full.append(str(g.node_extra(nd.index).get("demangled") or demangle(nd.kernel_name)))
        else:
            names.append(nd.node_type.value)
            full.append(f"{nd.node_type.value} node")
        extra = g.node_extra(nd.index)
        src.append(source_detail(extra))
        srcl.append(source_label(extra))
    dur = [None if v.durations is None or i not in v.durations else _r(v.durations[i]) for i in range(n)]
    fake = [[a, b, c, _r(w)] for (a, b, c), w in zip(v.fakes, v.fake_waits)]
    waits = [[a, b, c, _r(w)] for a, b, c, w in v.waits]
    deps = {"lane": v.deps.lane.value} if v.deps is not None else None
    replay = None
    if v.replay is not None:
        lanes = sorted(set(v.replay.lane), key=lambda s: (s.split()[0], int(s.split()[1])))
        li = {name: k for k, name in enumerate(lanes)}
        replay = {"correlation": v.replay.correlation, "lanes": lanes,
                  "node": v.replay.node.tolist(), "lane": [li[x] for x in v.replay.lane],
                  "s": [_r(x) for x in v.replay.start.tolist()], "e": [_r(x) for x in v.replay.end.tolist()]}
    return {
        "label": v.label, "source": g.source, "trace": v.trace_source, "n": n,
        "name": names, "full": full, "type": [nd.node_type.value for nd in g.nodes],
        "id": [nd.tools_id & LOW32 for nd in g.nodes], "src": src, "srcl": srcl, "dur": dur,
        "edges": [x for e in g.edges() for x in e],
        "crit": v.topology.critical_path,
        "units": {"members": lay.members, "row": lay.row, "x": lay.x},
        "fake": fake, "waits": waits, "deps": deps, "replay": replay,
        "figures": v.figures.to_json() if v.figures is not None else None,
    }


def _esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def _us(v: float | None) -> str:
    return "-" if v is None else (f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.1f} µs")


def _table(rows: Sequence[tuple[str, str]], cls: str = "kv") -> str:
    body = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(x)}</td></tr>" for k, x in rows)
    return f'<table class="{cls}">{body}</table>'


def summary_html(v: GraphView) -> str:
    """The topology of one graph and the figures of its trace (the words `topo` and `deps` print)."""
    t, g = v.topology, v.graph
    rows = [
        ("nodes", nodes_text(t)),
        ("edges", str(t.edges)),
        ("roots / leaves", f"{len(t.roots)} / {len(t.leaves)}"),
        ("depth / widest level", f"{t.depth} / {t.max_level_width}"),
        ("max concurrency", "-" if t.max_concurrency is None else str(t.max_concurrency)),
        ("forks / joins", f"{len(t.forks)} / {len(t.joins)}"),
        ("redundant edges", str(len(t.redundant_edges))),
        ("distinct kernels", str(t.distinct_kernels)),
        ("critical path", plural(len(t.critical_path), "node")),
        ("exec graph id", f"{g.exec_graph_id} (ids from {g.id_source})"),
    ]
    out = [f"<div class=summ><div><h3>topology</h3>{_table(rows)}</div>"]
    r, f = v.deps, v.figures
    if r is not None and f is not None:
        out.append(f"<div><h3>dependencies in the trace (this graph)</h3>{_table(words.figure_rows(f))}")
        tid = {nd.tools_id for nd in g.nodes}
        fakes = [x for x in r.fakes() if x.graph_id == g.exec_graph_id and x.before in tid][:10]
        if fakes:
            out.append(f"<h4>top fake dependencies (of {f.fake_pairs if f.fake_pairs is not None else len(fakes)})</h4>"
                       f"<table class=grid><tr><th>before<th>after<th>{r.lane.value}<th>count<th>gap"
                       "<th>waited (each)<th>estimated saving</tr>")
            for x in fakes:
                lane = x.channel if r.lane is Lane.CHANNEL else x.stream
                out.append(f'<tr><td title="{_esc(x.before_name)}">#{x.before & LOW32} {_esc(short_name(x.before_name, 44))}'
                           f'<td title="{_esc(x.after_name)}">#{x.after & LOW32} {_esc(short_name(x.after_name, 44))}'
                           f'<td>{lane}<td class=num>{x.count}<td class=num>{_esc(_us(x.gap_us))}'
                           f'<td class=num>{_esc(_us(x.wait_us / x.count if x.count else 0.0))}'
                           f'<td class=num>{_esc(_us(x.saving_us))}</tr>')
            out.append("</table>")
        for note in r.notes + r.suggestions:
            out.append(f"<p class=note>{_esc(note)}</p>")
        out.append("</div>")
    elif v.trace_source is not None:
        out.append(f"<div><h3>dependencies in the trace</h3><p class=note>{_esc(v.trace_source)} holds no replay of "
                   "this graph (it was not replayed while the trace was taken).</p></div>")
    out.append("</div>")
    return "".join(out)


def bench_html(b: BenchView, plots: bool) -> str:
    """Per workload: a plot of every sample (and the baseline's), the verdict."""
    out = [f"<h2>bench: {_esc(b.source)}</h2>"]
    if b.baseline_source:
        out.append(f"<p>baseline: {_esc(b.baseline_source)}</p>")
    jd = {j.name: j for j in b.judgements or []}
    old: dict[tuple[str, int | None], WorkloadResult] = b.baseline.by_ident() if b.baseline else {}
    if not plots:
        out.append("<p class=note>matplotlib is not installed, so the distributions are not plotted: "
                   "install <code>pip install 'cgtool[report]'</code>.</p>")
    out.append("<table class=grid><tr><th>workload<th>median µs<th>IQR<th>samples<th>eager µs<th>verdict</tr>")
    for w in b.results.workloads:
        j = jd.get(w.key)
        verdict = f"{j.verdict.value}: {j.reason}" if j else "-"
        if w.failed:
            out.append(f"<tr><td>{_esc(w.key)}<td colspan=4>failed: {_esc(w.error)}<td>{_esc(verdict)}</tr>")
            continue
        s, e = w.stats(), w.eager_median()
        out.append(f"<tr><td>{_esc(w.key)}<td class=num>{s.median:.2f}<td class=num>{s.iqr:.2f}<td class=num>"
                   f"{s.n}<td class=num>{'-' if e is None else f'{e:.2f}'}<td>{_esc(verdict)}</tr>")
    out.append("</table>")
    if plots:
        from cgtool.report.plots import bench_plot_svg

        for w in b.results.workloads:
            if not w.failed and w.gpu_us:
                o = old.get(w.ident)
                out.append(f'<figure class=plot data-workload="{_esc(w.key)}">'
                           f"{bench_plot_svg(w, o if o is not None and not o.failed else None, jd.get(w.key))}</figure>")
    return "".join(out)


def collectives_html(figs: CollectiveFigures, source: str) -> str:
    """The NCCL kernels of a per-rank trace set's graph replays (``cgtool deps DIR``'s table)."""
    def f(v: float | None, fmt: str) -> str:
        return "?" if v is None else format(v, fmt)

    out = [f"<section class=collectives><h2>NCCL in graph replays: {_esc(source)}</h2>",
           ("<p class=note>Per rank, means over the traced replays: the NCCL kernels' share of the replay span, "
            "the part of it other kernels of the replay overlapped, and how long the rank's last collective ran "
            "beyond the shortest rank's (its wait for the others).</p>"),
           ("<table class=grid><tr><th>rank<th>graph<th>replays<th>span µs<th>NCCL µs<th>NCCL share<th>overlapped"
            "<th>waited µs</tr>")]
    for r, gs in figs.ranks.items():
        for g in gs:
            x = g.figures()
            out.append(f"<tr><td>{r}<td class=num>{g.graph_id}<td class=num>{x['replays']}<td class=num>"
                       f"{f(x['span_us'], '.1f')}<td class=num>{f(x['nccl_us'], '.1f')}<td class=num>"
                       f"{f(x['nccl_share'], '.1%')}<td class=num>{f(x['nccl_overlap'], '.1%')}<td class=num>"
                       f"{f(x['wait_us'], '.1f')}</tr>")
    out.append("</table>")
    for sk in figs.skew:
        if sk.get("start_skew_us") is None:
            out.append(f"<p>replay start skew unknown: {_esc(sk.get('reason'))}</p>")
        else:
            per = ", ".join(f(v, ".1f") for v in sk["start_skew_us"])
            out.append(f"<p>replay start skew between ranks (relative to each rank's collective end), per replay: "
                       f"{per} µs; mean {f(sk.get('mean_start_skew_us'), '.1f')} µs</p>")
    out.append("</section>")
    return "".join(out)


def record_html(s: RecordSummary, source: str) -> str:
    """A `cgtool record` recording's answers (``inspect/record_summary.py``): the page opens on them,
    then its graphs, the inputs they read after their program freed them (input checks), then its
    processes; helpers and processes that could not make a graph are
    counted and folded (a "show" toggle), not listed in the first screen."""
    from cgtool.inspect.record_summary import cannot_make_graphs

    out = [f"<section class=recsummary><h2>recording: {_esc(source)}</h2><ul>"]
    out += [f"<li>{_esc(f)}</li>" for f in s.findings]
    out.append("</ul>")
    rows = [(p, site, g) for p in s.processes for site in p.sites for g in site.graphs]
    if rows:
        out.append("<table class=grid id=recgraphs><tr><th>process<th>graph<th>captured at<th>nodes<th>replays"
                   "<th>cap+inst ms<th>MiB taken<th>inputs</tr>")
        for p, site, g in sorted(rows, key=lambda x: -x[2].replays):
            c = g.capture_total_s
            mb = g.reserved_during_capture
            ci = g.capture_inputs
            inputs = (ci.symint_key or ci.inputs) if ci is not None else None
            out.append(f"<tr><td class=num>{_esc(p.pid if p.pid is not None else '?')}<td>{_esc(g.label)}"
                       f"<td>{_esc(site.site or '?')}<td class=num>{g.nodes}<td class=num>{g.replays}"
                       f"{'' if g.replays_complete else '+'}<td class=num>{'-' if c is None else f'{c * 1e3:.2f}'}"
                       f"<td class=num>{'-' if mb is None else f'{mb / 2**20:.1f}'}<td>{_esc(inputs or '')}</tr>")
        out.append("</table>")
    out.append(_stale_table(s))
    head = ("<table class=grid><tr><th>process<th>parent<th>rank<th>recorded<th>graphs<th>replays"
            "<th>capture s<th>exit<th>command</tr>")

    def row(p: Any) -> str:
        cap = p.capture_s
        return (f"<tr><td class=num>{_esc(p.pid if p.pid is not None else '?')}<td class=num>"
                f"{_esc(p.parent if p.parent is not None else '-')}<td class=num>{_esc('-' if p.rank is None else p.rank)}"
                f"<td>{'yes' if p.followed else _esc('no: ' + (p.reason or ''))}<td class=num>"
                f"{len(p.graphs) if p.followed else '?'}<td class=num>{p.replays if p.followed else '?'}"
                f"<td class=num>{'-' if cap is None else f'{cap:.3f}'}<td class=num>"
                f"{_esc('-' if p.exit_code is None else p.exit_code)}<td>{_esc(' '.join(p.argv)[:120])}</tr>")

    folded = [p for p in s.processes if (not p.followed and p.helper) or cannot_make_graphs(p) is not None]
    shown = [p for p in s.processes if not any(p is q for q in folded)]
    out.append(head + "".join(row(p) for p in shown) + "</table>")
    if folded:
        out.append(f"<details class=folded><summary>show {len(folded)} process(es) that made no CUDA graph "
                   f"and could not make one (helpers, torch.compile's compile workers)</summary>"
                   + head + "".join(row(p) for p in folded) + "</table></details>")
    out.append("</section>")
    return "".join(out)


def _site(site: Any) -> str:
    return "?" if not site else f"{os.path.basename(site['file'])}:{site['line']}"


def _stale_table(s: RecordSummary) -> str:
    """The graphs reading memory their program freed (or rebound), one row per input; "" when none."""
    stale = [x for p in s.processes for x in p.stale_inputs]
    if not stale:
        return ""
    out = [("<table class=grid id=recstale><caption>graphs reading memory their program freed</caption><tr>"
            "<th>process<th>graph<th>reads<th>allocated at<th>freed at<th>memory taken by<th>replays</tr>")]
    for x in stale:
        j = x.to_json()
        reused = j["reused_by"]
        shape = "×".join(map(str, j["shape"])) + f" {j['dtype']}" if j["shape"] is not None else f"{j['bytes']} B"
        freed = "alive, never written between replays" if j["kind"] == "stale" else _site(j["freed_at"])
        out.append(f"<tr><td class=num>{_esc(x.pid if x.pid is not None else '?')}<td>{_esc(x.graph_label)}"
                   f"<td>{_esc(j['input'])} ({_esc(shape)})<td>{_esc(_site(j['allocated_at']))}<td>{_esc(freed)}"
                   f"<td>{_esc('-' if reused is None else reused['name'] + ' at ' + _site(reused['allocated_at']))}"
                   f"<td class=num>{j['first_replay']}–{j['last_replay']}</tr>")
    out.append("</table>")
    return "".join(out)


def _json_script(doc: Any) -> str:
    # "</script" or "<!--" inside would end or confuse the script element: no "<" at all (JSON
    # reads "\u003c" as "<").
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def render_html(data: Gathered, *, title: str = "cgtool report", plots: bool = True,
                min_fold: int = MIN_FOLD, max_fold: int = MAX_FOLD,
                recordings: Sequence[tuple[str, RecordSummary]] = ()) -> str:
    """The whole page; ``recordings`` (source, summary) open it, above the graphs."""
    sections = [graph_data(v, min_fold=min_fold, max_fold=max_fold) for v in data.graphs]
    for sec in sections:  # NaN/inf never reach JSON
        sec["dur"] = [d if d is None or math.isfinite(d) else None for d in sec["dur"]]
    summaries = "".join(f'<section class=summary data-sec="{k}" hidden>{summary_html(v)}</section>'
                        for k, v in enumerate(data.graphs))
    benches = "".join(bench_html(b, plots) for b in data.bench)
    notes = "".join(f"<p class=note>{_esc(n)}</p>" for n in data.notes)
    tabs = "".join(f'<button class=tab data-sec="{k}">{_esc(v.label)}</button>' for k, v in enumerate(data.graphs))
    graph_part = "" if not sections else f"""
<nav id=tabs>{tabs}</nav>
<div id=main>
 <div id=left>
  <h2>graph <span id=glabel></span></h2>
  <div class=tools><button id=unfoldall>unfold all</button> <button id=foldall>fold all</button>
   <span id=gcount></span></div>
  <div id=legend></div>
  <div id=gwrap class=scroll><svg id=graph xmlns="http://www.w3.org/2000/svg"></svg></div>
 </div>
 <aside id=info><h3>node</h3><p class=hint>Hover or click a node (in the graph or the timeline).
  Click a folded box to unfold it.</p></aside>
</div>
<h2>one replay <span id=rlabel></span></h2>
<div class=tools id=ttools><button id=zin>zoom in</button> <button id=zout>zoom out</button> <button id=zfit>fit</button>
 <label><input type=checkbox id=showdeps checked> graph edges</label> · <span id=tcount></span></div>
<div id=twrap class=scroll><svg id=timeline xmlns="http://www.w3.org/2000/svg"></svg></div>
<p id=tnone class=note hidden>No trace of this graph was given: pass its trace to see a replay.</p>
{summaries}"""
    return f"""<!DOCTYPE html>
<html lang=en><head><meta charset="utf-8"><meta name=viewport content="width=device-width">
<meta name=generator content="cgtool {_esc(__version__)}">
<title>{_esc(title)}</title><style>{_asset("report.css")}</style></head>
<body data-ready="0" data-errors="">
<div id=errors hidden></div>
<header><h1>{_esc(title)}</h1><p class=sub>cgtool {_esc(__version__)} · {plural(len(data.graphs), 'graph')}
 · {plural(len(data.bench), 'bench result')}</p>{notes}</header>
{"".join(record_html(r, src) for src, r in recordings)}
{graph_part}
{"".join(collectives_html(f, src) for src, f in data.collectives)}
<div id=bench>{benches}</div>
<script type="application/json" id=cgdata>{_json_script({"sections": sections})}</script>
<script>{_asset("report.js")}</script>
</body></html>
"""
