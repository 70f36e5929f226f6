"""NCCL figures of per-rank traces (inspect/collectives.py) against an independent computation from the
raw chrome events: each replay's kernels painted on a 1 ns grid (numpy booleans), no interval logic
shared with cgtool, and the rank files read with json alone.

Data: tests/data/tp_mlp_2gpu/traces (two H200s; an all-reduce at the end of a GEMM chain) and
tests/data/two_gpus/ (two H200s, scripts/gpu/two_gpus.sh): {tp_mlp,nig}/traces{,_mc1} (nccl_in_graph.py
runs a GEMM on a side stream beside its all-reduce; _mc1: CUDA_DEVICE_MAX_CONNECTIONS=1) and
twonode/tr (two simulated nodes, one rank each, their folders node0/ and node1/ read as one run)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from cgtool.artifacts.trace import load_trace
from cgtool.inspect.collectives import collective_figures, intersection_length, union_length

DATA = Path(__file__).parent / "data"
SETS = [DATA / "tp_mlp_2gpu" / "traces"] + sorted(p for p in (DATA / "two_gpus").glob("*/traces*") if p.is_dir()) + [
    DATA / "two_gpus" / "twonode" / "tr"]


def _rank_files(folder: Path) -> list[Path]:
    """The per-rank files of a folder and its subfolders (a node's folder each)."""
    return sorted(p for p in folder.rglob("*") if ".rank" in p.name and p.is_file())


def test_the_two_gpu_data_is_there() -> None:
    assert len(SETS) == 6 and all(len(_rank_files(f)) == 2 for f in SETS)


def _raw(folder: Path) -> dict[int, dict]:
    out = {}
    for p in _rank_files(folder):
        raw = p.read_bytes()
        d = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        out[d["cgtool"]["rank"]] = d
    return out


def _independent(doc: dict) -> list[dict]:
    """Per replay (kernels of a graph launch), in start order: span, NCCL share and overlap on a ns grid."""
    by = {}
    for e in doc["traceEvents"]:
        a = e.get("args") or {}
        if e.get("ph") == "X" and e.get("cat") == "kernel" and a.get("graph id"):
            by.setdefault(a["correlation"], []).append(e)
    out = []
    for ks in by.values():
        t0 = min(round(e["ts"] * 1000) for e in ks)
        t1 = max(round((e["ts"] + e["dur"]) * 1000) for e in ks)
        nccl, other = np.zeros(t1 - t0, bool), np.zeros(t1 - t0, bool)
        for e in ks:
            s, f = round(e["ts"] * 1000) - t0, round((e["ts"] + e["dur"]) * 1000) - t0
            (nccl if "nccl" in e["name"].lower() else other)[s:f] = True
        last = max((e for e in ks if "nccl" in e["name"].lower()), key=lambda e: e["ts"] + e["dur"])
        out.append({"start": t0 / 1000, "share": nccl.sum() / (t1 - t0), "overlap": (nccl & other).sum() / nccl.sum(),
                    "rel": t0 / 1000 - (last["ts"] + last["dur"]), "dur": last["dur"]})
    return sorted(out, key=lambda r: r["start"])


@pytest.mark.parametrize("folder", SETS, ids=lambda p: str(p.relative_to(DATA)))
def test_nccl_figures_agree_with_the_raw_events(folder: Path) -> None:
    raw = _raw(folder)
    figs = collective_figures({r: load_trace(p) for r, p in
                               ((json.loads(gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes())
                                 ["cgtool"]["rank"], p) for p in _rank_files(folder))})
    assert sorted(figs.ranks) == sorted(raw) == [0, 1]
    mine = {r: _independent(d) for r, d in raw.items()}
    for r, gs in figs.ranks.items():
        (g,) = gs
        f = g.figures()
        want = mine[r]
        assert f["replays"] == len(want)
        assert f["nccl_share"] == pytest.approx(np.mean([x["share"] for x in want]), rel=0.01, abs=1e-6)
        assert f["nccl_overlap"] == pytest.approx(np.mean([x["overlap"] for x in want]), rel=0.01, abs=1e-6)
        waits = [x["dur"] - min(mine[q][i]["dur"] for q in mine) for i, x in enumerate(want)]
        assert f["wait_us"] == pytest.approx(np.mean(waits), rel=0.01, abs=1e-3)
    (sk,) = figs.skew
    per = [max(mine[q][i]["rel"] for q in mine) - min(mine[q][i]["rel"] for q in mine) for i in range(len(mine[0]))]
    assert sk["start_skew_us"] == pytest.approx(per, rel=0.01, abs=1e-3)


def test_interval_helpers_against_a_grid() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        a = [tuple(sorted(rng.integers(0, 300, 2).tolist())) for _ in range(rng.integers(0, 6))]
        b = [tuple(sorted(rng.integers(0, 300, 2).tolist())) for _ in range(rng.integers(0, 6))]
        ga, gb = np.zeros(300, bool), np.zeros(300, bool)
        for s, e in a:
            ga[s:e] = True
        for s, e in b:
            gb[s:e] = True
        assert union_length(a) == ga.sum()
        assert intersection_length(a, b) == (ga & gb).sum()


def test_unequal_replay_counts_leave_the_skew_unknown(data_dir: Path) -> None:
    folder = data_dir / "tp_mlp_2gpu" / "traces"
    t0, t1 = load_trace(folder / "trace.rank0.json.gz"), load_trace(folder / "trace.rank1.json.gz")
    keep = t1.correlation != t1.correlation[np.argmax(t1.start)]  # rank 1 loses its last replay
    import dataclasses

    cut = dataclasses.replace(t1, **{k: getattr(t1, k)[keep] for k in (
        "kind", "name", "start", "end", "device", "stream", "correlation", "graph_id", "tools_id", "channel",
        "channel_type", "seq")})
    figs = collective_figures({0: t0, 1: cut})
    (sk,) = figs.skew
    assert sk["start_skew_us"] is None and "different numbers of replays" in sk["reason"]
    assert figs.ranks[1][0].figures()["wait_us"] is None  # unknown, not zero


def test_deps_on_a_rank_folder_reports_the_nccl_figures(run_cli, data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    rc, text, err = run_cli("deps", data_dir / "tp_mlp_2gpu" / "traces", "--json", out)
    assert rc == 0, err
    assert "NCCL kernels in graph replays" in text and "replay start skew" in " ".join(text.split())
    doc = json.loads(out.read_text())["nccl"]
    raw = _raw(data_dir / "tp_mlp_2gpu" / "traces")
    for r, d in raw.items():
        want = _independent(d)
        assert doc["ranks"][str(r)][0]["nccl_share"] == pytest.approx(np.mean([x["share"] for x in want]), rel=0.01)


def test_report_on_a_rank_folder_shows_the_nccl_figures(run_cli, tmp_path: Path) -> None:
    folder = DATA / "two_gpus" / "nig" / "traces"  # a side-stream GEMM overlaps the all-reduce: overlap > 0
    out = tmp_path / "r.html"
    rc, _text, err = run_cli("report", folder, "-o", out, "-q")
    assert rc == 0, err
    page = out.read_text()
    sec = page[page.index("<section class=collectives>"):]
    sec = sec[: sec.index("</section>")]
    rows = {int(m[0]): m[1:] for m in re.findall(
        r"<tr><td>(\d+)<td class=num>\d+<td class=num>(\d+)<td class=num>[\d.]+<td class=num>[\d.]+"
        r"<td class=num>([\d.]+)%<td class=num>([\d.]+)%", sec)}
    raw = _raw(folder)
    assert sorted(rows) == sorted(raw) == [0, 1]
    for r, d in raw.items():
        want = _independent(d)
        replays, share, overlap = rows[r]
        assert int(replays) == len(want)
        assert float(share) == pytest.approx(100 * np.mean([x["share"] for x in want]), abs=0.051)
        assert float(overlap) == pytest.approx(100 * np.mean([x["overlap"] for x in want]), abs=0.051)
    assert float(overlap) > 0
    per = [max(_independent(raw[q])[i]["rel"] for q in raw) - min(_independent(raw[q])[i]["rel"] for q in raw)
           for i in range(len(_independent(raw[0])))]
    shown = re.search(r"per replay: ([\d., ]+) µs", sec)
    assert shown and [float(x) for x in shown[1].split(", ")] == pytest.approx(per, abs=0.051)
