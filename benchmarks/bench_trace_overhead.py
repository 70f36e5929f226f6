"""Replay time with CUPTI tracing on against off, per sample workload and per CUPTI setting.

    PYTHONPATH=. python3 benchmarks/bench_trace_overhead.py [--workloads chain,forkjoin,...] [--variants all]
                                                             [--rounds 5] [--json OUT]

GPU machine, cupti-python needed. One fresh process per workload (CUPTI stays attached to a
process once enabled): capture, 20 warm-up replays, then ``--rounds`` rounds, each timing a block
of back-to-back replays (one CUDA event pair around the block; the block is sized to about 50 ms)
with tracing off and then under each CUPTI setting (``cgtool.capture.cupti_trace.CuptiOptions``),
in an order rotated from round to round. Prints per workload the median µs per replay, the ratio
to untraced, the extra µs per GPU item of a replay (the stretch ``deps`` sees in the gaps), and the
records of one traced block; settings CUPTI refused are named.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: name -> CuptiOptions keyword arguments. "default" is what `cgtool trace` uses.
VARIANTS: dict[str, dict[str, object]] = {
    "default": {},
    "before-18": {"kernel_kind": "concurrent", "launches": "runtime"},
    "graph-launches-only": {"launches": "graph"},
    "kernel-kind": {"kernel_kind": "kernel"},
    "hw-trace": {"hw_trace": True},
    "64MiB-buffers": {"buffer_bytes": 64 << 20},
    "device-buffer-64MiB": {"device_buffer_bytes": 64 << 20},
    "latency-timestamps-on": {"latency_timestamps": True},
}

CHILD = r"""
import json, statistics, sys, torch
from cgtool.capture.entrypoint import parse_target
from cgtool.capture.runner import capture_workload
from cgtool.capture.cupti_trace import CuptiCollector, CuptiOptions
target, variants, rounds = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
cap = capture_workload(parse_target(target), [], check=False)
def timed(n):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        cap.replay()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) * 1000 / n
for _ in range(20): cap.replay()
one = timed(20)
n = max(10, min(400, int(50_000 / max(one, 1e-3))))
times = {"off": []}
info = {}
names = list(variants)
for r in range(rounds):
    times["off"].append(timed(n))
    order = names[r % len(names):] + names[:r % len(names)]
    for v in order:
        print(f"round {r} variant {v}", file=sys.stderr, flush=True)
        with CuptiCollector(CuptiOptions(**variants[v])) as c:
            t = timed(n)
        times.setdefault(v, []).append(t)
        gpu = [x for x in c.records if x["kind"] != "launch"]
        info[v] = {"gpu_records": len(gpu), "launch_records": len(c.records) - len(gpu),
                   "graph_records": sum(1 for x in gpu if x.get("graph_id")), "buffers": c.buffers,
                   "dropped": c.dropped, "notes": c.notes, "channels": sorted({x["channel"] for x in gpu})}
res = {"n": n, "median": {k: statistics.median(v) for k, v in times.items()},
       "spread": {k: (min(v), max(v)) for k, v in times.items()}, "info": info}
print("@@" + json.dumps(res), flush=True)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="chain,forkjoin,transformer_block,train_step,moe_layer,gpt2_decode,resnet50")
    ap.add_argument("--variants", default="default",
                    help=f"comma-separated, or 'all': {', '.join(VARIANTS)}")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    names = list(VARIANTS) if a.variants == "all" else a.variants.split(",")
    chosen = {v: VARIANTS[v] for v in names}
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYTHONUNBUFFERED": "1"}
    out: dict[str, object] = {}
    for w in a.workloads.split(","):
        path = ROOT / "sample_workloads" / f"{w}.py"
        todo = dict(chosen)
        while todo:
            r = subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps(todo), str(a.rounds)],
                               capture_output=True, text=True, env=env)
            line = [x for x in r.stdout.splitlines() if x.startswith("@@")]
            if line:
                if r.returncode:
                    print(f"{w}: (the child exited {r.returncode} after printing its figures)")
                break
            steps = [x for x in r.stderr.splitlines() if x.startswith("round ")]
            print(f"{w}: child exited {r.returncode} after {steps[-1] if steps else 'no step'}; "
                  f"stderr ends: {r.stderr.strip()[-300:]!r}")
            bad = steps[-1].split()[-1] if steps else None
            if bad not in todo:
                todo = {}
                break
            print(f"  {w}: again without {bad}")
            del todo[bad]
        if not todo:
            continue
        names_w = list(todo)
        d = json.loads(line[-1][2:])
        out[w] = d
        off = d["median"]["off"]
        lo, hi = d["spread"]["off"]
        print(f"\n{w}: untraced {off:9.2f} µs/replay (rounds {lo:.2f}..{hi:.2f}), blocks of {d['n']} replays")
        for v in names_w:
            on, info = d["median"][v], d["info"][v]
            items = info["graph_records"] / d["n"] if d["n"] else 0
            per = (on - off) / items if items else float("nan")
            lo, hi = d["spread"][v]
            print(f"  {v:24s} {on:9.2f} µs/replay  {on / off:6.3f}x  {per:+7.3f} µs/item  ({items:.0f} items/replay, "
                  f"{info['launch_records']} launch records, {info['buffers']} buffers, rounds {lo:.1f}..{hi:.1f})"
                  + (f"  refused: {'; '.join(info['notes'])}" if info["notes"] else ""))
    if a.json is not None:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
