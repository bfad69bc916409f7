"""What ingest does when traces asks through its signals for work that outlives the request (a
re-ingest, a simulation's files read after their upload, a ready trace's detail written once
after its parse): a Celery task where Celery is configured, else the process's background
thread (ingest.reingest's, ingest.uploads' and ingest.bodies' queues). The one module that
chooses, above them: they never import the tasks.

ingest.tasks is imported only when Celery is configured: Celery and its dependencies are
memory that the web workers without it never use (cascade/__init__.py)."""

import logging

from django.conf import settings

from ingest import bodies, reingest, uploads

logger = logging.getLogger(__name__)


def request_reingest(sender=None, *, trace_ids: list[str], **kwargs) -> str:
    """Receiver of traces.signals.reingest_requested: says what it did, in a sentence."""
    if settings.CASCADE_CELERY_CONFIGURED:
        return queue_for_celery(trace_ids)
    capacity = settings.CASCADE_REINGEST_QUEUE
    queued = reingest.queue.submit(trace_ids, capacity)
    said = f"re-ingest in the background: {queued.started} started, {queued.waiting} waiting"
    if queued.refused:
        said += (
            f", {queued.refused} refused: {capacity} already wait (CASCADE_REINGEST_QUEUE), "
            "ask again once they are done"
        )
    else:
        said += ", 0 refused"
    return said + "; reload the page to see the result"


def queue_for_celery(trace_ids: list[str]) -> str:
    """A task per trace; a broker that fails half-way is said, with what was queued before."""
    from ingest.tasks import parse_trace_task

    for done, trace_id in enumerate(trace_ids):
        try:
            parse_trace_task.delay(trace_id, reparse=True)
        except Exception as error:
            if not done:
                raise  # nothing queued: the caller says the broker's error
            return f"{done} queued for re-ingestion, {len(trace_ids) - done} not: {error}"
    if len(trace_ids) == 1:
        return "queued for re-ingestion; a Celery worker parses it"
    return f"{len(trace_ids)} queued for re-ingestion; Celery workers parse them"


def upload_completed(
    sender=None,
    *,
    trace_id: str,
    name: str,
    multipart: list[dict],
    username: str,
    staff: bool = False,
    **kwargs,
) -> str:
    """Receiver of traces.signals.simulation_upload_completed: completes the multipart uploads,
    moves the checked files into place, registers the folder and starts its read; the
    simulation's state now."""
    simulation = uploads.complete(trace_id, name, multipart, username=username, staff=staff)
    read_soon(trace_id)
    return uploads.state_now(simulation)


def read_soon(trace_id: str) -> None:
    """A Celery task where Celery is configured, else the process's background thread; a broker
    away is logged and the thread reads it (the next pass would, later)."""
    if settings.CASCADE_CELERY_CONFIGURED:
        from ingest.tasks import read_simulations_task

        try:
            read_simulations_task.delay(trace_id)
            return
        except Exception:
            uploads.logger.exception("%s: cannot queue the simulations' read, reading it here", trace_id)
    queued = uploads.queue.submit([trace_id], settings.CASCADE_REINGEST_QUEUE)
    if queued.refused:
        uploads.logger.warning(
            "%s: the background queue is full (CASCADE_REINGEST_QUEUE): the next pass reads it", trace_id
        )


def write_detail_bodies_soon(sender=None, *, trace, **kwargs) -> None:
    """Receiver of traces.signals.trace_parsed: a ready large trace's detail written once, by a
    Celery task where Celery is configured, else by the process's background thread (a broker
    away is logged and the thread writes it). Until it is written, GETs compute it. The
    encoders are imported on a ready trace's first parse, not in every process that starts."""
    from traces import detail_bodies

    if not detail_bodies.worth_writing(trace.state, trace.kernel_count):
        return
    if settings.CASCADE_CELERY_CONFIGURED:
        from ingest.tasks import write_detail_bodies_task

        try:
            write_detail_bodies_task.delay(trace.id)
            return
        except Exception:
            logger.exception("%s: cannot queue its detail's write, writing it here", trace.id)
    if bodies.write_at_the_end(trace.id):  # a process that ends with its pass: at its end
        return
    if bodies.bodies.submit([trace.id], settings.CASCADE_REINGEST_QUEUE).refused:
        logger.warning(
            "%s: the background queue is full (CASCADE_REINGEST_QUEUE): its detail is computed on each GET "
            "until its next parse",
            trace.id,
        )
