"""Reading and writing JSON artifacts: gzip by content, a cap on decompressed size, atomic writes.

cgtool never unpickles: every artifact is JSON (optionally gzip-compressed). An output path of
``-`` is standard output. Writes replace only regular files (through a temporary file and a
rename); a device, a FIFO or a symlink's target that is not a regular file is written through.
"""

from __future__ import annotations

import gzip
import io
import mmap
import os
import stat
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import msgspec

from cgtool.errors import InvalidInputError, OutputExistsError, UsageError

GZIP_MAGIC = b"\x1f\x8b"
#: The output path that means standard output.
STDOUT = "-"
#: Default cap on the decompressed size of a gzip input (a gzip bomb stops here).
DEFAULT_MAX_BYTES = 8 * 1024**3


def read_bytes(path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES, mutable: bool = False) -> bytes:
    """The content of ``path``, gunzipped when it starts with the gzip magic number.

    With ``mutable`` the result is a bytearray read in place (no extra copy)."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"No such file: {p}. Check the path (it is relative to {Path.cwd()}).")
    if p.is_dir():
        raise UsageError(f"Expected a file but got a directory: {p}.")
    with open(p, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head != GZIP_MAGIC:
            if mutable:
                size = os.fstat(f.fileno()).st_size
                if size > max_bytes:
                    raise InvalidInputError(
                        f"{p} is larger than the {max_bytes:,}-byte limit. "
                        "Raise it with --max-bytes if the file is genuine."
                    )
                if size == 0:
                    return bytearray()  # type: ignore[return-value]
                # A private (copy-on-write) mapping: writable, the file itself never changes,
                # and nothing is read or zero-filled up front.
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # type: ignore[return-value]
            return _read_capped(f, p, max_bytes)
        out = _gunzip_capped(f, p, max_bytes)
        return out if mutable else bytes(out)


def _read_capped(f: io.BufferedReader, p: Path, max_bytes: int) -> bytes:
    # In chunks up to the cap: never ask for a buffer of the cap's size (an address-space limit
    # would refuse it), and stop a device or an endless stream at the cap.
    buf = bytearray()
    while len(buf) <= max_bytes:
        chunk = f.read(min(1 << 24, max_bytes + 1 - len(buf)))
        if not chunk:
            return bytes(buf)
        buf += chunk
    raise InvalidInputError(
        f"{p} is larger than the {max_bytes:,}-byte limit. Raise it with --max-bytes if the file is genuine."
    )


def _gunzip_capped(f: io.BufferedReader, p: Path, max_bytes: int) -> bytes:
    # Decompress in chunks so that a gzip bomb is stopped at the cap, not after filling memory.
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = bytearray()
    try:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            out += d.decompress(chunk, max_bytes + 1 - len(out))
            while d.unconsumed_tail and len(out) <= max_bytes:
                out += d.decompress(d.unconsumed_tail, max_bytes + 1 - len(out))
            if len(out) > max_bytes:
                raise InvalidInputError(
                    f"{p} decompresses to more than {max_bytes:,} bytes; reading stopped there "
                    "(this guards against gzip bombs). Raise the limit with --max-bytes if the "
                    "file is genuine."
                )
            if d.eof:
                break
        if not d.eof:
            raise InvalidInputError(
                f"{p} is a truncated gzip file (the compressed stream ends early). "
                "Copy or record the file again."
            )
    except (zlib.error, gzip.BadGzipFile, EOFError) as e:
        raise InvalidInputError(f"{p} is not a valid gzip file ({e}). Record it again.") from None
    return out  # type: ignore[return-value]


def describe_json_error(path: object, data: bytes, err: Exception) -> str:
    """One paragraph for a JSON syntax error: where it is and whether the file looks truncated."""
    text = str(err)
    blank = len(data) == 0 or not bytes(data[:4096]).strip() and not bytes(data).strip()
    truncated = "truncated" in text or "end of" in text.lower() or blank
    if blank:
        return f"{path} is empty: expected a JSON document. Record or export it again."
    hint = (
        "The file looks truncated (it ends before the JSON does): the writer was probably "
        "interrupted. Record it again."
        if truncated
        else "Check that it is the file you meant and that it is JSON."
    )
    return f"{path} is not valid JSON ({text}). {hint}"


def load_json(path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """Parse a JSON (or gzipped JSON) file into Python objects, with a readable error."""
    data = read_bytes(path, max_bytes=max_bytes)
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise InvalidInputError(describe_json_error(path, data, e)) from None


def is_stdout(path: str | os.PathLike[str] | None) -> bool:
    """Whether an output path means standard output (``-``)."""
    return path is not None and os.fspath(path) == STDOUT


def check_writable(path: str | os.PathLike[str], force: bool) -> Path:
    """Refuse to overwrite ``path`` unless ``force``; refuse a directory."""
    p = Path(path)
    if p.exists() and not force:
        raise OutputExistsError(p)
    if p.exists() and p.is_dir():
        raise UsageError(f"{p} is a directory; give a file name.")
    return p


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, force: bool = False) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename: never a half-written file.

    ``-`` writes to standard output. Only a regular file is ever replaced: a symlink is followed
    to its target, and a device or a FIFO is written through."""
    if is_stdout(path):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return Path(STDOUT)
    p = check_writable(path, force)
    if p.suffix == ".gz":
        data = gzip.compress(data, compresslevel=6, mtime=0)
    if p.is_symlink():
        p = p.resolve()
    if p.exists() and not stat.S_ISREG(p.stat().st_mode):
        with open(p, "wb") as f:  # a device or a FIFO: never renamed over
            f.write(data)
        return Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        # mkstemp creates 0600; give the file the mode a plain open() would (0666 less umask).
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(path)


def dumps(obj: Any, *, indent: bool = True) -> bytes:
    """Serialise to JSON bytes (64-bit ids stay exact integers)."""
    raw = msgspec.json.encode(obj)
    return msgspec.json.format(raw, indent=1) if indent else raw


def write_json(
    path: str | os.PathLike[str], obj: Any, *, force: bool = False, indent: bool = True
) -> Path:
    """Atomically write ``obj`` as JSON (gzip when the name ends in ``.gz``)."""
    return atomic_write_bytes(path, dumps(obj, indent=indent) + b"\n", force=force)
