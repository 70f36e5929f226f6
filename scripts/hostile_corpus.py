"""Run the hostile-input corpus (scripts/bad_corpus.py, big cases included) class by class over
every analysis command, and count what the contract forbids.

    python3 scripts/hostile_corpus.py [--repo PATH] [--no-big] [--json OUT.json]

``--repo`` picks the cgtool to run (default: this checkout), so the same corpus measures an older
commit: ``git worktree add /tmp/base 5c256ea && python3 scripts/hostile_corpus.py --repo /tmp/base``.
Each command runs in a fresh process with a 30 s limit and is killed past 2 GiB of memory.

Counts per class: internal errors (exit 70 or any code outside 0/1/2/4 — or, for a run stopped
by a signal, other than 130 for SIGINT and 143 for SIGTERM — or a traceback), runs over 30 s or
2 GiB, silent acceptances (a case that must be refused or warned about exits 0 with no warning),
valid inputs refused, inputs overwritten (content changed, a special file replaced, or a path
created that must not be: a missing output folder, a dangling link's target), raw control
characters on stdout/stderr (any C0 but tab and newline, DEL, C1), numbers printed with 100 digits
or more, and DOT outputs that Graphviz rejects.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bad_corpus as bc  # noqa: E402

LIMIT_S = 30.0
LIMIT_RSS = 2 << 30
KEYS = ["runs", "internal", "over", "silent", "refused_valid", "overwritten", "raw_ctrl", "long_number", "bad_dot"]
#: A control character that reached the terminal: C0 but tab and newline, DEL, C1 (in UTF-8).
RAW_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")
#: A number printed whole that no reader wants: 100 digits or more.
LONG_NUMBER = re.compile(rb"\d{100,}")


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run(repo: Path, args: list[str], cwd: Path, *, as_limit: int | None = None,
        feed: tuple[Path, bytes] | None = None, send: tuple[float, int] | None = None,
        send_on: bytes = b"") -> dict[str, Any]:
    """One run of `python -m cgtool ARGS`; ``send`` = (seconds, signal): sent to the process then,
    or as soon as its stderr shows ``send_on`` (when given)."""
    env = {**os.environ, "PYTHONPATH": str(repo), "COLUMNS": "120", "PYTHONHASHSEED": "0"}
    env.pop("GITHUB_STEP_SUMMARY", None)

    def limit() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # as in a terminal (a background run ignores it)
        if as_limit:
            resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))

    writer = None
    if feed is not None:  # a FIFO input: a writer thread feeds it (and gives up when no one reads)
        def w() -> None:
            try:
                fd = os.open(feed[0], os.O_WRONLY)
                with os.fdopen(fd, "wb") as f:
                    f.write(feed[1])
            except OSError:
                pass
        writer = threading.Thread(target=w, daemon=True)
        writer.start()
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "cgtool", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=limit, start_new_session=True)
    out_chunks: list[bytes] = []
    err_chunks: list[bytes] = []

    def drain(src: Any, dst: list[bytes]) -> None:
        total = 0
        for chunk in iter(lambda: src.read1(1 << 16), b""):  # what has come, not a full 64 KiB
            if total < 4 << 20:
                dst.append(chunk)
            total += len(chunk)

    ts = [threading.Thread(target=drain, args=(p.stdout, out_chunks)), threading.Thread(target=drain, args=(p.stderr, err_chunks))]
    for t in ts:
        t.start()
    killed = ""
    peak = 0
    while p.poll() is None:
        if send is not None and (time.monotonic() - t0 > send[0] or send_on and send_on in b"".join(err_chunks)):
            os.kill(p.pid, send[1])
            send = None
        peak = max(peak, _rss(p.pid))
        if peak > LIMIT_RSS:
            killed = "memory"
        elif time.monotonic() - t0 > LIMIT_S:
            killed = "time"
        if killed:
            os.killpg(p.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    p.wait()
    for t in ts:
        t.join()
    if writer is not None and writer.is_alive():  # unblock a writer nobody read from
        try:
            os.close(os.open(feed[0], os.O_RDONLY | os.O_NONBLOCK))  # type: ignore[index]
        except OSError:
            pass
    return {"args": args, "rc": p.returncode, "secs": round(time.monotonic() - t0, 2), "rss": peak,
            "killed": killed, "stdout": b"".join(out_chunks), "stderr": b"".join(err_chunks)}


def digest(paths: list[Path]) -> dict[str, str]:
    out = {}
    for p in paths:
        for f in ([p] if not p.is_dir() else sorted(x for x in p.rglob("*") if x.is_file())):
            try:
                st = os.stat(f)
                if not stat.S_ISREG(st.st_mode):
                    out[str(f)] = f"special:{stat.S_IFMT(st.st_mode)}"
                    continue
                out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
            except OSError as e:
                out[str(f)] = f"error:{e.errno}"
    return out


def commands(kind: str, x: Path, ref: dict[str, Path], tmp: Path, expect: str = "") -> list[list[str]]:
    if kind == "graph":
        # a valid but renamed graph no longer matches the reference trace: deps --graph only for broken ones
        return [["topo", str(x)], ["dot", str(x)], ["diff", str(x), str(ref["graph"])]] + (
            [["deps", str(ref["trace"]), "--graph", str(x)]] if expect != "accept" else [])
    if kind == "kineto":
        return [["deps", str(x), "--graph", str(bc.KINETO_GRAPH)]]
    if kind == "trace":
        # a valid but renamed trace no longer matches the reference graph: --trace only for broken ones
        return [["deps", str(x)], ["deps", str(x), "--annotate", str(tmp / "annotated.json"), "--force"]] + (
            [["topo", str(ref["graph"]), "--trace", str(x)], ["dot", str(ref["graph"]), "--trace", str(x)]]
            if expect != "accept" else [])
    if kind == "bench":
        return [["bench", "--compare", str(x), str(ref["bench"])], ["bench", "--compare", str(ref["bench"]), str(x)]]
    if kind == "trace-ranks":
        return [["deps", str(x)]]
    if kind == "graph-ranks":
        return [["topo", str(x)]]
    raise ValueError(kind)


def special_cases(corpus: Path, ref: dict[str, Path]) -> list[dict[str, Any]]:
    """Devices, FIFOs and outputs: (class, expect, why, args, inputs to guard, feed)."""
    g, t, b = str(ref["graph"]), str(ref["trace"]), str(ref["bench"])
    cases: list[dict[str, Any]] = []
    for dev in ("/dev/urandom", "/dev/zero", "/dev/null"):
        for args in (["topo", dev], ["dot", dev], ["diff", dev, g], ["deps", dev], ["bench", "--compare", dev, b]):
            cases.append({"class": "devices", "expect": "refuse", "why": f"{dev} as input", "args": args})
    fifo = corpus / "in.fifo"
    for name, data in (("random bytes", bytes(range(256)) * 64), ("a valid graph", ref["graph"].read_bytes())):
        cases.append({"class": "fifo", "expect": "refuse" if name == "random bytes" else "accept",
                      "why": f"a FIFO carrying {name}", "args": ["topo", str(fifo)], "feed": (fifo, data)})
    cg = corpus / "copy_graph.json"
    ct = corpus / "copy_trace.json.gz"
    cb = corpus / "copy_bench.json"
    typo = corpus / "typo_dir"
    dangling = corpus / "dangling.json"
    outs = [
        (["topo", str(cg), "--json", str(cg), "--force"], [cg]),
        (["dot", str(cg), "-o", str(cg), "--force"], [cg]),
        (["deps", str(ct), "--json", str(ct), "--force"], [ct]),
        (["deps", str(ct), "--annotate", str(ct), "--force"], [ct]),
        (["diff", str(cg), g, "--json", str(cg), "--force"], [cg]),
        (["bench", "--compare", str(cb), b, "--json", str(cb), "--force"], [cb]),
        (["topo", g, "--json", str(corpus / "copy_graph.json" / "x.json")], [cg]),
        (["topo", g, "--json", "/proc/cgtool-no-such-dir/x.json"], []),
        (["topo", g, "--json", str(typo / "x.json")], []),
        (["dot", g, "-o", str(typo / "sub" / "g.dot")], []),
        (["deps", t, "--json", str(dangling)], []),
        (["dot", g, "-o", str(corpus / "r.dot"), "--render", "svg"], [corpus / "r.svg"]),
    ]
    for args, guard in outs:
        cases.append({"class": "outputs", "expect": "refuse", "why": "output " + " ".join(args[-3:]), "args": args,
                      "guard": guard, "must_not_exist": ([corpus / "r.dot"] if "--render" in args else [])
                      + [typo, corpus / "nowhere"]})
    cases.append({"class": "outputs", "expect": "accept", "why": "--json /dev/null --force (written through)",
                  "args": ["topo", g, "--json", "/dev/null", "--force"], "guard": [Path("/dev/null")]})
    cases.append({"class": "outputs", "expect": "accept", "why": "report -o - (the page on standard output)",
                  "args": ["report", g, "-o", "-"], "guard": []})
    # Ctrl-C and SIGTERM while blocked: a FIFO input without a writer, a FIFO output without a reader
    lone_in, lone_out = corpus / "lone_in.fifo", corpus / "lone_out.fifo"
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        for args, what in ((["deps", str(lone_in)], "an input FIFO without a writer"),
                           (["topo", g, "--json", str(lone_out), "--force"], "an output FIFO without a reader")):
            # sent once cgtool says it is waiting (after half a second blocked in open), else after 5 s
            cases.append({"class": "signals", "expect": f"exit {code}", "why": f"{sig.name} on {what}", "args": args,
                          "send": (5.0, sig), "send_on": b"waiting for a ", "guard": []})
    return cases


def big_special_cases(corpus: Path) -> list[dict[str, Any]]:
    """A gzip bomb with the cap raised past memory: the memory bound stops it (under `ulimit -v`
    3 GiB, so that the bound is below the runner's 2 GiB RSS limit)."""
    return [{"class": "bombs_raised", "expect": "refuse", "why": f"{name} with --max-bytes 20000000000",
             "args": [cmd, str(corpus / name), "--max-bytes", "20000000000"], "as_limit": 3 << 30, "guard": []}
            for name, cmd in (("bomb_spaces.json.gz", "topo"), ("bomb_zeros.json.gz", "deps"))]


def prepare_special(corpus: Path) -> None:
    """What the special cases read, guard or must not create, made in ``corpus``: copies of the
    reference files, a stale SVG, the FIFOs and a dangling link."""
    shutil.copy(bc.GRAPH, corpus / "copy_graph.json")
    shutil.copy(bc.TRACE, corpus / "copy_trace.json.gz")
    shutil.copy(bc.BENCH, corpus / "copy_bench.json")
    (corpus / "r.svg").write_text("<svg/>")
    for name in ("in.fifo", "lone_in.fifo", "lone_out.fifo"):
        os.mkfifo(corpus / name)
    (corpus / "dangling.json").symlink_to(corpus / "nowhere" / "x.json")


def check(j: dict[str, Any], ref: dict[str, Path], corpus: Path,
          runner: Callable[[dict[str, Any]], dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """Run job ``j`` through ``runner`` (a dict as ``run`` returns) and list what the contract
    forbids that the run did (names from KEYS); the guarded copies are restored afterwards."""
    guard = [*j.get("guard", []), ref["graph"], bc.GRAPH, bc.TRACE, bc.BENCH]
    before = digest(guard)
    r = runner(j)
    after = digest(guard)
    err = r["stderr"].decode(errors="replace")
    bad: list[str] = []
    codes = (int(j["expect"].split()[1]),) if j["expect"].startswith("exit ") else (0, 1, 2, 4)
    if r["killed"]:
        bad.append("over")
    elif r["rc"] not in codes or "Traceback" in err or "internal error" in err:
        bad.append("internal")
    elif j["expect"] == "refuse" and r["rc"] == 0 and "warning" not in err.lower():
        bad.append("silent")
    elif j["expect"] == "accept" and r["rc"] not in (0, 1):
        bad.append("refused_valid")
    if before != after or any(p.exists() for p in j.get("must_not_exist", [])):
        bad.append("overwritten")
    for p in j.get("must_not_exist", []):
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    if RAW_CONTROL.search(r["stdout"] + r["stderr"]):
        bad.append("raw_ctrl")
    if LONG_NUMBER.search(r["stdout"] + r["stderr"]):
        bad.append("long_number")
    if j["args"][0] == "dot" and r["rc"] == 0 and "-o" not in j["args"] and shutil.which("nop"):
        # graphviz's nop parses the DOT without a layout (a NUL or a string over 16 kB fails it)
        chk = subprocess.run(["nop"], input=r["stdout"], capture_output=True, timeout=120)
        if chk.returncode != 0:
            bad.append("bad_dot")
    # restore guarded copies that a run may have overwritten, so that later runs see the originals
    for src, dst in ((bc.GRAPH, corpus / "copy_graph.json"), (bc.TRACE, corpus / "copy_trace.json.gz"),
                     (bc.BENCH, corpus / "copy_bench.json")):
        if dst.is_file() and dst.read_bytes() != src.read_bytes():
            shutil.copy(src, dst)
    if (corpus / "copy_graph.json").is_dir():
        shutil.rmtree(corpus / "copy_graph.json")
        shutil.copy(bc.GRAPH, corpus / "copy_graph.json")
    return r, bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, default=bc.ROOT)
    ap.add_argument("--no-big", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", default="", help="comma list of classes")
    a = ap.parse_args()
    repo = a.repo.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="hostile-"))
    corpus = tmp / "corpus"
    c = bc.Corpus(corpus)
    bc.small(c)
    if not a.no_big:
        bc.big(c)
    ref_graph = corpus / "ref_graph.json"
    ref_graph.write_text(json.dumps(bc._trace()["cgtool"]["graphs"][0]))
    ref = {"graph": ref_graph, "trace": bc.TRACE, "bench": bc.BENCH}
    prepare_special(corpus)
    work = tmp / "work"
    work.mkdir()
    only = set(filter(None, a.only.split(",")))
    jobs: list[dict[str, Any]] = []
    for case in c.cases:
        x = corpus / case["name"]
        for args in commands(case["kind"], x, ref, work, case["expect"]):
            jobs.append({"class": case["class"], "expect": case["expect"], "why": case["why"], "args": args,
                         "guard": [x]})
    jobs += special_cases(corpus, ref)
    if not a.no_big:
        jobs += big_special_cases(corpus)
    good = [["topo", str(bc.GRAPH)], ["dot", str(bc.GRAPH)], ["diff", str(bc.GRAPH), str(ref_graph)],
            ["deps", str(bc.TRACE)], ["deps", str(bc.KINETO), "--graph", str(bc.KINETO_GRAPH)],
            ["topo", str(bc.RANKS_GRAPH)], ["deps", str(bc.RANKS_TRACE)], ["bench", "--compare", str(bc.BENCH), str(bc.BENCH)]]
    for args in good:
        jobs.append({"class": "ulimit_4gib", "expect": "accept", "why": "a valid input under ulimit -v 4194304",
                     "args": args, "as_limit": 4 << 30, "guard": []})
    if only:
        jobs = [j for j in jobs if j["class"] in only]
    rows: dict[str, dict[str, int]] = {}
    findings: list[dict[str, Any]] = []
    t_start = time.monotonic()
    for j in jobs:
        r, bad = check(j, ref, corpus, lambda j: run(repo, j["args"], work, as_limit=j.get("as_limit"), feed=j.get("feed"),
                                                     send=j.get("send"), send_on=j.get("send_on", b"")))
        row = rows.setdefault(j["class"], {k: 0 for k in KEYS})
        row["runs"] += 1
        for k in bad:
            row[k] += 1
        if bad:
            findings.append({"class": j["class"], "why": j["why"], "args": j["args"], "rc": r["rc"], "secs": r["secs"],
                             "rss_mb": r["rss"] >> 20, "found": bad,
                             "stderr": r["stderr"].decode(errors="replace")[-400:]})
    keys = KEYS
    print(f"repo {repo} ({_rev(repo)}), {len(jobs)} runs in {time.monotonic() - t_start:.0f} s")
    print(f"{'class':<16}" + "".join(f"{k:>14}" for k in keys))
    tot = {k: 0 for k in keys}
    for cls in sorted(rows):
        print(f"{cls:<16}" + "".join(f"{rows[cls][k]:>14}" for k in keys))
        for k in keys:
            tot[k] += rows[cls][k]
    print(f"{'total':<16}" + "".join(f"{tot[k]:>14}" for k in keys))
    if a.json:
        a.json.write_text(json.dumps({"repo": str(repo), "rows": rows, "total": tot, "findings": findings}, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)


def _rev(repo: Path) -> str:
    r = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


if __name__ == "__main__":
    main()
