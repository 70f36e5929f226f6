"""Small text helpers shared by every layer (they import nothing)."""

from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 pair``, ``2 pairs``, ``0 pairs`` (``many`` for irregular plurals)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def _escapes() -> dict[int, str]:
    table = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)] if c not in (0x09, 0x0A)}
    # bidirectional overrides reorder what a terminal shows: shown as escapes too
    table.update({c: f"\\u{c:04x}" for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]})
    return table


_ESCAPES = _escapes()


def shown(s: str) -> str:
    """``s`` made safe to print on a terminal: control characters (ESC, BEL, NUL, C1, bidi
    overrides) become visible escapes such as ``\\x1b``; tabs and newlines stay."""
    return s.translate(_ESCAPES) if not s.isprintable() else s


_MD_SPECIAL = "\\`*_{}[]()<>#+-!|~"


def markdown_cell(s: str) -> str:
    """``s`` as literal text in a Markdown (GitHub) table cell: control characters escaped as by
    ``shown``, Markdown and HTML punctuation backslash-escaped, line breaks as spaces, ``&`` as an entity."""
    s = shown(s).replace("\n", " ").replace("\t", " ").replace("&", "&amp;")
    return "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in s)
