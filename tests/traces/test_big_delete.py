"""Deleting a big trace: the trace goes at once, in one short transaction; its
launches go afterwards, in batches of at most N rows each its own transaction
(`kernel_store.kernels_purge`, `manage.py purge_deleted_kernels`, the poll pass). Nothing of
another trace is touched, nothing of the deleted one is left, a purge stopped midway resumes,
and check_integrity does not call a purge under way corruption."""

import io

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from ingest import passes
from traces import services
from traces.kernel_store import kernels_purge
from traces.models import KernelPurge, Trace, TraceState


def launches_of(trace_key: int) -> list[tuple]:
    """Every stored column of a trace's launches, straight from the table."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT * FROM traces_kernel WHERE trace_key = %s ORDER BY context, kernel_id", [trace_key]
        )
        return cursor.fetchall()


@pytest.fixture
def two_traces(make_trace, make_kernels):
    """'gone' with 23 launches in two contexts, 'kept' with 5: (gone's key, kept's key)."""
    gone = make_trace("gone", state=TraceState.READY)
    make_kernels(gone, [100] * 15, ctx="0xa")
    make_kernels(gone, [200] * 8, ctx="0xb", first=100)
    kept = make_trace("kept", state=TraceState.READY)
    make_kernels(kept, [300] * 5)
    return gone.key, kept.key


def integrity() -> tuple[str, bool]:
    out = io.StringIO()
    try:
        call_command("check_integrity", stdout=out, stderr=io.StringIO())
    except CommandError:
        return out.getvalue(), True
    return out.getvalue(), False


def test_the_trace_disappears_at_once_and_its_launches_after_the_purge(api, two_traces):
    gone_key, kept_key = two_traces
    kept_before = launches_of(kept_key)
    assert len(launches_of(gone_key)) == 23

    services.trace_delete("gone")

    assert api.get("/api/traces/gone").status_code == 404
    assert [trace["id"] for trace in api.get("/api/traces").json()] == ["kept"]
    # Its launches wait for the purge, and say so.
    assert len(launches_of(gone_key)) == 23
    assert list(KernelPurge.objects.values_list("trace_key", "trace_id")) == [(gone_key, "gone")]

    purged = kernels_purge(batch=4)

    assert launches_of(gone_key) == []
    assert launches_of(kept_key) == kept_before
    assert (purged.launches, purged.traces) == (23, 1)
    assert not KernelPurge.objects.exists()
    assert api.get("/api/traces/kept").status_code == 200


def test_each_statement_deletes_at_most_the_batch(two_traces):
    """Counted by the database's rowcount of every DELETE the purge sends, not by its report."""
    gone_key, _ = two_traces
    services.trace_delete("gone")
    deletes = []

    def record(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql.lstrip().upper().startswith("DELETE FROM TRACES_KERNEL "):
            deletes.append(context["cursor"].rowcount)
        return result

    with connection.execute_wrapper(record):
        kernels_purge(batch=5)

    assert deletes and max(deletes) <= 5
    assert sum(deletes) == 23
    assert len(deletes) == 5  # ceil(23 / 5): no statement deleted nothing, none more than 5
    assert launches_of(gone_key) == []


def test_a_purge_stopped_midway_resumes_and_leaves_nothing(two_traces):
    gone_key, kept_key = two_traces
    kept_before = launches_of(kept_key)
    services.trace_delete("gone")
    batches = []

    def die_after_two(key, deleted):
        batches.append(deleted)
        if len(batches) == 2:
            raise KeyboardInterrupt  # as a killed command: the batches done stay done

    with pytest.raises(KeyboardInterrupt):
        kernels_purge(batch=3, on_batch=die_after_two)
    assert len(launches_of(gone_key)) == 23 - 6
    assert KernelPurge.objects.filter(pk=gone_key).exists()

    # Halfway, check_integrity reports a purge under way, not launches without their trace.
    printed, failed = integrity()
    assert not failed, printed
    assert "launches of deleted traces being purged: 17 of 1 trace(s)" in printed

    purged = kernels_purge(batch=3)
    assert purged.launches == 17
    assert launches_of(gone_key) == []
    assert launches_of(kept_key) == kept_before
    assert not KernelPurge.objects.exists()
    printed, failed = integrity()
    assert not failed and "being purged" not in printed


def test_a_time_bound_leaves_the_rest_for_the_next_call(two_traces):
    gone_key, _ = two_traces
    services.trace_delete("gone")
    assert kernels_purge(batch=2, seconds=0).launches == 0
    assert len(launches_of(gone_key)) == 23
    assert kernels_purge(batch=2, seconds=60).traces == 1
    assert launches_of(gone_key) == []


def test_a_run_registered_again_gets_a_new_key_and_none_of_the_old_launches(api, make_trace, two_traces):
    gone_key, _ = two_traces
    services.trace_delete("gone")
    services.trace_undelete("gone")
    again = make_trace("gone", state=TraceState.READY)
    assert again.key not in (gone_key, *Trace.objects.exclude(pk="gone").values_list("key", flat=True))
    assert again.key > gone_key  # keys come from a sequence: never one handed out before
    assert api.get("/api/traces/gone").json()["kernel_count"] == 0
    assert launches_of(again.key) == []
    kernels_purge()
    assert launches_of(gone_key) == [] and launches_of(again.key) == []


def test_a_trace_deleted_by_a_queryset_is_purged_too(two_traces):
    """The shell's Trace.objects...delete() and the admin's bulk delete do not cascade to a
    million launches in one statement either: the purge takes them."""
    gone_key, kept_key = two_traces
    Trace.objects.filter(pk="gone").delete()
    assert KernelPurge.objects.filter(pk=gone_key).exists()
    printed, failed = integrity()
    assert not failed, printed
    kernels_purge()
    assert launches_of(gone_key) == [] and len(launches_of(kept_key)) == 5


def test_launches_without_a_trace_or_a_purge_are_still_orphans(two_traces):
    """A hand-written DELETE of the trace row is what check_integrity is for: still reported."""
    gone_key, _ = two_traces
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM traces_kernelcontext WHERE trace_key = %s", [gone_key])
        cursor.execute("DELETE FROM traces_trace WHERE key = %s", [gone_key])
    printed, failed = integrity()
    assert failed and "launches without their trace: 23" in printed


def test_the_command_purges_in_batches(two_traces):
    gone_key, _ = two_traces
    services.trace_delete("gone")
    out = io.StringIO()
    call_command("purge_deleted_kernels", "--batch", "10", stdout=out)
    assert out.getvalue().strip() == "23 launches deleted in 3 statements, 1 trace(s) done"
    assert launches_of(gone_key) == []


def test_a_poll_pass_purges_a_deleted_traces_launches(s3, two_traces):
    """Without anyone running the command: the poller's next pass deletes them (5 s' worth)."""
    gone_key, _ = two_traces
    services.trace_delete("gone")
    passes.poll_bucket()
    assert launches_of(gone_key) == []
    assert not KernelPurge.objects.exists()
