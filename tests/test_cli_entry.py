"""The console script's fast path: `cgtool record` starts without loading the other commands,
and behaves as the full app does (same help, same errors)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="100",
               TERM="dumb", NO_COLOR="1")
    probe = ("import sys, atexit; atexit.register(lambda: print('LOADED', 'cgtool.cli.analysis' in sys.modules, "
             "'cgtool.cli.main' in sys.modules)); ")
    return subprocess.run([sys.executable, "-c", probe + code], capture_output=True, text=True, env=env, cwd=ROOT)


@pytest.mark.subprocess
def test_record_loads_only_its_command() -> None:
    p = _run("from cgtool.cli.entry import main; main(['record', '--', 'no_such_program.py'])")
    assert p.returncode == 2, p.stderr
    assert "Program not found: no_such_program.py" in p.stderr
    assert "LOADED False False" in p.stdout


@pytest.mark.subprocess
def test_other_commands_load_the_full_app() -> None:
    p = _run("from cgtool.cli.entry import main; main(['--version'])")
    assert p.returncode == 0 and "cgtool" in p.stdout
    assert "LOADED True True" in p.stdout


@pytest.mark.subprocess
def test_record_help_is_the_full_apps() -> None:
    fast = _run("from cgtool.cli.entry import main; main(['record', '--help'])")
    full = _run("from cgtool.cli.main import main; main(['record', '--help'])")
    assert fast.returncode == full.returncode == 0
    assert "LOADED False False" in fast.stdout
    strip = lambda s: s.split("LOADED")[0]  # noqa: E731
    assert strip(fast.stdout) == strip(full.stdout) and "--trace-replays" in strip(fast.stdout)


@pytest.mark.subprocess
def test_usual_record_lines_start_the_program_before_typer_loads() -> None:
    stub = ("import sys, cgtool.capture.record.launcher as L; "
            "L.run = lambda opts, program: (print('TYPER', 'typer' in sys.modules, 'rich' in sys.modules, opts.out, "
            "program, opts.trace_replays), sys.exit(0)); ")
    p = _run(stub + "from cgtool.cli.entry import main; "
             "main(['record', '-o', 'somewhere', '--trace-replays', '3', '--', 'python', 'tests/programs/server_runner.py', '2'])")
    assert p.returncode == 0, p.stderr
    assert "TYPER False False somewhere ['python', 'tests/programs/server_runner.py', '2'] 3" in p.stdout


# ---------------------------------------------------------------- the fast parser against typer's
from hypothesis import given, settings, strategies as st  # noqa: E402

_VALUES = st.sampled_from(["0", "1", "3", "07", "-1", "+2", "x", "", "rec", "-o", "--", "a b", "12"])
_OPTS = st.sampled_from(["-o", "--out", "--output", "--force", "--coverage", "--trace-replays", "--trace-skip",
                         "--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-endpoint", "--bogus", "--help",
                         "--out=rec", "-orec", "--force=1"])


_FLAGS = {"--force", "--coverage"}


@st.composite
def _record_lines(draw: st.DrawFn) -> list[str]:
    args: list[str] = []
    well_formed = draw(st.booleans())  # half the lines as users write them, half anything
    known = ["-o", "--force", "--coverage", "--trace-replays", "--trace-skip", "--nproc-per-node", "--nnodes",
             "--node-rank", "--rdzv-endpoint"]
    opts = draw(st.lists(st.sampled_from(known), unique=True, max_size=5)) if well_formed else \
        draw(st.lists(_OPTS, max_size=5))
    for opt in opts:
        args.append(opt)
        if well_formed:
            if opt not in _FLAGS:
                args.append(draw(st.sampled_from(["0", "1", "3", "12", "rec", "h:29500"])))
        elif draw(st.booleans()):
            args.append(draw(_VALUES))
    if well_formed or draw(st.booleans()):
        args.append("--")
    args += draw(st.lists(st.sampled_from(["prog.py", "python", "-m", "pkg", "--lr", "3"]),
                          min_size=1 if well_formed else 0, max_size=3))
    return args


class _Ran(Exception):
    pass


def _typer_parse(args: list[str]) -> object:
    """What the typer app hands to run_record for ``record ARGS`` (or the error it raises)."""
    import typer  # noqa: F401

    from cgtool.cli import _app, record_cmd, record_run

    seen: dict[str, object] = {}

    def fake(program: list[str], opts: object) -> None:
        seen.update(program=list(program), opts=opts)
        raise _Ran

    real = record_run.run_record
    record_run.run_record = fake  # type: ignore[assignment]
    try:
        app = _app.make_app()
        record_cmd.register(app)
        app(args=["record", *args], standalone_mode=False, prog_name="cgtool")
    except _Ran:
        return seen
    except BaseException as e:  # usage errors: typer refuses what the fast parser must not take
        return type(e).__name__
    finally:
        record_run.run_record = real  # type: ignore[assignment]
    return None


@settings(max_examples=300, deadline=None)
@given(_record_lines())
def test_fast_parser_takes_only_what_typer_parses_the_same(args: list[str]) -> None:
    from cgtool.cli.record_run import parse_fast

    fast = parse_fast(args)
    if fast is None:
        return  # typer parses it (or reports it), as before
    program, opts = fast
    assert _typer_parse(args) == {"program": program, "opts": opts}


def test_fast_parser_takes_the_usual_lines() -> None:
    from pathlib import Path

    from dataclasses import replace

    from cgtool.capture.record.options import RecordOptions
    from cgtool.cli.record_run import parse_fast

    defaults = RecordOptions.from_environment()
    line = ["-o", "rec", "--force", "--coverage", "--trace-replays", "3", "--nproc-per-node", "2", "--", "t.py", "-x"]
    assert parse_fast(line) == (["t.py", "-x"], replace(defaults, out=Path("rec"), force=True, coverage=True,
                                                         trace_replays=3, nproc_per_node=2))
    assert parse_fast(["--", "python", "t.py"]) == (["python", "t.py"], defaults)
    for other in (["--help"], ["-o", "rec", "t.py"], ["--out=rec", "--", "t.py"], ["--nproc-per-node", "0", "--", "t.py"],
                  ["-o", "a", "-o", "b", "--", "t.py"], ["--"]):
        assert parse_fast(other) is None, other


# ------------------------------------------------------- an install without cgtool's dependencies

@pytest.mark.parametrize("blocked", ["typer", "rich", "networkx", "msgspec"])
@pytest.mark.parametrize("args", [["--version"], ["report", "g.json"], ["record", "--", "no_such_program.py"],
                                  ["record", "--help"]])
@pytest.mark.subprocess
def test_a_missing_dependency_is_one_paragraph_and_exit_2(blocked: str, args: list[str]) -> None:
    """`pip install --no-deps cgtool`, or a dependency removed since: whichever import of it fails
    first (loading the app, a command, the error paragraph itself), the user reads which package is
    missing and how to install it, never a traceback. `report` is the command that imports networkx
    (its layout) before it reads its input."""
    code = (f"import sys; sys.modules[{blocked!r}] = None; "  # `import {blocked}` now fails as if absent
            f"from cgtool.cli.entry import main; main({args!r})")
    p = _run(code)
    assert "Traceback" not in p.stderr, p.stderr
    if "Program not found" in p.stderr:
        # record's fast path needs none of them to find that out: its own paragraph (written plainly
        # where rich is missing), its own exit code
        assert p.returncode == 2 and p.stderr.startswith("cgtool: Program not found"), p.stderr
        return
    if p.returncode == 0:  # a path that never imports it runs as it would have
        return
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert f"the package `{blocked}`, which cgtool needs, is not installed" in p.stderr, p.stderr
    assert "pip install" in p.stderr
