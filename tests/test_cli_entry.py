"""The console script's fast path: `cgtool record` starts without loading the other commands,
and behaves as the full app does (same help, same errors)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="100",
               TERM="dumb", NO_COLOR="1")
    probe = ("import sys, atexit; atexit.register(lambda: print('LOADED', 'cgtool.cli.analysis' in sys.modules, "
             "'cgtool.cli.main' in sys.modules)); ")
    return subprocess.run([sys.executable, "-c", probe + code], capture_output=True, text=True, env=env, cwd=ROOT)


def test_record_loads_only_its_command() -> None:
    p = _run("from cgtool.cli.entry import main; main(['record', '--', 'no_such_program.py'])")
    assert p.returncode == 2, p.stderr
    assert "Program not found: no_such_program.py" in p.stderr
    assert "LOADED False False" in p.stdout


def test_other_commands_load_the_full_app() -> None:
    p = _run("from cgtool.cli.entry import main; main(['--version'])")
    assert p.returncode == 0 and "cgtool" in p.stdout
    assert "LOADED True True" in p.stdout


def test_record_help_is_the_full_apps() -> None:
    fast = _run("from cgtool.cli.entry import main; main(['record', '--help'])")
    full = _run("from cgtool.cli.main import main; main(['record', '--help'])")
    assert fast.returncode == full.returncode == 0
    assert "LOADED False False" in fast.stdout
    strip = lambda s: s.split("LOADED")[0]  # noqa: E731
    assert strip(fast.stdout) == strip(full.stdout) and "--trace-replays" in strip(fast.stdout)
