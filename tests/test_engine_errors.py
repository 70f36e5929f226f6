"""The engine's state machine and error mapping without a GPU: a fake torch graph underneath.

Expected messages are PyTorch's (the regexes are those of PyTorch's own tests in test/test_cuda.py),
so code that catches RuntimeError/TypeError or matches torch's text keeps working on the engine.
"""

import contextlib
import gc
import json
import pickle
import re
import weakref
from types import SimpleNamespace

import pytest

from cgtool.capture import graph as eng
from cgtool.errors import (
    CaptureError,
    CgtoolError,
    ExitCode,
    GraphCaptureError,
    GraphTypeError,
    GraphUsageError,
    UsageError,
)


class FakeAllocator:
    """Pool use counts and the pools allocation is routed to, with the checks torch's allocator makes."""

    def __init__(self):
        self.use_count = {}
        self.recording = []  # pool ids allocation is routed to, as torch's captures_underway
        self.freed = []  # pools whose use count reached 0
        self.aborts = []  # (pool, routing) for each MemPool destroyed while allocation was routed

    def incref(self, pool):
        self.use_count[pool] = self.use_count.get(pool, 0) + 1

    def begin(self, device, pool):  # torch._C._cuda_beginAllocateCurrentThreadToPool
        if pool in self.recording:
            raise RuntimeError("beginAllocateToPool: already recording to mempool_id")
        self.incref(pool)
        self.recording.append(pool)

    def end(self, device, pool):  # torch._C._cuda_endAllocateToPool
        if pool not in self.recording:
            raise RuntimeError("endAllocatePool: not currently recording to mempool_id")
        self.recording.remove(pool)

    def release(self, device, pool):  # torch._C._cuda_releasePool
        self.use_count[pool] -= 1
        if self.use_count[pool] == 0:
            self.freed.append(pool)


class FakeTorchGraph:
    """Records calls; stands in for torch.cuda.CUDAGraph(keep_graph=True) (its pool use counts too)."""

    allocator = None  # set by fake_torch: the allocator whose pools capture_begin/reset count

    def __init__(self, keep_graph=True, fail_end=False, fail_replay=False):
        self.calls = []
        self.fail_end = fail_end
        self.fail_replay = fail_replay
        self._pool = None

    def capture_begin(self, *a, **k):
        self.calls.append(("capture_begin", a, k))
        self._pool = a[0]
        if self.allocator is not None:
            self.allocator.begin(0, self._pool)  # torch's capture_begin: beginAllocateToPool

    def capture_end(self):
        self.calls.append(("capture_end",))
        if self.fail_end:  # torch 2.11 raises from cudaStreamEndCapture, before endAllocateToPool
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
        if self.allocator is not None:
            self.allocator.end(0, self._pool)

    def instantiate(self):
        self.calls.append(("instantiate",))

    def replay(self):
        self.calls.append(("replay",))
        if self.fail_replay:
            raise RuntimeError("launch failed")

    def reset(self):
        self.calls.append(("reset",))
        if self.allocator is not None and self._pool is not None and not self.fail_end:
            self.allocator.release(0, self._pool)  # torch's reset releases the pool it captured to
        self._pool = None

    def pool(self):
        return (0, 7)

    def raw_cuda_graph(self):
        return 111

    def raw_cuda_graph_exec(self):
        return 222


class FakeMemPool:
    id = (0, 99)


class FakeStream:
    def __init__(self, name, handle):
        self.name, self.cuda_stream, self.device_index = name, handle, 0

    def __eq__(self, other):
        return isinstance(other, FakeStream) and other.name == self.name

    __hash__ = None


def fake_torch(stream="side", version="2.11.0", released=None, allocator=None, capturing=lambda: bool(eng._CAPTURING)):
    released = [] if released is None else released
    streams = {"side": FakeStream("side", 11), "default": FakeStream("default", 0)}
    cur = {"stream": streams[stream]}
    c = SimpleNamespace(_cuda_releasePool=lambda dev, pool: released.append((dev, pool)))
    if allocator is not None:
        c = SimpleNamespace(
            _cuda_releasePool=allocator.release,
            _cuda_beginAllocateCurrentThreadToPool=allocator.begin,
            _cuda_endAllocateToPool=allocator.end,
        )
    torch = SimpleNamespace(
        __version__=version,
        cuda=SimpleNamespace(
            current_stream=lambda: cur["stream"],
            default_stream=lambda: streams["default"],
            current_device=lambda: 0,
            _get_device_index=lambda d: int(d),
            is_current_stream_capturing=capturing,
            MemPool=FakeMemPool,
            stream=lambda s: _enter_stream(cur, s),
        ),
        _C=c,
    )
    torch.set_stream = lambda name: cur.update(stream=streams.get(name) or FakeStream(name, 1000 + len(name)))
    return torch


@contextlib.contextmanager
def _enter_stream(cur, stream):
    prev, cur["stream"] = cur["stream"], stream
    try:
        yield
    finally:
        cur["stream"] = prev


@pytest.fixture(autouse=True)
def fake_originals(monkeypatch):
    monkeypatch.setattr(eng, "_ORIGINALS", {"CUDAGraph": FakeTorchGraph, "graph_pool_handle": lambda: (0, 1)})
    yield
    # A failed capture leaves the engine's finalizer on the (fake) MemPool class until a pool dies:
    # each test starts with torch's class and clean routing, as a fresh process does.
    eng._unguard_mempool_class()
    eng._ROUTE_SUSPECTS.clear()
    eng._ROUTE_STATE.update(unsure=False, torch=None)


def make(keep_graph=False, torch=None, **fake):
    g = eng.Graph.__new__(eng.Graph)
    g._setup(torch or fake_torch(), FakeTorchGraph(**fake), keep_graph)
    return g


def captured(keep_graph=False, **kw):
    g = make(keep_graph, **kw)
    g.capture_begin()
    g.capture_end()
    return g


# ---------------------------------------------------------------------------------------- classes
@pytest.mark.parametrize(
    "cls, builtin, base, code",
    [
        (GraphUsageError, RuntimeError, UsageError, ExitCode.USAGE),
        (GraphCaptureError, RuntimeError, CaptureError, ExitCode.CAPTURE_FAILED),
        (GraphTypeError, TypeError, UsageError, ExitCode.USAGE),
    ],
)
def test_engine_errors_are_both_cgtool_and_builtin(cls, builtin, base, code):
    err = cls("msg")
    assert isinstance(err, builtin) and isinstance(err, base) and isinstance(err, CgtoolError)
    assert err.exit_code == code and str(err) == "msg" and err.message == "msg"
    with pytest.raises(builtin):
        raise err


# ---------------------------------------------------------------------------------------- messages
def test_raw_exec_before_instantiate_is_torch_runtime_error():
    g = captured(keep_graph=True)
    with pytest.raises(RuntimeError, match=r"You cannot access the raw (cuda|hip)GraphExec_t instance until instantiate\(\) has been called") as e:
        g.raw_cuda_graph_exec()
    assert isinstance(e.value, UsageError)
    g.instantiate()
    assert g.raw_cuda_graph_exec() == 222


def test_keep_graph_false_instantiate_and_raw_graph_are_torch_runtime_errors():
    g = captured(keep_graph=False)
    assert g._g.calls.count(("instantiate",)) == 1  # capture_end instantiated it
    with pytest.raises(RuntimeError, match=r"instantiate\(\) is intended to be called by the user only when keep_graph=true"):
        g.instantiate()
    with pytest.raises(RuntimeError, match=r"No (cuda|hip)Graph_t is available") as e:  # upstream main
        g.raw_cuda_graph()
    # torch 2.11's wording, which older copies of PyTorch's tests match, follows; cgtool's advice last
    assert re.search(r"You cannot access the raw (cuda|hip)Graph_t instance unless CUDAGraph was "
                     r"initialized with keep_graph=true", str(e.value))
    assert str(e.value).startswith("No cudaGraph_t is available")
    assert str(e.value).rstrip().endswith("to inspect or dump it after capture.")
    with pytest.raises(RuntimeError):  # PyTorch's TestGetGraphData.test_keep_graph_false_raises
        g.get_graph_data()


@pytest.mark.parametrize("when", ["before capture", "after capture, keep_graph=False"])
def test_debug_dump_without_template_is_the_no_graph_error(when, tmp_path):
    # PyTorch's test_graph_debugdump: RuntimeError "No (cuda|hip)Graph_t is available", whether or
    # not cuda.bindings is installed (the template is checked first).
    g = make(keep_graph=False) if when == "before capture" else captured(keep_graph=False)
    with pytest.raises(RuntimeError, match=r"No (cuda|hip)Graph_t is available") as e:
        g.debug_dump(str(tmp_path / "g.dot"))
    assert ("Nothing has been captured yet" in str(e.value)) == (when == "before capture")
    assert not (tmp_path / "g.dot").exists()


def test_instantiate_between_pre_and_post_is_allowed_with_keep_graph_false():
    g = make(keep_graph=False)
    g.capture_begin()
    g.capture_end_pre()
    g.instantiate()
    g.capture_end_post()
    assert g._g.calls.count(("instantiate",)) == 1


def test_default_stream_capture_is_torch_message():
    g = make(torch=fake_torch(stream="default"))
    with pytest.raises(RuntimeError, match=r"CUDA graphs must be captured on a non-default stream\.") as e:
        g.capture_begin()
    assert e.value.exit_code == ExitCode.CAPTURE_FAILED


def test_second_capture_needs_reset():
    g = captured(keep_graph=True)
    with pytest.raises(RuntimeError, match="already owns a captured graph"):
        g.capture_begin()
    g.reset()
    g.capture_begin()  # a fresh torch graph underneath
    assert g._g.calls[0][0] == "capture_begin"


def test_liveness_refused_below_torch_2_8():
    g = make(torch=fake_torch(version="2.7.1"))
    with pytest.raises(RuntimeError, match="torch 2.8 or newer"):
        g.capture_begin(check_input_liveness=True)


# ---------------------------------------------------------------------------------------- pools
def test_mempool_is_passed_by_id_and_kept_alive_until_reset():
    g = make(keep_graph=True)
    mp = FakeMemPool()
    ref = weakref.ref(mp)
    g.capture_begin(pool=mp)
    assert g._g.calls[0] == ("capture_begin", ((0, 99),), {"capture_error_mode": "global"})
    del mp
    gc.collect()
    assert ref() is not None  # the graph keeps it, as torch's _retain_pool does
    assert (0, 99) in g.pools()
    g.capture_end()
    g.reset()
    gc.collect()
    assert ref() is None


def test_failed_capture_ends_allocation_to_its_pool_and_gives_it_back(monkeypatch):
    # torch 2.11's capture_end raises before endAllocateToPool: the engine ends the routing and gives
    # the capture's use of the pool back when the capture fails, once (reset() does not again).
    torch, alloc, _ = torch_with_pools(monkeypatch)
    g = make(torch=torch, fail_end=True)
    failed_torch_graph = g._g
    with pytest.raises(ValueError):
        with _ctx(g):
            assert alloc.recording == [(0, 1)]
            raise ValueError("body failed")
    assert alloc.recording == []  # a later capture into (0, 1) is not refused as "already recording"
    assert alloc.use_count[(0, 1)] == 0 and alloc.freed == [(0, 1)]
    with pytest.raises(RuntimeError, match="reset"):
        g.replay()
    with pytest.raises(RuntimeError, match="without a preceding successful capture.*reset"):
        g.pool()
    g.reset()
    assert alloc.use_count[(0, 1)] == 0 and alloc.freed == [(0, 1)]  # not released twice
    assert g._g is not failed_torch_graph
    assert ("reset",) not in failed_torch_graph.calls  # torch's reset of a failed graph is never called


def test_aborted_valid_capture_is_released_by_torch_not_twice():
    released = []
    g = make(torch=fake_torch(released=released))
    with pytest.raises(ValueError):
        with _ctx(g):
            raise ValueError("body failed")
    g.reset()
    assert released == []  # torch's capture_end succeeded: its own reset() releases the pool


class AllocPool:
    """A torch.cuda.MemPool over FakeAllocator: creating it counts one use, deleting it releases it."""

    def __init__(self, allocator, pool_id):
        self.allocator, self.id = allocator, pool_id
        allocator.incref(pool_id)

    def use_count(self):
        return self.allocator.use_count[self.id]

    def __del__(self):
        self.allocator.release(0, self.id)


def torch_with_pools(monkeypatch):
    """A fake torch whose MemPool, use_mem_pool and CUDAGraph count pool uses like torch 2.11's."""
    alloc = FakeAllocator()
    torch = fake_torch(allocator=alloc)

    @contextlib.contextmanager
    def use_mem_pool(pool, device=None):  # torch 2.11/2.13's: begin, yield, end, release
        alloc.begin(0, pool.id)
        try:
            yield
        finally:
            alloc.end(0, pool.id)
            alloc.release(0, pool.id)

    torch.cuda.MemPool = AllocPool
    torch.cuda.memory = SimpleNamespace(use_mem_pool=use_mem_pool)
    torch.cuda.use_mem_pool = use_mem_pool
    monkeypatch.setattr(FakeTorchGraph, "allocator", alloc)
    return torch, alloc, use_mem_pool


def test_pool_arg_and_nested_use_mem_pool_are_retained_until_reset(monkeypatch):
    # PyTorch's test_graph_mem_pool_arg_and_nested_use_mem_pool (upstream PR #187929), on fakes:
    # the expected counts are those of upstream's design (one use for the MemPool object, one for the
    # graph that retains it), not read from the engine.
    torch, alloc, torch_use_mem_pool = torch_with_pools(monkeypatch)
    default_pool, side_pool = AllocPool(alloc, (0, 1)), AllocPool(alloc, (0, 2))
    g = make(keep_graph=False, torch=torch)
    g.capture_begin(pool=default_pool)
    assert torch.cuda.use_mem_pool is not torch_use_mem_pool  # the engine's stand-in, while capturing
    with torch.cuda.use_mem_pool(side_pool):
        assert alloc.recording[-1] == side_pool.id  # allocation is still routed by torch's own
    g.capture_end()
    assert torch.cuda.use_mem_pool is torch_use_mem_pool and torch.cuda.memory.use_mem_pool is torch_use_mem_pool
    assert set(g.pools()) == {default_pool.id, side_pool.id}
    assert g.pools()[0] == default_pool.id  # the capture pool first, as g.pool()
    assert (default_pool.use_count(), side_pool.use_count()) == (2, 2)
    side_ref = weakref.ref(side_pool)
    del side_pool
    gc.collect()
    assert alloc.use_count[(0, 2)] > 0 and alloc.freed == []  # the graph still holds the side pool
    g.replay()
    assert g._g.calls[-1] == ("replay",)
    g.reset()
    gc.collect()
    assert default_pool.use_count() == 1
    assert side_ref() is None and alloc.freed == [(0, 2)]
    assert alloc.recording == []


def test_pool_entered_twice_is_retained_once_and_torch_restored_after_a_failed_capture(monkeypatch):
    torch, alloc, torch_use_mem_pool = torch_with_pools(monkeypatch)
    side = AllocPool(alloc, (0, 5))
    g = make(keep_graph=True, torch=torch)
    with pytest.raises(ValueError):
        with _ctx(g):
            with torch.cuda.use_mem_pool(side):
                pass
            with torch.cuda.use_mem_pool(side):
                pass
            raise ValueError("body failed")
    assert torch.cuda.use_mem_pool is torch_use_mem_pool  # the capture is over: torch's own again
    assert [tuple(p) for p in g.pools()].count((0, 5)) == 1
    assert side.use_count() == 2
    g.reset()
    assert side.use_count() == 1


def test_a_graph_dropped_without_reset_gives_its_side_pools_back(monkeypatch):
    torch, alloc, _ = torch_with_pools(monkeypatch)
    side = AllocPool(alloc, (0, 8))
    g = make(keep_graph=True, torch=torch)
    g.capture_begin()
    with torch.cuda.use_mem_pool(side):
        pass
    g.capture_end()
    assert side.use_count() == 2
    del g
    gc.collect()
    assert side.use_count() == 1  # the MemPool object's own use, as before the capture


def test_use_mem_pool_outside_any_capture_is_not_retained(monkeypatch):
    torch, alloc, torch_use_mem_pool = torch_with_pools(monkeypatch)
    side = AllocPool(alloc, (0, 6))
    g = make(keep_graph=True, torch=fake_torch(allocator=alloc, capturing=lambda: False))
    g._torch.cuda.memory = torch.cuda.memory
    g._torch.cuda.use_mem_pool = torch_use_mem_pool
    g.capture_begin()
    with g._torch.cuda.use_mem_pool(side):  # the stream is not capturing: nothing to retain
        pass
    g.capture_end()
    assert (0, 6) not in [tuple(p) for p in g.pools()] and side.use_count() == 1


def test_a_mempool_dropped_during_a_capture_is_destroyed_after_it(monkeypatch):
    # torch 2.11's MemPool destructor aborts the process while any capture is underway.
    torch, alloc, _ = torch_with_pools(monkeypatch)
    own_del = AllocPool.__dict__["__del__"]
    g = make(torch=torch)
    g.capture_begin()
    p = AllocPool(alloc, (0, 42))
    ref = weakref.ref(p)
    del p
    gc.collect()
    assert ref() is not None and alloc.freed == []  # kept while the capture is underway
    g.capture_end()
    gc.collect()
    assert ref() is None and alloc.freed == [(0, 42)]  # destroyed after it, by its own __del__
    assert AllocPool.__dict__["__del__"] is own_del  # the class is torch's again
    q = AllocPool(alloc, (0, 43))
    del q
    assert alloc.freed[-1] == (0, 43)  # outside any capture: destroyed at once


class _NativeMemPool:
    """The C++ half of :class:`DtorPool`: its ``__del__`` runs when the pool object is deallocated,
    finalizer or not, as torch 2.11's ``MemPool::~MemPool`` does (a reference cycle aside: gc may
    run a member's finalizer early, so the cycle test counts live pools instead)."""

    def __init__(self, allocator, pool_id):
        self.allocator, self.id = allocator, pool_id

    def __del__(self):
        # torch 2.11: emptyCache(pool) -> synchronize_and_free_events ->
        # TORCH_INTERNAL_ASSERT(captures_underway.empty()), thrown from a destructor: the process aborts
        if self.allocator.recording:
            self.allocator.aborts.append((self.id, list(self.allocator.recording)))
        self.allocator.release(0, self.id)


class DtorPool:
    """torch 2.11's ``torch.cuda.MemPool``: no ``__del__``; its C++ destructor releases the pool and
    aborts the process while any capture routes allocations (recorded in ``allocator.aborts``)."""

    def __init__(self, allocator, pool_id):
        self.id = pool_id
        allocator.incref(pool_id)
        self._native = _NativeMemPool(allocator, pool_id)


def torch_with_dtor_pools(monkeypatch):
    torch, alloc, _ = torch_with_pools(monkeypatch)
    torch.cuda.MemPool = DtorPool
    return torch, alloc


def test_a_mempool_let_go_by_reset_during_another_capture_lives_until_it_ends(monkeypatch):
    torch, alloc = torch_with_dtor_pools(monkeypatch)
    a, b = make(torch=torch), make(torch=torch)
    mp = DtorPool(alloc, (0, 60))
    b.capture_begin(pool=mp)
    b.capture_end()
    a.capture_begin()
    del mp
    b.reset()  # b held the last reference, while a's capture routes allocations
    assert alloc.aborts == [] and alloc.use_count[(0, 60)] == 1 and (0, 60) not in alloc.freed
    a.capture_end()
    assert alloc.aborts == [] and (0, 60) in alloc.freed  # destroyed once no capture is underway
    assert eng._HELD == [] and eng._PARKED == [] and eng._FINALIZED == []


def test_a_mempool_dying_while_a_failed_capture_is_cleaned_up_is_parked(monkeypatch):
    # torch 2.11's capture_end raises and leaves the allocation routed to the pool; until the engine
    # ends that routing, a MemPool whose last reference goes (gc, another thread) must not be destroyed.
    torch, alloc = torch_with_dtor_pools(monkeypatch)
    g = make(torch=torch, fail_end=True)
    box = [DtorPool(alloc, (0, 80))]
    real = eng._end_stream_capture

    def end_stream_capture_and_drop_a_pool(torch_, stream):
        assert alloc.recording == [(0, 1)]  # the failed capture still routes allocations
        box.clear()
        real(torch_, stream)

    monkeypatch.setattr(eng, "_end_stream_capture", end_stream_capture_and_drop_a_pool)
    g.capture_begin()
    with pytest.raises(RuntimeError, match="previous error during capture"):
        g.capture_end()
    assert box == [] and alloc.aborts == [] and alloc.recording == []
    assert (0, 80) in alloc.freed  # destroyed, after the routing ended


@pytest.mark.parametrize("begin_fails", [False, True])
def test_a_mempool_dying_while_torch_begins_the_capture_is_parked(monkeypatch, begin_fails):
    # torch routes allocations to the pool inside its capture_begin, before it returns: gc running
    # right then (any allocation can start it) must find the engine's capture registered already.
    torch, alloc = torch_with_dtor_pools(monkeypatch)
    g = make(torch=torch)
    box = [DtorPool(alloc, (0, 85))]
    real_begin = g._g.capture_begin

    def begin_and_drop_a_pool(*a, **k):
        real_begin(*a, **k)
        assert alloc.recording == [(0, 1)]
        box.clear()
        if begin_fails:  # cudaStreamBeginCapture failing after the routing began
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    g._g.capture_begin = begin_and_drop_a_pool
    if begin_fails:
        with pytest.raises(RuntimeError, match="not permitted"):
            g.capture_begin()
        assert g._state is eng.GraphState.NEW and not eng._CAPTURING
    else:
        g.capture_begin()
        assert alloc.aborts == [] and (0, 85) not in alloc.freed  # parked while the capture runs
        g.capture_end()
    assert alloc.aborts == [] and alloc.recording == [] and (0, 85) in alloc.freed


def _leave_a_route_open(alloc, pool_id):
    """What the GPU showed (engine_states seeds 731, 1616, 1662 on torch 2.11): after a failed capture
    into a pool, torch's allocator still had a routing entry for it once no capture was underway."""
    alloc.recording.append(pool_id)


@pytest.fixture
def failed_into_mempool(monkeypatch):
    """A capture into a MemPool fails (graph ``a``); a second capture into it succeeds (graph ``b``)."""
    torch, alloc = torch_with_dtor_pools(monkeypatch)
    a, b = make(torch=torch, fail_end=True), make(torch=torch)
    mp = DtorPool(alloc, (0, 70))
    a.capture_begin(pool=mp, capture_error_mode="thread_local")
    with pytest.raises(RuntimeError, match="previous error during capture"):
        a.capture_end()
    assert alloc.recording == []  # the engine ended the failed capture's routing
    b.capture_begin(pool=mp)
    b.capture_end()
    return SimpleNamespace(torch=torch, alloc=alloc, a=a, b=b, pools=[mp])


@pytest.mark.parametrize("how", ["del", "reset_then_del"])
def test_a_route_left_open_after_a_failed_capture_never_aborts_a_mempool_destructor(failed_into_mempool, how):
    # The shrunk killer: a failed capture into a MemPool, a later capture into it, both graphs reset,
    # then the MemPool dropped with no capture underway. torch's ~MemPool asserts that no routing
    # entry is open (captures_underway.empty()): the engine ends what is left before it runs.
    f = failed_into_mempool
    _leave_a_route_open(f.alloc, (0, 70))
    if how == "reset_then_del":
        f.b.reset()
        f.a.reset()
        with pytest.raises(RuntimeError, match="without a preceding successful capture"):
            f.a.replay()
        f.a.reset()
    else:  # the failed graph dropped with the MemPool, as a process tearing a sequence down does
        f.b.reset()
        f.a = None
    f.pools.clear()
    gc.collect()
    assert f.alloc.aborts == [] and f.alloc.recording == [] and (0, 70) in f.alloc.freed


def test_a_route_left_open_on_another_pool_is_ended_before_any_mempool_dies(monkeypatch):
    # ~MemPool asserts that no entry is open for ANY pool: a failed capture's own pool (a
    # graph_pool_handle) left routed kills the process when an unrelated MemPool dies.
    torch, alloc = torch_with_dtor_pools(monkeypatch)
    g = make(torch=torch, fail_end=True)
    g.capture_begin()  # pool (0, 1), from graph_pool_handle
    with pytest.raises(RuntimeError, match="previous error during capture"):
        g.capture_end()
    _leave_a_route_open(alloc, (0, 1))
    box = [DtorPool(alloc, (0, 71))]
    box.clear()
    assert alloc.aborts == [] and alloc.recording == [] and (0, 71) in alloc.freed


def test_a_mempool_parked_during_a_capture_after_a_failure_dies_with_no_route_open(monkeypatch):
    torch, alloc = torch_with_dtor_pools(monkeypatch)
    bad, good = make(torch=torch, fail_end=True), make(torch=torch)
    bad.capture_begin()
    with pytest.raises(RuntimeError, match="previous error during capture"):
        bad.capture_end()
    good.capture_begin(pool=(0, 5))
    _leave_a_route_open(alloc, (0, 1))
    box = [DtorPool(alloc, (0, 72))]
    box.clear()
    gc.collect()
    assert (0, 72) not in alloc.freed  # parked: a capture is underway
    good.capture_end()
    assert alloc.aborts == [] and alloc.recording == [] and (0, 72) in alloc.freed


def test_the_mempool_class_is_torchs_again_once_no_route_can_be_left(monkeypatch):
    # After a failure the guard stays on the class until a MemPool death has ended what was left;
    # the next capture that ends then gives torch its class back.
    torch, alloc = torch_with_dtor_pools(monkeypatch)
    g = make(torch=torch, fail_end=True)
    g.capture_begin()
    with pytest.raises(RuntimeError):
        g.capture_end()
    assert "__del__" in DtorPool.__dict__  # still guarded: a route may be left open
    box = [DtorPool(alloc, (0, 73))]
    box.clear()
    ok = make(torch=torch)
    ok.capture_begin()
    ok.capture_end()
    assert "__del__" not in DtorPool.__dict__ and eng._ROUTE_SUSPECTS == {}
    assert alloc.aborts == [] and alloc.recording == []


def test_a_route_of_a_capture_underway_is_never_ended_by_the_guard(monkeypatch):
    torch, alloc = torch_with_dtor_pools(monkeypatch)
    bad, good = make(torch=torch, fail_end=True), make(torch=torch)
    bad.capture_begin()
    with pytest.raises(RuntimeError):
        bad.capture_end()
    good.capture_begin(pool=(0, 6))
    box = [DtorPool(alloc, (0, 74))]
    box.clear()  # parked: the capture's routing stays
    assert alloc.recording == [(0, 6)]
    good.capture_end()
    assert alloc.recording == [] and alloc.aborts == []


@pytest.mark.parametrize("fails_at", ["capture_begin", "capture_end"])
def test_the_rng_reset_capture_that_fails_ends_its_routing(monkeypatch, fails_at):
    # After a failed capture the engine runs an empty capture so the CUDA generator leaves capture
    # mode. If that capture fails in turn, torch leaves allocation routed to its pool: every later
    # MemPool destructor would abort the process.
    torch, alloc = torch_with_dtor_pools(monkeypatch)
    torch.cuda.Stream = lambda: FakeStream("rng", 77)

    class FailingGraph(FakeTorchGraph):
        def capture_begin(self, pool=None, **k):
            # torch makes a pool of its own when given none; routes allocations to it
            super().capture_begin(pool if pool is not None else (5, 0), **k)
            if fails_at == "capture_begin":  # cudaStreamBeginCapture failing after the routing began
                raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

        def capture_end(self):
            self.calls.append(("capture_end",))
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    monkeypatch.setattr(eng, "_ORIGINALS", {"CUDAGraph": FailingGraph, "graph_pool_handle": lambda: (0, 3)})
    monkeypatch.setattr(eng, "_RNG_RESET", {})
    eng._leave_rng_capture_mode(torch)  # raises nothing: as on torch alone, the next capture ends RNG capture mode
    assert alloc.recording == [] and all(n == 0 for n in alloc.use_count.values())
    mp = DtorPool(alloc, (0, 86))
    del mp
    assert alloc.aborts == [] and (0, 86) in alloc.freed
    assert gc.isenabled()


def _live(cls):
    return sum(type(o) is cls for o in gc.get_objects())


class CyclePool:
    id = (0, 70)


def test_a_parked_mempool_in_a_cycle_never_dies_during_a_later_capture(monkeypatch):
    # A finalizer runs once per object (PEP 442): a MemPool parked by the engine's __del__ and let go
    # while a reference cycle still holds it would be destroyed by a later gc without any __del__,
    # possibly during a later capture (torch 2.11's destructor then aborts the process).
    torch, alloc, _ = torch_with_pools(monkeypatch)
    torch.cuda.MemPool = CyclePool
    a, b = make(torch=torch), make(torch=torch)
    a.capture_begin()
    p = CyclePool()
    p.me = p
    del p
    gc.collect()  # during a: the engine's __del__ parks it (finalized once)
    assert _live(CyclePool) == 1
    a.capture_end()
    alive_after_a = _live(CyclePool)
    b.capture_begin()
    gc.collect()
    assert alloc.recording == [(0, 1)]
    assert _live(CyclePool) == alive_after_a  # not destroyed during b
    b.capture_end()
    gc.collect()
    assert _live(CyclePool) == 0 and eng._FINALIZED == []


def test_the_shrunk_killer_on_fakes_destroys_every_pool_outside_captures(monkeypatch):
    # engine_states.py on the H200 (seed 731, shrunk): a `graph` capture into MemPool p whose end fails
    # (a forked stream never joined), a global capture into p on the other graph, replay and reset
    # of the failed graph, then the harness's cleanup (end, reset, drop everything, gc).
    torch, alloc = torch_with_dtor_pools(monkeypatch)
    g1, g0 = make(torch=torch, fail_end=True), make(torch=torch)
    pools = [DtorPool(alloc, (0, 90))]
    g1.capture_begin(pool=pools[0], capture_error_mode="thread_local")
    with pytest.raises(RuntimeError):
        g1.capture_end()
    g0.capture_begin(pool=pools[0], capture_error_mode="global")
    with pytest.raises(RuntimeError, match="reset"):
        g1.replay()
    g1.reset()
    g0.capture_end()
    g0.reset()
    g1.reset()
    pools.clear()
    del g0, g1
    gc.collect()
    assert alloc.aborts == [] and alloc.recording == []
    assert alloc.use_count[(0, 90)] == 0 and (0, 90) in alloc.freed  # every use given back: no leak


def test_a_graph_dropped_mid_capture_ends_its_capture(monkeypatch):
    torch, alloc, _ = torch_with_pools(monkeypatch)
    g = make(torch=torch)
    g.capture_begin()
    under = g._g
    assert eng._CAPTURING
    del g
    gc.collect()
    assert not eng._CAPTURING and under.calls[-1] == ("capture_end",)
    assert alloc.recording == []


def test_reset_during_a_capture_ends_it_on_the_capture_stream(monkeypatch):
    torch, alloc, _ = torch_with_pools(monkeypatch)
    g = make(torch=torch)
    g.capture_begin()
    under = g._g
    torch.set_stream("elsewhere")
    g.reset()
    assert under.calls[-2:] == [("capture_end",), ("reset",)] and g._state is eng.GraphState.NEW
    assert alloc.recording == [] and alloc.use_count[(0, 1)] == 0
    torch.set_stream("side")
    g.capture_begin()  # captures again
    g.capture_end()


def test_capture_end_on_another_stream_is_refused_and_the_capture_goes_on():
    torch = fake_torch()
    g = make(torch=torch)
    g.capture_begin()
    torch.set_stream("other")
    with pytest.raises(RuntimeError, match="Capture must end on the same stream it began on"):
        g.capture_end()
    assert g._state is eng.GraphState.CAPTURING and ("capture_end",) not in g._g.calls
    torch.set_stream("side")
    g.capture_end()
    assert g._state is eng.GraphState.CAPTURED


def test_the_same_mempool_nested_during_a_capture_is_refused_without_a_lost_use(monkeypatch):
    torch, alloc, _ = torch_with_pools(monkeypatch)
    side = AllocPool(alloc, (0, 9))
    g = make(torch=torch)
    g.capture_begin()
    with torch.cuda.use_mem_pool(side):
        with pytest.raises(RuntimeError, match="already the current pool"):
            with torch.cuda.use_mem_pool(side):
                pass
    g.capture_end()
    g.reset()
    assert side.use_count() == 1
    mine = AllocPool(alloc, (0, 11))
    g.capture_begin(pool=mine)
    with pytest.raises(RuntimeError, match="the pool of a capture underway"):
        with torch.cuda.use_mem_pool(mine):
            pass
    g.capture_end()
    g.reset()
    assert mine.use_count() == 1


def test_capture_begin_on_a_stream_already_capturing_is_refused_before_torch_sees_it():
    # torch 2.11 registers such a graph with the RNG generator on one side only; destroying it aborts.
    torch = fake_torch()
    first, second = make(torch=torch), make(torch=torch)
    first.capture_begin()
    with pytest.raises(RuntimeError, match="already capturing"):
        second.capture_begin()
    assert second._g.calls == [] and second._state is eng.GraphState.NEW
    first.capture_end()
    second.capture_begin()  # the stream is free again
    second.capture_end()


def test_pools_is_a_list_and_pool_names_the_state():
    g = captured(keep_graph=True)
    assert isinstance(g.pools(), list) and g.pools() == [(0, 1)]
    g.reset()
    with pytest.raises(RuntimeError, match="without a preceding successful capture. Nothing has been captured"):
        g.pools()
    g.capture_begin()
    with pytest.raises(RuntimeError, match="still underway"):
        g.pool()


class _ctx:
    """The capture protocol of cgtool.capture.graph.graph, without its torch stream handling."""

    def __init__(self, g):
        self.g = g

    def __enter__(self):
        self.g.capture_begin()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.g.capture_end()
        else:
            self.g._abort_capture()


# ---------------------------------------------------------------------------------------- hooks
def test_replay_hooks_order_and_end_hook_fires_when_launch_raises():
    g = captured(keep_graph=True, fail_replay=True)
    order = []
    g.register_replay_start_hook(lambda gr: order.append("start"))
    g.register_replay_end_hook(lambda gr: order.append("end"))
    with pytest.raises(RuntimeError, match="launch failed"):
        g.replay()
    assert order == ["start", "end"]
    assert [c[0] for c in g._g.calls][-2:] == ["instantiate", "replay"]  # instantiated before the start hook


def test_global_instantiate_hook_runs_first_and_errors_are_swallowed():
    order = []

    def boom(gr):
        raise RuntimeError("boom")

    h1 = eng.register_graph_instantiate_hook(boom)
    h2 = eng.register_graph_instantiate_hook(lambda gr: order.append(("global", gr)))
    try:
        g = make(keep_graph=True)
        g.register_post_instantiate_hook(lambda gr: order.append(("own", gr)))
        g.capture_begin()
        g.capture_end()
        g.instantiate()
        assert order == [("global", g), ("own", g)]
    finally:
        h1.remove()
        h2.remove()
    g.instantiate()
    assert order[-1] == ("own", g) and len(order) == 3


# ---------------------------------------------------------------------------------------- get_graph_data
@pytest.fixture
def fake_export(monkeypatch):
    import cgtool.capture.export as export

    calls = []

    def fake(raw, exe, with_meta=False):
        calls.append((raw, exe))
        return export.Export({"exec_graph_id": 5, "nodes": [{"index": 0, "node_type": "kernel"}]}, {"kernel": 1})

    monkeypatch.setattr(export, "export", fake)
    return calls


def test_get_graph_data_cached_per_instantiation(fake_export):
    g = captured(keep_graph=True)
    seen = []
    g.register_post_instantiate_hook(lambda gr: seen.append(gr.get_graph_data()))
    g.register_post_instantiate_hook(lambda gr: seen.append(gr.get_graph_data()))
    g.instantiate()
    assert seen[0] is seen[1] and len(fake_export) == 1
    after = g.get_graph_data()
    assert after is not seen[0] and after == seen[0]
    g.instantiate()
    assert seen[2] is seen[3] and seen[2] is not seen[0]


@pytest.mark.parametrize("kind", ["child_graph", "conditional"])
def test_nested_node_warns_naming_the_kind(monkeypatch, kind):
    import cgtool.capture.export as export

    nodes = [{"index": 0, "node_type": "kernel"}, {"index": 1, "node_type": kind}]
    monkeypatch.setattr(export, "export", lambda raw, exe, with_meta=False: export.Export(
        {"exec_graph_id": 1, "nodes": nodes}, {"kernel": 1, kind: 1}))
    g = captured(keep_graph=True)
    g.instantiate()
    with pytest.warns(UserWarning, match=kind):
        data = g.get_graph_data()
    assert [n["node_type"] for n in data["nodes"]].count(kind) == 1


EXPORTED = {"exec_graph_id": 5, "nodes": [{"index": 0, "node_type": "kernel"}]}  # what fake_export returns


@pytest.mark.parametrize("name", ["g.json", "g.JSON", "g.json.gz"])
def test_export_graph_data_hook_writes_json_to_a_json_name(fake_export, tmp_path, name):
    from cgtool.artifacts.jsonio import load_json

    path = tmp_path / name
    g = make(keep_graph=False)
    g.register_post_instantiate_hook(eng.export_graph_data(path))
    g.capture_begin()
    g.capture_end()  # keep_graph=False: instantiates while the template is live
    assert load_json(path) == EXPORTED


@pytest.mark.parametrize("name", ["kept.pkl", "graph.data", "noext"])
def test_export_graph_data_hook_writes_what_pytorch_writes_to_any_other_name(fake_export, tmp_path, name):
    # PyTorch's hook pickles the dict (its test_export_graph_data_hook pickle.load()s the file). The
    # bytes are compared with the standard pickle of the same dict: nothing is unpickled here.
    path = tmp_path / name
    g = make(keep_graph=True)
    g.capture_begin()
    g.capture_end()
    g.register_post_instantiate_hook(eng.export_graph_data(path))
    g.instantiate()
    assert path.read_bytes() == pickle.dumps(EXPORTED, protocol=pickle.DEFAULT_PROTOCOL)
    g.instantiate()  # each instantiation rewrites the file
    assert path.read_bytes() == pickle.dumps(EXPORTED, protocol=pickle.DEFAULT_PROTOCOL)


def test_cgtool_refuses_to_read_the_pickle_it_wrote_for_the_drop_in(fake_export, tmp_path):
    from cgtool.artifacts.jsonio import load_json
    from cgtool.errors import InvalidInputError

    path = tmp_path / "kept.pkl"
    g = make(keep_graph=True)
    g.capture_begin()
    g.capture_end()
    g.register_post_instantiate_hook(eng.export_graph_data(path))
    g.instantiate()
    with pytest.raises(InvalidInputError, match="not valid JSON|are not JSON"):
        load_json(path)


# ---------------------------------------------------------------------------------------- liveness
def test_liveness_tracker_reports_dead_input_with_stacks():
    torch = pytest.importorskip("torch")
    from cgtool.capture.liveness import LivenessTracker

    tr = LivenessTracker(torch)
    keep = torch.ones(4)
    doomed = torch.ones(4)
    tr.track_input(keep)
    tr.track_input(doomed)
    out = keep + 1
    tr.mark_output(out)
    tr.track_input(out)  # an output of the capture is internal: never tracked
    assert len(tr.external_inputs) == 2
    tr.check([])  # all alive

    def drop_it():
        nonlocal doomed
        del doomed

    drop_it()
    gc.collect()
    with pytest.raises(RuntimeError) as e:
        tr.check([])
    msg = str(e.value).lower()
    assert "1 dead tensor" in msg
    for part in ("creation traceback (python)", "deletion traceback (python)", "drop_it", "replay traceback (python)"):
        assert part in msg, part
    assert isinstance(e.value, CaptureError)


class FakeStorage:
    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


class FakeTensor:
    """What the liveness rules read of a tensor: device, address, pinned-ness, storage."""

    def __init__(self, ptr, *, cuda=True, pinned=False, device=0):
        self.ptr, self.is_cuda, self.pinned = ptr, cuda, pinned
        self.device = SimpleNamespace(index=device if cuda else None)
        self.storage = FakeStorage(ptr)

    def data_ptr(self):
        return self.ptr

    def is_pinned(self):
        return self.pinned

    def untyped_storage(self):
        return self.storage


def tracker(torch=None, capture_pool=None):
    from cgtool.capture.liveness import LivenessTracker

    return LivenessTracker(torch or SimpleNamespace(), capture_pool)


# The rules below are those of PyTorch's checker (upstream main, mid-2026) as its own tests state them:
# test_ops_without_cuda_output_not_tracked, test_pinned_memory_tensor_tracked,
# test_pinned_memory_not_tracked_for_non_copy_ops, test_empty_tensor_not_tracked,
# test_non_capturing_stream_inputs_not_tracked, test_shared_pool_tensor_not_tracked.
def test_op_without_cuda_output_tracks_nothing():
    tr = tracker()
    x = FakeTensor(0x1000)
    tr.observe("aten::equal", [x, x], [], capturing=True)  # torch.equal returns a Python bool
    tr.observe("aten::sum", [x], [FakeTensor(0x9000, cuda=False)], capturing=True)  # a host result
    assert tr.external_inputs == {}


def test_nothing_is_tracked_while_the_stream_is_not_capturing():
    tr = tracker()
    tr.observe("aten::mul.Tensor", [FakeTensor(0x1000)], [FakeTensor(0x2000)], capturing=False)
    assert tr.external_inputs == {} and tr.internal_outputs == set()


@pytest.mark.parametrize("op, tracked", [("aten::copy_", True), ("aten::_to_copy", True), ("aten::mul.Tensor", False)])
def test_pinned_host_input_tracked_only_by_copy_ops(op, tracked):
    tr = tracker()
    pinned, pageable, dest = FakeTensor(0x7000, cuda=False, pinned=True), FakeTensor(0x8000, cuda=False), FakeTensor(0x1000)
    tr.observe(op, [dest, pinned, pageable], [dest], capturing=True)
    assert (0x7000 in tr.external_inputs) is tracked
    assert 0x8000 not in tr.external_inputs  # pageable host memory: never
    assert 0x1000 in tr.external_inputs  # the CUDA destination, read-modify-written, is an input


def test_empty_tensor_and_outputs_are_not_inputs():
    tr = tracker()
    x, empty, y = FakeTensor(0x1000), FakeTensor(0), FakeTensor(0x2000)
    tr.observe("aten::view", [empty], [FakeTensor(0)], capturing=True)
    tr.observe("aten::mul.Tensor", [x], [y], capturing=True)
    tr.observe("aten::add.Tensor", [y, x], [FakeTensor(0x3000)], capturing=True)  # y was made inside
    assert sorted(tr.external_inputs) == [0x1000]
    assert {0x2000, 0x3000} <= tr.internal_outputs


@pytest.mark.parametrize("source", ["block ids", "segments"])
def test_cuda_input_in_the_capture_pool_is_not_tracked(source):
    pool = (0, 3)
    seg = {"device": 0, "address": 0x10_0000, "total_size": 0x20_0000, "segment_pool_id": pool}
    other = {"device": 0, "address": 0x80_0000, "total_size": 0x20_0000, "segment_pool_id": (0, 0)}
    c = SimpleNamespace()
    if source == "block ids":  # upstream main's binding: the pool of the block holding an address

        def block_pool(device, ptr):
            return next((s["segment_pool_id"] for s in (seg, other) if s["address"] <= ptr < s["address"] + s["total_size"]), (0, 0))

        c._cuda_getBlockMempoolId = block_pool
    snapshot = SimpleNamespace(_snapshot=lambda: {"segments": [seg, other]})
    torch = SimpleNamespace(_C=c, cuda=SimpleNamespace(memory=snapshot))
    tr = tracker(torch, (0, pool))
    shared = FakeTensor(0x10_0400)  # made by an earlier capture into the same pool
    outside = FakeTensor(0x80_0400)
    tr.observe("aten::add.Tensor", [shared, outside], [FakeTensor(0x20_0000)], capturing=True)
    assert sorted(tr.external_inputs) == [0x80_0400]


def test_the_default_pool_id_is_never_a_capture_pool():
    no_snapshot = SimpleNamespace(_snapshot=lambda: pytest.fail("no snapshot needed"))
    torch = SimpleNamespace(_C=SimpleNamespace(), cuda=SimpleNamespace(memory=no_snapshot))
    tr = tracker(torch, (0, (0, 0)))
    tr.observe("aten::neg", [FakeTensor(0x1000)], [FakeTensor(0x2000)], capturing=True)
    assert sorted(tr.external_inputs) == [0x1000]


def test_dispatch_mode_hands_op_names_and_tensors_to_the_rules(monkeypatch):
    torch = pytest.importorskip("torch")
    from cgtool.capture import liveness

    seen = []
    # the CPU build's is_current_stream_capturing is a stub that raises: this build never captures
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    tr = liveness.LivenessTracker(torch)
    monkeypatch.setattr(tr, "observe", lambda name, ins, outs, capturing: seen.append((name, ins, outs, capturing)))
    a, b = torch.ones(3), torch.zeros(3)
    tr.start()
    try:
        eq = torch.equal(a, a)
        a.copy_(b)
        c = a.to(torch.float64)
    finally:
        tr.stop()
    assert eq is True
    names = [s[0] for s in seen]
    assert "aten::equal" not in names  # no tensor result: the rules are not even asked
    copy = seen[names.index("aten::copy_")]
    assert copy[1][0] is a and copy[1][1] is b and copy[2][0] is a and copy[3] is False
    assert any(s[0] == "aten::_to_copy" and s[2][0] is c for s in seen)


# ---------------------------------------------------------------------------------------- scripts/torch_tests
def _torch_tests_run():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "torch_tests" / "run.py"
    spec = importlib.util.spec_from_file_location("torch_tests_run", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_torch_tests_results_section_is_rendered_from_a_summary(tmp_path):
    run = _torch_tests_run()
    dbg = "test_cuda_graph_debug.py::TestCUDAGraphDebugInputs::"
    res = {
        "torch": {dbg + "test_nothing_dead": {"outcome": "failed", "message": "TypeError: no check_input_liveness"},
                  dbg + "test_model": {"outcome": "passed", "message": ""}},
        "engine": {dbg + "test_nothing_dead": {"outcome": "passed", "message": ""},
                   dbg + "test_model": {"outcome": "error", "message": "RuntimeError: boom"}},
    }
    files = {f: {"present": f == "test_cuda_graph_debug.py", "sha256": "ab" * 32 if f == "test_cuda_graph_debug.py" else None,
                 "pinned_commit": None, "pinned_sha256": "ab" * 32, "is_pinned_copy": True if f == "test_cuda_graph_debug.py" else None}
             for f in run.UPSTREAM}
    summary = run.summarize(res, ["torch", "engine"], {"torch": "2.11.0", "cuda": "13.0", "device": "H100"}, files)
    assert run.engine_regressions(summary) == [dbg + "test_model"]
    text = run.render(summary)
    listed_seed = sum(1 for t, c in run.TESTS.items() if c == run.SEED)
    # 2 seed tests ran in each mode; every other listed seed test did not
    assert f"| torch | seed | 1/2 | 1 | 0 | 0 | 0 | {listed_seed - 2} |" in text
    assert f"| engine | seed | 1/2 | 0 | 1 | 0 | 0 | {listed_seed - 2} |" in text
    assert "- [engine] " + dbg + "test_model: RuntimeError: boom" in text
    assert "(2 of 2 that ran)" in text and "`test_cuda.py` | missing" in text
    md = tmp_path / "RESULTS.md"
    md.write_text(f"# head\n\n{run.BEGIN}\nold\n{run.END}\n\n## tail\n")
    run.write_results(md, text)
    out = md.read_text()
    assert out.startswith("# head\n") and out.endswith("## tail\n") and "old" not in out and text in out


def test_torch_tests_a_test_the_process_died_in_is_recorded_as_died(tmp_path):
    # The plugin's per-test lines, as a process that aborted in its second test leaves them.
    run = _torch_tests_run()
    f = "test_cuda.py::TestCuda::"
    lines = [
        {"test": f + "test_a", "event": "start"},
        {"test": f + "test_a", "event": "end", "when": "call", "outcome": "failed", "message": "AssertionError: x"},
        {"test": f + "test_a", "event": "end", "when": "teardown", "outcome": "passed", "message": ""},
        {"test": f + "test_b", "event": "start"},
        {"test": f + "test_b", "event": "end", "when": "call", "outcome": "passed", "message": ""},
    ]
    path = tmp_path / "o.outcomes"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = run.read_outcomes(path, "killed by signal 6")
    assert got[f + "test_a"] == {"outcome": "failed", "message": "AssertionError: x"}
    assert got[f + "test_b"]["outcome"] == "died" and "signal 6" in got[f + "test_b"]["message"]
    assert run.read_outcomes(path, "")[f + "test_b"]["outcome"] == "passed"  # the process ended normally
    summary = run.summarize({"engine": got}, ["engine"], {"torch": "2.11", "cuda": "13.0", "device": "H100"},
                            {k: {"present": False} for k in run.UPSTREAM})
    assert f + "test_b" in run.engine_regressions(summary)


def test_torch_tests_selection_picks_ids_classes_and_seed_api_names():
    import sys
    from pathlib import Path

    run = _torch_tests_run()
    sys.path.insert(0, str(Path(run.__file__).parent / "shim"))
    try:
        import cgtool_select
    finally:
        sys.path.pop(0)
    spec = {"ids": sorted(run.TESTS), "whole": run.WHOLE, "patterns": run.PATTERNS}
    picked = {
        "test_cuda.py::TestCuda::test_graph_mem_pool_arg_and_nested_use_mem_pool": True,  # listed
        "test_cuda.py::TestCuda::test_graph_register_replay_hooks": True,  # a seed API by name
        "test_cuda.py::TestCuda::test_cuda_graph_debug_dump_without_template": True,
        "test_cuda.py::TestCuda::test_graph_cudnn_dropout": False,  # a graph test, not of the seed API
        "test_cuda.py::TestCuda::test_memory_stats": False,
        "test_cuda_graph_debug.py::TestCUDAGraphDebugTraining::test_training_multilayer": True,  # whole file
        "test_cuda_graph_utils.py::TestGetGraphData::test_some_new_test": True,  # whole class
        "test_cuda_graph_utils.py::TestMarkKernels::test_dict_annotation": False,  # not the engine's API
    }
    assert {k: cgtool_select.wanted(k, spec) for k in picked} == picked
