"""The reads behind the traces API: the list, a trace's detail and its kernels.

A trace can hold a million kernels, so nothing here loads them all at once: the API's
kernels come as `values_list` tuples through a server-side cursor (`traces.encoders` turns
them into JSON as they arrive). The admin's charts read `traces.launch_summaries`. Kernel ids
restart at 1 in each CUDA context, so "launch order" is (ctx, kernel_id).
"""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connections, router
from django.db.models import (
    BigIntegerField,
    Case,
    CharField,
    Count,
    F,
    Func,
    Q,
    Sum,
    TextField,
    Value,
    When,
    Window,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast

from cascade.db_routers import read_connection
from traces import shapes
from traces.filters import ListPage, TraceFilter
from traces.models import KERNEL_COLUMNS, KernelContext, Step, Trace, TraceState
from traces.snapshots import snapshot, streamed_rows

# --- the API -------------------------------------------------------------------------

# A TraceSummary's fields in the API reference's order (`traces.shapes`): the columns read, and
# the JSON keys. The published reference's, then those added since (TRACE_ADDED_COLUMNS, after
# them: a client of the reference reads the keys it knows in their order).
TRACE_PUBLISHED_COLUMNS = tuple(field.column for field in shapes.TRACE_PUBLISHED)
# What an uploading trace waits for (null unless it waits: `encoders.waiting_text`), what a reader
# must know (a file cut short, a killed run, a file left out), launches with their trace file,
# who pushed it.
TRACE_ADDED_COLUMNS = tuple(field.column for field in shapes.TRACE_ADDED)
TRACE_SUMMARY_COLUMNS = shapes.TRACE_SUMMARY.columns()
TRACE_DETAIL_COLUMNS = (*TRACE_SUMMARY_COLUMNS, shapes.TRACE_DETAIL.field("metadata").column)
# `owner` is read as its user's username (a join in the same query), not the key it stores.
OWNER_NAME = F("owner__username")
DETAIL_ROW_COLUMNS = tuple("owner_name" if name == "owner" else name for name in TRACE_DETAIL_COLUMNS)

# Rows per round trip of the kernels' server-side cursor.
KERNEL_FETCH_ROWS = 2000


# --- the list: `GET /api/traces`, whole or a page at a time ------------------------------

# Rows per round trip of the list's server-side cursor; a list of at most this many traces is
# sent in one piece (with a Content-Length).
LIST_FETCH_ROWS = 2000
SUMMARY_WIDTH = len(TRACE_SUMMARY_COLUMNS)
CREATED_AT_COLUMN = TRACE_SUMMARY_COLUMNS.index("created_at")
# A row's `updated_at` as a number that fits 100,000,000 rows' sum in 64 bits (SQLite's sum
# errs past them): microseconds since 1970, modulo 2**31 (about 36 minutes).
STAMP_MODULUS = 2**31
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_STAMP_SQL = {
    "postgresql": "(CAST(EXTRACT(EPOCH FROM updated_at) * 1000000 AS BIGINT) %% 2147483648)",
    # Django stores a datetime as UTC text, `2026-11-08 08:59:02.590922` (no fraction at .000000).
    "sqlite": (
        "((CAST(strftime('%%s', updated_at) AS INTEGER) * 1000000"
        " + CAST(substr(updated_at, 21, 6) AS INTEGER)) %% 2147483648)"
    ),
}
# Past this many rows, the list's delta table (migration 0012) is folded into one row.
LIST_DELTAS_MAX = 1000


@dataclass(frozen=True)
class ListVersion:
    """What identifies the rows a list answers, read without them (`trace_list_version`).

    Every write to a trace saves its row, which sets `updated_at` (as the detail's ETag
    assumes), and a trace's `key` is never reused. So among the listed rows: a new trace
    raises `count`; a deleted one lowers it; deletes and creates that keep the count raise
    `key_sum` (a new key is larger than every older one); a change moves its row's
    `updated_at`, and with it `stamp_sum`, whatever it moves it to (max(updated_at) would miss
    a worker whose clock is behind, or a save that commits after a later one's). A trace that
    enters or leaves a filtered set was saved. Nothing else moves these numbers: a write to a
    trace the list does not show, or bookkeeping that keeps `updated_at` (`recheck_after`).
    """

    count: int
    key_sum: int
    stamp_sum: int
    more: bool = False  # a page: more rows follow it


EVERY_TRACE = ListPage()


def updated_stamp(updated_at: datetime) -> int:
    """`_STAMP_SQL` in Python, for a page's rows."""
    return ((updated_at - _EPOCH) // timedelta(microseconds=1)) % STAMP_MODULUS


class UtcText(Func):
    """A timestamp as the API writes it (`encoders.format_timestamp`), formatted by the
    database: 100,000 datetimes parsed, then formatted again, cost the list a second."""

    output_field = CharField()

    def as_postgresql(self, compiler, connection, **extra):
        template = "to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
        return self.as_sql(compiler, connection, template=template, **extra)

    def as_sqlite(self, compiler, connection, **extra):
        template = "(replace(substr(%(expressions)s || '.000000', 1, 26), ' ', 'T') || 'Z')"
        return self.as_sql(compiler, connection, template=template, **extra)


# The list's rows: TRACE_SUMMARY_COLUMNS with the timestamps as the API's text and `layers` as
# JSON text (`encoders.list_row_to_dict`).
_LIST_TEXT = {
    "created_at": "list_created_at",
    "updated_at": "list_updated_at",
    "layers": "list_layers",
    "waiting_for": "list_waiting_for",
    "warnings": "list_warnings",
    "owner": "list_owner",
}
LIST_ROW_COLUMNS = tuple(_LIST_TEXT.get(name, name) for name in TRACE_SUMMARY_COLUMNS)


def _list_rows(traces):
    return traces.annotate(
        list_created_at=UtcText("created_at"),
        list_updated_at=UtcText("updated_at"),
        list_layers=Cast("layers", TextField()),
        # Only an uploading trace waits: metadata.json first, then the files it lists.
        list_waiting_for=Case(
            When(state=TraceState.UPLOADING, metadata_json__isnull=True, then=Value(WAITING_FOR_METADATA)),
            When(state=TraceState.UPLOADING, then=Cast("waiting_for", TextField())),
            default=None,
            output_field=TextField(),
        ),
        list_warnings=Cast("warnings", TextField()),
        list_owner=OWNER_NAME,
    )


# An uploading trace's `waiting_for` before its metadata.json lands.
WAITING_FOR_METADATA = "metadata.json"


def _listed(filters: TraceFilter | None, page: ListPage):
    """The traces the list shows, newest first (ties by id), after `page.after`."""
    traces = Trace.objects.order_by("-created_at", "id")
    if filters is not None:
        traces = filters.filter_queryset(traces)
    if page.after is not None:
        created_at, trace_id = page.after
        # `created_at <= c` bounds the index scan (trace_newest_first); the rest is the tie.
        traces = traces.filter(created_at__lte=created_at).filter(
            Q(created_at__lt=created_at) | Q(id__gt=trace_id)
        )
    return traces


def _every_trace(filters: TraceFilter | None, page: ListPage) -> bool:
    """Is this the whole, unfiltered list, whose version PostgreSQL keeps (migration 0012)?"""
    unfiltered = filters is None or not any(
        value not in (None, "") for value in filters.form.cleaned_data.values()
    )
    return read_connection.vendor == "postgresql" and unfiltered and page == EVERY_TRACE


def _page_version(page_rows: list[tuple], limit: int) -> ListVersion:
    """The version of a page read with one row past its end (which only says `more`); each
    row ends with its key and updated_at."""
    shown = page_rows[:limit]
    return ListVersion(
        count=len(shown),
        key_sum=sum(row[-2] for row in shown),
        stamp_sum=sum(updated_stamp(row[-1]) for row in shown),
        more=len(page_rows) > limit,
    )


def _stamp() -> RawSQL:
    return RawSQL(_STAMP_SQL[read_connection.vendor], (), output_field=BigIntegerField())


_DELTA_SUMS = {
    "list_count": "(SELECT COALESCE(SUM(traces), 0) FROM traces_tracelistdelta)",
    "list_key_sum": "(SELECT COALESCE(SUM(key_sum), 0) FROM traces_tracelistdelta)",
    "list_stamp_sum": "(SELECT COALESCE(SUM(stamp_sum), 0) FROM traces_tracelistdelta)",
}
_FOLD_DELTAS = (
    "WITH gone AS (DELETE FROM traces_tracelistdelta RETURNING traces, key_sum, stamp_sum) "
    "INSERT INTO traces_tracelistdelta (traces, key_sum, stamp_sum) "
    "SELECT COALESCE(SUM(traces), 0), COALESCE(SUM(key_sum), 0), COALESCE(SUM(stamp_sum), 0) FROM gone"
)


def trace_list_version(filters: TraceFilter | None, page: ListPage) -> ListVersion:
    """The list's ListVersion without its rows: one query (a 304's).

    The whole list's on PostgreSQL is the sum of a few rows that triggers add on every
    write to the trace table (migration 0012): a 304 at 100,000 traces costs what one at 10
    does. A filtered list's is read from its rows' keys and `updated_at` (through the indexes
    its filters allow); a page's from its at most 1,001 rows.
    """
    if _every_trace(filters, page):
        with read_connection.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*), COALESCE(SUM(traces), 0), COALESCE(SUM(key_sum), 0), "
                "COALESCE(SUM(stamp_sum), 0) FROM traces_tracelistdelta"
            )
            deltas, count, key_sum, stamp_sum = cursor.fetchone()
        if deltas > LIST_DELTAS_MAX:
            # A write: on the primary, whichever database the sums were read from.
            with connections[router.db_for_write(Trace)].cursor() as cursor:
                cursor.execute(_FOLD_DELTAS)
        return ListVersion(count=int(count), key_sum=int(key_sum), stamp_sum=int(stamp_sum))
    traces = _listed(filters, page)
    if page.limit is not None:
        return _page_version(list(traces.values_list("key", "updated_at")[: page.limit + 1]), page.limit)
    totals = traces.order_by().aggregate(count=Count("*"), key_sum=Sum("key"), stamp_sum=Sum(_stamp()))
    return ListVersion(
        count=totals["count"], key_sum=int(totals["key_sum"] or 0), stamp_sum=int(totals["stamp_sum"] or 0)
    )


def trace_summary_rows(
    filters: TraceFilter | None = None, page: ListPage = EVERY_TRACE
) -> tuple[ListVersion, Iterator[tuple]]:
    """The list's ListVersion and its LIST_ROW_COLUMNS rows, newest first: one query.

    `filters` (validated by `traces.filters.trace_filters`) narrows the traces in that query.
    A page (at most 1,000 rows) is read at once. A whole list comes through a server-side
    cursor, LIST_FETCH_ROWS a round trip, each row with its version's numbers (the kept sums,
    or window aggregates over the same rows): the ETag is known from the first fetch, before
    anything is sent, and says exactly what the rows say (one statement, one snapshot).
    """
    traces = _list_rows(_listed(filters, page))
    if page.limit is not None:
        rows = list(traces.values_list(*LIST_ROW_COLUMNS, "key", "updated_at")[: page.limit + 1])
        return _page_version(rows, page.limit), (row[:SUMMARY_WIDTH] for row in rows[: page.limit])
    if _every_trace(filters, page):
        sums = {name: RawSQL(sql, (), output_field=BigIntegerField()) for name, sql in _DELTA_SUMS.items()}
    else:
        sums = {
            "list_count": Window(Count("*")),
            "list_key_sum": Window(Sum("key")),
            "list_stamp_sum": Window(Sum(_stamp())),
        }
    rows = _fetched(traces.annotate(**sums).values_list(*LIST_ROW_COLUMNS, *sums))
    first = next(rows, None)
    if first is None:
        rows.close()
        return ListVersion(count=0, key_sum=0, stamp_sum=0), iter(())
    count, key_sum, stamp_sum = (int(value) for value in first[SUMMARY_WIDTH:])
    return ListVersion(count=count, key_sum=key_sum, stamp_sum=stamp_sum), _summaries(first, rows)


def _fetched(rows) -> Iterator[tuple]:
    """A values_list's rows through a server-side cursor, LIST_FETCH_ROWS a round trip. On
    PostgreSQL straight from psycopg: every column is already what the JSON says (text,
    numbers, booleans), and Django's converters per value cost a third of the list. The SQL
    comes from Django's private `Query.sql_with_params`: the public `iterator()` runs those
    converters. tests/traces/test_api.py's list tests on PostgreSQL fail if an upgrade removes it."""
    if read_connection.vendor != "postgresql":
        return rows.iterator(chunk_size=LIST_FETCH_ROWS)
    sql, params = rows.query.sql_with_params()
    return streamed_rows(sql, params, LIST_FETCH_ROWS)


def _summaries(first: tuple, rows: Iterator[tuple]) -> Iterator[tuple]:
    """The rows without their version's columns; closing it closes the cursor."""
    try:
        yield first[:SUMMARY_WIDTH]
        for row in rows:
            yield row[:SUMMARY_WIDTH]
    finally:
        rows.close()


def trace_detail_row(trace_id: str) -> tuple | None:
    """The trace's TRACE_DETAIL_COLUMNS (metadata.json as stored text last), or None: one query."""
    traces = Trace.objects.filter(pk=trace_id).annotate(owner_name=OWNER_NAME)
    return traces.values_list(*DETAIL_ROW_COLUMNS).first()


# A trace with more contexts than this (none known: a GPU's processes and devices, a few dozen
# at most) joins its contexts instead of naming them in the query.
CASE_CONTEXTS = 64


def kernels_sql(trace_id: str, limit: int | None = None, offset: int = 0) -> tuple[str, list]:
    """The API's kernels of a trace (KERNEL_COLUMNS): the primary key's range of the trace,
    in its order, each launch's name from the names table, its file derived where it stored
    none. One small query first reads the trace's contexts (inside the caller's snapshot).

    Contexts are numbered in (ctx, device) order within a trace, so (trace, context,
    kernel_id) is the launch order: an index scan and no sort, the names a memoized lookup.
    The contexts' ctx, device and file suffix are written into the query as CASEs: joined,
    the planner misjudges the join's rows (the trace key is on both sides) and would rather
    sort a million rows.
    """
    contexts = list(
        KernelContext.objects.filter(trace__id=trace_id).values_list(
            "index", "ctx", "device", "trace_file_suffix"
        )
    )
    if len(contexts) <= CASE_CONTEXTS:
        context_join = ""

        def of_context(position: int, sql_type: str) -> tuple[str, list]:
            if not contexts:
                return "NULL", []
            values = [value for context in contexts for value in (context[0], context[position])]
            # Typed: parameters alone would come back as text.
            return (
                f"CAST(CASE k.context {' '.join(['WHEN %s THEN %s'] * len(contexts))} END AS {sql_type})",
                values,
            )

        ctx, device, suffix = of_context(1, "TEXT"), of_context(2, "INTEGER"), of_context(3, "TEXT")
    else:
        context_join = 'JOIN traces_kernelcontext c ON c.trace_key = k.trace_key AND c."index" = k.context '
        ctx, device, suffix = ("c.ctx", []), ("c.device", []), ("c.trace_file_suffix", [])
    select = {
        "ctx": ctx,
        "name": ("n.name", []),
        "trace_file": (f"COALESCE(k.trace_file, 'kernel-' || k.kernel_id || {suffix[0]})", suffix[1]),
        "device": device,
    }
    expressions = [select.get(column, (f"k.{column}", [])) for column in KERNEL_COLUMNS]
    columns = ", ".join(expression for expression, _ in expressions)
    params = [value for _, values in expressions for value in values]
    sql = (
        f"SELECT {columns} FROM traces_kernel k {context_join}"
        "JOIN traces_kernelname n ON n.id = k.name_id "
        "WHERE k.trace_key = (SELECT key FROM traces_trace WHERE id = %s) "
        "ORDER BY k.trace_key, k.context, k.kernel_id"
    )
    params.append(trace_id)
    if limit is not None:
        sql += " LIMIT %s"
        params.append(limit)
    if offset:  # the browsable API's pages of kernels
        sql += " OFFSET %s"
        params.append(offset)
    return sql, params


STEP_COLUMN = KERNEL_COLUMNS.index("step")


def step_names(trace_id: str) -> dict[int, str]:
    """The trace's steps by index (kernels refer to them by index): one query, a few rows."""
    return dict(Step.objects.filter(trace_id=trace_id).values_list("index", "name"))


def with_step_names(rows: Iterator[tuple], names: dict[int, str]) -> Iterator[tuple]:
    """Kernel rows with their step's name in place of its index, as the API shows it."""
    if not names:
        yield from rows
        return
    for row in rows:
        step = row[STEP_COLUMN]
        yield row if step is None else (*row[:STEP_COLUMN], names.get(step), *row[STEP_COLUMN + 1 :])


# A trace serves the kernels of its last parse while ready, and while a new parse of it runs
# (they are replaced in one transaction when it commits); never those of no parse.
SERVES_KERNELS = (TraceState.READY, TraceState.PARSING)
STATE_COLUMN = TRACE_DETAIL_COLUMNS.index("state")


def trace_detail_snapshot(
    trace_id: str, limit: int | None = None, offset: int = 0
) -> tuple[tuple | None, Iterator[tuple]]:
    """The trace's detail row and its kernels, read from one snapshot of the database
    (`traces.snapshots`): read separately, a detail could say `kernel_count` 1000 and stream
    3000 kernels that a parse committed in between."""
    with snapshot(held=True) as reads:
        row = trace_detail_row(trace_id)
        if row is None or row[STATE_COLUMN] not in SERVES_KERNELS:
            return row, iter(())
        names = step_names(trace_id)
        sql, params = kernels_sql(trace_id, limit, offset)  # its contexts from the same snapshot
        rows = reads.held_rows(sql, params, KERNEL_FETCH_ROWS)
    return row, with_step_names(rows, names)
