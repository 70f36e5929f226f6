"""Commands that run a workload on the GPU: capture, export, trace; and doctor."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from cgtool.cli._common import Force, JsonOut, console_for, out, output_path, wrote

_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": False}
Target = Annotated[str, typer.Argument(help="`script.py`, `script.py:fn` or `package.module:fn` (fn defaults to setup; it returns the step to capture). Script arguments go after `--`.")]
Warmup = Annotated[int, typer.Option(min=0, help="Eager warm-up runs on a side stream before capture.")]
Nproc = Annotated[Optional[int], typer.Option("--nproc-per-node", help="Start N processes (one per GPU) under torchrun; each rank captures its own graph, rank 0 reports all.")]


def relaunch_under_torchrun(nproc: Optional[int]) -> None:
    """With --nproc-per-node outside torchrun: run this command under torchrun and exit with the
    first failing rank's own code (torchrun's is 1 for any failure; ``cgtool.cli._children``)."""
    import importlib.util
    import os

    from cgtool.capture import dist
    from cgtool.cli._children import run_ranks
    from cgtool.errors import MissingExtraError, UsageError

    if nproc is None or dist.distributed():
        return
    if nproc < 1:
        raise UsageError("--nproc-per-node must be at least 1.")
    if importlib.util.find_spec("torch") is None:
        raise MissingExtraError("--nproc-per-node (torchrun, from torch)")
    argv = dist.strip_option(sys.argv[1:], "--nproc-per-node")
    raise typer.Exit(run_ranks(dist.torchrun_command(nproc, argv), nproc, {**os.environ, **dist.NO_MULTICAST}))


def capture(
    ctx: typer.Context,
    target: Target,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", "--out", help="Bundle folder (default ./cgtool-out/<name>/).")] = None,
    warmup: Warmup = 3,
    check: Annotated[bool, typer.Option(help="Compare one replay with an eager run.")] = True,
    allow_mismatch: Annotated[bool, typer.Option(help="Write the bundle even when replay differs from eager.")] = False,
    rtol: Annotated[float, typer.Option(min=0, help="Relative tolerance of the replay check.")] = 1e-4,
    atol: Annotated[float, typer.Option(min=0, help="Absolute tolerance of the replay check.")] = 1e-5,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing bundle.")] = False,
    nproc_per_node: Nproc = None,
) -> None:
    """Capture a workload into a CUDA graph, check replay against eager, write a bundle.

    The bundle holds graph.json (the export with cgtool's metadata), graph.dot (the driver's own
    dump) and, for workloads with several graphs, graph-<label>.json/.dot for each.
    """
    from cgtool.capture import dist
    from cgtool.capture.bundle import check_destination, write_bundle
    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.runner import capture_checked
    from cgtool.inspect.topo import analyze
    from cgtool.report.tables import bundle_row, graph_summary, rank_table, show

    relaunch_under_torchrun(nproc_per_node)
    tgt = parse_target(target)
    dest = dist.rank_dir(output or Path("cgtool-out") / tgt.name)
    check_destination(dest, force)
    cap = capture_checked(tgt, list(ctx.args), allow_mismatch=allow_mismatch, warmup=warmup, check=check,
                          rtol=rtol, atol=atol, sources=True)
    entries = write_bundle(cap, dest, force=force)
    rows = [bundle_row(dist.rank(), e.label, e.graph, analyze(e.graph), cap.check_ok, dest) for e in entries]
    if dist.distributed():
        every = dist.gather(rows)
        if every is not None:
            show(out, rank_table(f"{tgt.name}: {dist.world_size()} ranks", [r for rows_ in every for r in rows_]))
        return
    for e in entries:
        graph_summary(out, e.graph, analyze(e.graph), title=f"{tgt.name} [{e.label}]: {e.path}")
    wrote(dest, "(bundle)")


def export(
    ctx: typer.Context,
    target: Target,
    output: Annotated[Path, typer.Option("-o", "--output", help="Output JSON (get_graph_data() schema plus the cgtool block; .gz compresses; `-`: standard output).")] = Path("graph.json"),
    label: Annotated[Optional[str], typer.Option(help="For workloads with several graphs: which one (e.g. fwd0, bwd0).")] = None,
    warmup: Warmup = 3,
    force: Force = False,
    nproc_per_node: Nproc = None,
) -> None:
    """Capture a workload and write just its graph export as JSON.

    Under torchrun each rank writes its own file (graph.rank<k>.json); `cgtool topo DIR` reads them all."""
    from cgtool.artifacts.jsonio import write_json
    from cgtool.capture import dist
    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.runner import capture_workload
    from cgtool.errors import UsageError

    relaunch_under_torchrun(nproc_per_node)
    output = dist.rank_path(output)
    output_path(output, force)
    cap = capture_workload(parse_target(target), list(ctx.args), warmup=warmup, check=False, sources=True)
    exports = dict(cap.exports())
    pick = label or next(iter(exports))
    if pick not in exports:
        raise UsageError(f"No graph labelled {pick!r}; this workload has {', '.join(exports)}.")
    write_json(output, exports[pick], force=force)
    wrote(output, f"({len(exports[pick]['nodes'])} nodes, exec graph {exports[pick]['exec_graph_id']})")


def trace(
    ctx: typer.Context,
    target: Target,
    output: Annotated[Path, typer.Option("-o", "--output", help="Chrome trace to write (.json or .json.gz; `-`: standard output); Perfetto opens it.")] = Path("trace.json.gz"),
    replays: Annotated[int, typer.Option(min=1, help="Traced replays (after warm-up).")] = 5,
    warmup: Warmup = 3,
    max_connections: Annotated[Optional[int], typer.Option(min=1, max=32, help="Run with CUDA_DEVICE_MAX_CONNECTIONS=N (set before CUDA starts: in a child process; under torchrun in each rank).")] = None,
    profiler: Annotated[str, typer.Option(help="cupti (cupti-python: node ids and channels) or torch (torch.profiler: no channels).")] = "cupti",
    force: Force = False,
    nproc_per_node: Nproc = None,
) -> None:
    """Replay a captured workload under CUPTI and write a chrome trace with graph node ids and channels.

    Under torchrun each rank writes its own file (trace.rank<k>.json.gz); `cgtool deps DIR` reads them all."""
    from cgtool.capture import dist
    from cgtool.capture.tracing import Profiler, record_trace
    from cgtool.errors import UsageError
    from cgtool.report.tables import rank_table, show, trace_line

    relaunch_under_torchrun(nproc_per_node)
    if profiler not in {p.value for p in Profiler}:
        raise UsageError(f"--profiler takes cupti or torch, not {profiler!r}.")
    output = dist.rank_path(output)
    output_path(output, force)
    s = record_trace(target, list(ctx.args), str(output), replays=replays, warmup=warmup,
                     profiler=Profiler(profiler), max_connections=max_connections, force=force)
    if dist.distributed():
        every = dist.gather(s.to_json())
        if every is not None:
            show(console_for(output), rank_table(f"traces of {replays} replays on {dist.world_size()} ranks", every))
        return
    console_for(output).print(trace_line(s, replays), highlight=False, markup=False)
    wrote(output, f"(open it in https://ui.perfetto.dev, or run `cgtool deps {output}`)")


def doctor(json_out: JsonOut = None, force: Force = False) -> None:
    """What this machine supports: torch and its CUDA build, the CUDA device and driver, where tools
    ids come from, cuda-bindings, cupti-python, cgtool's compiled parts, Graphviz.

    With --json: the values (booleans, versions, names; null where unknown, with the reason under
    "unknown")."""
    from cgtool.artifacts.jsonio import write_json
    from cgtool.capture.machine import facts_display, facts_json, machine_facts
    from cgtool.report.tables import facts_table, show

    output_path(json_out, force)
    facts = machine_facts()
    show(console_for(json_out), facts_table("cgtool doctor", facts_display(facts)))
    if json_out is not None:
        write_json(json_out, facts_json(facts), force=force)
        wrote(json_out)


def register(app: typer.Typer) -> None:
    panel = "Run a workload (GPU)"
    app.command(context_settings=_EXTRA, rich_help_panel=panel)(capture)
    app.command(context_settings=_EXTRA, rich_help_panel=panel)(export)
    app.command(context_settings=_EXTRA, rich_help_panel=panel)(trace)
    app.command(rich_help_panel="Machine")(doctor)
