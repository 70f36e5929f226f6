"""Analysis commands: they read files and need no GPU and no torch."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.text import Text

from cgtool.cli._common import DEFAULT_MAX_BYTES, Force, JsonOut, MaxBytes, console_for, err, out, output_path, wrote
from cgtool.errors import CheckFailed, UsageError
from cgtool.inspect import DEFAULT_TOLERANCE_US

def _finite_tolerance(v: float) -> float:
    if not math.isfinite(v) or not 0 <= v <= 1e6:
        raise typer.BadParameter(f"{v} is not a tolerance: give a number of µs from 0 to 1000000.")
    return v


Tolerance = Annotated[float, typer.Option(callback=_finite_tolerance, help="B counts as after A when it starts no earlier than this (µs) before A's end (0 to 1000000).")]
Top = Annotated[int, typer.Option(min=0, help="Rows in the top-fake table.")]


def deps(
    trace: Annotated[Path, typer.Argument(help="Chrome trace (.json or .json.gz): cgtool's, or torch.profiler's; a `cgtool record` folder; or a folder of per-rank traces.")],
    graph: Annotated[Optional[list[Path]], typer.Option("--graph", "-g", help="Graph export(s) of the traced instantiation; optional for cgtool traces, which embed theirs.")] = None,
    json_out: JsonOut = None,
    tolerance_us: Tolerance = DEFAULT_TOLERANCE_US,
    fail_on_fake: Annotated[Optional[int], typer.Option(min=0, help="Exit 1 when more than N fake dependencies are found.")] = None,
    annotate: Annotated[Optional[Path], typer.Option(help="Write a copy of the trace with true edges as flow arrows and fake serializations marked.")] = None,
    compare: Annotated[Optional[Path], typer.Option("--compare", help="Another trace of the same graph (e.g. another CUDA_DEVICE_MAX_CONNECTIONS): judge the two by measured span per replay.")] = None,
    top: Top = 10,
    force: Force = False,
    max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
) -> None:
    """True and fake dependencies: classify every serialization a trace shows against the graph."""
    from cgtool.inspect.files import recorded_trace

    trace = recorded_trace(trace)  # a `cgtool record` folder: its trace
    for p in (json_out, annotate):
        output_path(p, force, inputs=(trace, compare, *(graph or [])))
    if trace.is_dir():
        if graph or annotate or compare:
            raise UsageError("With a folder of per-rank traces, --graph, --annotate and --compare are not taken: "
                             "each cgtool trace embeds its graph; take one rank's file at a time for the others.")
        n_fake = _deps_ranks(trace, json_out, tolerance_us, top, force, max_bytes)
    else:
        n_fake = _deps_file(trace, graph or [], json_out, annotate, compare, tolerance_us, top, force, max_bytes)
    wrote(json_out)
    if fail_on_fake is not None and n_fake > fail_on_fake:
        raise CheckFailed(f"{n_fake} fake dependencies found, more than --fail-on-fake {fail_on_fake}.")


def _deps_ranks(folder: Path, json_out: Optional[Path], tolerance_us: float, top: int, force: bool,
                max_bytes: int | None) -> int:
    from cgtool.artifacts.jsonio import write_json
    from cgtool.inspect.files import deps_of_ranks
    from cgtool.report.summary_md import append_step_summary, deps_summary_md
    from cgtool.report.tables import deps_doc, deps_ranks_table, deps_report, show

    con = console_for(json_out)
    ranks = deps_of_ranks(folder, tolerance_us=tolerance_us, max_bytes=max_bytes)
    for r, rd in ranks.items():
        con.rule(Text(f"rank {r}: {rd.path}"))
        deps_report(con, rd.result, top=top, sources=rd.sources, overhead=rd.overhead)
    results = {r: rd.result for r, rd in ranks.items()}
    show(con, deps_ranks_table(results))
    if json_out is not None:
        docs = {str(r): deps_doc(rd.result, rd.overhead) for r, rd in ranks.items()}
        write_json(json_out, {"schema_version": 1, "ranks": docs}, force=force)
    append_step_summary(deps_summary_md({f"rank {r}": res for r, res in results.items()}))
    return sum(res.n_fake for res in results.values())


def _deps_file(trace: Path, graph: list[Path], json_out: Optional[Path], annotate: Optional[Path],
               compare: Optional[Path], tolerance_us: float, top: int, force: bool, max_bytes: int | None) -> int:
    from cgtool.artifacts.jsonio import write_json
    from cgtool.inspect.annotate import annotate_trace
    from cgtool.inspect.deps import compare_traces
    from cgtool.inspect.files import deps_of_file
    from cgtool.report.summary_md import append_step_summary, deps_summary_md
    from cgtool.report.tables import compare_report, deps_doc, deps_report

    con = console_for(json_out)
    run = deps_of_file(trace, graph, tolerance_us=tolerance_us, max_bytes=max_bytes, keep_doc=annotate is not None)
    overhead = run.trace.tracer_overhead
    deps_report(con, run.result, top=top, sources=run.sources(), overhead=overhead)
    compared = None
    if compare is not None:
        other = deps_of_file(compare, graph, tolerance_us=tolerance_us, max_bytes=max_bytes)
        compared = compare_traces(run.result, other.result, str(trace), str(compare))
        compare_report(con, compared)
    if json_out is not None:  # built only when asked for: a trace may hold 100,000s of replays
        doc = deps_doc(run.result, overhead)
        if compared is not None:
            doc["compare"] = compared
        write_json(json_out, doc, force=force)
    if annotate is not None and run.doc is not None:
        write_json(annotate, annotate_trace(run.doc, run.result, run.graphs), force=force, indent=False)
        wrote(annotate, "(open it in Perfetto)")
    append_step_summary(deps_summary_md({str(trace): run.result}))
    return run.result.n_fake


def topo(
    graph: Annotated[Path, typer.Argument(help="Graph export (graph.json), a `cgtool record` folder, or a folder of per-rank exports.")],
    trace: Annotated[Optional[Path], typer.Option("--trace", help="A trace of this instantiation: weights the critical path by measured durations.")] = None,
    json_out: JsonOut = None,
    force: Force = False,
    max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
) -> None:
    """Topology: depth, width, forks and joins, redundant edges, critical path."""
    from cgtool.artifacts.jsonio import write_json
    from cgtool.artifacts.recording import is_single_recording
    from cgtool.inspect.files import topo_of_file, topo_of_ranks, topo_of_recording
    from cgtool.report.tables import topo_table

    output_path(json_out, force, inputs=(graph, trace))
    con = console_for(json_out)
    if is_single_recording(graph):
        graphs = topo_of_recording(graph, trace, max_bytes=max_bytes)
        for g, t in graphs.values():
            topo_table(con, g, t)
        doc = {"graphs": {name: t.to_json() for name, (_, t) in graphs.items()}}
    elif graph.is_dir():
        ranks = topo_of_ranks(graph, max_bytes=max_bytes)
        for r, (g, t) in ranks.items():
            con.rule(Text(f"rank {r}: {g.source}"))
            topo_table(con, g, t)
        doc = {"ranks": {str(r): t.to_json() for r, (_, t) in ranks.items()}}
    else:
        g, t = topo_of_file(graph, trace, max_bytes=max_bytes)
        topo_table(con, g, t)
        doc = t.to_json()
    if json_out is not None:
        write_json(json_out, doc, force=force)
        wrote(json_out)


def dot(
    graph: Annotated[str, typer.Argument(help="Graph export (graph.json); with --driver, a TARGET to capture.")],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Output .dot (default: standard output).")] = None,
    render: Annotated[Optional[str], typer.Option(help="Also render with Graphviz: svg or png (next to the .dot).")] = None,
    trace: Annotated[Optional[Path], typer.Option("--trace", help="A trace of this instantiation: nodes grouped by the channel (or stream) they ran on, coloured by measured duration, fake dependencies drawn. A cgtool trace given as GRAPH is its own.")] = None,
    collapse: Annotated[int, typer.Option(min=0, help="Fold the inside of linear chains into pieces of at least N nodes (0: expand all); the ends of every chain stay.")] = 4,
    max_fold: Annotated[int, typer.Option(min=2, help="No folded piece holds more than N nodes.")] = 24,
    expand: Annotated[bool, typer.Option("--expand", help="Same as --collapse 0.")] = False,
    driver: Annotated[bool, typer.Option("--driver", help="Capture TARGET on the GPU and write the CUDA driver's own dump (cudaGraphDebugDotPrint).")] = False,
    driver_flags: Annotated[str, typer.Option(help="With --driver: verbose (default), or a comma list of kernel,memcpy,memset,host,event,attributes,handles,conditional.")] = "verbose",
    force: Force = False,
    max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
) -> None:
    """A readable Graphviz DOT of a graph export: #n and short names, critical path, chains folded, a legend; with --trace, durations and fake dependencies."""
    from cgtool.artifacts.jsonio import atomic_write_bytes, is_stdout
    from cgtool.report.dot import dot_of_file, render_image

    if render not in (None, "svg", "png"):
        raise UsageError(f"--render takes svg or png, not {render!r}.")
    if (render or driver) and (output is None or is_stdout(output)):
        raise UsageError(f"{'--render' if render else '--driver'} needs -o FILE.dot.")
    img = output.with_suffix(f".{render}") if render and output is not None else None
    output_path(output, force, inputs=(None if driver else Path(graph), trace))
    output_path(img, force, inputs=(None if driver else Path(graph),))
    if driver:
        from cgtool.capture.bundle import write_driver_dots

        assert output is not None
        for p in write_driver_dots(graph, output, driver_flags):
            wrote(p, "(the driver's dump)")
        return
    text = dot_of_file(Path(graph), trace, collapse=0 if expand else collapse, max_fold=max_fold, max_bytes=max_bytes)
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
    a: Annotated[Path, typer.Argument(help="Graph export A (before).")],
    b: Annotated[Path, typer.Argument(help="Graph export B (after).")],
    fail_on: Annotated[Optional[list[str]], typer.Option("--fail-on", help="Exit 1 when met: any, kernels-increased, nodes-increased, edges-increased, depth-increased, width-decreased, kernel-added, kernel-removed.")] = None,
    json_out: JsonOut = None,
    force: Force = False,
    max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
) -> None:
    """What changed between two captures: kernels, node and edge types, depth, width, critical path."""
    from cgtool.artifacts.graph import GraphData
    from cgtool.artifacts.jsonio import write_json
    from cgtool.inspect.diff import diff as do_diff, failed_conditions
    from cgtool.report.summary_md import append_step_summary, diff_summary_md
    from cgtool.report.tables import diff_table

    output_path(json_out, force, inputs=(a, b))
    d = do_diff(GraphData.load(a, max_bytes=max_bytes), GraphData.load(b, max_bytes=max_bytes))
    hit = failed_conditions(d, fail_on or [])
    diff_table(console_for(json_out), d)
    append_step_summary(diff_summary_md(d, a, b))
    if json_out is not None:
        write_json(json_out, d.to_json(), force=force)
        wrote(json_out)
    if hit:
        raise CheckFailed(f"diff found: {', '.join(hit)}.")


def register(app: typer.Typer) -> None:
    for cmd in (deps, topo, dot, diff):
        app.command(rich_help_panel="Analyse files (no GPU)")(cmd)
