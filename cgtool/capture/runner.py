"""Warm up, capture, instantiate, check replay against eager, export. The engine behind
``cgtool capture``, ``export``, ``trace`` and ``bench``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from cgtool.capture._deps import require_cuda
from cgtool.capture.entrypoint import Precaptured, Target, call_setup, resolve
from cgtool.capture.graph import Graph, graph
from cgtool.errors import CaptureError


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

    def exports(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for label, g in self.graphs:
            data = g.get_graph_data(with_meta=True)
            data["cgtool"]["workload"] = self.target.spec
            data["cgtool"]["label"] = label
            data["cgtool"]["check"] = {
                "max_abs_diff": self.max_abs_diff,
                "worst_output": self.worst_output,
                "ok": self.check_ok,
            }
            out.append((label, data))
        return out


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


def compare(eager: list[tuple[str, Any]], replayed: list[tuple[str, Any]], rtol: float, atol: float
            ) -> tuple[float, str | None, bool]:
    """(largest absolute difference, the output it is in, all within tolerance)."""
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
) -> Captured:
    """Load ``target``, warm it up on a side stream, capture it and compare replay with eager."""
    setup = resolve(target, args)  # file/function errors first: they need no GPU to report
    torch = require_cuda("Capturing a workload")
    step = call_setup(target, setup, args)
    if isinstance(step, Precaptured):
        cap = Captured(target, step.graphs, step.step, step.eager)
        if check and step.eager is not None:
            eager = snapshot(step.eager())
            got = snapshot(step.step())
            torch.cuda.synchronize()
            cap.max_abs_diff, cap.worst_output, cap.check_ok = compare(eager, got, rtol, atol)
        return cap

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    t0 = time.perf_counter()
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    eager = snapshot(step()) if check else []
    torch.cuda.synchronize()

    g = Graph(keep_graph=True, capture_error_mode=capture_error_mode)
    with graph(g, stream=side, capture_error_mode=capture_error_mode):
        static_out = step()
    g.instantiate()
    if g.instantiations and g.raw_cuda_graph() == 0:  # pragma: no cover - defensive
        raise CaptureError("Capture produced no graph.")
    cap = Captured(target, [("main", g)], g.replay, step)
    cap.timings = {"warmup_s": warm_s, "capture_s": g.capture_s or 0.0, "instantiate_s": g.instantiate_s or 0.0}
    g.replay()
    torch.cuda.synchronize()
    if check:
        cap.max_abs_diff, cap.worst_output, cap.check_ok = compare(eager, snapshot(static_out), rtol, atol)
    return cap
