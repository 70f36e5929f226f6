"""Each part of the recorder alone (subscription, tracker, writer, coverage, exits, tree, options,
the library API, the Inductor attribution), on a CPU with the stand-in CUPTI (tests/fake_cupti_abi.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import msgspec
import pytest

from fake_cupti_abi import FakeCupti, Res, Rt, Site, capture, replay


# ----------------------------------------------------------------------------------- subscription
@pytest.mark.parametrize("tracing", [False, True])
def test_subscription_enables_only_the_graph_callbacks(fake: FakeCupti, tracing: bool) -> None:
    """The callbacks on are exactly the graph ones (runtime launches only when tracing): eager work
    pays nothing. Expected ids come from CUPTI's headers (fake_cupti_abi), not from the module."""
    from cgtool.capture.record.subscription import Subscription

    sub = Subscription(how="cupti-python", kernel_activity=False, tracing=tracing)
    calls: list[tuple[int, int, int]] = []
    sub.open(lambda d, c, p: calls.append((d, c, p)), {}, {})
    res = {(3, int(r)) for r in Res}
    rt = {(2, c) for c in (315, 316, 319, 320, 310, 418, 436, 437, 443, 452, 453)}
    launch_rt = {(2, 311), (2, 312)} if tracing else set()
    drv = {(1, 514), (1, 515)}
    assert fake.enabled == res | rt | launch_rt | drv
    assert sub.how == "cupti-python" and sub.active
    sub.suspend()
    assert fake.cb is None and not sub.active
    fake.subscribe(lambda *a: None, None)  # another profiler takes CUPTI
    assert sub.resume() is not None and not sub.active  # and keeps it: the reason comes back
    fake.unsubscribe(None)
    assert sub.resume() is None and sub.active


# ----------------------------------------------------------------------------------------- tracker
def test_tracker_alone_hands_each_graph_over_with_its_nodes(fake: FakeCupti) -> None:
    """No writer: the tracker turns callbacks into one job per instantiated graph, with the node
    handles in the order the read gives them, the frames kept per node, and its replays."""
    from cgtool.capture.record.subscription import Subscription
    from cgtool.capture.record.tracker import GraphTracker

    jobs: list[Any] = []
    sub = Subscription(how="cupti-python", kernel_activity=False, tracing=False)
    tr = GraphTracker(sub, sink=jobs.append)
    sub.open(tr.callback, tr.nodes, tr.node_graph)
    tr.bind_layout()
    capture(fake, 100, [11, 12, 13], 5000)
    capture(fake, 200, [21], 6000)
    for _ in range(4):
        replay(fake, 5000)
    replay(fake, 6000)
    assert [j.rec.seq for j in jobs] == [0, 1]
    assert [j.handles for j in jobs] == [[11, 12, 13], [21]]
    assert set(jobs[0].infos) == {11, 12, 13}  # each node's kept frames
    assert [j.rec.exec_graph_id for j in jobs] == [5, 6]
    counts = tr.all_launches()
    assert [counts[5000], counts[6000]] == [4, 1]
    fake.graph_event(Res.GRAPHEXEC_DESTROY_STARTING, exec_=5000)  # the handle may be reused: the count is final
    assert jobs[0].rec.replays == 4 and jobs[0].rec.destroyed and 5000 not in tr.all_launches()
    # a capture in progress is known to the writer's quiet wait
    fake.api(Rt.cudaStreamBeginCapture_v10000, Site.API_ENTER)
    assert tr.captures
    fake.api(Rt.cudaStreamEndCapture_v10000, Site.API_EXIT)
    assert not tr.captures


# ------------------------------------------------------------------------------------------ writer
class _StubTracker:
    """What the writer reads of the tracker: captures in progress, the last capture's time, counts."""

    def __init__(self) -> None:
        self.captures: dict[int, Any] = {}
        self.last_capture_at = 0.0
        self.counts: dict[int, int] = {}
        self.main = threading.main_thread().ident
        self.sub = types.SimpleNamespace(nodecb=None)

    def all_launches(self) -> dict[int, int]:
        return dict(self.counts)


def test_writer_alone_refreshes_the_index_when_counts_change(tmp_path: Path) -> None:
    """Idle, the writer rewrites the index only when the replay counts changed (a process killed
    later keeps its replays up to then), never while a capture runs."""
    from cgtool.capture.record.writer import Writer

    writes: list[dict[int, int]] = []
    tr = _StubTracker()
    w = Writer(str(tmp_path), tr, quiet_s=0.0, refresh_s=0.05,  # type: ignore[arg-type]
               write_index=lambda: writes.append(dict(tr.counts)), environment=lambda d: {})
    w.start()
    time.sleep(0.3)
    n0 = len(writes)
    assert n0 >= 1  # the index at start
    time.sleep(0.3)
    assert len(writes) == n0, "nothing changed: no rewrite"
    tr.counts = {1: 5}
    tr.captures = {1: object()}
    time.sleep(0.3)
    assert len(writes) == n0, "a capture in progress: the writer waits"
    tr.captures = {}
    time.sleep(0.3)
    assert writes[-1] == {1: 5} and len(writes) == n0 + 1
    w.mark_dirty()  # a child started or ended
    time.sleep(0.3)
    assert len(writes) == n0 + 2
    w.stop()
    assert not w.alive


# ---------------------------------------------------------------------------------------- coverage
def test_coverage_alone_keeps_only_the_traced_replays() -> None:
    from cgtool.capture.record.coverage import Coverage

    K = types.SimpleNamespace(CONCURRENT_KERNEL=10, KERNEL=3, MEMCPY=1, MEMSET=2, RUNTIME=5)
    traced = {7}
    cov = Coverage(tracing=True, traced=traced, first_graph=lambda: 100)
    cov._K = K

    def kern(corr: int, gid: int, start: int, end: int) -> Any:
        return types.SimpleNamespace(kind=10, graph_id=gid, start=start, end=end, correlation_id=corr, name="k",
                                     grid_x=1, grid_y=1, grid_z=1, block_x=1, block_y=1, block_z=1, device_id=0,
                                     stream_id=7, context_id=1, graph_node_id=(gid << 32) | 1, channel_id=0,
                                     channel_type=0)

    acts = [kern(7, 5, 200, 210), kern(8, 5, 300, 330), kern(9, 0, 50, 60), kern(9, 0, 400, 450)]
    try:
        cov.buffer_completed(acts)
    except AttributeError:
        pytest.skip("cupti_trace's record helper needs fields this stand-in lacks")
    assert cov.graph_ns == {5: 40} and cov.eager_ns == 60 and cov.eager_after_ns == 50
    assert [r.get("correlation") for r in cov.records] == [7]
    s = cov.summary({5})
    assert s.share_in_graphs == pytest.approx(40 / 100) and s.kernel_ns_of_unrecorded_graphs == 0


# ------------------------------------------------------------------------------------------- exits
_EXITS = r"""
import json, os, sys
sys.path.insert(0, {root!r})
from cgtool.capture.record import exits
seen = []
def finish(code, how):
    seen.append((code, how))
    with open({out!r}, "w") as f:
        json.dump(seen, f)
exits.install(finish)
how = sys.argv[1]
if how == "sys_exit":
    sys.exit(3)
if how == "raise":
    raise ValueError("x")
if how == "os_exit":
    os._exit(9)
if how == "sigterm":
    import signal, time
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
"""


@pytest.mark.parametrize("how,code,seen", [("sys_exit", 3, [3, "sys.exit"]), ("raise", 1, [1, "uncaught ValueError"]),
                                           ("os_exit", 9, [9, "os._exit"]), ("end", 0, [0, "end"]),
                                           ("sigterm", -15, [143, "SIGTERM"])])
@pytest.mark.subprocess
def test_exits_alone_finish_once_with_the_code(tmp_path: Path, how: str, code: int, seen: list[Any]) -> None:
    prog = tmp_path / "p.py"
    out = tmp_path / "seen.json"
    prog.write_text(_EXITS.format(root=str(Path(__file__).resolve().parents[1]), out=str(out)))
    p = subprocess.run([sys.executable, str(prog), how], capture_output=True, text=True, timeout=60)
    assert p.returncode == code, p.stderr
    assert json.loads(out.read_text()) == [seen]  # once, with the process's own code


# ------------------------------------------------------------------------------------------ options
def test_options_travel_to_every_process_unchanged(tmp_path: Path) -> None:
    from cgtool.capture.record.options import CLI, RecordOptions

    o = RecordOptions(out=tmp_path / "r", trace_replays=3, coverage=True, nproc_per_node=2, nnodes="2",
                      subscriber="ctypes", writer_quiet_s=0.5)
    assert RecordOptions.from_json(json.loads(json.dumps(o.to_json()))) == o
    assert o.torchrun_args() == ["--nnodes", "2"] and o.uses_torchrun and o.kernel_activity
    assert {c.field for c in CLI} <= set(RecordOptions.__dataclass_fields__)
    with pytest.raises(ValueError):
        RecordOptions(subscriber="bogus")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- tree
def test_tree_names_what_it_could_not_record(tmp_path: Path) -> None:
    from cgtool.capture.record import tree

    root = tmp_path
    (root / "p10").mkdir()
    (root / "p10" / "index.json").write_text(json.dumps({
        "cgtool_record": 1, "pid": 10, "parent": 1, "program": ["python", "a.py"], "finished": True, "exit_code": 0,
        "graphs": [{"file": "graph_000.json", "replays": 3}, {"file": "graph_001.json", "replays": 0}],
        "children": [{"pid": 11, "argv": ["nvcc", "-c"], "how": "subprocess", "exit_code": 0}]}))
    (root / "p12").mkdir()
    (root / "p12" / "error.json").write_text(json.dumps({"pid": 12, "parent": 10, "argv": ["python", "b.py"],
                                                         "message": "CUPTI is held", "exit_code": 3}))
    seen = {13: tree.Seen(13, 10, ["/usr/bin/python3", "-I", "c.py"]), 14: tree.Seen(14, 10, ["python3", "d.py"])}
    doc = tree.build(root, program=["python", "a.py"], exit_code=0, root_pid=10, seen=seen)
    by = {p.pid: p for p in doc.processes}
    assert by[10].followed and by[10].graphs == 2 and by[10].replays == 3
    assert by[11].makes_no_graphs == "a compiler or linker (nvcc)" and by[11].parent == 10
    assert "makes no CUDA graph" in str(by[11].reason)
    assert "could not start" in str(by[12].reason) and "CUPTI is held" in str(by[12].reason)
    assert "-I" in str(by[13].reason)
    assert "exited before the recorder attached" in str(by[14].reason)
    assert doc.not_followed == 4 and doc.helpers == 1 and not doc.complete


@pytest.mark.parametrize("unknown", [False, True])
def test_helper_commands_leave_no_graph_unseen(tmp_path: Path, unknown: bool) -> None:
    """A process tree whose only unrecorded processes are helper commands (ldconfig, a compiler and
    the pass it started, whose command line was not seen) is complete: "no graph" is said plainly.
    Any other binary (it could use CUDA) leaves the answer open."""
    import io

    from rich.console import Console

    from cgtool.artifacts.recording import load_tree
    from cgtool.capture.record import tree
    from cgtool.report.record_table import record_summary

    (tmp_path / "p10").mkdir()
    (tmp_path / "p10" / "index.json").write_text(json.dumps({
        "cgtool_record": 1, "pid": 10, "parent": 1, "program": ["python", "a.py"], "finished": True, "exit_code": 0,
        "graphs": [], "children": [{"pid": 11, "argv": ["/sbin/ldconfig", "-p"], "how": "subprocess", "exit_code": 0}]}))
    seen = {12: tree.Seen(12, 10, ["/opt/gcc/bin/g++-real", "-O2", "k.cpp"]), 13: tree.Seen(13, 12, [])}
    if unknown:
        seen[14] = tree.Seen(14, 10, ["./my_cuda_app"])
    doc = tree.build(tmp_path, program=["python", "a.py"], exit_code=0, root_pid=10, seen=seen)
    tree.write(tmp_path, doc)
    by = {p.pid: p for p in doc.processes}
    assert by[11].makes_no_graphs == "ldconfig" and by[12].makes_no_graphs == "a compiler or linker (g++)"
    assert by[13].makes_no_graphs == "started by a compiler or linker"
    assert doc.helpers == 3 and doc.complete is (not unknown)
    t = load_tree(tmp_path)
    assert t.complete is (not unknown) and [p.pid for p in t.unseen] == ([14] if unknown else [])
    con = Console(file=io.StringIO(), width=200, color_system=None)
    record_summary(con, t)
    text = con.file.getvalue()  # type: ignore[attr-defined]
    assert ("instantiated no CUDA graph in any of its 1 process(es)" in text) is (not unknown)
    assert ("does not say the program made none" in text) is unknown
    assert "3 helper process(es) were not recorded" in text and "ldconfig -p" not in text


# ------------------------------------------------------------------------------------ library API
def test_library_api_records_the_block(fake: FakeCupti, tmp_path: Path) -> None:
    """``with cgtool.record(out):`` records the graphs made inside the block, and only those."""
    import cgtool
    from cgtool.artifacts.recording import load_tree
    from cgtool.errors import OutputExistsError

    capture(fake, 1, [1], 1000)  # before the block: not recorded
    out = tmp_path / "rec"
    with cgtool.record(out, follow=False) as session:  # type: ignore[attr-defined]
        capture(fake, 100, [11, 12], 5000)
        for _ in range(3):
            replay(fake, 5000)
        assert session.flush()
        assert [g.nodes for g in session.graphs] == [2]
    capture(fake, 200, [21], 6000)  # after: not recorded either
    t = load_tree(out)
    (rec,) = t.recordings
    assert [(g.nodes, g.replays) for g in rec.graphs] == [(2, 3)]
    assert t.processes[0].pid == os.getpid()
    with pytest.raises(OutputExistsError):
        with cgtool.record(out):  # type: ignore[attr-defined]
            pass


# --------------------------------------------------------------------------- compiled code -> model
def test_inductor_module_paths_and_sites() -> None:
    from cgtool.capture.record import inductor

    assert inductor.module_path("L['self'].model.layers[0].self_attn.q_proj") == "model.layers.0.self_attn.q_proj"
    assert inductor.module_path("L['self']._modules['model']._modules['layers']._modules['0']") == "model.layers.0"
    assert inductor.module_path("getattr(L['self'].layers, '1').mlp") == "layers.1.mlp"
    meta = {"stack_trace": '  File "/m/model.py", line 10, in forward\n    x = self.a(x)\n'
                           '  File "/m/modeling_llama.py", line 262, in forward\n    q = self.q_proj(h)\n',
            "nn_module_stack": {"L__self__": ("L['self']", object),
                                "L__self___q": ("L['self'].model.layers[0].self_attn.q_proj", "torch.nn.Linear")}}
    site = inductor.node_site(meta)
    assert site == {"file": "/m/modeling_llama.py", "line": 262, "function": "forward",
                    "module_path": "model.layers.0.self_attn.q_proj", "module_type": "Linear"}
    gm = types.SimpleNamespace(graph=types.SimpleNamespace(nodes=[types.SimpleNamespace(name="mm", meta=meta),
                                                                  types.SimpleNamespace(name="add", meta={})]))
    inductor.note_graph("/tmp/torchinductor_x/ab/cab.py", gm)
    assert [s["module_path"] for s in inductor.model_sites("/tmp/torchinductor_x/ab/cab.py", ("mm", "add"))] == \
        ["model.layers.0.self_attn.q_proj"]


def test_generated_code_is_labelled_with_the_model_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node launched from Inductor's output code is named by the model line and module its FX
    nodes came from (the output code's `# Source Nodes` comment, the graph's node meta)."""
    from cgtool.capture.record import attribution, inductor

    gen = tmp_path / "torchinductor_me" / "ab" / "cab.py"
    gen.parent.mkdir(parents=True)
    gen.write_text("def call(args):\n"
                   "    # Topologically Sorted Source Nodes: [linear, gelu], Original ATen: [aten.addmm, aten.gelu]\n"
                   "    return launch()\n")
    ns: dict[str, Any] = {"launch": lambda: attribution.grab(sys._getframe(1))}
    exec(compile(gen.read_text(), str(gen), "exec"), ns)
    meta = {"stack_trace": '  File "/m/modeling_llama.py", line 262, in forward\n    q = self.q_proj(h)\n',
            "nn_module_stack": {"k": ("L['self'].model.layers[0].self_attn.q_proj", "Linear")}}
    inductor.note_graph(str(gen), types.SimpleNamespace(graph=types.SimpleNamespace(
        nodes=[types.SimpleNamespace(name="linear", meta=meta)])))
    monkeypatch.setattr(attribution, "model_sites", inductor.model_sites)
    frames = ns["call"](None)
    site = attribution.resolve(frames)
    assert site.short() == "modeling_llama.py:262 model.layers.0.self_attn.q_proj (linear, gelu (aten.addmm, aten.gelu))"
    assert site.to_json()["module_path"] == "model.layers.0.self_attn.q_proj"


# ---------------------------------------------------------------------------------- the answers
def _write_process(folder: Path, graphs: list[dict[str, Any]], trace: dict[str, Any] | None = None,
                   timeline: dict[str, float] | None = None) -> None:
    folder.mkdir(parents=True)
    (folder / "index.json").write_text(json.dumps({
        "cgtool_record": 1, "pid": 42, "parent": 1, "program": ["python", "serve.py"], "finished": True,
        "exit_code": 0, "graphs": graphs, "trace": "trace.json" if trace else None,
        "timeline": timeline or {}}))
    if trace:
        (folder / "trace.json").write_text(json.dumps(trace))


def test_replay_gaps_from_the_trace_and_the_launch_order(tmp_path: Path) -> None:
    """The host's gap before each traced replay: the launch's start to the first GPU work of the same
    correlation; the GPU's idle time since the previous launch's last work when that launch (launch
    order) was traced too. Expected values are worked out here from the events by hand."""
    from cgtool.artifacts.recording import load_recordings
    from cgtool.inspect.record_summary import replay_gaps

    ev = [
        {"ph": "X", "cat": "cuda_runtime", "ts": 100.0, "dur": 5.0, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "ts": 112.0, "dur": 10.0, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "ts": 125.0, "dur": 5.0, "args": {"correlation": 1}},  # ends at 130
        {"ph": "X", "cat": "cuda_runtime", "ts": 131.0, "dur": 5.0, "args": {"correlation": 3}},
        {"ph": "X", "cat": "kernel", "ts": 140.0, "dur": 4.0, "args": {"correlation": 3}},
        {"ph": "X", "cat": "cuda_runtime", "ts": 300.0, "dur": 5.0, "args": {"correlation": 9}},
        {"ph": "X", "cat": "gpu_memcpy", "ts": 303.0, "dur": 1.0, "args": {"correlation": 9}},
    ]
    graphs = [{"label": "#0 serve.py:10", "file": "graph_000.json", "replays": 5, "captured_at": "/s/serve.py:10",
               "traced_launches": [{"correlation": 1, "launch_seq": 4, "site": "/s/serve.py:30"},
                                   {"correlation": 3, "launch_seq": 5, "site": "/s/serve.py:30"}]},
              {"label": "#1 serve.py:10", "file": "graph_001.json", "replays": 2, "captured_at": "/s/serve.py:10",
               "traced_launches": [{"correlation": 9, "launch_seq": 9, "site": "/s/serve.py:31"}]}]
    _write_process(tmp_path / "p42", graphs, {"traceEvents": ev})
    (rec,) = load_recordings(tmp_path / "p42")
    gaps = {(g.seq, g.launch_site): g for g in replay_gaps(rec)}
    a, b, c = gaps[(0, "/s/serve.py:30")], None, gaps[(1, "/s/serve.py:31")]
    got = sorted((g.seq, g.launch_to_first_kernel_us, g.idle_since_previous_replay_us) for g in replay_gaps(rec))
    assert got == [(0, 9.0, 10.0), (0, 12.0, None), (1, 3.0, None)]
    assert a.seq == 0 and c.launch_to_first_kernel_us == 3.0 and b is None


def test_findings_state_what_served_and_what_is_idle(tmp_path: Path) -> None:
    """67 graphs at one site, 4 serving almost every replay: the findings say so, with the memory
    the others took and the capture time's share of the wall time."""
    from cgtool.artifacts.recording import load_tree
    from cgtool.inspect.record_summary import summarize

    graphs = []
    for i in range(67):
        replays = [500, 300, 150, 50][i] if i < 4 else (1 if i < 10 else 0)
        graphs.append({"label": f"#{i} serve.py:10", "file": f"graph_{i:03d}.json", "replays": replays,
                       "captured_at": "/s/serve.py:10", "capture_s": 0.02, "instantiate_s": 0.01,
                       "reserved_during_capture": 20 * 2**20})
    _write_process(tmp_path / "p42", graphs, timeline={"boot_start": 0.0, "program_end": 100.0})
    (tmp_path / "index.json").write_text(json.dumps({
        "cgtool_record": 2, "program": ["python", "serve.py"], "exit_code": 0, "root_pid": 42,
        "processes": [{"pid": 42, "parent": 1, "argv": ["python", "serve.py"], "followed": True, "folder": "p42",
                       "finished": True, "exit_code": 0, "graphs": 67, "replays": 1006}]}))
    s = summarize(load_tree(tmp_path))
    total = sum(g["replays"] for g in graphs)
    ranked = sorted((g["replays"] for g in graphs), reverse=True)
    k = next(k for k in range(1, 68) if sum(ranked[:k]) >= 0.9 * total)  # the fewest serving 90 %
    text = "\n".join(s.findings)
    assert (f"{k} of 67 graphs served {100 * sum(ranked[:k]) / total:.0f} % of replays; the other {67 - k} took "
            f"{(67 - k) * 20 / 1024:.1f} GiB") in text
    never = sum(1 for g in graphs if g["replays"] == 0)
    assert f"{never} graph(s) were never replayed" in text
    assert "serve.py:10 captured 67 graphs" in text
    assert f"{67 * 0.03:.3f} s in all" in text and f"{100 * 67 * 0.03 / 100:.0f} % of its wall time" in text


# ------------------------------------------------------------------------ cudagraph trees' inputs
def test_capture_shapes_are_the_recording_inputs_less_the_static_ones() -> None:
    """The shapes a cudagraph trees capture was recorded for come from ``CUDAGraphNode._record``'s
    ``inputs`` (the manager's ``new_inputs`` is already cleared when the capture begins), without
    the static inputs (parameters); an int input (a symbolic size) is kept as itself. Inputs are
    read by their ``shape`` alone, so stand-ins for tensors do (CI's first step has no torch)."""
    from cgtool.capture.record import attribution
    from cgtool.capture.record.tracker import capture_shapes

    seen: dict[str, Any] = {}

    class CUDAGraphNode:  # the two frames cudagraph trees has on the stack at capture begin
        def __init__(self, static: list[int]) -> None:
            self.wrapped_function = types.SimpleNamespace(static_input_idxs=static)

        def _record(self, model: Any, inputs: list[Any]) -> None:
            f = sys._getframe()
            seen["shapes"] = capture_shapes(f, attribution.grab(f))

    class CUDAGraphTreeManager:
        def record_function(self, new_inputs: list[Any], function_id: int) -> None:
            inputs = list(new_inputs)
            new_inputs.clear()  # as cudagraph trees does before recording
            CUDAGraphNode([0, 1])._record(None, inputs)

    attribution._register_trees(types.SimpleNamespace(CUDAGraphNode=CUDAGraphNode,
                                                      CUDAGraphTreeManager=CUDAGraphTreeManager))
    weight, bias, x = (types.SimpleNamespace(shape=s) for s in ((128, 64), (128,), (8, 64)))
    CUDAGraphTreeManager().record_function([weight, bias, x, 8], 0)
    assert msgspec.to_builtins(seen["shapes"]) == {"inputs": [[8, 64], 8], "n_inputs": 4, "static_inputs": 2}
    f = sys._getframe()
    assert capture_shapes(f, attribution.grab(f)) is None  # not a cudagraph trees capture


# ------------------------------------------------------------------ what the recorder itself starts
_SPAWNS = r'''
import json, subprocess, sys
started = []
_real = subprocess.Popen._execute_child
def _execute_child(self, args, *a, **kw):
    started.append(list(args) if isinstance(args, (list, tuple)) else [str(args)])
    return _real(self, args, *a, **kw)
subprocess.Popen._execute_child = _execute_child
from cgtool.capture._deps import require_bindings
from cgtool.capture import _libcupti
from cgtool.artifacts.names import demangle
require_bindings()  # what the recorder loads once the program has imported torch
pathfinder = "cuda.pathfinder" in sys.modules
try:
    _libcupti.load_libcupti()
except OSError:
    pass
demangled = demangle("_Z1fv")
mine = list(started)
import ctypes.util
ctypes.util.find_library("stdc++")  # the control: the stdlib's lookup does start a child
print(json.dumps({"mine": mine, "control": started[len(mine):], "pathfinder": pathfinder, "demangled": demangled}))
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ldconfig is Linux's")
@pytest.mark.subprocess
def test_the_recorder_starts_no_process_of_its_own() -> None:
    """Loading cuda.bindings (cuda.pathfinder), libcupti and the demangler starts no child process
    (``ctypes.util.find_library`` would run ``ldconfig -p``, a process of the program's tree that
    the recording would list as not recorded)."""
    pytest.importorskip("cuda.bindings")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root)] + ([os.environ["PYTHONPATH"]]
                                                                     if os.environ.get("PYTHONPATH") else [])))
    p = subprocess.run([sys.executable, "-c", _SPAWNS], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.splitlines()[-1])
    assert r["pathfinder"] and r["demangled"] == "f()"
    assert r["mine"] == []
    assert r["control"] and "ldconfig" in r["control"][0][0], r["control"]


# ----------------------------------------------------------- a capture in another thread, "global" mode
def test_the_recorders_threads_make_no_cuda_call_during_a_capture(fake: FakeCupti, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """While a program thread captures in the default "global" mode, a CUDA call from any other
    thread invalidates the capture (cudaErrorStreamCaptureInvalidated). Every CUDA and CUPTI entry
    point the recorder reaches (the graph reads, the device's properties and versions, torch's
    allocator and device calls, CUPTI's ids) is logged with its thread here: while one thread's
    capture is open, no other thread calls one, though the writer writes the graph captured before
    and refreshes the index meanwhile; the writer thread never calls one."""
    import cgtool.capture._deps as deps
    import cgtool.capture.export as ex
    import cgtool.capture.graphread as gr
    from cgtool.capture.record import writer as writer_mod
    from cgtool.capture.record.options import RecordOptions
    from cgtool.capture.record.recorder import Recorder

    calls: list[tuple[str, int]] = []

    def logged(name: str, fn: Any) -> Any:
        def call(*a: Any, **kw: Any) -> Any:
            calls.append((name, threading.get_ident()))
            return fn(*a, **kw)
        return call

    for mod, name in ((gr, "read_graph"), (gr, "read_quick"), (ex, "cuda_environment")):
        monkeypatch.setattr(mod, name, logged(name, getattr(mod, name)))

    class _Bindings:  # cuda.bindings' runtime and driver: every function logged
        def __init__(self, real: Any, name: str) -> None:
            self._real, self._name = real, name

        def __getattr__(self, attr: str) -> Any:
            v = getattr(self._real, attr)
            return logged(f"{self._name}.{attr}", v) if callable(v) and attr[:2] in ("cu", "cd") else v

    real_require = deps.require_bindings
    monkeypatch.setattr(deps, "require_bindings", lambda *a: tuple(
        _Bindings(m, n) for m, n in zip(real_require(*a), ("runtime", "driver"))))
    monkeypatch.setattr(fake, "get_graph_id", logged("cuptiGetGraphId", fake.get_graph_id))
    torch_c = types.SimpleNamespace(_cuda_getDevice=logged("torch._C._cuda_getDevice", lambda: 0),
                                    _cuda_memoryStats=logged("torch._C._cuda_memoryStats", lambda d: {
                                        "reserved_bytes": {"all": {"current": 0}}}))
    torch_cuda = types.SimpleNamespace(**{n: logged(f"torch.cuda.{n}", lambda *a: 0) for n in (
        "memory_reserved", "max_memory_reserved", "get_device_properties", "get_device_capability")},
        is_initialized=logged("torch.cuda.is_initialized", lambda: False))
    fake_torch = types.SimpleNamespace(_C=torch_c, cuda=torch_cuda, __version__="0", version=types.SimpleNamespace(cuda="13.0"))
    monkeypatch.setattr(writer_mod, "_MAX_DEFER_S", 0.3)  # the writer does not wait for the open capture to end

    rec = Recorder(str(tmp_path), RecordOptions(subscriber="cupti-python", writer_quiet_s=0.05, index_refresh_s=0.05),
                   program=["prog.py"])
    rec.start()
    rec.tracker.torch = fake_torch
    capture(fake, 100, [11, 12], 5000)  # graph 0, handed to the writer
    replay(fake, 5000)
    window: dict[str, Any] = {}

    def capturing_thread() -> None:
        fake.graphs[200] = [21]  # type: ignore[attr-defined]
        window["thread"] = threading.get_ident()
        window["start"] = len(calls)
        fake.api(Rt.cudaStreamBeginCapture_v10000, Site.API_ENTER)
        fake.api(Rt.cudaStreamBeginCapture_v10000, Site.API_EXIT)
        deadline = time.perf_counter() + 10
        while not (tmp_path / "graph_000.json").exists() and time.perf_counter() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # the index refreshed too (replays of graph 0 changed)
        window["written"] = (tmp_path / "graph_000.json").exists()
        fake.graph_event(Res.GRAPHNODE_CREATED, graph=200, node=21)
        fake.api(Rt.cudaStreamEndCapture_v10000, Site.API_ENTER)
        fake.api(Rt.cudaStreamEndCapture_v10000, Site.API_EXIT)
        window["end"] = len(calls)
        fake.api(Rt.cudaGraphInstantiateWithFlags_v11040, Site.API_ENTER)
        fake.graph_event(Res.GRAPHEXEC_CREATED, graph=200, exec_=6000)
        fake.api(Rt.cudaGraphInstantiateWithFlags_v11040, Site.API_EXIT)

    t = threading.Thread(target=capturing_thread)
    t.start()
    t.join()
    assert rec.flush(10)
    writer_thread = rec.writer._thread.ident  # type: ignore[union-attr]
    rec.finish(0)
    assert window["written"], "the writer wrote graph 0 while the other thread's capture was open"
    idx = json.loads((tmp_path / "index.json").read_text())
    assert [g["nodes"] for g in idx["graphs"]] == [2, 1] and idx["graphs"][0]["replays"] == 1
    during = calls[window["start"]:window["end"]]
    assert all(tid == window["thread"] for _, tid in during), during
    assert not [c for c in calls if c[1] == writer_thread], "the writer thread made a CUDA call"
    assert {"read_graph", "cuptiGetGraphId"} <= {n for n, tid in calls if tid == window["thread"]}, calls
