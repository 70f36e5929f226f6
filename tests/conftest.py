import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
# rich reads the width once, when a console is made: tables render at 120 columns in tests.
os.environ.setdefault("COLUMNS", "120")


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _gpu_count() -> int:
    if not _has_cuda():
        return 0
    import torch

    return int(torch.cuda.device_count())


# ------------------------------------------------------------ tests that start processes
# Every test that starts a process carries the `subprocess` marker: .ci/run re-runs those 20 times
# (a test that starts processes must pass 20 runs in 20). The marker is checked, not trusted: each
# way a process starts (subprocess, multiprocessing, os.fork) is counted here, and a test that
# starts one without the marker fails with what to add. Not checked: the `gpu` and `gpu2` tests (run
# on the GPU machines, not by .ci/run) and the `browser` tests (one Chromium per page, its answer a file).
_started = [0]


def _count_starts() -> None:
    import multiprocessing.util

    def counted(fn):
        def wrapper(*a, **kw):
            _started[0] += 1
            return fn(*a, **kw)
        return wrapper

    subprocess.Popen._execute_child = counted(subprocess.Popen._execute_child)  # type: ignore[method-assign]
    multiprocessing.util.spawnv_passfds = counted(multiprocessing.util.spawnv_passfds)
    if hasattr(os, "fork"):
        os.fork = counted(os.fork)


# matplotlib (the `report` extra) builds its font cache on first use by running `fc-list`: build it
# now, before any test counts the processes it starts.
try:
    import matplotlib.font_manager  # noqa: F401
except ImportError:
    pass

_count_starts()


@pytest.fixture(autouse=True)
def _marked_if_it_starts_a_process(request):
    before = _started[0]
    yield
    marked = any(request.node.get_closest_marker(m) is not None for m in ("subprocess", "gpu", "gpu2", "browser"))
    if _started[0] != before and not marked:
        pytest.fail(f"{request.node.nodeid} started {_started[0] - before} process(es) without the "
                    "`subprocess` marker: add @pytest.mark.subprocess (.ci/run re-runs those 20 times)",
                    pytrace=False)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject.toml): one worker per core, but none beside the GPU tests on a machine
    with a GPU (they time it) and none for a run of the GPU tests alone."""
    if "gpu" in (config.option.markexpr or "").replace("not gpu", "") or _has_cuda():
        return 0
    return None  # xdist's own count: the cores


def pytest_addoption(parser):
    # `--repeat N` runs each selected test N times (.ci/run: the tests that start processes, 20 times):
    # a parametrization, so every run is reported and -x stops at the first failure.
    parser.addoption("--repeat", type=int, default=1, metavar="N", help="run each test N times")


def pytest_generate_tests(metafunc):
    n = metafunc.config.getoption("repeat")
    if n > 1:
        metafunc.fixturenames.append("_repeat")
        metafunc.parametrize("_repeat", range(n), ids=lambda i: f"run{i + 1}of{n}")


def pytest_collection_modifyitems(config, items):
    n = _gpu_count()
    skip = pytest.mark.skip(reason="needs a CUDA GPU with torch built for CUDA (run on the GPU machine)")
    skip2 = pytest.mark.skip(reason=f"needs 2 CUDA GPUs (this machine has {n}): run on a 2-GPU machine")
    for item in items:
        if "gpu" in item.keywords and n == 0:
            item.add_marker(skip)
        elif "gpu2" in item.keywords and n < 2:
            item.add_marker(skip2)


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def run_cli(tmp_path, monkeypatch):
    """Run `cgtool ...` in this process through ``main(argv)``: (exit code, stdout, stderr).

    Most CLI tests use this (no interpreter start per call); ``run_cli_subprocess`` keeps a few
    end-to-end runs of ``python -m cgtool``."""
    from cgtool.cli.main import main

    def run(*args, cwd=None, env=None, input=None):
        out, err = io.BytesIO(), io.BytesIO()
        wout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
        werr = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
        with monkeypatch.context() as m:
            m.chdir(cwd or tmp_path)
            if env is not None:
                for k in set(os.environ) - set(env):
                    m.delenv(k)
                for k, v in env.items():
                    m.setenv(k, v)
            m.setattr(sys, "stdout", wout)
            m.setattr(sys, "stderr", werr)
            m.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((input or "").encode()), encoding="utf-8"))
            m.setattr(sys, "argv", ["cgtool", *map(str, args)])
            try:
                main([str(a) for a in args])
                rc = 0
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            wout.flush()
            werr.flush()
        result = rc, out.getvalue().decode(), err.getvalue().decode()
        wout.detach(), werr.detach()  # the wrappers must not close the buffers
        return result

    return run


@pytest.fixture
def run_cli_subprocess(tmp_path):
    """Run `python -m cgtool ...` in a subprocess: (exit code, stdout, stderr)."""

    def run(*args, cwd=None, env=None, input=None):
        env = dict(os.environ if env is None else env)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("COLUMNS", "120")
        r = subprocess.run(
            [sys.executable, "-m", "cgtool", *map(str, args)],
            capture_output=True, text=True, cwd=cwd or tmp_path, env=env, input=input,
            timeout=600,
        )
        return r.returncode, r.stdout, r.stderr

    return run


# ------------------------------------------------ `cgtool record` on the stand-in CUPTI (no GPU)
@pytest.fixture
def fake(monkeypatch):
    """The stand-in CUPTI (tests/fake_cupti_abi.py) as cupti-python in this process, with stand-ins
    for the graph reads and export; the recorder subscribes through cupti-python."""
    import types

    from fake_cupti_abi import FakeCupti, install

    f = FakeCupti()
    pkg = types.ModuleType("cupti")
    pkg.cupti = f  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupti", pkg)
    monkeypatch.setenv("CGTOOL_RECORD_SUBSCRIBER", "cupti-python")
    install(f, monkeypatch.setattr)
    return f


def _stuck_tree(p: subprocess.Popen, out: Path) -> str:
    """A recorded program that did not end in time: where each of its processes is. SIGQUIT to its
    session makes each recorded process write its threads' stacks into its folder's stacks.txt (the
    recorder's faulthandler), then SIGKILL ends them; the processes still there, their stacks and
    what the launcher printed are the failure's message."""
    import signal
    import time

    ps = subprocess.run(["ps", "-s", str(p.pid), "-o", "pid,ppid,stat,etimes,args"], capture_output=True,
                        text=True).stdout
    for sig in (signal.SIGQUIT, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        time.sleep(2.0 if sig == signal.SIGQUIT else 0.0)
    stdout, stderr = p.communicate()
    stacks = "\n".join(f"--- {f.relative_to(out)}\n{f.read_text(errors='replace')[-4000:]}"
                        for f in sorted(out.glob("*/stacks.txt")))
    return (f"the recorded program did not end in time; its processes then:\n{ps}\n"
            f"their stacks (SIGQUIT):\n{stacks or '(none written)'}\nstderr:\n{stderr[-3000:]}")


@pytest.fixture
def record_fake(tmp_path):
    """``record_fake(PROGRAM, ...)``: `cgtool record -o TMP/rec -- PROGRAM` in a subprocess, every
    recorded process on the stand-in CUPTI: (the finished process, TMP/rec). The program's processes
    leave their results with ``from cupti import result; result(...)``, read back by
    ``record_fake.results()`` (one file per call: processes never share a pipe for results)."""
    from fake_cupti_abi import RECORD_DRIVER, RESULTS_ENV, fake_site, read_results

    results = tmp_path / "results"
    results.mkdir()

    def run(program, *, slow_writer_s=0.0, extra=(), timeout=180, pythonpath=()):
        site = fake_site(str(tmp_path / "site"), slow_writer_s)
        out = tmp_path / "rec"
        root = str(Path(__file__).resolve().parents[1])
        path = os.pathsep.join([site, *map(str, pythonpath), root]
                               + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
        env = dict(os.environ, PYTHONPATH=path, CGTOOL_RECORD_SUBSCRIBER="cupti-python", COLUMNS="200",
                   **{RESULTS_ENV: str(results)})
        args = [sys.executable, "-c", RECORD_DRIVER, "record", "-o", str(out), *extra, "--", *map(str, program)]
        with subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=tmp_path, start_new_session=True) as p:
            stuck = None
            try:
                stdout, stderr = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                stuck = _stuck_tree(p, out)
        if stuck is not None:
            pytest.fail(stuck, pytrace=False)
        return subprocess.CompletedProcess(args, p.returncode, stdout, stderr), out

    run.results = lambda: read_results(str(results))  # type: ignore[attr-defined]
    return run
