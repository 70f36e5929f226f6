"""Overhead of `cgtool record` (no tracing) against the bare program.

    python benchmarks/bench_record.py [--rounds 3] [--layers 24] [--serve-s 0] [--out bench_record.json]
    python benchmarks/bench_record.py --program phases   # each capture split into its parts

Runs tests/programs/server_runner.py (4 graphs of LAYERS blocks each, one pool, then serving its
requests once, or again and again for ``--serve-s`` seconds) bare and under `cgtool record`,
alternating, in fresh processes. Two figures, medians over the rounds:

* program wall time: the process's wall time from start to exit, recorded / bare (goal <= 1.05x);
* capture+instantiate per graph: the program's own timing around each `with torch.cuda.graph`
  (it prints them), recorded / bare (goal <= 1.2x); also per graph of the program and paired (each
  graph against the same graph of the bare run of the same round). With ``--program phases``
(``benchmarks/capture_phases_program.py``: the same model and captures), each capture is split into
``torch.cuda.graph``'s ``__enter__`` (its ``gc.collect()`` apart), the forward under capture, its
``__exit__`` (end of capture and instantiation) and the synchronize, medians per graph and mode.

And where the recorded run's extra time goes, from the wall-clock stamps the program's process
keeps in its recording (``OUT/p<PID>/index.json`` ``timeline``, ``recorder_timings``): before the
bootstrap (the parent CLI and the interpreter's start), the recorder's setup (imports, CUPTI
subscribe), the program itself, the end of the run (writer drained, ledger, final files), and after
it (the process's exit, the parent's tree and summary). Modes: ``bare``, ``record``, ``coverage``
(record --coverage), ``record_pycb`` (cupti-python's own subscribe: ``CGTOOL_RECORD_SUBSCRIBER``).
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
PROGRAMS = {
    "runner": os.path.join(ROOT, "tests", "programs", "server_runner.py"),
    # the same captures with each part of `with torch.cuda.graph` timed (gc.collect, body, exit)
    "phases": os.path.join(ROOT, "benchmarks", "capture_phases_program.py"),
}


def _cpus(spec: str) -> set[int]:
    """``0-7,16`` -> {0, ..., 7, 16}."""
    out: set[int] = set()
    for part in filter(None, spec.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _run(cmd: list[str], env: dict[str, str] | None = None, cpus: set[int] | None = None
         ) -> tuple[float, dict, float, float]:
    t_launch = time.time()
    t0 = time.perf_counter()
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None  # inherited by the recorded child
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, preexec_fn=pin)
    wall = time.perf_counter() - t0
    t_exit = time.time()
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))
    return wall, json.loads(line[len("RESULT "):]), t_launch, t_exit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--serve-s", type=float, default=0.0,
                    help="the program serves its requests again until this many seconds have passed (a longer run)")
    ap.add_argument("--out", default="bench_record.json")
    ap.add_argument("--program", choices=sorted(PROGRAMS), default="runner",
                    help="runner: tests/programs/server_runner.py; phases: the same captures, each split into "
                         "__enter__ (gc.collect() apart), the forward, __exit__ and the synchronize "
                         "(benchmarks/capture_phases_program.py)")
    ap.add_argument("--modes", default="bare,record",
                    help="bare, record, coverage, record_pycb (see the docstring)")
    ap.add_argument("--cpus", default="",
                    help="run every process (bare and recorded, and the recorded one's child) on these CPUs, "
                         "e.g. 0-7 (on the H100 machines pinning did not remove the two states fresh "
                         "processes run in: see capture_ratio_fastest_process)")
    a = ap.parse_args()
    PROG = PROGRAMS[a.program]
    cpus = _cpus(a.cpus) or None
    tmp = tempfile.mkdtemp()
    modes = a.modes.split(",")
    rows: dict[str, list[dict]] = {m: [] for m in modes}
    prog_args = [str(a.layers), str(a.serve_s)]
    for r in range(a.rounds):
        for mode in modes:
            env = dict(os.environ)
            out = os.path.join(tmp, f"{mode}{r}")
            base = mode
            if base == "bare":
                cmd = [sys.executable, PROG, *prog_args]
            else:
                cmd = [sys.executable, "-m", "cgtool", "record", "-o", out, "--force",
                       *(["--coverage"] if base == "coverage" else []), "--", "python", PROG, *prog_args]
                if base == "record_pycb":
                    env["CGTOOL_RECORD_SUBSCRIBER"] = "cupti-python"
            wall, res, t_launch, t_exit = _run(cmd, env, cpus)
            row = {"wall_s": wall, "capture_s": res["capture_s"], "program_wall_s": res["wall_s"]}
            if "phases" in res:
                row["capture_phases_s"] = res["phases"]
                row["gc_tracked"] = res["gc_tracked"]
            if base != "bare":
                tree = json.load(open(os.path.join(out, "index.json")))
                root = next(p for p in tree["processes"] if p["pid"] == tree["root_pid"])
                idx = json.load(open(os.path.join(out, root["folder"], "index.json")))
                tl = idx.get("timeline") or {}
                row["callback_stats"] = idx.get("callback_stats")
                row["launch_callbacks"] = idx.get("launch_callbacks")
                row["recorder_timings"] = idx.get("recorder_timings")
                row["coverage"] = idx.get("coverage")
                row["recorded"] = [{k: g.get(k) for k in ("nodes", "capture_s", "instantiate_s", "export_s", "write_s",
                                                                   "recorder_s")}
                                   for g in idx["graphs"]]
                if {"boot_start", "program_start", "program_end", "finish_end"} <= set(tl):
                    row["phases_s"] = {
                        "before_child_code": tl["boot_start"] - t_launch,
                        "child_setup": tl["program_start"] - tl["boot_start"],
                        "program": tl["program_end"] - tl["program_start"],
                        "finish": tl["finish_end"] - tl["program_end"],
                        "after_finish": t_exit - tl["finish_end"],
                    }
            rows[mode].append(row)
    shutil.rmtree(tmp, ignore_errors=True)

    def med(mode: str, key: str) -> float:
        return statistics.median(x[key] for x in rows[mode])

    def med_cap(mode: str) -> float:
        return statistics.median(c for x in rows[mode] for c in x["capture_s"])

    def med_phases(mode: str) -> dict[str, float]:
        ph = [x["phases_s"] for x in rows[mode] if "phases_s" in x]
        return {k: statistics.median(p[k] for p in ph) for k in ph[0]} if ph else {}

    per_process = {m: [statistics.median(x["capture_s"][1:] or x["capture_s"]) for x in rows[m]] for m in modes}
    rec = "record" if "record" in rows else next(m for m in modes if m != "bare")  # the headline mode
    summary = {
        "program": f"{os.path.basename(PROG)} {a.layers} {a.serve_s} (4 graphs, serving for {a.serve_s} s)",
        "rounds": a.rounds,
        "python": sys.version.split()[0],
        "cpus": sorted(cpus) if cpus else None,
        "headline_mode": rec,
        "wall_s": {"bare": med("bare", "wall_s"), rec: med(rec, "wall_s")},
        "wall_ratio": med(rec, "wall_s") / med("bare", "wall_s"),
        "program_own_wall_ratio": med(rec, "program_wall_s") / med("bare", "program_wall_s"),
        "capture_instantiate_s_per_graph": {"bare": med_cap("bare"), rec: med_cap(rec)},
        "capture_ratio": med_cap(rec) / med_cap("bare"),
        # per graph of the program (the first pays the process's first-time costs), and paired: each
        # graph against the same graph of the bare run in the same round
        "capture_ratio_by_graph": [statistics.median(r["capture_s"][i] / b["capture_s"][i]
                                                     for r, b in zip(rows[rec], rows["bare"]))
                                   for i in range(len(rows["bare"][0]["capture_s"]))],
        "capture_ratio_paired": statistics.median(c / d for r, b in zip(rows[rec], rows["bare"])
                                                  for c, d in zip(r["capture_s"], b["capture_s"])),
        # rounds alternate bare and recorded runs: each round's pair shares the machine's state of
        # the moment, so the ratio per round (and its spread) says more than one ratio of medians
        "wall_ratio_per_round": {"median": statistics.median(pr := [r["wall_s"] / b["wall_s"]
                                                                    for r, b in zip(rows[rec], rows["bare"])]),
                                 "min": min(pr), "max": max(pr)},
        # Fresh processes on the GPU machine ran either fast or ~1.5x slower throughout (every graph
        # of the process, bare or recorded, pinned to CPUs or not): the paired ratios above mix the
        # two whenever a bare and a recorded run of a round landed in different states. The fastest
        # process of each mode compares like with like (each process: the median of its graphs
        # after the first).
        "capture_s_per_process": per_process,
        "capture_ratio_fastest_process": min(per_process[rec]) / min(per_process["bare"]),
        "record_phases_s": med_phases(rec),
        # --program phases: per graph of the program, the median of each part of its capture
        "capture_phases_by_graph": {m: [{k: statistics.median(x["capture_phases_s"][i][k] for x in rows[m])
                                         for k in rows[m][0]["capture_phases_s"][i]}
                                        for i in range(len(rows[m][0]["capture_phases_s"]))]
                                    for m in modes if "capture_phases_s" in rows[m][0]},
        # per graph of the program: the recorder's own time on it inside the capture (index.json's
        # recorder_s: the graph-exec callback's parts, the node callbacks), medians
        "recorder_s_by_graph": {m: [{k: statistics.median((x["recorded"][i].get("recorder_s") or {}).get(k, 0.0)
                                                          for x in rows[m])
                                     for k in (rows[m][0]["recorded"][i].get("recorder_s") or {})}
                                    for i in range(len(rows[m][0]["recorded"]))]
                                for m in modes if rows[m] and "recorded" in rows[m][0]},
        "gc_tracked": {m: statistics.median(x["gc_tracked"] for x in rows[m]) for m in modes
                       if "gc_tracked" in rows[m][0]},
        "other_modes": {m: {"wall_s": med(m, "wall_s"), "capture_s": med_cap(m),
                            "program_wall_s": med(m, "program_wall_s"), "phases_s": med_phases(m)} for m in modes},
        "raw": rows,
    }
    with open(a.out, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("raw", "other_modes")}, indent=1))


if __name__ == "__main__":
    main()
