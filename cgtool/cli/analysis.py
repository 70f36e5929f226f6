"""Analysis commands: they read files and need no GPU and no torch.

Every command takes the inputs of the one input model (``cgtool.inspect.inputs``, the table in
docs/inputs.md) and the same graph selector (``--graph-id``, ``PATH#n``, ``--rank``, ``--process``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.text import Text

from cgtool.cli._common import (DEFAULT_MAX_BYTES, Force, JsonOut, MaxBytes, console_for, err, one_stdout, out, output_path,
                                wrote)
from cgtool.errors import CheckFailed, UsageError
from cgtool.inspect import DEFAULT_TOLERANCE_US
from cgtool.report.fold import MAX_FOLD, MIN_FOLD


def _finite_tolerance(v: float) -> float:
    if not math.isfinite(v) or not 0 <= v <= 1e6:
        raise typer.BadParameter(f"{v} is not a tolerance: give a number of µs from 0 to 1000000.")
    return v


Tolerance = Annotated[float, typer.Option(callback=_finite_tolerance, help="B counts as after A when it starts no earlier than this (µs) before A's end (0 to 1000000).")]
#: Folding, worded the same for dot and report: a chain's inside is its nodes but the two ends.
Collapse = Annotated[int, typer.Option(min=0, help="Fold the inside of every linear chain (its nodes but the two ends, which stay drawn) that holds at least N nodes into boxes of at least N nodes (0: fold nothing).")]
MaxFold = Annotated[int, typer.Option(min=2, help="No folded box holds more than N nodes.")]
Expand = Annotated[bool, typer.Option("--expand", help="Fold nothing: the same as --collapse 0.")]
Top = Annotated[int, typer.Option(min=0, help="Rows in the top-fake table.")]
INPUT_HELP = ("a graph export, a cgtool trace (embeds its graphs), a capture bundle, a per-rank folder, a `cgtool "
              "record` folder; PATH#n picks its graph #n (docs/inputs.md)")
#: deps reads a torch.profiler trace as its TRACE (its graph in --graph); topo and dot take one in --trace.
DEPS_INPUT_HELP = INPUT_HELP.replace("a capture bundle", "a torch.profiler trace (with --graph), a capture bundle")
TRACE_INPUT_HELP = INPUT_HELP + "; a torch.profiler trace goes in --trace, beside its graph export"
GraphId = Annotated[Optional[int], typer.Option("--graph-id", min=0, help="Where the input holds several graphs: the one of this exec graph id.")]
Rank = Annotated[Optional[int], typer.Option("--rank", min=0, help="Where the input holds several ranks: this rank's.")]
Process = Annotated[Optional[str], typer.Option("--process", help="Where a recording holds several processes: this one's (its pid or folder).")]


def _selector(graph_id: Optional[int], rank: Optional[int], process: Optional[str]) -> Any:
    from cgtool.inspect.inputs import Selector

    return Selector(graph_id=graph_id, rank=rank, process=process)


def _path(arg: str) -> Path:
    from cgtool.inspect.inputs import split_number

    return split_number(arg)[0]


def deps(
    trace: Annotated[str, typer.Argument(help="The trace: " + DEPS_INPUT_HELP + "; a folder's traces are analysed one by one.")],
    graph: Annotated[Optional[list[Path]], typer.Option("--graph", "-g", help="Graph export(s) of the traced instantiation; needed for a profiler trace, optional for cgtool traces, which embed theirs.")] = None,
    json_out: JsonOut = None,
    tolerance_us: Tolerance = DEFAULT_TOLERANCE_US,
    fail_on_fake: Annotated[Optional[int], typer.Option(min=0, help="Exit 1 when more than N distinct fake dependencies (pairs of nodes, each counted once however many replays show it) are found: the count does not grow with the replays traced. Needs hardware channels (a `cgtool trace`): without them fake dependencies are not visible and the check is refused (exit 2).")] = None,
    annotate: Annotated[Optional[Path], typer.Option(help="Write a copy of the trace with true edges as flow arrows and fake serializations marked (`-`: standard output).")] = None,
    compare: Annotated[Optional[Path], typer.Option("--compare", help="Another trace of the same graph (e.g. another CUDA_DEVICE_MAX_CONNECTIONS): judge the two by measured span per replay.")] = None,
    max_connections: Annotated[Optional[int], typer.Option("--max-connections", min=1, max=32, help="The CUDA_DEVICE_MAX_CONNECTIONS the traced program ran with, for a trace without channel data that does not record it: with 1, every stream's work went through one hardware channel, so fake dependencies are found exactly.")] = None,
    graph_id: GraphId = None,
    rank: Rank = None,
    process: Process = None,
    top: Top = 10,
    force: Force = False,
    max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
) -> None:
    """True and fake dependencies: classify every serialization a trace shows against the graph."""
    from cgtool.inspect.files import deps_runs

    one_stdout(json=json_out, annotate=annotate)
    for p in (json_out, annotate):
        output_path(p, force, inputs=(_path(trace), compare, *(graph or [])))
    runs = deps_runs(trace, graph or [], selector=_selector(graph_id, rank, process), tolerance_us=tolerance_us,
                     max_bytes=max_bytes, keep_doc=annotate is not None, max_connections=max_connections)
    if len(runs) > 1 and (annotate or compare):
        raise UsageError(f"{_path(trace)} holds {len(runs)} traces; --annotate and --compare take one: pick it with "
                         "--rank/--process, or pass one trace file.")
    compared = None
    if compare is not None:
        from cgtool.inspect.files import compare_run

        compared = compare_run(runs[0], compare, graph or [], tolerance_us=tolerance_us, max_bytes=max_bytes)
    from cgtool.inspect.documents import nccl_figures

    nccl = nccl_figures(runs, max_bytes)  # per-rank traces whose graphs hold NCCL kernels; else None
    _deps_show(console_for(json_out, annotate), runs, compared, top, nccl)
    if json_out is not None:  # built only when asked for: a trace may hold 100,000s of replays
        from cgtool.artifacts.jsonio import write_json

        from cgtool.inspect.documents import deps_document

        write_json(json_out, deps_document(runs, compared, nccl), force=force)
        wrote(json_out)
    if annotate is not None:
        from cgtool.artifacts.jsonio import write_json
        from cgtool.inspect.annotate import annotate_trace

        run = runs[0]
        assert run.doc is not None
        write_json(annotate, annotate_trace(run.doc, run.result, run.graphs), force=force, indent=False)
        wrote(annotate, "(open it in Perfetto)")
    from cgtool.report.summary_md import append_step_summary, deps_summary_md

    append_step_summary(lambda: deps_summary_md({r.label: r.result for r in runs}))
    if fail_on_fake is not None:
        hidden = [r.label for r in runs if not r.result.fake_visible]
        if hidden:
            raise UsageError(f"--fail-on-fake cannot be checked on {hidden[0]}: it has no hardware channel data, so "
                             "fake dependencies are not visible in it (unknown is not 0). Check a `cgtool trace` of "
                             "the workload, whose traces carry channels.")
        n_fake = sum(sum(1 for f in r.result.fakes()) for r in runs)
        if n_fake > fail_on_fake:
            raise CheckFailed(f"{n_fake} distinct fake dependencies found (pairs of nodes), more than "
                              f"--fail-on-fake {fail_on_fake}.")


def _deps_show(con: Any, runs: list[Any], compared: dict[str, Any] | None, top: int, nccl: Any = None) -> None:
    from cgtool.report.tables import compare_report, deps_ranks_table, deps_report, show

    for run in runs:
        if len(runs) > 1:
            con.rule(Text(run.label))
        deps_report(con, run.result, top=top, sources=run.sources(), overhead=run.overhead, names=run.names,
                    graphs=run.graphs)
    if len(runs) > 1:
        ranked = {r.rank: r.result for r in runs if r.rank is not None}
        if len(ranked) == len(runs):
            show(con, deps_ranks_table(ranked))
            if nccl is not None:
                from cgtool.report.collectives_table import collectives_table

                show(con, collectives_table(nccl))
    if compared is not None:
        compare_report(con, compared)


def topo(
    graph: Annotated[str, typer.Argument(help="The graph(s): " + TRACE_INPUT_HELP + ".")],
    trace: Annotated[Optional[Path], typer.Option("--trace", help="A trace of this instantiation (a file, or a per-rank folder paired by rank): the measured span and critical path.")] = None,
    json_out: JsonOut = None,
    graph_id: GraphId = None,
    rank: Rank = None,
    process: Process = None,
    force: Force = False,
    max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
) -> None:
    """Topology: depth, width, forks and joins, redundant edges, critical path."""
    from cgtool.artifacts.jsonio import write_json
    from cgtool.inspect.files import graph_views
    from cgtool.report.tables import topo_table

    output_path(json_out, force, inputs=(_path(graph), trace))
    res, views, notes = graph_views(graph, trace, selector=_selector(graph_id, rank, process), command="topo",
                                    max_bytes=max_bytes)
    con = console_for(json_out)
    for v in views:
        if len(views) > 1:
            con.rule(Text(v.label))
        topo_table(con, v.graph, v.topology, v.figures, title=f"topology of {v.graph.source}")
    for n in notes:
        con.print(f"note: {n}", markup=False, highlight=False)
    if json_out is not None:
        write_json(json_out, _topo_json(views), force=force)
        wrote(json_out)


def _topo_json(views: list[Any]) -> dict[str, Any]:
    def one(v: Any) -> dict[str, Any]:
        d: dict[str, Any] = v.topology.to_json()
        if v.figures is not None:
            d["measured"] = {**v.figures.to_json(), "trace": v.trace_source}
        return d

    if len(views) == 1:
        return one(views[0])
    if all(v.rank is not None for v in views) and len({v.rank for v in views}) == len(views):
        return {"ranks": {str(v.rank): one(v) for v in views}}
    labels = [v.label for v in views]
    keys = [lab if labels.count(lab) == 1 else f"{lab} ({v.graph.source})" for lab, v in zip(labels, views)]
    return {"graphs": {k: one(v) for k, v in zip(keys, views)}}


def dot(
    graph: Annotated[str, typer.Argument(help="The graph: " + TRACE_INPUT_HELP + "; with --driver, a TARGET to capture.")],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Output .dot (default: standard output).")] = None,
    render: Annotated[Optional[str], typer.Option(help="Also render with Graphviz: svg or png (next to the .dot).")] = None,
    trace: Annotated[Optional[Path], typer.Option("--trace", help="A trace of this instantiation: nodes grouped by the channel (or stream) they ran on, coloured by measured duration, fake dependencies drawn. A cgtool trace given as GRAPH is its own.")] = None,
    collapse: Collapse = MIN_FOLD,
    max_fold: MaxFold = MAX_FOLD,
    expand: Expand = False,
    graph_id: GraphId = None,
    rank: Rank = None,
    process: Process = None,
    driver: Annotated[bool, typer.Option("--driver", help="Capture TARGET on the GPU and write the CUDA driver's own dump (cudaGraphDebugDotPrint).")] = False,
    driver_flags: Annotated[str, typer.Option(help="With --driver: verbose (default), or a comma list of kernel,memcpy,memset,host,event,attributes,handles,conditional.")] = "verbose",
    force: Force = False,
    max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
) -> None:
    """A readable Graphviz DOT of one graph: #n and short names, critical path, chains folded, a legend; with a trace, durations, lanes, fake dependencies and the trace's figures."""
    from cgtool.artifacts.jsonio import atomic_write_bytes, is_stdout
    from cgtool.report.dot import dot_of_view, render_image

    if render not in (None, "svg", "png"):
        raise UsageError(f"--render takes svg or png, not {render!r}.")
    if (render or driver) and (output is None or is_stdout(output)):
        raise UsageError(f"{'--render' if render else '--driver'} needs -o FILE.dot.")
    img = output.with_suffix(f".{render}") if render and output is not None else None
    output_path(output, force, inputs=(None if driver else _path(graph), trace))
    output_path(img, force, inputs=(None if driver else _path(graph),))
    if driver:
        from cgtool.capture.bundle import write_driver_dots

        assert output is not None
        for p in write_driver_dots(graph, output, driver_flags):
            wrote(p, "(the driver's dump)")
        return
    from cgtool.inspect.files import graph_views

    res, views, notes = graph_views(graph, trace, selector=_selector(graph_id, rank, process), command="dot",
                                    max_bytes=max_bytes, one=True)
    v = views[0]
    title = str(_path(graph)) if len(res.graphs) == 1 else f"{_path(graph)}: {v.label}"
    text = dot_of_view(v, collapse=0 if expand else collapse, max_fold=max_fold, title=title)
    for n in notes:
        err.print(f"note: {n}", markup=False, highlight=False)
    if output is None:
        out.file.write(text)
        return
    atomic_write_bytes(output, text.encode(), force=force)
    wrote(output)
    if img is not None and render is not None:
        note = render_image(output, img, render)
        if note:
            err.print(note, markup=False, highlight=False)
        else:
            wrote(img)


def diff(
    a: Annotated[str, typer.Argument(help="Graph A (before): " + INPUT_HELP + ".")],
    b: Annotated[str, typer.Argument(help="Graph B (after), of the same kinds.")],
    fail_on: Annotated[Optional[list[str]], typer.Option("--fail-on", help="Exit 1 when met: any, kernels-increased, nodes-increased, edges-increased, depth-increased, width-decreased, kernel-added, kernel-removed.")] = None,
    json_out: JsonOut = None,
    graph_id: GraphId = None,
    rank: Rank = None,
    process: Process = None,
    force: Force = False,
    max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
) -> None:
    """What changed between two captures: kernels, node and edge types, depth, width, critical path."""
    from cgtool.artifacts.jsonio import write_json
    from cgtool.inspect.diff import diff as do_diff, failed_conditions
    from cgtool.inspect.files import diff_pair
    from cgtool.report.summary_md import append_step_summary, diff_summary_md
    from cgtool.report.tables import diff_table

    output_path(json_out, force, inputs=(_path(a), _path(b)))
    sel = _selector(graph_id, rank, process)
    ga, gb = diff_pair(a, b, sel, sel, max_bytes=max_bytes)
    d = do_diff(ga.graph, gb.graph)
    hit = failed_conditions(d, fail_on or [])
    diff_table(console_for(json_out), d, a, b)
    append_step_summary(diff_summary_md(d, _path(a), _path(b)))
    if json_out is not None:
        write_json(json_out, d.to_json(), force=force)
        wrote(json_out)
    if hit:
        raise CheckFailed(f"diff found: {', '.join(hit)}.")


def register(app: typer.Typer) -> None:
    for cmd in (deps, topo, dot, diff):
        app.command(rich_help_panel="Analyse files (no GPU)")(cmd)
