"""The input checks' bookkeeping (capture/record/inputs.py) on a stand-in allocator: a graph's external
block, replays through the wrapped ``CUDAGraph.replay``, frees and allocations in the allocator's
history, checks at the sampled replays. What the checks report is compared with the timeline itself
(which replay was the first after the free, replayed by brute force), for any order of events."""
from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cgtool.capture import snapshot as snap
from cgtool.capture.record import inputs as mod

A, SIZE = 0x7F00_0000_0000, 32768


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def tick(self) -> float:
        self.t += 1.0
        return self.t


class _Ring(list):  # type: ignore[type-arg]
    """The allocator's history ring: what the test appends is also an event of the allocator's life."""

    def __init__(self, life: list[dict[str, Any]]) -> None:
        super().__init__()
        self.life = life

    def append(self, e: dict[str, Any]) -> None:
        super().append(e)
        self.life.append(e)


class FakeAllocator:
    """``torch.cuda.memory``: ``_snapshot()`` gives the ring's events (time-ordered) and the segments
    now, as torch's caching allocator has them (the watched block A active from the start; a free
    makes a block inactive, an allocation active); ``_record_memory_history(clear_history=True)``
    empties the ring, not the allocator's state."""

    def __init__(self) -> None:
        self.life: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = _Ring(self.life)
        self.snapshots = 0
        self.clears = 0

    def _record_memory_history(self, **k: Any) -> None:
        if k.get("clear_history"):
            self.events.clear()
            self.clears += 1

    def _snapshot(self) -> dict[str, Any]:
        self.snapshots += 1
        active = {A: SIZE}
        for e in self.life:
            if e["action"] in ("free_requested", "free_completed"):
                active.pop(e["addr"], None)
            elif e["action"] == "alloc":
                active[e["addr"]] = e["size"]
        segments = [{"device": 0, "address": a, "total_size": n, "segment_pool_id": (0, 0),
                     "blocks": [{"size": n, "state": "active_allocated"}]} for a, n in sorted(active.items())]
        return {"segments": segments, "device_traces": [list(self.events)]}


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
    watch.history = "on"  # as after torch's CUDA initialisation: the checks' own history, emptied after each read
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
    mp = pytest.MonkeyPatch()
    try:
        clock = Clock()
        watch, alloc, g, _ = setup(every, clock, mp)
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
        assert alloc.clears == alloc.snapshots  # each read emptied the ring: what follows saw only new events
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
    _, alloc, g, _ = setup(5, clock, monkeypatch)
    for _ in range(12):
        clock.tick()
        g.replay()
    # the graph's replays 1 and 2, then the process's replays 5 and 10
    assert alloc.snapshots == 4
    assert type(g).replayed == 12


def _free_between_replays(monkeypatch: Any, alloc_patch: Any = None, in_ring: bool = True) -> tuple[Any, Any, list[int]]:
    """Replays 1-5 with checks before each (every = 1), other allocations between them, and the
    graph's input freed between replays 3 and 4 (an event of the ring, or only of the allocator's
    state: a free that came between a snapshot and the ring's clear). The ring's length at each
    snapshot is kept."""
    clock = Clock()
    watch, alloc, g, _ = setup(1, clock, monkeypatch)
    if alloc_patch is not None:
        alloc_patch(alloc)
    ring_at_snapshot: list[int] = []
    real = alloc._snapshot

    def snapshot() -> dict[str, Any]:
        out = real()
        ring_at_snapshot.append(len(out["device_traces"][0]))
        return out

    monkeypatch.setattr(alloc, "_snapshot", snapshot)
    for k in range(5):
        for _ in range(2):
            alloc.events.append({"action": "alloc", "addr": A + 10 * SIZE, "size": 64, "time_us": clock.tick(), "frames": []})
        if k == 3:
            free = {"action": "free_requested", "addr": A, "size": SIZE, "time_us": clock.tick(),
                    "frames": [{"filename": "prog.py", "line": 9, "name": "f"}]}
            (alloc.events if in_ring else alloc.life).append(free)
        clock.tick()
        g.replay()
    clock.tick()
    watch.finish()
    return watch, alloc, ring_at_snapshot


def test_the_history_ring_is_emptied_after_each_read(monkeypatch: Any) -> None:
    """Each check reads the ring, then empties it: a snapshot holds only the events since the last
    one (2 allocations a replay, 3 with the free), and the free is found with its line, its first
    replay exact."""
    watch, alloc, ring = _free_between_replays(monkeypatch)
    assert watch.ring_cleared is True and alloc.clears == alloc.snapshots == len(ring) == 6
    assert ring == [2, 2, 2, 3, 2, 0]
    [f] = watch.entry(0)["findings"]
    assert (f["kind"], f["freed_at"]["line"], f["first_replay"], f["first_replay_exact"]) == ("freed", 9, 4, True)


def test_a_free_missing_from_the_ring_is_found_from_the_allocators_state(monkeypatch: Any) -> None:
    """A free another thread made between a snapshot and the ring's clear is in no snapshot's events:
    the block no longer active in the allocator's segments is found freed at the next check, without
    the line that freed it."""
    watch, _, ring = _free_between_replays(monkeypatch, in_ring=False)
    assert ring == [2, 2, 2, 2, 2, 0]
    [f] = watch.entry(0)["findings"]
    assert (f["kind"], f["freed_at"], f["first_replay"]) == ("freed", None, 4)


def test_a_torch_without_clear_history_reads_the_whole_ring(monkeypatch: Any) -> None:
    """Where ``_record_memory_history`` has no ``clear_history`` (TypeError), the ring is read whole
    each time (events already read are skipped by their time) and the findings are the same."""
    def no_clear(alloc: Any) -> None:
        def record(*, enabled: Any = "all", context: Any = "all", stacks: str = "all", max_entries: int = 0) -> None:
            pass

        alloc._record_memory_history = record

    watch, _, ring = _free_between_replays(monkeypatch, no_clear)
    assert isinstance(watch.ring_cleared, str) and "clear_history" in watch.ring_cleared
    assert ring == [2, 4, 6, 9, 11, 11]
    [f] = watch.entry(0)["findings"]
    assert (f["kind"], f["freed_at"]["line"], f["first_replay"], f["first_replay_exact"]) == ("freed", 9, 4, True)


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
    watch, _, g, _ = setup(1, clock, monkeypatch)
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
    _, alloc, g, _ = setup(1, clock, monkeypatch)
    monkeypatch.setattr(mod, "CHECK_SHARE", 1e-9)  # any check's pause outlasts this test
    for _ in range(10):
        g.replay()
    assert alloc.snapshots == 2  # the graph's first two replays only: the rest fell in the pause


# ------------------------------------------------------------------ the pointer scan, on host memory
def test_pointer_scan_reads_every_word_of_each_parameter(monkeypatch: Any) -> None:
    """Two kernel nodes whose parameters live in host buffers (as the driver's do): a pointer, an
    int, and a struct holding two pointers; a memset node. The scan finds exactly the words that
    fall in the range, by node (brute force over the same bytes)."""
    import ctypes

    from cgtool.capture import _fastcuda, graphread

    lo, hi = 0x7F00_0000_0000, 0x7F00_1000_0000
    p0, p1, p2 = lo + 0x100, lo + 0x2000, lo + 0x30000
    a = ctypes.c_uint64(p0)
    b = ctypes.c_uint32(7)
    s = (ctypes.c_uint64 * 3)(p1, 12345, p2)  # a struct: {ptr, int64, ptr}
    outside = ctypes.c_uint64(0x1234)
    args0 = (ctypes.c_void_p * 3)(ctypes.addressof(a), ctypes.addressof(b), ctypes.addressof(s))
    args1 = (ctypes.c_void_p * 1)(ctypes.addressof(outside))
    params = (_fastcuda.KernelParamsV2 * 3)()
    params[0].func, params[0].kernelParams = 0xF0, ctypes.addressof(args0)
    params[1].func, params[1].kernelParams = 0xF1, ctypes.addressof(args1)
    layouts = {0xF0: [(0, 8), (8, 4), (16, 24)], 0xF1: [(0, 8)]}

    class Drv:
        info_s = 0.0

        def params_of(self, func: int, kernel: bool = False) -> Any:
            return layouts[func]

        def memset(self, node: int, out: int) -> int:
            ctypes.c_uint64.from_address(out).value = p2 + 64  # dst
            return 0

    monkeypatch.setattr(mod, "_driver", lambda: Drv())
    monkeypatch.setattr(graphread, "_NODE_TYPE_NAMES", {3: "memset"})
    raw = graphread.QuickRead(c=([0xA, 0xB, 0xC], b"", b"", params, [2], {}, b""), exec_id=1, types={2: 3}, t0=0.0)
    found, stats = mod.graph_pointers(raw, lo, hi)
    assert sorted(found) == [(0, p0), (0, p1), (0, p2), (2, p2 + 64)]
    assert stats["kernels"] == 2 and stats["copies"] == 1 and stats["kernels_unread"] == 0 and stats["complete"]
    # out of time before the first kernel: no kernel read, and the scan says it is incomplete
    monkeypatch.setattr(mod, "SCAN_BUDGET_S", -1.0)
    found, stats = mod.graph_pointers(raw, lo, hi)
    assert [n for n, _ in found if n in (0, 1)] == [] and stats["complete"] == 0 and stats["stopped_at_node"] == 0


def test_parameter_layout_stops_where_the_driver_stops_describing() -> None:
    """cuFuncGetParamInfo stand-in: three parameters, then (depending on the driver) an error, a zero
    size or an offset going back; the layout is the three whatever comes after."""
    import ctypes

    for after in ("error", "zero", "back"):
        real = [(0, 8), (8, 8), (16, 4)]

        def info(func: int, i: int, off: Any, size: Any, _after: str = after,
                 _real: list[tuple[int, int]] = real) -> int:
            if i < len(_real):
                off._obj.value, size._obj.value = _real[i]
                return 0
            if _after == "error":
                return 1
            off._obj.value, size._obj.value = (24, 0) if _after == "zero" else (0, 8)
            return 0

        drv = object.__new__(mod._Driver)
        drv.param_info, drv.kernel_info, drv.sizes, drv.info_s = info, None, {}, 0.0
        assert drv.params_of(0xF0) == real, after
    assert ctypes  # the stand-in writes through byref() as the driver writes through pointers


def test_a_slow_first_snapshot_is_timed_again_once(monkeypatch: Any) -> None:
    """A scan whose allocator snapshot is slower than SLOW_SNAPSHOT_S takes a second one right away,
    once a process: its time tells a first-call cost from a cost of the allocator's state."""
    alloc = FakeAllocator()
    delays = [0.02, 0.0, 0.02, 0.02]  # seconds each successive _snapshot() call takes
    real = alloc._snapshot

    def snapshot() -> dict[str, Any]:
        time.sleep(delays[alloc.snapshots])
        out = real()
        out["segments"] = [{"device": 0, "address": A, "total_size": 4 * SIZE, "segment_pool_id": (0, 0),
                            "blocks": [{"size": 4 * SIZE, "state": "inactive"}]}]
        return out

    monkeypatch.setattr(alloc, "_snapshot", snapshot)
    monkeypatch.setattr(mod, "SLOW_SNAPSHOT_S", 0.01)
    monkeypatch.setattr(mod, "graph_pointers", lambda raw, lo, hi: ([], {"kernels": 0}))
    watch = mod.InputWatch(100)
    watch.torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=alloc))
    watch.history = "on"
    watch.on_graph(0, 0xE0, None, None, 0, None)
    watch.on_graph(1, 0xE1, None, None, 0, None)
    first, second = watch.graphs[0].scan, watch.graphs[1].scan
    assert alloc.snapshots == 3  # the slow first one, its retiming, the second graph's (slow, not retimed)
    assert first["first_snapshot"] is True and second["first_snapshot"] is False
    assert first["phases_us"]["snapshot"] >= 20_000 > first["phases_us"]["snapshot_again"]
    assert "snapshot_again" not in second["phases_us"] and second["phases_us"]["snapshot"] >= 20_000


def _fake_torch(monkeypatch: Any, initialized: bool) -> tuple[Any, list[dict[str, Any]]]:
    """``torch`` and ``torch.cuda`` in sys.modules: the calls to the allocator's history are kept."""
    history: list[dict[str, Any]] = []
    cuda = types.ModuleType("torch.cuda")
    cuda.is_initialized = lambda: initialized  # type: ignore[attr-defined]
    cuda._lazy_init = lambda: None  # type: ignore[attr-defined]
    cuda.CUDAGraph = fake_graph_class()  # type: ignore[attr-defined]
    cuda.memory = types.SimpleNamespace(_record_memory_history=lambda **k: history.append(k))  # type: ignore[attr-defined]
    torch = types.ModuleType("torch")
    torch.cuda = cuda  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.cuda", cuda)
    return cuda, history


@pytest.mark.parametrize("initialized", [False, True])
def test_checks_off_touch_nothing_of_torch(monkeypatch: Any, initialized: bool) -> None:
    """--check-inputs 0: no allocator history, no wrapped _lazy_init or replay; the same fake torch is
    hooked with the checks on at the default N (so the test can tell)."""
    from cgtool.capture.record.options import CLI_BY_NAME, RecordOptions

    assert RecordOptions().check_inputs == 100
    assert "On by default at N = 100" in CLI_BY_NAME["--check-inputs"].help
    cuda, history = _fake_torch(monkeypatch, initialized)
    lazy, replay = cuda._lazy_init, cuda.CUDAGraph.replay
    mod.InputWatch(0).install()
    assert (cuda._lazy_init, cuda.CUDAGraph.replay, history) == (lazy, replay, [])
    mod.InputWatch(RecordOptions().check_inputs).install()
    assert cuda.CUDAGraph.replay is not replay
    if initialized:
        assert history and history[0]["stacks"] == "python"
    else:
        assert cuda._lazy_init is not lazy and history == []
        cuda._lazy_init()
        assert history and cuda._lazy_init is lazy


def test_program_history_before_cuda_keeps_its_settings(monkeypatch: Any) -> None:
    """The program turns torch's allocator history on itself before CUDA starts: its settings stay
    (the checks do not replace its ring), and the checks say they are off in that process and why."""
    cuda, history = _fake_torch(monkeypatch, initialized=False)
    watch = mod.InputWatch(100)
    watch.install()
    line = sys._getframe().f_lineno + 1
    cuda.memory._record_memory_history(enabled="all", max_entries=5)
    cuda._lazy_init()
    assert history == [{"enabled": "all", "max_entries": 5}]
    assert watch.history is not None and watch.history != "on"
    assert f"test_stale_inputs_checks.py:{line}" in watch.history and "max_entries=5" in watch.history
    assert watch.entry(0) == {"checked": False, "why_not": watch.history}


def _history_switched_off(monkeypatch: Any, free_before_call: bool) -> tuple[mod.InputWatch, int]:
    """Replays 1-3, the graph's input freed before or after the program turns the allocator history
    off itself (``enabled=None``: torch records no event after it), replays 4-5."""
    clock = Clock()
    watch, alloc, g, _ = setup(100, clock, monkeypatch)
    watch.history = "on"
    recording = {"on": True}

    def record(**k: Any) -> None:
        recording["on"] = k.get("enabled") is not None

    memory = types.SimpleNamespace(_record_memory_history=record)
    watch._wrap_history(memory)

    def free() -> None:
        if recording["on"]:
            alloc.events.append({"action": "free_requested", "addr": A, "size": SIZE, "time_us": clock.tick(),
                                 "frames": [{"filename": "prog.py", "line": 9, "name": "f"}]})

    for k in range(3):
        if k == 2 and free_before_call:
            free()
        clock.tick()
        g.replay()
    clock.tick()
    line = sys._getframe().f_lineno + 1
    memory._record_memory_history(enabled=None)
    if not free_before_call:
        free()
    for _ in range(2):
        clock.tick()
        g.replay()
    clock.tick()
    watch.finish()
    return watch, line


@pytest.mark.parametrize("free_before_call", [True, False])
def test_program_history_off_stops_the_checks(monkeypatch: Any, free_before_call: bool) -> None:
    """The program switches torch's allocator history off after the checks turned it on: the frees
    before its call are found (the events are read at the call), and the replays after it are said
    unchecked, not passed as clean."""
    watch, line = _history_switched_off(monkeypatch, free_before_call)
    e = watch.entry(0)
    assert e["checked"] is False and e["replays_checked"] == 3
    assert "2 of them" in e["why_not"] and f"test_stale_inputs_checks.py:{line}" in e["why_not"]
    assert "enabled=None" in (watch.process_entry()["history_changed"] or "")
    if free_before_call:
        [f] = e["findings"]
        assert (f["kind"], f["freed_at"]["line"], f["first_replay"], f["first_replay_exact"]) == ("freed", 9, 3, True)
    else:
        assert e["findings"] == []


def _lazy_torch(monkeypatch: Any, imported: list[str]) -> tuple[Any, list[bool]]:
    """A ``torch`` whose module ``__getattr__`` imports ``_inductor`` lazily (torch/__init__.py's
    ``_lazy_modules``: the import is noted, and a module with ``codecache`` comes back, kept as torch's
    attribute) and whose
    ``_snapshot()`` asks what torch's symbolizer asks (combined_traceback.cpp, appendSymbolized):
    ``hasattr(torch, "_inductor")``, then ``hasattr(torch._inductor, "codecache")``."""
    torch = types.ModuleType("torch")
    asked: list[bool] = []

    def lazy(name: str) -> Any:
        if name == "_inductor":
            imported.append(name)
            real = types.ModuleType("torch._inductor")
            real.codecache = "the real codecache"  # type: ignore[attr-defined]
            vars(torch)[name] = real  # as an import sets its parent package's attribute
            return real
        raise AttributeError(name)

    def snapshot() -> dict[str, Any]:
        asked.append(hasattr(torch, "_inductor") and hasattr(torch._inductor, "codecache"))
        return {"segments": [], "device_traces": [[]]}

    torch.__getattr__ = lazy  # type: ignore[attr-defined]
    torch.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(_snapshot=snapshot))  # type: ignore[attr-defined]
    monkeypatch.delitem(sys.modules, "torch._inductor", raising=False)
    return torch, asked


def test_snapshot_does_not_import_inductor(monkeypatch: Any) -> None:
    """The snapshot's symbolizer sees no ``codecache`` and nothing is imported; afterwards torch is as
    before (its lazy attribute still imports); with Inductor loaded, the symbolizer sees the real one."""
    imported: list[str] = []
    torch, asked = _lazy_torch(monkeypatch, imported)
    assert snap.allocator_snapshot(torch) == {"segments": [], "device_traces": [[]]}
    assert (asked, imported) == ([False], [])
    assert "_inductor" not in vars(torch)
    assert torch._inductor.codecache == "the real codecache" and imported == ["_inductor"]
    # the unguarded call is what imported it: the same fake, asked directly
    imported.clear()
    torch2, asked2 = _lazy_torch(monkeypatch, imported)
    torch2.cuda.memory._snapshot()
    assert (asked2, imported) == ([True], ["_inductor"])
    # loaded already (an attribute of torch): used as it is
    torch3, asked3 = _lazy_torch(monkeypatch, imported)
    torch3._inductor = types.SimpleNamespace(codecache="loaded")
    snap.allocator_snapshot(torch3)
    assert asked3 == [True] and torch3._inductor.codecache == "loaded"


def test_inductor_placeholder_serves_other_threads(monkeypatch: Any) -> None:
    """Another thread meeting the placeholder during a snapshot gets the real module's attributes; the
    snapshotting thread gets none; a real import meanwhile is kept after the snapshot."""
    real = types.ModuleType("torch._inductor")
    real.config = "real config"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch._inductor", real)
    torch = types.ModuleType("torch")
    stand_in = snap._InductorPlaceholder(torch)
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(getattr(stand_in, "config", None)))
    t.start()
    t.join()
    assert got == ["real config"] and not hasattr(stand_in, "config")

    monkeypatch.delitem(sys.modules, "torch._inductor")
    torch2 = types.ModuleType("torch")

    def snapshot() -> dict[str, Any]:  # another thread imports torch._inductor while the snapshot runs
        torch2._inductor = real  # type: ignore[attr-defined]
        return {}

    torch2.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(_snapshot=snapshot))  # type: ignore[attr-defined]
    snap.allocator_snapshot(torch2)
    assert vars(torch2)["_inductor"] is real


def test_ledger_snapshot_does_not_import_inductor(monkeypatch: Any) -> None:
    """The memory ledger at exit reads the segments through the same guarded snapshot (with the
    history on, torch.cuda.memory_snapshot() would symbolize and import Inductor)."""
    from cgtool.capture.record.ledger import ledger

    imported: list[str] = []
    torch, asked = _lazy_torch(monkeypatch, imported)
    seg = {"segment_pool_id": (1, 2), "total_size": 4096}
    torch.cuda.memory._snapshot = lambda: (asked.append(hasattr(torch, "_inductor")  # type: ignore[attr-defined]
                                                        and hasattr(torch._inductor, "codecache"))
                                           or {"segments": [seg], "device_traces": [[]]})
    torch.cuda.memory_snapshot = lambda: pytest.fail("the unguarded snapshot")  # type: ignore[attr-defined]
    torch.cuda.is_initialized = lambda: True  # type: ignore[attr-defined]
    torch.cuda.max_memory_reserved = lambda: 8192  # type: ignore[attr-defined]
    torch.cuda.memory_reserved = lambda: 4096  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    doc = ledger([])
    assert doc is not None and doc.error is None and doc.bytes_held_by_graph_pools == 4096
    assert (asked, imported) == ([False], [])
