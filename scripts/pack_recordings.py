"""Check recordings made by scripts/record_programs.sh against the programs' own counts, and copy them
into tests/data/record_<name>/, gzipping the JSON.

    python scripts/pack_recordings.py OUTDIR [DATA]        # check, then pack into DATA (tests/data)
    python scripts/pack_recordings.py --check OUTDIR       # check only (exit 1 when one does not match)

Per program: the recording's files (the tree's index, each process's folder: index, graphs, trace) as
.json.gz, and the run's stdout.txt, stderr.txt (last 60 lines) and exit_code.txt. The check reads
the RESULT lines every process of a program printed (tests/programs/_graphcount.py: pid, graphs,
replays; the last line of a pid is its total; the older programs' own formats: their replays per
graph, in capture order, one process a line) and compares each with that process's recording, and
the cases' own facts (the killed worker, the forked child, the profiler, the compiled code's skip,
cudagraph trees' capture site and shapes, the model attribution).
Reads JSON only; imports no cgtool.
"""
from __future__ import annotations

import gzip
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

PROGRAMS = Path(__file__).resolve().parents[1] / "tests" / "programs"


def _json(p: Path) -> Any:
    raw = (p if p.exists() else p.with_name(p.name + ".gz")).read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _result_lines(stdout: Path) -> list[dict[str, Any]]:
    """Every ``RESULT {json}`` the program's processes printed, in order (lines may interleave)."""
    if not stdout.exists():
        return []
    text = stdout.read_text(errors="replace")
    dec = json.JSONDecoder()
    out = []
    for m in re.finditer(r"RESULT ", text):  # processes share stdout: lines may interleave
        try:
            r, _ = dec.raw_decode(text, m.end())
        except ValueError:
            continue
        if isinstance(r, dict):
            out.append(r)
    return out


def _results(lines: list[dict[str, Any]]) -> dict[tuple[int, int], dict[str, Any]]:
    """The counts of the programs that use _graphcount: per (pid, image), the last line wins."""
    return {(int(r["pid"]), int(r.get("image", 0))): r for r in lines if "pid" in r and "graphs" in r}


def _legacy_counts(r: dict[str, Any]) -> list[int] | None:
    """Replays per graph, in capture order, from the RESULT of a program that prints its own
    format (one process each): crash_after_two.py's ``replays`` list; server_runner.py's replays
    per batch size, captured in ``batch_sizes`` order; train_graphed.py's ``steps`` (its forward and
    backward graph are each replayed once per step). None for any other line."""
    reps = r.get("replays")
    if isinstance(reps, list):
        return [int(x) for x in reps]
    if isinstance(reps, dict) and isinstance(r.get("batch_sizes"), list):
        return [int(reps[str(bs)]) for bs in r["batch_sizes"]]
    if isinstance(r.get("steps"), int) and "losses" in r:
        return [r["steps"], r["steps"]]
    return None


def _marked(program: str, mark: str) -> int:
    """The line of ``# MARK`` in a program."""
    lines = (PROGRAMS / program).read_text().splitlines()
    return next(i + 1 for i, t in enumerate(lines) if f"# {mark}" in t)


def _defined(program: str, function: str) -> int:
    """The ``def`` line of a function of a program (a compiled function's frame reports it)."""
    lines = (PROGRAMS / program).read_text().splitlines()
    return next(i + 1 for i, t in enumerate(lines) if t.lstrip().startswith(f"def {function}("))


def check(rec: Path, run: Path) -> list[str]:
    """What does not match, in words (empty: the recording says what the program did)."""
    name = rec.name[len("record_"):]
    if not (rec / "index.json").exists() and not (rec / "index.json.gz").exists():
        return [] if name in ("missing", "busy") else [f"{name}: no index.json"]
    tree = _json(rec / "index.json")
    if "processes" not in tree:
        return []  # an older layout (one process): checked by tests/test_record_recordings.py
    bad: list[str] = []
    stdout = run / "stdout.txt" if (run / "stdout.txt").exists() else rec / "stdout.txt"
    lines = _result_lines(stdout)
    res = _results(lines)
    folders: dict[tuple[int, int], str] = {}
    for p in tree["processes"]:
        if p["followed"]:
            pid, _, n = p["folder"][1:].partition("-x")
            folders[(int(pid), int(n or 0))] = p["folder"]
    idx = {f: _json(rec / f / "index.json") for f in folders.values()}
    got = {k: ([g["replays"] for g in idx[f]["graphs"]]) for k, f in folders.items()}
    for key, r in res.items():
        if key not in folders:
            bad.append(f"{name}: process {key[0]} (image {key[1]}) printed a RESULT but has no recording")
            continue
        if name == "profiler":
            continue  # below: the program's profiler took CUPTI for a while
        if got[key] != list(r["replays"]):
            bad.append(f"{name}: process {key[0]} image {key[1]}: recorded replays {got[key]}, "
                       f"the program counted {list(r['replays'])}")
    # programs that print their own format (no pid): each line is one process's graphs, in capture order
    legacy = [c for c in (_legacy_counts(r) for r in lines if "pid" not in r) if c is not None]
    rest = sorted(reps for key, reps in got.items() if key not in res and reps)
    if legacy and rest != sorted(legacy):
        bad.append(f"{name}: recorded replays {rest} in the processes without a pid RESULT, "
                   f"the program counted {sorted(legacy)}")
    elif not legacy and rest and name != "compiled":
        bad.append(f"{name}: process(es) recorded graphs {rest} but printed no RESULT with their counts")
    code_file = run / "exit_code.txt" if (run / "exit_code.txt").exists() else rec / "exit_code.txt"
    code = int(code_file.read_text()) if code_file.exists() else None
    if code is not None and tree.get("exit_code") != code:
        bad.append(f"{name}: cgtool record exited {code}, the tree says {tree.get('exit_code')}")
    procs = tree["processes"]
    if name == "compiled":
        bad += _check_compiled(lines, idx, folders, got, res)
    if name == "killed":
        w = [p for p in procs if p["followed"] and p["graphs"]]
        if len(w) != 1 or w[0]["finished"] or w[0]["exit_code"] != 137 or code != 7:
            bad.append(f"{name}: the killed worker: {w}, exit {code}")
    if name == "chain":
        forked = [p for p in procs if p.get("started_as") == "fork"]
        if len(forked) != 1 or (forked[0].get("cuda") or {}).get("usable") is not False:
            bad.append(f"{name}: the fork after CUDA init: {forked}")
        if not any(not p["followed"] and p["argv"] and Path(p["argv"][0]).name in ("nvidia-smi", "sh") and p["reason"]
                   for p in procs):
            bad.append(f"{name}: the non-Python child (nvidia-smi, else sh) is not listed")
    if name == "torchrun":
        ranks = sorted(p["rank"] for p in procs if p["followed"] and p["graphs"])
        if ranks != [0, 1]:
            bad.append(f"{name}: ranks with graphs {ranks}")
    if name == "spawn_thread":
        if not any(p.get("started_as") == "spawn" and p["graphs"] == 2 for p in procs):
            bad.append(f"{name}: no spawn process with 2 graphs")
    if name == "trees":
        bad += _check_trees(lines, idx, folders, got, rec)
    if name == "profiler":
        bad += _check_profiler(res, idx, folders)
    if name == "hf_llama":
        found = False
        for k, f in folders.items():
            for g in idx[f]["graphs"]:
                doc = _json(rec / f / g["file"])
                for e in doc["cgtool"]["nodes"]:
                    for m in (e.get("source") or {}).get("model") or []:
                        path = m.get("module_path") or ""
                        if re.fullmatch(r"model\.layers\.\d+\.self_attn\.[qkvo]_proj", path) and \
                                str(m.get("file", "")).endswith("modeling_llama.py"):
                            try:
                                text = Path(m["file"]).read_text().splitlines()[int(m["line"]) - 1]
                            except OSError:  # checked on another machine: the file is the GPU machine's
                                text = path.rsplit(".", 1)[1]
                            except IndexError:
                                text = ""
                            found = found or path.rsplit(".", 1)[1] in text
        if not found:
            bad.append(f"{name}: no node attributed to a model.layers.N.self_attn.*_proj line of modeling_llama.py")
    return bad


def _only(folders: dict[tuple[int, int], str], got: dict[tuple[int, int], list[int]]) -> str | None:
    with_graphs = [f for k, f in folders.items() if got[k]]
    return with_graphs[0] if len(with_graphs) == 1 else None


def _check_compiled(lines: list[dict[str, Any]], idx: dict[str, Any], folders: dict[tuple[int, int], str],
                    got: dict[tuple[int, int], list[int]], res: dict[tuple[int, int], Any]) -> list[str]:
    """compiled_model.py: with its pid RESULT (tests/programs/_graphcount.py) the replays were
    compared above. Its own line gives the shapes and steps: CUDA graph trees record one graph per
    shape at the model's forward, run a shape's first call eagerly (warm-up) and replay the graph for
    every later call, the recording call included; and torch skips the input-mutating function."""
    own = next((r for r in lines if "shapes" in r and "calls" in r), None)
    f = _only(folders, got)
    if own is None or f is None:
        return [f"compiled: RESULT {own}, processes with graphs: {[k for k in folders if got[k]]}"]
    bad = []
    fwd = _defined("compiled_model.py", "forward")
    model = [g for g in idx[f]["graphs"] if g["nodes"] > 1 and str(g["captured_at"]).endswith(f"compiled_model.py:{fwd}")]
    want = [steps - 1 for _, steps in own["shapes"]]
    if not res and [g["replays"] for g in model] != want:
        bad.append(f"compiled: the model's graphs replayed {[g['replays'] for g in model]}, its calls say {want}")
    skips = (idx[f].get("compile") or {}).get("cudagraph_skips") or []
    line = _defined("compiled_model.py", "mutates_input")
    if not any("mutated inputs" in s["reason"] and (s.get("site") or {}).get("line") == line for s in skips):
        bad.append(f"compiled: no cudagraph skip for the mutated input at line {line}: {skips}")
    return bad


def _check_trees(lines: list[dict[str, Any]], idx: dict[str, Any], folders: dict[tuple[int, int], str],
                 got: dict[tuple[int, int], list[int]], rec: Path) -> list[str]:
    """cudagraph_trees_reshape.py: every graph that served replays was captured at the compiled
    function (its ``def`` line: the innermost line of the program's own code when cudagraph trees
    began the capture), with the program's call into it (LINE_CALL) next on the captured stack; the
    input shapes they were recorded for cover every batch size the program used."""
    f = _only(folders, got)
    if f is None:
        return [f"trees: processes with graphs {[k for k in folders if got[k]]}"]
    bad = []
    fwd, call = _defined("cudagraph_trees_reshape.py", "forward"), _marked("cudagraph_trees_reshape.py", "LINE_CALL")
    gs = idx[f]["graphs"]
    served = [g for g in gs if g["replays"]]
    at = {g["captured_at"] for g in served}
    if not served or not all(a and a.endswith(f"cudagraph_trees_reshape.py:{fwd}") for a in at):
        bad.append(f"trees: captured at {at}, not line {fwd} (the compiled forward)")
    for g in served:
        stack = _json(rec / f / g["file"])["cgtool"]["record"]["captured_at"].get("stack") or []
        if not any(str(s).split(" ")[0].endswith(f"cudagraph_trees_reshape.py:{call}") for s in stack):
            bad.append(f"trees: {g['label']}: the call at line {call} is not on the captured stack {stack}")
    own = next((r for r in lines if "distinct" in r), {})
    batches = {i[0] for g in gs for i in ((g.get("capture_inputs") or {}).get("inputs") or [])
               if isinstance(i, list) and i}
    if not set(own.get("distinct") or [None]) <= batches:
        bad.append(f"trees: batch sizes in the capture inputs {sorted(batches)}, the program used "
                   f"{own.get('distinct')}: {[g.get('capture_inputs') for g in gs]}")
    return bad


def _check_profiler(res: dict[tuple[int, int], Any], idx: dict[str, Any],
                    folders: dict[tuple[int, int], str]) -> list[str]:
    """own_profiler.py: graph A's replays before the program's profiler started are recorded, as a
    lower bound (replays_complete False: the one under the profiler is not seen); graph B (made
    under the profiler) is not; graph C is, with all its replays, if the recording resumed."""
    keys = [k for k in res if k in folders]
    if len(keys) != 1:
        return [f"profiler: RESULT lines {list(res)} for the recorded processes {list(folders)}"]
    r, ix = res[keys[0]], idx[folders[keys[0]]]
    bad = []
    if not r.get("profiler_gpu_events"):
        bad.append("profiler: the program's own profiler saw no GPU event")
    if not ix.get("suspended"):
        bad.append("profiler: the recording does not say it was suspended")
        return bad
    gs = ix["graphs"]
    before = (r.get("before_profiler") or [None])[0]
    if not gs or gs[0]["replays"] != before or gs[0].get("replays_complete", True):
        bad.append(f"profiler: graph A recorded {gs[0]['replays'] if gs else None} replays "
                   f"(complete: {gs[0].get('replays_complete') if gs else None}); the program replayed it "
                   f"{before} times before its profiler, and more under it")
    resumed = ix["suspended"][-1].get("resumed_at_s") is not None
    want = [before, r["replays"][2]] if resumed else [before]
    if [g["replays"] for g in gs] != want:
        bad.append(f"profiler: recorded replays {[g['replays'] for g in gs]}, expected {want} (resumed: {resumed})")
    return bad


def pack(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    if src.exists():
        for f in sorted(src.rglob("*")):
            if f.is_dir():
                continue
            rel = f.relative_to(src)
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            if f.suffix == ".json":
                (dst / rel).with_name(rel.name + ".gz").write_bytes(gzip.compress(f.read_bytes(), 9, mtime=0))
            else:
                shutil.copy(f, dst / rel)
    run = src.with_name(src.name + ".run")
    for name in ("stdout.txt", "exit_code.txt"):
        if (run / name).exists():
            shutil.copy(run / name, dst / name)
    if (run / "stderr.txt").exists():
        lines = (run / "stderr.txt").read_text(errors="replace").splitlines()[-60:]
        (dst / "stderr.txt").write_text("\n".join(lines) + "\n")


def main() -> None:
    args = sys.argv[1:]
    only_check = args[:1] == ["--check"]
    if only_check:
        args = args[1:]
    out = Path(args[0])
    data = Path(args[1]) if len(args) > 1 else Path(__file__).resolve().parents[1] / "tests" / "data"
    failed = False
    for src in sorted(out.glob("record_*")):
        if src.name.endswith(".run"):
            continue
        try:
            bad = check(src, src.with_name(src.name + ".run"))
        except Exception as e:  # a recording too broken to check is a failure of the check
            bad = [f"{src.name}: could not be checked ({type(e).__name__}: {e})"]
        print(f"CHECK {src.name[len('record_'):]}: " + ("OK" if not bad else "FAIL\n  " + "\n  ".join(bad)))
        failed = failed or bool(bad)
    if only_check:
        sys.exit(1 if failed else 0)
    for src in sorted(out.glob("record_*")):
        if not src.name.endswith(".run"):
            pack(src, data / src.name)
    for run in sorted(out.glob("record_*.run")):
        name = run.name[: -len(".run")]
        if not (out / name).exists():
            pack(out / name, data / name)
    total = sum(f.stat().st_size for f in data.glob("record_*/**/*") if f.is_file())
    print(f"packed into {data}: {total / 1e6:.2f} MB")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
