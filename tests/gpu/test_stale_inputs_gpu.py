"""`cgtool record`'s input checks on a real GPU (`pytest -m gpu`): the two bug programs of
tests/programs/ are found with the lines their own ``# LINE_...`` markers name; the three correct
ones (an in-place update, CUDA graph trees, HF generate()) and the serving runner give no finding."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "programs"


def _line(program: str, marker: str) -> int:
    """The line of ``program`` that carries ``# MARKER`` (read from the file, not from cgtool)."""
    for i, text in enumerate((PROGRAMS / program).read_text().splitlines(), 1):
        if f"# {marker}" in text:
            return i
    raise AssertionError(f"{marker} not in {program}")


def _index(tmp_path: Path) -> dict:
    """The recorded program's process index (the one process that made graphs)."""
    docs = [json.loads(p.read_text()) for p in sorted((tmp_path / "rec").glob("p*/index.json"))]
    [doc] = [d for d in docs if d["graphs"]]
    return doc


def _record(tmp_path: Path, program: str, *args: str) -> dict:
    pytest.importorskip("cupti")
    out, js = tmp_path / "rec", tmp_path / "summary.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "cgtool", "record", "--check-inputs", "100", "-o", str(out),
                        "--json", str(js), "--", sys.executable, program, *args],
                       capture_output=True, text=True, env=env, cwd=PROGRAMS, timeout=400)
    assert p.returncode == 0, p.stderr[-3000:]
    doc: dict = json.loads(js.read_text())
    return doc


def test_rebind_kept_alive(tmp_path: Path) -> None:
    doc = _record(tmp_path, "stale_rebind.py")
    [f] = doc["stale_inputs"]
    assert f["kind"] == "stale"
    assert f["allocated_at"]["line"] == _line("stale_rebind.py", "LINE_ALLOC")
    assert f["last_replay"] == 40


def test_rebind_freed(tmp_path: Path) -> None:
    doc = _record(tmp_path, "stale_rebind.py", "--free")
    [f] = doc["stale_inputs"]
    assert f["kind"] in ("freed", "reused")
    assert f["allocated_at"]["line"] == _line("stale_rebind.py", "LINE_ALLOC")
    assert f["freed_at"]["line"] == _line("stale_rebind.py", "LINE_REBIND")
    assert (f["first_replay"], f["last_replay"]) == (1, 40) and f["first_replay_exact"]


def test_freed_and_reused(tmp_path: Path) -> None:
    doc = _record(tmp_path, "stale_freed.py")
    [f] = doc["stale_inputs"]
    assert f["kind"] == "reused"
    assert f["input"] == "x" and f["shape"] == [4, 4096] and f["dtype"] == "fp16"
    assert f["allocated_at"]["line"] == _line("stale_freed.py", "LINE_ALLOC")
    assert f["freed_at"]["line"] in (_line("stale_freed.py", "LINE_RETURN"), _line("stale_freed.py", "LINE_CALL"))
    assert f["reused_by"]["allocated_at"]["line"] == _line("stale_freed.py", "LINE_LOGITS")
    assert f["reused_by"]["name"] == "logits"
    assert (f["first_replay"], f["last_replay"]) == (1, 40)


@pytest.mark.parametrize("program", ["inputs_inplace.py", "inputs_trees.py", "inputs_hf_generate.py",
                                     "server_runner.py"])
def test_correct_programs_give_no_finding(tmp_path: Path, program: str) -> None:
    if program == "inputs_hf_generate.py":
        pytest.importorskip("transformers")
    doc = _record(tmp_path, program)
    assert doc["stale_inputs"] == []
    assert any(p["inputs_checked"] for p in doc["processes"])


def test_program_turns_its_history_off(tmp_path: Path) -> None:
    """The program turns torch's allocator history off after 20 replays: the free before it is
    found (its replays 1-20), and the graph says replays 21-40 were not checked, naming the call."""
    doc = _record(tmp_path, "inputs_own_history.py", "after")
    [f] = doc["stale_inputs"]
    assert f["kind"] == "reused" and f["allocated_at"]["line"] == _line("stale_freed.py", "LINE_ALLOC")
    assert (f["first_replay"], f["last_replay"]) == (1, 20)
    idx = _index(tmp_path)
    [g] = idx["graphs"]
    assert g["inputs"]["checked"] is False and g["inputs"]["replays_checked"] == 20
    assert f"inputs_own_history.py:{_line('inputs_own_history.py', 'LINE_HISTORY_AFTER')}" in g["inputs"]["why_not"]
    assert "enabled=None" in idx["input_checks"]["history_changed"]


def test_program_history_before_cuda_is_left_alone(tmp_path: Path) -> None:
    """The program turns the history on with its own ring before CUDA starts: the checks do not
    replace it, check nothing, and say why (the call and its line), not that nothing was found."""
    doc = _record(tmp_path, "inputs_own_history.py", "before")
    assert doc["stale_inputs"] == []
    idx = _index(tmp_path)
    site = f"inputs_own_history.py:{_line('inputs_own_history.py', 'LINE_HISTORY_BEFORE')}"
    assert site in idx["input_checks"]["history"] and "max_entries=1000" in idx["input_checks"]["history"]
    [g] = idx["graphs"]
    assert g["inputs"]["checked"] is False and site in g["inputs"]["why_not"]
