"""Re-ingestion asked for by an operator, without Celery: the process's one background worker
(ingest.receivers queues a Celery task instead where Celery is configured). The worker's queue is
an `ingest.queues.ReingestQueue`, as are uploads.py's (a simulation read at once when its
upload is complete) and bodies.py's (a ready trace's detail written once).

Never in the web request: a large trace takes longer to parse than a web server lets a
request run (gunicorn's timeout would kill the worker mid-COPY). Without Celery, a web
process parses one trace at a time on one thread of its own, the others waiting in a queue of
at most CASCADE_REINGEST_QUEUE traces: a selection of hundreds of traces must not start
hundreds of threads, each with a database connection and a whole parse. The trace's lock
makes the parse safe whoever runs it, and a parse cut short leaves `parsing`, which the next
pass finishes.
"""

import logging

from django.db import connections

from ingest import failures, passes
from ingest.queues import Queued, ReingestQueue

__all__ = ["Queued", "ReingestQueue", "queue", "reingest_in_background"]

logger = logging.getLogger(__name__)


def reingest_in_background(trace_id: str) -> None:
    try:
        change = passes.ingest_trace(trace_id, reparse=True)
        logger.info("%s: re-ingested: %s", trace_id, change or "nothing to do")
    except failures.ParseAttemptFailed as error:  # logged with its traceback, and counted
        logger.warning("%s: re-ingest: %s", trace_id, error)
    except Exception:  # S3 away: the next pass tries again
        logger.exception("%s: re-ingest failed, the next pass tries again", trace_id)
    finally:
        connections.close_all()


queue = ReingestQueue(reingest_in_background)
