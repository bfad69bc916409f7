"""The endpoint battery's table (tests/traces/test_endpoint_battery.py): every route under /api/
as the OpenAPI schema names it, how to call it on a trace that exists, and where it differs from
the rest. A route the schema gains without a row here fails the battery, naming the route.

What every route is checked for, unless its row says otherwise: no token is a 401 with the
published body and `WWW-Authenticate: Bearer` (If-None-Match and Accept-Encoding too: never a 304,
never compressed), a wrong token a 401, an unknown trace a 404 with its JSON body (If-None-Match: *
too, plain), each bounded query parameter at a bad value a 400 with an error body, a throttled
token a 429 with Retry-After. `cacheable` routes answer an ETag and `Cache-Control: private,
no-cache`, then a 304 to If-None-Match with the 200's headers and no coding; `compressible` ones
gzip and zstd, decoding to the plain body, with `Vary: Accept, Accept-Encoding`.
"""

from dataclasses import dataclass, field

# The traces and the simulation the battery's fixture makes (test_endpoint_battery.py).
TRACE = "battery"
OTHER = "battery-other"
SIMULATION = "sim-a"
UNKNOWN = "no-such-trace"
# The sweep and its job the fixture makes (ids far past any the tests' sequences reach).
SWEEP, JOB = 900_001, 900_002
PATH_VALUES = {"trace_id": TRACE, "other_id": OTHER, "name": SIMULATION, "id": str(SWEEP), "job_id": str(JOB)}
# What an upload asks for: a log and simulation.json (ingest/uploads.py).
UPLOAD_FILES = [{"name": "sim.log", "size": 10}, {"name": "simulation.json", "size": 10}]
# What a push asks for: a stats file and metadata.json (ingest/pushes.py).
PUSH_FILES = [{"name": "traces/stats.csv", "size": 10}, {"name": "metadata.json", "size": 10}]


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # the schema's template
    ok: int = 200  # what a good request answers
    names_a_trace: bool = True  # an unknown {trace_id} is a 404 "trace ... not found"
    names_a_sweep: bool = False  # an unknown {id} is a 404 "sweep ... not found" (or its job's)
    cacheable: bool = False  # an ETag, then If-None-Match is a 304 (the schema lists a 304)
    compressible: bool = False  # gzip and zstd decode to the plain body
    write: bool = False  # needs a token issued with --scope write
    needs_s3: bool = False  # asks the bucket (presigned URLs)
    body: dict | None = None  # a POST's JSON body
    # A bounded parameter's bad value where the schema's type alone does not give one.
    bad: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.method.upper()} {self.path}"


ROUTES = [
    Route("get", "/api/traces", names_a_trace=False, cacheable=True, compressible=True),
    Route("get", "/api/traces/{trace_id}", cacheable=True, compressible=True),
    Route("get", "/api/traces/{trace_id}/compare/{other_id}"),
    # /files answers presigned URLs, which it asks of the bucket.
    Route("get", "/api/traces/{trace_id}/files", needs_s3=True),
    Route("get", "/api/traces/{trace_id}/kernels.csv", cacheable=True, compressible=True),
    Route("get", "/api/traces/{trace_id}/selection"),
    Route("get", "/api/traces/{trace_id}/simulations"),
    Route("get", "/api/traces/{trace_id}/simulations/{name}", compressible=True),
    Route("get", "/api/traces/{trace_id}/summary"),
    Route("get", "/api/simulations", names_a_trace=False),
    Route("get", "/api/simulations/accuracy", names_a_trace=False),
    # The uploads: a write token, a JSON body, the bucket.
    Route(
        "post",
        "/api/traces/{trace_id}/simulations/{name}/upload",
        write=True,
        needs_s3=True,
        body={"files": UPLOAD_FILES},
    ),
    Route(
        "post",
        "/api/traces/{trace_id}/simulations/{name}/complete",
        ok=400,  # nothing was uploaded: completing says so (ingest/uploads.py)
        write=True,
        needs_s3=True,
        body={},
    ),
    # A push: an unknown id is a new run, and the battery's trace is ready, which no push replaces.
    Route(
        "post",
        "/api/traces/{trace_id}/upload",
        ok=409,
        names_a_trace=False,
        write=True,
        needs_s3=True,
        body={"files": PUSH_FILES},
    ),
    Route(
        "post",
        "/api/traces/{trace_id}/complete",
        ok=409,
        names_a_trace=False,
        write=True,
        needs_s3=True,
        body={"files": PUSH_FILES},
    ),
]
# Sweeps: a write token creates one, and a worker's reports; the job of the fixture's sweep is
# queued, so its progress and its finish are a stale attempt's 409.
SWEEP_BODY = {"name": "battery", "trace_ids": [TRACE], "configs": ["SM75_RTX2060"]}
ROUTES += [
    Route("get", "/api/sweeps", names_a_trace=False),
    Route("post", "/api/sweeps", ok=201, names_a_trace=False, write=True, body=SWEEP_BODY),
    Route("get", "/api/sweeps/{id}", names_a_trace=False, names_a_sweep=True),
    Route("get", "/api/sweeps/{id}/accuracy", names_a_trace=False, names_a_sweep=True),
    *(
        Route(
            "post",
            f"/api/sweeps/{{id}}/jobs/{{job_id}}/{step}",
            ok=ok,
            names_a_trace=False,
            names_a_sweep=True,
            write=True,
            body=body,
        )
        for step, ok, body in (
            ("start", 200, {"host": "battery", "process": 1}),
            ("progress", 409, {"attempt": 1, "kernels_finished": 0, "kernels_listed": 1}),
            ("finish", 409, {"attempt": 1, "state": "ready"}),
        )
    ),
]
BY_KEY = {route.key: route for route in ROUTES}
