"""Reading a ``cgtool record`` folder: ``index.json`` (one per rank under torchrun) and its graphs.

Pure file reading: no torch, no capture imports. Layout written by ``cgtool/capture/record``::

    DIR/index.json            program, exit code, graphs[], compile coverage, memory ledger, trace
    DIR/graph_NNN.json        one export per graph (get_graph_data() schema + "cgtool" block)
    DIR/trace.json            with --trace-replays: chrome trace with the exports embedded
    DIR/rank<R>/...           the same per rank under torchrun
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    for p in (path, path.with_name(path.name + ".gz")):
        if p.exists():
            try:
                raw = p.read_bytes()
                if raw[:2] == b"\x1f\x8b":
                    raw = gzip.decompress(raw)
                return json.loads(raw)
            except (OSError, ValueError) as e:
                raise InvalidInputError(f"Could not read {p}: {e}. The recording is damaged or still being "
                                        "written; record the program again.") from None
    raise InvalidInputError(f"Missing file in the recording: {path}.")


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
