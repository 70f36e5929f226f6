"""Ctrl-C and SIGTERM during ``cgtool capture --nproc-per-node 2`` with the real ``torch.distributed.run``
(skipped without torch; the CPU build is enough): cgtool exits 130 or 143 within seconds and no rank
or torchrun is left running.

The ranks are the real ``cgtool capture`` started by torchrun, which (torch 2.13) puts each rank in a
session of its own: a terminal's Ctrl-C reaches cgtool and torchrun, and torchrun passes it on.
The signal arrives while every rank is inside the workload's code: the workload records its pid and
then sleeps. The sleep is at the workload's top level, which cgtool runs while loading it, before it
checks for CUDA (so the ranks get there on a CPU build too; on a GPU ``setup()`` is reached as well,
as in scripts/gpu/exitcodes.sh)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cgtool.cli._children import INTERRUPT_GRACE_S

pytestmark = [pytest.mark.subprocess,
              pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="needs torch (torch.distributed.run); the CPU build is enough")]

ROOT = Path(__file__).resolve().parent.parent

#: Records the rank's pid and its parent's (torchrun's), then sleeps past any bound below.
SLEEPY = '''\
import json, os, time
_mark = os.path.join(os.environ["SLEEPY_MARKS"], "rank" + os.environ["RANK"])
with open(_mark + ".tmp", "w") as f:
    json.dump({"pid": os.getpid(), "ppid": os.getppid()}, f)
os.replace(_mark + ".tmp", _mark)
time.sleep(120)


def setup():
    time.sleep(120)
    return lambda: None
'''

#: Seconds an interrupted or terminated run may take to exit once every rank has the signal
#: (about 1.5 s measured on the 2-core CPU machine; the rest is room for a loaded CI machine).
SLACK_S = 15.0


def _cmdline(pid: int) -> str:
    """The process's command line; "" when it is gone or a zombie (ended, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return ""
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, IndexError):
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig, to_group, code, bound_s", [
    (signal.SIGINT, True, 130, SLACK_S),  # Ctrl-C: a terminal sends it to the whole process group
    (signal.SIGINT, False, 130, INTERRUPT_GRACE_S + SLACK_S),  # to cgtool alone: it waits its grace first
    (signal.SIGTERM, False, 143, SLACK_S),  # to cgtool alone (a job scheduler, `timeout`)
], ids=["ctrl-c", "sigint-to-cgtool", "sigterm-to-cgtool"])
def test_a_signal_stops_the_real_torchrun_and_its_ranks(tmp_path, sig, to_group, code, bound_s):
    (tmp_path / "sleepy.py").write_text(SLEEPY)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CGTOOL_DEBUG", "GITHUB_STEP_SUMMARY")}
    env.update(PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""), SLEEPY_MARKS=str(marks),
               OMP_NUM_THREADS="1")
    # In a session of its own, with SIGINT at its default, as in a terminal.
    p = subprocess.Popen([sys.executable, "-m", "cgtool", "capture", "sleepy.py", "--nproc-per-node", "2",
                          "-o", str(tmp_path / "out")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    ranks: list[dict[str, int]] = []
    try:
        t0 = time.monotonic()
        while len(ranks) < 2:
            if p.poll() is not None or time.monotonic() - t0 > 120:
                p.kill()
                out, err = p.communicate()
                pytest.fail(f"the ranks did not reach the workload (exit {p.returncode}):\n{err[-3000:]}")
            ranks = [json.loads(m.read_text()) for m in sorted(marks.glob("rank[0-9]"))]
            time.sleep(0.05)
        # Both ranks started by the real torchrun, running cgtool capture.
        launcher = ranks[0]["ppid"]
        assert ranks[1]["ppid"] == launcher and "torch.distributed.run" in _cmdline(launcher)
        assert all("cgtool capture" in _cmdline(r["pid"]) for r in ranks)

        t0 = time.monotonic()
        if to_group:
            os.killpg(p.pid, sig)
        else:
            p.send_signal(sig)
        try:
            out, err = p.communicate(timeout=bound_s + 60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"cgtool still running {bound_s + 60:.0f} s after {sig.name}")
        took = time.monotonic() - t0
        assert p.returncode == code, (p.returncode, err[-3000:])
        assert took < bound_s, f"exit {p.returncode} took {took:.1f} s after {sig.name} (bound {bound_s:.0f} s)"
        said = "cgtool: interrupted." if sig == signal.SIGINT else "cgtool: terminated (SIGTERM)."
        assert said in err.splitlines(), err[-3000:]
        left = [pid for pid in (launcher, *(r["pid"] for r in ranks)) if _cmdline(pid)]
        deadline = time.monotonic() + 2  # an orphan's zombie is reaped by init a moment later
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [pid for pid in left if _cmdline(pid)]
        assert not left, [_cmdline(pid) for pid in left]
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
        for pid in [r["pid"] for r in ranks] + ([ranks[0]["ppid"]] if ranks else []):
            if str(tmp_path) in _cmdline(pid):  # torchrun's and the ranks' command lines name tmp_path
                os.kill(pid, signal.SIGKILL)  # a process this test started that outlived it
