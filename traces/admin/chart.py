"""The trace page's chart: instructions per kernel in launch order, as SVG geometry.

Pure computation from the runs `traces.launch_summaries.kernel_summary` reads (no database): up to
`MAX_BARS` kernels get a bar each; past that, consecutive kernel ids of a context share a
bar. The contexts follow one another, each in its own launch order, a labelled band under
its bars. `admin/traces/trace/kernel_chart.svg` draws the result.
"""

from dataclasses import dataclass, field

from traces.admin.analysis_charts import si
from traces.launch_summaries import KernelRun

MAX_BARS = 300
CHART_WIDTH = 900
CHART_HEIGHT = 250
CHART_LEFT = 70  # room for the y axis labels and its title
CHART_BOTTOM = 48  # room for the context labels and the x axis' title
CHART_TOP = 28  # room for the legend


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
    def max_label(self) -> str:
        """The y axis' top, as the other charts say it (16.3M): the margin holds it."""
        return si(self.max_insts)

    @property
    def mid_label(self) -> str:
        return si(self.mid_insts)

    @property
    def axis_title_y(self) -> int:
        return self.height - 6

    @property
    def mid_insts(self) -> int:
        return self.max_insts // 2

    @property
    def mid_y(self) -> float:
        return (self.plot_top + self.plot_bottom) / 2


def instruction_chart(runs: list[KernelRun]) -> Chart:
    """A bar per run, in the runs' (launch) order: the solid part is the run's mean, the
    pale part its maximum."""
    chart = Chart()
    if not runs:
        return chart
    chart.kernels_per_bar = max(run.kernels for run in runs)
    chart.max_insts = max((run.max_insts or 0 for run in runs), default=0)
    scale = chart.max_insts or 1
    plot_width = chart.width - chart.left
    plot_height = chart.plot_bottom - chart.plot_top
    slot = plot_width / len(runs)
    gap = min(1.0, slot * 0.1)
    for index, run in enumerate(runs):
        mean = run.total_insts // run.counted if run.counted else 0
        most = run.max_insts or 0
        mean_h, max_h = plot_height * mean / scale, plot_height * most / scale
        chart.bars.append(
            Bar(
                ctx=run.ctx,
                first_kernel_id=run.first_kernel_id,
                last_kernel_id=run.last_kernel_id,
                kernels=run.kernels,
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
        if index == len(runs) or runs[index].ctx != runs[start].ctx:
            chart.contexts.append(
                ContextBand(
                    ctx=runs[start].ctx,
                    x=round(chart.left + start * slot, 2),
                    width=round((index - start) * slot, 2),
                )
            )
            start = index
    return chart
