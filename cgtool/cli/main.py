"""The `cgtool` command: the typer app and the one place errors become exit codes."""

from __future__ import annotations

import os
import sys

import typer

from cgtool import __version__
from cgtool.errors import CgtoolError, ExitCode

app = typer.Typer(
    name="cgtool",
    help="Capture, replay, time and inspect CUDA graphs in PyTorch.\n\n"
    "Exit codes: 0 success, 1 a check failed (regression, fake dependencies over the limit, diff "
    "found), 2 usage error, 3 capture failed, 4 invalid input file.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cgtool {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    pass


from cgtool.cli import analysis, bench_cmd, capture_cmds, demo, record_cmd  # noqa: E402  (registers commands)

demo.register(app)

analysis.register(app)
capture_cmds.register(app)
bench_cmd.register(app)
record_cmd.register(app)


def _is(e: BaseException, name: str) -> bool:
    """Whether ``e`` is a click exception called ``name`` (typer >= 0.29 vendors its own click)."""
    return any(c.__name__ == name for c in type(e).__mro__)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; CgtoolError -> its paragraph on stderr and its exit code."""
    from cgtool.cli._common import err

    try:
        app(args=argv, standalone_mode=False, prog_name="cgtool")
    except CgtoolError as e:
        err.print(f"cgtool: {e.message}", markup=False, highlight=False)
        sys.exit(int(e.exit_code))
    except KeyboardInterrupt:
        err.print("cgtool: interrupted.", markup=False)
        sys.exit(130)
    except Exception as e:
        if _is(e, "Exit"):
            sys.exit(getattr(e, "exit_code", 0))
        if _is(e, "Abort"):
            err.print("cgtool: interrupted.", markup=False)
            sys.exit(130)
        if _is(e, "ClickException"):  # usage errors: click's own message and usage line
            e.show()  # type: ignore[attr-defined]
            sys.exit(int(ExitCode.USAGE))
        if os.environ.get("CGTOOL_DEBUG"):
            raise
        err.print(
            f"cgtool: internal error ({type(e).__name__}: {e}). This is a bug in cgtool: please "
            "report it with the command line. Set CGTOOL_DEBUG=1 to see the traceback.",
            markup=False, highlight=False,
        )
        sys.exit(70)
    sys.exit(0)
