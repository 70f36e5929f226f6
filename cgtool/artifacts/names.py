"""Kernel names: demangling and shortening for people to read.

Demangling uses the C++ runtime's ``__cxa_demangle`` through ctypes when the platform has
libstdc++ (every Linux machine that runs torch does) or libc++; otherwise names stay mangled.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

_demangler: object = None  # the __cxa_demangle function, False when unavailable, None untried

#: The C++ runtimes by soname, loaded by the dynamic loader's own search. Not through
#: ``ctypes.util.find_library``: on Linux it runs ``/sbin/ldconfig -p`` as a child process, which
#: under ``cgtool record`` (the recorder demangles kernel names) is a process of the program's tree.
_CXX_RUNTIMES = ("libstdc++.so.6", "libc++.so.1", "libc++.1.dylib", "libc++.dylib")


def _load_demangler() -> object:
    global _demangler
    if _demangler is None:
        _demangler = False
        for path in _CXX_RUNTIMES:
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


def _strip_params(s: str) -> str:
    """Remove the trailing parameter list ``(...)``, respecting nested () and <>."""
    s = s.rstrip()
    if not s.endswith(")"):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        ch = s[i]
        if ch in ")>":
            depth += 1
        elif ch in "(<":
            depth -= 1
            if depth == 0:
                return s[:i] if ch == "(" else s
    return s


def _split_top(s: str) -> tuple[str, list[str]]:
    """('name', [top-level template arguments]) of ``name<a, b<c>, d>``."""
    i = s.find("<")
    if i < 0 or not s.endswith(">"):
        return s, []
    args: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in s[i + 1 : -1]:
        if ch in "<({":
            depth += 1
        elif ch in ">)}":
            depth -= 1
        if ch == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    args.append("".join(cur).strip())
    return s[:i], args


def _last_component(s: str) -> str:
    """``at::native::(anonymous namespace)::GeluFunctor<float>`` -> ``GeluFunctor``."""
    out, depth = [], 0
    for ch in s:
        if ch in "<({":
            depth += 1
        elif ch in ">)}":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    flat = "".join(out).replace("const", "").strip().rstrip("*& ")
    parts = [p for p in flat.split("::") if p and p != "(anonymous namespace)"]
    return parts[-1].strip() if parts else flat


def _functor(arg: str) -> str:
    """A readable name for a template argument that is a functor or lambda."""
    if "{lambda" in arg:  # GeluCUDAKernelImpl(at::TensorIteratorBase&, ...)::{lambda(float)#1}
        owner = arg.split("{lambda", 1)[0].rstrip(":")
        return f"{_last_component(_strip_params(owner))} lambda"
    return _last_component(arg)


@lru_cache(maxsize=65536)
def short_name(name: str, width: int = 60) -> str:
    """A readable kernel name: demangled, without the parameter list and namespaces, templates
    collapsed to the functor they apply (elementwise kernels differ only in it), cut to ``width``.

    ``void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>(int, ...)``
    becomes ``vectorized_elementwise_kernel<FillFunctor>``.
    """
    s = demangle(name).strip()
    if s.startswith("void "):
        s = s[5:]
    s = _strip_params(s)
    base, targs = _split_top(s)
    base = _last_component(base) or base
    fn = next((a for a in targs if a and not a.lstrip("-").isdigit() and not a.endswith("ul")
               and ("Functor" in a or "{lambda" in a or "Op" in a)), None)
    out = f"{base}<{_functor(fn)}>" if fn else (f"{base}<…>" if targs else base)
    out = out.strip() or name
    return out if len(out) <= width else out[: width - 1] + "…"


def template_name(name: str) -> str:
    """The demangled name without its return type and parameter list, templates kept: what
    tells apart kernels whose short names collide."""
    s = demangle(name).strip()
    return _strip_params(s[5:] if s.startswith("void ") else s) or s
