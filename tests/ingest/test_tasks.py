"""The Celery tasks, run in this process: eagerly, or called directly with a real Redis for the
queue markers. tests/ingest/test_celery_worker.py runs them in real workers."""

import uuid

import pytest
from billiard.exceptions import WorkerLostError
from botocore.exceptions import ClientError, EndpointConnectionError
from celery import signals
from celery.exceptions import SoftTimeLimitExceeded

from cascade import celery_app
from ingest import passes, tasks
from ingest.tasks import MAX_RETRIES, parse_trace_task, poll_bucket_task
from tests.helpers import lock_held_elsewhere
from traces.models import Kernel, Trace, TraceState

pytestmark = pytest.mark.django_db

REDIS_URL = "redis://127.0.0.1:6379/15"
METADATA = {"status": "ok", "trace_gpu_arch": "sm_86"}


@pytest.fixture
def broker_redis(settings):
    """The real Redis on this machine, with a queue name of this test's own."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.skip("needs Redis on 127.0.0.1:6379 (.ci/run starts it)")
    settings.CELERY_BROKER_URL = REDIS_URL
    settings.CELERY_TASK_DEFAULT_QUEUE = f"cascade-test-{uuid.uuid4().hex[:12]}"
    yield client
    for key in client.scan_iter(f"{settings.CELERY_TASK_DEFAULT_QUEUE}*"):
        client.delete(key)


class IngestCalls(list):
    """The trace ids `passes.ingest_trace` was called with."""

    def __init__(self):
        super().__init__()
        self.failures = []

    def fail_with(self, errors) -> None:
        """The next calls raise these, in order, before the real function runs again."""
        self.failures.extend(errors)


@pytest.fixture
def ingest_calls(monkeypatch) -> IngestCalls:
    calls = IngestCalls()
    real = passes.ingest_trace

    def ingest_trace(trace_id, **options):
        calls.append(trace_id)
        if calls.failures:
            raise calls.failures.pop(0)
        return real(trace_id, **options)

    monkeypatch.setattr(passes, "ingest_trace", ingest_trace)
    return calls


def s3_outage() -> EndpointConnectionError:
    return EndpointConnectionError(endpoint_url="http://s3.invalid")


def test_poll_queues_one_parse_per_finished_upload_and_each_becomes_ready(eager, upload, vecadd_files):
    upload("run-a", vecadd_files, METADATA)
    upload("run-b", vecadd_files, METADATA)
    upload("run-still-uploading", vecadd_files)

    assert poll_bucket_task.delay().get() == 2

    states = dict(Trace.objects.values_list("id", "state"))
    assert states == {"run-a": "ready", "run-b": "ready", "run-still-uploading": "uploading"}
    assert Kernel.objects.filter(trace_id="run-a").count() == 1


def test_a_poll_finding_another_poll_running_does_nothing(eager, upload, vecadd_files):
    upload("run-a", vecadd_files, METADATA)
    with lock_held_elsewhere(tasks.POLL_LOCK):
        assert poll_bucket_task.delay().get() == 0
        assert not Trace.objects.exists()
    assert poll_bucket_task.delay().get() == 1
    assert Trace.objects.get(pk="run-a").state == TraceState.READY


def test_s3_errors_are_retried(eager, upload, vecadd_files, ingest_calls):
    upload("run-a", vecadd_files, METADATA)
    ingest_calls.fail_with([s3_outage(), ClientError({"Error": {"Code": "SlowDown"}}, "GetObject")])

    poll_bucket_task.delay()

    assert ingest_calls == ["run-a"] * 3
    assert Trace.objects.get(pk="run-a").state == TraceState.READY


def test_s3_errors_past_the_retries_fail_the_trace(eager, make_trace, ingest_calls):
    make_trace("run-a", state=TraceState.PARSING)
    ingest_calls.fail_with([s3_outage()] * (MAX_RETRIES + 1))

    parse_trace_task.delay("run-a")

    assert ingest_calls == ["run-a"] * (MAX_RETRIES + 1)
    trace = Trace.objects.get(pk="run-a")
    assert trace.state == TraceState.FAILED
    assert trace.error.startswith(f"S3 unreachable after {MAX_RETRIES + 1} tries: Could not connect")


def test_a_trace_at_fault_fails_at_once_without_retries(eager, upload, vecadd_files, ingest_calls):
    upload("run-a", vecadd_files, b'{"status": "ok",')

    poll_bucket_task.delay()

    assert ingest_calls == ["run-a"]
    trace = Trace.objects.get(pk="run-a")
    assert trace.state == TraceState.FAILED
    assert trace.error.startswith("metadata.json is not valid JSON")


def test_a_parse_past_its_time_limit_fails_the_trace(eager, make_trace, ingest_calls, settings):
    make_trace("run-a", state=TraceState.PARSING)
    ingest_calls.fail_with([SoftTimeLimitExceeded()])

    parse_trace_task.delay("run-a")

    assert ingest_calls == ["run-a"]
    trace = Trace.objects.get(pk="run-a")
    assert (trace.state, trace.error) == (
        TraceState.FAILED,
        f"parsing took longer than CASCADE_PARSE_SECONDS ({settings.CASCADE_PARSE_SECONDS} s)",
    )


def test_a_trace_whose_parse_keeps_killing_workers_ends_failed(make_trace):
    make_trace("run-a", state=TraceState.PARSING)
    # What the worker sends once the last retry's process was killed too.
    signals.task_failure.send(
        sender=parse_trace_task,
        task_id=str(uuid.uuid4()),
        exception=WorkerLostError("Worker exited prematurely: signal 9 (SIGKILL)"),
        args=["run-a"],
        kwargs={},
    )

    trace = Trace.objects.get(pk="run-a")
    assert trace.state == TraceState.FAILED
    assert trace.error.startswith(f"parsing was cut short {MAX_RETRIES + 1} times")


def test_killed_workers_leave_the_message_to_another_and_count_as_tries():
    assert parse_trace_task.acks_late
    assert celery_app.conf.task_reject_on_worker_lost
    assert parse_trace_task.retry_on_worker_lost
    assert parse_trace_task.max_retries == MAX_RETRIES
    assert celery_app.conf.worker_prefetch_multiplier == 1


def test_tasks_end_before_the_broker_would_hand_them_out_again():
    visibility = celery_app.conf.broker_transport_options["visibility_timeout"]
    assert celery_app.conf.task_soft_time_limit < celery_app.conf.task_time_limit < visibility
    assert poll_bucket_task.time_limit < visibility


def test_beat_polls_every_poll_interval_and_drops_polls_it_could_not_deliver_in_time(settings):
    assert celery_app.conf.beat_schedule["poll-bucket"] == {
        "task": "ingest.tasks.poll_bucket_task",
        "schedule": settings.CASCADE_POLL_SECONDS,
        "options": {"expires": settings.CASCADE_POLL_SECONDS},
    }


def test_a_queued_trace_is_not_queued_again_by_later_polls(broker_redis, upload, vecadd_files, monkeypatch):
    queued = []
    monkeypatch.setattr(parse_trace_task, "delay", lambda trace_id, reparse=False: queued.append(trace_id))
    upload("run-a", vecadd_files, METADATA)
    upload("run-b", vecadd_files, METADATA)

    assert poll_bucket_task() == 2
    assert poll_bucket_task() == 0
    assert sorted(queued) == ["run-a", "run-b"]

    parse_trace_task("run-a")
    assert poll_bucket_task() == 0
    assert tasks.mark_queued("run-a"), "its parse has ended: the trace may be queued again"


def test_a_given_up_parse_lets_the_trace_be_queued_again(broker_redis, make_trace, ingest_calls, monkeypatch):
    monkeypatch.setattr(parse_trace_task, "delay", lambda trace_id, reparse=False: None)
    make_trace("run-a", state=TraceState.PARSING)
    assert tasks.mark_queued("run-a")
    ingest_calls.fail_with([SoftTimeLimitExceeded()])

    parse_trace_task.apply(["run-a"])

    assert tasks.mark_queued("run-a")


def test_a_trace_whose_message_the_broker_refused_is_queued_by_the_next_poll(
    broker_redis, upload, vecadd_files, monkeypatch
):
    def refuse(trace_id, reparse=False):
        raise ConnectionError("broker away")

    monkeypatch.setattr(parse_trace_task, "delay", refuse)
    upload("run-a", vecadd_files, METADATA)
    with pytest.raises(ConnectionError):
        poll_bucket_task()

    queued = []
    monkeypatch.setattr(parse_trace_task, "delay", lambda trace_id, reparse=False: queued.append(trace_id))
    assert poll_bucket_task() == 1
    assert queued == ["run-a"]


def test_the_scheduled_poll_reads_a_ready_traces_simulation_on_the_next_poll(eager, s3, upload):
    """Celery's way: the poll queues the trace's parse (run inline here); its simulation is
    read by the poll, once the trace is ready (issue 20)."""
    from simulations.models import Simulation
    from tests.ingest.support import hal_trace, real_log, upload_simulation

    log = real_log("halUW__benchmark_1_stream_clean.log")
    upload("hal", hal_trace(log), METADATA)
    upload_simulation(s3, "hal", "titanv", log)
    poll_bucket_task()
    poll_bucket_task()
    assert Trace.objects.get(pk="hal").state == TraceState.READY
    assert Simulation.objects.get(trace_id="hal", name="titanv").state == TraceState.READY
