"""The ways out of a recorded process, each of which finishes the recording first.

* the interpreter's normal end (the program returned, ``sys.exit``, an uncaught exception): an
  ``atexit`` function finishes with the code the process reported (``sys.exit``'s argument, 1 after
  an uncaught exception, 130 after Ctrl-C, else 0);
* ``os._exit(n)`` (what multiprocessing's children end with): wrapped, finishes with ``n``;
* SIGTERM while its handler is the default one: finishes, then dies of the signal as it would have;
* ``os.exec*`` (the process becomes another program): finishes first (a Python program it becomes
  starts its own recording under the same pid).

Fatal signals (SIGKILL, SIGSEGV) cannot be caught: what the writer already wrote stays (graph files,
and the index refreshed every ``index_refresh_s``), the rest of the last second is lost. The exit
code a process reports about itself can be wrong when a program catches its own ``SystemExit``; the
parent's view (``wait``) is kept beside it where one is seen (``tree.py``).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import Any, Callable

Finish = Callable[[int | None, str], None]


class ExitState:
    """The exit code the process reported about itself, as far as it can be seen from inside."""

    def __init__(self) -> None:
        self.code: int | None = None
        self.how = "end"
        self.finishing = False  # a finish is running (a signal handler may interrupt it)
        self.pending: int | None = None  # a signal that came during it, acted on once it is done


#: Signals that only ever come from outside (kill, a terminal, torchrun, multiprocessing's
#: terminate()): a thread of the recorder blocks them (:func:`signals_to_other_threads`). The ones a
#: thread causes itself (a fault, abort(), a write to a closed pipe) stay its own.
_SYNCHRONOUS = {"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGTRAP", "SIGSYS", "SIGABRT", "SIGPIPE",
                "SIGKILL", "SIGSTOP"}


def signals_to_other_threads() -> None:
    """Block, in the calling thread (one of the recorder's own), every signal that comes from outside.

    The kernel gives a signal sent to the process to any one thread that does not block it. Python
    runs its handlers only in the main thread, when it next runs Python code: a signal taken by a
    recorder thread while the main thread waits in C (``sem_wait`` under a multiprocessing lock,
    ``waitpid``) sets the handler's flag and nothing more, and the wait goes on. multiprocessing's
    ``Pool.terminate()`` then waited forever on a recorded pool worker blocked in its queue's lock,
    whose SIGTERM the recorder's writer thread had taken (where the worker without the recorder dies
    of it: it has no handler). With every recorder thread blocking them, such signals reach the main
    thread, or a thread of the program's own, as they would without the recorder."""
    block_outside_signals()


def block_outside_signals() -> set[Any] | None:
    """Block the signals that come from outside in the calling thread: the mask it had (None where
    there is no ``pthread_sigmask``), for :func:`restore_signal_mask`."""
    try:
        mask = {s for s in signal.valid_signals() if getattr(s, "name", "") not in _SYNCHRONOUS}
        return set(signal.pthread_sigmask(signal.SIG_BLOCK, mask))
    except (AttributeError, OSError, ValueError):  # no pthread_sigmask (not POSIX): as before
        return None


def restore_signal_mask(old: set[Any] | None) -> None:
    """The calling thread's mask back as :func:`block_outside_signals` found it: a signal that came
    meanwhile is delivered now."""
    if old is None:
        return
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    except (AttributeError, OSError, ValueError):
        pass


def exit_code_of(c: object) -> int:
    """What Python makes of ``sys.exit(c)``: None -> 0, an int as is, anything else printed -> 1."""
    if c is None:
        return 0
    if isinstance(c, int) and not isinstance(c, bool):
        return c
    return 1


def install(finish: Finish, *, exec_hook: bool = True) -> ExitState:
    """Wrap the exits of this process so that each calls ``finish(code, how)`` first (``finish``
    acts once, and only in the process whose recording it is: a fork's child has its own)."""
    state = ExitState()
    real_exit = os._exit
    def guarded(code: int | None, how: str) -> None:
        state.finishing = True
        try:
            inner(code, how)
        finally:
            state.finishing = False

    inner, finish = finish, guarded

    real_sys_exit = sys.exit
    real_hook = sys.excepthook

    def _exit(code: int) -> None:
        try:
            finish(code, "os._exit")
        except BaseException:
            pass
        real_exit(code)

    def _sys_exit(code: object = None) -> None:
        state.code, state.how = exit_code_of(code), "sys.exit"
        real_sys_exit(code)  # type: ignore[arg-type]

    def _hook(tp: Any, value: Any, tb: Any) -> None:
        if issubclass(tp, KeyboardInterrupt):
            state.code, state.how = 130, "KeyboardInterrupt"
        else:
            state.code, state.how = 1, f"uncaught {tp.__name__}"
        real_hook(tp, value, tb)

    def _at_exit() -> None:
        finish(state.code if state.code is not None else 0, state.how)
        if state.pending is not None:  # a SIGTERM came while finishing: die of it, as without the recorder
            signal.signal(state.pending, signal.SIG_DFL)
            os.kill(os.getpid(), state.pending)

    os._exit = _exit  # type: ignore[assignment]
    sys.exit = _sys_exit  # type: ignore[assignment]
    sys.excepthook = _hook
    atexit.register(_at_exit)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def _term(signum: int, frame: Any) -> None:
            if state.finishing:  # it interrupted the finish (e.g. multiprocessing's terminate() during
                state.pending = signum  # a worker's os._exit): let that finish, which then exits
                return
            try:
                finish(128 + signum, "SIGTERM")
            finally:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, _term)
    if exec_hook:
        _wrap_exec(finish, state)
    return state


def _wrap_exec(finish: Finish, state: ExitState) -> None:
    """``os.execv`` and ``os.execve`` (every ``os.exec*`` ends in one of them) finish first."""
    for name in ("execv", "execve"):
        real = getattr(os, name, None)
        if real is None or getattr(real, "_cgtool", False):
            continue

        def wrapped(*args: Any, _real: Any = real) -> Any:
            try:
                finish(None, "exec " + " ".join(map(str, list(args[1])[:8])))
            except BaseException:
                pass
            if state.pending is not None:  # a SIGTERM came while finishing: it ends the process, not exec
                signal.signal(state.pending, signal.SIG_DFL)
                os.kill(os.getpid(), state.pending)
            return _real(*args)

        wrapped._cgtool = True  # type: ignore[attr-defined]
        setattr(os, name, wrapped)
