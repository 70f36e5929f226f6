"""`cgtool deps` on a 1,000,000-event trace, against Python's json.load merely reading it.

    python3 benchmarks/bench_deps.py [EVENTS]

The trace is made from a real recording (tests/data/forkjoin_trace_mc1, an H200): its first
replay's events are repeated with shifted times and new correlation ids until EVENTS GPU events,
keeping cgtool's event format. Each measurement runs in a fresh process, so its peak RSS (minus
the interpreter's baseline) is its own. Targets: cgtool at least 3x faster than json.load; peak
memory under 2x the file size.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make_trace(path: Path, n_events: int) -> None:
    src = json.loads(gzip.decompress((ROOT / "tests/data/forkjoin_trace_mc1/trace.json.gz").read_bytes()))
    gpu = [e for e in src["traceEvents"] if e.get("cat") == "kernel"]
    first = [e for e in gpu if e["args"]["replay"] == 0]
    span = max(e["ts"] + e["dur"] for e in first) - min(e["ts"] for e in first) + 50.0
    meta = [e for e in src["traceEvents"] if e.get("ph") == "M"]
    launch = next(e for e in src["traceEvents"] if e.get("name") == "cudaGraphLaunch")
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [')
        for e in meta:
            f.write(json.dumps(e) + ",")
        reps = n_events // len(first)
        for r in range(reps):
            corr = 1000 + r
            lh = dict(launch, ts=launch["ts"] + r * span, args={"correlation": corr})
            f.write(json.dumps(lh) + ",")
            for e in first:
                x = dict(e, ts=round(e["ts"] + r * span, 3), args=dict(e["args"], correlation=corr, replay=r))
                f.write(json.dumps(x, separators=(",", ":")) + ",")
        f.write(json.dumps(launch) + "],")
        f.write('"cgtool": ' + json.dumps(src["cgtool"]) + "}")


CHILD = {
    "json.load": "import json,sys; json.load(open(sys.argv[1]))",
    "cgtool deps (load + analyze)": (
        "import sys; from cgtool.artifacts.trace import load_trace; "
        "from cgtool.inspect.deps import analyze, graphs_from_trace; "
        "t = load_trace(sys.argv[1]); r = analyze(t, graphs_from_trace(t)); print(r.n_true, r.n_fake)"
    ),
    "python startup + imports only": (
        "import sys, json; from cgtool.artifacts.trace import load_trace; from cgtool.inspect.deps import analyze"
    ),
}


def measure(code: str, path: Path, workers: str = "") -> tuple[float, float, float, str]:
    """(seconds, peak RSS MiB, the trace reader's worker's peak RSS MiB, stdout) of a fresh
    interpreter running ``code``."""
    wrapper = (
        "import time, resource, sys\nt0 = time.perf_counter()\n" + code +
        "\nprint('@@', time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
        " resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if workers:
        env["CGTOOL_TRACE_WORKERS"] = workers
    r = subprocess.run([sys.executable, "-c", wrapper, str(path)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    line = [x for x in r.stdout.splitlines() if x.startswith("@@")][-1].split()
    rest = "\n".join(x for x in r.stdout.splitlines() if not x.startswith("@@"))
    return float(line[1]), int(line[2]) / 1024, int(line[3]) / 1024, rest


def main(n: int = 1_000_000) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "trace.json"
        t0 = time.perf_counter()
        make_trace(p, n)
        size = p.stat().st_size / 2**20
        print(f"{n:,} GPU events, {size:.0f} MiB (made in {time.perf_counter() - t0:.1f}s), {os.cpu_count()} cores")
        base = measure(CHILD["python startup + imports only"], p)
        runs = [("json.load", "json.load", ""), ("cgtool deps, 1 process", "cgtool deps (load + analyze)", "1"),
                ("cgtool deps, 2 processes", "cgtool deps (load + analyze)", "2")]
        res = {}
        for label, code, workers in runs:
            res[label] = measure(CHILD[code], p, workers)
            s, rss, child, out = res[label]
            print(f"  {label:26s} {s:6.2f} s  peak RSS {rss:6.0f} MiB ({(rss - base[1]) / size:.2f}x file above a "
                  "bare interpreter)" + (f", worker {child:.0f} MiB (shares the file mapping)" if workers == "2" else "")
                  + (f"  [true, fake: {out}]" if out else ""))
        for label in ("cgtool deps, 1 process", "cgtool deps, 2 processes"):
            ratio = res["json.load"][0] / res[label][0]
            mem = (res[label][1] - base[1]) / size
            print(f"{label}: {ratio:.1f}x faster than json.load (target >= 3x: {'met' if ratio >= 3 else 'MISSED'}); "
                  f"peak memory of the analysing process {mem:.2f}x the file (target < 2x: "
                  f"{'met' if mem < 2 else 'MISSED'})")

if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
