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


# ------------------------------------------------------------------ every field typed, none left over
def _all_known(raw, back, where: str) -> None:
    """Every key of ``raw`` (a file's JSON), at every depth, lists included, is a field of its struct
    (``back``: the typed value as builtins) and holds the same value: a field misnamed in a struct, or
    one the recorder writes and no struct declares, fails here."""
    if isinstance(raw, dict):
        assert isinstance(back, dict), where
        for k, v in raw.items():
            assert k in back, f"{where}.{k}: in the file, not in its struct"
            _all_known(v, back[k], f"{where}.{k}")
    elif isinstance(raw, list):
        assert isinstance(back, list) and len(back) == len(raw), where
        for i, (v, b) in enumerate(zip(raw, back)):
            _all_known(v, b, f"{where}[{i}]")
    else:
        assert back == raw and type(back) is type(raw), f"{where}: {raw!r} in the file, {back!r} typed"


def _bytes(p: Path) -> bytes:
    b = p.read_bytes()
    return gzip.decompress(b) if p.suffix == ".gz" else b


@pytest.mark.parametrize("path", INDEXES, ids=lambda p: str(p.relative_to(DATA)))
def test_every_checked_in_index_decodes_strictly_with_every_key_typed(path: Path):
    """msgspec's strict decoding of the file straight into its struct (no int read as a string, no
    float as an int), and no key of the file left untyped."""
    raw = _raw(path)
    kind = R.TreeIndex if "processes" in raw else R.ProcessIndex
    typed = msgspec.json.decode(_bytes(path), type=kind, strict=True)
    _all_known(raw, msgspec.to_builtins(typed), kind.__name__)


def test_every_recorded_export_decodes_strictly_with_every_key_of_its_record_block_typed():
    n_sources = 0
    for p in EXPORTS:
        raw = _raw(p)["cgtool"]
        rec = msgspec.json.decode(msgspec.json.encode(raw["record"]), type=R.ExportRecord, strict=True)
        _all_known(raw["record"], msgspec.to_builtins(rec), f"{p.name}:record")
        doc = R.read_export(p)
        assert doc.record == rec and len(doc.sources) == len(doc.graph.nodes), p
        for i, extra in enumerate(raw.get("nodes", [])):
            if "source" in extra:
                _all_known(extra["source"], msgspec.to_builtins(doc.sources[i]), f"{p.name}:nodes[{i}].source")
                n_sources += 1
    assert n_sources > 100


# a real file, a field deep in it, and a value of another type: refused with the field's path
_MISTYPED = [
    ("record_stale_freed/p730/index.json.gz", ("stopping", "hangs_seen"), "2", "stopping.hangs_seen"),
    ("record_stale_freed/p730/index.json.gz", ("stopping", "last_graph", "replays"), "7", "stopping.last_graph.replays"),
    ("two_gpus/record_rec_hang/p1114/index.json", ("stopping", "destroy_process_group", "live_nccl_graphs", 0,
                                                  "nccl_kernels"), "1",
     "stopping.destroy_process_group.live_nccl_graphs[0].nccl_kernels"),
    ("record_ranks/p2141/index.json.gz", ("timeline", "program_end"), "late", "timeline.program_end"),
    ("record_ranks/p2141/index.json.gz", ("graphs", 0, "recorder_s", "export"), "fast", "graphs[0].recorder_s.export"),
    # a mapping's key is not in msgspec's path: the error names the mapping
    ("record_ranks/p2141/index.json.gz", ("recorder_timings", "start_s"), [1], "recorder_timings"),
    ("record_forkserver/p1070/index.json.gz", ("children", 0, "exit_code"), "0", "children[0].exit_code"),
    ("record_trees/p556/index.json.gz", ("graphs", 1, "capture_inputs", "n_inputs"), "5",
     "graphs[1].capture_inputs.n_inputs"),
    ("record_compiled/p1527/index.json.gz", ("compile", "cudagraph_skips", 0, "site", "line"), "23",
     "compile.cudagraph_skips[0].site.line"),
]


def _set(doc, keys, value):
    for k in keys[:-1]:
        doc = doc[k]
    assert keys[-1] in doc if isinstance(doc, dict) else keys[-1] < len(doc), keys
    doc[keys[-1]] = value


@pytest.mark.parametrize("name, keys, value, where", _MISTYPED, ids=[m[3] for m in _MISTYPED])
def test_a_mistyped_field_of_a_real_index_is_refused_with_its_path(tmp_path: Path, name, keys, value, where):
    raw = _raw(DATA / name)
    _set(raw, keys, value)
    (tmp_path / "index.json").write_text(json.dumps(raw))
    with pytest.raises(InvalidInputError, match=re.escape(f"index.json: {where}: ")):
        R.load_recordings(tmp_path)


def test_the_callback_stats_and_the_tree_options_are_typed_too(tmp_path: Path):
    raw = _raw(DATA / "record_ranks" / "p2141" / "index.json.gz")
    key = next(iter(raw["callback_stats"]))
    raw["callback_stats"][key]["calls"] = 1.5
    with pytest.raises(InvalidInputError, match=r"index\.json: callback_stats\.calls: expected `int`, got `float`"):
        R.read_process_index(raw, tmp_path)
    tree = _raw(DATA / "record_ranks" / "index.json.gz")
    tree["options"]["trace_replays"] = "3"
    with pytest.raises(InvalidInputError, match=re.escape("index.json: options.trace_replays: expected `int | null`, got `str`")):
        R.read_tree_index(tree, tmp_path)


def test_the_recorded_options_are_the_record_options_field_for_field():
    import dataclasses

    from cgtool.capture.record.options import RecordOptions

    assert list(R.RecordedOptions.__struct_fields__) == [f.name for f in dataclasses.fields(RecordOptions)]
    from cgtool.capture.record.tree import recorded_options

    opts = RecordOptions(out=Path("o"), hang_after=8, json_out=Path("r.json"))
    assert msgspec.to_builtins(recorded_options(opts)) == opts.to_json()
