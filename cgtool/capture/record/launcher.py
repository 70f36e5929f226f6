"""The parent side of ``cgtool record``: check, start the program, watch its process tree, pass its exit code.

Imports no torch, no CUPTI and no numpy: the program's own processes do the recording
(``process.py``). The parent

* checks that recording can work here before anything is written (:func:`preflight`: a CUDA driver
  first, then cupti-python), and the output folder (:func:`prepare_out`);
* writes the bootstrap ``OUT/.boot/sitecustomize.py`` and starts the command after ``--`` as it is
  (a script, ``-m module``, a console script such as ``torchrun``, a shell script, any executable)
  with that folder first on ``PYTHONPATH``, so every Python process of the program records itself;
* is the program's child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): processes orphaned by their
  parent come to it, and it reaps them with their exit status; it scans ``/proc`` every
  ``tree.SCAN_S`` for the descendants, to name those that cannot be recorded;
* when the program's first process has ended, waits up to :data:`GRACE_S` for the rest of the tree,
  then writes the tree (``tree.build``) as ``OUT/index.json`` and returns the program's exit code.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from cgtool.capture.record import stops, tree
from cgtool.capture.record.exits import signals_to_other_threads
from cgtool.capture.record.options import PROCESS_ENV, RecordOptions, process_env_value
from cgtool.errors import CgtoolError, ExitCode, OutputExistsError, UsageError

#: Seconds the launcher waits for the rest of the program's processes after its first one ended.
GRACE_S = 5.0
BOOT = ".boot"
_PYTHONS = re.compile(r"^python(3(\.\d+)?)?$")
_PR_SET_CHILD_SUBREAPER = 36


class RecordSetupFailed(CgtoolError):
    """Recording could not start; the program did not run."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = ExitCode(code) if code in {int(c) for c in ExitCode} else ExitCode.CAPTURE_FAILED


# ----------------------------------------------------------------------------------- checks
def _torch_cpu_only() -> str | None:
    """The installed torch's version when it is a CPU-only build (read from its files, not imported)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = Path(list(spec.submodule_search_locations)[0], "version.py").read_text()
    except OSError:
        return None
    if re.search(r"^cuda\s*(:[^=]*)?=\s*None\s*$", text, re.M):
        m = re.search(r"^__version__\s*(:[^=]*)?=\s*'([^']+)'", text, re.M)
        return m.group(2) if m else "?"
    return None


def preflight() -> None:
    """:class:`RecordSetupFailed` when recording cannot work here: no CUDA driver (said first), or
    no cupti-python. Nothing is written and nothing runs before this passes."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        cpu = _torch_cpu_only()
        raise RecordSetupFailed(
            "No CUDA here: the CUDA driver (libcuda.so.1) is not installed, so no program can make CUDA graphs"
            + (f", and torch {cpu} here is a CPU-only build" if cpu else "")
            + ". Run `cgtool record` on a machine with an NVIDIA GPU and its driver (and a CUDA build of torch). "
            "The program was not started.", int(ExitCode.CAPTURE_FAILED)) from None
    if sys.modules.get("cupti") is None:
        try:
            found = importlib.util.find_spec("cupti") is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise RecordSetupFailed(
                "`cgtool record` needs cupti-python, which is not installed; take the version that matches your "
                "CUDA's CUPTI, e.g. `pip install 'cupti-python==13.0.*'` for CUDA 13.0 (or `pip install "
                "'cgtool[gpu]'`). The program was not started.", int(ExitCode.CAPTURE_FAILED))


def command_line(program: list[str], opts: RecordOptions) -> list[str]:
    """The command to start: the user's, with a leading ``python`` run as this interpreter (which
    has cgtool), a ``.py`` file or ``-m module`` run by it too; anything else as it is."""
    cmd = list(program)
    dropped = bool(cmd) and _PYTHONS.match(cmd[0]) is not None
    if dropped:
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("No program given: write `cgtool record -- python prog.py ARGS` (or `-m module`, or any "
                         "command, e.g. `-- torchrun --nproc-per-node 2 prog.py`).")
    python_prog = dropped or cmd[0] == "-m" or cmd[0].endswith(".py") or cmd[0].startswith("-")
    if cmd[0] == "-m" and len(cmd) < 2:
        raise UsageError("`-m` needs a module name: `cgtool record -- python -m package.module ARGS`.")
    if cmd[0] in ("-I", "-E", "-S") or (cmd[0].startswith("-") and not cmd[0].startswith("--")
                                         and any(c in cmd[0][1:] for c in "IES") and cmd[0] not in ("-m", "-c")):
        raise UsageError(f"Interpreter option {cmd[0]!r} makes Python ignore PYTHONPATH or site, so the recorder "
                         "cannot attach to it; leave it out.")
    if opts.uses_torchrun:
        if not (cmd[0] == "-m" or cmd[0].endswith(".py")):
            raise UsageError("--nproc-per-node starts a Python script or `-m module` through torchrun; for another "
                             "command write it after `--` (e.g. `-- torchrun --nproc-per-node 2 prog.py`).")
        _check_script(cmd)
        return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(opts.nproc_per_node),
                *opts.torchrun_args(), *cmd]
    if python_prog:
        _check_script(cmd)
        return [sys.executable, *cmd]
    exe = cmd[0]
    found = shutil.which(exe) if os.sep not in exe else (exe if os.access(exe, os.X_OK) and os.path.isfile(exe)
                                                            else None)
    if found is None:
        if os.path.isfile(exe):  # a script without the executable bit: what `python FILE` would do
            return [sys.executable, *cmd]
        raise UsageError(f"Program not found: {exe} (no such file, and no such command on PATH; give a Python "
                         "script, `-m module`, or a command).")
    return cmd


def _check_script(cmd: list[str]) -> None:
    if cmd[0] == "-m" or cmd[0].startswith("-"):
        return
    if not os.path.isfile(cmd[0]):
        raise UsageError(f"Program not found: {cmd[0]} (no such file; give a path to a Python script, or "
                         "`-m module` for a module on the path).")


def check_out(out: Path, force: bool) -> None:
    """:class:`UsageError` unless ``out`` may be written: absent, or (with ``force``) a recording."""
    if out.exists():
        if not force:
            raise OutputExistsError(out)
        if not out.is_dir():
            raise UsageError(f"Output exists and is not a folder, will not replace it: {out}")
        entries = list(out.iterdir())
        marks = ("index.json", "error.json")
        if entries and not any((out / m).exists() for m in marks) and not any(
                (e / m).exists() for e in entries if e.is_dir() for m in marks):
            raise UsageError(f"Output folder {out} exists and does not hold a recording (no index.json); "
                             "will not delete it even with --force. Pick another folder.")


def prepare_out(out: Path, force: bool) -> None:
    """Create ``out``; an existing folder is replaced only with ``force``, and only if it is a recording."""
    check_out(out, force)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)


def cgtool_root() -> str:
    """The folder cgtool is imported from (for a bootstrap whose interpreter does not have it)."""
    return str(Path(__file__).resolve().parents[3])


def write_boot(out: Path) -> Path:
    from cgtool.capture.record.process import bootstrap_source

    boot = out / BOOT
    boot.mkdir(exist_ok=True)
    (boot / "sitecustomize.py").write_text(bootstrap_source(cgtool_root()))
    return boot


def child_env(opts: RecordOptions, boot: Path, launcher_pid: int | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(boot) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[PROCESS_ENV] = process_env_value(opts, launcher_pid=launcher_pid, boot_dir=str(boot),
                                         cgtool_root=cgtool_root())
    return env


# ----------------------------------------------------------------------------------- the tree
def become_subreaper() -> bool:
    """Orphaned descendants come to this process (Linux); False where that is not possible."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> int | None:
    """The parent pid of ``pid`` from /proc (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        return int(data[data.rindex(b")") + 2:].split(b" ", 2)[1])
    except (ValueError, IndexError):
        return None


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


class Watcher:
    """The program's descendants, from /proc, every ``tree.SCAN_S`` (a thread of the launcher)."""

    def __init__(self, ancestor: int) -> None:
        self.ancestor = ancestor
        self.seen: dict[int, tree.Seen] = {}
        self.live: set[int] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="cgtool-record-watcher", daemon=True)
        self.available = os.path.isdir("/proc/self")

    def start(self) -> None:
        if self.available:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)

    def _loop(self) -> None:
        signals_to_other_threads()  # the launcher's main thread forwards them (_wait)
        while not self._stop.is_set():
            self.scan()
            self._stop.wait(tree.SCAN_S)

    def scan(self) -> set[int]:
        parent: dict[int, int] = {}
        try:
            names = os.listdir("/proc")
        except OSError:
            return set()
        for name in names:
            if name.isdigit():
                pp = _stat(int(name))
                if pp is not None:
                    parent[int(name)] = pp
        children: dict[int, list[int]] = {}
        for p, pp in parent.items():
            children.setdefault(pp, []).append(p)
        live: set[int] = set()
        todo = list(children.get(self.ancestor, []))
        while todo:
            p = todo.pop()
            if p in live:
                continue
            live.add(p)
            todo += children.get(p, [])
        with self._lock:
            for p in live:
                s = self.seen.get(p)
                argv = _argv(p)
                if s is None:
                    self.seen[p] = tree.Seen(pid=p, parent=parent.get(p), argv=argv, exe=_exe(p))
                elif argv and argv != s.argv:  # it exec'd another program: keep the latest
                    s.argv, s.exe = argv, _exe(p)
            self.live = live
        return live

    def reaped(self, pid: int, status: int) -> None:
        code = os.waitstatus_to_exitcode(status)
        with self._lock:
            s = self.seen.get(pid)
            if s is None:
                s = self.seen[pid] = tree.Seen(pid=pid, parent=None, argv=[])
            s.exit_code = code if code >= 0 else 128 - code
            s.signal = -code if code < 0 else None


def run(opts: RecordOptions, program: list[str]) -> int:
    """Record the program; its exit code, or :class:`RecordSetupFailed` when it never ran."""
    cmd = command_line(program, opts)
    out = Path(opts.out)
    check_out(out, opts.force)  # usage errors (2) before what this machine lacks (3)
    preflight()
    prepare_out(out, opts.force)
    try:
        boot = write_boot(out)
        started = time.time()
        subreaper = become_subreaper()
        me = os.getpid()
        watcher = Watcher(me)
        env = child_env(opts.with_out(out.resolve()), boot, me)
        try:
            proc = subprocess.Popen(cmd, env=env)
        except OSError as e:
            raise UsageError(f"Could not start {cmd[0]}: {e.strerror or e}.") from None
        watcher.start()
        code = _wait(proc, watcher)
        watcher.stop()
        watcher.scan()
        stops.drop_empty_stack_files(out)  # written only where a dump went in
        err = _root_error(out, proc.pid)
        if err is not None:
            raise RecordSetupFailed(str(err.get("message")), int(str(err.get("exit_code") or 3)))
        notes = [] if subreaper else ["this system does not let cgtool record adopt orphaned processes "
                                      "(PR_SET_CHILD_SUBREAPER): exit codes of orphans are unknown"]
        doc = tree.build(out, program=list(program), exit_code=code, root_pid=proc.pid, seen=watcher.seen,
                         options=opts, started=started, notes=notes)
        tree.write(out, doc)
        return code
    except RecordSetupFailed:
        # Nothing was recorded and the program did not run: the folder made here goes (a retry must
        # not find "File already exists" for a folder the user never saw filled).
        shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(out / BOOT, ignore_errors=True)


def _root_error(out: Path, pid: int) -> dict[str, object] | None:
    d = out / f"p{pid}"
    if (d / "index.json").exists() or not (d / "error.json").exists():
        return None
    try:
        doc = json.loads((d / "error.json").read_text())
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return {"message": f"Recording could not start (unreadable {d / 'error.json'}).", "exit_code": 3}


def _wait(proc: subprocess.Popen[bytes], watcher: Watcher) -> int:
    """Reap children (the program's first process, and orphans adopted) until the first process has
    ended and the rest of the tree has (or :data:`GRACE_S` passed); the first process's exit code."""
    root = proc.pid
    code: int | None = None
    forward = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):  # passed on to the program, as a shell would
        try:
            forward[sig] = signal.signal(sig, lambda s, f: _send(root, s))
        except (ValueError, OSError):
            pass
    interrupted = 0
    deadline: float | None = None
    try:
        while True:
            try:
                if code is None:
                    pid, status = os.waitpid(-1, 0)
                else:
                    pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid, status = 0, 0
                if code is None:  # the first process was reaped elsewhere: should not happen
                    code = proc.returncode if proc.returncode is not None else 1
            except KeyboardInterrupt:  # the program got the same Ctrl-C: let it finish its recording
                interrupted += 1
                if interrupted > 1:
                    _send(root, signal.SIGKILL)
                continue
            if pid > 0:
                watcher.reaped(pid, status)
                if pid == root:
                    c = os.waitstatus_to_exitcode(status)
                    code = c if c >= 0 else 128 - c
                    proc.returncode = c
                    deadline = time.monotonic() + GRACE_S
                continue
            if code is not None:
                live = watcher.scan() if watcher.available else set()
                if not live or (deadline is not None and time.monotonic() >= deadline):
                    break
                time.sleep(0.05)
    finally:
        for sig, old in forward.items():
            try:
                signal.signal(sig, old)
            except (ValueError, OSError):
                pass
    return 130 if interrupted and code == 0 else int(code if code is not None else 1)


def _send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass
