"""Wall-time cost of `cgtool record` on a torch.compile(mode="reduce-overhead") program.

    python benchmarks/bench_record_compiled.py [--rounds 3] [--out bench_record_compiled.json]

Runs tests/programs/compiled_server.py (3 batch sizes under cudagraph trees, one hand-captured
graph; torch.compile starts its compile workers) bare and under `cgtool record`, alternating, each
in a fresh process, with a fresh Inductor cache per run (so both modes compile). Prints each
round's wall times, the median ratio recorded / bare (goal <= 1.05x), and the terminal summary
`cgtool record` printed in the last round with its line count (goal: one 50-line screen).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(ROOT, "tests", "programs", "compiled_server.py")


def _run(mode: str, work: str, k: int) -> tuple[float, str]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(work, f"inductor_{mode}_{k}"), "COLUMNS": "80"}
    cmd = [sys.executable, PROGRAM]
    if mode == "record":
        cmd = [sys.executable, "-m", "cgtool", "record", "-o", os.path.join(work, f"rec{k}"), "--", *cmd]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{mode} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return wall, p.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="bench_record_compiled.json")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="cgtool-bench-compiled-")
    walls: dict[str, list[float]] = {"bare": [], "record": []}
    summary = ""
    try:
        for k in range(args.rounds):
            for mode in (("bare", "record") if k % 2 == 0 else ("record", "bare")):
                wall, err = _run(mode, work, k)
                walls[mode].append(wall)
                if mode == "record":
                    summary = err
                print(f"round {k} {mode}: {wall:.2f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = [r / b for r, b in zip(walls["record"], walls["bare"])]
    res = {"program": "tests/programs/compiled_server.py", "rounds": args.rounds, "wall_s": walls,
           "ratio_per_round": ratios, "ratio_median": statistics.median(ratios),
           "ratio_of_medians": statistics.median(walls["record"]) / statistics.median(walls["bare"]),
           "summary_lines": len(summary.splitlines()), "summary": summary}
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"recorded / bare wall time: median of rounds {res['ratio_median']:.3f}x, of medians "
          f"{res['ratio_of_medians']:.3f}x (bare {statistics.median(walls['bare']):.2f} s, recorded "
          f"{statistics.median(walls['record']):.2f} s)")
    print(f"summary of the last recorded run ({res['summary_lines']} lines at 80 columns):")
    print(summary)


if __name__ == "__main__":
    main()
