"""Replay timing. Each workload runs in fresh child processes (``python -m cgtool.capture.bench``,
through ``cgtool.capture.child``), so a workload that fails to capture is reported and the others
go on, and the runs of one workload are pooled (``cgtool.artifacts.bench.merge``). What is measured
is one frozen ``BenchSpec``, sent to every child and stored with the results.

In each process (``bench_workload``):

1. the step is warmed up and captured as the user's program would (``runner.capture_workload``
   without its check: the graph's buffers are placed in the memory state the warm-up leaves);
2. GPU time: ``warmup`` untimed replays, then ``replays`` replays in ``blocks`` blocks between CUDA
   events (each block's end event is the next block's start), one µs-per-replay sample per block.
   ``per_replay`` (opt-in, labelled) gives one sample per replay instead: each replay alone between
   its own event pair, queued behind a GPU busy-wait (``Clock.hold``) so that the sample is the
   replay's GPU time and not the host's time to submit it; ``cold_cache`` zeroes a buffer twice the
   L2 size before each replay (as triton's do_bench does) and is sampled the same way. What is
   replayed is torch's own ``CUDAGraph.replay`` of the captured graph, the call a user's program makes;
3. host cost: ``replay()`` timed on the CPU, per call, in a separate loop (first capture only);
4. ``recaptures`` > 1: the same step captured again into a new graph with a fresh memory pool, in
   another allocator state each time (``RECAPTURE_STATES``), and timed like the first;
5. the replay-vs-eager check of the first capture (after all timing: it runs the step eagerly on
   the current stream, which slows every later replay of the 400-kernel chain: docs/bench.md, "Why
   capture state moves replay time"), then the eager step timed the same way (per-replay samples
   without the hold: its launches are part of its time).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from cgtool.artifacts.bench import BenchResults, BenchSpec, WorkloadResult, merge
from cgtool.capture._deps import require_cuda
from cgtool.capture.child import child_main, error_result, result_of, run_child
from cgtool.errors import CgtoolError, UsageError

#: What a caller is told as workloads progress: (workload, index, total).
Progress = Callable[[str, int, int], None]
#: Runs one workload in a fresh process: (target, args, spec) -> the child's JSON result.
ChildRunner = Callable[[str, Sequence[str], BenchSpec], Mapping[str, Any]]
#: Replays whose host cost is timed (first capture), at most.
HOST_CALLS = 500
#: Calls per host-cost chunk; the GPU drains between chunks so the launch queue never fills.
HOST_CHUNK = 50
#: Eager warm-up calls before the eager step is timed, at most.
EAGER_WARMUP = 5
#: Per-replay sampling: the GPU busy-wait queued ahead of the first sample, in µs (no host time
#: of the call is known yet) ...
HOLD_FIRST_US = 1000.0
#: ... and ahead of each later one: this margin plus twice the host time the previous sample's
#: event records and call took.
HOLD_MARGIN_US = 20.0

#: The allocator state each capture of ``--recaptures`` is made in, in order (the last one repeats).
RECAPTURE_STATES = (
    "the program's state after its warm-up: the capture the user's program makes",
    "the earlier graphs (and their pools) still alive, as in a program that captures several graphs, "
    "and the outputs of one more eager run of the step kept on the device (one per earlier capture)",
)


class Event(Protocol):
    """A timing event, as ``torch.cuda.Event(enable_timing=True)``."""

    def record(self) -> None: ...

    def elapsed_time(self, end: Any) -> float: ...  # milliseconds from this event to ``end``


class Clock(Protocol):
    """Where bench's times come from: CUDA events, a wait for the GPU, a GPU busy-wait and a host
    clock. Tests pass a seeded fake (as torch.utils.benchmark's ``_MockCudaTimer``)."""

    def event(self) -> Event: ...

    def synchronize(self) -> None: ...

    def hold(self, us: float) -> None: ...  # queue about ``us`` µs of GPU busy-wait (no memory touched)

    def host_ns(self) -> int: ...


class CudaClock:
    """CUDA events on the current stream, ``torch.cuda.synchronize``, ``torch.cuda._sleep`` (a
    kernel spinning on the SM clock, as torch's own stream tests use) and ``time.perf_counter_ns``."""

    def __init__(self) -> None:
        self._torch = require_cuda("bench")
        self._cycles_per_us: float | None = None

    def event(self) -> Event:
        ev: Event = self._torch.cuda.Event(enable_timing=True)
        return ev

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()

    def hold(self, us: float) -> None:
        if self._cycles_per_us is None:
            self._cycles_per_us = self._calibrate()
        self._torch.cuda._sleep(max(1, int(us * self._cycles_per_us)))

    def _calibrate(self) -> float:
        """SM cycles per µs of ``_sleep``, measured; the largest of three (the first may run at an
        idle clock, and a hold that runs longer than asked does no harm, a shorter one would)."""
        cuda, n = self._torch.cuda, 200_000
        rates: list[float] = []
        for _ in range(3):
            a, b = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            a.record()
            cuda._sleep(n)
            b.record()
            b.synchronize()
            rates.append(n / max(float(a.elapsed_time(b)) * 1000.0, 1e-3))
        return max(rates)

    def host_ns(self) -> int:
        return time.perf_counter_ns()


def _clock_mhz() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0))
        return int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
    except Exception:
        return None


def time_blocks(fn: Callable[[], Any], replays: int, blocks: int, *, per_replay: bool = False,
                flush: Callable[[], Any] | None = None, hold: bool = True,
                clock: Clock | None = None) -> list[float]:
    """µs per call of ``fn`` over ``replays`` calls: one sample per block (the calls split into
    ``blocks`` blocks differing by at most one call), or one per call with ``per_replay`` or
    ``flush`` (run before every call, outside its event pair).

    One sample per call: the GPU drains after each, and each call's event pair is queued behind a
    GPU busy-wait (``clock.hold``) longer than the host takes to submit the pair and the call (twice
    the previous call's host time, plus a margin). Without it an idle GPU records the start event
    at once and then waits for the host to submit the call, and the sample measures the host's
    launch latency rather than the call's GPU time (more than the flush of ``cold_cache``, itself
    queued ahead, would let through: a warm sample slower than a cold one). ``hold=False`` times
    each call from the GPU's start event to its end with the launches in it: the eager step's
    time, whose launches are what a graph saves."""
    clock = clock or CudaClock()
    if per_replay or flush is not None:
        starts = [clock.event() for _ in range(replays)]
        ends = [clock.event() for _ in range(replays)]
        hold_us = HOLD_FIRST_US
        for i in range(replays):
            if flush is not None:
                flush()
            if hold:
                clock.hold(hold_us)
            t0 = clock.host_ns()
            starts[i].record()
            fn()
            ends[i].record()
            hold_us = HOLD_MARGIN_US + 2.0 * (clock.host_ns() - t0) / 1000.0
            clock.synchronize()
        return [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)]
    sizes = BenchSpec(replays=replays, blocks=blocks).block_sizes()
    # Consecutive blocks share an event (the end of one is the start of the next): half the
    # event records of a pair per block, so the timing adds less to what it times.
    evs = [clock.event() for _ in range(len(sizes) + 1)]
    evs[0].record()
    for k, n in enumerate(sizes):
        for _ in range(n):
            fn()
        evs[k + 1].record()
    clock.synchronize()
    return [a.elapsed_time(b) * 1000.0 / n for a, b, n in zip(evs, evs[1:], sizes)]


def host_cost(fn: Callable[[], Any], calls: int, *, clock: Clock | None = None) -> list[float]:
    """µs of CPU time spent in each call of ``fn`` (the GPU drains between chunks)."""
    clock = clock or CudaClock()
    out: list[float] = []
    for k in range(0, calls, HOST_CHUNK):
        for _ in range(min(HOST_CHUNK, calls - k)):
            t0 = clock.host_ns()
            fn()
            out.append((clock.host_ns() - t0) / 1000.0)
        clock.synchronize()
    return out


def time_replays(replay: Callable[[], Any], spec: BenchSpec, *, flush: Callable[[], Any] | None = None,
                 clock: Clock | None = None) -> list[float]:
    """``spec.warmup`` untimed calls, then the timed ones as ``spec`` says (``time_blocks``)."""
    clock = clock or CudaClock()
    for _ in range(spec.warmup):
        replay()
    clock.synchronize()
    return time_blocks(replay, spec.replays, spec.blocks, per_replay=spec.per_replay, flush=flush, clock=clock)


@dataclass
class Timings:
    """The raw samples of one process: GPU µs per capture, host µs, eager µs (None: not timed)."""

    captures: list[list[float]]
    host: list[float]
    eager: list[float] | None


def measure(first: Any, spec: BenchSpec, *, replay_of: Callable[[Any], Callable[[], Any]],
            recapture: Callable[[], Any] | None, check: Callable[[Any], None],
            flush: Callable[[], Any] | None = None, clock: Clock | None = None) -> Timings:
    """Time ``first`` (and ``spec.recaptures - 1`` recaptures), then run ``check`` on ``first``,
    then time its eager step. ``first`` and what ``recapture`` returns are ``runner.Captured``s
    (``eager``: the step, or None); ``replay_of(capture)`` is the call timed for a capture."""
    clock = clock or CudaClock()
    if spec.recaptures > 1 and recapture is None:
        raise UsageError("--recaptures needs a workload whose step cgtool captures; this workload's setup "
                         "captures its own graphs (it returns Precaptured). Run it with --recaptures 1.")
    caps: list[Any] = [first]
    kept: list[Any] = []  # eager outputs kept alive on the device: part of a later capture's state
    samples: list[list[float]] = []
    host: list[float] = []
    for k in range(spec.recaptures):
        if k:
            if first.eager is not None:
                kept.append(first.eager())
            assert recapture is not None  # refused above
            caps.append(recapture())
        fn = replay_of(caps[-1])
        samples.append(time_replays(fn, spec, flush=flush, clock=clock))
        if k == 0:
            host = host_cost(fn, min(spec.replays, HOST_CALLS), clock=clock)
    del kept
    check(first)
    eager_us = None
    if spec.eager and first.eager is not None:
        for _ in range(min(spec.warmup, EAGER_WARMUP)):
            first.eager()
        clock.synchronize()
        eager_us = time_blocks(first.eager, max(spec.blocks, spec.replays // 10), spec.blocks,
                               per_replay=spec.per_replay, flush=flush, hold=False, clock=clock)
    return Timings(samples, host, eager_us)


def torch_replay(cap: Any) -> Callable[[], Any]:
    """The call bench times for a capture: for a graph cgtool captured itself, torch's own
    ``CUDAGraph.replay`` underneath the engine's ``Graph`` (what a user's program calls; the
    engine's wrapper adds Python work per call that a one-kernel graph would show), unless the
    Graph has replay hooks or an input-liveness check to run; otherwise ``cap.replay``."""
    if getattr(cap, "capture_stream", None) is None or len(cap.graphs) != 1:
        return cap.replay  # type: ignore[no-any-return]
    g = cap.graphs[0][1]
    inner = getattr(g, "_g", None)
    plain = (getattr(g, "_instantiated", False) and getattr(g, "_tracker", True) is None
             and not getattr(g, "_replay_start_hooks", True) and not getattr(g, "_replay_end_hooks", True))
    return inner.replay if inner is not None and plain else cap.replay  # type: ignore[no-any-return]


def _median(xs: Sequence[float]) -> float:
    from cgtool.artifacts.bench import Stats

    return Stats.of(xs).median


def bench_workload(target: str, args: list[str], spec: BenchSpec = BenchSpec(), *,
                   clock: Clock | None = None) -> WorkloadResult:
    """Capture ``target`` in this process and time its replays (and its eager step) as ``spec`` says."""
    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.runner import capture_workload

    require_cuda("bench")
    first = capture_workload(parse_target(target), args, check=False)
    return bench_captured(first, spec, workload=target, args=args, clock=clock)


def bench_step(step: Callable[[], Any], spec: BenchSpec = BenchSpec(), *, name: str,
               clock: Clock | None = None) -> WorkloadResult:
    """Warm up and capture ``step``, a callable of this process (the pytest fixture ``cgtool_bench``
    passes the test's step), and time it as ``bench_workload`` times a workload's step; ``name`` is
    the result's workload label."""
    from cgtool.capture.entrypoint import Target
    from cgtool.capture.runner import warm_and_capture

    require_cuda("cgtool_bench")
    fn = getattr(step, "__qualname__", None) or getattr(step, "__name__", None) or "step"
    target = Target(spec=name, path=None, module=getattr(step, "__module__", None), function=str(fn))
    return bench_captured(warm_and_capture(target, step), spec, workload=name, clock=clock)


def bench_captured(first: Any, spec: BenchSpec, *, workload: str, args: Sequence[str] = (),
                   clock: Clock | None = None) -> WorkloadResult:
    """Time ``first`` (a ``runner.Captured`` of a step warmed up and captured as the user's program
    would, its check not yet run), its recaptures, its check and its eager step: steps 2-5 of the
    module docstring, the timing every caller of bench shares."""
    from cgtool.capture import dist
    from cgtool.capture.export import environment
    from cgtool.capture.runner import capture_step, check_replay, mismatch_failure, node_count

    torch = require_cuda("bench")
    flush = None
    if spec.cold_cache:
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
        buf = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
        flush = buf.zero_

    def recapture() -> Any:
        assert first.eager is not None and first.capture_stream is not None
        return capture_step(first.target, first.eager, first.capture_stream)

    def check(cap: Any) -> None:
        check_replay(cap)
        if cap.check_ok is False:
            raise mismatch_failure(cap)

    clk0 = _clock_mhz()
    t = measure(first, spec, replay_of=torch_replay, recapture=recapture if first.capture_stream is not None else None,
                check=check, flush=flush, clock=clock)
    clk1 = _clock_mhz()
    return WorkloadResult(
        workload=workload, rank=dist.rank() if dist.distributed() else None,
        gpu_us=tuple(x for c in t.captures for x in c), host_us=tuple(t.host),
        eager_us=None if t.eager is None else tuple(t.eager), spec=spec,
        capture_medians_us=tuple(_median(c) for c in t.captures),
        clock_mhz=(clk0, clk1), environment=environment(), args=tuple(args),
        nodes=sum(node_count(g) for _, g in first.graphs), graphs=len(first.graphs),
        check_ok=first.check_ok, max_abs_diff=first.max_abs_diff,
    )


def _child_request(request: dict[str, Any]) -> dict[str, Any]:
    spec = BenchSpec.from_json(request.get("spec", {}), "the bench request")
    return bench_workload(request["target"], list(request["args"]), spec).to_json()


def run_request(request: dict[str, Any]) -> dict[str, Any]:
    """What the bench child does with its request, in this process: the workload's result as JSON,
    or the error that stopped it (``benchmarks/bench_vs_plain.py --launch fork`` calls it)."""
    return result_of(_child_request, request)


def _run_in_child(target: str, args: Sequence[str], spec: BenchSpec) -> Mapping[str, Any]:
    return run_child("cgtool.capture.bench", {"target": target, "args": list(args), "spec": spec.to_json()})


def bench_pooled(target: str, args: Sequence[str], spec: BenchSpec, runs: int, *,
                 runner: ChildRunner = _run_in_child) -> WorkloadResult:
    """``runs`` fresh processes of one workload, their samples pooled; the first failure stops it."""
    results = []
    for _ in range(runs):
        doc = runner(target, args, spec)
        r = WorkloadResult.from_json(target, dict(doc), f"the bench process of {target}")
        if r.failed:
            return r
        results.append(r)
    return merge(results)


def bench_targets(targets: Sequence[str], args: Sequence[str], spec: BenchSpec, runs: int, *,
                  progress: Progress | None = None, runner: ChildRunner = _run_in_child) -> BenchResults:
    """Every workload benched in its own processes (one failing does not stop the others)."""
    results = []
    for k, t in enumerate(targets):
        if progress is not None:
            progress(t, k, len(targets))
        results.append(bench_pooled(t, args, spec, runs, runner=runner))
    return BenchResults.of(results)


def bench_ranks(targets: Sequence[str], args: list[str], spec: BenchSpec) -> BenchResults | None:
    """Under torchrun: bench in this process (a child would need its own process group); rank 0
    gets every rank's results, other ranks None."""
    from cgtool.capture import dist

    mine = []
    for t in targets:
        try:
            mine.append(bench_workload(t, args, spec).to_json())
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
