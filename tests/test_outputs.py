"""Outputs: a missing folder is refused (never created), a dangling symbolic link likewise, an
output FIFO without a reader says that it waits, and `-o -` writes the report to stdout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
GRAPH = DATA / "forkjoin" / "graph.json"
TRACE = DATA / "forkjoin_trace_mc1" / "trace.json.gz"
BENCH = DATA / "bench" / "h200_samples.json"


def _writers(out: Path) -> list[list[object]]:
    """Every command that writes a file named by the user (--json, -o), writing ``out``."""
    return [["topo", GRAPH, "--json", out], ["deps", TRACE, "--json", out], ["diff", GRAPH, GRAPH, "--json", out],
            ["dot", GRAPH, "-o", out], ["deps", TRACE, "--annotate", out], ["doctor", "--json", out],
            ["bench", "--compare", BENCH, BENCH, "--json", out], ["report", GRAPH, "-o", out]]


@pytest.mark.parametrize("i", range(8))
def test_a_missing_folder_is_refused_not_created(run_cli, tmp_path, i):
    out = tmp_path / "typo_dir" / "deeper" / "x.json"
    args = _writers(out)[i]
    rc, _, err = run_cli(*args)
    assert rc == 2, (args, err)
    assert err.startswith("cgtool: Cannot write") and err.count("\n") == 1, err  # one paragraph
    assert f"the folder {out.parent} does not exist" in err and "Create it first" in err
    assert not (tmp_path / "typo_dir").exists()


def test_a_dangling_symlink_is_refused_when_its_target_folder_is_missing(run_cli, tmp_path):
    link = tmp_path / "link.json"
    target = tmp_path / "nowhere" / "sub" / "x.json"
    link.symlink_to(target)
    for args in (["topo", GRAPH, "--json", link], ["dot", GRAPH, "-o", link]):
        rc, _, err = run_cli(*args)
        assert rc == 2 and f"symbolic link to {target}" in err and "does not exist" in err, err
        assert not (tmp_path / "nowhere").exists() and link.is_symlink()


def test_a_dangling_symlink_into_a_real_folder_is_written_through(run_cli, tmp_path):
    (tmp_path / "real").mkdir()
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "real" / "x.json")
    rc, _, err = run_cli("topo", GRAPH, "--json", link)
    assert rc == 0, err
    assert link.is_symlink() and (tmp_path / "real" / "x.json").read_text().startswith("{")


def test_the_writer_refuses_a_missing_folder_too(tmp_path):
    """The library's atomic write (used by every save) creates no folder either."""
    from cgtool.artifacts.jsonio import write_json
    from cgtool.errors import UsageError

    with pytest.raises(UsageError, match="does not exist"):
        write_json(tmp_path / "no" / "x.json", {"a": 1})
    assert not (tmp_path / "no").exists()


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "120"}


@pytest.mark.subprocess
def test_an_output_fifo_without_a_reader_says_so_and_ctrl_c_stops_it(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    p = subprocess.Popen([sys.executable, "-m", "cgtool", "topo", str(GRAPH), "--json", str(fifo), "--force"],
                         cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as in a terminal
    assert p.stderr is not None
    line = p.stderr.readline()
    assert f"waiting for a reader on the FIFO {fifo}" in line, line
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130 and "interrupted" in err
    assert stat_is_fifo(fifo)


def stat_is_fifo(p: Path) -> bool:
    import stat

    return stat.S_ISFIFO(os.stat(p).st_mode)


def test_an_output_fifo_with_a_reader_gets_the_json(run_cli, tmp_path):
    import json

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    th = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    th.start()
    rc, _, err = run_cli("topo", GRAPH, "--json", fifo, "--force")
    th.join(30)
    assert rc == 0, err
    assert json.loads(got[0])["nodes"] == len(json.loads(GRAPH.read_text())["nodes"])
    assert stat_is_fifo(fifo)


def test_report_to_stdout(run_cli, tmp_path):
    rc, out, err = run_cli("report", GRAPH, "-o", "-")
    assert rc == 0, err
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")
    assert "wrote" not in err and not list(tmp_path.iterdir())
    rc, _, err = run_cli("report", GRAPH, "-o", "-", "--open")
    assert rc == 2 and "--open" in err
