"""`manage.py check_integrity`: what the database's constraints no longer
guard, found (exit 1) and repaired with --fix. Kernel rows have no foreign key to their trace
since migration 0008: a TRUNCATE, a hand-written DELETE or a partial restore leaves orphans."""

import io

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from tests.helpers import lock_held_elsewhere
from traces.integrity import STUCK_ERROR
from traces.models import Kernel, KernelContext, KernelName, Step, Trace, TraceState, next_trace_keys


def check(*args) -> tuple[str, bool]:
    """(what the command printed, whether it exited 1)."""
    out = io.StringIO()
    try:
        call_command("check_integrity", *args, stdout=out, stderr=io.StringIO())
    except CommandError:
        return out.getvalue(), True
    return out.getvalue(), False


def ready_trace(make_trace, make_kernels, trace_id: str, launches: int) -> Trace:
    trace = make_trace(trace_id, state=TraceState.READY)
    make_kernels(trace, [100] * launches)
    Step.objects.create(trace=trace, index=0, name="prefill", first_kernel_id=1, last_kernel_id=launches)
    return Trace.objects.get(pk=trace_id)


def count_rows(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {table}")
        return cursor.fetchone()[0]


def test_a_clean_database_passes(make_trace, make_kernels):
    ready_trace(make_trace, make_kernels, "clean", 3)
    printed, failed = check()
    assert not failed and printed.endswith("no integrity problem found\n")


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres("TRUNCATE ... CASCADE leaves the launches, which have no foreign key")
def test_a_truncate_of_the_trace_table_leaves_launches_found_and_deleted_by_fix(make_trace, make_kernels):
    ready_trace(make_trace, make_kernels, "first", 3)
    ready_trace(make_trace, make_kernels, "second", 2)
    with connection.cursor() as cursor:
        # The trace table alone: PostgreSQL empties the tables whose foreign keys point at it
        # (contexts, steps), and launches, which have none, stay.
        cursor.execute("TRUNCATE traces_trace CASCADE")
    assert count_rows("traces_kernel") == 5

    printed, failed = check()
    assert failed
    assert "launches without their trace: 5" in printed

    printed, failed = check("--fix")
    assert failed, "what was found is said, repaired or not"
    assert "launches without their trace: 5" in printed and "-> 5 deleted" in printed
    assert count_rows("traces_kernel") == 0
    # The names only those launches used go too (harmless, but said and deleted).
    assert "kernel names no launch uses: " in printed
    assert not KernelName.objects.filter(name__startswith="_Z6kernel").exists()

    assert check() == ("no integrity problem found\n", False)


@pytest.mark.postgres("the partial restore is PostgreSQL's session_replication_role")
def test_rows_restored_without_their_trace_are_found_and_deleted(make_trace, make_kernels):
    ready_trace(make_trace, make_kernels, "kept", 2)
    ready_trace(make_trace, make_kernels, "lost", 3)
    with connection.cursor() as cursor:
        # A partial restore: rows loaded without their constraints' triggers.
        cursor.execute("SET session_replication_role = replica")
        cursor.execute("DELETE FROM traces_trace WHERE id = 'lost'")
        cursor.execute("SET session_replication_role = DEFAULT")

    printed, failed = check()
    assert failed
    for line in (
        "launches without their trace: 3",
        "contexts without their trace: 1",
        "steps without their trace: 1",
    ):
        assert line in printed, printed

    check("--fix")
    kept = Trace.objects.get(pk="kept")
    assert Kernel.objects.count() == Kernel.objects.filter(trace=kept).count() == 2
    assert KernelContext.objects.count() == Step.objects.count() == 1
    assert check()[1] is False


def test_a_trace_stuck_in_parsing_is_found_and_parsed_again(make_trace):
    make_trace("stuck", state=TraceState.PARSING, parsed_fingerprint="abc")
    printed, failed = check()
    assert failed and "traces stuck in parsing with no pass holding them: 1: stuck" in printed

    check("--fix")
    trace = Trace.objects.get(pk="stuck")
    # Failed for the next poll to parse again (trace_mark_failed's retry): not left to rot.
    assert (trace.state, trace.error, trace.parsed_fingerprint) == (TraceState.FAILED, STUCK_ERROR, "")
    assert trace.recheck_after is None


@pytest.mark.django_db(transaction=True)
def test_a_trace_a_pass_is_parsing_is_not_stuck():
    Trace.objects.create(id="busy", state=TraceState.PARSING)
    with lock_held_elsewhere("busy"):
        printed, failed = check("--fix")
    assert not failed and "stuck" not in printed
    assert Trace.objects.get(pk="busy").state == TraceState.PARSING


def test_counts_that_disagree_with_the_launches_are_recounted(make_trace, make_kernels):
    trace = ready_trace(make_trace, make_kernels, "miscounted", 2)
    Trace.objects.filter(pk=trace.pk).update(kernel_count=7, kernels_without_totals=1)

    printed, failed = check()
    assert (
        failed
        and "traces whose counts disagree with their launches: 1: miscounted (7 said, 2 stored)" in printed
    )
    check("--fix")
    trace.refresh_from_db()
    assert (trace.kernel_count, trace.kernels_without_totals) == (2, 0)
    assert check()[1] is False


@pytest.mark.postgres("names without a constraint are PostgreSQL's schema")
def test_launches_whose_name_is_gone_have_their_trace_parsed_again(make_trace, make_kernels):
    ready_trace(make_trace, make_kernels, "nameless", 2)
    with connection.cursor() as cursor:  # names have no constraint either
        cursor.execute("DELETE FROM traces_kernelname WHERE name = '_Z6kernel1Pdi'")
    printed, failed = check()
    assert failed and "traces with launches whose kernel name is gone: 1: nameless" in printed
    check("--fix")
    trace = Trace.objects.get(pk="nameless")
    assert (trace.state, trace.kernel_count, trace.parsed_fingerprint) == (TraceState.FAILED, 0, "")


def test_a_deleted_newest_trace_never_hands_its_key_to_the_next(make_trace):
    """On SQLite keys were MAX(key) + 1: launches a deleted newest trace left behind (no foreign
    key) would have reappeared under the next trace."""
    make_trace("older")
    newest = make_trace("newest")
    Trace.objects.filter(pk="newest").delete()
    assert make_trace("next").key > newest.key
    assert min(next_trace_keys(2)) > newest.key  # the registration of many runs at once


@pytest.mark.slow
def test_the_command_exits_1_when_it_finds_something_and_0_once_repaired(tmp_path):
    """As cron runs it: manage.py in a process of its own, on the embedded SQLite database."""
    import sqlite3

    from tests.support import manage

    var_dir = tmp_path / "var"
    assert manage(var_dir, "migrate", "-v", "0").returncode == 0
    clean = manage(var_dir, "check_integrity")
    assert (clean.returncode, clean.stdout) == (0, "no integrity problem found\n"), clean.stderr
    with sqlite3.connect(var_dir / "cascade.sqlite3") as database:  # a launch of a trace deleted by hand
        database.execute(
            "INSERT INTO traces_kernel (trace_key, context, kernel_id, name_id, grid_x, grid_y, grid_z, "
            "block_x, block_y, block_z, blocks, threads, traced) VALUES (41, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0)"
        )
    found = manage(var_dir, "check_integrity")
    assert found.returncode == 1
    assert "launches without their trace: 1: of trace key 41" in found.stdout
    assert "1 kind(s) of integrity problem found (--fix repairs them)" in found.stderr
    assert "Traceback" not in found.stderr
    repaired = manage(var_dir, "check_integrity", "--fix")
    assert repaired.returncode == 1 and "-> 1 deleted" in repaired.stdout
    assert manage(var_dir, "check_integrity").returncode == 0
