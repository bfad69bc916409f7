"""Passes over many runs with S3 requests overlapped on threads: the same outcome as one
request after another, a failure that stays its run's own, and what a pass costs in requests."""

import io
import re

import pytest
from botocore.exceptions import EndpointConnectionError
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ingest import bucket, decision, passes
from ingest.read_ahead import ReadAhead
from ingest.scan import register_objects
from tests.helpers import PREFIX, STATS_HEADER, TEST_BUCKET, stats_row
from tests.ingest.support import outcome, upload_runs
from traces.models import Trace, TraceState

OK = {"status": "ok", "trace_gpu_arch": "sm_90"}


def stats(count: int, ctx: str = "0x1", header: bool = True) -> str:
    rows = "".join(stats_row(n, ctx, name="_Z1kv", insts=n) for n in range(1, count + 1))
    return (STATS_HEADER if header else "") + rows


def test_threads_give_the_same_traces_kernels_and_states_as_one_after_another(db, s3, api, settings):
    upload_runs(s3, 60)
    settings.CASCADE_S3_THREADS = 8
    threaded = passes.poll_bucket()
    overlapped = outcome(api)
    Trace.objects.all().delete()
    settings.CASCADE_S3_THREADS = 1
    sequential = passes.poll_bucket()
    assert outcome(api) == overlapped
    assert [str(change) for change in threaded.changes] == [str(change) for change in sequential.changes]
    assert threaded.cost.s3_requests == sequential.cost.s3_requests
    states = [state for state, *_ in overlapped.values()]
    assert (states.count("ready"), states.count("failed"), states.count("uploading")) == (30, 20, 10)
    assert len(overlapped["r006"][-1]) == 7 + 3  # two contexts, the second one's file without the header
    assert overlapped["r007"][-1][1]["traced"] and overlapped["r007"][-1][1]["duration_ns"] == 50


def test_many_new_runs_are_listed_in_one_listing_of_the_prefix(db, s3, settings):
    upload_runs(s3, 60, make=lambda n: ({"traces/stats_ctx_0x1": stats(2)}, OK))
    result = passes.poll_bucket()
    # The run folders, the polling watch's page (ingest.sweep.watch_pages), the prefix's 120
    # objects, then per run metadata.json and its stats file.
    assert result.cost.s3_requests == 1 + 1 + 1 + 60 * 2
    assert Trace.objects.filter(state=TraceState.READY, kernel_count=2).count() == 60


def test_a_read_that_fails_on_a_thread_fails_only_its_run(db, s3, settings, monkeypatch):
    upload_runs(s3, 12, make=lambda n: ({"traces/stats_ctx_0x1": stats(4)}, OK))
    real = bucket.read_object_and_etag

    def flaky(key, max_bytes):
        if key == f"{PREFIX}r005/traces/stats_ctx_0x1":
            raise EndpointConnectionError(endpoint_url="http://s3.invalid")
        return real(key, max_bytes)

    monkeypatch.setattr(bucket, "read_object_and_etag", flaky)
    result = passes.poll_bucket()
    assert [error.split(":")[0] for error in result.errors] == ["r005"]
    states = dict(Trace.objects.values_list("id", "state"))
    # As if its stats file had failed while it was parsed: left in parsing, for the next pass.
    assert states.pop("r005") == TraceState.PARSING
    assert set(states.values()) == {TraceState.READY}
    monkeypatch.undo()
    passes.poll_bucket()
    assert Trace.objects.get(pk="r005").state == TraceState.READY


def test_the_pass_line_says_the_requests_a_run(db, s3):
    upload_runs(s3, 3, make=lambda n: ({"traces/stats_ctx_0x1": stats(2)}, OK))
    out = io.StringIO()
    call_command("ingest_traces", stdout=out, stderr=io.StringIO())
    # A listing of the run folders and the polling watch's page; per run a listing,
    # metadata.json and the stats file.
    assert re.search(
        r"S3: 11 requests \(3\.7 a run looked at\), [\d.]+ s waiting; database: ", out.getvalue()
    )


def test_a_big_stats_file_is_streamed_on_the_pass_thread_not_read_ahead(db, s3, monkeypatch):
    monkeypatch.setattr("ingest.read_ahead.PREFETCH_FILE_BYTES", 1000)
    upload_runs(s3, 2, make=lambda n: ({"traces/stats_ctx_0x1": stats(40 if n else 2)}, OK))
    read_ahead, streamed = [], []
    ahead, stream = bucket.read_object_and_etag, bucket.iter_object_lines
    monkeypatch.setattr(
        bucket, "read_object_and_etag", lambda key, m: read_ahead.append(key) or ahead(key, m)
    )
    monkeypatch.setattr(
        bucket, "iter_object_lines", lambda key, **kw: streamed.append(key) or stream(key, **kw)
    )
    passes.poll_bucket()
    assert f"{PREFIX}r000/traces/stats_ctx_0x1" in read_ahead
    assert streamed == [f"{PREFIX}r001/traces/stats_ctx_0x1"]
    assert Trace.objects.get(pk="r001").kernel_count == 40


def test_a_file_replaced_after_the_listing_is_read_again_not_taken_from_the_read_ahead(db, s3, monkeypatch):
    upload_runs(s3, 1, make=lambda n: ({"traces/stats_ctx_0x1": stats(2)}, OK))
    real = decision.fetch_small_files

    def then_replaced(run_id, objects):
        fetched = real(run_id, objects)
        # Replaced between the scan's listing and the parse: a read-ahead body of another version.
        key = f"{PREFIX}r000/traces/stats_ctx_0x1"
        bodies = {
            (k, "stale" if k == key else etag): body for (k, etag), body in fetched.files.bodies.items()
        }
        return decision.Fetched(fetched.objects, ReadAhead(bodies))

    monkeypatch.setattr(decision, "fetch_small_files", then_replaced)
    streamed = []
    stream = bucket.iter_object_lines
    monkeypatch.setattr(
        bucket, "iter_object_lines", lambda key, **kw: streamed.append(key) or stream(key, **kw)
    )
    passes.poll_bucket()
    assert streamed == [f"{PREFIX}r000/traces/stats_ctx_0x1"]
    assert Trace.objects.get(pk="r000").kernel_count == 2


def test_a_listing_another_pass_has_moved_past_is_listed_again(db, s3, upload):
    """The scan's listing is used for the parse only if the trace's row still holds it once the
    trace's lock is taken; a newer one registered meanwhile (another pass) means a new listing."""
    upload("run", {"traces/stats_ctx_0x1": stats(2)}, OK)
    scan = passes.scan_bucket()
    upload("run", {"traces/stats_ctx_0x1": stats(5)}, OK)
    register_objects("run", bucket.list_run_objects("run"))  # what another pass saw
    fetched = decision.fetch_small_files("run", scan.listings["run"])
    change = passes.ingest_trace("run", fetched=fetched)
    assert (change.new_state, change.kernel_count) == (TraceState.READY, 5)


@pytest.mark.slow
def test_an_idle_pass_over_a_thousand_failed_runs_costs_one_listing(db, s3, settings):
    upload_runs(s3, 1000, make=lambda n: ({}, {"status": "failed", "error": "the profiler crashed"}))
    first = passes.poll_bucket()
    assert Trace.objects.filter(state=TraceState.FAILED).count() == 1000
    # The run folders, the polling watch's page, the prefix's 1,000 objects in one page, each
    # run's metadata.json.
    assert first.cost.s3_requests == 1 + 1 + 1 + 1000
    idle = passes.poll_bucket()
    assert (idle.listed, idle.changes, idle.cost.s3_requests) == (0, [], 1 + 1)
    # As their waits run out, the failed runs cost a listing each, not the thousand of them.
    Trace.objects.filter(pk__in=["r001", "r002", "r003"]).update(recheck_after=None)
    due = passes.poll_bucket()
    assert (due.listed, due.changes, due.cost.s3_requests) == (3, [], 1 + 1 + 3)


def test_a_listing_that_fails_ends_the_pass_as_the_bucket_listing_does(db, s3, monkeypatch):
    upload_runs(s3, 4, make=lambda n: ({"traces/stats_ctx_0x1": stats(2)}, OK))

    def unreachable(run_id, **options):
        raise EndpointConnectionError(endpoint_url="http://s3.invalid")

    monkeypatch.setattr(bucket, "list_run_objects", unreachable)
    with pytest.raises(CommandError, match="cannot list the bucket"):
        call_command("ingest_traces", stdout=io.StringIO(), stderr=io.StringIO())
    assert not Trace.objects.exists()


def test_listings_past_what_a_scan_keeps_are_listed_again_by_their_parse(db, s3, monkeypatch):
    monkeypatch.setattr("ingest.scan.KEPT_LISTING_OBJECTS", 4)
    upload_runs(s3, 3, make=lambda n: ({"traces/stats_ctx_0x1": stats(n + 1)}, OK))
    scan = passes.scan_bucket()
    assert (scan.to_parse, list(scan.listings)) == (["r000", "r001", "r002"], ["r000", "r001"])
    result = passes.poll_bucket()
    assert dict(Trace.objects.values_list("id", "kernel_count")) == {"r000": 1, "r001": 2, "r002": 3}
    # The folders, the watch's page and 3 listings, a second listing of r002 by its parse, 2
    # files a run.
    assert result.cost.s3_requests == 1 + 1 + 3 + 1 + 3 * 2


def registration_queries(s3, runs: int) -> tuple[int, int]:
    """A scan registering the bucket's runs, all new: its queries but the INSERTs of the trace
    rows, and those INSERTs."""
    for n in range(runs):
        s3.put_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}new-{runs}-{n:03d}/traces/stats_ctx_0x1", Body=b"")
    Trace.objects.all().delete()
    with CaptureQueriesContext(connection) as queries:
        scan = passes.scan_bucket()
    assert len(scan.changes) == Trace.objects.count()  # all new, each waiting for its metadata.json
    insert = re.compile(rf'INSERT (OR IGNORE )?INTO "{Trace._meta.db_table}" ')
    inserts = sum(bool(insert.match(query["sql"])) for query in queries)
    return len(queries) - inserts, inserts


def test_new_runs_are_registered_with_a_few_queries_whatever_their_number(db, s3):
    few, few_inserts = registration_queries(s3, 3)
    many, many_inserts = registration_queries(s3, 30)  # 33 new runs
    assert Trace.objects.count() == 33
    assert many == few
    # One bulk INSERT, in the statements the database takes its rows in: SQLite takes 999 values
    # a statement (a few with every column of a trace), PostgreSQL all of them. Counted from
    # Django's rule, so that a column added to Trace changes nothing here.
    columns = [field for field in Trace._meta.concrete_fields if not field.generated]
    per_statement = connection.ops.bulk_batch_size(columns, [None] * 33)
    assert few_inserts == 1
    assert many_inserts == -(-33 // per_statement)
    assert sorted(Trace.objects.values_list("key", flat=True)) == sorted(
        set(Trace.objects.values_list("key", flat=True))
    )


def test_a_run_another_pass_registers_meanwhile_is_taken_as_that_pass_left_it(db, monkeypatch):
    from traces import services

    files = [{"key": f"{PREFIX}raced/metadata.json", "bytes": 2, "etag": "e1"}]
    next_keys = services.next_trace_keys

    def another_pass_first(count):  # between this pass's lookup and its INSERT
        monkeypatch.setattr(services, "next_trace_keys", next_keys)
        services.trace_register("raced", files, sample=False)
        return next_keys(count)

    monkeypatch.setattr(services, "next_trace_keys", another_pass_first)
    [(trace, how), (fresh, fresh_how)] = services.traces_register(
        [("raced", files, False), ("fresh", files, False)]
    )
    assert (how, fresh_how) == ("unchanged", "created")
    assert Trace.objects.get(pk="raced").key == trace.key
    assert Trace.objects.get(pk="fresh").key == fresh.key != trace.key
