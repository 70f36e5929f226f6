"""The commands the README and docs show, read from their fenced code blocks.

tests/test_docs.py runs them on the CPU against tests/data/ (or checks them as far as a machine
without a GPU can), tests/gpu/test_docs_gpu.py runs the GPU ones on the GPU machine.

A command is a line of a ``bash``/``sh``/``console`` block, or of a block without a language,
whose first word (after ``VAR=value`` assignments) is ``cgtool``, ``python``/``python3``, ``pip``,
``bash`` or ``torchrun``; in a ``console`` block only the ``$ `` lines are commands, and the lines
after one are the output it shows. A ``cgtool`` line with ``[`` or ``...`` is a synopsis (its
indented continuation lines belong to it).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_WORDS = {"cgtool", "python", "python3", "pip", "bash", "torchrun"}
_ASSIGN = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
_COMMENT = re.compile(r"\s+#\s.*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence
    lang: str
    text: str


@dataclass
class Command:
    path: Path
    line: int
    text: str  # as shown, without a trailing `# comment`
    lang: str
    shown: list[str] = field(default_factory=list)  # output lines shown after it (console blocks)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def synopsis(self) -> bool:
        return self.words[:1] == ["cgtool"] and ("[" in self.text or "..." in self.text)

    @property
    def words(self) -> list[str]:
        """The command's words after its leading ``VAR=value`` assignments (shell quoting removed)."""
        try:
            w = shlex.split(self.text)
        except ValueError:
            w = self.text.split()
        while w and _ASSIGN.match(w[0]):
            w = w[1:]
        return w


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    return [Block(path, text[: m.start()].count("\n") + 1, m.group(1), m.group(2)) for m in _FENCE.finditer(text)]


def strip_comment(line: str) -> str:
    return _COMMENT.sub("", line).rstrip()


def _is_command(line: str) -> bool:
    w = line.split()
    while w and _ASSIGN.match(w[0]):
        w = w[1:]
    return bool(w) and w[0] in _WORDS


def commands(path: Path) -> list[Command]:
    """Every command shown in ``path``'s code blocks, in order."""
    found: list[Command] = []
    for b in blocks(path):
        if b.lang not in ("", "bash", "sh", "shell", "console"):
            continue
        cur: Command | None = None
        for i, raw in enumerate(b.text.splitlines(), start=b.line + 1):
            if b.lang == "console":
                if raw.startswith("$ "):
                    cur = Command(path, i, strip_comment(raw[2:]), b.lang)
                    found.append(cur)
                elif cur is not None:
                    cur.shown.append(raw)
                continue
            line = strip_comment(raw)
            if cur is not None and cur.synopsis and raw[:1].isspace() and line.strip():
                cur.text += " " + line.strip()
            elif line.strip() and not raw[:1].isspace() and _is_command(line):
                cur = Command(path, i, line.strip(), b.lang)
                found.append(cur)
            else:
                cur = None
    return found


def all_commands() -> list[Command]:
    return [c for p in DOCS for c in commands(p)]


def readme_gpu_commands() -> list[Command]:
    """The README's block of commands run on a GPU machine (the block that runs `cgtool capture`)."""
    readme = ROOT / "README.md"
    for b in blocks(readme):
        cmds = [c for c in commands(readme) if b.line < c.line <= b.line + b.text.count("\n") + 1]
        if any(c.words[:2] == ["cgtool", "capture"] for c in cmds):
            return cmds
    raise AssertionError("README.md has no block of GPU commands (one running `cgtool capture`)")
