"""The `cgtool` console script.

``cgtool record`` is timed as part of the user's program (``benchmarks/bench_record.py``): its
parent process builds an app with the record command only (typer and the launcher; 0.2 s less
than loading every command, measured on the GPU machine), the rest is loaded for anything else.
Options before the command (``cgtool -q record``) take the full app.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["record"]:
        from cgtool.cli import _app, record_cmd

        app = _app.make_app()
        record_cmd.register(app)
        _app.run_app(app, argv)
        return
    from cgtool.cli.main import main as full

    full(argv)
