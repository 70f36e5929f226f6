"""The child process of ``cgtool record``: subscribe to CUPTI, then run the program unchanged.

    python -m cgtool.capture.record._boot --out DIR [--trace-replays K] [--trace-skip S] [--coverage] -- prog.py ARGS
    python -m cgtool.capture.record._boot --out DIR -- -m module ARGS

The program runs as ``__main__`` (runpy), with ``sys.argv`` and ``sys.path[0]`` as plain
``python`` would set them. Its exit code is this process's exit code; an uncaught exception is
printed as Python prints it and gives 1. Under torchrun (``RANK`` set) each rank writes into
``DIR/rank<R>``.

When recording cannot start (cupti-python missing, CUPTI held by another profiler), nothing of
the program runs: ``DIR/error.json`` holds the paragraph and exit code, for the parent to show.

Only what is needed is imported before the program starts (the recorder, cupti-python); the
recording's ``timeline`` holds wall-clock stamps of the phases, for the overhead benchmark.
"""

from __future__ import annotations

import time

_BOOT_START = time.time()

import json  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402

#: Exit code of this process when recording could not start and the program did not run.
SETUP_FAILED = 3


def _parse(argv: list[str]) -> tuple[str, int, int, bool, list[str]]:
    out, k, skip, coverage = "", 0, 1, False
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
        elif a == "--coverage":
            coverage = True
            i += 1
        else:
            raise SystemExit(f"cgtool record bootstrap: unknown option {a!r}")
    return out, k, skip, coverage, argv[i + 1:]


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
    out, k, skip, coverage, prog = _parse(argv)
    out = _rank_dir(out)
    if not prog:
        _setup_failed(out, "No program given to record.", 2)
    from cgtool.capture.record import attribution
    from cgtool.capture.record.recorder import Recorder, install_exit_guards
    from cgtool.errors import CgtoolError

    rec = Recorder(out, trace_replays=k, trace_skip=skip, coverage=coverage, program=list(prog))
    rec.timeline["boot_start"] = _BOOT_START
    try:
        rec.start()
    except CgtoolError as e:
        _setup_failed(out, e.message, int(e.exit_code))
    # runpy's frames and this one are not the program's: attribution stops where the program begins.
    attribution.stop_at(runpy._run_code.__code__)  # type: ignore[attr-defined]
    install_exit_guards(rec)

    code: int = 0
    rec.timeline["program_start"] = time.time()
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
    if os.environ.get("CGTOOL_RECORD_EXIT") == "fast":  # experiment: the cost of the interpreter's teardown
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
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
