"""Which libcupti a process maps, and what it costs to load it before torch (for `cgtool record`'s start).

    python benchmarks/probe_libcupti.py

Each case runs in a fresh interpreter and prints its wall time and the libcupti paths mapped at
its end (/proc/self/maps): one path means torch, cupti-python and the recorder share one library.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

MAPS = "sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libcupti' in l})"
CASES = {
    "pathfinder_load": "import cuda.pathfinder as p; d = p.load_nvidia_dynamic_lib('cupti'); "
                       "print('PF', getattr(p, '__version__', '?'), d.abs_path, d.found_via)",
    "torch_alone": "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()",
    "cupti_python_alone": "from cupti import cupti; cupti.get_timestamp()",
    "pathfinder_then_torch_then_cupti": "import cuda.pathfinder as p; p.load_nvidia_dynamic_lib('cupti'); "
                                        "import torch; torch.zeros(1, device='cuda'); "
                                        "from cupti import cupti; cupti.get_timestamp()",
    "recorder_then_torch_then_cupti": "from cgtool.capture.record._subscriber import load_libcupti; "
                                      "print('PF', load_libcupti()._name); import torch; "
                                      "torch.zeros(1, device='cuda'); from cupti import cupti; cupti.get_timestamp()",
    "torch_then_cupti": "import torch; torch.zeros(1, device='cuda'); from cupti import cupti; cupti.get_timestamp()",
    "torch_profiler": "import torch; p = torch.profiler.profile(); p.__enter__(); torch.zeros(1, device='cuda'); "
                      "p.__exit__(None, None, None)",
    "pathfinder_then_torch_profiler": "import cuda.pathfinder as pf; pf.load_nvidia_dynamic_lib('cupti'); "
                                      "import torch; p = torch.profiler.profile(); p.__enter__(); "
                                      "torch.zeros(1, device='cuda'); p.__exit__(None, None, None)",
}


def main() -> None:
    out = {}
    for name, code in CASES.items():
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", code + f"; print('MAPS', {MAPS})"], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("MAPS", "PF"))]
        out[name] = {"wall_s": round(wall, 3), "rc": p.returncode, "out": lines, "err": p.stderr[-600:] if p.returncode else ""}
        print(name, json.dumps(out[name]))
    imp = subprocess.run([sys.executable, "-X", "importtime", "-c", "import cuda.pathfinder"], capture_output=True, text=True)
    print("importtime cuda.pathfinder:", imp.stderr.strip().splitlines()[-1] if imp.stderr.strip() else "?")


if __name__ == "__main__":
    main()
