"""The one input model of the analysis commands (``topo``, ``dot``, ``deps``, ``diff``, ``report``).

Every input is a file or a folder, told by its content (never by its name) in one place,
``identify``, as one of a few kinds (``InputKind``); ``resolve`` reads it into the graphs it holds
(``GraphItem``), the traces of their replays (``TraceSource``, each paired with the graphs it is
analysed against) and bench results. Which command takes which kind is ``ACCEPTS`` (the table in
docs/inputs.md, which a test compares with it); a command given a kind that lacks what it needs
says what the input is, what is missing and where it goes (``require``). Where an input holds
several graphs, one selector picks among them (``Selector``: ``--graph-id``, ``PATH#n``,
``--rank``, ``--process``).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Iterable, Sequence

import msgspec

from cgtool.artifacts.bench import BenchResults
from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.jsonio import DEFAULT_MAX_BYTES, Source, read_bytes
from cgtool.artifacts.ranks import RANK_IN_PATH, check_rank
from cgtool.artifacts.recording import Recording, RecordingTree, graph_paths, is_recording, load_tree, trace_path
from cgtool.artifacts.trace import Trace, load_trace
from cgtool.errors import InvalidInputError, UsageError
from cgtool.text import plural


class InputKind(str, Enum):
    """What an input is, told by its content. The value is the column name in docs/inputs.md."""

    GRAPH = "graph export"  # one graph's topology (get_graph_data() schema + "cgtool" block)
    CGTOOL_TRACE = "cgtool trace"  # a trace with the exports of its graphs embedded (`cgtool trace`, `record`)
    PROFILER_TRACE = "profiler trace"  # a trace without embedded graphs (torch.profiler): needs the export
    BUNDLE = "capture bundle"  # a folder of graph exports of one process (`cgtool capture -o DIR`)
    RANKS = "per-rank folder"  # a folder of per-rank exports and/or traces (torchrun)
    RECORD = "record folder"  # a `cgtool record` folder: index.json, its graphs, maybe a trace; per rank
    FOLDER = "folder of artifacts"  # any other folder of exports and traces, paired as the report does
    BENCH = "bench results"  # `cgtool bench --json`


#: What each command does with each kind: "yes"; "if it holds a trace"; "as --graph" / "as --trace"
#: (taken beside the input, not as it); "with its export" (given beside it); "no: ..." (refused: the
#: words say what is missing). docs/inputs.md holds the same table; tests/test_inputs.py checks that
#: they agree.
ACCEPTS: dict[str, dict[InputKind, str]] = {
    "topo": {InputKind.GRAPH: "yes", InputKind.CGTOOL_TRACE: "yes", InputKind.PROFILER_TRACE: "as --trace",
             InputKind.BUNDLE: "yes", InputKind.RANKS: "if it holds a graph", InputKind.RECORD: "if it holds a graph",
             InputKind.FOLDER: "if it holds a graph", InputKind.BENCH: "no: holds no graph"},
    "dot": {InputKind.GRAPH: "yes", InputKind.CGTOOL_TRACE: "yes", InputKind.PROFILER_TRACE: "as --trace",
            InputKind.BUNDLE: "yes", InputKind.RANKS: "if it holds a graph", InputKind.RECORD: "if it holds a graph",
            InputKind.FOLDER: "if it holds a graph", InputKind.BENCH: "no: holds no graph"},
    "deps": {InputKind.GRAPH: "as --graph", InputKind.CGTOOL_TRACE: "yes", InputKind.PROFILER_TRACE: "with --graph",
             InputKind.BUNDLE: "as --graph", InputKind.RANKS: "if it holds a trace",
             InputKind.RECORD: "if it holds a trace", InputKind.FOLDER: "if it holds a trace",
             InputKind.BENCH: "no: holds no trace"},
    "diff": {InputKind.GRAPH: "yes", InputKind.CGTOOL_TRACE: "yes", InputKind.PROFILER_TRACE: "no: holds no graph",
             InputKind.BUNDLE: "yes", InputKind.RANKS: "if it holds a graph", InputKind.RECORD: "if it holds a graph",
             InputKind.FOLDER: "if it holds a graph", InputKind.BENCH: "no: holds no graph"},
    "report": {**{k: "yes" for k in InputKind}, InputKind.PROFILER_TRACE: "with its export",
               InputKind.RECORD: "if it holds a graph"},
}

#: Where each kind goes, for the refusal of a command that cannot use it.
WHERE_IT_GOES = {
    InputKind.BENCH: "bench results go to `cgtool bench --compare OLD NEW` or `cgtool report`",
    InputKind.GRAPH: "a graph export goes to `topo`, `dot`, `diff`, `report`; `deps` needs its trace too "
                     "(`cgtool deps TRACE --graph GRAPH`)",
    InputKind.BUNDLE: "a capture bundle goes to `topo`, `dot`, `diff`, `report`; `deps` needs a trace of it "
                      "(`cgtool trace` the same workload)",
}


@dataclass
class TraceSource:
    """A trace file and the graphs it is analysed against (embedded, or exports paired with it)."""

    path: Path
    graphs: list[GraphData]
    embedded: bool  # the graphs came from the trace itself
    rank: int | None = None
    process: str | None = None
    _trace: Trace | None = field(default=None, repr=False)

    def load(self, max_bytes: int | None = DEFAULT_MAX_BYTES) -> Trace:
        if self._trace is None:
            self._trace = load_trace(self.path, max_bytes=max_bytes)
        return self._trace

    def forget(self) -> None:
        """Drop the loaded columns (a folder may hold many large traces)."""
        self._trace = None


@dataclass
class GraphItem:
    """One graph of an input, with how output names it and the trace of its replays (if any)."""

    label: str
    graph: GraphData
    number: int  # ``PATH#n``: its number in the input (a recording's own "#n", else its position)
    rank: int | None = None
    process: str | None = None
    trace: TraceSource | None = None
    path: Path | None = None  # the export file; None when embedded in a trace


@dataclass
class Resolved:
    """What one input holds."""

    path: Path
    kind: InputKind
    graphs: list[GraphItem] = field(default_factory=list)
    traces: list[TraceSource] = field(default_factory=list)
    bench: list[tuple[Path, BenchResults]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    number: int | None = None  # from ``PATH#n``
    recording: RecordingTree | None = None  # a `cgtool record` folder, as read (processes and their indexes)


@dataclass(frozen=True)
class Selector:
    """Which graphs of an input a command works on (all when nothing is set)."""

    graph_id: int | None = None  # exec graph id
    number: int | None = None  # ``PATH#n``
    rank: int | None = None
    process: str | None = None

    @property
    def empty(self) -> bool:
        return self.graph_id is None and self.number is None and self.rank is None and self.process is None

    def describe(self) -> str:
        parts = []
        if self.number is not None:
            parts.append(f"#{self.number}")
        if self.graph_id is not None:
            parts.append(f"--graph-id {self.graph_id}")
        if self.rank is not None:
            parts.append(f"--rank {self.rank}")
        if self.process is not None:
            parts.append(f"--process {self.process}")
        return " ".join(parts)

    def pick(self, items: Sequence[GraphItem], where: object) -> list[GraphItem]:
        """The items this selector names; an error listing the graphs when it names none."""
        out = [g for g in items
               if (self.graph_id is None or g.graph.exec_graph_id == self.graph_id)
               and (self.number is None or g.number == self.number)
               and (self.rank is None or g.rank == self.rank)
               and (self.process is None or g.process == self.process)]
        if not out and not self.empty:
            raise UsageError(f"{where} holds no graph {self.describe()}. It holds: {listing(items)}.")
        return out


def listing(items: Sequence[GraphItem], limit: int = 12) -> str:
    """``#n label (exec graph id)`` of each graph, for messages."""
    shown = [(g.label if f"#{g.number}" in g.label else f"#{g.number} {g.label}")
             + f" (exec graph {g.graph.exec_graph_id})" for g in items[:limit]]
    return "; ".join(shown) + ("; ..." if len(items) > limit else "") if items else "no graph"


# --------------------------------------------------------------------------- telling inputs apart
class _Probe(msgspec.Struct):
    # msgspec.Raw cannot sit in a Union: an absent key is the empty Raw (length 0).
    traceEvents: msgspec.Raw = msgspec.Raw(b"")
    nodes: msgspec.Raw = msgspec.Raw(b"")
    workloads: msgspec.Raw = msgspec.Raw(b"")
    kind: Any = None
    cgtool_record: Any = None
    cgtool: msgspec.Raw = msgspec.Raw(b"")


class _CgtoolGraphs(msgspec.Struct):
    graphs: msgspec.Raw = msgspec.Raw(b"")
    rank: Any = None


_probe = msgspec.json.Decoder(_Probe)
_cg = msgspec.json.Decoder(_CgtoolGraphs)
#: How much of a large file is read to tell its kind (its keys come first, or the whole is probed).
PEEK_BYTES = 1 << 16
_KEY = re.compile(rb'"(traceEvents|nodes|workloads|cgtool_record|exec_graph_id)"\s*:')


@dataclass
class _FileKind:
    kind: InputKind | None  # None: not a cgtool artifact
    rank: int | None = None
    data: bytes | None = None  # the whole file, where it was read (small files, FIFOs)


def _file_kind(p: Path, max_bytes: int | None, *, in_folder: bool) -> _FileKind:
    """The kind of one file, by content: its first keys where it is large, else the whole probed."""
    try:
        st = p.stat()
    except OSError as e:
        raise UsageError(f"Cannot read {p}: {e.strerror or e}.") from None
    if not stat.S_ISREG(st.st_mode):
        if in_folder:
            what = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if (
                stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)) else "not a regular file"
            raise InvalidInputError(
                f"{p} is {what}, not a file. cgtool reads the files of a folder; it reads a FIFO or a device "
                "only when named on its own. Remove it from the folder, or pass it alone.")
        data = read_bytes(p, max_bytes=max_bytes)  # read once: a FIFO cannot be read again
        return _probe_bytes(p, data, in_folder=False)
    if st.st_size > PEEK_BYTES * 4:
        with Source(p, max_bytes=max_bytes, piece=PEEK_BYTES) as src:
            head = b""
            for piece in src.pieces():
                head += bytes(piece)
                if len(head) >= PEEK_BYTES:
                    break
        keys = [m.group(1) for m in _KEY.finditer(head)]
        if b"traceEvents" in keys:
            return _FileKind(InputKind.CGTOOL_TRACE)  # cgtool or profiler: told once loaded (its cgtool block)
        if keys and keys[0] in (b"nodes", b"exec_graph_id"):
            return _FileKind(InputKind.GRAPH)
        if keys and keys[0] == b"workloads":
            return _FileKind(InputKind.BENCH)
    return _probe_bytes(p, read_bytes(p, max_bytes=max_bytes), in_folder=in_folder)


def _probe_bytes(p: Path, data: bytes, *, in_folder: bool) -> _FileKind:
    try:
        pr = _probe.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
        if in_folder:
            return _FileKind(None)
        doc = _decode(p, data)  # raises the reader's own message: syntax, nesting, encoding
        raise InvalidInputError(_not_an_input(p, f" (it is a JSON {type(doc).__name__}, not an object)")) from None
    rank = None
    graphs = False
    if len(pr.cgtool):
        try:
            cg = _cg.decode(pr.cgtool)
            graphs = len(cg.graphs) > 2  # "[]" is no graphs
            rank = cg.rank
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass  # the loader says what is wrong with the block
    if len(pr.traceEvents):
        kind = InputKind.CGTOOL_TRACE if graphs else InputKind.PROFILER_TRACE
    elif len(pr.nodes):
        kind = InputKind.GRAPH
    elif len(pr.workloads) or pr.kind == "bench":
        kind = InputKind.BENCH
    elif pr.cgtool_record is not None:
        kind = InputKind.RECORD
    else:
        if in_folder:
            return _FileKind(None)
        raise InvalidInputError(_not_an_input(p, ""))
    return _FileKind(kind, rank, data)


def _not_an_input(p: Path, what: str) -> str:
    return (f"{p} is not a graph export, a trace, bench results or a recording's index{what}: it has no 'nodes', "
            "'traceEvents', 'workloads' or 'cgtool_record'. Pass cgtool's artifacts or a torch.profiler trace.")


def identify(path: Path, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> InputKind:
    """The kind of ``path`` (a file or a folder), by content."""
    return _identify(path, max_bytes)[0]


def _identify(path: Path, max_bytes: int | None) -> tuple[InputKind, _FileKind | None]:
    if not path.exists() and not path.is_symlink():
        raise UsageError(f"No such file or folder: {path}.")
    if path.is_dir():
        if is_recording(path):
            return InputKind.RECORD, None
        return _folder_kind(path, max_bytes), None
    fk = _file_kind(path, max_bytes, in_folder=False)
    assert fk.kind is not None
    return fk.kind, fk


def _folder_files(folder: Path) -> list[Path]:
    return sorted({f for pat in ("*.json", "*.json.gz") for f in folder.rglob(pat)
                   if f.is_file() or not f.is_dir()})


def _folder_kind(folder: Path, max_bytes: int | None) -> InputKind:
    found = _scan_folder(folder, max_bytes)
    if not found:
        raise InvalidInputError(f"No JSON files in {folder} (looked for *.json and *.json.gz, recursively).")
    if any(r is not None for _, _, r in found):
        return InputKind.RANKS
    kinds = {k for _, k, _ in found}
    if kinds == {InputKind.GRAPH}:
        return InputKind.BUNDLE
    return InputKind.FOLDER


def _scan_folder(folder: Path, max_bytes: int | None) -> list[tuple[Path, InputKind, int | None]]:
    """(file, kind, rank) of each artifact in ``folder`` and below. A file named for a rank that
    cannot be read makes the run incomplete: it is an error, not one rank fewer."""
    out = []
    for p in _folder_files(folder):
        named = RANK_IN_PATH.search(str(p.relative_to(folder)))
        try:
            fk = _file_kind(p, max_bytes, in_folder=True)
            if fk.kind is None and named:  # the reader's own words: truncated, not JSON, not an artifact
                _probe_bytes(p, read_bytes(p, max_bytes=max_bytes), in_folder=False)
        except InvalidInputError as e:
            if named:  # a rank's file that cannot be read: the run is incomplete, not one rank smaller
                raise InvalidInputError(f"{e.message} (It is a per-rank file of {folder}: fix or remove it, "
                                        "or analyse the other ranks' files one by one.)") from None
            raise
        if fk.kind is None:
            continue
        rank = fk.rank
        if fk.kind in (InputKind.CGTOOL_TRACE, InputKind.PROFILER_TRACE, InputKind.GRAPH) and rank is None and named:
            rank = int(named.group(1))
        out.append((p, fk.kind, check_rank(rank, p) if rank is not None else None))
    return out


# --------------------------------------------------------------------------- reading inputs
def split_number(arg: str | Path) -> tuple[Path, int | None]:
    """``PATH#n`` -> (PATH, n) where PATH exists and ``PATH#n`` does not; else (arg, None)."""
    s = str(arg)
    m = re.fullmatch(r"(.+)#(\d+)", s)
    if m and not Path(s).exists() and Path(m.group(1)).exists():
        return Path(m.group(1)), int(m.group(2))
    return Path(s), None


def resolve(arg: str | Path, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> Resolved:
    """Read one input (``PATH`` or ``PATH#n``) into its graphs, traces and bench results."""
    path, number = split_number(arg)
    kind, fk = _identify(path, max_bytes)
    res = Resolved(path, kind, number=number)
    if kind is InputKind.RECORD:
        _read_record(path if path.is_dir() else path.parent, res, max_bytes)
    elif path.is_dir():
        _read_folder(path, res, max_bytes)
    else:
        assert fk is not None
        _read_file(path, fk, res, max_bytes, rank=fk.rank)
    if kind is InputKind.CGTOOL_TRACE and res.traces and not res.traces[0].embedded:
        res.kind = InputKind.PROFILER_TRACE  # a large file told by its keys: its cgtool block has no graphs
    return res


def _read_file(p: Path, fk: _FileKind, res: Resolved, max_bytes: int | None, *, rank: int | None,
               process: str | None = None, label_prefix: str = "") -> None:
    kind = fk.kind
    if kind is InputKind.GRAPH:
        g = _graph_from(p, fk, max_bytes)
        res.graphs.append(GraphItem(label_prefix + p.name, g, len(res.graphs), rank, process, path=p))
    elif kind in (InputKind.CGTOOL_TRACE, InputKind.PROFILER_TRACE):
        t = load_trace(p, max_bytes=max_bytes) if fk.data is None else _trace_from(p, fk.data)
        gs = embedded_graphs(t)
        ts = TraceSource(p, gs, bool(gs), rank, process, t)
        res.traces.append(ts)
        for k, g in enumerate(gs):
            name = graph_label(g) or (p.name if len(gs) == 1 else f"{p.name} graph {k}")
            res.graphs.append(GraphItem(label_prefix + name, g, len(res.graphs), rank, process, ts))
    elif kind is InputKind.BENCH:
        res.bench.append((p, BenchResults.load(p, max_bytes=max_bytes) if fk.data is None
                          else BenchResults.from_json(_decode(p, fk.data), str(p))))
    elif kind is InputKind.RECORD:
        _read_record(p.parent, res, max_bytes)


def graph_label(g: GraphData) -> str | None:
    """The name an export gives itself: a recording's label (``#n file.py:line``), or its workload label."""
    meta: Any = g.meta
    rec = meta.get("record") if isinstance(meta, dict) else None
    lab = (rec.get("label") if isinstance(rec, dict) else None) or (meta.get("label") if isinstance(meta, dict) else None)
    return str(lab) if lab else None


def _decode(p: Path, data: bytes) -> Any:
    from cgtool.artifacts.jsonio import decode

    return decode(data, p)


def _graph_from(p: Path, fk: _FileKind, max_bytes: int | None) -> GraphData:
    if fk.data is None:
        return GraphData.load(p, max_bytes=max_bytes)
    return GraphData.from_json(_decode(p, fk.data), source=str(p))


def _trace_from(p: Path, data: bytes) -> Trace:
    from cgtool.artifacts.trace import load_trace_bytes

    return load_trace_bytes(data, str(p))


def _read_folder(folder: Path, res: Resolved, max_bytes: int | None) -> None:
    """A per-rank folder, a bundle or any folder of artifacts: every file read, traces without
    embedded graphs paired with the exports of the same rank."""
    found = _scan_folder(folder, max_bytes)
    n_files = len(_folder_files(folder))
    if n_files > len(found):
        res.notes.append(f"{plural(n_files - len(found), 'file')} in {folder} are not graph exports, traces or bench "
                         "results and were skipped.")
    ranked = any(r is not None for _, _, r in found)
    if ranked:
        missing = [p for p, k, r in found if r is None and k is not InputKind.BENCH]
        if missing:
            raise InvalidInputError(
                f"Cannot tell the rank of {missing[0]}: it records none and its path has no 'rank<k>', while other "
                f"files of {folder} are per-rank. Name per-rank files trace.rank<k>.json.gz (as `cgtool trace` "
                "does under torchrun), or move the file out of the folder.")
    traces_of: dict[int | None, Path] = {}
    for p, kind, rank in found:
        if kind in (InputKind.CGTOOL_TRACE, InputKind.PROFILER_TRACE) and ranked:
            if rank in traces_of:
                raise InvalidInputError(f"Two trace files for rank {rank} in {folder}: {traces_of[rank]} and {p}. "
                                        "A rank's replays come from one trace: keep one per rank.")
            traces_of[rank] = p
    seen_ids: dict[tuple[int | None, int], Path] = {}
    for p, kind, rank in found:
        prefix = f"rank {rank}: " if rank is not None else ""
        _read_file(p, _FileKind(kind), res, max_bytes, rank=rank, label_prefix=prefix)
        if kind is InputKind.GRAPH and ranked:
            key = (rank, res.graphs[-1].graph.exec_graph_id)
            if key in seen_ids:
                raise InvalidInputError(
                    f"Two graph exports for rank {rank} in {folder} have exec graph id {key[1]}: {seen_ids[key]} "
                    f"and {p}. Exec graph ids are unique per process: the two come from different runs; keep one.")
            seen_ids[key] = p
    _pair(res)


def _pair(res: Resolved) -> None:
    """Pair traces with the graphs they are analysed against, within one rank and process:

    1. a trace without embedded graphs (a profiler's) takes the exports not yet paired;
    2. a trace that embeds graphs takes an export that is one of them (same exec id and nodes: a
       recording's files), and the export stands for the embedded copy, which is then not listed twice.
    """
    def unit(x: Any) -> tuple[int | None, str | None]:
        return (x.rank, x.process)

    for ts in res.traces:
        if not ts.embedded:
            mine = [i for i in res.graphs if i.path is not None and i.trace is None and unit(i) == unit(ts)]
            ts.graphs = [i.graph for i in mine]
            for i in mine:
                i.trace = ts
    stands_for: set[tuple[int, int]] = set()
    for ts in res.traces:
        if ts.embedded:
            emb = {g.exec_graph_id: g for g in ts.graphs}
            for i in res.graphs:
                gid = i.graph.exec_graph_id
                if i.path is not None and i.trace is None and unit(i) == unit(ts) and gid in emb \
                        and same_graph(i.graph, emb[gid]):
                    i.trace = ts
                    stands_for.add((id(ts), gid))
    res.graphs = [i for i in res.graphs if not (i.path is None and i.trace is not None
                                                and (id(i.trace), i.graph.exec_graph_id) in stands_for)]
    _number(res)


def same_graph(a: GraphData, b: GraphData) -> bool:
    """Whether two exports are of one instantiation's graph: same exec id, node ids, types, edges and
    kernel names (``inspect.belong``, the check every command makes)."""
    from cgtool.inspect.belong import why_apart

    return why_apart(a, b) is None


def _number(res: Resolved) -> None:
    for k, item in enumerate(res.graphs):
        if res.kind is not InputKind.RECORD:
            item.number = k


def record_processes(recs: list[Recording]) -> list[tuple[str | None, Recording]]:
    """Every recorded process of a recording, named: the one place that knows how processes are named.

    ``recs`` is what ``artifacts.recording.load_recordings`` gives: one Recording per recorded
    process (a process tree's ``p<PID>/`` folders, which it reads from the tree's index), or per
    rank (``rank<R>/``), or the only one. A process is named by its pid where the recording holds
    several; a recording of one process needs no name."""
    out: list[tuple[str | None, Recording]] = [(None if r.pid is None else str(r.pid), r) for r in recs]
    if len({name for name, _ in out}) <= 1:
        return [(None, r) for _, r in out]  # one process (or processes told apart by rank alone)
    return out


def _read_record(folder: Path, res: Resolved, max_bytes: int | None) -> None:
    """A `cgtool record` folder: per process (and rank), its graph exports (numbered as the
    recording numbers them) and its trace (which embeds the same graphs)."""
    res.recording = load_tree(folder)
    for process, rec in record_processes(res.recording.recordings):
        prefix = (f"rank {rec.rank}: " if rec.rank is not None else "") + (f"process {process}: " if process else "")
        t_path = trace_path(rec)
        if t_path is not None:
            t = load_trace(t_path, max_bytes=max_bytes)
            res.traces.append(TraceSource(t_path, embedded_graphs(t), True, rec.rank, process, t))
        for entry, p in zip(rec.graphs, graph_paths(rec)):
            g = GraphData.load(p, max_bytes=max_bytes)
            label = entry.label or p.name
            num = _record_number(label, len(res.graphs))
            res.graphs.append(GraphItem(prefix + label, g, num, rec.rank, process, path=p))
    if not res.graphs:
        res.notes.append(f"{folder}: the program instantiated no CUDA graph.")
    _pair(res)


def _record_number(label: str, default: int) -> int:
    m = re.match(r"#(\d+)\b", label)
    return int(m.group(1)) if m else default


def embedded_graphs(trace: Trace) -> list[GraphData]:
    """The graph exports a cgtool trace embeds (empty for other traces)."""
    if not trace.cgtool:
        return []
    gs = trace.cgtool.get("graphs") or []
    if not isinstance(gs, list):
        raise InvalidInputError(f"{trace.source}: its cgtool.graphs should be a list.")
    return [GraphData.from_json(d, source=f"{trace.source} (embedded graph {k})") for k, d in enumerate(gs)]


# --------------------------------------------------------------------------- what a command needs
def require(res: Resolved, command: str, *, have_graph: bool = False) -> None:
    """Refuse an input the command cannot use, naming what it is, what is missing and where it goes.
    ``have_graph``: graph exports were given beside it (``--graph``)."""
    word = ACCEPTS[command][res.kind]
    kind = res.kind.value
    if word.startswith("no"):
        where = WHERE_IT_GOES.get(res.kind, "")
        if res.kind is InputKind.PROFILER_TRACE:
            where = (f"a profiler trace goes to `cgtool deps {res.path} --graph GRAPH.json`, or beside its graph: "
                     f"`cgtool topo GRAPH.json --trace {res.path}`")
        raise UsageError(f"{res.path} is {_a(kind)}: it {word[4:]}, which `cgtool {command}` needs."
                         + (f" {where[0].upper() + where[1:]}." if where else ""))
    if (word == "with --graph" and not have_graph and not res.graphs) or word == "as --trace":
        hint = {"deps": f"cgtool deps {res.path} --graph GRAPH.json", "report": f"cgtool report {res.path} GRAPH.json"}
        raise UsageError(f"{res.path} is a profiler trace without graph exports in it: `cgtool {command}` needs the "
                         f"export of the replayed graph beside it: `{hint.get(command, f'cgtool {command} GRAPH.json --trace {res.path}')}` "
                         "(or trace with `cgtool trace`, whose traces embed their graphs).")
    if word == "as --graph":
        graph = res.path if res.kind is InputKind.GRAPH else "GRAPH.json"
        raise UsageError(f"{res.path} is {_a(kind)}: it holds no trace, which `cgtool deps` needs to classify "
                         f"serializations. Pass a trace of this graph: a `cgtool trace` of the workload, or a "
                         f"torch.profiler trace with its export as --graph (`cgtool deps TRACE --graph {graph}`).")
    if word == "if it holds a trace" and not res.traces:
        extra = (" Record with `--trace-replays K` to get one." if res.kind is InputKind.RECORD else "")
        raise UsageError(f"{res.path} is {_a(kind)} without a trace, which `cgtool {command}` needs to classify "
                         f"serializations.{extra}")
    if command in ("topo", "dot", "diff") and not res.graphs:
        raise UsageError(f"{res.path} is {_a(kind)} holding no graph, which `cgtool {command}` needs."
                         + (" " + res.notes[0] if res.notes else ""))


def _a(kind: str) -> str:
    if kind.endswith("results"):
        return kind
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def one_graph(res: Resolved, sel: Selector, command: str) -> GraphItem:
    """The one graph a command works on: the only one, or the one the selector names."""
    sel = Selector(sel.graph_id, res.number if res.number is not None else sel.number, sel.rank, sel.process)
    items = sel.pick(res.graphs, res.path)
    if len(items) == 1:
        return items[0]
    how = "`PATH#n`, --graph-id ID" + (", --rank R" if any(i.rank is not None for i in items) else "") + \
          (", --process P" if any(i.process is not None for i in items) else "")
    raise UsageError(f"{res.path} holds {plural(len(items), 'graph')}" + (f" matching {sel.describe()}" if not sel.empty
                     else "") + f"; `cgtool {command}` takes one: pick it with {how}. They are: {listing(items)}.")


def selected(res: Resolved, sel: Selector) -> list[GraphItem]:
    sel = Selector(sel.graph_id, res.number if res.number is not None else sel.number, sel.rank, sel.process)
    return sel.pick(res.graphs, res.path) if not sel.empty else list(res.graphs)


def attach_trace(items: Iterable[GraphItem], tres: Resolved) -> list[str]:
    """Give graphs a trace passed beside them (``--trace``): per rank where both are per rank.
    Returns notes on graphs the trace does not hold."""
    notes: list[str] = []
    by_rank: dict[int | None, TraceSource] = {}
    for t in tres.traces:
        by_rank[t.rank] = t
    for item in items:
        ts = by_rank.get(item.rank) or (next(iter(by_rank.values())) if len(by_rank) == 1 else None)
        if ts is None:
            notes.append(f"{tres.path} holds no trace of rank {item.rank}: {item.label} is shown untimed.")
            continue
        item.trace = ts
        if not ts.embedded and item.graph not in ts.graphs:
            ts.graphs.append(item.graph)
    if not tres.traces:
        raise UsageError(f"{tres.path} (given with --trace) is {_a(tres.kind.value)} holding no trace.")
    return notes


def os_path(p: Path) -> str:
    return os.fspath(p)
