import gzip
import json

import pytest

from cgtool.errors import InvalidInputError, OutputExistsError, UsageError
from cgtool.artifacts.chrome import LANE_STRIDE, build_trace
from cgtool.artifacts.jsonio import atomic_write_bytes, load_json, read_bytes, write_json


def test_gzip_detected_by_content_not_name(tmp_path):
    p = tmp_path / "plain-name.json"
    p.write_bytes(gzip.compress(b'{"a": 1}'))
    assert load_json(p) == {"a": 1}


def test_decompression_is_capped(tmp_path):
    p = tmp_path / "bomb.gz"
    p.write_bytes(gzip.compress(b"0" * (5 << 20)))
    with pytest.raises(InvalidInputError, match="gzip bomb"):
        read_bytes(p, max_bytes=1 << 20)
    assert len(read_bytes(p, max_bytes=6 << 20)) == 5 << 20


def test_plain_files_are_capped_too(tmp_path):
    p = tmp_path / "big.json"
    p.write_bytes(b" " * 2000)
    with pytest.raises(InvalidInputError, match="limit"):
        read_bytes(p, max_bytes=1000)


def test_write_refuses_to_overwrite_and_is_atomic(tmp_path):
    p = tmp_path / "x.json"
    write_json(p, {"v": 1})
    with pytest.raises(OutputExistsError):
        write_json(p, {"v": 2})
    assert json.loads(p.read_text()) == {"v": 1}
    write_json(p, {"v": 2}, force=True)
    assert json.loads(p.read_text()) == {"v": 2}
    assert [q.name for q in tmp_path.iterdir()] == ["x.json"]  # no temp files left behind
    with pytest.raises(UsageError):
        atomic_write_bytes(tmp_path, b"", force=True)


def test_gz_suffix_compresses_and_64bit_ids_stay_exact(tmp_path):
    big = (7 << 32) | 123
    p = write_json(tmp_path / "x.json.gz", {"id": big})
    assert p.read_bytes()[:2] == b"\x1f\x8b" and load_json(p)["id"] == big


def _records(data_dir, case):
    return json.loads(gzip.decompress((data_dir / case / "records.json.gz").read_bytes()))


@pytest.mark.parametrize("case", ["forkjoin_trace", "transformer_trace_mc1", "train_step_trace"])
def test_every_record_appears_once_and_lanes_never_overlap(data_dir, case):
    recs = _records(data_dir, case)
    doc = build_trace(recs, graphs=[], meta={})
    gpu = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert len(gpu) == sum(r["kind"] != "launch" for r in recs)
    lanes = {}
    for e in gpu:
        lanes.setdefault((e["pid"], e["tid"]), []).append(e)
        assert e["tid"] % LANE_STRIDE == e["args"]["stream"]
        if "graph id" in e["args"]:  # eager kernels around the replays carry none
            assert e["args"]["graph node id"] >> 32 == e["args"]["graph id"]
    assert sum("graph id" in e["args"] for e in gpu) == sum(bool(r.get("graph_id")) for r in recs)
    for evs in lanes.values():
        evs.sort(key=lambda e: e["ts"])
        for a, b in zip(evs, evs[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-9  # Perfetto shows every event of a lane
    names = {(e["pid"], e["tid"]) for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert set(lanes) <= names
    flows = [e for e in doc["traceEvents"] if e.get("cat") == "ac2g"]
    assert len(flows) == 2 * sum(r["kind"] == "launch" for r in recs)


def test_replays_are_numbered_by_launch(data_dir):
    recs = _records(data_dir, "forkjoin_trace")
    doc = build_trace(recs, graphs=[], meta={})
    reps = {e["args"]["replay"] for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    assert reps == set(range(5))


def test_written_files_get_the_usual_permissions(tmp_path):
    import os
    import stat

    umask = os.umask(0o022)
    try:
        p = write_json(tmp_path / "x.json", {})
    finally:
        os.umask(umask)
    assert stat.S_IMODE(p.stat().st_mode) == 0o644
