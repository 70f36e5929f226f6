"""`cgtool record` says where each process stood when it was stopped or stalled (CPU, stand-in CUPTI).

The program below plays the NCCL-in-graph teardown hang: it captures a graph whose second kernel is
an NCCL all-reduce, replays it 7 times, then calls ``torch.distributed.destroy_process_group()``,
which (in a stand-in torch installed as a package) never returns. `cgtool record --hang-after 1`
runs it; once the stall is dumped the test sends SIGTERM to cgtool, as `timeout` would. Expected
values come from the program itself (its RESULT line, the line numbers of its marked lines), and the
stack dumps are checked by parsing them independently of cgtool's reader.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_cupti_abi import RECORD_DRIVER, fake_site

from cgtool.artifacts import stacks

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process trees are followed on Linux")

ROOT = Path(__file__).resolve().parents[1]

PROG = '''\
import json, os
from cupti import cupti as fake, capture, replay
import torch.distributed as dist

fake.kernel_names[100] = ["gemm_kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
capture(fake, 100, [1, 2], 11000)  # LINE_CAPTURE
for _ in range(7):
    replay(fake, 11000)
print("RESULT " + json.dumps({"pid": os.getpid(), "replays": 7}), flush=True)
dist.destroy_process_group()  # LINE_DESTROY
'''

#: A stand-in torch: destroy_process_group blocks as NCCL's teardown does under a live graph.
TORCH = {
    "torch/__init__.py": "class cuda:\n    @staticmethod\n    def is_initialized():\n        return False\n",
    "torch/distributed/__init__.py": ("import time\n\n\ndef destroy_process_group(group=None):\n"
                                      "    while True:\n        time.sleep(0.05)\n"),
}


def _line(src: str, mark: str) -> int:
    return next(i for i, ln in enumerate(src.splitlines(), 1) if mark in ln)


def _wait_for(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.subprocess
def test_a_hanging_teardown_is_dumped_and_explained(tmp_path: Path) -> None:
    site = fake_site(str(tmp_path / "site-packages"))  # a library's folder: not the program's frames
    for rel, text in TORCH.items():
        (Path(site) / rel).parent.mkdir(parents=True, exist_ok=True)
        (Path(site) / rel).write_text(text)
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    out = tmp_path / "rec"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, str(ROOT)]), CGTOOL_RECORD_SUBSCRIBER="cupti-python",
               COLUMNS="200")
    p = subprocess.Popen([sys.executable, "-c", RECORD_DRIVER, "record", "-o", str(out), "--hang-after", "1", "--",
                          "python", str(prog)], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        def stalled() -> bool:
            return any(f.read_text().startswith("Timeout") for f in out.glob("p*/stacks.txt") if f.exists())
        assert _wait_for(stalled, 60), "no stall dumped"
        p.send_signal(signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    res = [json.loads(ln[7:]) for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(res) == 1, (stdout, stderr[-3000:])
    pid, replays = res[0]["pid"], res[0]["replays"]
    folder = out / f"p{pid}"
    idx = json.loads((folder / "index.json").read_text())
    st = idx["stopping"]

    # the dumps, read here with a parser of our own: a stall (Timeout line) then the signal's dump, each
    # with the main thread's innermost program frame on the destroy line
    text = (folder / "stacks.txt").read_text()
    blocks = re.split(r"^(?=Timeout \()", text, flags=re.MULTILINE)
    assert blocks[0] == "" and len(blocks) >= 2
    destroy_line = _line(PROG, "LINE_DESTROY")
    main_frames = re.findall(r"Thread " + st["main_thread"] + r" \(most recent call first\):\n((?:  File .*\n)+)",
                             text.replace("Current thread", "Thread"))
    assert len(main_frames) >= 2  # the stall, then SIGTERM
    for frames in main_frames:
        files = re.findall(r'File "(.*)", line (\d+) in (\S+)', frames)
        prog_frames = [(f, int(n), fn) for f, n, fn in files if f == str(prog)]
        assert prog_frames[0][1] == destroy_line
        inner = files[: files.index(next(x for x in files if x[0] == str(prog)))]
        assert inner[-1][2] == "destroy_process_group"  # cgtool's wrapper, then torch's own
        assert any("site-packages/torch/distributed" in f and fn == "destroy_process_group" for f, _, fn in inner)

    # cgtool's reader agrees
    dumps = stacks.read(folder)
    assert [d.cause for d in dumps][:1] == ["timeout"] and dumps[-1].cause == "signal"
    at = stacks.stopped_at(dumps[-1].thread(st["main_thread"]))
    assert at.site == f"{prog}:{destroy_line}" and at.calling == "destroy_process_group"

    # the index: the call, the live graph that holds an NCCL kernel, the last graph launched
    d = st["destroy_process_group"]
    assert d["site"] == f"{prog}:{destroy_line}" and d["returned"] is False
    assert [(g["seq"], g["nccl_kernels"], g["replays"]) for g in d["live_nccl_graphs"]] == [(0, 1, replays)]
    cap = idx["graphs"][0]["captured_at"]  # the stand-in's capture() is where the "capture" began
    assert d["live_nccl_graphs"][0]["captured_at"] == cap
    assert st["last_graph"]["seq"] == 0 and st["last_graph"]["replays"] == replays
    assert st["last_graph"]["last_nccl_kernel"].startswith("ncclDevKernel_AllReduce")

    # the summary names the stopping line, the last graph and its replays, and the fix
    flat = " ".join(stderr.split())
    assert f"stopped in destroy_process_group (prog.py:{destroy_line}), last graph #0 replay {replays}" in flat, flat
    assert "no progress for 1 s" in flat
    assert f"graph #0 (captured at {os.path.basename(cap)}, 1 NCCL kernel(s))" in flat
    assert "g.reset()" in flat and "did not return" in flat


def test_parse_splits_dumps_and_finds_the_program_line() -> None:
    text = ('Thread 0x00000000000000aa (most recent call first):\n'
            '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n\n'
            'Current thread 0x00000000000000bb (most recent call first):\n'
            '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2099 in destroy_process_group\n'
            '  File "/home/u/prog.py", line 31 in main\n'
            '  File "/home/u/prog.py", line 40 in <module>\n'
            'Timeout (0:00:30)!\n'
            'Thread 0x00000000000000bb (most recent call first):\n'
            '  File "/home/u/prog.py", line 12 in step\n'
            'Current thread 0x00000000000000bb (most recent call first):\n'
            '  File "<frozen importlib._bootstrap>", line ??? in _load\n')
    d = stacks.parse(text)
    assert [x.cause for x in d] == ["signal", "timeout", "signal"]
    assert d[0].thread("0x00000000000000bb") is d[0].threads[1]
    at = stacks.stopped_at(d[0].threads[1])
    assert (at.site, at.function, at.calling) == ("/home/u/prog.py:31", "main", "destroy_process_group")
    assert at.text() == "destroy_process_group (prog.py:31)"
    assert stacks.stopped_at(d[2].threads[0]).site is None and d[2].threads[0].frames[0].line is None
    # no frame of the program: the innermost frame, as faulthandler wrote it
    assert stacks.stopped_at(d[2].threads[0]).text() == "<frozen importlib._bootstrap>:??? (no frame of the program)"


def test_only_stack_files_with_a_dump_stay(tmp_path: Path) -> None:
    from cgtool.capture.record.stops import STACK_FILE, drop_empty_stack_files

    sizes = {"p1": 0, "p2": 17, "p3": None}  # None: no file at all
    for name, size in sizes.items():
        (tmp_path / name).mkdir()
        if size is not None:
            (tmp_path / name / STACK_FILE).write_bytes(b"x" * size)
    (tmp_path / "index.json").write_text("{}")
    assert drop_empty_stack_files(tmp_path) == sum(1 for s in sizes.values() if s == 0)
    assert sorted(p.parent.name for p in tmp_path.glob(f"*/{STACK_FILE}")) == [n for n, s in sizes.items() if s]
    assert drop_empty_stack_files(tmp_path / "missing") == 0


@pytest.mark.parametrize(("argv", "launcher"), [
    (["/venv/bin/python3", "-m", "torch.distributed.run", "--nproc-per-node", "2", "prog.py"], True),
    (["python3", "-u", "-X", "dev", "-m", "torch.distributed.launch", "prog.py"], True),
    (["python3", "-mtorch.distributed.run", "prog.py"], True),
    (["/venv/bin/python3", "/venv/bin/torchrun", "--nproc-per-node", "2", "prog.py"], True),
    (["python3", "/venv/lib/python3.12/site-packages/torch/distributed/run.py", "prog.py"], True),
    (["python3", "-u", "prog.py", "-m", "torch.distributed.run"], False),  # the program's own arguments
    (["python3", "-m", "cgtool", "trace", "torchrun"], False),
    (["python3", "-X", "torchrun", "prog.py"], False),
    (["python3"], False),
])
def test_torchruns_agent_is_told_from_its_command_line(argv: list[str], launcher: bool) -> None:
    from cgtool.capture.record.stops import is_launcher

    assert is_launcher(argv) is launcher


#: A stand-in torchrun: its module takes seconds to import (torch does), then it runs the program as
#: rank 0, waits for it, and passes SIGTERM on to it (as torchrun stops its workers).
RUN_PY = '''\
import os, signal, subprocess, sys, time
time.sleep(1.5)  # torch's import: sys.argv[0] is "-m" and __main__ is not this module yet
if __name__ == "__main__":
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    child = subprocess.Popen([sys.executable, sys.argv[-1]], env=env)
    signal.signal(signal.SIGTERM, lambda s, f: child.send_signal(signal.SIGTERM))
    sys.exit(child.wait())
'''


@pytest.mark.subprocess
def test_torchruns_agent_is_not_watched_but_its_rank_is(tmp_path: Path) -> None:
    site = fake_site(str(tmp_path / "site-packages"))
    for rel, text in {**TORCH, "torch/distributed/run.py": RUN_PY}.items():
        (Path(site) / rel).parent.mkdir(parents=True, exist_ok=True)
        (Path(site) / rel).write_text(text)
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    out = tmp_path / "rec"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, str(ROOT)]), CGTOOL_RECORD_SUBSCRIBER="cupti-python")
    p = subprocess.Popen([sys.executable, "-c", RECORD_DRIVER, "record", "-o", str(out), "--hang-after", "1", "--",
                          "python", "-m", "torch.distributed.run", str(prog)], env=env, cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def dumps() -> dict[str, str]:
            return {f.parent.name: f.read_text() for f in out.glob("p*/stacks.txt") if f.exists()}
        assert _wait_for(lambda: any(t.startswith("Timeout") for t in dumps().values()), 60), "no stall dumped"
        time.sleep(3)  # the agent, had it been watched, would have had 3 s more than --hang-after to dump
        stalled = {k for k, t in dumps().items() if "Timeout (" in t}
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    tree = json.loads((out / "index.json").read_text())
    procs = {f"p{x['pid']}": x for x in tree["processes"] if x.get("followed")}
    agent = [k for k, x in procs.items() if "torch.distributed.run" in x["argv"]]
    ranks = [k for k in procs if k not in agent]
    assert len(agent) == 1 and len(ranks) == 1, procs
    assert stalled == set(ranks)
