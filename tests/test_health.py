"""`/healthz` and `/readyz` as an orchestrator's probes use them."""

import json
import re

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.test import Client

from tests.gunicorn_process import clean_environ, gunicorn


def test_healthz_answers_without_a_token_or_a_query(client_anon, db, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client_anon.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_probes_answer_a_host_outside_allowed_hosts_over_plain_http(db, settings):
    """The kubelet sends the pod's address as Host, over HTTP, whatever DJANGO_HTTPS says."""
    settings.SECURE_SSL_REDIRECT = True
    probe = Client(HTTP_HOST="10.42.0.17:8000")
    assert probe.get("/healthz").status_code == 200
    assert probe.get("/readyz").status_code == 200
    # Every other page still refuses that Host, and redirects to HTTPS.
    assert Client(HTTP_HOST="10.42.0.17:8000").get("/api/traces").status_code == 400


def test_readyz_when_the_database_is_migrated(client_anon, db):
    response = client_anon.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_503_while_a_migration_is_not_applied(client_anon, db):
    """As after a deploy whose `migrate` has not run yet: the newest traces migration is
    not recorded as applied (the row goes back when the test's transaction rolls back)."""
    newest = max(name for app, name in MigrationLoader(connection).disk_migrations if app == "traces")
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM django_migrations WHERE app = 'traces' AND name = %s", [newest])
    response = client_anon.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "reason": f"1 migrations not applied (run `python manage.py migrate`): traces.{newest}",
    }


@pytest.mark.parametrize("method", ["post", "delete"])
def test_probes_only_read(client_anon, method, db):
    assert getattr(client_anon, method)("/healthz").status_code == 405


@pytest.mark.slow
def test_probes_under_gunicorn_without_a_usable_database(tmp_path):
    """Alive either way; ready neither without tables nor without a database at all."""
    unmigrated = clean_environ(
        CASCADE_VAR_DIR=str(tmp_path), DATABASE_URL=f"sqlite:///{tmp_path / 'empty.sqlite3'}"
    )
    with gunicorn(unmigrated, tmp_path) as server:
        assert server.get("/healthz")[::2] == (200, b'{"status": "ok"}')
        status, _, body = server.get("/readyz")
        assert status == 503
        assert re.fullmatch(
            r"\d+ migrations not applied \(run `python manage.py migrate`\): contenttypes\.0001_initial, .+",
            json.loads(body)["reason"],
        )
    absent = clean_environ(
        CASCADE_VAR_DIR=str(tmp_path), DATABASE_URL="sqlite:////nonexistent-dir/db.sqlite3"
    )
    with gunicorn(absent, tmp_path) as server:
        assert server.get("/healthz")[0] == 200
        assert server.get("/readyz")[::2] == (
            503,
            b'{"status": "unavailable", "reason": "the database does not answer"}',
        )
        assert "not ready: the database does not answer" in server.stderr()
        # /metrics still answers, without the database's gauges.
        status, _, body = server.get("/metrics")
        assert status == 200
        assert b"cascade_traces" not in body
