"""A ready trace's detail written once, without Celery (ingest.receivers queues a Celery task
instead where Celery is configured, and chooses): on the process's background thread
(`bodies`), or, for a process that ends with its pass (a one-shot `ingest_traces`, a parse
process), by a process of its own started once the pass is done (`written_at_the_end`).

Why a process: the write costs what a computed GET does (a 1M-launch detail: some 15 s and
13 MB), which would add to the pass's time and peak if this process did it, before or after
its parse; and a thread would die with the process. `manage.py write_detail_bodies` outlives
the command that started it, as a Celery task would.
"""

import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
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

# Where `write_in_a_process`'s process logs, in CASCADE_VAR_DIR.
WRITER_LOG = "write_detail_bodies.log"

# The traces whose details a process ending with its pass writes at its end (None: elsewhere).
_at_the_end: list[str] | None = None
_at_the_end_lock = threading.Lock()


@contextmanager
def written_at_the_end() -> Iterator[None]:
    """The details the parses inside ask for are handed, once they are done, to a process of
    their own (`write_in_a_process`); not if they raise: the next parse asks again."""
    global _at_the_end
    with _at_the_end_lock:
        _at_the_end = []
    try:
        yield
    finally:
        with _at_the_end_lock:
            held, _at_the_end = _at_the_end, None
    if held:
        write_in_a_process(list(dict.fromkeys(held)))


def write_in_a_process(trace_ids: list[str]) -> None:
    """`manage.py write_detail_bodies TRACE_ID...`, started in a session of its own and not
    waited for: it goes on once this process has exited. What it logs goes to WRITER_LOG in
    the var folder, not to this process's output, which a pipe (`ingest_traces | tee`) would
    otherwise hold open until the write ends."""
    command = [sys.executable, str(settings.BASE_DIR / "manage.py"), "write_detail_bodies", *trace_ids]
    log = settings.VAR_DIR / WRITER_LOG
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        output = log.open("ab")
    except OSError:
        output, log = subprocess.DEVNULL, None
    try:
        subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=output, stderr=output, start_new_session=True
        )
    finally:
        if log is not None:
            output.close()
    logger.info("detail of %s: written by a process of its own (its log: %s)", ", ".join(trace_ids), log)


def write_at_the_end(trace_id: str) -> bool:
    """Keep the trace for `written_at_the_end`'s end, if this process is inside one: whether it was."""
    with _at_the_end_lock:
        if _at_the_end is None:
            return False
        _at_the_end.append(trace_id)
        return True
