"""One snapshot of the database for a response's reads, and the rows a held cursor streams.

An answer made of several reads (a trace's row and its kernels, a summary's GROUP BYs, a
selection's groups and members) must not mix two states of the database: a parse that commits
between two of them would give a `kernel_count` of 1000 beside 3000 kernels. `snapshot()` is
one REPEATABLE READ transaction on PostgreSQL. An answer that streams rows asks it for a held
cursor: declared inside the transaction and held past its commit (WITH HOLD), it serves rows of
that snapshot however long the client takes to read them.

The held cursor is Django's, so its query is counted and logged like any other and its errors
are django.db's. Django's server-side cursor is WITH HOLD when it is created in autocommit mode
(outside any transaction, as `QuerySet.iterator()` needs): so it is created just before the
transaction and declared inside it (tests/traces/test_api_snapshots.py checks both).
"""

from collections.abc import Iterator
from contextlib import contextmanager, suppress

from django.db import transaction

from cascade.db_routers import read_connection

_REPEATABLE_READ = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"

# The reads of a snapshot of one trace's launches (or two traces'): a range of the kernel
# table's primary key, which the planner costs as mostly random reads (a three-column key, a
# table larger than the default effective_cache_size): it would rather scan every launch of
# every trace, in parallel (a 1M-launch trace among 50M: 2 s where its range takes 0.25 s); and
# the cost of a million rows turns on JIT compilation, 0.4 to 0.6 s a query that it never pays
# back (docs/performance.md, the admin at 50M launches). Its estimates of a trace's groups (a
# few hundred, which it guesses at a few hundred thousand) would not fit the default 4 MB, so it
# would sort a million rows through temporary files: 16 MB lets it hash them. SET LOCAL: this
# transaction only.
ONE_TRACE_PLANS = "SET LOCAL enable_seqscan = off; SET LOCAL jit = off; SET LOCAL work_mem = '16MB'"


def fetched_rows(cursor, rows_per_fetch: int) -> Iterator[tuple]:
    """A cursor's rows, `rows_per_fetch` a round trip."""
    while rows := cursor.fetchmany(rows_per_fetch):
        yield from rows


def streamed_rows(sql: str, params: list, rows_per_fetch: int) -> Iterator[tuple]:
    """The rows of `sql` through a server-side cursor (on PostgreSQL), read as they are
    consumed: the query runs at the first row, in whatever transaction is open then."""
    with read_connection.chunked_cursor() as cursor:
        cursor.execute(sql, params)
        yield from fetched_rows(cursor, rows_per_fetch)


class Snapshot:
    """The reads of one `snapshot()`: plain queries inside it, and at most one held cursor."""

    def __init__(self, cursor) -> None:
        self._cursor = cursor
        self.holds = False

    def held_rows(self, sql: str, params: list, rows_per_fetch: int) -> Iterator[tuple]:
        """The rows of `sql` as they are in this snapshot, streamed after it ends; the cursor is
        closed when they are read to the end or dropped (a client gone), its errors ignored."""
        if self._cursor is None or self.holds:
            raise RuntimeError("this snapshot was opened without a held cursor, or has used it")
        self._cursor.execute(sql, params)
        self.holds = True
        return _held(self._cursor, rows_per_fetch)


def _held(cursor, rows_per_fetch: int) -> Iterator[tuple]:
    with cursor:
        yield from fetched_rows(cursor, rows_per_fetch)


@contextmanager
def snapshot(*, held: bool = False, one_trace: bool = False) -> Iterator[Snapshot]:
    """The reads inside see one snapshot of the database (REPEATABLE READ on PostgreSQL).

    `held`: the snapshot may declare one held cursor (`Snapshot.held_rows`), closed here if it
    does not or if the reads fail. `one_trace`: the planner settings of ONE_TRACE_PLANS. Inside
    a caller's transaction (a test's) its snapshot rules, since the level can only be set as a
    transaction's first statement; a cursor declared there is not held but lives as long as it.
    """
    own_transaction = not read_connection.in_atomic_block
    cursor = read_connection.chunked_cursor() if held else None
    reads = Snapshot(cursor)
    with transaction.atomic(using=read_connection.alias):
        try:
            if own_transaction and read_connection.vendor == "postgresql":
                with read_connection.cursor() as setting:
                    setting.execute(_REPEATABLE_READ)
                    if one_trace:
                        setting.execute(ONE_TRACE_PLANS)
            yield reads
        except BaseException:
            # Closed before the rollback, which would take a declared cursor with it (a CLOSE
            # after it fails, and inside a caller's transaction aborts it).
            if cursor is not None:
                with suppress(read_connection.Database.Error):
                    cursor.close()
            raise
    if cursor is not None and not reads.holds:
        cursor.close()
