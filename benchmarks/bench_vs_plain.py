"""`cgtool bench` against a plain ``torch.cuda.graph`` loop, in fresh processes. GPU machine:

    PYTHONPATH=. python3 benchmarks/bench_vs_plain.py [--rounds 3] [--blocks 10] [--per N]
                        [--recaptures 3] [--workloads chain,...] [--launch exec|fork]
                        [--budget S] [--json OUT] [--dry-run]

Workloads (``--workloads``, in this order; every one but ``one_kernel`` by default): the
400-kernel chain, the 3-stream MoE layer, the transformer block and the GPT-2 small decode step
over a static KV cache (``sample_workloads/``); third-party models, random weights, nothing
downloaded: a ``transformers`` Llama (``hf_llama.py``) and GPT-2 (``hf_gpt2.py``), each a
one-token forward of a batch of 4 in bf16 and in fp32, and a ``timm`` ViT-S/16 (``timm_vit.py``,
bf16, batch 8); and one kernel (``benchmarks/workloads/one_kernel.py``). A workload whose library
is missing is reported as failed and the others go on. Each round runs, per workload, two FRESH
processes, their order alternating from round to round:

* plain: what an engineer writes: set the step up, warm it up 3 times on a side stream, capture it
  with ``torch.cuda.graph``, 50 untimed replays, then ``--blocks`` blocks of ``--per`` back-to-back
  ``replay()`` calls between CUDA events (consecutive blocks share an event);
* cgtool: what the process ``cgtool bench TARGET --runs 1 --no-eager --warmup 50 --replays
  BLOCKS*PER --blocks BLOCKS --recaptures K`` starts for its run runs (the same ``BenchSpec``).

``--launch exec`` (default) starts each process with ``python3``: the plain one runs this file,
the cgtool one is ``python -m cgtool.capture.bench``, exactly what ``cgtool bench`` starts.
``--launch fork`` forks each from a server process that has imported torch and the model
libraries but holds no CUDA context (``multiprocessing``'s forkserver): each child is still a new
process with its own CUDA context, allocator and cuBLAS state, and the cgtool one runs the
function ``python -m cgtool.capture.bench`` runs (``cgtool.capture.bench.run_request``); it saves
the ~10 s of imports per process that an HF model costs. Every process writes its result to its
own file.

The ratio is cgtool's FIRST capture (its median over the blocks) over the plain loop's median:
the first capture is timed before any recapture is made, so it is the figure ``--recaptures 1``
reports. The later captures give, per process, the between-capture spread ((max - min) / median
of the captures' medians) beside the between-replay spread (a capture's IQR / median, the median
over captures).

``--per`` (replays per block) defaults per workload to about 40 ms of replays per block.
``--budget`` stops starting pairs that would end later (a pair's time is taken from the same
workload's earlier pair, or guessed); every pair is printed and written to ``--json`` as it
finishes, so a run cut short keeps what it measured.
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
sys.path.insert(0, ROOT)
#: name -> (workload file, its arguments, replays per block by default: about 40 ms of replays)
#: In the order run (a --budget that runs out skips the last ones of the last round first).
WORKLOADS: dict[str, tuple[str, list[str], int]] = {
    "chain": ("sample_workloads/chain.py", [], 100),
    "moe": ("sample_workloads/moe_layer.py", [], 500),
    "transformer_block": ("sample_workloads/transformer_block.py", [], 200),
    "gpt2_decode": ("sample_workloads/gpt2_decode.py", [], 50),
    "llama_bf16": ("sample_workloads/hf_llama.py", ["--dtype", "bf16"], 100),
    "llama_fp32": ("sample_workloads/hf_llama.py", ["--dtype", "fp32"], 100),
    "gpt2_bf16": ("sample_workloads/hf_gpt2.py", ["--dtype", "bf16"], 150),
    "gpt2_fp32": ("sample_workloads/hf_gpt2.py", ["--dtype", "fp32"], 150),
    "vit_bf16": ("sample_workloads/timm_vit.py", ["--dtype", "bf16"], 50),
    "one_kernel": ("benchmarks/workloads/one_kernel.py", [], 5000),
}
#: Run unless --workloads names others: one kernel's replay time moves 1.83x between fresh
#: processes (docs/bench.md), more than the 1 % this compares.
DEFAULT_WORKLOADS = [w for w in WORKLOADS if w != "one_kernel"]
WARMUP = 50
#: Seconds a pair of processes is assumed to take before one of the workload has run.
GUESS_PAIR_S = {"gpt2_decode": 26.0, "llama_bf16": 30.0, "llama_fp32": 30.0, "gpt2_bf16": 26.0,
                "gpt2_fp32": 26.0, "vit_bf16": 26.0}
GUESS_PAIR_S_DEFAULT = 14.0
#: What the fork server imports before it forks (a module missing is skipped).
PRELOAD = ["torch", "numpy", "transformers", "timm", "cgtool.capture.bench", "cgtool.capture.runner"]


def plain(target: str, args: list[str], blocks: int, per: int) -> dict[str, Any]:
    """The plain loop, in this (fresh) process."""
    import torch

    from cgtool.capture.entrypoint import call_setup, parse_target, resolve

    t = parse_target(os.path.join(ROOT, target))
    step = call_setup(t, resolve(t, args), args)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    for _ in range(WARMUP):
        g.replay()
    torch.cuda.synchronize()
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(blocks + 1)]
    evs[0].record()
    for k in range(blocks):
        for _ in range(per):
            g.replay()
        evs[k + 1].record()
    torch.cuda.synchronize()
    samples = [a.elapsed_time(b) * 1000 / per for a, b in zip(evs, evs[1:])]
    del out
    return {"median_us": statistics.median(samples), "samples_us": samples,
            "device": torch.cuda.get_device_name(), "torch": torch.__version__}


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _plain_cmd(name: str, blocks: int, per: int, result: str) -> list[str]:
    return [sys.executable, __file__, "--plain", name, "--blocks", str(blocks), "--per", str(per), "--result", result]


def _write_result(path: str, doc: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def plain_to_file(name: str, blocks: int, per: int, path: str) -> None:
    """The plain arm in this process, its result (or its error) written to ``path``."""
    target, args, _ = WORKLOADS[name]
    try:
        doc = plain(target, args, blocks, per)
    except Exception as e:  # noqa: BLE001 -- the workload's failure is the result
        doc = {"error": f"{type(e).__name__}: {e}"[:300]}
    _write_result(path, doc)


def cgtool_to_file(request: dict[str, Any], path: str) -> None:
    """The cgtool arm in this (forked) process: what ``python -m cgtool.capture.bench`` runs."""
    from cgtool.capture.bench import run_request

    _write_result(path, run_request(request))


def _request(name: str, blocks: int, per: int, recaptures: int) -> dict[str, Any]:
    target, args, _ = WORKLOADS[name]
    return {"target": os.path.join(ROOT, target), "args": list(args),
            "spec": _spec(blocks, per, recaptures).to_json()}


class Launcher:
    """Starts each arm in a fresh process: ``python3`` (exec) or a fork of a preloaded server."""

    def __init__(self, how: str) -> None:
        self.how, self.ctx = how, None
        if how == "fork":
            import multiprocessing as mp

            self.ctx = mp.get_context("forkserver")
            self.ctx.set_forkserver_preload(PRELOAD)

    def _fork(self, fn: Any, *args: Any) -> None:
        assert self.ctx is not None
        proc = self.ctx.Process(target=fn, args=args)
        proc.start()
        proc.join()

    def plain(self, name: str, blocks: int, per: int) -> dict[str, Any] | str:
        with tempfile.TemporaryDirectory(prefix="bench-vs-plain-") as d:
            res = os.path.join(d, "result.json")
            if self.ctx is not None:
                self._fork(plain_to_file, name, blocks, per, res)
                code = "?"
            else:
                q = subprocess.run(_plain_cmd(name, blocks, per, res), capture_output=True, text=True, env=_env(),
                                   cwd=ROOT, check=False)
                code = f"{q.returncode}: {(q.stderr.strip().splitlines() or ['?'])[-1][:300]}"
            try:
                with open(res) as f:
                    out: dict[str, Any] = json.load(f)
            except (OSError, ValueError):
                return f"exit {code}"
        return str(out["error"]) if out.get("error") else out

    def cgtool(self, name: str, blocks: int, per: int, recaptures: int) -> dict[str, Any] | str:
        """The process ``cgtool bench`` starts for one run of the workload, with the same spec."""
        request = _request(name, blocks, per, recaptures)
        if self.ctx is not None:
            with tempfile.TemporaryDirectory(prefix="bench-vs-plain-") as d:
                res = os.path.join(d, "result.json")
                self._fork(cgtool_to_file, request, res)
                try:
                    with open(res) as f:
                        w = json.load(f)
                except (OSError, ValueError):
                    w = {"error": "the forked process died without a result", "exit_code": 3}
        else:
            from cgtool.capture.child import run_child

            w = run_child("cgtool.capture.bench", request, env=_env())
        if w.get("error"):
            return f"exit {w.get('exit_code')}: {str(w['error'])[:300]}"
        xs = [float(x) for x in w["gpu_us"]]
        caps = [float(x) for x in w.get("capture_medians_us") or [statistics.median(xs)]]
        k = len(xs) // len(caps)
        return {"median_us": caps[0], "samples_us": xs, "capture_medians_us": caps,
                "replay_spread": statistics.median([_iqr_rel(xs[i * k:(i + 1) * k]) for i in range(len(caps))]),
                "capture_spread": (max(caps) - min(caps)) / statistics.median(caps)}


def _spec(blocks: int, per: int, recaptures: int) -> Any:
    from cgtool.artifacts.bench import BenchSpec

    return BenchSpec(replays=blocks * per, blocks=blocks, warmup=WARMUP, recaptures=recaptures, eager=False)


def _iqr_rel(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return (q[2] - q[0]) / statistics.median(xs)


def _write(path: str | None, doc: dict[str, Any]) -> None:
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def _summary(names: list[str], res: dict[str, dict[str, list[Any]]], recaptures: int) -> dict[str, float]:
    print(f"\n{'workload':18s} {'plain µs (rounds)':>22s} {'cgtool µs (rounds)':>22s} {'ratio':>7s}  within 1 %")
    summary = {}
    for n in names:
        pairs = [(pl, cg) for pl, cg in zip(res[n]["plain"], res[n]["cgtool"])
                 if not isinstance(pl, str) and not isinstance(cg, str)]
        if not pairs:
            print(f"{n:18s} (no result)")
            continue
        ratio = statistics.median([cg["median_us"] / pl["median_us"] for pl, cg in pairs])
        summary[n] = ratio
        pls = " ".join(f"{pl['median_us']:.1f}" for pl, _ in pairs)
        cgs = " ".join(f"{cg['median_us']:.1f}" for _, cg in pairs)
        print(f"{n:18s} {pls:>22s} {cgs:>22s} {ratio:7.4f}  {'yes' if abs(ratio - 1) <= 0.01 else 'NO'}")
    if recaptures > 1:
        print(f"\ncgtool --recaptures {recaptures}, per process (round): the captures' medians; between-capture "
              "spread; between-replay spread")
        for n in names:
            for r, cg in enumerate(res[n]["cgtool"]):
                if isinstance(cg, str):
                    continue
                print(f"{n:18s} round {r + 1}  {' '.join(f'{m:.1f}' for m in cg['capture_medians_us']):>30s}  "
                      f"captures {100 * cg['capture_spread']:6.2f} %  replays {100 * cg['replay_spread']:6.2f} %")
    return summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plain", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--blocks", type=int, default=10)
    p.add_argument("--per", type=int, default=0, help="replays per block (0: each workload's default)")
    p.add_argument("--recaptures", type=int, default=3, help="captures per cgtool process (1: no spread)")
    p.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS), help=f"of: {', '.join(WORKLOADS)}")
    p.add_argument("--launch", choices=("exec", "fork"), default="exec",
                   help="start each process with python3, or fork it from a preloaded server")
    p.add_argument("--budget", type=float, default=0.0, help="seconds: start no pair that would end later (0: none)")
    p.add_argument("--dry-run", action="store_true", help="print what it would run, run nothing")
    p.add_argument("--json", help="write every measurement here (rewritten after every pair)")
    a = p.parse_args()
    if a.plain:
        plain_to_file(a.plain, a.blocks, a.per, a.result)
        return
    names = [w for w in a.workloads.split(",") if w]
    bad = [w for w in names if w not in WORKLOADS]
    if bad or a.rounds < 1 or a.blocks < 1 or a.per < 0 or a.recaptures < 1:
        p.error(f"unknown workload(s) {', '.join(bad)} (known: {', '.join(WORKLOADS)})" if bad else
                "--rounds, --blocks and --recaptures must be at least 1, --per at least 0")
    per = {n: a.per or WORKLOADS[n][2] for n in names}

    print(f"{a.rounds} round(s); {a.blocks} blocks per timing ("
          + ", ".join(f"{n} {per[n]}" for n in names) + " replays per block); each arm a fresh process, order "
          f"alternating ({a.launch}); cgtool with --recaptures {a.recaptures}" + (f"; budget {a.budget:.0f} s" if a.budget else ""),
          flush=True)
    if a.dry_run:
        for n in names:
            print(f"  {n}: plain: {' '.join(_plain_cmd(n, a.blocks, per[n], 'RESULT')[1:])}")
            print(f"  {n}: cgtool: python -m cgtool.capture.bench with "
                  f"{json.dumps(_request(n, a.blocks, per[n], a.recaptures))}")
        return
    launcher = Launcher(a.launch)
    res: dict[str, dict[str, list[Any]]] = {n: {"plain": [], "cgtool": []} for n in names}
    doc: dict[str, Any] = {"rounds": a.rounds, "blocks": a.blocks, "per": per, "recaptures": a.recaptures,
                           "launch": a.launch, "command": " ".join(["python3", "benchmarks/bench_vs_plain.py"]
                                                                    + sys.argv[1:]),
                           "workloads": {n: WORKLOADS[n][:2] for n in names}, "results": res}
    took: dict[str, float] = {}
    t0, skipped, failed = time.time(), [], 0
    for r in range(a.rounds):
        for n in names:
            guess = took.get(n, GUESS_PAIR_S.get(n, GUESS_PAIR_S_DEFAULT))
            if a.budget and time.time() - t0 + guess > a.budget:
                skipped.append(f"{n} (round {r + 1})")
                continue
            ts = time.time()
            arms = ("plain", "cgtool") if r % 2 == 0 else ("cgtool", "plain")
            got: dict[str, Any] = {}
            for arm in arms:
                got[arm] = (launcher.plain(n, a.blocks, per[n]) if arm == "plain"
                            else launcher.cgtool(n, a.blocks, per[n], a.recaptures))
            took[n] = time.time() - ts
            pl, cg = got["plain"], got["cgtool"]
            res[n]["plain"].append(pl)
            res[n]["cgtool"].append(cg)
            if isinstance(pl, dict):
                doc.setdefault("device", pl.get("device"))
                doc.setdefault("torch", pl.get("torch"))
            _write(a.json, doc)
            if isinstance(pl, str) or isinstance(cg, str):
                print(f"  round {r + 1} {n:18s} FAILED: plain {pl if isinstance(pl, str) else 'ok'}; "
                      f"cgtool {cg if isinstance(cg, str) else 'ok'}", flush=True)
                failed += 1
                continue
            print(f"  round {r + 1} {n:18s} plain {pl['median_us']:9.2f} µs  cgtool {cg['median_us']:9.2f} µs  "
                  f"ratio {cg['median_us'] / pl['median_us']:.4f}  captures {cg['capture_spread'] * 100:.2f} %  "
                  f"({took[n]:.0f} s, {time.time() - t0:.0f} s in all)", flush=True)
    if skipped:
        print(f"  budget of {a.budget:.0f} s reached: not run: {', '.join(skipped)}")
    print(f"\n{doc.get('device')}, torch {doc.get('torch')}")
    doc["median_ratio"] = _summary(names, res, a.recaptures)
    _write(a.json, doc)
    if a.json:
        print(f"\nwrote {a.json}")
    if failed:
        sys.exit(f"{failed} pair(s) of processes failed (above)")


if __name__ == "__main__":
    main()
