"""Rich renderings of typed results. Each function writes to a given Console, or returns a Table
(tests render to a fixed width)."""

from __future__ import annotations

import math

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cgtool.artifacts.bench import BenchResults
from cgtool.artifacts.chrome import TraceSummary
from cgtool.inspect.benchstats import Judgement, Verdict
from cgtool.inspect.documents import tracer_note
from cgtool.inspect.results import DepKind, DepsResult, Figures, Lane, MatchKind
from cgtool.report import words
from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.names import short_name, template_name
from cgtool.artifacts.trace import TracerOverhead
from cgtool.text import markdown_cell, plural

if TYPE_CHECKING:  # diff and topo (networkx) are imported where rendered: `deps` needs neither
    from cgtool.inspect.diff import GraphDiff
    from cgtool.inspect.topo import Topology


_NUMBER = re.compile(r"^[-+]?[\d.,]+(e[-+]?\d+)?\s*(µs|ms|x|%|MHz)?$")


def _cell_text(c: Any) -> str:
    return c.plain if isinstance(c, Text) else str(c)


def _honest(tab: Table) -> None:
    """Never cut a number or a name: numeric columns keep their full width, others wrap."""
    for col in tab.columns:
        cells = [_cell_text(c) for c in list(col.cells)]
        col.overflow = "fold"
        if cells and (col is tab.columns[0] or all(_NUMBER.match(c) or c in ("-", "") for c in cells)):
            col.no_wrap = True  # numbers, and the names in the first column, stay whole
            col.min_width = max(len(line) for c in cells for line in c.split("\n"))


#: Columns a narrow terminal can do without (dropped right to left before the block layout).
OPTIONAL_COLUMNS = ("p99", "p90", "min", "IQR", "host µs")


#: The narrowest a cut name column gets (``#n`` and the start of the name stay readable).
CUT_MIN_WIDTH = 12


def show(con: Console, tab: Table, *, cut: Sequence[str] = (), optional: Sequence[str] = ()) -> None:
    """Print a table whose numbers are never truncated: it wraps what it can, drops the optional
    columns (``optional``, then OPTIONAL_COLUMNS) when that does not fit, and switches to one block
    per row (``column: value`` lines) when even that does not. Names are never cut either, except
    in the columns named in ``cut``: kernel names led by their ``#n`` node id, which stay on one line
    each, cut with "…" to the width there is (the whole names are in --json and the report)."""
    _honest(tab)
    for col in tab.columns:
        if _cell_text(col.header) in cut:
            col.no_wrap, col.overflow = True, "ellipsis"
            col.min_width = min(col.min_width or CUT_MIN_WIDTH, CUT_MIN_WIDTH, max(
                (len(line) for c in col.cells for line in _cell_text(c).split("\n")), default=0))
    first = tab.columns[0] if tab.columns else None
    if first is not None and _cell_text(first.header) not in cut and (first.min_width or 0) > con.width // 3 \
            and len(tab.columns) > 2:
        first.no_wrap, first.min_width = False, None  # long names share the width with the others

    cut_cols = [c for c in tab.columns if _cell_text(c.header) in cut]

    def widen_cut() -> None:  # the cut columns share what the others leave
        if not cut_cols:
            return
        rest = sum(max(c.min_width or 0, len(_cell_text(c.header))) if c.no_wrap else 8
                   for c in tab.columns if c not in cut_cols)
        room = (con.width - rest - 3 * len(tab.columns) - 1) // len(cut_cols)
        for c in cut_cols:
            longest = max((len(line) for x in c.cells for line in _cell_text(x).split("\n")), default=0)
            c.max_width = max(c.min_width or 0, min(room, longest))

    def fits() -> bool:  # noqa: E306
        # Whole columns keep their width; the others fold (at any character) into at least 8.
        widen_cut()
        need = sum(max(c.min_width or 0, len(_cell_text(c.header)) if c in cut_cols or c.no_wrap and cut_cols else 0)
                   if c.no_wrap else 8 for c in tab.columns) + 3 * len(tab.columns) + 1
        return need <= con.width
    for name in (*optional, *OPTIONAL_COLUMNS):
        if fits():
            break
        tab.columns[:] = [c for c in tab.columns if _cell_text(c.header) != name]
    if not fits() and tab.columns and _cell_text(tab.columns[0].header) not in cut:
        first = tab.columns[0]  # let the names wrap rather than lose the table
        first.no_wrap, first.min_width = False, None
    if fits():
        if tab.title is not None and tab.title_justify == "left":
            # A title over the table's whole width (a long path) wraps as a line of the terminal's
            # width, not folded into the table's width
            con.print(Text(str(tab.title), style="table.title"))
            tab.title = None
        con.print(tab)
        return
    if tab.title:
        con.print(Text(str(tab.title), style="bold"))
    heads = [_cell_text(c.header) for c in tab.columns]
    columns = [list(c.cells) for c in tab.columns]
    for r in range(tab.row_count):
        cells = [_cell_text(col[r]) if r < len(col) else "" for col in columns]
        con.print(Text(cells[0]) if not tab.show_header else Text(f"{heads[0]}: {cells[0]}"), soft_wrap=True)
        for h, c in zip(heads[1:], cells[1:]):
            con.print(Text(f"  {h}: {c}" if tab.show_header else f"  {c}"), soft_wrap=True)


#: short_name's width that cuts nothing: tables wrap long names instead of cutting them.
NO_CUT = 1 << 30


def distinct_short_names(names: Sequence[str]) -> dict[str, str]:
    """A short label per kernel name (never cut); names whose short forms collide keep their
    template arguments, so two different kernels never read the same."""
    short = {n: short_name(n, NO_CUT) for n in names}
    seen: dict[str, int] = {}
    for s in short.values():
        seen[s] = seen.get(s, 0) + 1
    return {n: s if seen[s] == 1 else template_name(n) for n, s in short.items()}


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fmt_us(v: float | None) -> str:
    return "-" if v is None else (f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.1f} µs")


def nodes_text(t: Topology) -> str:
    """``7 (kernel 6, empty 1)``; an empty graph says so."""
    if not t.nodes:
        return "0 (an empty graph: nothing was captured)"
    return f"{t.nodes} (" + ", ".join(f"{k} {v}" for k, v in sorted(t.nodes_by_type.items())) + ")"


def graph_summary(con: Console, g: GraphData, t: Topology, title: str = "") -> None:
    meta = g.meta
    tim = meta.get("timings", {}) if isinstance(meta, dict) else {}
    tab = Table(title=title or f"graph {g.exec_graph_id}", show_header=False, title_justify="left")
    tab.add_column("what", style="bold")
    tab.add_column("value")
    tab.add_row("nodes", nodes_text(t))
    tab.add_row("edges", str(t.edges))
    tab.add_row("roots / leaves", f"{len(t.roots)} / {len(t.leaves)}")
    tab.add_row("depth / widest level", f"{t.depth} / {t.max_level_width}")
    tab.add_row("distinct kernels", str(t.distinct_kernels))
    tab.add_row("exec graph id", f"{g.exec_graph_id} (ids from {g.id_source})")
    tim = tim if isinstance(tim, dict) else {}
    cap: Any = tim.get("capture_s")
    inst: Any = tim.get("instantiate_s")
    if _num(cap):
        tab.add_row("capture / instantiate", f"{cap * 1e3:.2f} ms / {(inst if _num(inst) else 0) * 1e3:.2f} ms")
    chk = meta.get("check") if isinstance(meta, dict) else None
    if isinstance(chk, dict) and isinstance(chk.get("ok"), bool):  # metadata is input: only well-typed fields show
        diff = chk.get("max_abs_diff")
        detail = f" (max |diff| {diff:.3g} in {chk.get('worst_output')})" if _num(diff) else ""
        tab.add_row("replay vs eager", f"{'match' if chk['ok'] else 'MISMATCH'}{detail}")
    show(con, tab)


def topo_table(con: Console, g: GraphData, t: Topology, figures: Figures | None = None, title: str = "") -> None:
    """The topology of ``g``; with ``figures`` (its trace's), the measured span and critical path in
    the words every command uses."""
    graph_summary(con, g, t, title=title or f"topology of {g.source}")
    tab = Table(show_header=False)
    tab.add_column("what", style="bold")
    tab.add_column("value")
    tab.add_row("edges by type", ", ".join(f"{k} {v}" for k, v in sorted(t.edges_by_type.items())) or "-")
    tab.add_row("max concurrency", "-" if t.max_concurrency is None else str(t.max_concurrency))
    tab.add_row("forks / joins", f"{len(t.forks)} / {len(t.joins)}")
    tab.add_row("redundant edges", str(len(t.redundant_edges)))
    tab.add_row("disconnected parts", str(t.components))
    cp = t.critical_path
    names = [g.display_name(i) for i in cp]
    if figures is not None:
        for k, v in words.timing_rows(figures):
            tab.add_row(k, Text(v + (f", {plural(len(cp), 'node')}" if k == "critical path" else "")))
    else:
        tab.add_row("critical path", f"{plural(len(cp), 'node')} (by node count; pass --trace for the measured one)"
                    if t.critical_path_us is None else f"{plural(len(cp), 'node')}, {_fmt_us(t.critical_path_us)}")
    if cp:
        tab.add_row("  from → to", f"{short_name(names[0], NAME_WIDTH)} → {short_name(names[-1], NAME_WIDTH)}")
    lines = list(dict.fromkeys(x for x in (g.source_label(i) for i in cp) if x))  # in path order, once each
    if lines:
        tab.add_row("  source lines", "\n".join(lines))
    show(con, tab)


#: Width names are shortened to in tables (as `dot` does): a kernel name, cut with "…"; the whole
#: name is in --json and the HTML report.
NAME_WIDTH = 44


def _at(tools_id: int, name: str, sources: Mapping[int, str]) -> str:
    """``#n name`` (the name shortened), and the source line under it when the export records one."""
    label = f"#{tools_id & 0xFFFFFFFF} {short_name(name, NAME_WIDTH)}"
    return label + (f"\nat {sources[tools_id]}" if tools_id in sources else "")


def figures_table(title: str, f: Figures, extra: Sequence[tuple[str, str]] = ()) -> Table:
    """The figures of a trace (``report.words``), two columns."""
    head = Table(title=title, show_header=False, title_justify="left")
    head.add_column("what", style="bold")
    head.add_column("value")
    for k, v in [*words.figure_rows(f), *extra]:
        head.add_row(k, Text(v))
    return head


def deps_graphs_table(r: DepsResult, names: Mapping[int, str] | None = None) -> Table:
    """One row per graph of a trace of several: the figures ``topo --trace`` shows for each, the
    graph named as topo, diff and report name it (``#n``)."""
    shown = {}
    for gid in r.graphs:
        name = (names or {}).get(gid) or f"exec graph {gid}"
        shown[gid] = name if "#" in name or name.startswith("exec") else f"{name} (exec graph {gid})"
    heads = {n[:n.index("#")] if "#" in n else n for n in shown.values()}
    common = heads.pop() if len(heads) == 1 and all("#" in n for n in shown.values()) else ""
    where = f" of {common.rstrip(': ')}" if common else ""  # "process 556: " said once, in the title
    tab = Table(title=f"per graph{where} (traced replays; per replay: median span, critical path, saving)",
                title_justify="left")
    for c in words.GRAPH_COLUMNS:
        tab.add_column(c, justify="left" if c == "graph" else "right")
    for gid in r.graphs:
        name = shown[gid][len(common):]
        tab.add_row(Text(name), *words.graph_cells(name, r.figures(gid))[1:])
    return tab


def deps_report(con: Console, r: DepsResult, top: int = 10, sources: Mapping[int, str] | None = None,
                overhead: TracerOverhead | None = None, names: Mapping[int, str] | None = None,
                graphs: Sequence[Any] = ()) -> None:
    """The figures, the top fake dependencies (with the source lines of both ends when the exports
    record them: ``sources`` maps tools ids to labels), the waits inferred without channels and the
    per-lane counts. ``overhead``: what the tracer measured tracing to cost, shown with a note when
    it is of the order of the gaps classified."""
    src = sources or {}
    f = r.figures()
    extra = []
    if overhead is not None:
        extra.append(("tracer overhead", f"{overhead.ratio:.2f}x per replay ({_fmt_us(overhead.untraced_replay_us)} "
                      f"untraced, {_fmt_us(overhead.traced_replay_us)} traced), {overhead.per_item_us:+.2f} µs per GPU item"))
    if len(r.graphs) > 1:  # a median or a critical path across different graphs is no graph's
        head = Table(title="serializations in the trace (all graphs)", show_header=False, title_justify="left")
        head.add_column("what", style="bold")
        head.add_column("value")
        for k, v in [*words.run_rows(f, len(r.graphs)), *extra]:
            head.add_row(k, Text(v))
        show(con, head)
        show(con, deps_graphs_table(r, names), cut=("graph",))
    else:
        show(con, figures_table("serializations in the trace", f, extra))
    fakes = r.fakes()[:top]
    if fakes:
        n_pairs = sum(1 for x in r.findings if x.kind is DepKind.FAKE)
        title = (f"top fake dependencies (of {n_pairs})" if r.lane is Lane.CHANNEL else
                 f"fake dependencies on single streams (of {n_pairs}; across streams they are not visible)")
        tab = Table(title=title, title_justify="left")
        from cgtool.inspect.between import ran_between

        between = {(x.graph_id, x.before, x.after): ran_between(r, graphs, x) for x in fakes} if graphs else {}
        cols = ["before", "after", r.lane.value, "count", "gap", "waited", "saving"]
        if between:
            cols.insert(2, "ran in gap")
        if r.match is not MatchKind.EXACT:
            cols.append("inferred")  # how sure: unique, invariant or undecided (certainty in --json)
        for col in cols:
            tab.add_column(col, justify="right" if col in ("count", "gap", "waited", "saving") else "left")
        for x in fakes:
            lane = str(x.channel) if r.lane is Lane.CHANNEL else str(x.stream)
            row: list[str | Text] = [Text(_at(x.before, x.before_name, src)), Text(_at(x.after, x.after_name, src)),
                                     lane, str(x.count), _fmt_us(x.gap_us), _fmt_us(x.wait_us / x.count if x.count else 0.0),
                                     "-" if x.saving_us is None else _fmt_us(x.saving_us)]
            if between:
                ids = between.get((x.graph_id, x.before, x.after))
                row.insert(2, "-" if ids is None else " ".join(f"#{i}" for i in ids[:3])
                           + (f" +{len(ids) - 3}" if len(ids) > 3 else "") or "nothing")
            if r.match is not MatchKind.EXACT:
                row.append(x.certainty.replace("inferred-", ""))
            tab.add_row(*row)
        show(con, tab, cut=("before", "after"), optional=(r.lane.value,))
        legend = words.FAKE_TABLE_LEGEND.format(lane=r.lane.value)
        top_ids = between.get((fakes[0].graph_id, fakes[0].before, fakes[0].after)) if between else None
        if top_ids:
            x = fakes[0]
            legend += (f" In the first row, #{x.after & 0xFFFFFFFF} did not start when #{x.before & 0xFFFFFFFF} "
                       f"ended: {', '.join(f'#{i}' for i in top_ids[:5])}"
                       f"{f' and {len(top_ids) - 5} more' if len(top_ids) > 5 else ''} ran on the {r.lane.value} "
                       "in the gap.")
        con.print(legend, markup=False, highlight=False)
    if r.inferred_waits:
        tab = Table(title="waits behind unrelated work (inferred from timing; per occurrence)", title_justify="left")
        for col in ("waited", "behind", "count", "mean wait", "saving", "certainty"):
            tab.add_column(col)
        for w in r.inferred_waits[:top]:
            tab.add_row(Text(_at(w.after, w.after_name, src)), Text(_at(w.behind, w.behind_name, src)), str(w.count),
                        _fmt_us(w.wait_us / w.count if w.count else 0.0),
                        "-" if w.saving_us is None else _fmt_us(w.saving_us), w.certainty)
        show(con, tab, cut=("waited", "behind"))
    lanes: dict[Any, list[int]] = {}
    for x in r.findings:
        key = x.channel if r.lane is Lane.CHANNEL else x.stream
        if x.kind is not DepKind.UNDECIDED:
            lanes.setdefault(key, [0, 0])[0 if x.kind is DepKind.TRUE else 1] += x.count
    if lanes:
        tab = Table(title=f"per {r.lane.value}", title_justify="left")
        tab.add_column(r.lane.value)
        tab.add_column("true", justify="right")
        tab.add_column("fake" if r.lane is Lane.CHANNEL else "fake on this stream", justify="right")
        for k in sorted(lanes, key=lambda x: (x is None, x)):
            tab.add_row(str(k), str(lanes[k][0]), str(lanes[k][1]))
        show(con, tab)
    note = tracer_note(overhead, r)
    for n in (*r.notes, *([note] if note else [])):
        con.print(f"note: {n}", markup=False, highlight=False)
    for sgt in r.suggestions:
        con.print(f"suggestion: {sgt}", markup=False, highlight=False)


def diff_table(con: Console, d: GraphDiff, a: str | None = None, b: str | None = None) -> None:
    """The diff's rows; ``a`` and ``b`` (the inputs as given) are named above the table."""
    for word, name in (("A", a), ("B", b)):
        if name is not None:
            con.print(Text(f"{word}: {name}"), soft_wrap=True)
    tab = Table(title="diff A → B", title_justify="left")
    for c in ("section", "key", "A", "B", "change"):
        tab.add_column(c)
    from cgtool.inspect.diff import Change

    shown = [r for r in d.rows if not (r.change is Change.UNCHANGED and r.section in ("kernel", "edge_type", "source"))]
    labels = distinct_short_names([r.key for r in shown if r.section == "kernel"])
    for r in shown:
        key = labels[r.key] if r.section == "kernel" else r.key  # only kernel names are shortened
        tab.add_row(Text(r.section), Text(key), f"{r.a:g}", f"{r.b:g}", r.change.value)
    show(con, tab)
    con.print(" · ".join(f"{k.value} {v}" for k, v in d.counts().items()), highlight=False, markup=False)


def bench_table(res: BenchResults, judgements: list[Judgement] | None) -> Table:
    """The bench results table: per workload the GPU µs statistics, host cost, eager and notes."""
    jd = {j.name: j for j in judgements or []}
    tab = Table(title="cgtool bench (GPU µs per replay)", title_justify="left")
    for c in ("workload", "median", "IQR", "min", "p90", "p99", "host µs", "eager µs", "speedup", "note"):
        tab.add_column(c, justify="left" if c in ("workload", "note") else "right")
    if judgements:
        tab.add_column("vs baseline")
    for w in res.workloads:
        label = bench_label(w)
        if w.failed:
            row = [label] + ["-"] * 8 + ["FAILED (below)"]
        else:
            s = w.stats()
            h, e = w.host_median(), w.eager_median()
            notes = []
            if s.noisy:
                notes.append(f"noisy (IQR {100 * s.iqr / s.median:.0f}%)")
            clk = [c for c in w.clock_mhz if c]
            if clk and (max(clk) - min(clk)) / min(clk) > 0.05:
                notes.append(f"clock moved {min(clk)}–{max(clk)} MHz")
            rm = w.run_medians_us
            cs, rs = w.capture_spread(), w.replay_spread()
            if w.spec is not None and w.spec.recaptures > 1 and cs is not None:
                notes.append(f"{len(w.capture_medians())} captures spread {100 * cs:.1f}%, replays "
                             + ("?" if rs is None else f"{100 * rs:.1f}%"))
            elif len(rm) > 1 and (max(rm) - min(rm)) / min(rm) > 0.01:
                notes.append(f"runs differ by {100 * (max(rm) - min(rm)) / min(rm):.1f}%")
            if e and s.median > e:
                notes.append("slower than eager")
            if w.sampling == "per-replay":
                notes.append("per-replay events")
            row = [label, f"{s.median:.2f}", f"{s.iqr:.2f}", f"{s.min:.2f}", f"{s.p90:.2f}", f"{s.p99:.2f}",
                   f"{h:.2f}" if h is not None else "-", f"{e:.2f}" if e is not None else "-",
                   f"{e / s.median:.2f}x" if e and s.median else "-", ", ".join(notes)]
        if judgements:
            j = jd.get(w.key)
            # the change of the median, and the verdict unless it is "unchanged" (the lines under
            # the table give every verdict's reason): short, so that the table fits 80 columns
            row.append("-" if j is None else j.verdict.value if j.ratio is None
                       else f"{100 * (j.ratio - 1):+.1f}%" + ("" if j.verdict is Verdict.UNCHANGED
                                                              else f" {j.verdict.value}"))
        tab.add_row(*(Text(c) for c in row))
    return tab


def bench_label(w: Any) -> str:
    """A workload's name in the bench table: the script's file name (and rank)."""
    spec = w.workload
    label = Path(spec).name if spec.endswith(".py") or ".py:" in spec else spec
    return label + (f" [rank {w.rank}]" if w.rank is not None else "")


def bench_verdicts(con: Console, res: BenchResults, judgements: Sequence[Judgement]) -> None:
    """Under the bench table, each workload's verdict and its reason (the table's "vs baseline"
    cell holds the change of the median): the workloads inside the threshold on one line, every
    other verdict on its own line."""
    labels = {w.key: bench_label(w) for w in res.workloads}
    plain = [j for j in judgements if j.verdict is Verdict.UNCHANGED and "(within " in j.reason]
    if plain:
        limit = plain[0].reason[plain[0].reason.index("(within ") + 1:-1]
        con.print(f"unchanged (median {limit} of the baseline's): "
                  f"{', '.join(labels.get(j.name, j.name) for j in plain)}", highlight=False, markup=False)
    for j in judgements:
        if j not in plain:
            con.print(f"{labels.get(j.name, j.name)} {j.verdict.value}: {j.reason}", highlight=False, markup=False)


def bench_summary_md(res: BenchResults, judgements: list[Judgement] | None) -> str:
    """The bench results as a markdown table (for GITHUB_STEP_SUMMARY)."""
    lines = ["### cgtool bench", "", "| workload | median µs | IQR | eager µs | verdict |", "|---|---:|---:|---:|---|"]
    jd = {j.name: j for j in judgements or []}
    for w in res.workloads:
        if w.failed:
            lines.append(f"| {markdown_cell(w.key)} | - | - | - | failed |")
            continue
        s, e = w.stats(), w.eager_median()
        v = markdown_cell(jd[w.key].verdict.value + f" ({jd[w.key].reason})") if w.key in jd else "-"
        lines.append(f"| {markdown_cell(w.key)} | {s.median:.2f} | {s.iqr:.2f} | {'-' if e is None else f'{e:.2f}'} | {v} |")
    return "\n".join(lines) + "\n"


def rank_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """One row per rank (and graph) of a multi-GPU run."""
    tab = Table(title=title, title_justify="left")
    keys = list(rows[0]) if rows else []
    for k in keys:
        tab.add_column(k)
    for r in rows:
        tab.add_row(*(Text(str(r[k])) for k in keys))
    return tab


def bundle_row(rank: int, label: str, g: GraphData, t: Topology, check_ok: bool | None, dest: Path) -> dict[str, Any]:
    """One row of the per-rank capture table (JSON-able: it travels between ranks)."""
    return {"rank": rank, "graph": label, "nodes": t.nodes, "edges": t.edges,
            "kernels": t.nodes_by_type.get("kernel", 0), "depth": t.depth, "exec graph id": g.exec_graph_id,
            "replay vs eager": "match" if check_ok else ("not checked" if check_ok is None else "MISMATCH"),
            "bundle": str(dest)}


def trace_line(s: TraceSummary, replays: int) -> str:
    """The one-line report of a written trace."""
    if s.collector == "torch":
        return (f"{plural(s.gpu_events, 'kernel')} over {plural(replays, 'replay')}, {plural(s.graphs, 'graph')} (torch.profiler: no hardware "
                f"channels{'' if s.has_node_ids else '; no graph node ids on this PyTorch'})")
    return (f"{plural(s.gpu_events, 'GPU event')} over {plural(replays, 'replay')}, {plural(s.graphs, 'graph')}, "
            f"channels {s.channels}, dropped records {s.dropped}")


def facts_table(title: str, facts: Mapping[str, str]) -> Table:
    """Two columns of (what, value), values shown literally."""
    tab = Table(title=title, show_header=False, title_justify="left")
    tab.add_column("what", style="bold")
    tab.add_column("value")
    for k, v in facts.items():
        tab.add_row(Text(k), Text(v))
    return tab


def deps_ranks_table(results: Mapping[int, DepsResult]) -> Table:
    """One row per rank of a per-rank deps analysis (the step summary's columns)."""
    tab = Table(title=f"per rank ({plural(len(results), 'rank')})", title_justify="left")
    for c in ("rank", *words.SUMMARY_COLUMNS):
        tab.add_column(c)
    for r, res in results.items():
        tab.add_row(str(r), *(Text(c) for c in words.summary_cells(res.figures())))
    return tab


def compare_report(con: Console, c: dict[str, Any]) -> None:
    """Two traces of one graph, judged by measured span per replay."""
    for k, word in (("a", "first"), ("b", "second")):  # named above the table: a path keeps to its line
        con.print(Text(f"{word}: {c[k].get('trace', k)}"), soft_wrap=True)
    tab = Table(title="compare: measured span per replay", title_justify="left")
    for col in ("trace", "replays", "median span", "IQR", "fake", "estimated saving"):
        tab.add_column(col, justify="left" if col == "trace" else "right")
    for k, word in (("a", "first"), ("b", "second")):
        x = c[k]
        fk = x.get("fake")
        tab.add_row(word, str(x["replays"]), _fmt_us(x["median_us"]),
                    _fmt_us(x["iqr_us"]), "not visible (no channels)" if fk is None else str(fk),
                    _fmt_us(x.get("estimated_saving_us")))
    show(con, tab)
    d = c.get("difference_us")
    if d is not None:
        verdict = {"same": "the same within the run-to-run spread", "b faster": "the second is faster",
                   "b slower": "the second is slower"}[c["verdict"]]
        con.print(f"second - first: {d:+.1f} µs ({100 * (c.get('difference_share') or 0.0):+.1f}%): {verdict}",
                  markup=False, highlight=False)
