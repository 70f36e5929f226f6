"""The streaming reader: a trace file read a window at a time, its events decoded a chunk at a time
into columns (``decode``), a big plain file's second half read by a forked process (``_Worker``).
What it does not handle goes through the whole-document reader (``decode._load``)."""

from __future__ import annotations

import gc
import mmap
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec
import numpy as np

from cgtool.artifacts.jsonio import DEFAULT_MAX_BYTES, Source, read_bytes, read_whole
from cgtool.artifacts.trace.decode import _COLS, _Acc, _decode_span, _finish, _load, _meta, _outer
from cgtool.artifacts.trace.model import Trace
from cgtool.errors import InvalidInputError


def load_trace(path: str | Path, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> Trace:
    """Parse a trace file (gzip detected by content). Errors are InvalidInputError (exit 4).

    The file is streamed (see the module's docstring): its events are decoded a window at a time
    and only their columns are kept. Anything the streaming reader does not handle (malformed
    JSON, a second ``traceEvents``, an error in an event) sends the file through the whole-document
    reader, which gives the answer or the error every reader of cgtool gives."""
    src = str(path)
    # A million new objects would trigger Python's cyclic GC over and over (none of them form
    # cycles), which makes loading superlinear: pause it for the load.
    was = gc.isenabled()
    gc.disable()
    try:
        with Source(path, max_bytes=max_bytes, piece=WINDOW) as source:
            if not source.regular:  # a FIFO or a device: it can be read only once
                data = read_whole(source)
                return _load(data, src)
            try:
                return _load_streaming(source, src)
            except _Fallback:
                pass
            except _SourceError as e:
                raise e.error from None
        return _load_whole(path, src, max_bytes)
    finally:
        if was:
            gc.enable()


def _load_whole(path: str | Path, src: str, max_bytes: int | None) -> Trace:
    data = read_bytes(path, max_bytes=max_bytes, mutable=True)
    try:
        return _load(data, src)
    finally:
        close = getattr(data, "close", None)
        if close is not None:
            try:
                close()
            except BufferError:  # pragma: no cover - a view is still alive; the GC will close it
                pass


#: Bytes of events decoded at a time: a chunk is the whole events inside a window of this size.
#: The reader holds about this much input, one chunk's decoded events and the columns.
WINDOW = 8 << 20
#: Plain files at least this big are read by two processes (where fork exists): see _Worker.
PARALLEL_MIN_BYTES = 64 << 20
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEP = re.compile(rb"\}\s*,\s*\{")
_END = re.compile(rb"\}\s*\]")


class _Fallback(Exception):
    """Something the streaming reader does not handle (malformed JSON, an unusual layout, an
    error to report): read the whole document instead."""


class _SourceError(Exception):
    """An error of the input itself, met while streaming: raised as it is, with no second reading."""

    def __init__(self, error: InvalidInputError) -> None:
        super().__init__(error.message)
        self.error = error


class _Probe(msgspec.Struct):
    """Any JSON object (its keys are skipped)."""


_probe = msgspec.json.Decoder(_Probe)


class _Buf:
    """A growing window on a stream of pieces: ``b`` holds the stream from offset ``off`` on.

    ``b`` is a memoryview of the first bytes of one buffer kept for the whole reading (it grows
    only for an event longer than the window). A plain file is read straight into it (``readinto``:
    the Source's ``reader()``); other sources' pieces are copied into it. Forgetting the front
    moves the rest (the part of a window after its last whole event: small) to its start.
    Hand-written for speed: appending each 8 MiB piece to a bytearray and deleting the front
    copied every byte a second time, into memory freed and faulted in again from window to window
    (docs/performance.md#hand-written-code)."""

    def __init__(self, pieces: Iterator[bytes | memoryview], off: int = 0,
                 readinto: Callable[[memoryview], int] | None = None) -> None:
        self.it = pieces
        self.readinto = readinto
        self._store = _zeroed(2 * WINDOW + (1 << 16))
        self._view = memoryview(self._store)
        self._n = 0
        self.b = self._view[:0]
        self.eof = False
        self.off = off

    def _room(self, k: int) -> None:
        """At least ``k`` bytes free after the data (a bigger store: the old one is left to views of it)."""
        if self._n + k > len(self._store):
            store = _zeroed(max(2 * len(self._store), self._n + k))
            store[:self._n] = self._view[:self._n]
            self._store, self._view = store, memoryview(store)

    def more(self) -> bool:
        if self.eof:
            return False
        try:
            if self.readinto is not None:
                self._room(WINDOW)
                k = self.readinto(self._view[self._n:self._n + WINDOW])
                if not k:
                    self.eof = True
                    return False
                self._n += k
            else:
                piece = next(self.it)
                k = len(piece)
                self._room(k)
                self._view[self._n:self._n + k] = piece
                self._n += k
        except StopIteration:
            self.eof = True
            return False
        except InvalidInputError as e:  # the input itself (the cap, a damaged gzip stream): reported as is
            raise _SourceError(e) from None
        self.b = self._view[:self._n]
        return True

    def fill(self, n: int) -> None:
        while len(self.b) < n and self.more():
            pass

    def rest(self) -> bytes:
        while self.more():
            pass
        return bytes(self.b)

    def drop(self, k: int) -> None:
        """Forget ``b[:k]``: the rest moves to the start (``b`` is a new view: read it again)."""
        if k > 0:
            rest = self._n - k
            self._view[:rest] = self._view[k:self._n]
            self._n = rest
            self.off += k
            self.b = self._view[:rest]


def _zeroed(n: int) -> mmap.mmap:
    """``n`` writable zero bytes as an anonymous mapping, whose pages the kernel provides as they are
    first touched. A bytearray of the window's size was zero-filled whole for every trace read,
    most of the time of reading a small trace (docs/performance.md#hand-written-code)."""
    return mmap.mmap(-1, n)


def _find_events(buf: _Buf) -> int:
    """Index in ``buf.b`` just after the ``[`` of the top-level ``traceEvents`` array. A match of
    ``"traceEvents": [`` counts only when the bytes before it end a valid prefix of the top-level
    object (checked by decoding them closed with an empty array): not inside a string or a nested
    value."""
    tried: set[int] = set()
    start = 0
    while True:
        for m in _KEY.finditer(buf.b, start):
            if m.start() in tried:
                continue
            tried.add(m.start())
            try:
                _probe.decode(bytes(buf.b[:m.start()]) + b'"traceEvents":[]}')
                return m.end()
            except (msgspec.MsgspecError, RecursionError, UnicodeDecodeError):
                continue
        start = max(0, len(buf.b) - 4096)
        if not buf.more():
            raise _Fallback


def _last_sep(b: memoryview, lo: int, hi: int) -> tuple[int, int]:
    """The last event separator ``}`` , ``{`` with its ``{`` in ``b[lo:hi]``: (index of the ``}``,
    index of the ``{``), or (-1, -1). Looked for in the window's last 64 KiB first."""
    for start in (max(lo, hi - 65536), lo):
        last = None
        for last in _SEP.finditer(b, start, hi):
            pass
        if last is not None:
            return last.start(), last.end() - 1
        if start == lo:
            break
    return -1, -1


def _stream_events(buf: _Buf, pos: int, acc: _Acc, stop: int | None = None) -> int:
    """Decode the events from ``buf.b[pos]`` (the first byte of an event, a boundary known to be
    right) to the end of the array: returns the index in ``buf.b`` just after its ``]``. With
    ``stop`` (a stream offset): end instead with the event whose ``}`` is there and return -1
    (``buf.b`` then starts just after it), unless no chunk decodes ending there: then read on to
    the end of the array as without it.

    A chunk is cut after the last separator ``}``, ``{`` in the window. A cut is right when the
    chunk decodes: the chunk starts at a known boundary, so the decoder is in the state the whole
    document's decoder would be in, and a cut inside a string or a nested value leaves it
    unfinished ("truncated"). Then an earlier separator is tried; a chunk that runs past the
    array's end (a separator in what follows it) fails with "trailing characters", and the end
    is looked for among the ``]`` after a ``}``."""
    b = buf.b
    if b[pos] == 0x5D:  # "]": an empty array
        return pos + 1
    window = WINDOW
    while True:
        buf.fill(pos + window + 1)
        b = buf.b
        hi = min(len(b), pos + window)
        if stop is not None and stop - buf.off < hi:  # the bound is in this window: cut there
            c = stop - buf.off
            try:
                if b[c] != 0x7D:
                    raise _Fallback
                _decode_span(b, pos, c + 1, acc)
            except (_Fallback, msgspec.MsgspecError, UnicodeDecodeError, RecursionError):
                stop = None  # not a boundary between events: read on (the worker's part is dropped)
                continue
            buf.drop(c + 1)
            return -1
        if buf.eof and len(b) - pos <= window:
            return _last_chunk(buf, pos, acc)
        c, j = _last_sep(b, pos, hi)
        for _ in range(8):
            if c < 0:
                break
            try:
                _decode_span(b, pos, c + 1, acc)
                break
            except msgspec.DecodeError as e:
                if "truncated" in str(e):  # the cut fell inside an event: an earlier one
                    c, j = _last_sep(b, pos, c)
                    continue
                if "trailing" in str(e):  # the array ended inside the chunk
                    return _last_chunk(buf, pos, acc)
                raise _Fallback from None
            except (UnicodeDecodeError, RecursionError):
                raise _Fallback from None
        else:
            c = -1
        if c < 0:  # an event longer than the window, or separators only inside events: a wider one
            if buf.eof and len(b) - pos <= window:
                return _last_chunk(buf, pos, acc)
            window *= 2
            if window > 64 * WINDOW:
                raise _Fallback
            continue
        window = WINDOW
        buf.drop(j - 1)
        b = buf.b
        pos = 1


_NON_WS = re.compile(rb"[^ \t\r\n]")


_WS = b" \t\r\n"
_WS_BLOCK = 1 << 20


def _skip_ws(b: memoryview, i: int) -> int:
    """Index of the first byte from ``i`` on that is not JSON whitespace (``len(b)`` if none). A long
    run of whitespace (padding, a whitespace bomb) is crossed a block at a time by
    ``bytes.translate``, which deletes it faster than the pattern searches it
    (docs/performance.md#hand-written-code)."""
    n = len(b)
    m = _NON_WS.search(b, i, min(n, i + 4096))
    if m is not None:
        return m.start()
    j = min(n, i + 4096)
    while j < n:
        block = b[j:j + _WS_BLOCK].tobytes()
        if block.translate(None, _WS):  # something else in this block: the pattern says where
            m = _NON_WS.search(b, j, j + len(block))
            return j + len(block) if m is None else m.start()
        j += len(block)
    return n


_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_probe_list = msgspec.json.Decoder(list[_Probe])


def _last_chunk(buf: _Buf, pos: int, acc: _Acc) -> int:
    """The events up to the array's end, which lies after ``pos``. The rest of the input is
    parsed as one array (each event skipped): the decoder stops at the array's ``]`` and says
    where the bytes after it start. Failing that, the first ``]`` after a ``}`` where the chunk
    decodes (a ``]`` inside the last events leaves the chunk truncated)."""
    buf.fill(len(buf.b) + 1)
    b = buf.b
    end = -1
    saved = b[pos - 1]
    b[pos - 1] = 0x5B  # "["
    try:
        with memoryview(b) as mv, mv[pos - 1:] as rest:
            _probe_list.decode(rest)
    except msgspec.DecodeError as err:
        m = _TRAILING.search(str(err))
        if m is not None:  # "byte N": one past the first byte after the array
            end = pos - 1 + len(bytes(b[pos - 1:pos - 2 + int(m.group(1))]).rstrip()) - 1
    except (msgspec.MsgspecError, UnicodeDecodeError, RecursionError):
        pass
    finally:
        b[pos - 1] = saved
    if end > pos and b[end] == 0x5D:
        try:
            _decode_span(b, pos, end, acc)
            return end + 1
        except msgspec.DecodeError:
            pass
        except (UnicodeDecodeError, RecursionError):
            raise _Fallback from None
    i = pos
    for _ in range(64):
        m2 = _END.search(b, i)
        if m2 is None:
            raise _Fallback
        e = m2.end() - 1
        try:
            _decode_span(b, pos, e, acc)  # the span's own "]" is the array's
            return e + 1
        except msgspec.DecodeError as err:
            if "truncated" not in str(err):
                raise _Fallback from None
        except (UnicodeDecodeError, RecursionError):
            raise _Fallback from None
        i = e + 1
    raise _Fallback


def _load_streaming(source: Source, src: str) -> Trace:
    read = source.reader()
    buf = _Buf(iter(()), readinto=read) if read is not None else _Buf(source.pieces())
    start = _find_events(buf)
    prefix = bytes(buf.b[:start - 1])
    buf.drop(start - 1)  # keep the "[": a chunk's first byte is overwritten during its decode
    acc = _Acc(src)
    while True:  # whitespace before the first event (dropped as it is read: it may be long)
        first = _skip_ws(buf.b, 1)
        if first < len(buf.b):
            break
        buf.drop(len(buf.b) - 1)
        if not buf.more():
            raise _Fallback  # the document ends inside the array
    worker = _Worker.start(source, buf.off + first, src)
    try:
        try:
            if worker is not None:
                end = _stream_events(buf, first, acc, stop=worker.stop)
                if end == -1:
                    suffix = worker.join(acc)
                    if suffix is not None:
                        return _finish_streamed(acc, prefix, suffix, src)
                    # The worker's part is read here instead: from the event after the bound.
                    buf.fill(len(buf.b) + 1)
                    k = _skip_ws(buf.b, 0)
                    if bytes(buf.b[k:k + 1]) != b",":
                        raise _Fallback
                    k = _skip_ws(buf.b, k + 1)
                    buf.drop(k - 1)
                    end = _stream_events(buf, 1, acc)
            else:
                end = _stream_events(buf, first, acc)
        except InvalidInputError:
            raise _Fallback from None
        if end < 0:
            raise _Fallback
        buf.rest()
        return _finish_streamed(acc, prefix, bytes(buf.b[end:]), src)
    finally:
        if worker is not None:
            worker.close()


def _finish_streamed(acc: _Acc, prefix: bytes, suffix: bytes, src: str) -> Trace:
    """Check the document around the events (prefix, an empty array, suffix) as the whole-document
    reader would, then finish the columns."""
    try:
        outer = _outer.decode(prefix + b"[]" + suffix)
    except (msgspec.MsgspecError, RecursionError, UnicodeDecodeError):
        raise _Fallback from None
    if outer.traceEvents:  # a second "traceEvents" key: the whole-document reader takes the last
        raise _Fallback
    try:
        meta = _meta(outer.cgtool, src)
    except InvalidInputError:
        raise _Fallback from None
    return _finish(acc, meta, acc.n, src)


def _workers() -> int:
    env = os.environ.get("CGTOOL_TRACE_WORKERS")
    if env is not None:
        return max(1, int(env)) if env.isdigit() else 1
    return 2 if (os.cpu_count() or 1) >= 2 and hasattr(os, "fork") else 1


class _Worker:
    """The second half of a big plain file, read by a forked process.

    The split is the first event separator after the middle byte; the worker starts after it and
    reads to the array's end, the parent reads up to it. Whether the separator is really one
    between two events (and not inside a string) is proven by the parent's chunk that ends there
    decoding; until then the worker's result is a guess. A result that cannot be used (a wrong
    guess, any error in the worker, a launch id found in both halves) is dropped and the parent
    reads that half itself, so errors are reported as the one-process reader reports them. The
    worker's columns come back as raw bytes over a pipe (nothing is pickled)."""

    def __init__(self, pid: int, fd: int, stop: int) -> None:
        self.pid, self.fd, self.stop = pid, fd, stop

    @classmethod
    def start(cls, source: Source, first: int, src: str) -> "_Worker | None":
        size = source.size
        if size is None or size < PARALLEL_MIN_BYTES or _workers() < 2:
            return None
        mid = max(size // 2, first + 1)
        fd = source.f.fileno()
        window = os.pread(fd, 1 << 20, mid)
        m = _SEP.search(window)
        if m is None:
            return None
        stop, begin = mid + m.start(), mid + m.end() - 1
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: read the second half, report, exit without cleanup
            code = 0
            try:
                os.close(r)
                _Worker._run(fd, begin, src, w)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        return cls(pid, r, stop)

    @staticmethod
    def _run(fd: int, begin: int, src: str, w: int) -> None:
        at = [begin - 1]

        def readinto(into: memoryview) -> int:  # straight into the window (see _Buf)
            k = os.preadv(fd, [into], at[0])
            at[0] += k
            return k

        acc = _Acc(src)
        blobs: list[Any] = []
        try:
            buf = _Buf(iter(()), begin - 1, readinto)
            buf.fill(2)
            end = _stream_events(buf, 1, acc)
            buf.rest()
            suffix = bytes(buf.b[end:])
            cols = acc.columns()
            # A column of one value (the device, shapes in a trace with node ids...) goes as that value.
            const = {k: int(v[0]) for k, v in cols.items() if len(v) and k != "start" and k != "dur"
                     and bool((v == v[0]).all())}
            report: dict[str, Any] = {
                "names": list(acc.names), "ct_names": acc.ct_names, "launches": list(acc.launches.items()),
                "launch_ends": list(acc.launch_ends.items()),
                "n": acc.n, "suffix": len(suffix), "const": const,
                "other_ph": [acc.other_ph, acc.other_ph_first],
                "cols": [(k, str(v.dtype), len(v)) for k, v in cols.items()]}
            blobs = [v.data.cast("B") for k, v in cols.items() if k not in const] + [suffix]
        except BaseException as e:  # the parent reads this half itself (and reports any error)
            report = {"error": f"{type(e).__name__}: {e}"}
        hb = msgspec.json.encode(report)
        with os.fdopen(w, "wb") as f:
            f.write(len(hb).to_bytes(8, "little"))
            f.write(hb)
            for blob in blobs:
                f.write(blob)

    def join(self, acc: _Acc) -> bytes | None:
        """Add the worker's columns to ``acc`` (the parent's, complete up to the bound); returns
        the document's bytes after the events, or None where the parent must read on itself."""
        with os.fdopen(os.dup(self.fd), "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            head: dict[str, Any] = msgspec.json.decode(f.read(size)) if size else {"error": "died"}
            if "error" in head:
                return None
            theirs = {}
            for k, dt, m in head["cols"]:
                if k in head["const"]:
                    theirs[k] = np.full(m, head["const"][k], dtype=dt)
                    continue
                arr = np.empty(m, dtype=dt)
                if m and f.readinto(arr.data.cast("B")) != arr.nbytes:
                    return None
                theirs[k] = arr
            suffix = f.read(head["suffix"])
        if not acc.launches.keys().isdisjoint(c for c, _ in head["launches"]):
            return None  # reported by the parent's own reading of that half
        # The worker's name (and channel type name) indices are remapped to the parent's.
        remap = np.array([acc.names.setdefault(x, len(acc.names)) for x in head["names"]], dtype=np.int32)
        if len(theirs["name"]):
            theirs["name"] = remap[theirs["name"]]
        if head["ct_names"]:
            ct_map = {}
            for i, x in enumerate(head["ct_names"]):
                if x not in acc.ct_names:
                    acc.ct_names.append(x)
                ct_map[1000 + i] = 1000 + acc.ct_names.index(x)
            theirs["ctype"] = np.array([ct_map.get(int(v), int(v)) for v in theirs["ctype"]], dtype=np.int64)
        theirs["seq"] += acc.n
        for k in _COLS:
            acc.parts[k].append(theirs.pop(k))
        # [id, time] pairs as msgspec decodes them: ints and floats already (encoded from them)
        acc.launches.update(head["launches"])
        acc.launch_ends.update(head["launch_ends"])
        n_other, first_other = head["other_ph"]
        if n_other:
            if acc.other_ph_first < 0:
                acc.other_ph_first = acc.n + int(first_other)
            acc.other_ph += int(n_other)
        acc.n += int(head["n"])
        return suffix

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:  # pragma: no cover
            pass
        try:
            os.kill(self.pid, 9)  # done or not needed: its result was read or dropped
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:  # pragma: no cover
            pass
