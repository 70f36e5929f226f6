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
        dist = missing_dependency(e)
        if dist is not None:
            exit_missing_dependency(dist)
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
