"""`cgtool bench`: replay timing, and the CI perf gate against a baseline."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import Progress

from cgtool.artifacts.bench import BenchResults, BenchSpec
from cgtool.cli._common import Force, console_for, err, one_stdout, out, output_path, wrote
from cgtool.errors import CaptureError, CheckFailed, InvalidInputError, UsageError
from cgtool.inspect.benchstats import Judgement, Verdict, compare_results, parse_percent, refuse_env_mismatch

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 in CI
    import tomli as tomllib


def targets_from_pyproject(path: Path = Path("pyproject.toml")) -> list[str]:
    """The workloads listed in ``[tool.cgtool] bench = [...]``."""
    if not path.exists():
        raise UsageError("No TARGET given and no pyproject.toml here to read [tool.cgtool] bench = [...] from.")
    try:
        cfg = tomllib.loads(path.read_text()).get("tool", {}).get("cgtool", {})
    except tomllib.TOMLDecodeError as e:
        raise InvalidInputError(f"pyproject.toml is not valid TOML: {e}.") from None
    t = cfg.get("bench")
    if not t or not isinstance(t, list) or not all(isinstance(x, str) for x in t):
        raise UsageError("No TARGET given and pyproject.toml has no [tool.cgtool] bench = [\"script.py\", ...] list.")
    return t


def judge_against(baseline: Path, new: BenchResults, max_regression: str, allow_env_mismatch: bool) -> list[Judgement]:
    """Judge ``new`` against the results in ``baseline`` (refusing another environment)."""
    old = BenchResults.load(baseline)
    if not allow_env_mismatch:  # no environment: every workload failed (exit 3 below)
        refuse_env_mismatch(old, new, baseline)
    return compare_results(old, new, max_regression=parse_percent(max_regression))


def bench(
    targets: Annotated[Optional[list[str]], typer.Argument(help="Workloads (TARGET ...). None: the bench list in pyproject.toml's \\[tool.cgtool] table.")] = None,
    workload_args: Annotated[str, typer.Option("--args", help="Arguments for every workload's script, as one string (e.g. \"--kernels 430\").")] = "",
    replays: Annotated[int, typer.Option(min=1, help="Timed replays per workload and run.")] = 1000,
    runs: Annotated[int, typer.Option(min=1, help="Independent processes per workload, samples pooled: a process-level offset (memory placement, executor choices) is noise the gate must see.")] = 3,
    blocks: Annotated[int, typer.Option(min=1, help="Timed blocks (one event pair each).")] = 20,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed replays first.")] = 20,
    per_replay: Annotated[bool, typer.Option(help="One sample per replay (each replay alone, its GPU time): a latency distribution, without the overlap of back-to-back replays.")] = False,
    cold_cache: Annotated[bool, typer.Option(help="Flush L2 before every replay (implies per-replay timing).")] = False,
    no_eager: Annotated[bool, typer.Option("--no-eager", help="Skip the eager baseline.")] = False,
    recaptures: Annotated[int, typer.Option(min=1, help="Captures of the step per process, each timed, each with a fresh memory pool in another allocator state (the first as the program leaves it; then with the earlier graphs alive and one more eager output kept): the table shows the spread between captures beside the spread between replays, and the gate compares the captures' ranges when they spread wider.")] = 1,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write every sample and the fingerprint (with --compare: the verdicts); `-`: standard output.")] = None,
    save_baseline: Annotated[Optional[Path], typer.Option(help="Write the results as a baseline file (`-`: standard output).")] = None,
    baseline: Annotated[Optional[Path], typer.Option(help="Compare with this baseline; exit 1 on a regression.")] = None,
    compare: Annotated[Optional[tuple[Path, Path]], typer.Option(help="OLD.json NEW.json: judge saved results (no GPU).")] = None,
    max_regression: Annotated[str, typer.Option(help="Median slowdown tolerated before the significance test may fail the gate.")] = "2%",
    allow_env_mismatch: Annotated[bool, typer.Option(help="Compare across GPU, driver or torch versions anyway.")] = False,
    force: Force = False,
    nproc_per_node: Annotated[Optional[int], typer.Option("--nproc-per-node", help="Start N processes (one per GPU) under torchrun; each rank benches its own graph, rank 0 reports all.")] = None,
) -> None:
    """Replay and time workloads (GPU µs per replay, host launch cost, eager speedup); gate on a baseline."""
    parse_percent(max_regression)
    one_stdout(json=json_out, save_baseline=save_baseline)
    for p in (json_out, save_baseline):
        output_path(p, force, inputs=(baseline, *(compare or ())))
    if compare is not None:
        new = BenchResults.load(compare[1])
        _finish(new, judge_against(compare[0], new, max_regression, allow_env_mismatch), json_out, force)
        return
    if replays < blocks:
        raise UsageError(f"--replays ({replays}) must be at least --blocks ({blocks}).")
    if baseline is not None:
        BenchResults.load(baseline)  # a bad baseline is reported before any workload runs
    from cgtool.capture import dist
    from cgtool.capture._deps import require_cuda
    from cgtool.capture.bench import bench_ranks, bench_targets

    require_cuda("`cgtool bench`")  # before any workload: no table of failures for a missing GPU
    from cgtool.cli.capture_cmds import relaunch_under_torchrun

    relaunch_under_torchrun(nproc_per_node)
    tlist = list(targets or []) or targets_from_pyproject()
    spec = BenchSpec(replays=replays, blocks=blocks, warmup=warmup, per_replay=per_replay, cold_cache=cold_cache,
                     recaptures=recaptures, eager=not no_eager)
    if dist.distributed():
        res = bench_ranks(tlist, shlex.split(workload_args), spec)
        if res is None:
            return
    else:
        with Progress(console=err, transient=True) as prog:
            task = prog.add_task("benchmarking", total=len(tlist))
            res = bench_targets(tlist, shlex.split(workload_args), spec, runs,
                                progress=lambda t, k, n: prog.update(task, description=f"bench {t}", completed=k))
    if save_baseline is not None:
        res.save(save_baseline, force=force)
        wrote(save_baseline)
    judged = judge_against(baseline, res, max_regression, allow_env_mismatch) if baseline else None
    _finish(res, judged, json_out, force, results_json=True, saved=save_baseline)


def _finish(res: BenchResults, js: list[Judgement] | None, json_out: Optional[Path], force: bool,
            results_json: bool = False, saved: Optional[Path] = None) -> None:
    from cgtool.artifacts.jsonio import write_json
    from cgtool.report.tables import bench_summary_md, bench_table, bench_verdicts, show

    if json_out is not None:
        doc = res.to_json() if results_json else {"kind": "bench-compare", "schema_version": 1,
                                                   "judgements": [j.to_json() for j in js or []]}
        if results_json and js is not None:
            doc["judgements"] = [j.to_json() for j in js]
        write_json(json_out, doc, force=force)
        wrote(json_out)
    show(console_for(json_out, saved), bench_table(res, js))
    if js:
        bench_verdicts(console_for(json_out, saved), res, js)
    for w in res.failed:
        err.print(f"{w.key} failed: {w.error}", markup=False, highlight=False)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as f:
            f.write(bench_summary_md(res, js))
    if res.failed:  # a workload that could not run is a capture failure (3), not a regression
        raise CaptureError(f"{len(res.failed)} of {len(res.workloads)} workload(s) failed to capture or run: "
                           f"{', '.join(w.key for w in res.failed)} (reasons above); the others were timed.")
    bad = [j for j in js or [] if j.verdict in (Verdict.REGRESSED, Verdict.MISSING)]
    if bad:
        raise CheckFailed("performance gate failed: " + "; ".join(f"{j.name} {j.verdict.value} ({j.reason})" for j in bad))
    if js:
        console_for(json_out, saved).print("performance gate passed", highlight=False)


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Run a workload (GPU)")(bench)
