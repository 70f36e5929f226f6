"""The capture side's orchestration on the CPU, with small fakes: bundle writing, bench pooling
and timing (a seeded fake clock), the child-process protocol, the torchrun relaunch decision and
the traced child's environment."""

import json
import os
import random
import statistics
import sys
import textwrap
from pathlib import Path

import pytest

from cgtool.artifacts.bench import BenchSpec, WorkloadResult
from cgtool.capture import bench as capture_bench
from cgtool.capture import child, dist, tracing
from cgtool.capture.bundle import write_bundle
from cgtool.errors import CaptureError, CgtoolError, ExitCode, InvalidInputError, OutputExistsError, UsageError


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

    def run(target, args, spec):
        calls.append((target, list(args), spec))
        if target == fail_target:
            return {"error": "capture failed: host-sync", "exit_code": 3}
        xs = samples_by_call[len([c for c in calls if c[0] == target]) - 1]
        # what a bench process writes (version 2): the spec it was sent, one capture's median
        return {"workload": target, "spec": spec.to_json(), "gpu_us": xs, "capture_medians_us": [statistics.median(xs)],
                "host_us": [1.0], "eager_us": [x * 2 for x in xs], "clock_mhz": [1980, 1980], "nodes": 7, "graphs": 1,
                "args": list(args), "check_ok": True, "max_abs_diff": 0.0, "future_field": {"kept": True}}

    return run, calls


def test_pooling_concatenates_runs_and_keeps_each_median():
    runs = [[10.0, 11.0, 12.0], [20.0, 21.0, 22.0, 23.0], [5.0]]
    runner, calls = _fake_runner(runs)
    spec = BenchSpec(replays=3, blocks=3, warmup=2, eager=True)
    r = capture_bench.bench_pooled("w.py", ["--x"], spec, 3, runner=runner)
    assert list(r.gpu_us) == [x for xs in runs for x in xs]
    assert list(r.run_medians_us) == [statistics.median(xs) for xs in runs] and r.runs == 3
    assert list(r.capture_medians_us) == [statistics.median(xs) for xs in runs]
    assert list(r.eager_us or ()) == [2 * x for xs in runs for x in xs]
    assert r.spec == spec and r.nodes == 7 and r.graphs == 1 and r.args == ("--x",) and r.check_ok is True
    assert r.extra == {"future_field": {"kept": True}}  # a field this version does not know is kept
    assert len(calls) == 3 and calls[0] == ("w.py", ["--x"], spec)
    # the pooled result survives its JSON round trip
    assert WorkloadResult.from_json(r.key, json.loads(json.dumps(r.to_json())), "t") == r


def test_the_bench_process_is_sent_the_spec_as_json(monkeypatch):
    got = {}

    def fake_run_child(module, request, **kw):
        got.update(module=module, request=json.loads(json.dumps(request)))
        return {"error": "no GPU here", "exit_code": 3}

    monkeypatch.setattr(capture_bench, "run_child", fake_run_child)
    spec = BenchSpec(replays=77, blocks=7, warmup=0, per_replay=True, cold_cache=True, recaptures=4, eager=False)
    r = capture_bench.bench_pooled("w.py", ["--a", "b"], spec, 2)
    assert got["module"] == "cgtool.capture.bench" and got["request"]["args"] == ["--a", "b"]
    assert BenchSpec.from_json(got["request"]["spec"], "request") == spec
    assert r.failed and r.exit_code == 3


def test_the_bench_process_reads_its_spec_and_refuses_a_bad_one(monkeypatch):
    got = {}

    def fake_bench(target, args, spec):
        got.update(target=target, args=args, spec=spec)
        return WorkloadResult(target, gpu_us=(1.0, 2.0), spec=spec, capture_medians_us=(1.5,))

    monkeypatch.setattr(capture_bench, "bench_workload", fake_bench)
    spec = BenchSpec(replays=50, blocks=5, recaptures=2)
    out = capture_bench._child_request({"target": "w.py", "args": ["--k", "3"], "spec": spec.to_json()})
    assert got == {"target": "w.py", "args": ["--k", "3"], "spec": spec}
    assert out["spec"] == spec.to_json() and out["capture_medians_us"] == [1.5]
    with pytest.raises(InvalidInputError, match="spec.replays"):
        capture_bench._child_request({"target": "w.py", "args": [], "spec": {"replays": "many"}})


class FakeEvent:
    def __init__(self, clock):
        self.clock, self.t_ms = clock, None

    def record(self):
        self.t_ms = self.clock.gpu_ms

    def elapsed_time(self, end):
        return end.t_ms - self.t_ms


class FakeClock:
    """A seeded virtual GPU and host: each call of a function made by ``work`` advances the GPU
    clock and the host clock by drawn durations, logged for the test to compute its own answer."""

    def __init__(self, seed=0):
        self.rng = random.Random(seed)
        self.gpu_ms, self.now_ns, self.syncs = 0.0, 0, 0
        self.log = []  # (label, gpu µs, host µs) of every call, in order

    def event(self):
        return FakeEvent(self)

    def synchronize(self):
        self.syncs += 1

    def hold(self, us):
        self.gpu_ms += us / 1000  # a busy GPU, no host time
        self.log.append(("hold", us, 0.0))

    def host_ns(self):
        return self.now_ns

    def work(self, label, mean_us):
        def fn():
            gpu, host = mean_us * self.rng.uniform(0.5, 1.5), self.rng.randint(1_000, 9_000)
            self.gpu_ms += gpu / 1000
            self.now_ns += host
            self.log.append((label, gpu, host / 1000))
            return label

        return fn


def test_time_blocks_is_the_mean_of_each_block_and_runs_every_replay():
    clock = FakeClock(1)
    fn = clock.work("r", 40.0)
    got = capture_bench.time_blocks(fn, 103, 10, clock=clock)
    d = [g for _, g, _ in clock.log]
    assert len(d) == 103  # every replay asked for is run
    sizes = [11, 11, 11] + [10] * 7  # 103 over 10 blocks, as evenly as possible
    want, i = [], 0
    for n in sizes:
        want.append(sum(d[i:i + n]) / n)
        i += n
    assert got == pytest.approx(want, rel=1e-9)


def test_per_replay_and_cold_cache_give_one_sample_per_replay_without_the_flush_or_the_hold():
    clock = FakeClock(2)
    fn, flush = clock.work("r", 10.0), clock.work("flush", 500.0)
    got = capture_bench.time_blocks(fn, 30, 5, flush=flush, clock=clock)
    labels = [lab for lab, _, _ in clock.log]
    assert labels == ["flush", "hold", "r"] * 30  # the flush, then the GPU held, before every replay
    assert got == pytest.approx([g for lab, g, _ in clock.log if lab == "r"], rel=1e-9)
    assert clock.syncs == 30  # the GPU drains after every sample: each hold starts on an idle GPU
    clock2 = FakeClock(3)
    got2 = capture_bench.time_blocks(clock2.work("r", 10.0), 12, 4, per_replay=True, clock=clock2)
    assert [lab for lab, _, _ in clock2.log] == ["hold", "r"] * 12
    assert got2 == pytest.approx([g for lab, g, _ in clock2.log if lab == "r"], rel=1e-9)


def test_each_per_replay_hold_outlasts_the_host_time_of_the_call_before():
    """The GPU is held longer than the host took to submit the previous call (the fake's drawn host
    times): a sample then starts with its call already queued."""
    clock = FakeClock(8)
    capture_bench.time_blocks(clock.work("r", 3.0), 40, 4, per_replay=True, clock=clock)
    holds = [us for lab, us, _ in clock.log if lab == "hold"]
    hosts = [h for lab, _, h in clock.log if lab == "r"]
    assert len(holds) == len(hosts) == 40
    assert holds[0] >= 100.0  # nothing known of the first call: a long hold
    assert all(hold > 2 * h for hold, h in zip(holds[1:], hosts))
    assert all(hold < 2 * h + 100.0 for hold, h in zip(holds[1:], hosts))  # and not much longer


def test_the_eager_step_is_timed_per_replay_without_the_hold():
    """Its launches are what a graph saves: its samples keep them (no GPU hold ahead of them)."""
    clock = FakeClock(9)
    first = FakeCapture(clock, "c1", 10.0)
    spec = BenchSpec(replays=20, blocks=4, warmup=2, per_replay=True, eager=True)
    t = capture_bench.measure(first, spec, replay_of=lambda c: c.replay, recapture=None, check=lambda c: None,
                              clock=clock)
    labels = [lab for lab, _, _ in clock.log]
    last_hold = max(i for i, lab in enumerate(labels) if lab == "hold")
    assert labels[last_hold + 1:] == ["c1"] * (1 + 20) + ["eager"] * (2 + 4)  # last replay, host cost; eager
    assert labels[:2 + 2 * 20] == ["c1", "c1"] + ["hold", "c1"] * 20  # warm-up, then each replay held
    assert t.eager == pytest.approx([g for lab, g, _ in clock.log if lab == "eager"][2:], rel=1e-9)


def test_host_cost_is_each_calls_host_time_with_the_gpu_drained_between_chunks():
    clock = FakeClock(4)
    got = capture_bench.host_cost(clock.work("r", 5.0), 120, clock=clock)
    assert got == pytest.approx([h for _, _, h in clock.log], rel=1e-9) and len(got) == 120
    assert clock.syncs == 3  # chunks of 50: 50, 50, 20


class FakeCapture:
    def __init__(self, clock, label, mean_us):
        self.label = label
        self.replay = clock.work(label, mean_us)
        self.eager = clock.work("eager", 100.0)


def test_measure_times_every_capture_then_checks_then_times_eager():
    clock = FakeClock(5)
    first = FakeCapture(clock, "c1", 10.0)
    later = iter([FakeCapture(clock, "c2", 20.0), FakeCapture(clock, "c3", 30.0)])
    checked = []

    def recapture():
        clock.log.append(("recapture", 0.0, 0.0))
        return next(later)

    def check(cap):
        clock.log.append(("check", 0.0, 0.0))
        checked.append(cap)

    spec = BenchSpec(replays=10, blocks=5, warmup=4, recaptures=3, eager=True)
    t = capture_bench.measure(first, spec, replay_of=lambda c: c.replay, recapture=recapture, check=check,
                              clock=clock)
    labels = [lab for lab, _, _ in clock.log]
    want = (["c1"] * (4 + 10) + ["c1"] * 10  # warm-up and timed replays, then the host cost of the first capture
            + ["eager", "recapture"] + ["c2"] * 14  # one more eager output kept, a new capture
            + ["eager", "recapture"] + ["c3"] * 14
            + ["check"] + ["eager"] * (4 + 5))  # the check after all timing; the eager step last
    assert labels == want and checked == [first]
    for k, lab in enumerate(("c1", "c2", "c3")):
        d = [g for la, g, _ in clock.log if la == lab][4:14]  # after the warm-up
        assert t.captures[k] == pytest.approx([sum(d[i:i + 2]) / 2 for i in range(0, 10, 2)], rel=1e-9)
    assert len(t.host) == 10 and t.eager is not None and len(t.eager) == 5


def test_measure_without_eager_and_with_one_capture():
    clock = FakeClock(6)
    first = FakeCapture(clock, "c1", 10.0)
    t = capture_bench.measure(first, BenchSpec(replays=8, blocks=2, warmup=0, eager=False), replay_of=lambda c: c.replay,
                              recapture=None, check=lambda c: None, clock=clock)
    assert [lab for lab, _, _ in clock.log] == ["c1"] * 16 and t.eager is None and len(t.captures) == 1


def test_recaptures_of_a_workload_that_captures_its_own_graphs_are_refused():
    clock = FakeClock(7)
    with pytest.raises(UsageError, match="--recaptures"):
        capture_bench.measure(FakeCapture(clock, "c1", 1.0), BenchSpec(recaptures=2), replay_of=lambda c: c.replay,
                              recapture=None, check=lambda c: None, clock=clock)
    assert clock.log == []  # refused before anything ran


def test_a_failing_workload_is_reported_and_the_others_go_on():
    runner, calls = _fake_runner([[1.0, 2.0]] * 2, fail_target="bad.py")
    seen = []
    res = capture_bench.bench_targets(["ok.py", "bad.py", "ok2.py"], [], BenchSpec(), 2, runner=runner,
                                      progress=lambda t, k, n: seen.append((t, k, n)))
    assert [w.workload for w in res.workloads] == ["ok.py", "bad.py", "ok2.py"]
    assert [w.failed for w in res.workloads] == [False, True, False]
    assert res.workloads[1].exit_code == 3 and "host-sync" in (res.workloads[1].error or "")
    assert [c[0] for c in calls] == ["ok.py", "ok.py", "bad.py", "ok2.py", "ok2.py"]  # a failure stops its runs
    assert seen == [("ok.py", 0, 3), ("bad.py", 1, 3), ("ok2.py", 2, 3)]


def _child_module(tmp_path, body):
    (tmp_path / "fake_child.py").write_text(textwrap.dedent(body))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}


@pytest.mark.subprocess
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
