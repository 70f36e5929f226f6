"""What CUPTI's serial KERNEL records look like for a graph replay, beside the concurrent ones.

    PYTHONPATH=. python3 scripts/probes/probe_serial_records.py [sample_workloads/chain.py] [serial|concurrent]

Captures the workload, replays it a few times under CUPTI with one record kind (one process per
kind: CUPTI is enabled once, as `cgtool trace` does), and prints per record kind the counts, the
records with a zero or out-of-range start/end, the graph ids and node ids seen against the export's,
and the span of each replay. Run once per kind; the output is summarised in docs/deps.md.
"""
import sys
from collections import Counter

from cgtool.capture.cupti_trace import CuptiCollector, CuptiOptions
from cgtool.capture.entrypoint import parse_target
from cgtool.capture.runner import capture_workload

target = sys.argv[1] if len(sys.argv) > 1 else "sample_workloads/chain.py"
kind = sys.argv[2] if len(sys.argv) > 2 else "serial"
cap = capture_workload(parse_target(target), [], check=False)
exports = cap.exports()
ids = {n["tools_id"] for _, d in exports for n in d["nodes"] if n["node_type"] in ("kernel", "memset", "memcpy")}
import torch  # noqa: E402

for _ in range(3):
    cap.replay()
torch.cuda.synchronize()
with CuptiCollector(CuptiOptions(kernel_kind="kernel" if kind == "serial" else "concurrent")) as col:
    for _ in range(3):
        cap.replay()
    torch.cuda.synchronize()
recs = col.records
gpu = [r for r in recs if r["kind"] != "launch"]
print(f"{target} [{kind}]: {len(recs)} records {dict(Counter(r['kind'] for r in recs))}, dropped {col.dropped}, "
      f"notes {col.notes}")
starts = sorted(r["start"] for r in gpu)
med = starts[len(starts) // 2] if starts else 0
odd = [r for r in recs if not r["start"] or not r["end"] or abs(r["start"] - med) > 60e9]
print(f"records with a zero or far-off start/end: {len(odd)}")
for r in odd[:8]:
    print("  ", {k: r.get(k) for k in ("kind", "name", "start", "end", "graph_id", "graph_node_id", "correlation")})
seen = {r["graph_node_id"] for r in gpu if r.get("graph_id")}
print(f"node ids: {len(seen & ids)} of the export's {len(ids)} seen; {len(seen - ids)} unknown; "
      f"graph kernels {sum(1 for r in gpu if r.get('graph_id'))}, others {sum(1 for r in gpu if not r.get('graph_id'))}")
by_corr: dict = {}
for r in gpu:
    if r.get("graph_id"):
        by_corr.setdefault(r["correlation"], []).append(r)
for c, rs in sorted(by_corr.items()):
    s0, e1 = min(r["start"] for r in rs), max(r["end"] for r in rs)
    print(f"  replay corr {c}: {len(rs)} records, span {(e1 - s0) / 1e3:.1f} us")
