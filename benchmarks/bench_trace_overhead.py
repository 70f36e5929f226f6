"""Replay time with CUPTI tracing on against off, same graph, one process per mode.

    PYTHONPATH=. python3 benchmarks/bench_trace_overhead.py   (GPU machine, cupti-python needed)

For each workload: capture, then 200 replays timed by one event pair with tracing off, then the
same under cgtool's CUPTI collector (kernel, memcpy, memset and runtime activity), alternating 5
rounds. Prints per-replay µs and the ratio. A fresh process per workload, since CUPTI stays
attached to a process once enabled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, torch
from cgtool.capture.entrypoint import parse_target
from cgtool.capture.runner import capture_workload
from cgtool.capture.cupti_trace import CuptiCollector
cap = capture_workload(parse_target(sys.argv[1]), [], check=False)
def timed(n=200):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        cap.replay()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) * 1000 / n
for _ in range(20): cap.replay()
off, on = [], []
for _ in range(5):
    off.append(timed())
    with CuptiCollector() as c:
        on.append(timed())
    n = len(c.records)
print("@@" + json.dumps({"off": statistics.median(off), "on": statistics.median(on), "records": n}))
"""


def main() -> None:
    for w in ["chain", "forkjoin", "transformer_block", "gpt2_decode"]:
        r = subprocess.run([sys.executable, "-c", CHILD, f"sample_workloads/{w}.py"], capture_output=True, text=True,
                           env={**os.environ})
        line = [x for x in r.stdout.splitlines() if x.startswith("@@")]
        if not line:
            print(f"  {w}: failed: {r.stderr.strip()[-300:]}")
            continue
        d = json.loads(line[-1][2:])
        print(f"  {w:18s} off {d['off']:9.2f} µs/replay   on {d['on']:9.2f} µs/replay   "
              f"ratio {d['on'] / d['off']:.3f}   ({d['records']} records in the last traced block)")


if __name__ == "__main__":
    main()
