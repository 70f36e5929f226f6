"""The pytest fixture ``cgtool_bench`` against ``cgtool bench``, and its gate's A/A rate. GPU machine:

    PYTHONPATH=. python3 benchmarks/bench_pytest_plugin.py [--rounds 3] [--pairs 50] [--budget S]
                        [--json OUT] [--work DIR]

The step is the 400-kernel chain (``sample_workloads/chain.py``'s step; the test file is the
example of docs/pytest.md, read from its first ``python`` block). Parts, in this order:

1. ``entry point``: one ``python -m pytest`` session in a fresh process, run from a folder outside
   the repository with cgtool installed by pip into ``--site`` (its ``pytest11`` entry point, not
   ``-p``), on the docs' example test; it must pass with ``--cgtool-save``.
2. ``fresh``: ``--rounds`` rounds of two fresh processes, their order alternating: a pytest session
   of the example test (the fixture) and ``python -m cgtool bench sample_workloads/chain.py --runs 1``
   (bench's own process), default ``BenchSpec`` in both; their medians and the ratio.
3. ``same process``: in this process, the step run eagerly once on the current stream first (so
   that every timing below is in the same capture state: docs/bench.md, "Why capture state moves
   replay time"), then ``--rounds`` rounds of the fixture (``pytest.main`` of the example test, in
   this process) and ``bench_workload`` on chain.py, in the order ABBA...; medians and ratio.
4. ``A/A``: in this process, in the same state, ``--pairs`` pairs of pytest sessions on the same
   step: one with ``--cgtool-save``, then one with ``--cgtool-baseline`` of that file; a pair whose
   second session fails is a false failure of the gate. ``--budget`` stops starting pairs after S
   seconds from the start (the pairs run so far are reported).

Everything is printed as it is measured and written to ``--json`` after each part.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CHAIN = "sample_workloads/chain.py"
#: The A/A sessions' test: the docs' step, no assertion but the gate's.
AA_TEST = '''
import torch


def test_chain_step(cgtool_bench):
    x = torch.ones(1024, device="cuda")

    def step():
        y = x
        for _ in range(200):
            y = y.mul(1.0001).add(0.0001)
        return y

    cgtool_bench(step)
'''


def docs_example() -> str:
    text = (ROOT / "docs" / "pytest.md").read_text()
    m = re.search(r"^```python\n(.*?)^```", text, re.S | re.M)
    assert m, "docs/pytest.md has no python block"
    return m.group(1)


def median_of(path: Path) -> float:
    doc = json.loads(path.read_text())
    (w,) = doc["workloads"].values()
    return statistics.median(w["gpu_us"])


def plugin_args() -> list[str]:
    from importlib.metadata import entry_points

    return [] if any(ep.value == "cgtool.pytest_plugin" for ep in entry_points(group="pytest11")) \
        else ["-p", "cgtool.pytest_plugin"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=50)
    ap.add_argument("--budget", type=float, default=300.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--work", default="/tmp/cgtool-pytest-plugin")
    ap.add_argument("--site", default=None, help="where pip installed cgtool (its entry point); none: skip part 1")
    a = ap.parse_args()
    t_start = time.monotonic()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "example").mkdir(exist_ok=True)
    (work / "example" / "test_example.py").write_text(docs_example())
    (work / "aa").mkdir(exist_ok=True)
    (work / "aa" / "test_aa.py").write_text(AA_TEST)
    out: dict[str, Any] = {"step": f"{CHAIN} step (400 kernels), the example of docs/pytest.md", "spec": "default"}

    def dump() -> None:
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1))

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # 1. the entry point, from an installed cgtool, in a folder outside the repository
    if a.site:
        ep_env = dict(env, PYTHONPATH=os.pathsep.join([a.site] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                                   if p and Path(p).resolve() != ROOT]))
        f = work / "ep.json"
        f.unlink(missing_ok=True)
        p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "test_example.py",
                            "--cgtool-save", str(f)], cwd=work / "example", env=ep_env, capture_output=True, text=True)
        print(p.stdout[-3000:], p.stderr[-2000:], sep="\n")
        loaded = "cgtool bench (GPU µs per replay)" in p.stdout
        q = subprocess.run([sys.executable, "-c", "import importlib.metadata as m, cgtool.pytest_plugin as p; "
                            "print([e.value for e in m.entry_points(group='pytest11') if e.name == 'cgtool'], p.__file__)"],
                           cwd=work / "example", env=ep_env, capture_output=True, text=True)
        out["entry_point"] = {"exit": p.returncode, "median_us": median_of(f) if f.exists() else None,
                              "site": a.site, "summary": p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "",
                              "entry_point_and_module": q.stdout.strip() or q.stderr[-500:]}
        print(f"entry point session: exit {p.returncode}, plugin table printed: {loaded}; "
              f"entry point and module: {out['entry_point']['entry_point_and_module']}")
        dump()

    # 2. fresh processes, alternating
    fresh: dict[str, list[float]] = {"fixture": [], "bench": []}
    for r in range(a.rounds):
        order = ["fixture", "bench"] if r % 2 == 0 else ["bench", "fixture"]
        for kind in order:
            f = work / f"fresh_{kind}_{r}.json"
            f.unlink(missing_ok=True)
            if kind == "fixture":
                cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin_args(),
                       "test_example.py", "--cgtool-save", str(f)]
                cwd = work / "example"
            else:
                cmd = [sys.executable, "-m", "cgtool", "bench", CHAIN, "--runs", "1", "--json", str(f)]
                cwd = ROOT
            p = subprocess.run(cmd, cwd=cwd, env=dict(env, PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])),
                               capture_output=True, text=True)
            if p.returncode != 0:
                print(f"fresh {kind} round {r}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
                continue
            fresh[kind].append(median_of(f))
            print(f"fresh round {r} {kind}: {fresh[kind][-1]:.2f} µs")
    if fresh["fixture"] and fresh["bench"]:
        ratio = statistics.median(fresh["fixture"]) / statistics.median(fresh["bench"])
        print(f"fresh processes: fixture {fresh['fixture']} bench {fresh['bench']} ratio {ratio:.4f}")
        out["fresh"] = {**fresh, "ratio": ratio}
    dump()

    # 3. the same process, one capture state
    import pytest
    import torch

    from cgtool.artifacts.bench import BenchSpec
    from cgtool.capture.bench import bench_workload

    x = torch.ones(1024, device="cuda")
    y = x
    for _ in range(200):
        y = y.mul(1.0001).add(0.0001)
    torch.cuda.synchronize()
    del y
    same: dict[str, list[float]] = {"fixture": [], "bench": []}
    for r in range(a.rounds):
        for kind in (["fixture", "bench"] if r % 2 == 0 else ["bench", "fixture"]):
            if kind == "fixture":
                f = work / f"same_fixture_{r}.json"
                f.unlink(missing_ok=True)
                rc = pytest.main(["-q", "-p", "no:cacheprovider", *plugin_args(), str(work / "example" / "test_example.py"),
                                  "--cgtool-save", str(f)])
                if rc != 0:
                    print(f"same-process fixture round {r}: pytest exit {rc}")
                    continue
                same[kind].append(median_of(f))
            else:
                res = bench_workload(str(ROOT / CHAIN), [], BenchSpec())
                same[kind].append(res.stats().median)
            print(f"same process round {r} {kind}: {same[kind][-1]:.2f} µs")
    if same["fixture"] and same["bench"]:
        ratio = statistics.median(same["fixture"]) / statistics.median(same["bench"])
        print(f"same process: fixture {same['fixture']} bench {same['bench']} ratio {ratio:.4f}")
        out["same_process"] = {**same, "ratio": ratio}
    dump()

    # 4. the gate, A/A
    pairs = []
    for k in range(a.pairs):
        if time.monotonic() - t_start > a.budget:
            print(f"budget of {a.budget:.0f} s spent: {k} pairs run")
            break
        base, new = work / f"aa_base_{k}.json", work / f"aa_new_{k}.json"
        base.unlink(missing_ok=True)
        new.unlink(missing_ok=True)
        test = str(work / "aa" / "test_aa.py")
        rc1 = pytest.main(["-q", "-p", "no:cacheprovider", *plugin_args(), test, "--cgtool-save", str(base)])
        rc2 = pytest.main(["-q", "-p", "no:cacheprovider", *plugin_args(), test, "--cgtool-baseline", str(base),
                           "--cgtool-save", str(new)])
        old_s = json.loads(base.read_text())["workloads"] if base.exists() else {}
        new_s = json.loads(new.read_text())["workloads"] if new.exists() else {}
        pairs.append({"baseline_exit": int(rc1), "gate_exit": int(rc2),
                      "old_gpu_us": next(iter(old_s.values()))["gpu_us"] if old_s else None,
                      "new_gpu_us": next(iter(new_s.values()))["gpu_us"] if new_s else None})
        print(f"A/A pair {k}: baseline exit {rc1}, gate exit {rc2}")
        out["aa"] = {"pairs": pairs}
        dump()
    judged = [p for p in pairs if p["baseline_exit"] == 0 and p["new_gpu_us"] is not None]
    fails = sum(p["gate_exit"] != 0 for p in judged)
    if judged:
        print(f"A/A: {fails} false failures in {len(judged)} pairs = {100 * fails / len(judged):.1f} %")
    out["aa"] = {"pairs": pairs, "judged": len(judged), "false_failures": fails}
    out["seconds"] = time.monotonic() - t_start
    dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
