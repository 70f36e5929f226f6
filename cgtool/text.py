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
#: What ``shown`` replaces (code point -> escape), for a renderer that translates text itself.
ESCAPES: dict[int, str] = dict(_ESCAPES)


def shown(s: str) -> str:
    """``s`` made safe to print on a terminal: control characters (ESC, BEL, NUL, C1, bidi
    overrides) become visible escapes such as ``\\x1b``; tabs and newlines stay."""
    return s.translate(_ESCAPES) if not s.isprintable() else s


def short_value(v: object, limit: int = 60) -> str:
    """A value from an input, for a message: its ``repr`` cut to ``limit`` characters, and an
    integer beyond 128 bits as its magnitude (``1.000e+400, an integer of 401 digits``) instead of
    hundreds of digits (up to 39 digits, such as 2^64, it is shown whole)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 128:
        try:
            digits = str(abs(v))
        except ValueError:  # beyond Python's int-to-text limit (4300 digits)
            return f"an integer of about {int(v.bit_length() * 0.30103)} digits"
        return f"{'-' if v < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1}, an integer of {len(digits)} digits"
    r = repr(v)
    return r if len(r) <= limit else r[:limit - 3] + "..."


_MD_SPECIAL = "\\`*_{}[]()<>#+-!|~"


def markdown_cell(s: str) -> str:
    """``s`` as literal text in a Markdown (GitHub) table cell: control characters escaped as by
    ``shown``, Markdown and HTML punctuation backslash-escaped, line breaks as spaces, ``&`` as an entity."""
    s = shown(s).replace("\n", " ").replace("\t", " ").replace("&", "&amp;")
    return "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in s)
