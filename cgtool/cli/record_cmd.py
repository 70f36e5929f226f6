"""``cgtool record -- COMMAND``: every CUDA graph a program instantiates, in every process of it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from cgtool.capture.record.options import DEFAULTS as D, RecordOptions, help_of

_HELP = """Run a program unchanged and record every CUDA graph it instantiates, in every process of it.

Write the command after `--`: `cgtool record -o rec -- python train.py --lr 3e-4` (or `-m module`, \
or any command: `-- torchrun --nproc-per-node 2 prog.py`, `-- vllm serve ...`, `-- bash run.sh`). \
Every Python process of the program (multiprocessing workers, subprocesses, torchrun's ranks) \
records itself into OUT/p<PID>/ as it instantiates graphs (exports in get_graph_data()'s schema, \
with the source line of every node); OUT/index.json lists the processes, and names those that \
could not be recorded and why. A summary is printed at the end: per process and capture site, \
graphs, replays, graphs never replayed and their memory, re-recordings, capture time.

The exit code is the program's own; 2 for bad usage, 3 when recording could not start (no CUDA, \
cupti-python missing, or CUPTI held by another profiler; the program is then not run)."""


def record(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("-o", "--output", "--out", help=help_of("out"))] = D.out,
    force: Annotated[bool, typer.Option("--force", help=help_of("force"))] = D.force,
    trace_replays: Annotated[int, typer.Option("--trace-replays", min=0, help=help_of("trace_replays"))]
    = D.trace_replays,
    trace_skip: Annotated[int, typer.Option("--trace-skip", min=0, help=help_of("trace_skip"))] = D.trace_skip,
    coverage: Annotated[bool, typer.Option("--coverage", help=help_of("coverage"))] = D.coverage,
    hang_after: Annotated[Optional[int], typer.Option("--hang-after", min=1, metavar="S", help=help_of("hang_after"))]
    = D.hang_after,
    json_out: Annotated[Optional[Path], typer.Option("--json", help=help_of("json_out"))] = D.json_out,
    check_inputs: Annotated[int, typer.Option("--check-inputs", min=0, help=help_of("check_inputs"))]
    = D.check_inputs,
    nproc_per_node: Annotated[int, typer.Option("--nproc-per-node", min=1, help=help_of("nproc_per_node"))]
    = D.nproc_per_node,
    nnodes: Annotated[Optional[str], typer.Option("--nnodes", help=help_of("nnodes"))] = D.nnodes,
    node_rank: Annotated[Optional[int], typer.Option("--node-rank", help=help_of("node_rank"))] = D.node_rank,
    rdzv_endpoint: Annotated[Optional[str], typer.Option("--rdzv-endpoint", help=help_of("rdzv_endpoint"))]
    = D.rdzv_endpoint,
) -> None:
    from cgtool.cli.record_run import run_record

    run_record(list(ctx.args), RecordOptions.from_environment(
        out=out, force=force, trace_replays=trace_replays, trace_skip=trace_skip, coverage=coverage, hang_after=hang_after,
        check_inputs=check_inputs, json_out=json_out, nproc_per_node=nproc_per_node, nnodes=nnodes,
        node_rank=node_rank, rdzv_endpoint=rdzv_endpoint))


def register(app: typer.Typer) -> None:
    app.command(
        help=_HELP,
        rich_help_panel="Run a workload (GPU)",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(record)
