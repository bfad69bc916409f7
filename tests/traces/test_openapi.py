"""The OpenAPI schema (/api/schema) is valid OpenAPI 3, describes every route as the reference
does, and the API's real answers conform to it; Swagger UI (/api/docs) is served locally.

Real responses are checked twice, independently: by jsonschema against the schema's resolved
response objects (each status the reference documents), and by schemathesis, which generates
requests from the schema and checks every answer (no 5xx, documented status, body and headers).
"""

import json
import os
from datetime import UTC, datetime

import jsonschema
import pytest
import schemathesis
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from drf_spectacular.validation import validate_schema
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig

from tests.helpers import kernel_dict, store_kernels
from tests.traces.support import DETAIL_KEYS, KERNEL_KEYS, SUMMARY_KEYS, assert_conforms, response_validator
from traces.filters import TraceFilter
from traces.models import Trace, TraceState

FORK_KEYS = ["device_id", "stream_id"]
# Generated requests per route and mode; CASCADE_FUZZ_EXAMPLES=2000 for a longer run (docs/api.md).
FUZZ_EXAMPLES = int(os.environ.get("CASCADE_FUZZ_EXAMPLES", "50"))


@pytest.fixture
def demo(make_trace):
    """A ready trace whose kernels hold every documented shape: totals, no totals (a CUDA
    graph's launch), and the device-id fork's launches with their extra keys."""
    trace = make_trace(
        "demo",
        state=TraceState.READY,
        trace_gpu_arch="sm_86",
        suggested_sim_config="SM86_RTX3070",
        has_step_timeline=True,
        layers=["step 0 (prefill)"],
        created_at=datetime(2026, 11, 8, 8, 59, 2, 587743, tzinfo=UTC),
    )
    trace.metadata = {
        "status": "ok",
        "files": [{"key": "accelsim-traces/demo/configs/trace.config", "bytes": 1}],
    }
    trace.save()
    store_kernels(
        "demo",
        [
            kernel_dict(1, ctx="0x1", insts=5, traced=True),
            kernel_dict(2, ctx="0x1", insts=None, traced=True),
            kernel_dict(1, ctx="0x2", insts=7, traced=True, device=0, stream=7),
            kernel_dict(1, ctx="0x2", insts=7, traced=True, device=1, stream=None),
        ],
    )
    Trace.objects.filter(pk="demo").update(kernel_count=4)
    make_trace(
        "demo-failed", state=TraceState.FAILED, error="profiler reported status 'failed' in metadata.json"
    )
    make_trace("arriving")  # uploading: no metadata yet
    return trace


# --- the schema itself -----------------------------------------------------------------------


def test_schema_is_valid_openapi_3(openapi):
    assert openapi["openapi"].startswith("3.")
    validate_schema(openapi)  # the OpenAPI 3 JSON Schema drf-spectacular ships


def test_schema_generates_without_warnings(tmp_path, db):
    # `manage.py spectacular --validate --fail-on-warn`: what CI or a developer runs by hand.
    call_command("spectacular", validate=True, fail_on_warn=True, file=str(tmp_path / "schema.yaml"))
    assert (tmp_path / "schema.yaml").read_text().startswith("openapi: 3.")


def test_schema_is_public_and_ignores_a_bad_token(client_anon, db):
    client_anon.credentials(HTTP_AUTHORIZATION="Bearer wrong-token")
    for path in ["/api/schema", "/api/schema/", "/api/schema?format=json"]:
        assert client_anon.get(path).status_code == 200, path
    assert client_anon.get("/api/schema")["Content-Type"].startswith("application/vnd.oai.openapi")


def test_every_route_is_described(openapi):
    assert sorted(openapi["paths"]) == [
        "/api/simulations",
        "/api/simulations/accuracy",
        "/api/sweeps",
        "/api/sweeps/{id}",
        "/api/sweeps/{id}/jobs/{job_id}/finish",
        "/api/sweeps/{id}/jobs/{job_id}/progress",
        "/api/sweeps/{id}/jobs/{job_id}/start",
        "/api/traces",
        "/api/traces/{trace_id}",
        "/api/traces/{trace_id}/compare/{other_id}",
        "/api/traces/{trace_id}/complete",
        "/api/traces/{trace_id}/files",
        "/api/traces/{trace_id}/kernels.csv",
        "/api/traces/{trace_id}/selection",
        "/api/traces/{trace_id}/simulations",
        "/api/traces/{trace_id}/simulations/{name}",
        "/api/traces/{trace_id}/simulations/{name}/complete",
        "/api/traces/{trace_id}/simulations/{name}/upload",
        "/api/traces/{trace_id}/summary",
        "/api/traces/{trace_id}/upload",
    ]
    methods = {path: list(item) for path, item in openapi["paths"].items()}
    uploads = {path for path in methods if path.endswith(("/upload", "/complete"))}
    assert [methods[path] for path in uploads] == [["post"]] * 4  # a simulation's upload, a run's push
    simulation = "/api/traces/{trace_id}/simulations/{name}"
    assert methods[simulation] == ["get", "delete"]  # its owner's or staff's
    assert methods["/api/sweeps"] == ["get", "post"]
    assert methods["/api/sweeps/{id}"] == ["get", "delete"]  # a cancel, its owner's or staff's
    jobs = {path for path in methods if "/jobs/" in path}  # a worker's reports
    assert [methods[path] for path in jobs] == [["post"]] * 3
    sweeps = {"/api/sweeps", "/api/sweeps/{id}", *jobs}
    others = [methods[p] for p in methods if p not in uploads | sweeps and p != simulation]
    assert others == [["get"]] * 10


def test_bearer_auth_is_the_only_scheme(openapi):
    assert openapi["components"]["securitySchemes"]["bearerAuth"]["type"] == "http"
    assert openapi["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert list(openapi["components"]["securitySchemes"]) == ["bearerAuth"]
    for item in openapi["paths"].values():
        for operation in item.values():
            assert operation["security"] == [{"bearerAuth": []}]


def test_every_filter_is_a_documented_query_parameter(openapi):
    parameters = {
        p["name"]: p for p in openapi["paths"]["/api/traces"]["get"]["parameters"] if p["in"] == "query"
    }
    assert set(parameters) == {*TraceFilter.base_filters, "limit", "after"}  # and the pages'
    assert parameters["state"]["schema"]["enum"] == sorted(TraceState.values)
    assert parameters["sample"]["schema"]["type"] == "boolean"
    assert parameters["created_after"]["schema"]["format"] == "date-time"
    assert not any(p.get("required") for p in parameters.values())


def test_each_filters_description_is_written_once_beside_it(openapi):
    """The parameters are read from the viewset's filterset: a filter's prose is its help_text."""
    parameters = {
        p["name"]: p for p in openapi["paths"]["/api/traces"]["get"]["parameters"] if p["in"] == "query"
    }
    for name, trace_filter in TraceFilter.base_filters.items():
        assert parameters[name]["description"] == trace_filter.extra["help_text"], name


def test_sizes_and_counts_are_64_bit_integers(openapi):
    # A trace's files pass 2 GiB: most client generators read an `integer` without a format
    # into 32 bits.
    summary = openapi["components"]["schemas"]["TraceSummary"]["properties"]
    assert summary["bytes"]["format"] == "int64"
    assert summary["kernel_count"]["format"] == "int64"


def test_statuses_and_error_bodies_are_documented(openapi):
    listing = openapi["paths"]["/api/traces"]["get"]["responses"]
    detail = openapi["paths"]["/api/traces/{trace_id}"]["get"]["responses"]
    assert sorted(listing) == ["200", "304", "400", "401", "429"]
    assert sorted(detail) == ["200", "304", "401", "404", "429"]
    error = {"$ref": "#/components/schemas/Error"}
    for status in ["400", "401", "429"]:
        assert listing[status]["content"]["application/json"]["schema"] == error
    for status in ["401", "404", "429"]:
        assert detail[status]["content"]["application/json"]["schema"] == error
    assert openapi["components"]["schemas"]["Error"]["required"] == ["detail"]
    assert listing["401"]["headers"]["WWW-Authenticate"]["schema"]["enum"] == ["Bearer"]


def test_shapes_keep_the_references_keys_and_order(openapi):
    schemas = openapi["components"]["schemas"]
    assert list(schemas["TraceSummary"]["properties"]) == SUMMARY_KEYS
    assert list(schemas["TraceDetail"]["properties"]) == DETAIL_KEYS
    assert list(schemas["Kernel"]["properties"]) == [*KERNEL_KEYS, *FORK_KEYS]
    assert sorted(schemas["Kernel"]["required"]) == sorted(KERNEL_KEYS)  # the fork's keys are optional
    assert schemas["Kernel"]["properties"]["total_insts"]["nullable"] is True
    assert schemas["Kernel"]["properties"]["total_reported_insts"]["nullable"] is True
    assert sorted(schemas["TraceSummary"]["required"]) == sorted(SUMMARY_KEYS)
    for name in ["TraceSummary", "TraceDetail", "Kernel", "Error"]:
        assert schemas[name]["additionalProperties"] is False, name


def test_the_references_examples_are_in_the_schema_and_conform(openapi):
    listing = openapi["paths"]["/api/traces"]["get"]["responses"]["200"]["content"]["application/json"]
    (example,) = listing["examples"].values()
    assert [t["id"] for t in example["value"]] == [
        "demo-failed",
        "demo",
        "sample__facebook_opt-125m__h100-e2e",
    ]
    response_validator(openapi, "/api/traces", 200).validate(example["value"])
    detail = openapi["paths"]["/api/traces/{trace_id}"]["get"]["responses"]["200"]["content"][
        "application/json"
    ]
    kernels = []
    for example in detail["examples"].values():
        response_validator(openapi, "/api/traces/{trace_id}", 200).validate(example["value"])
        kernels += example["value"]["kernels"]
    assert any(k["total_insts"] is None for k in kernels)
    assert any(list(k) == [*KERNEL_KEYS, *FORK_KEYS] for k in kernels)
    assert any(list(k) == KERNEL_KEYS for k in kernels)


# --- real responses against the schema -------------------------------------------------------------


def test_list_conforms(api, openapi, demo):
    body = assert_conforms(openapi, "/api/traces", api.get("/api/traces"))
    assert [t["id"] for t in body] == ["arriving", "demo-failed", "demo"]
    assert_conforms(openapi, "/api/traces", api.get("/api/traces", {"state": "ready", "sample": "false"}))


def test_detail_with_every_kernel_shape_conforms(api, openapi, demo):
    body = assert_conforms(openapi, "/api/traces/{trace_id}", api.get("/api/traces/demo"))
    kernels = body["kernels"]
    assert [list(k) for k in kernels] == [
        KERNEL_KEYS,
        KERNEL_KEYS,
        [*KERNEL_KEYS, *FORK_KEYS],
        [*KERNEL_KEYS, *FORK_KEYS],
    ]
    assert kernels[1]["total_insts"] is None and kernels[1]["total_reported_insts"] is None
    assert [k.get("device_id") for k in kernels] == [None, None, 0, 1]


@pytest.mark.parametrize("trace_id", ["demo-failed", "arriving"])
def test_detail_without_kernels_conforms(api, openapi, demo, trace_id):
    body = assert_conforms(openapi, "/api/traces/{trace_id}", api.get(f"/api/traces/{trace_id}"))
    assert body["kernels"] == []


def test_a_key_the_reference_does_not_list_would_fail_validation(api, openapi, demo):
    body = json.loads(api.get("/api/traces/demo").content)
    body["kernels"][0]["device_id"] = 0  # fine: the fork's optional key
    response_validator(openapi, "/api/traces/{trace_id}", 200).validate(body)
    body["kernels"][0]["colour"] = "blue"
    with pytest.raises(jsonschema.ValidationError):
        response_validator(openapi, "/api/traces/{trace_id}", 200).validate(body)


@pytest.mark.parametrize("path", ["/api/traces", "/api/traces/demo"])
def test_401_conforms(client_anon, openapi, demo, path):
    response = client_anon.get(path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert_conforms(openapi, "/api/traces" if path == "/api/traces" else "/api/traces/{trace_id}", response)


def test_404_conforms(api, openapi, demo):
    response = api.get("/api/traces/nope")
    assert response.status_code == 404
    assert assert_conforms(openapi, "/api/traces/{trace_id}", response) == {"detail": "trace nope not found"}


def test_400_filter_error_conforms(api, openapi, demo):
    response = api.get("/api/traces", {"sample": "yes"})
    assert response.status_code == 400
    assert assert_conforms(openapi, "/api/traces", response)["detail"].startswith("sample accepts")


# --- Swagger UI ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/docs", "/api/docs/"])
def test_swagger_ui_is_public_and_served_without_a_cdn(client_anon, db, path):
    response = client_anon.get(path)
    assert response.status_code == 200
    # The page and its start-up script (`?script`: no inline script, for the Content-Security-Policy).
    script = client_anon.get(path, {"script": ""})
    assert script.status_code == 200
    page = response.content.decode() + script.content.decode()
    assert "/api/schema" in page
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in page
    # No other origin (a CDN's URL); the page's random tokens are letters and digits, never `.` or `/`.
    assert not any(mark in page.lower() for mark in ("https://", "http://", "//cdn", "cdn."))
    for asset in ["swagger-ui-bundle.js", "swagger-ui-standalone-preset.js", "swagger-ui.css"]:
        assert finders.find(f"drf_spectacular_sidecar/swagger-ui-dist/{asset}"), asset


def test_other_api_paths_are_still_json_404s(api):
    response = api.get("/api/schemas")
    assert response.status_code == 404
    assert list(response.json()) == ["detail"]


# --- schemathesis: generated requests against the WSGI app -------------------------------------------------


def fuzz_config(token: str) -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            "auth": {"openapi": {"bearerAuth": {"bearer": token}}},
            # Parameters the schema does not list are ignored by design: not "invalid data".
            "generation": {"allow-extra-parameters": False},
            # by=step needs a step the trace has, which OpenAPI 3.0 cannot say: a 400 is an answer
            # to a request the schema allows there (test_selection.py checks which).
            "operations": [
                {
                    "include-path": "/api/traces/{trace_id}/selection",
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": [
                                "2xx",
                                "3xx",
                                "400",
                                "401",
                                "403",
                                "404",
                                "409",
                                "429",
                                "5xx",
                            ]
                        }
                    },
                }
            ],
        }
    )


@pytest.fixture
def fuzzed_api(db, demo, api_token, settings):
    """The schema as schemathesis loads it from the app, with a token for the bearer scheme;
    no rate limit, so that no answer is a 429."""
    from cascade.wsgi import application

    settings.CASCADE_API_RATE = settings.CASCADE_ANON_RATE = ""
    # As Django's test client does: a request must not close the test's connection (and its
    # transaction) when it ends.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi(
            "/api/schema?format=json", application, config=fuzz_config(api_token)
        )
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


# schemathesis' own pytest integration (`from_fixture`) does not run on pytest 9.2 (it sets a
# node's `_nodeid`): its strategies are driven by hypothesis here instead, per route and mode.
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
@pytest.mark.parametrize(
    "path",
    [
        "/api/traces",
        "/api/traces/{trace_id}",
        "/api/traces/{trace_id}/summary",
        "/api/traces/{trace_id}/compare/{other_id}",
        "/api/traces/{trace_id}/selection",
        "/api/traces/{trace_id}/files",
        "/api/traces/{trace_id}/kernels.csv",
        "/api/traces/{trace_id}/simulations",
        "/api/traces/{trace_id}/simulations/{name}",
        "/api/simulations",
        "/api/simulations/accuracy",
    ],
)
def test_generated_requests_get_documented_answers(fuzzed_api, path, mode):
    operation = fuzzed_api[path]["GET"]

    @given(case=operation.as_strategy(mode))
    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,  # the same requests every run: a CI run fails only on a change, not on a draw
        suppress_health_check=list(HealthCheck),
    )
    def answers_as_documented(case):
        # No 5xx, a documented status, body, content type and headers; invalid values refused.
        # Plain bodies: schemathesis' WSGI transport sends requests' `Accept-Encoding: gzip,
        # deflate` but does not decode (tests/traces/test_api_caching.py checks the codings).
        if path == "/api/traces" and mode is GenerationMode.POSITIVE and case.query:
            # A cursor is opaque: a string the schema allows is not one the API wrote (a 400;
            # tests/traces/test_api_list_pages.py walks real ones).
            case.query.pop("after", None)
        seen.add(case.call_and_validate(headers={"Accept-Encoding": "identity"}).status_code)

    seen: set[int] = set()
    answers_as_documented()
    if path == "/api/traces" and mode is GenerationMode.POSITIVE:
        # Every valid filter combination lists, with the token (or is a 304 for If-None-Match: *).
        assert seen - {304} == {200}


def test_the_schema_view_names_its_file_by_title_and_format(client_anon, db):
    # drf-spectacular's own naming (TITLE, then the negotiated format), kept by the cached view.
    assert (
        client_anon.get("/api/schema?format=json")["Content-Disposition"] == 'inline; filename="Cascade.json"'
    )
    assert client_anon.get("/api/schema")["Content-Disposition"] == 'inline; filename="Cascade.yaml"'
