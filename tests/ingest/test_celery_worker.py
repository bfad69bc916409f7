"""Real Celery: `celery -A cascade beat` and `celery -A cascade worker` processes on the Redis of
this machine (.ci/run starts it), the test's database and moto's S3 server. Nobody runs a
command: an upload becomes a ready trace on its own."""

import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from celery import Celery

from tests.helpers import STATS_HEADER, stats_row
from traces.models import Kernel, Trace, TraceState

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REDIS_DB_URL = "redis://127.0.0.1:6379/14"
METADATA = {"status": "ok", "trace_gpu_arch": "sm_86"}
# Only a guard against a hung worker: the test waits on states, not on a clock.
GIVE_UP_AFTER = 120


@pytest.fixture
def celery_env(child_env):
    """Environment for Celery processes: this test's database and bucket, a queue of its own
    on the local Redis (emptied afterwards), and a poll every second."""
    import redis

    client = redis.Redis.from_url(REDIS_DB_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.skip("needs Redis on 127.0.0.1:6379 as the Celery broker (.ci/run starts it)")
    queue = f"cascade-test-{uuid.uuid4().hex[:12]}"
    yield {
        **child_env,
        "CELERY_BROKER_URL": REDIS_DB_URL,
        "CASCADE_CELERY_QUEUE": queue,
        "CASCADE_POLL_SECONDS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    for key in [*client.scan_iter(f"{queue}*"), *client.scan_iter(f"_kombu.binding.{queue}*")]:
        client.delete(key)


@pytest.fixture
def start(celery_env, tmp_path):
    """start("worker" | "beat", name): a Celery process, stopped (by its PID) when the test ends."""
    processes = []

    def start_process(role: str, name: str) -> Path:
        log = tmp_path / f"{name}.log"
        options = {
            # One task at a time in the worker's own process: it stops with its PID.
            "worker": ["--pool=solo", "--without-mingle", "--without-gossip", "-n", f"{name}@%h"],
            "beat": ["--schedule", str(tmp_path / "beat-schedule")],
        }[role]
        command = [sys.executable, "-m", "celery", "-A", "cascade", role, "--loglevel=INFO", *options]
        with open(log, "wb") as output:
            processes.append(
                subprocess.Popen(command, env=celery_env, stdout=output, stderr=subprocess.STDOUT)
            )
        return log

    yield start_process
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for_states(api, trace_ids: list[str], state: str, logs: list[Path]) -> dict:
    """Each trace as the API shows it once all are in `state`."""
    deadline = time.monotonic() + GIVE_UP_AFTER
    while True:
        shown = {trace_id: api.get(f"/api/traces/{trace_id}").json() for trace_id in trace_ids}
        if all(trace.get("state") == state for trace in shown.values()):
            return shown
        if time.monotonic() > deadline:
            output = "\n".join(f"--- {log.name}\n{log.read_text()[-4000:]}" for log in logs)
            pytest.fail(f"not all {state}: { {k: v.get('state') for k, v in shown.items()} }\n{output}")
        time.sleep(0.2)


def parse_runs(logs: list[Path], trace_id: str) -> int:
    """How many times a worker parsed the trace: `ingest.passes` logs each parse that ends ready."""
    line = re.compile(rf"INFO ingest\.passes: {re.escape(trace_id)}: ready, \d+ kernels$", re.MULTILINE)
    return sum(len(line.findall(log.read_text())) for log in logs)


def test_an_upload_becomes_ready_with_no_command(api, upload, vecadd_files, make_trace, start):
    # A trace whose parser was killed mid-way: left in `parsing`, picked up again.
    make_trace("run-interrupted", state=TraceState.PARSING)
    upload("run-interrupted", vecadd_files, METADATA)
    logs = [start("beat", "beat"), start("worker", "worker")]

    upload("run-a", vecadd_files, METADATA)

    traces = wait_for_states(api, ["run-a", "run-interrupted"], TraceState.READY, logs)
    assert traces["run-a"]["kernel_count"] == 1
    assert [kernel["name"] for kernel in traces["run-a"]["kernels"]] == ["_Z6vecAddPdS_S_i"]
    assert traces["run-interrupted"]["kernel_count"] == 1


def test_two_workers_and_a_manual_pass_parse_each_trace_once(api, upload, start, celery_env, tmp_path):
    # Different kernel counts per trace, so that a mix-up shows.
    runs = {f"run-{n}": n for n in range(1, 9)}
    for run_id, kernels in runs.items():
        stats = STATS_HEADER + "".join(stats_row(k) for k in range(1, kernels + 1))
        upload(run_id, {"traces/stats_ctx_0x6165bdd7ec90": stats}, METADATA)
    logs = [start("beat", "beat"), start("worker", "worker-1"), start("worker", "worker-2")]
    # Copies that no poll would queue: as if a second beat ran, or an operator queued them.
    # Not the current app: the shared tasks of later tests must stay bound to Cascade's (eager there).
    sender = Celery(broker=REDIS_DB_URL, set_as_current=False)
    queue = celery_env["CASCADE_CELERY_QUEUE"]
    for run_id in [*runs, *runs]:
        sender.send_task("ingest.tasks.parse_trace_task", args=[run_id], queue=queue)
    # And someone runs the command by hand meanwhile.
    logs.append(tmp_path / "ingest_traces.log")
    with open(logs[-1], "wb") as output:
        command = [sys.executable, "manage.py", "ingest_traces"]
        subprocess.run(command, env=celery_env, stdout=output, stderr=output, check=True)

    traces = wait_for_states(api, list(runs), TraceState.READY, logs)

    assert {run_id: trace["kernel_count"] for run_id, trace in traces.items()} == runs
    for run_id, kernels in runs.items():
        assert Kernel.objects.filter(trace_id=run_id).count() == kernels
        assert parse_runs(logs, run_id) == 1, run_id
    assert Trace.objects.count() == len(runs)
