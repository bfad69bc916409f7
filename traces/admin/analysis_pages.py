"""What the trace page's analysis and the compare page show, read and laid out.

The reads are `traces.analysis` (the kernel mix, the steps, the comparison: GROUP BYs whose
rows are kernel names and steps, never launches) and two of `traces.selectors` (the steps
split by the heaviest kernels, the calibration sample). A page costs the same few queries for
a hundred launches or a million.
"""

import logging
import math
from dataclasses import dataclass

from django.core.cache import cache
from django.template.loader import render_to_string
from django.utils.html import format_html, format_html_join

from traces import analysis, launch_summaries
from traces.admin.analysis_charts import (
    OTHER,
    TOP_SERIES,
    StepBar,
    calibration_chart,
    duration,
    paired_chart,
    series_colours,
    stacked_chart,
)
from traces.admin.chart import MAX_BARS
from traces.admin.display import kernel_changelist_url, shown_names
from traces.models import Trace
from traces.snapshots import snapshot

logger = logging.getLogger(__name__)

# The compare chart's kernels: the heaviest, by the larger of their two instruction counts.
COMPARE_CHART_KERNELS = 15


@dataclass(frozen=True)
class MixRow:
    """One kernel name of the mix, as its table shows it."""

    kernel: analysis.KernelMix
    colour: str | None  # its colour in the step charts, when it is one of the heaviest
    insts_share: str
    time: str
    time_share: str
    changelist_url: str


@dataclass(frozen=True)
class StepRow:
    """One step of the timeline, as its table shows it."""

    step: analysis.StepTotal
    insts_share: str
    time: str
    time_share: str


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def measured(ns: int | None) -> str:
    return "-" if ns is None else duration(ns)


# A trace page's reads are kept (Django's cache: Redis where CASCADE_CACHE_URL is set, else
# each web process's memory) for a trace of at least this many launches: they are four
# GROUP BYs over every launch, about a second for a million on a busy machine
# (docs/performance.md), and a trace's launches change only with a parse, which saves the
# trace and so changes the key (its `updated_at`). Smaller traces are read every time.
KEEP_PAGE_READS_FROM = 100_000
KEEP_PAGE_READS_SECONDS = 24 * 3600
# Bumped when what is kept changes shape: a kept value from an older Cascade is then never read.
PAGE_READS_VERSION = 1


def trace_page_reads(trace: Trace) -> tuple[launch_summaries.KernelSummary, dict]:
    """The trace page's kernel summary (chart, contexts, heaviest kernels) and analysis
    (`trace_analysis`), from one snapshot; kept for a big trace until it changes."""
    keep = trace.kernel_count >= KEEP_PAGE_READS_FROM
    key = f"cascade:trace-page:v{PAGE_READS_VERSION}:{trace.key}:{trace.updated_at.isoformat()}"
    if keep and (kept := cache.get(key)) is not None:
        return kept
    # One snapshot: the chart, the contexts and the analysis of the same launches.
    with snapshot(one_trace=True):
        summary = launch_summaries.kernel_summary(
            trace.id, kernel_count=trace.kernel_count, run_count=MAX_BARS
        )
        # The mix, steps and calibration of a trace that has kernels (one that failed, or is
        # uploading, says so once, above).
        analysed = trace_analysis(trace) if summary.kernels else {}
    if keep:
        cache.set(key, (summary, analysed), KEEP_PAGE_READS_SECONDS)
    return summary, analysed


def keep_page_reads_after_parse(sender, trace: Trace, **kwargs) -> None:
    """`trace_parsed`'s receiver: a big trace's page reads kept as soon as its parse commits, so
    that its first view is as quick as the next (about 1.6 s for a million launches otherwise).

    Connected only where the cache is shared (CASCADE_CACHE_URL; traces/apps.py): a process's
    own memory would keep them for the parsing process, never for a web one. A failure costs
    the first view its speed, never the parse: logged, not raised."""
    if trace.kernel_count < KEEP_PAGE_READS_FROM:
        return
    try:
        trace_page_reads(trace)
    except Exception:
        logger.warning("%s: its admin page's reads could not be kept ahead", trace.id, exc_info=True)


def trace_analysis(trace: Trace) -> dict:
    """The trace page's context for the kernel mix, the steps and the calibration: five
    queries (four untimed), whatever the trace's size."""
    # One snapshot: a parse committing meanwhile would make the charts disagree with the table.
    with snapshot(one_trace=True):
        return _trace_analysis(trace)


def _trace_analysis(trace: Trace) -> dict:
    summary = analysis.summary(trace.id)
    totals = summary.totals
    timed = totals.duration_ns is not None
    # The mix comes heaviest by instructions first; the time chart splits by the heaviest by
    # time (graph-captured launches have a time and no instruction count).
    by_insts = [kernel.name for kernel in summary.kernels if kernel.total_insts][:TOP_SERIES]
    by_time = [
        kernel.name
        for kernel in sorted(summary.kernels, key=lambda kernel: -(kernel.duration_ns or 0))
        if kernel.duration_ns
    ][:TOP_SERIES]
    colours = series_colours([*by_insts, *(name for name in by_time if name not in by_insts)])
    # The names as the summary read them (stored at ingest): the charts demangle nothing more.
    shown = {kernel.name: kernel.demangled for kernel in summary.kernels}
    step_rows = [
        StepRow(
            step=step,
            insts_share=percent(share(step.total_insts, totals.total_insts)),
            time=measured(step.duration_ns),
            time_share=percent(share(step.duration_ns, totals.duration_ns)),
        )
        for step in summary.steps
    ]
    context = {
        "analysis_totals": totals,
        "mix_rows": [
            MixRow(
                kernel=kernel,
                colour=colours.get(kernel.name),
                insts_share=percent(kernel.insts_share),
                time=measured(kernel.duration_ns),
                time_share=percent(kernel.time_share),
                changelist_url=kernel_changelist_url(trace.id, q=kernel.name),
            )
            for kernel in summary.kernels
        ],
        "analysis_time": measured(totals.duration_ns),
        "timed": timed,
        "step_rows": step_rows,
        "step_table": step_table(step_rows, timed=timed),
    }
    if summary.steps:
        context.update(step_charts(trace, summary.steps, colours, shown, timed=timed))
    if timed:
        sample = launch_summaries.calibration_sample(trace.id, kernel_count=totals.kernel_count)
        context["calibration_points"] = len(sample)
        context["calibration_sampled"] = totals.kernel_count > launch_summaries.CALIBRATION_POINTS
        context["calibration_svg"] = render_to_string(
            "admin/traces/trace/calibration.svg", {"chart": calibration_chart(sample, colours, shown)}
        )
    return context


def step_charts(
    trace: Trace,
    steps: list[analysis.StepTotal],
    colours: dict[str, str],
    shown: dict[str, str],
    *,
    timed: bool,
) -> dict:
    """The step charts' context: instructions per step by kernel, and measured time where
    the trace has it, each bar `steps_per_bar` consecutive steps."""
    per_bar = max(1, math.ceil(len(steps) / launch_summaries.MAX_STEP_BARS))
    split = launch_summaries.step_kernel_split(
        trace.id, names=[name for name in colours if name != OTHER], per_bar=per_bar
    )

    def chart_svg(measure: str, unit: str, title: str) -> str:
        chart = stacked_chart(
            step_bars(steps, split, per_bar, measure), colours, unit=unit, steps_per_bar=per_bar, shown=shown
        )
        return render_to_string("admin/traces/trace/stacked_bars.svg", {"chart": chart, "title": title})

    context = {
        "steps_per_bar": per_bar,
        "step_insts_svg": chart_svg("insts", "instructions", "Instructions per step, by kernel"),
    }
    if timed:
        context["step_time_svg"] = chart_svg("time", "ns", "Measured time per step, by kernel")
    return context


def step_table(rows: list[StepRow], *, timed: bool) -> str:
    """The step table's rows as HTML, written here rather than by the template: a run has
    thousands of steps, and the template's loop and number filters took a second for 2,000
    (docs/performance.md, the admin at 50M launches)."""
    return format_html_join(
        "\n",
        '<tr><td>{}</td><td>{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td>{}</tr>',
        (
            (
                row.step.name,
                row.step.phase or "-",
                number(row.step.kernels),
                number(row.step.total_insts),
                row.insts_share,
                format_html(
                    '<td class="num"{}>{}</td><td class="num">{}</td>',
                    ""
                    if row.step.duration_ns is None
                    else format_html(' title="{} ns"', row.step.duration_ns),
                    row.time,
                    row.time_share,
                )
                if timed
                else "",
            )
            for row in rows
        ),
    )


def share(part: int | None, whole: int | None) -> float | None:
    return None if part is None or not whole else part / whole


def step_bars(
    steps: list[analysis.StepTotal], split: list[launch_summaries.StepSplit], per_bar: int, measure: str
) -> list[StepBar]:
    """A StepBar per run of `per_bar` steps: its total and the heaviest kernels' parts of it."""
    parts: dict[int, dict[str, int]] = {}
    for row in split:
        value = row.total_insts if measure == "insts" else row.duration_ns
        if value:
            parts.setdefault(row.bucket, {})[row.name] = value
    bars = []
    for bucket, start in enumerate(range(0, len(steps), per_bar)):
        run = steps[start : start + per_bar]
        values = [step.total_insts if measure == "insts" else step.duration_ns for step in run]
        present = [value for value in values if value is not None]
        label = run[0].name if len(run) == 1 else f"{run[0].name} – {run[-1].name}"
        bars.append(
            StepBar(label=label, total=sum(present) if present else None, by_series=parts.get(bucket, {}))
        )
    return bars


@dataclass(frozen=True)
class CompareRow:
    """A row of the compare table: a kernel (or the traces' totals), its values formatted."""

    label: str
    symbols: str  # the recorded names merged into the row, for the tooltip
    launches: tuple[str, str, str]  # a, b, b/a
    insts: tuple[str, str, str]
    time: tuple[str, str, str]


def number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def times(value: float | None) -> str:
    """A ratio b/a: "1.25×"; "-" where a has nothing to divide by."""
    return "-" if value is None else f"{value:.3g}×"


def ratio(b: int | None, a: int | None) -> float | None:
    return None if a is None or b is None or a == 0 else b / a


def compare_context(a: Trace, b: Trace, by: str) -> dict:
    """The compare page's table and chart: one query for both traces' kernel names."""
    comparison = analysis.compare(a.id, b.id, by=by)
    # The names as ingest stored them demangled (by symbol; by demangled name they are already).
    shown = shown_names(kernel.name for kernel in comparison.kernels)
    chart = paired_chart(comparison.kernels[:COMPARE_CHART_KERNELS], a_label=a.id, b_label=b.id, shown=shown)
    timed = comparison.a.duration_ns is not None or comparison.b.duration_ns is not None
    total_a, total_b = comparison.a, comparison.b
    context = {
        "comparison": comparison,
        "timed": timed,
        "chart_kernels": len(chart.rows),
        "compare_svg": render_to_string(
            "admin/traces/trace/paired_bars.svg",
            {"chart": chart, "a": a.id, "b": b.id, "title": "Instructions per kernel"},
        ),
        "compare_totals": CompareRow(
            label="all kernels",
            symbols="",
            launches=(
                number(total_a.kernel_count),
                number(total_b.kernel_count),
                times(ratio(total_b.kernel_count, total_a.kernel_count)),
            ),
            insts=(
                number(total_a.total_insts),
                number(total_b.total_insts),
                times(ratio(total_b.total_insts, total_a.total_insts)),
            ),
            time=(
                measured(total_a.duration_ns),
                measured(total_b.duration_ns),
                times(ratio(total_b.duration_ns, total_a.duration_ns)),
            ),
        ),
        "compare_rows": [
            CompareRow(
                # by symbol: the row's name is the symbol, shown demangled; by demangled name:
                # the row's name is already demangled.
                label=shown[kernel.name],
                symbols="\n".join(kernel.names),
                launches=(
                    number(kernel.a.launches),
                    number(kernel.b.launches),
                    times(kernel.ratios.launches),
                ),
                insts=(
                    number(kernel.a.total_insts),
                    number(kernel.b.total_insts),
                    times(kernel.ratios.total_insts),
                ),
                time=(
                    measured(kernel.a.duration_ns),
                    measured(kernel.b.duration_ns),
                    times(kernel.ratios.duration_ns),
                ),
            )
            for kernel in comparison.kernels
        ],
    }
    if timed:
        by_time = sorted(
            (kernel for kernel in comparison.kernels if kernel.a.duration_ns or kernel.b.duration_ns),
            key=lambda kernel: -max(kernel.a.duration_ns or 0, kernel.b.duration_ns or 0),
        )[:COMPARE_CHART_KERNELS]
        time_chart = paired_chart(by_time, a_label=a.id, b_label=b.id, measure="time", shown=shown)
        context["time_chart_kernels"] = len(time_chart.rows)
        context["compare_time_svg"] = render_to_string(
            "admin/traces/trace/paired_bars.svg",
            {"chart": time_chart, "a": a.id, "b": b.id, "title": "Measured time per kernel"},
        )
    return context
