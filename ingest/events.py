"""S3's event notifications, read from an SQS queue: a run ingested as its files land.

S3 sends a message per object created or removed (`ObjectCreated:*`, `ObjectRemoved:*`) to the
queue CASCADE_SQS_QUEUE_URL. A batch (one long poll, up to 10 messages) is grouped by run, and
each run named goes through the poll's own decision, `passes.poll_bucket(trace_id=run)`: the
run listed, registered, decided on, parsed, its simulations read. The decision compares the
bucket's listing with the database, never the event with anything: a duplicate, late or
reordered event finds nothing to change. So an event says only *which* run to look at.

A message is deleted once every run it names is settled (`run_settled`: the database holds the
run's listing and nothing is left to decide), that is once the run's change is committed; a
run whose ingest failed (S3 away, a parse to retry, another pass holding it) keeps its messages,
which SQS hands out again after the queue's visibility timeout. A message that is not an S3
event of this bucket and prefix (not JSON, no Records, another bucket, a key outside
CASCADE_S3_PREFIX) is logged and deleted: retrying it would never end. S3's `s3:TestEvent`,
sent when the notification is configured, is deleted unread.

Two callers, one implementation: `manage.py ingest_traces --events` and the Celery task
`s3_events_task` both run `consume_batch`. The poll stays, as the reconciler of what no event
announced (CASCADE_POLL_SECONDS_WITH_EVENTS).
"""

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote_plus

from django.conf import settings

from ingest import bucket, passes, sqs
from ingest.scan import needs_decision
from ingest.sqs import QueueMessage
from traces.models import Trace

logger = logging.getLogger(__name__)

# The events whose runs a batch looks at; others (a restore, a replication) are not a change
# of the run's files.
EVENT_KINDS = ("ObjectCreated:", "ObjectRemoved:")
# SQS hands out at most 10 messages a receive.
BATCH = 10


class MalformedEvent(ValueError):
    """A message that is not an S3 event for this bucket and prefix: logged and deleted."""


# --- Pure: a message's body to the runs it names ----------------------------------------------


def runs_named(body: str, *, prefix: str, bucket_name: str) -> set[str]:
    """The runs a message's S3 records name (empty for the test event and for records that
    change no run: another kind of event, a key at the prefix's root).

    Keys arrive URL-encoded as S3 encodes them (a space as "+", a "+" as "%2B"): unquote_plus.
    An S3 -> SNS -> SQS fan-out wraps the records in an SNS envelope: unwrapped. Raises
    MalformedEvent for anything else.
    """
    try:
        message = json.loads(body)
    except ValueError:
        raise MalformedEvent("not JSON") from None
    if isinstance(message, dict) and message.get("Type") == "Notification" and "Message" in message:
        try:
            message = json.loads(message["Message"])  # through SNS
        except (TypeError, ValueError):
            raise MalformedEvent("an SNS notification whose Message is not JSON") from None
    if not isinstance(message, dict):
        raise MalformedEvent("not a JSON object")
    if message.get("Event") == "s3:TestEvent":
        return set()
    records = message.get("Records")
    if not isinstance(records, list) or not records:
        raise MalformedEvent("no Records")
    runs = set()
    for record in records:
        run_id = _run_of(record, prefix=prefix, bucket_name=bucket_name)
        if run_id:
            runs.add(run_id)
    return runs


def _run_of(record, *, prefix: str, bucket_name: str) -> str | None:
    try:
        event = record["eventName"]
        s3 = record["s3"]
        record_bucket = s3["bucket"]["name"]
        raw_key = s3["object"]["key"]
    except (KeyError, TypeError):
        raise MalformedEvent("a record without eventName, s3.bucket.name or s3.object.key") from None
    if not isinstance(event, str) or not isinstance(raw_key, str):
        raise MalformedEvent("a record whose eventName or key is not a string")
    if record_bucket != bucket_name:
        raise MalformedEvent(f"an event of bucket {record_bucket!r}, not {bucket_name!r}")
    key = unquote_plus(raw_key)
    if not key.startswith(prefix):
        raise MalformedEvent(f"key {key!r} is outside CASCADE_S3_PREFIX {prefix!r}")
    if not event.startswith(EVENT_KINDS):
        return None
    run_id, slash, _ = key[len(prefix) :].partition("/")
    return run_id if slash and run_id else None  # an object beside the runs is no run's


# --- A batch: received, grouped by run, each run decided, settled messages deleted -------------


@dataclass
class BatchResult:
    received: int = 0
    runs: list[str] = field(default_factory=list)
    changes: list = field(default_factory=list)  # TraceChange
    simulation_changes: list = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    malformed: int = 0
    deleted: int = 0
    kept: int = 0  # left for SQS to hand out again

    def summary(self) -> str:
        line = (
            f"{self.received} messages, {len(self.runs)} runs, {len(self.changes)} changed; "
            f"{self.deleted} deleted, {self.kept} kept for redelivery"
        )
        if self.malformed:
            line += f", {self.malformed} malformed"
        return line


def run_settled(run_id: str) -> bool:
    """Whether the database is up to date with the run's last listing: no trace (nothing listed,
    deleted by an operator, not storable) or one with nothing left to decide."""
    trace = Trace.objects.filter(pk=run_id).first()
    return trace is None or not needs_decision(trace)


def consume_batch(
    queue_url: str, *, wait_seconds: int | None = None, progress: Callable[[str], None] | None = None
) -> BatchResult:
    """One receive (a long poll of `wait_seconds`, CASCADE_SQS_WAIT_SECONDS by default), each
    run it names ingested once, and the messages of the settled runs deleted."""
    if wait_seconds is None:
        wait_seconds = settings.CASCADE_SQS_WAIT_SECONDS
    messages = sqs.receive_messages(queue_url, wait_seconds=wait_seconds, max_messages=BATCH)
    result = BatchResult(received=len(messages))
    to_delete: list[QueueMessage] = []
    named: dict[str, set[str]] = {}  # message id -> its runs
    for message in messages:
        try:
            runs = runs_named(message.body, prefix=bucket.prefix(), bucket_name=bucket.bucket_name())
        except MalformedEvent as problem:
            logger.warning(
                "SQS message %s is not an S3 event of ours (%s), deleted: %.500r",
                message.message_id,
                problem,
                message.body,
            )
            result.malformed += 1
            to_delete.append(message)
            continue
        if not runs:
            to_delete.append(message)  # the test event, or nothing a run is made of
            continue
        named[message.message_id] = runs
        result.runs += sorted(runs - set(result.runs))
    settled = set()
    for run_id in result.runs:
        if ingest_run(run_id, result, progress):
            settled.add(run_id)
    for message in messages:
        runs = named.get(message.message_id)
        if runs is not None and runs <= settled:
            to_delete.append(message)
    not_deleted = sqs.delete_messages(queue_url, to_delete)
    for message_id in not_deleted:
        logger.warning("SQS message %s could not be deleted: it comes back, and changes nothing", message_id)
    result.deleted = len(to_delete) - len(not_deleted)
    result.kept = len(messages) - len(to_delete)
    return result


def ingest_run(run_id: str, result: BatchResult, progress: Callable[[str], None] | None) -> bool:
    """The poll's decision on one run; whether it is settled (its messages may go)."""
    try:
        # Not undeleted: an event, duplicated or late, must not bring back a trace an operator
        # deleted; a change of its files registers it anew, as a poll would.
        run = passes.poll_bucket(trace_id=run_id, undelete=False, progress=progress)
    except Exception as error:  # S3 or the database away: the message comes back
        logger.exception("%s: ingest on an S3 event failed, its message is kept", run_id)
        result.errors.append(f"{run_id}: {type(error).__name__}: {error}")
        return False
    result.changes += run.changes
    result.simulation_changes += run.simulation_changes
    result.errors += run.errors
    if run.errors:
        return False
    if not run_settled(run_id):
        logger.info("%s: not settled (another pass holds it?), its message is kept", run_id)
        return False
    return True
