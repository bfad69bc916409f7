"""Migration 0007 stopped half-way says what the operator must really do.

It commits batch after batch: when one fails, the new tables, Trace.key and the earlier
batches' launches are there already, and `migrate` cannot run it again. Its message used to
say "fail or delete the trace, then migrate again", which then failed on the existing column.
"""

import importlib

import pytest
from django.db import connection

from tests.traces.support import BEFORE, migrate, old_launch
from traces.models import Kernel, Trace, TraceState

MIGRATION = importlib.import_module("traces.migrations.0007_kernel_storage")


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres("migration 0007 commits batch by batch on PostgreSQL only")
def test_following_the_message_of_a_failed_0007_migrates(monkeypatch):
    monkeypatch.setattr(MIGRATION, "BATCH_LAUNCHES", 1)  # a batch per trace: the first one commits
    try:
        old = migrate(BEFORE).loader.project_state([BEFORE]).apps
        OldTrace, OldKernel = old.get_model("traces", "Trace"), old.get_model("traces", "Kernel")
        for trace_id, launches in {
            "a-good": [old_launch(1), old_launch(2)],
            "b-out-of-range": [old_launch(1), old_launch(2, grid_x=-1)],
        }.items():
            trace = OldTrace.objects.create(
                id=trace_id, state=TraceState.READY, kernel_count=len(launches), parsed_fingerprint="parsed"
            )
            OldKernel.objects.bulk_create(OldKernel(trace=trace, **launch) for launch in launches)

        with pytest.raises(RuntimeError) as failed:
            migrate()
        message = str(failed.value)
        assert "b-out-of-range" in message
        # Do what it says, statement by statement, as an operator in psql would.
        statements = [line.strip() for line in message.splitlines() if line.startswith("  ")]
        assert statements, message
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        migrate()
    finally:
        migrate()  # the next tests need the current schema, whatever happened

    good, bad = Trace.objects.get(pk="a-good"), Trace.objects.get(pk="b-out-of-range")
    assert (good.state, Kernel.objects.filter(trace=good).count()) == (TraceState.READY, 2)
    assert (bad.state, bad.kernel_count, bad.parsed_fingerprint) == (TraceState.FAILED, 0, "")
    assert not Kernel.objects.filter(trace=bad).exists()
