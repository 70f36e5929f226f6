"""`cgtool record` follows every process of a program: CPU tests with the stand-in CUPTI.

Each program below is recorded by `cgtool record` as a user runs it (tests/fake_cupti_abi.py's
RECORD_DRIVER: only the check for a CUDA driver is left out), every process on the stand-in CUPTI.
Each process of the programs leaves what it did (`result(pid, graphs, replays)`: a file of its own,
tests/conftest.py's ``record_fake``), and the recording is checked against those and against the operating system's view (exit codes),
never against the recorder's own summary.
"""

from __future__ import annotations

import json
import shutil
import sys
import types
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from fake_cupti_abi import FakeCupti, FakeLibcupti, capture, replay

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process trees are followed on Linux")


def tree_and_indexes(out: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    tree = json.loads((out / "index.json").read_text())
    idx = {p["folder"]: json.loads((out / p["folder"] / "index.json").read_text())
           for p in tree["processes"] if p["followed"]}
    return tree, idx


_TREE = r'''
import json, multiprocessing as mp, os, subprocess, sys, threading, types
from cupti import result  # one file per call (tests/fake_cupti_abi.py)

def spawn_worker():  # captures two graphs in a background thread and replays them 5 and 4 times
    from cupti import cupti as fake, capture, replay
    def work():
        capture(fake, 100, [1, 2], 11000)
        capture(fake, 200, [3], 12000)
        for _ in range(5):
            replay(fake, 11000)
        for _ in range(4):
            replay(fake, 12000)
    t = threading.Thread(target=work)
    t.start()
    t.join()
    result(image=0, graphs=2, replays=[5, 4])

def pool_task(i):  # one graph per task, replayed i + 1 times
    from cupti import cupti as fake, capture, replay
    capture(fake, 300 + i, [10 + i], (20 + i) * 1000)
    for _ in range(i + 1):
        replay(fake, (20 + i) * 1000)
    result(image=0, graphs=1, replays=[i + 1])
    return i

def chain(level):
    from cupti import cupti as fake, capture, replay
    if level == "1":  # a graph, then this process becomes another Python program (os.execv)
        capture(fake, 400, [1, 2, 3], 41000)
        replay(fake, 41000)
        replay(fake, 41000)
        result(image=0, graphs=1, replays=[2])
        os.execv(sys.executable, [sys.executable, __file__, "chain", "exec"])
    capture(fake, 500, [1], 51000)  # the program the exec made, under the same pid
    replay(fake, 51000)
    result(image=1, graphs=1, replays=[1])
    subprocess.run(["sh", "-c", "sleep 0.3; exit 3"])  # not Python: seen, not recorded
    subprocess.run([sys.executable, "-I", "-c", "pass"])  # isolated: ignores PYTHONPATH
    # a fork of a process that "initialised CUDA" (a stand-in for torch that says so)
    sys.modules["torch"] = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
    pid = os.fork()
    if pid == 0:
        capture(fake, 600, [1, 2], 61000)
        for _ in range(3):
            replay(fake, 61000)
        result(image=0, graphs=1, replays=[3])
        os._exit(4)
    os.waitpid(pid, 0)

if __name__ == "__main__":
    if sys.argv[1:2] == ["chain"]:
        chain(sys.argv[2])
        sys.exit(0)
    p = mp.get_context("spawn").Process(target=spawn_worker)
    p.start()
    p.join()
    with mp.get_context("forkserver").Pool(2) as pool:
        assert sorted(pool.map(pool_task, range(4), chunksize=1)) == [0, 1, 2, 3]
    subprocess.run([sys.executable, __file__, "chain", "1"], check=True)
    result(image=0, graphs=0, replays=[])
    sys.exit(5)
'''


@pytest.mark.subprocess
def test_every_process_of_the_tree_is_recorded(tmp_path: Path, record_fake: Any) -> None:
    """spawn (a thread capturing), a forkserver pool, a subprocess that execs another Python
    program, a fork after CUDA was "initialised", a shell child and an isolated Python child: each
    Python process has its own recording with the graphs and replays it printed; the others are
    listed with the reason; `cgtool record` exits with the program's code."""
    prog = tmp_path / "tree.py"
    prog.write_text(_TREE)
    p, out = record_fake(["python", prog])
    assert p.returncode == 5, p.stderr[-3000:]
    tree, idx = tree_and_indexes(out)
    assert tree["exit_code"] == 5 and tree["cgtool_record"] == 2
    res = record_fake.results()
    want: dict[tuple[int, int], dict[str, Any]] = defaultdict(lambda: {"graphs": 0, "replays": []})
    for r in res:
        w = want[(r["pid"], r["image"])]
        w["graphs"] += r["graphs"]
        w["replays"] += r["replays"]
    got: dict[tuple[int, int], dict[str, Any]] = {}
    for folder, ix in idx.items():
        image = int(folder.partition("-x")[2] or 0)
        got[(ix["pid"], image)] = {"graphs": len(ix["graphs"]), "replays": [g["replays"] for g in ix["graphs"]]}
    for key, w in want.items():
        assert got.get(key) == w, (key, got.get(key), w)
    # processes that made no graph (the forkserver, the resource tracker) are recorded with none
    assert all(v["graphs"] == 0 for k, v in got.items() if k not in want)
    procs = {q["pid"]: q for q in tree["processes"]}
    root = procs[tree["root_pid"]]
    assert root["started_as"] == "root" and root["exit_code"] == 5
    # how each began, and its parent, as the operating system has it
    spawned = [q for q in tree["processes"] if q.get("started_as") == "spawn"]
    assert spawned and all(q["parent"] == root["pid"] for q in spawned)
    (chain_pid,) = {k[0] for k in want if k[1] == 1}
    execd = [q for q in tree["processes"] if q["pid"] == chain_pid and q["followed"]]
    assert [q["started_as"] for q in execd] == ["python", "exec"]
    assert idx[f"p{chain_pid}"]["exit"]["how"].startswith("exec ")
    forked = [q for q in tree["processes"] if q.get("started_as") == "fork" and q["parent"] == chain_pid]
    assert len(forked) == 1 and forked[0]["exit_code"] == 4  # as its parent's waitpid saw it
    assert forked[0]["cuda"]["usable"] is False and "forked" in forked[0]["cuda"]["reason"]
    # the children that could not be recorded are named, with why
    others = [q for q in tree["processes"] if not q["followed"]]
    sh = [q for q in others if q["argv"][:1] == ["sh"]]
    assert len(sh) == 1 and "not a Python program" in sh[0]["reason"] and sh[0]["exit_code"] == 3
    iso = [q for q in others if "-I" in q["argv"]]
    assert len(iso) == 1 and "-I" in iso[0]["reason"]
    assert not tree["complete"]
    # the summary does not claim "no graph" for what it did not see, and names what it could not record
    assert f"{len(others)} process(es) could not be recorded" in p.stderr, p.stderr[-2000:]
    assert "no CUDA graph" not in p.stderr
    assert not (out / ".boot").exists()


_KILLED = r'''
import json, multiprocessing as mp, os, sys, time

def worker(ready):
    from cupti import cupti as fake, capture, replay, result
    capture(fake, 100, [1, 2], 11000)
    capture(fake, 200, [3, 4, 5], 12000)
    for _ in range(3):
        replay(fake, 11000)
    for _ in range(2):
        replay(fake, 12000)
    result(graphs=2, replays=[3, 2])
    ready.set()
    time.sleep(120)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=worker, args=(ready,))
    p.start()
    ready.wait(60)
    time.sleep(2.5)  # the recorder writes within a second of quiet; a killed process keeps that
    p.kill()
    p.join()
    from cupti import result
    result(worker_exitcode=p.exitcode)
    sys.exit(7)
'''


@pytest.mark.subprocess
def test_a_killed_worker_loses_nothing_written(tmp_path: Path, record_fake: Any) -> None:
    """A worker killed with SIGKILL after its graphs and replays: both graphs and their replays are
    in the recording, its exit is the parent's view (killed by signal 9), the recording says it did
    not finish, and `cgtool record` exits with the program's own code."""
    prog = tmp_path / "killed.py"
    prog.write_text(_KILLED)
    p, out = record_fake(["python", prog])
    assert p.returncode == 7, p.stderr[-3000:]
    res = record_fake.results()
    w = next(r for r in res if "graphs" in r)
    main = next(r for r in res if "worker_exitcode" in r)
    assert main["worker_exitcode"] == -9
    tree, idx = tree_and_indexes(out)
    q = next(x for x in tree["processes"] if x["pid"] == w["pid"])
    assert q["followed"] and not q["finished"] and q["exit_code"] == 128 + 9
    assert "parent" in q["exit_code_seen_by"] and "did not finish" in q["reason"]
    ix = idx[q["folder"]]
    assert [g["replays"] for g in ix["graphs"]] == w["replays"]
    for g in ix["graphs"]:
        assert (out / q["folder"] / g["file"]).exists()
    assert tree["exit_code"] == 7


@pytest.mark.subprocess
def test_a_command_that_is_not_python_is_followed_into_python(tmp_path: Path, record_fake: Any) -> None:
    """A shell script that runs Python: the shell is listed (not Python), the Python it runs is
    recorded, with the shell as its parent."""
    prog = tmp_path / "g.py"
    prog.write_text("from cupti import cupti as fake, capture, replay, result\n"
                    "capture(fake, 1, [1], 5000)\nreplay(fake, 5000)\nresult()\n")
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/sh\n{shutil.which('sh') and sys.executable} {prog}\nexit 2\n")
    script.chmod(0o755)
    p, out = record_fake([script])
    assert p.returncode == 2, p.stderr[-2000:]
    tree, idx = tree_and_indexes(out)
    (res,) = record_fake.results()
    q = next(x for x in tree["processes"] if x["pid"] == res["pid"])
    assert q["followed"] and q["graphs"] == 1 and q["replays"] == 1
    shell = next(x for x in tree["processes"] if x["pid"] == tree["root_pid"])
    assert not shell["followed"] and "not a Python program" in shell["reason"] and q["parent"] == shell["pid"]


# ------------------------------------------------------------------------ the program's own profiler
class _Activity:
    def __init__(self, name: str) -> None:
        self.name = name


def _fake_profiler_module(f: FakeCupti, *, kineto_keeps_cupti: bool) -> Any:
    """torch.autograd.profiler's three entry points, playing Kineto: a profiler with CUDA activity
    subscribes to CUPTI (and fails if it is held), and (unless it keeps it) lets go when stopped."""
    mod = types.ModuleType("fake_torch_profiler")
    state = {"kineto_subscribed": False, "kineto_failed": False}

    def _prepare_profiler(config: Any, activities: Any, **kw: Any) -> None:
        if any(a.name == "CUDA" for a in activities):
            try:
                f.subscribe(lambda *a: None, None)
                state["kineto_subscribed"] = True
            except Exception:
                state["kineto_failed"] = True

    def _enable_profiler(config: Any, activities: Any) -> None:
        pass

    def _disable_profiler() -> str:
        if state["kineto_subscribed"] and not kineto_keeps_cupti:
            f.unsubscribe(None)
            state["kineto_subscribed"] = False
        return "results"

    mod._prepare_profiler, mod._enable_profiler, mod._disable_profiler = (  # type: ignore[attr-defined]
        _prepare_profiler, _enable_profiler, _disable_profiler)
    mod.state = state  # type: ignore[attr-defined]
    return mod


@pytest.mark.parametrize("how", ["cupti-python", "c"])
@pytest.mark.parametrize("keeps", [False, True])
def test_the_programs_own_profiler_gets_cupti(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, keeps: bool,
                                              how: str, fake: FakeCupti) -> None:
    """The program starts a GPU profiler while recorded: the profiler gets CUPTI (the program works
    as it would unrecorded), the recording says from which line it missed what; the graph made while
    the profiler ran is not in it; after the profiler stops the recorder takes CUPTI back if it can.
    The replays before the profiler are counted once, whether the compiled callback or Python counts
    them and whether or not the recording resumes."""
    from cgtool.capture.record import _subscriber, profiler
    from cgtool.capture.record.options import RecordOptions
    from cgtool.capture.record.recorder import Recorder

    f = fake
    if how == "c":
        if _subscriber.compiled_callback() is None:
            pytest.skip("the compiled callback is not built here (Python < 3.11 or no C compiler)")
        monkeypatch.setattr(_subscriber, "load_libcupti", lambda: FakeLibcupti(f))
    rec = Recorder(str(tmp_path / "rec"), RecordOptions(subscriber=how), program=["prog.py"])
    rec.start()
    assert rec.subscriber == how and rec.sub.counts_in_c == (how == "c")
    mod = _fake_profiler_module(f, kineto_keeps_cupti=keeps)
    profiler.wrap(mod)
    capture(f, 100, [1, 2], 11000)
    for _ in range(3):
        replay(f, 11000)
    line = sys._getframe().f_lineno + 1
    mod._prepare_profiler(None, {_Activity("CPU"), _Activity("CUDA")})
    mod._enable_profiler(None, set())
    assert mod.state["kineto_subscribed"] and not mod.state["kineto_failed"], "the program's profiler got CUPTI"
    capture(f, 200, [3], 12000)  # made while the profiler runs: not the recorder's to see
    replay(f, 11000)
    mod._disable_profiler()
    capture(f, 300, [4, 5, 6], 13000)
    replay(f, 13000)
    rec.finish(0)
    idx = json.loads((tmp_path / "rec" / "index.json").read_text())
    (sp,) = idx["suspended"]
    assert sp["site"] == f"{__file__}:{line}" and "torch.profiler" in sp["reason"]
    if keeps:  # Kineto holds CUPTI to the end: nothing more is recorded, and the index says why
        assert sp["resumed_at_s"] is None and sp["not_resumed"]
        assert [g["nodes"] for g in idx["graphs"]] == [2]
    else:
        assert sp["resumed_at_s"] is not None and sp["not_resumed"] is None
        assert [g["nodes"] for g in idx["graphs"]] == [2, 3]
        assert idx["graphs"][1]["replays"] == 1 and idx["graphs"][1]["replays_complete"]
    g0 = idx["graphs"][0]
    assert g0["replays"] == 3 and g0["replays_complete"] is False  # the replay under the profiler was not seen


def test_a_cpu_only_profiler_leaves_the_recording_on(tmp_path: Path, fake: FakeCupti) -> None:
    from cgtool.capture.record import profiler
    from cgtool.capture.record.options import RecordOptions
    from cgtool.capture.record.recorder import Recorder

    f = fake
    rec = Recorder(str(tmp_path / "rec"), RecordOptions(subscriber="cupti-python"), program=["prog.py"])
    rec.start()
    mod = _fake_profiler_module(f, kineto_keeps_cupti=True)
    profiler.wrap(mod)
    mod._prepare_profiler(None, {_Activity("CPU")})
    capture(f, 100, [1], 11000)
    mod._disable_profiler()
    rec.finish(0)
    idx = json.loads((tmp_path / "rec" / "index.json").read_text())
    assert idx["suspended"] == [] and len(idx["graphs"]) == 1


@pytest.mark.subprocess
def test_the_programs_own_sitecustomize_still_runs(tmp_path: Path, record_fake: Any) -> None:
    """The bootstrap shadows a sitecustomize on the program's path: that one still runs, once, first."""
    user_site = tmp_path / "user_site"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RUNS'] = "
                                                "os.environ.get('USER_SITE_RUNS', '') + ' %d' % os.getpid()\n")
    prog = tmp_path / "p.py"
    prog.write_text("import os, sys\nruns = os.environ.get('USER_SITE_RUNS', '').split()\n"
                    "recording = 'cgtool.capture.record.process' in sys.modules\n"
                    "from cupti import result\nresult(ran=runs.count(str(os.getpid())), recording=recording)\n")
    p, _ = record_fake(["python", prog], pythonpath=[user_site], timeout=120)
    assert p.returncode == 0, p.stderr
    assert [{k: v for k, v in r.items() if k != "pid"} for r in record_fake.results()] == [
        {"ran": 1, "recording": True}]


@pytest.mark.subprocess
def test_a_python_child_given_pythonpath_from_sys_path_is_recorded(tmp_path: Path, record_fake: Any) -> None:
    """torch starts its compile workers with ``PYTHONPATH=os.pathsep.join(sys.path)``
    (``python_subprocess_env``): such a child is recorded like any other, its pid followed."""
    prog = tmp_path / "p.py"
    prog.write_text(
        "import os, subprocess, sys\n"
        "env = {**os.environ, 'PYTHONPATH': os.pathsep.join(sys.path)}\n"
        "child = 'import sys; rec = \"cgtool.capture.record.process\" in sys.modules; "
        "from cupti import result; result(recording=rec)'\n"
        "subprocess.run([sys.executable, '-c', child], env=env, check=True)\n"
        "recording = 'cgtool.capture.record.process' in sys.modules\n"
        "from cupti import result\nresult(recording=recording)\n")
    p, out = record_fake(["python", prog])
    assert p.returncode == 0, p.stderr
    res = record_fake.results()
    assert len(res) == 2 and all(r["recording"] for r in res), res
    tree, _ = tree_and_indexes(out)
    followed = {pr["pid"] for pr in tree["processes"] if pr["followed"]}
    assert {r["pid"] for r in res} <= followed, tree["processes"]


_THREADS = r'''
import json, os, signal, threading, time

def blocked(pid, tid):
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        return next(int(ln.split()[1], 16) for ln in f if ln.startswith("SigBlk:"))

deadline = time.time() + 30
while not any(t.name == "cgtool-record-watchdog" for t in threading.enumerate()) and time.time() < deadline:
    time.sleep(0.05)
me, launcher = os.getpid(), os.getppid()
mine = {t.name: blocked(me, t.native_id) for t in threading.enumerate()}
theirs = [blocked(launcher, int(t)) for t in os.listdir(f"/proc/{launcher}/task") if int(t) != launcher]
print("THREADS " + json.dumps({"mine": mine, "launcher_main": blocked(launcher, launcher), "launcher": theirs}))
'''


@pytest.mark.subprocess
def test_the_recorders_threads_leave_signals_to_the_programs(tmp_path: Path, record_fake: Any) -> None:
    """A signal sent to a process goes to any one of its threads that does not block it, and Python
    runs its handlers only in the main thread: every thread of the recorder (the writer, the
    --hang-after watchdog; the launcher's process watcher) blocks the signals that come from outside,
    so SIGTERM reaches a main thread waiting in C (a pool worker in its queue's lock) as it would
    without the recorder. The masks are the kernel's (/proc/PID/task/TID/status)."""
    import signal

    prog = tmp_path / "threads.py"
    prog.write_text(_THREADS)
    p, _ = record_fake(["python", prog], extra=["--hang-after", "30"])
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("THREADS "))
    got = json.loads(line[len("THREADS "):])

    def blocks(mask: int, sig: signal.Signals) -> bool:
        return bool(mask >> (sig - 1) & 1)

    outside = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGCHLD]
    recorder = {n: m for n, m in got["mine"].items() if n.startswith("cgtool-record-")}
    assert set(recorder) == {"cgtool-record-writer", "cgtool-record-watchdog"}, got
    for name, mask in [*recorder.items(), *(("launcher thread", m) for m in got["launcher"])]:
        assert all(blocks(mask, s) for s in outside), (name, hex(mask))
        assert not blocks(mask, signal.SIGSEGV) and not blocks(mask, signal.SIGPIPE), (name, hex(mask))
    assert got["launcher"], "the launcher watches the program's processes from a thread"
    for mask in (got["mine"]["MainThread"], got["launcher_main"]):  # the ones that handle them
        assert not any(blocks(mask, s) for s in outside), hex(mask)


def test_a_fork_holds_outside_signals_until_each_side_is_set_up(monkeypatch: Any) -> None:
    """``os.fork`` in a recorded process: the forking thread blocks the signals that come from
    outside (CPython drops, in a child, those its handlers had not run for: a pool worker stopped by
    ``Pool.terminate()`` before it first ran outlived it); the parent and the child (even when its
    recording cannot be set up) get their mask back, and a signal that came meanwhile is then
    delivered, not lost. The masks are the kernel's (``pthread_sigmask``)."""
    import signal
    import threading

    from cgtool.capture.record import process

    def broken_setup(*a: Any) -> None:
        raise OSError("no room")

    rec = types.SimpleNamespace(tracker=types.SimpleNamespace(lock=threading.RLock()), out_dir="/nonexistent/p1",
                                info=types.SimpleNamespace(argv=["prog"]), after_fork_child=broken_setup)
    monkeypatch.setattr(process, "current", rec)
    got: list[int] = []
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    old_handler = signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
    try:
        for after in (process._after_fork_parent, process._after_fork_child):
            process._before_fork()
            during = signal.pthread_sigmask(signal.SIG_BLOCK, [])
            assert {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1} <= during
            assert signal.SIGSEGV not in during and signal.SIGPIPE not in during
            signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)  # to this thread: it blocks it
            for _ in range(100):  # Python code runs: a handler would run here if the signal came
                pass
            assert got == [], after.__name__
            after()
            for _ in range(100):
                pass
            assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before, after.__name__
            assert got == [signal.SIGUSR1], after.__name__  # delivered once the mask is back
            got.clear()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # whatever failed: the worker's mask as it was
        signal.signal(signal.SIGUSR1, old_handler)
