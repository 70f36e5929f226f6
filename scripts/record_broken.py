"""Run every broken workload through `cgtool capture` on the GPU machine and record what happened.

    PYTHONPATH=. python3 scripts/record_broken.py OUT.json

Each workload runs in its own process (a failed capture can poison the CUDA context). For each:
the exit code and stderr of `cgtool capture`, and the structured diagnosis with its evidence (the
raw error text, the user's line, the traceback's files) from a direct call of the engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys
from cgtool.capture.entrypoint import parse_target
from cgtool.capture.runner import CaptureFailed, capture_workload, mismatch_failure
try:
    cap = capture_workload(parse_target(sys.argv[1]), [])
    out = mismatch_failure(cap).diagnosis.to_json() if cap.check_ok is False else {"code": "none"}
except CaptureFailed as e:
    out = e.diagnosis.to_json()
print("@@" + json.dumps(out))
"""


def main(out: str) -> None:
    res = {}
    for p in sorted(Path("sample_workloads/broken").glob("*.py")):
        r = subprocess.run([sys.executable, "-m", "cgtool", "capture", str(p), "-o", f"/tmp/broken-{p.stem}",
                            "--force"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
        d = subprocess.run([sys.executable, "-c", PROBE, str(p)], capture_output=True, text=True)
        line = [x for x in d.stdout.splitlines() if x.startswith("@@")]
        diag = json.loads(line[-1][2:]) if line else {"code": "probe-died", "stderr": d.stderr[-2000:]}
        res[p.stem] = {"exit_code": r.returncode, "stderr": r.stderr.strip(), "diagnosis": diag}
        print(f"--- {p.stem}: exit {r.returncode}, code {diag.get('code')}\n{r.stderr.strip()}\n", flush=True)
    Path(out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
