"""`cgtool bench` against a plain ``torch.cuda.graph`` loop, in fresh processes. GPU machine:

    PYTHONPATH=. python3 benchmarks/bench_vs_plain.py [--rounds 3] [--blocks 20] [--per 1000]
                                                      [--recaptures 5] [--json OUT]

Workloads: the 400-kernel chain (sample_workloads/chain.py), one kernel
(benchmarks/workloads/one_kernel.py), the transformer block and the GPT-2 decode step (random
weights from ``GPT2Config()``, nothing downloaded). Each round runs, per workload, two FRESH
processes, their order alternating from round to round:

* plain: what an engineer writes: set the step up, warm it up 3 times on a side stream, capture it
  with ``torch.cuda.graph``, 50 untimed replays, then ``--blocks`` blocks of ``--per`` back-to-back
  ``replay()`` calls between CUDA events (consecutive blocks share an event);
* cgtool: ``python -m cgtool bench TARGET --runs 1 --no-eager --warmup 50 --replays BLOCKS*PER
  --blocks BLOCKS --json ...``.

Printed: each round's medians (µs per replay, median of the blocks) and the ratio cgtool / plain,
then per workload the median ratio over the rounds (target: within 1 %). Then, with
``--recaptures K`` (0: skip), one ``cgtool bench --runs 1 --recaptures K`` per workload (blocks of
``--per``/5 replays): each capture's median, the between-capture spread ((max - min) / median of
the captures' medians) and the between-replay spread (a capture's IQR / median).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = {
    "chain": "sample_workloads/chain.py",
    "one_kernel": "benchmarks/workloads/one_kernel.py",
    "transformer_block": "sample_workloads/transformer_block.py",
    "gpt2_decode": "sample_workloads/gpt2_decode.py",
}
WARMUP = 50


def plain(target: str, blocks: int, per: int) -> dict[str, Any]:
    """The plain loop, in this (fresh) process."""
    import torch

    sys.path.insert(0, ROOT)
    from cgtool.capture.entrypoint import call_setup, parse_target, resolve

    t = parse_target(os.path.join(ROOT, target))
    step = call_setup(t, resolve(t, []), [])
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    for _ in range(WARMUP):
        g.replay()
    torch.cuda.synchronize()
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(blocks + 1)]
    evs[0].record()
    for k in range(blocks):
        for _ in range(per):
            g.replay()
        evs[k + 1].record()
    torch.cuda.synchronize()
    samples = [a.elapsed_time(b) * 1000 / per for a, b in zip(evs, evs[1:])]
    del out
    return {"median_us": statistics.median(samples), "samples_us": samples}


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def run_plain(target: str, blocks: int, per: int) -> dict[str, Any] | str:
    q = subprocess.run([sys.executable, __file__, "--plain", target, "--blocks", str(blocks), "--per", str(per)],
                       capture_output=True, text=True, env=_env(), cwd=ROOT)
    line = next((ln for ln in q.stdout.splitlines() if ln.startswith("PLAIN ")), None)
    if line is None:
        return f"exit {q.returncode}: {(q.stderr.strip().splitlines() or ['?'])[-1][:300]}"
    out: dict[str, Any] = json.loads(line[len("PLAIN "):])
    return out


def run_cgtool(target: str, blocks: int, per: int, recaptures: int = 1) -> dict[str, Any] | str:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "b.json")
        q = subprocess.run([sys.executable, "-m", "cgtool", "bench", os.path.join(ROOT, target), "--runs", "1",
                            "--no-eager", "--warmup", str(WARMUP), "--replays", str(blocks * per), "--blocks",
                            str(blocks), "--recaptures", str(recaptures), "--json", out],
                           capture_output=True, text=True, env=_env(), cwd=ROOT)
        if q.returncode != 0 or not os.path.exists(out):
            return f"exit {q.returncode}: {(q.stderr.strip().splitlines() or ['?'])[-1][:300]}"
        with open(out) as f:
            w = next(iter(json.load(f)["workloads"].values()))
    return {"median_us": statistics.median(w["gpu_us"]), "samples_us": w["gpu_us"],
            "capture_medians_us": w.get("capture_medians_us", [])}


def _iqr_rel(xs: list[float]) -> float:
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return (q[2] - q[0]) / statistics.median(xs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plain", help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--blocks", type=int, default=20)
    p.add_argument("--per", type=int, default=1000, help="replays per block")
    p.add_argument("--recaptures", type=int, default=5, help="captures per workload for the spread (0: skip)")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--json", help="write every measurement here")
    a = p.parse_args()
    if a.plain:
        print("PLAIN " + json.dumps(plain(a.plain, a.blocks, a.per)), flush=True)
        return

    import torch

    names = [w for w in a.workloads.split(",") if w]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {a.rounds} rounds, {a.blocks} blocks of "
          f"{a.per} replays, each arm a fresh process, order alternating", flush=True)
    res: dict[str, dict[str, list[Any]]] = {n: {"plain": [], "cgtool": []} for n in names}
    t0 = time.time()
    for r in range(a.rounds):
        for n in names:
            arms = ("plain", "cgtool") if r % 2 == 0 else ("cgtool", "plain")
            got = {}
            for arm in arms:
                f = run_plain if arm == "plain" else run_cgtool
                got[arm] = f(WORKLOADS[n], a.blocks, a.per)
                res[n][arm].append(got[arm])
            pl, cg = got["plain"], got["cgtool"]
            if isinstance(pl, str) or isinstance(cg, str):
                print(f"  round {r + 1} {n:18s} FAILED: plain {pl if isinstance(pl, str) else 'ok'}; "
                      f"cgtool {cg if isinstance(cg, str) else 'ok'}", flush=True)
                continue
            print(f"  round {r + 1} {n:18s} plain {pl['median_us']:9.2f} µs  cgtool {cg['median_us']:9.2f} µs  "
                  f"ratio {cg['median_us'] / pl['median_us']:.4f}  ({time.time() - t0:.0f} s)", flush=True)
    print(f"\n{'workload':18s} {'plain µs (rounds)':>28s} {'cgtool µs (rounds)':>28s} {'ratio':>7s}  within 1 %")
    summary = {}
    for n in names:
        pairs = [(pl, cg) for pl, cg in zip(res[n]["plain"], res[n]["cgtool"])
                 if not isinstance(pl, str) and not isinstance(cg, str)]
        if not pairs:
            print(f"{n:18s} (no result)")
            continue
        ratio = statistics.median([cg["median_us"] / pl["median_us"] for pl, cg in pairs])
        summary[n] = ratio
        pls = " ".join(f"{pl['median_us']:.1f}" for pl, _ in pairs)
        cgs = " ".join(f"{cg['median_us']:.1f}" for _, cg in pairs)
        print(f"{n:18s} {pls:>28s} {cgs:>28s} {ratio:7.4f}  {'yes' if abs(ratio - 1) <= 0.01 else 'NO'}")

    spread: dict[str, Any] = {}
    if a.recaptures > 0:
        per = max(1, a.per // 5)
        print(f"\ncgtool bench --recaptures {a.recaptures} (one process, {a.blocks} blocks of {per} replays per capture)")
        print(f"{'workload':18s} {'capture medians µs':>48s} {'capture spread':>14s} {'replay spread':>13s}")
        for n in names:
            r2 = run_cgtool(WORKLOADS[n], a.blocks, per, a.recaptures)
            spread[n] = r2
            if isinstance(r2, str):
                print(f"{n:18s} FAILED: {r2}")
                continue
            cm, xs = r2["capture_medians_us"], r2["samples_us"]
            k = len(xs) // max(1, len(cm))
            reps = statistics.median([_iqr_rel(xs[i * k:(i + 1) * k]) for i in range(len(cm))])
            cs = (max(cm) - min(cm)) / statistics.median(cm)
            print(f"{n:18s} {' '.join(f'{m:.1f}' for m in cm):>48s} {100 * cs:13.2f}% {100 * reps:12.2f}%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rounds": a.rounds,
                       "blocks": a.blocks, "per": a.per, "ratio": res, "median_ratio": summary,
                       "recaptures": a.recaptures, "spread": spread}, f)
        print(f"\nwrote {a.json}")


if __name__ == "__main__":
    main()
