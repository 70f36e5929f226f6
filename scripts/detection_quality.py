"""How well `cgtool deps` finds fake serializations in a trace without hardware channels, measured on
same-run truth: every CUPTI trace in tests/data (``*_trace*/trace.json.gz``,
``*_kineto_mc*/cupti_trace.json.gz``) with its channels and node ids removed (and its collector set to
torch.profiler) is a profiler-like trace whose exact answer is the original's.

    python3 scripts/detection_quality.py                 # the table (markdown) for docs/deps.md
    python3 scripts/detection_quality.py --json out.json # the figures per trace too
    python3 scripts/detection_quality.py DIR ...         # recordings elsewhere (new GPU recordings)

Definitions (docs/deps.md, "How sure"):

* **truth**: the occurrences (replay, node B) that the original trace shows fake-serialized on their
  channel (cgtool's exact classification) and that waited at least ``MIN_WAIT_US`` (1 µs) while ready;
  each weighs its waited time.
* **found**: the occurrences the stripped trace's analysis reports as waits behind unrelated work,
  each weighing its inferred wait; **cannot tell**: the late starts it reports as undecidable (on a
  full GPU, or while the graph's launch was still submitting its work).
* **recall by waited time**: truth's waited time that was found / all of truth's waited time.
* **precision by waited time**: found waited time that is truth / all found waited time.
* **estimated saving**: what the stripped analysis estimates per replay, against the exact one.
* **run-to-run spread** (second table): the recordings of one workload at the default setting in
  fresh processes (``<name>_kineto_mcdef`` and its ``_rep<k>`` repeats): per run the exact waited
  time, what timing alone found and the median span, each as its range over the runs.

Events are joined by their position in the file (stripping keeps it); the test
(tests/test_detection_quality.py) computes truth again from the raw CUPTI records with networkx.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cgtool.artifacts.graph import GraphData  # noqa: E402
from cgtool.artifacts.trace import load_trace  # noqa: E402
from cgtool.inspect.analyzers import waits  # noqa: E402
from cgtool.inspect.deps import analyze, graphs_from_trace  # noqa: E402

MIN_WAIT_US = 1.0
STRIP = ("graph id", "graph node id", "channel", "channel_type")


def cupti_traces(dirs: list[Path]) -> list[Path]:
    out: list[Path] = []
    for d in dirs:
        out += sorted(d.glob("*_trace*/trace.json.gz")) + sorted(d.glob("*_kineto_mc*/cupti_trace.json.gz"))
    return out


def strip(doc: dict[str, Any], keep_setting: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The trace as torch.profiler would write it (no channels, no node ids, no embedded graphs),
    and the graphs it embedded. ``keep_setting``: keep the CUDA_DEVICE_MAX_CONNECTIONS it records
    (as `cgtool trace --profiler torch` writes it); else it is unknown, as in a plain Kineto trace."""
    out = dict(doc)
    events = []
    for e in doc["traceEvents"]:
        a = e.get("args")
        if isinstance(a, dict) and any(k in a for k in STRIP):
            e = dict(e, args={k: v for k, v in a.items() if k not in STRIP})
        events.append(e)
    out["traceEvents"] = events
    cg = dict(doc.get("cgtool") or {})
    graphs = cg.pop("graphs", [])
    cg["collector"] = "torch.profiler"
    if not keep_setting:
        cg.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        if isinstance(cg.get("environment"), dict):
            cg["environment"] = {k: v for k, v in cg["environment"].items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    out["cgtool"] = cg
    return out, graphs


@dataclass
class Quality:
    trace: str
    workload: str
    connections: str
    replays: int
    fake: int  # exact: fake serializations (all)
    truth: int  # exact: those that waited >= MIN_WAIT_US
    truth_us: float  # per replay
    found: int
    found_us: float  # per replay
    hit_us: float  # truth's waited time found, per replay
    found_true_us: float  # found waited time that is truth, per replay
    cannot_tell: int
    cannot_tell_us: float  # per replay
    cannot_tell_truth_us: float  # truth's waited time among the late starts it cannot tell, per replay
    recall: float | None  # by waited time
    precision: float | None
    saving_exact_us: float | None
    saving_inferred_us: float | None
    # the same, where the trace records its CUDA_DEVICE_MAX_CONNECTIONS (cgtool trace --profiler torch)
    recall_stated: float | None
    precision_stated: float | None
    saving_stated_us: float | None
    spread_us: float  # the replays' spread: interquartile range of the span
    span_median_us: float


def _gz(p: Path) -> Any:
    return json.loads(gzip.decompress(p.read_bytes()))


def _inferred(doc: dict[str, Any], path: Path, tol: float, keep_setting: bool) -> tuple[Any, Any]:
    stripped, graphs = strip(doc, keep_setting)
    with tempfile.TemporaryDirectory() as tmp:
        sp = Path(tmp) / "stripped.json"
        sp.write_text(json.dumps(stripped))
        st = load_trace(sp)
    return st, analyze(st, [GraphData.from_json(g, source=f"{path} graph {k}") for k, g in enumerate(graphs)],
                       tolerance_us=tol)


def _found(st: Any, inf: Any) -> tuple[dict[int, float], dict[int, float]]:
    """(found, cannot tell): waited µs per event (by position in the file). Where the analysis had
    channels (one connection stated), what it found are its fake serializations that waited."""
    im = inf.events
    iseq = st.seq[im.ev]
    late = im.start - im.ready
    if inf.fake_visible:
        found = {int(iseq[j]): float(late[j]) for j in _fake_b(inf) if late[j] >= MIN_WAIT_US}
        return found, {}
    found = {int(iseq[j]): float(late[j]) for j in range(len(im.ev)) if im.late[j] == 1}
    cannot = {int(iseq[j]): float(late[j]) for j in range(len(im.ev)) if im.late[j] == 2}
    return found, cannot


def _rp(truth: dict[int, float], found: dict[int, float]) -> tuple[float | None, float | None, float, float]:
    truth_us, found_us = sum(truth.values()), sum(found.values())
    hit = sum(w for s, w in truth.items() if s in found)
    found_true = sum(w for s, w in found.items() if s in truth)
    return (hit / truth_us if truth_us else None, found_true / found_us if found_us else None, hit, found_true)


def measure(path: Path, tol: float = 0.5) -> Quality:
    doc = _gz(path)
    exact_t = load_trace(path)
    exact = analyze(exact_t, graphs_from_trace(exact_t), tolerance_us=tol)
    em = exact.events
    assert em is not None
    seq = exact_t.seq[em.ev]
    truth = {int(seq[j]): float(em.start[j] - em.ready[j]) for j in _fake_b(exact)
             if em.start[j] - em.ready[j] >= MIN_WAIT_US}
    st, inf = _inferred(doc, path, tol, keep_setting=False)
    found, cannot = _found(st, inf)
    recall, precision, hit, found_true = _rp(truth, found)
    st2, inf2 = _inferred(doc, path, tol, keep_setting=True)
    recall2, precision2, _, _ = _rp(truth, _found(st2, inf2)[0])
    n = len(exact.replay_table["span_us"])
    env = (exact_t.cgtool or {}).get("CUDA_DEVICE_MAX_CONNECTIONS")
    return Quality(
        trace=str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
        workload=Path(str((exact_t.cgtool or {}).get("workload") or path.parent.name)).stem,
        connections=str(env) if env else "default",
        replays=n, fake=exact.n_fake, truth=len(truth), truth_us=sum(truth.values()) / n, found=len(found),
        found_us=sum(found.values()) / n, hit_us=hit / n, found_true_us=found_true / n, cannot_tell=len(cannot),
        cannot_tell_us=sum(cannot.values()) / n,
        cannot_tell_truth_us=sum(w for s, w in truth.items() if s in cannot) / n,
        recall=recall, precision=precision,
        saving_exact_us=exact.figures().saving_us, saving_inferred_us=inf.figures().saving_us,
        recall_stated=recall2, precision_stated=precision2, saving_stated_us=inf2.figures().saving_us,
        spread_us=float(np.percentile(exact.replay_table["span_us"], 75) - np.percentile(exact.replay_table["span_us"], 25)),
        span_median_us=float(np.median(exact.replay_table["span_us"])))


def _fake_b(res: Any) -> list[int]:
    """Positions (in the result's matched events) of B of every fake serialization."""
    return [int(j) for j in (res.events.verdict == 1).nonzero()[0]]


def table(rows: list[Quality]) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.0f}%"

    def us(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    lines = ["| trace | connections | replays | exact: fake (of them waited >= 1 µs) | exact: waited µs/replay | "
             "timing only: found µs/replay | cannot tell µs/replay (of it truth) | recall | precision | "
             "setting recorded: recall / precision | estimated saving µs/replay: exact / timing only / setting recorded | "
             "span IQR µs |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for q in rows:
        lines.append(f"| {q.trace.replace('tests/data/', '')} | {q.connections} | {q.replays} | {q.fake} ({q.truth}) | "
                     f"{us(q.truth_us)} | {us(q.found_us)} | {us(q.cannot_tell_us)} ({us(q.cannot_tell_truth_us)}) | "
                     f"{pct(q.recall)} | {pct(q.precision)} | {pct(q.recall_stated)} / {pct(q.precision_stated)} | "
                     f"{us(q.saving_exact_us)} / {us(q.saving_inferred_us)} / {us(q.saving_stated_us)} | "
                     f"{us(q.spread_us)} |")
    return "\n".join(lines)


def run_of(trace: str) -> str:
    """The recording a row belongs to, its repeats folded in: forkjoin_tiny_kineto_mcdef_rep1 -> ..._mcdef."""
    return re.sub(r"_rep\d+$", "", Path(trace).parent.name)


def spread_table(rows: list[Quality]) -> str:
    """The run-to-run spread at the default setting, of every recording repeated in fresh processes."""
    groups: dict[str, list[Quality]] = {}
    for q in rows:
        if q.connections == "default":
            groups.setdefault(run_of(q.trace), []).append(q)
    lines = [("| recording (default setting) | runs | exact: waited µs/replay | timing only: found µs/replay | "
              "median span µs | span IQR µs |"),
             "| --- | ---: | ---: | ---: | ---: | ---: |"]

    def rng(vals: list[float]) -> str:
        lo, hi = min(vals), max(vals)
        return f"{lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}–{hi:.1f}"
    for name, qs in groups.items():
        if len(qs) < 2:
            continue
        lines.append(f"| {name} | {len(qs)} | {rng([q.truth_us for q in qs])} | {rng([q.found_us for q in qs])} | "
                     f"{rng([q.span_median_us for q in qs])} | {rng([q.spread_us for q in qs])} |")
    return "\n".join(lines)


def pooled(rows: list[Quality]) -> str:
    """The sentence `deps` prints beside every inference from timing (waits.DETECTION_QUALITY)."""
    few = [q for q in rows if q.connections in ("1", "2")]
    t_all = sum(q.truth_us * q.replays for q in few)
    hit = sum(q.hit_us * q.replays for q in few)
    cannot = sum(q.cannot_tell_truth_us * q.replays for q in few)
    default = max((q.found_us for q in rows if q.connections == "default"), default=0.0)
    if not t_all:
        return "no fake serialization waited at 1 or 2 connections in these recordings: nothing to pool"
    return (f"inferred from timing: on same-run CUPTI truth (docs/deps.md, 'How sure') timing alone found "
            f"{100 * hit / t_all:.0f}% of the time fake serializations waited at 1 and 2 connections and left "
            f"{100 * cannot / t_all:.0f}% under 'cannot tell'; at the default setting it reported at most "
            f"{default:.1f} µs per replay that were not fake. Treat the waits as leads, not findings")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", type=Path, default=[ROOT / "tests" / "data"])
    ap.add_argument("--json", type=Path, help="Also write the figures per trace as JSON.")
    ap.add_argument("--submit-latency-us", type=float, default=waits.SUBMIT_LATENCY_US,
                    help="How long after its launch's host call returned a late start still counts as waiting "
                         "for the launch (cannot tell); -inf: never, every late start is judged from timing.")
    args = ap.parse_args(argv)
    waits.SUBMIT_LATENCY_US = args.submit_latency_us
    rows = [measure(p) for p in cupti_traces(args.dirs)]
    print(table(rows))
    print()
    print(spread_table(rows))
    print()
    print(pooled(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(q) for q in rows], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
