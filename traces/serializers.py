"""The shapes the Traces API documents, for its OpenAPI schema (`traces.openapi`).

The views answer raw bytes encoded from `values_list` rows (`traces.encoders`), so these
serializers are never instantiated with data: they only describe the documented shapes for
`extend_schema`. The answers declared in `traces.shapes` become serializer classes here
(`serializer_for`); the rest (selection, downloads, uploads) are written out below. The
exceptions are the two request bodies of a simulation's upload
(`SimulationUploadRequestSerializer`, `SimulationCompleteRequestSerializer`), which the views
validate with them.
"""

import copy

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from traces import shapes
from traces.api_examples import (
    COMPARISON_EXAMPLES,
    DETAIL_EXAMPLES,
    FILES_EXAMPLES,
    SELECTION_EXAMPLES,
    SIMULATION_DETAIL_EXAMPLES,
    SUMMARY_EXAMPLES,
)
from traces.encoders import waiting_text
from traces.models import SIMULATION_NAME_MAX, Trace, TraceState
from traces.selection import BASIS_INSTS, BASIS_LAUNCHES, BASIS_TIME, SELECT_BY


class ErrorSerializer(serializers.Serializer):
    """Every error of the API: one sentence."""

    detail = serializers.CharField()

    class Meta:
        ref_name = "Error"


# --- the answers declared in traces.shapes: a serializer class each, built from its shape ----------

# 64 bits: counts and sizes pass 2**31 (drf-spectacular writes format int64 for these bounds, as
# for the model's BigIntegerField).
INT64_BOUNDS = {"min_value": -(2**63), "max_value": 2**63 - 1}
_SCALARS = {
    shapes.STRING: serializers.CharField,
    shapes.INTEGER: serializers.IntegerField,
    shapes.NUMBER: serializers.FloatField,
    shapes.BOOLEAN: serializers.BooleanField,
    shapes.DATETIME: serializers.DateTimeField,
}
_built: dict[str, type[serializers.Serializer]] = {}


def _element(items) -> serializers.Field:
    if isinstance(items, shapes.Shape):
        return serializer_for(items)()
    return _SCALARS[items]()


def serializer_field(field: shapes.Field) -> serializers.Field:
    """The DRF field that describes `field` to drf-spectacular."""
    options = {"required": not field.optional}
    if field.doc:
        options["help_text"] = field.doc
    if field.null:
        options["allow_null"] = True
    if field.shape is not None:
        return serializer_for(field.shape)(**options)
    if field.kind == shapes.ARRAY:
        if isinstance(field.items, shapes.Shape):
            return serializer_for(field.items)(many=True, **options)
        if field.length is not None:
            options.update(min_length=field.length, max_length=field.length)
        return serializers.ListField(child=_element(field.items), **options)
    if field.kind == shapes.OBJECT:
        return serializers.DictField(**options)
    if field.enum:
        return serializers.ChoiceField(choices=field.enum, **options)
    if field.kind == shapes.INT64:
        return serializers.IntegerField(**INT64_BOUNDS, **options)
    if field.max_length is not None:
        options["max_length"] = field.max_length
    return _SCALARS[field.kind](**options)


def serializer_for(shape: shapes.Shape, **fields: serializers.Field) -> type[serializers.Serializer]:
    """The shape as a DRF serializer class (one per shape: drf-spectacular's component);
    `fields` replace the declared fields of those names, in place."""
    if shape.name not in _built:
        # DRF orders a serializer's fields by their creation: each made (or copied) in turn.
        attrs = {
            field.name: copy.deepcopy(fields[field.name]) if field.name in fields else serializer_field(field)
            for field in shape.fields
        }
        attrs["Meta"] = type("Meta", (), {"ref_name": shape.name})
        attrs["__doc__"] = shape.doc or None
        attrs["__module__"] = __name__
        _built[shape.name] = type(f"{shape.name}Serializer", (serializers.Serializer,), attrs)
    return _built[shape.name]


def documented(shape: "shapes.Shape | type", examples: list) -> type[serializers.Serializer]:
    serializer = serializer_for(shape) if isinstance(shape, shapes.Shape) else shape
    return extend_schema_serializer(examples=examples)(serializer)


class WaitingForField(serializers.CharField):
    """A Trace's `waiting_for` as the API says it (tests serialize Trace objects with the
    summary's serializer, as an oracle of the list's JSON)."""

    def __init__(self, **options):
        super().__init__(source="*", read_only=True, allow_null=True, **options)

    def to_representation(self, trace: Trace) -> str | None:
        if trace.state != TraceState.UPLOADING:
            return None
        return waiting_text(trace.waiting_for if trace.metadata_json is not None else None)


def _waiting_for() -> WaitingForField:
    return WaitingForField(help_text=shapes.TRACE_SUMMARY.field("waiting_for").doc)


KernelSerializer = serializer_for(shapes.KERNEL)
TraceSummarySerializer = serializer_for(shapes.TRACE_SUMMARY, waiting_for=_waiting_for())
TraceDetailSerializer = documented(
    serializer_for(shapes.TRACE_DETAIL, waiting_for=_waiting_for()), DETAIL_EXAMPLES
)
TraceAnalysisSerializer = documented(shapes.TRACE_ANALYSIS, SUMMARY_EXAMPLES)
TraceComparisonSerializer = documented(shapes.TRACE_COMPARISON, COMPARISON_EXAMPLES)

# --- representative kernels (traces.selection) ----------------------------------------------------


class SelectionMemberSerializer(serializers.Serializer):
    """A launch of the group, as the detail's kernels name it."""

    ctx = serializers.CharField(allow_null=True)
    kernel_id = serializers.IntegerField()
    device_id = serializers.IntegerField(required=False, help_text="Only the device-id fork's kernels.")

    class Meta:
        ref_name = "SelectionMember"


class SelectionRepresentativeSerializer(SelectionMemberSerializer):
    """The launch to simulate for the group: a traced one when the group has one, the nearest
    the group's (lower) median instruction count, ties to the first in the trace's order."""

    trace_file = serializers.CharField()
    traced = serializers.BooleanField(help_text="Its trace file is in the run (kernelslist lists it).")

    class Meta:
        ref_name = "SelectionRepresentative"


class SelectionGroupSerializer(serializers.Serializer):
    """Launches of one name, grid and block whose instruction counts are within the tolerance
    of the group's smallest (or all without counts): the same work."""

    name = serializers.CharField()
    grid = serializers.ListField(child=serializers.IntegerField(), min_length=3, max_length=3)
    block = serializers.ListField(child=serializers.IntegerField(), min_length=3, max_length=3)
    count = serializers.IntegerField(help_text="Launches in the group: the representative's weight.")
    total_insts = serializers.IntegerField(allow_null=True, help_text="Null for launches without counts.")
    duration_ns = serializers.IntegerField(allow_null=True, help_text="Measured time, summed; null without.")
    share = serializers.FloatField(help_text="The group's part of the run's (or step's) basis.")
    representative = SelectionRepresentativeSerializer()
    members = SelectionMemberSerializer(
        many=True,
        required=False,
        help_text="Every launch of the group in the trace's order; absent with members=0.",
    )

    class Meta:
        ref_name = "SelectionGroup"


@extend_schema_serializer(examples=SELECTION_EXAMPLES)
class SelectionSerializer(serializers.Serializer):
    """A ready trace's (or step's) launches grouped, the largest share first, cut at `cover`."""

    trace_id = serializers.CharField()
    by = serializers.ChoiceField(choices=SELECT_BY)
    step = serializers.CharField(allow_null=True, help_text="The step's name with by=step; null otherwise.")
    cover = serializers.FloatField()
    tolerance = serializers.FloatField(
        help_text="A count joins a group up to (1 + tolerance) times the group's smallest."
    )
    launches = serializers.IntegerField(
        help_text="Launches of the run (or the step): the weights' sum at cover 1."
    )
    basis = serializers.ChoiceField(
        choices=(BASIS_TIME, BASIS_INSTS, BASIS_LAUNCHES),
        help_text="What shares are of: measured time, else instructions, else launches.",
    )
    covered = serializers.FloatField(help_text="The returned groups' shares, summed.")
    groups = SelectionGroupSerializer(many=True)

    class Meta:
        ref_name = "Selection"


# --- simulations (traces.accuracy) ---------------------------------------------------------------


SimulationSummarySerializer = serializer_for(shapes.SIMULATION_SUMMARY)
SimulationListItemSerializer = serializer_for(shapes.SIMULATION_LIST_ITEM)
SimulationDetailSerializer = documented(shapes.SIMULATION_DETAIL, SIMULATION_DETAIL_EXAMPLES)


class AccuracyLeftOutSerializer(serializers.Serializer):
    simulations = serializers.IntegerField()
    why = serializers.CharField(allow_null=True)

    class Meta:
        ref_name = "AccuracyLeftOut"


class SimulationAccuracySerializer(serializers.Serializer):
    """One simulator build (or config) over its ready simulations, pooled over every compared
    launch; the key is `simulator_build` or `config`, as `by` asks."""

    simulator_build = serializers.CharField(allow_null=True, required=False)
    config = serializers.CharField(allow_null=True, required=False)
    simulations = serializers.IntegerField()
    traces = serializers.IntegerField()
    kernels_compared = serializers.IntegerField()
    mape = serializers.FloatField(allow_null=True)
    aggregate_error = serializers.FloatField(allow_null=True)
    pearson_r = serializers.FloatField(allow_null=True)
    left_out = AccuracyLeftOutSerializer(
        help_text="Its ready simulations that compared no kernel: not counted in the row."
    )

    class Meta:
        ref_name = "SimulationAccuracy"


# --- a trace's downloads (traces.files) -----------------------------------------------------------


class TraceFileSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="Relative to the run's folder: `traces/...`, `configs/...`.")
    key = serializers.CharField(help_text="The object's key in the bucket.")
    # 64 bits: a stats file passes 2 GiB (drf-spectacular writes format int64 for this bound).
    bytes = serializers.IntegerField(
        min_value=0, max_value=2**63 - 1, help_text="Its size, as the bucket listed it."
    )
    etag = serializers.CharField(
        help_text='Its ETag as S3 lists it, quotes included (`"<md5>"` for an object uploaded in one part).'
    )
    url = serializers.URLField(
        help_text="A presigned GET, valid until expires_at: no Authorization header, and "
        "`If-Match: <etag>` (signed: S3 refuses the GET without it, and answers 412 once the object changed)."
    )

    class Meta:
        ref_name = "TraceFile"


class RefusedFileSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="The object's key in the bucket.")
    reason = serializers.CharField(help_text="Why it is not listed: its path would leave a client's folder.")

    class Meta:
        ref_name = "RefusedFile"


@extend_schema_serializer(examples=FILES_EXAMPLES)
class TraceFilesSerializer(serializers.Serializer):
    """A run's files, each with a presigned download URL, in path order."""

    trace_id = serializers.CharField()
    state = serializers.ChoiceField(
        choices=TraceState.choices, help_text="The trace's state, as the detail's."
    )
    error = serializers.CharField(
        allow_null=True, help_text="Why it failed, as the detail's; null otherwise."
    )
    expires_at = serializers.DateTimeField(help_text="UTC; every URL is valid at least until then.")
    files = TraceFileSerializer(many=True)
    refused = RefusedFileSerializer(
        many=True,
        help_text="The run's keys left out of `files`: a path with `..`, a backslash, a drive or UNC "
        "prefix, a colon, a control character or a Windows device name.",
    )

    class Meta:
        ref_name = "TraceFiles"


# --- A simulation's upload: the requests (validated with these), the answers (described) ----

# A folder accepts six file names (ingest/uploads.py says which), each once.
UPLOAD_FILES_MAX = 8
# S3's limit on a multipart upload's parts.
UPLOAD_PARTS_MAX = 10_000
SIZE_MAX = 2**63 - 1


class UploadFileRequestSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=SIMULATION_NAME_MAX,
        trim_whitespace=False,
        help_text="sim.log, sim.log.gz or sim.log.xz (one), gpgpusim.config, trace.config, simulation.json.",
    )
    size = serializers.IntegerField(min_value=0, max_value=SIZE_MAX, help_text="Bytes.")

    class Meta:
        ref_name = "SimulationUploadFileRequest"


class SimulationUploadRequestSerializer(serializers.Serializer):
    """The files a client is about to PUT, simulation.json among them."""

    files = UploadFileRequestSerializer(many=True, min_length=1, max_length=UPLOAD_FILES_MAX)

    class Meta:
        ref_name = "SimulationUploadRequest"


class UploadPartRequestSerializer(serializers.Serializer):
    part_number = serializers.IntegerField(min_value=1, max_value=UPLOAD_PARTS_MAX)
    etag = serializers.CharField(
        max_length=200, trim_whitespace=False, help_text="The part's PUT's ETag, quotes included."
    )

    class Meta:
        ref_name = "SimulationUploadPartRequest"


class MultipartRequestSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=SIMULATION_NAME_MAX, trim_whitespace=False)
    upload_id = serializers.CharField(max_length=1024, trim_whitespace=False)
    parts = UploadPartRequestSerializer(many=True, min_length=1, max_length=UPLOAD_PARTS_MAX)

    class Meta:
        ref_name = "SimulationMultipartRequest"


class SimulationCompleteRequestSerializer(serializers.Serializer):
    """The multipart uploads to complete (none, or absent, when nothing was multipart)."""

    multipart = MultipartRequestSerializer(
        many=True, required=False, allow_null=True, max_length=UPLOAD_FILES_MAX
    )

    class Meta:
        ref_name = "SimulationCompleteRequest"


class UploadPartSerializer(serializers.Serializer):
    part_number = serializers.IntegerField()
    url = serializers.CharField(help_text="A presigned UploadPart PUT of exactly this part's bytes.")

    class Meta:
        ref_name = "SimulationUploadPart"


class MultipartUploadSerializer(serializers.Serializer):
    upload_id = serializers.CharField()
    part_size = serializers.IntegerField(
        help_text="Every part's bytes but the last (CASCADE_SIM_PART_BYTES)."
    )
    parts = UploadPartSerializer(many=True)

    class Meta:
        ref_name = "SimulationMultipartUpload"


class UploadTargetSerializer(serializers.Serializer):
    """One file: a presigned PUT (`url`, `headers`), or, at CASCADE_SIM_MULTIPART_BYTES and up,
    a multipart upload (`multipart`)."""

    name = serializers.CharField()
    size = serializers.IntegerField()
    url = serializers.CharField(required=False, help_text="A presigned PUT, with `headers`.")
    headers = serializers.DictField(
        child=serializers.CharField(), required=False, help_text="Send exactly these with the PUT."
    )
    multipart = MultipartUploadSerializer(required=False)

    class Meta:
        ref_name = "SimulationUploadTarget"


class SimulationUploadSerializer(serializers.Serializer):
    """Where to PUT each file of the upload, simulation.json last."""

    trace_id = serializers.CharField()
    name = serializers.CharField()
    expires_at = serializers.DateTimeField(help_text="UTC; every URL is valid at least until then.")
    files = UploadTargetSerializer(many=True)

    class Meta:
        ref_name = "SimulationUpload"


class SimulationCompleteSerializer(serializers.Serializer):
    """The simulation registered and its read started: poll `url` until ready or failed."""

    trace_id = serializers.CharField()
    name = serializers.CharField()
    state = serializers.ChoiceField(choices=TraceState.choices)
    url = serializers.CharField(help_text="The simulation's GET.")

    class Meta:
        ref_name = "SimulationComplete"
