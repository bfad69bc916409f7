"""Where a stats row becomes a stored Kernel: the kernel table's columns, their COPY text, and
the one writer of a trace's launches.

Ingestion hands this module launches, never bytes: rows in KERNEL_COLUMNS order (the stats
parser's), or, on its fast path (ingest.stats_fast_path), the fields it split from a common line,
which `launch_row` encodes with the shape and tail texts KernelWriter gives. Everything that
knows the stored layout (names as KernelName ids, (ctx, device) as the trace's context number,
trace files dropped where the context's scheme derives them) lives here, and so does every
COPY: the names connection, the threaded COPY writer, the renumbering of contexts. The writer,
the encoder of its COPY text and the columns they share change together: a column moved in one
and not the other would store launches wrongly. That is why it is one module of over 500
lines: split, a column's change would span files that nothing ties together.
"""

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from django.db import connection, transaction
from psycopg.copy import LibpqWriter

from traces.demangle import INGEST_BUDGET_SECONDS, Budget, demangle_names
from traces.models import KERNEL_COLUMNS, KernelContext, KernelName, KernelPurge, Trace, name_digest

TOTAL_INSTS = KERNEL_COLUMNS.index("total_insts")
# A trace's (ctx, device) pairs are numbered in a smallint (KernelContext.index, Kernel.context).
MAX_CONTEXTS = 32_768


class TraceDataTooLarge(ValueError):
    """The run holds more of something than the columns that store it can number: its fault."""


def counting_without_totals(rows: Iterable, tally: list[int]) -> Iterator:
    """`rows` as they come, counting into `tally[0]` the launches the tracer wrote no totals for."""
    for row in rows:
        tally[0] += row.without_totals if type(row) is LaunchBlock else row[TOTAL_INSTS] is None
        yield row


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


# Launches deleted by one statement of a purge: about 40 ms and 1.5 MB of WAL on PostgreSQL.
PURGE_BATCH = 10_000


@dataclass
class Purged:
    launches: int = 0
    statements: int = 0
    traces: int = 0  # whose purge finished

    def __str__(self) -> str:
        return (
            f"{self.launches} launches deleted in {self.statements} statements, {self.traces} trace(s) done"
        )


def kernels_purge(
    *,
    batch: int = PURGE_BATCH,
    pause: float = 0.0,
    seconds: float | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> Purged:
    """Delete the launches of deleted traces (KernelPurge), at most `batch` a statement.

    Each batch is its own short transaction: a range of the primary key, so the delete walks
    the index and never the table, and a purge killed midway resumes where the launches left
    stop. `pause` seconds between batches let autovacuum and replicas keep up; `seconds` bounds
    the run (a poll pass's share), after which the rest waits for the next call. `on_batch(key,
    deleted)` is told of each statement.
    """
    if batch < 1:
        raise ValueError("batch must be at least 1")
    done = Purged()
    deadline = None if seconds is None else time.monotonic() + seconds
    for trace_key in KernelPurge.objects.order_by("deleted_at", "trace_key").values_list(
        "trace_key", flat=True
    ):
        after = None
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                return done
            deleted, after = _purge_batch(trace_key, after, batch)
            if after is None:  # nothing left: the trace's purge is done
                KernelPurge.objects.filter(pk=trace_key).delete()
                done.traces += 1
                break
            done.launches += deleted
            done.statements += 1
            if on_batch:
                on_batch(trace_key, deleted)
            if pause:
                time.sleep(pause)
    return done


def _purge_batch(trace_key: int, after: tuple | None, batch: int) -> tuple[int, tuple | None]:
    """Delete the next `batch` launches of `trace_key` past `after`: (deleted, the last's key),
    or (0, None) when none is left."""
    past, args = ("AND (context, kernel_id) > (%s, %s)", list(after)) if after else ("", [])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT context, kernel_id FROM (SELECT context, kernel_id FROM traces_kernel "
            f"WHERE trace_key = %s {past} ORDER BY context, kernel_id LIMIT %s) batch "
            "ORDER BY context DESC, kernel_id DESC LIMIT 1",
            [trace_key, *args, batch],
        )
        last = cursor.fetchone()
        if last is None:
            return 0, None
        cursor.execute(
            f"DELETE FROM traces_kernel WHERE trace_key = %s {past} AND (context, kernel_id) <= (%s, %s)",
            [trace_key, *args, *last],
        )
        return cursor.rowcount, tuple(last)


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
# COPY blocks (of up to 128 KiB, psycopg's most) queued between the parse and the thread that
# sends them: the parse runs ahead of PostgreSQL by 2 MiB at most, whatever the trace's size.
COPY_QUEUE_BLOCKS = 16
COPY_BLOCK_BYTES = 128 * 1024


@dataclass(slots=True)
class LaunchBlock:
    """Launches already written as COPY text rows in STORED_COLUMNS order (launch_block's):
    ingestion's fast path, on PostgreSQL."""

    text: bytes
    launches: int
    without_totals: int


# --- A launch as COPY text: ingestion's fast path hands the fields, these write the bytes ------
#
# A row is its shape's text (SHAPE_COLUMNS and a tab: KernelWriter.shape_text), the launch's
# kernel id and totals, then its tail (from the tab before `traced` to the row's end:
# KernelWriter.launch_tail). The fields come as the stats file's digits, which ingestion
# checked are what int() reads back (no sign, no leading zero) and fit their columns.

# The totals of a launch the tracer wrote none for: two NULLs.
NO_TOTALS = b"\t\\N\t\\N"


class PendingShape:
    """A shape first seen in the launches being gathered, whose name's id is looked up when
    they are handed on (KernelWriter.finish_shapes: one query for all their new names).

    `shape + text` is then a row to finish: (this, the launch's own text), which
    launch_block completes once `text` is known.
    """

    __slots__ = ("name", "dimensions", "text")

    def __init__(self, name: str, dimensions: list[int]):
        self.name, self.dimensions = name, dimensions
        self.text = b""  # the shape's COPY text, once the name's id is known

    def __add__(self, launch_text: bytes) -> tuple["PendingShape", bytes]:
        return (self, launch_text)


def launch_row(shape: bytes | PendingShape, kernel_id: bytes, insts: bytes, reported: bytes, tail: bytes):
    """One launch's COPY row from its shape's text, its kernel id's and totals' digits and its
    tail: bytes, or (shape, rest) while the shape is pending."""
    return shape + (kernel_id + b"\t" + insts + b"\t" + reported + tail)


def launch_row_without_totals(shape: bytes | PendingShape, kernel_id: bytes, tail: bytes):
    """launch_row for a launch the tracer wrote no totals for."""
    return shape + (kernel_id + NO_TOTALS + tail)


def launch_block(rows: list, launches: int, without_totals: int, *, pending: bool) -> LaunchBlock:
    """`rows` (launch_row's) as one block for KernelWriter.write; `pending`: some rows' shapes
    were pending (now finished: KernelWriter.finish_shapes)."""
    if pending:
        rows = (row if type(row) is bytes else row[0].text + row[1] for row in rows)
    return LaunchBlock(b"".join(rows), launches, without_totals)


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
        self.names_connection: NamesConnection | None = None
        self._copy = None
        self.demangle_budget = Budget(INGEST_BUDGET_SECONDS)

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
        with copy_from_stdin(f"COPY traces_kernel ({columns}) FROM STDIN") as copy:
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

    def finish_shapes(self, context: int, shapes: Iterable[PendingShape]) -> None:
        """Write the text of pending `shapes` of the trace's context `context`, their names'
        ids looked up (and added) at once: one query for all."""
        shapes = list(shapes)
        self._resolve_names({shape.name for shape in shapes} - self.names.keys())
        for shape in shapes:
            shape.text = self.shape_text(context, shape.name, shape.dimensions)

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
            # Demangled once, here, within the trace's budget: a name past it is kept mangled
            # and marked, and no read demangles it again.
            texts = demangle_names((name for _, name in batch), self.demangle_budget)
            shown = [texts[name] if texts[name] is not None else name for _, name in batch]
            limited = [texts[name] is None for _, name in batch]
            if self.copies:
                self._on_names_connection(
                    "INSERT INTO traces_kernelname (digest, name, demangled, demangle_limited) "
                    "SELECT * FROM unnest(%s::bytea[], %s::text[], %s::text[], %s::boolean[]) "
                    "ON CONFLICT (digest) DO NOTHING",
                    [[digest for digest, _ in batch], [name for _, name in batch], shown, limited],
                )
            else:  # one writer at a time
                KernelName.objects.bulk_create(
                    [
                        KernelName(digest=digest, name=name, demangled=text, demangle_limited=flag)
                        for (digest, name), text, flag in zip(batch, shown, limited, strict=True)
                    ],
                    ignore_conflicts=True,
                )
            if lost := self._known_names(batch):
                raise RuntimeError(f"kernel names inserted but not found: {[name for _, name in lost]}")

    def _on_names_connection(self, sql: str, params: list) -> list[tuple]:
        if self.names_connection is None:
            self.names_connection = NamesConnection()
        return self.names_connection.execute(sql, params)

    def _known_names(self, batch: list[tuple[bytes, str]]) -> list[tuple[bytes, str]]:
        """Take the ids of the names already stored (most of them, once a lab's kernels have been
        seen); return the others. While the COPY is open, on the names connection."""
        digests = [digest for digest, _ in batch]
        if self._copy is None:
            found_rows = KernelName.objects.filter(digest__in=digests).values_list("digest", "id")
        else:
            found_rows = self._on_names_connection(
                "SELECT digest, id FROM traces_kernelname WHERE digest = ANY(%s)", [digests]
            )
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


# --- The COPY's writer and the names' connection, from public parts of psycopg and Django ----


class BoundedCopyWriter(LibpqWriter):
    """psycopg's LibpqWriter, its sends made by a thread of their own while the parse goes on,
    at most COPY_QUEUE_BLOCKS blocks of COPY_BLOCK_BYTES ahead of PostgreSQL (2 MiB).

    psycopg's own QueuedLibpqWriter queues 1,024 blocks of up to 128 KiB: a parse faster than
    PostgreSQL would hold 128 MiB, where the peak of a whole `ingest_traces` is under 100 MB
    (docs/performance.md); its queue is an attribute of its own, not a parameter. LibpqWriter
    alone makes the parse wait for every send, the two no longer overlapping. This is the
    queued writer again on LibpqWriter's public write and finish.
    """

    def __init__(self, cursor):
        super().__init__(cursor)
        self.blocks: queue.Queue[bytes] = queue.Queue(maxsize=COPY_QUEUE_BLOCKS)
        self.sender: threading.Thread | None = None
        self.send_error: BaseException | None = None

    def _send(self) -> None:
        try:
            while data := self.blocks.get():
                LibpqWriter.write(self, data)
        except BaseException as error:  # the parse's next write raises it
            self.send_error = error
            while self.blocks.get():  # keeps taking, or the parse would wait on a full queue
                pass

    def write(self, data) -> None:
        if self.sender is None:
            self.sender = threading.Thread(target=self._send, name="copy-sender", daemon=True)
            self.sender.start()
        if self.send_error is not None:
            raise self.send_error
        if len(data) <= COPY_BLOCK_BYTES:
            self.blocks.put(data)
            return
        for start in range(0, len(data), COPY_BLOCK_BYTES):
            self.blocks.put(data[start : start + COPY_BLOCK_BYTES])

    def finish(self, exc: BaseException | None = None) -> None:
        self.blocks.put(b"")
        if self.sender is not None:
            self.sender.join()
            self.sender = None
        if self.send_error is not None:
            raise self.send_error
        super().finish(exc)


@contextmanager
def copy_from_stdin(sql: str) -> Iterator:
    """A COPY FROM STDIN on Django's connection, its rows sent by BoundedCopyWriter.

    On psycopg's cursor of the connection Django holds (`connection.connection`): the writer
    records the COPY's result on the cursor it is given, which must be psycopg's.
    """
    with connection.cursor():  # connects, if the connection is not yet open
        pass
    with connection.connection.cursor() as cursor:
        with cursor.copy(sql, writer=BoundedCopyWriter(cursor)) as copy:
            yield copy


class NamesConnection:
    """A second connection to the default database, on a thread of its own: the names a parse
    adds are committed on it (KernelWriter._resolve_names), outside the parse's transaction.

    Django holds one connection per alias and thread: the thread's is that second connection,
    opened at its first query, closed by `close()`.
    """

    def __init__(self):
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernel-names")

    def execute(self, sql: str, params: list) -> list[tuple]:
        """Run `sql` on the names' connection (committed at once); its rows, if any."""
        return self.thread.submit(_execute_committed, sql, params).result()

    def close(self) -> None:
        try:
            self.thread.submit(_close_connection).result()
        finally:
            self.thread.shutdown()


def _execute_committed(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def _close_connection() -> None:
    connection.close()
