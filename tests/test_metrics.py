"""`GET /metrics` in Prometheus' text format, for whom it is open to, and what it counts."""

import glob
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client
from prometheus_client import multiprocess
from prometheus_client.parser import text_string_to_metric_families

from cascade import metrics
from ingest import bucket
from tests.gunicorn_process import ROOT, clean_environ, gunicorn
from tests.helpers import PREFIX, TEST_BUCKET, VECADD_CTX, shared_fixture
from traces.models import TraceState


@pytest.fixture(autouse=True, scope="module")
def forget_finished_test_runs():
    """Every test process leaves its files in the checkout's directory, which no server start
    cleans: the ones of runs that have ended go, so scrapes stay quick."""
    metrics.forget_dead_processes(settings.CASCADE_METRICS_DIR)


def parse(text: str) -> dict[tuple, float]:
    """{(sample name, ((label, value), ...)): value} of an exposition."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(client=None, **extra) -> dict[tuple, float]:
    response = (client or Client()).get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return parse(response.content.decode())


def counts() -> dict[tuple, float]:
    """This process's counters and histograms, as /metrics would add them to the others'.

    Only this process's files: the suite's other processes (pytest-xdist) share the directory
    and count at the same time.
    """
    files = glob.glob(str(settings.CASCADE_METRICS_DIR / f"*_{os.getpid()}.db"))
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in multiprocess.MultiProcessCollector.merge(files, accumulate=True)
        for sample in family.samples
    }


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


class Counted:
    """What a `with` block counts: `delta(name, **labels)` once it is done; `after`, the counts then."""

    def __enter__(self):
        self.before = counts()
        return self

    def __exit__(self, *exc):
        self.after = counts()

    def __call__(self, name: str, **labels) -> float:
        return value(self.after, name, **labels) - value(self.before, name, **labels)


# --- Who may scrape ---------------------------------------------------------------------------


def test_open_to_the_local_host_without_a_token(db):
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="::1").get("/metrics").status_code == 200


@pytest.mark.parametrize(
    "meta",
    [
        {"REMOTE_ADDR": "203.0.113.9"},
        # Through a proxy on the same host: the proxy's peer is what counts.
        {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.9"},
        {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "127.0.0.1, 203.0.113.9"},
        {"REMOTE_ADDR": "203.0.113.9", "HTTP_AUTHORIZATION": "Bearer guessed"},
    ],
    ids=["elsewhere", "forwarded", "forwarded-spoofed", "no-token-configured"],
)
def test_closed_to_everyone_else(db, meta):
    response = Client(**meta).get("/metrics")
    assert response.status_code == 403
    assert response["Content-Type"] == "application/json"
    assert set(response.json()) == {"detail"}


def test_open_to_allowed_networks(db, settings):
    settings.CASCADE_METRICS_ALLOWED = ["10.0.0.0/8", "2001:db8::/32"]
    assert Client(REMOTE_ADDR="10.20.30.40").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="2001:db8::7").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 403


def test_open_to_the_metrics_token(db, settings):
    settings.CASCADE_METRICS_TOKEN = "s3cret-scrape-token"
    remote = {"REMOTE_ADDR": "203.0.113.9"}
    assert (
        Client(**remote, HTTP_AUTHORIZATION="Bearer s3cret-scrape-token").get("/metrics").status_code == 200
    )
    assert (
        Client(**remote, HTTP_AUTHORIZATION="Bearer s3cret-scrape-tokem").get("/metrics").status_code == 403
    )


# --- What it counts ---------------------------------------------------------------------------


def test_traces_by_state_and_launches_stored_come_from_the_database(make_trace, django_assert_num_queries):
    make_trace("a", state=TraceState.READY, kernel_count=700)
    make_trace("b", state=TraceState.READY, kernel_count=12)
    make_trace("c", state=TraceState.FAILED)
    with django_assert_num_queries(1):
        samples = scrape()
    assert value(samples, "cascade_traces", state="ready") == 2
    assert value(samples, "cascade_traces", state="failed") == 1
    assert value(samples, "cascade_traces", state="parsing") == 0
    assert value(samples, "cascade_launches_stored") == 712


def test_requests_by_route_and_status_with_their_latency(api):
    with Counted() as delta:
        for _ in range(3):
            assert api.get("/api/traces/nope-1").status_code == 404
        assert api.get("/api/traces/nope-2/summary").status_code == 404

    # The route's name, not the path: both ids are one series.
    assert delta("cascade_http_requests_total", route="trace-detail", method="GET", status="404") == 3
    assert delta("cascade_http_requests_total", route="trace-summary", method="GET", status="404") == 1
    assert delta("cascade_http_request_duration_seconds_count", route="trace-detail") == 3
    assert delta("cascade_http_request_duration_seconds_bucket", route="trace-detail", le="+Inf") == 3
    assert not any("nope" in str(key) for key in delta.after)
    # /metrics shows them, summed with the other processes' (pytest-xdist's workers count too).
    assert (
        value(scrape(), "cascade_http_requests_total", route="trace-detail", method="GET", status="404") >= 3
    )


def test_s3_requests_and_errors(s3, db):
    with Counted() as delta:
        assert bucket.head_etag(PREFIX + "absent/metadata.json") is None
        assert list(bucket.list_run_ids()) == []

    assert delta("cascade_s3_requests_total", operation="HeadObject") == 1
    assert delta("cascade_s3_errors_total", operation="HeadObject", error="404") == 1
    assert delta("cascade_s3_requests_total", operation="ListObjectsV2") == 1
    assert delta("cascade_s3_errors_total", operation="ListObjectsV2", error="404") == 0


def test_parse_failures_by_kind(db):
    with Counted() as delta:
        metrics.count_parse_failure("input")
        metrics.count_parse_failure("input")
        metrics.count_parse_failure("internal")
    assert delta("cascade_parse_failures_total", kind="input") == 2
    assert delta("cascade_parse_failures_total", kind="internal") == 1


def test_passes_of_ingest_traces_are_counted_and_timed(s3, db):
    with Counted() as delta:
        call_command("ingest_traces", stdout=open("/dev/null", "w"))
    assert delta("cascade_passes_total", entry="ingest_traces", outcome="ok") == 1
    assert delta("cascade_pass_duration_seconds_count", entry="ingest_traces") == 1


# --- Several gunicorn workers and a poller on one host ---------------------------------------


def upload_vecadd(upload, run_id: str) -> None:
    """The vecadd run as the profiler uploads it: its files, then metadata.json."""
    folder = shared_fixture("accelsim-vecadd-v5")
    files = {
        f"traces/stats_ctx_{VECADD_CTX}": (folder / f"stats_ctx_{VECADD_CTX}").read_bytes(),
        f"traces/kernelslist_ctx_{VECADD_CTX}": (folder / f"kernelslist_ctx_{VECADD_CTX}").read_bytes(),
        "traces/kernelslist.g": (folder / "kernelslist.g").read_bytes(),
    }
    upload(run_id, files, metadata={"status": "ok"})


@pytest.mark.slow
def test_two_workers_and_a_poller_count_together(transactional_db, child_env, upload, tmp_path):
    upload_vecadd(upload, "vecadd")
    env = {
        **clean_environ(),
        **{k: v for k, v in child_env.items() if k.startswith(("DATABASE_URL", "CASCADE_S3"))},
    }
    env |= {
        "CASCADE_VAR_DIR": str(tmp_path),
        "CASCADE_S3_BUCKET": TEST_BUCKET,
        "CASCADE_PARSE_PROCESSES": "1",
        **{k: child_env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")},
    }
    poller = subprocess.Popen(
        [sys.executable, "manage.py", "ingest_traces", "--watch", "--interval", "0.5"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with gunicorn(env, tmp_path, workers=2) as server:
            assert server.get("/healthz")[::2] == (200, b'{"status": "ok"}')
            assert server.get("/readyz")[::2] == (200, b'{"status": "ok"}')
            # The poller makes the trace ready on its own, and its pass ends a little later (its
            # counters are written then, after the run's simulations are looked at).
            deadline = time.monotonic() + 60
            while True:
                samples = parse(server.get("/metrics")[2].decode())
                done = value(samples, "cascade_passes_total", entry="ingest_traces", outcome="ok") > 0
                if (
                    value(samples, "cascade_traces", state="ready") == 1 and done
                ) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert value(samples, "cascade_traces", state="ready") == 1
            assert value(samples, "cascade_launches_stored") > 0
            assert value(samples, "cascade_passes_total", entry="ingest_traces", outcome="ok") > 0
            assert value(samples, "cascade_pass_duration_seconds_count", entry="ingest_traces") > 0
            assert value(samples, "cascade_s3_requests_total", operation="ListObjectsV2") > 0

            # N requests at once, which both workers share: the scrape sums both.
            healthz = {"route": "healthz", "method": "GET", "status": "200"}
            before = value(
                parse(server.get("/metrics")[2].decode()), "cascade_http_requests_total", **healthz
            )
            n = 60
            threads = [threading.Thread(target=server.get, args=("/healthz",)) for _ in range(n)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            counted = value(
                parse(server.get("/metrics")[2].decode()), "cascade_http_requests_total", **healthz
            )
            assert counted - before == n
            workers = server.worker_pids()
            assert len(workers) == 2
            counted_by = {int(p.stem.rpartition("_")[2]) for p in (tmp_path / "metrics").glob("counter_*.db")}
            assert set(workers) <= counted_by, "both workers answered some of the requests"

            # Elsewhere than this host: refused, in JSON.
            status, _, body = server.get("/metrics", {"X-Forwarded-For": "198.51.100.4"})
            assert status == 403 and "detail" in json.loads(body)
    finally:
        poller.terminate()
        poller.wait(30)


def test_the_server_s_start_forgets_processes_that_are_gone(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / f"counter_{gone.pid}.db").write_bytes(b"old")
    (tmp_path / f"histogram_{gone.pid}.db").write_bytes(b"old")
    running = tmp_path / f"counter_{os.getpid()}.db"  # a poller still counting, say
    running.write_bytes(b"live")
    metrics.forget_dead_processes(tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == [running.name]


def test_a_process_that_would_count_alone_refuses_to_start(tmp_path):
    """prometheus_client picks files or memory when imported: imported before cascade.metrics
    (which sets the directory), every process would count for itself and a scrape see one."""
    code = "import prometheus_client, django; django.setup(); import cascade.metrics"
    env = clean_environ(CASCADE_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="cascade.settings")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode != 0
    assert "prometheus_client was imported before cascade.metrics" in run.stderr
