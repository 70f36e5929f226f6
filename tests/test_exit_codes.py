"""Exit codes CI can trust: every code of the table (0, 1, 2, 3, 4, 70, 130, 141, 143) reached
through every way a command can end (a return, ``typer.Exit``, a ``CgtoolError``, ``SystemExit``,
Ctrl-C and SIGTERM sent to the real process, a closed output pipe, a failed child under torchrun,
a failed step of the demo), each run as a real ``python -m cgtool`` process.

torch is not needed: the torchrun relaunch runs a stand-in ``torch.distributed.run`` (made here,
on the parent's PYTHONPATH only) that starts the ranks as torchrun does (RANK, WORLD_SIZE, ...) and,
like torchrun, exits 1 when any rank fails."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
GRAPH = DATA / "forkjoin" / "graph.json"
TRACE = DATA / "forkjoin_trace_mc1" / "trace.json.gz"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CGTOOL_DEBUG", "GITHUB_STEP_SUMMARY")}
    env.update(PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""), COLUMNS="120", **extra)
    return env


def cgtool(*args: object, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120,
           code: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m cgtool ARGS`` (or ``python -c CODE``) in a fresh process."""
    cmd = [sys.executable, "-c", code] if code is not None else [sys.executable, "-m", "cgtool", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env or _env(), timeout=timeout)


def sigint_default() -> None:
    """In a child before it runs: SIGINT at its default, as in a terminal. A test run started in the
    background by a shell ignores SIGINT, and its children would inherit that (cgtool keeps an
    ignored signal ignored), so Ctrl-C would not stop them."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(*args: object, cwd: Path, env: dict[str, str] | None = None, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "cgtool", *map(str, args)], cwd=cwd, env=env or _env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default, **kw)  # type: ignore[call-overload]


def _one_paragraph(err: str) -> None:
    lines = [x for x in err.strip().split("\n") if x.strip() and "warning:" not in x]
    assert lines and lines[-1].startswith("cgtool: ") and "Traceback" not in err, err


# ------------------------------------------------------------------------------------ the table

@pytest.mark.subprocess
def test_a_return_is_0_and_a_failed_check_is_1(tmp_path):
    assert cgtool("topo", GRAPH, cwd=tmp_path).returncode == 0
    assert cgtool("--version", cwd=tmp_path).returncode == 0  # typer.Exit() raised by an eager option
    p = cgtool("deps", TRACE, "--fail-on-fake", "0", cwd=tmp_path)
    assert p.returncode == 1, p.stderr


@pytest.mark.subprocess
def test_usage_errors_are_2(tmp_path):
    p = cgtool("topo", GRAPH, "--no-such-option", cwd=tmp_path)  # click's own usage error
    assert p.returncode == 2 and "No such option" in p.stderr
    p = cgtool("topo", tmp_path / "missing.json", cwd=tmp_path)  # a CgtoolError
    assert p.returncode == 2
    _one_paragraph(p.stderr)
    p = cgtool("record", "--", "no_such_program.py", cwd=tmp_path)  # record's own path, before typer loads
    assert p.returncode == 2
    _one_paragraph(p.stderr)


@pytest.mark.subprocess
def test_capture_failed_is_3_and_invalid_input_is_4(tmp_path):
    (tmp_path / "w.py").write_text("def setup():\n    raise RuntimeError('no')\n")
    p = cgtool("capture", "w.py", cwd=tmp_path)
    assert p.returncode == 3, p.stderr
    _one_paragraph(p.stderr)
    (tmp_path / "bad.json").write_text('{"exec_graph_id": 1, "nodes": [')
    p = cgtool("topo", tmp_path / "bad.json", cwd=tmp_path)
    assert p.returncode == 4
    _one_paragraph(p.stderr)


@pytest.mark.subprocess
def test_a_bug_is_70_with_one_paragraph(tmp_path):
    code = ("import cgtool.inspect.topo as t\n"
            "def boom(*a, **k):\n    raise ZeroDivisionError('planted')\n"
            "t.analyze = boom\n"
            f"from cgtool.cli.entry import main; main(['topo', {str(GRAPH)!r}])")
    p = cgtool(cwd=tmp_path, code=code)
    assert p.returncode == 70 and "internal error (ZeroDivisionError: planted)" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("args", [["topo", GRAPH], ["dot", GRAPH], ["deps", TRACE, "--json", "-"]])
@pytest.mark.subprocess
def test_a_closed_pipe_is_141(tmp_path, args):
    """`cgtool topo g.json | true`: the reader of the output is gone when cgtool writes."""
    p = start(*args, cwd=tmp_path)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=60) == 141, err
    assert "Traceback" not in err


@pytest.mark.subprocess
def test_command_results_map_to_one_status():
    """The rules of the one path (``_guard.exit_status``), against Python's own ``sys.exit``."""
    from cgtool.cli._guard import exit_status

    for code in (None, 0, 1, 2, 3, 4, 70, 130, 255):
        r = subprocess.run([sys.executable, "-c", f"import sys; sys.exit({code!r})"])
        assert exit_status(code) == r.returncode
    assert exit_status(-15) == 143 and exit_status(-9) == 137  # a child killed by a signal, as a shell says
    assert exit_status(256) == 1  # not cut to its low byte (0)


# ------------------------------------------------------------------------------ Ctrl-C, SIGTERM

@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    f = tmp_path / "never.fifo"
    os.mkfifo(f)
    return f


@pytest.mark.parametrize("sig, code, said", [(signal.SIGINT, 130, "cgtool: interrupted."),
                                              (signal.SIGTERM, 143, "cgtool: terminated (SIGTERM).")])
@pytest.mark.subprocess
def test_a_signal_while_waiting_for_a_fifo_writer(tmp_path, fifo, sig, code, said):
    p = start("deps", fifo, cwd=tmp_path)
    assert p.stderr is not None
    assert "waiting for a writer" in p.stderr.readline()  # it is blocked in open() now
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    assert p.returncode == code and said in err and "Traceback" not in err, (p.returncode, err)


@pytest.fixture(scope="module")
def big_graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 100,000-node graph (each node depends on two of the 50 before it): topo analyses it for
    several seconds on the CPU machine."""
    import random

    rnd = random.Random(1)
    n = 100_000
    deps: list[list[int]] = [[] for _ in range(n)]
    dents: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        for j in sorted({rnd.randrange(max(0, i - 50), i) for _ in range(2)}):
            deps[i].append(j)
            dents[j].append(i)
    nodes = [{"index": i, "node_type": "kernel", "tools_id": (1 << 32) | i, "graph_id": 1, "node_id": i,
              "kernel_name": f"k{i % 50}", "dependencies": deps[i], "dependents": dents[i]} for i in range(n)]
    p = tmp_path_factory.mktemp("big") / "graph.json"
    p.write_text(json.dumps({"exec_graph_id": 1, "nodes": nodes}))
    return p


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.subprocess
def test_a_signal_mid_analysis(tmp_path, big_graph, sig, code):
    out = tmp_path / "t.json"
    p = start("topo", big_graph, "--json", out, cwd=tmp_path)
    while _cpu_seconds(p.pid) < 2.0:  # reading the file takes well under a second of it
        assert p.poll() is None, p.communicate()
        time.sleep(0.05)
    p.send_signal(sig)
    t0 = time.monotonic()
    _, err = p.communicate(timeout=60)
    assert p.returncode == code, (p.returncode, err)
    assert time.monotonic() - t0 < 10 and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".t.json.*"))  # no output, no temporary file left


@pytest.mark.subprocess
def test_an_ignored_sigterm_stays_ignored(tmp_path, fifo):
    """A parent that set SIGTERM to be ignored (nohup-like) keeps it so: cgtool adds no handler."""
    p = subprocess.Popen([sys.executable, "-c", "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                          f"from cgtool.cli.entry import main; main(['deps', {str(fifo)!r}])"],
                         cwd=tmp_path, env=_env(), stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    assert p.stderr is not None and "waiting for a writer" in p.stderr.readline()
    p.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert p.poll() is None
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=30) == 130


# --------------------------------------------------------------------------- children: torchrun

FAKE_TORCHRUN = '''\
"""A stand-in for torch.distributed.run: starts N ranks as torchrun does and, like torchrun, exits 1
when any rank fails (0 otherwise). FAKE_TORCHRUN_KILL=R kills rank R at once (SIGKILL: no status);
FAKE_TORCHRUN_HANG=1 runs no rank and waits for a signal (SIGTERM and SIGINT stop it, as torchrun)."""
import json, os, signal, subprocess, sys, time

here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
args = sys.argv[1:]
n = int(next(a for a in args if a.startswith("--nproc-per-node=")).split("=")[1])
cmd = args[next(i for i, a in enumerate(args) if a == "-m"):]
log = os.environ["FAKE_TORCHRUN_LOG"]
if os.environ.get("FAKE_TORCHRUN_HANG"):  # its handlers in place before the log says it runs
    def stop(signum, frame):
        sys.exit(1)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
with open(log + ".part", "w") as f:  # renamed when complete: the test polls for the log
    json.dump({"argv": args, "pid": os.getpid(), "status_dir": os.environ.get("CGTOOL_RANK_STATUS_DIR"),
               "nccl_nvls": os.environ.get("NCCL_NVLS_ENABLE")}, f)
os.replace(log + ".part", log)
if os.environ.get("FAKE_TORCHRUN_HANG"):
    while True:
        time.sleep(0.1)
env = dict(os.environ)  # the ranks see the real environment, without this stand-in torch
env["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                    if p and os.path.abspath(p) != here)
ranks = [subprocess.Popen([sys.executable, *cmd], env={**env, "RANK": str(r), "LOCAL_RANK": str(r),
                                                       "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n)})
         for r in range(n)]
kill = os.environ.get("FAKE_TORCHRUN_KILL")
if kill is not None:
    ranks[int(kill)].kill()
codes = [p.wait() for p in ranks]
sys.exit(1 if any(codes) else 0)
'''


@pytest.fixture
def torchrun(tmp_path: Path) -> tuple[Path, Path]:
    """(the folder to put first on PYTHONPATH, the log the stand-in writes)."""
    d = tmp_path / "fake_torch"
    (d / "torch" / "distributed").mkdir(parents=True)
    (d / "torch" / "__init__.py").write_text('"""A stand-in torch: only torch.distributed.run."""\n')
    (d / "torch" / "distributed" / "__init__.py").write_text("")
    (d / "torch" / "distributed" / "run.py").write_text(FAKE_TORCHRUN)
    return d, tmp_path / "torchrun.json"


def _torchrun_env(torchrun: tuple[Path, Path], **extra: str) -> dict[str, str]:
    env = _env(FAKE_TORCHRUN_LOG=str(torchrun[1]), **extra)
    env["PYTHONPATH"] = str(torchrun[0]) + os.pathsep + env["PYTHONPATH"]
    return env


@pytest.mark.parametrize("command, script, code", [
    ("capture", "def setup():\n    raise RuntimeError('rank failure')\n", 3),  # every rank: capture failed
    ("trace", "def setup():\n    raise RuntimeError('rank failure')\n", 3),
    ("capture", None, 2),  # every rank: no such workload (a usage error)
])
@pytest.mark.subprocess
def test_a_failed_rank_under_torchrun_gives_its_own_code(tmp_path, torchrun, script, code, command):
    target = "w.py" if script else "missing.py"
    if script:
        (tmp_path / "w.py").write_text(script)
    p = cgtool(command, target, "--nproc-per-node", "2", cwd=tmp_path, env=_torchrun_env(torchrun))
    assert p.returncode == code, (p.returncode, p.stderr)
    log = json.loads(torchrun[1].read_text())
    assert "--nproc-per-node=2" in log["argv"] and "--nproc-per-node" not in log["argv"][log["argv"].index("-m"):]
    assert log["nccl_nvls"] == "0" and log["status_dir"] and not Path(log["status_dir"]).exists()  # cleaned up


@pytest.mark.subprocess
def test_a_rank_killed_without_a_status_is_3(tmp_path, torchrun):
    (tmp_path / "w.py").write_text("def setup():\n    raise RuntimeError('x')\n")
    p = cgtool("capture", "w.py", "--nproc-per-node", "2", cwd=tmp_path,
               env=_torchrun_env(torchrun, FAKE_TORCHRUN_KILL="1"))
    assert p.returncode == 3 and "rank 1 ended without an exit status" in p.stderr, p.stderr


def test_rank_status_policy():
    """Which rank's code the job exits with (``RankStatus.exit_code``)."""
    from cgtool.cli._children import RankStatus

    assert RankStatus(2, (0, 0), 0).exit_code() == 0
    assert RankStatus(2, (0, 4), 1).exit_code() == 4
    assert RankStatus(3, (143, 3, 2), 1).exit_code() == 3  # torchrun stopped rank 0 after rank 1 failed
    assert RankStatus(2, (130, 130), 1).exit_code() == 130
    assert RankStatus(2, (0, None), 1).exit_code() == 3
    assert RankStatus(2, (None, None), 1).exit_code() == 3 and "before any" in (RankStatus(2, (None, None), 1).problem() or "")
    assert RankStatus(2, (0, 0), 1).exit_code() == 3  # torchrun failed after every rank succeeded


@pytest.mark.parametrize("sig, code, group", [(signal.SIGTERM, 143, False), (signal.SIGINT, 130, True)])
@pytest.mark.subprocess
def test_a_signal_reaches_torchrun_and_no_child_is_left(tmp_path, torchrun, sig, code, group):
    """SIGTERM to cgtool alone is passed on to torchrun; Ctrl-C, which a terminal sends to the whole
    process group, stops torchrun and cgtool waits for it."""
    (tmp_path / "w.py").write_text("def setup():\n    return lambda: None\n")
    p = start("capture", "w.py", "--nproc-per-node", "2", cwd=tmp_path,
              env=_torchrun_env(torchrun, FAKE_TORCHRUN_HANG="1"), start_new_session=True)
    t0 = time.monotonic()
    while not torchrun[1].exists():
        assert p.poll() is None and time.monotonic() - t0 < 60, p.communicate()
        time.sleep(0.05)
    pid = json.loads(torchrun[1].read_text())["pid"]  # the log is written once its handlers are set
    if group:
        os.killpg(p.pid, sig)
    else:
        p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == code, (p.returncode, err)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.subprocess
def test_nproc_without_torch_is_3(tmp_path):
    """No torch at all (CI's first step): --nproc-per-node names the extra instead of a torchrun failure."""
    code = ("import importlib.util, sys; real = importlib.util.find_spec; "
            "importlib.util.find_spec = lambda n, *a: None if n == 'torch' else real(n, *a); "
            "sys.argv = ['cgtool', 'capture', 'w.py', '--nproc-per-node', '2']; "
            "from cgtool.cli.entry import main; main()")
    (tmp_path / "w.py").write_text("def setup():\n    return lambda: None\n")
    p = cgtool(cwd=tmp_path, code=code)
    assert p.returncode == 3 and "cgtool[gpu]" in p.stderr, p.stderr


# ------------------------------------------------------------------------------ the demo's steps

@pytest.mark.subprocess
def test_the_demo_exits_with_its_failed_steps_code(tmp_path):
    """The demo's GPU path, forced on this machine: its capture step fails (3), and so does the demo."""
    (tmp_path / "w.py").write_text("def setup():\n    raise RuntimeError('demo step failure')\n")
    code = ("import cgtool.capture._deps as d; d.cuda_available = lambda: True; "
            "from cgtool.cli.entry import main; main(['demo', '--workload', 'w.py'])")
    p = cgtool(cwd=tmp_path, code=code)
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert "step 'capture' exited 3" in p.stderr
