"""Kernel names: demangling and shortening for people to read.

Demangling uses the C++ runtime's ``__cxa_demangle`` through ctypes when the platform has
libstdc++ (every Linux machine that runs torch does); otherwise names stay mangled.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
from functools import lru_cache

_demangler: object = None  # the __cxa_demangle function, False when unavailable, None untried


def _load_demangler() -> object:
    global _demangler
    if _demangler is None:
        _demangler = False
        for name in ("stdc++", "c++"):
            path = ctypes.util.find_library(name) or (f"lib{name}.so.6" if name == "stdc++" else None)
            if not path:
                continue
            try:
                lib = ctypes.CDLL(path)
                fn = lib.__cxa_demangle
            except (OSError, AttributeError):
                continue
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
            _demangler = fn
            break
    return _demangler


_libc = ctypes.CDLL(None) if hasattr(ctypes, "CDLL") else None


@lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """The demangled C++ name, or ``name`` unchanged when it is not mangled or cannot be."""
    if not name.startswith("_Z"):
        return name
    fn = _load_demangler()
    if not fn or _libc is None:
        return name
    status = ctypes.c_int(0)
    ptr = fn(name.encode(), None, None, ctypes.byref(status))  # type: ignore[operator]
    if status.value != 0 or not ptr:
        return name
    try:
        return ctypes.string_at(ptr).decode(errors="replace")
    finally:
        _libc.free(ctypes.c_void_p(ptr))


_ARGS = re.compile(r"\([^()]*\)\s*$")


def _strip_templates(s: str) -> str:
    out, depth = [], 0
    for ch in s:
        if ch == "<":
            depth += 1
            if depth == 1:
                out.append("<…>")
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


@lru_cache(maxsize=65536)
def short_name(name: str, width: int = 60) -> str:
    """A readable kernel name: demangled, without the parameter list, templates collapsed,
    namespaces dropped, cut to ``width`` characters.

    ``void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>(int, ...)``
    becomes ``vectorized_elementwise_kernel<…>``.
    """
    s = demangle(name)
    s = _ARGS.sub("", s)  # parameter list
    if s.startswith("void "):
        s = s[5:]
    s = _strip_templates(s)
    # Drop namespaces: keep the part after the last '::' that is outside templates.
    s = s.rsplit("::", 1)[-1]
    s = s.strip() or name
    return s if len(s) <= width else s[: width - 1] + "…"
