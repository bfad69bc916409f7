"""The process's background threads without Celery: one worker thread per queue and process,
the work waiting for it bounded (`ReingestQueue`). ingest.reingest's re-ingests, ingest.uploads'
simulation reads and ingest.bodies' detail writes each have one. Imports nothing of ingest's,
so that any module may hold a queue without an import circle (ingest.passes imports
ingest.bodies, which ingest.reingest's import of ingest.passes would close)."""

import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Queued:
    """What became of one request: traces started at once, waiting, refused (queue full)."""

    started: int = 0
    waiting: int = 0
    refused: int = 0


class ReingestQueue:
    """One worker thread per process, and the traces waiting for it (each at most once);
    `work(trace_id)` is what the thread does with each, and must not raise."""

    def __init__(self, work: Callable[[str], None], name: str = "cascade-reingest"):
        self.work, self.name = work, name
        self._changed = threading.Condition()
        self.running: str | None = None
        self.waiting: deque[str] = deque()
        self._worker: tuple[int, threading.Thread] | None = None  # (pid, thread)

    def submit(self, trace_ids: list[str], capacity: int) -> Queued:
        """Hand the traces to the worker: the first starts if it is idle, the others wait
        while fewer than `capacity` do; a trace already waiting is not added again."""
        queued = Queued()
        with self._changed:
            self._start_worker()
            for trace_id in trace_ids:
                if trace_id in self.waiting:
                    queued.waiting += 1
                elif self.running is None and not self.waiting:
                    self.running = trace_id
                    queued.started += 1
                elif len(self.waiting) < capacity:
                    self.waiting.append(trace_id)
                    queued.waiting += 1
                else:
                    queued.refused += 1
            self._changed.notify_all()
        return queued

    def wait_idle(self, timeout: float) -> bool:
        """True once nothing runs or waits (tests, a clean shutdown); False after `timeout` s."""
        with self._changed:
            return self._changed.wait_for(lambda: self.running is None and not self.waiting, timeout)

    def _start_worker(self) -> None:
        # After a fork (a server that preloads the app) the child has no thread: it makes its own.
        if self._worker is None or self._worker[0] != os.getpid() or not self._worker[1].is_alive():
            thread = threading.Thread(target=self._work, name=self.name, daemon=True)
            self._worker = (os.getpid(), thread)
            thread.start()

    def _work(self) -> None:
        while True:
            with self._changed:
                while self.running is None:
                    if self.waiting:
                        self.running = self.waiting.popleft()
                    else:
                        self._changed.wait()
                trace_id = self.running
            try:
                self.work(trace_id)
            finally:
                with self._changed:
                    self.running = None
                    self._changed.notify_all()
