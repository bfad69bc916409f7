"""The OpenAPI description of the Traces API, written by hand to match what the views send.

The views answer raw bytes encoded from `values_list` rows (`traces.encoders`), so there is
no serializer for drf-spectacular to read. The serializers below are never instantiated with
data: they only describe the documented shapes (the API reference's field names and order)
for `extend_schema`. `closed_objects` then forbids keys the reference does not list, so that
validating a real response against the schema catches a key added by mistake.

The schema (`/api/schema`) and Swagger UI (`/api/docs`) are public: they describe routes and
shapes, as the published reference does, and hold no data. Calling the routes from Swagger
UI still takes a token ("Authorize"). Only the Bearer scheme is described: operators' admin
sessions also work on these URLs, for the browsable API's HTML, which is not the contract.
"""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers

from traces.filters import ACCEPTS
from traces.models import TraceState


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "traces.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "`Authorization: Bearer <token>`; an operator issues tokens with "
                "`python manage.py create_token NAME` (the token is the last line it prints)."
            ),
        }


# --- the documented shapes ---------------------------------------------------------------


class ErrorSerializer(serializers.Serializer):
    """Every error of the API: one sentence."""

    detail = serializers.CharField()

    class Meta:
        ref_name = "Error"


class KernelSerializer(serializers.Serializer):
    """One kernel launch: the reference's keys, then its step and measured time (null when the
    run has no timeline.json or timing.csv). `total_insts` and `total_reported_insts` are null
    for a launch whose totals the tracer never wrote (captured into a CUDA graph, or a killed
    run's last). `device_id` and `stream_id` come last only for kernels of the tracer fork
    that records devices; every other kernel object has exactly the other keys."""

    ctx = serializers.CharField(allow_null=True, help_text="The CUDA context; null for the legacy tracer.")
    kernel_id = serializers.IntegerField(help_text="Restarts at 1 in each context (and device).")
    name = serializers.CharField()
    trace_file = serializers.CharField()
    grid_dim = serializers.ListField(child=serializers.IntegerField(), min_length=3, max_length=3)
    block_dim = serializers.ListField(child=serializers.IntegerField(), min_length=3, max_length=3)
    blocks = serializers.IntegerField()
    threads = serializers.IntegerField()
    total_insts = serializers.IntegerField(allow_null=True)
    total_reported_insts = serializers.IntegerField(allow_null=True)
    traced = serializers.BooleanField()
    step = serializers.CharField(allow_null=True, help_text="The launch's step (its name in timeline.json).")
    duration_ns = serializers.IntegerField(
        allow_null=True, help_text="The launch's measured time (timing.csv)."
    )
    device_id = serializers.IntegerField(required=False, help_text="Only the device-id fork's kernels.")
    stream_id = serializers.IntegerField(
        required=False, allow_null=True, help_text="Only the device-id fork's kernels."
    )

    class Meta:
        ref_name = "Kernel"


class TraceSummarySerializer(serializers.Serializer):
    """A trace, in any state, without its metadata and kernels."""

    id = serializers.CharField(help_text="The profiler's run name: its folder in the bucket.")
    state = serializers.ChoiceField(choices=TraceState.choices)
    error = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    model = serializers.CharField(allow_null=True)
    layers = serializers.ListField(child=serializers.CharField())
    source_gpu = serializers.CharField(allow_null=True)
    trace_gpu_arch = serializers.CharField(allow_null=True)
    suggested_sim_config = serializers.CharField(allow_null=True)
    kernel_count = serializers.IntegerField()
    bytes = serializers.IntegerField()
    has_real_timing = serializers.BooleanField()
    has_step_timeline = serializers.BooleanField()
    sample = serializers.BooleanField()

    class Meta:
        ref_name = "TraceSummary"


class TraceDetailSerializer(TraceSummarySerializer):
    """A TraceSummary, then the parsed metadata.json and every kernel launch in (ctx, kernel_id)
    order; `kernels` is empty until the trace is ready."""

    metadata = serializers.DictField(allow_null=True, help_text="metadata.json, in its own key order.")
    kernels = KernelSerializer(many=True)

    class Meta:
        ref_name = "TraceDetail"


# --- the reference's examples ------------------------------------------------------------

FAILED_SUMMARY = {
    "id": "demo-failed",
    "state": "failed",
    "error": "profiler reported status 'failed' in metadata.json",
    "created_at": "2026-11-08T08:59:02.590922Z",
    "updated_at": "2026-11-08T08:59:02.592166Z",
    "model": None,
    "layers": [],
    "source_gpu": None,
    "trace_gpu_arch": "sm_86",
    "suggested_sim_config": None,
    "kernel_count": 0,
    "bytes": 16650759,
    "has_real_timing": False,
    "has_step_timeline": False,
    "sample": False,
}
DEMO_SUMMARY = {
    "id": "demo",
    "state": "ready",
    "error": None,
    "created_at": "2026-11-08T08:59:02.587743Z",
    "updated_at": "2026-11-08T08:59:02.592073Z",
    "model": None,
    "layers": [],
    "source_gpu": None,
    "trace_gpu_arch": "sm_86",
    "suggested_sim_config": "SM86_RTX3070",
    "kernel_count": 20,
    "bytes": 16890250,
    "has_real_timing": False,
    "has_step_timeline": True,
    "sample": False,
}
SAMPLE_SUMMARY = {
    "id": "sample__facebook_opt-125m__h100-e2e",
    "state": "ready",
    "error": None,
    "created_at": "2026-11-08T06:19:57.515017Z",
    "updated_at": "2026-11-08T06:19:57.515017Z",
    "model": "facebook/opt-125m",
    "layers": ["step 0 (prefill)", "step 2 (decode)", "step 10 (decode)", "step 26 (decode)"],
    "source_gpu": "NVIDIA H100 80GB HBM3",
    "trace_gpu_arch": "sm_90",
    "suggested_sim_config": "SM90_H100",
    "kernel_count": 712,
    "bytes": 13065268,
    "has_real_timing": True,
    "has_step_timeline": True,
    "sample": True,
}
DEMO_METADATA = {
    "status": "ok",
    "files": [
        {"key": "accelsim-traces/demo/configs/config_hopper_islip.icnt", "bytes": 1352},
        {"key": "accelsim-traces/demo/configs/gpgpusim.config", "bytes": 6028},
        {"key": "accelsim-traces/demo/configs/trace.config", "bytes": 1085},
    ],
    "trace_gpu_arch": "sm_86",
    "suggested_sim_config": "SM86_RTX3070",
}


def example_kernel(kernel_id: int, *, insts: int | None = 50066, device: int | None = None) -> dict:
    kernel = {
        "ctx": "0x6165bdd7ec90",
        "kernel_id": kernel_id,
        "name": "_Z6vecAddPdS_S_i",
        "trace_file": f"kernel-{kernel_id}-ctx_0x6165bdd7ec90.trace.xz",
        "grid_dim": [98, 1, 1],
        "block_dim": [1024, 1, 1],
        "blocks": 98,
        "threads": 1024,
        "total_insts": insts,
        "total_reported_insts": insts,
        "traced": True,
        "step": "step 0 (prefill)",
        "duration_ns": None if insts is None else 2816,
    }
    if device is not None:
        kernel["device_id"] = device
        kernel["stream_id"] = 7
    return kernel


LIST_EXAMPLE = [FAILED_SUMMARY, DEMO_SUMMARY, SAMPLE_SUMMARY]
DETAIL_EXAMPLES = [
    OpenApiExample(
        "Demo",
        summary="The reference's demo (kernels trimmed)",
        value={**DEMO_SUMMARY, "metadata": DEMO_METADATA, "kernels": []},
        response_only=True,
    ),
    OpenApiExample(
        "NullTotals",
        summary="Kernels: one without totals (captured into a CUDA graph)",
        value={
            **DEMO_SUMMARY,
            "kernel_count": 2,
            "metadata": DEMO_METADATA,
            "kernels": [example_kernel(1), example_kernel(2, insts=None)],
        },
        response_only=True,
    ),
    OpenApiExample(
        "DeviceIdFork",
        summary="Kernels of the tracer fork that records devices",
        value={
            **DEMO_SUMMARY,
            "kernel_count": 2,
            "metadata": DEMO_METADATA,
            "kernels": [example_kernel(1, device=0), example_kernel(1, device=1)],
        },
        response_only=True,
    ),
]


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
    "The token made more requests than its rate allows (CASCADE_API_RATE or the token's own).",
    "Request was throttled. Expected available in 1 second.",
)

# Text filters refuse NUL (no S3 key or PostgreSQL text holds one): a 400, as the schema says.
NO_NUL = "^[^\\u0000]*$"

FILTER_PARAMETERS = [
    OpenApiParameter(
        "state", OpenApiTypes.STR, enum=TraceState.values, description=f"{ACCEPTS['state'].capitalize()}."
    ),
    OpenApiParameter(
        "model", OpenApiTypes.STR, pattern=NO_NUL, description=f"Exact match: {ACCEPTS['model']}."
    ),
    OpenApiParameter(
        "source_gpu", OpenApiTypes.STR, pattern=NO_NUL, description=f"Exact match: {ACCEPTS['source_gpu']}."
    ),
    OpenApiParameter(
        "trace_gpu_arch",
        OpenApiTypes.STR,
        pattern=NO_NUL,
        description=f"Exact match: {ACCEPTS['trace_gpu_arch']}.",
    ),
    OpenApiParameter("sample", OpenApiTypes.BOOL, description="Only the shipped samples, or none of them."),
    OpenApiParameter(
        "created_after",
        OpenApiTypes.DATETIME,
        description=f"Created at or after this instant: {ACCEPTS['created_after']}.",
    ),
    OpenApiParameter(
        "created_before",
        OpenApiTypes.DATETIME,
        description=f"Created strictly before this instant: {ACCEPTS['created_before']}.",
    ),
]

list_schema = extend_schema(
    operation_id="traces_list",
    summary="List traces",
    description=(
        "Every trace the app has registered, in every state, newest first by created_at (ties by "
        "id). A trace appears as soon as its first file lands in the bucket. The optional filters "
        "narrow the list; a value a filter cannot read is a 400 that names it, and parameters that "
        "are not filters are ignored."
    ),
    parameters=[*FILTER_PARAMETERS, CHALLENGE],
    responses={
        # Its example (the reference's list) is set by finish_schema: spectacular would wrap a list
        # example into a list of lists.
        200: TraceSummarySerializer(many=True),
        400: error_response(
            "A filter's value cannot be read.",
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
        "streamed (chunked transfer)."
    ),
    parameters=[
        OpenApiParameter(
            "trace_id",
            OpenApiTypes.STR,
            OpenApiParameter.PATH,
            description="The trace's id, which is the profiler's run name.",
            examples=[OpenApiExample("demo", value="demo")],
        ),
        CHALLENGE,
    ],
    responses={
        200: OpenApiResponse(TraceDetailSerializer, examples=DETAIL_EXAMPLES),
        401: UNAUTHORIZED,
        404: error_response("No trace has this id.", "trace nope not found"),
        429: THROTTLED,
    },
)


# --- hooks (SPECTACULAR_SETTINGS) ----------------------------------------------------------


def paths_without_slash(endpoints):
    """Preprocessing hook: `/api/traces`, as the reference writes it (the router's `/?` takes both)."""
    return [(path.rstrip("/"), regex, method, callback) for path, regex, method, callback in endpoints]


CLOSED_COMPONENTS = ("Error", "Kernel", "TraceSummary", "TraceDetail")


def finish_schema(result, generator, request, public):
    """Postprocessing hook: the documented objects have exactly the documented keys, a filter
    may be empty, and the list's example is the reference's (OpenApiParameter and
    OpenApiExample cannot say the last two)."""
    schemas = result.get("components", {}).get("schemas", {})
    for name in CLOSED_COMPONENTS:
        if name in schemas:
            schemas[name]["additionalProperties"] = False
    listing = result.get("paths", {}).get("/api/traces", {}).get("get")
    if listing is not None:
        # `?state=` (an empty value, as a blank form field sends) narrows nothing.
        for parameter in listing["parameters"]:
            if parameter["in"] == "query":
                parameter["allowEmptyValue"] = True
        listing["responses"]["200"]["content"]["application/json"]["examples"] = {
            "TracesInEachState": {"value": LIST_EXAMPLE, "summary": "Traces in each state"}
        }
    return result
