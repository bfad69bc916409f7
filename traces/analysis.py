"""What a trace's launches add up to: the kernel mix, the steps, two traces side by side.

A trace can hold a million launches but only a few hundred distinct kernel names and a few
thousand steps, so every read here is a GROUP BY in the database (`SUM`, `COUNT`, `COUNT(*)
FILTER (WHERE traced)`) over `trace_key = X`, served by the primary key's (trace, context,
kernel_id) first column, grouped by the name's id; Python only sees the groups. Demangled names are merged in Python
after grouping by the raw name: the demangler runs once per distinct name, not per launch.

Nulls mean "not measured", never zero: a name none of whose launches has a measured time
sums to a null `duration_ns` (a run without timing.csv has nulls throughout); a share or a
ratio whose denominator is null or 0 is null. The API (`/summary`, `/compare`) and the admin's
kernel-mix table read these functions; the dataclasses are their contract.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Q, Sum

from traces.demangle import demangle_all
from traces.launch_summaries import as_bigint, trace_launches
from traces.models import Kernel, KernelName, Step, Trace

BY_NAME = "name"
BY_DEMANGLED = "demangled"
COMPARE_BY = (BY_NAME, BY_DEMANGLED)


@dataclass(frozen=True)
class TraceTotals:
    id: str
    kernel_count: int
    total_insts: int | None  # None: no launch has an instruction count
    duration_ns: int | None  # None: no launch has a measured time


@dataclass(frozen=True)
class KernelMix:
    """One kernel name's launches in a trace, and its share of the trace's totals."""

    name: str
    demangled: str
    launches: int
    traced: int
    total_insts: int | None
    duration_ns: int | None
    insts_share: float | None
    time_share: float | None


@dataclass(frozen=True)
class StepTotal:
    """One step of timeline.json and the launches in it (`duration_ns`: their measured time)."""

    index: int
    name: str
    phase: str | None
    kernels: int
    total_insts: int | None
    duration_ns: int | None


@dataclass(frozen=True)
class Summary:
    totals: TraceTotals
    steps: list[StepTotal]
    kernels: list[KernelMix]


@dataclass(frozen=True)
class Launches:
    """One kernel's launches on one side of a comparison (zeros where it is absent)."""

    launches: int
    total_insts: int | None
    duration_ns: int | None


@dataclass(frozen=True)
class Ratios:
    """b / a per field; None where a is 0 or None, or b is None."""

    launches: float | None
    total_insts: float | None
    duration_ns: float | None


@dataclass(frozen=True)
class KernelComparison:
    name: str  # the raw name, or the demangled one with by="demangled"
    names: list[str]  # the raw names merged into this row, sorted
    a: Launches
    b: Launches
    ratios: Ratios


@dataclass(frozen=True)
class Comparison:
    a: TraceTotals
    b: TraceTotals
    by: str
    kernels: list[KernelComparison]


def trace_states(trace_ids: Iterable[str]) -> dict[str, str]:
    """The state of each of these traces that exists: one query."""
    return dict(Trace.objects.filter(pk__in=trace_ids).values_list("id", "state"))


# --- one trace ---------------------------------------------------------------------------


def _name_groups(trace_ids: list[str]) -> list[dict]:
    """Per (trace, name): launches, traced launches, instructions and measured time.

    Grouped by the name's four-byte id, then the few hundred groups' names read from the
    names table: cheaper than joining each launch to its name.
    """
    keys = dict(Trace.objects.filter(pk__in=trace_ids).values_list("key", "id"))
    # `trace_key = X` for one trace (the primary key's first column), `IN (a, b)` for two.
    kernels = (
        Kernel.stored.filter(trace=next(iter(keys)))
        if len(keys) == 1
        else Kernel.stored.filter(trace__in=list(keys))
    )
    groups = (
        list(
            kernels
            # No ORDER BY: PostgreSQL hashes a few hundred groups instead of sorting the launches.
            .order_by()
            .values("trace", "kernel_name")
            .annotate(
                launches=Count("*"),
                traced_count=Count("kernel_id", filter=Q(traced=True)),
                insts=Sum(as_bigint("total_insts")),
                duration=Sum("duration_ns"),
            )
        )
        if keys
        else []
    )
    names = {
        key: (name, demangled)
        for key, name, demangled in KernelName.objects.filter(
            id__in={group["kernel_name"] for group in groups}
        ).values_list("id", "name", "demangled")
    }
    for group in groups:
        group["trace_id"] = keys[group.pop("trace")]
        group["name"], group["demangled"] = names[group.pop("kernel_name")]
    return groups


def _demangled(groups: list[dict]) -> dict[str, str]:
    """The groups' names as shown: as ingest stored them demangled, the rest within a request's budget."""
    return demangle_all(
        (group["name"] for group in groups), stored={group["name"]: group["demangled"] for group in groups}
    )


def _sum(values) -> int | None:
    """The sum of the non-null values; None when all are null (nothing was measured)."""
    present = [value for value in values if value is not None]
    return sum(present) if present else None


def _share(part: int | None, whole: int | None) -> float | None:
    if part is None or not whole:
        return None
    return part / whole


def _totals(trace_id: str, groups: list[dict]) -> TraceTotals:
    return TraceTotals(
        id=trace_id,
        kernel_count=sum(group["launches"] for group in groups),
        total_insts=_sum(group["insts"] for group in groups),
        duration_ns=_sum(group["duration"] for group in groups),
    )


def _mix(groups: list[dict], totals: TraceTotals) -> list[KernelMix]:
    demangled = _demangled(groups)
    mix = [
        KernelMix(
            name=group["name"],
            demangled=demangled[group["name"]],
            launches=group["launches"],
            traced=group["traced_count"],
            total_insts=group["insts"],
            duration_ns=group["duration"],
            insts_share=_share(group["insts"], totals.total_insts),
            time_share=_share(group["duration"], totals.duration_ns),
        )
        for group in groups
    ]
    # The most instructions first (names without counts last), ties by name.
    mix.sort(key=lambda kernel: (-(kernel.total_insts or 0), kernel.total_insts is None, kernel.name))
    return mix


def step_totals(trace_id: str) -> list[StepTotal]:
    """Each step of the trace's timeline in order, with its launches' totals: two queries.

    [] for a run without timeline.json. A step no launch refers to has 0 kernels and null
    sums; launches outside every step are in no step's totals.
    """
    steps = list(
        Step.objects.filter(trace_id=trace_id).order_by("index").values_list("index", "name", "phase")
    )
    if not steps:
        return []
    groups = {
        group["step"]: group
        for group in trace_launches(trace_id)
        .filter(step__isnull=False)
        .order_by()
        .values("step")
        .annotate(launches=Count("*"), insts=Sum(as_bigint("total_insts")), duration=Sum("duration_ns"))
    }
    empty = {"launches": 0, "insts": None, "duration": None}
    return [
        StepTotal(
            index=index,
            name=name,
            phase=phase,
            kernels=groups.get(index, empty)["launches"],
            total_insts=groups.get(index, empty)["insts"],
            duration_ns=groups.get(index, empty)["duration"],
        )
        for index, name, phase in steps
    ]


def summary(trace_id: str) -> Summary:
    """The trace's totals, steps and kernel mix: three queries, whatever the launch count.

    The totals are the sums of the mix's groups, so they agree with it exactly.
    """
    groups = _name_groups([trace_id])
    totals = _totals(trace_id, groups)
    return Summary(totals=totals, steps=step_totals(trace_id), kernels=_mix(groups, totals))


# --- two traces --------------------------------------------------------------------------


def _ratio(b: int | None, a: int | None) -> float | None:
    if a is None or b is None or a == 0:
        return None
    return b / a


def compare(a: str, b: str, by: str = BY_NAME) -> Comparison:
    """Trace `b` against trace `a`, kernel name by kernel name: one query for both.

    Every name present in either trace has a row: launches, instructions and measured time in
    each (0 where the name is absent from a trace; a null time where that trace has no
    timing at all), and b/a ratios. `by="demangled"` merges names that demangle alike (two
    instantiations' symbols, a tracer's two spellings) into one row. Rows are ordered by the
    larger of the two instruction counts, descending, ties by name.
    """
    if by not in COMPARE_BY:
        raise ValueError(f"by must be one of {', '.join(COMPARE_BY)}, not {by!r}")
    groups = _name_groups([a, b] if a != b else [a])
    sides = {trace_id: [group for group in groups if group["trace_id"] == trace_id] for trace_id in (a, b)}
    totals = {trace_id: _totals(trace_id, sides[trace_id]) for trace_id in (a, b)}

    demangled = _demangled(groups) if by == BY_DEMANGLED else {}
    # key -> trace id -> the summed groups of that trace's names with this key
    merged: dict[str, dict[str, dict]] = {}
    names: dict[str, set[str]] = {}
    for trace_id in (a, b):
        for group in sides[trace_id]:
            key = group["name"] if by == BY_NAME else demangled[group["name"]]
            names.setdefault(key, set()).add(group["name"])
            into = merged.setdefault(key, {}).setdefault(
                trace_id, {"launches": 0, "insts": None, "duration": None}
            )
            into["launches"] += group["launches"]
            into["insts"] = _sum((into["insts"], group["insts"]))
            into["duration"] = _sum((into["duration"], group["duration"]))

    def side(key: str, trace_id: str) -> Launches:
        found = merged[key].get(trace_id)
        if found is None:  # absent from this trace: nothing launched, nothing timed
            timed = totals[trace_id].duration_ns is not None
            return Launches(launches=0, total_insts=0, duration_ns=0 if timed else None)
        return Launches(launches=found["launches"], total_insts=found["insts"], duration_ns=found["duration"])

    rows = []
    for key in merged:
        left, right = side(key, a), side(key, b)
        rows.append(
            KernelComparison(
                name=key,
                names=sorted(names[key]),
                a=left,
                b=right,
                ratios=Ratios(
                    launches=_ratio(right.launches, left.launches),
                    total_insts=_ratio(right.total_insts, left.total_insts),
                    duration_ns=_ratio(right.duration_ns, left.duration_ns),
                ),
            )
        )
    rows.sort(key=lambda row: (-max(row.a.total_insts or 0, row.b.total_insts or 0), row.name))
    return Comparison(a=totals[a], b=totals[b], by=by, kernels=rows)
