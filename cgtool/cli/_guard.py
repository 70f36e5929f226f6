"""The one place errors become exit codes (``guarded``), without typer or rich on the way in:
``cgtool record`` runs through it before loading either (``cgtool.cli.entry``)."""

from __future__ import annotations

import os
import sys
import warnings
from typing import Callable

from cgtool.errors import CgtoolError, ExitCode, InputWarning


def _pipe_closed() -> None:
    """The reader of stdout went away (``| head``): exit 141 without another complaint from
    Python's flush at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # not a real file (tests): nothing to redirect
        pass
    sys.exit(EXIT_PIPE_CLOSED)


def _is(e: BaseException, name: str) -> bool:
    """Whether ``e`` is a click exception called ``name`` (typer >= 0.29 vendors its own click)."""
    return any(c.__name__ == name for c in type(e).__mro__)


#: Exit code when the reader of our output went away (``cgtool topo ... | head -1``): 128 + SIGPIPE,
#: as a shell reports a program that the signal stopped.
EXIT_PIPE_CLOSED = 141


def _paragraph(text: str) -> None:
    """One paragraph on stderr: wrapped to a terminal's width, one line in a log."""
    from cgtool.cli._common import _Console

    con = _Console(stderr=True, markup=False, highlight=False)  # not the --quiet console: errors always show
    con.print(text, soft_wrap=not con.is_terminal)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: object = None, line: str | None = None) -> None:
    if issubclass(category, InputWarning):
        _paragraph(f"cgtool: warning: {message}")
    else:  # pragma: no cover - a library's warning: as Python shows it
        _orig_showwarning(message, category, filename, lineno, file, line)  # type: ignore[arg-type]


_orig_showwarning = warnings.showwarning


def guarded(call: Callable[[], object]) -> None:
    """Run a command: CgtoolError -> its paragraph on stderr and its exit code; exits."""
    common = sys.modules.get("cgtool.cli._common")  # not loaded yet: its consoles are new, loud
    if common is not None:
        common.out.quiet = common.err.quiet = False  # a run starts loud (main may run several times)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", InputWarning)
            warnings.showwarning = _show_warning
            call()
        sys.stdout.flush()
    except CgtoolError as e:
        _paragraph(f"cgtool: {e.message}")
        sys.exit(int(e.exit_code))
    except BrokenPipeError:
        _pipe_closed()
    except SystemExit as e:
        # click handles a closed pipe inside a command itself: it wraps stdout so that the final
        # flush stays quiet and exits 1, the code of a failed check. Say what happened instead.
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":
            _pipe_closed()
        raise e
    except KeyboardInterrupt:
        _paragraph("cgtool: interrupted.")
        sys.exit(130)
    except MemoryError:
        _paragraph("cgtool: out of memory while reading or analysing the input (the machine, or a limit such "
                   "as `ulimit -v`, allows less than this input needs). Lower --max-bytes to refuse such inputs "
                   "early, or run where more memory is available.")
        sys.exit(int(ExitCode.INVALID_INPUT))
    except RecursionError:
        _paragraph("cgtool: the input nests too deeply to analyse (a recursion limit was reached). No cgtool "
                   "artifact nests like this: check that it is the file you meant.")
        sys.exit(int(ExitCode.INVALID_INPUT))
    except Exception as e:
        if _is(e, "Exit"):
            sys.exit(getattr(e, "exit_code", 0))
        if _is(e, "Abort"):
            _paragraph("cgtool: interrupted.")
            sys.exit(130)
        if _is(e, "ClickException"):  # usage errors: click's own message and usage line
            e.show()  # type: ignore[attr-defined]
            sys.exit(int(ExitCode.USAGE))
        if os.environ.get("CGTOOL_DEBUG"):
            raise
        _paragraph(
            f"cgtool: internal error ({type(e).__name__}: {e}). This is a bug in cgtool: please "
            "report it with the command line. Set CGTOOL_DEBUG=1 to see the traceback."
        )
        sys.exit(70)
    sys.exit(0)
