"""Source attribution: which line of the user's program made a graph node.

A CUPTI resource callback runs in the thread that made the CUDA call, so the Python frames of
the code that created a node are live at that moment. The callback keeps only ``(code, lasti)``
pairs — the code object and the offset of the instruction being executed, both plain attribute
reads — and everything else is worked out later, off the callback: the line number (from the
code's line table), the call expression at that instruction (from its column positions), file
kinds and names.

Frames are sorted into three kinds:

* **user**: the program's own files (not under the interpreter's prefixes, not site-packages,
  not frozen modules, not cgtool);
* **generated**: code torch wrote at run time (Inductor's output code in ``torchinductor_*``
  cache folders, FX's ``<eval_with_key>`` modules); for Inductor code the ``# Source Nodes``
  comment above the launching line names the torch ops a kernel fuses;
* **library**: everything else (torch, the standard library, other packages).

This module imports nothing from torch: it is used inside callbacks and by tests on any machine.
"""

from __future__ import annotations

import ast
import bisect
import functools
import linecache
import os
import re
import sys
import sysconfig
import threading
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any, Callable, Optional

import msgspec

from cgtool.artifacts.recording import ModelLine, SourceSite

#: A frame as kept by a callback: the code object and ``f_lasti``, the byte offset of the
#: instruction being executed (``line_of`` turns it into a line number).
RawFrame = tuple[CodeType, int]

_MAX_FRAMES = 96
_CGTOOL_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: ids of the code objects at and beyond which frames are the recorder's own launch machinery
#: (runpy, the boot): ``grab`` stops there. Filled by ``stop_at``. Code objects are looked up by
#: id throughout: hashing one hashes its whole bytecode, on every lookup.
_STOP: set[int] = set()
_STOP_KEEP: list[CodeType] = []


def stop_at(*codes: CodeType) -> None:
    """Make ``grab`` stop at frames running one of ``codes`` (and leave them out)."""
    _STOP_KEEP.extend(codes)  # kept alive, so that their ids stay theirs
    _STOP.update(id(c) for c in codes)


def grab(frame: FrameType | None, limit: int = _MAX_FRAMES) -> list[RawFrame]:
    """The frames from ``frame`` outwards as ``(code, lasti)``: what a callback can afford.

    Measured by ``benchmarks/bench_record_callbacks.py``: ``f_lineno`` walks the code's line table
    on every read (costly in long functions such as Inductor's ``call``); ``f_lasti`` is a field.
    """
    out: list[RawFrame] = []
    f = frame
    stop = _STOP
    while f is not None:
        code = f.f_code
        if id(code) in stop:
            break
        out.append((code, f.f_lasti))
        if len(out) >= limit:
            break
        f = f.f_back
    return out


def grab_node(frame: FrameType | None, limit: int = _MAX_FRAMES) -> tuple[list[CodeType], list[int], type | None, int]:
    """The node callback's walk: code objects and ``f_lasti`` of the frames from ``frame``
    outwards (two lists: no tuple per frame), the class of the innermost nn.Module whose
    ``forward`` is on the stack (``self`` of that frame) or None, and that frame's index (-1).

    Timed by ``benchmarks/bench_record_callbacks.py``: reading two attributes per frame and
    nothing else halves the walk against checking every frame as it goes; the launch machinery
    at the top of the stack is cut off afterwards, and the ``forward`` frame found in the codes.
    """
    codes: list[CodeType] = []
    lastis: list[int] = []
    add_code, add_lasti = codes.append, lastis.append
    f = frame
    n = 0
    while f is not None and n < limit:
        add_code(f.f_code)
        add_lasti(f.f_lasti)
        n += 1
        f = f.f_back
    if _STOP:
        for k in range(len(codes) - 1, max(-1, len(codes) - 12), -1):
            if id(codes[k]) in _STOP:
                del codes[k:], lastis[k:]
                break
    module = None
    module_index = -1
    for i, code in enumerate(codes):
        if code.co_name == "forward" and code.co_argcount and code.co_varnames[0] == "self":
            f = frame
            for _ in range(i):
                f = f.f_back  # type: ignore[union-attr]
            obj = f.f_locals.get("self") if f is not None else None
            if obj is not None and hasattr(obj, "_modules"):
                module, module_index = type(obj), i
                break
    return codes, lastis, module, module_index


# ------------------------------------------------------------------------------- lines and calls
_LINE_TABLES: dict[int, tuple[CodeType, list[int], list[int | None]]] = {}


def line_of(code: CodeType, lasti: int) -> int:
    """The source line of the instruction at byte offset ``lasti`` (``f_lineno``'s answer)."""
    if lasti < 0:
        return code.co_firstlineno
    table = _LINE_TABLES.get(id(code))
    if table is None or table[0] is not code:
        starts: list[int] = []
        lines: list[int | None] = []
        for start, _end, line in code.co_lines():
            starts.append(start)
            lines.append(line)
        table = _LINE_TABLES[id(code)] = (code, starts, lines)
    _, starts, lines = table
    i = bisect.bisect_right(starts, lasti) - 1
    while i >= 0 and lines[i] is None:  # an instruction without a line (cache entries): the one before
        i -= 1
    line = lines[i] if i >= 0 else None
    return line if line is not None else code.co_firstlineno


_Pos = tuple[Any, Any, Any, Any]
_POSITIONS: dict[int, tuple[CodeType, list[_Pos]]] = {}
_CALLS: dict[tuple[int, int], tuple[CodeType, str | None]] = {}
_MAX_CALL_TEXT = 60


def call_at(code: CodeType, lasti: int) -> str | None:
    """The expression being called at ``lasti`` (``self.up``, ``x.softmax``, ``F.gelu``), or the
    operator (``add``, ``matmul``) when the instruction is one, or None.

    Read from the instruction's column span (``co_positions``, Python 3.11+) in the source file.
    """
    hit = _CALLS.get((id(code), lasti))
    if hit is not None and hit[0] is code:
        return hit[1]
    if len(_CALLS) > 65536:
        _CALLS.clear()
    out = _call_at(code, lasti)
    _CALLS[(id(code), lasti)] = (code, out)
    return out


def _call_at(code: CodeType, lasti: int) -> str | None:
    if lasti < 0 or not hasattr(code, "co_positions"):
        return None
    entry = _POSITIONS.get(id(code))
    if entry is None or entry[0] is not code:
        entry = _POSITIONS[id(code)] = (code, list(code.co_positions()))
    pos = entry[1]
    k = lasti // 2
    if k >= len(pos):
        return None
    l0, l1, c0, c1 = pos[k]
    if l0 is None or l1 is None or c0 is None or c1 is None or l1 - l0 > 20:
        return None
    lines = linecache.getlines(code.co_filename)
    if l1 > len(lines):
        return None
    chunk = [ln.encode() for ln in lines[l0 - 1:l1]]  # column offsets count UTF-8 bytes
    if len(chunk) == 1:
        text = chunk[0][c0:c1]
    else:
        text = b"".join([chunk[0][c0:], *chunk[1:-1], chunk[-1][:c1]])
    return _callee(text.decode(errors="replace"))


_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.MatMult: "matmul",
        ast.Pow: "pow", ast.Mod: "remainder", ast.FloorDiv: "floor_divide", ast.BitAnd: "bitwise_and",
        ast.BitOr: "bitwise_or", ast.BitXor: "bitwise_xor", ast.LShift: "lshift", ast.RShift: "rshift",
        ast.USub: "neg", ast.Invert: "bitwise_not", ast.Not: "logical_not"}


def _callee(text: str) -> str | None:
    try:
        tree = ast.parse("(\n" + text + "\n)", mode="eval").body
    except SyntaxError:
        try:  # a statement: `a += b`, `a[i] = b`
            stmt = ast.parse(text.strip()).body
        except SyntaxError:
            return None
        if len(stmt) != 1:
            return None
        node = stmt[0]
        if isinstance(node, ast.AugAssign):
            return _OPS.get(type(node.op), None)
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            return "setitem"
        return None
    if isinstance(tree, ast.Call):
        s = ast.unparse(tree.func)
        return s if len(s) <= _MAX_CALL_TEXT else "…" + s[-_MAX_CALL_TEXT:]
    if isinstance(tree, (ast.BinOp, ast.UnaryOp)):
        return _OPS.get(type(tree.op), None)
    if isinstance(tree, ast.Subscript):
        return "getitem"
    if isinstance(tree, ast.Compare) and len(tree.ops) == 1:
        return type(tree.ops[0]).__name__.lower()
    return None


# ----------------------------------------------------------------------------------- file kinds
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

#: Files that are the user's wherever they lie: the script `cgtool capture`, `trace` and `bench` run
#: (the fork/join sample that ships inside cgtool, a script in site-packages). ``mark_user_file``.
_USER_FILES: set[str] = set()


def mark_user_file(path: str | os.PathLike[str]) -> None:
    """Name ``path``'s frames as the user's (``classify``), though it lies inside cgtool or a library."""
    _USER_FILES.add(os.path.abspath(path))
    classify.cache_clear()


@functools.lru_cache(maxsize=4096)
def classify(filename: str) -> str:
    """"user", "generated" or "library" for a code object's file name (cached: called per frame per node)."""
    global _PREFIXES
    if filename.startswith("<"):
        return "generated" if filename.startswith("<eval_with_key") else "library"
    if "torchinductor_" in filename or os.sep + "torchinductor" in filename:
        return "generated"
    path = os.path.abspath(filename)
    if path in _USER_FILES:
        return "user"
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


@functools.lru_cache(maxsize=4096)
def inductor_nodes(filename: str, line: int, lookback: int = 40) -> tuple[str, ...]:
    """The FX node names of the ``# Source Nodes`` comment above ``filename:line`` (Inductor's code)."""
    for ln in range(line, max(0, line - lookback), -1):
        text = linecache.getline(filename, ln)
        m = _SOURCE_NODES.search(text)
        if m:
            return tuple(n.strip() for n in m.group(1).split(",") if n.strip())
        if ln < line and text.lstrip().startswith("def "):
            break
    return ()


#: Where the FX nodes of Inductor's output code came from in the model: set by
#: ``capture/record/inductor.py`` (output code file, node names -> model sites), None when the
#: recorder does not track compiled code.
model_sites: Callable[[str, tuple[str, ...]], list[dict[str, Any]]] | None = None


@functools.lru_cache(maxsize=4096)
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


# ------------------------------------------------------------------------------------------ sites
@dataclass(frozen=True)
class Site:
    """Where a node (or a capture) came from."""

    file: str | None  # innermost user frame's file (absolute path), None when no user frame
    line: int | None
    function: str | None
    op: str | None  # nearest torch op: Inductor's fused ops, the autograd node, the torch function under the user frame
    module: str | None  # nn.Module class whose forward is on the stack, innermost first
    generated: str | None  # "file:line" of generated code (Inductor, FX) between the user frame and CUDA
    stack: tuple[str, ...]  # user frames, innermost first, "file:line function" (at most 8)
    call: str | None = None  # the expression the user line was calling (``attn.softmax``), or its operator
    record_function: str | None = None  # innermost torch.profiler.record_function range open in the thread
    backward: bool = False  # op is the autograd node that made the node (a backward pass)
    module_inside: bool = False  # module's forward runs under the user line (not the one holding it)
    #: compiled code: the model lines and nn.Module paths its FX nodes came from (``stack_trace`` and
    #: ``nn_module_stack``), innermost first; empty when unknown
    model: tuple[dict[str, Any], ...] = ()

    def short(self) -> str:
        """``model.py:88 attn.softmax`` — the label `dot` and tables show.

        Generated code and backward graphs are named by their op (Inductor's fused ops, the autograd
        node); eager code by the call on the user line, with what it reached when that says more:
        the torch function (``self.norm (layer_norm)``) or the nn.Module called under that line
        (``self.up (Linear)``); else the op or the module.
        """
        where = f"{os.path.basename(self.file)}:{self.line}" if self.file else "?"
        if self.model:
            m = self.model[0]
            mwhere = f"{os.path.basename(str(m['file']))}:{m['line']}" if m.get("file") else where
            path = m.get("module_path") or m.get("function")
            return f"{mwhere} {path} ({self.op})" if path and self.op else f"{mwhere} {path or self.op or ''}".rstrip()
        if self.op and (self.generated or self.backward or self.call is None):
            what: str | None = self.op
        elif self.call:
            extra = self.op or (self.module if self.module_inside else None)
            tail = self.call.rsplit(".", 1)[-1]
            what = self.call + (f" ({extra})" if extra and extra != tail else "")
        else:
            what = self.module
        return f"{where} {what}" if what else where

    def code(self) -> str | None:
        """The text of the user line, as the program file holds it now."""
        if not self.file or not self.line:
            return None
        return linecache.getline(self.file, self.line).strip() or None

    def to_struct(self) -> SourceSite:
        """The site as the recording keeps it (a capture's ``captured_at``, a node's ``source``)."""
        path = next((str(m["module_path"]) for m in self.model if m.get("module_path")), None)
        return SourceSite(
            file=self.file, line=self.line, function=self.function, call=self.call, op=self.op,
            # the nn.Module class on the stack; for compiled code (no module on the stack) the module
            # path its label shows (``model.layers.0.self_attn.q_proj``)
            module=self.module or path, record_function=self.record_function, backward=self.backward,
            generated=self.generated, label=self.short(), code=self.code(), stack=list(self.stack),
            model=msgspec.convert(self.model, list[ModelLine]), module_path=path)

    def to_json(self) -> dict[str, Any]:
        """:meth:`to_struct` as JSON-ready builtins (a node's ``source`` in the export's extras)."""
        out: dict[str, Any] = msgspec.to_builtins(self.to_struct())
        return out


def resolve(frames: list[RawFrame], *, modules: list[str] | None = None, autograd_op: str | None = None,
            fallback: list[RawFrame] | None = None, record_function: str | None = None,
            module_index: int = -1) -> Site:
    """A :class:`Site` from raw frames (innermost first).

    ``modules``: nn.Module class names seen on the stack when it was grabbed (innermost first).
    ``autograd_op``: the autograd node running in this thread (backward), used as the op.
    ``fallback``: frames to use for the user line when ``frames`` has none (a backward pass runs
    in autograd's own thread, whose stack holds no user frame; the thread that called
    ``backward()`` does).
    ``record_function``: the innermost ``record_function`` range open when the node was made.
    ``module_index``: the index in ``frames`` of the first module's ``forward`` (-1: unknown).
    """
    user_idx = None
    for i, (code, _) in enumerate(frames):
        if classify(code.co_filename) == "user":
            user_idx = i
            break
    op: str | None = None
    generated: str | None = None
    model: tuple[dict[str, Any], ...] = ()
    inner = frames if user_idx is None else frames[:user_idx]
    for code, lasti in inner:
        kind = classify(code.co_filename)
        if kind == "generated" and generated is None:
            line = line_of(code, lasti)
            generated = f"{code.co_filename}:{line}"
            if op is None:
                op = inductor_ops(code.co_filename, line)
            if model_sites is not None:
                names = inductor_nodes(code.co_filename, line)
                if names:
                    model = tuple(model_sites(code.co_filename, names))
    backward = False
    if op is None and autograd_op:
        op, backward = autograd_op, True
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
        return Site(fb.file, fb.line, fb.function, op, fb.module, generated, fb.stack, fb.call, record_function,
                    backward or fb.backward, model=model)
    users = [(c, li) for c, li in frames if classify(c.co_filename) == "user"]
    stack = tuple(f"{c.co_filename}:{line_of(c, li)} {c.co_name}" for c, li in users[:8])
    module = modules[0] if modules else None
    if user_idx is None:
        return Site(None, None, None, op, module, generated, stack, None, record_function, backward, model=model)
    code, lasti = frames[user_idx]
    return Site(code.co_filename, line_of(code, lasti), code.co_name, op, module, generated, stack,
                call_at(code, lasti), record_function, backward, 0 <= module_index < user_idx, model)


_NOT_OPS = frozenset({"forward", "__call__", "_call_impl", "_wrapped_call_impl", "wrapper", "inner", "run",
                      "__exit__", "__enter__", "capture_end", "capture_begin", "replay", "backward",
                      "decorate_context", "call", "_fn", "fn"})


def _is_torch(filename: str) -> bool:
    return (os.sep + "torch" + os.sep) in filename


# ------------------------------------------------------------------------- record_function ranges
class _Ranges(threading.local):
    def __init__(self) -> None:
        self.names: list[str] = []


#: The ``record_function`` ranges open in each thread (innermost last), once :func:`track_ranges`
#: has wrapped torch's class.
ranges = _Ranges()


def current_range() -> str | None:
    names = ranges.names
    return names[-1] if names else None


#: What a node-creation callback keeps: raw frames (codes, instruction offsets), the innermost
#: nn.Module class and the index of its ``forward`` frame, the autograd node running (backward),
#: the open ``record_function`` range. Named later, off the callback (:func:`resolve_node`).
NodeInfo = tuple[list[CodeType], list[int], Optional[type], int, Optional[str], Optional[str]]


def autograd_op() -> str | None:
    """The autograd node this thread is running (a backward pass), when torch is loaded."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        n = torch._C._current_autograd_node()
        return None if n is None else str(n.name())
    except Exception:
        return None


def grab_node_info(frame: FrameType | None) -> NodeInfo:
    """The minimum about the code creating a graph node, cheap enough for CUDA's callback thread."""
    codes, lastis, module, module_index = grab_node(frame)
    return codes, lastis, module, module_index, autograd_op(), current_range()


def resolve_node(info: NodeInfo, fallback: list[RawFrame] | None = None) -> Site:
    """The :class:`Site` of a node from what :func:`grab_node_info` kept."""
    codes, lastis, module, module_index, op, rf = info
    return resolve(list(zip(codes, lastis)), modules=[module.__name__] if module else None, autograd_op=op,
                   fallback=fallback, record_function=rf, module_index=module_index)


def wrap_record_function(cls: Any) -> bool:
    """Wrap ``record_function.__enter__/__exit__`` to keep the names of open ranges in :data:`ranges`.

    torch runs a range's callbacks in C++ with no Python trace of it, and the range object is not
    reachable from the frames of a live stack; this is the one way to name it. Idempotent; the
    wrapped methods call torch's own.
    """
    enter, exit_ = getattr(cls, "__enter__", None), getattr(cls, "__exit__", None)
    if enter is None or exit_ is None or getattr(enter, "_cgtool", False):
        return False

    def __enter__(self: Any) -> Any:
        r = enter(self)
        ranges.names.append(str(getattr(self, "name", "?")))
        return r

    def __exit__(self: Any, *exc: Any) -> Any:
        names = ranges.names
        if names:
            names.pop()
        return exit_(self, *exc)

    __enter__._cgtool = True  # type: ignore[attr-defined]
    cls.__enter__ = __enter__
    cls.__exit__ = __exit__
    return True


def track_ranges() -> None:
    """Name ``record_function`` ranges: now if torch's profiler module is loaded, else when it is."""
    mod = sys.modules.get("torch.autograd.profiler")
    if mod is not None:
        cls = getattr(mod, "record_function", None)
        if cls is not None:
            wrap_record_function(cls)
        return
    after_import("torch.autograd.profiler", lambda m: wrap_record_function(getattr(m, "record_function", None))
                 if getattr(m, "record_function", None) is not None else None)


class _AfterImport:
    """A meta-path finder that runs a function on a module right after it is first executed."""

    def __init__(self) -> None:
        self.hooks: dict[str, list[Callable[[Any], object]]] = {}
        self._busy: set[str] = set()

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.hooks or name in self._busy:
            return None
        import importlib.util

        self._busy.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, hooks = spec.loader, self.hooks.pop(name)

        class _Loader:
            """The module's own loader, and the hook after its ``exec_module``."""

            def __getattr__(self, attr: str) -> Any:  # get_source, get_filename, ... as the original
                return getattr(loader, attr)

            def create_module(self, s: Any) -> Any:
                return loader.create_module(s)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                for hook in hooks:
                    try:
                        hook(module)
                    except Exception:  # the recorder's hooks are a courtesy: never break the program's import
                        pass

        spec.loader = _Loader()  # type: ignore[assignment]  # duck-typed: the original, plus the hook
        return spec


_after = _AfterImport()


def after_import(name: str, fn: Callable[[Any], object]) -> None:
    """Run ``fn(module)`` once ``name`` has been imported (by anyone)."""
    _after.hooks.setdefault(name, []).append(fn)
    if _after not in sys.meta_path:
        sys.meta_path.insert(0, _after)


def on_import(name: str, fn: Callable[[Any], object]) -> None:
    """Run ``fn(module)`` now if ``name`` is imported, else once it is."""
    mod = sys.modules.get(name)
    if mod is not None:
        try:
            fn(mod)
        except Exception:
            pass
    else:
        after_import(name, fn)


# ------------------------------------------------------------------------- CUDA graph trees
#: ids of torch.compile's CUDA graph trees functions that hold a capture's inputs on the stack
#: (``CUDAGraphNode._record``'s ``inputs``, ``CUDAGraphTreeManager.record_function``'s
#: ``new_inputs``, ``deferred_cudagraphify``'s ``int_key``): the capture-begin callback looks for
#: them to record the shapes a graph was recorded for (``tracker.capture_shapes``). Empty until the
#: program imports cudagraph trees.
_TREE_CODES: set[int] = set()
_TREE_KEEP: list[CodeType] = []


def tree_codes() -> set[int]:
    return _TREE_CODES


def _register_trees(mod: Any) -> None:
    found: list[CodeType] = []
    for cls, meth in (("CUDAGraphNode", "_record"), ("CUDAGraphTreeManager", "record_function")):
        fn = getattr(getattr(mod, cls, None), meth, None)
        if fn is not None and hasattr(fn, "__code__"):
            found.append(fn.__code__)
    for name in ("cudagraphify_impl", "cudagraphify"):
        fn = getattr(mod, name, None)
        code = getattr(fn, "__code__", None)
        if code is not None:
            found += [c for c in code.co_consts if isinstance(c, CodeType) and c.co_name == "deferred_cudagraphify"]
    found = [c for c in found if id(c) not in _TREE_CODES]
    _TREE_KEEP.extend(found)  # kept alive, so that their ids stay theirs
    _TREE_CODES.update(id(c) for c in found)


def track_trees() -> None:
    """Know cudagraph trees' capture functions: now if torch imported them, else when it does."""
    on_import("torch._inductor.cudagraph_trees", _register_trees)
