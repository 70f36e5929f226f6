"""Source attribution: which line of the user's program made a graph node.

A CUPTI resource callback runs in the thread that made the CUDA call, so the Python frames of
the code that created a node are live at that moment. The callback keeps only ``(code, lineno)``
pairs (cheap); they are turned into ``file:line`` and names when the graph is written.

Frames are sorted into three kinds:

* **user**: the program's own files (not under the interpreter's prefixes, not site-packages,
  not frozen modules, not cgtool);
* **generated**: code torch wrote at run time (Inductor's output code in ``torchinductor_*``
  cache folders, FX's ``<eval_with_key>`` modules); for Inductor code the ``# Source Nodes``
  comment above the launching line names the fused torch ops;
* **library**: everything else (torch, the standard library, other packages).

This module imports nothing from torch: it is used inside callbacks and by tests on any machine.
"""

from __future__ import annotations

import functools
import linecache
import os
import re
import sys
import sysconfig
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

#: A frame as kept by a callback: the code object and the line being executed.
RawFrame = tuple[CodeType, int]

_MAX_FRAMES = 96
_CGTOOL_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def grab(frame: FrameType | None, limit: int = _MAX_FRAMES) -> list[RawFrame]:
    """The frames from ``frame`` outwards as ``(code, lineno)``; cheap enough for a callback."""
    out: list[RawFrame] = []
    f = frame
    while f is not None and len(out) < limit:
        out.append((f.f_code, f.f_lineno or 0))
        f = f.f_back
    return out


def _library_prefixes() -> tuple[str, ...]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            paths.add(sysconfig.get_paths()[key])
        except KeyError:
            pass
    for p in sys.path:
        if p.endswith(("site-packages", "dist-packages")):
            paths.add(p)
    return tuple(sorted({os.path.abspath(p) + os.sep for p in paths if p}, key=len, reverse=True))


_PREFIXES: tuple[str, ...] | None = None


@functools.lru_cache(maxsize=4096)
def classify(filename: str) -> str:
    """"user", "generated" or "library" for a code object's file name (cached: called per frame per node)."""
    global _PREFIXES
    if filename.startswith("<"):
        return "generated" if filename.startswith("<eval_with_key") else "library"
    if "torchinductor_" in filename or os.sep + "torchinductor" in filename:
        return "generated"
    path = os.path.abspath(filename)
    if path.startswith(_CGTOOL_DIR + os.sep):
        return "library"
    if "site-packages" in path or "dist-packages" in path:
        return "library"
    if _PREFIXES is None:
        _PREFIXES = _library_prefixes()
    # A program inside a virtualenv folder is still the user's: only the prefixes' lib trees count.
    for p in _PREFIXES:
        if path.startswith(p) and (os.sep + "lib" in path[len(p) - 1:] or p.endswith(("site-packages" + os.sep,
                                                                                       "dist-packages" + os.sep))):
            return "library"
    return "user"


_SOURCE_NODES = re.compile(r"#\s*(?:Topologically Sorted )?Source Nodes:\s*\[(.*?)\]")
_ATEN = re.compile(r"Original ATen:\s*\[(.*?)\]")


def inductor_ops(filename: str, line: int, lookback: int = 40) -> str | None:
    """The torch ops Inductor fused into the kernel launched at ``filename:line`` (its comment)."""
    for ln in range(line, max(0, line - lookback), -1):
        text = linecache.getline(filename, ln)
        m = _SOURCE_NODES.search(text)
        if m:
            ops = m.group(1).strip()
            aten = _ATEN.search(text)
            return ops + (f" ({aten.group(1).strip()})" if aten else "")
        if ln < line and text.lstrip().startswith("def "):
            break
    return None


@dataclass(frozen=True)
class Site:
    """Where a node (or a capture) came from."""

    file: str | None  # innermost user frame's file (absolute path), None when no user frame
    line: int | None
    function: str | None
    op: str | None  # nearest torch op: library function under the user frame, Inductor's fused ops, autograd node
    module: str | None  # nn.Module class whose forward is on the stack, innermost first
    generated: str | None  # "file:line" of generated code (Inductor, FX) between the user frame and CUDA
    stack: tuple[str, ...]  # user frames, innermost first, "file:line function" (at most 8)

    def short(self) -> str:
        """``model.py:88 softmax`` — the label `dot` and tables show (the op, else the module)."""
        where = f"{os.path.basename(self.file)}:{self.line}" if self.file else "?"
        what = self.op or self.module
        return f"{where} {what}" if what else where

    def code(self) -> str | None:
        """The text of the user line, as the program file holds it now."""
        if not self.file or not self.line:
            return None
        return linecache.getline(self.file, self.line).strip() or None

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "op": self.op,
            "module": self.module,
            "generated": self.generated,
            "label": self.short(),
            "code": self.code(),
            "stack": list(self.stack),
        }


def resolve(frames: list[RawFrame], *, modules: list[str] | None = None, autograd_op: str | None = None,
            fallback: list[RawFrame] | None = None) -> Site:
    """A :class:`Site` from raw frames (innermost first).

    ``modules``: nn.Module class names seen on the stack when it was grabbed (innermost first).
    ``autograd_op``: the autograd node running in this thread (backward), used as the op.
    ``fallback``: frames to use for the user line when ``frames`` has none (a backward pass runs
    in autograd's own thread, whose stack holds no user frame; the thread that called
    ``backward()`` does).
    """
    user_idx = None
    for i, (code, _) in enumerate(frames):
        if classify(code.co_filename) == "user":
            user_idx = i
            break
    op: str | None = None
    generated: str | None = None
    inner = frames if user_idx is None else frames[:user_idx]
    for code, line in inner:
        kind = classify(code.co_filename)
        if kind == "generated" and generated is None:
            generated = f"{code.co_filename}:{line}"
            if op is None:
                op = inductor_ops(code.co_filename, line)
    if op is None and autograd_op:
        op = autograd_op
    if op is None:
        # The outermost library function called from the user frame is the torch-level op
        # (``softmax`` in torch/nn/functional.py), not the helpers it calls.
        for code, _ in reversed(inner):
            if classify(code.co_filename) == "library" and not code.co_name.startswith("_"):
                if _is_torch(code.co_filename) and code.co_name not in _NOT_OPS:
                    op = code.co_name
                    break
    if user_idx is None and fallback:
        fb = resolve(fallback, modules=modules, autograd_op=op)
        return Site(fb.file, fb.line, fb.function, op, fb.module, generated, fb.stack)
    users = [(c, ln) for c, ln in frames if classify(c.co_filename) == "user"]
    stack = tuple(f"{c.co_filename}:{ln} {c.co_name}" for c, ln in users[:8])
    module = modules[0] if modules else None
    if user_idx is None:
        return Site(None, None, None, op, module, generated, stack)
    code, line = frames[user_idx]
    return Site(code.co_filename, line, code.co_name, op, module, generated, stack)


_NOT_OPS = frozenset({"forward", "__call__", "_call_impl", "_wrapped_call_impl", "wrapper", "inner", "run",
                      "__exit__", "__enter__", "capture_end", "capture_begin", "replay", "backward",
                      "decorate_context", "call", "_fn", "fn"})


def _is_torch(filename: str) -> bool:
    return (os.sep + "torch" + os.sep) in filename


def module_names(frame: FrameType | None, limit: int = 40) -> list[str]:
    """nn.Module classes whose ``forward`` is on the stack (innermost first), by duck typing.

    Reads ``self`` of frames named ``forward`` only: f_locals of every frame would cost too much
    inside a callback.
    """
    out: list[str] = []
    f = frame
    n = 0
    while f is not None and n < limit:
        if f.f_code.co_name == "forward" and "self" in f.f_code.co_varnames[:1]:
            obj = f.f_locals.get("self")
            if obj is not None and hasattr(obj, "_modules"):
                out.append(type(obj).__name__)
        f = f.f_back
        n += 1
    return out
