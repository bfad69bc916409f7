"""The shapes the Traces API documents, for its OpenAPI schema (`traces.openapi`).

The views answer raw bytes encoded from `values_list` rows (`traces.encoders`), so these
serializers are never instantiated with data: they only describe the documented shapes (the
API reference's field names and order) for `extend_schema`. A trace's fields take their types
and nullability from the Trace model; what no model holds (a kernel as the API writes it, the
analysis's sums) is written here.
"""

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from traces.analysis import COMPARE_BY
from traces.api_examples import COMPARISON_EXAMPLES, DETAIL_EXAMPLES, SUMMARY_EXAMPLES
from traces.models import Trace
from traces.selectors import TRACE_SUMMARY_COLUMNS


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


class TraceSummarySerializer(serializers.ModelSerializer):
    """A trace, in any state, without its metadata and kernels."""

    # A JSONField says nothing of its items: the model's default is a list of step names.
    layers = serializers.ListField(child=serializers.CharField())

    class Meta:
        model = Trace
        fields = TRACE_SUMMARY_COLUMNS
        ref_name = "TraceSummary"
        # Every key is always in the answer, whatever the model's defaults.
        extra_kwargs = {
            **{name: {"required": True} for name in TRACE_SUMMARY_COLUMNS},
            "id": {"required": True, "help_text": "The profiler's run name: its folder in the bucket."},
        }


@extend_schema_serializer(examples=DETAIL_EXAMPLES)
class TraceDetailSerializer(TraceSummarySerializer):
    """A TraceSummary, then the parsed metadata.json and every kernel launch in (ctx, kernel_id)
    order; `kernels` is empty until the trace is ready."""

    metadata = serializers.DictField(allow_null=True, help_text="metadata.json, in its own key order.")
    kernels = KernelSerializer(many=True)

    class Meta(TraceSummarySerializer.Meta):
        fields = (*TRACE_SUMMARY_COLUMNS, "metadata", "kernels")
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


@extend_schema_serializer(examples=SUMMARY_EXAMPLES)
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


@extend_schema_serializer(examples=COMPARISON_EXAMPLES)
class TraceComparisonSerializer(serializers.Serializer):
    """Two ready traces' totals, then a row per kernel name present in either, ordered by the
    larger of its two instruction counts, descending (ties by name)."""

    a = TraceTotalsSerializer()
    b = TraceTotalsSerializer()
    by = serializers.ChoiceField(choices=COMPARE_BY)
    kernels = KernelComparisonSerializer(many=True)

    class Meta:
        ref_name = "TraceComparison"
