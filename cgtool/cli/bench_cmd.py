"""`cgtool bench` (placeholder until its issue lands)."""

from __future__ import annotations

import typer

from cgtool.errors import UsageError


def bench() -> None:
    """Replay timing and the CI perf gate: not yet implemented."""
    raise UsageError("`cgtool bench` is not implemented yet (see the project's open issues).")


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Run a workload (GPU)")(bench)
