"""The findings of the input checks, from the recorder's entries to what the user reads: the summary's
sentence, ``cgtool record --json``'s ``stale_inputs`` and the report page's table.

The entries are made by the recorder's own bookkeeping (capture/record/inputs.py) over a stand-in
allocator whose events carry the lines of a small program file written here; they are put into a
real recording from the GPU machine (tests/data/record_server). What each output must say comes
from the timeline the test played (which line allocated, freed and re-used, which replays followed)."""
from __future__ import annotations

import gzip
import io
import json
import re
import shutil
import types
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from cgtool.artifacts.recording import load_tree
from cgtool.capture.record import inputs as mod
from cgtool.inspect.record_summary import summarize, summary_json
from cgtool.report.html import record_html
from cgtool.report.record_table import record_summary

DATA = Path(__file__).parent / "data" / "record_server"
A, SIZE = 0x7F00_0000_0000, 4 * 4096 * 2
PROGRAM = ["import torch\n"] * 100
PROGRAM[60] = "    x = torch.randn(4, 4096, device='cuda', dtype=torch.float16)\n"  # line 61
PROGRAM[94] = "    del x\n"  # line 95
PROGRAM[96] = "    logits = torch.zeros(4, 4096, device='cuda', dtype=torch.float16)\n"  # line 97


def frames(path: Path, line: int) -> list[dict[str, Any]]:
    return [{"filename": str(path), "line": line, "name": "main"}]


def fake_watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int) -> tuple[Path, dict[str, float],
                                                                               list[dict[str, Any]], Any]:
    """The program file, a settable clock, the allocator's event list and an ``InputWatch(every)``
    whose torch is a stand-in reading that list: what each test below plays a recording with."""
    prog = tmp_path / "serve.py"
    prog.write_text("".join(PROGRAM))
    t = {"now": 1000.0}
    monkeypatch.setattr(mod, "_now_us", lambda: t["now"])
    monkeypatch.setattr(mod, "CHECK_SHARE", float("inf"))
    events: list[dict[str, Any]] = []
    watch = mod.InputWatch(every)
    watch.torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=types.SimpleNamespace(
        _snapshot=lambda: {"segments": [], "device_traces": [list(events)]})))
    return prog, t, events, watch


def play(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, free_before: int | None, replays: int = 40,
         reuse: bool = True) -> dict[str, Any]:
    """One graph reading ``x``; ``x`` freed before replay ``free_before`` (and its memory taken by
    ``logits``); checks before every replay. The recorder's entry for the graph."""
    prog, t, events, watch = fake_watch(tmp_path, monkeypatch, 1)

    class CUDAGraph:
        def raw_cuda_graph_exec(self) -> int:
            return 0xE0

        def replay(self) -> None:
            pass

    watch._wrap_replay(CUDAGraph)
    blk = mod.Block(A, SIZE, SIZE, mod.user_site(frames(prog, 61)), {"name": "x", "shape": [4, 4096], "dtype": "fp16"}, 3)
    w = mod.Watched(0, 0xE0, 0, [blk], 0, 0, {}, 0.0, t["now"])
    w.checkpoints.append((t["now"], 0, 0))
    watch.by_exec[0xE0], watch.graphs[0] = w, w
    watch.blocks[(0, A)] = [(w, blk)]
    g = CUDAGraph()
    for k in range(1, replays + 1):
        if k == free_before:
            t["now"] += 1
            events.append({"action": "free_requested", "addr": A, "size": SIZE, "time_us": t["now"],
                           "frames": frames(prog, 95)})
            if reuse:
                t["now"] += 1
                events.append({"action": "alloc", "addr": A, "size": SIZE, "time_us": t["now"],
                               "frames": frames(prog, 97)})
        t["now"] += 1
        g.replay()
    t["now"] += 1
    watch.finish()
    return watch.entry(0)


def recording(tmp_path: Path, entry: dict[str, Any]) -> Path:
    out = tmp_path / "rec"
    shutil.copytree(DATA, out)
    p = out / "p1629" / "index.json.gz"
    idx = json.loads(gzip.decompress(p.read_bytes()))
    idx["graphs"][0]["inputs"] = json.loads(json.dumps(entry))
    p.write_bytes(gzip.compress(json.dumps(idx).encode()))
    return out


def test_freed_and_reused_input_in_summary_json_and_html(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = play(tmp_path, monkeypatch, free_before=3)
    rec = recording(tmp_path, entry)
    s = summarize(load_tree(rec))
    want = ("Graph #0 (server_runner.py:59) reads `x` (4×4096 fp16, allocated at serve.py:61); `x` was freed at "
            "serve.py:95 before replay 3 and its memory reused by `logits` (allocated at serve.py:97) — replays "
            "3–40 read `logits`' data.")
    assert want in s.findings
    [j] = summary_json(s)["stale_inputs"]
    assert (j["kind"], j["input"], j["shape"], j["dtype"]) == ("reused", "x", [4, 4096], "fp16")
    assert (j["allocated_at"]["line"], j["freed_at"]["line"], j["reused_by"]["allocated_at"]["line"]) == (61, 95, 97)
    assert (j["first_replay"], j["last_replay"], j["replays"], j["first_replay_exact"]) == (3, 40, 38, True)
    assert j["reused_by"]["name"] == "logits"
    con = Console(file=io.StringIO(), width=400, color_system=None)
    record_summary(con, load_tree(rec))
    assert f"• {want}" in con.file.getvalue()
    page = record_html(s, "rec")
    assert "graphs reading memory their program freed" in page and "serve.py:95" in page and "3–40" in page


def test_freed_not_reused_says_freed_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = play(tmp_path, monkeypatch, free_before=10, reuse=False)
    s = summarize(load_tree(recording(tmp_path, entry)))
    [j] = summary_json(s)["stale_inputs"]
    assert (j["kind"], j["first_replay"], j["reused_by"]) == ("freed", 10, None)
    assert any("replays 10–40 read freed memory" in f for f in s.findings)


def test_no_finding_says_what_was_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = play(tmp_path, monkeypatch, free_before=None)
    s = summarize(load_tree(recording(tmp_path, entry)))
    assert summary_json(s)["stale_inputs"] == []
    assert "No graph read memory its program had freed (1 of 4 graph(s) checked)." in s.findings


def test_recording_without_checks_says_nothing_about_inputs() -> None:
    s = summarize(load_tree(DATA))
    assert summary_json(s)["stale_inputs"] == []
    assert not any("freed" in f for f in s.findings)


def _many(tmp_path: Path, entry: dict[str, Any], firsts: list[int], name: str) -> Path:
    """record_hf_llama (a torch.compile program) whose graph reads one input per first replay in
    ``firsts``, each freed before that replay (the finding of ``entry`` at other replays)."""
    [one] = entry["findings"]
    out = tmp_path / name
    shutil.copytree(Path(__file__).parent / "data" / "record_hf_llama", out)
    p = out / "p895" / "index.json.gz"
    idx = json.loads(gzip.decompress(p.read_bytes()))
    graph = next(g for g in idx["graphs"] if g["nodes"])
    graph["inputs"] = {**entry, "findings": [{**one, "first_replay": k, "may_start_at": k} for k in firsts]}
    p.write_bytes(gzip.compress(json.dumps(idx).encode()))
    return out


def _lines(tree: Path) -> list[str]:
    con = Console(file=io.StringIO(), width=80, color_system=None, markup=False, highlight=False)
    record_summary(con, load_tree(tree))
    return con.file.getvalue().splitlines()


def test_many_stale_inputs_keep_a_compiled_summary_on_one_screen(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight inputs of a torch.compile graph freed before replays 3..10: the summary opens on the
    graph count, then says the three that cost the most replays in full and counts the other five in
    one sentence, so it is as long as with four inputs and fits 50 lines of 80 columns; the report's
    table, after the graphs and before the processes, has a row for each of the eight."""
    entry = play(tmp_path, monkeypatch, free_before=3)
    firsts = [7, 3, 10, 5, 4, 9, 6, 8]
    tree = _many(tmp_path, entry, firsts, "eight")
    lines = _lines(tree)
    assert sum(max(1, -(-len(ln.rstrip()) // 80)) for ln in lines) <= 50, "\n".join(lines)
    assert len(lines) == len(_lines(_many(tmp_path, entry, [6, 3, 5, 4], "four"))), "\n".join(lines)
    bullets = [" ".join(b.split()) for b in " ".join(lines).split("•")[1:]]
    assert "graph(s) in" in bullets[0], bullets[0]
    said = sorted(firsts)[:3]  # the most replays: the earliest first replays, right after the count
    for k, b in zip(said, bullets[1:4], strict=True):
        assert f"before replay {k} " in b and f"replays {k}–40 read `logits`' data" in b, bullets
    text = " ".join(" ".join(lines).split())
    assert not any(f"replays {k}–40" in text for k in sorted(firsts)[3:]), text
    assert f"{len(firsts) - 3} more graph input(s) read memory their program freed, in 1 graph(s)" in text, text
    s = summarize(load_tree(tree))
    assert sorted(j["first_replay"] for j in summary_json(s)["stale_inputs"]) == sorted(firsts)
    sec = record_html(s, "eight")
    table = sec[sec.index("id=recstale"):]
    table = table[:table.index("</table>")]
    assert sec.index("id=recgraphs") < sec.index("id=recstale") < sec.index("<th>parent")
    assert sorted(int(m) for m in re.findall(r"<td class=num>(\d+)–40</tr>", table)) == sorted(firsts)


# ------------------------------------------------ real recordings of the bug programs (GPU machine)
PROGRAMS = Path(__file__).parent / "programs"
REAL = {"freed": ("stale_freed.py", "reused"), "rebind": ("stale_rebind.py", "stale"),
        "rebind_free": ("stale_rebind.py", None)}


def _marker(program: str, marker: str) -> int:
    for i, text in enumerate((PROGRAMS / program).read_text().splitlines(), 1):
        if f"# {marker}" in text:
            return i
    raise AssertionError(marker)


@pytest.mark.parametrize("case", sorted(REAL))
def test_real_recording_of_a_bug_program(case: str) -> None:
    folder = Path(__file__).parent / "data" / f"record_stale_{case}"
    if not (folder / "index.json.gz").exists():
        pytest.skip(f"{folder.name} is recorded on the GPU machine by scripts/gpu/stale_inputs.sh (not here yet)")
    program, kind = REAL[case]
    s = summarize(load_tree(folder))
    [j] = summary_json(s)["stale_inputs"]
    assert kind is None or j["kind"] == kind
    assert j["allocated_at"]["line"] == _marker(program, "LINE_ALLOC")
    assert j["last_replay"] == 40
    if case == "freed":
        assert j["reused_by"]["allocated_at"]["line"] == _marker(program, "LINE_LOGITS")
    if case == "rebind_free":
        assert j["freed_at"]["line"] == _marker(program, "LINE_REBIND")
    # the summary computed here from the files is the one `cgtool record --json` printed there
    there = json.loads((folder / "summary.json").read_text())
    assert [x["sentence"] for x in there["stale_inputs"]] == [j["sentence"]]


def test_real_recording_of_a_correct_program_has_no_finding() -> None:
    """inputs_inplace.py updates its static input in place (``x.copy_``) and makes new batches on its
    LINE_ALLOC: recorded with the checks on, its one graph is checked and nothing is reported."""
    folder = Path(__file__).parent / "data" / "record_stale_inputs_inplace"
    if not (folder / "index.json.gz").exists():
        pytest.skip(f"{folder.name} is recorded on the GPU machine by scripts/gpu/stale_inputs.sh (not here yet)")
    raw = json.loads(gzip.decompress(next(folder.glob("p*/index.json.gz")).read_bytes()))
    [g] = raw["graphs"]
    assert g["inputs"]["checked"] is True and g["inputs"]["external_blocks"] > 0 and g["inputs"]["findings"] == []
    assert raw["input_checks"]["checks"] > 0 and raw["input_checks"]["errors"] == []
    s = summarize(load_tree(folder))
    assert summary_json(s)["stale_inputs"] == []
    assert any("No graph read memory its program had freed (1 of 1 graph(s) checked)" in f for f in s.findings)
    assert json.loads((folder / "summary.json").read_text())["stale_inputs"] == []


def test_kept_alive_rebind_in_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rebind that keeps the old tensor: its line makes a new tensor before every replay, nothing
    writes the captured one; the summary names the line and the replays (all 40)."""
    prog, t, events, watch = fake_watch(tmp_path, monkeypatch, 100)
    monkeypatch.setattr(watch, "_hash", lambda b: 42)  # never written

    class CUDAGraph:
        def raw_cuda_graph_exec(self) -> int:
            return 0xE0

        def replay(self) -> None:
            pass

    watch._wrap_replay(CUDAGraph)
    blk = mod.Block(A, SIZE, SIZE, mod.user_site(frames(prog, 61)), {"name": "x", "shape": [4, 4096], "dtype": "fp16"},
                    1, site_key=(str(prog), 61))
    w = mod.Watched(0, 0xE0, 0, [blk], 0, 0, {}, 0.0, t["now"])
    w.checkpoints.append((t["now"], 0, 0))
    watch.by_exec[0xE0], watch.graphs[0] = w, w
    watch.blocks[(0, A)] = [(w, blk)]
    watch._by_size[(0, SIZE)] = [(w, blk)]
    g = CUDAGraph()
    for k in range(40):
        t["now"] += 1
        events.append({"action": "alloc", "addr": A + (k + 1) * SIZE, "size": SIZE, "time_us": t["now"],
                       "frames": frames(prog, 61)})
        t["now"] += 1
        g.replay()
    t["now"] += 1
    watch.finish()
    s = summarize(load_tree(recording(tmp_path, watch.entry(0, 40))))
    [j] = summary_json(s)["stale_inputs"]
    assert (j["kind"], j["reallocs"], j["first_replay"], j["last_replay"]) == ("stale", 40, 1, 40)
    assert j["unchanged_between"][:2] == [[1, 2], [2, 3]]
    assert any("made 40 new tensor(s) of its size after the capture — replays 1–40 read the old data" in f
               and "allocated at serve.py:61" in f for f in s.findings)


@pytest.mark.subprocess
def test_record_json_refuses_an_existing_file_before_the_program_runs(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    (tmp_path / "s.json").write_text("{}")
    marker = tmp_path / "ran"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    p = subprocess.run([sys.executable, "-m", "cgtool", "record", "-o", str(tmp_path / "rec"), "--json",
                        str(tmp_path / "s.json"), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 2
    assert "will not overwrite without --force: " in p.stderr and "s.json" in p.stderr
    assert not marker.exists() and not (tmp_path / "rec").exists()
    assert (tmp_path / "s.json").read_text() == "{}"


def _held(raw: Any, typed: Any, where: str) -> None:
    """Every key of the recorder's JSON is a field of its struct, with the same value."""
    if isinstance(raw, dict):
        for k, v in raw.items():
            assert isinstance(typed, dict) and k in typed, f"{where}.{k}: written, not in the struct"
            _held(v, typed[k], f"{where}.{k}")
    elif isinstance(raw, list):
        assert isinstance(typed, list) and len(typed) == len(raw), where
        for i, (v, b) in enumerate(zip(raw, typed)):
            _held(v, b, f"{where}[{i}]")
    else:
        assert typed == raw and type(typed) is type(raw), where


@pytest.mark.parametrize("free_before, reuse", [(3, True), (10, False), (None, True)])
def test_the_recorders_input_entries_are_their_structs_key_for_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    free_before: int | None, reuse: bool) -> None:
    """What capture/record/inputs.py writes per graph and per process goes into the index through
    GraphInputs and InputChecks (capture/record/ledger.py): no key of it may be lost on the way."""
    import msgspec

    from cgtool.artifacts.recording import GraphInputs, InputChecks

    entry = json.loads(json.dumps(play(tmp_path, monkeypatch, free_before=free_before, reuse=reuse)))
    assert entry["findings"] or free_before is None
    _held(entry, msgspec.to_builtins(msgspec.convert(entry, GraphInputs)), "inputs")
    watch = fake_watch(tmp_path, monkeypatch, 1)[3]
    checks = json.loads(json.dumps(watch.process_entry()))
    _held(checks, msgspec.to_builtins(msgspec.convert(checks, InputChecks)), "input_checks")
