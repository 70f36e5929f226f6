"""`cgtool bench`: replay timing, and the CI perf gate against a baseline."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.progress import Progress

from cgtool.cli._common import err, out
from cgtool.errors import CaptureError, CgtoolError, CheckFailed, InvalidInputError, UsageError
from cgtool.inspect.benchstats import (BENCH_SCHEMA_VERSION, Judgement, Stats, Verdict, compare_results,
                                       env_mismatch, parse_percent, validate_results)
from cgtool.jsonio import load_json, write_json
from cgtool.report.tables import bench_table


def _targets_from_config() -> list[str]:
    p = Path("pyproject.toml")
    if not p.exists():
        raise UsageError("No TARGET given and no pyproject.toml here to read [tool.cgtool] bench = [...] from.")
    try:
        cfg = tomllib.loads(p.read_text()).get("tool", {}).get("cgtool", {})
    except tomllib.TOMLDecodeError as e:
        raise InvalidInputError(f"pyproject.toml is not valid TOML: {e}.") from None
    t = cfg.get("bench")
    if not t or not isinstance(t, list) or not all(isinstance(x, str) for x in t):
        raise UsageError("No TARGET given and pyproject.toml has no [tool.cgtool] bench = [\"script.py\", ...] list.")
    return t


def _run_child(target: str, args: list[str], opts: dict[str, Any]) -> dict[str, Any]:
    spec = json.dumps({"target": target, "args": args, **opts})
    r = subprocess.run([sys.executable, "-m", "cgtool.capture.bench", spec], capture_output=True, text=True)
    for line in r.stdout.splitlines()[::-1]:
        if line.startswith("@@CGTOOL@@"):
            res: dict[str, Any] = json.loads(line[len("@@CGTOOL@@"):])
            return res
    tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"the workload's process died (exit {r.returncode}): {tail[:200]}", "exit_code": 3}


def _bench_all(doc: dict[str, Any], tlist: list[str], args: list[str], opts: dict[str, Any], runs: int) -> None:
    with Progress(console=err, transient=True) as prog:
        task = prog.add_task("benchmarking", total=len(tlist))
        for t in tlist:
            prog.update(task, description=f"bench {t}")
            doc["workloads"][t] = _pooled(t, args, opts, runs)
            prog.advance(task)


def _pooled(target: str, args: list[str], opts: dict[str, Any], runs: int) -> dict[str, Any]:
    """Run the workload in ``runs`` fresh processes and pool their samples."""
    res: dict[str, Any] | None = None
    medians = []
    for _ in range(runs):
        r = _run_child(target, args, opts)
        if r.get("error"):
            return r
        medians.append(Stats.of(r["gpu_us"]).median)
        if res is None:
            res = r
        else:
            for k in ("gpu_us", "host_us"):
                res[k] = res[k] + r[k]
            if res.get("eager_us") and r.get("eager_us"):
                res["eager_us"] = res["eager_us"] + r["eager_us"]
            res["clock_mhz"] = res["clock_mhz"] + r["clock_mhz"]
    assert res is not None
    res["runs"] = runs
    res["run_medians_us"] = medians
    return res


def _summary_md(doc: dict[str, Any], judgements: list[Judgement] | None) -> str:
    lines = ["### cgtool bench", "", "| workload | median µs | IQR | eager µs | verdict |", "|---|---:|---:|---:|---|"]
    jd = {j.name: j for j in judgements or []}
    for name, w in doc["workloads"].items():
        if w.get("error"):
            lines.append(f"| {name} | - | - | - | failed |")
            continue
        s = Stats.of(w["gpu_us"])
        e = Stats.of(w["eager_us"]).median if w.get("eager_us") else None
        v = jd[name].verdict.value + f" ({jd[name].reason})" if name in jd else "-"
        lines.append(f"| {name} | {s.median:.2f} | {s.iqr:.2f} | {'-' if e is None else f'{e:.2f}'} | {v} |")
    return "\n".join(lines) + "\n"


def _judge(old_path: Path, new: dict[str, Any], max_regression: str, allow_env_mismatch: bool) -> list[Judgement]:
    old = validate_results(load_json(old_path), str(old_path))
    bad = env_mismatch(old, new)
    if bad and not allow_env_mismatch:
        raise UsageError(f"The baseline {old_path} comes from another environment ({'; '.join(bad)}); timings "
                         "do not compare across GPUs, drivers or torch versions. Record a new baseline here, "
                         "or pass --allow-env-mismatch.")
    return compare_results(old, new, max_regression=parse_percent(max_regression))


def bench(
    targets: Annotated[Optional[list[str]], typer.Argument(help="Workloads (TARGET ...). None: [tool.cgtool] bench in pyproject.toml.")] = None,
    workload_args: Annotated[str, typer.Option("--args", help="Arguments for every workload's script, as one string (e.g. \"--kernels 430\").")] = "",
    replays: Annotated[int, typer.Option(help="Timed replays per workload and run.")] = 1000,
    runs: Annotated[int, typer.Option(help="Independent processes per workload, samples pooled: a process-level offset (memory placement, executor choices) is noise the gate must see.")] = 3,
    blocks: Annotated[int, typer.Option(help="Timed blocks (one event pair each).")] = 20,
    warmup: Annotated[int, typer.Option(help="Untimed replays first.")] = 20,
    per_replay: Annotated[bool, typer.Option(help="One event pair per replay: a latency distribution (inflates small graphs).")] = False,
    cold_cache: Annotated[bool, typer.Option(help="Flush L2 before every replay (implies per-replay timing).")] = False,
    no_eager: Annotated[bool, typer.Option("--no-eager", help="Skip the eager baseline.")] = False,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write every sample and the fingerprint.")] = None,
    save_baseline: Annotated[Optional[Path], typer.Option(help="Write the results as a baseline file.")] = None,
    baseline: Annotated[Optional[Path], typer.Option(help="Compare with this baseline; exit 1 on a regression.")] = None,
    compare: Annotated[Optional[tuple[Path, Path]], typer.Option(help="OLD.json NEW.json: judge saved results (no GPU).")] = None,
    max_regression: Annotated[str, typer.Option(help="Median slowdown tolerated before the significance test may fail the gate.")] = "2%",
    allow_env_mismatch: Annotated[bool, typer.Option(help="Compare across GPU, driver or torch versions anyway.")] = False,
    force: Annotated[bool, typer.Option("--force")] = False,
    nproc_per_node: Annotated[Optional[int], typer.Option("--nproc-per-node", help="Start N processes (one per GPU) under torchrun; each rank benches its own graph, rank 0 reports all.")] = None,
) -> None:
    """Replay and time workloads (GPU µs per replay, host launch cost, eager speedup); gate on a baseline."""
    if compare is not None:
        new = validate_results(load_json(compare[1]), str(compare[1]))
        js = _judge(compare[0], new, max_regression, allow_env_mismatch)
        _finish(new, js)
        return
    for p in (json_out, save_baseline):
        if p is not None and p.exists() and not force:
            from cgtool.errors import OutputExistsError

            raise OutputExistsError(p)
    if runs < 1:
        raise UsageError("--runs must be at least 1.")
    if replays < blocks:
        raise UsageError(f"--replays ({replays}) must be at least --blocks ({blocks}).")
    from cgtool.capture import dist
    from cgtool.cli.capture_cmds import _maybe_torchrun

    _maybe_torchrun(nproc_per_node)
    tlist = list(targets or []) or _targets_from_config()
    opts = {"replays": replays, "blocks": blocks, "warmup": warmup, "per_replay": per_replay,
            "cold_cache": cold_cache, "eager": not no_eager}
    doc: dict[str, Any] = {"kind": "bench", "schema_version": BENCH_SCHEMA_VERSION, "workloads": {}}
    if dist.distributed():
        # One process per GPU already: measure in this process (a child would need its own
        # process group); rank 0 gathers every rank's results.
        from cgtool.capture.bench import bench_workload

        mine = {}
        for t in tlist:
            try:
                mine[t] = bench_workload(t, shlex.split(workload_args), **opts)  # type: ignore[arg-type]
            except CgtoolError as e:
                mine[t] = {"error": e.message, "exit_code": int(e.exit_code)}
        every = dist.gather(mine)
        if every is None:
            return
        for r, res in enumerate(every):
            for t, w in res.items():
                doc["workloads"][f"{t} [rank {r}]"] = w
        tlist = list(doc["workloads"])
    else:
        _bench_all(doc, tlist, shlex.split(workload_args), opts, runs)
    ok = [w for w in doc["workloads"].values() if not w.get("error")]
    doc["environment"] = ok[0]["environment"] if ok else {}
    for p in (json_out, save_baseline):
        if p is not None:
            write_json(p, doc, force=force)
            err.print(f"wrote {p}", markup=False)
    judged = _judge(baseline, doc, max_regression, allow_env_mismatch) if baseline else None
    _finish(doc, judged)
    failed = [n for n, w in doc["workloads"].items() if w.get("error")]
    if failed and not judged:
        raise CaptureError(f"{len(failed)} of {len(tlist)} workload(s) failed to capture or run: "
                           f"{', '.join(failed)} (reasons above); the others were timed.")


def _finish(doc: dict[str, Any], js: list[Judgement] | None) -> None:
    out.print(bench_table(doc, js))
    for name, w in doc["workloads"].items():
        if w.get("error"):
            err.print(f"{name} failed: {w['error']}", markup=False, highlight=False)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as f:
            f.write(_summary_md(doc, js))
    if js:
        bad = [j for j in js if j.verdict in (Verdict.REGRESSED, Verdict.MISSING)]
        if bad:
            raise CheckFailed("performance gate failed: " + "; ".join(f"{j.name} {j.verdict.value} ({j.reason})" for j in bad))
        out.print("performance gate passed", highlight=False)


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Run a workload (GPU)")(bench)
