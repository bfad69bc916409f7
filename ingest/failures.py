"""The one failure policy of ingestion: what an exception raised while deciding or parsing a
run does to its trace, whoever runs the parse (`ingest_traces`, the scheduled poll, Celery).

- transient (S3 or the network, a lost database connection, a trace another pass holds): the
  trace is left as it is and tried again later (the next pass; Celery's retry);
- the upload's fault (TraceInputError, or data the database refuses): the trace fails at
  once, with what is wrong in the user's terms;
- anything else (ours: a bug): logged with its traceback and counted on the trace
  (`Trace.parse_attempts`); the CASCADE_PARSE_ATTEMPTS-th such try fails the trace with
  `internal error while parsing: <class>: <message>`. The count starts over when the run's
  files change or it becomes ready.

A failed trace is not downloaded again until its files change (`scan.needs_decision`).
"""

import logging
import re
import sys

import psycopg
from botocore.exceptions import BotoCoreError, ClientError
from django import db
from django.conf import settings
from django.db.models import F

from cascade import metrics
from simulations import services as simulation_services
from simulations.errors import SimulationInputError
from simulations.models import Simulation
from simulations.simlog import SimLogError
from traces import services
from traces.kernel_store import TraceDataTooLarge
from traces.models import Trace

logger = logging.getLogger(__name__)


class TraceInputError(Exception):
    """The upload itself is wrong (the trace's own fault): the trace fails with this message."""


class ParseAttemptFailed(Exception):
    """A try at a trace ended in an error of ours, logged and counted; a later pass tries again."""


# Kinds of failure (what `failure_kind` says; metrics count parse failures by kind).
TRANSIENT = "transient"
INPUT = "input"
INTERNAL = "internal"
RETRY = "retry"  # an error of ours before the CASCADE_PARSE_ATTEMPTS-th: counted, not failed
TIMEOUT = "timeout"  # Celery's time limit (ingest.tasks)
# Failures decided without an exception (ingest.decision.decide), and Celery's giving up (ingest.tasks).
UPLOAD = "upload"  # files metadata.json lists did not arrive within CASCADE_UPLOAD_TIMEOUT
PROFILER = "profiler"  # metadata.json's status is not "ok"
WORKER_LOST = "worker_lost"  # Celery: the parse killed its worker MAX_RETRIES + 1 times
UNREACHABLE = "unreachable"  # Celery: S3 or the database still away after MAX_RETRIES + 1 tries

# S3 or the network, the database away, another pass at the trace: worth another try later.
TRANSIENT_ERRORS = (
    BotoCoreError,
    ClientError,
    ConnectionError,
    TimeoutError,
    db.OperationalError,
    db.InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
    services.TraceBusy,
)
# The database refusing the run's data: psycopg's own classes too, which reach us unwrapped
# from inside a COPY, where Django's cursor is not in the way.
REFUSED_ERRORS = (
    db.DataError,
    db.IntegrityError,
    psycopg.DataError,
    psycopg.IntegrityError,
    psycopg.errors.ProgramLimitExceeded,
)
INPUT_ERRORS = (TraceInputError, TraceDataTooLarge, SimulationInputError, SimLogError)


def failure_kind(error: BaseException) -> str:
    """TRANSIENT, INPUT, INTERNAL or TIMEOUT: what the policy does with `error`."""
    if _soft_time_limit(error):
        return TIMEOUT
    if isinstance(error, INPUT_ERRORS):
        return INPUT
    # Django wraps psycopg's errors in its own: a limit of PostgreSQL's (an index entry too
    # large) is an OperationalError to Django, but the data's fault.
    for candidate in (error, error.__cause__):
        if isinstance(candidate, REFUSED_ERRORS):
            return INPUT
    if isinstance(error, TRANSIENT_ERRORS):
        return TRANSIENT
    return INTERNAL


def _soft_time_limit(error: BaseException) -> bool:
    """Celery's soft time limit, raised only inside a Celery worker, which has loaded Celery.
    Not imported here: Celery and kombu are some 4 MB of a process (`ingest_traces`) that
    never runs a task (docs/decisions/0002)."""
    exceptions = sys.modules.get("celery.exceptions")
    return exceptions is not None and isinstance(error, exceptions.SoftTimeLimitExceeded)


def failure_message(error: BaseException) -> str:
    """The trace's `error` for a failure of kind INPUT or INTERNAL."""
    kind = failure_kind(error)
    if kind == INPUT and isinstance(error, INPUT_ERRORS):
        return str(error)
    if kind == INPUT:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return f"the database refused this trace's data: {detail}{refused_column(error)}"
    return internal_message(error)


def refused_column(error: BaseException) -> str:
    """` (column C of a launch)` when PostgreSQL said which column of a COPY it refused."""
    cause = error if isinstance(error, psycopg.Error) else error.__cause__
    context = getattr(getattr(cause, "diag", None), "context", None) or ""
    match = re.search(r"COPY (\w+), line \d+, column (\w+)", context)
    if match is None:
        return ""
    table = {"traces_kernel": "a launch", "traces_step": "a step"}.get(match.group(1), match.group(1))
    return f" (column {match.group(2)} of {table})"


def internal_message(error: BaseException) -> str:
    return f"internal error while parsing: {type(error).__name__}: {error}"


def trace_parse_error(trace: Trace, error: Exception, *, fingerprint: str) -> None:
    """Apply the policy to `error`, raised while deciding or parsing `trace` (its lock held).

    Re-raises a transient error as it is; fails the trace on bad input, and on an error of
    ours at the CASCADE_PARSE_ATTEMPTS-th try; raises ParseAttemptFailed before that.
    """
    kind = failure_kind(error)
    if kind in (TRANSIENT, TIMEOUT):  # TIMEOUT: Celery's, which fails the trace (ingest.tasks)
        if kind == TRANSIENT:
            metrics.count_parse_failure(TRANSIENT)
        raise error
    if kind == INPUT:
        logger.exception("%s: the upload cannot be stored", trace.id)
        trace_fail(trace, failure_message(error), fingerprint=fingerprint)
        return
    attempts = count_attempt(trace)
    limit = settings.CASCADE_PARSE_ATTEMPTS
    logger.exception("%s: internal error while parsing (try %d of %d)", trace.id, attempts, limit)
    if attempts < limit:
        metrics.count_parse_failure(RETRY)
        raise ParseAttemptFailed(
            f"try {attempts} of {limit} failed, the next pass tries again: {internal_message(error)}"
        ) from error
    trace_fail(trace, internal_message(error), fingerprint=fingerprint)


def count_attempt(trace: Trace) -> int:
    """One more try of the trace's current files ended in an error of ours: how many now."""
    Trace.objects.filter(pk=trace.pk).update(parse_attempts=F("parse_attempts") + 1)
    trace.parse_attempts = Trace.objects.filter(pk=trace.pk).values_list("parse_attempts", flat=True).get()
    return trace.parse_attempts


def trace_fail(trace: Trace, error: str, *, fingerprint: str) -> None:
    """Failed with `error`, with what the trace holds of its run (trace_fail stores what it can)."""
    services.trace_fail(trace, error, fingerprint=fingerprint, run={}, parser_version=trace.parser_version)
    trace_failed(trace.id, failure_kind_of_message(error), error)


def failure_kind_of_message(error: str) -> str:
    return INTERNAL if error.startswith("internal error while parsing: ") else INPUT


def trace_failed(trace_id: str, kind: str, error: str) -> None:
    """Every trace ingestion fails passes here once it is written, with its kind (INPUT,
    INTERNAL, UPLOAD, PROFILER, TIMEOUT, WORKER_LOST, UNREACHABLE): where failures are counted."""
    logger.info("%s: failed (%s): %s", trace_id, kind, error)
    metrics.count_parse_failure(kind)


def simulation_parse_error(
    simulation: Simulation, error: Exception, *, fingerprint: str, trace_seen_at
) -> None:
    """The policy for a simulation (its lock held), as `trace_parse_error` for a trace: transient
    errors re-raised (it stays `parsing`, and the next pass reads it again), bad input fails it,
    an error of ours fails it at the CASCADE_PARSE_ATTEMPTS-th try."""
    kind = failure_kind(error)
    if kind in (TRANSIENT, TIMEOUT):
        raise error
    if kind == INPUT:
        logger.info("%s: failed: %s", simulation, failure_message(error))
        simulation_services.simulation_fail(
            simulation, failure_message(error), fingerprint=fingerprint, trace_seen_at=trace_seen_at
        )
        return
    attempts = simulation_services.count_attempt(simulation)
    limit = settings.CASCADE_PARSE_ATTEMPTS
    logger.exception("%s: internal error while reading it (try %d of %d)", simulation, attempts, limit)
    if attempts < limit:
        raise ParseAttemptFailed(
            f"try {attempts} of {limit} failed, the next pass tries again: {internal_message(error)}"
        ) from error
    simulation_services.simulation_fail(
        simulation, internal_message(error), fingerprint=fingerprint, trace_seen_at=trace_seen_at
    )
