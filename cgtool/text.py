"""Small text helpers shared by every layer (they import nothing)."""

from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 pair``, ``2 pairs``, ``0 pairs`` (``many`` for irregular plurals)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"
