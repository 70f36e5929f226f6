"""Replay time with CUPTI tracing on against off, per sample workload and per CUPTI setting.

    PYTHONPATH=. python3 benchmarks/bench_trace_overhead.py [--workloads chain,forkjoin,...] [--variants all]
                                                             [--rounds 5] [--json OUT]

GPU machine, cupti-python needed. One fresh process per workload and CUPTI setting
(``cgtool.capture.cupti_trace.CuptiOptions``; CUPTI stays attached to a process once enabled):
capture, 20 warm-up replays, then ``--rounds`` rounds, each timing a block of back-to-back replays
(one CUDA event pair around the block; the block is sized to about 50 ms) with tracing off and then
on. Prints per workload the median µs per replay, the ratio
to untraced, the extra µs per GPU item of a replay (the stretch ``deps`` sees in the gaps), and the
records of one traced block; settings CUPTI refused are named. A child that crashes or hangs
(``--timeout``; ``--log`` keeps the children's stderr) loses only its own setting's figures: on the
H100 machine the chain's child once hung entering a setting in its second round (many records per
block, CUPTI enabled and disabled again and again in one process; `cgtool trace` enables it once).

Measured on the H100 machine (`cuptiActivityEnableLatencyTimestamps` is off in all but its
own row): no setting lowers the overhead without changing what `deps` reads. ``kernel-kind`` (the
serialising KERNEL record kind) looked lighter (the chain 1.03x, GPT-2 decode 1.005x against 1.04x)
but its records of a graph replay carry a start and end for the first kernel of each launch only:
every other node's record has both at 0 (``scripts/probes/probe_serial_records.py``: 399 of the
chain's 400 records a replay, 293 of GPT-2's 294), so there is nothing left to classify; it also
serialises concurrent kernels (fork/join 1.28x) and, in a fresh process of its own, made the
chain's replays 28x slower;
``graph-launches-only`` gave no launch records at all and cost more; larger host or device buffers
and ``hw-trace`` (refused: the hardware event system needs a newer GPU) changed nothing measurable.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: name -> CuptiOptions keyword arguments. "default" is what `cgtool trace` uses.
VARIANTS: dict[str, dict[str, object]] = {
    "default": {},
    "graph-launches-only": {"launches": "graph"},
    "kernel-kind": {"kernel_kind": "kernel"},
    "hw-trace": {"hw_trace": True},
    "64MiB-buffers": {"buffer_bytes": 64 << 20},
    "device-buffer-64MiB": {"device_buffer_bytes": 64 << 20},
    "latency-timestamps-on": {"latency_timestamps": True},
}

CHILD = r"""
import json, sys, torch
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
names = list(variants)
for r in range(rounds):
    print("@@" + json.dumps({"variant": "off", "us": timed(n), "n": n}), flush=True)
    order = names[r % len(names):] + names[:r % len(names)]
    for v in order:
        print(f"round {r} variant {v}", file=sys.stderr, flush=True)
        with CuptiCollector(CuptiOptions(**variants[v])) as c:
            t = timed(n)
        gpu = [x for x in c.records if x["kind"] != "launch"]
        print("@@" + json.dumps({"variant": v, "us": t, "n": n, "gpu_records": len(gpu),
                                 "launch_records": len(c.records) - len(gpu),
                                 "graph_records": sum(1 for x in gpu if x.get("graph_id")), "buffers": c.buffers,
                                 "dropped": c.dropped, "notes": c.notes}), flush=True)
"""


def run_child(w: str, variants: dict[str, dict[str, object]], rounds: int, timeout: float, env: dict[str, str],
              log: Path | None) -> tuple[list[dict[str, object]], str]:
    """The measurements one child printed (all of them, or up to a crash or the timeout) and how it ended."""
    path = ROOT / "sample_workloads" / f"{w}.py"
    cmd = [sys.executable, "-c", CHILD, str(path), json.dumps(variants), str(rounds)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        out, err, end = r.stdout, r.stderr, f"exit {r.returncode}"
    except subprocess.TimeoutExpired as e:
        def text(b: object) -> str:
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")  # type: ignore[return-value]
        out, err, end = text(e.stdout), text(e.stderr), f"killed after {timeout:.0f} s"
    if log is not None:
        with log.open("a") as f:
            f.write(f"===== {w} {list(variants)}: {end}\n{err[-3000:]}\n")
    steps = [x for x in err.splitlines() if x.startswith("round ")]
    if end != "exit 0":
        end += f" during {steps[-1] if steps else 'capture'}"
    return [json.loads(x[2:]) for x in out.splitlines() if x.startswith("@@")], end


def report(w: str, rows: list[dict[str, object]], names: list[str]) -> dict[str, object]:
    off = [float(r["us"]) for r in rows if r["variant"] == "off"]  # type: ignore[arg-type]
    if not off:
        return {}
    base = statistics.median(off)
    print(f"\n{w}: untraced {base:9.2f} µs/replay (rounds {min(off):.2f}..{max(off):.2f}), "
          f"blocks of {rows[0]['n']} replays")
    res: dict[str, object] = {"off": base}
    for v in names:
        got = [r for r in rows if r["variant"] == v]
        if not got:
            continue
        on = statistics.median(float(r["us"]) for r in got)  # type: ignore[arg-type]
        last = got[-1]
        items = float(last["graph_records"]) / float(last["n"])  # type: ignore[arg-type]
        per = (on - base) / items if items else float("nan")
        notes = "; ".join(last["notes"])  # type: ignore[arg-type]
        print(f"  {v:22s} {on:9.2f} µs/replay  {on / base:6.3f}x  {per:+7.3f} µs/item  ({items:.0f} items/replay, "
              f"{last['launch_records']} launch records, {last['buffers']} buffers)" + (f"  refused: {notes}" if notes else ""))
        res[v] = {"us": on, "ratio": on / base, "per_item_us": per, "items_per_replay": items, "notes": notes}
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="chain,forkjoin,transformer_block,train_step,moe_layer,gpt2_decode,resnet50")
    ap.add_argument("--variants", default="default", help=f"comma-separated, or 'all': {', '.join(VARIANTS)}")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per workload process")
    ap.add_argument("--log", type=Path, default=None, help="append the children's stderr here")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    names = list(VARIANTS) if a.variants == "all" else a.variants.split(",")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYTHONUNBUFFERED": "1"}
    out: dict[str, object] = {}
    for w in a.workloads.split(","):
        # One fresh process per setting (untraced and traced blocks alternating inside it), as
        # `cgtool trace` enables CUPTI once per process: on the H100 machine, serial KERNEL records
        # enabled after concurrent ones had been enabled and disabled in the same process made the
        # chain's replays 45x slower, a state no `cgtool trace` run is ever in.
        res: dict[str, object] = {}
        for v in names:
            got, end = run_child(w, {v: VARIANTS[v]}, a.rounds, a.timeout, env, a.log)
            if end != "exit 0":
                print(f"{w}/{v}: the child ended ({end}); measurements kept: {len(got)}")
            res[v] = report(f"{w} [{v}]", got, [v])
        out[w] = res
    if a.json is not None:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
