"""S3 events through SQS (ingest.events): moto's server sends the bucket's notifications to a queue
on the same endpoint, as AWS does, and a run is ingested from its events alone.

The property behind every test: after the events, a poll of the whole bucket finds nothing to
change. The events only say which runs to look at; the decision is the poll's.
"""

import io
import json
import logging
import time

import pytest
from botocore.exceptions import EndpointConnectionError
from django.core.management import CommandError, call_command

from ingest import events, passes
from ingest.events import MalformedEvent, runs_named
from tests.helpers import PREFIX, TEST_BUCKET, lock_held_elsewhere
from tests.ingest.support import drain, hal_trace, in_queue, real_log, simulation, upload_simulation
from traces.models import DeletedTrace, Kernel, Trace, TraceState
from traces.services import trace_delete

OK = {"status": "ok", "trace_gpu_arch": "sm_86"}


def take_all(sqs, url) -> list[str]:
    """Every message's body, removed from the queue: the events S3 sent, to replay."""
    bodies = []
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        bodies += [message["Body"] for message in messages]
        sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)],
        )
    return bodies


def snapshot(trace_id: str) -> tuple:
    trace = Trace.objects.get(pk=trace_id)
    kernels = list(
        Kernel.objects.filter(trace_id=trace_id)
        .order_by("ctx", "kernel_id")
        .values_list("ctx", "kernel_id", "name")
    )
    return trace.state, trace.kernel_count, trace.files, trace.parsed_fingerprint, trace.updated_at, kernels


def a_poll_changes_nothing() -> bool:
    result = passes.poll_bucket()
    return not result.changes and not result.errors and not result.simulation_changes


def s3_event(key: str, name: str = "ObjectCreated:Put", bucket: str = TEST_BUCKET) -> str:
    """A record as S3 writes it (AWS's documented shape), key already encoded."""
    return json.dumps(
        {
            "Records": [
                {
                    "eventVersion": "2.1",
                    "eventSource": "aws:s3",
                    "eventName": name,
                    "s3": {"bucket": {"name": bucket}, "object": {"key": key, "size": 1}},
                }
            ]
        }
    )


# --- The records, read (no queue) ---------------------------------------------------------------


def test_a_record_names_the_run_of_its_url_decoded_key():
    # AWS encodes like application/x-www-form-urlencoded: a space as "+", a "+" as "%2B".
    body = s3_event("accelsim-traces/run+a%2Bb+%C3%A9/traces/stats_ctx_0x1")
    assert runs_named(body, prefix=PREFIX, bucket_name=TEST_BUCKET) == {"run a+b é"}


@pytest.mark.parametrize(
    "name", ["ObjectCreated:Put", "ObjectCreated:CompleteMultipartUpload", "ObjectRemoved:Delete"]
)
def test_created_and_removed_records_name_their_run(name):
    assert runs_named(
        s3_event("accelsim-traces/r1/metadata.json", name), prefix=PREFIX, bucket_name=TEST_BUCKET
    ) == {"r1"}


def test_records_that_change_no_run_name_none():
    for body in (
        json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": TEST_BUCKET}),
        s3_event("accelsim-traces/r1/metadata.json", "ObjectRestore:Completed"),
        s3_event("accelsim-traces/README.md"),  # beside the runs, as a poll's listing ignores it
    ):
        assert runs_named(body, prefix=PREFIX, bucket_name=TEST_BUCKET) == set()


def test_records_through_sns_are_unwrapped():
    body = json.dumps({"Type": "Notification", "Message": s3_event("accelsim-traces/r1/timing.csv")})
    assert runs_named(body, prefix=PREFIX, bucket_name=TEST_BUCKET) == {"r1"}


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[]",
        "{}",
        json.dumps({"Records": []}),
        json.dumps({"Records": [{"eventName": "ObjectCreated:Put"}]}),
        s3_event("other-prefix/r1/metadata.json"),
        s3_event("accelsim-traces/r1/metadata.json", bucket="someone-elses"),
    ],
)
def test_anything_else_is_malformed(body):
    with pytest.raises(MalformedEvent):
        runs_named(body, prefix=PREFIX, bucket_name=TEST_BUCKET)


# --- Against moto's S3 and SQS -----------------------------------------------------------------


@pytest.mark.django_db
def test_a_run_becomes_ready_from_its_events_alone(queue, upload, vecadd_files, s3_log, sqs):
    upload("vecadd", vecadd_files, metadata=OK)
    out = io.StringIO()
    call_command("ingest_traces", "--events", stdout=out, stderr=io.StringIO())
    trace = Trace.objects.get(pk="vecadd")
    assert trace.state == TraceState.READY, trace.error
    assert trace.kernel_count == 1
    assert "vecadd: new -> ready, 1 kernels" in out.getvalue()
    # No poll: the bucket's run folders were never listed, only this run's.
    assert not [path for path in s3_log("GET") if "delimiter=" in path]
    assert in_queue(sqs, queue) == 0
    assert a_poll_changes_nothing()


@pytest.mark.django_db
def test_one_ingest_per_run_in_a_batch(queue, upload, vecadd_files, monkeypatch):
    upload("vecadd", vecadd_files, metadata=OK)
    decided = []
    real = passes.poll_bucket
    monkeypatch.setattr(passes, "poll_bucket", lambda **kw: decided.append(kw["trace_id"]) or real(**kw))
    batch = events.consume_batch(queue, wait_seconds=0)
    assert batch.received == 7  # the test event and the run's six objects
    assert decided == ["vecadd"]
    assert batch.deleted == 7


@pytest.mark.django_db
def test_the_test_event_is_deleted_and_changes_nothing(queue, sqs):
    batch = events.consume_batch(queue, wait_seconds=0)
    assert (batch.received, batch.runs, batch.deleted, batch.malformed) == (1, [], 1, 0)
    assert in_queue(sqs, queue) == 0
    assert not Trace.objects.exists()


@pytest.mark.django_db
def test_a_malformed_message_is_logged_and_deleted(queue, sqs, caplog):
    take_all(sqs, queue)
    for body in (
        "not json",
        "{}",
        s3_event("elsewhere/r1/metadata.json"),
        s3_event(f"{PREFIX}r1/x", bucket="other"),
    ):
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    with caplog.at_level(logging.WARNING, logger="ingest.events"):
        batches = drain(queue)
    assert sum(b.malformed for b in batches) == 4
    assert sum(b.deleted for b in batches) == 4
    assert in_queue(sqs, queue) == 0
    assert len([r for r in caplog.records if "is not an S3 event of ours" in r.getMessage()]) == 4
    assert not Trace.objects.exists()


@pytest.mark.django_db
def test_duplicated_reordered_and_replayed_events_lose_and_duplicate_nothing(
    queue, sqs, upload, vecadd_files
):
    upload("vecadd", vecadd_files, metadata=OK)
    upload("other", vecadd_files, metadata=OK)
    sent = take_all(sqs, queue)
    assert len(sent) == 13  # the test event, six objects a run
    # At least once and unordered: each event twice, the last first.
    for body in reversed(sent + sent):
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    drain(queue)
    ready = {run: snapshot(run) for run in ("vecadd", "other")}
    for run, (state, count, _, _, _, kernels) in ready.items():
        assert (state, count, len(kernels)) == (TraceState.READY, 1, 1), run
    assert a_poll_changes_nothing()
    # Replayed long after: nothing changes, not even updated_at.
    for body in sent:
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    assert sum(len(b.changes) for b in drain(queue)) == 0
    assert {run: snapshot(run) for run in ready} == ready
    assert in_queue(sqs, queue) == 0


@pytest.mark.django_db
def test_a_duplicated_reordered_or_malformed_event_loses_and_duplicates_nothing(
    queue, sqs, upload, vecadd_files
):
    """What events promise (docs/decisions/0003), all three at once in one queue."""
    upload("vecadd", vecadd_files, metadata=OK)
    upload("other", vecadd_files, metadata=OK)
    sent = take_all(sqs, queue)
    malformed = [
        "not json",
        json.dumps({"Records": [{"eventName": "ObjectCreated:Put"}]}),
        s3_event("elsewhere/vecadd/metadata.json"),
        s3_event(f"{PREFIX}vecadd/metadata.json", bucket="someone-elses"),
    ]
    # Each event twice (duplicated), the last first (reordered), a malformed one every few.
    mixed = list(reversed(sent + sent))
    for index, body in enumerate(malformed):
        mixed.insert(index * 7, body)
    for body in mixed:
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    batches = drain(queue)
    assert sum(b.received for b in batches) == len(mixed)
    assert sum(b.malformed for b in batches) == len(malformed)
    # Nothing duplicated: two traces, each with its one launch once.
    assert sorted(Trace.objects.values_list("id", flat=True)) == ["other", "vecadd"]
    for run in ("vecadd", "other"):
        state, count, _, _, _, kernels = snapshot(run)
        assert (state, count, len(kernels)) == (TraceState.READY, 1, 1), run
    # Nothing lost: the whole bucket's poll finds nothing left to do; no message left behind.
    assert a_poll_changes_nothing()
    assert in_queue(sqs, queue) == 0


@pytest.mark.django_db
def test_a_replayed_event_does_not_bring_back_a_deleted_trace(queue, sqs, upload, vecadd_files):
    upload("vecadd", vecadd_files, metadata=OK)
    sent = take_all(sqs, queue)
    for body in sent:
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    drain(queue)
    trace_delete("vecadd")
    for body in sent:
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    drain(queue)
    assert not Trace.objects.filter(pk="vecadd").exists()
    assert DeletedTrace.objects.filter(pk="vecadd").exists()
    assert in_queue(sqs, queue) == 0


@pytest.mark.django_db
def test_an_event_in_the_middle_of_an_upload_registers_and_metadata_json_makes_it_ready(
    queue, upload, vecadd_files
):
    upload("vecadd", vecadd_files)  # no metadata.json yet
    drain(queue)
    assert Trace.objects.get(pk="vecadd").state == TraceState.UPLOADING
    upload("vecadd", {}, metadata=OK)
    drain(queue)
    assert Trace.objects.get(pk="vecadd").state == TraceState.READY
    assert a_poll_changes_nothing()


@pytest.mark.django_db
def test_a_message_stays_when_its_ingest_fails_and_comes_back(queue, sqs, upload, vecadd_files, monkeypatch):
    upload("vecadd", vecadd_files, metadata=OK)
    take_all(sqs, queue)  # one message for the run is enough
    sqs.send_message(QueueUrl=queue, MessageBody=s3_event(f"{PREFIX}vecadd/metadata.json"))

    def unreachable(*args, **kwargs):
        raise EndpointConnectionError(endpoint_url="http://s3.invalid")

    with monkeypatch.context() as patch:
        patch.setattr(passes, "decide", unreachable)
        batch = events.consume_batch(queue, wait_seconds=0)
    assert (batch.received, batch.deleted, batch.kept) == (1, 0, 1)
    assert batch.errors
    assert Trace.objects.get(pk="vecadd").state != TraceState.READY
    # The whole pass failing (the listing) keeps it too.
    time.sleep(1.2)  # the visibility timeout: SQS hands it out again
    with monkeypatch.context() as patch:
        patch.setattr(passes, "scan_bucket", unreachable)
        batch = events.consume_batch(queue, wait_seconds=0)
    assert (batch.received, batch.deleted, batch.kept) == (1, 0, 1)
    time.sleep(1.2)
    batch = events.consume_batch(queue, wait_seconds=1)
    assert (batch.received, batch.deleted) == (1, 1)
    assert Trace.objects.get(pk="vecadd").state == TraceState.READY
    assert in_queue(sqs, queue) == 0


@pytest.mark.django_db(transaction=True)
def test_a_run_another_pass_holds_keeps_its_message(queue, sqs, upload, vecadd_files):
    upload("vecadd", vecadd_files, metadata=OK)
    take_all(sqs, queue)
    sqs.send_message(QueueUrl=queue, MessageBody=s3_event(f"{PREFIX}vecadd/metadata.json"))
    with lock_held_elsewhere("vecadd"):
        batch = events.consume_batch(queue, wait_seconds=0)
    assert (batch.deleted, batch.kept) == (0, 1)
    time.sleep(1.2)
    assert events.consume_batch(queue, wait_seconds=1).deleted == 1
    assert Trace.objects.get(pk="vecadd").state == TraceState.READY


@pytest.mark.django_db
def test_object_removed_goes_through_the_polls_decision(queue, s3, upload, vecadd_files):
    upload("vecadd", vecadd_files, metadata=OK)
    drain(queue)
    s3.delete_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}vecadd/metadata.json")
    batches = drain(queue)
    assert [b.runs for b in batches] == [["vecadd"]]
    trace = Trace.objects.get(pk="vecadd")
    assert f"{PREFIX}vecadd/metadata.json" not in [item["key"] for item in trace.files]
    assert a_poll_changes_nothing()
    # Every object gone: the run's folder no longer lists, as a poll would see it.
    for key in [item["key"] for item in trace.files]:
        s3.delete_object(Bucket=TEST_BUCKET, Key=key)
    drain(queue)
    assert a_poll_changes_nothing()


@pytest.mark.django_db
@pytest.mark.parametrize("run_id", ["run with spaces", "a+b=c", "résumé-é-🚀", "100%25 done"])
def test_keys_with_spaces_plus_and_unicode_map_to_their_run(queue, upload, vecadd_files, run_id):
    upload(run_id, vecadd_files, metadata=OK)
    batches = drain(queue)
    assert {run for b in batches for run in b.runs} == {run_id}
    assert Trace.objects.get(pk=run_id).state == TraceState.READY
    assert list(Trace.objects.values_list("id", flat=True)) == [run_id]


@pytest.mark.django_db
def test_an_event_under_simulations_reads_the_runs_simulation(queue, s3, upload):
    log = real_log("halUW__benchmark_1_stream_clean.log")
    upload("hal", hal_trace(log), metadata={"status": "ok"})
    drain(queue)
    assert Trace.objects.get(pk="hal").state == TraceState.READY
    upload_simulation(s3, "hal", "titanv", log)
    batches = drain(queue)
    assert simulation("hal", "titanv").state == TraceState.READY
    assert any(b.simulation_changes for b in batches)


# --- The command and the Celery task ------------------------------------------------------------


@pytest.mark.django_db
def test_events_need_a_queue(s3, settings):
    settings.CASCADE_SQS_QUEUE_URL = ""
    with pytest.raises(CommandError, match="CASCADE_SQS_QUEUE_URL"):
        call_command("ingest_traces", "--events")


@pytest.mark.django_db
def test_the_celery_task_consumes_a_batch(queue, upload, vecadd_files, eager, sqs):
    from ingest.tasks import EVENTS_LOCK, s3_events_task

    upload("vecadd", vecadd_files, metadata=OK)
    result = s3_events_task.delay().get()
    assert result.deleted == 7
    assert Trace.objects.get(pk="vecadd").state == TraceState.READY
    assert in_queue(sqs, queue) == 0
    # One batch at a time: another worker's batch under way, this one returns at once.
    upload("late", vecadd_files, metadata=OK)
    with lock_held_elsewhere(EVENTS_LOCK):
        assert s3_events_task.delay().get() is None
    assert in_queue(sqs, queue) == 6


def test_beat_polls_less_often_and_sends_events_batches_with_a_queue():
    import subprocess
    import sys

    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='cascade.settings'; django.setup();"
        "from django.conf import settings as s; import json;"
        "print(json.dumps({k: [v['task'], v['schedule']] for k, v in s.CELERY_BEAT_SCHEDULE.items()}))"
    )
    import os

    def schedule(**env):
        environ = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_SQS")}
        done = subprocess.run(
            [sys.executable, "-c", code], env={**environ, **env}, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    watch = {"sweep-watch": ["simulations.tasks.watch_sweeps_task", 30]}  # the sweeps' lease
    assert schedule(CASCADE_POLL_SECONDS="30") == {
        "poll-bucket": ["ingest.tasks.poll_bucket_task", 30],
        **watch,
    }
    assert schedule(CASCADE_POLL_SECONDS="30", CASCADE_SQS_QUEUE_URL="http://sqs.invalid/1/q") == {
        "poll-bucket": ["ingest.tasks.poll_bucket_task", 600],
        **watch,
        "s3-events": ["ingest.tasks.s3_events_task", 5],
    }
