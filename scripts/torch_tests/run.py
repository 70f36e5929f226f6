"""Run PyTorch's own CUDA-graph tests twice -- on torch alone, then against cgtool's engine -- and
compare them test by test. Needs a CUDA GPU; see README.md in this folder.

    python3 scripts/torch_tests/run.py [--out DIR] [--upstream DIR] [--timeout S] [--modes torch,engine]
    python3 scripts/torch_tests/run.py --render DIR/summary.json [--results RESULTS.md]

The first form writes DIR/summary.json (every test's outcome in both runs, the test files' sha256)
and DIR/summary.md, prints the table, and exits 0 when every test about the engine passes (or
skips) with it -- tests marked outside the engine (OUTSIDE_ENGINE) aside -- and 1 otherwise. A test file missing from the upstream folder is
reported and its tests are "not run"; the other files still run.

The second form needs no GPU: it rewrites the results section of RESULTS.md (between its
``<!-- results:begin -->`` and ``<!-- results:end -->`` lines) from a summary.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

#: The test files (pytorch/pytorch, BSD-3-Clause), each with the revision it is taken at and the
#: sha256 of that copy when it is known. ``commit`` None: the copy came from a stored index of
#: GitHub files that does not name the commit; the sha256 then identifies the content.
UPSTREAM: dict[str, dict[str, Any]] = {
    "test_cuda.py": {
        "commit": "000e43cdff99f30291164c1f2e90133f19fa83fb",
        # the copy run on the H100 (read from a stored index of GitHub files at that commit)
        "sha256": "c661e3c0ccaccdcbfa9b0774b3cc58a358864321b005904bf7acc02cb43fd6e3",
        "newer": "a newer copy (e.g. with test_graph_mem_pool_arg_and_nested_use_mem_pool) runs as well "
        "when put in its place: the tests below are picked by id and by name",
    },
    "test_cuda_graph_utils.py": {
        "commit": "004ee054133a4dfedd65c57892b90fdf3c050403",
        "sha256": "31acd042eb92655cc1084bd50a7332f2019959561a2f4509ce8e194b048bdbbd",
        "newer": "",
    },
    "test_cuda_graph_debug.py": {
        "commit": None,
        "sha256": "e49acdd56de974ffa765eb1d9adf98482b4716930bff248382a2ea668c660544",
        "newer": "mid-2026 (after 1859fbc8; has test_ops_without_cuda_output_not_tracked), read from "
        "the stored GitHub index (file id 41742782525), which does not name the commit",
    },
}

SEED, BEYOND = "seed", "beyond-seed"

_CUDA = "test_cuda.py::TestCuda::"
_DATA = "test_cuda_graph_utils.py::TestGetGraphData::"
_DBG = "test_cuda_graph_debug.py::"
_IN = _DBG + "TestCUDAGraphDebugInputs::"

#: Tests picked by id, with their category. "seed": an API the seed documents (capture, replay,
#: reset, pools, raw handles, debug dump, get_graph_data, hooks, check_input_liveness): the target
#: is that every one passes with the engine. "beyond-seed": an API PyTorch added after the seed
#: (the export hook factories, make_graphed_callables' liveness option). Ids of several revisions
#: are listed: a revision that lacks one shows it as "not run" in both runs.
TESTS: dict[str, str] = {
    **{
        _CUDA + name: SEED
        for name in (
            "test_graph_is_current_stream_capturing",
            "test_graph_capture_simple",
            "test_graph_capture_reset_recapture",
            "test_graph_debugdump",
            "test_graph_timing",
            "test_graph_error",
            "test_graph_warn_if_has_zero_nodes",
            "test_graph_capture_oom",
            "test_graph_rng_functional",
            "test_graph_two_successive",
            "test_graph_manual_seed_mismatch_raises",
            "test_graph_make_graphed_callables_same_pool",
            "test_cuda_graph_error_options",
            "test_cuda_graph_raw_graph_keep_graph_false",
            "test_cuda_graph_raw_graph",
            "test_cuda_graph_raw_graph_exec_keep_graph_True",
            "test_cuda_graph_raw_graph_exec_keep_graph_False",
            "test_cuda_graph_raw_graph_reset_and_recapture",
            "test_cuda_graph_allocator_propagates_stream",
            "test_cuda_graph_tensor_item_not_allowed",
            "test_graph_mem_pool_arg_and_nested_use_mem_pool",
        )
    },
    **{
        _DATA + name: SEED
        for name in (
            "test_batch_mem_op_node",
            "test_basic_structure",
            "test_edges",
            "test_cached_across_instantiate_hooks",
            "test_nested_graph_node_warns_but_reports_top_level_kind_child_graph",
            "test_nested_graph_node_warns_but_reports_top_level_kind_conditional",
            "test_keep_graph_false_raises",
        )
    },
    _DATA + "test_export_graph_data_hook": BEYOND,
    **{
        _IN + name: SEED
        for name in (
            # the mid-2026 revision
            "test_nothing_dead",
            "test_dead_input_tensor",
            "test_dead_intermediate_tensor_ok",
            "test_multiple_inputs_one_dead",
            "test_model",
            "test_model_weights_dead",
            "test_multiple_replays_tensor_dies_between",
            "test_view_tensor_base_dead",
            "test_nested_structure_inputs",
            "test_output_tensor_dead_ok",
            "test_empty_tensor_not_tracked",
            "test_ops_without_cuda_output_not_tracked",
            "test_non_capturing_stream_inputs_not_tracked",
            "test_shared_pool_tensor_not_tracked",
            "test_pinned_memory_tensor_tracked",
            "test_pinned_memory_not_tracked_for_non_copy_ops",
            # revision 1859fbc8
            "test_nothing_dead_ok",
            "test_dead_intermediate_tensors_ok",
            "test_model_weight_dead",
            "test_model_training_weight_dead",
            "test_view_tensor",
        )
    },
    _DBG + "TestCUDAGraphDebugBacktraces::test_error_message_contains_all_tracebacks": SEED,
    _DBG + "TestCUDAGraphDebugExternalOps::test_custom_autograd_function": SEED,
    _DBG + "TestCUDAGraphDebugExternalOps::test_torch_library_custom_op": SEED,
    _DBG + "TestMakeGraphedCallables::test_make_graphed_callables": BEYOND,
}

#: Picked whole, whatever the revision names its tests: file -> classes ("*": every class).
WHOLE: dict[str, tuple[str, ...]] = {
    "test_cuda_graph_debug.py": ("*",),
    "test_cuda_graph_utils.py": ("TestGetGraphData",),
}

#: Picked by name in test_cuda.py (a newer revision's tests of the seed API whose names are not
#: listed above): a TestCuda graph test about hooks, debug dumps, pools, the raw graph, keep_graph,
#: instantiation or the split capture end. Category "seed".
PATTERNS: dict[str, str] = {
    "test_cuda.py": r"^TestCuda::test_\w*graph\w*"
    r"(hook|debug_?dump|pools|mem_pool_arg|raw_graph|keep_graph|instantiate|capture_end)",
}

#: Seed tests that need something outside the engine, with the reason (measured on an H100, torch 2.11).
OUTSIDE_ENGINE = {
    _CUDA + "test_graph_is_current_stream_capturing":
        "needs torch.cuda.Stream.is_capturing() (upstream main), a method of torch's own stream class "
        "that torch 2.11 lacks: outside the engine",
    _CUDA + "test_cuda_graph_allocator_propagates_stream":
        "torch 2.11's caching allocator makes 5 new segments where the test expects 2: the allocator, "
        "not the graph API",
}


def category(test_id: str) -> str:
    if test_id in TESTS:
        return TESTS[test_id]
    return BEYOND if "::TestMakeGraphedCallables::" in test_id else SEED


def _outcome(case: ET.Element) -> str:
    for child in case:
        if child.tag == "failure":
            return "failed"
        if child.tag == "error":
            return "error"
        if child.tag == "skipped":
            return "xfail" if child.get("type") == "pytest.xfail" else "skipped"
    return "passed"


def _message(case: ET.Element) -> str:
    for child in case:
        if child.tag in ("failure", "error", "skipped") and child.get("message"):
            return str(child.get("message")).strip().splitlines()[0][:200]
    return ""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_status(upstream: Path) -> dict[str, dict[str, Any]]:
    """For each test file: present or not, its sha256, and whether that is the pinned copy."""
    out: dict[str, dict[str, Any]] = {}
    for fname, pin in UPSTREAM.items():
        p = upstream / fname
        digest = sha256(p) if p.is_file() else None
        out[fname] = {
            "present": digest is not None,
            "sha256": digest,
            "pinned_commit": pin["commit"],
            "pinned_sha256": pin["sha256"],
            "is_pinned_copy": None if digest is None or pin["sha256"] is None else digest == pin["sha256"],
        }
    return out


def read_outcomes(path: Path, died: str) -> dict[str, dict[str, str]]:
    """Outcome per test from the plugin's per-test lines; a test that started and never ended is
    ``died`` (``died`` says how the process ended), and so recorded."""
    results: dict[str, dict[str, str]] = {}
    running: str | None = None
    if not path.exists():
        return results
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec["event"] == "start":
            running = rec["test"]
            continue
        prev = results.get(rec["test"])
        if prev is None or prev["outcome"] == "passed" or rec["outcome"] in FAILING:
            results[rec["test"]] = {"outcome": rec["outcome"], "message": rec["message"]}
        if rec["when"] == "teardown" or rec["outcome"] != "passed":
            running = None if rec["when"] == "teardown" else running
    if running is not None and died:
        results[running] = {"outcome": "died", "message": f"the pytest process ended during this test: {died}"}
    return results


def _pytest(mode: str, target: str, upstream: Path, out: Path, tag: str, env: dict[str, str],
            timeout: int) -> tuple[dict[str, dict[str, str]], str]:
    """One pytest process over ``target`` (a file, or one test id); its outcomes and how it ended."""
    xml = out / f"{mode}-{tag}.xml"
    outcomes = Path(env["CGTOOL_SELECT"] + "." + target.split("::")[0] + ".outcomes")
    outcomes.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "pytest", str(upstream / target), "-q", "-p", "cgtool_select",
        "-p", "no:cacheprovider", "-c", str(HERE / "shim" / "pytest.ini"), "--rootdir", str(upstream),
        f"--junitxml={xml}", "-W", "default",
    ]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, cwd=upstream, capture_output=True, text=True, timeout=timeout)
        log = proc.stdout + proc.stderr
        rc = proc.returncode
        ended = f"killed by signal {-rc}" if rc < 0 else ("" if rc in (0, 1, 5) else f"exit status {rc}")
    except subprocess.TimeoutExpired as e:
        log = f"TIMEOUT after {timeout}s\n{e.stdout or ''}{e.stderr or ''}"
        ended = f"timed out after {timeout} s"
    (out / f"{mode}-{tag}.log").write_text(log)
    results = read_outcomes(outcomes, ended)
    if outcomes.exists():
        outcomes.rename(out / f"{mode}-{tag}.outcomes")
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            cls = case.get("classname", "").split(".")
            key = f"{cls[-2]}.py::{cls[-1]}::{case.get('name')}" if len(cls) >= 2 else str(case.get("name"))
            results[key] = {"outcome": _outcome(case), "message": _message(case)}
    print(f"[{mode}] {tag}: {time.perf_counter() - t0:.1f}s" + (f", the process {ended}" if ended else "")
          + f", log tail: {log.strip().splitlines()[-1:]}")
    return results, ended


def run_mode(mode: str, files: list[str], upstream: Path, out: Path, timeout: int,
             isolation: str = "file") -> dict[str, dict[str, str]]:
    """PyTorch's tests with the shim in ``mode``; outcome and message per test id.

    ``isolation`` "file": one pytest process per test file, every selected test of the file in it
    (the run that counts: state left behind by one test meets the next, as in a user's process).
    "test": one process per selected test (a first pass collects them), to tell which failures
    come only from sharing a process.
    """
    results: dict[str, dict[str, str]] = {}
    sel = out / f"select-{mode}.json"
    sel.write_text(json.dumps({"ids": sorted(TESTS), "whole": WHOLE, "patterns": PATTERNS}))
    for stale in out.glob(f"select-{mode}.json.*"):
        stale.unlink()
    env = {
        **os.environ,
        "CGTOOL_TORCH_SHIM": mode,
        "CGTOOL_SELECT": str(sel),
        "PYTHONPATH": os.pathsep.join([str(HERE / "shim"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
    }
    for fname in files:
        if isolation == "file":
            results.update(_pytest(mode, fname, upstream, out, fname, env, timeout)[0])
            continue
        subprocess.run([sys.executable, "-m", "pytest", str(upstream / fname), "-q", "--collect-only",
                        "-p", "cgtool_select", "-p", "no:cacheprovider", "-c", str(HERE / "shim" / "pytest.ini"),
                        "--rootdir", str(upstream)], env=env, cwd=upstream, capture_output=True, timeout=timeout)
        selected = Path(f"{sel}.{fname}.selected")
        for i, test in enumerate(json.loads(selected.read_text()) if selected.exists() else []):
            results.update(_pytest(mode, test, upstream, out, f"{fname}.{i}", env, timeout)[0])
    return results


OUTCOMES = ("passed", "failed", "error", "died", "skipped", "xfail", "not run")
FAILING = ("failed", "error", "died")


def summarize(res: dict[str, dict[str, dict[str, str]]], modes: list[str], env: dict[str, Any],
              files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Rows for every listed test and every test that ran; counts per mode and category."""
    ids = list(TESTS) + sorted({t for m in modes for t in res[m]} - set(TESTS))
    rows = []
    for tid in ids:
        row: dict[str, Any] = {"test": tid, "category": category(tid), "outside_engine": OUTSIDE_ENGINE.get(tid, "")}
        for m in modes:
            row[m] = res[m].get(tid, {"outcome": "not run", "message": ""})
        rows.append(row)
    counts = {
        m: {
            cat: {o: sum(1 for r in rows if r["category"] == cat and r[m]["outcome"] == o) for o in OUTCOMES}
            for cat in (SEED, BEYOND)
        }
        for m in modes
    }
    return {"environment": env, "upstream": files, "counts": counts, "modes": modes, "tests": rows}


def engine_regressions(summary: dict[str, Any]) -> list[str]:
    """Tests about the engine (not marked outside it) that fail or error with the engine."""
    if "engine" not in summary["modes"]:
        return []
    return [r["test"] for r in summary["tests"] if not r["outside_engine"] and r["engine"]["outcome"] in FAILING]


def render(summary: dict[str, Any]) -> str:
    """The results section of RESULTS.md, from a summary.json."""
    env, modes = summary["environment"], summary["modes"]
    lines = [
        f"torch {env['torch']} (CUDA {env['cuda']}) on {env['device']}; modes: {', '.join(modes)}; "
        + {"file": "each test file's tests in one pytest process.",
           "test": "each test in its own pytest process (not the run that counts)."}[env.get("isolation", "file")],
        "",
        "Test files:",
        "",
        "| file | sha256 (first 12) | pinned |",
        "|---|---|---|",
    ]
    for fname, st in summary["upstream"].items():
        if not st["present"]:
            lines.append(f"| `{fname}` | missing: its tests did not run | |")
            continue
        if st["is_pinned_copy"] is None:
            pinned = f"pinned at commit `{st['pinned_commit'][:12]}` (no sha256 recorded)" if st["pinned_commit"] else "not pinned"
        else:
            pinned = "the pinned copy" if st["is_pinned_copy"] else "**not** the pinned copy"
        lines.append(f"| `{fname}` | `{st['sha256'][:12]}` | {pinned} |")
    lines += ["", "| mode | category | passed | failed | error | died | skipped | not run |",
              "|---|---|---|---|---|---|---|---|"]
    for m in modes:
        for cat in (SEED, BEYOND):
            c = summary["counts"][m][cat]
            ran = sum(c[o] for o in OUTCOMES if o != "not run")
            lines.append(f"| {m} | {cat} | {c['passed']}/{ran} | {c['failed']} | {c['error']} | "
                         f"{c.get('died', 0)} | {c['skipped'] + c['xfail']} | {c['not run']} |")
    lines += ["", "(died: the pytest process ended during the test, e.g. an abort; the tests after it in that "
              "file did not run. not run: listed ids that the revision at hand lacks -- tests are renamed "
              "between revisions -- or whose file is missing, or that a death kept from running.)"]
    ran_rows = [r for r in summary["tests"] if any(r[m]["outcome"] != "not run" for m in modes)]
    differ = [r for r in ran_rows if len({r[m]["outcome"] for m in modes}) > 1]
    lines += ["", f"Tests whose outcome differs between {' and '.join(modes)} ({len(differ)} of {len(ran_rows)} that ran):", ""]
    lines += ["| test | category | " + " | ".join(modes) + " |", "|---|---|" + "---|" * len(modes)]
    lines += [f"| {r['test']} | {r['category']} | " + " | ".join(r[m]["outcome"] for m in modes) + " |" for r in differ]
    bad = [r for r in ran_rows if any(r[m]["outcome"] in FAILING for m in modes)]
    if bad:
        lines += ["", "Failures and errors:", ""]
        for r in bad:
            for m in modes:
                if r[m]["outcome"] in FAILING:
                    lines.append(f"- [{m}] {r['test']}: {r[m]['message'] or r[m]['outcome']}")
            if r["outside_engine"]:
                lines.append(f"  - outside the engine: {r['outside_engine']}")
    regress = engine_regressions(summary)
    lines += ["", f"Tests about the engine failing with it: {len(regress)}"
              + ("" if not regress else " (" + ", ".join(t.split('::')[-1] for t in regress) + ")")]
    return "\n".join(lines)


BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def write_results(results_md: Path, section: str) -> None:
    text = results_md.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{results_md} has no {BEGIN} ... {END} section to fill.")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    results_md.write_text(f"{head}{BEGIN}\n{section}\n{END}{tail}")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("torch-tests-out"))
    ap.add_argument("--upstream", type=Path, default=HERE / "upstream")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per test file and mode")
    ap.add_argument("--modes", default="torch,engine")
    ap.add_argument("--isolation", choices=("file", "test"), default="file",
                    help="file: each file's tests in one pytest process (the run that counts); "
                    "test: one process per test")
    ap.add_argument("--render", type=Path, metavar="SUMMARY_JSON",
                    help="no run: rewrite the results section of --results from this summary.json")
    ap.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    args = ap.parse_args()
    if args.render is not None:
        write_results(args.results, render(json.loads(args.render.read_text())))
        print(f"{args.results}: results section rewritten from {args.render}")
        return 0
    files = file_status(args.upstream)
    present = [f for f, st in files.items() if st["present"]]
    for f, st in files.items():
        print(f"{f}: " + ("MISSING: its tests will not run" if not st["present"] else
                          f"sha256 {st['sha256']}" + {True: " (the pinned copy)", False: " (NOT the pinned copy)",
                                                      None: ""}[st["is_pinned_copy"]]))
    if not present:
        print(f"No upstream test files in {args.upstream}. Run scripts/torch_tests/get_upstream.sh "
              "or copy them there (see README.md).", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    env = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
           "isolation": args.isolation}
    modes = args.modes.split(",")
    res = {m: run_mode(m, present, args.upstream.resolve(), args.out.resolve(), args.timeout, args.isolation)
           for m in modes}
    summary = summarize(res, modes, env, files)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    text = render(summary)
    (args.out / "summary.md").write_text(text + "\n")
    print(text)
    return 1 if engine_regressions(summary) else 0


if __name__ == "__main__":
    sys.exit(main())
