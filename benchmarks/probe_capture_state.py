"""Why does one eager output kept alive before capture move the 400-kernel chain's replay time?

    PYTHONPATH=. python3 benchmarks/probe_capture_state.py [--rounds 1] [--replays 200] [--blocks 20]
                       [--arms plain,kept_current,...] [--profile-arms ...] [--budget S] [--json OUT]

GPU only. Every ARM runs in a FRESH process (a process's allocator state is what is probed), the
arms interleaved and their order rotated each round. In each process: set the step up (the chain of
``sample_workloads/chain.py``, or an in-place variant), warm it up three times on a side stream as
a user's program does, put the allocator in the arm's state, capture with ``torch.cuda.graph``,
then time ``--blocks`` blocks of ``--replays``/``--blocks`` back-to-back replays between CUDA events
(as ``cgtool bench``) after 50 untimed ones: **T0**, the replay time in the arm's state. Then, in
every arm but ``plain_quiet``, the same graph is timed again

* **T1** after the step has run eagerly once more on the side stream, its output dropped, and
* **T2** after cgtool's replay check (the step run eagerly on the current stream, its outputs
  copied to the host, one replay, compared): does running the step eagerly move the replay time of
  a graph already captured, whose buffers stay where they are?

Recorded per process: where the graph's buffers are (every CUDA tensor each op of the captured step
reads and writes, logged as integers by a ``TorchDispatchMode`` around the capture, with the
allocator segment it lies in from ``torch.cuda.memory_snapshot()``, its offset there, and its 2 MiB
and 64 KiB page), the segments before and after capture (which survive ``torch.cuda.graph``'s
``empty_cache``), and, in the arms of ``--profile-arms``, the kernels of 5 replays under
``torch.profiler`` at the end (Kineto's CUPTI records): median kernel duration and median gap
between consecutive kernels. Longer kernels point at memory (L2 / TLB); longer gaps at the graph's
launch path.

Arms (the state the capture is made in):

* ``plain``: nothing (a user's program; also what ``cgtool bench`` times: it checks after timing).
* ``plain_quiet``: ``plain`` with nothing after T0 (its profile is the state as captured).
* ``kept_current`` / ``kept_side``: the step's eager output kept, made on the current stream / on
  the warm-up side stream.
* ``old_cgtool``: the step run eagerly on the current stream and clones of its outputs kept (the
  replay check run before the capture).
* ``eager_dropped``: the step run eagerly on the current stream, its output dropped.
* ``host_ref``: the step run eagerly, its outputs copied to the host, the device ones dropped.
* ``new_cgtool``: ``plain``, then the check before T0.
* ``bytes_<where>_<n>``: one ``torch.empty(n bytes)`` kept, allocated on the current (``cur``) or
  side (``side``) stream, no kernel run: does a kept allocation, and its size (small pool <= 1 MiB,
  large pool above), matter?
* ``pad_<n>``: nothing kept, but an n-byte allocation made inside the capture before the step's,
  so the step's buffers sit n bytes (rounded to 512) further into the graph's pool segment: does
  the offset in the segment matter?
* ``inplace_*``: the same states for a chain of in-place kernels on one buffer (one allocation):
  does the placement of the intermediates matter?

``DEFAULT_ARMS`` are the ones that decide the question, most decisive first (``--budget`` stops
starting arms that would not finish in time; every finished arm is printed and written to
``--json`` at once, so a run cut short keeps what it measured):

* ``plain`` vs ``kept_current``: does the kept output move T0 (the issue's 392 vs 460 µs)?
* ``old_cgtool`` vs ``plain``: the check before the capture vs cgtool's order now;
* ``plain_quiet``: a second sample of the plain state, profiled as captured;
* ``eager_dropped``, ``kept_side``: an eager run on the current stream without a kept output, and
  a kept output made on the side stream: is it the kept buffer or the eager run on the stream the
  graph replays on?
* ``bytes_cur_4096`` (the chain's output size), ``bytes_cur_1048576`` (the largest small-pool
  request), ``bytes_cur_4194304`` (large pool): a kept allocation alone, three sizes;
* ``pad_4096``: the offset of the graph's buffers in their segment.
* in every arm, T1 and T2 against T0: a graph already captured, the step run eagerly after it.

Output: one line per arm as it finishes, then the table (T0 per round, ratio to ``plain``'s T0,
T1, T2, the graph pool's segments, distinct pages touched, kernel duration and gap) and, with
``--json``, every process's full record.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ARMS = ["plain", "plain_quiet", "old_cgtool", "kept_current", "kept_side", "eager_dropped", "host_ref", "new_cgtool",
        "bytes_cur_4096", "bytes_cur_1048576", "bytes_cur_4194304", "bytes_side_512", "bytes_side_4096",
        "bytes_side_1048576", "bytes_side_4194304", "pad_512", "pad_4096", "inplace_plain", "inplace_old_cgtool",
        "inplace_kept_side"]
DEFAULT_ARMS = ["plain", "kept_current", "old_cgtool", "plain_quiet", "eager_dropped", "kept_side", "bytes_cur_4096",
                "bytes_cur_4194304", "pad_4096", "bytes_cur_1048576"]
DEFAULT_PROFILE = ["plain_quiet", "plain", "kept_current"]
MIB2 = 2 << 20
KIB64 = 64 << 10


# ---------------------------------------------------------------------------------------- one arm

def _tensors(out: Any) -> list[Any]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _tensors(o)]
    return []


def _step(variant: str, kernels: int) -> Any:
    import torch

    if variant == "chain":
        sys.path.insert(0, ROOT)
        from cgtool.capture.entrypoint import call_setup, parse_target, resolve

        t = parse_target(os.path.join(ROOT, "sample_workloads", "chain.py"))
        args = ["--kernels", str(kernels)]
        return call_setup(t, resolve(t, args), args)
    x = torch.ones(1024, device="cuda")

    def step() -> Any:  # one buffer: a copy, then kernels - 1 in-place kernels on it
        y = x.clone()
        for k in range(kernels - 1):
            if k % 2:
                y.add_(0.0001)
            else:
                y.mul_(1.0001)
        return y

    return step


def _ptr_log() -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class PtrLog(TorchDispatchMode):
        """(op, [(ptr, bytes) read], [(ptr, bytes) written]) of every op; integers only."""

        def __init__(self) -> None:
            super().__init__()
            self.rows: list[tuple[str, list[tuple[int, int]], list[tuple[int, int]]]] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))

            def ptrs(obj: Any) -> list[tuple[int, int]]:
                return [(int(t.data_ptr()), int(t.untyped_storage().nbytes())) for t in tree_flatten(obj)[0]
                        if isinstance(t, torch.Tensor) and t.is_cuda]

            self.rows.append((str(func), ptrs((args, kwargs)), ptrs(out)))
            return out

    return PtrLog()


def _segments() -> list[dict[str, Any]]:
    import torch

    out = []
    for s in torch.cuda.memory_snapshot():
        pool = s.get("segment_pool_id")
        out.append({"address": int(s["address"]), "size": int(s["total_size"]), "stream": int(s.get("stream", 0)),
                    "type": s.get("segment_type"), "pool": None if pool is None else [int(p) for p in pool],
                    "active_blocks": sum(1 for b in s.get("blocks", []) if b.get("state") == "active_allocated")})
    return out


def _where(ptr: int, segs: list[dict[str, Any]]) -> dict[str, Any]:
    for i, s in enumerate(segs):
        if s["address"] <= ptr < s["address"] + s["size"]:
            return {"segment": i, "offset": ptr - s["address"], "pool": s["pool"]}
    return {"segment": None, "offset": None, "pool": None}


def _kernel_stats(g: Any, replays: int = 5) -> dict[str, Any]:
    """Median kernel duration and gap (ns) over ``replays`` replays, from Kineto's chrome trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            g.replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            evs = [e for e in json.load(f).get("traceEvents", []) if e.get("cat") == "kernel"]
    evs.sort(key=lambda e: e["ts"])
    per = len(evs) // replays if replays else 0
    durs, gaps, by_name = [], [], {}
    for k in range(replays):
        rep = evs[k * per:(k + 1) * per]
        for a, b in zip(rep, rep[1:]):
            gaps.append((b["ts"] - a["ts"] - a["dur"]) * 1000)
        for e in rep:
            durs.append(e["dur"] * 1000)
            by_name.setdefault(e["name"][:60], []).append(e["dur"] * 1000)
    med = statistics.median
    return {"kernels_per_replay": per, "kernel_ns": med(durs) if durs else None, "gap_ns": med(gaps) if gaps else None,
            "span_us": (evs[per - 1]["ts"] + evs[per - 1]["dur"] - evs[0]["ts"]) if per else None,
            "by_name_ns": {n: med(v) for n, v in by_name.items()}}


def _time(g: Any, replays: int, blocks: int) -> list[float]:
    """50 untimed replays, then ``blocks`` blocks of back-to-back replays between CUDA events."""
    import torch

    for _ in range(50):
        g.replay()
    torch.cuda.synchronize()
    per = max(1, replays // blocks)
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(blocks + 1)]
    evs[0].record()
    for k in range(blocks):
        for _ in range(per):
            g.replay()
        evs[k + 1].record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) * 1000 / per for a, b in zip(evs, evs[1:])]


def _check(step: Any, g: Any, out: Any) -> None:
    """cgtool's replay check: the step run eagerly, host copies of its outputs, one replay, compared."""
    import torch

    ref = [t.detach().cpu() for t in _tensors(step())]
    g.replay()
    torch.cuda.synchronize()
    assert all(torch.allclose(a, b.cpu()) for a, b in zip(ref, _tensors(out)))


def one(arm: str, kernels: int, replays: int, blocks: int, profile_kernels: bool) -> dict[str, Any]:
    import torch

    t_start = time.time()
    variant = "inplace" if arm.startswith("inplace_") else "chain"
    state = arm[len("inplace_"):] if variant == "inplace" else arm
    step = _step(variant, kernels)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    keep: list[Any] = []
    if state == "old_cgtool":
        keep += [t.detach().clone() for t in _tensors(step())]
    elif state == "kept_current":
        keep.append(step())
    elif state == "kept_side":
        with torch.cuda.stream(side):
            keep.append(step())
        torch.cuda.current_stream().wait_stream(side)
    elif state == "eager_dropped":
        step()
    elif state == "host_ref":
        keep += [t.detach().cpu() for t in _tensors(step())]
    elif state.startswith("bytes_"):
        _, where, n = state.split("_")
        with torch.cuda.stream(side if where == "side" else torch.cuda.current_stream()):
            keep.append(torch.empty(int(n), dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()
    before = _segments()

    pad = int(state.split("_")[1]) if state.startswith("pad_") else 0
    log = _ptr_log()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        with log:
            padding = torch.empty(pad, dtype=torch.uint8, device="cuda") if pad else None
            out = step()
    del padding
    torch.cuda.synchronize()
    after = _segments()

    if state == "new_cgtool":  # cgtool's check before the timing
        _check(step, g, out)
    samples = _time(g, replays, blocks)
    later: dict[str, Any] = {}
    if arm != "plain_quiet":
        with torch.cuda.stream(side):  # T1: the step once more on the side stream, output dropped
            step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        t1 = _time(g, replays, blocks)
        _check(step, g, out)  # T2: after cgtool's check
        t2 = _time(g, replays, blocks)
        later = {"after_side_eager_us": statistics.median(t1), "after_side_eager_samples_us": t1,
                 "after_check_us": statistics.median(t2), "after_check_samples_us": t2,
                 "segments_end": _segments()}

    pool = [int(p) for p in g.pool()]
    bufs = []
    for op, ins, outs in log.rows:
        for role, ptrs in (("read", ins), ("write", outs)):
            for p, n in ptrs:
                bufs.append({"op": op, "role": role, "ptr": p, "bytes": n, **_where(p, after)})
    ptrs = sorted({b["ptr"] for b in bufs})
    touched = [(b["ptr"], b["bytes"]) for b in bufs]
    pages2m = {q // MIB2 for p, n in touched for q in (p, p + max(n, 1) - 1)}
    pages64k = {q // KIB64 for p, n in touched for q in (p, p + max(n, 1) - 1)}
    graph_segs = [s for s in after if s["pool"] == pool]
    rec = {
        "arm": arm, "variant": variant, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "median_us": statistics.median(samples), "samples_us": samples, **later,
        "pool": pool, "graph_segments": graph_segs,
        "segments_before": before, "segments_after": after,
        "distinct_buffers": len(ptrs), "pages_2m": len(pages2m), "pages_64k": len(pages64k),
        "buffers": [{"ptr": p, "offset": _where(p, after)["offset"], "segment": _where(p, after)["segment"],
                     "in_graph_pool": _where(p, after)["pool"] == pool,
                     "uses": sum(1 for b in bufs if b["ptr"] == p)} for p in ptrs],
        "ops": len(log.rows),
    }
    if profile_kernels:
        try:  # the timings above are kept if the profiler fails
            rec["kernels"] = _kernel_stats(g)
        except Exception as e:
            rec["kernels_error"] = f"{type(e).__name__}: {e}"[:300]
    rec["process_s"] = time.time() - t_start  # after torch's import: the arm's own work
    del out, keep
    return rec


# ---------------------------------------------------------------------------------------- driver

def _fmt_segs(rec: dict[str, Any]) -> str:
    return " ".join(f"{s['address']:#x}+{s['size'] >> 10}K" for s in rec["graph_segments"])


def _f(x: Any, fmt: str, width: int) -> str:
    return "-".rjust(width) if x is None else format(x, fmt).rjust(width)


def _line(arm: str, rs: list[dict[str, Any]], base: float | None) -> str:
    meds = [x["median_us"] for x in rs]
    ratio = statistics.median(meds) / base if base else None
    k: dict[str, Any] = next((x["kernels"] for x in rs if "kernels" in x), {})
    offs = sorted({b["offset"] for b in rs[0]["buffers"] if b["in_graph_pool"] and b["offset"] is not None})
    t1 = [x["after_side_eager_us"] for x in rs if "after_side_eager_us" in x]
    t2 = [x["after_check_us"] for x in rs if "after_check_us" in x]
    m1, m2 = (statistics.median(t) if t else None for t in (t1, t2))
    return (f"{arm:20s} {' '.join(f'{m:7.1f}' for m in meds):>16s} {_f(ratio, '.3f', 6)} "
            f"{_f(m1, '.1f', 7)} {_f(m2, '.1f', 7)} "
            f"{rs[0]['distinct_buffers']:4d} {rs[0]['pages_2m']:5d} {rs[0]['pages_64k']:6d} "
            f"{_f(k.get('kernel_ns'), '.0f', 9)} {_f(k.get('gap_ns'), '.0f', 7)}  {_fmt_segs(rs[0])}; {offs[:6]}")


HEAD = (f"{'arm':20s} {'T0 µs (rounds)':>16s} {'ratio':>6s} {'T1 µs':>7s} {'T2 µs':>7s} {'bufs':>4s} {'2M pg':>5s} "
        f"{'64K pg':>6s} {'kernel ns':>9s} {'gap ns':>7s}  graph pool segments; buffer offsets")


def _write(path: str | None, doc: dict[str, Any]) -> None:
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--profile-here", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--arms", default=",".join(DEFAULT_ARMS), help=f"comma-separated, of: {', '.join(ARMS)}")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--kernels", type=int, default=400)
    p.add_argument("--replays", type=int, default=200, help="timed replays per timing (T0, T1, T2)")
    p.add_argument("--blocks", type=int, default=20)
    p.add_argument("--profile-arms", default=",".join(DEFAULT_PROFILE),
                   help="arms whose kernels are profiled at the end of the process (first round only)")
    p.add_argument("--budget", type=float, default=0.0,
                   help="seconds: start no arm that would end later than this (0: no limit)")
    p.add_argument("--dry-run", action="store_true", help="print the processes it would start, start none")
    p.add_argument("--json", help="write every process's record here (rewritten after every arm)")
    a = p.parse_args()
    if a.one:
        rec = one(a.one, a.kernels, a.replays, a.blocks, a.profile_here)
        print("PROBE " + json.dumps(rec), flush=True)
        return

    arms = [x for x in a.arms.split(",") if x]
    unknown = [x for x in arms if x not in ARMS]
    if unknown:
        p.error(f"unknown arm(s): {', '.join(unknown)} (known: {', '.join(ARMS)})")
    profiled = {x for x in a.profile_arms.split(",") if x}
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    print(f"chain of {a.kernels} kernels; {a.rounds} round(s) x {len(arms)} arms, each a fresh process; "
          f"{a.blocks} blocks of {max(1, a.replays // a.blocks)} replays per timing"
          + (f"; budget {a.budget:.0f} s" if a.budget else ""), flush=True)
    recs: dict[str, list[dict[str, Any]]] = {x: [] for x in arms}
    doc: dict[str, Any] = {"kernels": a.kernels, "replays": a.replays, "blocks": a.blocks, "records": recs}
    t0, slowest, stopped, failed = time.time(), 0.0, [], 0
    for r in range(a.rounds):
        order = arms[r % len(arms):] + arms[:r % len(arms)]
        for arm in order:
            prof = r == 0 and arm in profiled
            cmd = [sys.executable, __file__, "--one", arm, "--kernels", str(a.kernels), "--replays", str(a.replays),
                   "--blocks", str(a.blocks)] + (["--profile-here"] if prof else [])
            if a.dry_run:
                print("  would run: " + " ".join(cmd[1:]))
                continue
            if a.budget and time.time() - t0 + max(slowest, 6.0) > a.budget:
                stopped.append(f"{arm} (round {r + 1})")
                continue
            ts = time.time()
            q = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
            slowest = max(slowest, time.time() - ts)
            line = next((ln for ln in q.stdout.splitlines() if ln.startswith("PROBE ")), None)
            if line is None:
                print(f"  {arm}: FAILED (exit {q.returncode}): {(q.stderr.strip().splitlines() or ['?'])[-1][:300]}",
                      flush=True)
                failed += 1
                continue
            rec = json.loads(line[len("PROBE "):])
            rec["round"] = r
            recs[arm].append(rec)
            doc.setdefault("device", rec.get("device"))
            doc.setdefault("torch", rec.get("torch"))
            base = recs.get("plain") or recs.get("plain_quiet") or []
            print(f"  {_line(arm, [rec], statistics.median([x['median_us'] for x in base]) if base else None)}"
                  f"  ({time.time() - ts:.1f} s, {time.time() - t0:.0f} s in all)", flush=True)
            _write(a.json, doc)
    if a.dry_run:
        return
    if stopped:
        print(f"  budget of {a.budget:.0f} s reached: not run: {', '.join(stopped)}")
    print(f"\n{doc.get('device')}, torch {doc.get('torch')}; T0: the graph as captured in the arm's state; "
          "T1: after the step ran eagerly once more (side stream, output dropped); T2: after cgtool's check")
    base_of = {v: statistics.median([x["median_us"] for x in (recs.get(k) or recs.get(k + "_quiet") or [])] or [0.0])
               for v, k in (("chain", "plain"), ("inplace", "inplace_plain"))}
    print(HEAD)
    for arm in arms:
        rs = recs[arm]
        print(_line(arm, rs, base_of[rs[0]["variant"]]) if rs else f"{arm:20s} (no result)")
    _write(a.json, doc)
    if a.json:
        print(f"\nwrote {a.json}")
    if failed:
        sys.exit(f"{failed} arm process(es) failed (above)")


if __name__ == "__main__":
    main()
