"""The `cgtool` command: the typer app with every command. The console script starts in
``cgtool.cli.entry``; the app factory and the one place errors become exit codes are in
``cgtool.cli._app``."""

from __future__ import annotations

from cgtool.cli._app import EXIT_PIPE_CLOSED, make_app, run_app

__all__ = ["EXIT_PIPE_CLOSED", "app", "main"]

app = make_app()

from cgtool.cli import analysis, bench_cmd, capture_cmds, demo, record_cmd, report_cmd  # noqa: E402  (registers commands)

demo.register(app)

analysis.register(app)
capture_cmds.register(app)
bench_cmd.register(app)
record_cmd.register(app)
report_cmd.register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; CgtoolError -> its paragraph on stderr and its exit code."""
    run_app(app, argv)
