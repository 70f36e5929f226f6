"""Shared CLI pieces: consoles (stdout for results, stderr for progress and errors) and output checks."""

from __future__ import annotations


from rich.console import Console


out = Console(soft_wrap=False)
err = Console(stderr=True)
