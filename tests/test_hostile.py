"""Hostile input. The standing corpus in tests/data/bad (made by scripts/bad_corpus.py
from the real recordings), class by class over every analysis command; the big cases (bombs,
nesting, wide graphs) made here at test time; devices, FIFOs, outputs, address-space limits.

The contract: exit code 0, 1, 2 or 4; no traceback; a refusal is one paragraph on stderr; a
self-contradicting input is refused or warned about; nothing but the output is written; no raw
control character reaches the terminal; no number is printed with hundreds of digits.

The special cases of ``scripts/hostile_corpus.py`` (outputs, signals) are judged by the script's
own check (``test_the_special_cases_keep_the_contract``)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import stat
import subprocess
import sys
import threading
import zlib
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BAD = Path(__file__).parent / "data" / "bad"
sys.path.insert(0, str(ROOT / "scripts"))
import bad_corpus as bc  # noqa: E402
import hostile_corpus as hc  # noqa: E402

MANIFEST = json.loads((BAD / "MANIFEST.json").read_text())
REF_GRAPH_DOC = bc._trace()["cgtool"]["graphs"][0]
#: Control characters that must never reach the terminal raw: C0 but tab and newline, DEL, C1.
CONTROL = tuple(chr(c) for c in [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)])


def _hash(p: Path) -> str:
    if p.is_dir():
        return hashlib.sha256(b"".join(_hash(x).encode() for x in sorted(p.rglob("*")) if x.is_file())).hexdigest()
    data = p.read_bytes()
    if data[:2] == b"\x1f\x8b" and p.name.endswith(".gz"):
        # zlib builds differ between Pythons (3.10 vs 3.13): compare what a gzip file holds, member
        # by member, not its compressed bytes. Damaged gzip files (truncated, junk) stay raw.
        try:
            data = b"".join(_members(data))
        except (OSError, EOFError, zlib.error):
            pass
    return hashlib.sha256(data).hexdigest()


def _members(data: bytes) -> list[bytes]:
    out = []
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out.append(b"member:" + d.decompress(data) + d.flush())
        if not d.eof:
            raise EOFError("truncated")
        data = d.unused_data
    return out


def check_contract(rc: int, out: str, err: str, expect: str = "any") -> None:
    """The contract every run must keep (independent of what the input is)."""
    assert rc in (0, 1, 2, 4), (rc, err)
    assert "Traceback" not in err and "internal error" not in err, err
    for ch in CONTROL:
        assert ch not in out and ch not in err, (ch, out[-300:], err[-300:])
    assert not hc.LONG_NUMBER.search((out + err).encode()), "a number printed with 100 digits or more"
    if rc in (2, 4):
        paras = [p for p in err.strip().split("\n") if p.strip()]
        assert paras and paras[-1].startswith("cgtool: ") and "warning" not in paras[-1][:17], err
    if expect == "refuse":
        assert rc in (2, 4) or "warning" in err.lower(), f"accepted silently (exit {rc}): {out[-300:]}"
    elif expect == "accept":
        assert rc in (0, 1), err


@pytest.fixture(scope="module")
def ref_graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("ref") / "ref_graph.json"
    p.write_text(json.dumps(REF_GRAPH_DOC))
    return p


def _cases(cls: str) -> list[dict[str, str]]:
    return [c for c in MANIFEST if c["class"] == cls]


CLASSES = sorted({c["class"] for c in MANIFEST})


def test_the_standing_corpus_is_what_the_script_makes(tmp_path):
    """tests/data/bad is reproducible from scripts/bad_corpus.py (nothing hand-edited)."""
    c = bc.Corpus(tmp_path)
    bc.small(c)
    c.manifest()
    assert json.loads((tmp_path / "MANIFEST.json").read_text()) == MANIFEST
    for case in MANIFEST:
        assert _hash(tmp_path / case["name"]) == _hash(BAD / case["name"]), case["name"]


@pytest.mark.parametrize("cls", CLASSES)
def test_corpus_class(cls, run_cli, ref_graph, tmp_path):
    """Every case of one class over every command that reads its kind."""
    ref = {"graph": ref_graph, "trace": bc.TRACE, "bench": bc.BENCH}
    for case in _cases(cls):
        x = BAD / case["name"]
        before = _hash(x)
        for args in hc.commands(case["kind"], x, ref, tmp_path, case["expect"]):
            rc, out, err = run_cli(*args)
            try:
                check_contract(rc, out, err, case["expect"])
            except AssertionError as e:
                raise AssertionError(f"{case['name']} ({case['why']}): cgtool {' '.join(map(str, args))}: {e}") from None
        assert _hash(x) == before, f"{case['name']} was modified"


def test_refusals_name_the_field(run_cli):
    """Type and range errors give the path to the bad field and the value."""
    rc, _, err = run_cli("deps", BAD / "trace_stream_2p64.json.gz")
    assert rc == 4 and ".args.stream" in err and "traceEvents[" in err and "18446744073709551616" in err
    rc, _, err = run_cli("topo", BAD / "graph_exec_id_2p64m1.json")
    assert rc == 4 and "exec_graph_id" in err and "2^31" in err and str(2**64 - 1) in err
    rc, _, err = run_cli("topo", BAD / "graph_empty_node_type.json")
    assert rc == 4 and "nodes[3].node_type" in err
    rc, _, err = run_cli("topo", BAD / "graph_dup_edge.json")
    assert rc == 4 and "second time" in err
    rc, _, err = run_cli("deps", BAD / "trace_no_ts.json.gz")
    assert rc == 4 and "no 'ts'" in err
    rc, _, err = run_cli("deps", BAD / "trace_dup_one_event.json.gz")
    assert rc == 4 and "listed twice" in err
    rc, _, err = run_cli("bench", "--compare", BAD / "bench_negative.json", bc.BENCH)
    assert rc == 4 and "gpu_us[0]" in err and "-3.0" in err
    rc, _, err = run_cli("bench", "--compare", BAD / "bench_no_workloads.json", bc.BENCH)
    assert rc == 4 and "no workloads" in err
    rc, _, err = run_cli("deps", BAD / "ranks_trace_junk")
    assert rc == 4 and "rank" in err and "per-rank file" in err


def test_half_the_graph_ids_lost_is_a_warning(run_cli):
    rc, out, err = run_cli("deps", BAD / "trace_half_graph_ids.json.gz")
    # what the warning must count, from the file itself
    doc = json.loads(gzip.decompress((BAD / "trace_half_graph_ids.json.gz").read_bytes()))
    launches = {e["args"]["correlation"] for e in doc["traceEvents"] if e.get("name") == "cudaGraphLaunch"}
    gpu = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["args"]["correlation"] in launches]
    lost = sum("graph id" not in e["args"] for e in gpu)
    assert lost and "warning: " in err and f"{lost} of {len(gpu)} GPU events" in err


def test_multi_member_gzip_is_read_whole(run_cli):
    """A trace split into two gzip members gives the same result as the original."""
    rc1, out1, _ = run_cli("deps", BAD / "trace_multi_member.json.gz", "--json", "-")
    rc2, out2, _ = run_cli("deps", bc.TRACE, "--json", "-")
    assert rc1 == rc2 == 0 and json.loads(out1) == json.loads(out2)


def test_no_terminal_escapes_in_tables(run_cli):
    rc, out, err = run_cli("topo", BAD / "graph_name_escape_title.json")
    assert rc == 0 and "\x1b" not in out and "\\x1b]0;pwned" in out
    rc, out, _ = run_cli("deps", BAD / "trace_name_markup.json.gz")
    assert rc == 0


def test_markdown_summary_is_escaped(run_cli, tmp_path):
    summary = tmp_path / "summary.md"
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary)}
    rc, _, _ = run_cli("bench", "--compare", bc.BENCH, BAD / "bench_name_markup.json", env=env)
    text = summary.read_text()
    assert rc in (0, 1) and "\\[bold\\]kern\\[/\\]" in text and "[bold]" not in text
    from cgtool.text import markdown_cell

    assert markdown_cell("a|b<script>\x1b") == "a\\|b\\<script\\>\\\\x1b"


@pytest.mark.skipif(not __import__("shutil").which("dot"), reason="graphviz's dot is not installed")
@pytest.mark.parametrize("name", ["graph_name_nul.json", "graph_name_100k.json", "graph_name_newline.json",
                                  "graph_name_escape_title.json"])
def test_dot_output_is_read_by_graphviz(run_cli, name):
    rc, out, err = run_cli("dot", BAD / name)
    assert rc == 0, err
    r = subprocess.run(["dot", "-Tcanon"], input=out.encode(), capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr[-300:]
    assert len(out) < 50_000  # the 100k-character name is shortened, not refused


# ----------------------------------------------------------------------------- big cases, made here

def _subprocess(args: list[str], cwd: Path, as_limit: int | None = None, timeout: float = 60) -> tuple[int, str, float, int]:
    """(exit code, stderr, seconds, peak RSS in bytes) of `python -m cgtool ARGS` in a fresh process."""
    r = hc.run(ROOT, args, cwd, as_limit=as_limit)
    assert not r["killed"], (args, r["killed"], r["secs"])
    return r["rc"], r["stderr"].decode(errors="replace"), r["secs"], r["rss"]


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("big")
    c = bc.Corpus(d)
    bc.big(c, bombs=False)
    c.manifest()
    return d


#: The default cap on what a gzip file decompresses to, by the rule docs/deps.md states: 64 times
#: its compressed size, at least 256 MiB and at most 4 GiB.
def _gzip_cap(size: int) -> int:
    return min(max(64 * size, 256 << 20), 4 << 30)


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """320 MiB bombs (10 members of 32 MiB, and one member): each compresses to little enough that
    its default cap is the 256 MiB floor, so reading stops before the end (scripts/hostile_corpus.py runs
    the 10 GiB ones)."""
    d = tmp_path_factory.mktemp("bombs")
    bc.gzip_bombs(bc.Corpus(d), members=10, member_mib=32, single_mib=320)
    return d


@pytest.mark.slow
def test_deep_nesting_is_refused(big, run_cli):
    for name in ("deep_array.json", "deep_object.json", "deep_in_meta.json"):
        rc, out, err = run_cli("topo", big / name)
        check_contract(rc, out, err, "refuse")
        assert "levels deep" in err
    for name in ("deep_gzip.json.gz", "deep_in_args.json.gz", "deep_in_embedded_graph.json.gz"):
        rc, out, err = run_cli("deps", big / name)
        check_contract(rc, out, err, "refuse")


@pytest.mark.slow
@pytest.mark.subprocess
def test_gzip_bombs_stop_at_the_default_cap(bombs, tmp_path, run_cli):
    """Refused at the first bytes (zeros: in this process, nothing is read past them) or at the
    default cap, across gzip members too (each member alone is under the cap), within 30 s and 2 GiB
    (measured on a fresh process)."""
    rc, _, err = run_cli("deps", bombs / "bomb_zeros.json.gz")
    assert rc == 4 and "not JSON" in err, err
    for name, cmd in (("bomb_spaces.json.gz", "topo"), ("bomb_trace.json.gz", "deps"), ("bomb_single.json.gz", "deps")):
        rc, err, secs, rss = _subprocess([cmd, str(bombs / name)], tmp_path)
        cap = _gzip_cap((bombs / name).stat().st_size)
        assert cap == 256 << 20, (name, cap)  # each decompresses to 320 MiB: past the cap
        assert rc == 4 and f"more than the {cap:,}-byte limit" in err, (name, err)
        assert secs < 30 and rss < 2 << 30, (name, secs, rss >> 20)


@pytest.mark.subprocess
def test_a_long_chain_skips_the_exact_width(big, tmp_path):
    """3,000 nodes in a chain: 4.5 million comparable pairs; the exact width is skipped, not run for a minute."""
    rc, err, secs, rss = _subprocess(["topo", str(big / "long_chain.json"), "--json", str(tmp_path / "t.json")], tmp_path)
    assert rc == 0 and secs < 15 and rss < 1 << 30, (err, secs, rss >> 20)
    t = json.loads((tmp_path / "t.json").read_text())
    assert t["depth"] == 3000 and t["max_concurrency"] is None and t["max_level_width"] == 1


@pytest.mark.parametrize("name", ["wide_fanin.json", "wide_fanout.json"])
@pytest.mark.subprocess
def test_wide_graphs_within_time_and_memory(big, tmp_path, name):
    """30,000 independent nodes joined at one end: topo well under 30 s and 2 GB."""
    rc, err, secs, rss = _subprocess(["topo", str(big / name), "--json", str(tmp_path / "t.json")], tmp_path)
    assert rc == 0, err
    assert secs < 15 and rss < 1 << 30, (secs, rss >> 20)
    t = json.loads((tmp_path / "t.json").read_text())
    assert t["nodes"] == 30_001 and t["edges"] == 30_000 and t["depth"] == 2 and t["redundant_edges"] == []


def test_devices_are_refused_early(run_cli):
    for dev in ("/dev/urandom", "/dev/zero"):
        for args in (["topo", dev], ["deps", dev], ["bench", "--compare", dev, bc.BENCH]):
            t0 = time.monotonic()
            rc, out, err = run_cli(*args)
            check_contract(rc, out, err, "refuse")
            assert rc == 4 and "not JSON" in err and time.monotonic() - t0 < 5


def test_a_fifo_is_read_and_a_waiting_reader_says_so(run_cli, tmp_path):
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)

    def feed(delay: float) -> None:
        time.sleep(delay)
        with open(fifo, "wb") as f:
            f.write(bc.GRAPH.read_bytes())

    th = threading.Thread(target=feed, args=(1.0,))
    th.start()
    rc, out, err = run_cli("topo", fifo)
    th.join()
    assert rc == 0 and "waiting for a writer" in err and "18" in out


def test_outputs_that_cannot_be_written_exit_2(run_cli, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    rc, _, err = run_cli("topo", bc.GRAPH, "--json", f / "out.json")
    assert rc == 2 and "is a file, not a folder" in err and err.count("\n") == 1
    rc, _, err = run_cli("topo", bc.GRAPH, "--json", "/proc/cgtool-no-such-dir/x.json")
    assert rc == 2 and "Cannot write" in err
    rc, _, err = run_cli("dot", bc.GRAPH, "-o", f / "x" / "g.dot")
    assert rc == 2 and f.read_text() == "x"


def test_devices_as_outputs_are_written_through(run_cli):
    rc, _, err = run_cli("topo", bc.GRAPH, "--json", "/dev/null", "--force")
    assert rc == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode), err


@pytest.mark.slow
@pytest.mark.subprocess
def test_every_command_under_an_address_space_limit(tmp_path, ref_graph):
    """`ulimit -v 4194304`: nothing asks for a buffer of the cap's size."""
    for args in (["topo", str(bc.GRAPH)], ["deps", str(bc.TRACE)], ["bench", "--compare", str(bc.BENCH), str(bc.BENCH)]):
        rc, err, _, _ = _subprocess(args, tmp_path, as_limit=4 << 30)
        assert rc == 0, (args, err)


@pytest.mark.subprocess
def test_the_special_cases_keep_the_contract(tmp_path, run_cli, ref_graph):
    """The script's special cases of outputs (that must not be written or created) and signals
    (Ctrl-C and SIGTERM on FIFOs without a writer or a reader), judged by the script's own check:
    nothing it counts. The outputs run in this process (what they test is files); each signal is
    sent to a fresh `python -m cgtool` once it says it waits, blocked on the FIFO (130 and 143 are
    a process's exit codes)."""
    corpus, work = tmp_path / "corpus", tmp_path / "work"
    corpus.mkdir()
    work.mkdir()
    hc.prepare_special(corpus)
    ref = {"graph": ref_graph, "trace": bc.TRACE, "bench": bc.BENCH}

    def in_process(j: dict) -> dict:
        rc, out, err = run_cli(*j["args"], cwd=work)
        return {"rc": rc, "stdout": out.encode(), "stderr": err.encode(), "killed": "", "secs": 0.0, "rss": 0}

    def fresh(j: dict) -> dict:
        return hc.run(ROOT, j["args"], work, send=j["send"], send_on=j["send_on"])

    jobs = [j for j in hc.special_cases(corpus, ref) if j["class"] in ("outputs", "signals")]
    assert sum(j["class"] == "signals" for j in jobs) == 4 and len(jobs) >= 18
    found = []
    for j in jobs:
        r, bad = hc.check(j, ref, corpus, in_process if j["class"] == "outputs" else fresh)
        if j["class"] == "signals" and b"waiting for a " not in r["stderr"]:
            bad.append("signalled before it blocked")
        if bad:
            found.append((j["why"], bad, r["rc"], r["stderr"][-300:]))
    assert not found, found


def test_every_control_character_is_escaped_in_names(run_cli):
    """BEL, BS, VT, FF, CR, DEL and C1 in kernel names are shown as \\xNN, as ESC is."""
    for tag, code in (("bel", 0x07), ("bs", 0x08), ("vt", 0x0B), ("ff", 0x0C), ("cr", 0x0D), ("c1", 0x9B)):
        rc, out, err = run_cli("topo", BAD / f"graph_name_{tag}.json")
        check_contract(rc, out, err, "accept")
        assert f"ker\\x{code:02x}nel" in out, (tag, out[-600:])
