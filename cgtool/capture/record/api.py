"""The library API: ``with cgtool.record("rec"): ...`` records the CUDA graphs made inside the block.

The same recorder ``cgtool record`` runs in every process of a program (``process.py``), started in
this process for the block, and (``follow=True``) in every Python process started inside it: the
block puts the bootstrap folder first on ``PYTHONPATH`` for its children, as the command does. When
the block ends, this process's recording is finished (its graphs' replays up to then) and the
recording's ``index.json`` lists the processes. ``cgtool record -- python prog.py`` is this block
around the whole program, in every process of it, plus the exit code and the processes seen from
outside (``launcher.py``).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from cgtool.capture.record import process, tree
from cgtool.capture.record.launcher import BOOT, child_env, prepare_out, write_boot
from cgtool.capture.record.options import PROCESS_ENV, RecordOptions
from cgtool.capture.record.recorder import Recorder
from cgtool.errors import UsageError


@dataclass
class Session:
    """A recording in progress: where it goes and its recorder."""

    out: Path
    recorder: Recorder

    @property
    def graphs(self) -> list[Any]:
        """The graphs recorded so far in this process (``tracker.GraphRecord``)."""
        return list(self.recorder.graphs)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every graph recorded so far is on disk."""
        return self.recorder.flush(timeout)


@contextmanager
def record(out: str | os.PathLike[str], *, force: bool = False, trace_replays: int = 0, trace_skip: int = 1,
           coverage: bool = False, follow: bool = True, options: RecordOptions | None = None) -> Iterator[Session]:
    """Record every CUDA graph this process (and, with ``follow``, every Python process started in the
    block) instantiates inside the ``with`` block into the folder ``out``.

    Raises :class:`~cgtool.errors.CgtoolError` subclasses before the block runs when recording cannot
    start (an existing ``out`` without ``force``, cupti-python missing, CUPTI held by a profiler).
    """
    opts = options or RecordOptions.from_environment(out=Path(out), force=force, trace_replays=trace_replays,
                                                     trace_skip=trace_skip, coverage=coverage, follow=follow)
    root = Path(opts.out).resolve()
    if process.current is not None:
        raise UsageError("This process is already being recorded (`cgtool record`, or an enclosing "
                         "`cgtool.record()` block); recordings do not nest.")
    prepare_out(root, opts.force)
    started = time.time()
    try:
        rec = process.start(root, opts.with_out(root), strict=True)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)  # nothing was recorded: no folder left behind
        raise
    assert rec is not None
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", PROCESS_ENV)}
    if opts.follow:
        boot = write_boot(root)
        env = child_env(opts.with_out(root), boot, None)
        os.environ["PYTHONPATH"], os.environ[PROCESS_ENV] = env["PYTHONPATH"], env[PROCESS_ENV]
    failed: BaseException | None = None
    try:
        yield Session(root, rec)
    except BaseException as e:
        failed = e
        raise
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        rec.finish(None, "the recorded block ended" if failed is None
                   else f"the recorded block raised {type(failed).__name__}")
        process.current = None
        shutil.rmtree(root / BOOT, ignore_errors=True)
        argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
        tree.write(root, tree.build(root, program=argv, exit_code=None, root_pid=os.getpid(),
                                    options=opts, started=started,
                                    notes=["recorded by the library API (cgtool.record): the recording covers the "
                                           "block; the process's exit code is not part of it"]))
