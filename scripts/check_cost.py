"""The cost estimate against measurement (CPU; reads the recordings in tests/data):

    python scripts/check_cost.py

For every workload recorded at CUDA_DEVICE_MAX_CONNECTIONS=1 and unset (scripts/record_kineto.py),
and for both profilers (torch.profiler: streams only; `cgtool trace`: channels), it prints the
saving `cgtool deps` predicts from the MAX_CONNECTIONS=1 trace alone (re-scheduling its replays
without the fake serializations, or the waits behind unrelated work) against the measured
difference of the median replay span between MAX_CONNECTIONS=1 and the default, with the
run-to-run spread (IQR of the per-replay spans) of each trace, and the error.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cgtool.inspect.deps import analyze, graphs_from_trace  # noqa: E402
from cgtool.artifacts.graph import GraphData  # noqa: E402
from cgtool.artifacts.trace import load_trace  # noqa: E402

DATA = ROOT / "tests" / "data"
WORKLOADS = ("forkjoin", "transformer", "moe", "forkjoin_small", "moe_small")


def _run(folder: Path, tool: str):  # type: ignore[no-untyped-def]
    if tool == "kineto":
        t = load_trace(folder / "trace.json.gz")
        return analyze(t, [GraphData.load(folder / "graph.json")])
    t = load_trace(folder / "cupti_trace.json.gz")
    return analyze(t, graphs_from_trace(t))


def rows() -> list[dict[str, object]]:
    out = []
    for w in WORKLOADS:
        for tool in ("kineto", "cupti"):
            one, dflt = DATA / f"{w}_kineto_mc1", DATA / f"{w}_kineto_mcdef"
            if not (one.is_dir() and dflt.is_dir()):
                continue
            r1, rd = _run(one, tool), _run(dflt, tool)
            s1, sd = r1.replay_table["span_us"], rd.replay_table["span_us"]
            q1, qd = np.percentile(s1, [25, 75]), np.percentile(sd, [25, 75])
            measured = float(np.median(s1) - np.median(sd))
            predicted = float(r1.cost["saving_us"])
            out.append({"workload": w, "profiler": tool, "span_mc1": float(np.median(s1)),
                        "span_default": float(np.median(sd)), "iqr_mc1": float(q1[1] - q1[0]),
                        "iqr_default": float(qd[1] - qd[0]), "measured_saving": measured,
                        "predicted_saving": predicted, "error": predicted - measured,
                        "gpu_filled": bool(r1.cost["gpu_filled"]), "fake_mc1": r1.n_fake,
                        "waits_mc1": sum(x.count for x in r1.inferred_waits)})
    return out


def main() -> None:
    rs = rows()
    print(f"{'workload':15} {'profiler':8} {'span MC=1':>10} {'default':>9} {'IQR 1/def':>11} "
          f"{'measured':>9} {'predicted':>9} {'error':>8}  filled  fake/waits")
    for r in rs:
        print(f"{r['workload']:15} {r['profiler']:8} {r['span_mc1']:10.1f} {r['span_default']:9.1f} "
              f"{r['iqr_mc1']:5.1f}/{r['iqr_default']:<5.1f} {r['measured_saving']:9.1f} "
              f"{r['predicted_saving']:9.1f} {r['error']:8.1f}  {str(r['gpu_filled']):6}  "
              f"{r['fake_mc1'] if r['profiler'] == 'cupti' else r['waits_mc1']}")
    errs = np.array([abs(float(r["error"])) for r in rs])  # type: ignore[arg-type]
    spans = np.array([float(r["span_mc1"]) for r in rs])  # type: ignore[arg-type]
    print(f"mean |error| {errs.mean():.1f} µs, max {errs.max():.1f} µs "
          f"({100 * (errs / spans).max():.1f}% of the MC=1 span)")


if __name__ == "__main__":
    main()
