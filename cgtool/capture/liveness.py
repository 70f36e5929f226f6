"""``check_input_liveness``: find external tensors a captured graph reads that died before a replay.

A CUDA graph bakes in the addresses of every tensor it reads. If one of those tensors is freed after
capture (the caller dropped its last reference), a replay reads freed memory and computes garbage,
silently. With ``check_input_liveness=True`` the engine records, during capture, every tensor an op on
the capturing stream reads that was not produced inside the capture (an *external input*), and checks
before each replay that each one is still alive. A dead one raises, naming for each dead tensor where
it was first read in the capture ("creation"), where it was freed, and where the replay was asked for.

It mirrors PyTorch's tracker (``torch.utils._cuda_debug``, newest upstream) so that PyTorch's own tests
of the option pass: a ``TorchDispatchMode`` sees every aten op while the capture runs; tensors with
``data_ptr() == 0`` are skipped; CUDA tensors and pinned host tensors are tracked; outputs of captured
ops are internal; an address inside a segment of one of the graph's memory pools is never reported
(the graph's pool keeps that memory, whatever Python did with the tensor). Work launched outside
PyTorch's dispatcher (raw ``cuLaunchKernel``, DLPack) is not seen, as in PyTorch.
"""

from __future__ import annotations

import textwrap
import traceback
import weakref
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


class TrackedInput:
    """One external input: its address, a weak reference to its storage, and three stacks."""

    __slots__ = ("data_ptr", "device_index", "storage_ptr", "storage_ref", "created_py", "created_cpp", "freed_py")

    def __init__(self, torch: Any, tensor: Any) -> None:
        # Drop this frame, the tracker's and the dispatch mode's: the stack ends at the user's op.
        self.created_py = "".join(traceback.format_stack()[:-3])
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


class LivenessTracker:
    """Records external inputs during one capture; :meth:`check` raises before a replay if any died."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self.external_inputs: dict[int, TrackedInput] = {}
        self.internal_outputs: set[int] = set()
        self._mode: Any = None

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

    def track_input(self, tensor: Any) -> None:
        ptr = int(tensor.data_ptr())
        if ptr not in self.internal_outputs and ptr not in self.external_inputs:
            self.external_inputs[ptr] = TrackedInput(self._torch, tensor)

    def mark_output(self, tensor: Any) -> None:
        ptr = int(tensor.data_ptr())
        if ptr not in self.external_inputs:
            self.internal_outputs.add(ptr)

    # ------------------------------------------------------------------ checking
    def dead_inputs(self, pools: list[Any]) -> list[TrackedInput]:
        """External inputs whose storage is gone, leaving out addresses inside the graph's pools."""
        dead = [t for t in self.external_inputs.values() if not t.alive()]
        if not dead:
            return []
        spans = _pool_spans(self._torch, pools)
        return [t for t in dead if not any(d == t.device_index and lo <= t.data_ptr < hi for d, lo, hi in spans)]

    def check(self, pools: list[Any]) -> None:
        """Raise (a RuntimeError, as PyTorch does) when an external input died since capture."""
        dead = self.dead_inputs(pools)
        if dead:
            raise GraphCaptureError(format_dead(dead, "".join(traceback.format_stack()[:-2])))


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


def _pool_spans(torch: Any, pools: list[Any]) -> list[tuple[int, int, int]]:
    """(device, start, end) of every allocator segment that belongs to one of ``pools``."""
    wanted = {tuple(p) for p in pools if p is not None}
    if not wanted:
        return []
    spans = []
    for seg in torch.cuda.memory_snapshot():
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
            if not capturing():
                return out
            leaves = [v for v in tree_leaves((args, kwargs)) if isinstance(v, Tensor)]
            # The op is captured when the CUDA dispatch key is selected: a CUDA tensor among its inputs.
            if not any(v.is_cuda for v in leaves):
                return out
            for v in leaves:
                if v.data_ptr() != 0 and (v.is_cuda or v.is_pinned()):
                    tracker.track_input(v)
            for v in tree_leaves(out):
                if isinstance(v, Tensor) and v.is_cuda:
                    tracker.mark_output(v)
            return out

    return _TrackInputs()
