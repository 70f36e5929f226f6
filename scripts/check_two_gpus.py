"""Check the outputs of scripts/gpu/two_gpus.sh against the programs' own counts (JSON only; no cgtool).

    python scripts/check_two_gpus.py bundle DIR            per-rank bundles: rank, world, one NCCL kernel a graph
    python scripts/check_two_gpus.py export PREFIX         PREFIX.rank<k>.json: the same for graph exports
    python scripts/check_two_gpus.py bench FILE REPLAYS    two ranks benched, no failure
    python scripts/check_two_gpus.py trace DIR REPLAYS [MC]  per-rank traces: every kernel node in every replay
    python scripts/check_two_gpus.py record REC STDOUT [hang STDERR]  per rank replays against the RESULT
                                                        lines; destroy_process_group; (hang) the summary lines
    python scripts/check_two_gpus.py ranks KIND DIR... [OUT...]  (bundle|trace|record) each node's output names
                                                        one global rank, together 0..n-1; record: its RESULT
    python scripts/check_two_gpus.py nccl TRACEDIR DEPS    the NCCL figures from the raw trace events vs deps --json

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
    reps = {(w.get("spec") or {}).get("replays", w.get("replays")) for _, w in items}
    meds = [sorted(w.get("gpu_us") or [0])[len(w.get("gpu_us") or [0]) // 2] for _, w in items]
    print(f"  bench {path}: ranks {ranks}, replays {reps}, median GPU us per rank {meds}")
    check(f"bench {path}", ranks == [0, 1] and not bad and reps == {want}, f"ranks {ranks}, replays {reps}, errors {bad}")


def _kernels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") == "kernel"
            and (e.get("args") or {}).get("graph id") is not None]


def trace(folder: Path, replays: int, mc: str | None) -> None:
    files = sorted(p for p in folder.rglob("*") if ".rank" in p.name and p.is_file())
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


def record(rec: Path, stdout: Path, mode: str | None = None, stderr: Path | None = None) -> None:
    """Per rank: the recorded replays against the program's RESULT line, the ranks' all-reduced values
    agree; ``hang``: destroy_process_group did not return, a live graph held NCCL kernels, and the
    summary (stderr) names each rank's stopping line."""
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
    vals = {r: d.get("value") for r, d in res.items()}
    check(f"record {rec} all-reduced values agree", len(set(vals.values())) == 1, f"{vals}")
    for r, idx in sorted(ranks.items()):
        got = [g["replays"] for g in idx["graphs"]]
        want = res.get(r, {}).get("replays")
        check(f"record {rec} rank {r} replays", got == want, f"recorded {got}, program {want}")
        st = idx.get("stopping") or {}
        print(f"  rank {r}: stopping = {json.dumps(st)[:600]}")
        dpg = st.get("destroy_process_group") or {}
        held = dpg.get("live_nccl_graphs")
        if mode == "hang":
            check(f"record {rec} rank {r} destroy_process_group under a live NCCL graph",
                  dpg.get("returned") is False and bool(held), f"{dpg}")
        else:
            check(f"record {rec} rank {r} destroy_process_group returned, no live NCCL graph",
                  dpg.get("returned") is True and held == [], f"{dpg}")
    if mode == "hang" and stderr is not None:
        text = stderr.read_text(errors="replace")
        for r in sorted(ranks):
            lines = [ln.strip() for ln in text.splitlines() if f"rank {r} (pid" in ln]
            for ln in lines:
                print(f"  summary: {ln[:300]}")
            check(f"record {rec} summary names rank {r}'s stopping line",
                  any(("stopped in" in ln or "no progress" in ln) and "nccl_in_graph.py:" in ln for ln in lines),
                  "no such line")


def ranks(kind: str, args: list[Path]) -> None:
    """Two simulated nodes, one rank each: each node's output (``bundle``: capture's rank folders,
    ``trace``: trace.rank<k> files, ``record``: the recording's ranks, then each node's stdout with the
    program's RESULT line) names one global rank, and together they name 0..n-1. c10d's rendezvous
    gives out ranks in the order the agents arrive, so a node's rank may differ from its --node-rank."""
    n = len(args) // 2 if kind == "record" else len(args)
    folders, outs = args[:n], args[n:]
    seen = []
    for i, f in enumerate(folders):
        mine: dict[int, Any] = {}
        if kind == "bundle":
            for p in f.rglob("graph.json*"):
                mine[_json(p)["cgtool"]["rank"]] = p
        elif kind == "trace":
            for p in f.rglob("trace.rank*"):
                mine[_json(p)["cgtool"]["rank"]] = p
        else:
            for rec in f.rglob("index.json"):
                doc = _json(rec)
                for pr in doc.get("processes") or []:
                    if pr.get("followed") and pr.get("rank") is not None:
                        mine[pr["rank"]] = _json(rec.parent / pr["folder"] / "index.json")
        print(f"  {kind} {f}: global ranks {sorted(mine)}")
        check(f"{kind} node {f} names one global rank", len(mine) == 1, f"ranks {sorted(mine)}")
        if kind == "record" and i < len(outs) and len(mine) == 1:
            (r, idx), = mine.items()
            res = [json.loads(ln[7:]) for ln in outs[i].read_text(errors="replace").splitlines() if ln.startswith("RESULT ")]
            got = [g["replays"] for g in idx["graphs"]]
            check(f"record node {f} rank {r} replays vs RESULT", len(res) == 1 and res[0].get("rank") == r
                  and res[0]["replays"] == got, f"recorded {got}, RESULT {res}")
        seen.append(set(mine))
    allr = sorted(set().union(*seen)) if seen else []
    check(f"{kind}: the nodes' ranks are distinct and 0..n-1", allr == list(range(len(folders)))
          and sum(map(len, seen)) == len(folders), f"{allr}")


def _union(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(iv):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _inter(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> float:  # brute force, every pair
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in _union(x) for c, d in _union(y))


def _close(a: float | None, b: float | None, rel: float = 0.01, abs_: float = 0.05) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= max(abs_, rel * abs(b))


def nccl(folder: Path, deps_json: Path | None) -> None:
    """Per rank, from the raw kernel events: NCCL time over the replay span, the part of it other kernels
    of the replay overlap, the last NCCL kernel's excess over the shortest rank's (waiting); across
    ranks, the spread of (replay start - end of its last NCCL kernel). Compared with deps --json (1 %)."""
    per: dict[int, list[dict[str, float]]] = {}
    for p in sorted(folder.rglob("*")):
        if ".rank" not in p.name or not p.is_file():
            continue
        d = _json(p)
        r = d["cgtool"]["rank"]
        by_corr: dict[Any, list[dict[str, Any]]] = {}
        for e in _kernels(d):
            by_corr.setdefault(e["args"].get("correlation"), []).append(e)
        reps = []
        for ks in sorted(by_corr.values(), key=lambda ks: min(e["ts"] for e in ks)):
            t0, t1 = min(e["ts"] for e in ks), max(e["ts"] + e["dur"] for e in ks)
            nc = [(e["ts"], e["ts"] + e["dur"]) for e in ks if "nccl" in e["name"].lower()]
            ot = [(e["ts"], e["ts"] + e["dur"]) for e in ks if "nccl" not in e["name"].lower()]
            if not nc:
                continue
            last = max(nc, key=lambda iv: iv[1])
            ntime = sum(b - a for a, b in _union(nc))
            reps.append({"span": t1 - t0, "nccl": ntime, "share": ntime / (t1 - t0), "overlap": _inter(nc, ot) / ntime,
                         "rel_start": t0 - last[1], "last_dur": last[1] - last[0]})
        per[r] = reps
    raw: dict[int, dict[str, float | None]] = {}
    for r, reps in sorted(per.items()):
        n = len(reps)
        raw[r] = {"share": sum(x["share"] for x in reps) / n if n else None,
                  "overlap": sum(x["overlap"] for x in reps) / n if n else None,
                  "span": sum(x["span"] for x in reps) / n if n else None}
        print(f"  raw rank {r}: {n} replays, span {raw[r]['span']:.2f} us, NCCL share {raw[r]['share']:.4f}, "
              f"overlapped {raw[r]['overlap']:.4f}")
    skews: list[float] = []
    waits: dict[int, list[float]] = {r: [] for r in per}
    if len(per) == 2 and len({len(v) for v in per.values()}) == 1:
        for i in range(len(per[0])):
            rel = [per[r][i]["rel_start"] for r in (0, 1)]
            skews.append(max(rel) - min(rel))
            durs = [per[r][i]["last_dur"] for r in (0, 1)]
            for r in (0, 1):
                waits[r].append(durs[r] - min(durs))
        print(f"  raw start skew per replay (us): {[round(x, 2) for x in skews]}; mean "
              f"{sum(skews) / len(skews):.2f}; wait per rank (us): "
              f"{ {r: round(sum(w) / len(w), 2) for r, w in waits.items()} }")
    if deps_json is None or not deps_json.exists():
        check(f"nccl {folder} deps --json written", False, f"{deps_json} missing")
        return
    figs = _json(deps_json).get("nccl")
    if not figs:
        check(f"nccl {folder} deps figures", False, "deps --json has no nccl block")
        return
    for r, vals in raw.items():
        g = (figs["ranks"].get(str(r)) or [{}])[0]
        w = waits.get(r) or []
        ok = (_close(g.get("nccl_share"), vals["share"]) and _close(g.get("nccl_overlap"), vals["overlap"])
              and _close(g.get("span_us"), vals["span"]) and _close(g.get("wait_us"), sum(w) / len(w) if w else None))
        check(f"nccl {folder} rank {r} share/overlap/span/wait vs raw", ok,
              f"deps {g.get('nccl_share')}, {g.get('nccl_overlap')}, {g.get('span_us')}, {g.get('wait_us')}; raw {vals}")
    sk = (figs.get("across_ranks") or [{}])[0].get("mean_start_skew_us")
    check(f"nccl {folder} start skew vs raw", bool(skews) and _close(sk, sum(skews) / len(skews)),
          f"deps {sk}, raw {skews}")


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
        record(Path(a[0]), Path(a[1]), a[2] if len(a) > 2 else None, Path(a[3]) if len(a) > 3 else None)
    elif cmd == "ranks":
        ranks(a[0], [Path(x) for x in a[1:]])
    elif cmd == "nccl":
        nccl(Path(a[0]), Path(a[1]) if len(a) > 1 else None)
    else:
        raise SystemExit(f"unknown check {cmd}")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
