"""Reads from a PostgreSQL replica (cascade/db_routers.py, DATABASE_REPLICA_URL): which database
each kind of request and job reads.

The replica is a second alias on the test database, a TEST MIRROR as DATABASE_REPLICA_URL
configures it: both see the same rows, and each one's queries are captured on its own
connection, so a read sent to the wrong one fails the test. The tests are transactional: the
replica's connection sees committed rows only, as a real standby does.
"""

import copy
import io
import re
from contextlib import contextmanager

import pytest
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.management import call_command
from django.db import connections, transaction
from django.http import StreamingHttpResponse
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cascade import db_routers
from cascade.db_routers import PIN_COOKIE, PIN_SECONDS, PRIMARY, REPLICA, read_alias, reads_from
from ingest.tasks import poll_bucket_task
from tests.helpers import content
from tests.ingest.conftest import eager  # noqa: F401 (a fixture: Celery inline, a memory broker)
from tests.traces.support import upload_minimal_run
from traces import analysis, views
from traces.models import ApiToken, Trace, TraceState
from traces.snapshots import snapshot

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=[PRIMARY, REPLICA]),
    pytest.mark.postgres("a replica is PostgreSQL's: settings.py refuses one beside SQLite"),
]

CHANGELIST = "/admin/traces/trace/"


@pytest.fixture(scope="module", autouse=True)
def replica_alias(django_db_setup, django_db_blocker):
    """`replica`, a mirror of the test database, for this module's tests only (elsewhere the
    suite runs without a replica, as an installation without DATABASE_REPLICA_URL does)."""
    if REPLICA in connections:  # the suite itself run with DATABASE_REPLICA_URL set
        yield
        return
    primary = connections[PRIMARY].settings_dict
    connections.settings[REPLICA] = {**copy.deepcopy(primary), "TEST": {**primary["TEST"], "MIRROR": PRIMARY}}
    try:
        yield
    finally:
        with django_db_blocker.unblock():
            connections[REPLICA].close()
        del connections[REPLICA]
        del connections.settings[REPLICA]


@pytest.fixture(autouse=True)
def routed(settings):
    """The router and the middleware, where settings.py puts them when DATABASE_REPLICA_URL is set."""
    settings.DATABASE_ROUTERS = ["cascade.db_routers.ReplicaRouter"]
    middleware = list(settings.MIDDLEWARE)
    if "cascade.db_routers.ReplicaReadsMiddleware" not in middleware:
        middleware.insert(
            middleware.index("cascade.health.OperatorEndpointsMiddleware") + 1,
            "cascade.db_routers.ReplicaReadsMiddleware",
        )
    settings.MIDDLEWARE = middleware


@contextmanager
def captured():
    with (
        CaptureQueriesContext(connections[PRIMARY]) as primary,
        CaptureQueriesContext(connections[REPLICA]) as replica,
    ):
        yield primary, replica


OWNER_JOIN = re.compile(r'LEFT OUTER JOIN "auth_user" ON \("\w+"\."owner_id" = "auth_user"\."id"\)')


def sql(queries) -> str:
    return "\n".join(query["sql"] for query in queries.captured_queries)


def ready_trace(make_trace, make_kernels, trace_id: str = "bert") -> Trace:
    trace = make_trace(trace_id, state=TraceState.READY, model="bert-base")
    make_kernels(trace, [100, 200, 300])
    return trace


# --- the API ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/traces",
        "/api/traces?limit=1",
        "/api/traces/bert",
        "/api/traces/bert/summary",
        "/api/traces/bert/kernels.csv",
        "/api/traces/bert/simulations",
    ],
)
def test_an_api_get_reads_the_replica_and_its_token_on_the_primary(api, make_trace, make_kernels, path):
    ready_trace(make_trace, make_kernels)
    with captured() as (primary, replica):
        response = api.get(path)
        assert response.status_code == 200, content(response)
        content(response)
    assert "traces_trace" in sql(replica)
    # Who the client is, never from the replica; an owner's name is data, read with its row.
    read = OWNER_JOIN.sub("", sql(replica)).replace('"auth_user"."username"', "")
    assert "traces_apitoken" not in read and "auth_user" not in read
    # The primary answered who the client is (and wrote the token's last use), nothing else.
    assert primary.captured_queries
    for query in primary.captured_queries:
        assert "traces_apitoken" in query["sql"], query["sql"]


def test_a_streamed_detail_and_its_etag_come_from_the_replica(api, make_trace, make_kernels, monkeypatch):
    monkeypatch.setattr(views, "STREAM_KERNELS_ABOVE", 1)
    ready_trace(make_trace, make_kernels)
    with captured() as (primary, replica):
        response = api.get("/api/traces/bert", HTTP_ACCEPT_ENCODING="identity")
        assert response.streaming
        assert b'"kernel_count":3' in content(response).replace(b" ", b"")
        again = api.get(
            "/api/traces/bert", HTTP_IF_NONE_MATCH=response["ETag"], HTTP_ACCEPT_ENCODING="identity"
        )
    assert again.status_code == 304
    assert "traces_kernel" in sql(replica)
    assert "traces_trace" not in sql(primary) and "traces_kernel" not in sql(primary)


def test_a_token_just_created_works_at_once_its_lookup_on_the_primary(client_anon, make_trace):
    make_trace("bert", state=TraceState.READY)
    out = io.StringIO()
    call_command("create_token", "script", stdout=out, stderr=io.StringIO())
    token = out.getvalue().strip()
    with captured() as (primary, replica):
        response = client_anon.get("/api/traces", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    assert ApiToken.objects.get().last_used_at is not None
    assert "traces_apitoken" in sql(primary) and "traces_apitoken" not in sql(replica)


def test_a_stream_reads_where_the_view_decided_after_the_middleware_returned(make_trace):
    """A streamed body's queries run while the server iterates it: the middleware's decision
    must hold then, and must not outlive the response."""
    make_trace("bert", state=TraceState.READY)

    def view(request):
        def chunks():
            for _ in range(2):
                yield str(Trace.objects.count()).encode()

        return StreamingHttpResponse(chunks())

    response = db_routers.ReplicaReadsMiddleware(view)(RequestFactory().get("/api/traces"))
    assert read_alias() == PRIMARY
    with captured() as (primary, replica):
        assert b"".join(response.streaming_content) == b"11"
    assert len(replica.captured_queries) == 2 and not primary.captured_queries
    assert read_alias() == PRIMARY


# --- the admin --------------------------------------------------------------------------------


def test_admin_pages_read_the_replica_until_a_write_pins_the_browser_to_the_primary(
    staff_client, make_trace, monkeypatch
):
    make_trace("bert", state=TraceState.READY)
    make_trace("resnet", state=TraceState.READY)
    with captured() as (primary, replica):
        assert staff_client.get(CHANGELIST).status_code == 200
    assert "traces_trace" in sql(replica) and "traces_trace" not in sql(primary)
    assert "django_session" in sql(primary) and "django_session" not in sql(replica)

    # An action: a POST, on the primary; its answer pins the browser there for a few seconds.
    with captured() as (primary, replica):
        answer = staff_client.post(CHANGELIST, {"action": "mark_failed", "_selected_action": ["bert"]})
    assert answer.status_code == 302
    assert "traces_trace" in sql(primary) and not replica.captured_queries
    assert answer.cookies[PIN_COOKIE]["max-age"] == PIN_SECONDS

    with captured() as (primary, replica):
        page = staff_client.get(answer["Location"])
    assert page.status_code == 200
    assert "traces_trace" in sql(primary) and not replica.captured_queries
    assert Trace.objects.get(pk="bert").state == TraceState.FAILED

    # Once the pin is older than PIN_SECONDS, the replica again.
    later = signing.time.time() + PIN_SECONDS + 1
    monkeypatch.setattr(signing.time, "time", lambda: later)
    with captured() as (primary, replica):
        assert staff_client.get(CHANGELIST).status_code == 200
    assert "traces_trace" in sql(replica) and "traces_trace" not in sql(primary)


def test_a_forged_pin_cookie_is_ignored(staff_client, make_trace):
    make_trace("bert", state=TraceState.READY)
    staff_client.cookies[PIN_COOKIE] = "1"
    with captured() as (primary, replica):
        assert staff_client.get(CHANGELIST).status_code == 200
    assert "traces_trace" in sql(replica) and "traces_trace" not in sql(primary)


# --- the router -------------------------------------------------------------------------------


def test_reads_after_a_write_and_inside_a_transaction_stay_on_the_primary(make_trace):
    make_trace("bert", state=TraceState.READY)
    with reads_from(REPLICA):
        with captured() as (primary, replica):
            Trace.objects.count()
        assert len(replica.captured_queries) == 1 and not primary.captured_queries

        # Authentication's own bookkeeping (a token's last use) does not pin: its model is read
        # from the primary anyway.
        user = get_user_model().objects.create(username="script")
        ApiToken.issue(user)
        ApiToken.objects.update(last_used_at=timezone.now())
        with captured() as (primary, replica):
            Trace.objects.count()
        assert len(replica.captured_queries) == 1 and not primary.captured_queries

        with captured() as (primary, replica):
            with transaction.atomic():
                Trace.objects.count()
        assert not replica.captured_queries and "traces_trace" in sql(primary)

    with reads_from(REPLICA):
        # A write to what the replica serves: the rest of the request reads it where it was written.
        Trace.objects.filter(pk="bert").update(model="changed")
        with captured() as (primary, replica):
            assert Trace.objects.get(pk="bert").model == "changed"
        assert not replica.captured_queries and primary.captured_queries

    with reads_from(REPLICA):
        # A locking read is a write's first step (Django sends it to the write database): it pins.
        with captured() as (primary, replica):
            with transaction.atomic():
                Trace.objects.select_for_update().get(pk="bert")
            Trace.objects.count()
        assert not replica.captured_queries and "FOR UPDATE" in sql(primary)
    assert read_alias() == PRIMARY


def test_a_snapshot_holds_its_transaction_on_the_replica(make_trace, make_kernels):
    ready_trace(make_trace, make_kernels)
    with reads_from(REPLICA), captured() as (primary, replica):
        with snapshot(one_trace=True):
            assert connections[REPLICA].in_atomic_block and not connections[PRIMARY].in_atomic_block
            analysis.summary("bert")
    assert "REPEATABLE READ" in sql(replica) and "traces_kernel" in sql(replica)
    assert not primary.captured_queries


# --- what never passes the middleware ---------------------------------------------------------


@pytest.mark.usefixtures("eager")
def test_ingestion_tasks_and_commands_read_the_primary_even_after_a_replica_request(api, s3, make_trace):
    make_trace("old", state=TraceState.READY)
    assert api.get("/api/traces").status_code == 200  # this thread served a replica request
    upload_minimal_run(s3, "run-a")
    upload_minimal_run(s3, "run-b")
    with captured() as (primary, replica):
        call_command("ingest_traces", stdout=io.StringIO(), stderr=io.StringIO())
        call_command("check_integrity", stdout=io.StringIO(), stderr=io.StringIO())
        call_command("list_tokens", stdout=io.StringIO())
    assert Trace.objects.get(pk="run-a").state == TraceState.READY
    assert "traces_kernel" in sql(primary)
    assert not replica.captured_queries

    Trace.objects.filter(pk="run-b").delete()
    with captured() as (primary, replica):
        assert poll_bucket_task.apply().get() >= 1
    assert Trace.objects.get(pk="run-b").state == TraceState.READY
    assert not replica.captured_queries


# --- readiness --------------------------------------------------------------------------------


def test_readyz_checks_both_and_names_a_replica_that_does_not_answer(client_anon, django_db_blocker):
    assert client_anon.get("/readyz").json() == {"status": "ok"}
    replica = connections[REPLICA]
    port = replica.settings_dict["PORT"]
    replica.close()
    replica.settings_dict["PORT"] = "1"  # nothing listens there
    try:
        response = client_anon.get("/readyz")
    finally:
        replica.close()
        replica.settings_dict["PORT"] = port
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "reason": "the replica database (DATABASE_REPLICA_URL) does not answer",
    }
    assert client_anon.get("/readyz").status_code == 200


def test_an_api_request_pins_nothing_and_a_post_does(api, client_anon):
    assert PIN_COOKIE not in api.get("/api/traces").cookies
    answer = client_anon.post("/admin/login/", {"username": "x", "password": "y"})
    assert answer.cookies[PIN_COOKIE]["max-age"] == PIN_SECONDS
