"""Re-ingestion asked for by an operator: queued for Celery, or in a background thread.

Never in the web request: a large trace takes longer to parse than a web server lets a
request run (gunicorn's timeout would kill the worker mid-COPY). The trace's lock makes the
parse safe whoever runs it, and a parse cut short leaves `parsing`, which the next pass
finishes.
"""

import logging
import threading

from django.conf import settings
from django.db import connections

from ingest import passes

logger = logging.getLogger(__name__)

# The last background re-ingest started, for tests and for a clean shutdown.
background: list[threading.Thread] = []


def request_reingest(sender=None, *, trace_id: str, **kwargs) -> str:
    """Receiver of traces.signals.reingest_requested: says what it did, in a sentence."""
    if settings.CASCADE_CELERY_CONFIGURED:
        from ingest.tasks import parse_trace_task

        parse_trace_task.delay(trace_id, reparse=True)
        return "queued for re-ingestion; a Celery worker parses it"
    thread = threading.Thread(
        target=reingest_in_background, args=(trace_id,), name=f"reingest {trace_id}", daemon=True
    )
    thread.start()
    background[:] = [thread]
    return "re-ingesting in the background; reload the page to see the result"


def reingest_in_background(trace_id: str) -> None:
    try:
        change = passes.ingest_trace(trace_id, reparse=True)
        logger.info("%s: re-ingested: %s", trace_id, change or "nothing to do")
    except Exception:  # S3 away: the next pass tries again
        logger.exception("%s: re-ingest failed, the next pass tries again", trace_id)
    finally:
        connections.close_all()
