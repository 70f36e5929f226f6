"""Where a recorded process stood when it was stopped, or when it stopped making progress.

* **Signals.** SIGTERM, SIGINT, SIGHUP and SIGQUIT (the user's Ctrl-C, a timeout, torchrun stopping
  its workers) make the process write the Python stacks of all its threads into ``stacks.txt`` of
  its folder before the signal takes its course; so do fatal errors (SIGSEGV, SIGABRT, ...), under a
  ``Fatal Python error`` line. :mod:`faulthandler` writes them from the C signal handler, so a main
  thread stuck in C code (NCCL) that holds the GIL is still seen. Registered after the recorder's
  own SIGTERM handler (``exits.py``), which still runs afterwards; kept to the process's very end
  (a hang in the interpreter's teardown, after the recording finished, is dumped too). A handler
  the program installs itself later (``signal.signal``) replaces the dump for that signal.
* **No progress** (``--hang-after S``): a thread re-arms :func:`faulthandler.dump_traceback_later`
  whenever the process makes progress (a graph captured, instantiated or launched); S seconds
  without any write the stacks under a ``Timeout (0:00:S)!`` line, and the process runs on.
  torchrun's agent is not watched until it makes a graph (:func:`is_launcher`): its ranks are.
* **``torch.distributed.destroy_process_group()``** is wrapped: before the real call, the graphs
  still alive that hold NCCL kernels are noted and the index is written at once, so a teardown that
  hangs there (an NCCL communicator destroyed under a live graph that holds its kernels,
  pytorch#115388) leaves its cause in the recording even when the process is killed.

The process's index carries :meth:`Stops.block` (``artifacts/recording.Stopping``) under ``stopping``; the text file is read by
``cgtool/artifacts/stacks.py``. Eager collectives are not wrapped (torch.compile's tracing of
``dist.all_reduce`` keys on the function itself): the last collective known is the last NCCL kernel
of the last graph launched.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from typing import IO, Any

import msgspec

from cgtool.artifacts.recording import DestroyCall, LastGraph, NcclGraph, Stopping
from cgtool.capture.record.exits import signals_to_other_threads

#: The signals whose arrival writes the stacks.
SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
#: The file of a process's folder the stacks go to (faulthandler's text, appended).
STACK_FILE = "stacks.txt"


def thread_id(ident: int | None) -> str | None:
    """A thread's id as faulthandler prints it (``Thread 0x00007f...``)."""
    return None if ident is None else f"0x{ident:016x}"


def nccl_kernels(doc: dict[str, Any] | None) -> list[str]:
    """The NCCL kernels of a graph export, in node order."""
    if not doc:
        return []
    return [str(n.get("kernel_name")) for n in doc.get("nodes") or []
            if "nccl" in str(n.get("kernel_name") or "").lower()]


#: torch's launchers: their workers are the ranks, each watched itself; the launcher never launches a graph.
LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")


#: Python's options that take a value as the next argument (``-X dev``, ``-W error``).
_VALUE_OPTIONS = ("-X", "-W", "-Q")


def is_launcher(argv: list[str] | None = None) -> bool:
    """This process is torchrun's agent (``torchrun ...``, ``python -m torch.distributed.run ...``),
    from the interpreter's own command line (``sys.orig_argv``): ``sys.argv`` and ``__main__`` only
    say so once ``-m``'s module has been imported, seconds after the recorder started (torch)."""
    args = list(getattr(sys, "orig_argv", sys.argv)) if argv is None else argv
    i = 1
    while i < len(args):
        a = args[i]
        if a == "-m":
            return i + 1 < len(args) and args[i + 1] in LAUNCHERS
        if a.startswith("-m") and len(a) > 2:
            return a[2:] in LAUNCHERS
        if a in _VALUE_OPTIONS:
            i += 2
            continue
        if a.startswith("-") and a != "-":
            i += 1
            continue
        path = a.replace(os.sep, "/")  # the script: the console script, or the module's file
        return os.path.basename(path) == "torchrun" or path.endswith(("torch/distributed/run.py",
                                                                      "torch/distributed/launch.py"))
    return False


def drop_empty_stack_files(out: str | os.PathLike[str]) -> int:
    """Remove the ``stacks.txt`` that stayed empty in the process folders of a recording (run by the
    launcher once the program's processes have ended: a process must open the file before any signal,
    so every recorded process has one until then); how many went. A process still running then (past
    the launcher's grace time) keeps writing to its open file, which no longer has a name."""
    n = 0
    try:
        folders = [e.path for e in os.scandir(out) if e.is_dir() and e.name.startswith("p")]
    except OSError:
        return 0
    for d in folders:
        p = os.path.join(d, STACK_FILE)
        try:
            if os.stat(p).st_size == 0:
                os.unlink(p)
                n += 1
        except OSError:  # none there, or already gone
            continue
    return n


class Stops:
    """One process's stack dumps, its watchdog and what it noted on the way to a stop."""

    def __init__(self, rec: Any, hang_after_s: int | None) -> None:
        # rec: the process's recorder.Recorder (which imports this module): its out_dir, tracker, writer
        self.rec = rec
        self.hang_after_s = hang_after_s
        self.file: IO[str] | None = None
        self.signals: list[str] = []  # what writes the stacks: signal names, "fatal"
        self.destroy: DestroyCall | None = None
        self.hangs = 0  # stalls the watchdog thread saw (the file holds what faulthandler wrote)
        self._counts: dict[int, int] = {}
        self._last: LastGraph | None = None
        self._token: tuple[int, int, int] | None = None
        self._progress_at = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._launcher = is_launcher()

    # ------------------------------------------------------------------ setup
    def install(self) -> None:
        """Register the dumps (after the recorder's own signal handlers) and start the watchdog."""
        try:
            # open to the process's end: faulthandler writes to its descriptor from a signal handler
            self.file = open(os.path.join(self.rec.out_dir, STACK_FILE), "a")  # noqa: SIM115
        except OSError:
            return
        for name in SIGNALS:
            sig = getattr(signal, name, None)
            if sig is None or signal.getsignal(sig) is signal.SIG_IGN:  # ignored stays ignored (nohup)
                continue
            try:
                faulthandler.register(sig, file=self.file, all_threads=True, chain=True)
                self.signals.append(name)
            except (OSError, ValueError, RuntimeError):
                continue
        if not faulthandler.is_enabled():  # the program's own (or pytest's) stays as it is
            try:
                faulthandler.enable(file=self.file, all_threads=True)
                self.signals.append("fatal")
            except (OSError, ValueError, RuntimeError):
                pass
        from cgtool.capture.record import attribution

        attribution.on_import("torch.distributed", self.wrap_destroy)
        if self.hang_after_s:
            self._thread = threading.Thread(target=self._watch, name="cgtool-record-watchdog", daemon=True)
            self._thread.start()

    def after_fork_child(self) -> None:
        """A fork's child dumps into its own folder (and watches itself)."""
        self.destroy, self.hangs, self._counts, self._last, self._token = None, 0, {}, None, None
        self.signals = []
        self._launcher = False  # a fork of torchrun's agent is one of its workers
        self._stop = threading.Event()
        self.install()

    def close(self) -> None:
        """At the end of the recording: the watchdog thread stops. The dumps stay registered, and the
        armed timer stays, to the process's end (its teardown can hang too)."""
        self._stop.set()

    # ------------------------------------------------------------------ progress
    def observe(self) -> None:
        """Note which graph's replay count rose last (called by the watchdog and at each index write)."""
        tr = self.rec.tracker
        try:
            with tr.lock:
                counts = tr.all_launches()
                live = {h: r for h, r in tr.by_exec.items()}
        except Exception:  # noqa: BLE001  (on the watchdog thread and in index writes: never stop the program)
            return
        for h, c in counts.items():
            if c != self._counts.get(h, 0) and h in live:
                r = live[h]
                self._last = LastGraph(seq=r.seq, label=r.label, exec_graph_id=r.exec_graph_id, replays=c,
                                       captured_at=r.captured_at, seen_at_s=round(time.perf_counter() - tr.t0, 3))
        last = self._last
        if last is not None:
            now = next((k for k, r in live.items() if r.seq == last.seq), None)
            if now is not None:
                self._last = msgspec.structs.replace(last, replays=counts.get(now, last.replays))
        self._counts = counts

    def _progress_token(self) -> tuple[int, int, int]:
        tr = self.rec.tracker
        return (sum(self._counts.values()), len(tr.graphs), len(tr.captures))

    def _watch(self) -> None:
        signals_to_other_threads()
        assert self.hang_after_s
        s = float(self.hang_after_s)
        poll = min(0.5, s / 4)
        f = self.file
        stalled = False
        if f is None:
            return
        while not self._stop.wait(poll):
            self.observe()
            token = self._progress_token()
            if token == (0, 0, 0) and self._launcher:
                continue  # torchrun's agent waits for its ranks, which are watched themselves
            if token != self._token:
                self._token, self._progress_at, stalled = token, time.monotonic(), False
                faulthandler.dump_traceback_later(s, repeat=False, file=f)  # re-armed: S from now
            elif not stalled and time.monotonic() - self._progress_at >= s:
                stalled = True  # faulthandler's thread has written the stacks; the index says so
                self.hangs += 1
                w = self.rec.writer
                if w is not None:
                    w.mark_dirty()

    # ------------------------------------------------------------------ destroy_process_group
    def wrap_destroy(self, mod: Any) -> None:
        """``torch.distributed.destroy_process_group``, noted before it runs."""
        real = getattr(mod, "destroy_process_group", None)
        if real is None or getattr(real, "_cgtool", False):
            return
        stops = self

        def destroy_process_group(*args: Any, **kw: Any) -> Any:
            try:
                stops.before_destroy(sys._getframe(1))
            except Exception as e:  # noqa: BLE001  (the program's own call runs, whatever noting it met)
                stops.destroy = DestroyCall(note_failed=f"{type(e).__name__}: {e}")
            out = real(*args, **kw)
            if stops.destroy is not None:
                stops.destroy = msgspec.structs.replace(stops.destroy, returned=True)
                if stops.rec.writer is not None:
                    stops.rec.writer.mark_dirty()
            return out

        destroy_process_group._cgtool = True  # type: ignore[attr-defined]
        destroy_process_group.__wrapped__ = real  # type: ignore[attr-defined]
        destroy_process_group.__doc__ = real.__doc__
        mod.destroy_process_group = destroy_process_group
        c10d: Any = sys.modules.get("torch.distributed.distributed_c10d")
        if c10d is not None and getattr(c10d, "destroy_process_group", None) is real:
            c10d.destroy_process_group = destroy_process_group

    def before_destroy(self, frame: Any) -> None:
        rec = self.rec
        site = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else None
        w = rec.writer
        if w is not None:
            w.flush(5.0)  # the live graphs' exports (their kernel names) on disk first
        docs = w.docs if w is not None else {}
        tr = rec.tracker
        with tr.lock:
            live = sorted(tr.by_exec.values(), key=lambda r: r.seq)
            counts = tr.all_launches()
        held = []
        for r in live:
            k = nccl_kernels(docs.get(r.seq))
            if k:
                held.append(NcclGraph(seq=r.seq, label=r.label, captured_at=r.captured_at,
                                      exec_graph_id=r.exec_graph_id, nccl_kernels=len(k), kernel=k[-1],
                                      replays=counts.get(r.exec_handle, 0)))
        self.destroy = DestroyCall(site=site, at_s=round(time.perf_counter() - tr.t0, 3), returned=False,
                                   live_graphs=len(live), live_nccl_graphs=held)
        self.observe()
        if w is not None:
            w.write_index_now(5.0)  # on disk before the call that may never return

    # ------------------------------------------------------------------ index
    def block(self) -> Stopping:
        """The index's ``stopping`` block."""
        self.observe()
        last = self._last
        if last is not None:
            w = self.rec.writer
            k = nccl_kernels((w.docs if w is not None else {}).get(last.seq)) if last.seq is not None else []
            last = msgspec.structs.replace(last, last_nccl_kernel=k[-1] if k else None)
        return Stopping(main_thread=thread_id(threading.main_thread().ident),
                        stack_file=STACK_FILE if self.file is not None else None, dumped_on=list(self.signals),
                        hang_after_s=self.hang_after_s, hangs_seen=self.hangs, last_graph=last,
                        destroy_process_group=self.destroy)
