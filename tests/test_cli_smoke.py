"""End-to-end runs of `python -m cgtool` in a fresh interpreter (the other CLI tests run in-process)."""

import json

import pytest

pytestmark = pytest.mark.subprocess


def test_help_version_and_usage_error(run_cli_subprocess):
    rc, out, _ = run_cli_subprocess("--help")
    assert rc == 0 and "Exit codes" in out
    rc, out, _ = run_cli_subprocess("--version")
    assert rc == 0 and out.startswith("cgtool ")
    rc, _, err = run_cli_subprocess("deps")
    assert rc == 2 and "Missing argument" in err and "Traceback" not in err


def test_deps_json_to_stdout(run_cli_subprocess, data_dir):
    rc, out, err = run_cli_subprocess("deps", data_dir / "forkjoin_trace_mc1" / "trace.json.gz", "--json", "-",
                                      "--top", "0")
    assert rc == 0, err
    doc = json.loads(out)  # the tables went to stderr: stdout is the JSON alone
    assert "fake dependencies" in err
    assert doc["summary"]["fake"] > 0 and doc["summary"]["lane"] == "channel"


def test_invalid_input_is_exit_4_without_traceback(run_cli_subprocess, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    rc, _, err = run_cli_subprocess("deps", bad)
    assert rc == 4 and err.startswith("cgtool: ") and "Traceback" not in err
