"""Every write to a trace and its kernels. Ingestion decides; the functions here write.

A trace's state changes here and nowhere else: registered (`uploading`), waiting for listed
files, `parsing`, `ready` with its kernels, `failed`, deleted. Writes that a concurrent
pass could race take the trace's ingestion lock (traces.locks: mark failed, delete) or run
inside the pass that holds it (everything ingestion calls); the row itself is locked
(`select_for_update`) where two writers could meet.
"""

import dataclasses
import hashlib
import logging
import queue
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from psycopg.copy import QueuedLibpqWriter

from traces.locks import trace_lock
from traces.models import (
    CURRENT_PARSER_VERSION,
    KERNEL_COLUMNS,
    DeletedTrace,
    Kernel,
    KernelContext,
    KernelName,
    Step,
    Trace,
    TraceState,
    files_fingerprint,
    name_digest,
    next_trace_keys,
)
from traces.text import replace_unstorable

logger = logging.getLogger(__name__)

TOTAL_INSTS = KERNEL_COLUMNS.index("total_insts")
# A failed trace's (or a deleted run's) unchanged listing is looked at again after a minute,
# then twice as long each time, up to a day; a change of its files starts over.
RECHECK_FIRST = timedelta(minutes=1)
RECHECK_MAX = timedelta(days=1)

# What a decision writes; `files`, `bytes` and `files_changed_at` belong to registration,
# which a concurrent scan may update meanwhile.
DECISION_FIELDS = [
    "state",
    "error",
    "kernel_count",
    "kernels_without_totals",
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
# A trace's (ctx, device) pairs are numbered in a smallint (KernelContext.index, Kernel.context).
MAX_CONTEXTS = 32_768


class TraceBusy(Exception):
    """Another process is ingesting the trace right now."""


class TraceDataTooLarge(ValueError):
    """The run holds more of something than the columns that store it can number: its fault."""


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
            # of failed tries (ingest.failures) start over.
            trace.recheck_after, trace.recheck_seconds, trace.parse_attempts = None, 0, 0
            trace.save(
                update_fields=[
                    "files",
                    "bytes",
                    "files_changed_at",
                    "recheck_after",
                    "recheck_seconds",
                    "parse_attempts",
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


def trace_wait_for_files(trace: Trace, *, run: dict, waiting_for: list[str], fingerprint: str) -> None:
    """metadata.json is there, files it lists are not: the upload goes on."""
    _apply(trace, run)
    trace.state = TraceState.UPLOADING
    trace.error = None
    trace.waiting_for = waiting_for
    trace.parsed_fingerprint = fingerprint
    trace.recheck_after, trace.recheck_seconds = None, 0  # listed every pass until the files land
    trace.save(
        update_fields=[
            "state",
            "error",
            "waiting_for",
            "parsed_fingerprint",
            "recheck_after",
            "recheck_seconds",
            *run,
        ]
    )


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


def trace_store_kernels(
    trace: Trace,
    rows: Iterable | Callable[["KernelWriter"], Iterable],
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
        trace.parsed_fingerprint = fingerprint
        trace.recheck_after, trace.recheck_seconds = ready_recheck_after(), 0
        trace.parse_attempts = 0
        trace.save(update_fields=DECISION_FIELDS)
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


def counting_without_totals(rows: Iterable, tally: list[int]) -> Iterator:
    """`rows` as they come, counting into `tally[0]` the launches the tracer wrote no totals for."""
    for row in rows:
        tally[0] += row.without_totals if type(row) is LaunchBlock else row[TOTAL_INSTS] is None
        yield row


def trace_fail(
    trace: Trace, error: str, *, fingerprint: str, run: dict, parser_version: int | None = None
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
        trace.parser_version = parser_version
        trace.parsed_fingerprint = fingerprint
        trace.waiting_for = []
        trace.recheck_seconds = int(RECHECK_FIRST.total_seconds())
        trace.recheck_after = timezone.now() + RECHECK_FIRST
        trace.save(update_fields=DECISION_FIELDS)


def _apply(trace: Trace, run: dict) -> None:
    for name, value in run.items():
        setattr(trace, name, value)


def kernels_replace(
    trace_id: str, rows: Iterable | Callable[["KernelWriter"], Iterable], *, trace_key: int | None = None
) -> int:
    """Replace a trace's kernels with `rows` (KERNEL_COLUMNS tuples); returns the count.

    `rows` may also be a function that makes them from the KernelWriter that stores them:
    ingestion's fast path writes launches as COPY text (LaunchBlock) with the writer's shapes.
    Must run inside the caller's transaction. Launches go through one COPY on PostgreSQL
    (several times faster than INSERTs), INSERTs elsewhere; memory holds one chunk of rows
    and the trace's distinct names, whatever the launch count. `trace_key`, when the caller
    holds the trace, saves looking it up.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("kernels_replace must run inside transaction.atomic()")
    if trace_key is None:
        trace_key = Trace.objects.filter(pk=trace_id).values_list("key", flat=True).get()
    kernels_delete(trace_key)
    writer = KernelWriter(trace_key, contexts={})
    return writer.write(rows(writer) if callable(rows) else rows)


def kernels_append(trace_id: str, rows: Iterable[tuple]) -> int:
    """Add launches to a trace's (tests build traces context by context with it)."""
    trace_key = Trace.objects.filter(pk=trace_id).values_list("key", flat=True).get()
    return KernelWriter(trace_key).write(rows)


def kernels_delete(trace_key: int) -> None:
    """A trace's launches and contexts: two statements, whatever their number (names stay)."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM traces_kernel WHERE trace_key = %s", [trace_key])
        cursor.execute("DELETE FROM traces_kernelcontext WHERE trace_key = %s", [trace_key])


# Launches per chunk of rows: a chunk's new names are looked up in one round trip.
KERNEL_CHUNK = 2_000
NAME_BATCH = 1000
# A launch's columns as written: its shape, which every launch of one name with the same
# launch dimensions in one context shares, then what each launch has of its own.
_ROW = {name: KERNEL_COLUMNS.index(name) for name in KERNEL_COLUMNS}
# grid_x to threads, in the order of the rows the writer is given (KernelWriter slices them so).
_DIMENSIONS = slice(_ROW["grid_x"], _ROW["threads"] + 1)
SHAPE_COLUMNS = ("trace_key", "context", "name_id", *KERNEL_COLUMNS[_DIMENSIONS])
LAUNCH_COLUMNS = (
    "kernel_id",
    "total_insts",
    "total_reported_insts",
    "traced",
    "step",
    "duration_ns",
    "stream",
    "trace_file",
)
STORED_COLUMNS = SHAPE_COLUMNS + LAUNCH_COLUMNS
# COPY blocks (psycopg's, up to 128 KiB) queued between the parse and the thread that sends
# them: the parse runs ahead of PostgreSQL by 2 MiB at most, whatever the trace's size.
COPY_QUEUE_BLOCKS = 16


@dataclass(slots=True)
class LaunchBlock:
    """Launches already written as COPY text rows in STORED_COLUMNS order: ingestion's fast
    path builds them from KernelWriter.shape_text and launch_tail, on PostgreSQL."""

    text: bytes
    launches: int
    without_totals: int


def trace_file_suffix(trace_file: str, kernel_id: int) -> str | None:
    """What follows `kernel-<id>` in a launch's trace file: its context's naming scheme.

    None when the file does not start so, or a digit follows the id (`kernel-1` + `2.trace`
    would read as kernel 12's).
    """
    prefix = f"kernel-{kernel_id}"
    if not trace_file.startswith(prefix):
        return None
    suffix = trace_file[len(prefix) :]
    return None if suffix[:1].isdigit() else suffix


class _QueuedCopyWriter(QueuedLibpqWriter):
    """psycopg's threaded COPY writer, so that the parse goes on while PostgreSQL loads, with
    a queue of COPY_QUEUE_BLOCKS blocks instead of its 1,024 (128 MiB): memory stays flat."""

    def __init__(self, cursor):
        super().__init__(cursor)
        self._queue = queue.Queue(maxsize=COPY_QUEUE_BLOCKS)


class KernelWriter:
    """Stores a trace's launches: names resolved to KernelName ids (a dict per trace,
    bounded by its distinct names), (ctx, device) to the trace's context numbers (assigned
    as they come, renumbered at the end in the rare case they did not come in (ctx, device)
    order), trace files dropped where the context's scheme derives them.

    On PostgreSQL all of a write goes through one COPY, opened at its first launch and sent
    by a thread of psycopg's while the rows are still being parsed; names first seen once it
    is open are looked up and added on a connection of their own.
    """

    def __init__(self, trace_key: int, contexts: dict | None = None):
        """`contexts`: the trace's, if the caller knows them (none, after kernels_delete)."""
        self.trace_key = trace_key
        self.names: dict[str, int] = {}
        self.contexts: dict[tuple, tuple[int, str | None]] = (
            {
                (ctx, device): (index, suffix)
                for index, ctx, device, suffix in KernelContext.objects.filter(trace=trace_key).values_list(
                    "index", "ctx", "device", "trace_file_suffix"
                )
            }
            if contexts is None
            else contexts
        )
        self.new_contexts: list[KernelContext] = []
        # Whether LaunchBlocks can be written: COPY text is PostgreSQL's.
        self.copies = connection.vendor == "postgresql"
        self.names_connection = None
        self._copy = None

    def write(self, rows: Iterable) -> int:
        """Store `rows` (KERNEL_COLUMNS tuples, and LaunchBlocks where `copies`); returns the launch count."""
        count = 0
        chunk: list[tuple] = []
        try:
            with ExitStack() as copying:
                for row in rows:
                    if type(row) is LaunchBlock:
                        if self._copy is None:
                            copying.enter_context(self._copying())
                        self._copy.write(row.text)
                        count += row.launches
                        continue
                    chunk.append(row)
                    if len(chunk) == KERNEL_CHUNK:
                        self._write_chunk(chunk, copying)
                        count += len(chunk)
                        chunk = []
                if chunk:
                    self._write_chunk(chunk, copying)
                    count += len(chunk)
        finally:
            if self.names_connection is not None:
                self.names_connection.close()
                self.names_connection = None
        if self.new_contexts:
            KernelContext.objects.bulk_create(self.new_contexts)
            self.new_contexts = []
        self._launch_order()
        return count

    @contextmanager
    def _copying(self) -> Iterator[None]:
        columns = ", ".join(connection.ops.quote_name(c) for c in STORED_COLUMNS)
        with connection.cursor() as cursor:
            raw = cursor.cursor
            with raw.copy(
                f"COPY traces_kernel ({columns}) FROM STDIN", writer=_QueuedCopyWriter(raw)
            ) as copy:
                self._copy = copy
                try:
                    yield
                finally:
                    self._copy = None

    def context_of(self, ctx: str, device: int, trace_file: str, kernel_id: int) -> tuple[int, str | None]:
        """The trace's number for (ctx, device) and its trace files' scheme (what follows
        `kernel-<id>`; None when its first launch's file followed none), new ones as they come."""
        key = (ctx, device)
        context = self.contexts.get(key)
        if context is None:
            context = (len(self.contexts), trace_file_suffix(trace_file, kernel_id))
            if context[0] >= MAX_CONTEXTS:
                raise TraceDataTooLarge(
                    f"more than {MAX_CONTEXTS:,} contexts (CUDA context and device pairs) in one run, "
                    "the most a trace can hold (a context's number is a 16-bit integer in the database)"
                )
            self.contexts[key] = context
            self.new_contexts.append(
                KernelContext(
                    trace_key=self.trace_key,
                    index=context[0],
                    ctx=ctx,
                    device=device,
                    trace_file_suffix=context[1],
                )
            )
        return context

    def resolve_names(self, names: set[str]) -> None:
        """Look up (and add) the ids of `names` at once, for shape_text: one query for all."""
        self._resolve_names(names - self.names.keys())

    def shape_text(self, context: int, name: str, dimensions: Iterable[int]) -> bytes:
        """COPY text of SHAPE_COLUMNS, with the tab after them: for every launch of `name` with
        these dimensions (KERNEL_COLUMNS' grid_x to threads) in the trace's context `context`."""
        if name not in self.names:
            self._resolve_names({name})
        values = (self.trace_key, context, self.names[name], *dimensions)
        return ("\t".join(map(str, values)) + "\t").encode()

    @staticmethod
    def launch_tail(traced: bool, step: int | None, duration: int | None = None) -> bytes:
        """COPY text of LAUNCH_COLUMNS after the totals, from the tab before `traced` to the
        row's end: for a launch with no stream and the trace file its scheme gives."""
        return b"\t%s\t%s\t%s\t\\N\t\\N\n" % (
            b"t" if traced else b"f",
            b"\\N" if step is None else b"%d" % step,
            b"\\N" if duration is None else b"%d" % duration,
        )

    def _write_chunk(self, chunk: list[tuple], copying: ExitStack) -> None:
        self._resolve_names({row[_ROW["name"]] for row in chunk} - self.names.keys())
        names, trace_key, context_of = self.names, self.trace_key, self.context_of
        stored = []
        for row in chunk:
            kernel_id, trace_file = row[1], row[3]
            context, suffix = context_of(row[0], row[_ROW["device"]], trace_file, kernel_id)
            if suffix is not None and trace_file == f"kernel-{kernel_id}{suffix}":
                trace_file = None
            stored.append(
                (
                    trace_key,
                    context,
                    names[row[2]],
                    *row[_DIMENSIONS],
                    kernel_id,
                    row[_ROW["total_insts"]],
                    row[_ROW["total_reported_insts"]],
                    row[_ROW["traced"]],
                    row[_ROW["step"]],
                    row[_ROW["duration_ns"]],
                    row[_ROW["stream"]],
                    trace_file,
                )
            )
        if self.copies:
            if self._copy is None:
                copying.enter_context(self._copying())
            write_row = self._copy.write_row  # formats in C
            for row in stored:
                write_row(row)
        else:
            columns = ", ".join(connection.ops.quote_name(c) for c in STORED_COLUMNS)
            placeholders = ", ".join(["%s"] * len(STORED_COLUMNS))
            with connection.cursor() as cursor:
                cursor.executemany(f"INSERT INTO traces_kernel ({columns}) VALUES ({placeholders})", stored)

    def _resolve_names(self, new: set[str]) -> None:
        """Ids for `new` names: inserted where missing, then read back.

        On PostgreSQL the names are inserted and committed on a connection of their own: in
        the parse's transaction, a name two parses both add would make the second wait for
        the first's whole parse, and two parses adding two such names in turn would deadlock.
        Names are only ever added, so one a failed parse leaves behind is harmless.
        """
        by_digest = sorted((name_digest(name), name) for name in new)
        for start in range(0, len(by_digest), NAME_BATCH):
            batch = self._known_names(by_digest[start : start + NAME_BATCH])
            if not batch:
                continue
            if self.copies:
                with self._names_cursor() as cursor:
                    cursor.execute(
                        "INSERT INTO traces_kernelname (digest, name) "
                        "SELECT * FROM unnest(%s::bytea[], %s::text[]) ON CONFLICT (digest) DO NOTHING",
                        [[digest for digest, _ in batch], [name for _, name in batch]],
                    )
            else:  # one writer at a time
                KernelName.objects.bulk_create(
                    [KernelName(digest=digest, name=name) for digest, name in batch], ignore_conflicts=True
                )
            if lost := self._known_names(batch):
                raise RuntimeError(f"kernel names inserted but not found: {[name for _, name in lost]}")

    def _names_cursor(self):
        if self.names_connection is None:
            self.names_connection = connection.copy()
        return self.names_connection.cursor()

    def _known_names(self, batch: list[tuple[bytes, str]]) -> list[tuple[bytes, str]]:
        """Take the ids of the names already stored (most of them, once a lab's kernels have been
        seen); return the others. While the COPY is open, on the names connection."""
        digests = [digest for digest, _ in batch]
        if self._copy is None:
            found_rows = KernelName.objects.filter(digest__in=digests).values_list("digest", "id")
        else:
            with self._names_cursor() as cursor:
                cursor.execute("SELECT digest, id FROM traces_kernelname WHERE digest = ANY(%s)", [digests])
                found_rows = cursor.fetchall()
        found = {bytes(digest): key for digest, key in found_rows}
        missing = []
        for digest, name in batch:
            if (key := found.get(digest)) is None:
                missing.append((digest, name))
            else:
                self.names[name] = key
        return missing

    def _launch_order(self) -> None:
        """Contexts numbered in the database's (ctx, device) order, as the API reads launches.

        The parser reads contexts in that order, so this is one small query; otherwise the
        trace's launches are renumbered through negative numbers (the primary key holds
        at each row).
        """
        if len(self.contexts) < 2:
            return
        ordered = list(
            KernelContext.objects.filter(trace=self.trace_key)
            .order_by("ctx", "device")
            .values_list("index", flat=True)
        )
        if ordered == sorted(ordered):
            return
        renumber = " ".join(f"WHEN {old} THEN {-1 - new}" for new, old in enumerate(ordered))
        with connection.cursor() as cursor:
            for table, column in (("traces_kernel", "context"), ("traces_kernelcontext", '"index"')):
                cursor.execute(
                    f"UPDATE {table} SET {column} = CASE {column} {renumber} END WHERE trace_key = %s",
                    [self.trace_key],
                )
                cursor.execute(
                    f"UPDATE {table} SET {column} = -1 - {column} WHERE trace_key = %s", [self.trace_key]
                )


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
    the deleted row). Two statements for the kernels and the trace, whatever their number.
    """
    with trace_lock(trace_id) as acquired:
        if not acquired:
            raise TraceBusy(f"trace {trace_id} is being ingested right now; try again when it is done")
        with transaction.atomic():
            trace = Trace.objects.select_for_update().filter(pk=trace_id).first()
            if trace is None:
                return
            kernels_delete(trace.key)
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


def trace_undelete(run_id: str) -> None:
    """Forget that a run's trace was deleted: the next look at its folder registers it anew."""
    DeletedTrace.objects.filter(pk=run_id).delete()
