"""The root of the `cgtool` command: the app factory (its options, no commands) and ``run_app``
(errors become exit codes in ``_guard``). ``cgtool record``'s command lines that
``record_run.parse_fast`` does not take build their app from here without the other commands
(``cgtool.cli.entry``)."""

from __future__ import annotations

import typer

from cgtool import __version__
from cgtool.cli._guard import EXIT_PIPE_CLOSED, guarded

__all__ = ["EXIT_PIPE_CLOSED", "make_app", "run_app"]


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
        "found), 2 usage error, 3 capture failed, 4 invalid input file, 130 interrupted (Ctrl-C), "
        "141 output pipe closed early, 143 terminated (SIGTERM).",
        no_args_is_help=True,
        pretty_exceptions_show_locals=False,
        add_completion=True,
        rich_markup_mode="rich",
    )
    app.callback()(_root)
    return app


def run_app(app: typer.Typer, argv: list[str] | None = None) -> None:
    """Entry point: run the app; CgtoolError -> its paragraph on stderr and its exit code."""
    guarded(lambda: app(args=argv, standalone_mode=False, prog_name="cgtool"))
