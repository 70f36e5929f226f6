"""What `cgtool record` does once its command line is parsed, and a parser for its usual command
lines that needs no typer.

``cgtool record`` is timed as part of the user's program (``benchmarks/bench_record.py``): the
parent's start-up comes before the program's. typer and rich cost ~0.15 s to import on the GPU
machine, so ``cgtool.cli.entry`` first tries :func:`parse_fast` — the record command's own options
before ``--``, nothing else — and hands anything it does not take (``--help``, ``--out=DIR``,
unknown or repeated options, a bad number, no ``--``) to the typer app, which stays the one
definition of the command (its help, its errors). ``tests/test_cli_entry.py`` checks that every
command line this parser takes gives what typer gives.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

#: option -> (keyword, kind): "flag", "int>=0", "int>=1", "int", "str", "path"
_OPTIONS: dict[str, tuple[str, str]] = {
    "-o": ("out", "path"), "--output": ("out", "path"), "--out": ("out", "path"),
    "--force": ("force", "flag"),
    "--trace-replays": ("trace_replays", "int>=0"),
    "--trace-skip": ("trace_skip", "int>=0"),
    "--coverage": ("coverage", "flag"),
    "--nproc-per-node": ("nproc_per_node", "int>=1"),
    "--nnodes": ("nnodes", "str"),
    "--node-rank": ("node_rank", "int"),
    "--rdzv-endpoint": ("rdzv_endpoint", "str"),
}
DEFAULTS: dict[str, Any] = {"out": Path("cgtool-record"), "force": False, "trace_replays": 0, "trace_skip": 1,
                            "coverage": False, "nproc_per_node": 1, "nnodes": None, "node_rank": None,
                            "rdzv_endpoint": None}


def parse_fast(args: list[str]) -> tuple[list[str], dict[str, Any]] | None:
    """``(program, options)`` for ``record``'s arguments (after the word ``record``), or None when
    the typer app should parse them."""
    opts: dict[str, Any] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            program = args[i + 1:]
            return (program, {**DEFAULTS, **opts}) if program else None
        spec = _OPTIONS.get(a)
        if spec is None:
            return None
        key, kind = spec
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


def run_record(args: list[str], *, out: Path, force: bool, trace_replays: int, trace_skip: int, coverage: bool,
               nproc_per_node: int, nnodes: Optional[str], node_rank: Optional[int],
               rdzv_endpoint: Optional[str]) -> None:
    """Run the program under the recorder, print the summary, exit with the program's code."""
    from cgtool.capture.record.launcher import RecordSpec, finish, normalise_program, start

    program = normalise_program(list(args))
    tr: list[str] = []
    for flag, v in (("--nnodes", nnodes), ("--node-rank", node_rank), ("--rdzv-endpoint", rdzv_endpoint)):
        if v is not None:
            tr += [flag, str(v)]
    spec = RecordSpec(program=program, out=out, force=force, trace_replays=trace_replays, trace_skip=trace_skip,
                      coverage=coverage, nproc_per_node=nproc_per_node, torchrun_args=tr)
    child = start(spec)
    # Loaded while the program runs (its own process): the summary's modules cost nothing then.
    from cgtool.artifacts.recording import load_recordings
    from cgtool.cli._common import err
    from cgtool.report.record_table import record_summary

    code = finish(spec, child)
    try:
        record_summary(err, load_recordings(out))
    except Exception as e:  # a program killed hard may leave no index: its exit code still matters more
        err.print(f"cgtool: no summary ({e}).", markup=False, highlight=False)
    sys.exit(code)  # the program's own exit code (typer.Exit is swallowed outside standalone mode)
