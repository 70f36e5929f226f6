"""The recording's typed contract (``cgtool.artifacts.recording``): every recording checked in under
tests/data reads into its types, older indexes (without the newer fields) read with defaults, a
field of another type is refused with its path, and what the recorder writes reads back equal."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import msgspec
import pytest

from cgtool.artifacts import recording as R
from cgtool.errors import InvalidInputError

DATA = Path(__file__).parent / "data"


def _raw(p: Path) -> dict:
    b = p.read_bytes()
    return json.loads(gzip.decompress(b) if p.suffix == ".gz" else b)


INDEXES = sorted(DATA.glob("**/index.json*"))


def _keeps(back, raw, where: str) -> None:
    """``back`` (the typed value written out) holds every value of ``raw`` (the file's); a field the
    file's version did not have yet may only be there empty (None), never with a value."""
    if isinstance(raw, dict) and isinstance(back, dict):
        for k, v in raw.items():
            if k in back:
                _keeps(back[k], v, f"{where}.{k}")
        for k in back.keys() - raw.keys():
            assert back[k] is None, f"{where}.{k}: {back[k]!r} is not in the file"
    else:
        assert back == raw, where


def test_there_are_recordings_to_read():
    assert len(INDEXES) > 20


@pytest.mark.parametrize("path", INDEXES, ids=lambda p: str(p.relative_to(DATA)))
def test_every_checked_in_index_reads_into_its_type_and_keeps_every_known_value(path: Path):
    raw = _raw(path)
    if "processes" in raw:
        typed = R.read_tree_index(raw, path.parent)
        assert [p.pid for p in typed.processes] == [p["pid"] for p in raw["processes"]]
    else:
        typed = R.read_process_index(raw, path.parent)
        assert [g.file for g in typed.graphs] == [g["file"] for g in raw["graphs"]]
        assert [g.replays for g in typed.graphs] == [g.get("replays", 0) for g in raw["graphs"]]
    # every key the type knows holds the file's value (the rest are keys of other versions)
    back = msgspec.to_builtins(typed)
    for k, v in raw.items():
        if k in back and k not in ("graphs", "processes", "ledger", "compile"):
            _keeps(back[k], v, k)
    # and the struct written out reads back equal (the recorder's writer and the reader agree)
    again = msgspec.json.decode(msgspec.json.encode(typed), type=type(typed))
    assert again == typed


def test_an_older_index_without_the_newer_fields_reads_with_defaults(tmp_path: Path):
    (tmp_path / "index.json").write_text(json.dumps(
        {"cgtool_record": 1, "pid": 7, "program": ["python", "a.py"],
         "graphs": [{"file": "graph_000.json", "label": "#0 a.py:3", "replays": 2}]}))
    (rec,) = R.load_recordings(tmp_path)
    (g,) = rec.graphs
    assert (g.seq, g.replays, g.replays_complete, g.traced_launches, g.kernel_ns) == (0, 2, True, [], None)
    assert rec.index.ledger is None and rec.index.compile.cudagraph_skips == [] and rec.index.trace is None


@pytest.mark.parametrize("bad, where", [
    ({"replays": "3"}, "graphs[0].replays"),
    ({"traced_launches": [{"correlation": "x"}]}, "graphs[0].traced_launches[0].correlation"),
])
def test_a_field_of_another_type_is_refused_with_its_path(tmp_path: Path, bad: dict, where: str):
    (tmp_path / "index.json").write_text(json.dumps(
        {"cgtool_record": 1, "graphs": [{"file": "graph_000.json", **bad}]}))
    with pytest.raises(InvalidInputError, match=re.escape(f"index.json: {where}: ")):
        R.load_recordings(tmp_path)


def test_a_newer_schema_is_refused(tmp_path: Path):
    (tmp_path / "index.json").write_text(json.dumps({"cgtool_record": R.PROCESS_SCHEMA + 1, "graphs": []}))
    with pytest.raises(InvalidInputError, match="upgrade cgtool"):
        R.load_recordings(tmp_path)


def test_the_writer_replaces_whole_files(tmp_path: Path):
    p = tmp_path / "index.json"
    R.write_atomic(p, R.ProcessIndex(cgtool_record=R.PROCESS_SCHEMA, graphs=[]))
    R.write_atomic(p, {"x": 1}, indent=1)
    assert json.loads(p.read_text()) == {"x": 1} and [q.name for q in tmp_path.iterdir()] == ["index.json"]


def test_cgtool_report_reads_each_index_of_a_recording_once(run_cli, tmp_path: Path, monkeypatch):
    """The page's recording summary comes from the one reading the report's inputs make."""
    from collections import Counter

    reads: Counter[str] = Counter()
    real = R.read_json

    def counting(path: Path):
        if path.name.startswith("index.json"):
            reads[str(path)] += 1
        return real(path)

    monkeypatch.setattr(R, "read_json", counting)
    folder = DATA / "record_server"
    code, _, err = run_cli("report", str(folder), "-o", str(tmp_path / "r.html"))
    assert code == 0, err
    assert "class=recsummary" in (tmp_path / "r.html").read_text()
    assert reads and all(n == 1 for n in reads.values()), reads


EXPORTS = sorted(DATA.glob("record_*/**/graph_*.json*"))


def test_the_record_block_of_every_recorded_export_reads_into_its_type():
    assert len(EXPORTS) > 20
    for p in EXPORTS:
        block = _raw(p)["cgtool"]["record"]
        rec = msgspec.convert(block, R.ExportRecord)
        assert (rec.label, rec.seq, rec.replays) == (block["label"], block["seq"], block["replays"]), p
        assert rec.label.startswith(f"#{rec.seq} "), p
