"""Where `cgtool record`'s fixed costs come from, on the GPU machine: imports, CUPTI's attach, exit.

    python benchmarks/probe_record_fixed_costs.py [--rounds 3] [--out probe.json]

Each figure is the median wall time of fresh processes (what `cgtool record` pays once per run):

* ``python``: the interpreter alone; ``cli_import``: the parent's CLI modules; ``record_help``:
  `cgtool record --help` end to end;
* ``import_cupti``, ``import_numpy``, ``import_cuda_bindings``: cold imports; ``cupti_after_torch``:
  importing cupti-python once torch is loaded (what is left of it when the program loads numpy and
  cuda.bindings anyway);
* exit: a program that imports torch, makes a CUDA context and prints the time; the figure is the
  time from that print to the process's end, bare, with CUPTI's callback API attached (subscribed,
  one callback on, unsubscribed), and with ``cupti.finalize()`` after the unsubscribe.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_EXIT_PROG = """
import sys, time
import torch
torch.ones(1, device="cuda"); torch.cuda.synchronize()
mode = sys.argv[1]
if mode != "bare":
    from cupti import cupti
    sub = cupti.subscribe(lambda *a: None, None)
    cupti.enable_callback(1, sub, cupti.CallbackDomain.RESOURCE, cupti.CallbackIdResource.GRAPHNODE_CREATED)
    x = torch.ones(8, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2
    torch.cuda.synchronize()
    cupti.unsubscribe(sub)
    if mode == "finalize":
        cupti.finalize()
print("T", time.time(), flush=True)
"""


def _wall(cmd: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, capture_output=True, cwd=ROOT, env=env, check=False)
    return time.perf_counter() - t0


def _exit_lag(mode: str) -> float:
    p = subprocess.run([sys.executable, "-c", _EXIT_PROG, mode], capture_output=True, text=True, cwd=ROOT)
    t_end = time.time()
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("T ")), None)
    if line is None:
        raise SystemExit(f"exit probe {mode} failed: {p.stderr[-2000:]}")
    return t_end - float(line.split()[1])


def _importtime_top(cmd: list[str], env: dict[str, str], n: int = 12) -> list[str]:
    """The imports with the largest cumulative time (µs) in ``-X importtime`` output."""
    imp = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    rows = []
    for ln in imp.stderr.splitlines():
        parts = ln.split("|")
        if ln.startswith("import time:") and len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), ln))
    return [ln for _, ln in sorted(rows, reverse=True)[:n]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="probe_record_fixed_costs.json")
    a = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    py = sys.executable
    probes = {
        "python": [py, "-c", "pass"],
        "cli_import": [py, "-c", "import cgtool.cli.main"],
        "record_help": [py, "-m", "cgtool", "record", "--help"],
        "import_typer": [py, "-c", "import typer"],
        "import_cupti": [py, "-c", "from cupti import cupti"],
        "import_numpy": [py, "-c", "import numpy"],
        "import_cuda_bindings": [py, "-c", "from cuda.bindings import runtime, driver"],
        "import_torch": [py, "-c", "import torch"],
        "import_torch_then_cupti": [py, "-c", "import torch; from cupti import cupti"],
        "boot_imports": [py, "-c", "import cgtool.capture.record.recorder, cgtool.capture.export"],
    }
    res: dict[str, list[float]] = {k: [] for k in probes}
    lags: dict[str, list[float]] = {m: [] for m in ("bare", "attached", "finalize")}
    for _ in range(a.rounds):
        for k, cmd in probes.items():
            res[k].append(_wall(cmd, env))
        for m in lags:
            lags[m].append(_exit_lag(m))
    out = {k: statistics.median(v) for k, v in res.items()}
    out["cupti_after_torch"] = out["import_torch_then_cupti"] - out["import_torch"]
    out["exit_lag_s"] = {m: statistics.median(v) for m, v in lags.items()}
    out["raw"] = {"walls": res, "exit_lags": lags}
    out["cupti_importtime_top"] = _importtime_top([py, "-X", "importtime", "-c", "from cupti import cupti"], env)
    out["record_help_importtime_top"] = _importtime_top([py, "-X", "importtime", "-m", "cgtool", "record", "--help"],
                                                        env)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "raw"}, indent=1))


if __name__ == "__main__":
    main()
