"""Compiled code attributed to the model: Inductor's kernels -> the model lines and nn.Module paths.

Inductor's output code names, above each kernel launch, the FX nodes it fused (``# Topologically
Sorted Source Nodes: [linear, gelu]``). The FX graph Inductor compiled holds, per node, the model
line it was traced from (``node.meta["stack_trace"]``) and the modules it ran in
(``node.meta["nn_module_stack"]``). The two meet here: while ``_compile_fx_inner`` compiles a graph
(fresh, or loaded from Inductor's FX graph cache), the output code module it loads
(``PyCodeCache.load_by_key_path``) is mapped to that graph's nodes, and :func:`model_sites` answers
``(output code file, node names) -> [{file, line, function, module_path, module_type}]`` for the
writer (``attribution.resolve``).

Work happens at compile time only (one pass over the graph's nodes per compiled graph); nothing is
added to a capture or a replay. What cannot be seen: code that comes from AOTAutograd's cache
whole (``_compile_fx_inner`` does not run), and torch releases whose Inductor lacks these two
functions (``tests/test_record_torch_hooks.py`` checks the installed torch has them): the nodes then
carry Inductor's op names alone, as before.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from typing import Any

from cgtool.capture.record import attribution

_MAX_FILES = 4096
#: output code file (absolute) -> FX node name -> where it came from
_BY_FILE: dict[str, dict[str, dict[str, Any]]] = {}
_local = threading.local()
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _compiling() -> list[Any]:
    st: list[Any] | None = getattr(_local, "gms", None)
    if st is None:
        st = _local.gms = []
    return st


def module_path(path: str) -> str:
    """dynamo's module path (``L['self'].model.layers[0]._modules['self_attn']``) as the model
    names it (``model.layers.0.self_attn``)."""
    s = path.strip()
    while True:  # getattr(X, 'a') -> X.a, innermost first
        t = re.sub(r"getattr\(([^(),]+), '([^']+)'\)", r"\1.\2", s)
        if t == s:
            break
        s = t
    s = re.sub(r"^(L|G)\['[^']*'\]", "", s)
    s = re.sub(r"\._modules\['([^']+)'\]", r".\1", s)
    s = re.sub(r"\[(\d+)\]", r".\1", s)
    s = re.sub(r"\['([^']+)'\]", r".\1", s)
    return s.strip(".")


def node_site(meta: Any) -> dict[str, Any] | None:
    """The model line and module of one FX node, from its ``meta``; None when it has neither."""
    out: dict[str, Any] = {}
    st = meta.get("stack_trace") if hasattr(meta, "get") else None
    if isinstance(st, str):
        frames = _FRAME.findall(st)
        if frames:
            f, line, fn = frames[-1]  # the innermost: the model's own line
            out.update(file=f, line=int(line), function=fn)
    nms = meta.get("nn_module_stack") if hasattr(meta, "get") else None
    if isinstance(nms, dict) and nms:
        entry = list(nms.values())[-1]  # the innermost module
        if isinstance(entry, (tuple, list)) and entry:
            out["module_path"] = module_path(str(entry[0])) or None
            t = entry[1] if len(entry) > 1 else None
            out["module_type"] = getattr(t, "__name__", None) or (str(t).rsplit(".", 1)[-1].strip("'>") if t else None)
    return out or None


def _source_name(meta: Any) -> str | None:
    """The name Inductor's ``Source Nodes`` comment gives a node: its first ``from_node`` (the traced
    graph's node it came from: a ``NodeSource``, or a ``(name, target)`` pair in older torch)."""
    fn = meta.get("from_node") if hasattr(meta, "get") else None
    if not fn:
        return None
    first = fn[0]
    name = getattr(first, "name", None)
    if name is None and isinstance(first, (tuple, list)) and first:
        name = first[0]
    return str(name) if name is not None else None


def note_graph(output_file: str, gm: Any) -> None:
    """Map ``output_file``'s FX node names (and the names its ``Source Nodes`` comments use) to the
    model sites of ``gm``'s nodes."""
    nodes: dict[str, dict[str, Any]] = {}
    for n in getattr(getattr(gm, "graph", None), "nodes", ()):
        meta = getattr(n, "meta", {}) or {}
        site = node_site(meta)
        if site is not None:
            nodes.setdefault(str(n.name), site)
            src = _source_name(meta)
            if src is not None:
                nodes.setdefault(src, site)
    if len(_BY_FILE) >= _MAX_FILES:
        _BY_FILE.clear()
    _BY_FILE[os.path.abspath(output_file)] = nodes


def model_sites(filename: str, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The distinct model sites of the named FX nodes of output code ``filename``, in name order."""
    nodes = _BY_FILE.get(os.path.abspath(filename))
    if not nodes:
        return []
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for name in names:
        site = nodes.get(name)
        if site is None:
            continue
        key = (site.get("file"), site.get("line"), site.get("module_path"))
        if key not in seen:
            seen.add(key)
            out.append({"node": name, **site})
    return out


def _hook_compile_fx(mod: Any) -> None:
    real = getattr(mod, "_compile_fx_inner", None)
    if real is None or getattr(real, "_cgtool", False):
        return

    @functools.wraps(real)
    def _compile_fx_inner(gm: Any, *args: Any, **kwargs: Any) -> Any:
        st = _compiling()
        st.append(gm)
        try:
            return real(gm, *args, **kwargs)
        finally:
            st.pop()

    _compile_fx_inner._cgtool = True  # type: ignore[attr-defined]
    mod._compile_fx_inner = _compile_fx_inner


def _hook_codecache(mod: Any) -> None:
    cls = getattr(mod, "PyCodeCache", None)
    real = getattr(cls, "load_by_key_path", None)
    if cls is None or real is None or getattr(real, "_cgtool", False):
        return

    def load_by_key_path(klass: Any, key: str, path: str, *args: Any, **kwargs: Any) -> Any:
        m = real(key, path, *args, **kwargs)
        st = _compiling()
        if st:
            try:
                note_graph(getattr(m, "__file__", None) or path, st[-1])
            except Exception:  # attribution is a courtesy: never break the program's compile
                pass
        return m

    load_by_key_path._cgtool = True  # type: ignore[attr-defined]
    cls.load_by_key_path = classmethod(load_by_key_path)


def track_compiled_code() -> None:
    """Hook Inductor (now if torch loaded it, else when it does) and let attribution ask."""
    attribution.model_sites = model_sites
    attribution.on_import("torch._inductor.compile_fx", _hook_compile_fx)
    attribution.on_import("torch._inductor.codecache", _hook_codecache)
