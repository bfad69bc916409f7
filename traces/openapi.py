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

from traces import http
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


class TraceTotalsSerializer(serializers.Serializer):
    """A trace's launches added up. `total_insts` is null when no launch has totals;
    `duration_ns` (measured time, summed) when no launch has a measured time."""

    id = serializers.CharField()
    kernel_count = serializers.IntegerField(help_text="Launches.")
    total_insts = serializers.IntegerField(allow_null=True)
    duration_ns = serializers.IntegerField(allow_null=True)

    class Meta:
        ref_name = "TraceTotals"


class StepTotalSerializer(serializers.Serializer):
    """One step of timeline.json, in its order, and the launches in it."""

    name = serializers.CharField()
    phase = serializers.CharField(allow_null=True, help_text="prefill or decode, as timeline.json says.")
    kernels = serializers.IntegerField(help_text="Launches in the step.")
    total_insts = serializers.IntegerField(allow_null=True)
    duration_ns = serializers.IntegerField(allow_null=True, help_text="Its launches' measured time, summed.")

    class Meta:
        ref_name = "StepTotal"


class KernelMixSerializer(serializers.Serializer):
    """One kernel name's launches in a trace. Shares are of the trace's totals; null when the
    name's sum or the trace's is null (or the trace's is 0)."""

    name = serializers.CharField()
    demangled = serializers.CharField(help_text="The name demangled; cuBLAS's unmangled names as they are.")
    launches = serializers.IntegerField()
    traced = serializers.IntegerField(help_text="Launches the tracer traced.")
    total_insts = serializers.IntegerField(allow_null=True)
    duration_ns = serializers.IntegerField(allow_null=True)
    insts_share = serializers.FloatField(allow_null=True)
    time_share = serializers.FloatField(allow_null=True)

    class Meta:
        ref_name = "KernelMix"


class TraceAnalysisSerializer(TraceTotalsSerializer):
    """A ready trace's totals, its steps (empty without timeline.json) and its kernels by name,
    the most instructions first (ties by name)."""

    steps = StepTotalSerializer(many=True)
    kernels = KernelMixSerializer(many=True)

    class Meta:
        ref_name = "TraceAnalysis"


class KernelLaunchesSerializer(serializers.Serializer):
    """A kernel's launches in one trace: 0 where the trace never launched it (duration_ns null
    instead when that trace has no measured time at all)."""

    launches = serializers.IntegerField()
    total_insts = serializers.IntegerField(allow_null=True)
    duration_ns = serializers.IntegerField(allow_null=True)

    class Meta:
        ref_name = "KernelLaunches"


class KernelRatiosSerializer(serializers.Serializer):
    """b / a; null where a is 0 or null, or b is null."""

    launches = serializers.FloatField(allow_null=True)
    total_insts = serializers.FloatField(allow_null=True)
    duration_ns = serializers.FloatField(allow_null=True)

    class Meta:
        ref_name = "KernelRatios"


class KernelComparisonSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="The kernel name, or the demangled name with by=demangled.")
    names = serializers.ListField(
        child=serializers.CharField(), help_text="The raw names this row adds up, sorted."
    )
    a = KernelLaunchesSerializer()
    b = KernelLaunchesSerializer()
    ratios = KernelRatiosSerializer()

    class Meta:
        ref_name = "KernelComparison"


class TraceComparisonSerializer(serializers.Serializer):
    """Two ready traces' totals, then a row per kernel name present in either, ordered by the
    larger of its two instruction counts, descending (ties by name)."""

    a = TraceTotalsSerializer()
    b = TraceTotalsSerializer()
    by = serializers.ChoiceField(choices=["name", "demangled"])
    kernels = KernelComparisonSerializer(many=True)

    class Meta:
        ref_name = "TraceComparison"


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
            f"by chunk as they stream; a list only when longer than {http.COMPRESS_ABOVE} bytes."
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


list_schema = extend_schema(
    operation_id="traces_list",
    summary="List traces",
    description=(
        "Every trace the app has registered, in every state, newest first by created_at (ties by "
        "id). A trace appears as soon as its first file lands in the bucket. The optional filters "
        "narrow the list; a value a filter cannot read is a 400 that names it, and parameters that "
        "are not filters are ignored."
    ),
    parameters=[*FILTER_PARAMETERS, *CACHING_PARAMETERS, CHALLENGE],
    responses={
        # Its example (the reference's list) is set by finish_schema: spectacular would wrap a list
        # example into a list of lists.
        200: TraceSummarySerializer(many=True),
        304: NOT_MODIFIED,
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
        "streamed (chunked transfer), compressed as they stream when Accept-Encoding allows "
        "(zstd or gzip). A client that keeps a copy sends its ETag in If-None-Match: a 304 "
        "answers while the trace is unchanged."
    ),
    parameters=[
        OpenApiParameter(
            "trace_id",
            OpenApiTypes.STR,
            OpenApiParameter.PATH,
            description="The trace's id, which is the profiler's run name.",
            examples=[OpenApiExample("demo", value="demo")],
        ),
        *CACHING_PARAMETERS,
        CHALLENGE,
    ],
    responses={
        200: OpenApiResponse(TraceDetailSerializer, examples=DETAIL_EXAMPLES),
        304: NOT_MODIFIED,
        401: UNAUTHORIZED,
        404: error_response("No trace has this id.", "trace nope not found"),
        429: THROTTLED,
    },
)


GEMM_EXAMPLE = (
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
)
FLASH_EXAMPLE = (
    "_ZN5flash24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi64ELi64ELi256ELi4ELb0ELb0EN7cutlass"
)
SUMMARY_EXAMPLE = {
    "id": "sample__facebook_opt-125m__h100-e2e",
    "kernel_count": 3,
    "total_insts": 2000,
    "duration_ns": 800,
    "steps": [
        {
            "name": "step 0 (prefill)",
            "phase": "prefill",
            "kernels": 3,
            "total_insts": 2000,
            "duration_ns": 800,
        }
    ],
    "kernels": [
        {
            "name": GEMM_EXAMPLE,
            "demangled": GEMM_EXAMPLE,
            "launches": 2,
            "traced": 1,
            "total_insts": 1500,
            "duration_ns": 600,
            "insts_share": 0.75,
            "time_share": 0.75,
        },
        {
            "name": "_Z6vecAddPdS_S_i",
            "demangled": "vecAdd(double*, double*, double*, int)",
            "launches": 1,
            "traced": 1,
            "total_insts": 500,
            "duration_ns": 200,
            "insts_share": 0.25,
            "time_share": 0.25,
        },
    ],
}
COMPARE_EXAMPLE = {
    "a": {"id": "h100", "kernel_count": 3, "total_insts": 2000, "duration_ns": 800},
    "b": {"id": "a100", "kernel_count": 2, "total_insts": 3000, "duration_ns": None},
    "by": "name",
    "kernels": [
        {
            "name": "_Z6vecAddPdS_S_i",
            "names": ["_Z6vecAddPdS_S_i"],
            "a": {"launches": 1, "total_insts": 500, "duration_ns": 200},
            "b": {"launches": 2, "total_insts": 3000, "duration_ns": None},
            "ratios": {"launches": 2.0, "total_insts": 6.0, "duration_ns": None},
        },
        {
            "name": GEMM_EXAMPLE,
            "names": [GEMM_EXAMPLE],
            "a": {"launches": 2, "total_insts": 1500, "duration_ns": 600},
            "b": {"launches": 0, "total_insts": 0, "duration_ns": None},
            "ratios": {"launches": 0.0, "total_insts": 0.0, "duration_ns": None},
        },
    ],
}


def trace_parameter(name: str, description: str, example: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        OpenApiTypes.STR,
        OpenApiParameter.PATH,
        description=description,
        examples=[OpenApiExample(example, value=example)],
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
        200: OpenApiResponse(
            TraceAnalysisSerializer,
            examples=[OpenApiExample("Summary", value=SUMMARY_EXAMPLE, response_only=True)],
        ),
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
            enum=["name", "demangled"],
            default="name",
            description="Match kernels by their name as traced (default) or demangled.",
        ),
        CHALLENGE,
    ],
    responses={
        200: OpenApiResponse(
            TraceComparisonSerializer,
            examples=[OpenApiExample("Comparison", value=COMPARE_EXAMPLE, response_only=True)],
        ),
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


# --- hooks (SPECTACULAR_SETTINGS) ----------------------------------------------------------


def paths_without_slash(endpoints):
    """Preprocessing hook: `/api/traces`, as the reference writes it (the router's `/?` takes both)."""
    return [(path.rstrip("/"), regex, method, callback) for path, regex, method, callback in endpoints]


CLOSED_COMPONENTS = (
    "Error",
    "Kernel",
    "TraceSummary",
    "TraceDetail",
    "TraceTotals",
    "StepTotal",
    "KernelMix",
    "TraceAnalysis",
    "KernelLaunches",
    "KernelRatios",
    "KernelComparison",
    "TraceComparison",
)


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
