"""The one place errors become exit codes (``guarded``), without typer or rich on the way in:
``cgtool record`` runs through it before loading either (``cgtool.cli.entry``)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import warnings
from typing import Callable, Iterator, NoReturn

from cgtool.errors import CgtoolError, ExitCode, InputWarning, Terminated


def _pipe_closed() -> int:
    """The reader of stdout went away (``| head``): 141, and no other complaint from Python's
    flush at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # not a real file (tests): nothing to redirect
        pass
    return EXIT_PIPE_CLOSED


def _is(e: BaseException, name: str) -> bool:
    """Whether ``e`` is a click exception called ``name`` (typer >= 0.29 vendors its own click)."""
    return any(c.__name__ == name for c in type(e).__mro__)


#: Exit code when the reader of our output went away (``cgtool topo ... | head -1``): 128 + SIGPIPE,
#: as a shell reports a program that the signal stopped.
EXIT_PIPE_CLOSED = int(ExitCode.PIPE_CLOSED)


def _paragraph(text: str) -> None:
    """One paragraph on stderr: wrapped to a terminal's width, one line in a log."""
    try:
        from cgtool.cli._common import _Console
    except ImportError:  # rich or typer missing (see missing_dependency): the paragraph as it is
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
        return
    con = _Console(stderr=True, markup=False, highlight=False)  # not the --quiet console: errors always show
    con.print(text, soft_wrap=not con.is_terminal)


#: cgtool's own dependencies (pyproject.toml's [project] dependencies) by the name they are imported
#: under, with the distribution that brings each (click comes with typer).
_BASE_DEPS = {"typer": "typer", "click": "typer", "rich": "rich", "networkx": "networkx", "msgspec": "msgspec",
              "numpy": "numpy", "tomli": "tomli"}


def missing_dependency(e: BaseException) -> str | None:
    """The distribution of cgtool's own dependencies that ``e`` (an import failing) shows missing, or
    None: an install without dependencies (``pip install --no-deps``), or a package removed since."""
    if isinstance(e, ModuleNotFoundError) and e.name:
        return _BASE_DEPS.get(e.name.split(".")[0])
    return None


def _applies(req: str) -> bool:
    """Whether a requirement's environment marker holds here (``tomli; python_version < '3.11'``);
    without the `packaging` module to tell, a conditional requirement is left out."""
    if ";" not in req:
        return True
    try:
        from packaging.requirements import Requirement

        marker = Requirement(req).marker
        return marker is None or bool(marker.evaluate())
    except Exception:
        return False


def exit_missing_dependency(dist: str) -> None:
    """One paragraph naming the missing package and how to install it, exit 2 (a usage error: the
    environment, not the input, must change)."""
    try:
        from importlib.metadata import requires

        reqs = [r for r in requires("cgtool") or [] if "extra ==" not in r and _applies(r)]
    except Exception:  # not installed as a distribution (a source tree on PYTHONPATH)
        reqs = []
    add = " ".join(f"'{r.split(';')[0].strip()}'" for r in reqs) or " ".join(sorted(set(_BASE_DEPS.values())))
    _paragraph(
        f"cgtool: the package `{dist}`, which cgtool needs, is not installed in this Python environment "
        f"({sys.executable}): cgtool was installed without its dependencies, or `{dist}` was removed since. "
        f"Install cgtool with its dependencies (`pip install cgtool`, without --no-deps), or add them: "
        f"`pip install {add}`."
    )
    sys.exit(int(ExitCode.USAGE))


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: object = None, line: str | None = None) -> None:
    if issubclass(category, InputWarning):
        _paragraph(f"cgtool: warning: {message}")
    else:  # pragma: no cover - a library's warning: as Python shows it
        _orig_showwarning(message, category, filename, lineno, file, line)  # type: ignore[arg-type]


_orig_showwarning = warnings.showwarning


def exit_status(code: object) -> int:
    """A command's result as a process exit status, as Python's own ``sys.exit`` reads it: None is 0,
    an integer is itself (a negative one, a child killed by signal N, is 128 + N; beyond 255 is 1, which
    the system would otherwise cut to its low byte), anything else is printed and gives 1."""
    if code is None or isinstance(code, bool) and not code:
        return 0
    if isinstance(code, int):
        return 128 - code if -64 < code < 0 else code if 0 <= code <= 255 else 1
    _paragraph(f"cgtool: {code}")
    return 1


def _terminate(signum: int, frame: object) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` in the main thread for the run (SIGINT already raises
    KeyboardInterrupt); a disposition the parent set to ignore it is kept, and the old one is
    restored afterwards (``main`` may run several times in one process, as in the tests)."""
    old = None
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                old = signal.signal(signal.SIGTERM, _terminate)
        except (ValueError, OSError):  # pragma: no cover - no signals here
            old = None
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def outcome(call: Callable[[], object]) -> int:
    """Run a command and map every way it can end to its exit status, printing the paragraph that
    goes with it: a return (typer and click, run with ``standalone_mode=False``, RETURN the code of
    ``typer.Exit`` and 130 for Ctrl-C instead of raising), ``SystemExit``, a ``CgtoolError``, Ctrl-C
    (130), SIGTERM (143), a closed output pipe (141), a missing dependency (2), a bug (70)."""
    common = sys.modules.get("cgtool.cli._common")  # not loaded yet: its consoles are new, loud
    if common is not None:
        common.out.quiet = common.err.quiet = False  # a run starts loud (main may run several times)
    try:
        with _signals(), warnings.catch_warnings():
            warnings.simplefilter("always", InputWarning)
            warnings.showwarning = _show_warning
            code = exit_status(call())
            if code == ExitCode.INTERRUPTED:  # typer turned a KeyboardInterrupt into this return
                _paragraph("cgtool: interrupted.")
            sys.stdout.flush()
        return code
    except CgtoolError as e:
        _paragraph(f"cgtool: {e.message}")
        return int(e.exit_code)
    except BrokenPipeError:
        return _pipe_closed()
    except SystemExit as e:
        # click handles a closed pipe inside a command itself: it wraps stdout so that the final
        # flush stays quiet and exits 1, the code of a failed check. Say what happened instead.
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":
            return _pipe_closed()
        return exit_status(e.code)
    except KeyboardInterrupt:
        _paragraph("cgtool: interrupted.")
        return int(ExitCode.INTERRUPTED)
    except Terminated as e:
        _paragraph(f"cgtool: terminated ({signal.Signals(e.signum).name}).")
        return 128 + e.signum
    except MemoryError:
        _paragraph("cgtool: out of memory while reading or analysing the input (the machine, or a limit such "
                   "as `ulimit -v`, allows less than this input needs). Lower --max-bytes to refuse such inputs "
                   "early, or run where more memory is available.")
        return int(ExitCode.INVALID_INPUT)
    except RecursionError:
        _paragraph("cgtool: the input nests too deeply to analyse (a recursion limit was reached). No cgtool "
                   "artifact nests like this: check that it is the file you meant.")
        return int(ExitCode.INVALID_INPUT)
    except Exception as e:
        dist = missing_dependency(e)
        if dist is not None:
            exit_missing_dependency(dist)
        if _is(e, "Exit"):
            return exit_status(getattr(e, "exit_code", 0))
        if _is(e, "Abort"):
            _paragraph("cgtool: interrupted.")
            return int(ExitCode.INTERRUPTED)
        if _is(e, "ClickException"):  # usage errors: click's own message and usage line
            e.show()  # type: ignore[attr-defined]
            return int(ExitCode.USAGE)
        if os.environ.get("CGTOOL_DEBUG"):
            raise
        _paragraph(
            f"cgtool: internal error ({type(e).__name__}: {e}). This is a bug in cgtool: please "
            "report it with the command line. Set CGTOOL_DEBUG=1 to see the traceback."
        )
        return int(ExitCode.INTERNAL)


#: Set by ``cgtool.cli._children.run_ranks`` for the processes torchrun starts: each rank writes its
#: exit status there (``rank<R>``), because torchrun itself exits 1 whatever its children's codes were.
RANK_STATUS_ENV = "CGTOOL_RANK_STATUS_DIR"


def _report_rank_status(code: int) -> None:
    folder, rank = os.environ.get(RANK_STATUS_ENV), os.environ.get("RANK")
    if not folder or rank is None or not rank.isdigit():
        return
    try:
        with open(os.path.join(folder, f"rank{int(rank)}"), "w") as f:
            f.write(f"{code}\n")
    except OSError:  # the parent reads a missing status as "ended without one"
        pass


def guarded(call: Callable[[], object]) -> NoReturn:
    """Run a command and exit with its status (``outcome``): the one path from a command's result to
    the process's exit status."""
    code = outcome(call)
    _report_rank_status(code)
    sys.exit(code)
