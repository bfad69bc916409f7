"""What a pass sees in the bucket, and registers: the scan, before anything is downloaded.

A pass lists the run folders (one request per thousand runs) and then only the runs that are
new or not finished (uploading, parsing): a listing each, or one listing of the whole prefix
when that takes fewer requests (thousands of new runs). A failed trace's folder, and the
folder of a trace an operator deleted, is listed again after a minute, then twice as late each
time up to a day (a change of its files starts over); so is a folder without metadata.json
once its listing stops changing. Ready traces are not listed again unless asked (`--trace`,
`--reparse`), but their metadata.json is compared with the bucket's now and then (a HEAD:
ready_runs_changed); one whose new files were registered but not decided on (the pass met S3
or the database away: `Trace.files_undecided`) is listed every pass until they are. Each listing is registered (traces.services.traces_register), and the
scan says which traces need a decision (`needs_decision`): the parse follows (ingest.passes).

With S3 events on, the reconciling pass lists neither the run folders nor the ready runs: it
lists the work in progress (`runs_in_progress`) and the runs of one page of the bucket that
differ from the database (ingest.sweep, which calls `scan_bucket(swept=...)`).
"""

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import islice

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Count, Func, IntegerField, Q, Sum, TextField
from django.db.models.expressions import RawSQL
from django.utils import timezone

from ingest import bucket, failures
from ingest.bucket import S3Object
from ingest.listing import Swept, inventory, storable_run_id
from ingest.metadata import METADATA_NAME
from traces import services
from traces.models import CURRENT_PARSER_VERSION, DeletedTrace, Trace, TraceState

logger = logging.getLogger(__name__)

# Fewer runs to list than this: a listing each, never the whole prefix (see whole_prefix_is_cheaper).
WHOLE_PREFIX_MIN_RUNS = 50
# The listings a scan keeps in memory for the parses that follow (about 250 bytes an object);
# past this many objects, a parse lists its run again, as it would without them.
KEPT_LISTING_OBJECTS = 200_000


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
    # The runs listed, and the ready ones compared with the bucket: whose simulations a pass
    # looks at too (ingest.simulations), with the `simulations/` objects the listings held.
    looked_at: list[str] = field(default_factory=list)
    simulation_listings: dict[str, list[S3Object]] = field(default_factory=dict)
    # With S3 events on, the reconciler's page (ingest.sweep) instead of the whole bucket.
    swept: Swept | None = None


def scan_bucket(
    *,
    trace_id: str | None = None,
    reparse: bool = False,
    reparse_outdated: bool = False,
    outdated_batch: int | None = None,
    undelete: bool = True,
    swept: Swept | None = None,
    watched: Swept | None = None,
) -> Scan:
    """Register new runs, follow the ones in progress, and say which are ready to parse.

    Downloads nothing: it lists. `trace_id` limits the scan to that run (in any state);
    `reparse` also lists ready traces and asks for every one to be parsed again;
    `reparse_outdated` asks for the traces an older parser read (`outdated_batch` of them
    at most, the least recently updated first) to be parsed again. `undelete=False` leaves a
    trace an operator deleted gone while its files are those it was deleted with (an S3 event
    names a run, but does not ask for it back).

    `swept` (a reconciler's page, ingest.sweep, with S3 events on): the bucket's run folders are
    not listed nor its ready runs compared; the work in progress is followed
    (`runs_in_progress`), and the page's runs that differ from the database are listed.
    `watched` (a polling pass's watch, ingest.sweep.watch_pages): its runs that differ are listed
    too, and those whose simulations differ handed to the simulation pass.
    """
    scan = Scan()
    candidates = runs_to_list(
        scan, trace_id=trace_id, reparse=reparse, undelete=undelete, swept=swept, watched=watched
    )
    register_candidates(scan, candidates, reparse=reparse)
    if swept is not None:
        recheck_vanished(scan, candidates)
    if reparse_outdated and trace_id is None:
        for run_id in outdated_trace_ids(outdated_batch):
            if run_id not in scan.to_parse:
                scan.to_parse.append(run_id)
                scan.to_reparse.add(run_id)
    return scan


def runs_to_list(
    scan: Scan,
    *,
    trace_id: str | None,
    reparse: bool,
    undelete: bool,
    swept: Swept | None,
    watched: Swept | None,
) -> list[str]:
    """The runs whose folders this scan lists (`scan_bucket` says which); the runs it looked at
    without listing (their simulations alone differ) go into `scan.looked_at`."""
    if trace_id is not None:
        if undelete:
            services.trace_undelete(trace_id)  # asked for by name: a deleted trace comes back
        return [trace_id]
    if swept is not None:
        candidates = list(dict.fromkeys([*runs_in_progress(), *swept.runs]))
        scan.looked_at += [run_id for run_id in swept.simulation_runs if run_id not in candidates]
        return candidates
    run_ids = list(bucket.list_run_ids())
    candidates = runs_to_look_at(run_ids, reparse=reparse)
    if not reparse and (watched is None or not watched.last):
        # A watch that saw the whole prefix compared every ready run's files: no recheck.
        candidates += ready_runs_changed(run_ids, checked=scan.looked_at)
    if watched is not None:
        present = set(run_ids)
        candidates += [run_id for run_id in watched.runs if run_id in present and run_id not in candidates]
        scan.looked_at += [
            r for r in watched.simulation_runs if r not in candidates and r not in scan.looked_at
        ]
    return candidates


def register_candidates(scan: Scan, candidates: list[str], *, reparse: bool) -> None:
    """List each candidate's folder, register what it holds, and sort it: to parse (its listing
    kept, within KEPT_LISTING_OBJECTS), to look at again later, or decided as it is."""
    # Listed on the S3 threads, registered here in the bucket's order; a listing that fails
    # (S3 unreachable) ends the scan, as one listing of the bucket that fails does.
    kept = 0  # objects in scan.listings
    listed = (
        (run_id, objects) for run_id, objects in run_listings(candidates, scan.simulation_listings) if objects
    )
    while listings := list(islice(listed, REGISTER_BATCH)):
        registered = register_listings(listings)
        for (run_id, objects), (trace, change) in zip(listings, registered, strict=True):
            scan.listed += 1
            scan.looked_at.append(run_id)
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
            elif trace.state == TraceState.READY and trace.files_undecided:
                services.trace_files_decided(trace)  # new files, and nothing to decide on them


def recheck_vanished(scan: Scan, candidates: list[str]) -> None:
    """A run followed while in progress whose folder has since been removed: looked at later,
    not every pass (a scan of the whole bucket never lists it: no folder)."""
    if gone := set(candidates) - set(scan.looked_at):
        in_progress = Trace.objects.filter(pk__in=gone, state__in=(TraceState.UPLOADING, TraceState.FAILED))
        for trace in in_progress:
            services.trace_recheck_later(trace)


# Runs registered together: their new traces in one INSERT.
REGISTER_BATCH = 500


def run_listings(
    run_ids: list[str], simulations: dict[str, list[S3Object]]
) -> Iterator[tuple[str, list[S3Object]]]:
    """Each run's trace objects, in the order of `run_ids`: a listing per run, on the S3
    threads, or one listing of the whole prefix when that takes fewer requests (thousands of
    new runs). The `simulations/` objects they held go to `simulations`, by run."""
    if whole_prefix_is_cheaper(run_ids):
        listed = bucket.list_runs_objects(set(run_ids), simulations=simulations)
        for run_id in run_ids:
            simulations.setdefault(run_id, [])
            yield run_id, listed.get(run_id, [])
        return

    def listing(run_id: str) -> list[S3Object]:
        return bucket.list_run_objects(run_id, simulations=simulations.setdefault(run_id, []))

    for run_id, listed in bucket.overlapped(listing, run_ids):
        yield run_id, listed.result()


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


def runs_in_progress() -> list[str]:
    """The traces a pass follows whatever the bucket's listing says: parsing (a pass died
    mid-way), uploading or failed with their recheck due, ready with new files not yet decided
    on (runs_to_look_at's rule). From the database alone: what a reconciler's sweep
    (ingest.sweep) lists besides its page."""
    due = Q(recheck_after__isnull=True) | Q(recheck_after__lte=timezone.now())
    work = (
        Q(state=TraceState.PARSING)
        | (Q(state__in=(TraceState.UPLOADING, TraceState.FAILED)) & due)
        | Q(state=TraceState.READY, files_undecided=True)
    )
    return list(Trace.objects.filter(work).order_by("id").values_list("id", flat=True))


def runs_to_look_at(run_ids: list[str], *, reparse: bool = False) -> list[str]:
    """Of the bucket's run folders, those worth listing: new, unfinished, or due for a recheck."""
    now = timezone.now()
    traces = {
        trace_id: (state, after, undecided)
        for trace_id, state, after, undecided in Trace.objects.values_list(
            "id", "state", "recheck_after", "files_undecided"
        )
    }
    deleted = dict(DeletedTrace.objects.values_list("id", "recheck_after"))

    def due(after) -> bool:
        return after is None or after <= now

    def worth_a_look(run_id: str) -> bool:
        if run_id in deleted:
            return due(deleted[run_id])
        if reparse or run_id not in traces:
            return True
        state, after, undecided = traces[run_id]
        # An uploading trace waits only while its folder has no metadata.json (scan_bucket); a
        # ready one whose new files a pass registered but could not decide on is looked at again.
        return (
            state == TraceState.PARSING
            or (state in (TraceState.UPLOADING, TraceState.FAILED) and due(after))
            or (state == TraceState.READY and undecided)
        )

    return [run_id for run_id in run_ids if worth_a_look(run_id)]


def ready_runs_changed(run_ids: list[str], *, checked: list[str] | None = None) -> list[str]:
    """Ready runs whose metadata.json changed since they were parsed: re-uploaded.

    One HEAD request per ready run whose recheck is due (every CASCADE_READY_RECHECK_SECONDS,
    each run at its own moment: traces_recheck_ready_later), never a listing: metadata.json is
    written last, so a re-upload rewrites it. The database sends the one ETag compared, never
    the run's file list (thousands of entries for some runs). `checked` gets the runs compared.
    """
    present = set(run_ids)
    due = Trace.objects.filter(state=TraceState.READY).filter(
        Q(recheck_after__isnull=True) | Q(recheck_after__lte=timezone.now())
    )
    changed, compared = [], []
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
        compared.append(trace_id)
        if etag != parsed_etag:
            changed.append(trace_id)
    services.traces_recheck_ready_later(compared)
    if checked is not None:
        checked += compared
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


# --- Registration (listing only) ------------------------------------------------------------


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
