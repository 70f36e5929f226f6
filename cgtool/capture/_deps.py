"""Importing the optional capture-side packages, with errors that name the extra to install."""

from __future__ import annotations

import contextlib
import sys
from types import ModuleType
from typing import Any, Iterator

from cgtool.errors import CaptureError, MissingExtraError


def cuda_available() -> bool:
    """Whether torch is installed and sees a CUDA device (False without torch)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def require_torch(what: str = "This command") -> ModuleType:
    try:
        import torch
    except ImportError:
        raise MissingExtraError(what, detail="torch") from None
    return torch


def require_cuda(what: str = "This command") -> ModuleType:
    """torch with a usable CUDA device, or a CaptureError saying what is missing."""
    torch = require_torch(what)
    if not torch.cuda.is_available():
        build = torch.version.cuda
        why = (
            "this torch build has no CUDA support (a CPU build); install a CUDA build of torch"
            if build is None
            else f"torch (CUDA {build}) finds no CUDA device: check `nvidia-smi` and CUDA_VISIBLE_DEVICES"
        )
        raise CaptureError(
            f"{what} needs a CUDA GPU, but {why}. Analysis commands (deps, topo, dot, diff, "
            "bench --compare) work from files without a GPU."
        )
    return torch


@contextlib.contextmanager
def no_ldconfig() -> Iterator[None]:
    """Around an import of NVIDIA's Python packages: ``ctypes.util.find_library("dl")`` answers
    glibc's soname without running ``/sbin/ldconfig -p``.

    cuda.pathfinder (which cuda.bindings and cupti-python import) asks ``find_library`` for libdl
    when it is imported, and falls back to ``"libdl.so.2"``; ``find_library`` runs ldconfig as a
    child process to answer. Under ``cgtool record`` that child is a process of the program's tree
    that cgtool itself started. The answer given here is pathfinder's own fallback (the soname
    ldconfig lists on glibc), so what it loads does not change; other names go to ``find_library``.
    """
    if not sys.platform.startswith("linux"):
        yield
        return
    import ctypes.util

    real = ctypes.util.find_library

    def find_library(name: str) -> str | None:
        return "libdl.so.2" if name == "dl" else real(name)

    ctypes.util.find_library = find_library
    try:
        yield
    finally:
        if ctypes.util.find_library is find_library:
            ctypes.util.find_library = real


def require_bindings(what: str = "This command") -> tuple[ModuleType, ModuleType]:
    """(cuda.bindings.runtime, cuda.bindings.driver)."""
    try:
        with no_ldconfig():
            from cuda.bindings import driver, runtime
    except ImportError:
        raise MissingExtraError(what, detail="cuda-bindings (the cuda-python package)") from None
    return runtime, driver


def optional_cupti() -> Any | None:
    """The ``cupti`` module of cupti-python, or None when it is not installed or cannot load."""
    try:
        with no_ldconfig():
            from cupti import cupti
    except Exception:  # ImportError, or a library mismatch raised at load time
        return None
    return cupti


def require_cupti(what: str) -> Any:
    cupti = optional_cupti()
    if cupti is None:
        raise MissingExtraError(
            what,
            detail="cupti-python (take the version that matches your CUDA's CUPTI, e.g. "
            "`pip install 'cupti-python==13.0.*'` for CUDA 13.0)",
        )
    return cupti


def check(result: Any, call: str) -> Any:
    """Unwrap a cuda.bindings ``(err, *values)`` tuple, raising CaptureError on failure."""
    if isinstance(result, tuple):
        err, *values = result
    else:
        err, values = result, []
    if int(err) != 0:
        name = getattr(err, "name", str(err))
        raise CaptureError(f"{call} failed with {name} ({int(err)}).")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)
