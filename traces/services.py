"""Writes to the registry that more than one caller needs (ingestion, the admin)."""

from collections.abc import Iterable
from itertools import islice

from django.db import connection, transaction

from traces.locks import trace_lock
from traces.models import KERNEL_COLUMNS, Kernel, Trace, TraceState

BULK_CREATE_BATCH = 5000


def kernels_replace(trace_id: str, rows: Iterable[tuple]) -> int:
    """Replace a trace's kernels with `rows` (KERNEL_COLUMNS order); returns the count.

    Must run inside the caller's transaction, so that readers see the old kernels or the new
    ones, never a mix. On PostgreSQL rows stream through COPY (several times faster than
    INSERTs, memory flat); elsewhere they are bulk-inserted in batches.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("kernels_replace must run inside transaction.atomic()")
    Kernel.objects.filter(trace_id=trace_id)._raw_delete(using=Kernel.objects.db)
    if connection.vendor == "postgresql":
        return _copy_kernels(trace_id, rows)
    return _bulk_create_kernels(trace_id, rows)


def _copy_kernels(trace_id: str, rows: Iterable[tuple]) -> int:
    table = connection.ops.quote_name(Kernel._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(c) for c in ("trace_id", *KERNEL_COLUMNS))
    count = 0
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row((trace_id, *row))
                count += 1
    return count


def _bulk_create_kernels(trace_id: str, rows: Iterable[tuple]) -> int:
    count = 0
    iterator = iter(rows)
    while batch := list(islice(iterator, BULK_CREATE_BATCH)):
        Kernel.objects.bulk_create(
            Kernel(trace_id=trace_id, **dict(zip(KERNEL_COLUMNS, row, strict=True))) for row in batch
        )
        count += len(batch)
    return count


class TraceBusy(Exception):
    """Another process is ingesting the trace right now."""


def trace_mark_failed(trace_id: str, error: str, *, retry: bool = False) -> None:
    """Mark a trace failed with `error` and drop its kernels.

    The decision holds until the trace's files change in S3 (the next poll leaves it
    alone), unless `retry`: then the next poll looks at it again, as after an S3 outage.
    Raises TraceBusy while a pass is parsing the trace: its result would overwrite this.
    """
    with trace_lock(trace_id) as acquired:
        if not acquired:
            raise TraceBusy(f"trace {trace_id} is being ingested right now; try again when it is done")
        _mark_failed(trace_id, error, retry=retry)


def _mark_failed(trace_id: str, error: str, *, retry: bool) -> None:
    with transaction.atomic():
        trace = Trace.objects.select_for_update().get(pk=trace_id)
        Kernel.objects.filter(trace_id=trace_id)._raw_delete(using=Kernel.objects.db)
        trace.state = TraceState.FAILED
        trace.error = error
        trace.kernel_count = 0
        trace.parsed_fingerprint = "" if retry else trace.files_fingerprint()
        trace.save(update_fields=["state", "error", "kernel_count", "parsed_fingerprint"])
