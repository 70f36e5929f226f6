"""Every command's --help at 80 columns reads like a tool's help: values named by words (GRAPH,
TRACE, INPUT..., DIR, N), no Python types, nothing cut, no sentence broken before the line is
full, `-h` the same as `--help`, and `-q/--quiet` accepted after the command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GRAPH = ROOT / "tests" / "data" / "forkjoin" / "graph.json"
WIDTH = 80


def _commands() -> dict[str, object]:
    import typer

    from cgtool.cli.main import app

    root = typer.main.get_command(app)
    return {"": root, **getattr(root, "commands")}


COMMANDS = sorted(_commands())


def _help(run_cli, name: str, flag: str = "--help") -> str:
    rc, out, err = run_cli(*([name] if name else []), flag, env={**os.environ, "COLUMNS": str(WIDTH)})
    assert rc == 0 and not err, (name, rc, err)
    return out


def _norm(s: str) -> str:
    return " ".join(s.replace("\\[", "[").split())


def _source_texts(name: str) -> list[str]:
    """The texts the command declares (its docstring's paragraphs, each parameter's help): each
    must appear whole in the help."""
    cmd = _commands()[name]
    texts = [p for p in re.split(r"\n\s*\n", getattr(cmd, "help", None) or "") if p.strip()]
    texts += [getattr(p, "help", None) or "" for p in getattr(cmd, "params") if not getattr(p, "hidden", False)]
    return [_norm(t) for t in texts if t.strip()]


def _blocks(text: str) -> list[list[str]]:
    """Runs of lines that wrap one text: a paragraph of the description (lines between blank
    lines), or one entry's text in a section (its first line holds the entry, the others are at
    the text's column)."""
    blocks: list[list[str]] = []
    cur: list[str] = []
    col = -1
    in_sections = False
    for line in text.splitlines()[1:]:
        ind = len(line) - len(line.lstrip())
        if re.fullmatch(r"[A-Z][\w ()]*:", line):
            in_sections = True
        if not line.strip() or not in_sections or ind == 2 or ind == 0:
            if in_sections or not line.strip():
                if cur:
                    blocks.append(cur)
                cur, col = [], -1
            if not line.strip() or ind == 0:
                continue
            if not in_sections:
                cur.append(line)
                continue
            entry = re.match(r"^(  \S.*?\s{2,})\S", line)
            if entry:
                cur, col = [line], len(entry.group(1))
            continue
        if cur and ind != col:
            blocks.append(cur)
            cur, col = [], -1
        if not cur:
            col = ind
        cur.append(line)
    if cur:
        blocks.append(cur)
    return blocks


@pytest.mark.parametrize("name", COMMANDS)
def test_help_at_80_columns(run_cli, name):
    out = _help(run_cli, name)
    lines = out.splitlines()
    assert lines[0].startswith(f"Usage: cgtool {name}".rstrip()), lines[0]
    # nothing beyond the width, nothing cut
    assert all(len(line) <= WIDTH for line in lines), [line for line in lines if len(line) > WIDTH]
    assert "…" not in out
    flat = _norm(out)
    for t in _source_texts(name):
        assert t in flat, (name, t)
    # values named by words, no Python types
    first = next(i for i, ln in enumerate(lines) if re.fullmatch(r"[A-Z][\w ()]*:", ln))  # the first section
    heads = [lines[0]] + [m.group(1) for m in (re.match(r"^  (\S.*?)(?:\s{2,}|$)", ln) for ln in lines[first:]) if m]
    types = re.compile(r"<[a-z]|\blist\[|\bPath\b|\{[a-z]|\bint range\b|\bstr\b|<bool>|\bINTEGER\b|\bTEXT\b|\bFLOAT\b")
    assert not [h for h in heads if types.search(h)], heads
    usage = lines[0].split(f"cgtool {name}".rstrip(), 1)[1].split()
    for piece in usage:
        assert re.fullmatch(r"\[?(OPTIONS|COMMAND|ARGS|--|[A-Z][A-Z_]*)(\.\.\.)?\]?(\.\.\.)?", piece), (name, piece)
    for line in lines:
        m = re.match(r"^  (-[^ ].*?)(?:\s{2,}|$)", line)
        if not m:
            continue
        entry = m.group(1)
        words = [w for w in re.split(r"[ ,/]+", entry) if w and not w.startswith("-")]
        for w in words:  # what an option takes: a word in capitals (N, FILE, GRAPH...) or the choices
            assert re.fullmatch(r"[A-Z][A-Z_:]*|[a-z]+(\|[a-z]+)+", w), (name, entry)
    # re-wrapped whole: a line of a text ends only where the next word would not fit (the
    # formatter's width is the terminal's less 2)
    for block in _blocks(out):
        for a, b in zip(block, block[1:]):
            assert len(a) + 1 + len(b.split()[0]) > WIDTH - 2, (name, a, b)


@pytest.mark.parametrize("name", COMMANDS)
def test_h_is_help_and_quiet_is_everywhere(run_cli, name):
    out = _help(run_cli, name)
    assert _help(run_cli, name, "-h") == out
    assert re.search(r"^  -q, --quiet\b", out, re.M), out
    assert re.search(r"^  -h, --help\b", out, re.M), out


def test_the_command_list_gives_each_summary_whole(run_cli):
    out = _norm(_help(run_cli, ""))
    for name, cmd in _commands().items():
        if name:
            first = re.split(r"\n\s*\n", getattr(cmd, "help", None) or "")[0]
            assert f"{name} {_norm(first)}" in out, (name, first)


def test_metavars_are_the_words_of_the_docs(run_cli):
    """The words the README and docs use for what commands take."""
    want = {"topo": ["GRAPH"], "deps": ["TRACE", "-g, --graph GRAPH", "--top N", "--json FILE"],
            "report": ["INPUT..."], "capture": ["TARGET", "-o, --out, --output DIR"],
            "record": ["-- PROGRAM", "-o, --out, --output DIR"], "bench": ["--compare OLD NEW"],
            "diff": ["GRAPH_A GRAPH_B"]}
    for name, words in want.items():
        out = _help(run_cli, name)
        for w in words:
            assert w in out, (name, w)


def test_quiet_after_the_command(run_cli, tmp_path):
    out = tmp_path / "t.json"
    rc, _, err = run_cli("topo", GRAPH, "--json", out, "-q")
    assert rc == 0 and out.exists() and "wrote" not in err, err
    out.unlink()
    rc, _, err = run_cli("topo", GRAPH, "--json", out)
    assert rc == 0 and "wrote" in err
    out.unlink()
    rc, _, err = run_cli("-q", "topo", GRAPH, "--json", out)
    assert rc == 0 and "wrote" not in err


@pytest.mark.subprocess
def test_help_in_a_real_process_at_80_columns(tmp_path):
    env = {**os.environ, "COLUMNS": str(WIDTH),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "cgtool", "bench", "-h"], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.startswith("Usage: cgtool bench [OPTIONS] [TARGET...]"), r.stdout
    assert "--allow-env-mismatch / --no-allow-env-mismatch" in r.stdout
    assert max(map(len, r.stdout.splitlines())) <= WIDTH
