"""The capture side's orchestration on the CPU, with small fakes: bundle writing, bench pooling,
the child-process protocol, the torchrun relaunch decision and the traced child's environment."""

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from cgtool.artifacts.bench import Stats, WorkloadResult
from cgtool.capture import bench as capture_bench
from cgtool.capture import child, dist, tracing
from cgtool.capture.bundle import write_bundle
from cgtool.errors import CaptureError, CgtoolError, ExitCode, OutputExistsError, UsageError


class FakeGraph:
    def __init__(self, fail=False):
        self.fail = fail

    def debug_dump(self, path):
        if self.fail:
            raise RuntimeError("driver dump failed")
        Path(path).write_text("digraph {}\n")


class FakeCaptured:
    def __init__(self, docs, fail_on=None):
        self.docs = docs
        self.graphs = [(label, FakeGraph(fail=label == fail_on)) for label in docs]

    def exports(self):
        return list(self.docs.items())


def _docs(data_dir):
    d = data_dir / "train_step"
    return {"fwd0": json.loads((d / "graph-fwd0.json").read_text()),
            "bwd0": json.loads((d / "graph-bwd0.json").read_text())}


def test_bundle_holds_every_graph_and_refuses_to_overwrite(data_dir, tmp_path):
    docs = _docs(data_dir)
    dest = tmp_path / "b"
    entries = write_bundle(FakeCaptured(docs), dest)
    assert sorted(p.name for p in dest.iterdir()) == ["graph-bwd0.dot", "graph-bwd0.json", "graph-fwd0.dot",
                                                     "graph-fwd0.json"]
    for e in entries:
        assert json.loads(e.path.read_text()) == docs[e.label]
        assert len(e.graph.nodes) == len(docs[e.label]["nodes"])
    with pytest.raises(OutputExistsError):
        write_bundle(FakeCaptured(docs), dest)
    one = {"main": docs["fwd0"]}
    write_bundle(FakeCaptured(one), dest, force=True)
    assert sorted(p.name for p in dest.iterdir()) == ["graph.dot", "graph.json"]


def test_a_failed_bundle_leaves_the_old_one_and_no_temp_folder(data_dir, tmp_path):
    docs = _docs(data_dir)
    dest = tmp_path / "b"
    write_bundle(FakeCaptured({"main": docs["fwd0"]}), dest)
    before = sorted(p.name for p in dest.iterdir())
    with pytest.raises(RuntimeError):
        write_bundle(FakeCaptured(docs, fail_on="bwd0"), dest, force=True)
    assert sorted(p.name for p in dest.iterdir()) == before
    assert [p.name for p in tmp_path.iterdir()] == ["b"]


def _fake_runner(samples_by_call, fail_target=None):
    calls = []

    def run(target, args, opts):
        calls.append((target, list(args), dict(opts)))
        if target == fail_target:
            return {"error": "capture failed: host-sync", "exit_code": 3}
        xs = samples_by_call[len([c for c in calls if c[0] == target]) - 1]
        return {"workload": target, "gpu_us": xs, "host_us": [1.0], "eager_us": [x * 2 for x in xs],
                "clock_mhz": [1980, 1980], "sampling": "blocks of 50", "nodes": 7}

    return run, calls


def test_pooling_concatenates_runs_and_keeps_each_median():
    runs = [[10.0, 11.0, 12.0], [20.0, 21.0, 22.0, 23.0], [5.0]]
    runner, calls = _fake_runner(runs)
    r = capture_bench.bench_pooled("w.py", ["--x"], {"replays": 3}, 3, runner=runner)
    assert list(r.gpu_us) == [x for xs in runs for x in xs]
    assert list(r.run_medians_us) == [Stats.of(xs).median for xs in runs] and r.runs == 3
    assert list(r.eager_us or ()) == [2 * x for xs in runs for x in xs]
    assert r.extra["nodes"] == 7 and len(calls) == 3 and calls[0] == ("w.py", ["--x"], {"replays": 3})
    # the pooled result survives its JSON round trip
    assert WorkloadResult.from_json(r.key, json.loads(json.dumps(r.to_json())), "t") == r


def test_a_failing_workload_is_reported_and_the_others_go_on():
    runner, calls = _fake_runner([[1.0, 2.0]] * 2, fail_target="bad.py")
    seen = []
    res = capture_bench.bench_targets(["ok.py", "bad.py", "ok2.py"], [], {}, 2, runner=runner,
                                      progress=lambda t, k, n: seen.append((t, k, n)))
    assert [w.workload for w in res.workloads] == ["ok.py", "bad.py", "ok2.py"]
    assert [w.failed for w in res.workloads] == [False, True, False]
    assert res.workloads[1].exit_code == 3 and "host-sync" in (res.workloads[1].error or "")
    assert [c[0] for c in calls] == ["ok.py", "ok.py", "bad.py", "ok2.py", "ok2.py"]  # a failure stops its runs
    assert seen == [("ok.py", 0, 3), ("bad.py", 1, 3), ("ok2.py", 2, 3)]


def _child_module(tmp_path, body):
    (tmp_path / "fake_child.py").write_text(textwrap.dedent(body))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}


def test_child_protocol_result_error_and_death(tmp_path):
    env = _child_module(tmp_path, """
        import os, sys
        from cgtool.capture.child import child_main
        from cgtool.errors import InvalidInputError

        def work(req):
            if req["what"] == "ok":
                print("the workload may print anything @@CGTOOL@@ {}")
                return {"doubled": req["x"] * 2}
            if req["what"] == "cgtool-error":
                raise InvalidInputError("bad file")
            if req["what"] == "bug":
                raise KeyError("k")
            print("dying", file=sys.stderr)
            os._exit(7)

        child_main(work)
    """)
    assert child.run_child("fake_child", {"what": "ok", "x": 21}, env=env) == {"doubled": 42}
    r = child.run_child("fake_child", {"what": "cgtool-error"}, env=env)
    assert r == {"error": "bad file", "exit_code": int(ExitCode.INVALID_INPUT)}
    with pytest.raises(CgtoolError) as e:
        child.raise_error(r)
    assert e.value.exit_code is ExitCode.INVALID_INPUT
    r = child.run_child("fake_child", {"what": "bug"}, env=env)
    assert r["exit_code"] == 3 and "KeyError" in r["error"]
    r = child.run_child("fake_child", {"what": "die"}, env=env)
    assert r["exit_code"] == 3 and "exit 7" in r["error"] and "dying" in r["error"]
    child.raise_error({"ok": True})  # no error: nothing raised


def test_torchrun_relaunch_is_decided_without_starting_anything(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    started = []
    monkeypatch.setattr(dist, "relaunch_with_torchrun", lambda n, argv: started.append((n, argv)) or 5)
    assert dist.maybe_relaunch(None, ["capture", "w.py"]) is None
    with pytest.raises(UsageError):
        dist.maybe_relaunch(0, ["capture", "w.py", "--nproc-per-node", "0"])
    assert dist.maybe_relaunch(2, ["capture", "w.py", "--nproc-per-node", "2"]) == 5
    assert started == [(2, ["capture", "w.py"])]
    monkeypatch.setenv("WORLD_SIZE", "2")  # already under torchrun: do the work here
    assert dist.maybe_relaunch(2, ["capture", "w.py", "--nproc-per-node", "2"]) is None
    assert dist.rank_dir(Path("out")) == Path("out/rank0")


def test_max_connections_runs_the_trace_in_a_child_with_the_variable_set(monkeypatch):
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    got = {}

    def fake_run_child(module, request, *, env=None, quiet=True):
        got.update(module=module, request=dict(request), mc=(env or {}).get("CUDA_DEVICE_MAX_CONNECTIONS"))
        return {"path": request["output"], "collector": "cupti", "gpu_events": 85, "graphs": 1,
                "exec_graph_ids": [1], "channels": [0], "dropped": 0, "has_node_ids": True, "rank": None}

    monkeypatch.setattr(tracing, "run_child", fake_run_child)
    s = tracing.record_trace("w.py", ["--a"], "t.json.gz", replays=4, max_connections=1)
    assert got["module"] == "cgtool.capture.tracing" and got["mc"] == "1"
    assert got["request"]["args"] == ["--a"] and got["request"]["replays"] == 4
    assert s.channels == [0] and s.gpu_events == 85

    monkeypatch.setattr(tracing, "run_child", lambda *a, **k: {"error": "no GPU", "exit_code": 3})
    with pytest.raises(CgtoolError) as e:
        tracing.record_trace("w.py", [], "t.json.gz", max_connections=1)
    assert e.value.exit_code is ExitCode.CAPTURE_FAILED


def test_capture_errors_keep_their_exit_codes():
    assert CaptureError("x").exit_code is ExitCode.CAPTURE_FAILED
    assert child.error_result(OutputExistsError("o.json"))["exit_code"] == int(ExitCode.USAGE)
