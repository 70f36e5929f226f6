import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU with torch built for CUDA (run on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def run_cli(tmp_path):
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
