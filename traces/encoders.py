"""JSON for the Traces API, encoded straight from `values_list` rows.

A trace can hold a million kernels: a serializer object per kernel costs several times
what encoding tuples with orjson does, and one list of a million dicts costs gigabytes.
So `traces.selectors` reads rows in a fixed order, they are turned into the shapes
`traces.shapes` declares here (its keys, in its order), and kernels are encoded in chunks as
they arrive from a server-side cursor.
"""

import json
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

import orjson

from traces import shapes
from traces.analysis import Comparison, Launches, Ratios, Summary, TraceTotals
from traces.models import KERNEL_COLUMNS, NO_DEVICE
from traces.selectors import WAITING_FOR_METADATA

# A TraceSummary's keys in order (`traces.shapes`: the selectors read its columns in this order),
# those added after the reference's (after the detail's `kernels`), and where its timestamps are.
SUMMARY_KEYS = shapes.TRACE_SUMMARY.keys
ADDED_KEYS = tuple(field.name for field in shapes.TRACE_ADDED)
_TIMESTAMPS = frozenset(
    index for index, field in enumerate(shapes.TRACE_SUMMARY.fields) if field.kind == shapes.DATETIME
)

# Kernels per piece of a streamed TraceDetail.
KERNEL_CHUNK = 2000


def format_timestamp(value: datetime) -> str:
    """`2026-11-08T08:59:02.590922Z`: always UTC, always microseconds."""
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def trace_row_to_dict(row: tuple) -> dict:
    """A TraceSummary from its stored values (`selectors.TRACE_SUMMARY_COLUMNS`)."""
    summary = {
        name: format_timestamp(value) if index in _TIMESTAMPS else value
        for index, (name, value) in enumerate(zip(SUMMARY_KEYS, row, strict=True))
    }
    summary["warnings"] = warnings_in_order(summary["warnings"])
    return summary


_WARNING_KEYS = shapes.TRACE_WARNING.keys


def warnings_in_order(warnings: list[dict]) -> list[dict]:
    """A trace's warnings, each with the declared keys in their order: PostgreSQL's jsonb keeps
    an object's keys in an order of its own (the shortest first)."""
    return [{key: warning.get(key) for key in _WARNING_KEYS} for warning in warnings]


# Keys of files shown in `waiting_for`, at most (the admin shows as many).
WAITING_KEYS_SHOWN = 10


def waiting_text(missing: list[str] | None) -> str | None:
    """An uploading trace's `waiting_for`, as the admin says it: `metadata.json` before it lands
    (`missing` None), then the files metadata.json lists that have not (none: null)."""
    if missing is None:
        return WAITING_FOR_METADATA
    if not missing:
        return None
    shown = ", ".join(missing[:WAITING_KEYS_SHOWN])
    if len(missing) > WAITING_KEYS_SHOWN:
        shown += f" and {len(missing) - WAITING_KEYS_SHOWN} more"
    return f"{len(missing)} file{'' if len(missing) == 1 else 's'} listed in metadata.json: {shown}"


_STATE = shapes.TRACE_SUMMARY.index("state")
_WAITING_FOR = shapes.TRACE_SUMMARY.index("waiting_for")
_WARNINGS = shapes.TRACE_SUMMARY.index("warnings")


def with_added_values(summary: dict, state: str, waiting_for, has_metadata: bool) -> dict:
    """`summary` (a TraceSummary from stored values) with `waiting_for` as the API says it."""
    if state != "uploading":
        summary["waiting_for"] = None
    else:
        summary["waiting_for"] = waiting_text(waiting_for if has_metadata else None)
    return summary


def kernel_row_to_dict(row: tuple) -> dict:
    """A kernel object of the reference, then its step's name and measured time (null when the
    run has no timeline or timing); a fork's device and stream ids follow as extra keys."""
    # One row's values, named in KERNEL_COLUMNS' order.
    (ctx, kernel_id, name, trace_file, gx, gy, gz, bx, by, bz, blocks, threads,
     insts, reported, traced, device, stream, step, duration_ns) = row  # fmt: skip
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
        "step": step,
        "duration_ns": duration_ns,
    }
    if device != NO_DEVICE:
        kernel["device_id"] = device
        kernel["stream_id"] = stream
    return kernel


def trace_detail_head(row: tuple, *, raw_metadata: bool = True) -> dict:
    """A TraceDetail without its kernels, from `selectors.trace_detail_row()`.

    `metadata` is the stored JSON text wrapped as an orjson Fragment (embedded as is, in
    metadata.json's key order), or parsed when `raw_metadata` is false (the browsable API).
    """
    head = trace_row_to_dict(row[:-1])
    metadata_json = row[-1]
    with_added_values(head, row[_STATE], row[_WAITING_FOR], metadata_json is not None)
    added = {name: head.pop(name) for name in ADDED_KEYS}
    if metadata_json is None:
        head["metadata"] = None
    else:
        head["metadata"] = orjson.Fragment(metadata_json) if raw_metadata else json.loads(metadata_json)
    # After the reference's keys (its `kernels` last but these): `detail_head_and_tail` splits them.
    head.update(added)
    return head


def detail_head_and_tail(head: dict) -> tuple[dict, dict]:
    """A `trace_detail_head` as the keys before `kernels` and those after it."""
    return (
        {name: value for name, value in head.items() if name not in ADDED_KEYS},
        {name: head[name] for name in ADDED_KEYS if name in head},
    )


_LAYERS = shapes.TRACE_SUMMARY.index("layers")


def list_row_to_dict(row: tuple, layers: dict[str, list] | None = None) -> dict:
    """A TraceSummary from a row of `selectors.trace_summary_rows` (timestamps already the
    API's text, `layers` JSON text). `layers`: lists already read, by their text (traces
    share a handful of them), to be only encoded again."""
    summary = dict(zip(SUMMARY_KEYS, row, strict=True))
    waiting = row[_WAITING_FOR]  # the list's text (selectors._list_rows): null unless uploading
    if waiting is not None:
        waiting = waiting_text(None if waiting == WAITING_FOR_METADATA else orjson.loads(waiting))
    summary["waiting_for"] = waiting
    summary["warnings"] = warnings_in_order(orjson.loads(row[_WARNINGS]))
    text = row[_LAYERS]
    if layers is None:
        summary["layers"] = orjson.loads(text)
    elif (read := layers.get(text)) is not None:
        summary["layers"] = read
    else:
        summary["layers"] = layers[text] = orjson.loads(text)
    return summary


def encode_summary_chunks(rows: Iterable[tuple]) -> Iterator[bytes]:
    """The list's JSON array in pieces, KERNEL_CHUNK summaries at a time (as the detail's
    kernels): concatenated, exactly `orjson.dumps` of the list of `list_row_to_dict`s."""
    yield b"["
    chunk: list[dict] = []
    first = True
    layers: dict[str, list] = {}
    try:
        for row in rows:
            if len(layers) > 1000:  # distinct layer lists: a bound, whatever they are
                layers.clear()
            chunk.append(list_row_to_dict(row, layers))
            if len(chunk) == KERNEL_CHUNK:
                yield (b"" if first else b",") + orjson.dumps(chunk)[1:-1]
                first = False
                chunk = []
        if chunk:
            yield (b"" if first else b",") + orjson.dumps(chunk)[1:-1]
        yield b"]"
    finally:
        close = getattr(rows, "close", None)
        if close is not None:  # a client gone: the rows' cursor with it
            close()


def encode_with_kernels(
    head: dict, rows: Iterable[tuple], kernel: Callable[[tuple], dict], *, trace: bool = False
) -> Iterator[bytes]:
    """A detail's JSON in pieces: its head, then `kernel(row)` for each row a chunk at a time;
    a trace's (`trace`), then its tail (`detail_head_and_tail`: the keys added after the
    reference's `kernels`). Memory stays at one chunk whatever the kernel count."""
    head, tail = detail_head_and_tail(head) if trace else (head, {})
    head_json = orjson.dumps({**head, "kernels": []})
    yield head_json[: -len(b"[]}")] + b"["
    chunk: list[dict] = []
    first = True
    for row in rows:
        chunk.append(kernel(row))
        if len(chunk) == KERNEL_CHUNK:
            yield (b"" if first else b",") + orjson.dumps(chunk)[1:-1]
            first = False
            chunk = []
    if chunk:
        yield (b"" if first else b",") + orjson.dumps(chunk)[1:-1]
    yield b"]," + orjson.dumps(tail)[1:] if tail else b"]}"


def encode_trace_detail(head: dict, rows: Iterable[tuple]) -> Iterator[bytes]:
    """The TraceDetail JSON in pieces: the head, then kernels a chunk at a time.

    Memory stays at one chunk whatever the kernel count; concatenated, the pieces are
    exactly `orjson.dumps({**before, "kernels": [...], **after})` (`detail_head_and_tail`).
    """
    return encode_with_kernels(head, rows, kernel_row_to_dict, trace=True)


# --- /summary and /compare (traces.analysis) --------------------------------------------


def trace_totals_dict(totals: TraceTotals) -> dict:
    return {
        "id": totals.id,
        "kernel_count": totals.kernel_count,
        "total_insts": totals.total_insts,
        "duration_ns": totals.duration_ns,
    }


def summary_dict(summary: Summary) -> dict:
    """A TraceAnalysis: the trace's totals, its steps, its kernels by name (`analysis.summary`)."""
    return {
        **trace_totals_dict(summary.totals),
        "steps": [
            {
                "name": step.name,
                "phase": step.phase,
                "kernels": step.kernels,
                "total_insts": step.total_insts,
                "duration_ns": step.duration_ns,
            }
            for step in summary.steps
        ],
        "kernels": [
            {
                "name": kernel.name,
                "demangled": kernel.demangled,
                "launches": kernel.launches,
                "traced": kernel.traced,
                "total_insts": kernel.total_insts,
                "duration_ns": kernel.duration_ns,
                "insts_share": kernel.insts_share,
                "time_share": kernel.time_share,
            }
            for kernel in summary.kernels
        ],
        # After the keys it had: launches whose instruction trace file the run holds.
        "traced_launches": sum(kernel.traced for kernel in summary.kernels),
    }


def _launches_dict(side: Launches | Ratios) -> dict:
    return {"launches": side.launches, "total_insts": side.total_insts, "duration_ns": side.duration_ns}


def comparison_dict(comparison: Comparison) -> dict:
    """A TraceComparison (`analysis.compare`): both traces' totals, then one row per kernel."""
    return {
        "a": trace_totals_dict(comparison.a),
        "b": trace_totals_dict(comparison.b),
        "by": comparison.by,
        "kernels": [
            {
                "name": row.name,
                "names": row.names,
                "a": _launches_dict(row.a),
                "b": _launches_dict(row.b),
                "ratios": _launches_dict(row.ratios),
            }
            for row in comparison.kernels
        ],
    }


def encode_json(value: dict) -> bytes:
    return orjson.dumps(value)


# --- kernels.csv ------------------------------------------------------------------------------

# The detail's kernel keys in its order, grid and block unfolded (the columns the API reads);
# `traced` true/false; `device` and `stream` empty for a launch outside the device-id fork (the
# detail has no `device_id` key for it).
KERNEL_CSV_HEADER = KERNEL_COLUMNS
CSV_HEADER_LINE = ",".join(KERNEL_CSV_HEADER) + "\r\n"
_CSV_LINE = ",".join(["%s"] * len(KERNEL_CSV_HEADER)) + "\r\n"
_NEEDS_QUOTES = re.compile(r'[,"\r\n]').search


# What a spreadsheet takes for the start of a formula (OWASP's CSV injection rule): such a
# cell gets a leading `'`, which the spreadsheet reads as "text" and does not show.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_text(value: str | None, *, raw: bool = False) -> str:
    """A text field as csv.writer writes it (the excel dialect, QUOTE_MINIMAL): quoted when it
    holds a comma, a quote or a line break, its quotes doubled; empty for null. Unless `raw`,
    a value that a spreadsheet would run as a formula (FORMULA_STARTS) is written after a `'`."""
    if value is None:
        return ""
    if not raw and value.startswith(FORMULA_STARTS):
        value = "'" + value
    if _NEEDS_QUOTES(value):
        return '"' + value.replace('"', '""') + '"'
    return value


def encode_kernels_csv(rows: Iterable[tuple], *, raw: bool = False) -> Iterator[bytes]:
    """The launches as CSV (RFC 4180, byte for byte what Python's csv.writer writes: CRLF, a
    field quoted when it holds a comma, a quote or a line break), UTF-8, the header first, then
    KERNEL_CHUNK rows a piece: memory stays at one chunk, as `encode_trace_detail`'s.

    One `%` format per row rather than csv.writer: csv.writer formats and scans every field,
    13 of them integers that never need quotes, and took 2.5 times as long on a million launches
    (docs/performance.md). Only the four text fields are checked, the repeated ones (ctx,
    name, step) once per distinct value. tests/traces/test_kernels_csv.py compares the bytes
    with csv.writer's.

    Every text field (ctx, name, trace_file, step) is written through `csv_text`: a cell that
    would start a formula is neutralised unless `raw` (`?raw=1`); the numbers never are.
    """
    yield CSV_HEADER_LINE.encode()
    quoted: dict[str | None, str] = {}
    lines: list[str] = []
    for (ctx, kernel_id, name, trace_file, gx, gy, gz, bx, by, bz, blocks, threads,
         insts, reported, traced, device, stream, step, duration_ns) in rows:  # fmt: skip
        if (quoted_ctx := quoted.get(ctx)) is None:
            quoted_ctx = quoted[ctx] = csv_text(ctx, raw=raw)
        if (quoted_name := quoted.get(name)) is None:
            quoted_name = quoted[name] = csv_text(name, raw=raw)
        if (quoted_step := quoted.get(step)) is None:
            quoted_step = quoted[step] = csv_text(step, raw=raw)
        forked = device != NO_DEVICE
        lines.append(
            _CSV_LINE
            % (
                quoted_ctx,
                kernel_id,
                quoted_name,
                csv_text(trace_file, raw=raw),
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                blocks,
                threads,
                "" if insts is None else insts,
                "" if reported is None else reported,
                "true" if traced else "false",
                device if forked else "",
                stream if forked and stream is not None else "",
                quoted_step,
                "" if duration_ns is None else duration_ns,
            )
        )
        if len(lines) == KERNEL_CHUNK:
            yield "".join(lines).encode()
            lines = []
    if lines:
        yield "".join(lines).encode()
