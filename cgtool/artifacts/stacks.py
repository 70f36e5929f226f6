"""The stack dumps of a recorded process (``OUT/p<PID>/stacks.txt``): Python's faulthandler text.

``cgtool/capture/record/stops.py`` has faulthandler append to that file whenever the process gets
SIGTERM, SIGINT, SIGHUP or SIGQUIT, a fatal error, or (``--hang-after S``) goes S seconds without
making progress. Each dump is one block per thread, innermost frame first::

    Timeout (0:00:30)!                              <- a --hang-after dump; none for a signal
    Thread 0x00007f2a1c7fe640 (most recent call first):
      File "/usr/lib/python3.11/threading.py", line 320 in wait
    <blank>
    Current thread 0x00007f2a2c9b8740 (most recent call first):
      File "/home/u/prog.py", line 31 in main

A new dump starts at a ``Timeout`` or ``Fatal Python error`` line, or where a thread already seen in
the current dump appears again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+|\?\?\?) in (.*?)\s*$')
_TIMEOUT = re.compile(r"^Timeout \(([^)]*)\)!\s*$")
_FATAL = re.compile(r"^Fatal Python error: (.*)$")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int | None
    function: str


@dataclass
class ThreadStack:
    ident: str  # as faulthandler prints it: 0x00007f...
    current: bool  # the thread that received the signal (faulthandler's "Current thread")
    frames: list[Frame] = field(default_factory=list)  # innermost first


@dataclass
class Dump:
    """One dump: why (``timeout`` for a stall, ``fatal`` with the error, else ``signal``) and the threads."""

    cause: str
    detail: str | None
    threads: list[ThreadStack] = field(default_factory=list)

    def thread(self, ident: str | None) -> ThreadStack | None:
        """The thread ``ident`` (the process's main thread, from its index), else the current one."""
        if ident is not None:
            for t in self.threads:
                if t.ident.lower() == ident.lower():
                    return t
        return next((t for t in self.threads if t.current), self.threads[0] if self.threads else None)


def parse(text: str) -> list[Dump]:
    """Every dump in a faulthandler file, in the order written."""
    dumps: list[Dump] = []
    cur: Dump | None = None
    thread: ThreadStack | None = None
    for line in text.splitlines():
        m = _TIMEOUT.match(line)
        f = _FATAL.match(line) if m is None else None
        if m or f:
            cur = Dump("timeout", m.group(1)) if m else Dump("fatal", f.group(1) if f else None)
            dumps.append(cur)
            thread = None
            continue
        t = _THREAD.match(line)
        if t:
            ident = t.group(2)
            if cur is None or any(x.ident == ident for x in cur.threads):
                cur = Dump("signal", None)
                dumps.append(cur)
            thread = ThreadStack(ident, t.group(1) == "Current thread")
            cur.threads.append(thread)
            continue
        fr = _FRAME.match(line)
        if fr and thread is not None:
            ln = fr.group(2)
            thread.frames.append(Frame(fr.group(1), int(ln) if ln.isdigit() else None, fr.group(3)))
    return [d for d in dumps if d.threads]


def read(folder: Path, name: str = "stacks.txt", max_bytes: int = 4 << 20) -> list[Dump]:
    """The dumps of one process's folder; [] when it has none (an empty or missing file)."""
    try:
        with open(folder / name, "rb") as fh:
            data = fh.read(max_bytes)
    except OSError:
        return []
    return parse(data.decode("utf-8", errors="replace"))


_LIBRARY = re.compile(r"([/\\](site|dist)-packages[/\\])|([/\\]lib[/\\]python\d+(\.\d+)?[/\\])|^<frozen ")


def is_program_file(path: str) -> bool:
    """A frame of the program's own code: not an installed package's, not the standard library's,
    not cgtool's, not generated (``<string>`` is the program's own ``-c``)."""
    p = path.replace("\\", "/")
    if _LIBRARY.search(p) or "/cgtool/" in p:
        return False
    return not (p.startswith("<") and p != "<string>" and p != "<stdin>")


@dataclass(frozen=True)
class StoppedAt:
    """Where a thread stood: the innermost line of the program's own code, and what it was calling
    there (the next frame in, a library function) when there is one."""

    site: str | None  # file:line of the program
    function: str | None  # the program's function holding that line
    calling: str | None  # the library function it was inside (destroy_process_group)
    innermost: str | None  # file:line of the innermost frame, whoever's

    def text(self) -> str:
        import os

        if self.site is None:
            # no frame of the program's own: the innermost frame says where (a launcher, a library)
            return f"{self.innermost} (no frame of the program)" if self.innermost else "unknown (no Python frame)"
        path, _, line = self.site.rpartition(":")
        where = f"{os.path.basename(path)}:{line}"
        return f"{self.calling} ({where})" if self.calling else f"{self.function} ({where})"


def stopped_at(thread: ThreadStack) -> StoppedAt:
    fr = thread.frames
    innermost = f"{fr[0].file}:{'???' if fr[0].line is None else fr[0].line}" if fr else None
    for i, f in enumerate(fr):
        if is_program_file(f.file):
            calling = fr[i - 1].function if i > 0 else None
            return StoppedAt(f"{f.file}:{f.line}", f.function, calling, innermost)
    return StoppedAt(None, None, None, innermost)
