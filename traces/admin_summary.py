"""What the admin's trace page shows about its kernels, computed by the database.

A trace can hold a million kernels, so the page never loads them: one aggregate query gives
the per-context counts and a chart of about `MAX_BARS` bars, one more the heaviest kernels.
Kernel ids restart at 1 in each CUDA context, so "launch order" is (ctx, kernel_id): the
chart shows the contexts one after the other, each in its own launch order.

For a trace still uploading, it also tells which files metadata.json lists that have not
arrived (from the stored file list, no S3 call).
"""

import math
from dataclasses import dataclass, field

from django.db import connection
from django.db.models import BigIntegerField, Count, ExpressionWrapper, F, Max, Min, Q, Sum, Value

from traces.models import Kernel

MAX_BARS = 300
TOP_KERNELS = 10
CHART_WIDTH = 900
CHART_HEIGHT = 200
CHART_LEFT = 70  # room for the y axis labels
CHART_BOTTOM = 30  # room for the context labels
CHART_TOP = 10


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


@dataclass(frozen=True)
class Bar:
    """One bar: a kernel, or a run of consecutive kernels of one context."""

    ctx: str | None
    first_kernel_id: int
    last_kernel_id: int
    kernels: int
    mean_insts: int
    max_insts: int
    x: float = 0
    width: float = 0
    mean_y: float = 0
    mean_height: float = 0
    max_y: float = 0
    max_height: float = 0


@dataclass(frozen=True)
class ContextBand:
    ctx: str | None
    x: float
    width: float


@dataclass
class Chart:
    bars: list[Bar] = field(default_factory=list)
    contexts: list[ContextBand] = field(default_factory=list)
    kernels_per_bar: int = 1
    max_insts: int = 0
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    left: int = CHART_LEFT
    bottom: int = CHART_BOTTOM

    @property
    def plot_bottom(self) -> int:
        return self.height - self.bottom

    @property
    def plot_top(self) -> int:
        return CHART_TOP

    @property
    def mid_insts(self) -> int:
        return self.max_insts // 2

    @property
    def mid_y(self) -> float:
        return (self.plot_top + self.plot_bottom) / 2


def kernel_summary(trace_id: str, *, kernel_count: int) -> tuple[KernelSummary, Chart]:
    """The per-context counts, the heaviest kernels and the chart: two queries.

    One scan groups the kernels into at most about MAX_BARS runs of consecutive kernel ids
    (sized from the trace's `kernel_count`); the context totals are sums of those runs. The
    top kernels are then looked for only in the runs with the highest maxima, which must
    hold them, through the (trace, ctx, kernel_id) index.
    """
    runs = kernel_runs(trace_id, per_bar=max(1, math.ceil(kernel_count / MAX_BARS)))
    if len(runs) > 2 * MAX_BARS + 100:  # kernel_count was stale: size the runs from the truth
        runs = kernel_runs(trace_id, per_bar=max(1, math.ceil(sum(r["kernels"] for r in runs) / MAX_BARS)))
    summary = KernelSummary(contexts=context_totals(runs), top_kernels=top_kernels(trace_id, runs))
    return summary, instruction_chart(runs)


def kernel_runs(trace_id: str, *, per_bar: int) -> list[dict]:
    bucket = ExpressionWrapper((F("kernel_id") - 1) / Value(per_bar), output_field=BigIntegerField())
    rows = (
        Kernel.objects.filter(trace_id=trace_id)
        .annotate(bucket=bucket)
        # No ORDER BY: PostgreSQL then hashes the groups instead of sorting a million rows.
        .order_by()
        .values("ctx", "bucket")
        .annotate(
            kernels=Count("id"),
            traced_count=Count("id", filter=Q(traced=True)),
            counted=Count("total_insts"),
            insts=Sum("total_insts"),
            most=Max("total_insts"),
            first=Min("kernel_id"),
            last=Max("kernel_id"),
        )
    )
    return sorted(rows, key=lambda row: (row["ctx"] or "", row["bucket"]))


def context_totals(runs: list[dict]) -> list[ContextSummary]:
    contexts: dict[str | None, dict] = {}
    for run in runs:
        total = contexts.setdefault(
            run["ctx"], {"kernels": 0, "traced": 0, "insts": None, "first": run["first"], "last": run["last"]}
        )
        total["kernels"] += run["kernels"]
        total["traced"] += run["traced_count"]
        if run["insts"] is not None:
            total["insts"] = (total["insts"] or 0) + run["insts"]
        total["first"] = min(total["first"], run["first"])
        total["last"] = max(total["last"], run["last"])
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


def top_kernels(trace_id: str, runs: list[dict]) -> list[Kernel]:
    """The TOP_KERNELS kernels with the most instructions.

    Each of them is the maximum of its run or shares a run with a heavier one, so the
    TOP_KERNELS runs with the highest maxima hold them all.
    """
    heaviest = sorted((run for run in runs if run["most"] is not None), key=lambda run: -run["most"])
    ranges = Q()
    for run in heaviest[:TOP_KERNELS]:
        ctx = Q(ctx__isnull=True) if run["ctx"] is None else Q(ctx=run["ctx"])
        ranges |= ctx & Q(kernel_id__range=(run["first"], run["last"]))
    if not ranges:
        return []
    return list(
        Kernel.objects.filter(ranges, trace_id=trace_id, total_insts__isnull=False)
        .order_by("-total_insts", "ctx", "kernel_id")
        .only("id", "trace_id", "ctx", "kernel_id", "name", "total_insts", "traced")[:TOP_KERNELS]
    )


def trace_contexts(trace_id: str) -> list[str]:
    """The trace's contexts, skipping along the (trace, ctx, kernel_id) index.

    A recursive query reads one index entry per context, where DISTINCT would read every
    kernel of the trace.
    """
    table = connection.ops.quote_name(Kernel._meta.db_table)
    sql = f"""
        WITH RECURSIVE contexts(ctx) AS (
            SELECT MIN(ctx) FROM {table} WHERE trace_id = %s AND ctx IS NOT NULL
            UNION ALL
            SELECT (SELECT MIN(ctx) FROM {table} WHERE trace_id = %s AND ctx > contexts.ctx)
            FROM contexts WHERE contexts.ctx IS NOT NULL
        )
        SELECT ctx FROM contexts WHERE ctx IS NOT NULL
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [trace_id, trace_id])
        return [row[0] for row in cursor.fetchall()]


def instruction_chart(runs: list[dict]) -> Chart:
    """Instructions per kernel in launch order, as SVG geometry.

    Up to MAX_BARS kernels get a bar each; past that, consecutive kernel ids of a context
    share a bar (the solid part is their mean, the pale part their maximum).
    """
    chart = Chart()
    if not runs:
        return chart
    chart.kernels_per_bar = max(run["kernels"] for run in runs)
    chart.max_insts = max((run["most"] or 0 for run in runs), default=0)
    scale = chart.max_insts or 1
    plot_width = chart.width - chart.left
    plot_height = chart.plot_bottom - chart.plot_top
    slot = plot_width / len(runs)
    gap = min(1.0, slot * 0.1)
    for index, run in enumerate(runs):
        mean = run["insts"] // run["counted"] if run["counted"] else 0
        most = run["most"] or 0
        mean_h, max_h = plot_height * mean / scale, plot_height * most / scale
        chart.bars.append(
            Bar(
                ctx=run["ctx"],
                first_kernel_id=run["first"],
                last_kernel_id=run["last"],
                kernels=run["kernels"],
                mean_insts=mean,
                max_insts=most,
                x=round(chart.left + index * slot, 2),
                width=round(max(slot - gap, 0.5), 2),
                mean_y=round(chart.plot_bottom - mean_h, 2),
                mean_height=round(mean_h, 2),
                max_y=round(chart.plot_bottom - max_h, 2),
                max_height=round(max_h, 2),
            )
        )
    # A band per context under the bars, labelled with the context.
    start = 0
    for index in range(1, len(runs) + 1):
        if index == len(runs) or runs[index]["ctx"] != runs[start]["ctx"]:
            chart.contexts.append(
                ContextBand(
                    ctx=runs[start]["ctx"],
                    x=round(chart.left + start * slot, 2),
                    width=round((index - start) * slot, 2),
                )
            )
            start = index
    return chart
