"""The recording's ``index.json``: the program's process tree, built when the program has ended.

Every recorded process wrote ``OUT/p<PID>/index.json`` (or ``error.json`` when its recorder could
not start). Processes that could not be recorded are known from three other views: the children a
recorded Python process started or waited for (its index's ``children``), the launcher's scan of
``/proc`` for the descendants of the program (every ``SCAN_S``), and the exit statuses the launcher
reaped (it is the program's child subreaper: orphans come to it). :func:`build` merges them into
one list of processes, each followed (its folder) or not (with the reason), and the exit code each
was seen to end with (the parent's ``wait`` where one was seen, else what the process reported).
A process not followed that is a helper command known to make no CUDA graph (a compiler, ldconfig,
torch.compile's compile workers: ``artifacts.recording.helper_command``), or that one of them
started, says what it is (``makes_no_graphs``) and leaves the tree ``complete``.

Nothing here imports torch or CUPTI; it reads JSON.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from cgtool.artifacts.recording import (TREE_SCHEMA, ChildSeen, ProcessIndex, RecordedOptions, TreeIndex, TreeProcess,
                                        helper_command, helpers_in, read_process_index, write_atomic)
from cgtool.capture.record.options import RecordOptions
from cgtool.errors import InvalidInputError
#: How often the launcher scans /proc for the program's descendants (seconds).
SCAN_S = 0.1


@dataclass
class Seen:
    """A descendant seen from outside (the launcher's /proc scan, or a reaped status)."""

    pid: int
    parent: int | None
    argv: list[str]
    exe: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    first_seen: float = field(default_factory=time.time)


def _folder_key(name: str) -> tuple[int, int] | None:
    """``p123`` -> (123, 0), ``p123-x2`` -> (123, 2): a pid's programs in the order they ran."""
    head, _, n = name[1:].partition("-x")
    if not head.isdigit() or (n and not n.isdigit()):
        return None
    return int(head), int(n or 0)


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_index(folder: Path) -> ProcessIndex | None:
    """A process folder's index, or None where it has none that reads (the process could not start)."""
    try:
        return read_process_index(_read(folder / "index.json"), folder)
    except InvalidInputError:
        return None


def _is_python(argv: list[str], exe: str | None) -> bool:
    names = [os.path.basename(a) for a in argv[:1]] + ([os.path.basename(exe)] if exe else [])
    return any(n.startswith(("python", "pypy")) for n in names)


def _isolated(argv: list[str]) -> bool:
    """A Python started with -I, -E or -S ignores PYTHONPATH or site: no bootstrap runs in it."""
    for a in argv[1:]:
        if not a.startswith("-") or a in ("-c", "-m"):
            return False
        if a.startswith("--"):
            continue
        if any(ch in a[1:] for ch in "IES"):
            return True
    return False


def reason_not_followed(argv: list[str], exe: str | None, error: dict[str, Any] | None) -> str:
    """Why a process of the tree has no recording."""
    if error is not None:
        return f"the recorder could not start in it: {error.get('message')}"
    if not _is_python(argv, exe):
        what = os.path.basename(exe or (argv[0] if argv else "")) or "?"
        return (f"not a Python program ({what}): it cannot be recorded; CUDA graphs it made itself, if any, "
                "are not in the recording")
    if _isolated(argv):
        return "a Python started with -I, -E or -S (it ignores PYTHONPATH or site): the recorder could not attach"
    return ("a Python process that has no recording: it exited before the recorder attached, or its interpreter "
            "could not import cgtool")


def build(out: Path, *, program: list[str], exit_code: int | None, root_pid: int | None,
          seen: dict[int, Seen] | None = None, options: RecordOptions | None = None,
          started: float | None = None, notes: list[str] | None = None) -> TreeIndex:
    """The tree index of the recording in ``out`` (the processes' folders are read, nothing written)."""
    seen = dict(seen or {})
    procs: list[TreeProcess] = []
    followed_pids: set[int] = set()
    observed: dict[int, ChildSeen] = {}  # pid -> what recorded parents saw of it (the last known value of each field)
    observer: dict[int, int | None] = {}  # pid -> the recorded parent that saw it last
    errors: dict[int, dict[str, Any]] = {}
    folders = sorted((d for d in out.glob("p*") if d.is_dir() and _folder_key(d.name) is not None),
                     key=lambda d: _folder_key(d.name) or (0, 0))
    for d in folders:
        idx = _read_index(d)
        if idx is None:
            err = _read(d / "error.json")
            if isinstance(err, dict) and isinstance(err.get("pid"), int):
                errors[err["pid"]] = err
            continue
        for c in idx.children:
            prev = observed.get(c.pid)
            if prev is not None:
                c = msgspec.structs.replace(prev, **{k: v for k, v in msgspec.structs.asdict(c).items()
                                                     if v not in (None, [])})
            observed[c.pid], observer[c.pid] = c, idx.pid
        pid = idx.pid
        procs.append(TreeProcess(
            pid=pid, parent=idx.parent, argv=list(idx.program),
            started_as=idx.started_as, rank=idx.rank, local_rank=idx.local_rank,
            world_size=idx.world_size, folder=d.name, followed=True,
            finished=idx.finished, exit_code=idx.exit_code,
            exit_code_seen_by="itself" if idx.finished else None,
            exit=idx.exit, cuda=idx.cuda,
            graphs=len(idx.graphs), replays=sum(g.replays for g in idx.graphs),
            suspended=bool(idx.suspended), reason=None,
        ))
        if isinstance(pid, int):
            followed_pids.add(pid)
    # exit codes seen from outside: the last program of a pid (after exec) is the one that ended
    last_of = {p.pid: i for i, p in enumerate(procs) if p.pid is not None}  # folders are in (pid, exec) order
    for pid, i in last_of.items():
        last = procs[i]
        code, by = None, None
        if pid == root_pid and exit_code is not None:
            code, by = exit_code, "cgtool record (wait)"
        elif pid in seen and seen[pid].exit_code is not None:
            code, by = seen[pid].exit_code, "cgtool record (wait)"
        elif pid in observed and observed[pid].exit_code is not None:
            code, by = observed[pid].exit_code, f"its parent {observer.get(pid)} (wait)"
        if code is not None:
            if last.exit_code is not None and last.exit_code != code:
                last = msgspec.structs.replace(last, exit_code_reported=last.exit_code)
            last = msgspec.structs.replace(last, exit_code=code, exit_code_seen_by=by)
        if not last.finished:
            how = (f"it was killed by signal {code - 128}" if code is not None and code > 128 else
                   f"it ended with exit code {code} without finishing it (a crash)" if code is not None else
                   "it was killed (SIGKILL, a crash) or was still running")
            last = msgspec.structs.replace(last, reason=f"its recording did not finish: {how}; what it wrote by "
                                           "then is kept")
        procs[i] = last
    # processes without a recording
    unknown = set(seen) | set(observed) | set(errors)
    for pid in sorted(unknown - followed_pids):
        s, o, e = seen.get(pid), observed.get(pid), errors.get(pid)
        argv = (s.argv if s and s.argv else None) or (o.argv if o else None) or (e or {}).get("argv") or []
        exe = s.exe if s else None
        code = s.exit_code if s and s.exit_code is not None else o.exit_code if o else None
        procs.append(TreeProcess(
            pid=pid, parent=(s.parent if s else None) or observer.get(pid) or (e or {}).get("parent"),
            argv=argv, started_as=(o.how if o else None) or (e or {}).get("started_as"), followed=False,
            exit_code=code, exit_code_seen_by="wait" if code is not None else None,
            reason=reason_not_followed(argv, exe, e), makes_no_graphs=helper_command(argv, exe),
        ))
    entries = procs
    helpers = helpers_in(entries)  # helper commands, and what they started: not recorded, no graph missed
    entries = [msgspec.structs.replace(p, makes_no_graphs=helpers[p.pid],
                                       reason=f"{helpers[p.pid]}: a helper command, which makes no CUDA graph; "
                                       "not recorded")
               if not p.followed and p.pid in helpers else p for p in entries]
    entries.sort(key=lambda p: (p.pid != root_pid, p.pid or 0))
    not_followed = [p for p in entries if not p.followed]
    unseen = [p for p in not_followed if not p.makes_no_graphs]
    unfinished = [p for p in entries if p.followed and not p.finished]
    return TreeIndex(
        cgtool_record=TREE_SCHEMA,
        program=list(program),
        exit_code=exit_code,
        root_pid=root_pid,
        started=started,
        ended=time.time(),
        options=recorded_options(options) if options is not None else RecordedOptions(),
        processes=entries,
        followed=sum(1 for p in entries if p.followed),
        not_followed=len(not_followed),
        helpers=len(not_followed) - len(unseen),
        unfinished=len(unfinished),
        complete=not unseen and not unfinished,
        notes=list(notes or []) + [
            "processes were followed through a sitecustomize bootstrap (every Python that inherits PYTHONPATH), "
            "os.register_at_fork, and what recorded processes saw of their children; the launcher also scanned "
            f"/proc every {SCAN_S} s for descendants it could not record (a process that lived shorter than that "
            "and was not started by a recorded Python process may be missing)"],
    )


def recorded_options(opts: RecordOptions) -> RecordedOptions:
    """The options as the tree's index keeps them (``RecordedOptions`` has ``RecordOptions``'s fields)."""
    return msgspec.convert(opts.to_json(), RecordedOptions)


def write(out: Path, doc: TreeIndex) -> None:
    write_atomic(out / "index.json", doc, indent=1)
