"""What a new user met in their first hour (issue 16): each test failed on the old behaviour."""

import io
import json
import os
import re
import stat
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console

from cgtool.artifacts.bench import BenchResults
from cgtool.report.tables import bench_table, facts_table, show
from cgtool.text import plural

ROOT = Path(__file__).resolve().parent.parent


def test_the_gpu_demo_runs_a_sample_inside_the_package():
    from cgtool.cli.demo import sample_workload

    p = sample_workload()
    assert p.is_file() and "cgtool" in p.parts and "sample_workloads" not in p.parts
    assert "def setup" in p.read_text()
    pkg_data = (ROOT / "pyproject.toml").read_text()
    assert "capture/samples/*.py" in pkg_data  # so that a wheel carries it


def test_pyproject_targets_are_read_on_every_python(tmp_path):
    from cgtool.cli.bench_cmd import targets_from_pyproject

    p = tmp_path / "pyproject.toml"
    p.write_text('[tool.cgtool]\nbench = ["a.py", "b.py:fn"]\n')
    assert targets_from_pyproject(p) == ["a.py", "b.py:fn"]
    src = (ROOT / "cgtool" / "cli" / "bench_cmd.py").read_text()
    assert "import tomli as tomllib" in src  # Python 3.10 has no tomllib


def test_json_to_a_symlinked_device_writes_through(run_cli, data_dir, tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to(os.devnull)
    rc, _, err = run_cli("topo", data_dir / "forkjoin" / "graph.json", "--json", link, "--force")
    assert rc == 0, err
    assert link.is_symlink() and stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_json_to_a_fifo_writes_through(run_cli, data_dir, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    rc, _, err = run_cli("topo", data_dir / "forkjoin" / "graph.json", "--json", fifo, "--force")
    reader.join(10)
    assert rc == 0, err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and json.loads(got[0])["nodes"] == 18


def test_dash_means_standard_output(run_cli, data_dir, tmp_path):
    rc, out, err = run_cli("topo", data_dir / "forkjoin" / "graph.json", "--json", "-", cwd=tmp_path)
    assert rc == 0, err
    assert json.loads(out)["nodes"] == 18 and not (tmp_path / "-").exists()
    rc, out, _ = run_cli("dot", data_dir / "forkjoin" / "graph.json", "-o", "-", cwd=tmp_path)
    assert rc == 0 and out.startswith("digraph") and not (tmp_path / "-").exists()


def test_numbers_and_names_are_never_cut_at_80_columns(data_dir):
    from cgtool.inspect.benchstats import compare_results

    res = BenchResults.load(ROOT / "cgtool" / "data" / "bench_h200.json.gz")
    buf = io.StringIO()
    con = Console(file=buf, width=80, color_system=None)
    show(con, bench_table(res, compare_results(res, res)))
    text = buf.getvalue()
    assert "…" not in text
    for w in res.workloads:
        assert f"{w.stats().median:.2f}" in text
        assert Path(w.workload).name in text


def test_diff_labels_edge_types_whole_and_distinct_kernels_apart(run_cli, data_dir):
    rc, out, err = run_cli("diff", data_dir / "gpt2_decode" / "graph.json", data_dir / "transformer_block" / "graph.json",
                           "--json", "-")
    assert rc == 0, err
    doc = json.loads(out)
    edge_keys = {r["key"] for r in doc["rows"] if r["section"] == "edge_type"}
    assert edge_keys and all("->" in k for k in edge_keys)
    # independently: the distinct demangled kernel names of each graph
    from cgtool.artifacts.names import demangle
    names = set()
    for p in ("gpt2_decode", "transformer_block"):
        names |= {demangle(n["kernel_name"]) for n in json.loads((data_dir / p / "graph.json").read_text())["nodes"]
                  if n.get("kernel_name")}
    assert {r["key"] for r in doc["rows"] if r["section"] == "kernel"} == names
    rc, text, _ = run_cli("diff", data_dir / "gpt2_decode" / "graph.json", data_dir / "transformer_block" / "graph.json")
    assert "kernel->kernel" in text and "kernel-\n" not in text


def test_bench_compare_json_holds_the_verdicts(run_cli, data_dir, tmp_path):
    b = data_dir / "bench" / "h200_samples.json"
    rc, _, err = run_cli("bench", "--compare", b, b, "--json", tmp_path / "v.json")
    assert rc == 0, err
    doc = json.loads((tmp_path / "v.json").read_text())
    names = {w.key for w in BenchResults.load(b).workloads}
    assert {j["name"] for j in doc["judgements"]} == names and all(j["verdict"] == "unchanged" for j in doc["judgements"])


def test_bracketed_text_is_printed_literally(run_cli):
    buf = io.StringIO()
    Console(file=buf, width=120).print(facts_table("t", {"torch": "install cgtool[gpu] to capture"}))
    assert "cgtool[gpu]" in buf.getvalue()
    rc, out, _ = run_cli("bench", "--help", env={**os.environ, "COLUMNS": "200"})
    assert rc == 0 and "[tool.cgtool]" in out


class _ClosedPipe(io.TextIOWrapper):
    """A stdout whose reader went away after the first write."""

    def __init__(self):
        super().__init__(io.BytesIO(), encoding="utf-8")
        self.writes = 0

    def write(self, s):
        self.writes += 1
        if self.writes > 1:
            raise BrokenPipeError(32, "Broken pipe")
        return len(s)

    def flush(self):
        if self.writes >= 1:
            raise BrokenPipeError(32, "Broken pipe")

    def close(self):
        self.writes = 0  # closing at garbage collection is not a write
        super().close()


@pytest.mark.parametrize("argv", [["dot", "gpt2_decode/graph.json", "--expand"], ["topo", "gpt2_decode/graph.json"]])
def test_a_closed_pipe_is_not_a_failed_check(data_dir, monkeypatch, argv):
    from cgtool.cli.main import EXIT_PIPE_CLOSED, main

    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    with pytest.raises(SystemExit) as e:
        main([argv[0], str(data_dir / argv[1]), *argv[2:]])
    assert e.value.code == EXIT_PIPE_CLOSED == 141


@pytest.mark.parametrize("args", [["--tolerance-us", "-5"], ["--tolerance-us", "nan"], ["--tolerance-us", "inf"],
                                  ["--top", "-1"], ["--max-bytes", "-1"], ["--fail-on-fake", "-2"]])
def test_out_of_range_options_are_usage_errors(run_cli, data_dir, args):
    rc, _, err = run_cli("deps", data_dir / "forkjoin_trace_mc1" / "trace.json.gz", *args)
    assert rc == 2, err


def test_capture_without_torch_names_the_extra(run_cli, tmp_path, monkeypatch):
    (tmp_path / "w.py").write_text("import torch\n\ndef setup():\n    return lambda: None\n")
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    rc, out, err = run_cli("capture", tmp_path / "w.py")
    assert rc == 3 and "cgtool[gpu]" in err and "torch" in err


def test_bench_without_a_gpu_prints_no_table(run_cli, tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "w.py").write_text("def setup():\n    return lambda: None\n")
    rc, out, err = run_cli("bench", tmp_path / "w.py", "--runs", "1")
    assert rc == 3 and out == "" and "GPU" in err


def test_error_paragraphs_are_one_line_in_logs(run_cli, tmp_path):
    long = tmp_path / ("x" * 150 + ".json")
    rc, _, err = run_cli("topo", long)
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_help_texts(run_cli):
    for cmd in ("capture", "export", "trace", "bench", "deps", "topo", "dot", "diff", "doctor"):
        rc, out, _ = run_cli(cmd, "--help", env={**os.environ, "COLUMNS": "200"})
        assert rc == 0 and "<bool>" not in out, cmd
        force = [ln for ln in out.splitlines() if "--force" in ln]
        assert all(re.search(r"--force\s+\S", ln) for ln in force), (cmd, force)  # every --force has help
    rc, out, _ = run_cli("deps", "--help", env={**os.environ, "COLUMNS": "200"})
    assert "8 GiB" in out and "8589934592" not in out
    rc, out, _ = run_cli("--help", env={**os.environ, "COLUMNS": "200"})
    assert "--quiet" in out and "--install-completion" in out


def test_quiet_and_doctor_json(run_cli, data_dir, tmp_path):
    rc, _, err = run_cli("-q", "topo", data_dir / "forkjoin" / "graph.json", "--json", tmp_path / "t.json")
    assert rc == 0 and "wrote" not in err and (tmp_path / "t.json").exists()
    rc, out, _ = run_cli("doctor", "--json", "-")
    facts = json.loads(out)
    assert rc == 0 and {"torch", "cupti_python", "graphviz", "env", "compiled", "unknown"} <= set(facts)


def test_plural_words_and_slow_replay_flag(run_cli):
    assert plural(1, "distinct pair") == "1 distinct pair" and plural(2, "pair") == "2 pairs"
    res = BenchResults.load(ROOT / "cgtool" / "data" / "bench_h200.json.gz")
    slow = [w for w in res.workloads if not w.failed and w.eager_median() and w.stats().median > w.eager_median()]
    buf = io.StringIO()
    show(Console(file=buf, width=200), bench_table(res, None))
    assert slow and buf.getvalue().count("slower than eager") == len(slow)
