"""Commands that run a workload on the GPU: capture, export, trace; and doctor."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Optional

import typer

from cgtool.cli._common import err, out
from cgtool.errors import OutputExistsError, UsageError
from cgtool.jsonio import write_json
from cgtool.report.tables import rank_table

_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": False}
Target = Annotated[str, typer.Argument(help="`script.py`, `script.py:fn` or `package.module:fn` (fn defaults to setup; it returns the step to capture). Script arguments go after `--`.")]
Warmup = Annotated[int, typer.Option(help="Eager warm-up runs on a side stream before capture.")]
Nproc = Annotated[Optional[int], typer.Option("--nproc-per-node", help="Start N processes (one per GPU) under torchrun; each rank captures its own graph, rank 0 reports all.")]


def _maybe_torchrun(nproc: Optional[int]) -> None:
    from cgtool.capture import dist

    if nproc is None or dist.distributed():
        return
    if nproc < 1:
        raise UsageError("--nproc-per-node must be at least 1.")
    raise typer.Exit(dist.relaunch_with_torchrun(nproc, dist.strip_option(sys.argv[1:], "--nproc-per-node")))


def _check_outcome(cap, allow_mismatch: bool) -> None:  # type: ignore[no-untyped-def]
    if cap.check_ok is False and not allow_mismatch:
        from cgtool.capture.runner import mismatch_failure

        raise mismatch_failure(cap)


def capture(
    ctx: typer.Context,
    target: Target,
    out_dir: Annotated[Optional[Path], typer.Option("--out", "-o", help="Bundle folder (default ./cgtool-out/<name>/).")] = None,
    warmup: Warmup = 3,
    check: Annotated[bool, typer.Option(help="Compare one replay with an eager run.")] = True,
    allow_mismatch: Annotated[bool, typer.Option(help="Write the bundle even when replay differs from eager.")] = False,
    rtol: Annotated[float, typer.Option(help="Relative tolerance of the replay check.")] = 1e-4,
    atol: Annotated[float, typer.Option(help="Absolute tolerance of the replay check.")] = 1e-5,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing bundle.")] = False,
    nproc_per_node: Nproc = None,
) -> None:
    """Capture a workload into a CUDA graph, check replay against eager, write a bundle.

    The bundle holds graph.json (the export with cgtool's metadata), graph.dot (the driver's own
    dump) and, for workloads with several graphs, graph-<label>.json/.dot for each.
    """
    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.runner import capture_workload
    from cgtool.inspect.graph import GraphData
    from cgtool.inspect.topo import analyze
    from cgtool.report.tables import graph_summary

    from cgtool.capture import dist

    _maybe_torchrun(nproc_per_node)
    tgt = parse_target(target)
    dest = out_dir or Path("cgtool-out") / tgt.name
    if dist.distributed():
        dest = dest / f"rank{dist.rank()}"
    if dest.exists() and not force:
        raise OutputExistsError(dest)
    cap = capture_workload(tgt, list(ctx.args), warmup=warmup, check=check, rtol=rtol, atol=atol)
    _check_outcome(cap, allow_mismatch)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    rows: list[dict] = []  # type: ignore[type-arg]
    try:
        for label, data in cap.exports():
            stem = "graph" if label == "main" or len(cap.graphs) == 1 else f"graph-{label}"
            write_json(tmp / f"{stem}.json", data)
            dict(cap.graphs)[label].debug_dump(str(tmp / f"{stem}.dot"))
            g = GraphData.from_json(data, source=str(dest / f"{stem}.json"))
            t = analyze(g)
            if not dist.distributed():
                graph_summary(out, g, t, title=f"{tgt.name} [{label}]: {dest / (stem + '.json')}")
            rows.append({"rank": dist.rank(), "graph": label, "nodes": t.nodes, "edges": t.edges,
                         "kernels": t.nodes_by_type.get("kernel", 0), "depth": t.depth,
                         "exec graph id": g.exec_graph_id, "replay vs eager": "match" if cap.check_ok else
                         ("not checked" if cap.check_ok is None else "MISMATCH"), "bundle": str(dest)})
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if dist.distributed():
        every = dist.gather(rows)
        if every is not None:
            out.print(rank_table(f"{tgt.name}: {dist.world_size()} ranks", [r for rank_rows in every for r in rank_rows]))
        return
    err.print(f"wrote bundle {dest}/", markup=False)


def export(
    ctx: typer.Context,
    target: Target,
    output: Annotated[Path, typer.Option("-o", "--output", help="Output JSON (get_graph_data() schema plus the cgtool block; .gz compresses).")] = Path("graph.json"),
    label: Annotated[Optional[str], typer.Option(help="For workloads with several graphs: which one (e.g. fwd0, bwd0).")] = None,
    warmup: Warmup = 3,
    force: Annotated[bool, typer.Option("--force")] = False,
) -> None:
    """Capture a workload and write just its graph export as JSON."""
    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.runner import capture_workload

    if output.exists() and not force:
        raise OutputExistsError(output)
    cap = capture_workload(parse_target(target), list(ctx.args), warmup=warmup, check=False)
    exports = dict(cap.exports())
    pick = label or next(iter(exports))
    if pick not in exports:
        raise UsageError(f"No graph labelled {pick!r}; this workload has {', '.join(exports)}.")
    write_json(output, exports[pick], force=force)
    err.print(f"wrote {output} ({len(exports[pick]['nodes'])} nodes, exec graph {exports[pick]['exec_graph_id']})", markup=False)


def trace(
    ctx: typer.Context,
    target: Target,
    output: Annotated[Path, typer.Option("-o", "--output", help="Chrome trace to write (.json or .json.gz); Perfetto opens it.")] = Path("trace.json.gz"),
    replays: Annotated[int, typer.Option(help="Traced replays (after warm-up).")] = 5,
    warmup: Warmup = 3,
    max_connections: Annotated[Optional[int], typer.Option(help="Run with CUDA_DEVICE_MAX_CONNECTIONS=N (in a child process, set before CUDA starts).")] = None,
    profiler: Annotated[str, typer.Option(help="cupti (cupti-python: node ids and channels) or torch (torch.profiler: no channels).")] = "cupti",
    force: Annotated[bool, typer.Option("--force")] = False,
    nproc_per_node: Nproc = None,
) -> None:
    """Replay a captured workload under CUPTI and write a chrome trace with graph node ids and channels.

    Under torchrun each rank writes its own file (trace.rank<k>.json.gz); `cgtool deps DIR` reads them all."""
    from cgtool.capture import dist

    _maybe_torchrun(nproc_per_node)
    output = dist.rank_path(output)
    if output.exists() and not force:
        raise OutputExistsError(output)
    if replays < 1:
        raise UsageError("--replays must be at least 1.")
    if max_connections is not None:
        if not 1 <= max_connections <= 32:
            raise UsageError("--max-connections takes 1 to 32.")
        env = {**os.environ, "CUDA_DEVICE_MAX_CONNECTIONS": str(max_connections)}
        argv = [sys.executable, "-m", "cgtool", "trace", target, "-o", str(output), "--replays", str(replays),
                "--warmup", str(warmup), "--profiler", profiler] + (["--force"] if force else [])
        if ctx.args:
            argv += ["--", *ctx.args]
        raise typer.Exit(subprocess.run(argv, env=env).returncode)
    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.runner import capture_workload
    from cgtool.capture.tracing import torch_profiler_trace, trace_captured
    from cgtool.capture._deps import optional_cupti

    tgt = parse_target(target)
    if profiler == "cupti" and optional_cupti() is None:
        from cgtool.errors import MissingExtraError

        raise MissingExtraError("`cgtool trace`", detail="cupti-python (take the version matching your CUDA's CUPTI, "
                                "e.g. `pip install 'cupti-python==13.0.*'`); or use --profiler torch, which records "
                                "no channels and, on PyTorch before 2.13, no graph node ids")
    if profiler not in ("cupti", "torch"):
        raise UsageError(f"--profiler takes cupti or torch, not {profiler!r}.")
    cap = capture_workload(tgt, list(ctx.args), warmup=warmup)
    if profiler == "torch":
        tmp = output.with_name(output.name + ".tmp.json")
        torch_profiler_trace(cap, str(tmp), replays=replays, warmup=warmup)
        from cgtool.jsonio import load_json

        doc = load_json(tmp)
        tmp.unlink()
        doc["cgtool"] = {"schema_version": 1, "kind": "trace", "collector": "torch.profiler",
                         "graphs": [d for _, d in cap.exports()]}
        write_json(output, doc, force=force, indent=False)
        err.print(f"wrote {output} (torch.profiler: no hardware channels"
                  + ("; no graph node ids on this PyTorch" if not _kineto_has_ids(doc) else "") + ")", markup=False)
        return
    doc, recs = trace_captured(cap, replays=replays, warmup=warmup)
    write_json(output, doc, force=force, indent=False)
    meta = doc["cgtool"]
    gpu = [r for r in recs if r["kind"] != "launch"]
    chans = sorted({r["channel"] for r in gpu})
    if dist.distributed():
        every = dist.gather({"rank": dist.rank(), "GPU events": len(gpu), "graphs": len(meta["graphs"]),
                             "exec graph ids": ",".join(str(g["exec_graph_id"]) for g in meta["graphs"]),
                             "channels": ",".join(map(str, chans)), "dropped": meta["dropped_records"],
                             "file": str(output)})
        if every is not None:
            out.print(rank_table(f"traces of {replays} replays on {dist.world_size()} ranks", every))
        return
    out.print(f"{len(gpu)} GPU events over {replays} replays, {len(meta['graphs'])} graph(s), "
              f"channels {chans}, dropped records {meta['dropped_records']}", highlight=False)
    err.print(f"wrote {output} (open it in https://ui.perfetto.dev, or run `cgtool deps {output}`)", markup=False)


def _kineto_has_ids(doc: dict) -> bool:  # type: ignore[type-arg]
    return any("graph node id" in (e.get("args") or {}) for e in doc.get("traceEvents", []) if e.get("cat") == "kernel")


def doctor() -> None:
    """What this machine supports: torch, CUDA, where tools ids come from, CUPTI, Graphviz."""
    from rich.table import Table

    tab = Table(title="cgtool doctor", show_header=False, title_justify="left")
    tab.add_column("what", style="bold")
    tab.add_column("value")
    try:
        import torch

        tab.add_row("torch", f"{torch.__version__} (CUDA build {torch.version.cuda})")
        cuda = torch.cuda.is_available()
        tab.add_row("CUDA device", torch.cuda.get_device_name() if cuda else "none")
    except ImportError:
        cuda = False
        tab.add_row("torch", "not installed: analysis only (install cgtool[gpu] to capture)")
    try:
        from cuda.bindings import runtime as rt

        tab.add_row("cuda-bindings", "installed")
        if cuda:
            drv = rt.cudaDriverGetVersion()[1]
            tab.add_row("CUDA driver", f"{drv // 1000}.{drv % 1000 // 10}")
            from cgtool.capture.export import id_source_available

            src = id_source_available()
            tab.add_row("tools ids from", {"driver": "the driver (cudaGraphNodeGetToolsId, 13.1+)",
                                          "cupti": "CUPTI (driver older than 13.1)",
                                          "none": "nowhere: driver < 13.1 and no cupti-python"}[src])
    except ImportError:
        tab.add_row("cuda-bindings", "not installed (needed for exports: cgtool[gpu])")
    from cgtool.capture._deps import optional_cupti

    tab.add_row("cupti-python", "installed" if optional_cupti() is not None else "not installed (cgtool trace falls back to --profiler torch)")
    tab.add_row("graphviz dot", shutil.which("dot") or "not found (cgtool dot writes .dot; install Graphviz to render)")
    tab.add_row("CUDA_DEVICE_MAX_CONNECTIONS", os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "unset (driver default 8)"))
    out.print(tab)


def register(app: typer.Typer) -> None:
    panel = "Run a workload (GPU)"
    app.command(context_settings=_EXTRA, rich_help_panel=panel)(capture)
    app.command(context_settings=_EXTRA, rich_help_panel=panel)(export)
    app.command(context_settings=_EXTRA, rich_help_panel=panel)(trace)
    app.command(rich_help_panel="Machine")(doctor)
