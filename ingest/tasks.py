"""Ingestion on a schedule, fanned out across Celery workers.

Beat sends `poll_bucket_task` every CASCADE_POLL_SECONDS. It registers and updates traces
(`passes.scan_bucket`) and enqueues one `parse_trace_task` per trace ready to parse, which
runs `passes.ingest_trace`: the same functions as `manage.py ingest_traces`, split so that
N workers parse N traces at once. One trace is never parsed twice at once, whoever asks:
`ingest_trace` holds the trace's lock. This module adds what a queue needs on top: polls
that do not overlap, no second message for a trace already queued, retries on S3 and database
trouble, and a trace that ends failed, never stuck in `parsing`, when its parse is given up.
Any other error is ingest.failures' to judge, exactly as in `manage.py ingest_traces`.

With CASCADE_SQS_QUEUE_URL, beat also sends `s3_events_task` every few seconds: a batch of S3
events (ingest.events), its runs ingested in the task, as `ingest_traces --events` does; the
poll then reconciles every CASCADE_POLL_SECONDS_WITH_EVENTS, one page of the bucket a poll
(ingest.sweep), as `ingest_traces --watch --events` does.
"""

import logging
from functools import cache
from urllib.parse import urlsplit

import redis
from billiard.exceptions import WorkerLostError
from botocore.exceptions import BotoCoreError, ClientError
from celery import shared_task, signals
from celery.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded
from django.conf import settings

import cascade.celery  # noqa: F401  (shared tasks bind to Cascade's app)
from cascade import metrics
from ingest import events, failures, metering, passes, simulations, sweep, uploads
from traces.locks import trace_lock
from traces.models import Trace
from traces.services import TraceBusy, trace_mark_failed

logger = logging.getLogger(__name__)

# S3, the network, the database away: worth another try (ingest.failures' policy). A trace's
# own faults do not raise: they fail it; an error of ours is counted on the trace and raised
# as ParseAttemptFailed, which the next poll's parse tries again.
RETRY_ON = failures.TRANSIENT_ERRORS
# Tries after the first, whether S3 or a killed worker ended the try (10 s, 20 s, ... apart).
MAX_RETRIES = 5
# The poll's lock, taken like a trace's: no run folder's name contains "/".
POLL_LOCK = "/poll_bucket"
POLL_TIME_LIMIT = 600
EVENTS_LOCK = "/s3_events"


@shared_task(acks_late=False, soft_time_limit=POLL_TIME_LIMIT, time_limit=POLL_TIME_LIMIT + 60)
@metrics.measured_pass("poll_bucket_task")
def poll_bucket_task() -> int:
    """Register what landed and queue a parse for each trace ready for one.

    A poll that finds the previous one still running returns at once, and beat's expiry
    drops polls nobody took in time: slow polls do not pile up. Not acknowledged late:
    a poll lost with its worker is replaced by the next one.
    """
    with trace_lock(POLL_LOCK) as acquired:
        if not acquired:
            logger.info("poll skipped: the previous poll is still running")
            return 0
        # With events on, the poll reconciles: a page of the bucket, not all of it (ingest.sweep).
        scan_pass = sweep.sweep_bucket if settings.CASCADE_SQS_QUEUE_URL else passes.scan_bucket
        with metering.measured() as cost:
            scan = scan_pass(
                reparse_outdated=settings.CASCADE_REPARSE_OUTDATED,
                outdated_batch=settings.CASCADE_REPARSE_OUTDATED_BATCH,
            )
        cost.runs = scan.listed
    for change in scan.changes:
        logger.info("%s", change)
    queued = 0
    for trace_id in scan.to_parse:
        if not mark_queued(trace_id):
            continue
        try:
            parse_trace_task.delay(trace_id, reparse=trace_id in scan.to_reparse)
        except Exception:
            # Not queued after all (the broker refused): the next poll must be free to try.
            clear_queued(trace_id)
            raise
        queued += 1
    swept = f"; {scan.swept}" if scan.swept is not None else ""
    logger.info("poll: %d traces looked at, %d parses queued; %s%s", scan.listed, queued, cost, swept)
    # Simulations are read here, in the poll: a trace a queued parse makes ready is paired on
    # the next poll (its updated_at moved past its simulations').
    for change in simulations.simulation_pass(scan.looked_at, listings=scan.simulation_listings):
        logger.info("%s", change)
    return queued


@shared_task(acks_late=False)
@metrics.measured_pass("s3_events_task")
def s3_events_task() -> events.BatchResult | None:
    """Ingest the runs one batch of S3 events names; delete the messages of those settled.

    One batch at a time, whichever worker takes it (the lock): the others return at once, and
    beat's expiry drops those nobody took. The runs are ingested in this task, not queued as
    parses: a message is deleted only once its run's change is committed, and a failed ingest
    leaves it for SQS to hand out again. A long parse holds the batch (the queue's visibility
    timeout must outlast it, or its message comes back meanwhile and finds the run held).
    """
    with trace_lock(EVENTS_LOCK) as acquired:
        if not acquired:
            return None
        result = events.consume_batch(settings.CASCADE_SQS_QUEUE_URL)
    for change in result.changes:
        logger.info("%s", change)
    if result.received:
        logger.info("events: %s", result.summary())
    return result


@shared_task(
    bind=True,
    autoretry_for=RETRY_ON,
    retry_backoff=10,
    retry_backoff_max=300,
    max_retries=MAX_RETRIES,
    # A worker killed mid-parse (out of memory, a deploy) counts as a try too: a trace that
    # kills every worker it meets is failed after MAX_RETRIES, not handed out forever.
    retry_on_worker_lost=True,
    default_retry_delay=10,
)
def parse_trace_task(self, trace_id: str, reparse: bool = False) -> str | None:
    """Bring one trace up to date with its objects, on whichever worker takes it.

    Retried with backoff on S3, network and database errors; a trace given up on is failed by
    `parse_given_up`. Any other error goes through ingest.failures, as in `ingest_traces`:
    counted, and the trace failed at the CASCADE_PARSE_ATTEMPTS-th; until then the next
    poll queues it again.
    """
    try:
        with metering.measured() as cost:
            change = passes.ingest_trace(trace_id, reparse=reparse)
    except failures.ParseAttemptFailed as error:  # logged with its traceback, and counted
        clear_queued(trace_id)
        logger.warning("%s: %s", trace_id, error)
        return None
    clear_queued(trace_id)
    if change is None:
        return None
    logger.info("%s; %s", change, cost)
    return str(change)


@shared_task(
    acks_late=False,
    autoretry_for=RETRY_ON,
    retry_backoff=10,
    retry_backoff_max=300,
    max_retries=MAX_RETRIES,
)
def read_simulations_task(trace_id: str) -> int:
    """A run's simulations read at once after an upload completed (ingest.uploads), on a
    worker; retried on S3 and database trouble, and a read given up is the next poll's."""
    return uploads.read_simulations(trace_id)


@shared_task(acks_late=False)
def write_detail_bodies_task(trace_id: str) -> dict[str, int]:
    """A ready trace's detail written once in every coding, on a worker, after its parse
    (ingest.receivers); a write that fails is logged and GETs compute the detail until the next
    parse. {coding: bytes written}."""
    from traces import detail_bodies

    return detail_bodies.detail_bodies_write(trace_id)


@signals.task_failure.connect
def parse_given_up(sender=None, args=(), kwargs=None, exception=None, **_) -> None:
    """Fail the trace of a parse that will not be tried again, with the reason.

    Celery sends this once retries are spent, on a time limit and on an unexpected error,
    in whichever process saw the end (the worker's own when its child was killed).
    """
    if sender is None or sender.name != parse_trace_task.name:
        return
    trace_id = (kwargs or {}).get("trace_id") or args[0]
    clear_queued(trace_id)
    try:
        # Given up for S3 trouble: the next poll tries again. For a time limit or a worker
        # killed again and again: not until the trace's files change.
        kind, reason = given_up_reason(exception)
        trace_mark_failed(trace_id, reason, retry=isinstance(exception, RETRY_ON))
        failures.trace_failed(trace_id, kind, reason)
    except Trace.DoesNotExist:
        logger.warning("%s: parse given up for a trace that does not exist", trace_id)
    except TraceBusy:
        logger.info("%s: parse given up here, but another pass is ingesting it: left to that one", trace_id)


def given_up_reason(exception: BaseException) -> tuple[str, str]:
    """(the failure's kind, as ingest.failures names them; the trace's error)."""
    if isinstance(exception, SoftTimeLimitExceeded | TimeLimitExceeded):
        return failures.TIMEOUT, (
            f"parsing took longer than CASCADE_PARSE_SECONDS ({settings.CASCADE_PARSE_SECONDS} s)"
        )
    if isinstance(exception, WorkerLostError):
        return failures.WORKER_LOST, (
            f"parsing was cut short {MAX_RETRIES + 1} times (worker killed, out of memory?): {exception}"
        )
    if isinstance(exception, BotoCoreError | ClientError | ConnectionError):
        return failures.UNREACHABLE, f"S3 unreachable after {MAX_RETRIES + 1} tries: {exception}"
    if isinstance(exception, RETRY_ON):
        return failures.UNREACHABLE, f"the database unreachable after {MAX_RETRIES + 1} tries: {exception}"
    return failures.INTERNAL, failures.internal_message(exception)


# --- Queue bookkeeping in the broker's Redis --------------------------------------------------
# A trace stays ready-to-parse until its parse ends, so every poll in between would queue it
# again: after a burst of uploads the queue would hold (traces x polls) messages. A marker per
# queued trace stops that. It only saves messages; the trace's lock is what prevents double
# parses, so on a broker other than Redis the markers are simply skipped.


@cache
def redis_for(url: str) -> redis.Redis | None:
    return redis.Redis.from_url(url) if urlsplit(url).scheme in ("redis", "rediss") else None


def queued_key(trace_id: str) -> str:
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}:queued:{trace_id}"


def mark_queued(trace_id: str) -> bool:
    """True if the caller should queue a parse: none is waiting or running for this trace."""
    client = redis_for(settings.CELERY_BROKER_URL)
    if client is None:
        return True
    # Expires with the broker's redelivery: a message lost for good does not block the trace.
    ttl = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    return bool(client.set(queued_key(trace_id), 1, nx=True, ex=ttl))


def clear_queued(trace_id: str) -> None:
    client = redis_for(settings.CELERY_BROKER_URL)
    if client is not None:
        client.delete(queued_key(trace_id))
