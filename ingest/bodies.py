"""A ready trace's detail written once, without Celery (ingest.receivers queues a Celery task
instead where Celery is configured, and chooses): on the process's background thread
(`bodies`), or, in a process that ends with its pass (a one-shot `ingest_traces`, a parse
process), on the pass's own thread once the pass is done (`written_at_the_end`).

Why not the thread there too: the process would have to wait for it anyway (a write cut short
leaves nothing, and nothing would write it again), and a thread allocates from a heap of its
own, so the write's memory (a computed GET's) would add to what the parse left on the main
one; after the pass, on the pass's thread, it reuses it: the process's peak stays the parse's.
"""

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connections

from ingest.queues import ReingestQueue

logger = logging.getLogger(__name__)


def write_in_background(trace_id: str) -> None:
    from traces import detail_bodies  # the encoders: on a trace's first parse, not at start-up

    try:
        detail_bodies.write_in_background(trace_id)
    finally:
        connections.close_all()


bodies = ReingestQueue(write_in_background, name="cascade-detail-bodies")

# The traces whose details a process ending with its pass writes at its end (None: elsewhere).
_at_the_end: list[str] | None = None
_at_the_end_lock = threading.Lock()


@contextmanager
def written_at_the_end() -> Iterator[None]:
    """The details the parses inside ask for are written here, on this thread, once they are
    done (not if they raise: the next parse asks again)."""
    global _at_the_end
    with _at_the_end_lock:
        _at_the_end = []
    try:
        yield
    finally:
        with _at_the_end_lock:
            held, _at_the_end = _at_the_end, None
    from traces import detail_bodies

    for trace_id in dict.fromkeys(held):
        detail_bodies.write_in_background(trace_id)


def write_at_the_end(trace_id: str) -> bool:
    """Keep the trace for `written_at_the_end`'s end, if this process is inside one: whether it was."""
    with _at_the_end_lock:
        if _at_the_end is None:
            return False
        _at_the_end.append(trace_id)
        return True
