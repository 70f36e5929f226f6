"""The README's GPU commands, run as shown (on the GPU machine: `pytest -m gpu`).

tests/test_docs.py runs the README's other commands on the CPU and these as far as a machine
without a GPU goes; here each runs in full, in a folder where the README's relative paths resolve,
and what it wrote is checked. `-o -` puts the export and the trace on standard output.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from docs_blocks import ROOT, Command, readme_gpu_commands  # noqa: E402

pytestmark = pytest.mark.gpu

#: What each README command writes (relative to the folder it runs in).
WRITES = {"capture": "cgtool-out/forkjoin/graph.json", "export": "gpt2.json", "trace": "fj.json.gz",
          "bench": "chain.json", "record": "rec/index.json"}


def _workdir(tmp_path: Path) -> Path:
    for name in ("tests", "sample_workloads"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def _run(words: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CGTOOL_"))}
    env.update(COLUMNS="110", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "cgtool", *words[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=400)


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


@pytest.mark.parametrize("c", readme_gpu_commands(), ids=lambda c: c.words[1])
def test_readme_gpu_command(c: Command, tmp_path: Path) -> None:
    if c.words[1] in ("trace", "record"):
        pytest.importorskip("cupti")
    cwd = _workdir(tmp_path)
    p = _run(c.words, cwd)
    assert p.returncode == 0, f"{c.where}: {c.text} exited {p.returncode}\n{p.stderr[-3000:]}"
    written = cwd / WRITES[c.words[1]]
    assert written.is_file(), f"{c.text} did not write {written}"
    doc = _load(written)
    if c.words[1] == "record":
        # the README shows the summary's graph table for this program: 4 graphs at one line
        assert sum(1 for p in doc["processes"] if p["graphs"]) == 1
        table = [ln for ln in p.stderr.splitlines() if re.match(r"│ #\d", ln)]
        assert len(table) == 4 and all("server_runner.py:59" in ln for ln in table), p.stderr[-3000:]
    elif c.words[1] == "trace":
        assert any(e.get("cat") == "kernel" and "channel" in e.get("args", {}) for e in doc["traceEvents"])
    elif c.words[1] in ("capture", "export"):
        assert doc["nodes"]


@pytest.mark.parametrize("sub", ["export", "trace"])
def test_dash_writes_standard_output(sub: str, tmp_path: Path) -> None:
    """`-o -`: the JSON alone on stdout, what the command says about it on stderr."""
    if sub == "trace":
        pytest.importorskip("cupti")
    cwd = _workdir(tmp_path)
    p = _run(["cgtool", sub, "sample_workloads/forkjoin.py", "-o", "-"], cwd)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["nodes"] if sub == "export" else doc["traceEvents"]
    assert sorted(x.name for x in cwd.iterdir()) == ["sample_workloads", "tests"], "wrote beside `-`"
