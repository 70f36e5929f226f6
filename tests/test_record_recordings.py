"""CPU tests over real `cgtool record` recordings made on the GPU machine (tests/data/record_*).

Made by ``scripts/record_programs.sh OUT`` then ``scripts/pack_recordings.py OUT`` from the programs
in tests/programs/ (which do not import cgtool). Expected values come from the programs themselves
(their loop counts, printed as ``RESULT {...}``; the marked lines of their source files) and from the
raw trace events, never from the recorder's own summary.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from cgtool.artifacts.graph import NodeType
from cgtool.artifacts.recording import Recording, RecordedGraph, load_recordings, load_tree

DATA = Path(__file__).parent / "data"
PROGRAMS = Path(__file__).parent / "programs"
TRACE_REPLAYS = {"server": 3, "train": 3, "compiled": 3, "crash": 2}  # --trace-replays in record_programs.sh
TRACE_SKIP = 1  # the default --trace-skip


def _rec(name: str) -> Path:
    p = DATA / f"record_{name}"
    if not p.exists():
        pytest.skip(f"no recording {p} (make it with scripts/record_programs.sh on the GPU machine)")
    return p


def _json(path: Path) -> Any:
    raw = (path if path.exists() else path.with_name(path.name + ".gz")).read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _result(folder: Path) -> dict[str, Any]:
    line = next(ln for ln in (folder / "stdout.txt").read_text().splitlines() if ln.startswith("RESULT "))
    return dict(json.loads(line[len("RESULT "):]))


def _exit_code(folder: Path) -> int:
    return int((folder / "exit_code.txt").read_text().strip())


def _marked_line(program: str, mark: str) -> int:
    """The line number of ``# MARK`` in a program file, read from the file itself."""
    lines = (PROGRAMS / program).read_text().splitlines()
    return next(i + 1 for i, text in enumerate(lines) if f"# {mark}" in text)


def _one(folder: Path) -> Recording:
    """The one process of a one-process program (the recording's ``p<PID>`` folder)."""
    (rec,) = load_recordings(folder)
    return rec


def _graphs(folder: Path) -> list[RecordedGraph]:
    rec = _one(folder)
    return [rec.graph_doc(g) for g in rec.graphs]


def _kernel_events(folder: Path) -> list[dict[str, Any]]:
    trace = _json(_one(folder).folder / "trace.json")
    return [e for e in trace["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]


def _script(argv: list[str]) -> str:
    """The program file of a recorded command line (``python3 tests/programs/x.py`` -> ``x.py``)."""
    return next(Path(a).name for a in argv if a.endswith(".py"))


# -------------------------------------------------------------------------------------------- joins
@pytest.mark.parametrize("name", ["server", "train", "compiled", "crash"])
def test_trace_joins_exports_completely(name: str) -> None:
    folder = _rec(name)
    tools_ids = {n.tools_id for d in _graphs(folder) for n in d.graph.nodes}
    evs = _kernel_events(folder)
    assert evs, "the trace holds GPU events"
    ids = [e["args"]["graph node id"] for e in evs]
    assert all(i in tools_ids for i in ids), "every traced node id is a node of an export (100 % join)"
    # and the trace embeds the same exports
    embedded = _json(_one(folder).folder / "trace.json")["cgtool"]
    assert embedded, "exports embedded in the trace"


@pytest.mark.parametrize("name", ["server", "train", "compiled", "crash"])
def test_traced_replays_run_every_kernel_node_once(name: str) -> None:
    """Per traced replay (one correlation id), the kernels are exactly the graph's kernel nodes."""
    folder = _rec(name)
    kernels_of: dict[int, Counter[int]] = {}
    for d in _graphs(folder):
        kernels_of[d.graph.exec_graph_id] = Counter(n.tools_id for n in d.graph.nodes if n.node_type is NodeType.KERNEL)
    per_launch: dict[tuple[int, int], Counter[int]] = defaultdict(Counter)
    for e in _kernel_events(folder):
        if e.get("cat") == "kernel":
            per_launch[(e["args"]["graph id"], e["args"]["correlation"])][e["args"]["graph node id"]] += 1
    assert per_launch
    for (gid, _), seen in per_launch.items():
        assert seen == kernels_of[gid]


# ----------------------------------------------------------------------------------------- programs
def test_server_replays_pool_and_lines() -> None:
    folder = _rec("server")
    res = _result(folder)
    rec = _one(folder)
    assert _exit_code(folder) == 0 and rec.index.exit_code == 0
    graphs = rec.graphs
    assert len(graphs) == len(res["batch_sizes"]) == 4
    # captured in the program's order (largest batch first): replays per batch size as the program counted
    assert [g.replays for g in graphs] == [res["replays"][str(bs)] for bs in res["batch_sizes"]]
    docs = [rec.graph_doc(g) for g in graphs]
    assert [d.record.replays for d in docs] == [g.replays for g in graphs]
    # one shared pool, and the ledger says so
    assert len({g.pool for g in graphs}) == 1
    (pool,) = rec.index.ledger.pools
    assert pool.graphs == [0, 1, 2, 3] and pool.bytes_reserved > 0
    # captured at the `with torch.cuda.graph(...)` line
    cap = _marked_line("server_runner.py", "LINE_CAPTURE")
    assert all(g.captured_at.endswith(f"server_runner.py:{cap}") for g in graphs)
    # every node attributed to a line of the program; the GELU line and the softmax line among them
    src = PROGRAMS / "server_runner.py"
    text = src.read_text().splitlines()
    for d in docs:
        lines = set()
        for s in d.sources:
            assert s is not None and s.file is not None and s.line is not None
            assert os.path.basename(s.file) == "server_runner.py"
            assert s.code == text[s.line - 1].strip()  # the line recorded is the line in the file
            lines.add(s.line)
        assert _marked_line("server_runner.py", "LINE_GELU") in lines
        assert _marked_line("server_runner.py", "LINE_SOFTMAX") in lines


def test_server_trace_holds_the_chosen_replays() -> None:
    """--trace-replays K after --trace-skip: min(K, replays - skip) launches of each graph in the trace."""
    folder = _rec("server")
    res = _result(folder)
    trace = _json(_one(folder).folder / "trace.json")
    launches_per_graph: dict[int, set[int]] = defaultdict(set)
    for e in trace["traceEvents"]:
        if e.get("cat") == "kernel":
            launches_per_graph[e["args"]["graph id"]].add(e["args"]["correlation"])
    rec = _one(folder)
    for g, bs in zip(rec.graphs, res["batch_sizes"]):
        want = max(0, min(TRACE_REPLAYS["server"], res["replays"][str(bs)] - TRACE_SKIP))
        assert len(launches_per_graph[g.exec_graph_id]) == want


def test_train_forward_and_backward_graphs() -> None:
    folder = _rec("train")
    res = _result(folder)
    rec = _one(folder)
    assert len(rec.graphs) == 2
    assert [g.replays for g in rec.graphs] == [res["steps"], res["steps"]]
    fwd, bwd = (rec.graph_doc(g) for g in rec.graphs)
    graphed = _marked_line("train_graphed.py", "LINE_GRAPHED")
    for d in (fwd, bwd):
        assert {s.line for s in d.sources if s is not None} == {graphed} and None not in d.sources
    assert any(s is not None and s.module == "Linear" for s in fwd.sources)
    bwd_ops = {s.op for s in bwd.sources if s is not None}
    assert bwd_ops and all(op and op.endswith("Backward0") for op in bwd_ops)


def test_compiled_graphs_name_inductor_ops_and_skips() -> None:
    folder = _rec("compiled")
    res = _result(folder)
    rec = _one(folder)
    idx = rec.index
    compiled = [g for g in rec.graphs if g.compiled_code]
    assert len(compiled) >= len(res["shapes"])
    # cudagraph trees: one graph per input shape; the first call of a shape runs eagerly (warm-up),
    # every later call replays, the recording call included
    model_graphs = [g for g in compiled if g.nodes > 1]
    assert [g.replays for g in model_graphs[: len(res["shapes"])]] == [steps - 1 for _, steps in res["shapes"]]
    for g in model_graphs:
        doc = rec.graph_doc(g)
        for s in doc.sources:
            assert s is not None and s.file is not None and s.generated is not None
            assert os.path.basename(s.file) == "compiled_model.py"
            assert "torchinductor" in s.generated or re.search(r"/[a-z0-9]{40,}\.py:\d+$", s.generated)
        ops = " ".join(str(s.op) for s in doc.sources if s is not None)
        assert "gelu" in ops and "softmax" in ops
    reasons = [s.reason for s in idx.compile.cudagraph_skips]
    assert reasons and all(r.startswith("skipping cudagraphs due to") for r in reasons)


def test_crash_keeps_the_first_two_graphs_and_the_exit_code() -> None:
    folder = _rec("crash")
    res = _result(folder)
    rec = _one(folder)
    assert _exit_code(folder) == 1
    assert rec.index.exit_code == 1 and rec.index.finished
    assert "deliberate crash" in (folder / "stderr.txt").read_text()
    assert [g.replays for g in rec.graphs] == res["replays"]
    lines = [{s.line for s in rec.graph_doc(g).sources if s is not None} for g in rec.graphs]
    assert lines == [{_marked_line("crash_after_two.py", "LINE_G1")}, {_marked_line("crash_after_two.py", "LINE_G2")}]
    # the second graph was captured inside `with torch.profiler.record_function("second_graph")`
    ranges = [{s.record_function for s in rec.graph_doc(g).sources if s is not None} for g in rec.graphs]
    assert ranges == [{None}, {"second_graph"}]


def test_no_graph_is_said_plainly() -> None:
    """no_graph.py: one Python process, no graph; the other processes of its tree are the ldconfig
    runs of its libraries (a helper command, which makes no CUDA graph), so "no graph" is the answer."""
    import io

    from rich.console import Console

    from cgtool.report.record_table import record_summary

    folder = _rec("nograph")
    tree = load_tree(folder)
    (rec,) = tree.recordings
    assert _exit_code(folder) == 0 and rec.graphs == []
    unrecorded = [p for p in tree.processes if not p.followed]
    assert unrecorded and all(Path(p.argv[0]).name == "ldconfig" for p in unrecorded)  # read from the argv
    assert tree.complete and not tree.unseen
    con = Console(file=io.StringIO(), width=200, color_system=None)
    record_summary(con, tree)
    assert "instantiated no CUDA graph in any of its 1 process(es)" in con.file.getvalue()  # type: ignore[attr-defined]


def test_bad_input_recordings() -> None:
    missing, busy = _rec("missing"), _rec("busy")
    assert _exit_code(missing) == 2 and "Program not found" in (missing / "stderr.txt").read_text()
    assert _exit_code(busy) == 3
    assert "MULTIPLE_SUBSCRIBERS" in (busy / "stderr.txt").read_text()
    assert "RESULT" not in (busy / "stdout.txt").read_text()  # the program was not started


def test_ranks_record_into_their_processes() -> None:
    """server_runner.py under --nproc-per-node 2: each rank's graphs and replays in its process's folder."""
    folder = _rec("ranks")
    res = _result(folder)  # both ranks print the same counts
    recs = [r for r in load_recordings(folder) if r.rank is not None]  # the torchrun launcher has no rank
    assert sorted(r.rank for r in recs) == [0, 1]
    for r in recs:
        assert r.folder.name == f"p{r.pid}" and r.index.rank == r.rank and r.index.world_size == 2
        assert [g.replays for g in r.graphs] == [res["replays"][str(bs)] for bs in res["batch_sizes"]]
        assert r.index.exit_code == 0
    assert _exit_code(folder) == 0


@pytest.mark.parametrize("name", ["server", "train", "compiled", "crash"])
def test_every_source_line_is_a_line_of_the_program(name: str) -> None:
    """Each node's (and each capture's) file:line is in the program's own file, with the recorded text."""
    folder = _rec(name)
    rec = _one(folder)
    program = _script(rec.index.program)
    text = (PROGRAMS / program).read_text().splitlines()
    n = 0
    for d in (rec.graph_doc(g) for g in rec.graphs):
        sites = [*d.sources, d.record.captured_at]
        for s in sites:
            assert s is not None and s.file is not None and s.line is not None
            assert Path(s.file).name == program
            assert 1 <= s.line <= len(text)
            assert s.code == text[s.line - 1].strip()
            n += 1
    assert n > 0


# ----------------------------------------------------------------------------------- coverage
@pytest.mark.parametrize("name", ["server", "train", "compiled", "crash"])
def test_kernel_coverage_agrees_with_the_program_and_the_trace(name: str) -> None:
    """With --trace-replays the recorder sums kernel time in and out of graph replays over the run.
    Per graph: kernels = replays x kernel nodes (replays from the program, nodes from the export),
    and its kernel time per replay is what the trace's own replays took."""
    folder = _rec(name)
    rec = _one(folder)
    cov = rec.index.coverage
    per_replay: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for e in _kernel_events(folder):
        if e.get("cat") == "kernel":
            per_replay[e["args"]["graph id"]][e["args"]["correlation"]] += e["dur"] * 1e3  # µs -> ns
    for g in rec.graphs:
        kernels = sum(n.node_type is NodeType.KERNEL for n in rec.graph_doc(g).graph.nodes)
        assert g.kernels == g.replays * kernels
        reps = per_replay.get(g.exec_graph_id)
        if reps and g.replays:
            traced = sum(reps.values()) / len(reps)
            assert g.kernel_ns / g.replays == pytest.approx(traced, rel=0.25)
    assert cov.kernel_ns_in_graphs == sum(g.kernel_ns for g in rec.graphs) + cov.kernel_ns_of_unrecorded_graphs
    total = cov.kernel_ns_in_graphs + cov.kernel_ns_outside_graphs
    assert cov.share_in_graphs == pytest.approx(cov.kernel_ns_in_graphs / total)
    assert cov.kernels_in_graphs == sum(g.kernels for g in rec.graphs)
    # from the first graph on: the same graph time against a part of the time outside graphs
    assert cov.kernels_outside_graphs_since_first_graph <= cov.kernels_outside_graphs
    assert cov.share_in_graphs_since_first_graph == pytest.approx(
        cov.kernel_ns_in_graphs / (cov.kernel_ns_in_graphs + cov.kernel_ns_outside_graphs_since_first_graph))
    assert cov.share_in_graphs_since_first_graph >= cov.share_in_graphs


# ------------------------------------------------------------------------ capture bundles too
def test_capture_bundle_carries_source_lines() -> None:
    """`cgtool capture sample_workloads/transformer_block.py` on the GPU machine: every node of its
    export names a line of the workload file, with that line's text; `cgtool dot` labels show them."""
    path = DATA / "capture_sources" / "graph.json.gz"
    if not path.exists():
        pytest.skip("no capture bundle (scripts/record_programs.sh makes it)")
    doc = _json(path.with_suffix(""))
    sample = Path(__file__).resolve().parents[1] / "sample_workloads" / "transformer_block.py"
    text = sample.read_text().splitlines()
    srcs = [e.get("source") for e in doc["cgtool"]["nodes"]]
    assert srcs and all(s is not None for s in srcs)
    for s in srcs:
        assert Path(s["file"]).name == "transformer_block.py"
        assert s["code"] == text[s["line"] - 1].strip()
    assert doc["cgtool"]["sources"]["nodes_with_source"] == len(srcs)
    calls = {s["call"] for s in srcs}
    assert {"qkv", "proj", "fc1", "fc2"} <= calls  # the layers the block calls, by name


def test_dot_of_a_capture_bundle_shows_the_lines(run_cli) -> None:  # type: ignore[no-untyped-def]
    path = DATA / "capture_sources" / "graph.json.gz"
    if not path.exists():
        pytest.skip("no capture bundle")
    code, out, err = run_cli("dot", str(path))
    assert code == 0, err
    assert "transformer_block.py:32 qkv (Linear)" in out


@pytest.mark.parametrize("name", ["server", "train", "compiled", "crash"])
def test_topo_of_a_recording_weights_exactly_the_traced_graphs(name: str) -> None:
    """`cgtool topo DIR`: a graph with events in the trace gets its measured critical path; one the
    trace never saw (cudagraph trees' empty warm-up graph, never replayed) stays static, and the
    recording is read rather than refused as a mismatched pair."""
    from cgtool.inspect.files import topo_of_recording

    folder = _rec(name)
    traced = {e["args"]["graph id"] for e in _kernel_events(folder)}  # read from the raw events
    topos = topo_of_recording(folder)
    assert len(topos) == len(_graphs(folder))
    for fname, (g, t) in topos.items():
        if g.exec_graph_id in traced:
            assert t.critical_path_us is not None and t.critical_path_us > 0, fname
        else:
            assert t.critical_path_us is None, fname
    if name == "compiled":  # the case this guards: a graph of the recording missing from the trace
        assert any(g.exec_graph_id not in traced for g, _ in topos.values())


# ------------------------------------------------------------------- every process of a program
# Recordings in the process-tree layout (OUT/index.json with "processes", OUT/p<PID>/ per process),
# made by scripts/record_programs.sh from the programs that count their own graphs
# (tests/programs/_graphcount.py prints RESULT {pid, graphs, replays} per process; last line wins).
TREE_CASES = ["spawn_thread", "forkserver", "chain", "torchrun", "trees", "killed", "hf_llama"]


def _tree(name: str) -> tuple[Path, dict[str, Any]]:
    folder = _rec(name)
    tree = _json(folder / "index.json")
    if "processes" not in tree:
        pytest.skip(f"{folder} is an older (one-process) recording")
    return folder, tree


def _last_results(folder: Path) -> dict[tuple[int, int], dict[str, Any]]:
    out: dict[tuple[int, int], dict[str, Any]] = {}
    text = (folder / "stdout.txt").read_text()
    dec = json.JSONDecoder()
    for m in re.finditer(r"RESULT ", text):
        r, _ = dec.raw_decode(text, m.end())
        if "pid" in r and "graphs" in r:
            out[(r["pid"], r.get("image", 0))] = r
    return out


@pytest.mark.parametrize("name", TREE_CASES)
def test_every_process_has_the_graphs_and_replays_it_counted(name: str) -> None:
    folder, tree = _tree(name)
    want = _last_results(folder)
    assert want, "the program printed its counts"
    recorded = {}
    for p in tree["processes"]:
        if p["followed"]:
            pid, _, n = p["folder"][1:].partition("-x")
            idx = _json(folder / p["folder"] / "index.json")
            recorded[(int(pid), int(n or 0))] = [g["replays"] for g in idx["graphs"]]
    for key, r in want.items():
        assert recorded[key] == r["replays"], (key, recorded.get(key), r)
    assert all(not v for k, v in recorded.items() if k not in want), "only the counting processes made graphs"
    assert tree["exit_code"] == _exit_code(folder)


def test_the_killed_worker_and_the_programs_exit_code() -> None:
    folder, tree = _tree("killed")
    (w,) = [p for p in tree["processes"] if p["followed"] and p["graphs"]]
    assert not w["finished"] and w["exit_code"] == 128 + 9 and _exit_code(folder) == 7


def _defined(program: str, function: str) -> int:
    """The ``def`` line of a function of a program, read from the file."""
    lines = (PROGRAMS / program).read_text().splitlines()
    return next(i + 1 for i, text in enumerate(lines) if text.lstrip().startswith(f"def {function}("))


def test_cudagraph_trees_rerecord_at_the_compiled_function_with_the_shapes() -> None:
    """cudagraph trees record a graph per new shape of one compiled function: each is captured at
    that function (its ``def`` line, the innermost line of the program's own code when trees began
    the capture), with the program's call into it next on the captured stack, and the input shapes
    (parameters left out) cover every batch size the program used."""
    folder, tree = _tree("trees")
    fwd = _defined("cudagraph_trees_reshape.py", "forward")
    call = _marked_line("cudagraph_trees_reshape.py", "LINE_CALL")
    (p,) = [p for p in tree["processes"] if p["followed"] and p["graphs"]]
    idx = _json(folder / p["folder"] / "index.json")
    served = [g for g in idx["graphs"] if g["replays"]]
    assert served and all(g["captured_at"].endswith(f"cudagraph_trees_reshape.py:{fwd}") for g in served)
    for g in served:
        stack = _json(folder / p["folder"] / g["file"])["cgtool"]["record"]["captured_at"]["stack"]
        assert any(s.split(" ")[0].endswith(f"cudagraph_trees_reshape.py:{call}") for s in stack), stack
    (res,) = _last_results(folder).values()
    batches = {i[0] for g in idx["graphs"] for i in (g.get("capture_inputs") or {}).get("inputs") or []
               if isinstance(i, list) and i}
    assert batches >= set(res["distinct"])


def test_the_programs_own_profiler_leaves_a_lower_bound() -> None:
    """own_profiler.py: the replays of graph A before the program's profiler took CUPTI, as the
    program counted them, marked as a lower bound; the recording says where it was suspended."""
    folder, tree = _tree("profiler")
    (res,) = _last_results(folder).values()
    assert res["profiler_gpu_events"] > 0, "the program's own profiler worked"
    (p,) = [p for p in tree["processes"] if p["followed"] and p["graphs"]]
    idx = _json(folder / p["folder"] / "index.json")
    (sp,) = idx["suspended"]
    assert sp["site"].endswith(f"own_profiler.py:{_marked_line('own_profiler.py', 'LINE_PROFILER')}")
    a = idx["graphs"][0]
    assert a["replays"] == res["before_profiler"][0] and a["replays_complete"] is False
    if sp["resumed_at_s"] is None:  # Kineto kept CUPTI: graphs B and C are not in the recording
        assert len(idx["graphs"]) == 1
    else:  # graph C was made after the profiler: all its replays
        assert [g["replays"] for g in idx["graphs"][1:]] == res["replays"][2:]


def test_the_spawn_worker_captured_in_its_thread() -> None:
    folder, tree = _tree("spawn_thread")
    (p,) = [p for p in tree["processes"] if p["followed"] and p["graphs"]]
    assert p["started_as"] == "spawn" and p["graphs"] == 2
    for g in _json(folder / p["folder"] / "index.json")["graphs"]:
        assert _json(folder / p["folder"] / g["file"])["cgtool"]["record"]["thread"] != "main"


def test_compiled_llama_nodes_name_the_model_lines_and_modules() -> None:
    folder, tree = _tree("hf_llama")
    hits = 0
    for p in tree["processes"]:
        if not p["followed"] or not p["graphs"]:
            continue
        idx = _json(folder / p["folder"] / "index.json")
        for g in idx["graphs"]:
            for e in _json(folder / p["folder"] / g["file"])["cgtool"]["nodes"]:
                for m in (e.get("source") or {}).get("model") or []:
                    if re.fullmatch(r"model\.layers\.\d+\.self_attn\.[qkvo]_proj", m.get("module_path") or "") and \
                            str(m.get("file")).endswith("modeling_llama.py"):
                        hits += 1
    assert hits > 0
