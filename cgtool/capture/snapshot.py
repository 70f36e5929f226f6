"""The caching allocator's snapshot without the import torch's snapshot makes on the way.

One place for every snapshot cgtool takes in a user's process: the engine's input liveness
(``capture/liveness.py``), ``cgtool record``'s input checks and its memory ledger
(``capture/record/inputs.py``, ``ledger.py``)."""

from __future__ import annotations

import sys
import threading
import types
from typing import Any


class _InductorPlaceholder(types.ModuleType):
    """``torch._inductor`` while :func:`allocator_snapshot` runs in a process that never loaded it.

    The snapshot's symbolizer asks ``hasattr(torch, "_inductor")`` and then
    ``hasattr(torch._inductor, "codecache")``; to the snapshotting thread this answers no to the second
    (no Inductor code ran, so no generated frames to expand). Any other thread that meets it in that
    window gets the real module's attributes (imported then, as torch's own lazy ``__getattr__`` would)."""

    def __init__(self, torch: Any) -> None:
        super().__init__("torch._inductor")
        self._cgtool_torch = torch
        self._cgtool_thread = threading.get_ident()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_cgtool_") or threading.get_ident() == self.__dict__.get("_cgtool_thread"):
            raise AttributeError(name)
        import importlib

        return getattr(importlib.import_module("torch._inductor"), name)


def allocator_snapshot(torch: Any) -> dict[str, Any]:
    """``torch.cuda.memory._snapshot()``, without importing ``torch._inductor`` into the program.

    The snapshot turns each recorded Python stack into frames (torch's
    ``torch/csrc/profiler/python/combined_traceback.cpp``, ``appendSymbolized``), and first asks
    ``hasattr(torch, "_inductor")`` to find the frames of Inductor's generated code. ``torch`` answers
    attributes it lacks with its module ``__getattr__``, which imports its lazy submodules
    (``_dynamo``, ``_inductor``, ...): in a program that never compiled, the first snapshot imported
    Inductor (Dynamo, sympy, ...), seconds inside the first graph's instantiation, and changed the
    program's modules. While ``torch._inductor`` is not loaded, a placeholder
    (:class:`_InductorPlaceholder`) stands in for it during the call, then goes."""
    d = vars(torch)
    if "_inductor" in d or "torch._inductor" in sys.modules:
        return torch.cuda.memory._snapshot()  # type: ignore[no-any-return]
    stand_in = _InductorPlaceholder(torch)
    d["_inductor"] = stand_in
    try:
        return torch.cuda.memory._snapshot()  # type: ignore[no-any-return]
    finally:
        if d.get("_inductor") is stand_in:  # an import of the real one meanwhile replaced it: keep that
            del d["_inductor"]
