"""The hostile-input corpus: inputs derived from the real recordings in tests/data.

    python3 scripts/bad_corpus.py tests/data/bad          # the small, standing cases (checked in)
    python3 scripts/bad_corpus.py DIR --big               # also the big ones (bombs, nesting, wide)

Every case is a file (or a folder of per-rank files) and a line in ``MANIFEST.json``:
``{"name", "class", "kind", "expect", "why"}``. ``kind`` says which commands read it (graph,
trace, bench, trace-ranks, graph-ranks); ``expect`` is what the contract asks of cgtool:

* ``refuse``: the input is broken or contradicts itself: exit 2 or 4 with one paragraph, or exit 0
  with a warning on stderr that says what was dropped. Exit 0 without a warning is a silent
  acceptance.
* ``accept``: unusual but valid: exit 0 (or 1 for a check such as a diff).

This module imports nothing from cgtool, so ``scripts/hostile_corpus.py`` can run it against any
commit. The big cases are made at test time (``--big``), never checked in.
"""

from __future__ import annotations

import copy
import gzip
import json
import sys
import zlib
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

GRAPH = DATA / "forkjoin" / "graph.json"
TRACE = DATA / "forkjoin_trace" / "trace.json.gz"
KINETO = DATA / "chain_kineto" / "trace.json.gz"
KINETO_GRAPH = DATA / "chain_kineto" / "graph.json"
BENCH = DATA / "bench" / "h200_samples.json"
RANKS_TRACE = DATA / "tp_mlp_2gpu" / "traces"
RANKS_GRAPH = DATA / "tp_mlp_2gpu" / "bundle"

ESC_TITLE = "\x1b]0;pwned\x07"
ESC_RED = "\x1b[31mred\x1b[0m"


def _graph() -> dict[str, Any]:
    return json.loads(GRAPH.read_text())


def _trace(path: Path = TRACE) -> dict[str, Any]:
    return json.loads(gzip.decompress(path.read_bytes()))


def _bench() -> dict[str, Any]:
    return json.loads(BENCH.read_text())


def _gpu(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


class Corpus:
    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.cases: list[dict[str, str]] = []
        dest.mkdir(parents=True, exist_ok=True)

    def add(self, name: str, cls: str, kind: str, expect: str, why: str, data: bytes | None = None) -> Path:
        p = self.dest / name
        if data is not None:
            p.write_bytes(data)
        self.cases.append({"name": name, "class": cls, "kind": kind, "expect": expect, "why": why})
        return p

    def json(self, name: str, cls: str, kind: str, expect: str, why: str, doc: Any, gz: bool = False) -> None:
        raw = json.dumps(doc).encode()
        self.add(name, cls, kind, expect, why, gzip.compress(raw, mtime=0) if gz else raw)

    def graph(self, name: str, cls: str, expect: str, why: str, edit: Callable[[dict[str, Any]], Any]) -> None:
        g = _graph()
        edit(g)
        self.json(name, cls, "graph", expect, why, g)

    def trace(self, name: str, cls: str, expect: str, why: str, edit: Callable[[dict[str, Any]], Any],
              base: Path = TRACE) -> None:
        t = _trace(base)
        edit(t)
        self.json(name, cls, "trace" if base == TRACE else "kineto", expect, why, t, gz=True)

    def bench(self, name: str, cls: str, expect: str, why: str, edit: Callable[[dict[str, Any]], Any]) -> None:
        b = _bench()
        edit(b)
        self.json(name, cls, "bench", expect, why, b)

    def manifest(self) -> None:
        (self.dest / "MANIFEST.json").write_text(json.dumps(self.cases, indent=1) + "\n")


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return edit


def _first_ws(b: dict[str, Any]) -> dict[str, Any]:
    return next(iter(b["workloads"].values()))  # type: ignore[no-any-return]


def _rename(t: dict[str, Any], new: str) -> None:
    """Rename one kernel everywhere in a cgtool trace: its events and its nodes in the embedded graph."""
    old = next(e["name"] for e in _gpu(t) if "CatArray" in e["name"])
    for e in _gpu(t):
        if e["name"] == old:
            e["name"] = new
    for g in t["cgtool"]["graphs"]:
        for nd in g["nodes"]:
            if "CatArray" in str(nd.get("kernel_name")):  # mangled in the export, demangled in events
                nd["kernel_name"] = new
        for x in g.get("cgtool", {}).get("nodes") or []:
            if isinstance(x, dict) and "demangled" in x and "CatArray" in str(x["demangled"]):
                x["demangled"] = new


def small(c: Corpus) -> None:
    # ---- huge integers
    c.graph("graph_exec_id_2p64m1.json", "huge_ints", "refuse", "exec_graph_id 2^64-1 leaves no room for (id << 32) | local",
            lambda g: (_set(["exec_graph_id"], 2**64 - 1)(g)))
    c.graph("graph_exec_id_2p40.json", "huge_ints", "refuse", "exec_graph_id 2^40: tools ids would pass 2^64",
            lambda g: _set(["exec_graph_id"], 2**40)(g))
    c.graph("graph_tools_id_2p70.json", "huge_ints", "refuse", "tools_id beyond 64 bits",
            lambda g: g["nodes"][0].update(tools_id=2**70, graph_id=2**38, node_id=0))
    c.graph("graph_dep_2p64.json", "huge_ints", "refuse", "a dependency index beyond 64 bits",
            lambda g: g["nodes"][1]["dependencies"].append(2**64))
    c.trace("trace_stream_2p64.json.gz", "huge_ints", "refuse", "args.stream beyond 64 bits",
            lambda t: _gpu(t)[3]["args"].update(stream=2**64))
    c.trace("trace_node_id_2p70.json.gz", "huge_ints", "refuse", "graph node id beyond 64 bits",
            lambda t: _gpu(t)[3]["args"].update({"graph node id": 2**70}))
    c.trace("trace_corr_2p63.json.gz", "huge_ints", "refuse", "correlation 2^63 (past int64)",
            lambda t: _gpu(t)[3]["args"].update(correlation=2**63))
    c.bench("bench_rank_2p70.json", "huge_ints", "refuse", "rank beyond 64 bits",
            lambda b: _first_ws(b).update(rank=2**70))
    c.bench("bench_runs_2p70.json", "huge_ints", "refuse", "runs beyond 64 bits",
            lambda b: _first_ws(b).update(runs=2**70))
    # ---- wrong types
    c.graph("graph_timings_str.json", "wrong_types", "refuse", "cgtool.timings is a string",
            _set(["cgtool", "timings"], "fast"))
    c.graph("graph_timings_list.json", "wrong_types", "refuse", "cgtool.timings is a list",
            _set(["cgtool", "timings"], [1, 2]))
    c.graph("graph_nodes_extra_str.json", "wrong_types", "refuse", "cgtool.nodes is a string",
            _set(["cgtool", "nodes"], "x"))
    c.graph("graph_node_type_int.json", "wrong_types", "refuse", "node_type is an integer",
            lambda g: g["nodes"][0].update(node_type=3))
    c.graph("graph_deps_str.json", "wrong_types", "refuse", "dependencies is a string",
            lambda g: g["nodes"][1].update(dependencies="0"))
    c.graph("graph_kernel_name_int.json", "wrong_types", "refuse", "kernel_name is a number",
            lambda g: g["nodes"][0].update(kernel_name=7))
    c.graph("graph_id_source_list.json", "wrong_types", "refuse", "cgtool.id_source is a list",
            _set(["cgtool", "id_source"], ["driver"]))
    c.add("graph_is_list.json", "wrong_types", "graph", "refuse", "the document is a list", b"[1, 2, 3]")
    c.trace("trace_cudmc_word.json.gz", "wrong_types", "refuse", "CUDA_DEVICE_MAX_CONNECTIONS is a word",
            _set(["cgtool", "CUDA_DEVICE_MAX_CONNECTIONS"], "eight"))
    c.trace("trace_graphs_str.json.gz", "wrong_types", "refuse", "cgtool.graphs is a string",
            _set(["cgtool", "graphs"], "none"))
    c.trace("trace_args_list.json.gz", "wrong_types", "refuse", "a kernel's args is a list",
            lambda t: _gpu(t)[5].update(args=[1, 2]))
    c.trace("trace_ts_str.json.gz", "wrong_types", "refuse", "a kernel's ts is a string",
            lambda t: _gpu(t)[5].update(ts="12.5"))
    c.trace("trace_events_obj.json.gz", "wrong_types", "refuse", "traceEvents is an object",
            _set(["traceEvents"], {"a": 1}))
    c.bench("bench_timings_str.json", "wrong_types", "refuse", "gpu_us is a string",
            lambda b: _first_ws(b).update(gpu_us="12"))
    c.bench("bench_exit_code_word.json", "wrong_types", "refuse", "a failed workload's exit_code is a word",
            lambda b: _first_ws(b).update(error="boom", exit_code="three"))
    c.bench("bench_env_list.json", "wrong_types", "refuse", "environment is a list",
            _set(["environment"], [1]))
    c.bench("bench_workloads_list.json", "wrong_types", "refuse", "workloads is a list",
            _set(["workloads"], [1]))
    c.bench("bench_runs_str.json", "wrong_types", "refuse", "runs is a string",
            lambda b: _first_ws(b).update(runs="3"))
    # ---- missing fields
    c.trace("trace_no_ts.json.gz", "missing_fields", "refuse", "kernel events without ts",
            lambda t: [e.pop("ts") for e in _gpu(t)[:2]])
    c.trace("trace_no_dur.json.gz", "missing_fields", "refuse", "kernel events without dur",
            lambda t: [e.pop("dur") for e in _gpu(t)[:2]])
    c.graph("graph_no_dependents.json", "missing_fields", "refuse", "a node without 'dependents'",
            lambda g: g["nodes"][2].pop("dependents"))
    c.bench("bench_no_gpu_us.json", "missing_fields", "refuse", "a workload without samples",
            lambda b: _first_ws(b).pop("gpu_us"))
    # ---- markup, escapes, NUL in names
    for tag, name in (("markup", "[bold]kern[/]"), ("markup_close", "[/]"), ("escape_title", ESC_TITLE + "k"),
                      ("escape_color", ESC_RED), ("nul", "ker\x00nel"), ("newline", "a\nb\"c\\d")):
        cls = "markup" if tag.startswith("markup") else "nul" if tag == "nul" else "escapes"
        c.graph(f"graph_name_{tag}.json", cls, "accept", f"a kernel named {name!r}",
                lambda g, n=name: [nd.update(kernel_name=n) for nd in g["nodes"][:3]])
        c.trace(f"trace_name_{tag}.json.gz", cls, "accept", f"kernel events named {name!r} (and their graph nodes)",
                lambda t, n=name: _rename(t, n))
        c.bench(f"bench_name_{tag}.json", cls, "accept", f"a workload named {name!r}",
                lambda b, n=name: _first_ws(b).update(workload=n))
    c.graph("graph_name_100k.json", "long_names", "accept", "a 100,000-character kernel name",
            lambda g: g["nodes"][0].update(kernel_name="_Z" + "k" * 100_000))
    # ---- inconsistent
    c.graph("graph_one_sided_edge.json", "inconsistent", "refuse", "an edge listed only as a dependency",
            lambda g: g["nodes"][5]["dependencies"].append(0))
    c.graph("graph_swapped_lists.json", "inconsistent", "refuse", "dependencies and dependents disagree (same counts)",
            lambda g: (g["nodes"][5]["dependencies"].append(0), g["nodes"][0]["dependents"].append(6)))
    c.graph("graph_dup_edge.json", "inconsistent", "refuse", "an edge listed twice on both ends",
            lambda g: (g["nodes"][0]["dependents"].append(g["nodes"][0]["dependents"][0]),
                       g["nodes"][g["nodes"][0]["dependents"][0]]["dependencies"].append(0)))
    c.graph("graph_empty_node_type.json", "inconsistent", "refuse", "an empty node_type",
            lambda g: g["nodes"][3].update(node_type=""))
    c.graph("graph_self_loop.json", "inconsistent", "refuse", "a node that depends on itself",
            lambda g: (g["nodes"][3]["dependencies"].append(3), g["nodes"][3]["dependents"].append(3)))
    c.graph("graph_dup_tools_id.json", "inconsistent", "refuse", "two nodes with one tools id",
            lambda g: g["nodes"][3].update({k: g["nodes"][2][k] for k in ("tools_id", "graph_id", "node_id")}))
    c.graph("graph_negative_index.json", "inconsistent", "refuse", "a negative dependency",
            lambda g: g["nodes"][3]["dependencies"].append(-1))
    c.graph("graph_newer_schema.json", "inconsistent", "refuse", "a schema version from the future",
            _set(["cgtool", "schema_version"], 99))
    c.trace("trace_dup_events.json.gz", "inconsistent", "refuse", "every kernel event listed twice",
            lambda t: t["traceEvents"].extend(copy.deepcopy(_gpu(t))))
    c.trace("trace_dup_one_event.json.gz", "inconsistent", "refuse", "one kernel event listed twice",
            lambda t: t["traceEvents"].append(copy.deepcopy(_gpu(t)[7])))

    def one_corr(t: dict[str, Any]) -> None:
        for e in t["traceEvents"]:
            if isinstance(e.get("args"), dict) and "correlation" in e["args"]:
                e["args"]["correlation"] = 6
    c.trace("trace_one_correlation.json.gz", "inconsistent", "refuse", "all replays share one correlation id", one_corr)
    c.trace("kineto_one_correlation.json.gz", "inconsistent", "refuse",
            "all replays share one correlation id (no graph ids)", one_corr, base=KINETO)

    def half_ids(t: dict[str, Any]) -> None:
        for e in _gpu(t)[::2]:
            e["args"].pop("graph id", None)
            e["args"].pop("graph node id", None)
    c.trace("trace_half_graph_ids.json.gz", "inconsistent", "refuse", "half the kernels lost their graph ids", half_ids)
    c.trace("trace_negative_dur.json.gz", "inconsistent", "refuse", "a negative duration",
            lambda t: _gpu(t)[4].update(dur=-5.0))
    c.trace("trace_huge_ts.json.gz", "inconsistent", "refuse", "a timestamp of 1e308",
            lambda t: _gpu(t)[4].update(ts=1e308))
    c.bench("bench_negative.json", "inconsistent", "refuse", "a negative sample",
            lambda b: _first_ws(b)["gpu_us"].__setitem__(0, -3.0))
    c.bench("bench_zero.json", "inconsistent", "refuse", "a zero sample",
            lambda b: _first_ws(b)["gpu_us"].__setitem__(0, 0.0))
    c.bench("bench_1e308.json", "inconsistent", "refuse", "a sample of 1e308 µs",
            lambda b: _first_ws(b)["gpu_us"].__setitem__(0, 1e308))
    c.bench("bench_no_workloads.json", "inconsistent", "refuse", "a baseline with no workloads",
            _set(["workloads"], {}))
    # ---- gzip and JSON framing
    raw = gzip.decompress(TRACE.read_bytes())
    c.add("trace_truncated.json.gz", "truncated", "trace", "refuse", "a gzip stream cut in half",
          TRACE.read_bytes()[: len(TRACE.read_bytes()) // 2])
    c.add("trace_multi_member.json.gz", "gzip", "trace", "accept", "a valid trace in two gzip members",
          gzip.compress(raw[: len(raw) // 2], mtime=0) + gzip.compress(raw[len(raw) // 2:], mtime=0))
    c.add("trace_trailing_junk.json.gz", "gzip", "trace", "refuse", "a gzip stream followed by junk",
          TRACE.read_bytes() + b"junk" * 10)
    c.add("graph_truncated.json", "truncated", "graph", "refuse", "a graph export cut short",
          GRAPH.read_bytes()[:-200])
    c.add("graph_binary.json", "devices", "graph", "refuse", "random bytes",
          bytes((i * 7919 + 13) % 256 for i in range(4096)))
    c.add("graph_empty.json", "truncated", "graph", "refuse", "an empty file", b"")
    c.add("bench_truncated.json", "truncated", "bench", "refuse", "a bench file cut short",
          BENCH.read_bytes()[:100])
    # ---- phases of GPU events: none is refused, others are counted in a warning
    c.trace("trace_no_ph.json.gz", "phases", "refuse", "a kernel event without \"ph\"",
            lambda t: _gpu(t)[6].pop("ph"))
    c.trace("trace_empty_ph.json.gz", "phases", "refuse", "a kernel event with \"ph\": \"\"",
            lambda t: _gpu(t)[6].update(ph=""))
    c.trace("trace_instant_ph.json.gz", "phases", "refuse", "kernel events of phases i, B, E (not GPU work)",
            lambda t: [e.update(ph=p) for e, p in zip(_gpu(t)[3::7], "iBEiBE")])
    # ---- a node of another instantiation, and values a table would leave out
    c.graph("graph_node_other_exec.json", "graph_ids", "refuse", "a node whose graph_id is not exec_graph_id",
            lambda g: g["nodes"][4].update(graph_id=g["exec_graph_id"] + 1,
                                           tools_id=(g["exec_graph_id"] + 1) << 32 | g["nodes"][4]["node_id"]))
    c.graph("graph_all_other_exec.json", "graph_ids", "refuse", "every node's graph_id differs from exec_graph_id",
            lambda g: g.update(exec_graph_id=g["exec_graph_id"] + 1))
    c.graph("graph_timing_word.json", "meta_values", "refuse", "cgtool.timings.capture_s is a word",
            lambda g: g["cgtool"]["timings"].update(capture_s="fast"))
    c.graph("graph_timing_spaced_key.json", "meta_values", "refuse", "a timing under a key with spaces is a word",
            lambda g: g["cgtool"]["timings"].update({"instantiate s": "1 ms"}))
    c.graph("graph_check_diff_word.json", "meta_values", "refuse", "cgtool.check.max_abs_diff is a string",
            lambda g: g["cgtool"].update(check={"ok": True, "max_abs_diff": "0.5", "worst_output": "out"}))
    c.graph("graph_check_ok_word.json", "meta_values", "refuse", "cgtool.check.ok is a word",
            lambda g: g["cgtool"].update(check={"ok": "yes", "max_abs_diff": 0.0, "worst_output": "out"}))
    # ---- a field name with spaces, a byte order mark, a 401-digit number
    c.trace("trace_node_id_word.json.gz", "field_names", "refuse", "args[\"graph node id\"] is a word",
            lambda t: _gpu(t)[4]["args"].update({"graph node id": "seven"}))
    c.trace("trace_node_id_list.json.gz", "field_names", "refuse", "args[\"graph node id\"] is a list",
            lambda t: _gpu(t)[4]["args"].update({"graph node id": [1, 2]}))
    bom = b"\xef\xbb\xbf"
    c.add("graph_bom.json", "bom", "graph", "accept", "a graph export with a UTF-8 byte order mark",
          bom + GRAPH.read_bytes())
    c.add("trace_bom.json.gz", "bom", "trace", "accept", "a trace with a UTF-8 byte order mark (gzipped)",
          gzip.compress(bom + gzip.decompress(TRACE.read_bytes()), mtime=0))
    c.add("bench_bom.json", "bom", "bench", "accept", "bench results with a UTF-8 byte order mark",
          bom + BENCH.read_bytes())
    c.bench("bench_sample_10p400.json", "big_numbers", "refuse", "a sample of 10^400 µs",
            lambda b: _first_ws(b)["gpu_us"].__setitem__(0, 10**400))
    c.graph("graph_tools_id_10p400.json", "big_numbers", "refuse", "a tools_id of 10^400",
            lambda g: g["nodes"][0].update(tools_id=10**400))
    c.graph("graph_timing_10p400.json", "big_numbers", "refuse", "a capture time of 10^400 s",
            lambda g: g["cgtool"]["timings"].update(capture_s=10**400))
    c.trace("trace_stream_10p400.json.gz", "big_numbers", "refuse", "args.stream 10^400",
            lambda t: _gpu(t)[3]["args"].update(stream=10**400))
    # ---- every control character in names (shown as \xNN, each the same way)
    for tag, ch in (("bel", "\x07"), ("bs", "\x08"), ("vt", "\x0b"), ("ff", "\x0c"), ("cr", "\r"), ("del", "\x7f"),
                    ("c1", "\x9b")):
        c.graph(f"graph_name_{tag}.json", "controls", "accept", f"kernels named with {ch!r}",
                lambda g, n=f"ker{ch}nel": [nd.update(kernel_name=n) for nd in g["nodes"][:3]])
        c.trace(f"trace_name_{tag}.json.gz", "controls", "accept", f"kernel events named with {ch!r}",
                lambda t, n=f"ker{ch}nel": _rename(t, n))
    # ---- damaged rank folders
    for tag, damage in (("truncated", lambda b: b[: len(b) // 3]), ("junk", lambda b: b"\x00junk" * 20)):
        for kind, src, pat in (("trace-ranks", RANKS_TRACE, "trace.rank1.json.gz"),
                               ("graph-ranks", RANKS_GRAPH, "rank1/graph.json")):
            d = c.dest / f"ranks_{kind.split('-')[0]}_{tag}"
            for f in sorted(src.rglob("*.json*")):
                rel = f.relative_to(src)
                out = d / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                data = f.read_bytes()
                out.write_bytes(damage(data) if str(rel) == pat else data)
            c.add(d.name, "ranks", kind, "refuse", f"rank 1's file is {tag}")


def big(c: Corpus, *, bombs: bool = True) -> None:
    """Cases too big to check in: made at test time (the gzip bombs too, unless ``bombs`` is false)."""
    deep = b"[" * 100_000 + b"]" * 100_000
    c.add("deep_array.json", "nesting", "graph", "refuse", "arrays 100,000 deep", deep)
    c.add("deep_object.json", "nesting", "graph", "refuse", "objects 100,000 deep",
          b'{"a":' * 100_000 + b"1" + b"}" * 100_000)
    c.add("deep_gzip.json.gz", "nesting", "trace", "refuse", "arrays 100,000 deep, gzipped",
          gzip.compress(deep, mtime=0))
    raw = json.dumps(_trace()).encode()
    k = raw.index(b'"args": {') + len(b'"args": {')
    c.add("deep_in_args.json.gz", "nesting", "trace", "refuse", "arrays 100,000 deep in an event's args",
          gzip.compress(raw[:k] + b'"deep": ' + deep + b", " + raw[k:], mtime=0))
    k = raw.index(b'"graphs": [') + len(b'"graphs": [')
    c.add("deep_in_embedded_graph.json.gz", "nesting", "trace", "refuse", "arrays 100,000 deep in the embedded graph",
          gzip.compress(raw[:k] + deep + b", " + raw[k:], mtime=0))
    g = json.dumps(_graph()).encode()
    k = g.index(b'"cgtool": {') + len(b'"cgtool": {')
    c.add("deep_in_meta.json", "nesting", "graph", "refuse", "objects 100,000 deep in the cgtool block",
          g[:k] + b'"deep": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b", " + g[k:])
    if bombs:
        gzip_bombs(c)
    # wide graphs: 30,000 independent nodes joined at one end (fan-in), and at the other (fan-out)
    for tag, n in (("fanin", 30_000), ("fanout", 30_000)):
        nodes = []
        for i in range(n + 1):
            if tag == "fanin":
                deps, dents = ([] if i < n else list(range(n))), ([n] if i < n else [])
            else:
                deps, dents = ([] if i == 0 else [0]), (list(range(1, n + 1)) if i == 0 else [])
            nodes.append({"index": i, "node_type": "kernel", "tools_id": (1 << 32) | i, "graph_id": 1, "node_id": i,
                          "kernel_name": f"k{i % 50}", "dependencies": deps, "dependents": dents})
        c.json(f"wide_{tag}.json", "wide", "graph", "accept", f"{n:,} independent nodes joined at one end",
               {"exec_graph_id": 1, "nodes": nodes})
    n = 3000  # a chain: 4.5 million comparable pairs for the exact width
    c.json("long_chain.json", "wide", "graph", "accept", f"a chain of {n:,} nodes",
           {"exec_graph_id": 1, "nodes": [{"index": i, "node_type": "kernel", "tools_id": (1 << 32) | i, "graph_id": 1,
                                           "node_id": i, "kernel_name": "k", "dependencies": [i - 1] if i else [],
                                           "dependents": [i + 1] if i < n - 1 else []} for i in range(n)]})
    c.graph("graph_name_5mb.json", "long_names", "accept", "a 5 MB templated kernel name",
            lambda g: g["nodes"][0].update(kernel_name="_Z1fI" + "N1aIiEE" * 700_000 + "Evv"))


def gzip_bombs(c: Corpus, *, members: int = 64, member_mib: int = 160, single_mib: int = 1024) -> None:
    """Gzip bombs: ``members`` gzip members of ``member_mib`` MiB of zeros; of spaces after a JSON
    start (a graph, a trace); ``single_mib`` MiB of spaces inside a trace in one member. The
    defaults make 10 GiB (64 x 160 MiB) and 1 GiB; smaller ones still pass the default cap (64x the
    compressed size, at least 256 MiB) when they decompress to more than 256 MiB."""
    total = f"{members * member_mib / 1024:.3g} GiB" if members * member_mib >= 1024 else f"{members * member_mib} MiB"
    co = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    member = co.compress(b"\0" * (member_mib << 20)) + co.flush()
    c.add("bomb_zeros.json.gz", "bombs", "trace", "refuse", f"{total} of zeros ({members} gzip members)",
          member * members)
    co = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b" " * (1 << 24)
    single = (co.compress(b'{"traceEvents": [') + b"".join(co.compress(block) for _ in range(single_mib // 16))
              + co.flush())
    c.add("bomb_single.json.gz", "bombs", "trace", "refuse", f"{single_mib} MiB of spaces inside a trace, one gzip "
          f"member ({len(single) / 1e6:.2g} MB)", single)
    co = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    member = co.compress(b" " * (member_mib << 20)) + co.flush()
    c.add("bomb_spaces.json.gz", "bombs", "graph", "refuse", f"{total} of spaces after '{{' ({members} gzip members)",
          gzip.compress(b'{"nodes": ', mtime=0) + member * members)
    c.add("bomb_trace.json.gz", "bombs", "trace", "refuse", f"{total} of spaces inside a trace ({members} gzip members)",
          gzip.compress(b'{"traceEvents": [', mtime=0) + member * members)


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    c = Corpus(Path(argv[0]))
    small(c)
    if "--big" in argv:
        big(c)
    c.manifest()
    print(f"{len(c.cases)} cases in {c.dest}")


if __name__ == "__main__":
    main(sys.argv[1:])
