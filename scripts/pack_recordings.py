"""Check recordings made by scripts/record_programs.sh against the programs' own counts, and copy them
into tests/data/record_<name>/, gzipping the JSON.

    python scripts/pack_recordings.py OUTDIR [DATA]        # check, then pack into DATA (tests/data)
    python scripts/pack_recordings.py --check OUTDIR       # check only (exit 1 when one does not match)

Per program: the recording's files (the tree's index, each process's folder: index, graphs, trace) as
.json.gz, and the run's stdout.txt, stderr.txt (last 60 lines) and exit_code.txt. The check reads
the RESULT lines every process of a program printed (tests/programs/_graphcount.py: pid, graphs,
replays; the last line of a pid is its total) and compares each with that process's recording, and
the cases' own facts (the killed worker, the forked child, the profiler, the model attribution).
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


def _results(stdout: Path) -> dict[tuple[int, int], dict[str, Any]]:
    out: dict[tuple[int, int], dict[str, Any]] = {}
    if not stdout.exists():
        return out
    text = stdout.read_text(errors="replace")
    dec = json.JSONDecoder()
    for m in re.finditer(r"RESULT ", text):  # processes share stdout: lines may interleave
        try:
            r, _ = dec.raw_decode(text, m.end())
        except ValueError:
            continue
        if isinstance(r, dict) and "pid" in r and "graphs" in r:
            out[(int(r["pid"]), int(r.get("image", 0)))] = r
    return out


def _marked(program: str, mark: str) -> int:
    lines = (PROGRAMS / program).read_text().splitlines()
    return next(i + 1 for i, t in enumerate(lines) if f"# {mark}" in t)


def check(rec: Path, run: Path) -> list[str]:
    """What does not match, in words (empty: the recording says what the program did)."""
    name = rec.name[len("record_"):]
    if not (rec / "index.json").exists() and not (rec / "index.json.gz").exists():
        return [] if name in ("missing", "busy") else [f"{name}: no index.json"]
    tree = _json(rec / "index.json")
    if "processes" not in tree:
        return []  # an older layout (one process): checked by tests/test_record_recordings.py
    bad: list[str] = []
    res = _results(run / "stdout.txt" if (run / "stdout.txt").exists() else rec / "stdout.txt")
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
        want = list(r["replays"])
        if name == "profiler":
            continue  # below
        if got[key] != want:
            bad.append(f"{name}: process {key[0]} image {key[1]}: recorded replays {got[key]}, the program counted {want}")
    for key, reps in got.items():
        if key not in res and reps:
            bad.append(f"{name}: process {key[0]} recorded {len(reps)} graph(s) but printed no RESULT")
    code = int((run / "exit_code.txt").read_text()) if (run / "exit_code.txt").exists() else None
    if code is not None and tree.get("exit_code") != code:
        bad.append(f"{name}: cgtool record exited {code}, the tree says {tree.get('exit_code')}")
    procs = tree["processes"]
    if name == "killed":
        w = [p for p in procs if p["followed"] and p["graphs"]]
        if len(w) != 1 or w[0]["finished"] or w[0]["exit_code"] != 137 or code != 7:
            bad.append(f"{name}: the killed worker: {w}, exit {code}")
    if name == "chain":
        forked = [p for p in procs if p.get("started_as") == "fork"]
        if len(forked) != 1 or (forked[0].get("cuda") or {}).get("usable") is not False:
            bad.append(f"{name}: the fork after CUDA init: {forked}")
        if not any(not p["followed"] and "not a Python program" in (p["reason"] or "") for p in procs):
            bad.append(f"{name}: the non-Python child is not listed")
    if name == "torchrun":
        ranks = sorted(p["rank"] for p in procs if p["followed"] and p["graphs"])
        if ranks != [0, 1]:
            bad.append(f"{name}: ranks with graphs {ranks}")
    if name == "spawn_thread":
        if not any(p.get("started_as") == "spawn" and p["graphs"] == 2 for p in procs):
            bad.append(f"{name}: no spawn process with 2 graphs")
    if name == "trees":
        line = _marked("cudagraph_trees_reshape.py", "LINE_CALL")
        (f,) = [f for k, f in folders.items() if got[k]]
        gs = idx[f]["graphs"]
        at = {g["captured_at"] for g in gs if g["replays"]}
        if not all(a and a.endswith(f"cudagraph_trees_reshape.py:{line}") for a in at):
            bad.append(f"{name}: captured at {at}, not line {line}")
        inputs = [g.get("capture_inputs") for g in gs if g.get("capture_inputs")]
        if len(inputs) < 3:
            bad.append(f"{name}: capture inputs of {len(inputs)} graphs (3 shapes re-recorded)")
    if name == "profiler":
        (key,) = [k for k in res if k in folders]
        r, ix = res[key], idx[folders[key]]
        if not r.get("profiler_gpu_events"):
            bad.append(f"{name}: the program's own profiler saw no GPU event")
        if not ix.get("suspended"):
            bad.append(f"{name}: the recording does not say it was suspended")
        if not ix["graphs"] or ix["graphs"][0]["replays"] != 3 or ix["graphs"][0].get("replays_complete", True):
            bad.append(f"{name}: graph A: {ix['graphs'][:1]}")
        resumed = ix["suspended"] and ix["suspended"][-1].get("resumed_at_s") is not None
        want_graphs = 2 if resumed else 1
        if len(ix["graphs"]) != want_graphs:
            bad.append(f"{name}: {len(ix['graphs'])} graphs recorded, {want_graphs} expected (resumed: {resumed})")
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
                            except (OSError, IndexError):
                                text = ""
                            found = found or path.rsplit(".", 1)[1] in text
        if not found:
            bad.append(f"{name}: no node attributed to a model.layers.N.self_attn.*_proj line of modeling_llama.py")
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
