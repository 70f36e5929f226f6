"""Help, docs and README say what the commands do (issue 40): every option a help text names exists,
every JSON example in the docs is the output of the file it names, sizes take the units the help
prints, folding is worded and done the same in `dot` and `report`, and the README's closed-pipe
example gives 141 through a real shell pipe."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
GRAPH = DATA / "forkjoin" / "graph.json"


def _commands() -> dict[str, object]:
    import typer

    from cgtool.cli.main import app

    root = typer.main.get_command(app)
    return dict(getattr(root, "commands"))


def _options(cmd: object) -> set[str]:
    return {o for p in getattr(cmd, "params") for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}


#: An option named in prose: `--word` not inside a longer word (a path like tests/--x is not one).
_NAMED = re.compile(r"(?<![\w/-])(--[a-z][a-z0-9-]*)")
#: A help text that names another command's option says which command: "`cgtool trace --x`",
#: "cgtool bench's --x" (the option is then checked against that command).
_OTHER = re.compile(r"cgtool (\w+)(?:'s)?[^.;:()]*?(--[a-z][a-z0-9-]*)")


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_option_a_help_names_exists(run_cli, name):
    """`topo -h` offered "a torch.profiler trace (with --graph)": topo has no --graph. Every
    `--option` in a command's help (its text and every parameter's) is an option of that command,
    or of the command the sentence names (`cgtool trace --max-connections`)."""
    cmds = _commands()
    rc, out, err = run_cli(name, "--help", env={**os.environ, "COLUMNS": "200"})
    assert rc == 0, err
    text = " ".join(out.split())
    # the user's program's own options: after `--` in an example, or quoted for --args
    text = re.sub(r"`[^`]*`", lambda m: m.group(0).split(" -- ")[0], re.sub(r'"[^"]*"', "", text))
    import typer

    from cgtool.cli.main import app

    mine = _options(cmds[name]) | _options(typer.main.get_command(app)) | {"--help"}  # -q/--quiet: after any command
    elsewhere = {(m.group(1), m.group(2)) for m in _OTHER.finditer(text)}
    for opt in set(_NAMED.findall(text)):
        owners = [c for c, o in elsewhere if o == opt and c in cmds]
        assert opt in mine or any(opt in _options(cmds[c]) for c in owners), (
            f"`cgtool {name} -h` names {opt}, which `cgtool {name}` does not take")


def test_inputs_help_names_the_option_of_each_command(run_cli):
    """deps takes a profiler trace as TRACE with --graph; topo and dot take one in --trace."""
    for name, opt in (("deps", "--graph"), ("topo", "--trace"), ("dot", "--trace")):
        rc, out, _ = run_cli(name, "--help", env={**os.environ, "COLUMNS": "200"})
        text = " ".join(out.split())
        i = text.find("torch.profiler trace")
        assert rc == 0 and i >= 0 and opt in text[i:i + 80], (name, text[i:i + 80])


@pytest.mark.parametrize("given,expected", [("1GiB", 1 << 30), ("256 MiB", 256 << 20), ("2GB", 2 * 10**9),
                                            ("1.5KiB", 1536), ("12345", 12345)])
def test_max_bytes_takes_the_units_the_help_prints(given, expected):
    from cgtool.cli._common import parse_size

    assert parse_size(given) == expected


@pytest.mark.parametrize("bad", ["-1", "0", "1 parsec", "GiB", ""])
def test_max_bytes_refuses_what_is_no_size(run_cli, bad):
    rc, _, err = run_cli("topo", GRAPH, "--max-bytes", bad)
    assert rc == 2 and "not a size" in err and "Traceback" not in err, err


def test_max_bytes_with_a_unit_caps_the_read(run_cli):
    """Units are bytes as printed: a cap below the file's size refuses it, one above reads it."""
    size = GRAPH.stat().st_size
    rc, _, err = run_cli("topo", GRAPH, "--max-bytes", f"{(size - 1) / 1000:.3f}kB")
    assert rc == 4 and "--max-bytes" in err, err
    rc, out, err = run_cli("topo", GRAPH, "--max-bytes", f"{size / 1024 + 1:.0f}KiB")
    assert rc == 0 and "18 (kernel 18)" in out, err


def test_report_and_dot_fold_the_same_way_and_say_so(run_cli, tmp_path):
    """`--collapse N` folds a chain whose INSIDE (all but its two ends) holds at least N nodes, in
    both commands, with one word (boxes) for what is folded; report has dot's --expand."""
    from cgtool.artifacts.graph import GraphData

    n = 6  # a straight chain of n + 2 kernels: its inside holds n nodes
    nodes = [{"index": i, "node_type": "kernel", "tools_id": (1 << 32) | i, "graph_id": 1, "node_id": i, "kernel_name": f"k{i}",
              "dependencies": [i - 1] if i else [], "dependents": [i + 1] if i < n + 1 else []} for i in range(n + 2)]
    g = tmp_path / "chain.json"
    g.write_text(json.dumps({"exec_graph_id": 1, "nodes": nodes}))
    assert len(GraphData.from_json(json.loads(g.read_text())).nodes) == n + 2
    for name in ("dot", "report"):
        rc, out, _ = run_cli(name, "--help", env={**os.environ, "COLUMNS": "200"})
        text = " ".join(out.split())
        assert rc == 0 and "--expand" in text and "box" in text and "piece" not in text, name
        assert "inside of every linear chain" in text and "at least N nodes" in text, name

    def folded(*args: str) -> bool:
        rc, out, err = run_cli("dot", g, *args)
        assert rc == 0, err
        return "#1…#6" in out

    def report_folded(*args: str) -> bool:
        out = tmp_path / f"r{len(args)}{'_'.join(args)}.html"
        rc, _, err = run_cli("report", g, "-o", out, *args)
        assert rc == 0, err
        members = re.search(r'"members":\s*(\[\[.*?\]\])', out.read_text())
        assert members, "no layout in the page"
        return list(range(1, n + 1)) in json.loads(members.group(1))

    assert folded("--collapse", str(n)) and not folded("--collapse", str(n + 1)) and not folded("--expand")
    assert report_folded("--collapse", str(n)) and not report_folded("--collapse", str(n + 1))
    assert not report_folded("--expand")


@pytest.mark.subprocess
def test_the_readme_closed_pipe_example_gives_141_through_a_shell_pipe(tmp_path):
    """The README's example of exit 141 runs in a real shell pipeline and exits 141 there."""
    readme = (ROOT / "README.md").read_text()
    row = next(ln for ln in readme.splitlines() if ln.startswith("| 141 |"))
    example = re.search(r"`(cgtool [^`]*?) \\\| (\w+)`", row)
    assert example, row
    cmd, reader = example.group(1).replace("g.json", str(GRAPH)), example.group(2)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = f"{sys.executable} -m {cmd} | {reader}; echo ${{PIPESTATUS[0]}}"
    for _ in range(3):
        r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
        assert r.stdout.strip() == "141", (r.stdout, r.stderr)
        assert "Traceback" not in r.stderr


# -------------------------------------------------------------- the docs' JSON examples

#: ``<!-- example: ARGS -->`` before a ```json block: the block is (part of) what ARGS gives.
#: ARGS is a cgtool command line whose standard output is JSON, or ``file PATH KEY``: the value
#: at KEY of the (gzip) JSON file PATH.
_MARK = re.compile(r"<!-- example: (.+?) -->\s*\n```json\n(.*?)^```", re.S | re.M)


def _json_blocks() -> list[tuple[str, str, str]]:
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        n_blocks = len(re.findall(r"^```json\n", text, re.M))
        marked = [(f"{doc.name}: {m.group(1)}", m.group(1), m.group(2)) for m in _MARK.finditer(text)]
        assert len(marked) == n_blocks, f"{doc.name}: every ```json block needs an `<!-- example: ... -->` line"
        out += marked
    return out


def _matches(shown: object, real: object, where: str) -> None:
    """``shown`` is ``real`` as far as it goes: the keys it shows (``"..."`` stands for anything),
    the first items of a list, numbers to the decimals shown."""
    if shown == "..." or shown == {"...": "the same figures, of that graph alone"}:
        return
    if isinstance(shown, str) and shown.endswith(", ..."):  # the start of a long text
        assert isinstance(real, str) and real.startswith(shown[:-5]), f"{where}: {real!r}"
        return
    if isinstance(shown, dict):
        assert isinstance(real, dict), where
        for k, v in shown.items():
            assert k in real, f"{where}: no key {k!r} in the output"
            _matches(v, real[k], f"{where}.{k}")
    elif isinstance(shown, list):
        assert isinstance(real, list) and len(real) >= len(shown), where
        for i, v in enumerate(shown):
            _matches(v, real[i], f"{where}[{i}]")
    elif isinstance(shown, float) and not isinstance(real, bool) and isinstance(real, (int, float)):
        decimals = len(repr(shown).split(".")[1]) if "." in repr(shown) else 0
        assert round(real, decimals) == shown, f"{where}: the docs show {shown}, the output is {real}"
    else:
        assert shown == real, f"{where}: the docs show {shown!r}, the output is {real!r}"


@pytest.mark.parametrize("label,args,block", _json_blocks(), ids=lambda x: x if len(x) < 80 else x[:80])
@pytest.mark.subprocess
def test_every_docs_json_example_is_the_output_of_the_file_it_names(label, args, block, tmp_path):
    text = block.strip()
    shown = json.loads(text if text.startswith("{") else "{" + text + "}")
    words = args.split()
    if words[0] == "file":
        raw = (ROOT / words[1]).read_bytes()
        real = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        for key in words[2:]:
            real = real[key]
    else:
        assert words[0] == "cgtool"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        r = subprocess.run([sys.executable, "-m", "cgtool", *words[1:]], capture_output=True, text=True, cwd=ROOT,
                           env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        real = json.loads(r.stdout)
    _matches(shown, real, label)


# -------------------------------------------------------------- 80 columns


def _wide(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if len(ln.rstrip()) > 80]


@pytest.mark.subprocess
def test_demo_fits_80_columns(run_cli_subprocess):
    rc, out, err = run_cli_subprocess("demo", env={**os.environ, "COLUMNS": "80", "CUDA_VISIBLE_DEVICES": ""})
    assert rc == 0, err
    assert "── 4." in out and not _wide(out), _wide(out)


@pytest.mark.subprocess
def test_deps_compare_keeps_each_path_on_one_line(run_cli_subprocess):
    a = "tests/data/forkjoin_trace_mc1/trace.json.gz"
    b = "tests/data/forkjoin_trace_mc2/trace.json.gz"
    rc, out, err = run_cli_subprocess("deps", ROOT / a, "--compare", ROOT / b, env={**os.environ, "COLUMNS": "80"})
    assert rc == 0, err
    lines = out.splitlines()
    assert any(ln.strip() == f"first: {ROOT / a}" for ln in lines), out[-800:]
    assert any(ln.strip() == f"second: {ROOT / b}" for ln in lines), out[-800:]
    assert not _wide(out)


def test_diff_names_its_two_inputs(run_cli):
    a, b = f"{DATA / 'record_server'}#0", f"{DATA / 'record_server'}#1"
    rc, out, err = run_cli("diff", a, b, env={**os.environ, "COLUMNS": "80"})
    assert rc == 0, err
    head = out.split("diff A → B")[0]
    assert f"A: {a}" in head and f"B: {b}" in head, head


# -------------------------------------------------------------- inputs that do not belong together

TRACE = DATA / "forkjoin_trace_mc1" / "trace.json.gz"


def _renamed_export(tmp_path: Path) -> Path:
    """The graph the trace embeds, its node #0 renamed: same exec id, node ids, types and edges."""
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    g = doc["cgtool"]["graphs"][0]
    assert g["nodes"][0]["node_type"] == "kernel"
    g["nodes"][0]["kernel_name"] = "other_kernel_of_another_run"
    p = tmp_path / "renamed.json"
    p.write_text(json.dumps(g))
    return p


@pytest.mark.parametrize("argv", [["dot", "{g}", "--trace", "{t}"], ["topo", "{g}", "--trace", "{t}"],
                                  ["deps", "{t}", "--graph", "{g}"]])
def test_a_trace_of_other_kernels_is_refused_by_every_command_with_one_reason(run_cli, tmp_path, argv):
    g = _renamed_export(tmp_path)
    rc, out, err = run_cli(*[a.format(g=g, t=TRACE) for a in argv])
    assert rc == 4, (rc, out[-300:], err)
    text = " ".join(err.split())
    assert "node #0" in text and "other_kernel_of_another_run" in text and "ids, types and edges agree" in text, text


def test_the_export_a_trace_embeds_belongs_with_it(run_cli, tmp_path):
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    g = tmp_path / "same.json"
    g.write_text(json.dumps(doc["cgtool"]["graphs"][0]))
    for argv in (["dot", g, "--trace", TRACE], ["topo", g, "--trace", TRACE], ["deps", TRACE, "--graph", g]):
        rc, _, err = run_cli(*argv)
        assert rc == 0, (argv, err)


def test_a_trace_whose_graph_has_a_cycle_is_said_to_have_one(run_cli, tmp_path):
    """Not "different runs": the reason is the cycle."""
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    g = doc["cgtool"]["graphs"][0]
    (tmp_path / "g.json").write_text(json.dumps(g))
    last = len(g["nodes"]) - 1  # close a cycle: the join feeds the first node
    g["nodes"][0]["dependencies"] = [last]
    g["nodes"][last]["dependents"] = [0]
    t = tmp_path / "cyclic.json"
    t.write_text(json.dumps(doc))
    for argv in (["dot", tmp_path / "g.json", "--trace", t], ["topo", tmp_path / "g.json", "--trace", t],
                 ["deps", t, "--graph", tmp_path / "g.json"], ["deps", t]):
        rc, _, err = run_cli(*argv)
        text = " ".join(err.split())
        assert rc == 4 and "cycle" in text and "different runs" not in text and "another run" not in text, (argv, text)


@pytest.mark.parametrize("argv", [["bench", "--compare", "{g}", "{b}"], ["bench", "--compare", "{t}", "{b}"],
                                  ["diff", "{b}", "{g}"], ["deps", "{b}"], ["deps", "{g}"], ["topo", "{b}"],
                                  ["report", "{b}", "--baseline", "{g}", "-o", "{o}"]])
def test_a_valid_file_of_the_wrong_kind_is_a_usage_error_everywhere(run_cli, tmp_path, argv):
    """One exit code (2, README's table) for a valid file given where another kind goes."""
    names = dict(g=GRAPH, t=TRACE, b=DATA / "bench" / "h200_samples.json", o=tmp_path / "r.html")
    rc, _, err = run_cli(*[a.format(**names) for a in argv])
    assert rc == 2 and "Traceback" not in err, (rc, err)
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^\| 2 \|[^\n]*valid file of the wrong kind", readme, re.M)


# -------------------------------------------------------------- inputs of several graphs

#: Every input in tests/data whose one trace holds several graphs.
MULTI = ["record_compiled", "record_crash", "record_server", "record_train", "record_trees", "train_step_trace"]


def _json_of(run_cli, tmp_path: Path, *argv: object) -> dict:
    out = tmp_path / f"{argv[0]}.json"
    rc, _, err = run_cli(*argv, "--json", out, "--force")
    assert rc == 0, err
    return json.loads(out.read_text())


def _raw_spans(trace: Path) -> dict[int, list[float]]:
    """Per exec graph id, each replay's span (first start to last end of its GPU events), read
    from the trace's events as they are: the events of one replay share a correlation id."""
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    first: dict[tuple[int, int], float] = {}
    last: dict[tuple[int, int], float] = {}
    for e in doc["traceEvents"]:
        a = e.get("args") or {}
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and a.get("graph id"):
            key = (int(a["graph id"]), int(a["correlation"]))
            first[key] = min(first.get(key, e["ts"]), e["ts"])
            last[key] = max(last.get(key, e["ts"] + e["dur"]), e["ts"] + e["dur"])
    out: dict[int, list[float]] = {}
    for (gid, _), t0 in first.items():
        out.setdefault(gid, []).append(last[(gid, _)] - t0)
    return out


@pytest.mark.parametrize("case", MULTI)
def test_deps_on_several_graphs_gives_each_graph_the_figures_topo_gives_it(run_cli, tmp_path, case):
    """One section per graph, named as topo names it; its figures are topo --trace's; no median
    across different graphs in the whole-run summary."""
    inp = DATA / case
    deps = _json_of(run_cli, tmp_path, "deps", inp)
    topo = _json_of(run_cli, tmp_path, "topo", inp)["graphs"]
    assert len(deps["graphs"]) > 1 and deps["summary"]["span_median_us"] is None
    assert deps["summary"]["critical_path_us"] is None
    assert deps["summary"]["replays"] == sum(g["replays"] for g in deps["graphs"].values())  # counts add up
    for gid, g in deps["graphs"].items():
        name = g.get("name")
        assert name in topo, (name, list(topo))
        if "measured" not in topo[name]:  # topo shows no timing for a graph the trace never replayed
            assert g["replays"] == 0 and g["span_median_us"] is None, (case, gid)
            continue
        t = topo[name]["measured"]
        for k in ("replays", "span_median_us", "critical_path_us", "true", "fake", "saving_us"):
            assert g[k] == t[k], (case, gid, k, g[k], t[k])
    rc, out, err = run_cli("deps", inp, env={**os.environ, "COLUMNS": "80"})
    assert rc == 0, err
    assert "per graph" in out and "traced replays" in out
    for g in deps["graphs"].values():
        n = re.search(r"#\d+", g["name"])
        assert f"{n.group(0)} " in out if n else g["name"] in out, g["name"]


@pytest.mark.parametrize("case", ["record_server", "record_trees", "record_compiled"])
def test_each_graphs_median_span_is_that_of_its_raw_events(run_cli, tmp_path, case):
    import statistics

    from cgtool.artifacts.recording import is_recording

    assert is_recording(DATA / case)
    traces = sorted((DATA / case).rglob("trace.json.gz"))
    assert len(traces) == 1, traces
    raw = _raw_spans(traces[0])
    deps = _json_of(run_cli, tmp_path, "deps", DATA / case)
    for gid, g in deps["graphs"].items():
        if g["replays"]:
            assert g["span_median_us"] == pytest.approx(statistics.median(raw[int(gid)]), abs=0.01), gid


# -------------------------------------------------------------- the waits' words

def test_the_fake_table_says_what_ran_in_the_gap(run_cli):
    """#11 started after #3 ended, but #5, #7 and #9 were running on the channel in between (from
    the CUPTI records): the table says so, and what gap and waited are measured from."""
    recs = json.loads(gzip.decompress((DATA / "forkjoin_trace_mc1" / "records.json.gz").read_bytes()))
    first = min((r for r in recs if r["kind"] == "kernel"), key=lambda r: r["correlation"])["correlation"]
    by_node = {r["graph_node_id"] & 0xFFFFFFFF: r for r in recs if r["kind"] == "kernel" and r["correlation"] == first}
    a_end, b_start = by_node[3]["end"], by_node[11]["start"]
    between = sorted(k for k, e in by_node.items() if k not in (3, 11) and e["start"] < b_start and e["end"] > a_end)
    rc, out, err = run_cli("deps", TRACE, "--top", "15", env={**os.environ, "COLUMNS": "200"})
    assert rc == 0, err
    row = next(ln for ln in out.splitlines() if re.search(r"│ #3 .*│ #11 ", ln))
    assert " ".join(f"#{k}" for k in between) in row, row
    text = " ".join(out.split())
    assert "ready time" in text and "before's end to after's start" in text
    assert "not when before ended" in text


def test_a_waited_total_above_the_span_says_why(run_cli):
    rc, out, err = run_cli("deps", TRACE, "--json", "-")
    s = json.loads(out)["summary"]
    assert s["fake_wait_us"] > s["span_median_us"]  # the case: 2.66 ms of waits in a 0.79 ms replay
    rc, out, err = run_cli("deps", TRACE, env={**os.environ, "COLUMNS": "200"})
    assert "several items waited at the same time" in " ".join(out.split())


@pytest.mark.subprocess
def test_the_demo_shows_fake_dependencies_that_cost_time(run_cli_subprocess):
    rc, out, err = run_cli_subprocess("demo", env={**os.environ, "COLUMNS": "200", "CUDA_VISIBLE_DEVICES": ""})
    assert rc == 0, err
    savings = [float(m) for m in re.findall(r"estimated saving\s*│\s*([\d.]+) µs per replay", out)]
    assert 0.0 in savings and any(x > 10 for x in savings), savings


# -------------------------------------------------------------- record: processes that cannot make a graph

def _boot(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    from cgtool.capture.record.options import PROCESS_ENV, RecordOptions, process_env_value
    from cgtool.capture.record.process import bootstrap_source

    boot = tmp_path / "boot"
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(bootstrap_source(str(ROOT)))
    out = tmp_path / "rec"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{boot}{os.pathsep}{ROOT}",
           PROCESS_ENV: process_env_value(RecordOptions(out=out), launcher_pid=None, boot_dir=str(boot),
                                          cgtool_root=str(ROOT))}
    return out, env


@pytest.mark.subprocess
def test_compile_workers_start_no_recorder(tmp_path):
    """A process whose command line is torch.compile's compile worker starts no recorder (no folder
    in the recording); any other Python process of the program starts one (here it cannot record,
    without a GPU, and says why in its folder's error.json: the bootstrap did run)."""
    out, env = _boot(tmp_path)
    worker = tmp_path / "site-packages" / "torch" / "_inductor" / "compile_worker" / "__main__.py"
    worker.parent.mkdir(parents=True)
    worker.write_text("import sys; sys.exit(0)\n")
    plain = tmp_path / "plain.py"
    plain.write_text("pass\n")
    for script, recorded in ((worker, False), (plain, True)):
        before = set(out.iterdir())
        r = subprocess.run([sys.executable, str(script), "--workers=2"], env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert bool(set(out.iterdir()) - before) is recorded, (script, r.stderr)
    before = set(out.iterdir())
    r = subprocess.run([sys.executable, "-m", "torch._inductor.compile_worker"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert set(out.iterdir()) == before, r.stderr


RECORDINGS = sorted(p.name for p in DATA.iterdir() if p.name.startswith("record_") and (p / "index.json.gz").exists())


def _summary_lines(case: str, width: int = 80) -> list[str]:
    import io

    from rich.console import Console

    from cgtool.artifacts.recording import load_tree
    from cgtool.report.record_table import record_summary

    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system=None, markup=False, highlight=False)
    record_summary(con, load_tree(DATA / case))
    return buf.getvalue().splitlines()


def _screen_lines(lines: list[str], width: int = 80) -> int:
    return sum(max(1, -(-len(ln.rstrip()) // width)) for ln in lines)


@pytest.mark.parametrize("case", ["record_compiled", "record_hf_llama", "record_trees"])
def test_a_compiled_programs_summary_fits_one_screen_answers_first(case):
    lines = _summary_lines(case)
    assert _screen_lines(lines) <= 50, "\n".join(lines)
    assert lines[0].startswith("• ") and "graph(s) in" in lines[0], lines[0]
    text = "\n".join(lines)
    assert "forked from process" not in text  # the fork advice: only where the fork then tried CUDA
    assert "+MiB" not in text


def test_processes_that_could_not_make_a_graph_are_one_line_per_kind():
    """record_trees: 17 recorded compile workers (16 forked after CUDA was initialised) made no
    graph; they are counted per kind in one line, not listed, and get no fork advice."""
    import gzip as _gz

    idx = json.loads(_gz.decompress((DATA / "record_trees" / "index.json.gz").read_bytes()))
    workers = [p for p in idx["processes"] if p.get("followed") and not p.get("graphs")
               and any(str(a).endswith("compile_worker/__main__.py") for a in p.get("argv") or [])]
    forked = [p for p in workers if (p.get("cuda") or {}).get("usable") is False]
    lines = _summary_lines("record_trees", 200)
    line = next(ln for ln in lines if "made no graph and could not make one" in ln)
    assert line.startswith(f"• {len(workers)} recorded process(es)"), line
    assert f"{len(forked)}x torch.compile's compile worker forked after CUDA" in line, line
    assert f"{len(workers) - len(forked)}x torch.compile's compile worker" in line
    table = [ln for ln in lines if ln.startswith("│")]
    assert not any(str(p["pid"]) in ln.split("│")[1] for p in workers for ln in table)


def test_fork_advice_only_for_a_fork_that_tried_cuda(tmp_path):
    from cgtool.artifacts.recording import CudaNote
    from cgtool.inspect.record_summary import ProcessSummary, RecordSummary, cannot_make_graphs, findings

    note = {"usable": False, "reason": "forked from process 1 after it had initialised CUDA: use spawn"}
    quiet = ProcessSummary(pid=2, parent=1, rank=None, argv=["python", "w.py"], followed=True, exit_code=0,
                           reason=None, cuda=CudaNote(**note, tried=False))
    tried = ProcessSummary(pid=3, parent=1, rank=None, argv=["python", "w.py"], followed=True, exit_code=1,
                           reason=None, cuda=CudaNote(**note, tried=True))
    assert cannot_make_graphs(quiet) and cannot_make_graphs(tried) is None
    text = "\n".join(findings(RecordSummary((quiet, tried), True, 0, ["python", "w.py"])))
    assert "process 3: forked from process 1" in text and "process 2: forked" not in text
    assert "1 recorded process(es) made no graph and could not make one: 1x a process forked after CUDA" in text


def test_reinputs_one_line_per_graph_and_the_empty_graph_says_what_made_it():
    lines = _summary_lines("record_trees", 200)
    text = "\n".join(lines)
    idx = json.loads(gzip.decompress((DATA / "record_trees" / "p556" / "index.json.gz").read_bytes()))
    for g in idx["graphs"]:
        ci = g.get("capture_inputs")
        if ci and ci.get("inputs"):
            want = ", ".join(f"input {k}: {v}" for k, v in enumerate(ci["inputs"]))
            assert f"  #{g['label'].split()[0][1:]}: {want}" in lines, want
    empty = [g for g in idx["graphs"] if g["nodes"] == 0]
    assert empty and all(f"{g['label'].split()[0]} is empty: torch.compile's CUDA graph trees" in text for g in empty)
    hf = "\n".join(_summary_lines("record_hf_llama", 200))
    assert "re-recorded for inputs []" not in hf and "#1: no dynamic input" in hf


def test_one_memory_figure_per_pool():
    """The pool's bytes at exit, once, with the graphs in it; no per-graph +MiB column beside it."""
    idx = json.loads(gzip.decompress((DATA / "record_server" / "p1629" / "index.json.gz").read_bytes()))
    pools = idx["ledger"]["pools"]
    text = "\n".join(_summary_lines("record_server", 200))
    for q in pools:
        assert f"pool {q['pool']} (graphs " in text and f"{q['bytes_reserved'] / 2**20:.1f} MiB" in text
    assert "+MiB" not in text and text.count(f"pool {pools[0]['pool']}") == 1


def test_the_report_opens_on_the_graphs_and_folds_the_helpers(run_cli, tmp_path):
    out = tmp_path / "r.html"
    rc, _, err = run_cli("report", DATA / "record_hf_llama", "-o", out)
    assert rc == 0, err
    page = out.read_text()
    sec = page[page.index("<section class=recsummary"):page.index("</section>", page.index("<section class=recsummary"))]
    idx = json.loads(gzip.decompress((DATA / "record_hf_llama" / "index.json.gz").read_bytes()))
    helpers = [p for p in idx["processes"] if not p.get("followed")]
    assert sec.index("id=recgraphs") < sec.index("<th>parent")  # the graphs before the processes
    details = sec[sec.index("<details"):]
    assert f"show {len(helpers)} process(es)" in details
    listed = sec[:sec.index("<details")]
    assert not any(f"<td class=num>{p['pid']}<td" in listed for p in helpers)
    assert all(f"<td class=num>{p['pid']}<td" in details for p in helpers)


def test_compiled_nodes_carry_their_module_path():
    from cgtool.capture.record.attribution import Site

    model = ({"node": "linear", "file": "modeling_llama.py", "line": 254, "function": "forward",
              "module_path": "model.layers.0.self_attn.q_proj", "module_type": "Linear"},)
    s = Site(file="/p/hf.py", line=17, function="<module>", op="linear (aten.mm)", module=None,
             generated="/tmp/x.py:9", stack=(), call="model.generate", model=model)
    d = s.to_json()
    assert "model.layers.0.self_attn.q_proj" in d["label"] and d["module"] == "model.layers.0.self_attn.q_proj"
    eager = Site(file="/p/m.py", line=3, function="f", op=None, module="Linear", generated=None, stack=())
    assert eager.to_json()["module"] == "Linear"


def test_the_step_summary_has_a_row_per_graph_of_a_multi_graph_trace(run_cli, tmp_path):
    summary = tmp_path / "summary.md"
    rc, _, err = run_cli("deps", DATA / "record_server", env={**os.environ, "GITHUB_STEP_SUMMARY": str(summary)})
    assert rc == 0, err
    deps = _json_of(run_cli, tmp_path, "deps", DATA / "record_server")
    rows = [ln for ln in summary.read_text().splitlines() if "exec graph" in ln]
    assert len(rows) == len(deps["graphs"])
    for gid, g in deps["graphs"].items():
        row = next(ln for ln in rows if f"exec graph {gid} |" in ln)
        assert f"| {g['replays']} | {g['span_median_us']:.1f} |" in row, row
