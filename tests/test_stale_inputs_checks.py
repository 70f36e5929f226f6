"""The input checks' bookkeeping (capture/record/inputs.py) on a stand-in allocator: a graph's external
block, replays through the wrapped ``CUDAGraph.replay``, frees and allocations in the allocator's
history, checks at the sampled replays. What the checks report is compared with the timeline itself
(which replay was the first after the free, replayed by brute force), for any order of events."""
from __future__ import annotations

import types
from typing import Any

from hypothesis import given, settings, strategies as st

from cgtool.capture.record import inputs as mod

A, SIZE = 0x7F00_0000_0000, 32768


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def tick(self) -> float:
        self.t += 1.0
        return self.t


class FakeAllocator:
    """``torch.cuda.memory._snapshot()``: the events so far (time-ordered) and the segments now."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.snapshots = 0

    def _snapshot(self) -> dict[str, Any]:
        self.snapshots += 1
        return {"segments": [], "device_traces": [list(self.events)]}


def fake_graph_class() -> type:
    class CUDAGraph:
        replayed = 0

        def raw_cuda_graph_exec(self) -> int:
            return 0xE0

        def replay(self) -> None:
            type(self).replayed += 1

    return CUDAGraph


def setup(every: int, clock: Clock, monkeypatch: Any) -> tuple[mod.InputWatch, FakeAllocator, Any, mod.Block]:
    monkeypatch.setattr(mod, "_now_us", lambda: clock.t)
    monkeypatch.setattr(mod, "CHECK_SHARE", float("inf"))  # no pause after a check (tested below)
    alloc = FakeAllocator()
    watch = mod.InputWatch(every)
    watch.torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=alloc))
    CG = fake_graph_class()
    watch._wrap_replay(CG)
    blk = mod.Block(A, SIZE, SIZE, {"file": "prog.py", "line": 3, "function": "f", "code": "x = make()", "stack": []},
                    {"name": "x", "shape": [4, 4096], "dtype": "fp16"}, 1)
    w = mod.Watched(0, 0xE0, 0, [blk], 0, 0, {}, 0.0, clock.t)
    w.checkpoints.append((clock.t, 0, 0))
    watch.by_exec[0xE0], watch.graphs[0] = w, w
    watch.blocks[(0, A)] = [(w, blk)]
    return watch, alloc, CG(), blk


STEPS = st.lists(st.sampled_from(["replay", "free", "reuse", "other"]), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(steps=STEPS, every=st.integers(1, 7))
def test_reported_replays_bound_the_true_ones(steps: list[str], every: int) -> None:
    import pytest

    mp = pytest.MonkeyPatch()
    try:
        clock = Clock()
        watch, alloc, g, blk = setup(every, clock, mp)
        replay_times: list[float] = []
        freed_at = reused_at = None
        for s in steps:
            t = clock.tick()
            if s == "replay":
                g.replay()
                replay_times.append(t)
            elif s == "free" and freed_at is None:
                alloc.events.append({"action": "free_requested", "addr": A, "size": SIZE, "time_us": t,
                                     "frames": [{"filename": "prog.py", "line": 9, "name": "f"}]})
                freed_at = t
            elif s == "reuse" and freed_at is not None and reused_at is None:
                alloc.events.append({"action": "alloc", "addr": A + 512, "size": 1024, "time_us": t,
                                     "frames": [{"filename": "prog.py", "line": 11, "name": "f"}]})
                reused_at = t
            else:  # an allocation elsewhere: never the block's
                alloc.events.append({"action": "alloc", "addr": A + 10 * SIZE, "size": 64, "time_us": t, "frames": []})
        clock.tick()
        watch.finish()
        found = watch.entry(0)["findings"]
        # brute force, from the timeline: the replays that ran after the free
        after = [i + 1 for i, rt in enumerate(replay_times) if freed_at is not None and rt > freed_at]
        if not after:
            assert found == []
            return
        assert len(found) == 1
        f = found[0]
        true_first = after[0]
        assert f["last_replay"] == len(replay_times)
        assert f["may_start_at"] <= true_first <= f["first_replay"]
        if f["first_replay_exact"]:
            assert f["first_replay"] == true_first
        assert f["kind"] == ("reused" if reused_at is not None else "freed")
        assert f["freed_at"]["line"] == 9
        if reused_at is not None:
            assert f["reused_by"]["allocated_at"]["line"] == 11 and f["reused_by"]["bytes"] == 1024
    finally:
        mp.undo()


def test_checks_run_at_first_two_replays_and_every_nth(monkeypatch: Any) -> None:
    clock = Clock()
    watch, alloc, g, _ = setup(5, clock, monkeypatch)
    for _ in range(12):
        clock.tick()
        g.replay()
    # the graph's replays 1 and 2, then the process's replays 5 and 10
    assert alloc.snapshots == 4
    assert type(g).replayed == 12


def test_free_after_the_last_replay_is_no_finding(monkeypatch: Any) -> None:
    clock = Clock()
    watch, alloc, g, _ = setup(1, clock, monkeypatch)
    for _ in range(3):
        clock.tick()
        g.replay()
    alloc.events.append({"action": "free_requested", "addr": A, "size": SIZE, "time_us": clock.tick(), "frames": []})
    clock.tick()
    watch.finish()
    assert watch.entry(0)["findings"] == []


def test_a_destroyed_exec_is_looked_up_again(monkeypatch: Any) -> None:
    clock = Clock()
    watch, alloc, g, _ = setup(1, clock, monkeypatch)
    g.replay()
    watch.on_exec_destroyed(0xE0)
    g.replay()  # no state for the handle now: counted as not matched, not as the old graph's
    assert watch.graphs[0].replays == 1
    assert watch.unmatched_replays == 1


def _kept_alive_run(monkeypatch: Any, write_between: bool) -> list[dict[str, Any]]:
    """40 replays; before each, the program allocates a new batch at the line that allocated the
    graph's input (the rebind keeps the old one alive), and copies it into the input or not."""
    clock = Clock()
    watch, alloc, g, blk = setup(100, clock, monkeypatch)
    blk.site_key = ("prog.py", 3)
    watch._by_size[(0, SIZE)] = [(watch.graphs[0], blk)]
    memory = {"x": 0}  # the input's contents, as a version number
    monkeypatch.setattr(watch, "_hash", lambda b: memory["x"])
    for step in range(40):
        alloc.events.append({"action": "alloc", "addr": A + (step + 2) * SIZE, "size": SIZE, "time_us": clock.tick(),
                             "frames": [{"filename": "prog.py", "line": 3, "name": "make"}]})
        if write_between:
            memory["x"] += 1  # x.copy_(batch)
        clock.tick()
        g.replay()
    clock.tick()
    watch.finish()
    return list(watch.entry(0)["findings"])


def test_kept_alive_input_never_written_is_stale(monkeypatch: Any) -> None:
    [f] = _kept_alive_run(monkeypatch, write_between=False)
    assert f["kind"] == "stale" and f["reallocs"] == 40
    assert (f["first_replay"], f["first_replay_exact"]) == (1, True)  # the first batch came before replay 1
    assert f["unchanged_between"][:2] == [[1, 2], [2, 3]]  # the sampled replays: the graph's first two
    assert f["last_replay"] == 40


def test_input_updated_in_place_is_not_stale(monkeypatch: Any) -> None:
    assert _kept_alive_run(monkeypatch, write_between=True) == []


def test_periodic_checks_pause_after_a_slow_one(monkeypatch: Any) -> None:
    clock = Clock()
    watch, alloc, g, _ = setup(1, clock, monkeypatch)
    monkeypatch.setattr(mod, "CHECK_SHARE", 1e-9)  # any check's pause outlasts this test
    for _ in range(10):
        g.replay()
    assert alloc.snapshots == 2  # the graph's first two replays only: the rest fell in the pause
