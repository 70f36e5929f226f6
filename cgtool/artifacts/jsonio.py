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
import re
import stat
import sys
import tempfile
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec

from cgtool.errors import InputWarning, InvalidInputError, OutputExistsError, UsageError
from cgtool.text import shown

GZIP_MAGIC = b"\x1f\x8b"
#: A UTF-8 byte order mark: RFC 8259 lets a JSON reader ignore one at the start, and cgtool does
#: (editors and Windows tools write it).
BOM = b"\xef\xbb\xbf"
#: The output path that means standard output.
STDOUT = "-"
#: ``max_bytes=None``: the cap is chosen from the input (see ``default_cap``).
DEFAULT_MAX_BYTES: int | None = None
#: Cap on a plain regular file (its size is known before reading).
FILE_MAX_BYTES = 8 * 1024**3
#: Cap on a device or a FIFO (no size known): reading stops here.
STREAM_MAX_BYTES = 1024**3
#: A gzip file may decompress to this many times its own size (JSON text compresses well) ...
GZIP_RATIO = 64
#: ... but never to less than GZIP_MIN_BYTES nor more than GZIP_MAX_BYTES by default.
GZIP_MIN_BYTES = 256 * 1024**2
GZIP_MAX_BYTES = 4 * 1024**3
#: Arrays and objects nested deeper than this are refused (no artifact nests more than ~10).
MAX_DEPTH = 200
_CHUNK = 1 << 20


def _gib(n: int) -> str:
    return f"{n / 1024**3:.3g} GiB" if n >= 1024**3 else f"{n / 1024**2:.3g} MiB" if n >= 1024**2 else f"{n:,} bytes"


def default_cap(*, gzip_size: int | None = None, stream: bool = False) -> int:
    """The cap used when none is given: a plain file 8 GiB; a device or FIFO 1 GiB; a gzip file
    64 times its compressed size, at least 256 MiB and at most 4 GiB."""
    if gzip_size is not None:
        return min(max(GZIP_RATIO * gzip_size, GZIP_MIN_BYTES), GZIP_MAX_BYTES)
    return STREAM_MAX_BYTES if stream else FILE_MAX_BYTES


#: A document read whole is held about this many times over while it is read and decoded (the
#: growing buffer, its copy as bytes); see ``memory_bound``.
HOLD_FACTOR = 3


def memory_available() -> int | None:
    """Bytes of memory this process can still get now: the system's available memory (Linux
    ``MemAvailable``), or less where a cgroup (a container, a CI job) or an address-space limit
    (``ulimit -v``) limits the process; None where the system's cannot be read."""
    avail: int | None = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:  # the limit of this process's cgroup, less what the group uses (v2, else v1)
        with open("/proc/self/cgroup") as f:
            groups = [ln.rstrip("\n").split(":", 2) for ln in f]
    except OSError:
        groups = []
    for _, ctrl, rel in (g for g in groups if len(g) == 3):
        if ctrl == "":
            d, files = Path("/sys/fs/cgroup") / rel.lstrip("/"), ("memory.max", "memory.current")
        elif "memory" in ctrl.split(","):
            d, files = Path("/sys/fs/cgroup/memory") / rel.lstrip("/"), ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        try:
            limit = (d / files[0]).read_text().strip()
            if limit.isdigit() and int(limit) < avail:
                avail = min(avail, max(int(limit) - int((d / files[1]).read_text().strip()), 0))
        except (OSError, ValueError):
            pass
    try:  # an address-space limit (`ulimit -v`), less the address space in use
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY and soft < avail:
            with open("/proc/self/status") as f:
                used = next((int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:")), 0)
            avail = min(avail, max(soft - used, 0))
    except (ImportError, OSError, ValueError):
        pass
    return avail


def memory_bound(avail: int | None) -> int | None:
    """The largest document cgtool reads whole (graph exports, bench results, a trace from a FIFO)
    without outgrowing ``avail``, the memory available: 1/HOLD_FACTOR of it (at least 64 MiB).
    Whatever ``--max-bytes`` says, reading stops there with a message, not the kernel's
    out-of-memory killer. None: unknown."""
    return None if avail is None else max(avail // HOLD_FACTOR, MEMORY_BOUND_FLOOR)


#: The least ``memory_bound`` says: a document up to this size is read whole without asking.
MEMORY_BOUND_FLOOR = 64 * 1024**2


def _suggest_cap(cap: int) -> str:
    """What the cap message suggests: a --max-bytes the machine can hold, from its memory now."""
    avail = memory_available()
    bound = memory_bound(avail)
    if avail is None or bound is None:
        return "If the file is genuine, raise the cap with --max-bytes N (in bytes)."
    n = bound // 10**9 * 10**9 if bound >= 10**9 else bound // 10**6 * 10**6
    if n <= cap:
        return (f"This machine has {_gib(avail)} of memory available now, too little to read more of it whole: "
                "read it on a machine with more memory.")
    return (f"If the file is genuine, raise the cap with --max-bytes N; this machine can hold about "
            f"--max-bytes {n} now ({_gib(n)}: 1/{HOLD_FACTOR} of the {_gib(avail)} of memory available).")


def _too_big(p: Path, cap: int, given: bool, what: str) -> InvalidInputError:
    how = ("the --max-bytes you gave" if given else
           f"the default for {what}" + (f" ({GZIP_RATIO}x the compressed size, {_gib(GZIP_MIN_BYTES)} to "
                                        f"{_gib(GZIP_MAX_BYTES)}; this guards against gzip bombs)" if what == "gzip" else ""))
    verb = "decompresses to" if what == "gzip" else "is"
    if what == "gzip" and given:
        how += "; the cap guards against gzip bombs"
    return InvalidInputError(
        f"{p} {verb} more than the {cap:,}-byte limit ({_gib(cap)}, {how}); reading stopped there. "
        + _suggest_cap(cap)
    )


def _too_big_for_memory(p: Path, n: int, avail: int, gz: bool) -> InvalidInputError:
    return InvalidInputError(
        f"{p} {'decompresses to' if gz else 'is'} more than this machine can hold to read it: reading stopped at "
        f"{_gib(n)}, 1/{HOLD_FACTOR} of the {_gib(avail)} of memory that was available (a document read whole is "
        f"held about {HOLD_FACTOR} times over). If it is genuine, free memory or read it on a machine with more; "
        "if not (a gzip bomb, a device), check that it is the file you meant.")


_RAW_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _looks_like_json(head: bytes) -> bool:
    """Whether the first bytes could start a JSON text: a value's first character, and no raw
    control character (JSON text holds none outside whitespace) in the first 64 KiB."""
    s = head.lstrip(b" \t\r\n")
    return not s or (s[:1] in b'{["-0123456789tfn' and _RAW_CONTROL.search(head, 0, 1 << 16) is None)


def _not_json(p: Path, head: bytes, what: str) -> InvalidInputError:
    s = head.lstrip(b" \t\r\n")[:16]
    return InvalidInputError(
        f"{p} is {what} whose first bytes ({s!r}) are not JSON; reading stopped there. cgtool reads "
        "JSON artifacts (gzip accepted): check that it is the file you meant."
    )


def read_bytes(path: str | os.PathLike[str], *, max_bytes: int | None = DEFAULT_MAX_BYTES,
               mutable: bool = False) -> bytes:
    """The content of ``path``, gunzipped when it starts with the gzip magic number (every member
    of a multi-member gzip file), never more than the cap: ``max_bytes``, or ``default_cap``.

    Files, gzip streams, devices and FIFOs are all read in chunks up to the cap, so a device that
    never ends, or a gzip bomb, stops there; a device or FIFO whose first bytes are not JSON is
    refused at once. With ``mutable`` the result is a writable buffer (a private mapping of a
    plain file: no copy)."""
    src = Source(path, max_bytes=max_bytes)
    with src:
        if src.regular and not src.gzip and mutable and len(src.head) == _CHUNK:
            # A private (copy-on-write) mapping: writable, the file itself never changes,
            # and nothing is read or zero-filled up front.
            return mmap.mmap(src.f.fileno(), 0, access=mmap.ACCESS_COPY)  # type: ignore[return-value]
        out = read_whole(src)
        return out if mutable else bytes(out)  # type: ignore[return-value]


def read_whole(src: "Source") -> bytearray:
    """All of ``src``'s content in one buffer, within ``memory_bound`` (whatever its cap). The
    memory is asked about once the content passes ``MEMORY_BOUND_FLOOR`` (the bound is never less):
    reading /proc and the cgroup's files took longer than reading a small document."""
    avail: int | None = None
    bound: int | None = None
    asked = False
    size = src.size
    if size is not None and size > MEMORY_BOUND_FLOOR:
        avail, asked = memory_available(), True
        bound = memory_bound(avail)
        if avail is not None and bound is not None and size > bound:
            raise _too_big_for_memory(src.path, size, avail, False)
    out = bytearray()
    for piece in src.pieces():
        out += piece
        if len(out) > MEMORY_BOUND_FLOOR:
            if not asked:
                avail, asked = memory_available(), True
                bound = memory_bound(avail)
            if avail is not None and bound is not None and len(out) > bound:
                raise _too_big_for_memory(src.path, len(out), avail, src.gzip)
    return out


class Source:
    """One input opened for reading: plain content or gzip (by content), read piece by piece with
    ``read_bytes``'s checks, each raised when the piece that breaks it is reached: the cap (for a
    plain regular file, up front from its size), a device or FIFO that does not start like JSON,
    a truncated or damaged gzip stream.

    ``pieces()`` yields the (decompressed) content once, each piece valid until the next is asked
    for (a plain file's pieces are views of one reused buffer: copy them); ``reopen()`` gives a fresh Source of the
    same path for a second pass, or None where the input cannot be read twice (a FIFO, a device)."""

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int | None = DEFAULT_MAX_BYTES,
                 piece: int = _CHUNK) -> None:
        p = Path(path)
        try:
            st = os.stat(p)
        except FileNotFoundError:
            raise UsageError(f"No such file: {p}. Check the path (it is relative to {Path.cwd()}).") from None
        except OSError as e:
            raise UsageError(f"Cannot read {p}: {e.strerror}.") from None
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"Expected a file but got a directory: {p}.")
        if max_bytes is not None and max_bytes < 1:
            raise UsageError(f"--max-bytes must be at least 1, not {max_bytes}.")
        self.path, self.max_bytes, self.piece = p, max_bytes, max(piece, _CHUNK)
        self.regular = stat.S_ISREG(st.st_mode)
        try:
            self.f = _open(p, st)
        except OSError as e:
            raise UsageError(f"Cannot read {p}: {e.strerror}.") from None
        try:
            self.head = self.f.read(_CHUNK)
            self.gzip = self.head[:2] == GZIP_MAGIC
            self.bom = not self.gzip and self.head.startswith(BOM)
            if self.bom:
                self.head = self.head[len(BOM):]
            if self.gzip:
                self.cap = max_bytes if max_bytes is not None else default_cap(
                    gzip_size=st.st_size if self.regular else STREAM_MAX_BYTES // GZIP_RATIO)
            else:
                if not self.regular and not _looks_like_json(self.head):
                    raise _not_json(p, self.head, "a device or FIFO")
                self.cap = max_bytes if max_bytes is not None else default_cap(stream=not self.regular)
                if self.regular and st.st_size > self.cap:
                    raise _too_big(p, self.cap, max_bytes is not None, "a file")
        except BaseException:
            self.f.close()
            raise

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()

    @property
    def size(self) -> int | None:
        """The content's size where it is known before reading and is the file's, byte for byte
        (a plain regular file without a byte order mark)."""
        return os.fstat(self.f.fileno()).st_size if self.regular and not self.gzip and not self.bom else None

    def reopen(self) -> "Source | None":
        return Source(self.path, max_bytes=self.max_bytes, piece=self.piece) if self.regular else None

    def reader(self) -> "Callable[[memoryview], int] | None":
        """For plain content (not gzip): a function that reads the content's next bytes into the
        buffer it is given and returns how many (0 at the end), with the checks of ``pieces()``;
        the same content as ``pieces()``, read straight into the caller's buffer (no copy of each
        piece). None for gzip content: read ``pieces()``. Use one of the two, once."""
        if self.gzip:
            return None
        given = self.max_bytes is not None
        what = "a file" if self.regular else "a device or FIFO"
        head, f, cap, p = memoryview(self.head), self.f, self.cap, self.path
        state = {"n": 0, "at": 0}  # content read so far; how much of the head was handed out

        def read(into: memoryview) -> int:
            if state["at"] < len(head):
                if len(head) > cap:
                    raise _too_big(p, cap, given, what)
                k = min(len(into), len(head) - state["at"])
                into[:k] = head[state["at"]:state["at"] + k]
                state["at"] += k
                state["n"] += k
                return k
            k = f.readinto(into[:max(1, min(len(into), cap + 1 - state["n"]))]) or 0
            state["n"] += k
            if state["n"] > cap:
                raise _too_big(p, cap, given, what)
            return k

        return read

    def pieces(self) -> Iterator[bytes | memoryview]:
        given = self.max_bytes is not None
        if self.gzip:
            return _gunzip_pieces(self.f, self.head, self.path, self.cap, given, self.piece)
        return _read_pieces(self.f, self.head, self.path, self.cap, given,
                            "a file" if self.regular else "a device or FIFO", self.piece)


def _open(p: Path, st: os.stat_result) -> io.BufferedReader:
    """Open for reading; a FIFO with no writer yet blocks (as ``cat`` does), and says so."""
    if not stat.S_ISFIFO(st.st_mode):
        return open(p, "rb")
    f: io.BufferedReader = _open_fifo(p, "rb")
    return f


def _open_fifo(p: Path, mode: str) -> Any:
    """Open a FIFO, which blocks until the other end is opened too (as ``cat`` and a shell's ``>``
    do); after half a second without it, say so once on stderr."""
    import threading

    other = "writer" if "r" in mode else "reader"

    def note() -> None:  # said through warnings: the CLI shows it as "cgtool: warning: ..."
        warnings.warn(InputWarning(f"waiting for a {other} on the FIFO {shown(str(p))} (Ctrl-C stops)."),
                      stacklevel=1)

    t = threading.Timer(0.5, note)
    t.daemon = True
    t.start()
    try:
        return open(p, mode)
    finally:
        t.cancel()


def _read_pieces(f: io.BufferedReader, head: bytes, p: Path, cap: int, given: bool, what: str,
                 piece: int = _CHUNK) -> Iterator[bytes | memoryview]:
    # In pieces up to the cap: never ask for a buffer of the cap's size (an address-space limit
    # would refuse it), and stop a device or an endless stream at the cap.
    n = len(head)
    if n > cap:
        raise _too_big(p, cap, given, what)
    if head:
        yield head
    # One buffer, read into again for every piece: a new piece of this size each time is a fresh
    # allocation whose pages the kernel faults in and zeroes (docs/performance.md#hand-written-code).
    # A piece is valid until the next one is asked for:
    # every caller copies it at once.
    buf = bytearray(piece)
    view = memoryview(buf)
    while True:
        k = f.readinto(view[:min(piece, cap + 1 - n)])
        if not k:
            return
        n += k
        if n > cap:
            raise _too_big(p, cap, given, what)
        yield view[:k]


def _gunzip_pieces(f: io.BufferedReader, head: bytes, p: Path, cap: int, given: bool,
                   piece: int = _CHUNK) -> Iterator[bytes]:
    """Decompress every gzip member, in pieces, stopping at the cap (gzip bombs) and refusing a
    stream that does not start like JSON, a truncated member, or trailing bytes that are not gzip."""
    n = 0
    pending = head
    checked = False
    first = b""
    try:
        while True:  # one gzip member per turn
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            limited = False  # the last call stopped at its output limit: zlib may hold more output
            while True:
                if not pending and not limited:
                    pending = f.read(_CHUNK)
                    if not pending:
                        raise InvalidInputError(
                            f"{p} is a truncated gzip file (the compressed stream ends early). "
                            "Copy or record the file again.")
                limit = min(piece, cap + 1 - n)
                out = d.decompress(pending, limit)
                limited = len(out) == limit
                pending = d.unconsumed_tail
                n += len(out)
                if not checked:
                    if not first and out.startswith(BOM):
                        out = out[len(BOM):]
                    first = (first + out)[:64]
                    if first.strip():
                        if not _looks_like_json(first):
                            raise _not_json(p, first, "a gzip file")
                        checked = True
                if n > cap:
                    raise _too_big(p, cap, given, "gzip")
                if out:
                    yield out
                if d.eof:
                    pending = d.unused_data
                    break
            if not pending:
                pending = f.read(_CHUNK)
            if not pending:
                return
            while len(pending) < 2:
                more = f.read(_CHUNK)
                if not more:
                    break
                pending += more
            if pending[:2] != GZIP_MAGIC:
                rest = len(pending) + len(f.read(_CHUNK))
                raise InvalidInputError(
                    f"{p} has {rest:,}{'+' if rest > _CHUNK else ''} bytes after its gzip data that are not gzip "
                    "(a damaged or concatenated file). Copy or record it again.")
    except (zlib.error, gzip.BadGzipFile, EOFError) as e:
        raise InvalidInputError(f"{p} is not a valid gzip file ({e}). Record it again.") from None


def decode(data: Any, source: object, decoder: Any = None) -> Any:
    """``msgspec`` decode with cgtool's errors: a syntax error says where and whether the file looks
    truncated; nesting deeper than MAX_DEPTH is refused; a typed decode's error names the field."""
    dec = decoder if decoder is not None else msgspec.json
    old = sys.getrecursionlimit()
    depth = _stack_depth()
    try:
        # msgspec counts nesting against the recursion limit (Python <= 3.11): lower it to the
        # depth cgtool accepts for the duration of the decode.
        sys.setrecursionlimit(max(old if old < depth + MAX_DEPTH else depth + MAX_DEPTH, depth + 50))
        return dec.decode(data)
    except RecursionError:
        raise too_deep(source) from None
    except UnicodeDecodeError as e:
        raise not_utf8(source, e) from None
    except msgspec.ValidationError as e:
        raise InvalidInputError(f"{source}: {field_error(e)}") from None
    except msgspec.DecodeError as e:
        raise InvalidInputError(describe_json_error(source, data, e)) from None
    finally:
        sys.setrecursionlimit(old)


def not_utf8(source: object, e: UnicodeDecodeError) -> InvalidInputError:
    return InvalidInputError(f"{source} is not valid UTF-8 (a byte {e.object[e.start:e.start + 1]!r} that starts "
                             "no character); JSON text is UTF-8, so the file was damaged. Copy or record it again.")


def too_deep(source: object) -> InvalidInputError:
    return InvalidInputError(
        f"{source} nests arrays or objects more than {MAX_DEPTH} levels deep; no cgtool artifact does, "
        "so this is not one (or it was damaged). Check that it is the file you meant.")


#: One step of a msgspec error path (``$[3].args.graph node id``): a key (msgspec writes keys raw,
#: spaces included), an array index, a quoted key.
_PATH_STEP = re.compile(r"""\.([^.\[\]`]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]""")


def path_steps(where: str) -> list[str | int]:
    """The steps of a msgspec error path (after its ``$``): keys and array indices."""
    steps: list[str | int] = []
    for m in _PATH_STEP.finditer(where):
        steps.append(m.group(1) if m.group(1) else int(m.group(2)) if m.group(2) else msgspec.json.decode(m.group(3)))
    return steps


def show_path(steps: list[str | int], head: str = "") -> str:
    """``traceEvents[3].args["graph node id"]``: a key that is not an identifier in brackets, whole."""
    out = head + "".join(f"[{st}]" if isinstance(st, int) else f".{st}" if st.isidentifier()
                         else f"[{shown(msgspec.json.encode(st).decode())}]" for st in steps)
    return out[1:] if not head and out.startswith(".") else out


def field_error(e: Exception) -> str:
    """A msgspec validation error as ``path: problem`` (``traceEvents[3].args.stream: ...``)."""
    text = str(e)
    if " - at `$" in text:
        msg, _, where = text.rpartition(" - at `$")
        path = show_path(path_steps(where.rstrip("`")))
        return f"{path or 'the document'}: {msg[0].lower() + msg[1:]}"
    return text


def _stack_depth() -> int:
    f: Any = sys._getframe()
    n = 0
    while f is not None:
        n += 1
        f = f.f_back
    return n


def describe_json_error(path: object, data: bytes, err: Exception) -> str:
    """One paragraph for a JSON syntax error: where it is and whether the file looks truncated."""
    text = str(err)
    blank = len(data) == 0 or not bytes(data[:4096]).strip() and not bytes(data).strip()
    truncated = "truncated" in text or blank
    if blank:
        return f"{path} is empty: expected a JSON document. Record or export it again."
    hint = (
        "The file looks truncated (it ends before the JSON does): the writer was probably "
        "interrupted. Record it again."
        if truncated
        else "Check that it is the file you meant and that it is JSON."
    )
    return f"{path} is not valid JSON ({text}). {hint}"


def load_json(path: str | os.PathLike[str], *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> Any:
    """Parse a JSON (or gzipped JSON) file into Python objects, with a readable error."""
    data = read_bytes(path, max_bytes=max_bytes)
    return decode(data, path)


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
    try:
        return _write(p, Path(path), data)
    except OSError as e:
        raise cannot_write(Path(path), e) from None


def output_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written as a new file, and the fix, or None: a parent that is a file, a
    folder that does not exist (cgtool creates no folder for an output file: a typo would make one),
    a symbolic link whose target's folder does not exist."""
    where = Path(os.path.realpath(path)) if path.is_symlink() else path
    parent = next((a for a in where.parents if a.exists()), None)
    if parent is not None and not parent.is_dir():
        return f"{parent} is a file, not a folder. Choose another path"
    if not where.parent.is_dir():
        link = f"it is a symbolic link to {where}, whose folder" if where != path else "the folder"
        return (f"{link} {where.parent} does not exist. Create it first (cgtool creates no folder for an "
                "output file), or choose another path")
    return None


def cannot_write(p: Path, e: OSError) -> UsageError:
    """One paragraph for an output that cannot be written (exit 2)."""
    why = output_problem(p) or f"{e.strerror or e}. Choose a path in a folder you can write to"
    return UsageError(f"Cannot write {p}: {why}.")


def _write(p: Path, path: Path, data: bytes) -> Path:
    if p.is_symlink():
        p = Path(os.path.realpath(p))
    if p.exists() and not stat.S_ISREG(p.stat().st_mode):
        opener = _open_fifo if stat.S_ISFIFO(p.stat().st_mode) else open
        with opener(p, "wb") as f:  # a device or a FIFO: never renamed over
            f.write(data)
        return path
    problem = output_problem(p)
    if problem:
        raise UsageError(f"Cannot write {path}: {problem}.")
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
    return path


def dumps(obj: Any, *, indent: bool = True) -> bytes:
    """Serialise to JSON bytes (64-bit ids stay exact integers)."""
    raw = msgspec.json.encode(obj)
    return msgspec.json.format(raw, indent=1) if indent else raw


def write_json(
    path: str | os.PathLike[str], obj: Any, *, force: bool = False, indent: bool = True
) -> Path:
    """Atomically write ``obj`` as JSON (gzip when the name ends in ``.gz``)."""
    return atomic_write_bytes(path, dumps(obj, indent=indent) + b"\n", force=force)
