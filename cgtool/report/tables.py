"""Rich renderings of results. Each function writes to a given Console (tests use a fixed width)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cgtool.inspect.benchstats import Judgement, Stats
from cgtool.inspect.deps import DepsResult
from cgtool.inspect.diff import Change, GraphDiff
from cgtool.inspect.graph import GraphData
from cgtool.inspect.names import short_name
from cgtool.inspect.topo import Topology


def _fmt_us(v: float | None) -> str:
    return "-" if v is None else (f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.1f} µs")


def graph_summary(con: Console, g: GraphData, t: Topology, title: str = "") -> None:
    meta = g.meta
    tim = meta.get("timings", {}) if isinstance(meta, dict) else {}
    tab = Table(title=title or f"graph {g.exec_graph_id}", show_header=False, title_justify="left")
    tab.add_column("what", style="bold")
    tab.add_column("value")
    tab.add_row("nodes", f"{t.nodes}  (" + ", ".join(f"{k} {v}" for k, v in sorted(t.nodes_by_type.items())) + ")")
    tab.add_row("edges", str(t.edges))
    tab.add_row("roots / leaves", f"{len(t.roots)} / {len(t.leaves)}")
    tab.add_row("depth / widest level", f"{t.depth} / {t.max_level_width}")
    tab.add_row("distinct kernels", str(t.distinct_kernels))
    tab.add_row("exec graph id", f"{g.exec_graph_id} (ids from {g.id_source})")
    if tim.get("capture_s") is not None:
        tab.add_row("capture / instantiate", f"{tim['capture_s'] * 1e3:.2f} ms / {(tim.get('instantiate_s') or 0) * 1e3:.2f} ms")
    chk = meta.get("check") if isinstance(meta, dict) else None
    if chk and chk.get("ok") is not None:
        tab.add_row("replay vs eager", f"{'match' if chk['ok'] else 'MISMATCH'} (max |diff| {chk['max_abs_diff']:.3g} in {chk['worst_output']})")
    con.print(tab)


def topo_table(con: Console, g: GraphData, t: Topology) -> None:
    graph_summary(con, g, t, title=f"topology of {g.source}")
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
    tab.add_row("critical path", f"{len(cp)} nodes" + (f", {_fmt_us(t.critical_path_us)} measured" if t.critical_path_us is not None else ""))
    if cp:
        tab.add_row("  from → to", f"{short_name(names[0], 40)} → {short_name(names[-1], 40)}")
    con.print(tab)


def deps_report(con: Console, r: DepsResult, top: int = 10) -> None:
    s = r.to_json()["summary"]
    head = Table(title="serializations in the trace", show_header=False, title_justify="left")
    head.add_column("what", style="bold")
    head.add_column("value")
    head.add_row("true dependencies", f"{s['true']} ({s['distinct_true']} distinct pairs)")
    head.add_row("fake dependencies", f"{s['fake']} ({s['distinct_fake']} distinct pairs), "
                 f"{_fmt_us(s['fake_wait_us'])} waited while ready, summed over replays (a wait, not a loss)")
    if s["undecided"]:
        head.add_row("undecided", f"{s['undecided']} serializations (the consistent node assignments disagree)")
    head.add_row("replays", f"{s['replays']} of exec graph {', '.join(map(str, s['graphs']))}")
    head.add_row("lanes", "hardware channels" if r.lane == "channel" else "streams (no channel data in the trace)")
    if r.match == "exact":
        head.add_row("match", "exact (graph node ids)")
    else:
        cert = ", ".join(f"{v} {k}" for k, v in sorted(s["certainty"].items()))
        head.add_row("match", f"INFERRED (launch, name, shape, stream, time): {cert or 'no serializations'}")
    head.add_row("replay span / critical path", f"{_fmt_us(s['mean_span_us'])} mean / {_fmt_us(s['critical_path_us'])} (median replay)")
    c = r.cost
    if c.get("saving_share") is not None:
        filled = ", the GPU was full" if c.get("gpu_filled") else ""
        head.add_row("estimated saving", f"{_fmt_us(c['saving_us'])} per replay without the fake serializations "
                     f"({100 * c['saving_share']:.1f}% of the span{filled})")
    con.print(head)
    fakes = r.fakes()[:top]
    if fakes:
        tab = Table(title=f"top fake dependencies (of {s['distinct_fake']})", title_justify="left")
        cols = ["before", "after", "channel" if r.lane == "channel" else "stream", "count", "gap", "wait", "saving"]
        if r.match != "exact":
            cols.append("certainty")
        for col in cols:
            tab.add_column(col, justify="right" if col in ("count", "gap", "wait", "saving") else "left")
        for f in fakes:
            lane = str(f.channel) if r.lane == "channel" else str(f.stream)
            row = [f"#{f.before & 0xFFFFFFFF} {short_name(f.before_name, 32)}",
                   f"#{f.after & 0xFFFFFFFF} {short_name(f.after_name, 32)}", lane, str(f.count),
                   _fmt_us(f.gap_us), _fmt_us(f.wait_us), "-" if f.saving_us is None else _fmt_us(f.saving_us)]
            if r.match != "exact":
                row.append(f.certainty)
            tab.add_row(*row)
        con.print(tab)
    if r.inferred_waits:
        tab = Table(title="waits behind unrelated work (inferred from timing)", title_justify="left")
        for col in ("waited", "behind", "count", "total wait", "saving", "certainty"):
            tab.add_column(col)
        for w in r.inferred_waits[:top]:
            tab.add_row(f"#{w.after & 0xFFFFFFFF} {short_name(w.after_name, 32)}",
                        f"#{w.behind & 0xFFFFFFFF} {short_name(w.behind_name, 32)}", str(w.count), _fmt_us(w.wait_us),
                        "-" if w.saving_us is None else _fmt_us(w.saving_us), w.certainty)
        con.print(tab)
    lanes: dict[Any, list[int]] = {}
    for f in r.findings:
        key = f.channel if r.lane == "channel" else f.stream
        if f.kind.value != "undecided":
            lanes.setdefault(key, [0, 0])[0 if f.kind.value == "true" else 1] += f.count
    if lanes:
        tab = Table(title=f"per {r.lane}", title_justify="left")
        tab.add_column(r.lane)
        tab.add_column("true", justify="right")
        tab.add_column("fake", justify="right")
        for k in sorted(lanes, key=lambda x: (x is None, x)):
            tab.add_row(str(k), str(lanes[k][0]), str(lanes[k][1]))
        con.print(tab)
    for n in r.notes:
        con.print(f"note: {n}", markup=False, highlight=False)
    for sgt in r.suggestions:
        con.print(f"suggestion: {sgt}", markup=False, highlight=False)


def diff_table(con: Console, d: GraphDiff) -> None:
    tab = Table(title="diff A → B", title_justify="left")
    for c in ("section", "key", "A", "B", "change"):
        tab.add_column(c)
    for r in d.rows:
        if r.change is Change.UNCHANGED and r.section in ("kernel", "edge_type"):
            continue
        tab.add_row(r.section, short_name(r.key, 50), f"{r.a:g}", f"{r.b:g}", r.change.value)
    con.print(tab)
    counts = d.to_json()["summary"]
    con.print(" · ".join(f"{k} {v}" for k, v in counts.items()), highlight=False)


def bench_table(doc: dict[str, Any], judgements: list[Judgement] | None) -> Table:
    """The bench results table: per workload the GPU µs statistics, host cost, eager and notes."""
    jd = {j.name: j for j in judgements or []}
    tab = Table(title="cgtool bench (GPU µs per replay)", title_justify="left")
    for c in ("workload", "median", "IQR", "min", "p90", "p99", "host µs", "eager µs", "speedup", "note"):
        tab.add_column(c, justify="left" if c in ("workload", "note") else "right")
    if judgements:
        tab.add_column("vs baseline")
    for name, w in doc["workloads"].items():
        spec, _, rank = name.partition(" [rank ")
        label = Path(spec).name if spec.endswith(".py") or ".py:" in spec else spec
        label += f" [rank {rank}" if rank else ""
        if w.get("error"):
            row = [label] + ["-"] * 8 + ["FAILED (below)"]
        else:
            s = Stats.of(w["gpu_us"])
            h = Stats.of(w["host_us"]).median if w.get("host_us") else None
            e = Stats.of(w["eager_us"]).median if w.get("eager_us") else None
            notes = []
            if s.noisy:
                notes.append(f"noisy (IQR {100 * s.iqr / s.median:.0f}%)")
            clk = [c for c in (w.get("clock_mhz") or []) if c]
            if clk and (max(clk) - min(clk)) / min(clk) > 0.05:
                notes.append(f"clock moved {min(clk)}–{max(clk)} MHz")
            rm = w.get("run_medians_us") or []
            if len(rm) > 1 and (max(rm) - min(rm)) / min(rm) > 0.01:
                notes.append(f"runs differ by {100 * (max(rm) - min(rm)) / min(rm):.1f}%")
            if w.get("sampling") == "per-replay":
                notes.append("per-replay events")
            row = [label, f"{s.median:.2f}", f"{s.iqr:.2f}", f"{s.min:.2f}", f"{s.p90:.2f}", f"{s.p99:.2f}",
                   f"{h:.2f}" if h is not None else "-", f"{e:.2f}" if e is not None else "-",
                   f"{e / s.median:.2f}x" if e and s.median else "-", ", ".join(notes)]
        if judgements:
            j = jd.get(name)
            row.append(f"{j.verdict.value}: {j.reason}" if j else "-")
        tab.add_row(*row)
    return tab


def rank_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """One row per rank (and graph) of a multi-GPU run."""
    tab = Table(title=title, title_justify="left")
    keys = list(rows[0]) if rows else []
    for k in keys:
        tab.add_column(k)
    for r in rows:
        tab.add_row(*(str(r[k]) for k in keys))
    return tab


def compare_report(con: Console, c: dict[str, Any]) -> None:
    """Two traces of one graph, judged by measured span per replay."""
    tab = Table(title="compare: measured span per replay", title_justify="left")
    for col in ("trace", "replays", "median span", "IQR", "fake", "estimated saving"):
        tab.add_column(col, justify="left" if col == "trace" else "right")
    for k in ("a", "b"):
        x = c[k]
        tab.add_row(short_name(str(x.get("trace", k)), 40), str(x["replays"]), _fmt_us(x["median_us"]),
                    _fmt_us(x["iqr_us"]), str(x.get("fake", "-")), _fmt_us(x.get("estimated_saving_us")))
    con.print(tab)
    d = c.get("difference_us")
    if d is not None:
        verdict = {"same": "the same within the run-to-run spread", "b faster": "the second is faster",
                   "b slower": "the second is slower"}[c["verdict"]]
        con.print(f"second - first: {d:+.1f} µs ({100 * (c.get('difference_share') or 0.0):+.1f}%): {verdict}",
                  markup=False, highlight=False)
