"""One way to run work in a fresh child process and get its result back: a JSON file.

The parent writes the request to ``request.json`` in a private temporary folder and starts
``python -m <module> request.json result.json``; the child (``child_main``) runs one function and
writes its JSON result, or the error that stopped it, to ``result.json``. The child's stdout and
stderr are the workload's own: nothing is scraped from them. A child that dies before writing a
result (a crash, a CUDA abort) is reported with its exit code and the last line it printed on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from cgtool.errors import CgtoolError, ExitCode

#: Lines of the child's stderr kept for the report of a child that died without a result.
_TAIL = 200


def run_child(module: str, request: Mapping[str, Any], *, env: Mapping[str, str] | None = None,
              quiet: bool = True) -> dict[str, Any]:
    """Run ``python -m module`` on ``request``; its JSON result, or ``{"error", "exit_code"}``.

    With ``quiet`` the child's output is captured (and only its last stderr line is kept, for a
    child that died); otherwise it reaches this process's terminal."""
    with tempfile.TemporaryDirectory(prefix="cgtool-child-") as d:
        req, res = Path(d) / "request.json", Path(d) / "result.json"
        req.write_text(json.dumps(dict(request)))
        r = subprocess.run([sys.executable, "-m", module, str(req), str(res)],
                           env=None if env is None else dict(env), capture_output=quiet, text=True)
        if res.exists():
            try:
                out: dict[str, Any] = json.loads(res.read_text())
                return out
            except ValueError:
                pass
        tail = ((r.stderr or "").strip().splitlines() or ["no output"])[-1] if quiet else "see its output above"
        return {"error": f"the workload's process died (exit {r.returncode}): {tail[:_TAIL]}",
                "exit_code": int(ExitCode.CAPTURE_FAILED)}


def child_main(fn: Callable[[dict[str, Any]], dict[str, Any]], argv: list[str] | None = None) -> None:
    """The child's side: read the request, run ``fn``, write the result (or the error) as JSON."""
    req_path, res_path = (argv if argv is not None else sys.argv[1:])[:2]
    result = result_of(fn, json.loads(Path(req_path).read_text()))
    tmp = res_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, res_path)


def result_of(fn: Callable[[dict[str, Any]], dict[str, Any]], request: dict[str, Any]) -> dict[str, Any]:
    """``fn(request)``, or the error that stopped it as a result (what a child writes)."""
    try:
        return fn(request)
    except CgtoolError as e:
        return error_result(e)
    except Exception as e:  # a workload's own failure: report it, the parent goes on
        return {"error": f"{type(e).__name__}: {e}", "exit_code": int(ExitCode.CAPTURE_FAILED)}


def error_result(e: CgtoolError) -> dict[str, Any]:
    """A cgtool error as a child's result: its message, exit code and diagnosis when it has one."""
    res: dict[str, Any] = {"error": e.message, "exit_code": int(e.exit_code)}
    diagnosis = getattr(e, "diagnosis", None)
    if diagnosis is not None:
        res["diagnosis"] = diagnosis.to_json()
    return res


def raise_error(result: Mapping[str, Any]) -> None:
    """Re-raise a child's error result in the parent, with its exit code."""
    if result.get("error"):
        e = CgtoolError(str(result["error"]))
        e.exit_code = ExitCode(int(result.get("exit_code") or ExitCode.CAPTURE_FAILED))
        raise e
