"""What `cgtool record` does once its command line is parsed, and a parser for its usual command
lines that needs no typer.

``cgtool record`` is timed as part of the user's program (``benchmarks/bench_record.py``): the
parent's start-up comes before the program's. typer and rich are slow to import
(docs/performance.md#hand-written-code), so ``cgtool.cli.entry`` first tries :func:`parse_fast` —
the record command's own options
before ``--`` (``capture/record/options.CLI``, the table typer's command is defined from too),
nothing else — and hands anything it does not take (``--help``, ``--out=DIR``, unknown or repeated
options, a bad number, no ``--``) to the typer app, which stays the one definition of the command
(its help, its errors). ``tests/test_cli_entry.py`` checks that every command line this parser
takes gives what typer gives.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from cgtool.capture.record.options import CLI_BY_NAME, RecordOptions


def parse_fast(args: list[str]) -> tuple[list[str], RecordOptions] | None:
    """``(program, options)`` for ``record``'s arguments (after the word ``record``), or None when
    the typer app should parse them."""
    opts: dict[str, Any] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            program = args[i + 1:]
            if not program:
                return None
            try:
                return program, RecordOptions.from_environment(**opts)
            except ValueError:
                return None
        spec = CLI_BY_NAME.get(a)
        if spec is None:
            return None
        key, kind = spec.field, spec.kind
        if key in opts:
            return None
        if kind == "flag":
            opts[key] = True
            i += 1
            continue
        if i + 1 >= len(args) or args[i + 1] == "--" or args[i + 1].startswith("-"):
            return None
        v = args[i + 1]
        if kind.startswith("int"):
            if not v.isdigit() or not v.isascii():
                return None
            n = int(v)
            if (kind == "int>=1" and n < 1) or len(v) > 1 and v[0] == "0":
                return None
            opts[key] = n
        elif kind == "path":
            opts[key] = Path(v)
        else:
            opts[key] = v
        i += 2
    return None


def run_record(program: list[str], opts: RecordOptions) -> None:
    """Run the program under the recorder, print the summary, exit with the program's code."""
    from cgtool.capture.record import launcher

    if opts.json_out is not None:
        from cgtool.cli._common import output_path

        output_path(opts.json_out, opts.force)  # refused before the program runs, not after
    code = launcher.run(opts, list(program))
    # The summary's modules are loaded after the program (its own processes did the recording).
    from cgtool.artifacts.recording import load_tree
    from cgtool.cli._common import err
    from cgtool.report.record_table import record_summary

    try:
        tree = load_tree(opts.out)
        record_summary(err, tree)
        if opts.json_out is not None:
            _write_json(opts.json_out, tree, opts.force)
    except Exception as e:  # a program killed hard may leave no index: its exit code still matters more
        err.print(f"cgtool: no summary ({e}).", markup=False, highlight=False)
    sys.exit(code)  # the program's own exit code (typer.Exit is swallowed outside standalone mode)


def _write_json(path: Path, tree: Any, force: bool) -> None:
    import json

    from cgtool.artifacts.jsonio import atomic_write_bytes
    from cgtool.inspect.record_summary import summarize, summary_json

    data = (json.dumps(summary_json(summarize(tree)), indent=1, ensure_ascii=False) + "\n").encode()
    atomic_write_bytes(path, data, force=force)
