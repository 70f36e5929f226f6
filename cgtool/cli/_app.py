"""The root of the `cgtool` command: the app factory (its options, no commands) and ``run_app``
(errors become exit codes in ``_guard``). ``cgtool record``'s command lines that
``record_run.parse_fast`` does not take build their app from here without the other commands
(``cgtool.cli.entry``)."""

from __future__ import annotations

import weakref
from typing import Any

import typer

from cgtool._version import __version__
from cgtool.cli._guard import EXIT_PIPE_CLOSED, guarded

__all__ = ["EXIT_PIPE_CLOSED", "make_app", "run_app"]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cgtool {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only results and errors: no progress, no 'wrote ...' lines (before or after the command)."),
) -> None:
    if quiet:
        _quiet(None, None, True)


def _quiet(ctx: object, param: object, value: object) -> object:
    """``-q/--quiet`` given after the command (``_help.polish`` adds it to every command)."""
    if value:
        from cgtool.cli._common import err

        err.quiet = True
    return value


def make_app() -> typer.Typer:
    """The root app with its options (--version, --quiet) and no commands yet."""
    app = typer.Typer(
        name="cgtool",
        help="Capture, replay, time and inspect CUDA graphs in PyTorch.\n\n"
        "Exit codes: 0 success, 1 a check failed (regression, fake dependencies over the limit, diff "
        "found), 2 usage error, 3 capture failed, 4 invalid input file, 130 interrupted (Ctrl-C), "
        "141 output pipe closed early, 143 terminated (SIGTERM), 70 a bug in cgtool.",
        no_args_is_help=True,
        pretty_exceptions_show_locals=False,
        add_completion=True,
        rich_markup_mode=None,  # the help is cgtool's own (cli/_help.py): plain text
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    return app


def run_app(app: typer.Typer, argv: list[str] | None = None) -> None:
    """Entry point: run the app (its click command with cgtool's help, ``_help.polish``) and exit
    with its status (``_guard.guarded``)."""
    from cgtool.cli._help import polish

    cmd = _COMMANDS.get(app)
    if cmd is None:
        cmd = _COMMANDS[app] = typer.main.get_command(app)
        polish(cmd, quiet=_quiet)
    guarded(lambda: cmd.main(args=argv, standalone_mode=False, prog_name="cgtool"))


#: The click command built from each app, built once a process: typer walks every command's
#: signature to build it, which in-process callers (the test suite) paid on every call
#: (docs/performance.md, "The test suite"); click makes a new context per call, so a command runs
#: the same twice.
_COMMANDS: "weakref.WeakKeyDictionary[typer.Typer, Any]" = weakref.WeakKeyDictionary()
