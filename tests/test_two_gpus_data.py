"""What scripts/gpu/two_gpus.sh recorded on two H200s (tests/data/two_gpus/), read on the CPU.

* ``record_rec_hang``: `cgtool record --hang-after 8` of ``nccl_in_graph.py --hang`` under torchrun,
  stopped by ``timeout -s TERM 30``: both ranks hung in ``dist.destroy_process_group()`` with the graph
  (its all-reduce inside) alive. Expected values come from the program (its ``RESULT`` lines, the line
  numbers of its marked lines) and from the stack dumps parsed here with a regular expression.
* ``record_rec_nig``: the same program ending cleanly (graph reset first): no stack file anywhere.
* ``twonode``: two torchrun agents (one GPU each, c10d rendezvous) per command; each command's two node
  folders, side by side, read as one run.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from cgtool.artifacts.recording import load_tree
from cgtool.capture.record.stops import is_launcher
from cgtool.inspect import stops

DATA = Path(__file__).parent / "data" / "two_gpus"
PROG = Path(__file__).parent / "programs" / "nccl_in_graph.py"


def _json(p: Path) -> dict:
    if not p.exists():
        p = p.with_name(p.name + ".gz")
    raw = p.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _line(mark: str) -> int:
    return next(i for i, ln in enumerate(PROG.read_text().splitlines(), 1) if mark in ln)


def _results(folder: Path) -> dict[int, dict]:
    lines = (folder / "stdout.txt").read_text().splitlines()
    return {d["rank"]: d for d in (json.loads(ln[7:]) for ln in lines if ln.startswith("RESULT "))}


def _ranks(folder: Path) -> dict[int, tuple[str, dict]]:
    """rank -> (process folder name, its index), from the tree's index."""
    tree = _json(folder / "index.json")
    return {p["rank"]: (p["folder"], _json(folder / p["folder"] / "index.json"))
            for p in tree["processes"] if p.get("followed") and p.get("rank") is not None}


def test_the_hang_names_each_ranks_stopping_line_and_its_cause() -> None:
    folder = DATA / "record_rec_hang"
    res, ranks = _results(folder), _ranks(folder)
    assert sorted(res) == sorted(ranks) == [0, 1]
    destroy, capture = _line("LINE_DESTROY"), _line("LINE_CAPTURE")
    found = stops.findings(load_tree(folder))
    for r, (name, idx) in ranks.items():
        assert [g["replays"] for g in idx["graphs"]] == res[r]["replays"] == [7]
        st = idx["stopping"]
        # the dumps, parsed here: a stall (Timeout) then SIGTERM's, the main thread on the destroy line
        text = (folder / name / "stacks.txt").read_text()
        assert text.startswith("Timeout (0:00:08)!")
        mains = re.findall(r"hread " + st["main_thread"] + r" \(most recent call first\):\n((?:  File .*\n?)+)", text)
        assert len(mains) == 2
        for frames in mains:
            prog = [int(n) for f, n in re.findall(r'File "(.*)", line (\d+) in', frames) if f.endswith(PROG.name)]
            assert prog[0] == destroy
        d = st["destroy_process_group"]
        assert d["returned"] is False and d["site"].endswith(f"{PROG.name}:{destroy}")
        (held,) = d["live_nccl_graphs"]
        assert held["captured_at"].endswith(f"{PROG.name}:{capture}") and held["replays"] == 7
        assert "ncclDevKernel_AllReduce" in held["kernel"]
        who = f"rank {r} (pid {name[1:]})"
        assert (f"{who}: stopped in destroy_process_group ({PROG.name}:{destroy}), last graph #0 replay 7"
                in " ".join(found))
        assert any(f.startswith(f"{who}: dist.destroy_process_group() at {PROG.name}:{destroy} did not return")
                   and f"captured at {PROG.name}:{capture}" in f for f in found)
    # torchrun's agent launches no graph and its ranks are watched: --hang-after leaves it alone, told
    # by its command line (this recording was made before that: its agent's stacks.txt has a stall dump)
    (agent,) = [p for p in folder.glob("p*/") if p.name not in {n for n, _ in ranks.values()}]
    assert is_launcher(_json(agent / "index.json")["program"])
    assert not any(is_launcher(idx["program"]) for _, idx in ranks.values())
    summary = (folder / "stderr.txt").read_text()
    assert f"stopped in destroy_process_group ({PROG.name}:{destroy})" in " ".join(summary.split())


def test_a_clean_end_leaves_no_stack_file() -> None:
    folder = DATA / "record_rec_nig"
    res, ranks = _results(folder), _ranks(folder)
    assert sorted(res) == sorted(ranks) == [0, 1] and res[0]["value"] == res[1]["value"]
    assert not list(folder.glob("p*/stacks.txt"))
    for r, (_name, idx) in ranks.items():
        assert [g["replays"] for g in idx["graphs"]] == res[r]["replays"]
        d = idx["stopping"]["destroy_process_group"]
        assert d["returned"] is True and d["live_nccl_graphs"] == []
    assert stops.findings(load_tree(folder)) == []


@pytest.mark.parametrize("command", ["cap", "tr", "rec"])
def test_each_node_names_one_global_rank(command: str) -> None:
    seen = []
    for node in ("node0", "node1"):
        base = DATA / "twonode" / command / node
        if command == "cap":
            mine = {_json(p)["cgtool"]["rank"] for p in base.rglob("graph.json*")}
        elif command == "tr":
            mine = {_json(p)["cgtool"]["rank"] for p in base.glob("trace.rank*")}
        else:
            mine = set(_ranks(base / "rec"))
        assert len(mine) == 1
        seen += mine
    assert sorted(seen) == [0, 1]


def test_the_two_nodes_folders_read_as_one_run(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    rc, _text, err = run_cli("deps", DATA / "twonode" / "tr", "--json", out)
    assert rc == 0, err
    doc = json.loads(out.read_text())
    assert sorted(doc["ranks"]) == ["0", "1"] and sorted(doc["nccl"]["ranks"]) == ["0", "1"]
    for p in (DATA / "twonode" / "tr").rglob("trace.rank*"):
        d = _json(p)
        kernels = sum(1 for e in d["traceEvents"] if e.get("cat") == "kernel")
        nodes = sum(1 for n in d["cgtool"]["graphs"][0]["nodes"] if n["node_type"] == "kernel")
        assert doc["nccl"]["ranks"][str(d["cgtool"]["rank"])][0]["replays"] * nodes == kernels
    rc, text, err = run_cli("topo", DATA / "twonode" / "cap")
    assert rc == 0, err
    assert "rank" in text
