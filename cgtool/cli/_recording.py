"""Letting analysis commands take a `cgtool record` folder where they take a trace or a graph."""

from __future__ import annotations

from pathlib import Path

from cgtool.errors import UsageError


def trace_of(path: Path) -> Path:
    """``DIR`` of a one-process recording -> its trace file; any other path unchanged."""
    from cgtool.inspect.recording import INDEX, load_recordings

    if not (path.is_dir() and ((path / INDEX).exists() or (path / (INDEX + ".gz")).exists())):
        return path
    (rec,) = load_recordings(path)
    name = rec.index.get("trace")
    if not name:
        raise UsageError(f"The recording {path} has no trace: record with `--trace-replays K` to get one.")
    p = path / str(name)
    return p if p.exists() else p.with_name(p.name + ".gz")


def graphs_of(path: Path) -> list[Path] | None:
    """The graph files of a one-process recording folder, or None when ``path`` is not one."""
    from cgtool.inspect.recording import INDEX, load_recordings

    if not (path.is_dir() and ((path / INDEX).exists() or (path / (INDEX + ".gz")).exists())):
        return None
    (rec,) = load_recordings(path)
    out = []
    for g in rec.graphs:
        p = path / str(g["file"])
        out.append(p if p.exists() else p.with_name(p.name + ".gz"))
    return out
