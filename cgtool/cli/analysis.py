"""Analysis commands: they read files and need no GPU and no torch."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path
from typing import Annotated, Optional

import typer

from cgtool.cli._common import err, out
from cgtool.errors import CheckFailed, UsageError
from cgtool.jsonio import DEFAULT_MAX_BYTES, atomic_write_bytes, write_json

MaxBytes = Annotated[int, typer.Option("--max-bytes", help="Refuse inputs that are (or decompress to) more bytes than this.")]


def _graphs_for(trace_path: Path, graph: list[Path], max_bytes: int):  # type: ignore[no-untyped-def]
    from cgtool.inspect.deps import graphs_from_trace
    from cgtool.inspect.graph import GraphData
    from cgtool.inspect.trace import load_trace

    t = load_trace(trace_path, max_bytes=max_bytes)
    gs = [GraphData.load(p, max_bytes=max_bytes) for p in graph] if graph else graphs_from_trace(t)
    return t, gs


def _deps_ranks(folder: Path, tolerance_us: float, json_out: Optional[Path], force: bool, top: int,
                max_bytes: int) -> int:
    from rich.table import Table

    from cgtool.inspect.deps import analyze, graphs_from_trace
    from cgtool.inspect.ranks import rank_files
    from cgtool.inspect.trace import load_trace
    from cgtool.report.tables import deps_report

    results = {}
    for r, p in sorted(rank_files(folder, "trace").items()):
        t = load_trace(p, max_bytes=max_bytes)
        res = analyze(t, graphs_from_trace(t), tolerance_us=tolerance_us)
        out.rule(f"rank {r}: {p}")
        deps_report(out, res, top=top)
        results[r] = res
    tab = Table(title=f"per rank ({len(results)} ranks)", title_justify="left")
    for c in ("rank", "true", "fake", "fake wait µs", "replays", "mean span µs", "critical path µs"):
        tab.add_column(c)
    for r, res in results.items():
        sm = res.to_json()["summary"]
        tab.add_row(str(r), str(sm["true"]), str(sm["fake"]), f"{sm['fake_wait_us']:.1f}", str(sm["replays"]),
                    str(sm["mean_span_us"]), str(sm["critical_path_us"]))
    out.print(tab)
    if json_out is not None:
        write_json(json_out, {"schema_version": 1, "ranks": {str(r): res.to_json() for r, res in results.items()}},
                   force=force)
    return sum(res.n_fake for res in results.values())


def deps(
    trace: Annotated[Path, typer.Argument(help="Chrome trace (.json or .json.gz): cgtool's, or torch.profiler's; or a folder of per-rank traces.")],
    graph: Annotated[Optional[list[Path]], typer.Option("--graph", "-g", help="Graph export(s) of the traced instantiation; optional for cgtool traces, which embed theirs.")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the result as JSON (schema: docs/deps.md).")] = None,
    tolerance_us: Annotated[float, typer.Option(help="B counts as after A when it starts no earlier than this before A's end.")] = 0.5,
    fail_on_fake: Annotated[Optional[int], typer.Option(help="Exit 1 when more than N fake dependencies are found.")] = None,
    annotate: Annotated[Optional[Path], typer.Option(help="Write a copy of the trace with true edges as flow arrows and fake serializations marked.")] = None,
    top: Annotated[int, typer.Option(help="Rows in the top-fake table.")] = 10,
    compare: Annotated[Optional[Path], typer.Option("--compare", help="Another trace of the same graph (e.g. another CUDA_DEVICE_MAX_CONNECTIONS): judge the two by measured span per replay.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing output files.")] = False,
    max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
) -> None:
    """True and fake dependencies: classify every serialization a trace shows against the graph."""
    from cgtool.inspect.deps import analyze
    from cgtool.report.tables import deps_report

    for p in (json_out, annotate):
        if p is not None and p.exists() and not force:
            from cgtool.errors import OutputExistsError

            raise OutputExistsError(p)
    if annotate is not None and annotate.resolve() == trace.resolve():
        raise UsageError("--annotate must name a new file; the original trace stays untouched.")
    if trace.is_dir():
        if graph or annotate:
            raise UsageError("With a folder of per-rank traces, --graph and --annotate are not taken: "
                             "each cgtool trace embeds its graph; annotate one rank's file at a time.")
        n_fake = _deps_ranks(trace, tolerance_us, json_out, force, top, max_bytes)
        if fail_on_fake is not None and n_fake > fail_on_fake:
            raise CheckFailed(f"{n_fake} fake dependencies found over all ranks, more than --fail-on-fake {fail_on_fake}.")
        return
    t, gs = _graphs_for(trace, graph or [], max_bytes)
    res = analyze(t, gs, tolerance_us=tolerance_us)
    deps_report(out, res, top=top)
    doc = res.to_json()
    if compare is not None:
        from cgtool.inspect.deps import compare_traces
        from cgtool.report.tables import compare_report

        t2, gs2 = _graphs_for(compare, graph or [], max_bytes)
        doc["compare"] = compare_traces(res, analyze(t2, gs2, tolerance_us=tolerance_us), str(trace), str(compare))
        compare_report(out, doc["compare"])
    if json_out is not None:
        write_json(json_out, doc, force=force)
        err.print(f"wrote {json_out}", markup=False)
    if annotate is not None:
        from cgtool.inspect.annotate import annotate_trace
        from cgtool.jsonio import load_json

        doc = load_json(trace, max_bytes=max_bytes)
        write_json(annotate, annotate_trace(doc, res, gs), force=force, indent=False)
        err.print(f"wrote {annotate} (open it in Perfetto)", markup=False)
    if fail_on_fake is not None and res.n_fake > fail_on_fake:
        raise CheckFailed(f"{res.n_fake} fake dependencies found, more than --fail-on-fake {fail_on_fake}.")


def topo(
    graph: Annotated[Path, typer.Argument(help="Graph export (graph.json), or a folder of per-rank exports.")],
    trace: Annotated[Optional[Path], typer.Option("--trace", help="A trace of this instantiation: weights the critical path by measured durations.")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the topology as JSON.")] = None,
    force: Annotated[bool, typer.Option("--force")] = False,
    max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
) -> None:
    """Topology: depth, width, forks and joins, redundant edges, critical path."""
    from cgtool.inspect.graph import GraphData
    from cgtool.inspect.topo import analyze
    from cgtool.report.tables import topo_table

    if graph.is_dir():
        from cgtool.inspect.ranks import rank_files

        res = {}
        for r, p in sorted(rank_files(graph, "graph").items()):
            g = GraphData.load(p, max_bytes=max_bytes)
            t = analyze(g)
            out.rule(f"rank {r}: {p}")
            topo_table(out, g, t)
            res[str(r)] = t.to_json()
        if json_out is not None:
            write_json(json_out, {"ranks": res}, force=force)
        return
    g = GraphData.load(graph, max_bytes=max_bytes)
    t = analyze(g, measured=_measured_path(g, trace, max_bytes) if trace else None)
    topo_table(out, g, t)
    if json_out is not None:
        write_json(json_out, t.to_json(), force=force)
        err.print(f"wrote {json_out}", markup=False)


def _measured_path(g, trace: Path, max_bytes: int):  # type: ignore[no-untyped-def]
    """The measured critical path of ``g``'s replays in ``trace`` (the one deps reports)."""
    from cgtool.inspect.deps import measured_critical_path, replay_times
    from cgtool.inspect.reach import topological_order
    from cgtool.inspect.trace import load_trace

    S, E = replay_times(load_trace(trace, max_bytes=max_bytes), g)
    return measured_critical_path(g, topological_order(g), S, E)


def _lanes(g, trace: Path, max_bytes: int) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """The lane (channel, or stream) each node ran on first."""
    from cgtool.inspect.deps import node_lanes
    from cgtool.inspect.trace import load_trace

    return node_lanes(load_trace(trace, max_bytes=max_bytes), g)


def dot(
    graph: Annotated[str, typer.Argument(help="Graph export (graph.json); with --driver, a TARGET to capture.")],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Output .dot (default: stdout).")] = None,
    render: Annotated[Optional[str], typer.Option(help="Also render with Graphviz: svg or png (next to the .dot).")] = None,
    trace: Annotated[Optional[Path], typer.Option("--trace", help="Group nodes by the channel (or stream) they ran on in this trace.")] = None,
    collapse: Annotated[int, typer.Option(help="Fold linear chains of at least N nodes into one (0: expand all).")] = 4,
    expand: Annotated[bool, typer.Option("--expand", help="Same as --collapse 0.")] = False,
    driver: Annotated[bool, typer.Option("--driver", help="Capture TARGET on the GPU and write the CUDA driver's own dump (cudaGraphDebugDotPrint).")] = False,
    driver_flags: Annotated[str, typer.Option(help="With --driver: verbose (default), or a comma list of kernel,memcpy,memset,host,event,attributes,handles,conditional.")] = "verbose",
    force: Annotated[bool, typer.Option("--force")] = False,
    max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
) -> None:
    """A readable Graphviz DOT of a graph export: short names, types, critical path, chains folded."""
    from cgtool.inspect.graph import GraphData
    from cgtool.inspect.topo import analyze
    from cgtool.report.dot import render_dot

    if render not in (None, "svg", "png"):
        raise UsageError(f"--render takes svg or png, not {render!r}.")
    if render and output is None:
        raise UsageError("--render needs -o FILE.dot (the image is written beside it).")
    if driver:
        if output is None:
            raise UsageError("--driver needs -o FILE.dot.")
        if output.exists() and not force:
            from cgtool.errors import OutputExistsError

            raise OutputExistsError(output)
        from cgtool.capture.entrypoint import parse_target
        from cgtool.capture.graph import driver_dot_flags
        from cgtool.capture.runner import capture_workload

        flags = driver_dot_flags(driver_flags)
        cap = capture_workload(parse_target(graph), [], check=False)
        output.parent.mkdir(parents=True, exist_ok=True)
        for label, g_ in cap.graphs:
            path = output if len(cap.graphs) == 1 else output.with_name(f"{output.stem}-{label}{output.suffix}")
            g_.debug_dump(str(path), flags=flags)
            err.print(f"wrote {path} (the driver's dump)", markup=False)
        return
    g = GraphData.load(Path(graph), max_bytes=max_bytes)
    buf = io.StringIO()
    lanes = _lanes(g, trace, max_bytes) if trace else None
    measured = _measured_path(g, trace, max_bytes) if trace else None
    render_dot(g, buf, topo=analyze(g, measured=measured), collapse=0 if expand else collapse, lanes=lanes, title=graph)
    if output is None:
        out.file.write(buf.getvalue())
        return
    atomic_write_bytes(output, buf.getvalue().encode(), force=force)
    err.print(f"wrote {output}", markup=False)
    if render:
        img = output.with_suffix(f".{render}")
        if img.exists() and not force:
            from cgtool.errors import OutputExistsError

            raise OutputExistsError(img)
        exe = shutil.which("dot")
        if exe is None:
            err.print(
                f"Graphviz's `dot` program is not installed, so {img} was not rendered; {output} is "
                "written. Install Graphviz (`apt-get install graphviz`, `brew install graphviz` or "
                f"`conda install graphviz`) and run `dot -T{render} {output} -o {img}`.",
                markup=False,
            )
            return
        r = subprocess.run([exe, f"-T{render}", str(output), "-o", str(img)], capture_output=True, text=True)
        if r.returncode != 0:
            raise UsageError(f"`dot -T{render}` failed: {r.stderr.strip()[:300]}")
        err.print(f"wrote {img}", markup=False)


def diff(
    a: Annotated[Path, typer.Argument(help="Graph export A (before).")],
    b: Annotated[Path, typer.Argument(help="Graph export B (after).")],
    fail_on: Annotated[Optional[list[str]], typer.Option("--fail-on", help="Exit 1 when met: any, kernels-increased, nodes-increased, edges-increased, depth-increased, width-decreased, kernel-added, kernel-removed.")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the diff as JSON.")] = None,
    force: Annotated[bool, typer.Option("--force")] = False,
    max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
) -> None:
    """What changed between two captures: kernels, node and edge types, depth, width, critical path."""
    from cgtool.inspect.diff import diff as do_diff, failed_conditions
    from cgtool.inspect.graph import GraphData
    from cgtool.report.tables import diff_table

    d = do_diff(GraphData.load(a, max_bytes=max_bytes), GraphData.load(b, max_bytes=max_bytes))
    hit = failed_conditions(d, fail_on or [])
    diff_table(out, d)
    if json_out is not None:
        write_json(json_out, d.to_json(), force=force)
    if hit:
        raise CheckFailed(f"diff found: {', '.join(hit)}.")


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Analyse files (no GPU)")(deps)
    app.command(rich_help_panel="Analyse files (no GPU)")(topo)
    app.command(rich_help_panel="Analyse files (no GPU)")(dot)
    app.command(rich_help_panel="Analyse files (no GPU)")(diff)
