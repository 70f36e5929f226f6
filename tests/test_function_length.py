"""No function in the CLI (``cgtool/cli/``) or in the deps analysis's entry point
(``cgtool/inspect/deps.py``) is over 80 lines: a command parses, calls one function and renders
(docs/architecture.md), and the analysis is one call per question. Lengths are read with ``ast``
(first line of the ``def`` to the last line of its body, decorators and nested functions included)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "cgtool"
LIMIT = 80
FILES = sorted([*(PKG / "cli").glob("*.py"), PKG / "inspect" / "deps.py"])


def lengths(path: Path) -> dict[str, int]:
    out = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            out[f"{node.name} (line {node.lineno})"] = node.end_lineno - node.lineno + 1
    return out


def test_the_lengths_are_read_right(tmp_path: Path):
    p = tmp_path / "m.py"
    p.write_text("def f():\n" + "    x = 1\n" * 99 + "\n\ndef g():\n    def h():\n        pass\n    return 1\n")
    assert lengths(p) == {"f (line 1)": 100, "g (line 103)": 4, "h (line 104)": 2}


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_function_is_over_80_lines(path: Path):
    long = {k: n for k, n in lengths(path).items() if n > LIMIT}
    assert not long, f"{path.relative_to(PKG.parent)}: functions over {LIMIT} lines: {long}"
