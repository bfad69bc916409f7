"""The OpenAPI description of the trace routes (`/api/traces...`): each view's `extend_schema`.

The shapes are `traces.serializers` (from `traces.shapes`); the shared pieces (errors, caching
headers, the path parameter) are `traces.openapi`'s.
"""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema

from traces import analysis, selection
from traces.api_examples import KERNELS_CSV_EXAMPLE, PUSH_COMPLETE_EXAMPLES, PUSH_EXAMPLES
from traces.filters import LIMIT_MAX, PAGE_ACCEPTS
from traces.openapi import (
    CACHING_PARAMETERS,
    CHALLENGE,
    NO_SUCH_TRACE,
    NOT_MODIFIED,
    THROTTLED,
    TRACE_ID,
    UNAUTHORIZED,
    error_response,
    trace_parameter,
    trace_responses,
)
from traces.serializers import (
    PushCompleteRequestSerializer,
    PushRequestSerializer,
    SelectionSerializer,
    TraceAnalysisSerializer,
    TraceComparisonSerializer,
    TraceDetailSerializer,
    TraceFilesSerializer,
    TracePushCompleteSerializer,
    TracePushSerializer,
    TraceSummarySerializer,
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
        "answers while the trace is unchanged. Soon after a large trace becomes ready, its "
        "detail is sent from bytes written once, the same bytes with a Content-Length and "
        "`Accept-Ranges: bytes`: a Range of one span of them gets a 206 (If-Range with the "
        "ETag honoured; several spans, the whole answer), a span past the end a 416."
    ),
    parameters=[
        TRACE_ID,
        *CACHING_PARAMETERS,
        CHALLENGE,
    ],
    responses=trace_responses(TraceDetailSerializer, {304: NOT_MODIFIED}),
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
        TRACE_ID,
        CHALLENGE,
    ],
    responses=trace_responses(TraceAnalysisSerializer, {409: NOT_READY}),
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
        TRACE_ID,
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
        404: NO_SUCH_TRACE,
        409: NOT_READY,
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
        TRACE_ID,
        CHALLENGE,
    ],
    responses=trace_responses(TraceFilesSerializer),
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
        TRACE_ID,
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
        404: NO_SUCH_TRACE,
        429: THROTTLED,
    },
)


# --- a run pushed through the API (`cascade push`) ------------------------------------------------

PUSH_TRACE_ID = trace_parameter(
    "trace_id",
    "The run's id: its folder under the bucket's prefix, one plain path component (the path rule "
    "of a run's files).",
    "lab-b-run-7",
)
PUSH_FORBIDDEN = error_response(
    "A read token (pushing needs a write token), or the trace is someone else's: its owner's, or "
    "put into the bucket directly, which only staff may push to.",
    "trace lab-b-run-7 belongs to lab-b: only its owner or staff may push to it",
)
PUSH_CONFLICT = error_response(
    "The trace is ready (or being parsed): a push never replaces it.",
    "trace lab-b-run-7 is ready: a push never replaces it; push under another id (cascade push --id) "
    "or ask an operator to delete it",
)
PUSH_BODY_TOO_LARGE = error_response(
    "The request body is larger than 1 MiB.", "the request body is 2097152 bytes, more than 1048576"
)

push_schema = extend_schema(
    operation_id="traces_push_upload",
    summary="Push a run: where to PUT its files",
    description=(
        "A run's folder uploaded without the bucket's credentials (`cascade push`): presigned PUT "
        "URLs into `<prefix>/{trace_id}/` for every file named but metadata.json, valid until "
        "`expires_at`. PUT each with exactly its `headers` (the length is signed); a file of "
        "CASCADE_SIM_MULTIPART_BYTES and up is a multipart upload (PUT each part, keep its ETag). "
        "A file named with the `upload_id` an earlier answer gave continues that upload. Paths "
        "follow the path rule of a run's files; stats files and kernel lists are at most "
        "CASCADE_MAX_STATS_BYTES, metadata.json CASCADE_METADATA_MAX_BYTES. The first push to an "
        "id nothing in the bucket holds makes the token's user its `owner`; later pushes are the "
        "owner's or staff's. Then POST `.../complete`. Needs a write token."
    ),
    request=PushRequestSerializer,
    parameters=[PUSH_TRACE_ID, CHALLENGE],
    examples=PUSH_EXAMPLES,
    responses={
        200: TracePushSerializer,
        400: error_response(
            "A run id or path the path rule refuses, a size out of bounds, no metadata.json, an "
            "unknown upload_id, or a body that is not the request's shape.",
            "metadata.json is missing: ingestion starts when it lands, so it is the push's last file",
        ),
        401: UNAUTHORIZED,
        403: PUSH_FORBIDDEN,
        409: PUSH_CONFLICT,
        413: PUSH_BODY_TOO_LARGE,
        429: THROTTLED,
    },
)

push_complete_schema = extend_schema(
    operation_id="traces_push_complete",
    summary="Complete a push: metadata.json's PUT",
    description=(
        "Completes the multipart uploads listed, checks that every file named (the `/upload` "
        "request's list again) is in the bucket at its size, and only then answers metadata.json's "
        "presigned PUT: ingestion starts when metadata.json lands, so it cannot land before the "
        "rest. PUT it, then poll `url` until the trace is `ready` or `failed`; the next poll of the "
        "bucket (or its event) reads the run as any upload, and `owner` says who pushed it. Needs a "
        "write token, the owner's or staff's."
    ),
    request=PushCompleteRequestSerializer,
    parameters=[PUSH_TRACE_ID, CHALLENGE],
    examples=PUSH_COMPLETE_EXAMPLES,
    responses={
        200: TracePushCompleteSerializer,
        400: error_response(
            "A file not in the bucket at its size, a part list S3 refuses, or a body that is not "
            "the request's shape.",
            "1 file(s) have not landed whole: timing.csv (not there, not 61440); PUT them, then complete again",
        ),
        401: UNAUTHORIZED,
        403: PUSH_FORBIDDEN,
        409: PUSH_CONFLICT,
        413: PUSH_BODY_TOO_LARGE,
        429: THROTTLED,
    },
)
