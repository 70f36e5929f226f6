"""The child process of ``cgtool record``: subscribe to CUPTI, then run the program unchanged.

    python -m cgtool.capture.record._boot --out DIR [--trace-replays K] [--trace-skip S] -- prog.py ARGS
    python -m cgtool.capture.record._boot --out DIR -- -m module ARGS

The program runs as ``__main__`` (runpy), with ``sys.argv`` and ``sys.path[0]`` as plain
``python`` would set them. Its exit code is this process's exit code; an uncaught exception is
printed as Python prints it and gives 1. Under torchrun (``RANK`` set) each rank writes into
``DIR/rank<R>``.

When recording cannot start (cupti-python missing, CUPTI held by another profiler), nothing of
the program runs: ``DIR/error.json`` holds the paragraph and exit code, for the parent to show.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback

#: Exit code of this process when recording could not start and the program did not run.
SETUP_FAILED = 3


def _parse(argv: list[str]) -> tuple[str, int, int, list[str]]:
    out, k, skip = "", 0, 1
    i = 0
    while i < len(argv) and argv[i] != "--":
        a = argv[i]
        if a == "--out":
            out = argv[i + 1]
            i += 2
        elif a == "--trace-replays":
            k = int(argv[i + 1])
            i += 2
        elif a == "--trace-skip":
            skip = int(argv[i + 1])
            i += 2
        else:
            raise SystemExit(f"cgtool record bootstrap: unknown option {a!r}")
    return out, k, skip, argv[i + 1:]


def _rank_dir(out: str) -> str:
    rank = os.environ.get("RANK")
    if rank is not None and os.environ.get("WORLD_SIZE", "1") != "1":
        out = os.path.join(out, f"rank{rank}")
    os.makedirs(out, exist_ok=True)
    return out


def _setup_failed(out: str, message: str, code: int) -> None:
    with open(os.path.join(out, "error.json"), "w") as f:
        json.dump({"message": message, "exit_code": code}, f)
    if not os.environ.get("CGTOOL_RECORD_PARENT"):  # the parent prints it otherwise
        sys.stderr.write(f"cgtool: {message}\n")
        sys.stderr.flush()
    os._exit(code)


def main(argv: list[str]) -> None:
    out, k, skip, prog = _parse(argv)
    out = _rank_dir(out)
    if not prog:
        _setup_failed(out, "No program given to record.", 2)
    from cgtool.capture.record.recorder import Recorder
    from cgtool.errors import CgtoolError

    rec = Recorder(out, trace_replays=k, trace_skip=skip, program=list(prog))
    try:
        rec.start()
    except CgtoolError as e:
        _setup_failed(out, e.message, int(e.exit_code))

    code: int = 0
    try:
        if prog[0] == "-m":
            if len(prog) < 2:
                _setup_failed(out, "`-m` needs a module name.", 2)
            sys.argv = [prog[1]] + prog[2:]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(prog[1], run_name="__main__", alter_sys=True)
        else:
            path = prog[0]
            sys.argv = list(prog)
            sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = _exit_code(e.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        rec.finish(code)
    sys.exit(code)


def _exit_code(c: object) -> int:
    """What Python makes of ``sys.exit(c)``: None -> 0, an int as is, anything else printed -> 1."""
    if c is None:
        return 0
    if isinstance(c, int):
        return c
    sys.stderr.write(f"{c}\n")
    return 1


if __name__ == "__main__":
    main(sys.argv[1:])
