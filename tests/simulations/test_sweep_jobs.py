"""A sweep job as its worker reports it, the contract's rules:

- `start` gives a new attempt (`run` true), or says why not (`run` false): the job ended, was
  cancelled, runs on another worker whose lease is fresh, or a ready simulation of its
  (trace, config, selection) by the same `accel_sim_build` exists and the sweep has no `rerun`
  (the job is then `ready` with that simulation);
- `progress` and `finish` carry the attempt: another one's is a 409;
- `finish` `ready` checks the simulation is ready (else failed with its error); `failed` is
  queued again (its message published again) until CASCADE_SWEEP_ATTEMPTS, then failed;
- the watcher queues again, and publishes, a running job whose lease lapsed, and publishes
  again a queued job whose message was lost (its queue empty a lease after publishing);
- two workers starting one job at once: one runs it (PostgreSQL's row lock).
"""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from simulations.models import SweepJob
from simulations.sweep_watcher import watch_sweeps
from tests.simulations import sweep_support
from tests.simulations.support import simulate
from tests.simulations.sweep_support import ready_trace, writer
from traces.models import Trace, TraceState

pytestmark = pytest.mark.django_db
broker, rabbit = sweep_support.broker, sweep_support.rabbit  # the fixtures


@pytest.fixture(autouse=True)
def own_broker(broker):
    """Every message these tests publish goes to the tests' own Redis database, never the
    machine's default one (where a real worker could take it)."""
    return broker


WORKER = {
    "host": "farm-1",
    "process": 4242,
    "accel_sim_build": "accelsim-commit-73f9fac_modified_0.0",
    "gpgpusim_build": "gpgpu-sim_git-commit-667834c_modified_0.0",
    "configs": ["SM75_RTX2060", "SM86_RTX3070"],
    "sass_versions": [70, 75, 80, 86],
}


@pytest.fixture
def sweep(broker, django_capture_on_commit_callbacks):
    """A sweep of one Turing trace on SM75_RTX2060, created by alice: (its id, its job's id)."""
    ready_trace("turing", "sm_75")
    with django_capture_on_commit_callbacks(execute=True):
        created = writer("alice").post(
            "/api/sweeps", {"name": "s", "trace_ids": ["turing"], "configs": ["SM75_RTX2060"]}, format="json"
        )
    assert broker.messages("SM75_RTX2060")  # its message, taken off the queue
    body = created.json()
    return body["id"], body["jobs"][0]["id"]


@pytest.fixture
def worker():
    return writer("worker")


def post(client, sweep, step: str, body: dict, capture=None):
    sweep_id, job_id = sweep
    if capture is None:
        return client.post(f"/api/sweeps/{sweep_id}/jobs/{job_id}/{step}", body, format="json")
    with capture(execute=True):
        return client.post(f"/api/sweeps/{sweep_id}/jobs/{job_id}/{step}", body, format="json")


def lapse(job_id: int, seconds: int = 121) -> None:
    """The job's worker last reported `seconds` ago (past the default lease of 120 s)."""
    SweepJob.objects.filter(pk=job_id).update(heartbeat_at=timezone.now() - timedelta(seconds=seconds))


def test_a_start_answers_what_to_run(sweep, worker):
    answer = post(worker, sweep, "start", WORKER).json()
    assert answer == {
        "run": True,
        "attempt": 1,
        "trace_id": "turing",
        "config": "SM75_RTX2060",
        "simulation": f"sweep{sweep[0]}_SM75_RTX2060",
        "select": None,
        "cover": 1.0,
        "sass_version": 75,
    }
    job = worker.get(f"/api/sweeps/{sweep[0]}").json()["jobs"][0]
    assert job["state"] == "running" and job["attempts"] == 1
    assert job["worker"] == {"host": "farm-1", "process": 4242}
    assert job["started_at"] is not None


def test_a_second_start_under_a_fresh_lease_does_not_run(sweep, worker):
    post(worker, sweep, "start", WORKER)
    again = post(writer("other"), sweep, "start", {**WORKER, "host": "farm-2"}).json()
    assert again["run"] is False and again["state"] == "running"
    assert "farm-1" in again["why"]


def test_a_stale_attempt_is_fenced_off(sweep, worker):
    post(worker, sweep, "start", WORKER)
    lapse(sweep[1])
    second = post(worker, sweep, "start", {**WORKER, "host": "farm-2"}).json()
    assert (second["run"], second["attempt"]) == (True, 2)
    stale = post(worker, sweep, "progress", {"attempt": 1, "kernels_finished": 1, "kernels_listed": 3})
    assert stale.status_code == 409
    assert stale.json() == {
        "detail": f"attempt 1 is no longer job {sweep[1]}'s: the job is running attempt 2"
    }
    assert post(worker, sweep, "finish", {"attempt": 1, "state": "failed", "error": "x"}).status_code == 409
    fresh = post(worker, sweep, "progress", {"attempt": 2, "kernels_finished": 2, "kernels_listed": 3})
    assert fresh.json() == {"continue": True}
    job = SweepJob.objects.get(pk=sweep[1])
    assert job.progress == {"kernels_finished": 2, "kernels_listed": 3}
    assert timezone.now() - job.heartbeat_at < timedelta(seconds=60)


def test_finishing_ready_needs_a_ready_simulation(sweep, worker):
    post(worker, sweep, "start", WORKER)
    name = f"sweep{sweep[0]}_SM75_RTX2060"
    simulate(Trace.objects.get(pk="turing"), name, [], state=TraceState.FAILED, error="the log ends early")
    finished = post(worker, sweep, "finish", {"attempt": 1, "state": "ready"}).json()
    assert (finished["state"], finished["error"]) == ("failed", "the log ends early")


def test_finishing_ready(sweep, worker):
    post(worker, sweep, "start", WORKER)
    simulate(Trace.objects.get(pk="turing"), f"sweep{sweep[0]}_SM75_RTX2060", [])
    finished = post(worker, sweep, "finish", {"attempt": 1, "state": "ready"}).json()
    assert (finished["state"], finished["simulation"], finished["error"]) == (
        "ready",
        f"sweep{sweep[0]}_SM75_RTX2060",
        None,
    )
    assert finished["ended_at"] is not None
    assert post(worker, sweep, "start", WORKER).json() == {
        "run": False,
        "state": "ready",
        "why": "the job ended ready.",
    }


def test_a_failed_attempt_is_queued_again_until_the_attempts_run_out(
    sweep,
    worker,
    broker,
    django_capture_on_commit_callbacks,
):
    capture = django_capture_on_commit_callbacks
    for attempt in (1, 2):
        assert post(worker, sweep, "start", WORKER).json()["attempt"] == attempt
        job = post(
            worker, sweep, "finish", {"attempt": attempt, "state": "failed", "error": f"e{attempt}"}, capture
        )
        assert (job.json()["state"], job.json()["error"]) == ("queued", f"e{attempt}")
        assert broker.messages("SM75_RTX2060") == [("cascade.sweep_job", list(sweep))]
    assert post(worker, sweep, "start", WORKER).json()["attempt"] == 3
    job = post(
        worker, sweep, "finish", {"attempt": 3, "state": "failed", "error": "Unable to open file"}, capture
    )
    assert (job.json()["state"], job.json()["error"], job.json()["attempts"]) == (
        "failed",
        "Unable to open file",
        3,
    )
    assert broker.messages("SM75_RTX2060") == []


def test_skipped_by_the_worker(sweep, worker):
    post(worker, sweep, "start", WORKER)
    job = post(
        worker, sweep, "finish", {"attempt": 1, "state": "skipped", "reason": "no SASS 75 here"}
    ).json()
    assert (job["state"], job["reason"]) == ("skipped", "no SASS 75 here")


def test_a_tree_without_the_traces_sass_skips_the_job(sweep, worker):
    answer = post(worker, sweep, "start", {**WORKER, "sass_versions": [80, 86]}).json()
    assert answer["run"] is False and answer["state"] == "skipped"
    assert "75" in answer["why"]


@pytest.mark.parametrize(
    ("existing", "runs"),
    [
        ({"simulator_build": WORKER["accel_sim_build"], "config": "SM75_RTX2060"}, False),
        ({"simulator_build": "accelsim-commit-0000000_modified_0.0", "config": "SM75_RTX2060"}, True),
        ({"simulator_build": WORKER["accel_sim_build"], "config": "SM86_RTX3070"}, True),
        (
            {
                "simulator_build": WORKER["accel_sim_build"],
                "config": "SM75_RTX2060",
                "run": {"selection": {"select": "unique", "cover": 1.0}},
            },
            True,
        ),
        ({"simulator_build": WORKER["accel_sim_build"], "config": "SM75_RTX2060", "state": "failed"}, True),
    ],
)
def test_a_ready_simulation_of_the_same_build_is_not_run_again(sweep, worker, existing, runs):
    simulate(Trace.objects.get(pk="turing"), "earlier", [], **existing)
    answer = post(worker, sweep, "start", WORKER).json()
    assert answer["run"] is runs
    if not runs:
        assert answer["state"] == "ready"
        job = SweepJob.objects.get(pk=sweep[1])
        assert (job.state, job.simulation_name) == ("ready", "earlier")
        assert "earlier" in job.reason


def test_rerun_runs_it_again(broker, worker, django_capture_on_commit_callbacks):
    ready_trace("turing", "sm_75")
    simulate(
        Trace.objects.get(pk="turing"),
        "earlier",
        [],
        simulator_build=WORKER["accel_sim_build"],
        config="SM75_RTX2060",
    )
    with django_capture_on_commit_callbacks(execute=True):
        body = (
            writer("alice")
            .post(
                "/api/sweeps",
                {"name": "s", "trace_ids": ["turing"], "configs": ["SM75_RTX2060"], "rerun": True},
                format="json",
            )
            .json()
        )
    assert post(worker, (body["id"], body["jobs"][0]["id"]), "start", WORKER).json()["run"] is True


def test_the_watcher_queues_again_a_job_whose_lease_lapsed(
    sweep,
    worker,
    broker,
    django_capture_on_commit_callbacks,
):
    post(worker, sweep, "start", WORKER)
    with django_capture_on_commit_callbacks(execute=True):
        assert watch_sweeps().requeued == 0  # its lease is fresh
    lapse(sweep[1])
    with django_capture_on_commit_callbacks(execute=True):
        assert watch_sweeps().requeued == 1
    job = SweepJob.objects.get(pk=sweep[1])
    assert job.state == "queued" and "farm-1" in job.error
    assert broker.messages("SM75_RTX2060") == [("cascade.sweep_job", list(sweep))]
    assert post(worker, sweep, "start", WORKER).json()["attempt"] == 2


def test_a_lease_lapsing_on_the_last_attempt_fails_the_job(settings, sweep, worker):
    settings.CASCADE_SWEEP_ATTEMPTS = 1
    post(worker, sweep, "start", WORKER)
    lapse(sweep[1])
    assert watch_sweeps().failed == 1
    job = SweepJob.objects.get(pk=sweep[1])
    assert job.state == "failed" and "stopped reporting" in job.error


def test_the_watcher_publishes_again_a_lost_message(sweep, broker):
    # The fixture took the message off the queue: as a broker restarted without it.
    SweepJob.objects.filter(pk=sweep[1]).update(queued_at=timezone.now() - timedelta(seconds=60))
    assert watch_sweeps().republished == 0  # published less than a lease ago
    assert broker.messages("SM75_RTX2060") == []
    SweepJob.objects.filter(pk=sweep[1]).update(queued_at=timezone.now() - timedelta(seconds=121))
    assert watch_sweeps().republished == 1
    assert broker.messages("SM75_RTX2060") == [("cascade.sweep_job", list(sweep))]


def test_the_watcher_leaves_a_message_waiting_in_its_queue(sweep, broker):
    from simulations.sweeps import publish

    publish(sweep[0], [(sweep[1], "SM75_RTX2060")])  # its message, waiting for a worker
    SweepJob.objects.filter(pk=sweep[1]).update(queued_at=timezone.now() - timedelta(seconds=121))
    assert watch_sweeps().republished == 0
    assert broker.messages("SM75_RTX2060") == [("cascade.sweep_job", list(sweep))]


def test_the_watcher_costs_one_query_when_nothing_is_overdue(sweep, django_assert_num_queries):
    with django_assert_num_queries(1):
        watch_sweeps()


@pytest.mark.postgres("a start waits on the row lock another start holds")
@pytest.mark.django_db(transaction=True)
def test_two_workers_starting_one_job_at_once_run_it_once(broker):
    ready_trace("turing", "sm_75")
    body = (
        writer("alice")
        .post(
            "/api/sweeps", {"name": "s", "trace_ids": ["turing"], "configs": ["SM75_RTX2060"]}, format="json"
        )
        .json()
    )
    job = (body["id"], body["jobs"][0]["id"])
    second, answers = writer("worker-2"), []

    def start():
        try:
            answers.append(post(second, job, "start", {**WORKER, "host": "farm-2"}).json())
        finally:
            connection.close()

    # The first worker's start, in the middle of its transaction: the row locked, then started.
    with transaction.atomic():
        SweepJob.objects.select_for_update().get(pk=job[1])
        thread = threading.Thread(target=start)
        thread.start()
        waiting_on_the_lock(thread)
        SweepJob.objects.filter(pk=job[1]).update(
            state="running", attempts=1, heartbeat_at=timezone.now(), worker={"host": "farm-1", "process": 1}
        )
    thread.join()
    assert answers == [
        {
            "run": False,
            "state": "running",
            "why": "attempt 1 runs on farm-1 (process 1), whose lease is fresh.",
        }
    ]
    assert SweepJob.objects.get(pk=job[1]).attempts == 1


def waiting_on_the_lock(thread, seconds: float = 30) -> None:
    """Until another session of this database waits on a lock (or the thread ended: no wait)."""
    deadline = time.monotonic() + seconds
    with connection.cursor() as cursor:
        while thread.is_alive() and time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.05)


def test_on_rabbitmq_the_watcher_counts_the_queue_and_publishes_what_was_lost(
    rabbit, worker, django_capture_on_commit_callbacks
):
    ready_trace("turing", "sm_75")
    config = sweep_support.RABBIT_CONFIG
    with django_capture_on_commit_callbacks(execute=True):
        body = (
            writer("alice")
            .post("/api/sweeps", {"name": "s", "trace_ids": ["turing"], "configs": [config]}, format="json")
            .json()
        )
    job = (body["id"], body["jobs"][0]["id"])
    SweepJob.objects.filter(pk=job[1]).update(queued_at=timezone.now() - timedelta(seconds=121))
    assert watch_sweeps().republished == 0  # its message waits in the queue
    assert rabbit.messages(config) == [("cascade.sweep_job", list(job))]
    assert watch_sweeps().republished == 1  # the queue is empty: the message was lost
    assert rabbit.messages(config) == [("cascade.sweep_job", list(job))]
    assert post(worker, job, "start", {**WORKER, "configs": [config]}).json()["run"] is True
    lapse(job[1])
    with django_capture_on_commit_callbacks(execute=True):
        assert watch_sweeps().requeued == 1
    assert rabbit.messages(config) == [("cascade.sweep_job", list(job))]


def test_a_cancelled_sweeps_running_job_finishes_and_is_not_run_again(
    sweep, worker, django_capture_on_commit_callbacks
):
    post(worker, sweep, "start", WORKER)
    writer("alice").delete(f"/api/sweeps/{sweep[0]}")
    again = post(worker, sweep, "start", WORKER).json()  # a duplicate message: its lease is fresh
    assert (again["run"], again["state"]) == (False, "running")
    finished = post(worker, sweep, "finish", {"attempt": 1, "state": "failed", "error": "boom"}).json()
    assert (finished["state"], finished["error"]) == ("cancelled", "boom")


def test_a_cancelled_sweeps_job_whose_lease_lapsed_is_not_started_again(sweep, worker):
    post(worker, sweep, "start", WORKER)
    writer("alice").delete(f"/api/sweeps/{sweep[0]}")
    lapse(sweep[1])
    assert post(worker, sweep, "start", WORKER).json() == {
        "run": False,
        "state": "cancelled",
        "why": "the sweep was cancelled.",
    }


def test_a_job_whose_last_attempt_lapsed_fails_at_the_next_start(settings, sweep, worker):
    settings.CASCADE_SWEEP_ATTEMPTS = 1
    post(worker, sweep, "start", WORKER)
    lapse(sweep[1])
    answer = post(worker, sweep, "start", WORKER).json()
    assert (answer["run"], answer["state"]) == (False, "failed")
    assert "stopped reporting" in SweepJob.objects.get(pk=sweep[1]).error


def test_the_beat_task_is_the_watcher(sweep, worker):
    from simulations.tasks import watch_sweeps_task

    assert watch_sweeps_task.name == "simulations.tasks.watch_sweeps_task"
    post(worker, sweep, "start", WORKER)
    lapse(sweep[1])
    assert watch_sweeps_task().startswith("sweeps: 1 jobs queued again")


def test_a_worker_without_the_config_leaves_the_job_queued(sweep, worker):
    answer = post(worker, sweep, "start", {**WORKER, "configs": ["SM86_RTX3070"]}).json()
    assert (answer["run"], answer["state"]) == (False, "queued")
    assert SweepJob.objects.get(pk=sweep[1]).attempts == 0


def test_an_earlier_attempts_ready_simulation_ends_the_job_even_with_rerun(
    broker, worker, django_capture_on_commit_callbacks
):
    ready_trace("turing", "sm_75")
    with django_capture_on_commit_callbacks(execute=True):
        body = (
            writer("alice")
            .post(
                "/api/sweeps",
                {"name": "s", "trace_ids": ["turing"], "configs": ["SM75_RTX2060"], "rerun": True},
                format="json",
            )
            .json()
        )
    job = (body["id"], body["jobs"][0]["id"])
    post(worker, job, "start", WORKER)
    # The worker uploaded its simulation, then was lost before finishing: the lease lapses.
    simulate(Trace.objects.get(pk="turing"), f"sweep{job[0]}_SM75_RTX2060", [], config="SM75_RTX2060")
    lapse(job[1])
    answer = post(worker, job, "start", WORKER).json()
    assert (answer["run"], answer["state"]) == (False, "ready")
    assert SweepJob.objects.get(pk=job[1]).simulation_name == f"sweep{job[0]}_SM75_RTX2060"
