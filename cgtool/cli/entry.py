"""The `cgtool` console script.

``cgtool record`` is timed as part of the user's program (``benchmarks/bench_record.py``): its
usual command lines are parsed without typer (``record_run.parse_fast``) and the program starts
after the interpreter and the launcher alone; other ``record`` command lines get an app with the
record command only; everything else loads the full app. Options before the command
(``cgtool -q record``) take the full app.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    try:
        _main(argv)
    except ModuleNotFoundError as e:  # typer, rich, ... missing: loading the app fails before its guard
        from cgtool.cli._guard import exit_missing_dependency, missing_dependency

        dist = missing_dependency(e)
        if dist is None:
            raise
        exit_missing_dependency(dist)


def _main(argv: list[str] | None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["record"]:
        from cgtool.cli import record_run
        from cgtool.cli._guard import guarded

        parsed = record_run.parse_fast(args[1:])
        if parsed is not None:
            program, opts = parsed
            guarded(lambda: record_run.run_record(program, opts))
            return
        from cgtool.cli import _app, record_cmd

        app = _app.make_app()
        record_cmd.register(app)
        _app.run_app(app, argv)
        return
    from cgtool.cli.main import main as full

    full(argv)
