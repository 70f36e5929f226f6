"""The tracer's own overhead: written into a trace by `cgtool trace`, read back, shown by `deps`."""

import gzip
import json
import math

import pytest

from cgtool.artifacts.trace import TracerOverhead, load_trace
from cgtool.capture.tracing import tracer_overhead

TRACE = "forkjoin_trace_mc1"


def test_overhead_block_from_replay_times():
    # medians 400 and 650 µs; 1200 GPU items over 3 traced replays = 400 per replay
    block = tracer_overhead([390.0, 400.0, 410.0, 400.0, 1000.0], [640.0, 650.0, 660.0], items=1200, replays=3)
    assert block["untraced_replay_us"] == 400.0 and block["traced_replay_us"] == 650.0
    assert block["items_per_replay"] == 400.0
    assert block["per_item_us"] == pytest.approx(250.0 / 400.0)
    assert block["replays_timed"] == [5, 3]
    assert tracer_overhead([1.0], [1.0], items=0, replays=0)["per_item_us"] == 0.0


def _with_overhead(data_dir, tmp_path, block, name="t.json.gz"):
    doc = json.loads(gzip.decompress((data_dir / TRACE / "trace.json.gz").read_bytes()))
    if block is None:
        doc["cgtool"].pop("tracer_overhead", None)
    else:
        doc["cgtool"]["tracer_overhead"] = block
    path = tmp_path / name
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


BLOCK = {"untraced_replay_us": 80.0, "traced_replay_us": 200.0, "items_per_replay": 40.0, "per_item_us": 3.0,
         "replays_timed": [10, 5], "method": "events"}


def test_reader_gives_the_overhead(data_dir, tmp_path):
    t = load_trace(_with_overhead(data_dir, tmp_path, BLOCK))
    assert t.tracer_overhead == TracerOverhead(80.0, 200.0, 40.0, 3.0)
    assert t.tracer_overhead.ratio == pytest.approx(2.5)
    assert load_trace(data_dir / TRACE / "trace.json.gz").tracer_overhead is None  # traces from before


@pytest.mark.parametrize("bad", ["slow", [1, 2], {**BLOCK, "per_item_us": "3"}, {**BLOCK, "untraced_replay_us": -1.0},
                                 {k: v for k, v in BLOCK.items() if k != "traced_replay_us"},
                                 {**BLOCK, "items_per_replay": True}])
def test_reader_refuses_a_bad_overhead_block(run_cli, data_dir, tmp_path, bad):
    rc, _, err = run_cli("deps", _with_overhead(data_dir, tmp_path, bad))
    assert rc == 4 and "cgtool.tracer_overhead" in err and "Traceback" not in err


def _weighted_median_gap(findings):
    pairs = sorted((f["gap_us"], f["count"]) for f in findings if f["count"] > 0)
    total, seen = sum(c for _, c in pairs), 0
    for gap, c in pairs:
        seen += c
        if 2 * seen >= total:
            return gap
    raise AssertionError("no serializations")


def test_deps_shows_the_overhead_and_notes_it_when_of_the_order_of_the_gaps(run_cli, data_dir, tmp_path):
    rc, out, err = run_cli("deps", data_dir / TRACE / "trace.json.gz", "--json", tmp_path / "plain.json")
    assert rc == 0 and "tracer overhead" not in out  # a trace without the block: no row
    gap = _weighted_median_gap(json.loads((tmp_path / "plain.json").read_text())["serializations"])
    assert gap > 1.0

    # a stretch per item of half the median gap: shown, and noted
    block = {**BLOCK, "per_item_us": 0.5 * gap}
    out_json = tmp_path / "deps.json"
    rc, out, err = run_cli("deps", _with_overhead(data_dir, tmp_path, block), "--json", out_json)
    assert rc == 0, err
    assert "tracer overhead" in out and "2.50x per replay" in out and f"+{0.5 * gap:.2f} µs per GPU item" in out
    assert "note: tracing stretched each replay" in out and f"({gap:.2f} µs)" in out
    doc = json.loads(out_json.read_text())
    assert doc["tracer_overhead"]["per_item_us"] == 0.5 * gap and doc["tracer_overhead"]["note"].startswith("tracing")

    # a tenth of the median gap: shown, without the note
    small = {**BLOCK, "per_item_us": 0.1 * gap}
    rc, out, err = run_cli("deps", _with_overhead(data_dir, tmp_path, small, "small.json.gz"), "--json", out_json, "--force")
    assert rc == 0, err
    assert "tracer overhead" in out and "tracing stretched" not in out
    assert json.loads(out_json.read_text())["tracer_overhead"]["note"] is None


def test_ratio_of_a_zero_baseline_is_nan():
    assert math.isnan(TracerOverhead(0.0, 5.0, 1.0, 5.0).ratio)
