"""The OpenAPI description of the Traces API: what drf-spectacular cannot read from the code.

The shapes are `traces.serializers` (a trace's fields from the Trace model) and the list's
filters the viewset's `filterset_class`; written here are the prose, the examples, the headers
(caching, compression, the Bearer challenge) and the errors. `finish_schema` then forbids keys
the reference does not list, so that validating a real response against the schema catches a
key added by mistake.

The schema (`/api/schema`) and Swagger UI (`/api/docs`) are public: they describe routes and
shapes, as the published reference does, and hold no data. Calling the routes from Swagger
UI still takes a token ("Authorize"). Only the Bearer scheme is described: operators' admin
sessions also work on these URLs, for the browsable API's HTML, which is not the contract.
"""

import threading

from django import forms
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils import translation
from django.utils.html import format_html
from drf_spectacular.contrib.django_filters import DjangoFilterExtension
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from traces import accuracy, analysis, http, selection
from traces.api_examples import (
    ACCURACY_EXAMPLE,
    KERNELS_CSV_EXAMPLE,
    LIST_EXAMPLE,
    SIMULATION_COMPLETE_EXAMPLES,
    SIMULATION_LIST_EXAMPLE,
    SIMULATION_UPLOAD_EXAMPLES,
    SIMULATIONS_EXAMPLE,
)
from traces.filters import LIMIT_MAX, PAGE_ACCEPTS
from traces.serializers import (
    ErrorSerializer,
    SelectionSerializer,
    SimulationAccuracySerializer,
    SimulationCompleteRequestSerializer,
    SimulationCompleteSerializer,
    SimulationDetailSerializer,
    SimulationListItemSerializer,
    SimulationSummarySerializer,
    SimulationUploadRequestSerializer,
    SimulationUploadSerializer,
    TraceAnalysisSerializer,
    TraceComparisonSerializer,
    TraceDetailSerializer,
    TraceFilesSerializer,
    TraceSummarySerializer,
)


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "traces.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "`Authorization: Bearer <token>`; an operator issues tokens with "
                "`python manage.py create_token NAME` (the token is the last line it prints); "
                "uploading a simulation needs one issued with `--scope write`."
            ),
        }


# Text filters refuse NUL, as Django's CharField does (no S3 key or PostgreSQL text holds one).
NO_NUL = "^[^\\u0000]*$"


class TraceFilterParameters(DjangoFilterExtension):
    """The list's query parameters from the viewset's `filterset_class`, with what
    drf-spectacular cannot see there: the description is the filter's help_text as written
    (no list of choices appended), a text filter's value has no NUL (else a 400), and an
    empty value (`?state=`, as a blank form field sends) narrows nothing."""

    priority = 1

    def resolve_filter_field(self, auto_schema, model, filterset_class, field_name, filter_field):
        parameters = super().resolve_filter_field(
            auto_schema, model, filterset_class, field_name, filter_field
        )
        for parameter in parameters:
            parameter["description"] = filter_field.extra["help_text"]
            if issubclass(filter_field.field_class, forms.CharField):
                parameter["schema"]["pattern"] = NO_NUL
            parameter["allowEmptyValue"] = True
        return parameters


def error_response(description: str, example: str) -> OpenApiResponse:
    return OpenApiResponse(
        ErrorSerializer,
        description=description,
        examples=[OpenApiExample("Error", value={"detail": example}, response_only=True)],
    )


UNAUTHORIZED = error_response(
    "The Authorization header is missing, is not Bearer <token>, or the token is wrong "
    "(with WWW-Authenticate: Bearer).",
    "Authentication credentials were not provided.",
)
# DRF's 401 names the scheme to use, as the reference says.
CHALLENGE = OpenApiParameter(
    "WWW-Authenticate",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    response=[401],
    enum=["Bearer"],
    required=True,
    description="Always `Bearer`.",
)
THROTTLED = error_response(
    "The token made more requests than its rate allows (CASCADE_API_RATE or the token's own), or "
    "the client's address more without valid credentials than CASCADE_ANON_RATE.",
    "Request was throttled. Expected available in 1 second.",
)

# --- caching and compression (traces.http) -------------------------------------------------------

CACHING_PARAMETERS = [
    OpenApiParameter(
        "If-None-Match",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        description=(
            "ETags of copies the client holds (a list, `W/` prefixes and `*` accepted): when one "
            "is the current representation's, in any content coding, the answer is a 304 "
            "without a body (a detail's kernels are then not even read)."
        ),
    ),
    OpenApiParameter(
        "Accept-Encoding",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        description=(
            "`zstd` and `gzip` are served (zstd when both are accepted with the same q; q=0 "
            "refuses a coding; without the header, none). Large details are compressed chunk "
            f"by chunk as they stream; a list only of more than {http.COMPRESS_TRACES_ABOVE} traces."
        ),
    ),
    OpenApiParameter(
        "ETag",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        response=[200, 304],
        description=(
            'Strong, one per content coding (`"<digest>"`, `"<digest>-gzip"`, '
            '`"<digest>-zstd"`). It changes when the answer\'s content does: for a detail, '
            "whenever the trace row changes (every change of a trace or its kernels updates its "
            "`updated_at`); for a list, whenever its JSON does (a trace added, changed, deleted or "
            "filtered in or out)."
        ),
    ),
    OpenApiParameter(
        "Cache-Control",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        response=[200, 304],
        enum=[http.CACHE_CONTROL],
        description="Keep it for this client only, and ask again (If-None-Match) before using it.",
    ),
    OpenApiParameter(
        "Content-Encoding",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        response=[200],
        enum=list(http.CODINGS),
        description="The coding Accept-Encoding chose; absent when the body is plain JSON.",
    ),
    OpenApiParameter(
        "Vary",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        response=[200, 304],
        description="`Accept, Accept-Encoding`: JSON or the browsable API's HTML, plain or compressed.",
    ),
]
NOT_MODIFIED = OpenApiResponse(
    description=(
        "If-None-Match names the current representation: no body; ETag, Cache-Control and Vary "
        "as the 200 would carry them."
    )
)


def trace_parameter(name: str, description: str, example: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        OpenApiTypes.STR,
        OpenApiParameter.PATH,
        description=description,
        examples=[OpenApiExample(example, value=example)],
    )


# Pages of the list (traces.filters.trace_list_page): optional, GitHub's Link convention.
LIST_PAGE_PARAMETERS = [
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": LIMIT_MAX},
        OpenApiParameter.QUERY,
        description=(
            f"At most this many traces ({PAGE_ACCEPTS['limit']}); without it, every trace. Any "
            "other value is a 400."
        ),
    ),
    OpenApiParameter(
        "after",
        OpenApiTypes.STR,
        OpenApiParameter.QUERY,
        description=(
            "Only the traces after this cursor in the list's order: an opaque value, taken from "
            "the `Link` header of the previous page. One this API did not write is a 400."
        ),
    ),
    OpenApiParameter(
        "Link",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        response=[200],
        description=(
            '`<URL>; rel="next"` when more traces follow this page: this URL with the same '
            "filters and `limit` and the next `after`. Absent on the last page and without `limit`."
        ),
    ),
]

list_schema = extend_schema(
    operation_id="traces_list",
    summary="List traces",
    description=(
        "Every trace the app has registered, in every state, newest first by created_at (ties by "
        "id). A trace appears as soon as its first file lands in the bucket. The optional filters "
        "narrow the list; a value a filter cannot read is a 400 that names it, and so is a parameter "
        "the list does not know (a typo such as `stat=ready` must not answer every trace). Without `limit` the answer is every trace (streamed when "
        "large); with it, a page, and a `Link` header to the next one while rows follow."
    ),
    parameters=[*CACHING_PARAMETERS, *LIST_PAGE_PARAMETERS, CHALLENGE],
    responses={
        # Its example (the reference's list) is set by finish_schema: spectacular would wrap a list
        # example into a list of lists.
        200: TraceSummarySerializer(many=True),
        304: NOT_MODIFIED,
        400: error_response(
            "A filter's value cannot be read, or a parameter is not one the list knows.",
            "sample accepts true or false (also 1 or 0); got 'yes'.",
        ),
        401: UNAUTHORIZED,
        429: THROTTLED,
    },
)

retrieve_schema = extend_schema(
    operation_id="traces_retrieve",
    summary="Get a trace",
    description=(
        "One trace with the parsed metadata.json and every kernel launch read from its "
        "stats_ctx_* files. `kernels` stays empty until the trace is ready. Large traces are "
        "streamed (chunked transfer), compressed as they stream when Accept-Encoding allows "
        "(zstd or gzip). A client that keeps a copy sends its ETag in If-None-Match: a 304 "
        "answers while the trace is unchanged."
    ),
    parameters=[
        trace_parameter("trace_id", "The trace's id, which is the profiler's run name.", "demo"),
        *CACHING_PARAMETERS,
        CHALLENGE,
    ],
    responses={
        200: TraceDetailSerializer,
        304: NOT_MODIFIED,
        401: UNAUTHORIZED,
        404: error_response("No trace has this id.", "trace nope not found"),
        429: THROTTLED,
    },
)


NOT_READY = error_response(
    "The trace is uploading, parsing or failed: it has no parsed kernels to add up.",
    "trace demo is parsing",
)

summary_schema = extend_schema(
    operation_id="traces_summary",
    summary="Summarize a trace",
    description=(
        "A ready trace's launches added up: totals, per step of timeline.json (empty without "
        "one), and per kernel name with its traced launches and its share of the trace's "
        "instructions and measured time. Nulls where the run has no timing (timing.csv) or no "
        "totals; computed in the database, whatever the launch count."
    ),
    parameters=[
        trace_parameter("trace_id", "The trace's id, which is the profiler's run name.", "demo"),
        CHALLENGE,
    ],
    responses={
        200: TraceAnalysisSerializer,
        401: UNAUTHORIZED,
        404: error_response("No trace has this id.", "trace nope not found"),
        409: NOT_READY,
        429: THROTTLED,
    },
)

compare_schema = extend_schema(
    operation_id="traces_compare",
    summary="Compare two traces",
    description=(
        "Trace `other_id` (b) against trace `trace_id` (a), kernel by kernel: launches, "
        "instructions and measured time in each (0 where a trace never launched the kernel) and "
        "b/a ratios (null where a is 0 or null). `?by=demangled` matches kernels by demangled "
        "name, merging symbols that demangle alike."
    ),
    parameters=[
        trace_parameter("trace_id", "Trace a: the ratios' denominators.", "demo"),
        trace_parameter("other_id", "Trace b.", "demo"),
        OpenApiParameter(
            "by",
            OpenApiTypes.STR,
            enum=analysis.COMPARE_BY,
            default=analysis.BY_NAME,
            description="Match kernels by their name as traced (default) or demangled.",
        ),
        CHALLENGE,
    ],
    responses={
        200: TraceComparisonSerializer,
        400: error_response(
            "`by` is neither name nor demangled.", "by must be one of name, demangled, not 'x'"
        ),
        401: UNAUTHORIZED,
        404: error_response(
            "No trace has one of the ids (the first missing is named).", "trace nope not found"
        ),
        409: NOT_READY,
        429: THROTTLED,
    },
)


selection_schema = extend_schema(
    operation_id="traces_selection",
    summary="Representative kernels",
    description=(
        "A ready trace's launches (or one step's) grouped by the work they do: one kernel name, "
        "grid and block, instruction counts within `tolerance` above the group's smallest (launches "
        "without counts together). Each group names the launch to simulate for it (traced when the "
        "group has a traced launch, the nearest its median count), its `count` (the weight), "
        "instructions, measured time and share of the run's time (else instructions, `basis`), "
        "the largest share first, cut at `cover`. The run's time is estimated as the sum over groups "
        "of count times the representative's simulated time. Large answers are streamed, "
        "compressed as they stream when Accept-Encoding allows (zstd or gzip)."
    ),
    parameters=[
        trace_parameter("trace_id", "The trace's id, which is the profiler's run name.", "demo"),
        OpenApiParameter(
            "by",
            OpenApiTypes.STR,
            enum=selection.SELECT_BY,
            default=selection.BY_UNIQUE,
            description="Every launch of the run (default), or one step's (`step`).",
        ),
        OpenApiParameter(
            "step",
            OpenApiTypes.STR,
            description="With by=step only: the step's name in timeline.json (the detail's `step`).",
        ),
        OpenApiParameter(
            "cover",
            {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1},
            default=1.0,
            description=(
                "Greater than 0, at most 1: the fewest largest groups whose shares reach it (1: every group)."
            ),
        ),
        OpenApiParameter(
            "members",
            OpenApiTypes.BOOL,
            default=True,
            description="false (or 0) leaves out each group's `members`.",
        ),
        CHALLENGE,
    ],
    responses={
        200: SelectionSerializer,
        400: error_response(
            "`by` is neither unique nor step, `step` is missing or not one of the trace's steps with "
            "by=step (or given without it), or `cover` or `members` cannot be read.",
            "cover accepts a number greater than 0 and at most 1; got '1.5'.",
        ),
        401: UNAUTHORIZED,
        404: error_response("No trace has this id.", "trace nope not found"),
        409: NOT_READY,
        429: THROTTLED,
    },
)


# --- simulations ------------------------------------------------------------------------------

SIMULATION_FILTER_400 = error_response(
    "A filter's value cannot be read, or a parameter is not one the list knows.",
    "state accepts one of uploading, parsing, ready, failed; got 'done'.",
)

trace_simulations_schema = extend_schema(
    operation_id="traces_simulations_list",
    # A list, but of one trace's simulations: the trace list's filters are not its parameters.
    filters=False,
    summary="List a trace's simulations",
    description=(
        "Every simulation of the trace (`<run>/simulations/<name>/` in the bucket), in every "
        "state, newest first by created_at (ties by name). `metrics` is null until a simulation "
        "is ready."
    ),
    parameters=[
        trace_parameter("trace_id", "The trace's id, which is the profiler's run name.", "demo"),
        CHALLENGE,
    ],
    responses={
        200: SimulationSummarySerializer(many=True),
        401: UNAUTHORIZED,
        404: error_response("No trace has this id.", "trace nope not found"),
        429: THROTTLED,
    },
)

simulation_schema = extend_schema(
    operation_id="traces_simulations_retrieve",
    summary="Get a simulation",
    description=(
        "One simulation of the trace: its summary, the launches a cycle limit stopped "
        "(`interrupted`), its accuracy per step of the trace and per kernel family, and every "
        "simulated launch in the trace's order (ctx, kernel_id), each beside its measured time. "
        "Large simulations are streamed (chunked transfer), compressed as they stream when "
        "Accept-Encoding allows (zstd or gzip)."
    ),
    parameters=[
        trace_parameter("trace_id", "The trace's id, which is the profiler's run name.", "demo"),
        OpenApiParameter(
            "name",
            OpenApiTypes.STR,
            OpenApiParameter.PATH,
            description="The simulation's folder name under <run>/simulations/.",
            examples=[OpenApiExample("accelsim-SM90_H100", value="accelsim-SM90_H100")],
        ),
        CHALLENGE,
    ],
    responses={
        200: SimulationDetailSerializer,
        401: UNAUTHORIZED,
        404: error_response(
            "No trace has this id, or the trace no simulation of this name.",
            "simulation nope of trace demo not found",
        ),
        429: THROTTLED,
    },
)

simulations_schema = extend_schema(
    operation_id="simulations_list",
    summary="List simulations",
    description=(
        "Every simulation of every trace, newest first by created_at (ties by trace and name), "
        "each after its trace's id. The optional filters narrow the list; a value a filter cannot "
        "read is a 400 that names it."
    ),
    parameters=[CHALLENGE],
    responses={
        200: SimulationListItemSerializer(many=True),
        400: SIMULATION_FILTER_400,
        401: UNAUTHORIZED,
        429: THROTTLED,
    },
)

accuracy_schema = extend_schema(
    operation_id="simulations_accuracy",
    filters=True,  # the list's filters narrow the simulations added up
    summary="Accuracy by simulator build or config",
    description=(
        "One row per simulator build (or config, `by=config`) over its ready simulations among "
        "those the filters select: how many simulations and traces, and MAPE, aggregate error and "
        "Pearson's r pooled over every launch they compared (not a mean of their simulations'). "
        "The most accurate (lowest MAPE) first; builds with nothing compared last."
    ),
    parameters=[
        OpenApiParameter(
            "by",
            OpenApiTypes.STR,
            enum=accuracy.ACCURACY_BY,
            default=accuracy.ACCURACY_BY[0],
            description="Group by the Accel-Sim build (default) or the simulator config.",
        ),
        CHALLENGE,
    ],
    responses={
        200: SimulationAccuracySerializer(many=True),
        400: error_response(
            "`by` is neither simulator_build nor config, or a filter's value cannot be read.",
            "by must be one of simulator_build, config, not 'x'",
        ),
        401: UNAUTHORIZED,
        429: THROTTLED,
    },
)


# --- a trace's downloads (traces.files, kernels.csv) ------------------------------------------------

files_schema = extend_schema(
    operation_id="traces_files",
    summary="Download a trace's files",
    description=(
        "The run's files, each with a presigned S3 GET valid until `expires_at` "
        "(CASCADE_PRESIGN_SECONDS, an hour by default): download them from the bucket with no "
        "Authorization header; no byte of them passes through Cascade. The files metadata.json "
        "lists and metadata.json itself (for a run without a list, every file of its folder), "
        "never its `simulations/` folder, in path order, from the trace's last listing: a trace "
        "still uploading answers with what has landed. `etag` is S3's, quotes included, to check "
        "a download against."
    ),
    parameters=[
        trace_parameter("trace_id", "The trace's id, which is the profiler's run name.", "demo"),
        CHALLENGE,
    ],
    responses={
        200: TraceFilesSerializer,
        401: UNAUTHORIZED,
        404: error_response("No trace has this id.", "trace nope not found"),
        429: THROTTLED,
    },
)

kernels_csv_schema = extend_schema(
    operation_id="traces_kernels_csv",
    summary="A trace's launches as CSV",
    description=(
        "Every launch of the detail's `kernels`, in its order, as CSV for pandas "
        '(`pandas.read_csv(url, storage_options={"Authorization": "Bearer ..."})`): a header '
        "row, the detail's keys with grid and block unfolded (`grid_x`...`block_z`), `traced` as "
        "`true`/`false`, an empty field for null (and for `device`, `stream` outside the "
        "device-id fork). Quoted as Python's csv module does (a name with a comma, a quote or a "
        "line break). A text field (`ctx`, `name`, `trace_file`, `step`) that starts with `=`, "
        "`+`, `-`, `@`, a tab or a carriage return, which a spreadsheet would run as a formula, "
        "is written after a `'` (OWASP's CSV injection rule) unless `raw=1`. Streamed, compressed "
        "as it streams (zstd or gzip), with the detail's ETag rules: a 304 while the trace is "
        "unchanged. Only the header until the trace is ready."
    ),
    parameters=[
        trace_parameter("trace_id", "The trace's id, which is the profiler's run name.", "demo"),
        OpenApiParameter(
            "raw",
            OpenApiTypes.INT,
            OpenApiParameter.QUERY,
            enum=[0, 1],
            default=0,
            description="1: text fields as stored, formula-like cells not neutralised (for pandas "
            "and other tools that read text, never for a spreadsheet).",
        ),
        *CACHING_PARAMETERS,
        OpenApiParameter(
            "Content-Disposition",
            OpenApiTypes.STR,
            OpenApiParameter.HEADER,
            response=[200],
            description='`attachment; filename="<trace_id>.csv"` (RFC 6266).',
        ),
        CHALLENGE,
    ],
    responses={
        (200, "text/csv"): OpenApiResponse(
            OpenApiTypes.STR,
            description="The launches, a header row first.",
            examples=[OpenApiExample("Two launches", value=KERNELS_CSV_EXAMPLE, response_only=True)],
        ),
        304: NOT_MODIFIED,
        401: UNAUTHORIZED,
        400: error_response("`raw` is neither 0 nor 1.", "raw must be 0 or 1, not 'yes'"),
        404: error_response("No trace has this id.", "trace nope not found"),
        429: THROTTLED,
    },
)


SIMULATION_NAME = OpenApiParameter(
    "name",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="The simulation's folder under <run>/simulations/: letters, digits, '.', '_', '-', at most 100.",
    examples=[OpenApiExample("accelsim-SM86_RTX3070", value="accelsim-SM86_RTX3070")],
)
WRITE_FORBIDDEN = error_response(
    "The token's scope is read: uploading needs a write token.",
    "this token's scope is read: uploading a simulation needs a write token "
    "(manage.py create_token NAME --scope write)",
)
UPLOAD_NOT_READY = error_response(
    "The trace is not ready (its state is said).",
    "trace demo-arriving is uploading: a simulation is uploaded once its trace is ready",
)
BODY_TOO_LARGE = error_response(
    "The request body is larger than 1 MiB.", "the request body is 2097152 bytes, more than 1048576"
)

simulation_upload_schema = extend_schema(
    operation_id="traces_simulations_upload",
    summary="Upload a simulation: where to PUT its files",
    description=(
        "Presigned PUT URLs into the trace's `simulations/{name}/` for the files named, valid "
        "until `expires_at` (CASCADE_PRESIGN_SECONDS): PUT each with exactly its `headers` (the "
        "length is signed), `simulation.json` last, then POST `.../complete`. A file of "
        "CASCADE_SIM_MULTIPART_BYTES (64 MiB) and up is an S3 multipart upload instead: PUT each "
        "part (`part_size` bytes, the last what remains) to its URL and keep each answer's ETag "
        "for the completion. A folder that holds a simulation of that name is replaced: its "
        "simulation.json and every file not named here are deleted now. Needs a write token."
    ),
    request=SimulationUploadRequestSerializer,
    parameters=[
        trace_parameter("trace_id", "The trace's id, which is the profiler's run name.", "demo"),
        SIMULATION_NAME,
        CHALLENGE,
    ],
    examples=SIMULATION_UPLOAD_EXAMPLES,
    responses={
        200: SimulationUploadSerializer,
        400: error_response(
            "A bad name, a file name the folder does not accept, a size out of bounds, no "
            "simulation.json, or a body that is not the request's shape.",
            "simulation.json is missing: it is the folder's completion marker, uploaded last",
        ),
        401: UNAUTHORIZED,
        403: WRITE_FORBIDDEN,
        404: error_response("No trace has this id.", "trace nope not found"),
        409: UPLOAD_NOT_READY,
        413: BODY_TOO_LARGE,
        429: THROTTLED,
    },
)

simulation_complete_schema = extend_schema(
    operation_id="traces_simulations_complete",
    summary="Complete a simulation's upload: read it at once",
    description=(
        "Completes the multipart uploads listed (none, or no `multipart`, when every file was one "
        "PUT), registers the simulation's folder and has it read at once, in the background; "
        "answers the simulation's state now (`uploading` until its read begins) and its URL: poll "
        "that until the state is `ready` or `failed`. Needs a write token."
    ),
    request=SimulationCompleteRequestSerializer,
    parameters=[
        trace_parameter("trace_id", "The trace's id, which is the profiler's run name.", "demo"),
        SIMULATION_NAME,
        CHALLENGE,
    ],
    examples=SIMULATION_COMPLETE_EXAMPLES,
    responses={
        202: SimulationCompleteSerializer,
        400: error_response(
            "A bad name, a part list S3 refuses (no such upload, a wrong ETag), nothing uploaded "
            "to the folder, or a body that is not the request's shape.",
            "sim.log.xz: S3 refused to complete the upload: NoSuchUpload: The specified upload does not exist.",
        ),
        401: UNAUTHORIZED,
        403: WRITE_FORBIDDEN,
        404: error_response("No trace has this id.", "trace nope not found"),
        409: UPLOAD_NOT_READY,
        413: BODY_TOO_LARGE,
        429: THROTTLED,
    },
)

# --- hooks (SPECTACULAR_SETTINGS) ----------------------------------------------------------


def paths_without_slash(endpoints):
    """Preprocessing hook: `/api/traces`, as the reference writes it (the router's `/?` takes both)."""
    return [(path.rstrip("/"), regex, method, callback) for path, regex, method, callback in endpoints]


def finish_schema(result, generator, request, public):
    """Postprocessing hook: the documented objects have exactly the documented keys, and the
    lists' examples are set (the traces list's is the reference's)."""
    schemas = result.get("components", {}).get("schemas", {})
    for schema in schemas.values():
        if schema.get("type") == "object":
            schema["additionalProperties"] = False
    lists = {
        "/api/traces": ("TracesInEachState", LIST_EXAMPLE, "Traces in each state"),
        "/api/traces/{trace_id}/simulations": (
            "Simulations",
            SIMULATIONS_EXAMPLE,
            "A ready simulation, one arriving",
        ),
        "/api/simulations": ("Simulations", SIMULATION_LIST_EXAMPLE, "A ready simulation, one arriving"),
        "/api/simulations/accuracy": (
            "TwoBuilds",
            ACCURACY_EXAMPLE,
            "Two Accel-Sim builds, the more accurate first",
        ),
    }
    for path, (name, value, summary) in lists.items():
        listing = result.get("paths", {}).get(path, {}).get("get")
        if listing is not None:
            listing["responses"]["200"]["content"]["application/json"]["examples"] = {
                name: {"value": value, "summary": summary}
            }
    return result


# --- the schema, built once per process ---------------------------------------------------------

_schemas: dict[tuple, dict] = {}
_schemas_lock = threading.Lock()


def api_schema(version: str | None = None) -> dict:
    """The OpenAPI schema, generated once per process (and API version, and language): it
    depends on the code alone, and a build costs 60-80 ms of CPU that every `/api/schema`
    request paid. Built without a request: it names no host."""
    key = (version, translation.get_language())
    with _schemas_lock:  # one build, not one per thread that asks at start-up
        if key not in _schemas:
            _schemas[key] = SchemaGenerator(api_version=version).get_schema(request=None, public=True)
        return _schemas[key]


@receiver(setting_changed)
def forget_schemas(**kwargs) -> None:
    """A test that changes a setting gets the schema those settings give."""
    with _schemas_lock:
        _schemas.clear()


class CachedSchemaView(SpectacularAPIView):
    """`/api/schema`: drf-spectacular's view, answering the schema `api_schema` keeps."""

    def _get_schema_response(self, request):
        version = self.api_version or request.version or self._get_version_parameter(request)
        return Response(
            data=api_schema(version),
            headers={"Content-Disposition": f'inline; filename="{self._get_filename(request, version)}"'},
        )


def api_paths() -> list[str]:
    """Every route the schema describes, sorted: `/api/traces`, `/api/traces/{trace_id}`, ..."""
    return sorted(api_schema()["paths"])


TRACE_ROUTE = "/api/traces/{trace_id}"


def routes_under_a_trace() -> list[str]:
    """What follows `/api/traces/{trace_id}` in its routes: `/compare/{other_id}`, `/files`, ..."""
    return [path.removeprefix(TRACE_ROUTE) for path in api_paths() if path.startswith(TRACE_ROUTE + "/")]


class ApiIndexView(APIView):
    """`/api/`: the routes, each with its methods, summary and a link (the browsable API renders
    the links). Public, as the schema: it holds no data."""

    permission_classes = [AllowAny]

    def get_view_name(self):
        return "Cascade API"

    def get_view_description(self, html=False):
        text = "The routes of the API; Authorization: Bearer <token> for each (not for this index)."
        return format_html("<p>{}</p>", text) if html else text

    @extend_schema(exclude=True)  # not a route of the reference: the index of those that are
    def get(self, request):
        paths = api_schema()["paths"]
        origin = request.build_absolute_uri("/").removesuffix("/")
        routes = [
            {
                "path": path,
                # `{trace_id}` left as written (not %7B...%7D): a template to fill in.
                "url": origin + path,
                "methods": [method.upper() for method in item if method in HTTP_METHODS],
                "summary": next((item[m].get("summary", "") for m in item if m in HTTP_METHODS), ""),
            }
            for path, item in sorted(paths.items())
        ]
        return Response(
            {
                "routes": routes,
                "schema": origin + "/api/schema",
                "docs": origin + "/api/docs",
            }
        )


HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head")
