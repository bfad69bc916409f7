"""Kernel storage: what a launch costs in PostgreSQL, and migration 0007 changing
nothing the API says, byte for byte."""

import threading

import pytest
from django.db import connection, transaction

from tests.helpers import content, kernel_row
from tests.traces.support import BEFORE, migrate, old_launch
from traces import encoders, kernel_store, selectors, services
from traces.models import KERNEL_COLUMNS, KernelContext, KernelName, Trace, TraceState, name_digest

BYTES_PER_LAUNCH = 150


OLD_TRACES = {
    "served": [
        old_launch(1, step=0, duration_ns=780),
        old_launch(2, name="void gemm<float, 128>(float const*, float*, int)", step=0, duration_ns=1200),
        # Unsigned 32-bit values the tracer printed negative, and parsed back.
        old_launch(
            3, grid_x=2**31 + 5, blocks=2**31 + 5, total_insts=2**32 - 1, total_reported_insts=2**31, step=1
        ),
        old_launch(4, total_insts=None, total_reported_insts=None, step=1),  # graph-captured
        old_launch(5, trace_file="renamed/kernel-5.traceg"),  # no scheme: kept as it was
        old_launch(6, trace_file="kernel-6-ctx_0x7f3a.trace"),  # another suffix than its context's
        # The device-id fork: devices number their kernels from 1 each, in one ctx.
        old_launch(1, ctx="0x9", device=1, stream=2**40, trace_file="kernel-1-ctx_0x9.trace.xz"),
        old_launch(1, ctx="0x9", device=0, stream=7, trace_file="kernel-1-ctx_0x9.trace.xz"),
        old_launch(2, ctx="0x9", device=0, stream=7, trace_file="kernel-2-ctx_0x9.trace.xz"),
        # The distributed fork: the GPU in the file's name.
        old_launch(1, ctx="0x2", device=3, trace_file="kernel-1_3.trace"),
        old_launch(2, ctx="0x2", device=3, trace_file="kernel-2_3.trace"),
        # A first launch whose file's id runs on into digits: no scheme for its context.
        old_launch(1, ctx="0x3", trace_file="kernel-12.trace"),
        old_launch(2, ctx="0x3", trace_file="kernel-2.trace"),
    ],
    # The legacy single-context stats.csv: no ctx.
    "legacy": [
        old_launch(1, ctx=None, trace_file="kernel-1.trace"),
        old_launch(2, ctx=None, name="_Z6vecAddPdS_S_i", trace_file="kernel-2.trace"),
        old_launch(
            3, ctx=None, name="void gemm<float, 128>(float const*, float*, int)", trace_file="kernel-3.trace"
        ),
    ],
}


def expected_detail(old_apps, trace_id: str) -> bytes:
    """The trace's TraceDetail as the API built it from the old table: (ctx, device, kernel_id)."""
    OldKernel, OldStep = old_apps.get_model("traces", "Kernel"), old_apps.get_model("traces", "Step")
    rows = (
        OldKernel.objects.filter(trace_id=trace_id)
        .order_by("ctx", "device", "kernel_id")
        .values_list(*KERNEL_COLUMNS)
    )
    names = dict(OldStep.objects.filter(trace_id=trace_id).values_list("index", "name"))
    # The trace's row from the old table; the columns added since at the defaults migrating fills.
    OldTrace = old_apps.get_model("traces", "Trace")
    old_columns = {field.name for field in OldTrace._meta.get_fields()}
    added = {
        name: Trace._meta.get_field(name).get_default()
        for name in selectors.TRACE_DETAIL_COLUMNS
        if name not in old_columns
    }
    columns = [name for name in selectors.TRACE_DETAIL_COLUMNS if name not in added]
    values = dict(zip(columns, OldTrace.objects.filter(pk=trace_id).values_list(*columns).get(), strict=True))
    row = tuple(values[name] if name in values else added[name] for name in selectors.TRACE_DETAIL_COLUMNS)
    head = encoders.trace_detail_head(row)
    return b"".join(encoders.encode_trace_detail(head, selectors.with_step_names(iter(list(rows)), names)))


@pytest.mark.django_db(transaction=True)
def test_migration_0007_keeps_every_trace_detail_byte_for_byte(api):
    try:
        old = migrate(BEFORE).loader.project_state([BEFORE]).apps
        OldTrace, OldKernel = old.get_model("traces", "Trace"), old.get_model("traces", "Kernel")
        OldStep = old.get_model("traces", "Step")
        expected = {}
        for trace_id, launches in OLD_TRACES.items():
            trace = OldTrace.objects.create(id=trace_id, state=TraceState.READY, kernel_count=len(launches))
            OldKernel.objects.bulk_create(OldKernel(trace=trace, **launch) for launch in launches)
        for index, name in enumerate(["prefill", "decode 1"]):
            OldStep.objects.create(
                trace_id="served", index=index, name=name, first_kernel_id=1, last_kernel_id=2
            )
        expected = {trace_id: expected_detail(old, trace_id) for trace_id in OLD_TRACES}
    finally:
        migrate()

    for trace_id, body in expected.items():
        response = api.get(f"/api/traces/{trace_id}")
        assert response.status_code == 200
        assert content(response) == body, trace_id
    # Stored once: the names of both traces, the scheme's files.
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM traces_kernelname")
        assert cursor.fetchone()[0] == 2
        cursor.execute("SELECT COUNT(*) FROM traces_kernel WHERE trace_file IS NOT NULL")
        # renamed/kernel-5.traceg, kernel-6's .trace, and kernel-12/kernel-2 of 0x3
        assert cursor.fetchone()[0] == 4


SIZES = (
    "SELECT pg_database_size(current_database()), pg_total_relation_size('traces_kernel') "
    "+ pg_total_relation_size('traces_kernelname') + pg_total_relation_size('traces_kernelcontext')"
)


@pytest.mark.postgres("the sizes are PostgreSQL's tables on disk")
def test_a_launch_costs_at_most_150_bytes_in_postgres(db, make_trace):
    """What 20,000 launches with totals, a step and a measured time add to the kernels (heap
    and primary key), names and contexts tables, and to the database: at most 150 bytes each.

    Growth, not size: the tables hold the rolled-back rows of the session's earlier tests."""
    make_trace("sized", state=TraceState.READY)
    with connection.cursor() as cursor:
        cursor.execute(SIZES)
        database_before, tables_before = cursor.fetchone()
    names = [f"_ZN7cutlass6KernelINS_4gemm6kernel4GemmILi{n}EEEEvNT_6ParamsE_sm80_{n:04d}" for n in range(60)]
    launches = 20_000
    rows = (
        kernel_row(
            kernel_id,
            ctx=f"0x7f3a{context}",
            name=names[kernel_id % len(names)],
            insts=50066 + kernel_id,
            traced=kernel_id % 3 == 0,
            step=kernel_id // 200,
            duration_ns=1000 + kernel_id,
        )
        for context in range(4)
        for kernel_id in range(1, launches // 4 + 1)
    )
    with transaction.atomic():
        assert kernel_store.kernels_replace("sized", rows) == launches
    with connection.cursor() as cursor:
        cursor.execute(SIZES)
        database_after, tables_after = cursor.fetchone()
    assert Trace.objects.get(pk="sized").kernels.count() == launches
    tables, database = (
        (tables_after - tables_before) / launches,
        (database_after - database_before) / launches,
    )
    assert tables <= BYTES_PER_LAUNCH, f"tables: {tables:.1f} bytes per launch"
    assert database <= BYTES_PER_LAUNCH, f"database: {database:.1f} bytes per launch"
    print(f"{tables:.1f} bytes per launch in the tables, {database:.1f} in the database")


def test_launches_come_back_as_they_were_stored_whatever_their_order_and_files(db, make_trace):
    """Contexts arriving out of (ctx, device) order are renumbered; files off their context's
    scheme are kept; names shared with another trace are stored once."""
    make_trace("other", state=TraceState.READY)
    make_trace("mixed", state=TraceState.READY)
    shared = "void gemm<float, 128>(float const*, float*, int)"
    with transaction.atomic():
        kernel_store.kernels_replace("other", [kernel_row(1, name=shared)])
    launches = [
        kernel_row(1, ctx="0xb", name=shared, insts=2**32 - 1, step=0, duration_ns=5),
        kernel_row(2, ctx="0xb", trace_file="kernel-2.traceg"),  # off the scheme
        kernel_row(1, ctx="0xa", device=1, stream=9, trace_file="kernel-1_1.trace"),
        kernel_row(2, ctx="0xa", device=1, stream=9, trace_file="kernel-2_1.trace"),
        kernel_row(1, ctx="0xa", device=0, stream=2**40, trace_file="kernel-1_0.trace"),
        kernel_row(3, ctx="0xa", device=0, insts=None, trace_file="kernel-3_0.trace"),
        kernel_row(5, ctx="0xc", trace_file="kernel-52.trace"),  # a digit after the id: no scheme
        kernel_row(6, ctx="0xc", trace_file="kernel-6.trace"),
    ]
    with transaction.atomic():
        assert kernel_store.kernels_replace("mixed", iter(launches)) == len(launches)

    stored = list(selectors.trace_detail_snapshot("mixed")[1])
    ctx, device, kernel_id = (KERNEL_COLUMNS.index(column) for column in ("ctx", "device", "kernel_id"))
    assert stored == sorted(launches, key=lambda row: (row[ctx], row[device], row[kernel_id]))
    assert list(
        KernelContext.objects.filter(trace__id="mixed").order_by("index").values_list("ctx", "device")
    ) == [("0xa", 0), ("0xa", 1), ("0xb", -1), ("0xc", -1)]
    assert KernelName.objects.filter(name=shared).count() == 1
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT trace_file FROM traces_kernel WHERE trace_file IS NOT NULL ORDER BY trace_file"
        )
        assert [row[0] for row in cursor.fetchall()] == [
            "kernel-2.traceg",
            "kernel-52.trace",
            "kernel-6.trace",
        ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres("the names' writes are PostgreSQL's COPY on connections of their own")
def test_two_parses_adding_one_new_name_do_not_wait_for_each_other():
    """The names a parse adds are committed at once: another parse adding the same name goes
    on, instead of waiting for the first's whole transaction (or deadlocking with it)."""
    for trace_id in ("a", "b"):
        Trace.objects.create(id=trace_id, state=TraceState.READY)
    errors = []

    def other_worker():
        try:
            with transaction.atomic():
                kernel_store.kernels_replace(
                    "b", [kernel_row(1, name="_Z8brandnewv"), kernel_row(2, name="_Z5elsev")]
                )
        except Exception as error:  # reported by the assertion below
            errors.append(error)
        finally:
            connection.close()

    with transaction.atomic():
        kernel_store.kernels_replace("a", [kernel_row(1, name="_Z8brandnewv")])
        worker = threading.Thread(target=other_worker)
        worker.start()
        worker.join(timeout=20)
        assert not worker.is_alive(), "the second parse waited for the first's transaction"
    assert errors == []
    assert [row[2] for row in selectors.trace_detail_snapshot("b")[1]] == ["_Z8brandnewv", "_Z5elsev"]
    assert KernelName.objects.filter(name="_Z8brandnewv").count() == 1


@pytest.mark.parametrize("delete", ["services.trace_delete", "queryset.delete"])
def test_a_deleted_trace_leaves_no_launch_behind(db, make_trace, delete):
    """Launches hold no database constraint to their trace (a trigger per COPY row): whichever
    way a trace is deleted, the purge removes them (tests/traces/test_big_delete.py)."""
    make_trace("gone", state=TraceState.READY)
    make_trace("kept", state=TraceState.READY)
    with transaction.atomic():
        kernel_store.kernels_replace("gone", [kernel_row(1), kernel_row(2, ctx="0xb")])
        kernel_store.kernels_replace("kept", [kernel_row(1)])
    if delete == "services.trace_delete":
        services.trace_delete("gone")
    else:
        Trace.objects.filter(pk="gone").delete()
    kernel_store.kernels_purge()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM traces_kernel")
        assert cursor.fetchone()[0] == 1
        cursor.execute("SELECT count(*) FROM traces_kernelcontext")
        assert cursor.fetchone()[0] == 1
    assert Trace.objects.get(pk="kept").kernels.count() == 1


@pytest.mark.postgres("the queue feeds PostgreSQL's COPY")
def test_the_copy_queue_is_bounded(db, monkeypatch):
    """A parse faster than PostgreSQL waits once COPY_QUEUE_BLOCKS blocks of at most
    COPY_BLOCK_BYTES are queued (2 MiB), where psycopg's QueuedLibpqWriter would hold 1,024
    (128 MiB): the peak of `ingest_traces` stays flat (docs/performance.md)."""
    sent, release = [], threading.Event()

    def slow_send(writer, data):  # PostgreSQL, slower than the parse
        release.wait()
        sent.append(len(data))

    monkeypatch.setattr(kernel_store.LibpqWriter, "write", slow_send)
    text = b"x" * (kernel_store.COPY_BLOCK_BYTES * (kernel_store.COPY_QUEUE_BLOCKS + 8))
    with connection.cursor():
        pass
    with connection.connection.cursor() as cursor:
        writer = kernel_store.BoundedCopyWriter(cursor)
        parse = threading.Thread(target=writer.write, args=(text,))
        parse.start()
        parse.join(timeout=1)
        assert parse.is_alive(), "the parse ran ahead of PostgreSQL by more than the queue"
        assert writer.blocks.qsize() == kernel_store.COPY_QUEUE_BLOCKS
        release.set()
        parse.join()
        writer.blocks.put(b"")
        writer.sender.join()
    assert max(sent) == kernel_store.COPY_BLOCK_BYTES and sum(sent) == len(text)


@pytest.mark.postgres("the send is PostgreSQL's COPY")
def test_a_failed_send_fails_the_parse(db, monkeypatch):
    """PostgreSQL's refusal of a block, raised in the sending thread, reaches the parse at its
    next write, and the sender keeps emptying the queue, so that write does not hang."""

    def refused(writer, data):
        raise OSError("connection lost")

    monkeypatch.setattr(kernel_store.LibpqWriter, "write", refused)
    with connection.cursor():
        pass
    with connection.connection.cursor() as cursor:
        writer = kernel_store.BoundedCopyWriter(cursor)
        writer.write(b"row\n")
        writer.sender.join(timeout=0.2)  # still alive: emptying the queue
        with pytest.raises(OSError, match="connection lost"):
            for _ in range(kernel_store.COPY_QUEUE_BLOCKS * 4):
                writer.write(b"row\n")
        writer.blocks.put(b"")
        writer.sender.join()


@pytest.mark.postgres("the names' connection is PostgreSQL's")
def test_names_are_committed_on_a_connection_of_their_own(db):
    """The names connection is a second session (Django's connection of another thread), whose
    inserts are committed whatever the parse's transaction does."""
    names = kernel_store.NamesConnection()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            [(ours,)] = cursor.fetchall()
        [(theirs,)] = names.execute("SELECT pg_backend_pid()", [])
        assert theirs != ours
        with pytest.raises(RuntimeError), transaction.atomic():
            names.execute(
                "INSERT INTO traces_kernelname (digest, name, demangled, demangle_limited) "
                "VALUES (%s, %s, %s, false)",
                [name_digest("_Z9committedv"), "_Z9committedv", "committed()"],
            )
            raise RuntimeError("the parse fails")
        assert KernelName.objects.filter(name="_Z9committedv").exists()
    finally:
        names.execute("DELETE FROM traces_kernelname WHERE name = %s", ["_Z9committedv"])
        names.close()
