"""What `cgtool record`'s input checks cost a serving program: tests/programs/server_runner.py serving
for ``--serve-s`` seconds, bare and recorded with the checks off (``--check-inputs 0``), on at the
default (``--check-inputs 100``) and at other settings, alternating, in fresh processes, ``--rounds`` times.

    python benchmarks/bench_record_inputs.py [--rounds 3] [--serve-s 10] [--layers 4] [--every 0,100,1]
                                             [--out benchmarks/results/bench_record_inputs_h200.json]

The serving loop runs for a fixed time after the captures, so its figure is the replays served in
that window (the program counts its own): bare / recorded (1.10 means the recorded run served 10 %
fewer replays in the same time). Apart from it: the process's wall time (the captures' cost
included), and per recorded run what the checks did (``input_checks`` of its index.json: checks,
seconds inside them, seconds spent at the captures, and per graph the parts of that).

    python benchmarks/bench_record_inputs.py --summarize RESULTS.json   # recompute the figures of a run
    python benchmarks/bench_record_inputs.py --summarize A.json B.json  # the rounds of several runs pooled

Besides the medians of each mode and their ratios, ``paired_wall_ratio_median`` is the median of the
per-round ratios (each round's modes ran next to each other, so a round's ratio is free of the drift
between rounds and between runs).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROG = os.path.join(ROOT, "tests", "programs", "server_runner.py")


def run(cmd: list[str]) -> tuple[float, dict]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))
    return wall, json.loads(line[len("RESULT "):])


def summarize(rows: dict[str, list[dict]]) -> dict:
    """The figures, from the raw rows alone."""
    med = statistics.median
    bare_served = med(x["replays"] for x in rows["bare"])
    return {
        "served_in_window_median": {m: med(x["replays"] for x in r) for m, r in rows.items()},
        "serving_slowdown_vs_bare": {m: bare_served / med(x["replays"] for x in r) for m, r in rows.items()},
        "wall_s_median": {m: med(x["wall_s"] for x in r) for m, r in rows.items()},
        "wall_ratio_vs_bare": {m: med(x["wall_s"] for x in r) / med(x["wall_s"] for x in rows["bare"])
                               for m, r in rows.items()},
        # the checks' own cost: each recorded mode against the recorded run with the checks off
        "wall_ratio_vs_checks_off": {m: med(x["wall_s"] for x in r) / med(x["wall_s"] for x in rows["every0"])
                                     for m, r in rows.items() if m != "bare" and rows.get("every0")},
        "checks_capture_s_median": {m: med((x.get("input_checks") or {}).get("capture_s") or 0.0 for x in r)
                                    for m, r in rows.items() if m != "bare"},
        "checks_check_s_median": {m: med((x.get("input_checks") or {}).get("check_s") or 0.0 for x in r)
                                  for m, r in rows.items() if m != "bare"},
        "paired_wall_ratio_median": {f"{a}_vs_{b}": med(x["wall_s"] / y["wall_s"] for x, y in _pairs(rows, a, b))
                                     for a, b in (("every100", "every0"), ("every100", "bare"), ("every0", "bare"))
                                     if rows.get(a) and rows.get(b)},
        "raw": rows,
    }


def _pairs(rows: dict[str, list[dict]], a: str, b: str) -> list[tuple[dict, dict]]:
    """The rows of modes ``a`` and ``b`` of the same round (and the same run, when pooled)."""
    by = {(y.get("run", 0), y["round"]): y for y in rows[b]}
    return [(x, by[(x.get("run", 0), x["round"])]) for x in rows[a] if (x.get("run", 0), x["round"]) in by]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serve-s", type=float, default=10.0)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--every", default="0,100,1", help="--check-inputs values to run recorded (0: checks off)")
    ap.add_argument("--out")
    ap.add_argument("--summarize", nargs="+", help="recompute the figures of earlier runs' JSON (no GPU); "
                    "several files: their rounds pooled, each row tagged with its file's place (run)")
    a = ap.parse_args()
    if a.summarize:
        docs = [json.load(open(p)) for p in a.summarize]
        if len(docs) == 1:
            old = docs[0]
        else:
            pooled: dict[str, list[dict]] = {}
            for i, d in enumerate(docs):
                for m, r in d["raw"].items():
                    pooled.setdefault(m, []).extend({**x, "run": i} for x in r)
            old = {"runs": [{k: v for k, v in d.items() if k not in ("raw", "runs")} for d in docs], "raw": pooled}
        new = {**old, **summarize(old["raw"])}
        print(json.dumps({k: v for k, v in new.items() if k != "raw"}, indent=1))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(new, f, indent=1)
        return
    modes = ["bare"] + [f"every{e}" for e in a.every.split(",")]
    rows: dict[str, list[dict]] = {m: [] for m in modes}
    tmp = tempfile.mkdtemp(prefix="bench_inputs_")
    for r in range(a.rounds):
        for m in (modes if r % 2 == 0 else modes[::-1]):
            args = [PROG, str(a.layers), str(a.serve_s)]
            if m == "bare":
                cmd = [sys.executable, *args]
            else:
                out = os.path.join(tmp, f"{m}_{r}")
                cmd = [sys.executable, "-m", "cgtool", "record", "-o", out, "--force", "--check-inputs", m[5:],
                       "--", sys.executable, *args]
            wall, res = run(cmd)
            served = sum(res["replays"].values())
            row = {"round": r, "wall_s": wall, "replays": served, "replays_per_s": served / res["wall_s"],
                   "program_wall_s": res["wall_s"]}
            if m != "bare":
                idx = glob.glob(os.path.join(out, "p*", "index.json"))
                doc = json.load(open(idx[0])) if idx else {}
                ic = doc.get("input_checks")
                row["input_checks"] = {k: ic.get(k) for k in ("checks", "check_s", "capture_s", "history_lost",
                                                               "errors")} if ic else None
                row["capture_phases_us"] = [((g.get("inputs") or {}).get("scan") or {}).get("phases_us")
                                            for g in doc.get("graphs", [])]
            rows[m].append(row)
            print(m, r, json.dumps(row), flush=True)
    summary = summarize(rows)
    summary.update({"program": f"tests/programs/server_runner.py {a.layers} {a.serve_s}", "rounds": a.rounds,
                    "order": "fresh processes, modes alternating (reversed every other round)"})
    try:
        import torch

        summary["device"] = torch.cuda.get_device_name()
        summary["torch"] = torch.__version__
    except Exception:
        pass
    print(json.dumps({k: v for k, v in summary.items() if k != "raw"}, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
