"""A ready trace's large detail written once in every coding the API sends, and served from then on.

Computing a 1M-launch detail reads a million launches and encodes 400 MB of JSON, seconds of
CPU for every GET (and more for gzip). So once a parse makes a trace ready (`trace_parsed`,
which ingest answers with a Celery task or its background thread), its detail is computed once
more, in the background, and its bytes in identity, gzip and zstd are written to the database,
which every web node reads (docs/decisions/0012): a GET then streams them, with ranges.

- What: exactly the bytes a GET computes: the same encoder (`encoders.encode_trace_detail`) in
  the same chunks, compressed by the same functions (`http.compressor`), from one snapshot.
- Which version: the trace row's `updated_at` it was read at (`DetailBody.updated_at`). A GET
  serves a body only while the row still has it, so its ETag is the computed answer's, and a
  changed trace (a re-parse, a sample mark) never gets an old body: it is computed as before
  until the next write, and a write removes the trace's other versions.
- Atomic: a body's header and its pieces are written in one transaction, under the trace's
  lock; readers see the whole body once it commits, or none. A delete waits for the lock
  (TraceBusy); a trace changed meanwhile makes the write roll back.
- Bounded by `CASCADE_DETAIL_BODIES_BYTES` in all (0: nothing is written): a coding larger
  than the bound is not kept, and after a write the oldest-written other traces' bodies go
  until the total fits.
- Removed with the trace: the rows cascade from `Trace`.
"""

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime

import psycopg
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from cascade.db_routers import read_connection
from traces import encoders, http, selectors
from traces.locks import trace_lock
from traces.models import DetailBody, DetailBodyChunk, Trace, TraceState

logger = logging.getLogger(__name__)

# Below this many kernels a detail is sent in one piece, with a Content-Length, and computed on
# every GET: at about 400 bytes of JSON a launch, from 2 MB up, encoding costs more than a read
# of stored bytes; known before any kernel is read, and below it a detail is built in
# milliseconds. Above it, a ready trace's detail is written once (this module) and its
# compressed answers are also kept on the web node's disk until then (`body_cache`).
STREAM_KERNELS_ABOVE = 5000
# A body's pieces: a range of bytes is a range of pieces, and a GET holds one piece at a time.
CHUNK_BYTES = 1 << 20
CODINGS = (http.IDENTITY, http.GZIP, http.ZSTD)
# How long a write waits for the trace's lock, and between two tries.
LOCK_WAIT_SECONDS = 60
LOCK_RETRY_SECONDS = 0.2
UPDATED_AT_COLUMN = selectors.TRACE_DETAIL_COLUMNS.index("updated_at")


def enabled() -> bool:
    return settings.CASCADE_DETAIL_BODIES_BYTES > 0


def worth_writing(state: str, kernel_count: int | None) -> bool:
    """A trace whose detail is written once: a ready one whose detail is streamed."""
    return enabled() and state == TraceState.READY and (kernel_count or 0) > STREAM_KERNELS_ABOVE


# --- the write ------------------------------------------------------------------------------


class _Coding:
    """One coding's body as it is written: its pieces inserted as they fill."""

    def __init__(self, trace_id: str, updated_at: datetime, coding: str, limit: int, now: datetime):
        self.coding, self.limit = coding, limit
        self.compress, self.finish = (None, None) if coding == http.IDENTITY else http.compressor(coding)
        self.body = DetailBody.objects.create(
            trace_id=trace_id, updated_at=updated_at, coding=coding, size=0, written_at=now
        )
        self.pending = bytearray()
        self.size = 0
        self.seq = 0

    def write(self, chunk: bytes) -> None:
        if self.body is None:
            return
        self.pending += self.compress(chunk) if self.compress else chunk
        self.flush(whole_pieces_only=True)

    def close(self) -> None:
        if self.body is None:
            return
        if self.finish:
            self.pending += self.finish()
        self.flush(whole_pieces_only=False)
        if self.body is not None:
            DetailBody.objects.filter(pk=self.body.pk).update(size=self.size)

    def flush(self, *, whole_pieces_only: bool) -> None:
        while len(self.pending) >= CHUNK_BYTES or (self.pending and not whole_pieces_only):
            length = min(len(self.pending), CHUNK_BYTES)
            self.size += length
            if self.size > self.limit:  # larger than every body together may be: not kept
                logger.info(
                    "%s: its %s detail is over CASCADE_DETAIL_BODIES_BYTES, not kept",
                    self.body.trace_id,
                    self.coding,
                )
                self.body.delete()
                self.body, self.pending = None, bytearray()
                return
            with memoryview(self.pending) as pending:  # the piece leaves without a copy
                insert_piece(self.body.pk, self.seq, pending[:length])
            del self.pending[:length]
            self.seq += 1


# On PostgreSQL a piece goes in and out through psycopg's own cursor on the connection Django
# holds, its bytes bound and returned in binary: Django's cursor binds on the client, as text,
# so a 1 MB piece would travel as 2 MB of hex, built and parsed at both ends (the read at a
# third of its speed). Elsewhere (SQLite) through the ORM.
INSERT_PIECE = "INSERT INTO traces_detailbodychunk (body_id, seq, data) VALUES (%s, %s, %s)"
SELECT_PIECES = (
    "SELECT seq, data FROM traces_detailbodychunk WHERE body_id = %s AND seq BETWEEN %s AND %s ORDER BY seq"
)


def insert_piece(body_id: int, seq: int, data: memoryview) -> None:
    if connection.vendor != "postgresql":
        DetailBodyChunk.objects.create(body_id=body_id, seq=seq, data=bytes(data))
        return
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(INSERT_PIECE, (body_id, seq, data))


def pieces(body_id: int, first: int, last: int) -> Iterator[tuple[int, bytes]]:
    """Pieces `first` to `last` of a body, in order, as (number, bytes). On PostgreSQL one query
    whose rows psycopg streams as the server sends them (`Cursor.stream`): the server reads the
    next piece while this one is sent, one statement sees the whole body, and a client gone
    cancels it. Inside a transaction the query runs in a savepoint, which that cancel rolls
    back to, so the transaction goes on. Elsewhere a query a piece."""
    if read_connection.vendor != "postgresql":
        for seq in range(first, last + 1):
            data = (
                DetailBodyChunk.objects.filter(body_id=body_id, seq=seq)
                .values_list("data", flat=True)
                .first()
            )
            if data is None:
                return
            yield seq, bytes(data)
        return
    read_connection.ensure_connection()
    pg = read_connection.connection
    # psycopg's own savepoint, beside the query it guards (neither goes through Django's cursor).
    with pg.transaction() if read_connection.in_atomic_block else nullcontext():
        with psycopg.Cursor(pg) as cursor:
            yield from cursor.stream(SELECT_PIECES, (body_id, first, last), binary=True)


@contextmanager
def trace_lock_waited(trace_id: str) -> Iterator[bool]:
    """The trace's lock (`traces.locks`), tried again for up to LOCK_WAIT_SECONDS: a write
    follows the commit of the parse whose pass still holds it for a moment."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        with trace_lock(trace_id) as acquired:
            if acquired or time.monotonic() >= deadline:
                yield acquired
                return
        time.sleep(LOCK_RETRY_SECONDS)


def detail_bodies_write(trace_id: str) -> dict[str, int]:
    """Write the trace's detail in every coding, if it is a ready large trace whose current
    version is not written yet: {coding: bytes} of what was written, {} when nothing was (or
    the trace changed or went meanwhile).

    Under the trace's lock, as a parse or a delete: a delete waits for the write (TraceBusy)
    rather than fail on the rows the write is adding, and a parse cannot replace the kernels
    being read. A lock held past LOCK_WAIT_SECONDS means a pass is parsing it again (it asks
    for a write when it commits) or it is being deleted: nothing is written."""
    if not enabled():
        return {}
    with trace_lock_waited(trace_id) as acquired:
        if not acquired:
            logger.info(
                "%s: its lock is held (parsed again, or deleted): its detail is not written", trace_id
            )
            return {}
        return _write(trace_id)


def _write(trace_id: str) -> dict[str, int]:
    row, rows = selectors.trace_detail_snapshot(trace_id)
    try:
        if row is None:
            return {}
        head = encoders.trace_detail_head(row)
        if not worth_writing(head["state"], head["kernel_count"]):
            return {}
        updated_at = row[UPDATED_AT_COLUMN]
        done = set(
            DetailBody.objects.filter(trace_id=trace_id, updated_at=updated_at).values_list(
                "coding", flat=True
            )
        )
        if done.issuperset(CODINGS):
            return {}
        limit, now = settings.CASCADE_DETAIL_BODIES_BYTES, timezone.now()
        try:
            with transaction.atomic():
                codings = [
                    _Coding(trace_id, updated_at, coding, limit, now)
                    for coding in CODINGS
                    if coding not in done
                ]
                for chunk in encoders.encode_trace_detail(head, rows):
                    for coding in codings:
                        coding.write(chunk)
                for coding in codings:
                    coding.close()
                written = {coding.coding: coding.size for coding in codings if coding.body is not None}
                current = Trace.objects.filter(pk=trace_id).values_list("updated_at", flat=True).first()
                if current != updated_at:  # changed while it was read: this version is never served
                    transaction.set_rollback(True)
                    return {}
                # The trace's other versions: never served again.
                DetailBody.objects.filter(trace_id=trace_id).exclude(updated_at=updated_at).delete()
                # When it was published (the eviction's order, and what the bench reports).
                DetailBody.objects.filter(trace_id=trace_id, updated_at=updated_at).update(
                    written_at=timezone.now()
                )
        except (IntegrityError, psycopg.IntegrityError):  # written by another worker first
            return {}
    finally:
        close = getattr(rows, "close", None)  # the held cursor, when one was declared
        if close is not None:
            close()
    bodies_evict(limit, keep=trace_id)
    return written


def bodies_evict(limit: int, *, keep: str) -> int:
    """The oldest-written bodies of traces other than `keep` removed until all fit in `limit`
    bytes: the number removed."""
    bodies = list(DetailBody.objects.order_by("written_at", "pk").values_list("pk", "trace_id", "size"))
    total = sum(size for _, _, size in bodies)
    removed = []
    for pk, trace_id, size in bodies:
        if total <= limit:
            break
        if trace_id != keep:
            removed.append(pk)
            total -= size
    if removed:
        DetailBody.objects.filter(pk__in=removed).delete()
    return len(removed)


def write_in_background(trace_id: str) -> None:
    """A background worker's call: never raises (the next parse writes again; until then a GET
    computes the detail as before)."""
    try:
        written = detail_bodies_write(trace_id)
        if written:
            logger.info(
                "%s: detail written once: %s",
                trace_id,
                ", ".join(f"{coding} {size:,} bytes" for coding, size in written.items()),
            )
    except Exception:  # the database away, a bug: the queue's thread must live on
        logger.exception("%s: cannot write its detail; GETs compute it", trace_id)


# --- the read -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Current:
    """A trace's `updated_at` (its ETag's source) and its written body in one coding, if any."""

    updated_at: datetime
    body_id: int | None = None
    size: int | None = None


def current_body(trace_id: str, coding: str) -> Current | None:
    """The trace's `updated_at` and its body of this version in `coding`: one query on the trace
    table; None when there is no such trace."""
    if not enabled():
        updated_at = http.trace_updated_at(trace_id)
        return None if updated_at is None else Current(updated_at)
    bodies = DetailBody.objects.filter(trace=OuterRef("pk"), coding=coding, updated_at=OuterRef("updated_at"))
    row = (
        Trace.objects.filter(pk=trace_id)
        .annotate(body_id=Subquery(bodies.values("pk")[:1]), body_size=Subquery(bodies.values("size")[:1]))
        .values_list("updated_at", "body_id", "body_size")
        .first()
    )
    return None if row is None else Current(*row)


def read_body(body_id: int, start: int, stop: int) -> Iterator[bytes]:
    """Bytes `start` to `stop` of a written body, a piece at a time. A body removed meanwhile
    (its trace deleted or written again, between two of SQLite's queries) ends the stream
    early: the Content-Length says so."""
    first, last = start // CHUNK_BYTES, (stop - 1) // CHUNK_BYTES
    expected = first
    for seq, data in pieces(body_id, first, last):
        if seq != expected:
            break
        expected += 1
        base = seq * CHUNK_BYTES
        low, high = max(start - base, 0), min(stop - base, len(data))
        yield data if (low, high) == (0, len(data)) else data[low:high]
    if expected != last + 1:
        logger.warning("detail body %s: removed while it was sent", body_id)
