"""Reading a ``cgtool record`` folder: ``index.json`` (one per rank under torchrun) and its graphs.

Pure file reading: no torch, no capture imports. Layout written by ``cgtool/capture/record``::

    DIR/index.json            program, exit code, graphs[], compile coverage, memory ledger, trace
    DIR/graph_NNN.json        one export per graph (get_graph_data() schema + "cgtool" block)
    DIR/trace.json            with --trace-replays: chrome trace with the exports embedded
    DIR/rank<R>/...           the same per rank under torchrun
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cgtool.artifacts.jsonio import load_json
from cgtool.errors import InvalidInputError

INDEX = "index.json"


@dataclass(frozen=True)
class Recording:
    """One process's recording: its folder and its parsed index."""

    folder: Path
    index: dict[str, Any]
    rank: int | None

    @property
    def graphs(self) -> list[dict[str, Any]]:
        return list(self.index.get("graphs", []))

    def graph_doc(self, entry: dict[str, Any]) -> dict[str, Any]:
        """The export of one index entry (plain or gzipped file)."""
        doc: dict[str, Any] = read_json(self.folder / str(entry["file"]))
        return doc


def read_json(path: Path) -> Any:
    """A file of the recording (plain or gzipped), read with the limits of every JSON input."""
    for p in (path, path.with_name(path.name + ".gz")):
        if p.exists():
            return load_json(p)
    raise InvalidInputError(f"Missing file in the recording: {path}. The recording is damaged or still being "
                            "written; record the program again.")


def trace_path(rec: "Recording") -> Path | None:
    """The recording's trace file (``--trace-replays``), or None."""
    name = rec.index.get("trace")
    if not name:
        return None
    p = rec.folder / str(name)
    return p if p.exists() else p.with_name(p.name + ".gz")


def graph_paths(rec: "Recording") -> list[Path]:
    """The export file of every graph of the recording, in index order."""
    out = []
    for g in rec.graphs:
        p = rec.folder / str(g["file"])
        out.append(p if p.exists() else p.with_name(p.name + ".gz"))
    return out


def is_single_recording(folder: Path) -> bool:
    """Whether ``folder`` is the recording of one process (its index.json directly inside)."""
    return folder.is_dir() and ((folder / INDEX).exists() or (folder / (INDEX + ".gz")).exists())


def is_recording(folder: Path) -> bool:
    return folder.is_dir() and (
        (folder / INDEX).exists() or (folder / (INDEX + ".gz")).exists()
        or any((d / INDEX).exists() or (d / (INDEX + ".gz")).exists() for d in folder.glob("rank*")))


def load_recordings(folder: Path) -> list[Recording]:
    """The recording in ``folder``, or one per ``rank*`` subfolder, sorted by rank."""
    if (folder / INDEX).exists() or (folder / (INDEX + ".gz")).exists():
        idx = read_json(folder / INDEX)
        return [Recording(folder, _check(idx, folder), idx.get("rank"))]
    out = []
    for d in sorted(folder.glob("rank*")):
        if (d / INDEX).exists() or (d / (INDEX + ".gz")).exists():
            idx = read_json(d / INDEX)
            out.append(Recording(d, _check(idx, d), idx.get("rank")))
    if not out:
        raise InvalidInputError(f"{folder} holds no recording (no index.json, no rank*/index.json). "
                                "Make one with `cgtool record -o DIR -- python prog.py`.")
    return sorted(out, key=lambda r: (r.rank is None, r.rank or 0))


def _check(idx: Any, folder: Path) -> dict[str, Any]:
    if not isinstance(idx, dict) or "cgtool_record" not in idx or not isinstance(idx.get("graphs"), list):
        raise InvalidInputError(f"{folder / INDEX} is not a cgtool recording index (no cgtool_record/graphs keys).")
    if int(idx["cgtool_record"]) > 1:
        raise InvalidInputError(f"{folder / INDEX} has recording schema {idx['cgtool_record']}, newer than this "
                                "cgtool reads (1); upgrade cgtool.")
    return idx
