"""Replay timing. Each workload runs in fresh child processes (``python -m cgtool.capture.bench``,
through ``cgtool.capture.child``), so a workload that fails to capture is reported and the others
go on, and the runs of one workload are pooled (``cgtool.artifacts.bench.merge``).

GPU time: the replays are timed in blocks (default 20 blocks of N/20) between CUDA events (each
block's end event is the next block's start), giving one per-replay sample per block; an event pair or a sync around every
replay inflates small graphs, so ``per_replay`` (one pair per replay) is opt-in and labelled.
Host cost: ``replay()`` timed on the CPU, per call, in a separate loop. Eager: the same step run
without the graph, timed the same way. ``cold_cache`` zeroes a buffer twice the L2 size before
each replay (as triton's do_bench does) and then needs a pair per replay.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Mapping, Sequence

from cgtool.artifacts.bench import BenchResults, WorkloadResult, merge
from cgtool.capture._deps import require_cuda
from cgtool.capture.child import child_main, error_result, run_child
from cgtool.errors import CgtoolError

#: What a caller is told as workloads progress: (workload, index, total).
Progress = Callable[[str, int, int], None]
#: Runs one workload in a fresh process: (target, args, options) -> the child's JSON result.
ChildRunner = Callable[[str, Sequence[str], Mapping[str, Any]], Mapping[str, Any]]


def _clock_mhz() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0))
        return int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
    except Exception:
        return None


def time_blocks(fn: Callable[[], Any], replays: int, blocks: int, *, per_replay: bool = False,
                flush: Callable[[], Any] | None = None) -> list[float]:
    """µs per call of ``fn``: one sample per block, or per call with ``per_replay``."""
    torch = require_cuda("bench")
    samples: list[float] = []
    if per_replay or flush is not None:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
        for i in range(replays):
            if flush is not None:
                flush()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)]
    per = max(1, replays // blocks)
    # Consecutive blocks share an event (the end of one is the start of the next): half the
    # event records of a pair per block, so the timing adds less to what it times.
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(blocks + 1)]
    evs[0].record()
    for k in range(blocks):
        for _ in range(per):
            fn()
        evs[k + 1].record()
    torch.cuda.synchronize()
    samples = [a.elapsed_time(b) * 1000.0 / per for a, b in zip(evs, evs[1:])]
    return samples


def host_cost(fn: Callable[[], Any], calls: int) -> list[float]:
    """µs of CPU time spent in each call of ``fn`` (the GPU drains between chunks)."""
    torch = require_cuda("bench")
    out: list[float] = []
    pc = time.perf_counter_ns
    chunk = 50
    for k in range(0, calls, chunk):
        for _ in range(min(chunk, calls - k)):
            t0 = pc()
            fn()
            out.append((pc() - t0) / 1000.0)
        torch.cuda.synchronize()
    return out


def bench_workload(spec: str, args: list[str], *, replays: int = 1000, blocks: int = 20, warmup: int = 20,
                   per_replay: bool = False, cold_cache: bool = False, eager: bool = True) -> WorkloadResult:
    """Capture ``spec`` in this process and time its replays (and its eager step)."""
    from cgtool.capture import dist
    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.export import environment
    from cgtool.capture.runner import capture_checked

    torch = require_cuda("bench")
    cap = capture_checked(parse_target(spec), args, check=True)
    flush = None
    if cold_cache:
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
        buf = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
        flush = buf.zero_
    for _ in range(warmup):
        cap.replay()
    torch.cuda.synchronize()
    clk0 = _clock_mhz()
    gpu = time_blocks(cap.replay, replays, blocks, per_replay=per_replay, flush=flush)
    clk1 = _clock_mhz()
    host = host_cost(cap.replay, min(replays, 500))
    eager_us = None
    if eager and cap.eager is not None:
        for _ in range(min(warmup, 5)):
            cap.eager()
        torch.cuda.synchronize()
        eager_us = time_blocks(cap.eager, max(blocks, replays // 10), blocks, per_replay=per_replay, flush=flush)
    nodes = sum(len(g.get_graph_data()["nodes"]) for _, g in cap.graphs)
    return WorkloadResult(
        workload=spec, rank=dist.rank() if dist.distributed() else None,
        gpu_us=tuple(gpu), host_us=tuple(host), eager_us=None if eager_us is None else tuple(eager_us),
        sampling="per-replay" if (per_replay or cold_cache) else f"blocks of {max(1, replays // blocks)}",
        clock_mhz=(clk0, clk1), environment=environment(),
        extra={"args": args, "replays": replays, "cold_cache": cold_cache, "nodes": nodes,
               "graphs": len(cap.graphs), "check_ok": cap.check_ok, "max_abs_diff": cap.max_abs_diff},
    )


def _child_request(request: dict[str, Any]) -> dict[str, Any]:
    return bench_workload(request.pop("target"), request.pop("args"), **request).to_json()


def _run_in_child(target: str, args: Sequence[str], opts: Mapping[str, Any]) -> Mapping[str, Any]:
    return run_child("cgtool.capture.bench", {"target": target, "args": list(args), **opts})


def bench_pooled(target: str, args: Sequence[str], opts: Mapping[str, Any], runs: int, *,
                 runner: ChildRunner = _run_in_child) -> WorkloadResult:
    """``runs`` fresh processes of one workload, their samples pooled; the first failure stops it."""
    results = []
    for _ in range(runs):
        doc = runner(target, args, opts)
        r = WorkloadResult.from_json(target, dict(doc), f"the bench process of {target}")
        if r.failed:
            return r
        results.append(r)
    return merge(results)


def bench_targets(targets: Sequence[str], args: Sequence[str], opts: Mapping[str, Any], runs: int, *,
                  progress: Progress | None = None, runner: ChildRunner = _run_in_child) -> BenchResults:
    """Every workload benched in its own processes (one failing does not stop the others)."""
    results = []
    for k, t in enumerate(targets):
        if progress is not None:
            progress(t, k, len(targets))
        results.append(bench_pooled(t, args, opts, runs, runner=runner))
    return BenchResults.of(results)


def bench_ranks(targets: Sequence[str], args: list[str], opts: Mapping[str, Any]) -> BenchResults | None:
    """Under torchrun: bench in this process (a child would need its own process group); rank 0
    gets every rank's results, other ranks None."""
    from cgtool.capture import dist

    mine = []
    for t in targets:
        try:
            mine.append(bench_workload(t, args, **opts).to_json())
        except CgtoolError as e:
            mine.append({"workload": t, "rank": dist.rank(), **error_result(e)})
    every = dist.gather(mine)
    if every is None:
        return None
    return BenchResults.of([WorkloadResult.from_json(w["workload"], w, f"rank {r}")
                            for r, res in enumerate(every) for w in res])


def main() -> None:
    """Child entry: ``python -m cgtool.capture.bench request.json result.json``."""
    child_main(_child_request)


if __name__ == "__main__":
    main()
