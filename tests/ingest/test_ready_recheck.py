"""The recheck of ready runs (a re-upload rewrites metadata.json) reads only the ETag it
compares, and spreads the next rechecks over CASCADE_READY_RECHECK_SECONDS:
it loaded every due trace's whole file list, and sent them all back at the same moment."""

import re
from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ingest import bucket, scan
from tests.helpers import PREFIX, TEST_BUCKET
from traces.models import Trace, TraceState

MANY_FILES = 500  # a run with many objects: the list a recheck must not read


def ready_trace(s3, run_id: str, *, files: int = 3) -> None:
    """A ready trace whose `files` holds metadata.json's entry among `files` others, as listed."""
    key = f"{PREFIX}{run_id}/metadata.json"
    s3.put_object(Bucket=TEST_BUCKET, Key=key, Body=b'{"status": "ok"}')
    etag = bucket.head_etag(key)
    listed = [{"key": f"{PREFIX}{run_id}/traces/f{n:04d}", "bytes": 10, "etag": '"x"'} for n in range(files)]
    Trace.objects.create(
        id=run_id,
        state=TraceState.READY,
        files=[{"key": key, "bytes": 16, "etag": etag}, *listed],
        recheck_after=None,
    )


def test_the_recheck_reads_the_metadata_etag_and_not_the_file_list(db, s3):
    ready_trace(s3, "kept", files=MANY_FILES)
    ready_trace(s3, "re-uploaded", files=MANY_FILES)
    s3.put_object(
        Bucket=TEST_BUCKET, Key=f"{PREFIX}re-uploaded/metadata.json", Body=b'{"status": "ok", "v": 2}'
    )

    with CaptureQueriesContext(connection) as queries:
        changed = scan.ready_runs_changed(["kept", "re-uploaded"])

    assert changed == ["re-uploaded"]
    selects = [
        query["sql"] for query in queries.captured_queries if query["sql"].lstrip().startswith("SELECT")
    ]
    assert selects, "the due traces are read from the database"
    for sql in selects:
        # The column is never selected as it is: it may appear only inside the lookup of one entry.
        assert not re.search(r'(SELECT|,)\s*"traces_trace"\."files"\s*(AS|,|FROM)', sql), sql


def test_a_trace_without_a_metadata_entry_counts_as_changed(db, s3):
    ready_trace(s3, "odd")
    Trace.objects.filter(pk="odd").update(files=[])
    assert scan.ready_runs_changed(["odd"]) == ["odd"]


def test_next_rechecks_are_spread_over_the_interval(db, s3, settings):
    settings.CASCADE_READY_RECHECK_SECONDS = 600
    run_ids = [f"run-{n:03d}" for n in range(64)]
    for run_id in run_ids:
        ready_trace(s3, run_id)
    before = timezone.now()
    assert scan.ready_runs_changed(run_ids) == []
    after = timezone.now()

    moments = list(Trace.objects.values_list("recheck_after", flat=True))
    interval = timedelta(seconds=600)
    assert all(before < moment <= after + interval for moment in moments)
    # 64 traces checked in one pass are not all due again in one pass.
    assert len(set(moments)) >= 16
    assert max(moments) - min(moments) >= interval / 2


def test_each_trace_keeps_its_own_moment_one_interval_apart(db, s3, settings, monkeypatch):
    from traces import services

    settings.CASCADE_READY_RECHECK_SECONDS = 600
    ready_trace(s3, "run")
    services.traces_recheck_ready_later(["run"])
    first = Trace.objects.get(pk="run").recheck_after
    # Checked again when due (a little late, as a pass is): due again one interval after the first.
    monkeypatch.setattr(services.timezone, "now", lambda: first + timedelta(seconds=7))
    services.traces_recheck_ready_later(["run"])
    assert Trace.objects.get(pk="run").recheck_after == first + timedelta(seconds=600)


def test_with_a_zero_interval_every_pass_rechecks(db, s3, settings):
    settings.CASCADE_READY_RECHECK_SECONDS = 0
    ready_trace(s3, "run")
    scan.ready_runs_changed(["run"])
    assert Trace.objects.get(pk="run").recheck_after <= timezone.now()
