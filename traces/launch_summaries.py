"""A trace's launches summed for the admin's pages: what its chart and analysis draw.

The trace page's per-context counts, the runs its chart draws and the heaviest kernels come from
two queries; the analysis page's steps split by kernel from one GROUP BY, its calibration
sample from one bounded query. A trace can hold a million kernels, so each is a GROUP BY or an
index range, never every launch. Kernel ids restart at 1 in each CUDA context, so "launch
order" is (ctx, kernel_id).
"""

import math
from dataclasses import dataclass

from django.db.models import (
    BigIntegerField,
    Count,
    ExpressionWrapper,
    F,
    Max,
    Min,
    OuterRef,
    Q,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Cast

from traces.models import Kernel, KernelContext, KernelName, Trace

# --- the admin's trace page -----------------------------------------------------------

TOP_KERNELS = 10


@dataclass(frozen=True)
class KernelRun:
    """Consecutive kernel ids of one context, counted together (a bar of the trace's chart)."""

    ctx: str | None
    first_kernel_id: int
    last_kernel_id: int
    kernels: int
    traced: int
    counted: int  # the kernels with an instruction count
    total_insts: int | None
    max_insts: int | None


@dataclass(frozen=True)
class ContextSummary:
    ctx: str | None
    kernels: int
    traced: int
    total_insts: int | None
    first_kernel_id: int
    last_kernel_id: int

    @property
    def untraced(self) -> int:
        return self.kernels - self.traced


@dataclass(frozen=True)
class KernelSummary:
    contexts: list[ContextSummary]
    top_kernels: list[Kernel]
    runs: list[KernelRun]

    @property
    def kernels(self) -> int:
        return sum(context.kernels for context in self.contexts)

    @property
    def traced(self) -> int:
        return sum(context.traced for context in self.contexts)

    @property
    def untraced(self) -> int:
        return self.kernels - self.traced

    @property
    def total_insts(self) -> int | None:
        totals = [context.total_insts for context in self.contexts if context.total_insts is not None]
        return sum(totals) if totals else None


def kernel_summary(trace_id: str, *, kernel_count: int, run_count: int) -> KernelSummary:
    """The per-context counts, the heaviest kernels and about `run_count` runs: two queries.

    One scan groups the kernels into about `run_count` runs of consecutive kernel ids (sized
    from the trace's `kernel_count`); the context totals are sums of those runs. The top
    kernels are then looked for only in the runs with the highest maxima, which must hold
    them, through the (trace, ctx, kernel_id) index.
    """
    runs = kernel_runs(trace_id, per_run=max(1, math.ceil(kernel_count / run_count)))
    if len(runs) > 2 * run_count + 100:  # kernel_count was stale: size the runs from the truth
        kernels = sum(run.kernels for run in runs)
        runs = kernel_runs(trace_id, per_run=max(1, math.ceil(kernels / run_count)))
    return KernelSummary(contexts=context_totals(runs), top_kernels=top_kernels(trace_id, runs), runs=runs)


def kernel_runs(trace_id: str, *, per_run: int) -> list[KernelRun]:
    """The trace's kernels in runs of `per_run` consecutive kernel ids, in launch order.

    Grouped by the stored context number, then a ctx's devices merged (their kernel ids
    overlap, as they did in one group before the storage was normalised, docs/decisions/0001).
    """
    bucket = ExpressionWrapper((F("kernel_id") - 1) / Value(per_run), output_field=BigIntegerField())
    ctx_of = trace_context_names(trace_id)
    rows = (
        trace_launches(trace_id)
        .annotate(bucket=bucket)
        # No ORDER BY: PostgreSQL then hashes the groups instead of sorting a million rows.
        .order_by()
        .values("context", "bucket")
        .annotate(
            kernels=Count("*"),
            traced_count=Count("kernel_id", filter=Q(traced=True)),
            counted=Count("total_insts"),
            insts=Sum(as_bigint("total_insts")),
            most=Max(as_bigint("total_insts")),
            first=Min("kernel_id"),
            last=Max("kernel_id"),
        )
    )
    merged: dict[tuple, dict] = {}
    for row in rows:
        key = (ctx_of[row["context"]], row["bucket"])
        into = merged.get(key)
        if into is None:
            merged[key] = dict(row)
            continue
        for field in ("kernels", "traced_count", "counted"):
            into[field] += row[field]
        into["insts"] = _add(into["insts"], row["insts"])
        into["most"] = _max(into["most"], row["most"])
        into["first"], into["last"] = min(into["first"], row["first"]), max(into["last"], row["last"])
    return [
        KernelRun(
            ctx=ctx,
            first_kernel_id=row["first"],
            last_kernel_id=row["last"],
            kernels=row["kernels"],
            traced=row["traced_count"],
            counted=row["counted"],
            total_insts=row["insts"],
            max_insts=row["most"],
        )
        for (ctx, _bucket), row in sorted(merged.items(), key=lambda item: (item[0][0] or "", item[0][1]))
    ]


def trace_launches(trace_id: str, manager=None):
    """The trace's launches as `trace_key = <its key>`, the key read first (one small query).

    Filtered through the join on the trace's id instead, the planner cannot tell which key it
    reads, guesses a few hundred launches whatever the trace holds, and sorts a million rows
    through temporary files where it would hash them (docs/performance.md, the admin at 50M
    launches); given the key, its statistics know the big traces.
    """
    manager = manager or Kernel.stored
    key = Trace.objects.filter(pk=trace_id).values_list("key", flat=True).first()
    return manager.none() if key is None else manager.filter(trace=key)


def as_bigint(column: str) -> Cast:
    """An unsigned 32-bit column (PostgreSQL `oid`, which has no SUM) as a bigint."""
    return Cast(column, BigIntegerField())


def _add(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def trace_context_names(trace_id: str) -> dict[int, str | None]:
    """The ctx of each of the trace's context numbers: one query, a few rows."""
    return dict(KernelContext.objects.filter(trace__id=trace_id).values_list("index", "ctx"))


def context_totals(runs: list[KernelRun]) -> list[ContextSummary]:
    contexts: dict[str | None, dict] = {}
    for run in runs:
        total = contexts.setdefault(
            run.ctx,
            {
                "kernels": 0,
                "traced": 0,
                "insts": None,
                "first": run.first_kernel_id,
                "last": run.last_kernel_id,
            },
        )
        total["kernels"] += run.kernels
        total["traced"] += run.traced
        if run.total_insts is not None:
            total["insts"] = (total["insts"] or 0) + run.total_insts
        total["first"] = min(total["first"], run.first_kernel_id)
        total["last"] = max(total["last"], run.last_kernel_id)
    return [
        ContextSummary(
            ctx=ctx,
            kernels=total["kernels"],
            traced=total["traced"],
            total_insts=total["insts"],
            first_kernel_id=total["first"],
            last_kernel_id=total["last"],
        )
        for ctx, total in contexts.items()
    ]


def top_kernels(trace_id: str, runs: list[KernelRun]) -> list[Kernel]:
    """The TOP_KERNELS kernels with the most instructions.

    Each of them is the maximum of its run or shares a run with a heavier one, so the
    TOP_KERNELS runs with the highest maxima hold them all.
    """
    heaviest = sorted((run for run in runs if run.max_insts is not None), key=lambda run: -run.max_insts)
    numbers: dict[str | None, list[int]] = {}
    for number, ctx in trace_context_names(trace_id).items():
        numbers.setdefault(ctx, []).append(number)
    ranges = Q()
    for run in heaviest[:TOP_KERNELS]:
        ranges |= Q(context__in=numbers.get(run.ctx, [])) & Q(
            kernel_id__range=(run.first_kernel_id, run.last_kernel_id)
        )
    if not ranges:
        return []
    return list(
        trace_launches(trace_id, Kernel.objects)
        .filter(ranges, total_insts__isnull=False)
        .order_by("-total_insts", "context", "kernel_id")[:TOP_KERNELS]
    )


def trace_contexts(trace_id: str) -> list[str]:
    """The trace's contexts (its KernelContext rows: a few, whatever the launch count)."""
    return list(
        KernelContext.objects.filter(trace__id=trace_id, ctx__isnull=False)
        .order_by("ctx")
        .values_list("ctx", flat=True)
        .distinct()
    )


# --- the admin's analysis: steps split by kernel, the calibration sample -------------------

# The step chart draws at most this many bars; past that, consecutive steps share one.
MAX_STEP_BARS = 120
# The calibration chart's points: enough to show each kernel's line, few enough for one SVG.
CALIBRATION_POINTS = 2000
# Knuth's multiplicative hash: kernel ids spread over [0, 2**32) with no period, so that a
# threshold samples every step's kernels alike (kernel_id % k would pick the same kernel of a
# decode step that launches k kernels, every time).
_HASH_MULTIPLIER = 2654435761
_HASH_RANGE = 2**32


@dataclass(frozen=True)
class StepSplit:
    """A run of `per_bar` consecutive steps (`bucket` = step index // per_bar) and one of the
    named kernels' launches in it."""

    bucket: int
    name: str
    total_insts: int | None
    duration_ns: int | None


def step_kernel_split(trace_id: str, *, names: list[str], per_bar: int) -> list[StepSplit]:
    """The instructions and measured time of each of `names`' launches per run of `per_bar`
    steps: one GROUP BY, a row per (run, name), whatever the launch count.

    The rest of a run's totals (`traces.analysis.step_totals`) is the other kernels'.
    """
    if not names:
        return []
    bucket = ExpressionWrapper(F("step") / Value(per_bar), output_field=BigIntegerField())
    # The names' ids first (the names table is small): the launches are grouped by id.
    name_of = dict(KernelName.objects.filter(name__in=names).values_list("id", "name"))
    rows = (
        trace_launches(trace_id)
        .filter(step__isnull=False, kernel_name__in=list(name_of))
        .annotate(bucket=bucket)
        .order_by()
        .values("bucket", "kernel_name")
        .annotate(insts=Sum(as_bigint("total_insts")), duration=Sum("duration_ns"))
    )
    return [
        StepSplit(row["bucket"], name_of[row["kernel_name"]], row["insts"], row["duration"]) for row in rows
    ]


# Past this many times its launches, a trace's kernel ids are sparse (a kernelslist's few):
# its sample is then chosen by hashing each launch's id.
DENSE_IDS = 4
# The golden ratio's fraction: the offsets j * GOLDEN (mod 1) spread evenly over [0, 1) and
# never repeat with a period.
GOLDEN = 0.6180339887498949


def calibration_sample(trace_id: str, *, kernel_count: int, limit: int = CALIBRATION_POINTS) -> list[tuple]:
    """About `limit` launches with both an instruction count and a measured time, as
    (ctx, kernel_id, name, total_insts, duration_ns): one query, two past `limit` launches.

    A trace of up to `limit` launches gives them all. A larger one gives the launches of
    `sampled_kernel_ids` in each context: one id in each of about `limit` equal bins of the
    ids, at an offset that moves by the golden ratio from bin to bin, so that no period of
    the launches (a decode step's kernels) picks the same kernel every time. They are found
    in the primary key's index, never by reading a million launches; a trace with sparse ids
    is sampled by a hash of each launch's id instead (Knuth's multiplicative hash).
    """
    kernels = trace_launches(trace_id, Kernel.objects).filter(total_insts__gt=0, duration_ns__gt=0)
    if kernel_count > limit:
        last_ids = dict(
            KernelContext.objects.filter(trace__id=trace_id)
            .annotate(
                last=Subquery(
                    Kernel.stored.filter(trace=OuterRef("trace"), context=OuterRef("index"))
                    .order_by("-kernel_id")
                    .values("kernel_id")[:1]
                )
            )
            .values_list("index", "last")
        )
        last = max((value for value in last_ids.values() if value is not None), default=0)
        if last <= DENSE_IDS * kernel_count:
            ids = sampled_kernel_ids(last, max(1, round(limit * last / kernel_count)))
            kernels = kernels.filter(context__in=list(last_ids), kernel_id__in=ids)
        else:
            spread = ExpressionWrapper(
                (F("kernel_id") * Value(_HASH_MULTIPLIER)) % Value(_HASH_RANGE),
                output_field=BigIntegerField(),
            )
            kernels = kernels.annotate(spread=spread).filter(spread__lt=_HASH_RANGE * limit // kernel_count)
    columns = ("ctx", "kernel_id", "name", "total_insts", "duration_ns")
    # The cap holds even when kernel_count is stale.
    return list(kernels.order_by().values_list(*columns)[:limit])


def sampled_kernel_ids(last: int, count: int) -> list[int]:
    """About `count` kernel ids of 1 to `last`: one in each of `count` equal bins, at an offset
    that moves by the golden ratio from bin to bin (calibration_sample)."""
    step = last / count
    return sorted({1 + int(step * (j + (j * GOLDEN) % 1.0)) for j in range(count)})
