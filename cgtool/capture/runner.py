"""Warm up, capture, instantiate, check replay against eager, export. The engine behind
``cgtool capture``, ``export``, ``trace`` and ``bench``.

The graph is captured as a user's program captures it with ``torch.cuda.graph``: after the
warm-up (the step run on a side stream), on a stream of its own that ran nothing before (as
``torch.cuda.graph``'s own capture stream), with nothing else alive. The stream matters: cuBLAS
keeps a workspace per stream, so a capture on a new stream allocates the graph's own workspace
(32 MiB on the H100) in the graph's memory pool, where the user's capture puts it, while a
capture on the warm-up stream would reuse the warm-up's workspace outside the pool
(docs/bench.md, "Why capture state moves replay time"). The replay-vs-eager check runs after the
capture (``check_replay``), and its eager reference is copied to the host, so nothing the check
allocates is alive when the graph's buffers are placed. (Running the 400-kernel chain eagerly on
the stream its graph replays on, before the capture or after it, slowed every later replay, the
graph's buffers unmoved. ``cgtool bench`` therefore checks after all timing.)"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import inspect
import linecache
import threading
import traceback
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

from cgtool.capture._deps import require_cuda
from cgtool.capture.entrypoint import Precaptured, Target, call_setup, resolve
from cgtool.capture.graph import Graph, graph
from cgtool.errors import CaptureError
from cgtool.capture.diagnosis import Diagnosis, FailureCode, classify, describe_cuda_error


class CaptureFailed(CaptureError):
    """A capture failure with its diagnosis (code, where, remedy)."""

    def __init__(self, diagnosis: Diagnosis, target: str) -> None:
        super().__init__(diagnosis.paragraph(target))
        self.diagnosis = diagnosis


_HERE = str(Path(__file__).resolve().parent.parent)


def _is_user(filename: str) -> bool:
    return not (filename.startswith(_HERE) or "site-packages" in filename or "dist-packages" in filename
                or filename.startswith("<") or "/torch/" in filename or "/lib/python3" in filename)


def _where(filename: str, lineno: int) -> tuple[str, str]:
    line = linecache.getline(filename, lineno).strip()
    return f"{filename}:{lineno}" + (f" ({line})" if line else ""), line


def step_location(step: Callable[..., Any]) -> str:
    """'file:line' where the step is defined (for failures that happen at capture end)."""
    try:
        fn = inspect.unwrap(step)
        return f"{inspect.getsourcefile(fn)}:{fn.__code__.co_firstlineno} (def {fn.__name__})"
    except (TypeError, AttributeError):
        return ""


def diagnose(e: BaseException, step: Callable[..., Any], sync_sites: list[str], *, during_capture: bool = True) -> Diagnosis:
    """Classify an exception raised while capturing ``step``, pointing at the user's code."""
    frames = traceback.extract_tb(e.__traceback__)
    user = [f for f in frames if _is_user(f.filename)]
    where, user_line = "", ""
    if user:
        where, user_line = _where(user[-1].filename, user[-1].lineno or 0)
    text = str(e)
    others = sum(1 for t in threading.enumerate() if t is not threading.current_thread() and t.is_alive())
    code = classify(text, exc_type=type(e).__name__, user_line=user_line, frames=[f.filename for f in frames],
                    sync_sites=sync_sites, during_capture=during_capture, other_threads=others)
    if not where:
        where = (sync_sites[0] if (code is FailureCode.HOST_SYNC and sync_sites) else step_location(step))
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return Diagnosis(code, where, first[:300], describe_cuda_error(text), list(sync_sites),
                     exc_type=type(e).__name__, other_threads=others, error_full=text[:2000], user_line=user_line,
                     frames=[Path(f.filename).name for f in frames])


@contextmanager
def watch_syncs(torch: Any, sites: list[str]) -> Iterator[None]:
    """Record the user's lines that synchronize with the host (torch's sync debug mode)."""
    prev = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():  # torch warns that the mode is a prototype, every time
        warnings.simplefilter("ignore")
        torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.cuda.set_sync_debug_mode(prev)
    for w in got:
        if "synchroniz" in str(w.message).lower() and _is_user(w.filename):
            site, _ = _where(w.filename, w.lineno)
            if site not in sites:
                sites.append(site)


@dataclass
class Captured:
    """A captured workload: its graphs (label, Graph), the step and the check result."""

    target: Target
    graphs: list[tuple[str, Graph]]
    replay: Callable[[], Any]
    eager: Callable[[], Any] | None
    max_abs_diff: float | None = None
    worst_output: str | None = None
    check_ok: bool | None = None
    timings: dict[str, float] = field(default_factory=dict)
    sources: Any = None  # capture.node_sources.NodeSources of the capture, when source lines were asked for
    #: Replays the graph(s) once and returns the outputs to compare with ``eager()``'s.
    replay_outputs: Callable[[], Any] | None = None
    #: The stream cgtool captured ``eager`` (the step) on; None when the setup captured its own graphs.
    capture_stream: Any = None

    def exports(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for label, g in self.graphs:
            data = g.get_graph_data(with_meta=True)
            if self.sources is not None:
                self.sources.annotate(g.raw_cuda_graph(), data)
            data["cgtool"]["workload"] = self.target.spec
            data["cgtool"]["label"] = label
            from cgtool.capture import dist

            if dist.distributed():
                data["cgtool"]["rank"] = dist.rank()
                data["cgtool"]["world_size"] = dist.world_size()
            data["cgtool"]["check"] = {
                "max_abs_diff": self.max_abs_diff,
                "worst_output": self.worst_output,
                "ok": self.check_ok,
            }
            out.append((label, data))
        return out


def node_count(g: Graph) -> int:
    """Top-level nodes of ``g``'s template (one driver call)."""
    from cgtool.capture._deps import check, require_bindings

    rt, _ = require_bindings("Capture")
    return int(check(rt.cudaGraphGetNodes(rt.cudaGraph_t(init_value=g.raw_cuda_graph()), numNodes=0),
                     "cudaGraphGetNodes")[1])


def mismatch_failure(cap: "Captured") -> CaptureFailed:
    """The replay-vs-eager failure of a capture whose check did not pass."""
    d = Diagnosis(FailureCode.REPLAY_MISMATCH, step_location(cap.eager) if cap.eager else "",
                  detail=f"The largest difference is {cap.max_abs_diff:.6g}, in {cap.worst_output}. "
                         "Pass --allow-mismatch (or --no-check) to write the bundle anyway.")
    return CaptureFailed(d, cap.target.spec)


def _flatten(out: Any, prefix: str = "output") -> list[tuple[str, Any]]:
    import torch

    if isinstance(out, torch.Tensor):
        return [(prefix, out)]
    if isinstance(out, (list, tuple)):
        return [x for i, o in enumerate(out) for x in _flatten(o, f"{prefix}[{i}]")]
    if isinstance(out, dict):
        return [x for k, o in out.items() for x in _flatten(o, f"{prefix}[{k!r}]")]
    if hasattr(out, "__dict__") and not callable(out):
        return [x for k, o in vars(out).items() for x in _flatten(o, f"{prefix}.{k}")]
    return []


def snapshot(out: Any) -> list[tuple[str, Any]]:
    """Copies of every tensor in ``out`` (static graph outputs are overwritten by each replay)."""
    return [(k, t.detach().clone()) for k, t in _flatten(out)]


def host_snapshot(out: Any) -> list[tuple[str, Any]]:
    """Host copies of every tensor in ``out``: a reference that holds no device memory."""
    return [(k, t.detach().to("cpu", copy=True)) for k, t in _flatten(out)]


def compare(eager: list[tuple[str, Any]], replayed: list[tuple[str, Any]], rtol: float, atol: float
            ) -> tuple[float, str | None, bool]:
    """(largest absolute difference, the output it is in, all within tolerance). An eager tensor
    on the host is moved to its replayed counterpart's device one at a time."""
    import torch

    if len(eager) != len(replayed):
        raise CaptureError(
            f"The step returned {len(eager)} tensors eagerly but {len(replayed)} under the graph; "
            "a step must return the same structure every call."
        )
    worst, where, ok = 0.0, None, True
    for (k, a), (_, b) in zip(eager, replayed):
        if a.shape != b.shape:
            raise CaptureError(f"{k}: shape {tuple(a.shape)} eagerly but {tuple(b.shape)} on replay.")
        if a.numel() == 0:
            continue
        if a.device != b.device:
            a = a.to(b.device)
        if a.is_floating_point() or a.is_complex():
            d = (a.double() - b.double()).abs()
            diff = float(d.max())
            if not torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol, equal_nan=True):
                ok = False
        else:
            diff = float((a.long() - b.long()).abs().max())
            ok = ok and diff == 0
        if diff >= worst:
            worst, where = diff, k
    return worst, where, ok


def capture_workload(
    target: Target,
    args: list[str] | None = None,
    *,
    warmup: int = 3,
    check: bool = True,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    capture_error_mode: str = "global",
    sources: bool = False,
) -> Captured:
    """Load ``target``, warm it up on a side stream, capture it, then (``check``) compare a replay
    with the step run eagerly (``check_replay``).

    ``sources``: attribute every node to the line of the workload that made it (CUPTI node
    callbacks around the capture; the exports carry a ``source`` per node, as ``cgtool record``'s).
    """
    setup = resolve(target, args)  # file/function errors first: they need no GPU to report
    require_cuda("Capturing a workload")  # before the setup runs: it may allocate on the GPU
    tracker: Any = None
    if sources:
        from cgtool.capture.node_sources import NodeSources

        tracker = NodeSources()
    with tracker if tracker is not None else nullcontext():
        step = call_setup(target, setup, args)  # a setup that captures its own graphs does it here
    if isinstance(step, Precaptured):
        cap = Captured(target, step.graphs, step.step, step.eager, sources=tracker, replay_outputs=step.step)
        if check:
            check_replay(cap, rtol, atol)
        return cap

    cap = warm_and_capture(target, step, warmup=warmup, capture_error_mode=capture_error_mode, tracker=tracker)
    if check:  # after the capture: the graph's memory is placed as in the user's program
        check_replay(cap, rtol, atol)
    return cap


def warm_and_capture(target: Target, step: Callable[[], Any], *, warmup: int = 3, capture_error_mode: str = "global",
                     tracker: Any = None) -> Captured:
    """Warm ``step`` up ``warmup`` times on a side stream (``warm_up``), then capture it on a new
    stream of its own (``capture_step``), as ``torch.cuda.graph`` does: a workload's step
    (``capture_workload``) or a caller's own callable (the pytest fixture ``cgtool_bench``)."""
    torch = require_cuda("Capturing a workload")
    t0 = time.perf_counter()
    sync_sites: list[str] = []
    warm_up(target, step, torch.cuda.Stream(), warmup, sync_sites)
    warm_s = time.perf_counter() - t0
    # A stream of its own, not the warm-up's: see the module's docstring (the cuBLAS workspace).
    cap = capture_step(target, step, torch.cuda.Stream(), capture_error_mode=capture_error_mode, tracker=tracker,
                       sync_sites=sync_sites)
    cap.timings = {"warmup_s": warm_s, **cap.timings}
    return cap


def warm_up(target: Target, step: Callable[[], Any], stream: Any, warmup: int, sync_sites: list[str]) -> None:
    """Run ``step`` ``warmup`` times on ``stream`` (a side stream, as torch's docs warm up before a
    capture), recording the user's lines that synchronize into ``sync_sites``; wait for it all."""
    torch = require_cuda("Capturing a workload")
    stream.wait_stream(torch.cuda.current_stream())
    try:
        with watch_syncs(torch, sync_sites), torch.cuda.stream(stream):
            for _ in range(warmup):
                step()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
    except Exception as e:  # the step fails without a graph too
        raise CaptureFailed(diagnose(e, step, sync_sites, during_capture=False), target.spec) from None


def capture_step(target: Target, step: Callable[[], Any], stream: Any, *, capture_error_mode: str = "global",
                 tracker: Any = None, sync_sites: list[str] | None = None) -> Captured:
    """Capture a warmed-up ``step`` on ``stream`` into a new graph with a fresh memory pool,
    instantiate it and replay it once. ``capture_workload`` calls it once, on a new stream;
    ``cgtool bench --recaptures`` again on the same stream for each further capture of the same
    step (as ``torch.cuda.graph`` captures every graph of a program on its one capture stream)."""
    torch = require_cuda("Capturing a workload")
    g = Graph(keep_graph=True, capture_error_mode=capture_error_mode)
    try:
        with tracker if tracker is not None else nullcontext():
            with graph(g, stream=stream, capture_error_mode=capture_error_mode):
                static_out = step()
        g.instantiate()
    except Exception as e:
        raise CaptureFailed(diagnose(e, step, list(sync_sites or [])), target.spec) from None
    if node_count(g) == 0:
        # CUDA tensors out of a step that captured nothing: its work went to a stream outside the
        # capture (the default stream, typically), ran eagerly, and escaped the graph.
        escaped = any(t.is_cuda for _, t in _flatten(static_out))
        d = Diagnosis(FailureCode.DEFAULT_STREAM if escaped else FailureCode.EMPTY_GRAPH, step_location(step),
                      detail="The step returned CUDA tensors but the graph holds no work." if escaped else "")
        raise CaptureFailed(d, target.spec)

    def replay_outputs() -> Any:
        g.replay()
        return static_out

    cap = Captured(target, [("main", g)], g.replay, step, sources=tracker, replay_outputs=replay_outputs,
                   capture_stream=stream)
    cap.timings = {"capture_s": g.capture_s or 0.0, "instantiate_s": g.instantiate_s or 0.0}
    g.replay()
    torch.cuda.synchronize()
    return cap


def check_replay(cap: Captured, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Run the step eagerly, keep host copies of its outputs, replay the graph and compare; the
    result goes to ``cap.max_abs_diff``, ``worst_output`` and ``check_ok`` (left None when the
    workload has no eager step). Call it after the capture, and after any timing: it allocates
    device memory and runs the step on the current stream, which can slow later replays."""
    if cap.eager is None or cap.replay_outputs is None:
        return
    torch = require_cuda("Checking a replay")
    try:
        eager = host_snapshot(cap.eager())
    except Exception as e:  # it ran in the warm-up; a failure now is the step's own
        raise CaptureFailed(diagnose(e, cap.eager, [], during_capture=False), cap.target.spec) from None
    got = _flatten(cap.replay_outputs())
    torch.cuda.synchronize()
    cap.max_abs_diff, cap.worst_output, cap.check_ok = compare(eager, got, rtol, atol)


def capture_checked(target: Target, args: list[str] | None = None, *, allow_mismatch: bool = False,
                    **kw: Any) -> Captured:
    """``capture_workload``, failing with the ``replay-mismatch`` diagnosis when replay differs from
    eager (unless ``allow_mismatch``)."""
    cap = capture_workload(target, args, **kw)
    if cap.check_ok is False and not allow_mismatch:
        raise mismatch_failure(cap)
    return cap
