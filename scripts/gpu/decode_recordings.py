"""Every recording under the folders given, decoded strictly into cgtool.artifacts.recording's structs.

    PYTHONPATH=. python3 scripts/gpu/decode_recordings.py DIR...

As tests/test_recording_contract.py does for the recordings checked in, on fresh ones (the GPU
machine, after scripts/gpu/record.sh): each index.json (tree or process) decoded by msgspec in
strict mode straight into its struct, and every key of the file, at every depth, a field of its
struct holding the same value of the same type; each graph export's ``record`` block likewise, and
the export read with the typed reader (``read_export``). A key no struct declares or a value of the
wrong type is printed with its path. One line per failure and a tally; exit 1 on any failure or
when no index was found."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from cgtool.artifacts import recording as R


def _bytes(p: Path) -> bytes:
    b = p.read_bytes()
    return gzip.decompress(b) if p.suffix == ".gz" else b


def _all_known(raw: Any, back: Any, where: str) -> None:
    if isinstance(raw, dict):
        if not isinstance(back, dict):
            raise TypeError(f"{where}: an object in the file, {type(back).__name__} typed")
        for k, v in raw.items():
            if k not in back:
                raise KeyError(f"{where}.{k}: in the file, not in its struct")
            _all_known(v, back[k], f"{where}.{k}")
    elif isinstance(raw, list):
        if not isinstance(back, list) or len(back) != len(raw):
            raise TypeError(f"{where}: a list of {len(raw)} in the file")
        for i, (v, b) in enumerate(zip(raw, back)):
            _all_known(v, b, f"{where}[{i}]")
    elif back != raw or type(back) is not type(raw):
        raise ValueError(f"{where}: {raw!r} in the file, {back!r} typed")


def check_index(p: Path) -> None:
    b = _bytes(p)
    raw = json.loads(b)
    kind = R.TreeIndex if "processes" in raw else R.ProcessIndex
    _all_known(raw, msgspec.to_builtins(msgspec.json.decode(b, type=kind, strict=True)), kind.__name__)


def check_export(p: Path) -> None:
    raw = json.loads(_bytes(p))["cgtool"]
    rec = msgspec.json.decode(msgspec.json.encode(raw["record"]), type=R.ExportRecord, strict=True)
    _all_known(raw["record"], msgspec.to_builtins(rec), "record")
    doc = R.read_export(p)
    if doc.record != rec or len(doc.sources) != len(doc.graph.nodes):
        raise ValueError("read_export disagrees with the strict decoding")


def main(folders: list[str]) -> int:
    bad, done = 0, {"index": 0, "export": 0}
    for top in folders:
        for what, pattern, check in (("index", "index.json*", check_index), ("export", "graph_*.json*", check_export)):
            for p in sorted(Path(top).rglob(pattern)):
                try:
                    check(p)
                    done[what] += 1
                except Exception as e:  # noqa: BLE001 - every failure is printed and counted
                    bad += 1
                    print(f"FAIL {p}: {type(e).__name__}: {e}")
    print(f"decoded strictly: {done['index']} index files, {done['export']} graph exports; {bad} failed")
    return 1 if bad or not done["index"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
