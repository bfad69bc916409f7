"""A trace being parsed again keeps serving, and a detail is one snapshot.

Before: a re-parse took a ready trace offline (`parsing`, `kernels: []`) until it finished, and
one response said `kernel_count` 1000 while streaming 3000 kernels that a parse committed
between the two reads.
"""

import threading

import django.db
import orjson
import pytest
from django.db import connection, connections
from rest_framework.test import APIClient

from traces import selectors, services, snapshots
from traces.models import Kernel, Trace, TraceState


def kernel_rows(count: int, name: str) -> list[tuple]:
    # KERNEL_COLUMNS: ctx, kernel_id, name, trace_file, grid, block, blocks, threads, totals, traced,
    # device, stream, step, duration_ns
    return [
        (
            "0x1",
            n,
            name,
            f"kernel-{n}-ctx_0x1.trace.xz",
            1,
            1,
            1,
            32,
            1,
            1,
            1,
            32,
            7,
            7,
            False,
            -1,
            None,
            None,
            None,
        )
        for n in range(1, count + 1)
    ]


def store(trace_id: str, count: int, name: str) -> None:
    trace = Trace.objects.get(pk=trace_id)
    services.trace_start_parsing(trace, run={})
    services.trace_store_kernels(trace, iter(kernel_rows(count, name)), fingerprint="f")


def test_a_re_parse_says_parsing_and_keeps_serving_the_last_kernels(api, make_trace):
    make_trace("run")
    store("run", 3, "_Z3oldv")
    services.trace_start_parsing(Trace.objects.get(pk="run"), run={})  # a pass starts reading again

    detail = api.get("/api/traces/run").json()
    assert (detail["state"], detail["kernel_count"]) == ("parsing", 3)
    assert [k["name"] for k in detail["kernels"]] == ["_Z3oldv"] * 3
    listed = api.get("/api/traces").json()[0]
    assert (listed["state"], listed["kernel_count"]) == ("parsing", 3)


@pytest.mark.postgres("the snapshot is PostgreSQL's REPEATABLE READ")
@pytest.mark.django_db(transaction=True)
def test_a_detail_reads_its_trace_and_kernels_in_one_snapshot(api_token, make_trace, monkeypatch):
    make_trace("run", state=TraceState.READY)
    store("run", 1000, "_Z3oldv")
    read_row = selectors.trace_detail_row

    def row_then_a_parse_commits(trace_id):
        row = read_row(trace_id)

        def parse_elsewhere():
            try:
                store("run", 3000, "_Z3newv")
            finally:
                connections.close_all()

        writer = threading.Thread(target=parse_elsewhere)
        writer.start()
        writer.join(30)
        return row

    monkeypatch.setattr(selectors, "trace_detail_row", row_then_a_parse_commits)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token}")
    detail = orjson.loads(client.get("/api/traces/run").content)
    assert Kernel.objects.filter(trace_id="run").count() == 3000, "the parse did commit meanwhile"
    assert detail["kernel_count"] == len(detail["kernels"]) == 1000
    assert {k["name"] for k in detail["kernels"]} == {"_Z3oldv"}


@pytest.mark.postgres("the held cursor is PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_the_held_cursor_streams_after_its_commit_through_djangos_cursor(make_trace):
    make_trace("run", state=TraceState.READY)
    count = selectors.KERNEL_FETCH_ROWS * 2 + 1  # rows fetched in three round trips after the commit
    store("run", count, "_Z3oldv")
    seen = []

    def record(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        row, rows = selectors.trace_detail_snapshot("run")
        assert not connection.in_atomic_block, "the snapshot's transaction has committed"
        assert [kernel[1] for kernel in rows] == list(range(1, count + 1))
    # Django sees the kernels' query (its query counts are true, its debug log shows it).
    assert [sql for sql in seen if "FROM traces_kernel k" in sql], seen


@pytest.mark.postgres("the held cursor is PostgreSQL's")
def test_a_database_error_while_streaming_kernels_is_a_django_database_error(make_trace, monkeypatch):
    make_trace("run", state=TraceState.READY)
    store("run", selectors.KERNEL_FETCH_ROWS + 10, "_Z3oldv")
    kernels_sql = selectors.kernels_sql

    def failing_past_the_first_rows(trace_id, limit=None, offset=0):
        # Rows are computed as they are fetched (inside the test's transaction): the first
        # round trip succeeds, the next one divides by zero.
        sql, params = kernels_sql(trace_id, limit, offset)
        return f"SELECT *, 1 / ({selectors.KERNEL_FETCH_ROWS + 5} - kernel_id) FROM ({sql}) AS k", params

    monkeypatch.setattr(selectors, "kernels_sql", failing_past_the_first_rows)
    _, rows = selectors.trace_detail_snapshot("run")
    assert next(rows)[1] == 1
    with pytest.raises(django.db.DataError):
        list(rows)


def open_cursors() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM pg_cursors")
        return cursor.fetchone()[0]


@pytest.mark.postgres("the held cursor is PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_a_held_cursor_is_closed_however_its_rows_end():
    many = "SELECT n FROM generate_series(1, 10) AS n"
    with snapshots.snapshot(held=True) as reads:
        read_to_the_end = reads.held_rows(many, [], 3)
    assert open_cursors() == 1, "held past the snapshot's commit"
    assert list(read_to_the_end) == [(n,) for n in range(1, 11)]
    assert open_cursors() == 0

    with snapshots.snapshot(held=True) as reads:
        dropped = reads.held_rows(many, [], 3)
    assert next(dropped) == (1,)
    dropped.close()  # a client gone
    assert open_cursors() == 0

    with pytest.raises(ZeroDivisionError), snapshots.snapshot(held=True) as reads:
        reads.held_rows(many, [], 3)
        1 / 0  # noqa: B018 (a read failing after the cursor was declared)
    assert open_cursors() == 0
    with pytest.raises(django.db.DataError), snapshots.snapshot(held=True) as reads:
        reads.held_rows(many, [], 3)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 / 0")  # the transaction fails with the cursor declared
    assert open_cursors() == 0
    with snapshots.snapshot(held=True):
        pass  # a snapshot that needed no cursor
    assert open_cursors() == 0
