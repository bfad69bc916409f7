"""Operators see what happens: every response has an X-Request-ID, and a
500 is logged on stderr with its traceback and that id, which its body names too."""

import io
import json
import logging
import re
import subprocess
import sys

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from cascade.logs import REQUEST_ID_MAX, JsonFormatter, RequestIdFilter
from tests.gunicorn_process import ROOT, clean_environ, gunicorn
from traces import selectors

GENERATED_ID = re.compile(r"[0-9a-f]{32}")


def test_every_response_carries_a_request_id(client_anon, admin_client):
    api = client_anon.get("/api/traces")
    page = admin_client.get("/admin/")
    assert api.status_code == 401 and page.status_code == 200
    assert GENERATED_ID.fullmatch(api["X-Request-ID"])
    assert GENERATED_ID.fullmatch(page["X-Request-ID"])
    assert api["X-Request-ID"] != page["X-Request-ID"]


def test_the_proxy_s_request_id_is_kept(client_anon):
    response = client_anon.get("/api/traces", HTTP_X_REQUEST_ID="edge-7f3a:1/2")
    assert response["X-Request-ID"] == "edge-7f3a:1/2"


@pytest.mark.parametrize(
    "sent",
    ["", "two words", "line\nbreak", "tab\tin", "é-accent", "x" * (REQUEST_ID_MAX + 1)],
    ids=["empty", "space", "newline", "tab", "non-ascii", "too-long"],
)
def test_a_request_id_that_could_garble_a_log_line_is_replaced(client_anon, sent):
    response = client_anon.get("/api/traces", HTTP_X_REQUEST_ID=sent)
    assert GENERATED_ID.fullmatch(response["X-Request-ID"])


def test_the_longest_request_id_allowed_is_kept(client_anon):
    sent = "r" * REQUEST_ID_MAX
    assert client_anon.get("/api/traces", HTTP_X_REQUEST_ID=sent)["X-Request-ID"] == sent


@pytest.fixture
def request_log():
    """What django.request writes, formatted as settings.LOGGING's plain lines."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(logging.Formatter(settings.LOGGING["formatters"]["plain"]["format"]))
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)


def test_a_server_error_is_logged_with_its_traceback_and_named_in_the_body(
    api_token, monkeypatch, request_log
):
    def broken(*args):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(selectors, "trace_summary_rows", broken)
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token}")
    response = client.get("/api/traces", HTTP_X_REQUEST_ID="req-500-a")
    assert response.status_code == 500
    assert response["X-Request-ID"] == "req-500-a"
    assert response.json() == {"detail": "server error; the operators have been told (request id req-500-a)"}
    log = request_log.getvalue()
    assert "ERROR django.request [req-500-a]: Internal Server Error: /api/traces" in log
    assert "Traceback (most recent call last)" in log
    assert "RuntimeError: the database went away" in log


def test_a_server_error_outside_the_api_names_its_request(admin_client, monkeypatch):
    from traces.admin.trace import TraceAdmin

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(TraceAdmin, "get_queryset", broken)
    admin_client.raise_request_exception = False
    response = admin_client.get("/admin/traces/trace/", HTTP_X_REQUEST_ID="req-500-b")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")
    assert b"req-500-b" in response.content


def test_json_log_lines():
    try:
        raise ValueError("bad totals")
    except ValueError:
        record = logging.LogRecord(
            "ingest.passes", logging.ERROR, __file__, 1, "%s: failed", ("run-1",), sys.exc_info()
        )
    record.request_id = "-"
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["level"] == "ERROR"
    assert parsed["logger"] == "ingest.passes"
    assert parsed["message"] == "run-1: failed"
    assert parsed["request_id"] is None  # outside a request
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", parsed["timestamp"])
    assert parsed["exception"].startswith("Traceback (most recent call last)")
    assert parsed["exception"].endswith("ValueError: bad totals")


# --- In a real server: what reaches gunicorn's stderr -----------------------------------------


def unmigrated_server_env(tmp_path, **extra):
    """A server on a database without tables: any request that reads one is a real 500."""
    return clean_environ(
        CASCADE_VAR_DIR=str(tmp_path),
        DATABASE_URL=f"sqlite:///{tmp_path / 'empty.sqlite3'}",
        **extra,
    )


@pytest.mark.slow
def test_a_500_under_gunicorn_is_on_its_stderr_with_the_request_id(tmp_path):
    access_log = tmp_path / "access.log"
    env = unmigrated_server_env(tmp_path, GUNICORN_CMD_ARGS=f"--access-logfile {access_log}")
    with gunicorn(env, tmp_path) as server:
        status, headers, body = server.get("/api/traces", {"Authorization": "Bearer not-checked-yet"})
        request_id = headers["X-Request-ID"]
        assert status == 500
        assert json.loads(body) == {
            "detail": f"server error; the operators have been told (request id {request_id})"
        }
        stderr = server.stderr()
    line = next(line for line in stderr.splitlines() if f"[{request_id}]" in line)
    assert re.search(r"ERROR django\.request \[[0-9a-f]{32}\]: Internal Server Error: /api/traces$", line)
    after = stderr[stderr.index(line) :]
    assert "Traceback (most recent call last)" in after
    assert "no such table: traces_apitoken" in after
    # gunicorn's access log line of that request ends with the same id.
    assert re.search(
        rf'"GET /api/traces HTTP/1.1" 500 \d+ .* {request_id}$', access_log.read_text(), re.MULTILINE
    )


@pytest.mark.slow
def test_json_logs_under_gunicorn(tmp_path):
    env = unmigrated_server_env(tmp_path, CASCADE_LOG_FORMAT="json")
    with gunicorn(env, tmp_path) as server:
        status, headers, _ = server.get(
            "/api/traces", {"Authorization": "Bearer x", "X-Request-ID": "lb-0042"}
        )
        stderr = server.stderr()
    assert status == 500 and headers["X-Request-ID"] == "lb-0042"
    ours = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    error = next(line for line in ours if line["request_id"] == "lb-0042")
    assert error["level"] == "ERROR"
    assert error["logger"] == "django.request"
    assert error["message"] == "Internal Server Error: /api/traces"
    assert "no such table: traces_apitoken" in error["exception"]


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("CASCADE_LOG_FORMAT", "xml", "CASCADE_LOG_FORMAT must be plain or json, got 'xml'"),
        (
            "CASCADE_METRICS_ALLOWED",
            "127.0.0.1,10.0.0.0/33",
            "CASCADE_METRICS_ALLOWED: '10.0.0.0/33' is not an address or a network (10.0.0.0/8)",
        ),
    ],
)
def test_a_wrong_setting_stops_the_start_with_its_name(tmp_path, variable, value, message):
    env = clean_environ(CASCADE_VAR_DIR=str(tmp_path), **{variable: value})
    run = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0
    assert message in run.stderr


def test_plain_lines_outside_a_request_read_as_before():
    """The poller's and the workers' lines, which people and tests grep, keep their shape."""
    record = logging.LogRecord(
        "ingest.passes", logging.INFO, __file__, 1, "%s: ready, 1 kernels", ("run-1",), None
    )
    RequestIdFilter().filter(record)
    line = logging.Formatter(settings.LOGGING["formatters"]["plain"]["format"]).format(record)
    assert re.fullmatch(r"\S+ \S+ INFO ingest\.passes: run-1: ready, 1 kernels", line)
