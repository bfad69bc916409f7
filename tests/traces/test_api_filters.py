"""`GET /api/traces?state=...&model=...`: each filter, together, and what a bad value gets."""

from datetime import UTC, datetime, timedelta

import pytest

from traces.models import TraceState

T0 = datetime(2026, 11, 8, 8, 0, tzinfo=UTC)


@pytest.fixture
def traces(make_trace):
    """Five traces an hour apart (newest last), differing in every filtered field."""
    rows = [
        ("opt-h100", TraceState.READY, "facebook/opt-125m", "NVIDIA H100 80GB HBM3", "sm_90", True),
        ("opt-a100", TraceState.READY, "facebook/opt-125m", "NVIDIA A100-SXM4-80GB", "sm_80", False),
        (
            "llama-h100",
            TraceState.PARSING,
            "meta-llama/Llama-3.1-8B",
            "NVIDIA H100 80GB HBM3",
            "sm_90",
            False,
        ),
        ("broken", TraceState.FAILED, None, None, "sm_86", False),
        ("arriving", TraceState.UPLOADING, None, None, None, False),
    ]
    for hour, (trace_id, state, model, gpu, arch, sample) in enumerate(rows):
        make_trace(
            trace_id,
            state=state,
            model=model,
            source_gpu=gpu,
            trace_gpu_arch=arch,
            sample=sample,
            created_at=T0 + timedelta(hours=hour),
        )


def ids(api, **params) -> list[str]:
    response = api.get("/api/traces", params)
    assert response.status_code == 200, response.content
    return [trace["id"] for trace in response.json()]


def error(api, **params) -> str:
    response = api.get("/api/traces", params)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert list(body) == ["detail"]
    return body["detail"]


# --- each filter ---------------------------------------------------------------------


def test_no_filter_lists_everything_newest_first(api, traces):
    assert ids(api) == ["arriving", "broken", "llama-h100", "opt-a100", "opt-h100"]


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("ready", ["opt-a100", "opt-h100"]),
        ("parsing", ["llama-h100"]),
        ("failed", ["broken"]),
        ("uploading", ["arriving"]),
    ],
)
def test_state(api, traces, state, expected):
    assert ids(api, state=state) == expected


def test_model_is_an_exact_match(api, traces):
    assert ids(api, model="facebook/opt-125m") == ["opt-a100", "opt-h100"]
    assert ids(api, model="facebook/opt") == []
    assert ids(api, model="FACEBOOK/OPT-125M") == []


def test_source_gpu_is_an_exact_match(api, traces):
    assert ids(api, source_gpu="NVIDIA H100 80GB HBM3") == ["llama-h100", "opt-h100"]
    assert ids(api, source_gpu="H100") == []


def test_trace_gpu_arch(api, traces):
    assert ids(api, trace_gpu_arch="sm_90") == ["llama-h100", "opt-h100"]
    assert ids(api, trace_gpu_arch="sm_86") == ["broken"]
    assert ids(api, trace_gpu_arch="sm_70") == []


@pytest.mark.parametrize("value", ["true", "True", "TRUE", "1"])
def test_sample_true(api, traces, value):
    assert ids(api, sample=value) == ["opt-h100"]


@pytest.mark.parametrize("value", ["false", "False", "0"])
def test_sample_false(api, traces, value):
    assert ids(api, sample=value) == ["arriving", "broken", "llama-h100", "opt-a100"]


def test_created_after_is_inclusive(api, traces):
    assert ids(api, created_after="2026-11-08T11:00:00Z") == ["arriving", "broken"]
    assert ids(api, created_after="2026-11-08T11:00:00.000001Z") == ["arriving"]


def test_created_before_is_exclusive(api, traces):
    assert ids(api, created_before="2026-11-08T09:00:00Z") == ["opt-h100"]
    assert ids(api, created_before="2026-11-08T09:00:00.000001Z") == ["opt-a100", "opt-h100"]


def test_consecutive_windows_list_each_trace_once(api, traces):
    edges = ["2026-11-08T07:00:00Z", "2026-11-08T09:00:00Z", "2026-11-08T10:30:00Z", "2026-11-09T00:00:00Z"]
    windows = [ids(api, created_after=a, created_before=b) for a, b in zip(edges, edges[1:], strict=False)]
    assert sorted(trace for window in windows for trace in window) == sorted(ids(api))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # An offset is honoured: 10:00+01:00 is 09:00 UTC.
        ("2026-11-08T10:00:00+01:00", ["arriving", "broken", "llama-h100", "opt-a100"]),
        # RFC 3339's lower-case t and z.
        ("2026-11-08t09:00:00z", ["arriving", "broken", "llama-h100", "opt-a100"]),
        # No offset: UTC.
        ("2026-11-08T09:00:00", ["arriving", "broken", "llama-h100", "opt-a100"]),
        # A date: its midnight, UTC.
        ("2026-11-09", []),
        ("2026-11-08", ["arriving", "broken", "llama-h100", "opt-a100", "opt-h100"]),
    ],
)
def test_created_after_reads_iso_8601(api, traces, value, expected):
    assert ids(api, created_after=value) == expected


def test_a_plus_offset_sent_unencoded_is_refused_with_how_to_send_it(api, traces):
    # "+01:00" in a raw query string arrives as " 01:00": a 400 that says to send %2B.
    response = api.get("/api/traces?created_after=2026-11-08T10:00:00+01:00")
    assert response.status_code == 400
    assert "%2B" in response.json()["detail"]


@pytest.mark.parametrize(
    "name", ["state", "model", "source_gpu", "trace_gpu_arch", "sample", "created_after"]
)
def test_an_empty_value_narrows_nothing(api, traces, name):
    assert ids(api, **{name: ""}) == ids(api)


# --- combinations ----------------------------------------------------------------------


def test_filters_combine_with_and(api, traces):
    assert ids(api, state="ready", source_gpu="NVIDIA H100 80GB HBM3") == ["opt-h100"]
    assert ids(api, model="facebook/opt-125m", sample="false") == ["opt-a100"]
    assert ids(api, trace_gpu_arch="sm_90", state="failed") == []
    assert ids(
        api,
        state="ready",
        model="facebook/opt-125m",
        source_gpu="NVIDIA A100-SXM4-80GB",
        trace_gpu_arch="sm_80",
        sample="0",
        created_after="2026-11-08T09:00:00Z",
        created_before="2026-11-08T10:00:00Z",
    ) == ["opt-a100"]


def test_a_window_after_its_end_is_empty(api, traces):
    assert ids(api, created_after="2026-11-09", created_before="2026-11-08") == []


def test_filtered_list_keeps_the_summary_shape(api, traces):
    (summary,) = api.get("/api/traces", {"state": "failed"}).json()
    assert list(summary) == list(api.get("/api/traces").json()[1])
    assert summary["id"] == "broken"


# --- bad values and other parameters -------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"state": "done"}, "state accepts one of uploading, parsing, ready, failed; got 'done'."),
        ({"state": "READY"}, "state accepts one of uploading, parsing, ready, failed; got 'READY'."),
        ({"sample": "yes"}, "sample accepts true or false (also 1 or 0); got 'yes'."),
        (
            {"created_after": "yesterday"},
            "created_after accepts an ISO 8601 date or date-time, such as 2026-11-08 or "
            "2026-11-08T08:59:02Z (a time without an offset is UTC; send a + offset as %2B); "
            "got 'yesterday'.",
        ),
        (
            {"created_before": "2026-13-01"},
            "created_before accepts an ISO 8601 date or date-time, such as 2026-11-08 or "
            "2026-11-08T08:59:02Z (a time without an offset is UTC; send a + offset as %2B); "
            "got '2026-13-01'.",
        ),
        (
            {"model": "opt\x00"},
            # Refused before the filters read it, as any parameter of any route (traces.params).
            "model accepts text without NUL characters; got 'opt\\x00'.",
        ),
    ],
)
def test_invalid_value_is_400_naming_the_parameter(api, traces, params, detail):
    assert error(api, **params) == detail


def test_every_invalid_parameter_is_named(api, traces):
    detail = error(api, sample="maybe", state="gone", model="ok")
    assert detail.startswith("state accepts ")
    assert "sample accepts " in detail
    assert "model" not in detail


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_an_instant_outside_the_calendar_in_utc_is_400(api, traces, value):
    assert error(api, created_after=value).startswith("created_after accepts ")


def test_a_long_bad_value_is_cut_short_in_the_detail(api, traces):
    assert len(error(api, state="x" * 10_000)) < 300


def test_an_unknown_parameter_is_a_400_naming_it_and_the_parameters_allowed(api, traces):
    """A typo (`stat=ready`) must not answer every trace."""
    assert error(api, stat="ready") == (
        "unknown parameter 'stat'; this route accepts state, model, source_gpu, trace_gpu_arch, "
        "sample, created_after, created_before, limit, after, format."
    )
    assert error(api, state="failed", colour="blue", page="2").startswith(
        "unknown parameters 'colour', 'page'; this route accepts state,"
    )


def test_format_json_is_still_the_renderer_choice_not_a_filter(api, traces):
    assert ids(api, format="json", state="failed") == ["broken"]


def test_invalid_filter_needs_a_token_first(client_anon, traces):
    response = client_anon.get("/api/traces", {"state": "done"})
    assert response.status_code == 401


def test_detail_ignores_the_filters(api, traces):
    response = api.get("/api/traces/broken", {"state": "ready", "sample": "nonsense"})
    assert response.status_code == 200
    assert response.json()["id"] == "broken"


# --- cost ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"state": "ready"},
        {"state": "ready", "model": "facebook/opt-125m", "source_gpu": "NVIDIA H100 80GB HBM3"},
        {
            "trace_gpu_arch": "sm_90",
            "sample": "true",
            "created_after": "2026-11-08",
            "created_before": "2027-01-01",
        },
    ],
)
def test_filtered_list_is_still_one_query(api, traces, django_assert_num_queries, params):
    api.get("/api/traces")  # the token's first use is written once (then at most once a minute)
    # One query authenticates the token, one reads the traces.
    with django_assert_num_queries(2):
        assert api.get("/api/traces", params).status_code == 200


def test_an_invalid_filter_reads_no_traces(api, traces, django_assert_num_queries):
    api.get("/api/traces")
    with django_assert_num_queries(1):  # the token only
        assert api.get("/api/traces", {"state": "done"}).status_code == 400
