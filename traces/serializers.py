"""The shapes the Traces API documents, for its OpenAPI schema (`traces.openapi`).

The views answer raw bytes encoded from `values_list` rows (`traces.encoders`), so these
serializers are never instantiated with data: they only describe the documented shapes for
`extend_schema`. Every answer is declared in `traces.shapes` and becomes a serializer class here
(`serializer_for`). A simulation's are `simulations.serializers`'.
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
    SUMMARY_EXAMPLES,
)
from traces.encoders import waiting_text
from traces.models import Trace, TraceState


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
    shapes.URI: serializers.URLField,
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
        if field.items is not None:
            options["child"] = _element(field.items)
        return serializers.DictField(**options)
    if field.enum:
        return serializers.ChoiceField(choices=field.enum, **options)
    if field.kind == shapes.INT64:
        bounds = INT64_BOUNDS if field.min_value is None else {**INT64_BOUNDS, "min_value": field.min_value}
        return serializers.IntegerField(**bounds, **options)
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

SelectionSerializer = documented(shapes.SELECTION, SELECTION_EXAMPLES)

# --- a trace's downloads (traces.files) -----------------------------------------------------------

TraceFilesSerializer = documented(shapes.TRACE_FILES, FILES_EXAMPLES)

# --- an upload through presigned URLs: the requests, validated with these (a simulation's upload
# and a run's push share a file's, a part's and a multipart upload's) -------------------------------

# S3's limit on a multipart upload's parts.
UPLOAD_PARTS_MAX = 10_000
SIZE_MAX = 2**63 - 1
# A file's path in its folder, at most (a run's id is the Trace's, at most 1,024 characters too).
UPLOAD_PATH_MAX = 1024


class UploadFileRequestSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=UPLOAD_PATH_MAX,
        trim_whitespace=False,
        help_text="The file's path in the folder: sim.log.xz, simulation.json; traces/stats_ctx_0x1, metadata.json.",
    )
    size = serializers.IntegerField(min_value=0, max_value=SIZE_MAX, help_text="Bytes.")

    class Meta:
        ref_name = "UploadFileRequest"


class UploadPartRequestSerializer(serializers.Serializer):
    part_number = serializers.IntegerField(min_value=1, max_value=UPLOAD_PARTS_MAX)
    etag = serializers.CharField(
        max_length=200, trim_whitespace=False, help_text="The part's PUT's ETag, quotes included."
    )

    class Meta:
        ref_name = "UploadPartRequest"


class MultipartRequestSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=UPLOAD_PATH_MAX, trim_whitespace=False)
    upload_id = serializers.CharField(max_length=1024, trim_whitespace=False)
    parts = UploadPartRequestSerializer(many=True, min_length=1, max_length=UPLOAD_PARTS_MAX)

    class Meta:
        ref_name = "MultipartRequest"


# --- a run pushed through the API (`cascade push`) ---------------------------------------------------

# A run's files in one push, at most: its answer signs a URL each (a part each, for a large one).
PUSH_FILES_MAX = 10_000


class PushFileRequestSerializer(UploadFileRequestSerializer):
    upload_id = serializers.CharField(
        max_length=1024,
        trim_whitespace=False,
        required=False,
        help_text="A multipart upload of this file that an earlier answer started: continued, not started again.",
    )

    class Meta:
        ref_name = "PushFileRequest"


class PushRequestSerializer(serializers.Serializer):
    """The run's files a client is about to PUT, metadata.json among them."""

    files = PushFileRequestSerializer(many=True, min_length=1, max_length=PUSH_FILES_MAX)

    class Meta:
        ref_name = "PushRequest"


class PushCompleteRequestSerializer(serializers.Serializer):
    """The run's files again (each checked in the bucket at its size), and the multipart uploads
    to complete (none, or absent, when nothing was multipart)."""

    files = UploadFileRequestSerializer(many=True, min_length=1, max_length=PUSH_FILES_MAX)
    multipart = MultipartRequestSerializer(
        many=True, required=False, allow_null=True, max_length=PUSH_FILES_MAX
    )

    class Meta:
        ref_name = "PushCompleteRequest"


TracePushSerializer = serializer_for(shapes.TRACE_PUSH)
TracePushCompleteSerializer = serializer_for(shapes.TRACE_PUSH_COMPLETE)
