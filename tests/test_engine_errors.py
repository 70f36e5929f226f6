"""The engine's state machine and error mapping without a GPU: a fake torch graph underneath.

Expected messages are PyTorch's (the regexes are those of PyTorch's own tests in test/test_cuda.py),
so code that catches RuntimeError/TypeError or matches torch's text keeps working on the engine.
"""

import gc
import json
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


class FakeTorchGraph:
    """Records calls; stands in for torch.cuda.CUDAGraph(keep_graph=True)."""

    def __init__(self, keep_graph=True, fail_end=False, fail_replay=False):
        self.calls = []
        self.fail_end = fail_end
        self.fail_replay = fail_replay

    def capture_begin(self, *a, **k):
        self.calls.append(("capture_begin", a, k))

    def capture_end(self):
        self.calls.append(("capture_end",))
        if self.fail_end:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    def instantiate(self):
        self.calls.append(("instantiate",))

    def replay(self):
        self.calls.append(("replay",))
        if self.fail_replay:
            raise RuntimeError("launch failed")

    def reset(self):
        self.calls.append(("reset",))

    def pool(self):
        return (0, 7)

    def raw_cuda_graph(self):
        return 111

    def raw_cuda_graph_exec(self):
        return 222


class FakeMemPool:
    id = (0, 99)


def fake_torch(stream="side", version="2.11.0", released=None):
    released = [] if released is None else released
    return SimpleNamespace(
        __version__=version,
        cuda=SimpleNamespace(
            current_stream=lambda: stream,
            default_stream=lambda: "default",
            current_device=lambda: 0,
            MemPool=FakeMemPool,
        ),
        _C=SimpleNamespace(_cuda_releasePool=lambda dev, pool: released.append((dev, pool))),
    )


@pytest.fixture(autouse=True)
def fake_originals(monkeypatch):
    monkeypatch.setattr(eng, "_ORIGINALS", {"CUDAGraph": FakeTorchGraph, "graph_pool_handle": lambda: (0, 1)})


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
    with pytest.raises(RuntimeError, match=r"You cannot access the raw (cuda|hip)Graph_t instance unless CUDAGraph was initialized with keep_graph=true"):
        g.raw_cuda_graph()
    with pytest.raises(RuntimeError):  # PyTorch's TestGetGraphData.test_keep_graph_false_raises
        g.get_graph_data()


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


def test_failed_capture_pool_released_on_reset():
    released = []
    g = make(torch=fake_torch(released=released), fail_end=True)
    with pytest.raises(ValueError):
        with _ctx(g):
            raise ValueError("body failed")
    assert released == []  # nothing until reset()
    with pytest.raises(RuntimeError, match="reset"):
        g.replay()
    g.reset()
    assert released == [(0, (0, 1))]  # the pool handle the capture was given


def test_aborted_valid_capture_is_released_by_torch_not_twice():
    released = []
    g = make(torch=fake_torch(released=released))
    with pytest.raises(ValueError):
        with _ctx(g):
            raise ValueError("body failed")
    g.reset()
    assert released == []  # torch's capture_end succeeded: its own reset() releases the pool


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


def test_export_graph_data_hook_writes_json(fake_export, tmp_path):
    path = tmp_path / "g.json"
    g = make(keep_graph=False)
    g.register_post_instantiate_hook(eng.export_graph_data(path))
    g.capture_begin()
    g.capture_end()  # keep_graph=False: instantiates while the template is live
    assert json.loads(path.read_text()) == {"exec_graph_id": 5, "nodes": [{"index": 0, "node_type": "kernel"}]}


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
