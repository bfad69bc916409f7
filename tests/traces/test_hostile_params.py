"""Every route under /api/ with every parameter at hostile extremes: each answer is a 4xx, never a
500, and never seconds of CPU (issue 31: `cover=1e-10000000` cost 8.6 CPU s in `Fraction()`,
4,301 digits of `limit` were a 500, a NUL in `step` a 500). Cost is checked as work, not timed:
no text reaches `int()` or `Fraction()` that could build more than a thousand-digit integer
(traces.params); the battery prints the costliest request's CPU time, a figure, not a verdict.

The routes and their parameters come from the OpenAPI schema, and every route of the URLconf
must be exercised by the battery: a route added later is covered without a line here, and one
the schema does not describe fails `test_the_battery_covers_every_route_of_the_urlconf`.
"""

import re
import time
from urllib.parse import quote, urlencode

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from drf_spectacular.generators import SchemaGenerator

from tests.helpers import kernel_dict, store_kernels
from traces import params
from traces.models import Step, TraceState

HOSTILE = {
    "huge exponent": "1e-10000000",
    "huge positive exponent": "1e10000000",
    "long exponent": "1e-99999999999999999999",
    "10,000 digits": "9" * 10_000,
    "999 digits": "9" * 999,
    "4,301 digits": "1" * 4_301,
    "NUL": "a\x00b",
    "only NUL": "\x00",
    "100 KB": "x" * 100_000,
    "negative": "-1",
    "negative huge": "-" + "9" * 900,
    "NaN": "NaN",
    "inf": "inf",
    "-inf": "-inf",
    "fraction": "1/3",
    "underscores": "1_000",
    "unicode digits": "١٢",
}
# Values no parameter of any route may accept, whatever its type.
REFUSED_BY_EVERY_PARAMETER = {"10,000 digits", "4,301 digits", "NUL", "only NUL", "100 KB"}
# Values a path parameter (an id, a name) must refuse with a 4xx.
HOSTILE_IN_PATH = {name: HOSTILE[name] for name in ("10,000 digits", "NUL", "100 KB")}

# Routes of the URLconf the schema does not describe: the schema and its UI themselves, the
# index, and the catch-all 404. They are called with hostile parameters all the same below.
NOT_IN_SCHEMA = {"/api/schema", "/api/docs", "/api/", "/api"}

TRACE = "hostile"
PATH_VALUES = {"trace_id": TRACE, "other_id": TRACE, "name": "sim", "id": "1", "job_id": "1"}


@pytest.fixture
def ready_trace(make_trace, settings):
    settings.CASCADE_API_RATE = ""  # hundreds of requests: the throttle is not what is tested
    trace = make_trace(TRACE, state=TraceState.READY, kernel_count=1)
    Step.objects.create(trace=trace, index=0, name="s0", first_kernel_id=1, last_kernel_id=1)
    store_kernels(
        TRACE, [kernel_dict(1, ctx="0x1", name="_Z1av", grid=(1, 1, 1), block=(1, 1, 1), insts=5, step=0)]
    )
    return trace


def operations() -> list[tuple[str, str, list[dict]]]:
    """(method, path template, parameters) of every operation of the OpenAPI schema."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    found = []
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                found.append((method, path, operation.get("parameters", [])))
    return found


def url(template: str, values: dict, query: dict | None = None) -> str:
    path = template
    for name, value in values.items():
        path = path.replace("{" + name + "}", quote(value, safe=""))
    return path + ("?" + urlencode(query) if query else "")


def typed(parameter: dict) -> bool:
    """Whether the parameter accepts only a number, a boolean, a date or one of a few words:
    then no hostile value is one it accepts."""
    schema = parameter.get("schema", {})
    return schema.get("type") in {"integer", "number", "boolean"} or "enum" in schema or "format" in schema


# What `int()` and `Fraction()` may be handed and stay cheap: at most NUMBER_CHARS characters, and
# an exponent of at most three digits (10**999 is the largest integer it builds).
CHEAP_NUMBER = re.compile(r"[^eE]*(?:[eE][+-]?[0-9]{1,3})?")


@pytest.fixture
def numbers_built(monkeypatch) -> list[str]:
    """Every text traces.params turns into a number (its `int()` and `Fraction()`), in order."""
    built: list[str] = []

    def recorded(make):
        def build(text, *args):
            if isinstance(text, str):
                built.append(text)
            return make(text, *args)

        return build

    monkeypatch.setattr(params, "Fraction", recorded(params.Fraction))
    monkeypatch.setattr(params, "int", recorded(int), raising=False)
    return built


def costly(texts: list[str]) -> list[str]:
    return [
        params.shown(text)
        for text in texts
        if len(text) > params.NUMBER_CHARS or not CHEAP_NUMBER.fullmatch(text)
    ]


def timed_request(client, method: str, address: str):
    """The answer and the CPU time it took: a figure printed, never judged (a loaded machine's)."""
    start = time.process_time()
    response = getattr(client, method)(address)
    return response, time.process_time() - start


def test_every_route_and_parameter_at_hostile_extremes_is_a_cheap_4xx(api, ready_trace, numbers_built):
    failures, costs = [], []
    for method, template, parameters in operations():
        getattr(api, method)(url(template, PATH_VALUES))  # warm: imports, URL resolution
        in_path = [p["name"] for p in parameters if p["in"] == "path"]
        cases = [
            (f"{name}={label}", url(template, {**PATH_VALUES, name: value}), None)
            for name in in_path
            for label, value in HOSTILE_IN_PATH.items()
        ]
        cases += [
            (
                f"?{p['name']}={label}",
                url(template, PATH_VALUES, {p["name"]: value}),
                p["name"] if typed(p) or label in REFUSED_BY_EVERY_PARAMETER else False,
            )
            for p in parameters
            if p["in"] == "query"
            for label, value in HOSTILE.items()
        ]
        # A parameter no route reads, with each value refused everywhere.
        cases += [
            (f"?x={label}", url(template, PATH_VALUES, {"x": HOSTILE[label]}), "x")
            for label in sorted(REFUSED_BY_EVERY_PARAMETER)
        ]
        # refused: False where the value may be accepted, None where a 4xx must be, else the
        # parameter's name, which a 400 must name.
        for case, address, refused in cases:
            numbers_built.clear()
            response, cpu = timed_request(api, method, address)
            costs.append((cpu, f"{method.upper()} {template} {case}"))
            status, problem = response.status_code, None
            if status >= 500 or (refused is not False and not 400 <= status < 500):
                problem = f"status {status}"
            elif status >= 400 and response["Content-Type"] != "application/json":
                problem = f"a {status} in {response['Content-Type']}"
            elif status == 400 and refused and refused not in response.json()["detail"]:
                problem = f"a 400 that does not name {refused}: {response.json()['detail']}"
            elif numbers := costly(numbers_built):
                problem = f"a number built from {', '.join(numbers)}"
            if problem:
                failures.append(f"{method.upper()} {template} {case}: {problem}")
    assert not failures, "\n".join(failures)
    worst = max(costs)
    print(f"{len(costs)} hostile requests, the costliest {worst[0] * 1000:.1f} ms of CPU: {worst[1]}")


def urlconf_routes() -> dict[str, str]:
    """url_name -> pattern of every named route under /api/ in the URLconf."""
    routes = {}

    def walk(patterns, prefix):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                route = prefix + str(pattern.pattern)
                if route == "api" or route.startswith("api/"):
                    routes[pattern.name or route] = route

    walk(get_resolver().url_patterns, "")
    return routes


def test_the_battery_covers_every_route_of_the_urlconf(api, ready_trace, numbers_built):
    """Every route the URLconf serves under /api/ is in the schema (so in the battery above),
    or one of the few it does not describe, which are called here."""
    hit = set()
    for _method, template, _parameters in operations():
        hit.add(resolve(url(template, PATH_VALUES)).url_name)
    for path in NOT_IN_SCHEMA:
        for label in sorted(REFUSED_BY_EVERY_PARAMETER):
            response = api.get(path + "?" + urlencode({"format": HOSTILE[label]}))
            assert response.status_code == 400, (path, label, response.status_code)
            assert costly(numbers_built) == [], (path, label)
        hit.add(resolve(path).url_name)
    hit.add(resolve("/api/no/such/route").url_name)
    missing = {name: route for name, route in urlconf_routes().items() if name not in hit}
    assert not missing, f"routes under /api/ that the battery does not call: {missing}"


def test_selection_cover_with_a_huge_exponent_is_a_400_at_once(api, db, numbers_built):
    """The trace need not exist: the parameter is read first, and never made a number."""
    response = api.get("/api/traces/any/selection", {"cover": "1e-10000000"})
    assert numbers_built == []
    assert response.status_code == 400
    assert response.json() == {
        "detail": "cover accepts a number greater than 0 and at most 1; got '1e-10000000'."
    }


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"limit": "1" * 4301}, "limit accepts at most 1,000 characters (got 4,301); got '1111"),
        ({"limit": "1" * 900}, "limit accepts an integer from 1 to 1000; got '1111"),
        ({"limit": "1e3"}, "limit accepts an integer from 1 to 1000; got '1e3'."),
        ({"model": "m" * 1001}, "model accepts at most 1,000 characters (got 1,001); got 'mmm"),
    ],
)
def test_a_bounded_parameter_names_itself_and_its_bounds(api, db, params, detail):
    response = api.get("/api/traces", params)
    assert response.status_code == 400
    assert response.json()["detail"].startswith(detail)


def test_a_nul_in_step_is_a_400_not_a_database_error(api, ready_trace):
    response = api.get(f"/api/traces/{TRACE}/selection", {"by": "step", "step": "s\x000"})
    assert response.status_code == 400
    assert response.json() == {"detail": "step accepts text without NUL characters; got 's\\x000'."}


@pytest.mark.parametrize(
    ("cover", "status"),
    [("0.9", 200), (".5", 200), ("1", 200), ("1e-05", 200), ("5e-324", 200), (repr(2**-60), 200),
     ("1e-1000", 400), ("0", 400), ("1.0000001", 400), ("0x1p-1", 400), ("1/2", 400)],
)  # fmt: skip
def test_cover_reads_plain_decimals_as_a_float_s_repr_writes_them(api, ready_trace, cover, status):
    """The client sends `repr(float(cover))`: every such text in range is read."""
    assert api.get(f"/api/traces/{TRACE}/selection", {"cover": cover}).status_code == status
