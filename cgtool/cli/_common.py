"""Shared CLI pieces: consoles (stdout for results, stderr for progress and errors), the options
every command spells the same way, and the one check of an output path."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Annotated, Iterable, Optional

import typer
from rich.console import Console
from rich.segment import Segment

from cgtool.artifacts.jsonio import DEFAULT_MAX_BYTES, is_stdout, output_problem
from cgtool.errors import OutputExistsError, UsageError
from cgtool.text import ESCAPES, shown

def _escape_controls_in_rich_text() -> None:
    """rich deletes BEL, BS, VT, FF and CR from every Text it builds (``rich.control.
    strip_control_codes``, through its module table) and keeps ESC and the others, so a kernel
    named ``k\\x07`` showed as ``k`` while ``k\\x1b`` showed escaped. Filling that table with
    ``cgtool.text.shown``'s escapes makes every Text show every control character the same way,
    before the layout measures it (so table columns fit the escapes). Without the table (another
    rich) nothing changes, and the console below still escapes what it prints."""
    try:
        from rich import control
    except ImportError:  # pragma: no cover
        return
    table = getattr(control, "_CONTROL_STRIP_TRANSLATE", None)
    if isinstance(table, dict) and table.get(0x07, "") is None:
        table.clear()
        table.update(ESCAPES)


_escape_controls_in_rich_text()


class _Console(Console):
    """A console that never lets input text drive the terminal: control characters in anything
    printed (kernel names, paths, workload names; in tables, rules and titles alike) are shown
    as escapes (``\\x1b``). rich's own styling is added after this, so it is untouched."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            seg if seg.control else Segment(shown(seg.text), seg.style, seg.control) for seg in buffer)

    def on_broken_pipe(self) -> None:
        # rich would exit 1 here, the code of a failed check; cgtool.cli.main maps this to 141.
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader of cgtool's output went away")


# Text from inputs (kernel names, paths) is shown literally: no rich markup, no highlighting.
out = _Console(soft_wrap=False, markup=False, highlight=False)
err = _Console(stderr=True, markup=False, highlight=False)

Force = Annotated[bool, typer.Option("--force", help="Overwrite existing output files.")]
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "t": 1000**4, "tb": 1000**4, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_size(value: object) -> int:
    """A size as the help prints it: ``1GiB``, ``256 MiB``, ``1.5GB``, or a number of bytes."""
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS or float(m.group(1)) * _UNITS[unit] < 1:
        raise typer.BadParameter(f"{value!r} is not a size: give bytes (1000000) or a number with a unit "
                                 "(256MiB, 1GiB, 2GB), at least 1 byte.")
    return int(float(m.group(1)) * _UNITS[unit])


MaxBytes = Annotated[Optional[int], typer.Option("--max-bytes", parser=parse_size, show_default="8 GiB for a file, 1 GiB for a device or FIFO, 64x the size of a gzip file (256 MiB to 4 GiB)", help="Refuse inputs that are (or decompress to) more bytes than this: bytes, or with a unit (256MiB, 1GiB, 2GB).")]
JsonOut = Annotated[Optional[Path], typer.Option("--json", help="Also write the result as JSON (`-`: standard output).")]
__all__ = ["DEFAULT_MAX_BYTES", "Force", "JsonOut", "MaxBytes", "err", "out", "output_path", "wrote", "console_for", "one_stdout"]


def output_path(path: Optional[Path], force: bool, *, inputs: tuple[Optional[Path], ...] = ()) -> Optional[Path]:
    """Check an output path before any work is done: ``-`` is standard output; an existing file
    needs ``--force``; an input is never overwritten, even with ``--force``."""
    if path is None or is_stdout(path):
        return path
    for i in inputs:
        if i is not None and path.exists() and i.exists() and os.path.samefile(path, i):
            raise UsageError(f"The output {path} is the input {i}; cgtool never overwrites an input. "
                             "Name a new file.")
    if path.is_dir():
        raise UsageError(f"{path} is a directory; give a file name.")
    problem = output_problem(path)
    if problem:
        raise UsageError(f"Cannot write {path}: {problem}.")
    folder = Path(os.path.realpath(path)).parent
    if not path.exists() and not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"Cannot write {path}: the folder {folder} is not writable. Choose another path.")
    if path.exists() and not force:
        raise OutputExistsError(path)
    return path


def console_for(*outputs: Optional[Path]) -> Console:
    """Where the human-readable report goes: stdout, or stderr when one of the command's outputs
    (``--json -``, ``--annotate -``, ``--save-baseline -``) takes stdout."""
    return err if any(is_stdout(p) for p in outputs) else out


def one_stdout(**outputs: Optional[Path]) -> None:
    """Refuse two outputs of one command both given as ``-``: their contents would be interleaved."""
    named = [f"--{name.replace('_', '-')}" for name, p in outputs.items() if is_stdout(p)]
    if len(named) > 1:
        raise UsageError(f"{' and '.join(named)} are both `-` (standard output); only one output can go there. "
                         "Write the other to a file.")


def wrote(path: Optional[Path], what: str = "") -> None:
    """Say on stderr that ``path`` was written (nothing for standard output)."""
    if path is not None and not is_stdout(path):
        err.print(f"wrote {path}{' ' + what if what else ''}", markup=False, highlight=False)
