"""``cgtool record -- python prog.py ARGS``: every CUDA graph a program instantiates, with its source lines."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

_HELP = """Run a program unchanged and record every CUDA graph it instantiates.

Write the program after `--`: `cgtool record -o rec -- python train.py --lr 3e-4` (or `-m module`). \
Each graph is written to OUT as soon as it is instantiated (export in get_graph_data()'s schema, \
with the source line of every node), with OUT/index.json listing them; a summary is printed at the \
end (graphs, replays, pools and memory, torch.compile's cudagraph skips, and with --coverage the \
share of kernel time inside graph replays).

The exit code is the program's own; 2 for bad usage, 3 when recording could not start \
(cupti-python missing or CUPTI held by another profiler; the program is then not run)."""


def record(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("-o", "--output", "--out", help="Output folder.")] = Path("cgtool-record"),
    force: Annotated[bool, typer.Option("--force", help="Replace an existing recording folder.")] = False,
    trace_replays: Annotated[int, typer.Option("--trace-replays", min=0,
                                               help="Trace K replays of each graph with CUPTI (node ids, "
                                               "channels) into OUT/trace.json.")] = 0,
    trace_skip: Annotated[int, typer.Option("--trace-skip", min=0,
                                            help="Replays of each graph left untraced first (warm-up).")] = 1,
    coverage: Annotated[bool, typer.Option("--coverage",
                                           help="Measure the share of the run's GPU kernel time spent inside graph "
                                           "replays, over the run and from the first graph on (CUPTI kernel "
                                           "records for the whole run: ~5% more wall time on the benchmark). On "
                                           "with --trace-replays.")] = False,
    nproc_per_node: Annotated[int, typer.Option("--nproc-per-node", min=1,
                                                help="Start N ranks with torchrun; each records into OUT/rank<R>.")] = 1,
    nnodes: Annotated[Optional[str], typer.Option("--nnodes", help="Passed to torchrun.")] = None,
    node_rank: Annotated[Optional[int], typer.Option("--node-rank", help="Passed to torchrun.")] = None,
    rdzv_endpoint: Annotated[Optional[str], typer.Option("--rdzv-endpoint", help="Passed to torchrun.")] = None,
) -> None:
    from cgtool.cli.record_run import run_record

    run_record(list(ctx.args), out=out, force=force, trace_replays=trace_replays, trace_skip=trace_skip,
               coverage=coverage, nproc_per_node=nproc_per_node, nnodes=nnodes, node_rank=node_rank,
               rdzv_endpoint=rdzv_endpoint)


def register(app: typer.Typer) -> None:
    app.command(
        help=_HELP,
        rich_help_panel="Run a workload (GPU)",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(record)
