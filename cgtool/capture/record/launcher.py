"""The parent side of ``cgtool record``: check the command line, start the child, pass its exit code.

Imports no torch and no CUPTI: the child (``_boot``) does the recording. With
``nproc_per_node > 1`` the child is started through ``torch.distributed.run`` (torchrun), one
process per rank, each writing into ``OUT/rank<R>``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cgtool.errors import CgtoolError, ExitCode, OutputExistsError, UsageError

_PYTHONS = ("python", "python3")


@dataclass(frozen=True)
class RecordSpec:
    """What to run and where to write."""

    program: list[str]  # prog.py ARGS, or -m module ARGS (a leading `python` is dropped)
    out: Path
    force: bool = False
    trace_replays: int = 0
    trace_skip: int = 1
    coverage: bool = False  # kernel time in and out of graph replays (CUPTI kernel activity)
    nproc_per_node: int = 1
    torchrun_args: list[str] = field(default_factory=list)  # --nnodes, --node-rank, --rdzv-endpoint ...


class RecordSetupFailed(CgtoolError):
    """The child could not start recording; the program did not run."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = ExitCode(code) if code in {int(c) for c in ExitCode} else ExitCode.CAPTURE_FAILED


def normalise_program(cmd: list[str]) -> list[str]:
    """``python prog.py ARGS`` / ``prog.py ARGS`` / ``python -m mod ARGS`` -> ``[prog.py|-m mod, ARGS...]``.

    The program always runs under the interpreter running cgtool (the child must import cgtool),
    so a leading ``python``/``python3``/path to one is dropped.
    """
    if cmd and (os.path.basename(cmd[0]).startswith(_PYTHONS) and not cmd[0].endswith(".py")):
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("No program given: write `cgtool record -- python prog.py ARGS` (or `-m module`).")
    if cmd[0] == "-m":
        if len(cmd) < 2:
            raise UsageError("`-m` needs a module name: `cgtool record -- python -m package.module ARGS`.")
        return cmd
    if cmd[0].startswith("-"):
        raise UsageError(f"Interpreter option {cmd[0]!r} is not supported; give the script or `-m module`.")
    if not os.path.isfile(cmd[0]):
        raise UsageError(f"Program not found: {cmd[0]} (no such file; give a path to a Python script, or "
                         "`-m module` for a module on the path).")
    return cmd


def prepare_out(out: Path, force: bool) -> None:
    """Create ``out``; an existing folder is replaced only with ``force``, and only if it is a recording."""
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
        shutil.rmtree(out)
    out.mkdir(parents=True)


def child_command(spec: RecordSpec) -> list[str]:
    boot = ["--out", str(spec.out)]
    if spec.trace_replays:
        boot += ["--trace-replays", str(spec.trace_replays), "--trace-skip", str(spec.trace_skip)]
    if spec.coverage:
        boot += ["--coverage"]
    boot += ["--"] + spec.program
    if spec.nproc_per_node > 1 or spec.torchrun_args:
        return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(spec.nproc_per_node),
                *spec.torchrun_args, "-m", "cgtool.capture.record._boot", *boot]
    return [sys.executable, "-m", "cgtool.capture.record._boot", *boot]


def run(spec: RecordSpec) -> int:
    """Run the program under the recorder; its exit code, or RecordSetupFailed if it never ran."""
    return finish(spec, start(spec))


def start(spec: RecordSpec) -> subprocess.Popen[bytes]:
    """Prepare the output folder and start the recording child (the program runs from here on)."""
    prepare_out(spec.out, spec.force)
    env = dict(os.environ)
    # The child must import this cgtool, wherever it was installed from.
    root = str(Path(__file__).resolve().parents[3])
    env["CGTOOL_RECORD_PARENT"] = "1"
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen(child_command(spec), env=env)


def finish(spec: RecordSpec, proc: subprocess.Popen[bytes]) -> int:
    """Wait for the child started by :func:`start`: the program's exit code, or RecordSetupFailed."""
    try:
        code = proc.wait()
    except KeyboardInterrupt:  # the child got the same Ctrl-C: let it finish its recording
        try:
            proc.wait()
        except KeyboardInterrupt:
            proc.kill()
            proc.wait()
        code = 130
    for err_file in [spec.out / "error.json", *sorted(spec.out.glob("rank*/error.json"))]:
        if err_file.exists():
            try:
                doc = json.loads(err_file.read_text())
                raise RecordSetupFailed(str(doc["message"]), int(doc["exit_code"]))
            except (ValueError, KeyError):
                raise RecordSetupFailed(f"Recording could not start (unreadable {err_file}).", 3) from None
    return code if code >= 0 else 128 - code
