"""Every process of a recorded program records itself, each into its own folder of the recording.

How a process comes to be recorded: the launcher (``cgtool record``) or the library API
(``cgtool.record()``) puts a bootstrap folder first on ``PYTHONPATH`` whose ``sitecustomize.py``
(:func:`bootstrap_source`) calls :func:`start_from_environment` in every Python process that
inherits the environment: the program, its ``multiprocessing`` children (spawn, forkserver: their
interpreters start anew), its ``subprocess``/``os.exec*`` Python children, torchrun's workers,
console scripts (``torchrun``, ``vllm``, ``pytest``) and shell scripts that end up running Python.
A fork needs no bootstrap: :func:`os.register_at_fork` gives the child a recording of its own
(a fork of a process that had initialised CUDA cannot use CUDA: its entry says so).

Each process writes ``OUT/p<PID>/`` (``p<PID>-x<N>`` for the N-th program an ``os.exec*`` made of
the same pid): its own ``index.json`` (who it is: pid, parent, argv, rank; its graphs) and graph
files. It also notes the children it starts or waits for (``subprocess``, ``os.fork``,
``os.posix_spawn``, multiprocessing's spawn, and the exit status its ``waitpid`` saw), so that a
child that is not Python, or exits before its recorder attaches, is still named in the tree
(``tree.py``), and its exit code is the one its parent saw.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import msgspec

from cgtool.artifacts.recording import ChildSeen, CudaNote, write_atomic
from cgtool.capture.record import attribution, exits
from cgtool.capture.record.options import PROCESS_ENV, RecordOptions
from cgtool.capture.record.recorder import ProcessInfo, Recorder

#: The recorder of this process, once started (None again after the library API's block ends).
current: Recorder | None = None
_exit_state: exits.ExitState | None = None
_hooks_installed = False
_cuda_at_fork: dict[str, Any] = {}


def _finish_current(code: int | None, how: str) -> None:
    """What every exit path calls (``exits.py``): finish this process's recording, if it has one."""
    rec = current
    if rec is not None:
        rec.finish(code, how)


def folder_for(root: Path, pid: int) -> Path:
    """``root/p<pid>``, or ``p<pid>-x<N>`` when an earlier program of the same pid (before an
    ``os.exec*``) has it."""
    d = root / f"p{pid}"
    n = 0
    while d.exists():
        n += 1
        d = root / f"p{pid}-x{n}"
    return d


def started_as(launcher: int | None, argv: list[str], root: Path, pid: int) -> str:
    """How this process began: root (the launcher's child), exec, spawn, forkserver, or python."""
    if (root / f"p{pid}").exists():
        return "exec"
    if launcher is not None and os.getppid() == launcher:
        return "root"
    text = " ".join(argv)
    if "--multiprocessing-fork" in text:
        return "spawn"
    if "multiprocessing.forkserver" in text:
        return "forkserver"
    return "python"


def write_error(folder: Path, info: ProcessInfo, message: str, code: int) -> None:
    """Why this process is not recorded (the recorder could not start), where the tree finds it."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"message": message, "exit_code": code, "pid": info.pid, "parent": info.parent, "argv": info.argv,
           "started_as": info.started_as}
    write_atomic(folder / "error.json", doc)


def start(root: Path, opts: RecordOptions, *, launcher: int | None = None, argv: list[str] | None = None,
          strict: bool = False) -> Recorder | None:
    """Record this process into a new folder of ``root``; None when recording cannot start (the
    reason is in that folder's ``error.json``). ``strict``: raise instead (the program's first
    process, which is then not run, and the library API)."""
    global current, _exit_state
    from cgtool.errors import CgtoolError

    pid = os.getpid()
    argv = list(argv if argv is not None else (getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]))
    how = started_as(launcher, argv, root, pid)
    info = ProcessInfo.current(argv, how)
    folder = folder_for(root, pid)
    rec = Recorder(str(folder), opts, info=info)
    try:
        rec.start()
    except CgtoolError as e:
        write_error(folder, info, e.message, int(e.exit_code))
        if strict:
            raise
        return None
    current = rec
    install_hooks()
    rec.install_stops()
    return rec


def install_hooks() -> None:
    """The exit guards, fork handlers and child observers, once per process (they act on :data:`current`)."""
    global _exit_state, _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    _exit_state = exits.install(_finish_current)
    observe_children()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent, after_in_child=_after_fork_child)


def start_from_environment(t_boot: float | None = None) -> bool:
    """The bootstrap's entry: record this process when :data:`PROCESS_ENV` names a recording.

    The program's first process (the launcher's child) is not run when recording cannot start in it
    (the launcher prints why from its ``error.json``, exit 3); any other process runs unrecorded,
    and the tree says why. ``t_boot``: when the interpreter reached the bootstrap (``time.time()``)."""
    raw = os.environ.get(PROCESS_ENV)
    if not raw or current is not None:
        return False
    cfg = json.loads(raw)
    opts = RecordOptions.from_json(cfg["options"])
    launcher = cfg.get("launcher")
    root = Path(opts.out)
    is_root = launcher is not None and os.getppid() == launcher and not (root / f"p{os.getpid()}").exists()
    try:
        rec = start(root, opts, launcher=launcher, strict=is_root)
    except Exception as e:  # the first process: not run (its error.json says why, the launcher prints it)
        sys.stderr.flush()
        os._exit(int(getattr(e, "exit_code", 3)))
    if rec is not None:
        rec.timeline["boot_start"] = float(t_boot if t_boot is not None else rec.started)
        rec.timeline["program_start"] = rec.timeline.get("recorder_start", rec.started)
    return rec is not None


# ------------------------------------------------------------------------------------- forks
#: The forking thread's signal mask while ``os.fork`` runs (:func:`_before_fork`).
_fork_mask: dict[str, Any] = {}


def _before_fork() -> None:
    """Before ``os.fork`` in a recorded process: the forking thread blocks the signals that come
    from outside until each side of the fork has set itself up (``_after_fork_*`` restore its mask).

    Python drops, in a fork's child, every signal its handlers had not run for yet (CPython's
    ``PyOS_AfterFork_Child``): a SIGTERM sent to a child that had not run since the fork (a forkserver
    pool worker that ``Pool.terminate()`` stopped before it was first scheduled) was lost, because the
    recorder's SIGTERM handler, inherited, made it a Python handler's, where without the recorder the
    default action kills the child. Blocked across the fork, such a signal stays pending and is
    delivered once the child's mask is restored, after its recording is set up."""
    rec = current
    if rec is None:
        return
    _fork_mask["old"] = exits.block_outside_signals()
    torch = sys.modules.get("torch")
    try:
        _cuda_at_fork["initialised"] = bool(torch is not None and torch.cuda.is_initialized())
    except Exception:
        _cuda_at_fork["initialised"] = None
    _cuda_at_fork["parent"] = os.getpid()
    rec.tracker.lock.acquire()


def _after_fork_parent() -> None:
    rec = current
    if rec is not None:
        try:
            rec.tracker.lock.release()
        except RuntimeError:
            pass
    exits.restore_signal_mask(_fork_mask.pop("old", None))


def _after_fork_child() -> None:
    """The child of a fork gets its own recording (a new folder, empty state, a writer of its own)."""
    rec = current
    if rec is None:
        exits.restore_signal_mask(_fork_mask.pop("old", None))
        return
    try:
        parent = int(_cuda_at_fork.get("parent") or os.getppid())
        info = ProcessInfo.current(rec.info.argv, "fork")
        info.parent = parent
        if _cuda_at_fork.get("initialised"):
            info.cuda_note = CudaNote(
                usable=False, tried=False,
                reason=f"forked from process {parent} after it had initialised CUDA: CUDA cannot be used in this "
                       "process (torch raises \"Cannot re-initialize CUDA in forked subprocess\"); use the "
                       "spawn or forkserver start method for workers that use the GPU")
            _note_cuda_tries()
        root = Path(rec.out_dir).parent
        rec.after_fork_child(str(folder_for(root, os.getpid())), info)
    except Exception:  # never break the child: it runs unrecorded
        pass
    finally:
        exits.restore_signal_mask(_fork_mask.pop("old", None))  # a signal that came since the fork: now


def _note_cuda_tries() -> None:
    """Mark the recorder's ``info.cuda_note.tried`` when this forked process calls torch's CUDA
    initialisation (which raises here): the advice to use spawn is given only to processes that tried
    to use the GPU. The note is the current recorder's (a fork of this fork has its own)."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    real = getattr(cuda, "_lazy_init", None)
    if real is None or getattr(real, "_cgtool", False):
        return

    def _lazy_init() -> Any:
        rec = current
        note = rec.info.cuda_note if rec is not None else None
        if rec is not None and note is not None and not note.tried:
            rec.info.cuda_note = msgspec.structs.replace(note, tried=True)
            if rec.writer is not None:
                rec.writer.mark_dirty()
        return real()

    _lazy_init._cgtool = True  # type: ignore[attr-defined]
    setattr(cuda, "_lazy_init", _lazy_init)


# ---------------------------------------------------------------------- children it starts
def _note(rec: Recorder, pid: int, argv: Any, how: str) -> None:
    try:
        args = [str(a) for a in argv] if isinstance(argv, (list, tuple)) else [str(argv)]
    except Exception:
        args = []
    rec.info.children[pid] = ChildSeen(pid=pid, argv=args[:64], how=how, exit_code=None)
    if rec.writer is not None:
        rec.writer.mark_dirty()


def _note_status(rec: Recorder, pid: int, status: int) -> None:
    try:
        code = os.waitstatus_to_exitcode(status)
    except ValueError:
        return
    entry = rec.info.children.get(pid) or ChildSeen(pid=pid, argv=[], how="waited", exit_code=None)
    rec.info.children[pid] = msgspec.structs.replace(entry, exit_code=code if code >= 0 else 128 - code,
                                                     signal=-code if code < 0 else None)
    if rec.writer is not None:
        rec.writer.mark_dirty()


def observe_children() -> None:
    """Wrap the ways a Python process starts and reaps children (cheap: once per child)."""
    real_fork = getattr(os, "fork", None)
    if real_fork is not None and not getattr(real_fork, "_cgtool", False):
        def fork() -> int:
            pid = int(real_fork())
            if pid > 0 and current is not None:
                _note(current, pid, current.info.argv, "fork")
            return pid

        fork._cgtool = True  # type: ignore[attr-defined]
        os.fork = fork
    for name in ("posix_spawn", "posix_spawnp"):
        real = getattr(os, name, None)
        if real is None or getattr(real, "_cgtool", False):
            continue

        def spawn(path: Any, argv: Any, *a: Any, _real: Any = real, **kw: Any) -> int:
            pid = int(_real(path, argv, *a, **kw))
            if current is not None:
                _note(current, pid, argv, "posix_spawn")
            return pid

        spawn._cgtool = True  # type: ignore[attr-defined]
        setattr(os, name, spawn)
    real_waitpid = os.waitpid
    if not getattr(real_waitpid, "_cgtool", False):
        def waitpid(pid: int, options: int) -> tuple[int, int]:
            got, status = real_waitpid(pid, options)
            if got > 0 and current is not None:
                _note_status(current, got, status)
            return got, status

        waitpid._cgtool = True  # type: ignore[attr-defined]
        os.waitpid = waitpid
    attribution.on_import("subprocess", _wrap_subprocess)
    attribution.on_import("multiprocessing.util", _wrap_mp_util)


def _wrap_subprocess(mod: Any) -> None:
    Popen = getattr(mod, "Popen", None)
    real = getattr(Popen, "_execute_child", None)
    if Popen is None or real is None or getattr(real, "_cgtool", False):
        return

    def _execute_child(self: Any, args: Any, *a: Any, **kw: Any) -> Any:
        out = real(self, args, *a, **kw)
        if current is not None and getattr(self, "pid", None):
            _note(current, int(self.pid), args if isinstance(args, (list, tuple)) else [args], "subprocess")
        return out

    _execute_child._cgtool = True  # type: ignore[attr-defined]
    Popen._execute_child = _execute_child


def _wrap_mp_util(mod: Any) -> None:
    real = getattr(mod, "spawnv_passfds", None)
    if real is None or getattr(real, "_cgtool", False):
        return

    def spawnv_passfds(path: Any, args: Any, passfds: Any) -> int:
        pid = int(real(path, args, passfds))
        if current is not None:
            _note(current, pid, args, "multiprocessing")
        return pid

    spawnv_passfds._cgtool = True  # type: ignore[attr-defined]
    mod.spawnv_passfds = spawnv_passfds


def bootstrap_source(cgtool_root: str) -> str:
    """The ``sitecustomize.py`` the bootstrap folder holds: record this process, then run the
    ``sitecustomize`` it shadows. Nothing it does may stop the program: failures are reported in
    the recording (the recorder's own ``error.json``) or, before cgtool can be imported, ignored."""
    return f'''# Written by `cgtool record`: records this Python process (cgtool/capture/record/process.py).
import os as _os, sys as _sys, time as _time

_t = _time.time()
_here = _os.path.dirname(_os.path.abspath(__file__))

# The sitecustomize this one shadows, if any, runs first, as it would have (it may start a profiler
# of its own: then CUPTI is held, and the recording says so).
_at = [_i for _i, _p in enumerate(_sys.path) if _os.path.abspath(_p or ".") == _here]
_sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
_mine = _sys.modules.pop("sitecustomize", None)
try:
    import sitecustomize  # noqa: F401
except ImportError:
    pass
except Exception as _e:
    _sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\\n%s: %s\\n" % (type(_e).__name__, _e))
finally:
    if _mine is not None:
        _sys.modules["sitecustomize"] = _mine
    # Back where PYTHONPATH put it: a Python child given PYTHONPATH built from sys.path (torch's
    # python_subprocess_env: torch.compile's compile workers) runs this bootstrap too.
    if _at:
        _sys.path.insert(min(_at[0], len(_sys.path)), _here)


def _cgtool_record():
    try:
        import cgtool  # noqa: F401
    except ImportError:
        # The interpreter running cgtool for the launcher had it here; an interpreter of the same
        # version may use it from there (added last: the program's own packages come first).
        if _sys.version_info[:2] != {tuple(sys.version_info[:2])!r}:
            return
        _sys.path.append({cgtool_root!r})
    from cgtool.capture.record.process import start_from_environment
    start_from_environment(_t)


def _makes_no_graphs():
    # torch.compile's compile workers (and the pool they fork) cannot make a CUDA graph: they start
    # no recorder (read from the command line, before anything is imported; the tree still names
    # them, as helpers). artifacts.recording.helper_command says the same of finished recordings.
    _a = [str(_x).replace(chr(92), "/") for _x in (getattr(_sys, "orig_argv", None) or _sys.argv)[:4]]
    return (any(_x.endswith("torch/_inductor/compile_worker/__main__.py") for _x in _a)
            or "torch._inductor.compile_worker" in _a)


if _os.environ.get("{PROCESS_ENV}") and not _makes_no_graphs():
    try:
        _cgtool_record()
    except Exception as _e:  # the program runs unrecorded; the tree lists it as not followed
        _sys.stderr.write("cgtool record: this process is not recorded (%s: %s)\\n" % (type(_e).__name__, _e))
'''
