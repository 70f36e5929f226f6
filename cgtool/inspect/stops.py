"""Where each recorded process stood when it was stopped or stalled, and the known cause of an
NCCL teardown hang: ``destroy_process_group()`` called while a graph holding NCCL kernels was alive.

Reads what ``cgtool/capture/record/stops.py`` left in each process's folder: the faulthandler dumps
of ``stacks.txt`` (``artifacts/stacks.py``) and the index's ``stopping`` block (the graph whose
replay count rose last, the ``destroy_process_group`` call and the graphs alive at it). Used by
``record``'s summary and the report of a recording (``record_summary.summarize``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import msgspec

from cgtool.artifacts.recording import DestroyCall, LastGraph, Recording, RecordingTree
from cgtool.artifacts.stacks import Dump, StoppedAt, stopped_at

#: What a user does about the teardown hang (pytorch#115388; Megatron-Bridge and TensorRT fixed theirs so).
FIX = ("reset or delete the graphs that hold NCCL kernels (g.reset(); del g), then "
       "torch.cuda.synchronize(), before dist.destroy_process_group()")


@dataclass(frozen=True)
class ProcessStop:
    """One recorded process: where its main thread stood at its last stop and last stall."""

    pid: int | None
    rank: int | None
    finished: bool | None
    exit_code: int | None
    stopped: StoppedAt | None  # at the last signal (or fatal error) dump
    stopped_cause: str | None  # "signal" | "fatal: <error>"
    stalled: StoppedAt | None  # at the last --hang-after dump
    stalls: int
    hang_after_s: float | None
    last_graph: LastGraph | None
    destroy: DestroyCall | None

    @property
    def who(self) -> str:
        pid = "?" if self.pid is None else str(self.pid)
        return f"rank {self.rank} (pid {pid})" if self.rank is not None else f"process {pid}"

    def to_json(self) -> dict[str, Any]:
        def at(s: StoppedAt | None) -> dict[str, Any] | None:
            return None if s is None else {"site": s.site, "function": s.function, "calling": s.calling,
                                           "innermost": s.innermost}
        return {"pid": self.pid, "rank": self.rank, "finished": self.finished, "exit_code": self.exit_code,
                "stopped_at": at(self.stopped), "stopped_cause": self.stopped_cause, "stalled_at": at(self.stalled),
                "stalls": self.stalls, "hang_after_s": self.hang_after_s, "last_graph": msgspec.to_builtins(self.last_graph),
                "destroy_process_group": msgspec.to_builtins(self.destroy)}


def _main(d: Dump, ident: str | None) -> StoppedAt | None:
    t = d.thread(ident)
    return stopped_at(t) if t is not None else None


def process_stop(rec: Recording, *, exit_code: int | None = None, finished: bool | None = None) -> ProcessStop | None:
    """What the recording says about how ``rec``'s process stopped; None when it says nothing (no
    dump, no destroy_process_group call, a recording made before these were recorded)."""
    st = rec.stopping
    dumps = rec.stack_dumps()
    main = st.main_thread
    stops = [d for d in dumps if d.cause != "timeout"]
    stalls = [d for d in dumps if d.cause == "timeout"]
    destroy = st.destroy_process_group
    if not dumps and destroy is None:
        return None
    last = stops[-1] if stops else None
    cause = None if last is None else ("signal" if last.cause == "signal" else f"fatal: {last.detail}")
    return ProcessStop(
        pid=rec.pid, rank=rec.rank, finished=finished if finished is not None else rec.index.finished,
        exit_code=exit_code if exit_code is not None else rec.index.exit_code,
        stopped=_main(last, main) if last is not None else None, stopped_cause=cause,
        stalled=_main(stalls[-1], main) if stalls else None, stalls=len(stalls),
        hang_after_s=st.hang_after_s, last_graph=st.last_graph, destroy=destroy)


def tree_stops(tree: RecordingTree) -> list[ProcessStop]:
    """Every recorded process that has something to say, by rank then pid."""
    out = []
    for rec in tree.recordings:
        e = next((p for p in tree.processes if p.pid is not None and p.pid == rec.pid and p.followed), None)
        s = process_stop(rec, exit_code=e.exit_code if e is not None else None,
                         finished=e.finished if e is not None else None)
        if s is not None:
            out.append(s)
    return sorted(out, key=lambda s: (s.rank if s.rank is not None else -1, s.pid or 0))


def _where(site: Any) -> str:
    if not site:
        return "?"
    path, _, line = str(site).rpartition(":")
    return f"{os.path.basename(path)}:{line}"


def _graph(g: LastGraph | None) -> str:
    if g is None:
        return "no graph launched"
    label = (g.label or f"#{g.seq}").split()[0]
    text = f"last graph {label} replay {g.replays}"
    if g.last_nccl_kernel:
        text += f" (its last collective: {_kernel(g.last_nccl_kernel)})"
    return text


def _kernel(name: str) -> str:
    return name if len(name) <= 60 else name[:59] + "…"


def findings(tree: RecordingTree) -> list[str]:
    """Sentences for the summary: per process where it stopped or stalled, then the known cause."""
    out: list[str] = []
    for s in tree_stops(tree):
        if s.stopped is not None:
            how = "" if s.stopped_cause == "signal" else f" ({s.stopped_cause})"
            out.append(f"{s.who}: stopped in {s.stopped.text()}{how}, {_graph(s.last_graph)}.")
        if s.stalled is not None:
            after = f"{s.hang_after_s:g} s" if isinstance(s.hang_after_s, (int, float)) else "the time set"
            out.append(f"{s.who}: no progress for {after} (no graph captured or launched), in {s.stalled.text()}, "
                       f"{_graph(s.last_graph)}" + (f"; {s.stalls} such stalls" if s.stalls > 1 else "") + ".")
        d = s.destroy
        held = (d.live_nccl_graphs or []) if d is not None else []
        if d is not None and held:
            names = ", ".join(f"graph {(g.label or '#' + str(g.seq)).split()[0]} (captured at "
                              f"{_where(g.captured_at)}, {g.nccl_kernels} NCCL kernel(s))" for g in held)
            if d.returned:
                out.append(f"{s.who}: dist.destroy_process_group() at {_where(d.site)} ran while {names} "
                           f"was alive; it returned here, but this order can hang NCCL's teardown (pytorch#115388): "
                           f"{FIX}.")
            else:
                out.append(f"{s.who}: dist.destroy_process_group() at {_where(d.site)} did not return: it was "
                           f"called while {names} was alive, and destroying the NCCL communicator under a live "
                           f"graph that holds its kernels hangs (pytorch#115388). Fix: {FIX}.")
    return out
