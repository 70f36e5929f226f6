"""The program's own ``torch.profiler`` while it is recorded.

CUPTI takes one subscriber per process, and torch's profiler (Kineto) needs CUPTI for GPU activity.
When the recorded program starts a profiler that asks for CUDA activity, the recorder steps aside
so that the program keeps working as it would without the recorder: it unsubscribes before
torch's ``_prepare_profiler`` / ``_enable_profiler`` run, and notes when, where (the program's line)
and why in the process's ``index.json`` (``suspended``). From then on nothing is recorded: graphs
captured while the profiler runs are not in the recording, and the replays of graphs alive then
are counted up to the suspension only (``replays_complete: false``). When the profiler stops
(``_disable_profiler``), the recorder subscribes again if CUPTI is free, and says so
(``resumed_at_s``) or why not (``not_resumed``: Kineto may keep CUPTI until the process ends).

A profiler asking for CPU activity only needs no CUPTI: the recording goes on.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from cgtool.capture.record import attribution

_recorder: Any = None
MODULE = "torch.autograd.profiler"


def watch(rec: Any) -> None:
    """Suspend ``rec`` when the program starts a GPU profiler (now if torch's profiler module is
    loaded, else when it is)."""
    global _recorder
    _recorder = rec
    attribution.on_import(MODULE, wrap)


def _wants_gpu(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    acts = args[1] if len(args) > 1 else kwargs.get("activities", ())
    try:
        return any(getattr(a, "name", str(a)).upper().endswith(("CUDA", "GPU")) for a in acts or ())
    except TypeError:
        return True  # not a set of activities: assume the profiler wants CUPTI


def _site() -> str | None:
    s = attribution.resolve(attribution.grab(sys._getframe(2)))
    return f"{s.file}:{s.line}" if s.file else None


def wrap(mod: Any) -> None:
    """Wrap ``mod``'s (torch.autograd.profiler's) profiler entry points; idempotent."""
    for name in ("_prepare_profiler", "_enable_profiler"):
        real = getattr(mod, name, None)
        if real is None or getattr(real, "_cgtool", False):
            continue

        def starting(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            rec = _recorder
            if rec is not None and _wants_gpu(args, kwargs):
                try:
                    rec.suspend("the program started torch.profiler with CUDA activity (CUPTI takes one "
                                "subscriber per process)", _site())
                except Exception:
                    pass
            return _real(*args, **kwargs)

        try:
            functools.update_wrapper(starting, real)
        except (AttributeError, TypeError):
            pass
        starting._cgtool = True  # type: ignore[attr-defined]
        setattr(mod, name, starting)
    real_stop = getattr(mod, "_disable_profiler", None)
    if real_stop is not None and not getattr(real_stop, "_cgtool", False):
        def stopping(*args: Any, **kwargs: Any) -> Any:
            out = real_stop(*args, **kwargs)
            rec = _recorder
            if rec is not None:
                try:
                    rec.resume()
                except Exception:
                    pass
            return out

        stopping._cgtool = True  # type: ignore[attr-defined]
        setattr(mod, "_disable_profiler", stopping)
