"""Shared CLI pieces: consoles (stdout for results, stderr for progress and errors) and output checks."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console

from cgtool.errors import UsageError

out = Console(soft_wrap=False)
err = Console(stderr=True)


def refuse_binary_on_terminal(fmt: str, path: Path | None) -> None:
    if path is None and fmt in ("svg", "png") and sys.stdout.isatty():
        raise UsageError(f"Refusing to write {fmt} to a terminal: give an output file with -o.")


def no_gpu_note(command: str) -> str:
    return (f"`cgtool {command}` runs the workload on a GPU. On this machine use the analysis "
            "commands on recorded files: deps, topo, dot, diff, bench --compare.")
