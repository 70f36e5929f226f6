"""Reading a ``cgtool record`` folder: the program's process tree and each process's graphs.

Pure file reading: no torch, no capture imports. Layout written by ``cgtool/capture/record``::

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

from cgtool.artifacts.jsonio import load_json
from cgtool.errors import InvalidInputError

INDEX = "index.json"
#: Newest schemas this reader knows: a process's index, the tree's index.
PROCESS_SCHEMA = 1
TREE_SCHEMA = 2


@dataclass(frozen=True)
class Recording:
    """One process's recording: its folder and its parsed index."""

    folder: Path
    index: dict[str, Any]
    rank: int | None

    @property
    def graphs(self) -> list[dict[str, Any]]:
        return list(self.index.get("graphs", []))

    @property
    def pid(self) -> int | None:
        v = self.index.get("pid")
        return v if isinstance(v, int) else None

    @property
    def parent(self) -> int | None:
        v = self.index.get("parent")
        return v if isinstance(v, int) else None

    def graph_doc(self, entry: dict[str, Any]) -> dict[str, Any]:
        """The export of one index entry (plain or gzipped file)."""
        doc: dict[str, Any] = read_json(self.folder / str(entry["file"]))
        return doc


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


def helpers_in(processes: Iterable[dict[str, Any]]) -> dict[int, str]:
    """``{pid: what}`` for the processes of a tree that were not followed and make no CUDA graph:
    helper commands, and the unrecorded processes they started (a compiler's own passes)."""
    procs = [p for p in processes if isinstance(p, dict) and isinstance(p.get("pid"), int)]
    out: dict[int, str] = {}
    for p in procs:
        if not p.get("followed"):
            what = p.get("makes_no_graphs") or helper_command([str(a) for a in p.get("argv") or []], p.get("exe"))
            if what:
                out[p["pid"]] = str(what)
    changed = True
    while changed:  # a helper's unrecorded children, and theirs
        changed = False
        for p in procs:
            if not p.get("followed") and p["pid"] not in out and p.get("parent") in out:
                out[p["pid"]] = f"started by {out[p['parent']].split(' (')[0]}"
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
    cuda: dict[str, Any] | None = None
    helper: str | None = None  # not followed, and a helper command that makes no CUDA graph: what it is
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordingTree:
    """A whole recording: its processes, and the recordings of those that were followed."""

    folder: Path
    index: dict[str, Any] | None  # the tree's index.json (None for the older layouts)
    processes: list[ProcessEntry]
    recordings: list[Recording]

    @property
    def program(self) -> list[str]:
        if self.index is not None:
            return list(self.index.get("program") or [])
        return list(self.recordings[0].index.get("program") or []) if self.recordings else []

    @property
    def exit_code(self) -> int | None:
        if self.index is not None:
            v = self.index.get("exit_code")
        else:
            v = self.recordings[0].index.get("exit_code") if self.recordings else None
        return v if isinstance(v, int) else None

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
    name = rec.index.get("trace")
    if not name:
        return None
    p = rec.folder / str(name)
    return p if p.exists() else p.with_name(p.name + ".gz")


def graph_paths(rec: "Recording") -> list[Path]:
    """The export file of every graph of the recording, in index order."""
    out = []
    for g in rec.graphs:
        p = rec.folder / str(g["file"])
        out.append(p if p.exists() else p.with_name(p.name + ".gz"))
    return out


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


def _entry(p: dict[str, Any]) -> ProcessEntry:
    def i(k: str) -> int | None:
        v = p.get(k)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return ProcessEntry(pid=i("pid"), parent=i("parent"), argv=[str(a) for a in p.get("argv") or []],
                        followed=bool(p.get("followed")), folder=p.get("folder") if p.get("followed") else None,
                        rank=i("rank"), started_as=p.get("started_as"), exit_code=i("exit_code"),
                        exit_code_seen_by=p.get("exit_code_seen_by"),
                        finished=p.get("finished") if isinstance(p.get("finished"), bool) else None,
                        graphs=i("graphs"), replays=i("replays"), reason=p.get("reason"),
                        cuda=p.get("cuda") if isinstance(p.get("cuda"), dict) else None, raw=dict(p))


def _rel(folder: Path, sub: Path) -> str:
    if sub == folder:
        return "."
    try:
        return str(sub.relative_to(folder))
    except ValueError:
        return str(sub)


def from_recordings(folder: Path, recs: list[Recording]) -> RecordingTree:
    """A tree of the given process recordings (the older layouts, which record no tree)."""
    procs = [ProcessEntry(pid=r.pid, parent=r.parent, argv=[str(a) for a in r.index.get("program") or []],
                          followed=True, folder=_rel(folder, r.folder),
                          rank=r.rank, exit_code=r.index.get("exit_code"), exit_code_seen_by="itself",
                          finished=bool(r.index.get("finished")), graphs=len(r.graphs),
                          replays=sum(int(g.get("replays") or 0) for g in r.graphs)) for r in recs]
    return RecordingTree(folder, None, procs, recs)


def load_tree(folder: Path) -> RecordingTree:
    """The recording in ``folder``: a whole program's, one process's, or the older per-rank layout."""
    folder = Path(folder)
    if _has_index(folder):
        idx = read_json(folder / INDEX)
        if isinstance(idx, dict) and "processes" in idx:
            _check_tree(idx, folder)
            helpers = helpers_in(idx["processes"])
            procs = [replace(e, helper=helpers.get(e.pid)) if e.pid in helpers else e
                     for e in (_entry(p) for p in idx["processes"] if isinstance(p, dict))]
            recs = []
            for p in procs:
                if p.folder and _has_index(folder / p.folder):
                    sub = read_json(folder / p.folder / INDEX)
                    recs.append(Recording(folder / p.folder, _check(sub, folder / p.folder), sub.get("rank")))
            return RecordingTree(folder, idx, procs, recs)
        return from_recordings(folder, [Recording(folder, _check(idx, folder), idx.get("rank"))])
    out = []
    for d in sorted(folder.glob("rank*")):
        if _has_index(d):
            idx = read_json(d / INDEX)
            out.append(Recording(d, _check(idx, d), idx.get("rank")))
    if not out:
        raise InvalidInputError(f"{folder} holds no recording (no index.json, no rank*/index.json). "
                                "Make one with `cgtool record -o DIR -- python prog.py`.")
    return from_recordings(folder, sorted(out, key=lambda r: (r.rank is None, r.rank or 0)))


def load_recordings(folder: Path) -> list[Recording]:
    """Every recorded process in ``folder`` (one for a process folder), in the tree's order."""
    return load_tree(folder).recordings


def _check(idx: Any, folder: Path) -> dict[str, Any]:
    if not isinstance(idx, dict) or "cgtool_record" not in idx or not isinstance(idx.get("graphs"), list):
        raise InvalidInputError(f"{folder / INDEX} is not a cgtool recording index (no cgtool_record/graphs keys).")
    if int(idx["cgtool_record"]) > PROCESS_SCHEMA:
        raise InvalidInputError(f"{folder / INDEX} has recording schema {idx['cgtool_record']}, newer than this "
                                f"cgtool reads ({PROCESS_SCHEMA}); upgrade cgtool.")
    return idx


def _check_tree(idx: dict[str, Any], folder: Path) -> None:
    v = idx.get("cgtool_record")
    if not isinstance(v, int) or not isinstance(idx.get("processes"), list):
        raise InvalidInputError(f"{folder / INDEX} is not a cgtool recording index (no cgtool_record/processes keys).")
    if v > TREE_SCHEMA:
        raise InvalidInputError(f"{folder / INDEX} has recording schema {v}, newer than this cgtool reads "
                                f"({TREE_SCHEMA}); upgrade cgtool.")


# ------------------------------------------------------------------ graph inputs (input checks)
# A graph entry's ``inputs`` (written by capture/record/inputs.py, read by inspect/stale_inputs.py):
# ``checked``, ``why_not``, ``every``, ``replays_checked``, ``checks``, ``external_blocks``,
# ``external_bytes``, ``pool_pointers``, ``free_pointers_at_capture``, ``scan``, ``external[]`` and
# ``findings[]`` (kind "freed" | "reused", input {address, bytes, name, shape, dtype, allocated_at},
# freed_at, freed_site_known, reused_by {bytes, allocated_at}, first_replay, first_replay_exact,
# may_start_at, last_replay). The process index's ``input_checks`` says how the checks ran.
#: freed: no tensor took the memory yet; reused: another tensor did; stale: the block is alive but
#: nothing writes it between replays while the line that allocated it makes new ones (a rebind)
INPUT_FINDING_KINDS = ("freed", "reused", "stale")


@dataclass(frozen=True)
class InputSite:
    """A line of the program: where a block was allocated or freed."""

    file: str
    line: int
    function: str | None
    code: str | None


@dataclass(frozen=True)
class InputFinding:
    """One external block a graph kept reading after its program freed it."""

    kind: str  # one of INPUT_FINDING_KINDS
    input_name: str | None  # the capturing code's local that held it, if one did
    shape: tuple[int, ...] | None
    dtype: str | None
    bytes: int | None
    allocated_at: InputSite | None
    freed_at: InputSite | None
    freed_site_known: bool
    reused_bytes: int | None
    reused_at: InputSite | None
    reallocs: int  # stale: tensors of its size the same line allocated after the capture
    unchanged_between: tuple[tuple[int, int], ...]  # stale: sampled (replay k, k+1) with no write between
    first_replay: int  # the first replay that surely read the freed memory
    first_replay_exact: bool  # a check ran right before the free's first replay
    may_start_at: int  # the first replay that may have (no check ran between the two)
    last_replay: int


@dataclass(frozen=True)
class InputsEntry:
    """A graph's input checks: whether they ran, and what they found."""

    checked: bool
    why_not: str | None
    external_blocks: int | None
    findings: tuple[InputFinding, ...]


def _site(d: Any) -> InputSite | None:
    if not isinstance(d, dict) or not isinstance(d.get("file"), str) or not isinstance(d.get("line"), int):
        return None
    fn, code = d.get("function"), d.get("code")
    return InputSite(d["file"], d["line"], fn if isinstance(fn, str) else None, code if isinstance(code, str) else None)


def _int(v: Any, default: int | None = None) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def inputs_entry(graph: dict[str, Any]) -> InputsEntry | None:
    """A graph index entry's ``inputs``, typed; None for a recording made without input checks."""
    d = graph.get("inputs")
    if not isinstance(d, dict):
        return None
    found = []
    for f in d.get("findings") or []:
        if not isinstance(f, dict) or f.get("kind") not in INPUT_FINDING_KINDS:
            continue
        inp: dict[str, Any] = f["input"] if isinstance(f.get("input"), dict) else {}
        reused: dict[str, Any] = f["reused_by"] if isinstance(f.get("reused_by"), dict) else {}
        shape = inp.get("shape")
        first, last = _int(f.get("first_replay")), _int(f.get("last_replay"))
        if first is None or last is None:
            continue
        found.append(InputFinding(
            kind=f["kind"], input_name=inp.get("name") if isinstance(inp.get("name"), str) else None,
            shape=tuple(int(x) for x in shape) if isinstance(shape, list) and all(isinstance(x, int) for x in shape)
            else None,
            dtype=inp.get("dtype") if isinstance(inp.get("dtype"), str) else None, bytes=_int(inp.get("bytes")),
            allocated_at=_site(inp.get("allocated_at")), freed_at=_site(f.get("freed_at")),
            freed_site_known=f.get("freed_site_known") is not False, reused_bytes=_int(reused.get("bytes")),
            reused_at=_site(reused.get("allocated_at")), reallocs=_int(f.get("reallocs"), 0) or 0,
            unchanged_between=tuple((x[0], x[1]) for x in (f.get("unchanged_between") or [])
                                    if isinstance(x, list) and len(x) == 2 and all(isinstance(v, int) for v in x)),
            first_replay=first,
            first_replay_exact=f.get("first_replay_exact") is True,
            may_start_at=_int(f.get("may_start_at"), first) or first, last_replay=last))
    why = d.get("why_not")
    return InputsEntry(checked=d.get("checked") is True, why_not=why if isinstance(why, str) else None,
                       external_blocks=_int(d.get("external_blocks")), findings=tuple(found))
