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
