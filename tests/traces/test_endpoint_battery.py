"""One battery of the behaviour every route under /api/ shares, run against each route of the
OpenAPI schema (`traces.openapi.api_paths()`), as NetBox's APIViewTestCases are: authentication
(401, its body, WWW-Authenticate), an unknown trace (404), ETag and 304, gzip and zstd, a bad
bounded parameter (400), throttling (429, Retry-After). The routes and where each differs are
the table in tests/traces/routes.py; a route without a row there fails, naming it.

Each route's own behaviour (its keys, its filters, its errors past these) stays in its own tests.
"""

import json

import pytest
from rest_framework.test import APIClient

from simulations.models import Sweep, SweepJob
from tests.helpers import content, decompress, ingested, kernel_rows, token_client
from tests.simulations.support import simulate
from tests.traces.routes import BY_KEY, JOB, PATH_VALUES, ROUTES, SIMULATION, SWEEP, TRACE, UNKNOWN, Route
from traces.openapi import api_paths, api_schema

KEYS = [route.key for route in ROUTES]


def operations() -> list[str]:
    """`METHOD path` of every operation the schema describes."""
    schema = api_schema()["paths"]
    return sorted(
        f"{method.upper()} {path}"
        for path in api_paths()
        for method in schema[path]
        if method in {"get", "post"}
    )


def operation(route: Route) -> dict:
    return api_schema()["paths"][route.path][route.method]


def address(route: Route, **values: str) -> str:
    path = route.path
    for name, value in {**PATH_VALUES, **values}.items():
        path = path.replace("{" + name + "}", value)
    return path


def call(client: APIClient, route: Route, path: str | None = None, **extra):
    path = path or address(route)
    if route.method == "post":
        return client.post(path, data=json.dumps(route.body), content_type="application/json", **extra)
    return getattr(client, route.method)(path, **extra)


@pytest.fixture
def world(db, request, settings):
    """Two ready traces of 40 launches (a detail large enough to compress), two more (a list
    that compresses), a ready simulation of the first; the bucket where the route asks it."""
    settings.CASCADE_API_RATE = ""  # the throttle has its own test below
    trace = ingested(TRACE, kernel_rows(40))
    for other in (PATH_VALUES["other_id"], "battery-c", "battery-d"):
        ingested(other, kernel_rows(40))
    simulate(trace, SIMULATION, [(0, n, "_Z6vecAddPdS_S_i", None, 100 + n, 120 + n) for n in range(1, 41)])
    sweep = Sweep.objects.create(pk=SWEEP, name="battery", configs=["SM75_RTX2060"])
    SweepJob.objects.create(pk=JOB, sweep=sweep, trace=trace, config="SM75_RTX2060")
    route = BY_KEY.get(request.node.callspec.params.get("key"))
    if route is not None and route.needs_s3:
        request.getfixturevalue("s3")
    return trace


def route_client(route: Route) -> APIClient:
    return token_client("write" if route.write else "read")


# --- the table covers the schema ---------------------------------------------------------------


def test_every_route_of_the_schema_has_a_battery_entry():
    missing = sorted(set(operations()) - set(KEYS))
    assert not missing, f"routes without a row in tests/traces/routes.py: {missing}"
    assert not set(KEYS) - set(operations()), "rows of tests/traces/routes.py the schema lacks"


@pytest.mark.parametrize("key", KEYS)
def test_the_table_says_what_the_schema_says(key):
    route, described = BY_KEY[key], operation(BY_KEY[key])
    responses = described["responses"]
    assert "401" in responses and "429" in responses
    assert ("404" in responses) == (route.names_a_trace or route.names_a_sweep)
    assert ("304" in responses) == route.cacheable


# --- the battery ----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", KEYS)
def test_a_good_request_answers_as_the_table_says(world, key):
    route = BY_KEY[key]
    assert call(route_client(route), route).status_code == route.ok


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize(
    "header", [None, "Bearer cas_wrong", "Token cas_abc"], ids=["none", "wrong", "scheme"]
)
def test_without_a_good_token_is_a_401_with_the_challenge(world, key, header):
    route = BY_KEY[key]
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    response = call(client, route)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert list(body) == ["detail"] and isinstance(body["detail"], str)
    if header is None:
        published = operation(route)["responses"]["401"]["content"]["application/json"]["examples"]
        assert body == published["Error"]["value"]
        # Checked before anything else the request asks: never a 304, never a coded error.
        other = call(client, route, HTTP_IF_NONE_MATCH="*", HTTP_ACCEPT_ENCODING="gzip, zstd")
        assert other.status_code == 401 and not other.has_header("Content-Encoding")
        assert call(client, route, address(route) + "/").status_code == 401  # the router's "/?"
    assert b"url" not in response.content, "a 401 answers nothing of the route's"


@pytest.mark.parametrize("key", [route.key for route in ROUTES if route.names_a_trace])
def test_an_unknown_trace_is_a_404_with_its_body(world, key):
    route, client = BY_KEY[key], route_client(BY_KEY[key])
    response = call(client, route, address(route, trace_id=UNKNOWN))
    assert response.status_code == 404
    assert response.json() == {"detail": f"trace {UNKNOWN} not found"}
    # Whatever If-None-Match says, no representation of a missing trace matches; errors are plain.
    starred = call(
        client, route, address(route, trace_id=UNKNOWN), HTTP_IF_NONE_MATCH="*", HTTP_ACCEPT_ENCODING="gzip"
    )
    assert (starred.status_code, starred.json()) == (404, response.json())
    assert not starred.has_header("Content-Encoding")


@pytest.mark.parametrize("key", [route.key for route in ROUTES if route.names_a_sweep])
def test_an_unknown_sweep_is_a_404_with_its_body(world, key):
    route = BY_KEY[key]
    response = call(route_client(route), route, address(route, id="999999"))
    assert response.status_code == 404
    assert response.json()["detail"].endswith(
        "of sweep 999999 not found" if "job_id" in route.path else "sweep 999999 not found"
    )


@pytest.mark.parametrize("key", [route.key for route in ROUTES if route.cacheable])
def test_an_etag_then_if_none_match_is_a_304(world, key):
    route = BY_KEY[key]
    client = route_client(route)
    first = call(client, route)
    content(first)
    assert first.status_code == 200 and first["ETag"].startswith('"')
    again = call(client, route, HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304
    assert content(again) == b"" and again["ETag"] == first["ETag"]
    # The headers the 200 carried, but no coding: a 304 has no body to code.
    for header, value in (("Cache-Control", "private, no-cache"), ("Vary", "Accept, Accept-Encoding")):
        assert first[header] == again[header] == value, header
    assert not again.has_header("Content-Encoding")


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
@pytest.mark.parametrize("key", [route.key for route in ROUTES if route.compressible])
def test_gzip_and_zstd_decode_to_the_plain_body(world, key, coding):
    route = BY_KEY[key]
    client = route_client(route)
    plain_response = call(client, route)
    assert not plain_response.has_header("Content-Encoding")
    plain = content(plain_response)
    response = call(client, route, HTTP_ACCEPT_ENCODING=coding)
    assert response.status_code == 200
    assert response["Content-Encoding"] == coding
    assert response["Content-Type"] == plain_response["Content-Type"]
    assert response["Vary"] == "Accept, Accept-Encoding"  # another Accept-Encoding, another body
    body = content(response)
    assert decompress(body, coding) == plain and len(body) < len(plain)


def bad_value(schema: dict) -> str | None:
    """A value the parameter's schema refuses: past its bounds, outside its words, of the wrong
    type, or with a NUL (no text filter takes one); None for a free text."""
    if "enum" in schema:
        return "no-such-value"
    if schema.get("type") == "integer":
        return str(schema["maximum"] + 1) if "maximum" in schema else "x"
    if schema.get("type") == "number":
        return str(schema["minimum"]) if schema.get("exclusiveMinimum") else "x"
    if schema.get("type") == "boolean":
        return "maybe"
    if schema.get("format") == "date-time":
        return "not-a-date"
    if "pattern" in schema:
        return "a\x00b"
    return None


def bounded_parameters() -> list[tuple[str, str, str]]:
    """(route, parameter, a bad value) for every bounded query parameter of every route."""
    found = []
    for route in ROUTES:
        for parameter in operation(route).get("parameters", []):
            if parameter["in"] == "query":
                value = route.bad.get(parameter["name"]) or bad_value(parameter["schema"])
                if value is not None:
                    found.append((route.key, parameter["name"], value))
    return found


@pytest.mark.parametrize(("key", "name", "value"), bounded_parameters(), ids=lambda v: repr(v)[:40])
def test_a_bad_bounded_parameter_is_a_400_with_the_error_body(world, key, name, value):
    route = BY_KEY[key]
    response = getattr(route_client(route), route.method)(address(route), {name: value})
    assert response.status_code == 400, response.content[:300]
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body and isinstance(body, dict)
    assert name in json.dumps(body), f"the 400 names the parameter: {body}"


@pytest.mark.parametrize("key", KEYS)
def test_a_throttled_token_is_a_429_with_retry_after(world, key, settings):
    route = BY_KEY[key]
    settings.CASCADE_API_RATE = "1/minute"
    client = route_client(route)
    assert call(client, route).status_code != 429
    response = call(client, route)
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    assert response.json()["detail"].startswith("Request was throttled.")
