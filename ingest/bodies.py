"""A ready trace's detail written once, without Celery: the process's background thread
(`bodies`; ingest.receivers queues a Celery task instead where Celery is configured, and
chooses). A process that ends with its pass (a one-shot `ingest_traces`, a parse process)
waits for what it queued: a write cut short leaves nothing, and nothing would write it again."""

import logging

from django.db import connections

from ingest.queues import ReingestQueue

logger = logging.getLogger(__name__)

# How long a process that ends with its pass waits for the details it queued to be written.
WAIT_SECONDS = 3600


def write_in_background(trace_id: str) -> None:
    from traces import detail_bodies  # the encoders: on a trace's first parse, not at start-up

    try:
        detail_bodies.write_in_background(trace_id)
    finally:
        connections.close_all()


bodies = ReingestQueue(write_in_background, name="cascade-detail-bodies")


def wait_for_detail_bodies(timeout: float = WAIT_SECONDS) -> bool:
    """True once the details this process queued are written; False (and logged) after `timeout` s."""
    done = bodies.wait_idle(timeout)
    if not done:
        logger.warning("details still being written after %s s: left to the next parse", timeout)
    return done
