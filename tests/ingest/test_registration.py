"""What a pass registers, run by run: a key the database cannot store, a folder that never
gets its metadata.json, and which traces are samples. Moto's S3 server and PostgreSQL."""

import logging
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from ingest import bucket, passes
from tests.helpers import PREFIX, TEST_BUCKET
from traces.models import Trace, TraceState

OK = {"status": "ok", "trace_gpu_arch": "sm_86"}


# An INSERT into the trace table in either dialect: Django writes `ignore_conflicts` as
# PostgreSQL's `ON CONFLICT DO NOTHING` at the end, SQLite's `INSERT OR IGNORE` at the start.
TRACE_INSERT = re.compile(r'INSERT (?:OR IGNORE )?INTO "TRACES_TRACE"')


def count_queries(statement: re.Pattern):
    """The connection's queries that start with `statement`, as a context's list."""
    seen = []

    def execute(run, sql, params, many, context):
        if statement.match(sql.lstrip().upper()):
            seen.append(sql)
        return run(sql, params, many, context)

    return seen, connection.execute_wrapper(execute)


def test_a_run_the_database_cannot_store_is_skipped_and_every_other_run_goes_on(
    db, s3, upload, vecadd_files, caplog
):
    s3.put_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}bad\x00run/metadata.json", Body=b'{"status": "ok"}')
    upload("good-a", vecadd_files, metadata=OK)
    upload("good-b", vecadd_files, metadata=OK)
    assert "bad\x00run" in bucket.list_run_ids(), "moto keeps the key as S3 does"

    inserts, counting = count_queries(TRACE_INSERT)
    with caplog.at_level(logging.WARNING, logger="ingest"), counting:
        result = passes.poll_bucket()

    assert dict(Trace.objects.values_list("id", "state")) == {
        "good-a": TraceState.READY,
        "good-b": TraceState.READY,
    }
    assert not result.errors
    assert len(inserts) == 1, "the good runs still registered in one INSERT"
    assert any("'bad\\x00run'" in record.getMessage() for record in caplog.records)


def test_a_key_the_database_cannot_store_is_left_out_of_its_runs_listing_and_named(
    db, s3, upload, vecadd_files
):
    # A control character (here NUL, which PostgreSQL text cannot hold): not a plain relative
    # path, so in no listing; the run is read without it and says so.
    upload("good", vecadd_files, metadata=OK)
    s3.put_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}odd/traces/a\x00b", Body=b"x")
    upload("odd", vecadd_files, metadata=OK)

    passes.poll_bucket()

    assert dict(Trace.objects.values_list("id", "state")) == {
        "good": TraceState.READY,
        "odd": TraceState.READY,
    }
    (warning,) = Trace.objects.get(pk="odd").warnings
    assert warning["file"] == "traces/a\\x00b" and "control character" in warning["what"]


def test_a_folder_without_metadata_json_is_listed_again_later_and_later(db, s3, upload, s3_log):
    upload("no-metadata", {"traces/stats.csv": "x"})  # objects, never metadata.json
    listing = f"prefix={PREFIX}no-metadata/"

    for _ in range(5):
        passes.poll_bucket()
    # Listed when it appeared, and once more to see that nothing changed: then not every pass.
    assert len(s3_log("GET", listing)) == 2
    trace = Trace.objects.get(pk="no-metadata")
    assert trace.state == TraceState.UPLOADING
    assert trace.recheck_seconds == 60

    for expected_wait in (120, 240):
        Trace.objects.filter(pk="no-metadata").update(recheck_after=timezone.now() - timedelta(seconds=1))
        passes.poll_bucket()
        assert Trace.objects.get(pk="no-metadata").recheck_seconds == expected_wait
    assert len(s3_log("GET", listing)) == 4


def test_a_folder_whose_metadata_json_lands_is_parsed_once_listed(db, s3, upload, vecadd_files):
    upload("late", vecadd_files)
    passes.poll_bucket()
    upload("late", vecadd_files, metadata=OK)
    Trace.objects.filter(pk="late").update(recheck_after=timezone.now() - timedelta(seconds=1))
    passes.poll_bucket()
    trace = Trace.objects.get(pk="late")
    assert trace.state == TraceState.READY
    assert trace.recheck_seconds == 0 or trace.recheck_after > timezone.now()


@pytest.mark.parametrize("run_id", ["sample__x", "s\u0430mple__x"])  # the second with a Cyrillic a
def test_an_uploaded_run_is_no_sample_whatever_its_name(db, upload, vecadd_files, run_id):
    upload(run_id, vecadd_files, metadata={**OK, "sample": True})
    passes.poll_bucket()
    trace = Trace.objects.get(pk=run_id)
    assert (trace.state, trace.sample) == (TraceState.READY, False)


def test_load_samples_marks_its_runs_and_passes_keep_the_mark(db, s3, tmp_path):
    from tests.ingest.conftest import vecadd_files as vecadd_files_fixture

    run = tmp_path / "samples" / "any-name"
    for name, body in vecadd_files_fixture.__wrapped__().items():
        path = run / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body if isinstance(body, bytes) else body.encode())
    (run / "metadata.json").write_text('{"status": "ok", "trace_gpu_arch": "sm_86"}')

    call_command("load_samples", "--dir", str(tmp_path / "samples"))
    assert Trace.objects.get(pk="any-name").sample is True
    passes.poll_bucket()
    trace = Trace.objects.get(pk="any-name")
    assert (trace.state, trace.sample) == (TraceState.READY, True)
