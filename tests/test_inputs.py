"""One input model (issue 28): the table of docs/inputs.md against the code, the kind of every input
in tests/data told independently (plain json and the rules the doc states), every analysis command run
on every input in tests/data, and the figures the commands share checked equal across commands."""

from __future__ import annotations

import functools
import gzip
import html
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from cgtool.errors import CgtoolError
from cgtool.inspect.inputs import ACCEPTS, InputKind, identify
from cgtool.inspect.results import Figures, Lane, MatchKind
from cgtool.report import words

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
DOC = ROOT / "docs" / "inputs.md"
COMMANDS = ("deps", "topo", "dot", "diff", "report")
SKIP = {"bad", "broken"}  # damaged inputs: the hostile-input tests' own
#: Folders that hold several data sets (one run of a script): their inputs are these.
CONTAINERS = {"two_gpus": ["tp_mlp/bundle", "tp_mlp/traces", "tp_mlp/traces_mc1", "nig/bundle", "nig/traces",
                           "record_rec_hang", "record_rec_nig", "twonode/cap", "twonode/tr"]}


def doc_table() -> dict[str, dict[str, str]]:
    text = DOC.read_text()
    part = text[text.index("## Which command takes which"):]
    lines = [ln for ln in part.splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    out = {}
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        out[cells[0]] = dict(zip(head[2:], cells[2:]))
    return out


def test_the_table_in_the_docs_is_the_code():
    table = doc_table()
    assert set(table) == {k.value for k in InputKind}
    for kind in InputKind:
        for cmd in COMMANDS:
            assert table[kind.value][cmd] == ACCEPTS[cmd][kind], (kind.value, cmd)


# ----------------------------------------------------------------------------- the inputs, told independently
def _load(p: Path) -> Any:
    raw = p.read_bytes()
    try:
        return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except ValueError:
        return None


@functools.cache  # the files under tests/data do not change: each is parsed once a process
def _file_kind(p: Path) -> str | None:
    d = _load(p)
    if not isinstance(d, dict):
        return None
    if "traceEvents" in d:
        return "cgtool trace" if (d.get("cgtool") or {}).get("graphs") else "profiler trace"
    if "nodes" in d:
        return "graph export"
    if "workloads" in d or d.get("kind") == "bench":
        return "bench results"
    if "cgtool_record" in d:
        return "record folder"
    return None


@functools.cache
def _ranked(p: Path, folder: Path) -> bool:
    d = _load(p)
    return bool(re.search(r"rank[_-]?\d+", str(p.relative_to(folder)))) or (
        isinstance(d, dict) and isinstance((d.get("cgtool") or {}).get("rank"), int))


def expected_kind(p: Path) -> str | None:
    if p.is_file():
        return _file_kind(p)
    if (p / "index.json").exists() or (p / "index.json.gz").exists() or list(p.glob("rank*/index.json*")):
        return "record folder"
    files = [f for f in sorted(p.rglob("*.json*")) if f.name.endswith((".json", ".json.gz"))]
    kinds = {f: _file_kind(f) for f in files}
    arts = [f for f, k in kinds.items() if k]
    if not arts:
        return None
    if any(_ranked(f, p) for f in arts if kinds[f] != "bench results"):
        return "per-rank folder"
    if {kinds[f] for f in arts} == {"graph export"}:
        return "capture bundle"
    return "folder of artifacts"


def inputs() -> list[Path]:
    out = []
    for d in sorted(DATA.iterdir()):
        if not d.is_dir() or d.name in SKIP:
            continue
        if d.name in CONTAINERS:
            out += [d / sub for sub in CONTAINERS[d.name]]
            continue
        out.append(d)
        out += [f for f in sorted(d.iterdir()) if f.is_file() and f.name.endswith((".json", ".json.gz"))
                and _file_kind(f)]
    return out


INPUTS = inputs()
#: The launch-bound tiny fork/join's traces take the inferred match to its time limit (seconds a
#: command): they run with the README's test command, not in CI's runs on the other Pythons.
PARAMS = [pytest.param(p, marks=pytest.mark.slow) if "forkjoin_tiny" in str(p) else p for p in INPUTS]


@pytest.mark.parametrize("path", INPUTS, ids=[str(p.relative_to(DATA)) for p in INPUTS])
def test_every_input_is_told_by_its_content(path):
    want = expected_kind(path)
    if want is None:
        with pytest.raises(CgtoolError):  # a message for the user, not a crash
            identify(path)
        return
    assert identify(path).value == want


# ----------------------------------------------------------------------------- every command on every input
def _holds(path: Path) -> dict[str, bool]:
    """What an input holds, independently: graphs, traces (usable ones) and bench results."""
    if path.is_file() and _file_kind(path) == "record folder":
        return _holds(path.parent)
    if path.is_file():
        k = _file_kind(path)
        return {"graph": k in ("graph export", "cgtool trace"), "trace": k in ("cgtool trace", "profiler trace"),
                "bench": k == "bench results"}
    files = [f for f in path.rglob("*.json*") if f.name.endswith((".json", ".json.gz"))]
    kinds = [_file_kind(f) for f in files]
    idx = [_load(f) for f in files if f.name.startswith("index.json")]
    has_graph = any(k in ("graph export", "cgtool trace") for k in kinds)
    traces = [f for f, k in zip(files, kinds) if k == "cgtool trace"
              or (k == "profiler trace" and any(k2 == "graph export" for f2, k2 in zip(files, kinds)
                                                if f2.parent == f.parent))]
    return {"graph": has_graph, "trace": bool(traces), "bench": "bench results" in kinds,
            "no_graph_record": any(isinstance(i, dict) and not i.get("graphs") for i in idx)}


REFUSAL = {"holds no graph": "no graph", "holds no trace": "no trace", "as --graph": "holds no trace",
           "as --trace": "without graph exports", "with --graph": "without graph exports",
           "with its export": "without graph exports", "if it holds a trace": "without a trace",
           "if it holds a graph": "no graph"}


def _first_process(path: Path) -> list[str]:
    """``--process PID`` of the first process that made graphs, in a recording of several that did."""
    folder = path.parent if path.is_file() else path
    idx = next((_load(f) for f in (folder / "index.json", folder / "index.json.gz") if f.exists()), None)
    procs = [p for p in (idx or {}).get("processes") or [] if p.get("followed") and p.get("graphs")]
    return ["--process", str(procs[0]["pid"])] if len(procs) > 1 else []


def _args(cmd: str, path: Path, tmp: Path) -> list[Any]:
    """The command on ``path``; `dot` and `diff` take one graph: its #0 (of rank 0, where per rank; of
    the first process that made graphs, in a recording of several)."""
    one = f"{path}#0"
    rank = ["--rank", "0"] if path.is_dir() and (list(path.glob("rank*")) or list(path.rglob("*rank[0-9]*"))) else []
    rank = rank or _first_process(path)
    return {"topo": ["topo", path, "--json", tmp / "topo.json"],
            "dot": ["dot", one, "-o", tmp / "g.dot", *rank],
            "deps": ["deps", path, "--json", tmp / "deps.json"],
            "diff": ["diff", one, one, *rank],
            "report": ["report", path, "-o", tmp / "r.html"]}[cmd]


#: (trace, exec graph id) -> {command: figures JSON}: filled as the inputs are run (a trace read as a
#: file and inside its folder must give the same figures)
SEEN: dict[tuple[str, int], dict[str, Any]] = {}
KEYS = ("replays", "span_median_us", "span_mean_us", "critical_path_us", "true", "fake", "fake_wait_us",
        "waits", "waits_us", "cannot_tell", "cannot_tell_us", "saving_us", "lane", "match", "incomplete_replays")


def _figures(d: dict[str, Any]) -> Figures:
    kw = {k: d[k] for k in Figures.__dataclass_fields__ if k in d}
    kw["source"] = ""
    kw["lane"], kw["match"] = Lane(d["lane"]), MatchKind(d["match"])
    return Figures(**kw)


def _single_trace(path: Path) -> str:
    """The one trace file of an input (deps writes one document for one trace, without its path)."""
    if path.is_file() and _file_kind(path) in ("cgtool trace", "profiler trace"):
        return str(path)
    if path.is_file():
        path = path.parent
    (t,) = [f for f in path.rglob("*.json*") if _file_kind(f) in ("cgtool trace", "profiler trace")
            and (_file_kind(f) == "cgtool trace" or (f.parent / "graph.json").exists())]
    return str(t)


def _shared(cmd: str, tmp: Path, path: Path) -> list[tuple[str, int, dict[str, Any]]]:
    """(trace, graph id, figures) of each traced graph a command showed."""
    out = []
    if cmd == "deps":
        doc = json.loads((tmp / "deps.json").read_text())
        docs = [doc] if "summary" in doc else list((doc.get("ranks") or doc.get("traces")).values())
        for d in docs:
            for gid, f in d["graphs"].items():
                if f["replays"]:
                    out.append((d.get("trace") or _single_trace(path), int(gid), f))
    elif cmd == "topo":
        doc = json.loads((tmp / "topo.json").read_text())
        items = [doc] if "nodes" in doc else list((doc.get("ranks") or doc.get("graphs")).values())
        for t in items:
            if "measured" in t:
                out.append((t["measured"]["trace"], t["measured"]["graphs"][0], t["measured"]))
    elif cmd == "report":
        page = (tmp / "r.html").read_text()
        data = json.loads(re.search(r'<script type="application/json" id=cgdata>(.*?)</script>', page, re.S).group(1))
        for sec in data["sections"]:
            if sec["figures"]:
                out.append((sec["trace"], sec["figures"]["graphs"][0], sec["figures"]))
                # the summary table of the page says it in the same words
                for k, v in words.figure_rows(_figures(sec["figures"])):
                    assert f"<th>{html.escape(k, quote=True)}</th><td>{html.escape(v, quote=True)}</td>" in page, k
    return out


@pytest.mark.parametrize("path", PARAMS, ids=[str(p.relative_to(DATA)) for p in INPUTS])
def test_every_command_on_every_input(path, run_cli, tmp_path, monkeypatch):
    kind = expected_kind(path)
    holds = _holds(path)
    table = doc_table()
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    shown: dict[str, list[tuple[str, int, dict[str, Any]]]] = {}
    for cmd in COMMANDS:
        out = tmp_path / cmd
        out.mkdir()
        rc, text, err = run_cli(*_args(cmd, path, out))
        assert "Traceback" not in err
        if kind is None:  # not an input at all: refused, saying what it lacks
            assert rc in (2, 4) and err.startswith("cgtool: "), (cmd, err)
            continue
        word = table[kind][cmd]
        needs = "trace" if cmd == "deps" else "graph"
        usable = word in ("yes", f"if it holds a {needs}") and (holds[needs] or (cmd == "report" and holds["bench"]))
        if cmd == "report" and kind == "folder of artifacts":
            usable = holds["graph"] or holds["bench"]
        if usable:
            assert rc == 0, (cmd, err)
            shown[cmd] = _shared(cmd, out, path)
            if cmd == "dot":
                _check_dot(path, out / "g.dot", shown)
        else:
            assert rc == 2, (cmd, rc, err)
            phrase = REFUSAL.get(word, word[4:] if word.startswith("no") else "no ")
            assert str(path) in err or path.name in err, err
            assert (phrase in err or f"no {needs}" in err or "Nothing to report" in err), (cmd, word, err)
    # the figures every command showed of each traced graph are the same numbers
    by_graph: dict[tuple[str, int], dict[str, dict[str, Any]]] = defaultdict(dict)
    for cmd, items in shown.items():
        for trace, gid, f in items:
            by_graph[(str(Path(trace).resolve()), gid)][cmd] = f
    for key, per_cmd in by_graph.items():
        first = SEEN.setdefault(key, next(iter(per_cmd.values())))
        for cmd, f in per_cmd.items():
            for k in KEYS:
                assert f[k] == first[k], (key, cmd, k, f[k], first[k])
    # the step summary rows carry the same cells
    if summary.exists():
        text = summary.read_text()
        for (trace, gid), per_cmd in by_graph.items():
            cells = " | ".join(c.replace("|", "\\|") for c in words.summary_cells(_figures(next(iter(per_cmd.values())))))
            if "deps" in per_cmd and len(per_cmd["deps"]["graphs"]) == 1:
                assert cells in text


def _check_dot(path: Path, dot: Path, shown: dict[str, Any]) -> None:
    """A traced DOT's title carries its graph's figures in the words of every command (those
    `deps` gave for that graph: the title's replays row names its exec graph id)."""
    text = dot.read_text()
    label = re.search(r'label="(.*?)"; labelloc', text).group(1)
    if "\\nspan: " not in label:
        return
    rows = dict(x.split(": ", 1) for x in label.split("\\n")[1:])
    cands = [f for _, _, f in shown.get("deps", [])
             if rows["traced replays"].startswith(f"{f['replays']} of exec graph {f['graphs'][0]}")]
    assert cands, f"deps showed no figures of the graph dot drew: {rows}"
    f = _figures(cands[0])
    for k, v in words.figure_rows(f):
        if k in rows:
            assert rows[k] == v.replace("\\", "\\\\").replace('"', '\\"'), k


# ----------------------------------------------------------------------------- the cases of issue 28
def _events(trace: Path) -> tuple[dict, list[dict]]:
    doc = _load(trace)
    return doc, [e for e in doc["traceEvents"] if e.get("ph") == "X" and "graph node id" in (e.get("args") or {})]


def measured(trace: Path, graph_id: int) -> tuple[int, float, float, float]:
    """(replays, median span, mean span, median critical path) of one graph in a cgtool trace, from
    its events and the embedded export: a longest path by hand, per replay."""
    import statistics

    doc, evs = _events(trace)
    g = next(x for x in doc["cgtool"]["graphs"] if x["exec_graph_id"] == graph_id)
    tid = [n["tools_id"] for n in g["nodes"]]
    by_rep = defaultdict(dict)
    for e in evs:
        if e["args"]["graph id"] == graph_id:
            by_rep[e["args"]["correlation"]][e["args"]["graph node id"]] = e
    spans, crits = [], []
    order = _topo_order(g)
    for rep in by_rep.values():
        spans.append(max(e["ts"] + e["dur"] for e in rep.values()) - min(e["ts"] for e in rep.values()))
        L = {}
        for i in order:
            w = rep[tid[i]]["dur"] if tid[i] in rep else 0.0
            L[i] = w + max((L[d] for d in g["nodes"][i]["dependencies"]), default=0.0)
        crits.append(max(L.values()))
    return len(spans), statistics.median(spans), statistics.fmean(spans), statistics.median(crits)


def _topo_order(g: dict) -> list[int]:
    import networkx as nx

    G = nx.DiGraph()
    G.add_nodes_from(range(len(g["nodes"])))
    G.add_edges_from((d, n["index"]) for n in g["nodes"] for d in n["dependencies"])
    return list(nx.topological_sort(G))


def test_dot_of_one_recorded_graph_with_the_recordings_trace(run_cli, tmp_path):
    """Both files come from one recording; the trace holds graph 5 and others: dot draws 5, timed."""
    (rec,) = (DATA / "record_compiled").glob("p*")  # the program's one process
    rc, out, err = run_cli("dot", rec / "graph_001.json.gz", "--trace", rec / "trace.json.gz")
    assert rc == 0, err
    n, med, mean, crit = measured(rec / "trace.json.gz", 5)
    label = re.search(r'label="(.*?)"; labelloc', out).group(1)
    assert f"replays: {n} of exec graph 5" in label and f"median {med:.1f} µs, mean {mean:.1f} µs" in label
    assert f"critical path: {crit:.1f} µs" in label
    (server,) = (DATA / "record_server").glob("p*/trace.json.gz")
    for case in (f"{server}#1", f"{DATA / 'train_step_trace/trace.json.gz'}#1"):
        rc, out, err = run_cli("dot", case)
        assert rc == 0 and "\\nspan: median" in out, err
    rc, _, err = run_cli("dot", server)  # several graphs, none picked
    assert rc == 2 and "#1" in err and "PATH#n" in err


def test_topo_reads_a_per_rank_recording_whole(run_cli, tmp_path):
    rc, _, err = run_cli("topo", DATA / "record_ranks", "--json", tmp_path / "t.json")
    assert rc == 0, err
    doc = json.loads((tmp_path / "t.json").read_text())
    files = sorted(DATA.glob("record_ranks/p*/graph_*.json.gz"))
    assert len(doc["graphs"]) == len(files) == 8


def test_topo_and_diff_take_a_cgtool_trace(run_cli, tmp_path):
    a, b = DATA / "forkjoin_trace_mc1" / "trace.json.gz", DATA / "forkjoin_trace" / "trace.json.gz"
    rc, _, err = run_cli("topo", a, "--json", tmp_path / "t.json")
    assert rc == 0, err
    m = json.loads((tmp_path / "t.json").read_text())["measured"]
    n, med, mean, crit = measured(a, 2)
    assert (m["replays"], m["span_median_us"], m["critical_path_us"]) == (n, round(med, 3), round(crit, 3))
    rc, out, err = run_cli("diff", a, b)
    assert rc == 0 and "unchanged" in out, err


def test_topo_of_a_per_rank_bundle_takes_the_per_rank_traces(run_cli, tmp_path):
    case = DATA / "tp_mlp_2gpu"
    rc, _, err = run_cli("topo", case / "bundle", "--trace", case / "traces", "--json", tmp_path / "t.json")
    assert rc == 0, err
    ranks = json.loads((tmp_path / "t.json").read_text())["ranks"]
    for r in ("0", "1"):
        _, med, _, crit = measured(case / "traces" / f"trace.rank{r}.json.gz", 2)
        assert ranks[r]["critical_path_us"] == ranks[r]["measured"]["critical_path_us"] == round(crit, 3)
        assert ranks[r]["measured"]["span_median_us"] == round(med, 3)


def test_report_tabs_show_their_own_graph(run_cli, tmp_path):
    rc, _, err = run_cli("report", DATA / "record_compiled", "-o", tmp_path / "r.html")
    assert rc == 0, err
    page = (tmp_path / "r.html").read_text()
    data = json.loads(re.search(r'id=cgdata>(.*?)</script>', page, re.S).group(1))
    (trace,) = (DATA / "record_compiled").glob("p*/trace.json.gz")
    _, evs = _events(trace)
    replays = defaultdict(set)
    for e in evs:
        replays[e["args"]["graph id"]].add(e["args"]["correlation"])
    timed = [s for s in data["sections"] if s["figures"]]
    assert sorted(s["figures"]["graphs"][0] for s in timed) == sorted(replays)
    for s in timed:
        gid = s["figures"]["graphs"][0]
        assert s["figures"]["graphs"] == [gid] and s["figures"]["replays"] == len(replays[gid])
    summaries = re.findall(r"<section class=summary.*?</section>", page, re.S)
    assert all(page.count(f"of exec graph {', '.join(map(str, sorted(replays)))}") == 0 for _ in summaries)


def test_span_is_labelled_and_the_critical_path_is_of_the_median_replay(run_cli, tmp_path):
    a = DATA / "forkjoin_trace_mc1" / "trace.json.gz"
    n, med, mean, crit = measured(a, 2)
    for args in (("deps", a), ("topo", a)):
        rc, out, _ = run_cli(*args)
        assert f"median {med:.1f} µs, mean {mean:.1f} µs per replay" in out
        assert f"{crit:.1f} µs measured (median replay)" in out
    rc, _, _ = run_cli("report", a, "-o", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert f"median {med:.1f} µs, mean {mean:.1f} µs per replay" in page and "(mean)</td>" not in page
    # the critical path is at most the span, in every trace: medians against medians
    for p in sorted(DATA.glob("*_trace*/trace.json.gz")) + sorted(DATA.glob("*_kineto_mc*/cupti_trace.json.gz")):
        doc = _load(p)
        for g in doc["cgtool"]["graphs"]:
            n, med, _, crit = measured(p, g["exec_graph_id"])
            assert crit <= med + 1e-9, p


def test_waits_are_not_called_a_cost(run_cli, tmp_path, monkeypatch):
    summary = tmp_path / "s.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    a = DATA / "forkjoin_trace_mc1" / "trace.json.gz"
    rc, out, _ = run_cli("deps", a)
    assert rc == 0 and "waited" in out and "per replay" in out and "cost" not in out
    rc, _, _ = run_cli("report", a, "-o", tmp_path / "r.html")
    text = summary.read_text()
    assert "cost" not in text and "waited µs/replay" in text and "estimated saving µs/replay" in text
    assert ">cost<" not in (tmp_path / "r.html").read_text()


def test_a_profiler_trace_alone_names_its_missing_export(run_cli, tmp_path):
    t = DATA / "forkjoin_kineto_mc1" / "trace.json.gz"
    for args in (("report", t, "-o", tmp_path / "r.html"), ("topo", t), ("dot", t), ("deps", t)):
        rc, _, err = run_cli(*args)
        assert rc == 2 and "profiler trace" in err and "export" in err and "Nothing to report" not in err, err
    rc, _, err = run_cli("report", t, DATA / "forkjoin_kineto_mc1" / "graph.json", "-o", tmp_path / "r.html")
    assert rc == 0, err


def test_wrong_kinds_say_what_the_file_is_and_where_it_goes(run_cli):
    rc, _, err = run_cli("topo", DATA / "bench" / "h200_samples.json")
    assert rc == 2 and "is bench results" in err and "cgtool bench --compare" in err and "export the graph" not in err
    rc, _, err = run_cli("deps", DATA / "forkjoin" / "graph.json")
    assert rc == 2 and "is a graph export" in err and "--graph" in err and "traceEvents" not in err
    rc, _, err = run_cli("diff", DATA / "forkjoin_trace" / "trace.json.gz", DATA / "bench" / "h200_samples.json")
    assert rc == 2 and "is bench results" in err


def test_edges_say_what_is_missing(run_cli, tmp_path):
    rc, out, err = run_cli("topo", DATA / "record_nograph")
    assert rc == 2 and "no CUDA graph" in err
    # a recording without a trace: the same refusal for one process and for ranks
    for rec in ("record_server_pycb", "record_ranks"):
        rc, _, err = run_cli("deps", DATA / rec)
        assert rc == 2 and "without a trace" in err and "--trace-replays" in err, err
    empty = tmp_path / "empty.json"
    empty.write_text('{"exec_graph_id": 3, "nodes": []}')
    rc, out, _ = run_cli("topo", empty)
    assert rc == 0 and "nodes  ()" not in out and "0 (an empty graph" in out


# ----------------------------------------------------------------------------- issue 31: bad per-rank folders, lost events
def _rank_folder(tmp_path: Path) -> Path:
    import shutil

    d = tmp_path / "ranks"
    shutil.copytree(DATA / "tp_mlp_2gpu" / "traces", d)
    return d


@pytest.mark.parametrize("damage", ["truncated", "junk", "fifo", "dev-zero", "two files for one rank"])
def test_report_refuses_a_bad_per_rank_folder_as_deps_and_topo_do(run_cli, tmp_path, damage):
    import os

    d = _rank_folder(tmp_path)
    victim = d / "trace.rank1.json.gz"
    if damage == "truncated":
        victim.write_bytes(victim.read_bytes()[:200])
    elif damage == "junk":
        victim.write_bytes(b"\x00junk" * 20)
    elif damage == "fifo":
        os.mkfifo(d / "trace.rank2.json")
    elif damage == "dev-zero":
        os.symlink("/dev/zero", d / "trace.rank2.json")
    else:
        (d / "again.rank1.json.gz").write_bytes(victim.read_bytes())
    results = [run_cli(*args) for args in (("deps", d), ("topo", d), ("report", d, "-o", tmp_path / "r.html"))]
    codes = {rc for rc, _, _ in results}
    messages = {err for _, _, err in results}
    assert codes == {4} and len(messages) == 1, results
    assert not (tmp_path / "r.html").exists()
    (msg,) = messages
    assert "rank" in msg and str(d) in msg


def test_incomplete_replays_are_reported_and_left_out(run_cli, tmp_path):
    """A replay that lost one kernel event: counted, its missing node named, left out of every figure."""
    src = DATA / "forkjoin_trace_mc1" / "trace.json.gz"
    doc = _load(src)
    evs = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "graph node id" in (e.get("args") or {})]
    lost = next(e for e in evs if e["args"]["replay"] == 2 and e["name"].startswith("sm80"))
    doc["traceEvents"].remove(lost)
    p = tmp_path / "lost.json"
    p.write_text(json.dumps(doc))
    rc, out, err = run_cli("deps", p, "--json", tmp_path / "d.json")
    assert rc == 0, err
    d = json.loads((tmp_path / "d.json").read_text())
    (inc,) = d["incomplete_replays"]
    node = lost["args"]["graph node id"]
    assert inc["replays"] == 1 and inc["missing"] == [node] and inc["correlations"] == [lost["args"]["correlation"]]
    total = len({e["args"]["correlation"] for e in evs})
    assert d["summary"]["replays"] == total - 1 and d["summary"]["incomplete_replays"] == 1
    assert f"#{node & 0xFFFFFFFF}" in out and "left out" in out
    # the fake serializations of the complete replays, from the events (brute force on channel 0)
    assert d["summary"]["fake"] == sum(r["fake"] for r in d["replays"])
    # every replay incomplete: refused, naming the node
    for e in [e for e in evs if e["args"]["graph node id"] == node and e is not lost]:
        doc["traceEvents"].remove(e)
    p.write_text(json.dumps(doc))
    rc, _, err = run_cli("deps", p)
    assert rc == 4 and f"#{node & 0xFFFFFFFF}" in err and "lacks events" in err


# ----------------------------------------------------------------------------- issue 27: never "fake 0" without channels
def test_no_output_says_fake_0_for_a_trace_without_channels(run_cli, tmp_path, monkeypatch):
    summary = tmp_path / "s.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    case = DATA / "transformer_kineto_mc1"
    t, g = case / "trace.json.gz", case / "graph.json"
    rc, out, _ = run_cli("deps", t, "--graph", g, "--json", tmp_path / "d.json")
    assert rc == 0
    row = re.search(r"fake dependencies\s+│ ([^│]*)│", out).group(1)
    assert "not visible" in row and not row.strip().startswith("0")
    assert json.loads((tmp_path / "d.json").read_text())["summary"]["fake"] is None
    rc, _, _ = run_cli("report", t, g, "-o", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert "<th>fake dependencies</th><td>not visible without hardware channels" in page
    rc, out, _ = run_cli("dot", g, "--trace", t)
    assert "fake dependencies: not visible" in out
    text = summary.read_text()
    assert "not visible (no channels)" in text and "| 0 | stream |" not in text
    # and the estimated saving is never put as a measurement
    assert "if the inferred waits were fake serializations" in page or "not estimated" in page


def test_fail_on_fake_counts_distinct_pairs(run_cli):
    from test_deps import expected_from_records

    case = DATA / "forkjoin_trace_mc1"
    pairs = {(a, b) for (a, b, k), n in expected_from_records(case).items() if k == "fake"}
    occurrences = sum(n for (a, b, k), n in expected_from_records(case).items() if k == "fake")
    assert occurrences > len(pairs)  # the two counts differ: the test tells them apart
    rc, _, err = run_cli("deps", case / "trace.json.gz", "--fail-on-fake", str(len(pairs) - 1))
    assert rc == 1 and f"{len(pairs)} distinct fake dependencies" in err
    rc, _, _ = run_cli("deps", case / "trace.json.gz", "--fail-on-fake", str(len(pairs)))
    assert rc == 0
    k = DATA / "transformer_kineto_mc1"
    rc, _, err = run_cli("deps", k / "trace.json.gz", "--graph", k / "graph.json", "--fail-on-fake", "0")
    assert rc == 2 and "not visible" in err
    rc, out, _ = run_cli("deps", "--help", env={"COLUMNS": "200", "PATH": ""})
    assert "distinct" in out and "replays" in out


# ----------------------------------------------------------------------------- issue 29: names in narrow tables
def test_fake_rows_keep_to_a_line_at_80_columns():
    import io

    from rich.console import Console

    from cgtool.inspect.files import deps_of_file
    from cgtool.report.tables import deps_report

    for case, graph in (("forkjoin_trace_mc1/trace.json.gz", None),
                        ("forkjoin_small_kineto_mc1/trace.json.gz", "forkjoin_small_kineto_mc1/graph.json")):
        run = deps_of_file(DATA / case, [DATA / graph] if graph else [], max_connections=1)
        buf = io.StringIO()
        deps_report(Console(file=buf, width=80, color_system=None), run.result, top=10)
        out = buf.getvalue()
        table = out[out.index("top fake dependencies"):]
        table = table[:table.index("└")]
        lines = table.split("\n")[4:]
        starts = [ln for ln in lines if re.match(r"│ #\d+ ", ln)]
        assert len(starts) == 10 and all(len(ln) <= 80 for ln in table.split("\n"))
        # exact match: one line per row; inferred: the certainty may take a second line, no more
        assert len([ln for ln in lines if ln.startswith("│")]) <= 2 * len(starts)


def test_a_recording_of_several_processes_reads_each(run_cli, tmp_path):
    """The record reader's process level (inputs.record_processes): an index listing processes, each
    with its own folder, gives every process's graphs, labelled and selectable with --process."""
    import shutil

    rec = tmp_path / "rec"
    (server,) = (DATA / "record_server").glob("p*")  # the server program's one process
    index = _load(server / "index.json.gz")
    for pid in (101, 202):  # as `cgtool record` lays out a process tree: OUT/p<PID>/ with its own index
        shutil.copytree(server, rec / f"p{pid}")
        (rec / f"p{pid}" / "index.json.gz").unlink()
        (rec / f"p{pid}" / "index.json").write_text(json.dumps({**index, "pid": pid, "parent": 1}))
    from cgtool.artifacts import recording

    # the tree's schema where the reader knows trees (else the reader of one process's index, which
    # hands the listed processes to inputs.record_processes)
    top = {"cgtool_record": getattr(recording, "TREE_SCHEMA", 1), "graphs": [], "program": index.get("program"),
           "exit_code": 0,
           "processes": [{"pid": 101, "parent": 1, "followed": True, "folder": "p101"},
                         {"pid": 202, "parent": 1, "followed": True, "folder": "p202"},
                         {"pid": 303, "parent": 1, "followed": False, "reason": "not a Python process"}]}
    (rec / "index.json").write_text(json.dumps(top))
    n = len(index["graphs"])
    rc, _, err = run_cli("topo", rec, "--json", tmp_path / "t.json")
    assert rc == 0, err
    graphs = json.loads((tmp_path / "t.json").read_text())["graphs"]
    assert len(graphs) == 2 * n and sum(k.startswith("process 202: ") for k in graphs) == n
    rc, out, err = run_cli("dot", f"{rec}#1", "--process", "202")
    assert rc == 0 and "process 202: #1" in out, err
    rc, _, err = run_cli("deps", rec, "--process", "101", "--json", tmp_path / "d.json")
    assert rc == 0, err
