"""`cgtool deps` end to end on large traces, against Python's json.load merely reading the file.

    python3 benchmarks/bench_deps.py                 # 10^5 and 10^6 events, both formats, 3 paired rounds
    python3 benchmarks/bench_deps.py --quick         # 10^5 events, 1 round, no profile (a smoke run)
    python3 benchmarks/bench_deps.py --sizes 1e5,1e6,1e7 --rounds 3
    python3 benchmarks/bench_deps.py --check HEAD~3  # same results as the code at that git ref?

Two trace formats are made from real recordings in tests/data, by repeating their first replay
with shifted times and new correlation ids:

* ``cupti``: a `cgtool trace` (tests/data/forkjoin_trace_mc1, H200): node ids, channels, the graph
  embedded; compact JSON, one event per line-less record.
* ``cupti-spaced``: the same events in the layout of the first recordings in tests/data (json.dumps'
  default separators), and ``cupti-v0``: in the layout this script made before it was rewritten (git
  be07a03: a launch without ``replay`` before each replay's kernels). Earlier cgtool trace layouts:
  each must read as fast as the current one.
* ``kineto``: a torch.profiler trace (tests/data/forkjoin_kineto_mc1, H100, torch 2.11): no node ids,
  no channels (events are matched to nodes by cgtool.inspect.match), the export passed with
  --graph; its runtime and flow events kept, one event per line as Kineto writes them.

Every measurement is a fresh process: ``json.load`` of the file, then ``python -m cgtool deps`` on
it with the trace reader in one process (CGTOOL_TRACE_WORKERS=1) and in two (=2), back to back.
Every format's file is made first; then each of the ``--rounds`` rounds measures every format (their
order rotating from round to round), so the layouts are compared in one paired run: the table gives
medians, and figures from a machine whose speed wanders are ratios measured side by side. The
figures of docs/performance.md, every layout in one run:

    nice -n 10 python3 benchmarks/bench_deps.py --sizes 1e6 --rounds 3 --profile-size 0

The run ends with one line per layout: each ratio to ``json.load`` and PASS or FAIL against its
target. cgtool's modules are compiled to bytecode once before the rounds, as installing the package
does; ``--no-bytecode`` measures with whatever the environment says instead (with
PYTHONDONTWRITEBYTECODE set, every run compiles every module it imports again).

Peak RSS is the process's maximum resident set (the reader's worker separately);
"/ file" divides it by the file size. Sizes of 10^7 events and more are written to a temporary
folder only after checking the free disk space; ``json.load`` is not run on them unless
``--json-load-max`` allows it (it needs about 4x the file in memory), and their "x json.load" is
then against the 10^6 measurement scaled linearly (marked ``~``).

The profile: one in-process run per format at the largest size up to 10^6 (``--profile-size``),
with a timer around each phase of the reader and the analysis (functions wrapped by name; a name
the code under test lacks is skipped). Targets (on an idle 2-core machine, every format): end to end
<= 0.2x json.load with two processes and <= 0.33x in one; peak memory <= 1.5x the file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

# ----------------------------------------------------------------------------- trace generators


def _load_gz(p: Path) -> Any:
    return json.loads(gzip.decompress(p.read_bytes()))


def _template(e: dict[str, Any], sep: tuple[str, str]) -> str:
    """The event as JSON with %-placeholders for its time, correlation and replay."""
    x = dict(e)
    x["ts"] = "@TS@"
    args = dict(x.get("args") or {})
    for k in ("correlation", "replay"):
        if k in args:
            args[k] = f"@{k.upper()}@"
    if "args" in x:
        x["args"] = args
    if "id" in x and x.get("cat") == "ac2g":
        x["id"] = "@CORRELATION@"
    s = json.dumps(x, separators=sep).replace("%", "%%")
    return (s.replace('"@TS@"', "%(ts).3f").replace('"@CORRELATION@"', "%(correlation)d")
            .replace('"@REPLAY@"', "%(replay)d"))


def make_cupti(path: Path, n_events: int) -> dict[str, Any]:
    """A cgtool trace of about ``n_events`` GPU events (the graph embedded)."""
    src = _load_gz(DATA / "forkjoin_trace_mc1/trace.json.gz")
    evs = src["traceEvents"]
    first = [e for e in evs if e.get("cat") == "kernel" and e["args"]["replay"] == 0]
    t0 = min(e["ts"] for e in first)
    span = max(e["ts"] + e["dur"] for e in first) - t0 + 50.0
    meta = [e for e in evs if e.get("ph") == "M"]
    launch = next(e for e in evs if e.get("name") == "cudaGraphLaunch")
    rows = [(launch["ts"], _template(dict(launch, args={"correlation": 0}), (", ", ": ")))]
    rows += [(e["ts"], _template(e, (",", ":"))) for e in first]
    reps = max(1, n_events // len(first))
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [')
        f.write("".join(json.dumps(e) + "," for e in meta))
        for r in range(reps):
            sh, corr = r * span, 1000 + r
            f.write("".join(t % {"ts": ts + sh, "correlation": corr, "replay": r} + "," for ts, t in rows))
        f.write(json.dumps(launch) + "],")  # one launch without GPU work (correlation of replay 0's launch: moved)
        f.write('"cgtool": ' + json.dumps(src["cgtool"]) + "}")
    return {"events": reps * len(first), "graph": None}


def make_kineto(path: Path, n_events: int) -> dict[str, Any]:
    """A torch.profiler (Kineto) trace of about ``n_events`` GPU events: every event of one
    graph launch (runtime call, kernels, flow arrows) repeated, in Kineto's layout."""
    case = DATA / "forkjoin_kineto_mc1"
    src = _load_gz(case / "trace.json.gz")
    evs = src["traceEvents"]
    launches = sorted((e for e in evs if e.get("name") == "cudaGraphLaunch"), key=lambda e: e["ts"])
    c0 = launches[0]["args"]["correlation"]
    mine = [e for e in evs if (e.get("args") or {}).get("correlation") == c0
            or (e.get("cat") == "ac2g" and e.get("id") == c0)]
    gpu = [e for e in mine if e.get("cat") == "kernel"]
    t0 = launches[0]["ts"]
    span = max(e["ts"] + e["dur"] for e in gpu) - t0 + 50.0
    head = [e for e in evs if e.get("ph") == "M" or e.get("cat") in ("Trace", "overhead") or "cat" not in e
            and e.get("ph") != "f"]
    rows = [(e["ts"] - t0, _template(e, (", ", ": "))) for e in mine]
    reps = max(1, n_events // len(gpu))
    top = {k: v for k, v in src.items() if k != "traceEvents"}
    with open(path, "w") as f:
        f.write("{\n  " + ",\n  ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in top.items()
                                       if k != "traceName") + ',\n  "traceEvents": [\n')
        f.write("".join("  " + json.dumps(e) + ",\n" for e in head))
        for r in range(reps):
            base, corr = t0 + r * span, 10_000 + 2 * r
            f.write("".join("  " + t % {"ts": base + ts, "correlation": corr, "replay": r} + ",\n" for ts, t in rows))
        f.write('  {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": '
                f'{t0 + reps * span:.3f}}}\n  ],\n  "traceName": {json.dumps(top.get("traceName", ""))}\n}}\n')
    return {"events": reps * len(gpu), "graph": str(case / "graph.json")}


def make_cupti_spaced(path: Path, n_events: int) -> dict[str, Any]:
    """A cgtool trace in the layout of the first recordings (tests/data/*_trace*: written with
    json.dumps' default separators, ", " and ": ", in every event)."""
    src = _load_gz(DATA / "forkjoin_trace_mc1/trace.json.gz")
    evs = src["traceEvents"]
    first = [e for e in evs if e.get("cat") == "kernel" and e["args"]["replay"] == 0]
    t0 = min(e["ts"] for e in first)
    span = max(e["ts"] + e["dur"] for e in first) - t0 + 50.0
    meta = [e for e in evs if e.get("ph") == "M"]
    launch = next(e for e in evs if e.get("name") == "cudaGraphLaunch")
    rows = [(launch["ts"], _template(dict(launch, args={"correlation": 0, "replay": 0}), (", ", ": ")))]
    rows += [(e["ts"], _template(e, (", ", ": "))) for e in first]
    reps = max(1, n_events // len(first))
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [')
        f.write("".join(json.dumps(e) + ", " for e in meta))
        for r in range(reps):
            sh, corr = r * span, 1000 + r
            f.write("".join(t % {"ts": ts + sh, "correlation": corr, "replay": r} + ", " for ts, t in rows))
        f.write(json.dumps(launch) + "], ")
        f.write('"cgtool": ' + json.dumps(src["cgtool"]) + "}")
    return {"events": reps * len(first), "graph": None}


def make_cupti_v0(path: Path, n_events: int) -> dict[str, Any]:
    """A cgtool trace in the layout benchmarks/bench_deps.py made before it was rewritten (git
    be07a03, ``make_trace``): each replay's launch (no ``replay`` arg) right before its kernels,
    launches spaced, kernels compact, times rounded to the nanosecond."""
    src = _load_gz(DATA / "forkjoin_trace_mc1/trace.json.gz")
    gpu = [e for e in src["traceEvents"] if e.get("cat") == "kernel"]
    first = [e for e in gpu if e["args"]["replay"] == 0]
    span = max(e["ts"] + e["dur"] for e in first) - min(e["ts"] for e in first) + 50.0
    meta = [e for e in src["traceEvents"] if e.get("ph") == "M"]
    launch = next(e for e in src["traceEvents"] if e.get("name") == "cudaGraphLaunch")
    reps = max(1, n_events // len(first))
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [')
        f.write("".join(json.dumps(e) + "," for e in meta))
        for r in range(reps):
            corr = 1000 + r
            f.write(json.dumps(dict(launch, ts=launch["ts"] + r * span, args={"correlation": corr})) + ",")
            f.write("".join(json.dumps(dict(e, ts=round(e["ts"] + r * span, 3),
                                            args=dict(e["args"], correlation=corr, replay=r)),
                                       separators=(",", ":")) + "," for e in first))
        f.write(json.dumps(launch) + "],")
        f.write('"cgtool": ' + json.dumps(src["cgtool"]) + "}")
    return {"events": reps * len(first), "graph": None}


FORMATS = {"cupti": make_cupti, "cupti-spaced": make_cupti_spaced, "cupti-v0": make_cupti_v0, "kineto": make_kineto}

# ----------------------------------------------------------------------------- measurement

_WRAP = """
import resource, sys, time
t0 = time.perf_counter()
{body}
dt = time.perf_counter() - t0
print("@@", dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
"""
JSON_LOAD = "import json\nwith open(sys.argv[1], 'rb') as f: json.load(f)"
CGTOOL = """
from cgtool.cli.main import main
try:
    main(["deps", *sys.argv[1:]])
except SystemExit as e:
    if e.code not in (0, None):
        raise
"""
BARE = "import json; import cgtool.cli.main, cgtool.inspect.deps, cgtool.inspect.files, cgtool.report.tables"


#: Whether the measured interpreters read cached bytecode (``--no-bytecode`` turns it off).
BYTECODE = {"cached": True}


def compile_bytecode(src: Path) -> None:
    """Compile ``src``'s cgtool once, as installing the package does: with PYTHONDONTWRITEBYTECODE set
    (some shells and containers set it) every fresh process would compile every module it imports
    again, which no installed cgtool does (docs/performance.md, the deps section, says how much)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src / "cgtool")], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
                   stdout=subprocess.DEVNULL)


def measure(body: str, args: list[str], workers: str = "", src: Path = ROOT,
            extra_env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """(seconds, peak RSS MiB, peak RSS MiB of its children) of a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(src), **(extra_env or {})}
    if BYTECODE["cached"]:  # json.load's process and cgtool's alike
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("CGTOOL_TRACE_WORKERS", None)
    if workers:
        env["CGTOOL_TRACE_WORKERS"] = workers
    t0 = time.perf_counter()
    # cwd: `python -c` puts the working folder first on sys.path, before PYTHONPATH.
    r = subprocess.run([sys.executable, "-c", _WRAP.format(body=body), *args], capture_output=True, text=True,
                       env=env, stdin=subprocess.DEVNULL, cwd=src)
    wall = time.perf_counter() - t0
    lines = [x for x in r.stderr.splitlines() if x.startswith("@@ ")]
    if r.returncode != 0 or not lines:
        raise SystemExit(f"failed ({r.returncode}): {body[:60]!r} {args}\n{r.stderr[-3000:]}")
    _, _, self_kb, child_kb = lines[-1].split()
    return wall, int(self_kb) / 1024, int(child_kb) / 1024


def cgtool_args(path: Path, info: dict[str, Any]) -> list[str]:
    return [str(path), *(["--graph", info["graph"]] if info["graph"] else [])]


def free_gib(folder: str) -> float:
    return shutil.disk_usage(folder).free / 2**30


# ----------------------------------------------------------------------------- profile

#: Phases timed in the profile: (label, module, attribute, depth). The attribute is a function
#: (wrapped) or a msgspec decoder (its ``decode`` wrapped); names missing in the code are skipped.
PHASES = [
    ("load_trace", "cgtool.artifacts.trace", "load_trace", 0),
    ("read (read_bytes / block reader)", "cgtool.artifacts.trace.stream", "read_bytes", 1),
    ("msgspec outer decode", "cgtool.artifacts.trace.decode", "_outer", 1),
    ("msgspec chunk decode (typed)", "cgtool.artifacts.trace.decode", "_chunk_known", 1),
    ("msgspec chunk decode (typed, with shapes)", "cgtool.artifacts.trace.decode", "_chunk_known_shaped", 1),
    ("msgspec chunk decode (fallback)", "cgtool.artifacts.trace.decode", "_chunk_typed", 1),
    ("msgspec shape decode", "cgtool.artifacts.trace.decode", "_shape_chunk", 1),
    ("per-event shape decode", "cgtool.artifacts.trace.decode", "_shape_of", 1),
    ("chunk -> columns", "cgtool.artifacts.trace.decode", "_columnize", 1),
    ("checks (_check_events)", "cgtool.artifacts.trace.decode", "_check_events", 1),
    ("graphs_from_trace", "cgtool.inspect.inputs", "embedded_graphs", 0),
    ("GraphData.load (--graph)", "cgtool.artifacts.graph", "GraphData.load", 0),
    ("analyze", "cgtool.inspect.deps", "analyze", 0),
    ("prepare_graphs (reachability)", "cgtool.inspect.analyzers.matching", "prepare_graphs", 1),
    ("exact_match", "cgtool.inspect.analyzers.matching", "exact_match", 1),
    ("drop_incomplete", "cgtool.inspect.analyzers.matching", "drop_incomplete", 1),
    ("inferred_match (cgtool.inspect.match)", "cgtool.inspect.analyzers.matching", "inferred_match", 1),
    ("match: _event_keys", "cgtool.inspect.match", "_event_keys", 2),
    ("match: _search", "cgtool.inspect.match", "_search", 2),
    ("dense (replay, lane ids)", "cgtool.inspect.analyzers._arrays", "dense", 1),
    ("replay_timing (readiness, critical path)", "cgtool.inspect.analyzers.timing", "replay_timing", 1),
    ("measured_critical_path", "cgtool.inspect.analyzers.timing", "measured_critical_path", 2),
    ("serializations", "cgtool.inspect.analyzers.serializations", "serializations", 1),
    ("latest_before", "cgtool.inspect.analyzers._arrays", "latest_before", 2),
    ("certainty", "cgtool.inspect.analyzers.serializations", "certainty", 2),
    ("coverage", "cgtool.inspect.analyzers.waits", "coverage", 1),
    ("inferred_waits", "cgtool.inspect.analyzers.waits", "inferred_waits", 1),
    ("gpu_was_full_many (cover sums)", "cgtool.inspect.analyzers.waits", "gpu_was_full_many", 2),
    ("estimate (re-scheduling)", "cgtool.inspect.analyzers.saving", "estimate", 1),
    ("waited_with_room", "cgtool.inspect.analyzers.waits", "waited_with_room", 1),
    ("mean_cover_grouped (cover sums)", "cgtool.inspect.analyzers.cover", "mean_cover_grouped", 2),
    ("advise", "cgtool.inspect.analyzers.advice", "advise", 1),
    ("deps_report (render)", "cgtool.report.tables", "deps_report", 0),
]

PROFILE = r"""
import importlib, io, json, sys, time
from collections import defaultdict
phases = json.loads(sys.argv[3])
acc = defaultdict(float)
class Timed:
    def __init__(self, label, inner):
        self.label, self.inner = label, inner
    def decode(self, *a, **k):
        t = time.perf_counter()
        try:
            return self.inner.decode(*a, **k)
        finally:
            acc[self.label] += time.perf_counter() - t
    def __getattr__(self, k):
        return getattr(self.inner, k)
def timed(label, f):
    def g(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc[label] += time.perf_counter() - t
    return g
for label, mod, attr, _ in phases:
    try:
        m = importlib.import_module(mod)
    except ImportError:
        continue
    owner, _, name = attr.rpartition(".")
    obj = getattr(m, owner) if owner else m
    f = getattr(obj, name, None)
    if f is None:
        continue
    if hasattr(f, "decode") and not callable(f):
        setattr(obj, name, Timed(label, f))
    elif owner:  # a classmethod
        setattr(obj, name, classmethod(timed(label, f.__func__)))
    else:
        setattr(obj, name, timed(label, f))
        for other in ("cgtool.artifacts.trace.stream", "cgtool.inspect.files", "cgtool.inspect.deps",
                      "cgtool.cli.analysis", "cgtool.inspect.inputs",
                      "cgtool.inspect.analyzers.matching", "cgtool.inspect.analyzers.timing",
                      "cgtool.inspect.analyzers.serializations", "cgtool.inspect.analyzers.waits",
                      "cgtool.inspect.analyzers.cover"):
            om = importlib.import_module(other)
            if getattr(om, name, None) is f:
                setattr(om, name, getattr(obj, name))
from cgtool.artifacts.graph import GraphData
from cgtool.artifacts import trace as T
from cgtool.inspect import deps as D
from cgtool.report import tables
from rich.console import Console
t0 = time.perf_counter()
tr = T.load_trace(sys.argv[1])
from cgtool.inspect import inputs as I
gs = [GraphData.load(sys.argv[2])] if sys.argv[2] else I.embedded_graphs(tr)
r = D.analyze(tr, gs)
tables.deps_report(Console(file=io.StringIO(), width=120), r)
acc["total"] = time.perf_counter() - t0
print("@@" + json.dumps(acc))
"""


def profile(path: Path, info: dict[str, Any], src: Path = ROOT) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src), "CGTOOL_TRACE_WORKERS": "1"}
    r = subprocess.run([sys.executable, "-c", PROFILE, str(path), info["graph"] or "", json.dumps(PHASES)],
                       capture_output=True, text=True, env=env, cwd=src)
    line = [x for x in r.stdout.splitlines() if x.startswith("@@")]
    if r.returncode != 0 or not line:
        raise SystemExit(f"profile failed:\n{r.stderr[-3000:]}")
    return json.loads(line[-1][2:])


def print_profile(fmt: str, n: int, acc: dict[str, float], before: dict[str, float] | None = None) -> None:
    print(f"\nprofile, {fmt}, {n:,} events (one process, in-process timers; seconds"
          + (", before -> after)" if before else ")"))
    for label, _, _, depth in PHASES:
        if label in acc or (before and label in before):
            now = f"{acc[label]:7.3f}" if label in acc else "      -"
            was = (f"{before[label]:7.3f} -> " if label in before else "      - -> ") if before else ""
            print(f"  {'  ' * depth}{label:{44 - 2 * depth}s} {was}{now}")
    tot = f"{acc['total']:7.3f}"
    print(f"  {'total (load + analyze + render)':44s} {(str(round(before['total'], 3)).rjust(7) + ' -> ') if before else ''}{tot}")


# ----------------------------------------------------------------------------- identical results

CHECK = r"""
import json, sys
from pathlib import Path
from cgtool.artifacts.graph import GraphData
from cgtool.artifacts.trace import load_trace
from cgtool.inspect.deps import analyze, graphs_from_trace
from cgtool.errors import CgtoolError
out = {}
for spec in json.loads(sys.argv[1]):
    try:
        t = load_trace(spec["trace"])
        gs = [GraphData.load(spec["graph"])] if spec["graph"] else graphs_from_trace(t)
        r = analyze(t, gs)
        # Other tolerances reach other paths (more or fewer serializations and waits).
        more = [analyze(t, gs, tolerance_us=tol).to_json() for tol in spec.get("tolerances", ())]
    except CgtoolError as e:
        out[spec["name"]] = {"deps": {"error": str(e)}, "columns": None}
        continue
    # Names resolved per event: the order of the name table is not part of the result.
    cols = {k: getattr(t, k).tolist() for k in ("kind", "start", "end", "device", "stream", "correlation",
                                                  "graph_id", "tools_id", "channel", "channel_type", "seq",
                                                  "shape", "shared_memory", "nbytes")}
    cols["name"] = [t.names[i] for i in t.name.tolist()]
    cols["launches"] = sorted(t.launches.items())
    out[spec["name"]] = {"deps": [r.to_json(), *more], "columns": cols}
import cgtool
out["@cgtool"] = cgtool.__file__
Path(sys.argv[2]).write_text(json.dumps(out, sort_keys=True))
"""


def recordings() -> list[dict[str, Any]]:
    """Every real trace under tests/data that deps reads, with its graph export where it needs one."""
    out = []
    for t in sorted(DATA.glob("**/*trace.json.gz")):
        g = t.parent / "graph.json" if t.name == "trace.json.gz" and "kineto" in t.parent.name else None
        out.append({"name": str(t.relative_to(DATA)), "trace": str(t), "graph": str(g) if g else None,
                    "tolerances": [0.0, 3.0, 20.0]})
    return out


def check(ref: str, synthetic: list[dict[str, Any]]) -> bool:
    """Run the analysis of the code at git ``ref`` and of this tree on the same traces; compare."""
    specs = recordings() + synthetic
    with tempfile.TemporaryDirectory() as d:
        old = Path(d) / "old"
        old.mkdir()
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "cgtool"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=tar, check=True)
        res = {}
        for label, src in (("old", old), ("new", ROOT)):
            p = Path(d) / f"{label}.json"
            r = subprocess.run([sys.executable, "-c", CHECK, json.dumps(specs), str(p)], capture_output=True,
                               text=True, env={**os.environ, "PYTHONPATH": str(src)}, cwd=src)
            if r.returncode:
                raise SystemExit(f"check ({label}) failed:\n{r.stderr[-3000:]}")
            res[label] = json.loads(p.read_text())
    ok = True
    print(f"\nold: {res['old'].pop('@cgtool')}, new: {res['new'].pop('@cgtool')}")
    print(f"identical results against {ref} ({len(specs)} traces: {len(specs) - len(synthetic)} real "
          f"recordings, {len(synthetic)} synthetic):")
    for s in specs:
        a, b = res["old"][s["name"]], res["new"][s["name"]]
        same_deps, same_cols = a["deps"] == b["deps"], a["columns"] == b["columns"]
        ok &= same_deps and same_cols
        if isinstance(a["deps"], dict):
            print(f"  {'same' if same_deps else 'DIFFERENT'} (an error): {s['name']}  ({a['deps']['error'][:70]})")
            continue
        r = a["deps"][0]["summary"]
        print(f"  {'same' if same_deps and same_cols else 'DIFFERENT'}: {s['name']}  "
              f"(true {r['true']}, fake {r['fake']}, undecided {r['undecided']}, {r['match']}"
              f"{'' if same_cols else '; columns differ'}{'' if same_deps else '; deps result differs'})")
    print("  all identical" if ok else "  RESULTS DIFFER")
    return ok


# ----------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1e5,1e6", help="event counts, comma-separated (1e7 streams a ~3.5 GB file)")
    ap.add_argument("--formats", default="cupti,cupti-spaced,cupti-v0,kineto", help=f"of {', '.join(FORMATS)}")
    ap.add_argument("--scan-off", action="store_true",
                    help="each round also runs deps in one process with CGTOOL_TRACE_SCAN=0 (msgspec decodes)")
    ap.add_argument("--rounds", type=int, default=3, help="paired rounds (json.load, 1 process, 2 processes)")
    ap.add_argument("--quick", action="store_true", help="10^5 events, one round, no profile")
    ap.add_argument("--profile-size", type=float, default=1e6, help="events in the profiled run (0: none)")
    ap.add_argument("--json-load-max", type=float, default=2e6, help="largest size at which json.load is run")
    ap.add_argument("--check", metavar="GITREF", help="also check identical results against the code at GITREF")
    ap.add_argument("--before", metavar="GITREF", help="profile the code at GITREF too (before -> after)")
    ap.add_argument("--code", type=Path, default=ROOT, help="the source tree whose cgtool is measured")
    ap.add_argument("--tmp", default=tempfile.gettempdir(), help="folder for the generated traces")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="measure as PYTHONDONTWRITEBYTECODE leaves it (if set): every module compiled in every run")
    a = ap.parse_args()
    BYTECODE["cached"] = not a.no_bytecode
    if BYTECODE["cached"]:
        compile_bytecode(a.code)
    if a.quick:
        a.sizes, a.rounds, a.profile_size = "1e5", 1, 0
    sizes = [int(float(x)) for x in a.sizes.split(",")]
    fmts = a.formats.split(",")
    print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"python {sys.version.split()[0]}; medians of {a.rounds} paired round(s); bytecode "
          + ("cached (compiled once, as installed)" if BYTECODE["cached"] else
             "as the environment leaves it (PYTHONDONTWRITEBYTECODE="
             f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r})"))
    rows = []
    per_event_json: dict[str, float] = {}
    synthetic: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=a.tmp) as d:
        bare = measure(BARE, [], src=a.code)
        print(f"bare interpreter with cgtool's imports: {bare[0]:.2f} s, {bare[1]:.0f} MiB")
        for n in sizes:
            # Every format's file first, then the rounds: in each round every format is measured (the
            # order rotating), so a machine whose speed wanders moves every layout's figures alike.
            files: dict[str, tuple[Path, dict[str, Any], float]] = {}
            for fmt in fmts:
                need = n * 650 / 2**30 + 1
                if free_gib(d) < need:
                    print(f"skipping {fmt} {n:,}: {free_gib(d):.1f} GiB free in {d}, need ~{need:.1f}")
                    continue
                p = Path(d) / f"{fmt}_{n}.json"
                t = time.perf_counter()
                info = FORMATS[fmt](p, n)
                size = p.stat().st_size / 2**20
                files[fmt] = (p, info, size)
                print(f"{fmt}: {info['events']:,} GPU events, {size:,.0f} MiB (made in {time.perf_counter() - t:.1f} s)")
            res = {fmt: {"json": [], "1": [], "2": [], "1s": []} for fmt in files}
            names = list(files)
            for r in range(a.rounds):
                for fmt in names[r % len(names):] + names[:r % len(names)] if names else []:
                    p, info, _ = files[fmt]
                    got = res[fmt]
                    if n <= a.json_load_max:
                        got["json"].append(measure(JSON_LOAD, [str(p)]))
                    for w in ("1", "2"):
                        got[w].append(measure(CGTOOL, cgtool_args(p, info), w, a.code))
                    if a.scan_off:  # the same, the compiled scan of the JSON text off (msgspec decodes)
                        got["1s"].append(measure(CGTOOL, cgtool_args(p, info), "1", a.code, {"CGTOOL_TRACE_SCAN": "0"}))
                    print(f"  round {r + 1} {fmt}: " + ", ".join(f"{k} {v[-1][0]:.2f} s" for k, v in got.items() if v),
                          flush=True)
            for fmt in names:
                p, info, size = files[fmt]
                print(f"\n{fmt}: {info['events']:,} GPU events, {size:,.0f} MiB")
                med = {k: (statistics.median(x[0] for x in v), max(x[1] for x in v), max(x[2] for x in v))
                       for k, v in res[fmt].items() if v}
                if "json" in med:
                    per_event_json[fmt] = med["json"][0] / info["events"]
                    jl, approx = med["json"][0], ""
                else:
                    jl, approx = per_event_json.get(fmt, float("nan")) * info["events"], "~"
                labels = (("json", "json.load"), ("1", "cgtool deps, 1 process"),
                          ("2", "cgtool deps, 2 processes"), ("1s", "1 process, scan off"))
                for k, lab in labels:
                    if k in med:
                        sec, rss, ch = med[k]
                        print(f"  {lab:26s} {sec:7.2f} s (rounds: {', '.join(f'{x[0]:.2f}' for x in res[fmt][k])})  "
                              f"peak RSS {rss:7.0f} MiB = {rss / size:.2f}x file"
                              + (f", worker {ch:.0f} MiB" if k == "2" else ""))
                rows.append((fmt, info["events"], size, jl, approx, med))
                if n <= 1e5:
                    synthetic.append({"name": f"synthetic {fmt} {info['events']:,}", "trace": str(p),
                                      "graph": info["graph"]})
                if a.profile_size and n == int(a.profile_size):
                    acc = profile(p, info, a.code)
                    before = None
                    if a.before:
                        with tempfile.TemporaryDirectory() as od:
                            tar = subprocess.run(["git", "-C", str(ROOT), "archive", a.before, "cgtool"],
                                                 capture_output=True, check=True).stdout
                            subprocess.run(["tar", "-x", "-C", od], input=tar, check=True)
                            before = profile(p, info, Path(od))
                    print_profile(fmt, info["events"], acc, before)
                if n > 1e5:
                    p.unlink()
        print("\n| format | events | file MiB | json.load s | 1 process s | x json.load | 2 processes s | "
              "x json.load | peak RSS / file (1 proc, 2 procs) | targets |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
        for fmt, ev, size, jl, approx, med in rows:
            s1, r1, _ = med["1"]
            s2, r2, _ = med["2"]
            met = s2 / jl <= 0.20 and s1 / jl <= 0.33 and max(r1, r2) / size <= 1.5
            print(f"| {fmt} | {ev:,} | {size:,.0f} | {approx}{jl:.2f} | {s1:.2f} | {approx}{s1 / jl:.2f} | {s2:.2f} | "
                  f"{approx}{s2 / jl:.2f} | {r1 / size:.2f}, {r2 / size:.2f} | {'met' if met else 'MISSED'} |")
        print("targets: 2 processes <= 0.20x json.load, 1 process <= 0.33x, peak RSS <= 1.5x the file "
              "(~: against json.load at the largest measured size, scaled linearly)")
        # One line per layout and size, for reading the run at a glance: the ratios of this paired run.
        print("\nper layout (median of the rounds' times; each ratio from the same paired run):")
        for fmt, ev, size, jl, approx, med in rows:
            s1, r1, _ = med["1"]
            s2, r2, _ = med["2"]
            rss = max(r1, r2) / size
            verdicts = [("2 processes", s2 / jl, 0.20), ("1 process", s1 / jl, 0.33)]
            print(f"  {fmt:13s} {ev:>10,} events: " + ", ".join(
                f"{lab} {approx}{x:.3f}x json.load ({'PASS' if x <= lim else 'FAIL'} vs {lim:.2f}x)"
                for lab, x, lim in verdicts)
                + f", peak RSS {rss:.2f}x file ({'PASS' if rss <= 1.5 else 'FAIL'} vs 1.5x)")
        if a.check:
            ok = check(a.check, synthetic)
            if not ok:
                sys.exit(1)


if __name__ == "__main__":
    main()
