"""The recorder's writer thread: a graph's file, built off the program's capture path.

The tracker hands over what it read in the CUDA callback (:class:`~.tracker.GraphJob`); the writer
completes the export (``export.build``: ``get_graph_data()``'s schema, tools ids
``(exec_id << 32) | local id``), turns the kept frames into source lines (``attribution``, with the
model lines of compiled code: ``inductor.py``), adds the environment block, encodes (msgspec) and
writes the file, then the process's ``index.json``. Stacks shared by many nodes (a layer loop) are
resolved once.

The writer makes **no CUDA call**: one there could wait on a driver lock that the instantiating
thread holds while that thread waits for the writer's GIL, and a call from another thread can
invalidate a capture running in "global" mode. It waits for quiet: no capture in progress and none
ended in the last ``writer_quiet_s`` (longer than the ``gc.collect()`` that ``torch.cuda.graph``
runs before each capture), at most ``_MAX_DEFER_S`` after the graph came, and again between its
steps when a capture has begun meanwhile. While idle it refreshes the index every
``index_refresh_s`` when the replay counts changed, so that a process killed later (SIGKILL) leaves
its replays up to then.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any, Callable

import msgspec

from cgtool.artifacts.recording import ExportRecord, write_atomic
from cgtool.capture.record import attribution
from cgtool.capture.record.exits import signals_to_other_threads
from cgtool.capture.record.tracker import GraphJob, GraphTracker

_MAX_DEFER_S = 2.0


class Writer:
    """One thread writing graphs and index refreshes, in the order they came."""

    def __init__(self, out_dir: str, tracker: GraphTracker, *, quiet_s: float, refresh_s: float,
                 write_index: Callable[[], None], environment: Callable[[int | None], dict[str, Any]]) -> None:
        self.out_dir = out_dir
        self.tracker = tracker
        self.quiet_s = quiet_s
        self.refresh_s = refresh_s
        self.write_index = write_index
        self.environment = environment
        self.docs: dict[int, dict[str, Any]] = {}
        self.errors: list[str] = []
        self.finishing = False
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._hurry = threading.Event()  # set: the writer writes at once (a flush, the end of the run)
        self._site_cache: dict[Any, tuple[Any, dict[str, Any]]] = {}
        self._counts_written: dict[int, int] | None = None
        self._dirty = False

    def mark_dirty(self) -> None:
        """Something the index shows changed (a child started or ended): refreshed when idle."""
        self._dirty = True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="cgtool-record-writer", daemon=True)
        self._thread.start()
        self._queue.put(("index",))

    def submit(self, job: GraphJob) -> None:
        self._queue.put(("graph", job))

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def on_writer_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every graph handed over is on disk (False on timeout or no writer)."""
        if not self.alive or self.on_writer_thread():
            return False
        done = threading.Event()
        self._hurry.set()
        self._queue.put(("flush", done))
        return done.wait(timeout)

    def write_index_now(self, timeout: float = 5.0) -> bool:
        """Write the index after what is queued, and wait for it (False on timeout or no writer)."""
        if not self.alive or self.on_writer_thread():
            return False
        self._queue.put(("index",))
        return self.flush(timeout)

    def stop(self, timeout: float = 60.0) -> None:
        """Write what is queued at once, then end the thread."""
        if self.alive and not self.on_writer_thread():
            self._hurry.set()
            self._queue.put(None)
            assert self._thread is not None
            self._thread.join(timeout)

    def restart_after_fork(self) -> None:
        """In a forked child: the parent's thread is gone, its queue and event may be mid-use."""
        self._queue = queue.SimpleQueue()
        self._hurry = threading.Event()
        self.docs = {}
        self._counts_written = None
        self.finishing = False
        self.start()

    # ------------------------------------------------------------------ waiting
    def _wait_quiet(self, queued_at: float) -> None:
        """Hold a graph back while the program is capturing graphs back to back.

        Writing a graph holds the GIL for about a millisecond (sources, encoding, index); the
        program's next capture, running meanwhile, would wait for it (measured with
        ``benchmarks/probe_record_capture.py``). So the writer starts once no capture is in
        progress and none has ended for ``quiet_s`` — or ``_MAX_DEFER_S`` after the graph came,
        so that a program capturing without pause still gets its files — and waits again between
        its steps when a capture has begun meanwhile. The quiet time is longer than the full
        collection ``torch.cuda.graph`` runs before each capture (``gc.collect()``, long in a
        torch process): a quiet time shorter than it let the writer start during it, and slowed the
        second graph of a fresh recorded process (docs/performance.md#hand-written-code). A flush,
        the end of the run and every exit path the guards catch (``exits.py``) end the wait at once.
        """
        quiet, most = self.quiet_s, queued_at + _MAX_DEFER_S
        tracker = self.tracker
        while quiet > 0 and not self._hurry.is_set():
            now = time.perf_counter()
            if now >= most:
                return
            if not tracker.captures:
                idle = now - tracker.last_capture_at
                if idle >= quiet:
                    return
                wait = quiet - idle
            else:
                wait = quiet
            self._hurry.wait(min(wait, most - now))

    def _loop(self) -> None:
        signals_to_other_threads()
        while True:
            try:
                timeout = self.refresh_s if self.refresh_s > 0 else None
                job = self._queue.get(timeout=timeout)
            except queue.Empty:
                self._refresh()
                continue
            if job is None:
                return
            try:
                if job[0] == "graph":
                    self._wait_quiet(job[1].queued_at)
                    self._write_graph(job[1])
                elif job[0] == "index":
                    self.write_index()
                elif job[0] == "flush":
                    if not self.finishing:
                        self._hurry.clear()  # the graphs asked for are written: hold the next ones again
                    job[1].set()
            except Exception as e:  # a failed write is reported in the index, the program goes on
                if len(self.errors) < 20:
                    self.errors.append(f"writer: {type(e).__name__}: {e}")

    def _refresh(self) -> None:
        """The index again when replays were counted since it was written (and no capture runs)."""
        tracker = self.tracker
        if tracker.captures or time.perf_counter() - tracker.last_capture_at < self.quiet_s:
            return
        try:
            counts = tracker.all_launches()
            if counts != self._counts_written or self._dirty:
                self._counts_written, self._dirty = counts, False
                self.write_index()
        except Exception as e:
            if len(self.errors) < 20:
                self.errors.append(f"writer: {type(e).__name__}: {e}")

    # ------------------------------------------------------------------ a graph
    def site(self, info: Any) -> dict[str, Any]:
        """A node's source block from what its callback kept (a tuple, or the compiled callback's bytes)."""
        # Nodes made from the same lines (a layer loop) share frames: resolve each stack once. A node
        # info packed by the compiled callback is its own key (the frames' code objects, offsets,
        # module, op and range, which the callback keeps alive); a tuple's key is built from the same.
        key: Any = None
        if isinstance(info, bytes):
            key = info
            hit = self._site_cache.get(key)
            if hit is not None:
                return hit[1]
            unpacked = self.tracker.sub.nodecb.unpack(info)
        else:
            unpacked = info
            node, fallback = info
            if fallback is None:
                codes, lastis, module, module_index, op, rf = node
                key = (tuple(map(id, codes)), tuple(lastis), id(module), module_index, op, rf)
                hit = self._site_cache.get(key)
                if hit is not None:
                    return hit[1]
        site = attribution.resolve_node(unpacked[0], unpacked[1]).to_json()
        if key is not None:
            if len(self._site_cache) > 50_000:
                self._site_cache.clear()
            self._site_cache[key] = (unpacked, site)  # the info keeps the code objects, so their ids stay theirs
        return site

    def _write_graph(self, job: GraphJob) -> None:
        from cgtool.capture.export import build

        tracker = self.tracker
        rec = job.rec

        def pause() -> None:  # between steps: a capture that began meanwhile goes first
            if tracker.captures:
                self._wait_quiet(job.queued_at)

        t0 = time.perf_counter()
        data = build(job.raw, with_environment=False).data
        rec.export_s += time.perf_counter() - t0
        pause()
        meta = data["cgtool"]
        meta["timings"]["export_s"] = rec.export_s
        meta["environment"] = self.environment(job.device)
        extras: list[dict[str, Any]] = meta["nodes"]
        compiled = None
        for i, h in enumerate(job.handles):
            info = job.infos.get(h)
            if info is None or i >= len(extras):
                continue
            src = self.site(info)
            extras[i]["source"] = src
            if compiled is None and src.get("generated"):
                compiled = str(src["generated"]).rsplit(":", 1)[0]
        pause()
        begin = attribution.resolve(job.begin_frames)
        where = f"{os.path.basename(begin.file)}:{begin.line}" if begin.file else "?"
        rec.label = f"#{rec.seq} {where}"
        rec.captured_at = f"{begin.file}:{begin.line}" if begin.file else None
        rec.compiled = compiled
        meta["record"] = msgspec.to_builtins(ExportRecord(
            label=rec.label, seq=rec.seq, captured_at=begin.to_struct(), template_graph_id=rec.template_graph_id,
            pool=rec.pool, reserved_during_capture=rec.reserved_during_capture, replays=rec.replays,
            compiled_code=rec.compiled, capture_inputs=rec.shapes,
            thread="main" if rec.thread == tracker.main else rec.thread, time_since_start_s=rec.since_start_s,
            pid=os.getpid()))
        timings = meta["timings"]
        timings["capture_s"] = rec.capture_s
        timings["instantiate_s"] = rec.instantiate_s
        pause()
        write_atomic(os.path.join(self.out_dir, rec.file), data)
        self.docs[rec.seq] = data
        rec.write_s = time.perf_counter() - t0
        rec.written = True
        pause()
        self.write_index()
