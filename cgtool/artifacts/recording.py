"""A ``cgtool record`` folder's contract: its typed structs (``ProcessIndex`` with its ``GraphEntry``s
and ``MemoryLedger``, ``TreeIndex`` with its ``TreeProcess``es, ``ExportRecord`` the ``record`` block
of each graph export; every block inside them a struct too, docs/record.md lists them), its schema
constants, its one atomic writer (``write_atomic``, used by the recorder for every file it writes)
and its reader (``load_tree``, ``load_recordings``, ``read_export``), which gives the same types back.

No torch, no capture imports. Layout written by ``cgtool/capture/record``::

    OUT/index.json              the tree (schema 2): program, exit code, processes[] (pid, parent,
                                argv, rank, started_as, followed, folder, exit code and who saw it,
                                graphs, replays, reason when not followed, makes_no_graphs for a
                                helper command), complete, notes
    OUT/p<PID>/index.json       one recorded process (schema 1): its pid, parent, argv, rank, graphs[]
                                (replays, pool, capture time, capture site, traced launches), compile
                                skips, coverage, memory ledger, children it saw, suspensions, trace
    OUT/p<PID>/graph_NNN.json   one export per graph (get_graph_data() schema + "cgtool" block)
    OUT/p<PID>/trace.json       with --trace-replays: chrome trace with the exports embedded
    OUT/p<PID>-x<N>/...         the N-th program the same pid became through os.exec*

A process folder is itself a recording of one process: any command that reads a recording reads
``OUT`` whole or ``OUT/p<PID>`` alone. Older layouts still read: ``OUT/index.json`` of one process
(schema 1, graphs beside it) and ``OUT/rank<R>/index.json`` per torchrun rank.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, TypeVar

import msgspec

from cgtool.artifacts.jsonio import field_error, load_json
from cgtool.artifacts.stacks import Dump
from cgtool.artifacts.stacks import read as read_stacks
from cgtool.errors import InvalidInputError

if TYPE_CHECKING:
    from cgtool.artifacts.graph import GraphData

INDEX = "index.json"
#: The schemas of a recording, written by the recorder and the newest this reader knows: a process's
#: index (``ProcessIndex``), the tree's index (``TreeIndex``).
PROCESS_SCHEMA = 1
TREE_SCHEMA = 2


# ------------------------------------------------------------------------------ the typed contract
# Every field but the schema and a graph's file has a default: older recordings, which lack the
# newer fields, load with them. Unknown keys are ignored (a newer recorder of the same schema).
class _Entry(msgspec.Struct, kw_only=True, frozen=True):
    pass


class ModelLine(_Entry, frozen=True, omit_defaults=True):
    """Compiled code: a model line and the nn.Module its FX node came from (``stack_trace`` and
    ``nn_module_stack``). Each half is written only where the node's meta has it."""

    node: str | None = None  # the FX node's name in Inductor's output code
    file: str | None = None
    line: int | None = None
    function: str | None = None
    module_path: str | None = None  # model.layers.0.self_attn.q_proj
    module_type: str | None = None  # Linear


class SourceSite(_Entry, frozen=True):
    """Where a node or a capture came from in the program (``capture/record/attribution.Site``): a
    graph export's ``captured_at`` and each node's ``source``, a compile skip's ``site``."""

    file: str | None = None  # the innermost user frame's file, None when there was none
    line: int | None = None
    function: str | None = None
    call: str | None = None  # the expression the user line was calling, or its operator
    op: str | None = None  # the nearest torch op (Inductor's fused ops, the autograd node, the torch function)
    module: str | None = None  # the nn.Module class on the stack (compiled code: its module path)
    record_function: str | None = None  # the innermost torch.profiler.record_function range open
    backward: bool = False  # op is the autograd node that made it
    generated: str | None = None  # "file:line" of generated code (Inductor, FX) between the user line and CUDA
    label: str | None = None  # "model.py:88 attn.softmax"
    code: str | None = None  # the user line's text
    stack: list[str] = []  # user frames, innermost first, "file:line function"
    model: list[ModelLine] = []  # compiled code: the model lines, innermost first
    module_path: str | None = None


class CaptureInputs(_Entry, frozen=True, omit_defaults=True):
    """torch.compile's CUDA graph trees: the inputs a capture was recorded for (the static ones,
    parameters and buffers, left out). Each key is written only where the capture showed it."""

    inputs: list[list[int | str] | int | None] | None = None  # a shape (a symbolic size as text), an int, or None
    names: list[str] | None = None  # the compiled graph's placeholder names, by input
    n_inputs: int | None = None
    static_inputs: int | None = None
    symint_key: list[int | str] | None = None  # deferred_cudagraphify's symbolic-size key


class RecorderSeconds(_Entry, frozen=True, omit_defaults=True):
    """The recorder's own time in one graph's callbacks, by part (benchmarks/bench_record.py): the
    graph-exec callback's parts, and the node callbacks since the previous graph. A part is written
    only where it ran (``inputs`` with --check-inputs, the node callbacks with the compiled callback)."""

    reserved: float | None = None
    export: float | None = None
    pool_and_stack: float | None = None
    environment_and_record: float | None = None
    inputs: float | None = None
    node_callbacks: float | None = None
    node_callback_calls: int | None = None


class TracedLaunch(_Entry, frozen=True):
    """One replay traced with ``--trace-replays``: its launch's correlation id and source line."""

    correlation: int | None = None
    launch_seq: int | None = None  # the process's n-th graph launch
    site: str | None = None  # file:line of the launch, None where unknown


class GraphEntry(_Entry, frozen=True):
    """One graph of a process's index."""

    file: str  # its export, beside the index (graph_NNN.json)
    label: str = ""  # "#<seq> file.py:line"
    exec_graph_id: int | None = None
    template_graph_id: int | None = None
    nodes: int = 0
    captured_at: str | None = None  # file:line where the capture began
    capture_s: float | None = None
    instantiate_s: float | None = None
    export_s: float | None = None
    write_s: float | None = None
    recorder_s: RecorderSeconds = RecorderSeconds()
    reserved_during_capture: int | None = None  # bytes the process took from CUDA during the capture
    pool: str | None = None  # "a,b": torch's memory pool id
    replays: int = 0
    replays_complete: bool = True  # False: replays were not counted for a while (a suspension)
    traced_replays: int = 0
    compiled_code: str | None = None  # Inductor output code that ran inside the capture
    capture_inputs: CaptureInputs | None = None
    time_since_start_s: float | None = None
    traced_launches: list[TracedLaunch] = []
    kernel_ns: int | None = None  # with --coverage: GPU time of the graph's kernels
    kernels: int | None = None
    inputs: "GraphInputs | None" = None  # --check-inputs (below)

    @property
    def seq(self) -> int:
        """The graph's number in its process (from the label ``#<seq> ...``; 0 where absent)."""
        head = self.label.split()[0] if self.label else ""
        return int(head[1:]) if head.startswith("#") and head[1:].isdigit() else 0


class PoolBytes(_Entry, frozen=True):
    pool: str
    bytes_reserved: int = 0
    graphs: list[int] = []  # seq of the graphs captured into the pool


class GraphMemory(_Entry, frozen=True):
    seq: int
    pool: str | None = None
    reserved_during_capture: int | None = None


class MemoryLedger(_Entry, frozen=True):
    """torch's allocator at the process's exit: bytes per graph pool, against the peak. ``error``
    alone where torch's allocator could not be read."""

    pools: list[PoolBytes] = []
    graphs: list[GraphMemory] = []
    bytes_held_by_graph_pools: int | None = None
    bytes_reserved_at_exit: int | None = None
    peak_bytes_reserved: int | None = None
    note: str | None = None
    error: str | None = None


class KernelCoverage(_Entry, frozen=True):
    """With ``--coverage``: kernel time inside graph replays against all kernel time (summed durations of
    CUPTI kernel records, ns). The shares are None where there was no kernel time to divide by."""

    kernel_ns_in_graphs: int = 0
    kernel_ns_outside_graphs: int = 0
    kernels_in_graphs: int = 0
    kernels_outside_graphs: int = 0
    share_in_graphs: float | None = None
    # warm-up, compilation and autotuning run before the first graph: the steady state after it
    kernel_ns_outside_graphs_since_first_graph: int = 0
    kernels_outside_graphs_since_first_graph: int = 0
    share_in_graphs_since_first_graph: float | None = None
    kernel_ns_of_unrecorded_graphs: int = 0
    note: str | None = None


class CudagraphSkip(_Entry, frozen=True):
    """One of torch.compile's "skipping cudagraphs due to ..." messages, and where it was logged."""

    reason: str = ""
    site: SourceSite | None = None
    t: float | None = None  # seconds since the recorder started


class CompileNotes(_Entry, frozen=True):
    cudagraph_skips: list[CudagraphSkip] = []  # torch.compile's "skipping cudagraphs" reasons
    graphs_from_compiled_code: list[str] = []  # labels


class ExitNote(_Entry, frozen=True):
    """How a recorded process ended, as its recorder saw it."""

    how: str | None = None  # "end", "os._exit", "SIGTERM", "exec <argv>", ...
    code: int | None = None


class CudaNote(_Entry, frozen=True):
    """Why CUDA cannot be used in a process: a fork of a process that had initialised CUDA."""

    usable: bool | None = None
    tried: bool | None = None  # it called torch's CUDA initialisation (None: recorded before this was noted)
    reason: str | None = None


class Suspension(_Entry, frozen=True):
    """A time the recorder gave CUPTI up (the program's own profiler wanted it)."""

    reason: str | None = None
    site: str | None = None  # file:line of the program's profiler start
    at_s: float | None = None  # seconds since the recorder started
    graphs_before: int | None = None
    resumed_at_s: float | None = None
    not_resumed: str | None = None  # why CUPTI could not be taken back


class ChildSeen(_Entry, frozen=True, omit_defaults=True):
    """A process the recorded process started or waited for (``subprocess``, ``os.fork``, ...). Every
    recorder wrote the first four keys (``exit_code`` null until a wait saw it); ``signal`` only for a
    child a signal ended."""

    pid: int
    argv: list[str]
    how: str  # subprocess | multiprocessing | fork | waited
    exit_code: int | None  # as its wait saw it (128 + signal for a signal)
    signal: int | None = None


class CallbackStat(_Entry, frozen=True):
    calls: int = 0
    s_inside: float = 0.0  # seconds inside the recorder's callback


class Timeline(_Entry, frozen=True, omit_defaults=True):
    """``time.time()`` of a process's phases; a phase is written once it happened."""

    boot_start: float | None = None  # the bootstrap began (before the program's imports)
    recorder_start: float | None = None
    program_start: float | None = None
    program_end: float | None = None
    finish_end: float | None = None  # the recorder finished writing


class LastGraph(_Entry, frozen=True):
    """The graph whose replay count rose last."""

    seq: int | None = None
    label: str | None = None
    exec_graph_id: int | None = None
    replays: int | None = None
    captured_at: str | None = None  # file:line
    seen_at_s: float | None = None  # seconds since the recorder started
    last_nccl_kernel: str | None = None  # its export's last NCCL kernel, if any


class NcclGraph(_Entry, frozen=True):
    """A graph holding NCCL kernels, alive when destroy_process_group() was called."""

    seq: int | None = None
    label: str | None = None
    captured_at: str | None = None
    exec_graph_id: int | None = None
    nccl_kernels: int | None = None
    kernel: str | None = None  # its last NCCL kernel (mangled)
    replays: int | None = None


class DestroyCall(_Entry, frozen=True):
    """The program's ``torch.distributed.destroy_process_group()`` call."""

    site: str | None = None  # file:line
    at_s: float | None = None
    returned: bool = False
    live_graphs: int | None = None
    live_nccl_graphs: list[NcclGraph] | None = None
    note_failed: str | None = None  # why the graphs alive could not be noted


class Stopping(_Entry, frozen=True):
    """Where the process stood when stopped or stalled (``capture/record/stops.py`` writes it,
    ``inspect/stops.py`` reads it)."""

    main_thread: str | None = None  # the main thread's id as faulthandler prints it
    stack_file: str | None = None  # the stack dumps' file, beside the index
    dumped_on: list[str] = []  # signal names, "fatal"
    hang_after_s: int | None = None  # --hang-after
    hangs_seen: int = 0
    last_graph: LastGraph | None = None
    destroy_process_group: DestroyCall | None = None


class ProcessIndex(_Entry, frozen=True):
    """``p<PID>/index.json``: one recorded process."""

    cgtool_record: int  # PROCESS_SCHEMA
    graphs: list[GraphEntry]
    program: list[str] = []
    pid: int | None = None
    parent: int | None = None
    started_as: str | None = None  # root | spawn | forkserver | fork | exec | python
    started: float | None = None  # time.time()
    finished: bool = False  # the recorder finished (False: killed, crashed, or still running)
    exit_code: int | None = None
    exit: ExitNote | None = None  # how it ended, as the recorder saw it
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    cuda: CudaNote | None = None  # e.g. a fork of a process that had initialised CUDA
    compile: CompileNotes = CompileNotes()
    coverage: KernelCoverage | None = None  # with --coverage
    ledger: MemoryLedger | None = None
    trace: str | None = None  # with --trace-replays: the trace's file name
    suspended: list[Suspension] = []
    children: list[ChildSeen] = []  # processes it started, as it saw them
    recorder_errors: list[str] = []
    subscriber: str | None = None
    #: by CUPTI callback, "<domain>/<callback id>": an open set (whichever callbacks the subscriber enabled)
    callback_stats: dict[str, CallbackStat] = {}
    launch_callbacks: int | None = None
    launches_in_python: int | None = None
    #: seconds, by phase of the recorder (start_s, subscribe_s, finish_*_s, exec_created_<part>_s, ...): a
    #: mapping, not a struct, because its phases are whatever the recorder's parts time (for benchmarks,
    #: read by no command); every value is seconds
    recorder_timings: dict[str, float] = {}
    timeline: Timeline = Timeline()
    #: byte offsets of the CUPTI struct fields the subscriber reads, by field name (the subscriber's
    #: choice of fields, kept for diagnosis)
    layout: dict[str, int] | None = None
    stopping: Stopping | None = None  # None before it was recorded
    input_checks: "InputChecks | None" = None  # --check-inputs (below)


class ExportRecord(_Entry, frozen=True):
    """The ``record`` block of a recorded graph's export (``graph_NNN.json``, in its ``cgtool`` block):
    the capture as the recorder saw it. ``replays`` and ``kernel_ns`` are brought up to date when the
    process finishes."""

    label: str
    seq: int
    captured_at: SourceSite  # the capture site
    template_graph_id: int | None = None
    pool: list[int] | None = None  # torch's memory pool id
    reserved_during_capture: int | None = None
    replays: int = 0
    compiled_code: str | None = None
    capture_inputs: CaptureInputs | None = None
    thread: str | int = "main"  # "main", or the capturing thread's id
    time_since_start_s: float | None = None
    pid: int | None = None
    kernel_ns: int | None = None  # with --coverage


class TreeProcess(_Entry, frozen=True):
    """One process of the tree's index, recorded (``followed``) or not."""

    pid: int | None = None
    parent: int | None = None
    argv: list[str] = []
    exe: str | None = None
    started_as: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    folder: str | None = None
    followed: bool = False
    finished: bool | None = None
    exit_code: int | None = None
    exit_code_seen_by: str | None = None
    exit_code_reported: int | None = None  # what the process reported, where another code was seen
    exit: ExitNote | None = None
    cuda: CudaNote | None = None
    graphs: int | None = None
    replays: int | None = None
    suspended: bool = False
    reason: str | None = None
    makes_no_graphs: str | None = None  # a helper command: what it is


class RecordedOptions(_Entry, frozen=True):
    """The options the recording was made with (``capture/record/options.RecordOptions``, field for
    field; a test keeps the two the same). None: an option the recorder of the file did not have."""

    out: str | None = None
    force: bool | None = None
    trace_replays: int | None = None
    trace_skip: int | None = None
    coverage: bool | None = None
    nproc_per_node: int | None = None
    nnodes: str | None = None
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    follow: bool | None = None
    subscriber: str | None = None
    writer_quiet_s: float | None = None
    json_out: str | None = None
    check_inputs: int | None = None
    index_refresh_s: float | None = None
    hang_after: int | None = None


class TreeIndex(_Entry, frozen=True):
    """``OUT/index.json``: the program's process tree."""

    cgtool_record: int  # TREE_SCHEMA
    processes: list[TreeProcess]
    program: list[str] = []
    exit_code: int | None = None
    root_pid: int | None = None
    started: float | None = None
    ended: float | None = None
    options: RecordedOptions = RecordedOptions()
    followed: int = 0
    not_followed: int = 0
    helpers: int = 0
    unfinished: int = 0
    complete: bool = False
    notes: list[str] = []


def write_atomic(path: str | os.PathLike[str], doc: object, *, indent: int = 0) -> None:
    """The recording's one writer: ``doc`` (a struct above, a graph export, a trace) as JSON at
    ``path``, through a temporary file and a rename, so a reader never sees half a file. msgspec's
    encoder: exports are written while the program runs, and ``json.dump`` took milliseconds per graph."""
    data = msgspec.json.encode(doc)
    if indent:
        data = msgspec.json.format(data, indent=indent)
    tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


_T = TypeVar("_T")


def _typed(doc: object, kind: type[_T], path: Path) -> _T:
    try:
        return msgspec.convert(doc, kind)
    except msgspec.ValidationError as e:
        raise InvalidInputError(f"{path}: {field_error(e)}. The recording was edited or damaged; record the "
                                "program again.") from None


@dataclass(frozen=True)
class Recording:
    """One process's recording: its folder and its index."""

    folder: Path
    index: ProcessIndex
    rank: int | None

    @property
    def graphs(self) -> list[GraphEntry]:
        return list(self.index.graphs)

    @property
    def pid(self) -> int | None:
        return self.index.pid

    @property
    def parent(self) -> int | None:
        return self.index.parent

    def graph_doc(self, entry: GraphEntry) -> "RecordedGraph":
        """The export of one index entry (plain or gzipped file), in its types."""
        return read_export(graph_path(self.folder, entry))

    # -- where the process stopped (capture/record/stops.py writes them; inspect/stops.py reads them)
    @property
    def stopping(self) -> Stopping:
        """The index's ``stopping`` block (empty in recordings made before it existed)."""
        return self.index.stopping or Stopping()

    def stack_dumps(self) -> list[Dump]:
        """The stack dumps in the process's ``stacks.txt`` (signals, fatal errors, stalls)."""
        return read_stacks(self.folder, self.stopping.stack_file or "stacks.txt")


class NodeSource(_Entry, frozen=True):
    """The part of a node's extras (the export's ``cgtool.nodes[i]``) that ``cgtool record`` adds; the
    rest (launch dimensions, demangled names) is the graph export's (``artifacts/graph.py``)."""

    source: SourceSite | None = None


class _RecordedMeta(_Entry, frozen=True):
    record: ExportRecord
    nodes: list[NodeSource] = []


@dataclass(frozen=True)
class RecordedGraph:
    """A recorded graph's export: the graph (``GraphData``, the model every command reads an export
    into: nodes, edges, the ``cgtool`` block as ``meta``) and what the recorder added to it, typed:
    its ``record`` block and each node's source line."""

    graph: GraphData
    record: ExportRecord
    sources: list[SourceSite | None]  # by node index: where the program made the node


def read_export(path: Path) -> RecordedGraph:
    """A recorded export (``graph_NNN.json``), refused when it is not one or a field has another type."""
    from cgtool.artifacts.graph import GraphData  # here: the recorder, which imports this module, never reads exports

    graph = GraphData.load(path)
    meta = _typed(dict(graph.meta), _RecordedMeta, path)
    return RecordedGraph(graph, meta.record, [n.source for n in meta.nodes])


# ------------------------------------------------------------------------------ helper commands
#: Commands that make no CUDA graph, by file name: a process of the tree that the recorder could not
#: follow and is one of these does not leave the recording's answer about graphs open. A program's
#: libraries start them (torch.compile runs compilers and ptxas; ctypes.util.find_library runs
#: ldconfig). Any other binary could use CUDA, so it does leave the answer open.
HELPER_COMMANDS: dict[str, str] = {name: what for what, names in (
    ("ldconfig", ("ldconfig",)),
    ("a compiler or linker", ("gcc", "g++", "cc", "c++", "cpp", "clang", "clang++", "cc1", "cc1plus", "collect2",
                              "ld", "ld.bfd", "ld.gold", "ld.lld", "lld", "as", "ar", "ranlib", "strip", "nm",
                              "objcopy", "objdump", "readelf", "nvcc", "ptxas", "cicc", "cudafe++", "fatbinary",
                              "nvlink", "nvdisasm", "cuobjdump", "nvprune")),
    ("a system query", ("file", "uname", "nvidia-smi", "lscpu", "hostname", "getconf", "which", "openssl", "git")),
) for name in names}

_TRIPLET = re.compile(r"^(x86_64|aarch64|i[3-6]86|powerpc64le|ppc64le|arm\w*)(-\w+)*?-linux-gnu\w*-")
_VERSIONED = re.compile(r"-(real|\d+(\.\d+)*)$")


def helper_command(argv: list[str], exe: str | None = None) -> str | None:
    """What a process is when it is known to make no CUDA graph (``HELPER_COMMANDS``, or one of
    torch.compile's own Python helpers: its compile workers, its library probes); None otherwise."""
    names = [os.path.basename(a) for a in ([exe] if exe else []) + argv[:1] if a]
    for n in names:
        n = _VERSIONED.sub("", _TRIPLET.sub("", n))
        if n in HELPER_COMMANDS:
            what = HELPER_COMMANDS[n]
            return what if what == n else f"{what} ({n})"
    if any(n.startswith(("python", "pypy")) for n in names):
        args = argv[1:]
        if any(a.replace(os.sep, "/").endswith("torch/_inductor/compile_worker/__main__.py") for a in args):
            return "torch.compile's compile worker"
        if "-c" in args[:3] and "torchinductor" in " ".join(args):
            return "torch.compile's library probe"
    return None


def helpers_in(processes: Iterable[TreeProcess]) -> dict[int, str]:
    """``{pid: what}`` for the processes of a tree that were not followed and make no CUDA graph:
    helper commands, and the unrecorded processes they started (a compiler's own passes)."""
    procs = [p for p in processes if p.pid is not None]
    out: dict[int, str] = {}
    for p in procs:
        if not p.followed and p.pid is not None:
            what = p.makes_no_graphs or helper_command(list(p.argv), p.exe)
            if what:
                out[p.pid] = what
    changed = True
    while changed:  # a helper's unrecorded children, and theirs
        changed = False
        for p in procs:
            if not p.followed and p.pid is not None and p.pid not in out and p.parent in out:
                out[p.pid] = f"started by {out[p.parent].split(' (')[0]}"
                changed = True
    return out


@dataclass(frozen=True)
class ProcessEntry:
    """One process of the program's tree, recorded or not."""

    pid: int | None
    parent: int | None
    argv: list[str]
    followed: bool
    folder: str | None  # the process's folder under the recording, when followed
    rank: int | None = None
    started_as: str | None = None
    exit_code: int | None = None
    exit_code_seen_by: str | None = None
    finished: bool | None = None
    graphs: int | None = None
    replays: int | None = None
    reason: str | None = None  # why it has no recording (or why its recording is not finished)
    cuda: CudaNote | None = None
    helper: str | None = None  # not followed, and a helper command that makes no CUDA graph: what it is


@dataclass(frozen=True)
class RecordingTree:
    """A whole recording: its processes, and the recordings of those that were followed."""

    folder: Path
    index: TreeIndex | None  # the tree's index.json (None for the older layouts)
    processes: list[ProcessEntry]
    recordings: list[Recording]

    @property
    def program(self) -> list[str]:
        if self.index is not None:
            return list(self.index.program)
        return list(self.recordings[0].index.program) if self.recordings else []

    @property
    def exit_code(self) -> int | None:
        if self.index is not None:
            return self.index.exit_code
        return self.recordings[0].index.exit_code if self.recordings else None

    @property
    def complete(self) -> bool:
        """Every process of the program that could make CUDA graphs was recorded to its end (a
        helper command that makes none, not recorded, leaves nothing unseen)."""
        return all((p.followed and p.finished is not False) or p.helper for p in self.processes)

    @property
    def not_followed(self) -> list[ProcessEntry]:
        return [p for p in self.processes if not p.followed]

    @property
    def unseen(self) -> list[ProcessEntry]:
        """Processes not recorded that could have made CUDA graphs."""
        return [p for p in self.processes if not p.followed and not p.helper]

    def recording_of(self, pid: int) -> Recording | None:
        """The (last) recording of process ``pid``."""
        out = [r for r in self.recordings if r.pid == pid]
        return out[-1] if out else None


def read_json(path: Path) -> Any:
    """A file of the recording (plain or gzipped), read with the limits of every JSON input."""
    for p in (path, path.with_name(path.name + ".gz")):
        if p.exists():
            return load_json(p)
    raise InvalidInputError(f"Missing file in the recording: {path}. The recording is damaged or still being "
                            "written; record the program again.")


def trace_path(rec: "Recording") -> Path | None:
    """The recording's trace file (``--trace-replays``), or None."""
    name = rec.index.trace
    if not name:
        return None
    p = rec.folder / name
    return p if p.exists() else p.with_name(p.name + ".gz")


def graph_path(folder: Path, entry: GraphEntry) -> Path:
    """The export file of one graph of the recording in ``folder`` (plain or gzipped)."""
    p = folder / entry.file
    return p if p.exists() else p.with_name(p.name + ".gz")


def graph_paths(rec: "Recording") -> list[Path]:
    """The export file of every graph of the recording, in index order."""
    return [graph_path(rec.folder, g) for g in rec.graphs]


def _has_index(folder: Path) -> bool:
    return (folder / INDEX).exists() or (folder / (INDEX + ".gz")).exists()


def is_single_recording(folder: Path) -> bool:
    """Whether ``folder`` holds the recording of one process: a process folder, or a whole recording
    whose program had one recorded process."""
    if not folder.is_dir() or not _has_index(folder):
        return False
    try:
        idx = read_json(folder / INDEX)
    except InvalidInputError:
        return True  # let the loader say what is wrong with it
    if isinstance(idx, dict) and "processes" in idx:
        return sum(1 for d in folder.glob("p*") if _has_index(d)) == 1
    return True


def is_recording(folder: Path) -> bool:
    return folder.is_dir() and (_has_index(folder) or any(_has_index(d) for d in folder.glob("rank*")))


def _entry(p: TreeProcess, helper: str | None) -> ProcessEntry:
    return ProcessEntry(pid=p.pid, parent=p.parent, argv=list(p.argv), followed=p.followed,
                        folder=p.folder if p.followed else None, rank=p.rank, started_as=p.started_as,
                        exit_code=p.exit_code, exit_code_seen_by=p.exit_code_seen_by, finished=p.finished,
                        graphs=p.graphs, replays=p.replays, reason=p.reason, cuda=p.cuda, helper=helper)


def _rel(folder: Path, sub: Path) -> str:
    if sub == folder:
        return "."
    try:
        return str(sub.relative_to(folder))
    except ValueError:
        return str(sub)


def from_recordings(folder: Path, recs: list[Recording]) -> RecordingTree:
    """A tree of the given process recordings (the older layouts, which record no tree)."""
    procs = [ProcessEntry(pid=r.pid, parent=r.parent, argv=list(r.index.program),
                          followed=True, folder=_rel(folder, r.folder),
                          rank=r.rank, exit_code=r.index.exit_code, exit_code_seen_by="itself",
                          finished=r.index.finished, graphs=len(r.graphs),
                          replays=sum(g.replays for g in r.graphs)) for r in recs]
    return RecordingTree(folder, None, procs, recs)


def load_tree(folder: Path) -> RecordingTree:
    """The recording in ``folder``: a whole program's, one process's, or the older per-rank layout."""
    folder = Path(folder)
    if _has_index(folder):
        doc = read_json(folder / INDEX)
        if isinstance(doc, dict) and "processes" in doc:
            tree = read_tree_index(doc, folder)
            helpers = helpers_in(tree.processes)
            procs = [_entry(p, helpers.get(p.pid) if p.pid is not None and not p.followed else None)
                     for p in tree.processes]
            recs = []
            for p in procs:
                if p.folder and _has_index(folder / p.folder):
                    sub = read_process_index(read_json(folder / p.folder / INDEX), folder / p.folder)
                    recs.append(Recording(folder / p.folder, sub, sub.rank))
            return RecordingTree(folder, tree, procs, recs)
        idx = read_process_index(doc, folder)
        return from_recordings(folder, [Recording(folder, idx, idx.rank)])
    out = []
    for d in sorted(folder.glob("rank*")):
        if _has_index(d):
            idx = read_process_index(read_json(d / INDEX), d)
            out.append(Recording(d, idx, idx.rank))
    if not out:
        raise InvalidInputError(f"{folder} holds no recording (no index.json, no rank*/index.json). "
                                "Make one with `cgtool record -o DIR -- python prog.py`.")
    return from_recordings(folder, sorted(out, key=lambda r: (r.rank is None, r.rank or 0)))


def load_recordings(folder: Path) -> list[Recording]:
    """Every recorded process in ``folder`` (one for a process folder), in the tree's order."""
    return load_tree(folder).recordings


def read_process_index(idx: object, folder: Path) -> ProcessIndex:
    """A process's index (as read from ``folder/index.json``) in its type: refused when it is not one,
    is of a newer schema, or a field has another type."""
    if not isinstance(idx, dict) or "cgtool_record" not in idx or not isinstance(idx.get("graphs"), list):
        raise InvalidInputError(f"{folder / INDEX} is not a cgtool recording index (no cgtool_record/graphs keys).")
    if not isinstance(idx["cgtool_record"], int) or idx["cgtool_record"] > PROCESS_SCHEMA:
        raise InvalidInputError(f"{folder / INDEX} has recording schema {idx['cgtool_record']}, newer than this "
                                f"cgtool reads ({PROCESS_SCHEMA}); upgrade cgtool.")
    return _typed(idx, ProcessIndex, folder / INDEX)


def read_tree_index(idx: object, folder: Path) -> TreeIndex:
    """The tree's index (as read from ``folder/index.json``) in its type: refused when it is not one,
    is of a newer schema, or a field has another type."""
    if not isinstance(idx, dict) or not isinstance(idx.get("cgtool_record"), int) \
            or not isinstance(idx.get("processes"), list):
        raise InvalidInputError(f"{folder / INDEX} is not a cgtool recording index (no cgtool_record/processes keys).")
    v = idx["cgtool_record"]
    if v > TREE_SCHEMA:
        raise InvalidInputError(f"{folder / INDEX} has recording schema {v}, newer than this cgtool reads "
                                f"({TREE_SCHEMA}); upgrade cgtool.")
    return _typed(idx, TreeIndex, folder / INDEX)


# ------------------------------------------------------------------ graph inputs (input checks)
# Written by capture/record/inputs.py (``cgtool record --check-inputs``), read by
# inspect/stale_inputs.py: per graph its ``inputs`` (the allocator blocks outside any graph pool that
# its kernels, copies and memsets use, and the findings), per process its ``input_checks`` (how the
# checks ran, what they cost).
#: freed: no tensor took the memory yet; reused: another tensor did; stale: the block is alive but
#: nothing writes it between replays while the line that allocated it makes new ones (a rebind).
#: A finding of another kind (a newer recorder) is read and left out of the findings.
INPUT_FINDING_KINDS = ("freed", "reused", "stale")


class InputFrame(_Entry, frozen=True):
    """One frame of the program's own code."""

    file: str
    line: int
    function: str | None = None
    code: str | None = None


class InputSite(_Entry, frozen=True):
    """A line of the program: where a block was allocated or freed (the innermost of its own frames)."""

    file: str
    line: int
    function: str | None = None
    code: str | None = None
    stack: list[InputFrame] = []  # the program's frames outside it, innermost first


class InputBlock(_Entry, frozen=True):
    """One allocator block a graph uses (outside any graph pool), as it was at the capture."""

    address: int
    bytes: int
    requested_bytes: int | None = None
    allocated_at: InputSite | None = None
    nodes: int = 0  # the graph's nodes that use it
    name: str | None = None  # the capturing code's local that held the tensor
    shape: list[int] | None = None
    dtype: str | None = None
    reallocs: int | None = None  # tensors of its size its line allocated after the capture
    unchanged_intervals: int | None = None  # sampled (replay k, k+1) with no write to it between
    written_intervals: int | None = None
    contents_unknown: bool | None = None  # too big to read back


class ReusedBy(_Entry, frozen=True):
    bytes: int | None = None
    allocated_at: InputSite | None = None


class InputFinding(_Entry, frozen=True):
    """One external block a graph kept reading after its program freed it (or rebound it)."""

    kind: str  # one of INPUT_FINDING_KINDS
    input: InputBlock
    first_replay: int  # the first replay that surely read it
    last_replay: int
    first_replay_exact: bool = False  # a check ran between the last replay before and the first after
    may_start_at: int | None = None  # the first replay that may have (no check ran between)
    freed_at: InputSite | None = None
    freed_site_known: bool = True  # False: the allocator's history had overflowed
    reused_by: ReusedBy | None = None
    reallocs: int | None = None  # stale
    unchanged_between: list[list[int]] = []  # stale: the sampled intervals
    intervals_checked: int | None = None


class ScanPhases(_Entry, frozen=True, omit_defaults=True):
    """Microseconds of a graph's pointer scan, by phase."""

    snapshot: int | None = None  # torch's allocator snapshot
    snapshot_again: int | None = None  # a second snapshot, taken when the first was slow
    events: int | None = None
    pointers: int | None = None
    names: int | None = None
    events_in_ring: int | None = None  # a count: the allocator history's events at the snapshot


class InputScan(_Entry, frozen=True, omit_defaults=True):
    """The scan of a graph's kernel parameters and copies for pointers into torch's allocator, at the
    capture. A key is written only where the scan reached it (``stopped_at_node``: its time ran out)."""

    kernels: int | None = None
    kernels_unread: int | None = None  # kernels whose parameter layout could not be read
    copies: int | None = None
    complete: int | None = None  # 1, or 0 where the scan stopped at its time budget
    stopped_at_node: int | None = None
    param_info_us: int | None = None
    phases_us: ScanPhases | None = None
    first_snapshot: bool | None = None  # the process's first allocator snapshot


class GraphInputs(_Entry, frozen=True):
    """A graph's input checks: whether they ran, its external blocks, what they found."""

    checked: bool = False
    why_not: str | None = None
    every: int | None = None
    replays_checked: int | None = None
    checks: int | None = None
    external_blocks: int | None = None
    external_bytes: int | None = None
    pool_pointers: int | None = None  # pointers into graph pools: the graphs' own memory, not inputs
    free_pointers_at_capture: int | None = None
    scan: InputScan = InputScan()
    scan_s: float | None = None
    scan_complete: bool | None = None
    external: list[InputBlock] = []  # the biggest ones
    findings: list[InputFinding] = []


class InputChecks(_Entry, frozen=True):
    """How one process's input checks ran."""

    every: int | None = None
    history: str | None = None  # "on", or why torch's allocator history is off
    history_changed: str | None = None  # the program's own _record_memory_history call, and where
    history_entries: int | None = None
    history_lost: bool = False
    checks: int = 0
    check_s: float | None = None
    capture_s: float | None = None
    replays_seen: int | None = None
    replays_not_matched: int | None = None
    content_reads: int | None = None
    content_s: float | None = None
    check_share: float | None = None
    longest_pause_s: float | None = None
    errors: list[str] = []
