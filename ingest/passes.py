"""What a poll pass does with what it sees in the bucket: the trace state machine.

    (first object lands)        -> uploading
    metadata.json, files listed
      but not all there         -> uploading, until CASCADE_UPLOAD_TIMEOUT -> failed
    status != "ok"              -> failed
    status "ok"                 -> parsing -> ready (kernels stored) | failed (bad input)
    an error while deciding     -> left as it is (S3 or the database away: retried next pass),
                                   failed (bad input, data the database refuses), or counted and
                                   failed at the CASCADE_PARSE_ATTEMPTS-th try (ours): ingest.failures

Two callers, one implementation: `manage.py ingest_traces` runs `poll_bucket` (scan, then
parse inline); the Celery poll task runs `scan_bucket` and fans `ingest_trace` out to
workers. `ingest_trace` holds the trace's lock (traces.locks) for the whole decision, so
concurrent passes never parse one trace twice, and stores kernels in one transaction, so a
killed pass leaves either the old kernels or the new ones; a trace it left in `parsing` is
picked up by the next pass.

Cost: a pass lists the run folders (one request per thousand runs) and then only the runs
that are new or not finished (uploading, parsing): a listing each, or one listing of the whole
prefix when that takes fewer requests (thousands of new runs). A failed trace's folder, and the folder of
a trace an operator deleted, is listed again after a minute, then twice as late each time up
to a day (a change of its files starts over); so is a folder without metadata.json once its
listing stops changing. Ready traces are not listed again unless asked
(`--trace`, `--reparse`). Objects are downloaded only when a run's listing (keys, sizes,
ETags) differs from the one its last decision was made on.

Speed: S3 requests overlap on `CASCADE_S3_THREADS` threads (`bucket.overlapped`), each with its
own client: the scan's listings and HEADs, and for each trace a pass parses, its listing's small
files (metadata.json, timeline.json, timing.csv, stats and kernelslist files up to
PREFETCH_FILE_BYTES each, PREFETCH_RUN_BYTES a run), read a few traces ahead of the one being
parsed. Everything else stays on the pass's thread, one trace after another, in order: the
database, the lock, the decision; a larger stats file streams there, as it always did. A body
read ahead is used only if it is the version (ETag) of the listing the decision is made on, and
that listing only if it is still the one the trace's row holds once its lock is taken.

This module decides; `traces.services` writes every change of a trace.
"""

import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import chain, islice
from types import MappingProxyType

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Count, Func, IntegerField, Q, Sum, TextField
from django.db.models.expressions import RawSQL
from django.utils import timezone

from ingest import bucket, failures, processes, stats, timing
from ingest.bucket import S3Object
from ingest.failures import TraceInputError
from ingest.launch_text import LaunchText
from ingest.metadata import (
    METADATA_NAME,
    TIMELINE_NAME,
    TIMING_NAME,
    MetadataError,
    MetadataLimits,
    failure,
    listed_files,
    listed_keys,
    missing_listed_files,
    parse_metadata,
    run_fields,
    with_derived_arch_and_config,
)
from traces import services
from traces.kernel_store import KernelWriter, LaunchBlock
from traces.locks import trace_lock
from traces.models import (
    CURRENT_PARSER_VERSION,
    KERNEL_COLUMNS,
    NO_DEVICE,
    DeletedTrace,
    Trace,
    TraceState,
    files_fingerprint,
)
from traces.text import is_storable

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]

HEADER_PEEK_BYTES = 4096
# What a pass reads ahead on the S3 threads for each trace it parses: files up to this size,
# this much a run. Larger files stream on the pass's thread when they are parsed, so memory
# stays within (2 x CASCADE_S3_THREADS) x PREFETCH_RUN_BYTES whatever the traces' sizes.
PREFETCH_FILE_BYTES = 1024 * 1024
PREFETCH_RUN_BYTES = 4 * 1024 * 1024
# Fewer runs to list than this: a listing each, never the whole prefix (see whole_prefix_is_cheaper).
WHOLE_PREFIX_MIN_RUNS = 50
# The listings a scan keeps in memory for the parses that follow (about 250 bytes an object);
# past this many objects, a parse lists its run again, as it would without them.
KEPT_LISTING_OBJECTS = 200_000
MISSING_KEYS_SHOWN = 10


@dataclass(frozen=True)
class TraceChange:
    trace_id: str
    old_state: str | None
    new_state: str
    kernel_count: int = 0
    bytes: int = 0
    error: str | None = None

    def __str__(self) -> str:
        line = f"{self.trace_id}: {self.old_state or 'new'} -> {self.new_state}, {self.kernel_count} kernels"
        if self.new_state == TraceState.UPLOADING:
            line += f", {self.bytes} bytes"
        if self.error:
            line += f" ({self.error})"
        return line


@dataclass
class Scan:
    listed: int = 0
    changes: list[TraceChange] = field(default_factory=list)
    to_parse: list[str] = field(default_factory=list)
    # Of to_parse, the traces to read again although their files did not change.
    to_reparse: set[str] = field(default_factory=set)
    # The listing each trace of to_parse was registered with.
    listings: dict[str, list[S3Object]] = field(default_factory=dict)


@dataclass
class PassResult:
    listed: int = 0
    changes: list[TraceChange] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cost: "PassCost | None" = None

    def summary(self) -> str:
        states = [change.new_state for change in self.changes]
        summary = (
            f"{self.listed} traces looked at, {len(self.changes)} changed: "
            f"{states.count(TraceState.READY)} ready, {states.count(TraceState.FAILED)} failed, "
            f"{states.count(TraceState.UPLOADING)} uploading"
        )
        if self.errors:
            summary += f"; {len(self.errors)} could not be ingested (retried next pass)"
        if self.cost is not None:
            summary += f"; {self.cost}"
        return summary


@dataclass
class PassCost:
    """What a pass asked of S3 and the database: requests, and seconds spent waiting on each."""

    s3_requests: int = 0
    s3_seconds: float = 0.0  # summed over the S3 threads: more than the pass's time when they overlap
    db_queries: int = 0
    db_seconds: float = 0.0
    runs: int = 0  # the runs the pass looked at (listed), for the requests a run

    def add(self, other: "PassCost | None") -> None:
        if other is not None:
            self.s3_requests += other.s3_requests
            self.s3_seconds += other.s3_seconds
            self.db_queries += other.db_queries
            self.db_seconds += other.db_seconds

    def __str__(self) -> str:
        per_run = f" ({self.s3_requests / self.runs:.1f} a run looked at)" if self.runs else ""
        return (
            f"S3: {self.s3_requests} requests{per_run}, {self.s3_seconds:.1f} s waiting; "
            f"database: {self.db_queries} queries, {self.db_seconds:.1f} s"
        )


@contextmanager
def measured() -> Iterator[PassCost]:
    """The cost of what runs inside, in this thread's database connection and every S3 client."""
    cost = PassCost()
    requests, seconds = bucket.meter.snapshot()

    def timed(execute, sql, params, many, context):
        started = time.monotonic()
        try:
            return execute(sql, params, many, context)
        finally:
            cost.db_queries += 1
            cost.db_seconds += time.monotonic() - started

    with connection.execute_wrapper(timed):
        yield cost
    now_requests, now_seconds = bucket.meter.snapshot()
    cost.s3_requests, cost.s3_seconds = now_requests - requests, now_seconds - seconds


# --- The pass -----------------------------------------------------------------------------


def poll_bucket(
    *,
    trace_id: str | None = None,
    reparse: bool = False,
    reparse_outdated: bool = False,
    outdated_batch: int | None = None,
    progress: Progress | None = None,
    processes: int = 1,
) -> PassResult:
    """One whole pass: register what landed, then parse every trace that is ready, inline.

    `processes` > 1 lets a pass with many traces to parse share them among that many
    processes (ingest.processes); `manage.py ingest_traces` passes CASCADE_PARSE_PROCESSES.
    A caller that is not a command's main module (a Celery task, a script without a main
    guard) keeps the default: a spawned process imports the caller's main module again.
    """
    with measured() as cost:
        result = _poll_bucket(trace_id, reparse, reparse_outdated, outdated_batch, progress, processes)
    cost.add(result.cost)  # the parse processes', if any
    cost.runs = result.listed
    result.cost = cost
    return result


def _poll_bucket(
    trace_id, reparse, reparse_outdated, outdated_batch, progress, processes_wanted
) -> PassResult:
    scan = scan_bucket(
        trace_id=trace_id, reparse=reparse, reparse_outdated=reparse_outdated, outdated_batch=outdated_batch
    )
    changes = {change.trace_id: change for change in scan.changes}
    to_reparse = scan.to_reparse | (set(scan.to_parse) if reparse else set())
    count = processes.process_count(
        len(scan.to_parse),
        processes_wanted,
        settings.CASCADE_PARSES_PER_PROCESS,
        postgres=connection.vendor == "postgresql",
    )
    if count == 1:
        parsed, errors = parse_traces(scan.to_parse, to_reparse, scan.listings, progress)
        children = PassCost()
    else:
        parsed, errors, children = parse_in_processes(scan, to_reparse, count, progress)
    for change in parsed:
        first = changes.get(change.trace_id, change)
        changes[change.trace_id] = TraceChange(
            change.trace_id,
            first.old_state,
            change.new_state,
            change.kernel_count,
            change.bytes,
            change.error,
        )
    return PassResult(listed=scan.listed, changes=list(changes.values()), errors=errors, cost=children)


def parse_traces(
    run_ids: list[str], to_reparse: set[str], listings: dict[str, list[S3Object]], progress: Progress | None
) -> tuple[list[TraceChange], list[str]]:
    """Parse each run in turn on this thread, the next ones' small files read meanwhile on the
    S3 threads; (what changed, the errors of those that could not be ingested)."""
    changes, errors = [], []

    def read_ahead(run_id: str) -> Fetched:  # on an S3 thread: no database
        objects = listings.get(run_id)
        return fetch_small_files(run_id, bucket.list_run_objects(run_id) if objects is None else objects)

    for ready_id, fetched in bucket.overlapped(read_ahead, run_ids):
        try:
            change = ingest_trace(
                ready_id, reparse=ready_id in to_reparse, progress=progress, fetched=fetched.result()
            )
        except failures.ParseAttemptFailed as error:  # logged, with its traceback, and counted
            errors.append(f"{ready_id}: {error}")
            continue
        except Exception as error:  # S3 trouble: the other traces still get their turn
            logger.exception("%s: ingestion error, the next pass tries again", ready_id)
            errors.append(f"{ready_id}: {type(error).__name__}: {error}")
            continue
        if change is not None:
            changes.append(change)
    return changes, errors


def parse_in_processes(
    scan: Scan, to_reparse: set[str], count: int, progress: Progress | None
) -> tuple[list[TraceChange], list[str], PassCost]:
    """parse_traces over `count` shares of the runs: this process's and `count - 1` spawned
    ones' (ingest.processes); their costs summed."""
    own, *others = processes.shares(scan.to_parse, count)
    logger.info("parsing %d traces in %d processes", len(scan.to_parse), count)
    changes, errors, cost = [], [], PassCost()
    with processes.pool(len(others)) as pool:
        futures = [
            (
                share,
                pool.submit(
                    processes.parse_share,
                    share,
                    to_reparse & set(share),
                    {run_id: scan.listings[run_id] for run_id in share if run_id in scan.listings},
                    progress is not None,
                ),
            )
            for share in others
        ]
        changes, errors = parse_traces(own, to_reparse, scan.listings, progress)
        for share, future in futures:
            try:
                share_changes, share_errors, share_cost = future.result()
            except Exception as error:  # the process died: its runs are parsed next pass
                logger.exception("a parse process failed")
                errors += [
                    f"{run_id}: parse process failed: {type(error).__name__}: {error}" for run_id in share
                ]
                continue
            changes += share_changes
            errors += share_errors
            cost.add(share_cost)
    return changes, errors, cost


def progress_to_stderr(message: str) -> None:
    """A parse process's progress lines, where the command writes its own."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def scan_bucket(
    *,
    trace_id: str | None = None,
    reparse: bool = False,
    reparse_outdated: bool = False,
    outdated_batch: int | None = None,
) -> Scan:
    """Register new runs, follow the ones in progress, and say which are ready to parse.

    Downloads nothing: it lists. `trace_id` limits the scan to that run (in any state);
    `reparse` also lists ready traces and asks for every one to be parsed again;
    `reparse_outdated` asks for the traces an older parser read (`outdated_batch` of them
    at most, the least recently updated first) to be parsed again.
    """
    scan = Scan()
    if trace_id is not None:
        services.trace_undelete(trace_id)  # asked for by name: a deleted trace comes back
        candidates = [trace_id]
    else:
        run_ids = list(bucket.list_run_ids())
        candidates = runs_to_look_at(run_ids, reparse=reparse)
        if not reparse:
            candidates += ready_runs_changed(run_ids)
    # Listed on the S3 threads, registered here in the bucket's order; a listing that fails
    # (S3 unreachable) ends the scan, as one listing of the bucket that fails does.
    kept = 0  # objects in scan.listings
    listed = ((run_id, objects) for run_id, objects in run_listings(candidates) if objects)
    while listings := list(islice(listed, REGISTER_BATCH)):
        registered = register_listings(listings)
        for (run_id, objects), (trace, change) in zip(listings, registered, strict=True):
            scan.listed += 1
            if trace is None:
                continue  # deleted by an operator, and its files have not changed
            if change is not None:
                scan.changes.append(change)
            if needs_decision(trace, reparse=reparse):
                scan.to_parse.append(run_id)
                if kept + len(objects) <= KEPT_LISTING_OBJECTS:
                    scan.listings[run_id] = objects
                    kept += len(objects)
            elif change is None and (
                trace.state == TraceState.FAILED
                or (trace.state == TraceState.UPLOADING and not has_metadata(trace))
            ):
                # Looked at again after a while, not every pass: nothing will change unless
                # its files do (a folder without metadata.json is no run yet).
                services.trace_recheck_later(trace)
    if reparse_outdated and trace_id is None:
        for run_id in outdated_trace_ids(outdated_batch):
            if run_id not in scan.to_parse:
                scan.to_parse.append(run_id)
                scan.to_reparse.add(run_id)
    return scan


# Runs registered together: their new traces in one INSERT.
REGISTER_BATCH = 500


def run_listings(run_ids: list[str]) -> Iterator[tuple[str, list[S3Object]]]:
    """Each run's objects, in the order of `run_ids`: a listing per run, on the S3 threads,
    or one listing of the whole prefix when that takes fewer requests (thousands of new runs)."""
    if whole_prefix_is_cheaper(run_ids):
        listed = bucket.list_runs_objects(set(run_ids))
        for run_id in run_ids:
            yield run_id, listed.get(run_id, [])
        return
    for run_id, listing in bucket.overlapped(bucket.list_run_objects, run_ids):
        yield run_id, listing.result()


class JSONArrayLength(Func):
    function = "jsonb_array_length"
    output_field = IntegerField()

    def as_sqlite(self, compiler, connection, **extra):
        return super().as_sql(compiler, connection, function="json_array_length", **extra)


def whole_prefix_is_cheaper(run_ids: list[str]) -> bool:
    """Whether listing every object under the prefix takes fewer requests than a listing per run.

    The prefix's objects are estimated from the listings the database holds (the runs not yet
    registered counted at the average); under WHOLE_PREFIX_MIN_RUNS runs, never, nor when the
    runs' objects would not fit in KEPT_LISTING_OBJECTS (they are held until the pass ends).
    """
    if len(run_ids) < WHOLE_PREFIX_MIN_RUNS:
        return False
    known = Trace.objects.aggregate(runs=Count("pk"), objects=Sum(JSONArrayLength("files")))
    per_run = max((known["objects"] or 0) / known["runs"] if known["runs"] else 10, 1)
    if len(run_ids) * per_run > KEPT_LISTING_OBJECTS:
        return False
    estimated_objects = (known["objects"] or 0) + len(run_ids) * per_run
    return estimated_objects / settings.CASCADE_S3_PAGE_SIZE < len(run_ids) / 2


def runs_to_look_at(run_ids: list[str], *, reparse: bool = False) -> list[str]:
    """Of the bucket's run folders, those worth listing: new, unfinished, or due for a recheck."""
    now = timezone.now()
    traces = {
        trace_id: (state, after)
        for trace_id, state, after in Trace.objects.values_list("id", "state", "recheck_after")
    }
    deleted = dict(DeletedTrace.objects.values_list("id", "recheck_after"))

    def due(after) -> bool:
        return after is None or after <= now

    def worth_a_look(run_id: str) -> bool:
        if run_id in deleted:
            return due(deleted[run_id])
        if reparse or run_id not in traces:
            return True
        state, after = traces[run_id]
        # An uploading trace waits only while its folder has no metadata.json (scan_bucket).
        return state == TraceState.PARSING or (
            state in (TraceState.UPLOADING, TraceState.FAILED) and due(after)
        )

    return [run_id for run_id in run_ids if worth_a_look(run_id)]


def ready_runs_changed(run_ids: list[str]) -> list[str]:
    """Ready runs whose metadata.json changed since they were parsed: re-uploaded.

    One HEAD request per ready run whose recheck is due (every CASCADE_READY_RECHECK_SECONDS,
    each run at its own moment: traces_recheck_ready_later), never a listing: metadata.json is
    written last, so a re-upload rewrites it. The database sends the one ETag compared, never
    the run's file list (thousands of entries for some runs).
    """
    present = set(run_ids)
    due = Trace.objects.filter(state=TraceState.READY).filter(
        Q(recheck_after__isnull=True) | Q(recheck_after__lte=timezone.now())
    )
    changed, checked = [], []
    parsed_etags = {}  # trace id -> (its metadata.json's key, the ETag it was parsed with)
    listed = due.annotate(parsed_etag=listed_etag(METADATA_NAME)).order_by()
    for trace_id, parsed_etag in listed.values_list("id", "parsed_etag"):
        if trace_id in present:
            parsed_etags[trace_id] = bucket.run_prefix(trace_id) + METADATA_NAME, parsed_etag
    heads = bucket.overlapped(
        lambda trace_id: bucket.head_etag(parsed_etags[trace_id][0]), list(parsed_etags)
    )
    for trace_id, head in heads:
        parsed_etag = parsed_etags[trace_id][1]
        try:
            etag = head.result()
        except (BotoCoreError, ClientError) as problem:
            # One run's S3 trouble (a 403, retries spent) must not stop the pass: next time.
            logger.warning("%s: cannot compare metadata.json with the bucket: %s", trace_id, problem)
            continue
        checked.append(trace_id)
        if etag != parsed_etag:
            changed.append(trace_id)
    services.traces_recheck_ready_later(checked)
    return changed


def listed_etag(name: str) -> RawSQL:
    """The ETag of the trace's object `<prefix><id>/<name>` in its `files`, looked up by the
    database (a JSON path on PostgreSQL, json_each on SQLite): NULL if it was not listed."""
    params = [bucket.prefix(), "/" + name]
    if connection.vendor == "postgresql":
        sql = (
            'jsonb_path_query_first("traces_trace"."files", \'$[*] ? (@.key == $key).etag\', '
            "jsonb_build_object('key', %s || \"traces_trace\".\"id\" || %s)) #>> '{}'"
        )
    else:
        sql = (
            '(SELECT json_extract(entry.value, \'$.etag\') FROM json_each("traces_trace"."files") AS entry '
            'WHERE json_extract(entry.value, \'$.key\') = %s || "traces_trace"."id" || %s)'
        )
    return RawSQL(sql, params, output_field=TextField())


def outdated_trace_ids(limit: int | None = None) -> list[str]:
    """Traces whose files an older version of the stats parser read, least recently updated first."""
    outdated = Trace.objects.filter(parser_version__lt=CURRENT_PARSER_VERSION).order_by("updated_at", "id")
    return list(outdated.values_list("id", flat=True)[:limit])


def ingest_trace(
    trace_id: str,
    *,
    reparse: bool = False,
    progress: Progress | None = None,
    fetched: "Fetched | None" = None,
) -> TraceChange | None:
    """Bring one trace up to date with its objects; None if there was nothing to do.

    Returns None at once when another process holds the trace. What goes wrong while it is
    decided or parsed goes through ingest.failures: transient errors (S3, the network, the
    database away) are raised for the caller to retry; a trace's own bad input marks it failed;
    an error of ours raises ParseAttemptFailed, and fails the trace at the last try.

    `fetched`, a listing and small files read ahead without the lock, saves the listing if
    the trace's row still holds that listing once the lock is taken (else the run is listed
    again, as without it), and the downloads of the files it holds.
    """
    with trace_lock(trace_id) as acquired:
        if not acquired:
            logger.info("%s: another pass holds it, skipped", trace_id)
            return None
        trace, registered, objects = None, None, None
        if fetched is not None:
            # Registered by this pass's scan with that listing, and no pass has seen another since.
            trace = Trace.objects.filter(pk=trace_id).first()
            if trace is not None and trace.files == inventory(fetched.objects):
                objects = fetched.objects
        if objects is None:
            objects = bucket.list_run_objects(trace_id)
            if not objects:
                return None
            trace, registered = register_objects(trace_id, objects)
        if trace is None:
            logger.info(
                "%s: deleted by an operator and its files have not changed, or not storable: left alone",
                trace_id,
            )
            return None
        old_state = registered.old_state if registered else trace.state
        if not needs_decision(trace, reparse=reparse):
            return registered
        decided_on = trace.parsed_fingerprint, trace.kernel_count, trace.error
        try:
            decide(
                trace, objects, progress=progress, bodies=fetched.bodies if fetched is not None else NO_BODIES
            )
        except Exception as error:
            # Retried later (raised), counted (ParseAttemptFailed raised) or failed: ingest.failures.
            failures.trace_parse_error(trace, error, fingerprint=fingerprint(objects))
        unchanged = (trace.parsed_fingerprint, trace.kernel_count, trace.error) == decided_on
        if registered is None and trace.state == old_state and unchanged and not reparse:
            return None
        # What the trace holds now: a pass reports the parse it just made, not the listing before it.
        return TraceChange(trace_id, old_state, trace.state, trace.kernel_count, trace.bytes, trace.error)


# --- Registration (listing only) ------------------------------------------------------------


def fingerprint(objects: list[S3Object]) -> str:
    return files_fingerprint(inventory(objects))


def inventory(objects: list[S3Object]) -> list[dict]:
    return [{"key": obj.key, "bytes": obj.size, "etag": obj.etag} for obj in objects]


def register_objects(run_id: str, objects: list[S3Object]) -> tuple[Trace | None, TraceChange | None]:
    """Record the run's listing: its trace (None: deleted, files unchanged) and the change, if any."""
    return register_listings([(run_id, objects)])[0]


def register_listings(
    listings: list[tuple[str, list[S3Object]]],
) -> list[tuple[Trace | None, TraceChange | None]]:
    """`register_objects` for many runs, with a few queries whatever their number.

    Each run on its own: one the database cannot store (a NUL in its folder's name) is
    skipped with a log line, (None, None) as a deleted run's, and the others register together.
    """
    registered: list[tuple[Trace | None, str]] = [(None, "unstorable")] * len(listings)
    storable = []  # indexes in `listings`
    for index, (run_id, _) in enumerate(listings):
        if storable_run_id(run_id):
            storable.append(index)
        else:
            logger.warning("%r: a run folder name the database cannot store: skipped", run_id)
    try:
        with transaction.atomic():
            batch = services.traces_register(
                [(listings[index][0], inventory(listings[index][1]), False) for index in storable]
            )
    except DatabaseError as batch_error:
        if failures.failure_kind(batch_error) != failures.INPUT:
            raise
        # Which run the database refuses: each on its own, the others still registered.
        batch = []
        for index in storable:
            run_id, objects = listings[index]
            try:
                with transaction.atomic():
                    batch.append(services.trace_register(run_id, inventory(objects), sample=False))
            except DatabaseError as error:
                if failures.failure_kind(error) != failures.INPUT:
                    raise
                logger.warning("%r: the database refuses this run's listing, skipped: %s", run_id, error)
                batch.append((None, "unstorable"))
    for index, outcome in zip(storable, batch, strict=True):
        registered[index] = outcome
    outcomes = []
    for (run_id, _), (trace, how) in zip(listings, registered, strict=True):
        if how == "created":
            outcomes.append((trace, TraceChange(run_id, None, trace.state, 0, trace.bytes)))
        elif how == "changed":
            outcomes.append(
                (
                    trace,
                    TraceChange(
                        run_id, trace.state, trace.state, trace.kernel_count, trace.bytes, trace.error
                    ),
                )
            )
        else:
            outcomes.append((trace, None))
    return outcomes


def register_samples(run_ids: list[str]) -> None:
    """Register runs an operator loaded as samples (`load_samples`) and mark them `sample`:
    the only way a trace becomes one (an uploader controls a run's name and files)."""
    for run_id in run_ids:
        objects = bucket.list_run_objects(run_id)
        if objects:
            register_objects(run_id, objects)
    services.traces_mark_sample(run_ids)


def storable_run_id(run_id: str) -> bool:
    """Whether the database can hold `run_id` as a trace's id (Trace.id: text of 1,024
    characters at most, no NUL, no lone surrogate)."""
    return len(run_id) <= Trace._meta.get_field("id").max_length and is_storable(run_id)


def has_metadata(trace: Trace) -> bool:
    metadata_key = bucket.run_prefix(trace.id) + METADATA_NAME
    return any(item["key"] == metadata_key for item in trace.files)


def needs_decision(trace: Trace, *, reparse: bool = False) -> bool:
    """Whether the trace's objects must be looked at (downloaded) again.

    Nothing is decided before metadata.json lands, even when asked to reparse.
    """
    if not has_metadata(trace):
        # Unless it sits one folder down: a run name with "/" in it, which fails at once.
        nested = any(item["key"].endswith("/" + METADATA_NAME) for item in trace.files)
        return nested and trace.state != TraceState.FAILED
    if reparse:
        return True
    if trace.state == TraceState.PARSING:
        return True  # its pass died mid-way: nobody holds it any more once we get the lock
    if trace.parsed_fingerprint != trace.files_fingerprint():
        return True
    return trace.state == TraceState.UPLOADING and upload_timed_out(trace)


def upload_timed_out(trace: Trace) -> bool:
    timeout = timedelta(seconds=settings.CASCADE_UPLOAD_TIMEOUT)
    return trace.files_changed_at is not None and timezone.now() - trace.files_changed_at >= timeout


# --- Reading ahead (on the S3 threads: S3 only, never the database) ---------------------------

# Bodies read ahead, by (key, ETag of what was read): a body serves only that version of its key.
Bodies = Mapping[tuple[str, str], bytes]
NO_BODIES: Bodies = MappingProxyType({})


@dataclass(frozen=True)
class Fetched:
    """A run's listing and the small files a decision on it will read, read ahead."""

    objects: list[S3Object]
    bodies: Bodies


class ReadAhead(dict):
    """Bodies read ahead, and the S3 errors met doing it: an error is raised where the decision
    reads that file, exactly as if it had been read then (a stats file's, after `parsing`)."""

    def __init__(self):
        super().__init__()
        self.errors: dict[tuple[str, str], Exception] = {}

    def get(self, key, default=None):
        error = self.errors.get(key)
        if error is not None:
            raise error
        return super().get(key, default)


def fetch_small_files(run_id: str, objects: list[S3Object]) -> Fetched:
    """metadata.json and, if it says the run is complete and fine, the small files a parse reads.

    Runs on an S3 thread: reads what `decide` would read first, decides nothing; whatever it
    skips (a large file, a run that will wait or fail) is read by `decide` itself if needed.
    A read that fails (retries spent) is kept, and raised where `decide` reads that file.
    """
    bodies = ReadAhead()
    meta = next((obj for obj in objects if obj.name == METADATA_NAME), None)
    if meta is None or not _fetch(meta, bodies, settings.CASCADE_METADATA_MAX_BYTES):
        return Fetched(objects, bodies)
    raw_metadata = bodies.get((meta.key, meta.etag))
    if raw_metadata is None:  # replaced since the listing: the decision reads it again
        return Fetched(objects, bodies)
    try:
        wanted = files_to_parse(run_id, objects, raw_metadata)
    except (MetadataError, TraceInputError):
        wanted = []  # the decision fails the run, from metadata.json alone
    budget = PREFETCH_RUN_BYTES - meta.size
    for obj in wanted:
        if obj.size <= min(budget, settings.CASCADE_MAX_STATS_BYTES) and _fetch(obj, bodies):
            budget -= obj.size
    return Fetched(objects, bodies)


def files_to_parse(run_id: str, objects: list[S3Object], raw_metadata: bytes) -> list[S3Object]:
    """What a parse of the run will read, if metadata.json says it is complete and fine ([] if not)."""
    metadata = parse_metadata(raw_metadata, metadata_limits())
    listed = listed_files(metadata)
    run_prefix = bucket.run_prefix(run_id)
    if failure(metadata) is not None or missing_listed_files(listed, inventory(objects), run_prefix):
        return []
    if listed:
        keys = listed_keys(listed, inventory(objects), run_prefix)
        objects = [obj for obj in objects if obj.key in keys]
    sources = stats_sources(objects)
    wanted = [obj for source in sources for obj in (source.kernelslist, source.stats) if obj is not None]
    return wanted + [obj for obj in objects if obj.name in (TIMELINE_NAME, TIMING_NAME)]


def _fetch(obj: S3Object, bodies: ReadAhead, max_bytes: int | None = None) -> bool:
    """Read `obj` whole into `bodies` if it is small; False if it is not (left to the parse)
    or could not be read (the error is kept for the decision to raise)."""
    limit = min(PREFETCH_FILE_BYTES, max_bytes or PREFETCH_FILE_BYTES, obj.size)
    if obj.size > limit:
        return False
    try:
        data, etag = bucket.read_object_and_etag(obj.key, limit)
    except ValueError:  # larger than listed: replaced since; the decision reads it itself
        return False
    except Exception as error:  # S3 trouble, retries spent: this file's, raised when it is read
        bodies.errors[obj.key, obj.etag] = error
        return False
    bodies[obj.key, etag] = data
    return True


def read_whole(obj: S3Object, max_bytes: int, bodies: Bodies) -> bytes:
    """A small object whole, from `bodies` if it was read ahead; ValueError past `max_bytes`."""
    data = bodies.get((obj.key, obj.etag))
    if data is None:
        return bucket.read_object(obj.key, max_bytes, etag=obj.etag)
    if len(data) > max_bytes:
        raise bucket.too_large(len(data), max_bytes)
    return data


def read_lines(obj: S3Object, bodies: Bodies) -> Iterator[bytes]:
    """An object's lines, from `bodies` if it was read ahead, else streamed from S3: the listed
    version only (a replaced object raises ClientError, bucket.get_object)."""
    data = bodies.get((obj.key, obj.etag))
    return bucket.iter_object_lines(obj.key, etag=obj.etag) if data is None else bucket.iter_lines(data)


# --- Decision (downloads) ------------------------------------------------------------------


def decide(
    trace: Trace, objects: list[S3Object], *, progress: Progress | None, bodies: Bodies = NO_BODIES
) -> None:
    """Look at the run's metadata.json, then wait, fail or parse. Bad input fails the trace;
    S3 trouble raises, for the caller to retry. `bodies`: files read ahead (`fetch_small_files`)."""
    by_name = {obj.name: obj for obj in objects}
    current = fingerprint(objects)
    if METADATA_NAME not in by_name:
        nested = next(name for name in by_name if name.endswith("/" + METADATA_NAME))
        error = (
            f"metadata.json is at {trace.id}/{nested}, one folder down: a run's name cannot contain "
            f"'/' ({trace.id}/{nested.rpartition('/')[0]} here); upload each run into a folder of its own "
            f"directly under {bucket.prefix() or 'the bucket root'}"
        )
        fail(trace, error, current, run=run_fields(None, set(by_name), trace.id))
        return
    try:
        metadata = read_metadata(by_name[METADATA_NAME], bodies)
    except TraceInputError as problem:
        # What metadata.json used to say is no longer what the run says: cleared.
        fail(trace, str(problem), current, run=run_fields(None, set(by_name), trace.id))
        return
    run = run_fields(metadata, set(by_name), trace.id)
    missing = missing_listed_files(listed_files(metadata), inventory(objects), bucket.run_prefix(trace.id))
    if missing and upload_timed_out(trace):
        shown = ", ".join(missing[:MISSING_KEYS_SHOWN])
        more = f" and {len(missing) - MISSING_KEYS_SHOWN} more" if len(missing) > MISSING_KEYS_SHOWN else ""
        error = (
            f"upload incomplete: {len(missing)} file(s) listed in metadata.json did not arrive within "
            f"CASCADE_UPLOAD_TIMEOUT ({settings.CASCADE_UPLOAD_TIMEOUT} s) of the last new file: {shown}{more}"
        )
        fail(trace, error, current, run=run, kind=failures.UPLOAD)
        return
    if missing:
        services.trace_wait_for_files(trace, run=run, waiting_for=missing, fingerprint=current)
        logger.info(
            "%s: waiting for %d file(s) listed in metadata.json: %s",
            trace.id,
            len(missing),
            ", ".join(missing[:MISSING_KEYS_SHOWN]),
        )
        return
    profiler_failure = failure(metadata)
    if profiler_failure is not None:
        fail(trace, profiler_failure, current, run=run, kind=failures.PROFILER)
        return
    run = with_derived_arch_and_config(run)
    listed = listed_files(metadata)
    if listed:
        # Only what the run says it is: files left over from an earlier upload are not read.
        keys = listed_keys(listed, inventory(objects), bucket.run_prefix(trace.id))
        objects = [obj for obj in objects if obj.key in keys]
    try:
        parse_into(
            trace,
            objects,
            current,
            run=run,
            launches_expected=metadata.get("kernel_count") != 0,
            progress=progress,
            bodies=bodies,
        )
    except TraceInputError as problem:
        fail(trace, str(problem), current, run=run, parsed=True)
    # Input the parser let through but the database refuses, and anything else: ingest.failures.


def fail(
    trace: Trace, error: str, current: str, *, run: dict, parsed: bool = False, kind: str = failures.INPUT
) -> None:
    services.trace_fail(
        trace,
        error,
        fingerprint=current,
        run=run,
        parser_version=CURRENT_PARSER_VERSION if parsed else None,
    )
    failures.trace_failed(trace.id, kind, error)


def metadata_limits() -> MetadataLimits:
    return MetadataLimits(
        max_bytes=settings.CASCADE_METADATA_MAX_BYTES,
        max_depth=settings.CASCADE_METADATA_MAX_DEPTH,
        max_string=settings.CASCADE_METADATA_MAX_STRING,
        max_layers=settings.CASCADE_METADATA_MAX_LAYERS,
    )


def read_metadata(obj: S3Object, bodies: Bodies = NO_BODIES) -> dict:
    limits = metadata_limits()
    try:
        raw = read_whole(obj, limits.max_bytes, bodies)
    except ValueError as too_large:
        raise TraceInputError(f"metadata.json: {too_large} (CASCADE_METADATA_MAX_BYTES)") from None
    try:
        return parse_metadata(raw, limits)
    except MetadataError as problem:
        raise TraceInputError(str(problem)) from None


# --- Parsing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatsSource:
    stats: S3Object
    kernelslist: S3Object | None
    ctx: str | None


def stats_sources(objects: list[S3Object]) -> list[StatsSource]:
    """The stats files under traces/, each with its context's kernelslist, in ctx order."""
    by_name = {obj.name: obj for obj in objects}
    sources = []
    for obj in objects:
        folder, _, filename = obj.name.rpartition("/")
        if folder != "traces":
            continue
        match = stats.STATS_CTX_NAME.match(filename)
        if match:
            ctx = match.group(1)
            if not stats.CTX.match(ctx):
                raise TraceInputError(
                    f"{obj.name}: {ctx[:80]!r} is not a CUDA context (0x and at most 62 hex digits)"
                )
            sources.append(StatsSource(obj, by_name.get(f"traces/kernelslist_ctx_{ctx}"), ctx))
        elif filename == "stats.csv":
            kernelslist = by_name.get("traces/kernelslist") or by_name.get("traces/kernelslist.g")
            sources.append(StatsSource(obj, kernelslist, None))
    return sorted(sources, key=lambda source: (source.ctx is None, source.ctx or ""))


def parse_into(
    trace: Trace,
    objects: list[S3Object],
    current: str,
    *,
    run: dict,
    launches_expected: bool = True,
    progress: Progress | None,
    bodies: Bodies = NO_BODIES,
) -> None:
    sources = stats_sources(objects)
    if not sources:
        raise TraceInputError(
            "no stats file in the upload: expected traces/stats_ctx_0x<ctx> or traces/stats.csv"
        )
    for source in sources:
        for obj in (source.stats, source.kernelslist):
            if obj is not None and obj.size > settings.CASCADE_MAX_STATS_BYTES:
                raise TraceInputError(
                    f"{obj.name}: {obj.size} bytes is far too large for a tracer stats file "
                    f"(CASCADE_MAX_STATS_BYTES is {settings.CASCADE_MAX_STATS_BYTES})"
                )
    services.trace_start_parsing(trace, run=run)
    opened: dict[str, Iterator[bytes]] = {}
    extra_columns = header_extra_columns(sources, bodies, opened)
    extras = services.RunExtras()
    step_index, durations = read_steps_and_timing(objects, extras, bodies)

    def launches(writer: KernelWriter) -> Iterator:
        launch_text = None
        # Nsight's durations are matched launch by launch, in order: those runs are read row
        # by row; steps, and Cascade's timing.csv, are lookups by kernel id.
        if writer.copies and (durations is None or durations.by_kernel_id):
            step_of = None if step_index is None else step_index.step_of
            duration_of = None if durations is None else durations.duration_of

            def launch_text(source: StatsSource, traced: set[int]) -> LaunchText:
                return LaunchText(source.ctx, writer, traced, step_of, duration_of)

        rows = kernel_rows(trace.id, sources, extra_columns, progress, bodies, launch_text, opened)
        rows = with_steps_and_durations(rows, step_index, durations, extras)
        return at_least_one_launch(rows) if launches_expected else rows

    count = services.trace_store_kernels(trace, launches, fingerprint=current, extras=extras)
    logger.info(
        "%s: ready, %d kernels%s", trace.id, count, f" ({extras.timing_error})" if extras.timing_error else ""
    )


def read_steps_and_timing(
    objects: list[S3Object], extras, bodies: Bodies = NO_BODIES
) -> tuple[timing.StepIndex | None, object | None]:
    """timeline.json's steps and timing.csv's durations, if the run has them and they can be read.

    Neither ever fails the trace: what could not be used is said in `extras.timing_error`.
    """
    by_name = {obj.name: obj for obj in objects}
    problems = []
    step_index = durations = None
    if TIMELINE_NAME in by_name:
        try:
            obj = by_name[TIMELINE_NAME]
            if obj.size > settings.CASCADE_METADATA_MAX_BYTES * 8:
                raise bucket.too_large(obj.size, settings.CASCADE_METADATA_MAX_BYTES * 8)
            data = bodies.get((obj.key, obj.etag))
            steps = timing.parse_timeline(
                bucket.iter_object_chunks(obj.key, etag=obj.etag) if data is None else data
            )
            extras.steps = steps
            step_index = timing.StepIndex(steps)
        except (timing.TimingError, ValueError) as problem:
            problems.append(str(problem))
    if TIMING_NAME in by_name:
        obj = by_name[TIMING_NAME]
        try:
            if obj.size > settings.CASCADE_MAX_STATS_BYTES:
                raise timing.TimingError(f"timing.csv: {obj.size} bytes, more than CASCADE_MAX_STATS_BYTES")
            durations = timing.read_timing(read_lines(obj, bodies))
            extras.timing_used = True
        except (timing.TimingError, bucket.LineTooLong) as problem:
            problems.append(str(problem))
    extras.timing_error = "; ".join(problems) or None
    return step_index, durations


GRID = slice(KERNEL_COLUMNS.index("grid_x"), KERNEL_COLUMNS.index("grid_z") + 1)
BLOCK = slice(KERNEL_COLUMNS.index("block_x"), KERNEL_COLUMNS.index("block_z") + 1)


def with_steps_and_durations(rows: Iterator[tuple], step_index, durations, extras) -> Iterator[tuple]:
    """Each row with its step and measured duration appended (KERNEL_COLUMNS' last two).

    A timing that stops matching the stats drops out from there on, with the reason; the
    durations already given are cleared when the kernels are stored.
    """
    for row in rows:
        if type(row) is LaunchBlock:  # LaunchText wrote the steps and durations
            yield row
            continue
        ctx, kernel_id = row[0], row[1]
        step = step_index.step_of(ctx, kernel_id) if step_index is not None else None
        duration = None
        if durations is not None:
            try:
                duration = durations.duration_of(ctx, kernel_id, row[GRID], row[BLOCK])
            except timing.TimingError as problem:
                extras.timing_error = "; ".join(filter(None, (extras.timing_error, str(problem))))
                durations = None
        yield (*row, step, duration)
    # Every launch matched: Nsight kernels left over drop the timing too (timing.NsysDurations).
    if durations is not None and (left_over := durations.unmatched()) is not None:
        extras.timing_error = "; ".join(filter(None, (extras.timing_error, str(left_over))))


def at_least_one_launch(rows: Iterator[tuple]) -> Iterator[tuple]:
    """`rows`, raising at the end if there were none: a blank stats file is not a run."""
    empty = True
    for row in rows:
        empty = False
        yield row
    if empty:
        raise TraceInputError(
            "no kernel launches in the stats files; a run that launched none says so with "
            '"kernel_count": 0 in metadata.json'
        )


def header_extra_columns(
    sources: list[StatsSource], bodies: Bodies = NO_BODIES, opened: dict[str, Iterator[bytes]] | None = None
) -> int:
    """The run's extra stats columns, from the one file that has the header.

    The tracer writes the header into the first context's file only, so files of later
    contexts take its width. Reads only the first line of each file: the first file read from
    S3 is opened for the parse and kept in `opened` (by key), the others are ranged GETs.
    """
    if len(sources) == 1:
        return 0  # the file's own header, if any, is read while parsing
    for source in sources:
        if source.stats.size == 0:
            continue  # a context without launches; and S3 refuses a ranged GET of 0 bytes
        data = bodies.get((source.stats.key, source.stats.etag))
        if data is not None:
            head = data[:HEADER_PEEK_BYTES]
        elif opened is not None and not opened:
            lines = bucket.iter_object_lines(source.stats.key, etag=source.stats.etag)
            try:
                head = next(lines, b"")
            except bucket.LineTooLong:  # the parse says so, in its turn
                head = bucket.read_head(source.stats.key, HEADER_PEEK_BYTES, etag=source.stats.etag)
            else:
                opened[source.stats.key] = chain([head], lines)
        else:
            head = bucket.read_head(source.stats.key, HEADER_PEEK_BYTES, etag=source.stats.etag)
        first_line = head.split(b"\n", 1)[0]
        extra = stats.first_line_extra_columns(first_line)
        if extra is not None:
            return extra
    return 0


def kernel_rows(
    trace_id: str,
    sources: list[StatsSource],
    extra_columns: int,
    progress: Progress | None,
    bodies: Bodies = NO_BODIES,
    launch_text: Callable[[StatsSource, set[int]], LaunchText] | None = None,
    opened: dict[str, Iterator[bytes]] | None = None,
) -> Iterator:
    """Rows in KERNEL_COLUMNS order, streamed file after file; bad input raises TraceInputError.

    With `launch_text` (a file's LaunchText, from its source and traced kernel ids), the
    common lines come as LaunchBlocks of COPY text instead, steps and durations included,
    among the rows of the others. `opened`: files whose lines are already streaming
    (header_extra_columns').
    """
    count = 0
    every = settings.CASCADE_PROGRESS_EVERY
    report_at = every
    for source in sources:
        traced = set()
        if source.kernelslist is not None:
            try:
                traced = stats.parse_kernelslist_lines(read_lines(source.kernelslist, bodies))
            except (stats.StatsError, bucket.LineTooLong) as problem:
                raise TraceInputError(f"{source.kernelslist.name}: {problem}") from None
        text = None if launch_text is None else launch_text(source, traced)
        lines = (opened or {}).pop(source.stats.key, None) or read_lines(source.stats, bodies)
        try:
            for row in stats.parse_stats_lines(lines, extra_columns=extra_columns, launch_text=text):
                if type(row) is LaunchBlock:
                    yield row
                    count += row.launches
                else:
                    *launch, device, stream = row
                    yield (
                        source.ctx,
                        *launch,
                        row.kernel_id in traced,
                        NO_DEVICE if device is None else device,
                        stream,
                    )
                    count += 1
                if progress is not None and count >= report_at:
                    progress(f"{trace_id}: {count} kernels read ({source.stats.name})")
                    report_at = count + every - count % every
        except (stats.StatsError, bucket.LineTooLong) as problem:
            raise TraceInputError(f"{source.stats.name}: {problem}") from None
