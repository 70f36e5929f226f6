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
