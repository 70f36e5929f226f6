"""``check_input_liveness``: find external tensors a captured graph reads that died before a replay.

A CUDA graph bakes in the addresses of every tensor it reads. If one of those tensors is freed after
capture (the caller dropped its last reference), a replay reads freed memory and computes garbage,
silently. With ``check_input_liveness=True`` the engine records, during capture, every tensor a
captured op reads that was not produced inside the capture (an *external input*), and checks before
each replay that each one is still alive. A dead one raises, naming for each dead tensor where it was
first read in the capture ("creation"), where it was freed, and where the replay was asked for.

What is tracked mirrors PyTorch's own tracker (``_TensorTrackingMode``, upstream main of mid-2026,
newer than torch 2.13's ``torch.utils._cuda_debug``), rule for rule, so that PyTorch's own tests of
the option pass (see :func:`op_is_captured`, :func:`tracked_inputs`):

- an op counts only while the current stream is capturing, and only when it returns at least one
  CUDA tensor: that is how an op that launched work on the GPU is told from one that did not
  (``torch.equal`` returns a Python bool: its inputs are not tracked);
- of its inputs, tensors with ``data_ptr() == 0`` are skipped; a CUDA tensor is tracked unless its
  memory belongs to the capture's own pool (the pool keeps that memory whatever Python does with the
  tensor: a tensor made by an earlier capture into a shared pool is not an external input); a host
  tensor is tracked only when it is pinned and the op is a copy (``aten::copy_``, ``aten::_to_copy``);
- the CUDA tensors an op returns are internal: never tracked afterwards.

At replay, an external input whose address lies in a segment of one of the graph's pools is never
reported either. Work launched outside PyTorch's dispatcher (raw ``cuLaunchKernel``, DLPack) is not
seen, as in PyTorch.

Which pool a CUDA tensor's memory belongs to: torch's ``_cuda_getBlockMempoolId`` where this torch has
it (upstream main), else the capture pool's segments as the allocator lists them when the capture
begins (torch <= 2.13): a tensor allocated into that pool during the capture is an op's output, so
internal already.
"""

from __future__ import annotations

import textwrap
import traceback
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cgtool.errors import GraphCaptureError

#: How many dead tensors the error message describes in full.
MAX_REPORTED = 5


def _cpp_backtrace(torch: Any) -> str:
    get = getattr(getattr(torch, "utils", None), "get_cpp_backtrace", None)
    if get is None:
        return ""
    try:
        return str(get())
    except Exception:  # a backtrace is a courtesy: never let it break a capture
        return ""


#: Ops whose pinned host inputs are tracked: a captured copy reads the host buffer at every replay.
COPY_OPS = frozenset({"aten::copy_", "aten::_to_copy"})

#: Frames between the user's op and TrackedInput.__init__: the dispatch mode, observe(),
#: track_input() and __init__ itself. The creation stack is cut there so it ends at the user's op.
_TRACKING_FRAMES = 4


class TrackedInput:
    """One external input: its address, a weak reference to its storage, and three stacks."""

    __slots__ = ("data_ptr", "device_index", "storage_ptr", "storage_ref", "created_py", "created_cpp", "freed_py")

    def __init__(self, torch: Any, tensor: Any) -> None:
        self.created_py = "".join(traceback.format_stack()[:-_TRACKING_FRAMES])
        self.created_cpp = _cpp_backtrace(torch)
        self.freed_py: str | None = None
        self.data_ptr = int(tensor.data_ptr())
        self.device_index = tensor.device.index
        storage = tensor.untyped_storage()
        self.storage_ptr = int(storage.data_ptr())

        def on_release(_: object) -> None:
            try:
                self.freed_py = "".join(traceback.format_stack()[:-1])
            except Exception:  # runs under garbage collection: never raise
                pass

        self.storage_ref = weakref.ref(storage, on_release)

    def alive(self) -> bool:
        storage = self.storage_ref()
        return storage is not None and int(storage.data_ptr()) == self.storage_ptr


# ---------------------------------------------------------------------------------------- the rules
def op_is_captured(capturing: bool, outputs: Iterable[Any]) -> bool:
    """Whether an op's inputs are looked at: the stream is capturing and the op returned a CUDA tensor.

    ``outputs`` are the tensors among the op's results. An op that returns only host values (a
    Python bool from ``torch.equal``, a host tensor) launched no captured work (PyTorch's proxy).
    """
    return capturing and any(v.is_cuda for v in outputs)


def tracked_inputs(op_name: str | None, inputs: Iterable[Any], in_capture_pool: Callable[[Any], bool]) -> list[Any]:
    """The tensors among a captured op's inputs that are external-input candidates.

    Skipped: tensors without memory (``data_ptr() == 0``), CUDA tensors whose memory belongs to the
    capture's own pool, host tensors unless pinned and read by a copy op (:data:`COPY_OPS`).
    """
    out = []
    is_copy = op_name in COPY_OPS
    for v in inputs:
        if v.data_ptr() == 0:
            continue
        if v.is_cuda:
            if not in_capture_pool(v):
                out.append(v)
        elif is_copy and v.is_pinned():
            out.append(v)
    return out


def op_name_of(func: Any) -> str | None:
    """``aten::copy_`` for ``torch.ops.aten.copy_.default``; None for a callable without a schema."""
    schema = getattr(func, "_schema", None)
    return str(schema.name) if schema is not None else None


class LivenessTracker:
    """Records external inputs during one capture; :meth:`check` raises before a replay if any died.

    ``capture_pool`` is ``(device, pool id)`` of the capture; build the tracker before the capture
    begins (it reads the allocator's segments of that pool then), and :meth:`start` it after.
    """

    def __init__(self, torch: Any, capture_pool: tuple[int, Any] | None = None) -> None:
        self._torch = torch
        self.external_inputs: dict[int, TrackedInput] = {}
        self.internal_outputs: set[int] = set()
        self._mode: Any = None
        self.in_capture_pool = capture_pool_test(torch, capture_pool)

    # ------------------------------------------------------------------ recording
    def start(self) -> None:
        self._mode = _make_mode(self._torch, self)
        self._mode.__enter__()

    def stop(self) -> None:
        mode, self._mode = self._mode, None
        if mode is not None:
            mode.__exit__(None, None, None)

    @property
    def recording(self) -> bool:
        return self._mode is not None

    def observe(self, op_name: str | None, inputs: list[Any], outputs: list[Any], capturing: bool) -> None:
        """One dispatched op: ``inputs`` and ``outputs`` are the tensors among its arguments and results."""
        if not op_is_captured(capturing, outputs):
            return
        for v in tracked_inputs(op_name, inputs, self.in_capture_pool):
            self.track_input(v)
        for v in outputs:
            if v.is_cuda:
                self.mark_output(v)

    def track_input(self, tensor: Any) -> None:
        ptr = int(tensor.data_ptr())
        if ptr not in self.internal_outputs and ptr not in self.external_inputs:
            self.external_inputs[ptr] = TrackedInput(self._torch, tensor)

    def mark_output(self, tensor: Any) -> None:
        ptr = int(tensor.data_ptr())
        if ptr not in self.external_inputs:
            self.internal_outputs.add(ptr)

    # ------------------------------------------------------------------ checking
    def dead_inputs(self, pools: Sequence[Any]) -> list[TrackedInput]:
        """External inputs whose storage is gone, leaving out addresses inside the graph's pools."""
        dead = [t for t in self.external_inputs.values() if not t.alive()]
        if not dead:
            return []
        spans = _pool_spans(self._torch, pools)
        return [t for t in dead if not _in_spans(spans, t.device_index, t.data_ptr)]

    def check(self, pools: Sequence[Any]) -> None:
        """Raise (a RuntimeError, as PyTorch does) when an external input died since capture."""
        dead = self.dead_inputs(pools)
        if dead:
            raise GraphCaptureError(format_dead(dead, "".join(traceback.format_stack()[:-2])))


def capture_pool_test(torch: Any, capture_pool: tuple[int, Any] | None) -> Callable[[Any], bool]:
    """``test(tensor)``: whether a CUDA tensor's memory belongs to the capture's pool.

    torch's per-block answer (``_cuda_getBlockMempoolId``) where it exists; else the pool's segments
    as the allocator lists them now (call this before the capture begins).
    """
    if capture_pool is None:
        return lambda t: False
    device, pool = capture_pool
    pool_id = tuple(pool)
    if pool_id == (0, 0):
        return lambda t: False
    block_pool = getattr(torch._C, "_cuda_getBlockMempoolId", None)
    if block_pool is not None:

        def by_block(t: Any) -> bool:
            d = t.device.index
            return d is not None and tuple(block_pool(d, int(t.data_ptr()))) == pool_id

        return by_block
    spans = _pool_spans(torch, [pool_id])
    return lambda t: _in_spans(spans, t.device.index, int(t.data_ptr()))


def _in_spans(spans: list[tuple[int, int, int]], device: int | None, ptr: int) -> bool:
    return any(d == device and lo <= ptr < hi for d, lo, hi in spans)


def format_dead(dead: list[TrackedInput], replay_stack: str) -> str:
    """The error message: PyTorch's wording, so code matching it keeps working, and cgtool's fix."""

    def block(label: str, text: str | None) -> str:
        body = text.strip() if text else "(not recorded)"
        return f"  {label}:\n{textwrap.indent(body, '    ')}\n"

    parts = [
        f"CUDA graph replay detected {len(dead)} dead tensor(s): external inputs read during capture "
        "were freed before this replay, so the graph would read freed memory. Keep a reference to each "
        "of them for as long as the graph is replayed (or copy them into static buffers before capture).\n"
    ]
    for i, info in enumerate(dead[:MAX_REPORTED], 1):
        parts.append(f"Dead tensor #{i} (data_ptr={info.data_ptr:#x}):\n")
        parts.append(block("Creation Traceback (Python) [first read during capture]", info.created_py))
        parts.append(block("Creation Traceback (C++)", info.created_cpp))
        parts.append(block("Deletion Traceback (Python)", info.freed_py))
    if len(dead) > MAX_REPORTED:
        parts.append(f"  ... and {len(dead) - MAX_REPORTED} more\n")
    parts.append(block("Replay Traceback (Python)", replay_stack))
    return "".join(parts)


def _pool_spans(torch: Any, pools: Sequence[Any]) -> list[tuple[int, int, int]]:
    """(device, start, end) of every allocator segment that belongs to one of ``pools``."""
    wanted = {tuple(p) for p in pools if p is not None}
    if not wanted:
        return []
    # The guarded snapshot: torch's own would import torch._inductor (seconds) in a program that
    # never compiled, when the allocator records history.
    from cgtool.capture.snapshot import allocator_snapshot

    spans = []
    for seg in allocator_snapshot(torch)["segments"]:
        if tuple(seg.get("segment_pool_id", ())) in wanted:
            start = int(seg["address"])
            spans.append((int(seg["device"]), start, start + int(seg["total_size"])))
    return spans


def _make_mode(torch: Any, tracker: LivenessTracker) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    Base: Any = TorchDispatchMode  # typed as Any: the engine speaks to torch through Any throughout

    Tensor = torch.Tensor
    capturing = torch.cuda.is_current_stream_capturing

    class _TrackInputs(Base):  # type: ignore[misc]
        supports_higher_order_operators = True

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            outputs = [v for v in tree_leaves(out) if isinstance(v, Tensor)]
            if not outputs:  # cheap exit first: no tensor result, nothing captured to look at
                return out
            inputs = [v for v in tree_leaves((args, kwargs)) if isinstance(v, Tensor)]
            tracker.observe(op_name_of(func), inputs, outputs, capturing())
            return out

    return _TrackInputs()
