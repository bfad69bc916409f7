"""The reads behind the API and the admin's pages: what each asks of the database.

A trace can hold a million kernels, so nothing here loads them all at once: the API's
kernels come as `values_list` tuples through a server-side cursor (`traces.encoders` turns
them into JSON as they arrive).
"""

from collections.abc import Iterator

from traces.models import KERNEL_COLUMNS, KERNEL_ORDER, Kernel, Trace

# A TraceSummary's fields in the API reference's order: the columns read, and the JSON keys.
TRACE_SUMMARY_COLUMNS = (
    "id",
    "state",
    "error",
    "created_at",
    "updated_at",
    "model",
    "layers",
    "source_gpu",
    "trace_gpu_arch",
    "suggested_sim_config",
    "kernel_count",
    "bytes",
    "has_real_timing",
    "has_step_timeline",
    "sample",
)
TRACE_DETAIL_COLUMNS = (*TRACE_SUMMARY_COLUMNS, "metadata_json")

# Rows per round trip of the kernels' server-side cursor.
KERNEL_FETCH_ROWS = 2000


def trace_summary_rows() -> list[tuple]:
    """Every trace's TRACE_SUMMARY_COLUMNS, newest first: one query."""
    return list(Trace.objects.order_by("-created_at", "id").values_list(*TRACE_SUMMARY_COLUMNS))


def trace_detail_row(trace_id: str) -> tuple | None:
    """The trace's TRACE_DETAIL_COLUMNS (metadata.json as stored text last), or None: one query."""
    return Trace.objects.filter(pk=trace_id).values_list(*TRACE_DETAIL_COLUMNS).first()


def kernel_rows(trace_id: str, limit: int | None = None) -> Iterator[tuple]:
    """The trace's kernels as KERNEL_COLUMNS tuples in (ctx, kernel_id) order, through a
    server-side cursor.

    A fork's devices each number their kernels from 1: (ctx, device, kernel_id), the unique index.
    """
    rows = Kernel.objects.filter(trace_id=trace_id).order_by(*KERNEL_ORDER).values_list(*KERNEL_COLUMNS)
    return rows[:limit].iterator(chunk_size=KERNEL_FETCH_ROWS)
