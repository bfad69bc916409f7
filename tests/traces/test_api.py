"""The Traces API against the published reference: keys, order, codes and bodies."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.http import StreamingHttpResponse
from django.test.utils import CaptureQueriesContext

from tests.helpers import content
from tests.traces.support import (
    ADDED_KEYS,
    DETAIL_KEYS,
    KERNEL_KEYS,
    RELEASED_ADDED_KEYS,
    SUMMARY_KEYS,
)
from traces import shapes
from traces.models import Kernel, Trace, TraceState
from traces.views import BROWSABLE_KERNELS_PAGE, STREAM_KERNELS_ABOVE


def body(response):
    return json.loads(content(response))


@pytest.fixture
def add_kernels(make_kernels):
    """`add_kernels(trace, count, ctx=...)`: kernels 1..count of 50,066 instructions each."""

    def add(trace: Trace, count: int, ctx: str | None = "0x6165bdd7ec90") -> None:
        make_kernels(trace, [50066] * count, ctx=ctx)

    return add


# --- Authentication -------------------------------------------------------------------
# A missing, wrong or other scheme's token is a 401 on every route: the endpoint battery
# (tests/traces/test_endpoint_battery.py); a header Cascade cannot read: test_api_messages.py.


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_bearer_scheme_is_case_insensitive(client_anon, api_token, scheme):
    client_anon.credentials(HTTP_AUTHORIZATION=f"{scheme} {api_token}")
    assert client_anon.get("/api/traces").status_code == 200


def test_token_of_inactive_user_is_refused(api, api_token, django_user_model):
    django_user_model.objects.filter(username="api-user").update(is_active=False)
    assert api.get("/api/traces").status_code == 401


def test_create_token_prints_a_working_token_last(client_anon, db, capsys):
    call_command("create_token", "ci")
    first = capsys.readouterr().out.strip().splitlines()[-1]
    call_command("create_token", "ci")
    second = capsys.readouterr().out.strip().splitlines()[-1]
    assert first != second
    for token in (first, second):
        client_anon.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        assert client_anon.get("/api/traces").status_code == 200


def test_staff_session_gets_the_browsable_api(client, admin_user, make_trace):
    make_trace("demo", state=TraceState.READY)
    client.force_login(admin_user)
    response = client.get("/api/traces/demo", HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert b"demo" in response.content


def test_session_user_gets_json_too(client, admin_user, make_trace):
    make_trace("demo")
    client.force_login(admin_user)
    response = client.get("/api/traces", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    assert [t["id"] for t in response.json()] == ["demo"]


# --- List -----------------------------------------------------------------------------


def test_empty_list(api):
    response = api.get("/api/traces")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == []


def test_summary_keys_in_documented_order(api, make_trace):
    make_trace("demo", state=TraceState.READY, trace_gpu_arch="sm_86", suggested_sim_config="SM86_RTX3070")
    (summary,) = api.get("/api/traces").json()
    assert list(summary) == SUMMARY_KEYS
    assert ADDED_KEYS[: len(RELEASED_ADDED_KEYS)] == RELEASED_ADDED_KEYS


def test_summary_values(api, make_trace):
    make_trace(
        "sample__facebook_opt-125m__h100-e2e",
        state=TraceState.READY,
        model="facebook/opt-125m",
        layers=["step 0 (prefill)", "step 2 (decode)"],
        source_gpu="NVIDIA H100 80GB HBM3",
        trace_gpu_arch="sm_90",
        suggested_sim_config="SM90_H100",
        kernel_count=712,
        bytes=13065268,
        has_real_timing=True,
        has_step_timeline=True,
        sample=True,
    )
    created = datetime(2026, 11, 8, 6, 19, 57, 515017, tzinfo=UTC)
    Trace.objects.update(created_at=created, updated_at=created)
    (summary,) = api.get("/api/traces").json()
    assert summary == {
        "id": "sample__facebook_opt-125m__h100-e2e",
        "state": "ready",
        "error": None,
        "created_at": "2026-11-08T06:19:57.515017Z",
        "updated_at": "2026-11-08T06:19:57.515017Z",
        "model": "facebook/opt-125m",
        "layers": ["step 0 (prefill)", "step 2 (decode)"],
        "source_gpu": "NVIDIA H100 80GB HBM3",
        "trace_gpu_arch": "sm_90",
        "suggested_sim_config": "SM90_H100",
        "kernel_count": 712,
        "bytes": 13065268,
        "has_real_timing": True,
        "has_step_timeline": True,
        "sample": True,
        "waiting_for": None,
        "warnings": [],
        "traced_launches": 0,
        **unreleased_defaults(),
    }


def unreleased_defaults() -> dict:
    """The keys added after the released ones, at their columns' defaults (a trace that never set
    them)."""
    unreleased = shapes.TRACE_ADDED[len(RELEASED_ADDED_KEYS) :]
    return {field.name: Trace._meta.get_field(field.column).get_default() for field in unreleased}


def test_timestamps_keep_microseconds_even_when_zero(api, make_trace):
    make_trace("demo")
    Trace.objects.update(created_at=datetime(2026, 11, 8, 8, 59, 2, tzinfo=UTC))
    (summary,) = api.get("/api/traces").json()
    assert summary["created_at"] == "2026-11-08T08:59:02.000000Z"


def test_failed_trace_summary(api, make_trace):
    make_trace(
        "demo-failed",
        state=TraceState.FAILED,
        error="profiler reported status 'failed' in metadata.json",
        trace_gpu_arch="sm_86",
    )
    (summary,) = api.get("/api/traces").json()
    assert summary["state"] == "failed"
    assert summary["error"] == "profiler reported status 'failed' in metadata.json"
    assert summary["layers"] == []
    assert summary["kernel_count"] == 0


def test_list_is_newest_first_ties_by_id(api, make_trace):
    base = datetime(2026, 11, 8, 8, 0, tzinfo=UTC)
    for trace_id, minutes in [("old", 0), ("newest", 10), ("tie-b", 5), ("tie-a", 5)]:
        make_trace(trace_id, created_at=base + timedelta(minutes=minutes))
    ids = [t["id"] for t in api.get("/api/traces").json()]
    assert ids == ["newest", "tie-a", "tie-b", "old"]


def test_list_shows_every_state(api, make_trace):
    for state in TraceState.values:
        make_trace(f"t-{state}", state=state)
    assert {t["state"] for t in api.get("/api/traces").json()} == set(TraceState.values)


@pytest.mark.parametrize("path", ["/api/traces", "/api/traces/"])
def test_list_with_and_without_trailing_slash(api, make_trace, path):
    make_trace("demo")
    response = api.get(path)
    assert response.status_code == 200
    assert [t["id"] for t in response.json()] == ["demo"]


def test_list_query_count_is_fixed(api, make_trace, django_assert_num_queries):
    for n in range(30):
        make_trace(f"trace-{n}")
    api.get("/api/traces")  # the token's first use is written once (then at most once a minute)
    # One query authenticates the token, one reads the traces.
    with django_assert_num_queries(2):
        assert len(api.get("/api/traces").json()) == 30


# --- Detail ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "trace_id",
    ["facebook_opt-1.3b__h100", "run.v2.final", "a+b@c=d", "sample__facebook_opt-125m__h100-e2e", "x.json"],
)
@pytest.mark.parametrize("slash", ["", "/"])
def test_detail_accepts_ids_with_dots_and_symbols(api, make_trace, trace_id, slash):
    make_trace(trace_id)
    response = api.get(f"/api/traces/{trace_id}{slash}")
    assert response.status_code == 200
    assert response.json()["id"] == trace_id


def test_unknown_dotted_id_is_404_with_exact_body(api):
    response = api.get("/api/traces/facebook_opt-1.3b__h100/")
    assert response.status_code == 404
    assert response.json() == {"detail": "trace facebook_opt-1.3b__h100 not found"}


def test_detail_keys_in_documented_order(api, make_trace):
    metadata = {
        "status": "ok",
        "files": [],
        "trace_gpu_arch": "sm_86",
        "suggested_sim_config": "SM86_RTX3070",
    }
    make_trace("demo", state=TraceState.READY, metadata=metadata)
    detail = api.get("/api/traces/demo").json()
    assert list(detail) == DETAIL_KEYS
    assert detail["metadata"] == metadata
    assert list(detail["metadata"]) == list(metadata)


def test_kernel_shape(api, make_trace, add_kernels):
    trace = make_trace("demo", state=TraceState.READY)
    add_kernels(trace, 1)
    (kernel,) = api.get("/api/traces/demo").json()["kernels"]
    assert list(kernel) == KERNEL_KEYS
    assert kernel == {
        "ctx": "0x6165bdd7ec90",
        "kernel_id": 1,
        "name": "_Z6kernel1Pdi",
        "trace_file": "kernel-1-ctx_0x6165bdd7ec90.trace.xz",
        "grid_dim": [98, 1, 1],
        "block_dim": [1024, 1, 1],
        "blocks": 98,
        "threads": 1024,
        "total_insts": 50066,
        "total_reported_insts": 50066,
        "traced": True,
        "step": None,
        "duration_ns": None,
    }


def test_kernels_ordered_by_ctx_then_kernel_id(api, make_trace, add_kernels):
    trace = make_trace("demo", state=TraceState.READY)
    add_kernels(trace, 12, ctx="0xbbbb")
    add_kernels(trace, 3, ctx="0xaaaa")
    kernels = api.get("/api/traces/demo").json()["kernels"]
    assert [(k["ctx"], k["kernel_id"]) for k in kernels] == [("0xaaaa", n) for n in (1, 2, 3)] + [
        ("0xbbbb", n) for n in range(1, 13)
    ]


def test_legacy_kernels_have_null_ctx(api, make_trace, add_kernels):
    trace = make_trace("legacy", state=TraceState.READY)
    add_kernels(trace, 2, ctx=None)
    kernels = api.get("/api/traces/legacy").json()["kernels"]
    assert [(k["ctx"], k["kernel_id"]) for k in kernels] == [(None, 1), (None, 2)]


def test_null_totals_and_unsigned_32_bit_totals(api, make_trace, add_kernels):
    """The tracer's totals are unsigned 32-bit: up to 2**32 - 1, stored in four bytes."""
    trace = make_trace("demo", state=TraceState.READY)
    add_kernels(trace, 2)
    Kernel.stored.filter(kernel_id=1).update(total_insts=2**32 - 1, total_reported_insts=2**31)
    Kernel.stored.filter(kernel_id=2).update(total_insts=None, total_reported_insts=None)
    kernels = api.get("/api/traces/demo").json()["kernels"]
    assert [(k["total_insts"], k["total_reported_insts"]) for k in kernels] == [
        (2**32 - 1, 2**31),
        (None, None),
    ]


@pytest.mark.parametrize("state", [TraceState.UPLOADING, TraceState.PARSING, TraceState.FAILED])
def test_kernels_stay_empty_until_ready(api, make_trace, state):
    make_trace("demo", state=state)
    assert api.get("/api/traces/demo").json()["kernels"] == []


@pytest.mark.parametrize("state", [TraceState.UPLOADING, TraceState.FAILED])
def test_uploading_and_failed_traces_serve_no_kernels_whatever_is_stored(api, make_trace, state, add_kernels):
    trace = make_trace("demo", state=state)
    add_kernels(trace, 3)
    assert api.get("/api/traces/demo").json()["kernels"] == []


def test_detail_query_count_does_not_grow_with_kernels(
    api, make_trace, django_assert_num_queries, add_kernels
):
    small = make_trace("small", state=TraceState.READY)
    add_kernels(small, 3)
    large = make_trace("large", state=TraceState.READY)
    add_kernels(large, STREAM_KERNELS_ABOVE + 1500)
    api.get("/api/traces/small")  # the token's first use is written once (then at most once a minute)
    # Token, the trace's row with its written body (none here), then the trace, its steps, its
    # contexts, kernels (on PostgreSQL in one snapshot: its savepoint and release here, and the
    # kernels' cursor, which Django counts once however many round trips fetch its rows): the
    # same few queries whatever the size.
    counts = []
    for trace_id, count in [("small", 3), ("large", STREAM_KERNELS_ABOVE + 1500)]:
        with CaptureQueriesContext(connection) as queries:
            assert len(body(api.get(f"/api/traces/{trace_id}"))["kernels"]) == count
        counts.append(len(queries))
    assert counts[0] == counts[1] <= 8, counts


def test_large_trace_is_streamed_and_complete(api, make_trace, add_kernels):
    trace = make_trace("large", state=TraceState.READY)
    count = STREAM_KERNELS_ABOVE + 4321
    add_kernels(trace, count)
    response = api.get("/api/traces/large")
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"] == "application/json"
    detail = body(response)
    assert list(detail) == DETAIL_KEYS
    assert [k["kernel_id"] for k in detail["kernels"]] == list(range(1, count + 1))


def test_small_trace_has_content_length(api, make_trace, add_kernels):
    trace = make_trace("demo", state=TraceState.READY)
    add_kernels(trace, 2)
    response = api.get("/api/traces/demo")
    assert not response.streaming
    assert int(response["Content-Length"]) == len(response.content)


def test_browsable_api_pages_the_kernels_of_a_trace_and_the_json_stays_whole(
    client, admin_user, make_trace, add_kernels
):
    trace = make_trace("large", state=TraceState.READY)
    add_kernels(trace, 120)
    client.force_login(admin_user)
    response = client.get("/api/traces/large", HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert [kernel["kernel_id"] for kernel in response.data["kernels"]] == list(
        range(1, BROWSABLE_KERNELS_PAGE + 1)
    )
    assert response.data["kernels_shown"].startswith("kernels 1-50 of 120 (page 1 of 3)")
    links = response.data["kernels_pages"]
    assert links["previous"] is None
    assert links["next"] == "http://testserver/api/traces/large?kernels_page=2"
    assert links["last"] == "http://testserver/api/traces/large?kernels_page=3"
    # The links are links on the page.
    assert b'href="http://testserver/api/traces/large?kernels_page=2"' in response.content

    last = client.get(links["last"], HTTP_ACCEPT="text/html")
    assert [kernel["kernel_id"] for kernel in last.data["kernels"]] == list(range(101, 121))
    assert last.data["kernels_pages"]["next"] is None
    assert last.data["kernels_pages"]["previous"] == "http://testserver/api/traces/large?kernels_page=2"
    beyond = client.get("/api/traces/large?kernels_page=9", HTTP_ACCEPT="text/html")
    assert beyond.data["kernels"] == [] and beyond.data["kernels_shown"].startswith("no kernels on page 9")
    for bad in ("0", "-1", "x", "1" * 10):
        answer = client.get(f"/api/traces/large?kernels_page={bad}", HTTP_ACCEPT="text/html")
        assert answer.status_code == 400, bad

    full = client.get("/api/traces/large?format=json")
    assert len(body(full)["kernels"]) == 120
    assert "kernels_pages" not in body(full)


def test_a_small_trace_shows_all_its_kernels_without_pages(client, admin_user, make_trace, add_kernels):
    trace = make_trace("small", state=TraceState.READY)
    add_kernels(trace, BROWSABLE_KERNELS_PAGE)
    client.force_login(admin_user)
    response = client.get("/api/traces/small", HTTP_ACCEPT="text/html")
    assert len(response.data["kernels"]) == BROWSABLE_KERNELS_PAGE
    assert "kernels_pages" not in response.data and "kernels_shown" not in response.data


def test_browsable_list_links_each_trace_to_its_detail_and_the_json_has_no_links(
    client, admin_user, make_trace
):
    make_trace("demo.run+1", state=TraceState.READY)
    client.force_login(admin_user)
    response = client.get("/api/traces", HTTP_ACCEPT="text/html")
    assert [trace["url"] for trace in response.data] == ["http://testserver/api/traces/demo.run+1"]
    assert b'href="http://testserver/api/traces/demo.run+1"' in response.content
    assert client.get(response.data[0]["url"], HTTP_ACCEPT="text/html").status_code == 200
    assert "url" not in client.get("/api/traces?format=json").json()[0]
