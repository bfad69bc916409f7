"""`manage.py ingest_traces --watch` (the demo's poller) runs the sweeps' watcher after each
pass (docs/sweeps.md#nothing-lost-nothing-twice): a sweep job whose worker stopped reporting is
queued again, and the pass says so."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from ingest.management.commands import ingest_traces
from simulations.models import Sweep, SweepJob
from tests.helpers import ingested, kernel_rows
from tests.simulations import sweep_support

broker = sweep_support.broker  # the fixture


@pytest.mark.django_db(transaction=True)  # the watch loop closes a connection left in a transaction
def test_each_watch_pass_queues_again_a_job_whose_lease_lapsed(s3, broker, monkeypatch):
    trace = ingested("turing", kernel_rows(3))
    sweep = Sweep.objects.create(name="s", configs=["SM75_RTX2060"])
    lapsed = timezone.now() - timedelta(seconds=121)
    job = SweepJob.objects.create(
        sweep=sweep,
        trace=trace,
        config="SM75_RTX2060",
        state="running",
        attempts=1,
        worker={"host": "farm-1", "process": 7},
        started_at=lapsed,
        heartbeat_at=lapsed,
    )

    def one_pass_only(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(ingest_traces.time, "sleep", one_pass_only)
    out, err = io.StringIO(), io.StringIO()
    call_command("ingest_traces", "--watch", stdout=out, stderr=err)
    assert not err.getvalue()
    assert (
        "sweeps: 1 jobs queued again (lease lapsed), 0 failed, 0 messages published again" in out.getvalue()
    )
    job.refresh_from_db()
    assert job.state == "queued" and "farm-1" in job.error
    assert broker.messages("SM75_RTX2060") == [("cascade.sweep_job", [sweep.pk, job.pk])]
