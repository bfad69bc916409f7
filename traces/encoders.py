"""JSON for the Traces API, encoded straight from `values_list` rows.

A trace can hold a million kernels: a serializer object per kernel costs several times
what encoding tuples with orjson does, and one list of a million dicts costs gigabytes.
So rows are read in a fixed order, turned into the documented shapes here, and kernels are
encoded in chunks as they arrive from a server-side cursor.
"""

import json
from collections.abc import Iterable, Iterator
from datetime import datetime

import orjson

from traces.models import KERNEL_COLUMNS, KERNEL_ORDER, NO_DEVICE, Kernel, Trace

SUMMARY_FIELDS = (
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
DETAIL_FIELDS = (*SUMMARY_FIELDS, "metadata_json")
_TIMESTAMPS = frozenset({SUMMARY_FIELDS.index("created_at"), SUMMARY_FIELDS.index("updated_at")})

KERNEL_CHUNK = 2000


def format_timestamp(value: datetime) -> str:
    """`2026-11-08T08:59:02.590922Z`: always UTC, always microseconds."""
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def trace_row_to_dict(fields: tuple[str, ...], row: tuple) -> dict:
    return {
        name: format_timestamp(value) if index in _TIMESTAMPS else value
        for index, (name, value) in enumerate(zip(fields, row, strict=True))
    }


def kernel_row_to_dict(row: tuple) -> dict:
    """A kernel object of the reference; a fork's device and stream ids follow as extra keys."""
    (
        ctx,
        kernel_id,
        name,
        trace_file,
        gx,
        gy,
        gz,
        bx,
        by,
        bz,
        blocks,
        threads,
        insts,
        reported,
        traced,
        device,
        stream,
    ) = row
    kernel = {
        "ctx": ctx,
        "kernel_id": kernel_id,
        "name": name,
        "trace_file": trace_file,
        "grid_dim": [gx, gy, gz],
        "block_dim": [bx, by, bz],
        "blocks": blocks,
        "threads": threads,
        "total_insts": insts,
        "total_reported_insts": reported,
        "traced": traced,
    }
    if device != NO_DEVICE:
        kernel["device_id"] = device
        kernel["stream_id"] = stream
    return kernel


def trace_summaries() -> list[dict]:
    """Every trace as a TraceSummary, newest first: one query."""
    rows = Trace.objects.order_by("-created_at", "id").values_list(*SUMMARY_FIELDS)
    return [trace_row_to_dict(SUMMARY_FIELDS, row) for row in rows]


def trace_detail_head(trace_id: str, *, raw_metadata: bool = True) -> dict | None:
    """A TraceDetail without its kernels, or None: one query.

    `metadata` is the stored JSON text wrapped as an orjson Fragment (embedded as is, in
    metadata.json's key order), or parsed when `raw_metadata` is false (the browsable API).
    """
    row = Trace.objects.filter(pk=trace_id).values_list(*DETAIL_FIELDS).first()
    if row is None:
        return None
    head = trace_row_to_dict(SUMMARY_FIELDS, row[:-1])
    metadata_json = row[-1]
    if metadata_json is None:
        head["metadata"] = None
    else:
        head["metadata"] = orjson.Fragment(metadata_json) if raw_metadata else json.loads(metadata_json)
    return head


def kernel_rows(trace_id: str, limit: int | None = None) -> Iterator[tuple]:
    """The trace's kernels in (ctx, kernel_id) order, through a server-side cursor.

    A fork's devices each number their kernels from 1: (ctx, device, kernel_id), the unique index.
    """
    rows = Kernel.objects.filter(trace_id=trace_id).order_by(*KERNEL_ORDER).values_list(*KERNEL_COLUMNS)
    return rows[:limit].iterator(chunk_size=KERNEL_CHUNK)


def kernels(trace_id: str, limit: int | None = None) -> list[dict]:
    return [kernel_row_to_dict(row) for row in kernel_rows(trace_id, limit)]


def encode_summaries(summaries: list[dict]) -> bytes:
    return orjson.dumps(summaries)


def encode_trace_detail(head: dict, rows: Iterable[tuple]) -> Iterator[bytes]:
    """The TraceDetail JSON in pieces: the head, then kernels a chunk at a time.

    Memory stays at one chunk whatever the kernel count; concatenated, the pieces are
    exactly `orjson.dumps({**head, "kernels": [...]})`.
    """
    head_json = orjson.dumps({**head, "kernels": []})
    yield head_json[: -len(b"[]}")] + b"["
    chunk: list[dict] = []
    first = True
    for row in rows:
        chunk.append(kernel_row_to_dict(row))
        if len(chunk) == KERNEL_CHUNK:
            yield (b"" if first else b",") + orjson.dumps(chunk)[1:-1]
            first = False
            chunk = []
    if chunk:
        yield (b"" if first else b",") + orjson.dumps(chunk)[1:-1]
    yield b"]}"
