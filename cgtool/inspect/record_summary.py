"""What a `cgtool record` recording answers, per process and per capture site.

From the files alone (no torch, no GPU): per process and per capture site (the program's line where
the capture began), the graphs captured and the replays of each, the graphs never replayed and the
memory their captures took, re-recording (one site capturing graph after graph, with the input
shapes cudagraph trees recorded it for), capture time per graph, in total and as a share of the
process's wall time; with ``--trace-replays``, the host's gap before each traced replay (from the
``cudaGraphLaunch`` call to the replay's first GPU work, and the GPU's idle time since the previous
replay when it was the launch right before) with the line that launched it; and the findings as
sentences a user can act on. ``report/record_table.py`` prints it under ``cgtool record`` and
``report/html.py`` opens a recording's page on it.

Unknown is not zero: a figure the recording cannot give is None, with the reason in the findings.
"""

from __future__ import annotations

import os
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from cgtool.artifacts.recording import (CaptureInputs, CudaNote, GraphEntry, PoolBytes, ProcessEntry, ProcessIndex,
                                        Recording, RecordingTree, Suspension, TracedLaunch, helper_command, read_json,
                                        trace_path)
from cgtool.errors import InvalidInputError
from cgtool.inspect.stale_inputs import InputsCoverage, StaleInput, checked_sentence, coverage, sentence, stale_inputs

#: The share of replays "the graphs that serve traffic" must reach (the findings name the fewest
#: graphs that together served at least this share).
SERVING_SHARE = 0.9
#: Stale graph inputs said in full in the findings (the most replays first); the others are counted
#: in one line (``record --json``'s ``stale_inputs`` and the report's table list every one), so a
#: program that frees many inputs keeps its summary on one screen.
STALE_SAID = 3


@dataclass(frozen=True)
class GraphStat:
    """One graph of one process."""

    pid: int | None
    seq: int
    label: str
    site: str | None  # "file:line" where its capture began
    nodes: int
    replays: int
    replays_complete: bool
    capture_s: float | None
    instantiate_s: float | None
    reserved_during_capture: int | None  # bytes the process took from CUDA during its capture
    pool: str | None
    capture_inputs: CaptureInputs | None  # cudagraph trees: the input shapes it was recorded for

    @property
    def capture_total_s(self) -> float | None:
        if self.capture_s is None and self.instantiate_s is None:
            return None
        return (self.capture_s or 0.0) + (self.instantiate_s or 0.0)


@dataclass(frozen=True)
class SiteStat:
    """One capture site of one process: every graph captured there."""

    site: str | None
    graphs: tuple[GraphStat, ...]

    @property
    def replays(self) -> int:
        return sum(g.replays for g in self.graphs)

    @property
    def never_replayed(self) -> tuple[GraphStat, ...]:
        return tuple(g for g in self.graphs if g.replays == 0)

    @property
    def capture_s(self) -> float | None:
        known = [g.capture_total_s for g in self.graphs if g.capture_total_s is not None]
        return sum(known) if known else None

    @property
    def shapes(self) -> list[Any]:
        return [g.capture_inputs.symint_key or g.capture_inputs.inputs for g in self.graphs
                if g.capture_inputs is not None]


@dataclass(frozen=True)
class ReplayGap:
    """The host side of one traced replay."""

    pid: int | None
    seq: int  # the graph
    launch_site: str | None
    launch_to_first_kernel_us: float | None
    idle_since_previous_replay_us: float | None  # GPU idle since the previous launch's work (if traced)


@dataclass(frozen=True)
class ProcessSummary:
    pid: int | None
    parent: int | None
    rank: int | None
    argv: list[str]
    followed: bool
    exit_code: int | None
    reason: str | None
    graphs: tuple[GraphStat, ...] = ()
    sites: tuple[SiteStat, ...] = ()
    wall_s: float | None = None
    gaps: tuple[ReplayGap, ...] = ()
    skips: int = 0
    suspensions: tuple[Suspension, ...] = ()
    pools: tuple[PoolBytes, ...] = ()
    cuda: CudaNote | None = None
    helper: str | None = None  # not recorded, and a helper command that makes no CUDA graph: what it is
    stale_inputs: tuple[StaleInput, ...] = ()  # graphs that read memory the program freed (input checks)
    inputs_checked: InputsCoverage | None = None  # None: recorded without input checks
    recording: Recording | None = field(default=None, compare=False, repr=False)

    @property
    def replays(self) -> int:
        return sum(g.replays for g in self.graphs)

    @property
    def capture_s(self) -> float | None:
        known = [g.capture_total_s for g in self.graphs if g.capture_total_s is not None]
        return sum(known) if known else None

    @property
    def capture_share(self) -> float | None:
        c = self.capture_s
        return c / self.wall_s if c is not None and self.wall_s else None


@dataclass(frozen=True)
class RecordSummary:
    processes: tuple[ProcessSummary, ...]
    complete: bool
    exit_code: int | None
    program: list[str]
    findings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def graphs(self) -> list[GraphStat]:
        return [g for p in self.processes for g in p.graphs]


def _graph(pid: int | None, g: GraphEntry) -> GraphStat:
    return GraphStat(
        pid=pid, seq=g.seq, label=g.label, site=g.captured_at, nodes=g.nodes, replays=g.replays,
        replays_complete=g.replays_complete, capture_s=g.capture_s, instantiate_s=g.instantiate_s,
        reserved_during_capture=g.reserved_during_capture, pool=g.pool, capture_inputs=g.capture_inputs)


def _wall(idx: ProcessIndex) -> float | None:
    tl = idx.timeline
    start = next((t for t in (tl.boot_start, tl.program_start, tl.recorder_start) if t is not None), None)
    end = tl.program_end
    if start is not None and end is not None and end > start:
        return end - start
    return None


def replay_gaps(rec: Recording) -> list[ReplayGap]:
    """The host's gap before each traced replay, from the process's trace and its traced launches."""
    t = trace_path(rec)
    if t is None or not t.exists():
        return []
    try:
        doc = read_json(t)
    except InvalidInputError:
        return []
    launch_ts: dict[int, float] = {}
    first: dict[int, float] = {}
    last_end: dict[int, float] = {}
    for e in doc.get("traceEvents", []) if isinstance(doc, dict) else []:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        corr = (e.get("args") or {}).get("correlation")
        ts, dur = e.get("ts"), e.get("dur") or 0.0
        if not isinstance(corr, int) or not isinstance(ts, (int, float)):
            continue
        if e.get("cat") == "cuda_runtime":
            launch_ts[corr] = float(ts)
        elif e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            first[corr] = min(first.get(corr, float(ts)), float(ts))
            last_end[corr] = max(last_end.get(corr, float(ts) + dur), float(ts) + dur)
    by_seq: dict[int, int] = {}  # launch_seq -> correlation
    launches: list[tuple[int, int, TracedLaunch]] = []  # (graph seq, correlation, launch)
    for g in rec.graphs:
        for tl in g.traced_launches:
            if tl.correlation is not None:
                launches.append((g.seq, tl.correlation, tl))
                if tl.launch_seq is not None:
                    by_seq[tl.launch_seq] = tl.correlation
    out = []
    for seq, c, tl in sorted(launches, key=lambda x: x[2].launch_seq or 0):
        to_first = first[c] - launch_ts[c] if c in first and c in launch_ts else None
        prev = by_seq.get((tl.launch_seq or 0) - 1)
        idle = first[c] - last_end[prev] if prev is not None and c in first and prev in last_end else None
        out.append(ReplayGap(rec.pid, seq, tl.site, to_first, idle))
    return out


def _process(tree: RecordingTree, rec: Recording | None, entry: ProcessEntry | None) -> ProcessSummary:
    if rec is None:
        assert entry is not None  # a process without a recording is one the tree lists
        return ProcessSummary(pid=entry.pid, parent=entry.parent, rank=entry.rank, argv=list(entry.argv),
                              followed=entry.followed, exit_code=entry.exit_code, reason=entry.reason, cuda=entry.cuda,
                              helper=entry.helper)
    idx = rec.index
    graphs = tuple(_graph(rec.pid, g) for g in rec.graphs)
    by_site: dict[str | None, list[GraphStat]] = {}
    for g in graphs:
        by_site.setdefault(g.site, []).append(g)
    sites = tuple(sorted((SiteStat(s, tuple(gs)) for s, gs in by_site.items()), key=lambda s: -len(s.graphs)))
    return ProcessSummary(
        pid=rec.pid if entry is None else entry.pid, parent=rec.parent, rank=rec.rank,
        argv=list(idx.program), followed=True,
        exit_code=entry.exit_code if entry is not None else idx.exit_code,
        reason=entry.reason if entry is not None else None, graphs=graphs, sites=sites, wall_s=_wall(idx),
        gaps=tuple(replay_gaps(rec)), skips=len(idx.compile.cudagraph_skips),
        suspensions=tuple(idx.suspended), pools=tuple(idx.ledger.pools) if idx.ledger is not None else (),
        cuda=idx.cuda, stale_inputs=tuple(stale_inputs(rec.pid, rec.graphs)), inputs_checked=coverage(rec.graphs),
        recording=rec)


def summarize(tree: RecordingTree) -> RecordSummary:
    procs: list[ProcessSummary] = []
    used: set[int] = set()
    for e in tree.processes:
        rec = None
        if e.followed and e.folder:
            rec = next((r for r in tree.recordings if r.folder == tree.folder / e.folder or
                        (e.folder == "." and r.folder == tree.folder)), None)
        if rec is not None:
            used.add(id(rec))
        procs.append(_process(tree, rec, e))
    for r in tree.recordings:  # recordings the tree does not list (older layouts)
        if id(r) not in used:
            procs.append(_process(tree, r, None))
    s = RecordSummary(tuple(procs), tree.complete, tree.exit_code, tree.program)
    from cgtool.inspect import stops  # where processes stopped or stalled (stack dumps)

    return RecordSummary(s.processes, s.complete, s.exit_code, s.program, tuple(findings(s)) + tuple(stops.findings(tree)))


def mib(v: float | int | None) -> str:
    if v is None:
        return "unknown"
    v = float(v)
    return f"{v / 2**30:.1f} GiB" if abs(v) >= 2**30 else f"{v / 2**20:.1f} MiB"


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %" if x >= 0.01 or x == 0 else f"{100 * x:.2f} %"


def _where(site: str | None) -> str:
    if not site:
        return "?"
    path, _, line = site.rpartition(":")
    return f"{os.path.basename(path)}:{line}"


def _memory_of(graphs: Sequence[GraphStat]) -> str:
    known = [g.reserved_during_capture for g in graphs if g.reserved_during_capture is not None]
    if not known:
        return "took memory that was not measured"
    total = sum(known)
    unk = len(graphs) - len(known)
    return f"took {mib(total)} during their capture" + (f" (unknown for {unk})" if unk else "")


def cannot_make_graphs(p: ProcessSummary) -> str | None:
    """What a recorded process that made no graph is when it could not have made one, or None:
    torch.compile's compile workers and other helpers (by their command line), and forks of a
    process that had initialised CUDA that never tried to use it (those that tried are not folded:
    the advice to use spawn is for them)."""
    if not p.followed or p.graphs:
        return None
    what = helper_command(p.argv)
    cuda = p.cuda
    if cuda is not None and cuda.usable is False:
        if cuda.tried:
            return None
        return (what or "a process") + " forked after CUDA was initialised in its parent"
    return what


def idle_kinds(s: RecordSummary) -> Counter[str]:
    """The processes that made no graph and could not, counted per kind (``cannot_make_graphs``)."""
    return Counter(k for k in (cannot_make_graphs(p) for p in s.processes) if k)


def inputs_text(g: GraphStat) -> str | None:
    """The inputs a cudagraph-trees graph was recorded for, by argument name where recorded:
    ``x: [8, 64], s0: 8``; None for other graphs."""
    ci = g.capture_inputs
    if ci is None:
        return None
    shapes = ci.inputs or []
    names = ci.names or []
    if not shapes:
        static = ci.static_inputs
        return "no dynamic input" + (f" ({static} static)" if static else "")
    return ", ".join(f"{names[k]}: {v}" if k < len(names) and names[k] else f"input {k}: {v}"
                     for k, v in enumerate(shapes))


def empty_graph_text(p: ProcessSummary, g: GraphStat) -> str | None:
    """What made a graph of no nodes, where the recording says: CUDA graph trees (torch.compile's
    mode="reduce-overhead") capture an empty graph when they start, to own their memory pool."""
    if g.nodes:
        return None
    compiled = p.recording is not None and bool(p.recording.index.compile.graphs_from_compiled_code)
    if compiled and g.capture_inputs is None and g.pool and any(o.pool == g.pool and o.nodes for o in p.graphs):
        return (f"#{g.seq} is empty: torch.compile's CUDA graph trees capture an empty graph when they start, "
                f"to own the memory pool ({g.pool}) their graphs share; it runs no work")
    return f"#{g.seq} is empty: its capture recorded no work"


def _stale_findings(followed: Sequence[ProcessSummary], n_graphs: int) -> list[str]:
    """The input checks' answers: the stale inputs that cost the most replays said in full, the
    others counted (``STALE_SAID``), then what was checked."""
    out: list[str] = []
    stale = sorted((x for p in followed for x in p.stale_inputs), key=lambda st: -st.replays)
    several = sum(1 for p in followed if p.graphs) > 1  # idle processes (compile workers) do not count
    for x in stale[:STALE_SAID]:
        text = sentence(x)
        out.append(text[0].upper() + text[1:] + (f" (process {x.pid})" if several else "") + ".")
    rest = stale[STALE_SAID:]
    if rest:
        out.append(f"{len(rest)} more graph input(s) read memory their program freed, in "
                   f"{len({(x.pid, x.seq) for x in rest})} graph(s): `cgtool record --json` (stale_inputs) and "
                   "`cgtool report` list each.")
    covs = [p.inputs_checked for p in followed if p.inputs_checked is not None]
    if covs and n_graphs:
        merged = InputsCoverage(sum(c.checked for c in covs), {}, sum(c.partial for c in covs))
        for c in covs:
            for why, n in c.not_checked.items():
                merged.not_checked[why] = merged.not_checked.get(why, 0) + n
        line = checked_sentence(n_graphs, merged, len(stale))
        if line:
            out.append(line)
    return out


def findings(s: RecordSummary) -> list[str]:
    """The recording's answers, as sentences."""
    out: list[str] = []
    graphs = s.graphs
    followed = [p for p in s.processes if p.followed]
    helpers = [p for p in s.processes if not p.followed and p.helper]
    not_followed = [p for p in s.processes if not p.followed and not p.helper]
    total = sum(g.replays for g in graphs)
    if not graphs:
        if s.complete:
            out.append(f"The program instantiated no CUDA graph in any of its {len(followed)} process(es)"
                       + (f" (the {len(helpers)} other(s) are helper commands, which make none)" if helpers else "")
                       + ".")
        else:
            out.append(f"No CUDA graph in the {len(followed)} recorded process(es); "
                       f"{len(not_followed)} process(es) could not be recorded (below), so this does not say "
                       "the program made none.")
    else:
        with_graphs = [p for p in followed if p.graphs]
        idle_n = sum(idle_kinds(s).values())
        out.append(f"{len(graphs)} graph(s) in {len(with_graphs)} of {len(followed) - idle_n} recorded process(es)"
                   + (f" (and {idle_n} that could not make one)" if idle_n else "") + f", {total} replay(s).")
    out += _stale_findings(followed, len(graphs))
    if graphs and total:
        ranked = sorted(graphs, key=lambda g: -g.replays)
        acc, k = 0, 0
        for g in ranked:
            acc += g.replays
            k += 1
            if acc >= SERVING_SHARE * total:
                break
        others = ranked[k:]
        if others:
            out.append(f"{k} of {len(graphs)} graphs served {_pct(acc / total)} of replays; the other "
                       f"{len(others)} {_memory_of(others)}.")
    never = [g for g in graphs if g.replays == 0]
    if never:
        sites = Counter(_where(g.site) for g in never)
        out.append(f"{len(never)} graph(s) were never replayed ({', '.join(f'{n} at {w}' for w, n in sites.most_common(4))}"
                   f"); they {_memory_of(never)}.")
    for p in followed:
        for site in p.sites:
            if len(site.graphs) > 1:
                per_graph = [(g, inputs_text(g)) for g in site.graphs]
                again = "".join(f"\n  #{g.seq}: {t}" for g, t in per_graph[:8] if t is not None)
                more = sum(1 for _, t in per_graph[8:] if t is not None)
                again += f"\n  ... and {more} more" if more else ""
                out.append(f"{_where(site.site)} captured {len(site.graphs)} graphs in {_who(p)}; "
                           f"{len(site.never_replayed)} of them never replayed"
                           + (f"; the inputs each was recorded for:{again}" if again else "."))
        for g in p.graphs:
            empty = empty_graph_text(p, g)
            if empty:
                out.append(f"{_who(p)}: {empty}.")
    cap = [(p, p.capture_s) for p in followed if p.capture_s]
    if cap:
        total_cap = sum(c for _, c in cap if c)
        worst = max(cap, key=lambda x: x[1] or 0)
        share = worst[0].capture_share
        out.append(f"Capture and instantiation took {total_cap:.3f} s in all"
                   + (f"; {_who(worst[0])}: {worst[1]:.3f} s, {_pct(share)} of its wall time "
                      f"({worst[0].wall_s:.1f} s)" if share is not None and worst[0].wall_s else "") + ".")
    gaps = [g for p in followed for g in p.gaps if g.launch_to_first_kernel_us is not None]
    if gaps:
        by_graph: dict[tuple[int | None, int], list[ReplayGap]] = {}
        for gap in gaps:
            by_graph.setdefault((gap.pid, gap.seq), []).append(gap)
        worst_key = max(by_graph, key=lambda k: statistics.median(x.launch_to_first_kernel_us or 0 for x in by_graph[k]))
        ws = by_graph[worst_key]
        idle = [x.idle_since_previous_replay_us for x in ws if x.idle_since_previous_replay_us is not None]
        out.append(f"Traced replays: {statistics.median(x.launch_to_first_kernel_us or 0 for x in gaps):.1f} µs "
                   f"median from cudaGraphLaunch to the first kernel; longest for graph #{worst_key[1]} of process "
                   f"{worst_key[0]} ({statistics.median(x.launch_to_first_kernel_us or 0 for x in ws):.1f} µs, "
                   f"launched at {_where(ws[0].launch_site)})"
                   + (f", the GPU idle {statistics.median(idle):.1f} µs before it" if idle else "") + ".")
    for p in followed:
        for sp in p.suspensions:
            out.append(f"{_who(p)}: recording suspended at {_where(sp.site)} ({sp.reason}): "
                       "graphs made while it was off are not recorded, replay counts of the graphs alive then "
                       "are lower bounds"
                       + (f"; it did not resume ({sp.not_resumed})" if sp.not_resumed else
                          "; it resumed when the profiler stopped" if sp.resumed_at_s is not None else "")
                       + ".")
        if p.cuda and p.cuda.usable is False and p.cuda.tried:  # it tried the GPU: advise
            out.append(f"{_who(p)}: {p.cuda.reason}.")
    kinds = idle_kinds(s)
    if kinds:
        out.append(f"{sum(kinds.values())} recorded process(es) made no graph and could not make one: "
                   + "; ".join(f"{n}x {k}" for k, n in kinds.most_common(5)) + ".")
    if not_followed:
        reasons = Counter(_short_reason(p.reason) for p in not_followed)
        out.append(f"{len(not_followed)} process(es) could not be recorded: "
                   + "; ".join(f"{n}x {r}" for r, n in reasons.most_common(5)) + ".")
    if helpers:
        kinds = Counter((p.helper or "").split(" (")[0] for p in helpers)
        out.append(f"{len(helpers)} helper process(es) were not recorded; they make no CUDA graph: "
                   + "; ".join(f"{n}x {k}" for k, n in kinds.most_common(5)) + ".")
    unfinished = [p for p in followed if p.reason]
    if unfinished:
        out.append(f"{len(unfinished)} recorded process(es) did not finish their recording (killed or crashed: "
                   f"pid {', '.join(str(p.pid) for p in unfinished[:6])}); what they wrote by then is kept.")
    return out


def _who(p: ProcessSummary) -> str:
    if p.pid is None:
        return f"rank {p.rank}" if p.rank is not None else "the process"
    return f"process {p.pid}" + (f" (rank {p.rank})" if p.rank is not None else "")


def _short_reason(r: str | None) -> str:
    return (r or "unknown").split(":")[0].split(" (")[0]


def summary_json(s: RecordSummary) -> dict[str, Any]:
    """The summary's answers as JSON: the findings' sentences, and each graph reading freed memory."""
    return {"program": list(s.program), "exit_code": s.exit_code, "complete": s.complete,
            "findings": list(s.findings),
            "stale_inputs": [x.to_json() for p in s.processes for x in p.stale_inputs],
            "processes": [{"pid": p.pid, "graphs": len(p.graphs), "replays": p.replays, "followed": p.followed,
                           "inputs_checked": None if p.inputs_checked is None else p.inputs_checked.checked}
                          for p in s.processes]}
