"""PostgreSQL connections dropped under ingestion: no kernel lost or stored twice.

`manage.py ingest_traces` runs in a child process whose DATABASE_URL is a PostgresFaultProxy
in front of this test's database (S3 is moto, healthy). The proxy resets connections in the
middle of the kernels' COPY, or all of them at once between passes, as a PostgreSQL restart,
a failover or a NAT's idle timeout does. This process reads the results on its own
connection, straight to PostgreSQL, and checks the API after every pass.
"""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from tests.faults.proxies import PostgresFaultProxy
from tests.faults.runs import (
    SEVERAL,
    all_ready,
    api_problems,
    assert_every_kernel_once,
    generate,
    generate_several,
    upload,
)
from tools.generator import RunSpec
from traces.models import Trace, TraceState

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres("the proxy speaks PostgreSQL's wire protocol"),
]

ROOT = Path(__file__).resolve().parents[2]
MAX_PASSES = 5
# Client-to-server bytes of COPY data after which a connection is reset: psycopg sends COPY
# data in 32 KB writes, so the first write of any of these runs' COPY is cut.
DROP_AFTER_BYTES = 16 * 1024
GIVE_UP_AFTER = 45  # seconds a watching poller gets to parse everything; it takes a few
CATCH_UP_AFTER_DROP = 10  # seconds it gets for two small runs, once its connection was dropped


@pytest.fixture
def pg_proxy():
    port = int(connection.settings_dict["PORT"] or 5432)
    with PostgresFaultProxy(("127.0.0.1", port)) as proxy:
        yield proxy


@pytest.fixture
def proxied_env(child_env, pg_proxy):
    """The child's environment: this test's bucket, and its database through the proxy."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@127.0.0.1:{pg_proxy.port}/{db['NAME']}?sslmode=disable"
    return {**child_env, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def runs(s3, tmp_path):
    several = generate_several(tmp_path)
    for run in several:
        upload(s3, run)
    return several


@pytest.fixture
def runs_and_a_big_one(runs, s3, tmp_path):
    """The usual several runs and a bigger one (20,000 launches: a COPY of some 150 writes)."""
    big = generate(tmp_path, "big", RunSpec(kernels=20_000, max_traced=2))
    upload(s3, big)
    return [big, *runs]


def ingest(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "ingest_traces"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def watch(proxied_env, tmp_path):
    """watch(): `ingest_traces --watch --interval 0.5` through the proxy, stopped (by its PID)
    when the test ends; returns the path of its combined output."""
    processes = []
    log = tmp_path / "watch.log"

    def start() -> Path:
        with open(log, "wb") as output:
            command = [sys.executable, "manage.py", "ingest_traces", "--watch", "--interval", "0.5"]
            processes.append(
                subprocess.Popen(command, cwd=ROOT, env=proxied_env, stdout=output, stderr=subprocess.STDOUT)
            )
        return log

    yield start
    for process in processes:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_ready(runs, api, log: Path, seconds: float = GIVE_UP_AFTER) -> list[str]:
    """Wait (at most `seconds`) for every run to be ready; the API's problems meanwhile."""
    problems = []
    deadline = time.monotonic() + seconds
    while not all_ready(runs):
        problems += api_problems(api, runs)
        states = dict(Trace.objects.values_list("id", "state"))
        assert time.monotonic() < deadline, f"not ready: {states}\n{log.read_text()[-3000:]}"
        time.sleep(0.3)
    return problems


def test_connections_dropped_mid_copy(runs_and_a_big_one, pg_proxy, proxied_env, api):
    """Three COPYs cut 16 KB in: each trace's transaction dies with its connection, the trace
    stays `parsing`, and a later pass parses it whole. One pass is one process, as cron runs it."""
    runs = runs_and_a_big_one
    pg_proxy.drop_during_copy(DROP_AFTER_BYTES, times=3)
    results, problems = [], []
    while len(results) < MAX_PASSES and not all_ready(runs):
        results.append(ingest(proxied_env))
        problems += api_problems(api, runs)
    assert pg_proxy.copies_dropped == 3
    assert results[0].returncode == 1, results[0].stderr[-3000:]
    assert "some traces could not be ingested" in results[0].stderr
    assert results[-1].returncode == 0, results[-1].stderr[-3000:]
    assert problems == []
    assert_every_kernel_once(api, runs)


def test_connections_dropped_after_commit(runs, pg_proxy, proxied_env, api):
    """The COMMIT of two traces' kernels reaches PostgreSQL, which commits, but the answer is
    lost with the connection: the pass reports those two as errors although they are ready,
    and the next pass neither stores their kernels again nor drops them."""
    pg_proxy.drop_at_commit(times=2)
    first = ingest(proxied_env)
    assert pg_proxy.commits_dropped == 2
    assert first.returncode == 1, first.stderr[-3000:]
    assert "2 could not be ingested" in first.stdout
    assert all_ready(runs), "the two commits did land"
    problems = api_problems(api, runs)
    second = ingest(proxied_env)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "0 changed" in second.stdout
    assert problems + api_problems(api, runs) == []
    assert_every_kernel_once(api, runs)


def test_a_watching_poller_survives_drops_mid_copy(runs, pg_proxy, watch, api):
    """`ingest_traces --watch` (the embedded mode's poller), one process throughout: Django drops
    a connection whose transaction could not be rolled back, and the next query reconnects."""
    pg_proxy.drop_during_copy(DROP_AFTER_BYTES, times=3)
    log = watch()
    problems = wait_until_ready(runs, api, log)
    assert pg_proxy.copies_dropped == 3
    assert problems == []
    assert_every_kernel_once(api, runs)


def test_a_watching_poller_survives_a_connection_dropped_between_passes(s3, tmp_path, pg_proxy, watch, api):
    first = generate(tmp_path, "before-the-drop", SEVERAL["opt-graphs"])
    upload(s3, first)
    log = watch()
    wait_until_ready([first], api, log)
    assert pg_proxy.drop_all() >= 1
    later = [generate(tmp_path, name, SEVERAL[name]) for name in ("legacy", "crashed")]
    for run in later:
        upload(s3, run)
    problems = wait_until_ready(later, api, log, CATCH_UP_AFTER_DROP)
    assert problems == []
    assert_every_kernel_once(api, [first, *later])
    assert Trace.objects.filter(state=TraceState.READY).count() == 3
