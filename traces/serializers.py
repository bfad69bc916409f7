"""The shapes the Traces API documents, for its OpenAPI schema (`traces.openapi`).

The views answer raw bytes encoded from `values_list` rows (`traces.encoders`), so these
serializers are never instantiated with data: they only describe the documented shapes (the
API reference's field names and order) for `extend_schema`. A trace's fields take their types
and nullability from the Trace model; what no model holds (a kernel as the API writes it, the
analysis's sums) is written here.
"""

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from traces.accuracy import SIMULATION_SUMMARY_COLUMNS
from traces.analysis import COMPARE_BY
from traces.api_examples import (
    COMPARISON_EXAMPLES,
    DETAIL_EXAMPLES,
    FILES_EXAMPLES,
    SELECTION_EXAMPLES,
    SIMULATION_DETAIL_EXAMPLES,
    SUMMARY_EXAMPLES,
)
from traces.models import Simulation, Trace, TraceState
from traces.selection import BASIS_INSTS, BASIS_LAUNCHES, BASIS_TIME, SELECT_BY
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


class SimulationMetricsSerializer(serializers.Serializer):
    """Accel-Sim's metrics over the launches with both a measured (x) and a simulated (y) time
    (docs/api.md has the formulas); null when none was compared, counts then 0."""

    mape = serializers.FloatField(
        allow_null=True, help_text="mean(|y-x|/x) in % (0 for x = 0): Accel-Sim's Err."
    )
    aggregate_error = serializers.FloatField(allow_null=True, help_text="sum|y-x| / sum x, in %.")
    pearson_r = serializers.FloatField(
        allow_null=True, help_text="Pearson's correlation (Correl); null under 2 points or a constant side."
    )
    rpd = serializers.FloatField(allow_null=True, help_text="mean(2|y-x|/(x+y)) in %.")
    nrmse = serializers.FloatField(allow_null=True, help_text="sqrt(mean((y-x)^2)) / mean(x).")
    within_10_percent = serializers.IntegerField(help_text="Launches with |y-x| <= 0.1 x.")
    kernels_compared = serializers.IntegerField()
    sim_total_ns = serializers.FloatField(allow_null=True)
    measured_total_ns = serializers.IntegerField(allow_null=True)
    total_error = serializers.FloatField(allow_null=True, help_text="(sum y - sum x) / sum x, in %, signed.")
    run_sim_ns = serializers.FloatField(
        allow_null=True, help_text="The run's last complete gpu_tot_sim_cycle at the core clock."
    )
    run_measured_ns = serializers.IntegerField(
        allow_null=True,
        help_text="Every simulated launch's measured time, overlapped ones included; null if one has none.",
    )
    run_error = serializers.FloatField(
        allow_null=True, help_text="run_sim_ns against run_measured_ns, in %, signed."
    )

    class Meta:
        ref_name = "SimulationMetrics"


class SimulationSummarySerializer(serializers.ModelSerializer):
    """A simulation of a trace, in any state, without its steps, families and kernels."""

    metrics = SimulationMetricsSerializer(allow_null=True, help_text="Null until the simulation is ready.")

    class Meta:
        model = Simulation
        fields = SIMULATION_SUMMARY_COLUMNS
        ref_name = "SimulationSummary"
        extra_kwargs = {
            **{name: {"required": True} for name in SIMULATION_SUMMARY_COLUMNS},
            "name": {"required": True, "help_text": "Its folder: <run>/simulations/<name>/."},
            "stopped": {"required": True, "help_text": "null, max_cycles or killed."},
        }


class SimulationListItemSerializer(SimulationSummarySerializer):
    """A SimulationSummary after the id of the trace it simulates."""

    trace_id = serializers.CharField(help_text="The trace it simulates.")

    class Meta(SimulationSummarySerializer.Meta):
        fields = ("trace_id", *SIMULATION_SUMMARY_COLUMNS)
        ref_name = "SimulationListItem"


class InterruptedKernelSerializer(serializers.Serializer):
    uid = serializers.IntegerField()
    ctx = serializers.CharField(allow_null=True)
    kernel_id = serializers.IntegerField()
    name = serializers.CharField()

    class Meta:
        ref_name = "InterruptedKernel"


class SimulationStepSerializer(serializers.Serializer):
    """A step of the trace the simulation has launches in, summed over its compared launches."""

    step = serializers.CharField()
    sim_ns = serializers.FloatField(allow_null=True)
    measured_ns = serializers.IntegerField(allow_null=True)
    error = serializers.FloatField(allow_null=True, help_text="(sim - measured) / measured, in %, signed.")

    class Meta:
        ref_name = "SimulationStep"


class KernelFamilySerializer(serializers.Serializer):
    """The compared launches whose demangled names agree without parameters and return type."""

    family = serializers.CharField()
    count = serializers.IntegerField()
    mape = serializers.FloatField(allow_null=True)
    aggregate_error = serializers.FloatField(allow_null=True)

    class Meta:
        ref_name = "KernelFamily"


class SimulatedKernelSerializer(serializers.Serializer):
    """One simulated launch beside the trace's launch it pairs with."""

    ctx = serializers.CharField(allow_null=True)
    kernel_id = serializers.IntegerField()
    name = serializers.CharField()
    step = serializers.CharField(allow_null=True, help_text="The launch's step (its name in timeline.json).")
    uid = serializers.IntegerField(help_text="The simulator's kernel uid.")
    sim_cycles = serializers.IntegerField(allow_null=True, help_text="Null for an overlapped launch.")
    sim_insn = serializers.IntegerField(allow_null=True)
    sim_ns = serializers.FloatField(allow_null=True, help_text="sim_cycles * 1000 / core_clock_mhz.")
    measured_ns = serializers.IntegerField(allow_null=True)
    error = serializers.FloatField(
        allow_null=True, help_text="(sim_ns - measured_ns) / measured_ns, in %, signed."
    )
    overlapped = serializers.BooleanField(help_text="Its stat block was shared with other kernels.")

    class Meta:
        ref_name = "SimulatedKernel"


@extend_schema_serializer(examples=SIMULATION_DETAIL_EXAMPLES)
class SimulationDetailSerializer(SimulationSummarySerializer):
    """A SimulationSummary, the launches a cycle limit stopped, the steps (trace's order), the
    kernel families (most measured time first) and every simulated launch in the trace's order
    (steps, families and kernels empty unless the simulation is ready or being read again)."""

    interrupted = InterruptedKernelSerializer(many=True)
    steps = SimulationStepSerializer(many=True)
    families = KernelFamilySerializer(many=True)
    kernels = SimulatedKernelSerializer(many=True)

    class Meta(SimulationSummarySerializer.Meta):
        fields = (*SIMULATION_SUMMARY_COLUMNS, "interrupted", "steps", "families", "kernels")
        ref_name = "SimulationDetail"


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
