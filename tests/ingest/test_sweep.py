"""The reconciler with S3 events on (ingest.sweep): each reconciling pass lists one page
of the bucket after a cursor kept in the database, and decides only on the runs of that page that
differ from the database, plus the work in progress. The target (docs/decisions/0003): the idle pass's S3
requests with events on, at most one listing page per CASCADE_POLL_SECONDS_WITH_EVENTS.

The property behind the tests: once a whole lap of the sweep has gone round, a pass over the
whole bucket (`ingest_traces`, the reference) finds nothing to change, whatever event was lost.
"""

import io
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest
from django.core.management import call_command

from ingest import bucket, passes
from ingest.management.commands.ingest_traces import Command
from ingest.models import SweepCursor
from simulations.models import Simulation
from tests.helpers import PREFIX, TEST_BUCKET
from tests.ingest.support import OK, drain, in_queue, put, register_ready, stats_file, upload_run
from traces.models import DeletedTrace, Trace, TraceState
from traces.services import trace_delete


def keys() -> list[str]:
    return [obj.key for obj in bucket._list(PREFIX)]


def sweep_pass() -> passes.PassResult:
    return passes.poll_bucket(sweep=True)


def a_full_pass_changes_nothing() -> bool:
    result = passes.poll_bucket()
    return not result.changes and not result.errors and not result.simulation_changes


def lap() -> list[passes.PassResult]:
    """Sweep passes until one reads the prefix's last page."""
    results = [sweep_pass()]
    while not results[-1].swept.last:
        results.append(sweep_pass())
        assert len(results) < 1000
    return results


def cursor() -> SweepCursor:
    return SweepCursor.objects.get(bucket=TEST_BUCKET, prefix=PREFIX)


def cursor_after() -> str:
    return cursor().after


# --- The idle pass --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_idle_reconciling_pass_over_a_thousand_ready_traces_costs_one_listing(s3, settings):
    settings.CASCADE_S3_PAGE_SIZE = 1000
    run_ids = [f"run-{n:04d}" for n in range(1000)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda run_id: upload_run(s3, run_id), run_ids))
    register_ready(run_ids)
    # The reference, without events nor the polling watch: the run folders (one page of 1,000),
    # then for each ready run, all due, a HEAD of its metadata.json and a listing of its
    # simulations/; nothing changed.
    settings.CASCADE_POLL_WATCH_PAGES = 0
    full = passes.poll_bucket()
    assert (full.changes, full.errors, full.cost.s3_requests) == ([], [], 1 + 1000 * 2)
    Trace.objects.update(recheck_after=None)  # every ready recheck due again
    # With the polling watch (the default): the run folders and the prefix's two pages, which
    # stand for every ready recheck.
    settings.CASCADE_POLL_WATCH_PAGES = 20
    watched = passes.poll_bucket()
    assert (watched.changes, watched.errors, watched.cost.s3_requests) == ([], [], 1 + 2)
    assert not Trace.objects.filter(recheck_after__isnull=False).exists()

    idle = sweep_pass()
    assert (idle.listed, idle.changes, idle.errors, idle.simulation_changes) == (0, [], [], [])
    assert idle.cost.s3_requests == 1
    assert (idle.swept.objects, idle.swept.runs, idle.swept.last) == (1000, [], False)
    # The second page ends the prefix's 2,000 keys: the cursor goes back to the start.
    second = sweep_pass()
    assert second.cost.s3_requests == 1
    assert (second.swept.after, second.swept.objects, second.swept.last) == (keys()[999], 1000, True)
    assert (cursor_after(), cursor().laps) == ("", 1)
    assert sweep_pass().swept.after == ""
    # Their ready rechecks, due all along, were never sent: the sweep stands for them.
    assert not Trace.objects.filter(recheck_after__isnull=False).exists()


@pytest.mark.django_db
def test_the_cursor_advances_a_page_a_pass_and_wraps(s3, settings):
    settings.CASCADE_S3_PAGE_SIZE = 3
    for run_id in ("a", "b", "c", "d"):
        upload_run(s3, run_id)  # 2 keys a run: 8 keys, pages of 3 straddle runs
    passes.poll_bucket()
    listed = keys()
    assert len(listed) == 8
    results = [sweep_pass() for _ in range(4)]
    assert [r.swept.after for r in results] == ["", listed[2], listed[5], ""]
    assert [r.swept.objects for r in results] == [3, 3, 2, 3]
    assert [r.swept.last for r in results] == [False, False, True, False]
    assert [r.cost.s3_requests for r in results] == [1, 1, 1, 1]
    assert all(not r.changes and not r.swept.runs for r in results)
    assert cursor().laps == 1
    assert cursor_after() == listed[2]


@pytest.mark.django_db
def test_a_cursor_per_bucket_prefix(s3, settings):
    settings.CASCADE_S3_PAGE_SIZE = 1
    upload_run(s3, "a")
    sweep_pass()
    settings.CASCADE_S3_PREFIX = "elsewhere/"
    assert sweep_pass().swept.after == ""
    assert SweepCursor.objects.count() == 2


@pytest.mark.django_db
def test_a_key_the_database_cannot_store_as_text_does_not_stop_the_sweep(s3, settings):
    settings.CASCADE_S3_PAGE_SIZE = 2
    upload_run(s3, "a")
    put(s3, "a/traces/odd\x00name", "x")  # S3 keeps a NUL in a key; PostgreSQL's text cannot
    passes.poll_bucket()  # a's listing refused (scan.register_listings): not registered
    put(s3, "b/metadata.json", orjson.dumps(OK))  # after it: the sweep must get there
    results = lap()
    # The page ending on the NUL key: the next one starts after the key before it.
    assert [r.swept.after for r in results] == [
        "",
        f"{PREFIX}a/metadata.json",
        f"{PREFIX}a/traces/stats_ctx_0x1",
    ]
    assert Trace.objects.filter(pk="b").exists()  # no event: found by the sweep
    assert cursor().laps == 1


def test_a_page_of_nothing_but_control_character_keys_goes_on_past_them():
    from ingest.bucket import S3Object
    from ingest.sweep import next_cursor

    page = [S3Object(f"{PREFIX}a/x\x00{n}", 1, '"e"') for n in range(3)]
    after = next_cursor(page)
    assert after == f"{PREFIX}a/x "
    assert all(obj.key < after for obj in page)


# --- What a lost event would have announced ----------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("page_size", [1000, 2])  # every run on one page; every run across pages
def test_what_lost_events_announced_is_found_when_its_page_comes_round(s3, settings, page_size):
    settings.CASCADE_S3_PAGE_SIZE = page_size
    upload_run(s3, "reuploaded", kernels=2)
    upload_run(s3, "shrunk", kernels=3)
    put(s3, "shrunk/timing.csv", "ctx,kernel_id,start_ns,end_ns,duration_ns\n")
    upload_run(s3, "untouched", kernels=4)
    passes.poll_bucket()
    assert set(Trace.objects.values_list("state", flat=True)) == {TraceState.READY}
    # No message for any of these: S3 sent none, or SQS lost it.
    upload_run(s3, "new", kernels=5)  # a run created
    put(s3, "reuploaded/traces/stats_ctx_0x1", stats_file(6))  # a re-upload, metadata.json last
    put(s3, "reuploaded/metadata.json", orjson.dumps({**OK, "model": "v2"}))
    s3.delete_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}shrunk/timing.csv")  # a file removed

    results = lap()
    assert {run_id for r in results for run_id in r.swept.runs} == {"new", "reuploaded", "shrunk"}
    assert all(r.listed == len(r.swept.runs) for r in results), "only the runs that differ are listed"
    traces = {trace.id: trace for trace in Trace.objects.all()}
    assert (traces["new"].state, traces["new"].kernel_count) == (TraceState.READY, 5)
    assert (traces["reuploaded"].kernel_count, traces["reuploaded"].model) == (6, "v2")
    assert f"{PREFIX}shrunk/timing.csv" not in [item["key"] for item in traces["shrunk"].files]
    assert a_full_pass_changes_nothing()
    # The next lap finds nothing.
    assert not any(r.swept.runs or r.changes for r in lap())


@pytest.mark.django_db
def test_a_straddling_run_whose_keys_after_the_cursor_are_all_removed_is_found(s3, settings):
    settings.CASCADE_S3_PAGE_SIZE = 2
    upload_run(s3, "a")
    put(s3, "b/traces/x", "1")
    put(s3, "b/traces/y", "2")  # b: metadata.json, traces/stats_ctx_0x1, traces/x, traces/y
    upload_run(s3, "b")
    passes.poll_bucket()
    sweep_pass()  # a's two keys
    sweep_pass()  # b's metadata.json and stats file
    assert cursor_after() == f"{PREFIX}b/traces/stats_ctx_0x1"  # b's two other keys follow
    s3.delete_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}b/traces/x")
    s3.delete_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}b/traces/y")
    third = sweep_pass()  # nothing of b's is on it: the page is empty
    assert (third.swept.objects, third.swept.runs) == (0, ["b"])
    assert [item["key"] for item in Trace.objects.get(pk="b").files] == [
        f"{PREFIX}b/metadata.json",
        f"{PREFIX}b/traces/stats_ctx_0x1",
    ]
    assert a_full_pass_changes_nothing()


@pytest.mark.django_db
def test_a_simulation_that_lands_without_its_event_goes_to_the_simulation_pass(s3, settings):
    upload_run(s3, "run")
    passes.poll_bucket()
    put(s3, "run/simulations/titanv/sim.log", "GPGPU-Sim: *** simulation thread starting ***\n")
    result = sweep_pass()
    assert (result.swept.runs, result.swept.simulation_runs) == ([], ["run"])
    assert [(c.name, c.old_state) for c in result.simulation_changes] == [("titanv", None)]
    assert Simulation.objects.get(trace_id="run", name="titanv").files[0]["key"].endswith("sim.log")
    # Uploading while its trace is ready: followed every pass, as work in progress (a listing).
    assert sweep_pass().swept.simulation_runs == []


@pytest.mark.django_db
def test_a_deleted_trace_stays_deleted_until_its_files_change(s3, settings):
    upload_run(s3, "gone")
    passes.poll_bucket()
    trace_delete("gone")
    idle = sweep_pass()
    assert (idle.swept.runs, idle.listed, idle.cost.s3_requests) == ([], 0, 1)
    assert not Trace.objects.filter(pk="gone").exists()
    put(s3, "gone/metadata.json", orjson.dumps({**OK, "model": "again"}))
    sweep_pass()
    assert Trace.objects.get(pk="gone").model == "again"
    assert not DeletedTrace.objects.filter(pk="gone").exists()


@pytest.mark.django_db
def test_work_in_progress_is_followed_every_pass_and_a_gone_folder_waits(s3, settings):
    settings.CASCADE_S3_PAGE_SIZE = 1
    put(s3, "a/first", "x")
    put(s3, "b/traces/stats_ctx_0x1", stats_file(2))  # uploading: metadata.json not there yet
    passes.poll_bucket()
    assert Trace.objects.get(pk="b").state == TraceState.UPLOADING
    Trace.objects.filter(pk="b").update(recheck_after=None)
    put(s3, "b/metadata.json", orjson.dumps(OK))
    # The page is a's; b is in progress and due: listed, and ready, whatever the page.
    result = sweep_pass()
    assert result.swept.runs == [] and result.swept.after == ""
    assert Trace.objects.get(pk="b").state == TraceState.READY
    # An uploading run whose folder is removed: looked at again later, not every pass.
    s3.delete_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}a/first")
    Trace.objects.filter(pk="a").update(recheck_after=None)
    sweep_pass()
    assert Trace.objects.get(pk="a").recheck_after is not None


# --- Who sweeps: the reconciling pass with events on, not an operator's pass --------------------------


@pytest.mark.django_db
def test_the_celery_poll_sweeps_with_a_queue_and_lists_the_bucket_without(s3, settings, eager, s3_log):
    from ingest.tasks import poll_bucket_task

    for run_id in ("a", "b", "c"):
        upload_run(s3, run_id)
    passes.poll_bucket()
    settings.CASCADE_SQS_QUEUE_URL = "http://127.0.0.1:1/000000000000/unused"
    before = len(s3_log("GET")), len(s3_log("HEAD"))
    poll_bucket_task.delay().get()
    assert (len(s3_log("GET")), len(s3_log("HEAD"))) == (before[0] + 1, before[1])
    assert "delimiter" not in s3_log("GET")[-1]  # the prefix's keys, not its folders
    assert cursor().laps == 1
    settings.CASCADE_SQS_QUEUE_URL = ""
    poll_bucket_task.delay().get()
    assert "delimiter=/" in s3_log("GET")[-1]  # the run folders
    assert cursor().laps == 1


@pytest.mark.django_db(transaction=True)  # the watch loop closes a connection left in a transaction
def test_watch_with_events_sweeps_and_a_manual_pass_looks_at_everything(s3, settings, queue, monkeypatch):
    upload_run(s3, "a")
    upload_run(s3, "b")
    call_command("ingest_traces", stdout=io.StringIO(), stderr=io.StringIO())  # with the queue set
    assert not SweepCursor.objects.exists()
    drain(queue)
    calls = []

    def events_until(self, deadline, *, until_empty=False):
        calls.append(until_empty)
        if len(calls) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(Command, "events_until", events_until)
    out, err = io.StringIO(), io.StringIO()
    call_command("ingest_traces", "--watch", "--events", stdout=out, stderr=err)
    assert not err.getvalue()
    summaries = [line for line in out.getvalue().splitlines() if line.startswith("pass: ")]
    assert len(summaries) == 2
    assert all("swept 4 objects" in line and "S3: 1 requests" in line for line in summaries), summaries
    assert cursor().laps == 2


@pytest.mark.django_db
def test_events_then_the_sweep_find_nothing_more(s3, settings, queue, sqs):
    upload_run(s3, "a", kernels=3)
    drain(queue)
    assert Trace.objects.get(pk="a").state == TraceState.READY
    assert in_queue(sqs, queue) == 0
    result = sweep_pass()
    assert (result.swept.runs, result.changes, result.cost.s3_requests) == ([], [], 1)
