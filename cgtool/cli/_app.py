"""The root of the `cgtool` command: the app factory (its options, no commands) and ``run_app``,
the one place errors become exit codes. Light on purpose: ``cgtool record`` builds its app from
here without loading the other commands (``cgtool.cli.entry``)."""

from __future__ import annotations

import os
import sys
import warnings

import typer

from cgtool import __version__
from cgtool.errors import CgtoolError, ExitCode, InputWarning

def _flags_without_type() -> None:
    """typer 0.29 prints ``<bool>`` beside every on/off flag (``--force <bool>``); flags take no
    value, so the help shows none. Older typer has no such column, and nothing to change."""
    try:
        from typer.core import TyperOption
    except ImportError:  # pragma: no cover
        return
    orig = getattr(TyperOption, "display_type_rich", None)
    if orig is None or getattr(orig, "_cgtool", False):
        return

    def display_type_rich(self: TyperOption, ctx: object) -> str | None:
        return None if getattr(self, "is_flag", False) else orig(self, ctx)

    display_type_rich._cgtool = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cgtool {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only results and errors: no progress, no 'wrote ...' lines."),
) -> None:
    if quiet:
        from cgtool.cli._common import err

        err.quiet = True


def make_app() -> typer.Typer:
    """The root app with its options (--version, --quiet) and no commands yet."""
    _flags_without_type()
    app = typer.Typer(
        name="cgtool",
        help="Capture, replay, time and inspect CUDA graphs in PyTorch.\n\n"
        "Exit codes: 0 success, 1 a check failed (regression, fake dependencies over the limit, diff "
        "found), 2 usage error, 3 capture failed, 4 invalid input file, 141 output pipe closed early.",
        no_args_is_help=True,
        pretty_exceptions_show_locals=False,
        add_completion=True,
        rich_markup_mode="rich",
    )
    app.callback()(_root)
    return app


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


def run_app(app: typer.Typer, argv: list[str] | None = None) -> None:
    """Entry point: run the app; CgtoolError -> its paragraph on stderr and its exit code."""
    from cgtool.cli._common import err, out

    out.quiet = err.quiet = False  # a run starts loud (main may run several times in one process)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", InputWarning)
            warnings.showwarning = _show_warning
            app(args=argv, standalone_mode=False, prog_name="cgtool")
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
