"""Writing a capture bundle: one folder with every graph's export and the driver's own DOT.

The bundle is written into a temporary folder beside its destination and moved into place at the
end, so a failure half-way leaves no half-written bundle and an existing one (with ``force``) is only
replaced once the new one is complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.jsonio import write_json
from cgtool.errors import OutputExistsError, UsageError


class _Dumps(Protocol):
    def debug_dump(self, debug_path: str) -> None: ...


class _Captured(Protocol):
    """What a bundle is written from (``cgtool.capture.runner.Captured``, or a test's fake)."""

    @property
    def graphs(self) -> Sequence[tuple[str, Any]]: ...

    def exports(self) -> list[tuple[str, dict[str, Any]]]: ...


@dataclass(frozen=True)
class BundleEntry:
    """One graph of a written bundle."""

    label: str
    path: Path  # the export's final path (inside the bundle)
    graph: GraphData


def bundle_stem(label: str, n_graphs: int) -> str:
    """``graph`` for a workload's only (or main) graph, ``graph-<label>`` for the others."""
    return "graph" if label == "main" or n_graphs == 1 else f"graph-{label}"


def check_destination(dest: Path, force: bool) -> None:
    """Refuse an existing bundle without ``force``, and a destination that is a file."""
    if dest.exists() and not force:
        raise OutputExistsError(dest)
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} is a file; a bundle is a folder. Give another path with -o.")


def write_bundle(cap: _Captured, dest: Path, *, force: bool = False,
                 progress: Callable[[str], None] | None = None) -> list[BundleEntry]:
    """Write ``cap``'s exports (``<stem>.json``) and driver dumps (``<stem>.dot``) to ``dest``."""
    check_destination(dest, force)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    entries = []
    graphs = dict(cap.graphs)
    try:
        for label, data in cap.exports():
            stem = bundle_stem(label, len(graphs))
            write_json(tmp / f"{stem}.json", data)
            graphs[label].debug_dump(str(tmp / f"{stem}.dot"))
            final = dest / f"{stem}.json"
            entries.append(BundleEntry(label, final, GraphData.from_json(data, source=str(final))))
            if progress is not None:
                progress(f"wrote {stem}.json")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return entries


def write_driver_dots(target: str, output: Path, flags: str = "verbose") -> list[Path]:
    """Capture ``target`` and write the CUDA driver's own DOT of each graph (``output``, or
    ``<stem>-<label>.dot`` per graph for workloads with several)."""
    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.graph import driver_dot_flags
    from cgtool.capture.runner import capture_workload

    bits = driver_dot_flags(flags)
    cap = capture_workload(parse_target(target), [], check=False)
    output.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for label, g in cap.graphs:
        path = output if len(cap.graphs) == 1 else output.with_name(f"{output.stem}-{label}{output.suffix}")
        g.debug_dump(str(path), flags=bits)
        paths.append(path)
    return paths
