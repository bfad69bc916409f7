"""The request bodies of the sweeps' routes, written out: the views validate them with these (the
first problem a one-sentence 400, `traces.uploads.validated`) and the OpenAPI schema shows them.
A sweep's traces are named by `trace_ids` or by the trace list's own filters (`traces.filters`),
whose fields are taken from its FilterSet, never listed twice."""

import django_filters
from rest_framework import serializers

from simulations.models import SIMULATION_NAME_MAX
from simulations.sweep_shapes import FINISH_STATES
from simulations.sweeps import FILTER_KEYS, SWEEP_CONFIGS_MAX, SWEEP_TRACE_IDS_MAX
from traces.filters import TraceFilter

SELECT_MAX = 205  # "step:" and a step's name (200 characters at most, as a marker's)
TEXT_MAX = 10_000  # a worker's error or reason: a line or two of the simulator's log


def _filter_field(name: str) -> serializers.Field:
    """A trace list filter as a JSON body's key: `sample` a boolean, the others text."""
    described = TraceFilter.base_filters[name]
    help_text = described.extra.get("help_text", "")
    if isinstance(described, django_filters.BooleanFilter):
        return serializers.BooleanField(required=False, help_text=help_text)
    return serializers.CharField(required=False, max_length=1024, help_text=help_text)


def check_select(value: str | None) -> str | None:
    if value is not None and value != "unique" and not (value.startswith("step:") and len(value) > 5):
        raise serializers.ValidationError('"unique" or "step:NAME"')
    return value


class SweepCreateRequestSerializer(serializers.Serializer):
    """`POST /api/sweeps`: the traces (`trace_ids`, or the list's filters), the configs, and
    which launches each simulation runs (`select`, `cover`)."""

    name = serializers.CharField(max_length=SIMULATION_NAME_MAX)
    trace_ids = serializers.ListField(
        child=serializers.CharField(max_length=1024),
        required=False,
        min_length=1,
        max_length=SWEEP_TRACE_IDS_MAX,
        help_text="The traces, by id; without it, the trace list's filters below choose them.",
    )
    configs = serializers.ListField(
        child=serializers.CharField(max_length=SIMULATION_NAME_MAX),
        min_length=1,
        max_length=SWEEP_CONFIGS_MAX,
        help_text="Accel-Sim tested configs, such as SM75_RTX2060.",
    )
    select = serializers.CharField(
        required=False,
        allow_null=True,
        max_length=SELECT_MAX,
        validators=[check_select],
        help_text='"unique" or "step:NAME": representatives only, as `cascade pull --select`.',
    )
    cover = serializers.FloatField(required=False, default=1.0, min_value=0.0, max_value=1.0)
    rerun = serializers.BooleanField(
        required=False, default=False, help_text="Run jobs the same build already simulated."
    )

    class Meta:
        ref_name = "SweepCreateRequest"

    def get_fields(self) -> dict:
        """The declared fields, then the trace list's filters (`traces.filters.TraceFilter`)."""
        return {**super().get_fields(), **{name: _filter_field(name) for name in FILTER_KEYS}}

    def validate_cover(self, value: float) -> float:
        if value <= 0:
            raise serializers.ValidationError("must be above 0")
        return value

    def validate(self, attrs: dict) -> dict:
        unknown = (
            sorted(set(self.initial_data) - set(self.fields)) if isinstance(self.initial_data, dict) else []
        )
        if unknown:
            raise serializers.ValidationError(
                f"unknown key {', '.join(map(repr, unknown))} (known: {', '.join(self.fields)})"
            )
        filters = [name for name in FILTER_KEYS if name in attrs]
        if "trace_ids" in attrs and filters:
            raise serializers.ValidationError(f"trace_ids or filters, not both (got {', '.join(filters)})")
        return attrs


class SweepJobStartRequestSerializer(serializers.Serializer):
    """A worker about to run a job: who it is, its builds, what its Accel-Sim tree runs."""

    host = serializers.CharField(max_length=255)
    process = serializers.IntegerField(min_value=0, max_value=2**31)
    accel_sim_build = serializers.CharField(max_length=500, required=False, allow_null=True)
    gpgpusim_build = serializers.CharField(max_length=500, required=False, allow_null=True)
    configs = serializers.ListField(
        child=serializers.CharField(max_length=SIMULATION_NAME_MAX), required=False, max_length=1000
    )
    sass_versions = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=10_000), required=False, max_length=1000
    )

    class Meta:
        ref_name = "SweepJobStartRequest"


class SweepJobProgressRequestSerializer(serializers.Serializer):
    """The running attempt's progress (at least every 30 s: it renews the job's lease)."""

    attempt = serializers.IntegerField(min_value=1, max_value=32767)
    kernels_finished = serializers.IntegerField(min_value=0, max_value=2**62)
    kernels_listed = serializers.IntegerField(min_value=0, max_value=2**62)

    class Meta:
        ref_name = "SweepJobProgressRequest"


class SweepJobFinishRequestSerializer(serializers.Serializer):
    """The attempt's end."""

    attempt = serializers.IntegerField(min_value=1, max_value=32767)
    state = serializers.ChoiceField(choices=FINISH_STATES)
    error = serializers.CharField(required=False, allow_null=True, max_length=TEXT_MAX)
    reason = serializers.CharField(required=False, allow_null=True, max_length=TEXT_MAX)

    class Meta:
        ref_name = "SweepJobFinishRequest"
