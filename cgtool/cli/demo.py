"""`cgtool demo`: the main job in one command.

With a GPU it captures, traces, analyses and benches a sample workload. Without one it runs the
analysis on real recordings from an NVIDIA H200 that ship inside cgtool, and says so.
"""

from __future__ import annotations

import sys
import tempfile
from importlib import resources
from pathlib import Path

import typer
from rich.text import Text

from cgtool.cli._children import run_child
from cgtool.cli._common import err, out
from cgtool.errors import UsageError


def _data(name: str) -> Path:
    return Path(str(resources.files("cgtool") / "data" / name))


def _section(title: str) -> None:
    out.print(Text(f"\n── {title}", style="bold"), soft_wrap=True)  # a rule would cut a long title


def demo(
    workload: str = typer.Option("", help="With a GPU: the workload to demonstrate (default: the bundled fork/join sample)."),
) -> None:
    """Run the main job: capture + trace + deps + bench on a GPU, or the analysis of a bundled
    real recording without one."""
    from cgtool.capture._deps import cuda_available

    if cuda_available():
        _gpu_demo(workload)
    else:
        _recording_demo()


def _recording_demo() -> None:
    from cgtool.artifacts.bench import BenchResults
    from cgtool.artifacts.trace import load_trace
    from cgtool.inspect.benchstats import compare_results
    from cgtool.inspect.deps import analyze, graphs_from_trace
    from cgtool.inspect.topo import analyze as topo
    from cgtool.report.tables import bench_table, bench_verdicts, deps_report, show, topo_table

    out.print(Text.from_markup(
        "[bold yellow]No CUDA GPU on this machine:[/] analysing real recordings made with cgtool on an "
        "NVIDIA H200 (driver 580.159, torch 2.11) that ship with cgtool. With a GPU, `cgtool demo` "
        "captures, traces and benches a sample workload instead.\n"
    ))
    t = load_trace(_data("forkjoin_mc1_trace.json.gz"))
    g = graphs_from_trace(t)[0]
    _section("1. the graph: 8 independent GEMM branches joined by a sum (cgtool topo)")
    topo_table(out, g, topo(g))
    _section("2. default settings: branches on channels 0-7 (cgtool deps)")
    t0 = load_trace(_data("forkjoin_trace.json.gz"))
    deps_report(out, analyze(t0, graphs_from_trace(t0)), top=3)
    _section("3. CUDA_DEVICE_MAX_CONNECTIONS=1: fake dependencies (cgtool deps)")
    deps_report(out, analyze(t, [g]), top=5, graphs=[g])
    out.print("Here the waits cost nothing: the GEMMs filled the GPU. On many tiny kernels they do:",
              highlight=False)
    _section("4. 64x64 GEMMs on one channel, H100: a saving (cgtool deps)")
    tiny = load_trace(_data("forkjoin_tiny_mc1_trace.json.gz"))
    tiny_graphs = graphs_from_trace(tiny)
    deps_report(out, analyze(tiny, tiny_graphs), top=3, graphs=tiny_graphs, overhead=tiny.tracer_overhead)
    _section("5. replay timing of six samples, against itself (cgtool bench --compare)")
    res = BenchResults.load(_data("bench_h200.json.gz"))
    judged = compare_results(res, res)
    show(out, bench_table(res, judged))
    bench_verdicts(out, res, judged)
    out.print("\nNext: `cgtool deps TRACE`, `cgtool topo GRAPH`, `cgtool dot GRAPH -o g.dot`; "
              "on a GPU machine `cgtool capture script.py` (see README).", highlight=False)


def sample_workload() -> Path:
    """The fork/join sample the GPU demo runs. It ships inside the package, so the demo works
    after a plain (non-editable) install."""
    return Path(str(resources.files("cgtool") / "capture" / "samples" / "forkjoin.py"))


def _gpu_demo(workload: str) -> None:
    target = workload or str(sample_workload())
    if not Path(target.split(":")[0]).exists():
        raise UsageError(f"No such workload {target!r}; pass --workload script.py.")
    tmp = Path(tempfile.mkdtemp(prefix="cgtool-demo-"))
    py = [sys.executable, "-m", "cgtool"]
    steps = [
        ("capture", py + ["capture", target, "-o", str(tmp / "bundle")]),
        ("trace with CUDA_DEVICE_MAX_CONNECTIONS=1", py + ["trace", target, "-o", str(tmp / "trace.json.gz"), "--max-connections", "1"]),
        ("deps", py + ["deps", str(tmp / "trace.json.gz"), "--top", "5"]),
        ("bench", py + ["bench", target, "--replays", "500", "--runs", "1"]),
    ]
    for title, argv in steps:
        _section(title)
        code = run_child(argv)
        if code != 0:
            err.print(f"cgtool demo: step '{title}' exited {code}; the demo stops there (files in {tmp}).",
                      markup=False)
            raise typer.Exit(code)
    err.print(f"files in {tmp}", markup=False)


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Start here")(demo)
