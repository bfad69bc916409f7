"""Each JSON answer's shape, declared once, in one module past 500 lines because it is data whose
shapes nest one another and share one registry (`SHAPES`): its fields in order, their types, a
line each.

What is derived from here: the selectors' column tuples (`Shape.columns`), the encoders' key
order and indices, the OpenAPI components (`traces.serializers.serializer_for` builds a DRF
serializer class from a shape, never instantiated on a hot path), the examples' keys and, where
an example does not say, their values (`Field.example_value`), docs/api.md's list of the trace's
added keys, the help text of the published Trace fields that have one (`traces.models` reads the
`doc`), and the bench's reference SQL of a detail (`bench.harness.json_agg_sql`). The encoders
stay hand-written for speed: a shape says what an answer holds, an encoder how it is built from
a row. Nothing of Django is imported here, so `python -m cascade.api_docs` runs without it.

Adding a field to the trace list and detail, of a kind served as stored (string, integer, int64,
number, boolean), takes three steps:
1. the field on `Trace` in traces/models/trace.py, `help_text=TRACE_DETAIL.field("<name>").doc` if it
   has a doc, and `db_default` beside `default` if it is NOT NULL (the benches' seeders insert
   trace rows by SQL); then `python manage.py makemigrations traces`;
2. one `stored(...)` line at the end of `TRACE_ADDED` (no `example=`: the examples take the
   kind's plain value, `Field.example_value`);
3. `python -m cascade.api_docs`, which rewrites docs/api.md's examples and list of added keys.
It then appears in the list, the detail (after `kernels`), the schema, the docs and the bench's
reference SQL; the tests that list keys or columns take it from here. tests/traces/test_shapes.py
does exactly this for an integer in a scratch copy and runs those tests. A timestamp also needs
its text form in the list's rows (`traces.selectors._LIST_TEXT`).
"""

import copy
from dataclasses import dataclass

# Kinds, as OpenAPI writes them.
STRING = "string"
INTEGER = "integer"  # a plain JSON integer
INT64 = "int64"  # a count or size that passes 2**31 (format int64, as the model's BigIntegerField)
NUMBER = "number"
BOOLEAN = "boolean"
DATETIME = "date-time"  # `2026-11-08T08:59:02.590922Z` (`encoders.format_timestamp`)
URI = "uri"  # a URL (a presigned GET)
OBJECT = "object"  # free-form JSON object (metadata.json as uploaded); with `items`: of those values
ARRAY = "array"  # of `items`: a kind or a Shape
# TraceState's values (tests/traces/test_shapes.py checks): no model import, so that the
# declaration reads without Django set up (`python -m cascade.api_docs`).
STATES = ("uploading", "parsing", "ready", "failed")

# Each kind's plainest value, for the examples (`Field.example_value`).
_PLAIN = {
    STRING: "",
    INTEGER: 0,
    INT64: 0,
    NUMBER: 0.0,
    BOOLEAN: False,
    DATETIME: "2026-11-08T08:59:02.590922Z",
    URI: "https://example.org/",
    OBJECT: {},
    ARRAY: [],
}


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # one of the kinds above (OBJECT with `shape`: an object of that shape)
    doc: str = ""
    null: bool = False
    column: str | None = None  # the database column it is read from, when it is one
    items: "str | Shape | None" = None  # ARRAY's element
    shape: "Shape | None" = None  # an object of that shape
    enum: tuple = ()
    optional: bool = False  # absent from some answers (the device-id fork's keys)
    length: int | None = None  # an ARRAY of exactly this many items
    max_length: int | None = None
    min_value: int | None = None  # an INT64's lower bound, when it has one (a size: 0)
    example: object = None  # its value in the examples where they do not say (traces.api_examples)

    @property
    def example_value(self):
        """Its value in an example that does not say: `example`, else null where it may be,
        else the kind's plainest value (a new column's example needs no line of its own)."""
        if self.example is not None or self.null:
            return self.example
        if self.enum:
            return self.enum[0]
        if self.shape is not None:
            return {field.name: field.example_value for field in self.shape.fields if not field.optional}
        if self.kind == ARRAY and self.length is not None and not isinstance(self.items, Shape):
            return [_PLAIN[self.items]] * self.length
        return copy.copy(_PLAIN[self.kind])


@dataclass(frozen=True)
class Shape:
    name: str  # the OpenAPI component's name
    doc: str
    fields: tuple[Field, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(field.name for field in self.fields)

    def columns(self) -> tuple[str, ...]:
        """The columns its stored fields are read from, in the shape's order."""
        return tuple(field.column for field in self.fields if field.column is not None)

    def index(self, name: str) -> int:
        return self.keys.index(name)

    def field(self, name: str) -> Field:
        return self.fields[self.index(name)]


def stored(name: str, kind: str, doc: str = "", **options) -> Field:
    """A field read from the column of its name."""
    return Field(name, kind, doc, column=name, **options)


def nested(name: str, shape: Shape, doc: str = "", **options) -> Field:
    return Field(name, OBJECT, doc, shape=shape, **options)


def many(name: str, items: "str | Shape", doc: str = "", **options) -> Field:
    return Field(name, ARRAY, doc, items=items, **options)


# --- traces -----------------------------------------------------------------------------------

TRACE_WARNING = Shape(
    "TraceWarning",
    "Something a reader of the trace must know, said once: a file cut short (where, and what "
    "was dropped or kept without totals), a killed run's launches that never got totals, a "
    "file left out of the trace's files for a path that would leave a client's folder.",
    (
        Field("file", STRING, "The file's path in the run's folder, e.g. traces/stats.csv."),
        Field("offset", INTEGER, "The byte of the file where it happened (null: the whole file).", null=True),
        Field("what", STRING, "What happened, and what Cascade kept or dropped."),
    ),
)
# The published reference's keys, in its order.
TRACE_PUBLISHED = (
    stored("id", STRING, "The profiler's run name: its folder in the bucket.", max_length=1024),
    stored("state", STRING, enum=STATES),
    stored("error", STRING, null=True),
    stored("created_at", DATETIME),
    stored("updated_at", DATETIME),
    stored("model", STRING, null=True),
    stored("layers", ARRAY, items=STRING),
    stored("source_gpu", STRING, null=True),
    stored("trace_gpu_arch", STRING, null=True),
    stored("suggested_sim_config", STRING, null=True),
    stored("kernel_count", INT64),
    stored(
        "bytes",
        INT64,
        "The bytes of the files a reader gets (`/files`): those metadata.json lists and itself, or "
        "every file of a run without a list; never simulations/, nor a file left out for its path.",
    ),
    stored("has_real_timing", BOOLEAN),
    stored("has_step_timeline", BOOLEAN),
    stored("sample", BOOLEAN),
)
# Added since, after the reference's keys (and after the detail's `kernels`): a client of the
# reference reads the keys it knows in their order. A new field of the trace list goes last here.
TRACE_ADDED = (
    stored(
        "waiting_for",
        STRING,
        "What an uploading trace waits for: `metadata.json`, or the files metadata.json lists "
        "that have not landed (`2 files listed in metadata.json: ...`); null unless uploading.",
        null=True,
    ),
    stored(
        "warnings",
        ARRAY,
        "What a reader of the trace must know, {file, offset, what} each: a file cut short "
        "(what was dropped, at which byte), a killed run's unfinished launches, a file left out of the listing.",
        items=TRACE_WARNING,
    ),
    stored(
        "traced_launches",
        INT64,
        "Launches whose instruction trace file the run holds (named by a kernel list, and there).",
    ),
    stored(
        "owner",
        STRING,
        "Who pushed the run through the API (`cascade push`), by username; null for a run put "
        "into the bucket directly.",
        null=True,
    ),
)
TRACE_SUMMARY = Shape(
    "TraceSummary",
    "A trace, in any state, without its metadata and kernels. The reference's keys, then (after "
    f"them) those added since: {', '.join(f'`{field.name}`' for field in TRACE_ADDED)}.",
    (*TRACE_PUBLISHED, *TRACE_ADDED),
)
_DIM = {"kind": ARRAY, "items": INTEGER, "length": 3}
KERNEL = Shape(
    "Kernel",
    "One kernel launch: the reference's keys, then its step and measured time (null when the run "
    "has no timeline.json or timing.csv). `total_insts` and `total_reported_insts` are null for a "
    "launch whose totals the tracer never wrote (captured into a CUDA graph, or a killed run's "
    "last). `device_id` and `stream_id` come last only for kernels of the tracer fork that "
    "records devices; every other kernel object has exactly the other keys.",
    (
        stored("ctx", STRING, "The CUDA context; null for the legacy tracer.", null=True),
        stored("kernel_id", INTEGER, "Restarts at 1 in each context (and device)."),
        stored("name", STRING),
        stored("trace_file", STRING),
        Field("grid_dim", doc="grid_x, grid_y, grid_z.", **_DIM),
        Field("block_dim", doc="block_x, block_y, block_z.", **_DIM),
        stored("blocks", INTEGER),
        stored("threads", INTEGER),
        stored("total_insts", INTEGER, null=True),
        stored("total_reported_insts", INTEGER, null=True),
        stored("traced", BOOLEAN),
        stored("step", STRING, "The launch's step (its name in timeline.json).", null=True),
        stored("duration_ns", INTEGER, "The launch's measured time (timing.csv).", null=True),
        Field("device_id", INTEGER, "Only the device-id fork's kernels.", column="device", optional=True),
        Field(
            "stream_id",
            INTEGER,
            "Only the device-id fork's kernels.",
            column="stream",
            null=True,
            optional=True,
        ),
    ),
)
TRACE_DETAIL = Shape(
    "TraceDetail",
    "A TraceSummary, then the parsed metadata.json and every kernel launch in (ctx, kernel_id) "
    "order; `kernels` is empty until the trace is ready.",
    (
        *TRACE_PUBLISHED,
        Field("metadata", OBJECT, "metadata.json, in its own key order.", null=True, column="metadata_json"),
        many("kernels", KERNEL),
        *TRACE_ADDED,
    ),
)

# --- a trace's launches added up (traces.analysis) ----------------------------------------------

TRACE_TOTALS = Shape(
    "TraceTotals",
    "A trace's launches added up. `total_insts` is null when no launch has totals; `duration_ns` "
    "(measured time, summed) when no launch has a measured time.",
    (
        Field("id", STRING),
        Field("kernel_count", INTEGER, "Launches."),
        Field("total_insts", INTEGER, null=True),
        Field("duration_ns", INTEGER, null=True),
    ),
)
STEP_TOTAL = Shape(
    "StepTotal",
    "One step of timeline.json, in its order, and the launches in it.",
    (
        Field("name", STRING),
        Field("phase", STRING, "prefill or decode, as timeline.json says.", null=True),
        Field("kernels", INTEGER, "Launches in the step."),
        Field("total_insts", INTEGER, null=True),
        Field("duration_ns", INTEGER, "Its launches' measured time, summed.", null=True),
    ),
)
KERNEL_MIX = Shape(
    "KernelMix",
    "One kernel name's launches in a trace. Shares are of the trace's totals; null when the "
    "name's sum or the trace's is null (or the trace's is 0).",
    (
        Field("name", STRING),
        Field("demangled", STRING, "The name demangled; cuBLAS's unmangled names as they are."),
        Field("launches", INTEGER),
        Field("traced", INTEGER, "Launches whose instruction trace file the run holds."),
        Field("total_insts", INTEGER, null=True),
        Field("duration_ns", INTEGER, null=True),
        Field("insts_share", NUMBER, null=True),
        Field("time_share", NUMBER, null=True),
    ),
)
TRACE_ANALYSIS = Shape(
    "TraceAnalysis",
    "A ready trace's totals, its steps (empty without timeline.json) and its kernels by name, "
    "the most instructions first (ties by name).",
    (
        *TRACE_TOTALS.fields,
        many("steps", STEP_TOTAL),
        many("kernels", KERNEL_MIX),
        Field(
            "traced_launches",
            INTEGER,
            "Launches whose instruction trace file the run holds (a kernel list names it, and it is there).",
        ),
    ),
)
KERNEL_LAUNCHES = Shape(
    "KernelLaunches",
    "A kernel's launches in one trace: 0 where the trace never launched it (duration_ns null "
    "instead when that trace has no measured time at all).",
    (
        Field("launches", INTEGER),
        Field("total_insts", INTEGER, null=True),
        Field("duration_ns", INTEGER, null=True),
    ),
)
KERNEL_RATIOS = Shape(
    "KernelRatios",
    "b / a; null where a is 0 or null, or b is null.",
    tuple(Field(name, NUMBER, null=True) for name in KERNEL_LAUNCHES.keys),
)
KERNEL_COMPARISON = Shape(
    "KernelComparison",
    "",
    (
        Field("name", STRING, "The kernel name, or the demangled name with by=demangled."),
        many("names", STRING, "The raw names this row adds up, sorted."),
        nested("a", KERNEL_LAUNCHES),
        nested("b", KERNEL_LAUNCHES),
        nested("ratios", KERNEL_RATIOS),
    ),
)
TRACE_COMPARISON = Shape(
    "TraceComparison",
    "Two ready traces' totals, then a row per kernel name present in either, ordered by the "
    "larger of its two instruction counts, descending (ties by name).",
    (
        nested("a", TRACE_TOTALS),
        nested("b", TRACE_TOTALS),
        Field("by", STRING, enum=("name", "demangled")),
        many("kernels", KERNEL_COMPARISON),
    ),
)

# --- representative kernels (traces.selection) ----------------------------------------------------

# traces.selection's SELECT_BY and bases (tests/traces/test_shapes.py checks).
SELECT_BY = ("unique", "step")
BASES = ("time", "insts", "launches")
SELECTION_MEMBER = Shape(
    "SelectionMember",
    "A launch of the group, as the detail's kernels name it.",
    (
        Field("ctx", STRING, null=True),
        Field("kernel_id", INTEGER),
        Field("device_id", INTEGER, "Only the device-id fork's kernels.", optional=True),
    ),
)
SELECTION_REPRESENTATIVE = Shape(
    "SelectionRepresentative",
    "The launch to simulate for the group: a traced one when the group has one, the nearest "
    "the group's (lower) median instruction count, ties to the first in the trace's order.",
    (
        *SELECTION_MEMBER.fields,
        Field("trace_file", STRING),
        Field("traced", BOOLEAN, "Its trace file is in the run (kernelslist lists it)."),
    ),
)
SELECTION_GROUP = Shape(
    "SelectionGroup",
    "Launches of one name, grid and block whose instruction counts are within the tolerance "
    "of the group's smallest (or all without counts): the same work.",
    (
        Field("name", STRING),
        Field("grid", ARRAY, items=INTEGER, length=3),
        Field("block", ARRAY, items=INTEGER, length=3),
        Field("count", INTEGER, "Launches in the group: the representative's weight."),
        Field("total_insts", INTEGER, "Null for launches without counts.", null=True),
        Field("duration_ns", INTEGER, "Measured time, summed; null without.", null=True),
        Field("share", NUMBER, "The group's part of the run's (or step's) basis."),
        nested("representative", SELECTION_REPRESENTATIVE),
        many(
            "members",
            SELECTION_MEMBER,
            "Every launch of the group in the trace's order; absent with members=0.",
            optional=True,
        ),
    ),
)
SELECTION = Shape(
    "Selection",
    "A ready trace's (or step's) launches grouped, the largest share first, cut at `cover`.",
    (
        Field("trace_id", STRING),
        Field("by", STRING, enum=SELECT_BY),
        Field("step", STRING, "The step's name with by=step; null otherwise.", null=True),
        Field("cover", NUMBER),
        Field("tolerance", NUMBER, "A count joins a group up to (1 + tolerance) times the group's smallest."),
        Field("launches", INTEGER, "Launches of the run (or the step): the weights' sum at cover 1."),
        Field(
            "basis",
            STRING,
            "What shares are of: measured time, else instructions, else launches.",
            enum=BASES,
        ),
        Field("covered", NUMBER, "The returned groups' shares, summed."),
        many("groups", SELECTION_GROUP),
    ),
)

# --- a trace's downloads (traces.files; the dicts are ingest.downloads') --------------------------

_KEY = "The object's key in the bucket."
EXPIRES_AT = Field("expires_at", DATETIME, "UTC; every URL is valid at least until then.")
TRACE_FILE = Shape(
    "TraceFile",
    "",
    (
        Field("path", STRING, "Relative to the run's folder: `traces/...`, `configs/...`."),
        Field("key", STRING, _KEY),
        # 64 bits: a stats file passes 2 GiB.
        Field("bytes", INT64, "Its size, as the bucket listed it.", min_value=0),
        Field(
            "etag",
            STRING,
            'Its ETag as S3 lists it, quotes included (`"<md5>"` for an object uploaded in one part).',
        ),
        Field(
            "url",
            URI,
            "A presigned GET, valid until expires_at: no Authorization header, and `If-Match: <etag>` "
            "(signed: S3 refuses the GET without it, and answers 412 once the object changed).",
        ),
    ),
)
REFUSED_FILE = Shape(
    "RefusedFile",
    "",
    (
        Field("key", STRING, _KEY),
        Field("reason", STRING, "Why it is not listed: its path would leave a client's folder."),
    ),
)
TRACE_FILES = Shape(
    "TraceFiles",
    "A run's files, each with a presigned download URL, in path order.",
    (
        Field("trace_id", STRING),
        Field("state", STRING, "The trace's state, as the detail's.", enum=STATES),
        Field("error", STRING, "Why it failed, as the detail's; null otherwise.", null=True),
        EXPIRES_AT,
        many("files", TRACE_FILE),
        many(
            "refused",
            REFUSED_FILE,
            "The run's keys left out of `files`: a path with `..`, a backslash, a drive or UNC prefix, "
            "a colon, a control character or a Windows device name.",
        ),
    ),
)

# --- an upload through presigned URLs (a simulation's, a pushed run's): each file's answer -------

UPLOAD_PART = Shape(
    "UploadPart",
    "",
    (
        Field("part_number", INTEGER),
        Field("url", STRING, "A presigned UploadPart PUT of exactly this part's bytes."),
    ),
)
MULTIPART_UPLOAD = Shape(
    "MultipartUpload",
    "",
    (
        Field("upload_id", STRING),
        Field("part_size", INTEGER, "Every part's bytes but the last (CASCADE_SIM_PART_BYTES)."),
        many("parts", UPLOAD_PART),
    ),
)
UPLOAD_TARGET = Shape(
    "UploadTarget",
    "One file: a presigned PUT (`url`, `headers`), or, at CASCADE_SIM_MULTIPART_BYTES and up, "
    "a multipart upload (`multipart`).",
    (
        Field("name", STRING, "Its path in the folder."),
        Field("size", INT64, min_value=0),
        Field("url", STRING, "A presigned PUT, with `headers`.", optional=True),
        Field("headers", OBJECT, "Send exactly these with the PUT.", items=STRING, optional=True),
        nested("multipart", MULTIPART_UPLOAD, optional=True),
    ),
)
TRACE_PUSH = Shape(
    "TracePush",
    "Where to PUT each file of the run but metadata.json, which `/complete` signs once they landed.",
    (
        Field("trace_id", STRING),
        Field("owner", STRING, "Whose the trace is: the pusher's for an id nobody held.", null=True),
        EXPIRES_AT,
        many("files", UPLOAD_TARGET),
    ),
)
TRACE_PUSH_COMPLETE = Shape(
    "TracePushComplete",
    "Every file landed whole: PUT metadata.json to `metadata`, and ingestion reads the run.",
    (
        Field("trace_id", STRING),
        EXPIRES_AT,
        nested("metadata", UPLOAD_TARGET, "metadata.json's PUT, the push's last."),
        Field("url", STRING, "The trace's GET: poll it until ready or failed."),
    ),
)

# Every shape declared here, by its component's name.
SHAPES = {
    shape.name: shape
    for shape in (
        TRACE_WARNING,
        TRACE_SUMMARY,
        KERNEL,
        TRACE_DETAIL,
        UPLOAD_PART,
        MULTIPART_UPLOAD,
        UPLOAD_TARGET,
        TRACE_PUSH,
        TRACE_PUSH_COMPLETE,
        TRACE_TOTALS,
        STEP_TOTAL,
        KERNEL_MIX,
        TRACE_ANALYSIS,
        KERNEL_LAUNCHES,
        KERNEL_RATIOS,
        KERNEL_COMPARISON,
        TRACE_COMPARISON,
        SELECTION_MEMBER,
        SELECTION_REPRESENTATIVE,
        SELECTION_GROUP,
        SELECTION,
        TRACE_FILE,
        REFUSED_FILE,
        TRACE_FILES,
    )
}
