"""Check the outputs of scripts/gpu/two_gpus.sh against the programs' own counts (JSON only; no cgtool).

    python scripts/check_two_gpus.py bundle DIR            per-rank bundles: rank, world, one NCCL kernel a graph
    python scripts/check_two_gpus.py export PREFIX         PREFIX.rank<k>.json: the same for graph exports
    python scripts/check_two_gpus.py bench FILE REPLAYS    two ranks benched, no failure
    python scripts/check_two_gpus.py trace DIR REPLAYS [MC]  per-rank traces: every kernel node in every replay
    python scripts/check_two_gpus.py record REC STDOUT     per rank graphs and replays against the RESULT lines
    python scripts/check_two_gpus.py ranks DIR...          the nodes' outputs name distinct global ranks 0..n-1
    python scripts/check_two_gpus.py nccl TRACEDIR         the NCCL figures, from the raw trace events

Prints one line per check ("CHECK <what>: OK" or "CHECK <what>: FAIL <why>"); exit 1 when one fails.
"""
from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

FAILED = []


def _json(p: Path) -> Any:
    if not p.exists() and p.with_name(p.name + ".gz").exists():
        p = p.with_name(p.name + ".gz")
    raw = p.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def check(what: str, ok: bool, why: str = "") -> None:
    print(f"CHECK {what}: " + ("OK" if ok else f"FAIL {why}"), flush=True)
    if not ok:
        FAILED.append(what)


def _nccl(nodes: list[dict[str, Any]]) -> int:
    return sum(1 for n in nodes if "nccl" in str(n.get("kernel_name") or "").lower())


def _graph_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.json*") if p.name.startswith("graph"))


def bundle(folder: Path) -> None:
    ranks = {}
    for p in _graph_files(folder):
        d = _json(p)
        if "nodes" in d:
            ranks[d["cgtool"].get("rank")] = d
    check(f"bundle {folder} ranks", sorted(ranks) == [0, 1], f"ranks {sorted(ranks)}")
    for r, d in ranks.items():
        check(f"bundle {folder} rank {r}", d["cgtool"].get("world_size") == 2 and _nccl(d["nodes"]) == 1,
              f"world {d['cgtool'].get('world_size')}, NCCL kernels {_nccl(d['nodes'])}")


def export(prefix: Path) -> None:
    for r in (0, 1):
        p = prefix.with_name(f"{prefix.name}.rank{r}.json")
        ok = p.exists()
        d = _json(p) if ok else {}
        check(f"export rank {r}", ok and d["cgtool"].get("rank") == r and _nccl(d["nodes"]) == 1,
              f"{p} missing" if not ok else f"rank {d['cgtool'].get('rank')}, NCCL {_nccl(d['nodes'])}")


def bench(path: Path, want: int) -> None:
    d = _json(path)
    ws = d.get("workloads") or {}
    items = list(ws.items()) if isinstance(ws, dict) else [(str(w.get("rank")), w) for w in ws]
    ranks = sorted(int(m.group(1)) for k, _ in items if (m := re.search(r"rank (\d+)", k)))
    bad = [w.get("error") for _, w in items if w.get("error")]
    reps = {w.get("replays") for _, w in items}
    meds = [sorted(w.get("gpu_us") or [0])[len(w.get("gpu_us") or [0]) // 2] for _, w in items]
    print(f"  bench {path}: ranks {ranks}, replays {reps}, median GPU us per rank {meds}")
    check(f"bench {path}", ranks == [0, 1] and not bad and reps == {want}, f"ranks {ranks}, replays {reps}, errors {bad}")


def _kernels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") == "kernel"
            and (e.get("args") or {}).get("graph id") is not None]


def trace(folder: Path, replays: int, mc: str | None) -> None:
    files = sorted(p for p in folder.iterdir() if ".rank" in p.name)
    docs = {_json(p)["cgtool"]["rank"]: _json(p) for p in files}
    check(f"trace {folder} ranks", sorted(docs) == [0, 1], f"ranks {sorted(docs)}")
    for r, d in docs.items():
        g = d["cgtool"]["graphs"][0]
        knodes = sum(1 for n in g["nodes"] if n["node_type"] == "kernel")
        ks = _kernels(d)
        chans = {(e.get("args") or {}).get("channel") for e in ks}
        ok = len(ks) == replays * knodes and sum("nccl" in e["name"].lower() for e in ks) == replays
        if mc == "1":
            ok = ok and chans == {0} and d["cgtool"].get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
        check(f"trace {folder} rank {r}", ok, f"{len(ks)} kernels for {replays} x {knodes} nodes, channels {chans}")


def record(rec: Path, stdout: Path) -> None:
    res = {}
    for ln in stdout.read_text(errors="replace").splitlines():
        if ln.startswith("RESULT "):
            d = json.loads(ln[7:])
            res[d.get("rank")] = d
    tree = _json(rec / "index.json")
    ranks = {}
    for p in tree["processes"]:
        if p.get("followed") and p.get("rank") is not None:
            ranks[p["rank"]] = _json(rec / p["folder"] / "index.json")
    check(f"record {rec} ranks", sorted(ranks) == sorted(res) == [0, 1], f"recorded {sorted(ranks)}, RESULT {sorted(res)}")
    for r, idx in ranks.items():
        got = [g["replays"] for g in idx["graphs"]]
        want = res.get(r, {}).get("replays")
        check(f"record {rec} rank {r} replays", got == want, f"recorded {got}, program {want}")
        st = idx.get("stopping") or {}
        print(f"  rank {r}: stopping = {json.dumps(st)[:600]}")


def ranks(folders: list[Path]) -> None:
    seen = []
    for f in folders:
        mine = set()
        for p in f.rglob("*.json*"):
            try:
                d = _json(p)
            except (ValueError, OSError):
                continue
            if isinstance(d, dict):
                r = (d.get("cgtool") or {}).get("rank") if isinstance(d.get("cgtool"), dict) else d.get("rank")
                if isinstance(r, int):
                    mine.add(r)
        print(f"  {f}: ranks {sorted(mine)}")
        check(f"node {f} names one global rank", len(mine) == 1, f"ranks {sorted(mine)}")
        seen.append(mine)
    allr = sorted(set().union(*seen)) if seen else []
    check("nodes' ranks are distinct and 0..n-1", allr == list(range(len(folders))), f"{allr}")


def nccl(folder: Path) -> None:
    """Per rank: NCCL time / replay span, NCCL time overlapped by other kernels of the same replay;
    skew of replay starts between ranks (replays matched by order)."""
    starts: dict[int, list[float]] = {}
    for p in sorted(folder.iterdir()):
        if ".rank" not in p.name:
            continue
        d = _json(p)
        r = d["cgtool"]["rank"]
        by_corr: dict[Any, list[dict[str, Any]]] = {}
        for e in _kernels(d):
            by_corr.setdefault(e["args"].get("correlation"), []).append(e)
        shares, overlaps = [], []
        st = []
        for corr, ks in sorted(by_corr.items(), key=lambda kv: min(e["ts"] for e in kv[1])):
            t0 = min(e["ts"] for e in ks)
            t1 = max(e["ts"] + e["dur"] for e in ks)
            st.append(t0)
            nc = [e for e in ks if "nccl" in e["name"].lower()]
            other = [e for e in ks if e not in nc]
            ntime = sum(e["dur"] for e in nc)
            ov = 0.0
            for n in nc:  # brute force: every microsecond interval pair
                segs = sorted((max(n["ts"], o["ts"]), min(n["ts"] + n["dur"], o["ts"] + o["dur"])) for o in other)
                cur_s = cur_e = None
                for s, e_ in segs:
                    if e_ <= s:
                        continue
                    if cur_e is None or s > cur_e:
                        if cur_e is not None:
                            ov += cur_e - cur_s
                        cur_s, cur_e = s, e_
                    else:
                        cur_e = max(cur_e, e_)
                if cur_e is not None:
                    ov += cur_e - cur_s
            shares.append(ntime / (t1 - t0) if t1 > t0 else 0.0)
            overlaps.append(ov / ntime if ntime else 0.0)
        starts[r] = st
        n = len(shares)
        print(f"  rank {r}: {n} replays, NCCL share of span {sum(shares) / max(n, 1):.4f}, "
              f"overlapped {sum(overlaps) / max(n, 1):.4f}")
    if len(starts) == 2:
        k = min(len(v) for v in starts.values())
        sk = [abs(starts[0][i] - starts[1][i]) for i in range(k)]
        print(f"  replay start skew (|rank0 - rank1|, same clock only if one host): {[round(x, 2) for x in sk]}")


def main() -> None:
    cmd, *a = sys.argv[1:]
    if cmd == "bundle":
        bundle(Path(a[0]))
    elif cmd == "export":
        export(Path(a[0]))
    elif cmd == "bench":
        bench(Path(a[0]), int(a[1]))
    elif cmd == "trace":
        trace(Path(a[0]), int(a[1]), a[2] if len(a) > 2 else None)
    elif cmd == "record":
        record(Path(a[0]), Path(a[1]))
    elif cmd == "ranks":
        ranks([Path(x) for x in a])
    elif cmd == "nccl":
        nccl(Path(a[0]))
    else:
        raise SystemExit(f"unknown check {cmd}")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
