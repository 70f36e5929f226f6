"""Everything `cgtool report` shows, gathered from the inputs it is given.

Each input is read by the one input model (``cgtool.inspect.inputs``: files and folders told
apart by content); a profiler trace takes the exports given beside it (same rank). Every graph
becomes one ``GraphView`` (``cgtool.inspect.views``): its topology and, with a trace of the same
instantiation, the figures, durations and one replay — each trace analysed once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from cgtool.artifacts.bench import BenchResults
from cgtool.artifacts.jsonio import DEFAULT_MAX_BYTES
from cgtool.artifacts.recording import is_recording
from cgtool.errors import InvalidInputError, UsageError
from cgtool.inspect import DEFAULT_TOLERANCE_US
from cgtool.inspect.benchstats import Judgement, compare_results
from cgtool.inspect.collectives import CollectiveFigures, collective_figures
from cgtool.inspect.inputs import InputKind, Resolved, resolve
from cgtool.inspect.record_summary import RecordSummary, summarize
from cgtool.inspect.views import Analyses, GraphView, Replay, graph_view

__all__ = ["BenchView", "Gathered", "GraphView", "Replay", "gather", "graph_view"]


@dataclass(frozen=True)
class BenchView:
    """Bench results given to the report, judged against the baseline where one was given."""

    results: BenchResults
    source: str
    judgements: list[Judgement] | None = None
    baseline: BenchResults | None = None
    baseline_source: str | None = None


@dataclass
class Gathered:
    graphs: list[GraphView] = field(default_factory=list)
    collectives: list[tuple[str, CollectiveFigures]] = field(default_factory=list)  # per-rank trace sets with NCCL
    bench: list[BenchView] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: what each `cgtool record` folder given says (its path as given), from the one reading of it
    recordings: list[tuple[str, RecordSummary]] = field(default_factory=list)


def gather(inputs: Sequence[Path], *, baseline: Path | None = None, tolerance_us: float = DEFAULT_TOLERANCE_US,
           max_bytes: int | None = DEFAULT_MAX_BYTES) -> Gathered:
    """Read every input, pair traces with their graphs, analyse each trace once."""
    out = Gathered()
    resolved: list[Resolved] = []
    seen: set[Path] = set()
    for inp in inputs:
        key = Path(inp).resolve()
        if key in seen:
            continue
        seen.add(key)
        resolved.append(resolve(inp, max_bytes=max_bytes))
    _pair_across(resolved)
    base = BenchResults.load(baseline, max_bytes=max_bytes) if baseline is not None else None
    analyses = Analyses(tolerance_us=tolerance_us, max_bytes=max_bytes)
    failed: dict[int, str] = {}
    for r in resolved:
        out.notes += r.notes
        if r.recording is not None and is_recording(r.path):
            out.recordings.append((str(r.path), summarize(r.recording)))
        for ts in r.traces:
            if not ts.graphs:
                continue
            try:
                analyses.of(ts)
            except InvalidInputError as e:  # e.g. a trace of another instantiation: show the graphs alone
                failed[id(ts)] = e.message
                out.notes.append(f"{ts.path}: not used: {e.message}")
        for item in r.graphs:
            if item.trace is not None and id(item.trace) in failed:
                item.trace = None
            out.graphs.append(analyses.view(item))
        if r.kind is InputKind.RANKS:
            ranked = {ts.rank: ts for ts in r.traces
                      if ts.rank is not None and ts.process is None and ts.graphs and id(ts) not in failed}
            if len(ranked) > 1:  # NCCL kernels in the replays: their share, overlap, waits (deps's table)
                figs = collective_figures({rk: ts.load(max_bytes) for rk, ts in ranked.items()})
                if not figs.empty:
                    out.collectives.append((str(r.path), figs))
        for ts in r.traces:
            ts.forget()  # the columns are not needed once analysed (a folder may hold many traces)
        for f, b in r.bench:
            out.bench.append(BenchView(b, str(f)) if base is None else
                             BenchView(b, str(f), compare_results(base, b), base, str(baseline)))
    out.graphs.sort(key=lambda v: (-1 if v.rank is None else v.rank))
    if not out.graphs and not out.bench:
        kinds = ", ".join(f"{r.path} ({r.kind.value})" for r in resolved)
        raise UsageError(f"Nothing to report: {kinds} {'holds' if len(resolved) == 1 else 'hold'} no graph and no "
                         "bench results"
                         + (f" ({'; '.join(out.notes)})" if out.notes else "") + ".")
    return out


def _pair_across(resolved: list[Resolved]) -> None:
    """A profiler trace given without exports takes the exports given beside it (same rank)."""
    for r in resolved:
        for ts in r.traces:
            if ts.embedded or ts.graphs:
                continue
            mine = [i for o in resolved if o is not r for i in o.graphs
                    if i.path is not None and i.trace is None and i.rank == ts.rank]
            if not mine and r.kind is not InputKind.PROFILER_TRACE:
                r.notes.append(f"{ts.path}: a profiler trace with no graph export beside it: not used (pass the "
                               "export of the replayed graph).")
                continue
            if not mine:
                raise UsageError(
                    f"{ts.path} is a profiler trace without graph exports in it or beside it: the report needs the "
                    f"export of the replayed graph to place its events. Pass it too: `cgtool report {ts.path} "
                    "GRAPH.json` (or trace with `cgtool trace`, whose traces embed their graphs).")
            ts.graphs = [i.graph for i in mine]
            for i in mine:
                i.trace = ts
