"""Commands that run cgtool again in child processes (the demo's steps; capture, export and trace
under torchrun): the children's exit codes become cgtool's, and Ctrl-C or SIGTERM reach them.

torchrun itself exits 1 when any rank fails, whatever the rank's code (a capture that failed with 3
would read as "a check failed"), so each rank writes its own exit status into a folder the parent
names (``RANK_STATUS_ENV``, written by ``cgtool.cli._guard.guarded``), and the parent exits with
the first failing rank's code.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from cgtool.cli._guard import RANK_STATUS_ENV, _paragraph, exit_status
from cgtool.errors import ExitCode, Terminated

#: How long a child that got the same Ctrl-C (the terminal sends it to the whole process group)
#: may take to finish before it is sent one itself; torchrun, whose ranks run in sessions of their
#: own (the terminal's signal misses them), passes its SIGINT on to them and stops them in this time.
INTERRUPT_GRACE_S = 5.0
#: How long a child may take to end after SIGTERM (torchrun waits up to 30 s for its workers).
TERMINATE_GRACE_S = 35.0


def run_child(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run ``cmd`` to its end; its exit status (a signal N that killed it: 128 + N).

    Ctrl-C: the child, in the same process group, got it too; it is given INTERRUPT_GRACE_S to
    finish, then sent SIGINT, SIGTERM and SIGKILL in turn, and the interrupt goes on up (exit 130).
    SIGTERM to cgtool alone is passed on to the child, which is waited for (then killed), and the
    ``Terminated`` goes on up (exit 143). No child is left running behind cgtool."""
    proc = subprocess.Popen(list(cmd), env=dict(env) if env is not None else None)
    try:
        return exit_status(proc.wait())
    except KeyboardInterrupt:
        _stop(proc, [(INTERRUPT_GRACE_S, None), (INTERRUPT_GRACE_S, signal.SIGINT),
                     (TERMINATE_GRACE_S, signal.SIGTERM), (5.0, signal.SIGKILL)])
        raise
    except Terminated as e:
        _stop(proc, [(TERMINATE_GRACE_S, signal.Signals(e.signum)), (5.0, signal.SIGKILL)])
        raise


def _stop(proc: subprocess.Popen[bytes], steps: list[tuple[float, signal.Signals | None]]) -> None:
    """Send each step's signal (None: none) and wait up to its time, until ``proc`` has ended.
    A further Ctrl-C or SIGTERM while waiting kills it at once."""
    try:
        for wait_s, sig in steps:
            if proc.poll() is not None:
                return
            if sig is not None:
                proc.send_signal(sig)
            try:
                proc.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                continue
    except (KeyboardInterrupt, Terminated):
        proc.kill()
        proc.wait()
        raise


@dataclass(frozen=True)
class RankStatus:
    """How the ranks of a torchrun job ended: each rank's status (None: it wrote none, so it was
    killed or never started) and torchrun's own exit status."""

    nproc: int
    codes: tuple[int | None, ...]
    launcher: int

    def exit_code(self) -> int:
        """The job's exit status: the first rank (by rank) that failed with its own code; else, a
        rank interrupted or terminated (130, 143: torchrun stops the others when one fails); else
        3 (capture failed) when a rank wrote no status (killed: a crash, the out-of-memory killer;
        or none started) or torchrun failed after them all; else 0."""
        failed = [c for c in self.codes if c]
        own = [c for c in failed if c not in (ExitCode.INTERRUPTED, ExitCode.TERMINATED)]
        if own:
            return own[0]
        if None not in self.codes:
            return failed[0] if failed else 0 if self.launcher == 0 else int(ExitCode.CAPTURE_FAILED)
        return int(ExitCode.CAPTURE_FAILED)

    def problem(self) -> str | None:
        """What the job's exit status alone does not say: ranks that wrote no status, or torchrun
        failing after every rank succeeded."""
        missing = [r for r, c in enumerate(self.codes) if c is None]
        if not missing:
            return None if self.launcher == 0 or any(self.codes) else (
                f"every rank succeeded but torchrun exited {self.launcher} (its own output is above).")
        if len(missing) == self.nproc:
            return (f"torchrun exited {self.launcher} before any of the {self.nproc} ranks ran cgtool to its end "
                    "(its own output is above): the workload was not captured.")
        return (f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} ended without an exit "
                f"status (killed by a signal or by torchrun; torchrun exited {self.launcher}); its output is above.")


def read_rank_status(folder: Path, nproc: int, launcher: int) -> RankStatus:
    codes: list[int | None] = []
    for r in range(nproc):
        try:
            codes.append(int((folder / f"rank{r}").read_text().strip()))
        except (OSError, ValueError):
            codes.append(None)
    return RankStatus(nproc, tuple(codes), exit_status(launcher))


def run_ranks(cmd: Sequence[str], nproc: int, env: Mapping[str, str]) -> int:
    """Run the torchrun command ``cmd`` (``nproc`` ranks of cgtool) and return the job's exit status
    (``RankStatus.exit_code``), saying on stderr what the status alone does not."""
    with tempfile.TemporaryDirectory(prefix="cgtool-ranks-") as d:
        launcher = run_child(cmd, {**env, RANK_STATUS_ENV: d})
        status = read_rank_status(Path(d), nproc, launcher)
    note = status.problem()
    if note:
        _paragraph(f"cgtool: {note}")
    return status.exit_code()

