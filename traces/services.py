"""Every change of a trace's state, and what it writes. Ingestion decides; the functions here
write; a trace's launches are stored by traces.kernel_store, which they call. A trace's state
changes here and nowhere else: registered (`uploading`), waiting for listed files, `parsing`,
`ready` with its kernels, `failed`, deleted. Writes that a concurrent pass could race take the
trace's ingestion lock (traces.locks: mark failed, delete) or run inside the pass that holds it
(everything ingestion calls); the row itself is locked (`select_for_update`) where two writers
could meet.
"""

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from traces import body_cache, signals
from traces.kernel_store import KernelWriter, counting_without_totals, kernels_delete, kernels_replace
from traces.locks import trace_lock
from traces.models import (
    CURRENT_PARSER_VERSION,
    DeletedTrace,
    DetailBody,
    Kernel,
    Step,
    Trace,
    TraceState,
    files_fingerprint,
    next_trace_keys,
)
from traces.storable_text import replace_unstorable

logger = logging.getLogger(__name__)

# A failed trace's (or a deleted run's) unchanged listing is looked at again after a minute,
# then twice as long each time, up to a day; a change of its files starts over.
RECHECK_FIRST = timedelta(minutes=1)
RECHECK_MAX = timedelta(days=1)

# What a decision writes; `files`, `bytes`, `files_changed_at` are registration's (a concurrent scan's).
DECISION_FIELDS = [
    "state",
    "files_undecided",
    "error",
    "kernel_count",
    "kernels_without_totals",
    "warnings",
    "traced_launches",
    "parser_version",
    "parsed_fingerprint",
    "waiting_for",
    "recheck_after",
    "recheck_seconds",
    "metadata_json",
    "model",
    "layers",
    "source_gpu",
    "trace_gpu_arch",
    "suggested_sim_config",
    "has_step_timeline",
    "has_real_timing",
    "timing_error",
    "parse_attempts",
]


class TraceBusy(Exception):
    """Another process is ingesting the trace right now."""


# --- Registration: what the bucket holds ------------------------------------------------------


def trace_register(run_id: str, files: list[dict], *, sample: bool) -> tuple[Trace | None, str]:
    """Record a run's listing: (trace, "created" | "changed" | "unchanged"), as `traces_register`."""
    return traces_register([(run_id, files, sample)])[0]


def traces_register(runs: list[tuple[str, list[dict], bool]]) -> list[tuple[Trace | None, str]]:
    """Record runs' listings, (run id, files, sample) each: a (trace, how) per run, in order,
    how being "created", "changed" or "unchanged".

    Writes only when a listing changed. A run whose trace an operator deleted stays gone
    (None, "deleted") while its listing is the one it was deleted with; once its files
    change it is registered again, as new. New runs are inserted together (a pass over
    thousands of new runs makes a few queries, not a few per run); a run another pass
    registered meanwhile is taken as that pass left it.
    """
    run_ids = [run_id for run_id, _, _ in runs]
    deleted = DeletedTrace.objects.in_bulk(run_ids)
    existing = Trace.objects.in_bulk(run_ids)
    now = timezone.now()
    outcomes: dict[str, tuple[Trace | None, str]] = {}
    new: list[Trace] = []
    for run_id, files, sample in runs:
        fingerprint = files_fingerprint(files)
        gone = deleted.get(run_id)
        if gone is not None:
            if gone.files_fingerprint == fingerprint:
                _recheck_later(gone)
                outcomes[run_id] = None, "deleted"
                continue
            gone.delete()
        size = sum(item["bytes"] for item in files)
        trace = existing.get(run_id)
        if trace is None:
            new.append(
                Trace(
                    id=run_id,
                    state=TraceState.UPLOADING,
                    files=files,
                    bytes=size,
                    files_changed_at=now,
                    created_at=now,
                    updated_at=now,
                    sample=sample,
                )
            )
        elif trace.files == files:
            outcomes[run_id] = trace, "unchanged"
        else:
            trace.files, trace.bytes, trace.files_changed_at = files, size, now
            # New files: a failed trace is worth a look at once, its backoff and its count
            # of failed tries (ingest.failures) start over; a ready one stays to be decided
            # on until a decision is made (a pass that fails before one leaves it for the next).
            trace.recheck_after, trace.recheck_seconds, trace.parse_attempts = None, 0, 0
            trace.files_undecided = True
            trace.save(
                update_fields=[
                    "files",
                    "bytes",
                    "files_changed_at",
                    "recheck_after",
                    "recheck_seconds",
                    "parse_attempts",
                    "files_undecided",
                ]
            )
            outcomes[run_id] = trace, "changed"
    if new:
        for trace, key in zip(new, next_trace_keys(len(new)), strict=True):
            trace.key = key
        Trace.objects.bulk_create(new, ignore_conflicts=True)
        stored = Trace.objects.in_bulk([trace.id for trace in new])
        for trace in new:
            if trace.id in stored and stored[trace.id].key == trace.key:
                outcomes[trace.id] = trace, "created"
            else:  # another pass registered it first: as for any known run
                outcomes[trace.id] = trace_register(trace.id, trace.files, sample=trace.sample)
    return [outcomes[run_id] for run_id in run_ids]


def trace_files_decided(trace: Trace) -> None:
    """A ready trace's changed listing needs no decision after all (its metadata.json gone, say):
    it stops being looked at every pass. Bookkeeping: `updated_at` stays."""
    trace.files_undecided = False
    Trace.objects.filter(pk=trace.pk).update(files_undecided=False)


def trace_recheck_later(trace: Trace) -> None:
    """A failed trace's listing, or that of a folder without metadata.json, did not change:
    look again later, twice as late as last time."""
    _recheck_later(trace)


def _recheck_later(record: Trace | DeletedTrace) -> None:
    seconds = min(
        max(record.recheck_seconds * 2, RECHECK_FIRST.total_seconds()),
        RECHECK_MAX.total_seconds(),
    )
    record.recheck_seconds = int(seconds)
    record.recheck_after = timezone.now() + timedelta(seconds=seconds)
    # Bookkeeping the API does not show: `updated_at`, and with it the trace's ETag, stay.
    type(record).objects.filter(pk=record.pk).update(
        recheck_seconds=record.recheck_seconds, recheck_after=record.recheck_after
    )


# --- Decisions, made by an ingestion pass that holds the trace's lock --------------------------


def trace_wait_for_files(
    trace: Trace, *, run: dict, waiting_for: list[str], fingerprint: str, warnings: list[dict] | None = None
) -> None:
    """metadata.json is there, files it lists are not: the upload goes on."""
    _apply(trace, run)
    trace.state = TraceState.UPLOADING
    trace.error = None
    trace.waiting_for = waiting_for
    trace.warnings = warnings or []
    trace.parsed_fingerprint = fingerprint
    trace.recheck_after, trace.recheck_seconds = None, 0  # listed every pass until the files land
    trace.save(
        update_fields=[
            "state",
            "error",
            "waiting_for",
            "warnings",
            "parsed_fingerprint",
            "recheck_after",
            "recheck_seconds",
            *run,
        ]
    )


def trace_set_owner(trace: Trace, owner) -> None:
    """Who pushed the run (a user), as its owner record in the bucket says (ingest.owners)."""
    Trace.objects.filter(pk=trace.pk).update(owner=owner, updated_at=timezone.now())


def trace_start_parsing(trace: Trace, *, run: dict) -> None:
    """Committed on its own, so that the API shows the parse under way.

    A failure from here on is this parser's reading of the files, so the trace records the
    parser's version: an upgrade's `--reparse-outdated` tries again.
    """
    _apply(trace, run)
    trace.state = TraceState.PARSING
    trace.error = None
    trace.waiting_for = []
    trace.parser_version = CURRENT_PARSER_VERSION
    trace.recheck_after, trace.recheck_seconds = None, 0  # a pass that dies here: the next one goes on
    trace.save(
        update_fields=[
            "state",
            "error",
            "waiting_for",
            "parser_version",
            "recheck_after",
            "recheck_seconds",
            *run,
        ]
    )


@dataclass
class RunExtras:
    """What a parse found besides the launches: the run's steps and whether its timing held.

    Filled while the rows stream (a timing.csv that stops matching the stats halfway sets
    `timing_error`), read when they are stored.
    """

    steps: list[dict] = field(default_factory=list)
    timing_used: bool = False
    timing_error: str | None = None
    # What a reader of the trace must know (`Trace.warnings`), and the launches with their
    # instruction trace file in the run.
    warnings: list[dict] = field(default_factory=list)
    traced_launches: int = 0


def trace_store_kernels(
    trace: Trace,
    rows: Iterable | Callable[[KernelWriter], Iterable],
    *,
    fingerprint: str,
    extras: RunExtras | None = None,
) -> int:
    """Replace the trace's kernels with `rows` (as kernels_replace takes them), and its steps, and make it ready.

    One transaction: readers see the old kernels or the new ones, never a mix, and a pass
    killed mid-way leaves the old ones. Rows are consumed as they come (`rows` is a
    generator reading S3), so a million kernels cost one row of memory. A timing that
    stopped matching halfway is dropped whole (one UPDATE), never kept in part.
    """
    extras = extras or RunExtras()
    without_totals = [0]
    with transaction.atomic():
        count = kernels_replace(
            trace.id,
            lambda writer: counting_without_totals(rows(writer) if callable(rows) else rows, without_totals),
            trace_key=trace.key,
        )
        if extras.timing_error and extras.timing_used:
            Kernel.stored.filter(trace=trace.key).update(duration_ns=None)
        Step.objects.filter(trace_id=trace.id).delete()
        for start in range(0, len(extras.steps), 1000):
            Step.objects.bulk_create(
                [
                    Step(trace_id=trace.id, **dataclasses.asdict(step))
                    for step in extras.steps[start : start + 1000]
                ]
            )
        trace.has_step_timeline = bool(extras.steps)
        trace.has_real_timing = extras.timing_used and not extras.timing_error
        trace.timing_error = extras.timing_error
        trace.state = TraceState.READY
        trace.error = None
        trace.kernel_count = count
        trace.kernels_without_totals = without_totals[0]
        trace.warnings = extras.warnings
        trace.traced_launches = extras.traced_launches
        trace.parsed_fingerprint = fingerprint
        trace.recheck_after, trace.recheck_seconds = ready_recheck_after(), 0
        trace.parse_attempts = 0
        trace.files_undecided = False
        trace.save(update_fields=DECISION_FIELDS)
        transaction.on_commit(lambda: signals.trace_parsed.send(sender=Trace, trace=trace))
    return count


def ready_recheck_after():
    """When a ready trace's metadata.json is next compared with the bucket's (a re-upload?)."""
    return timezone.now() + timedelta(seconds=settings.CASCADE_READY_RECHECK_SECONDS)


# Moments within CASCADE_READY_RECHECK_SECONDS that ready traces are spread over.
RECHECK_SLOTS = 64


def traces_recheck_ready_later(trace_ids: list[str]) -> None:
    """Ready traces just compared with the bucket: each looked at again once every
    CASCADE_READY_RECHECK_SECONDS, at its own moment within it.

    The moment is one of RECHECK_SLOTS, from a hash of the trace's name: traces that became
    ready together (a bulk upload, the first pass after a restore) are not all compared in one
    pass and then all again in another, and the next look is at most one interval away. One
    UPDATE per slot, whatever the number of traces.
    """
    if not trace_ids:
        return
    interval = settings.CASCADE_READY_RECHECK_SECONDS
    now = timezone.now()
    if interval <= 0:  # every pass looks at every ready trace
        Trace.objects.filter(pk__in=trace_ids).update(recheck_after=now)
        return
    by_slot: dict[int, list[str]] = {}
    for trace_id in trace_ids:
        slot = int.from_bytes(hashlib.sha256(trace_id.encode()).digest()[:4], "big") % RECHECK_SLOTS
        by_slot.setdefault(slot, []).append(trace_id)
    period = interval * 1_000_000  # microseconds: exact arithmetic, the same moment every time
    elapsed = (now - datetime.fromtimestamp(0, UTC)) // timedelta(microseconds=1)
    for slot, ids in by_slot.items():
        wait = period - (elapsed - period * slot // RECHECK_SLOTS) % period  # in (0, period]
        Trace.objects.filter(pk__in=ids).update(recheck_after=now + timedelta(microseconds=wait))


def trace_fail(
    trace: Trace,
    error: str,
    *,
    fingerprint: str,
    run: dict,
    parser_version: int | None = None,
    warnings: list[dict] | None = None,
) -> None:
    """The upload is wrong (the run's own fault): failed with `error`, kernels dropped.

    The decision holds until the run's files change; the unchanged listing is looked at
    again with a growing wait (trace_recheck_later). `run` is what metadata.json described,
    cleared when it could not be read; `parser_version` is set when parsing failed.

    Never refused for what it writes: characters PostgreSQL text cannot hold (NUL, lone
    surrogates) are replaced, and if the run's fields are refused all the same, the failure
    is written without them.
    """
    _apply(trace, run)
    for name in RUN_FIELDS:
        setattr(trace, name, replace_unstorable(getattr(trace, name)))
    trace.error = replace_unstorable(error)
    trace.warnings = warnings or []
    try:
        _write_failure(trace, parser_version, fingerprint)
    except DatabaseError:
        logger.exception(
            "%s: the run's fields cannot be stored: the failure is written without them", trace.id
        )
        for name, value in RUN_FIELDS.items():
            setattr(trace, name, value)
        _write_failure(trace, parser_version, fingerprint)


# What metadata.json describes of a run, and each field's value when it could not be read.
RUN_FIELDS = {
    "metadata_json": None,
    "model": None,
    "layers": [],
    "source_gpu": None,
    "trace_gpu_arch": None,
    "suggested_sim_config": None,
}


def _write_failure(trace: Trace, parser_version: int | None, fingerprint: str) -> None:
    with transaction.atomic():
        kernels_delete(trace.key)
        Step.objects.filter(trace_id=trace.id).delete()
        trace.timing_error = None
        trace.state = TraceState.FAILED
        trace.kernel_count = 0
        trace.kernels_without_totals = 0
        trace.traced_launches = 0
        trace.parser_version = parser_version
        trace.parsed_fingerprint = fingerprint
        trace.waiting_for = []
        trace.recheck_seconds = int(RECHECK_FIRST.total_seconds())
        trace.recheck_after = timezone.now() + RECHECK_FIRST
        trace.files_undecided = False
        trace.save(update_fields=DECISION_FIELDS)


def _apply(trace: Trace, run: dict) -> None:
    for name, value in run.items():
        setattr(trace, name, value)


# --- Operators: they wait for no pass, and no pass undoes them ------------------------------


def trace_mark_failed(trace_id: str, error: str, *, retry: bool = False) -> None:
    """Mark a trace failed with `error` and drop its kernels.

    The decision holds until the trace's files change in S3 (the next poll leaves it
    alone), unless `retry`: then the next poll looks at it again, as after an S3 outage.
    Raises TraceBusy while a pass is parsing the trace: its result would overwrite this.
    """
    with trace_lock(trace_id) as acquired:
        if not acquired:
            raise TraceBusy(f"trace {trace_id} is being ingested right now; try again when it is done")
        with transaction.atomic():
            trace = Trace.objects.select_for_update().get(pk=trace_id)
            kernels_delete(trace.key)
            Step.objects.filter(trace_id=trace_id).delete()
            trace.state = TraceState.FAILED
            trace.error = error
            trace.kernel_count = 0
            trace.kernels_without_totals = 0
            trace.traced_launches = 0
            trace.waiting_for = []
            trace.parsed_fingerprint = "" if retry else trace.files_fingerprint()
            trace.recheck_after, trace.recheck_seconds = (
                (None, 0)
                if retry
                else (
                    timezone.now() + RECHECK_FIRST,
                    int(RECHECK_FIRST.total_seconds()),
                )
            )
            trace.save(
                update_fields=[
                    "state",
                    "error",
                    "kernel_count",
                    "kernels_without_totals",
                    "traced_launches",
                    "waiting_for",
                    "parsed_fingerprint",
                    "recheck_after",
                    "recheck_seconds",
                ]
            )


def traces_mark_sample(trace_ids: Iterable[str], *, sample: bool = True) -> int:
    """Mark traces as samples (or not): an operator's word, which no pass changes. The count marked.

    `updated_at` moves with it: `sample` is in the API's answers, whose ETags follow it."""
    changed = Trace.objects.filter(pk__in=list(trace_ids)).exclude(sample=sample)
    return changed.update(sample=sample, updated_at=timezone.now())


def trace_delete(trace_id: str, *, deleted_by: str = "") -> None:
    """Delete a trace and its kernels; it stays deleted until its files in the bucket change.

    Raises TraceBusy while a pass is ingesting it (its commit would fail on, or bring back,
    the deleted row). Its written details go first, in a transaction of their own (hundreds of
    megabytes would lengthen the trace's); then the trace, its contexts and steps at once, in one
    short transaction; its launches later, in batches (`kernel_store.kernels_purge`).
    """
    with trace_lock(trace_id) as acquired:
        if not acquired:
            raise TraceBusy(f"trace {trace_id} is being ingested right now; try again when it is done")
        DetailBody.objects.filter(trace_id=trace_id).delete()
        with transaction.atomic():
            trace = Trace.objects.select_for_update().filter(pk=trace_id).first()
            if trace is None:
                return
            DeletedTrace.objects.update_or_create(
                pk=trace_id,
                defaults={
                    "files_fingerprint": trace.files_fingerprint(),
                    "deleted_at": timezone.now(),
                    "deleted_by": deleted_by,
                    "recheck_after": timezone.now() + RECHECK_FIRST,
                    "recheck_seconds": int(RECHECK_FIRST.total_seconds()),
                },
            )
            trace.delete()
    body_cache.forget(trace_id)


def trace_undelete(run_id: str) -> None:
    """Forget that a run's trace was deleted: the next look at its folder registers it anew."""
    DeletedTrace.objects.filter(pk=run_id).delete()
