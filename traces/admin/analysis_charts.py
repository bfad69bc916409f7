"""The analysis charts' geometry: steps as stacked bars, the calibration scatter, two traces'
kernels as paired bars.

Pure computation from what `traces.analysis` and `traces.selectors` read (no database); the
templates `stacked_bars.svg`, `calibration.svg` and `paired_bars.svg` draw the result. The
heaviest kernels keep one colour on every chart of a page (`series_colours`).
"""

import math
from dataclasses import dataclass, field

from django.utils.text import Truncator

from traces.demangle import demangle

# A chart splits its bars by the TOP_SERIES heaviest kernels; the heaviest by instructions and
# by time can differ, so a page colours up to twice as many. Okabe-Ito's colours first, then
# Tableau's; "other" in grey.
TOP_SERIES = 8
PALETTE = (
    "#0072b2",
    "#e69f00",
    "#009e73",
    "#cc79a7",
    "#56b4e9",
    "#d55e00",
    "#8c6d31",
    "#7b4ea3",
    "#76b7b2",
    "#ff9da7",
    "#9c755f",
    "#edc948",
    "#59a14f",
    "#e15759",
    "#af7aa1",
    "#1b3a6b",
)
OTHER = "other"
OTHER_COLOUR = "#b8bec6"

WIDTH = 900
LEFT = 90  # the y axis' labels
RIGHT = 12
TOP = 12
BOTTOM = 46  # the bars' labels
LABEL_CHARS = 60


def shown_name(name: str, shown: dict[str, str] | None = None) -> str:
    """A kernel's name demangled: as the page read it (`shown`, the stored texts), else now."""
    if shown is not None and (text := shown.get(name)) is not None:
        return text
    return demangle(name)


def short_name(name: str, length: int = LABEL_CHARS, shown: dict[str, str] | None = None) -> str:
    """A kernel's demangled name, cut for a legend or a label."""
    return Truncator(shown_name(name, shown)).chars(length)


def series_colours(names: list[str]) -> dict[str, str]:
    """Colour per kernel name (the heaviest first), and OTHER's."""
    colours = dict(zip(names, PALETTE, strict=False))
    colours[OTHER] = OTHER_COLOUR
    return colours


def only(colours: dict[str, str], names: list[str]) -> dict[str, str]:
    """`colours` of `names` (in their order) and OTHER: one chart's series."""
    return {**{name: colours[name] for name in names if name in colours}, OTHER: colours[OTHER]}


def si(value: float) -> str:
    """1234567 -> "1.23M": an axis label."""
    for threshold, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= threshold:
            return f"{value / threshold:.3g}{suffix}"
    return f"{value:.3g}"


def duration(ns: float) -> str:
    """A time in ns as a person reads it: "850 ns", "12.3 µs", "4.5 ms", "1.2 s"."""
    for threshold, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if ns >= threshold:
            return f"{ns / threshold:.3g} {suffix}"
    return f"{ns:.3g} ns"


@dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclass(frozen=True)
class LegendEntry:
    label: str
    title: str
    colour: str


# --- stacked bars: one bar per step (or run of steps), split by kernel -------------------------


@dataclass(frozen=True)
class Segment:
    series: str
    value: int
    y: float
    height: float
    colour: str
    title: str


@dataclass(frozen=True)
class StackedBar:
    label: str
    total: int
    x: float
    width: float
    segments: list[Segment]
    title: str
    labelled: bool


@dataclass
class StackedChart:
    unit: str
    bars: list[StackedBar] = field(default_factory=list)
    legend: list[LegendEntry] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    width: int = WIDTH
    height: int = 260
    left: int = LEFT
    top: int = TOP
    steps_per_bar: int = 1

    @property
    def plot_bottom(self) -> int:
        return self.height - BOTTOM

    @property
    def label_y(self) -> int:
        return self.plot_bottom + 16

    @property
    def axis_middle_y(self) -> float:
        return (self.top + self.plot_bottom) / 2

    @property
    def axis_title_y(self) -> int:
        return self.height - 6


@dataclass(frozen=True)
class StepBar:
    """What one bar stands for: a step or a run of steps, and its values per kernel name."""

    label: str
    total: int | None
    by_series: dict[str, int]  # the heaviest kernels' values; the rest of `total` is OTHER


def value_label(value: float, unit: str) -> str:
    return duration(value) if unit == "ns" else f"{value:,.0f} {unit}"


def stacked_chart(
    bars: list[StepBar],
    colours: dict[str, str],
    *,
    unit: str,
    steps_per_bar: int = 1,
    shown: dict[str, str] | None = None,
) -> StackedChart:
    """A bar per StepBar, its segments bottom-up in `colours`' order, OTHER on top."""
    chart = StackedChart(unit=unit, steps_per_bar=steps_per_bar)
    highest = max((bar.total or 0 for bar in bars), default=0)
    if not bars or not highest:
        return chart
    plot_height = chart.plot_bottom - chart.top
    slot = (chart.width - chart.left - RIGHT) / len(bars)
    width = max(min(slot * 0.8, 80), 0.5)
    every = math.ceil(len(bars) / 12)  # at most a dozen labels under the bars
    used: set[str] = set()
    for index, bar in enumerate(bars):
        total = bar.total or 0
        values = [(name, bar.by_series.get(name, 0)) for name in colours if name != OTHER]
        values.append((OTHER, max(total - sum(value for _, value in values), 0)))
        segments, base = [], chart.plot_bottom
        for name, value in values:
            if not value:
                continue
            used.add(name)
            height = plot_height * value / highest
            base -= height
            share = f" ({value / total:.1%})" if total else ""
            segments.append(
                Segment(
                    series=name,
                    value=value,
                    y=round(base, 2),
                    height=round(height, 2),
                    colour=colours[name],
                    title=f"{bar.label}: {short_name(name, shown=shown) if name != OTHER else OTHER}: "
                    f"{value_label(value, unit)}{share}",
                )
            )
        chart.bars.append(
            StackedBar(
                label=bar.label,
                total=total,
                x=round(chart.left + index * slot + (slot - width) / 2, 2),
                width=round(width, 2),
                segments=segments,
                title=f"{bar.label}: {value_label(total, unit)}",
                labelled=index % every == 0,
            )
        )
    chart.legend = [
        LegendEntry(
            label=OTHER if name == OTHER else short_name(name, shown=shown), title=name, colour=colour
        )
        for name, colour in colours.items()
        if name in used
    ]
    chart.ticks = [
        Tick(round(chart.plot_bottom - plot_height * fraction, 2), axis_label(highest * fraction, unit))
        for fraction in (0, 0.5, 1)
    ]
    return chart


def axis_label(value: float, unit: str) -> str:
    return duration(value) if unit == "ns" else si(value)


# --- the calibration scatter: measured time against instructions, log-log ---------------------


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    colour: str
    title: str


@dataclass
class Scatter:
    points: list[Point] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    legend: list[LegendEntry] = field(default_factory=list)
    width: int = WIDTH
    height: int = 340
    left: int = LEFT
    top: int = TOP

    @property
    def plot_bottom(self) -> int:
        return self.height - BOTTOM

    @property
    def plot_right(self) -> int:
        return self.width - RIGHT

    @property
    def x_label_y(self) -> int:
        return self.plot_bottom + 16

    @property
    def axis_title_y(self) -> int:
        return self.height - 6


def decade_ticks(low: float, high: float, place, label=si) -> list[Tick]:
    return [
        Tick(round(place(10**power), 2), label(10**power))
        for power in range(math.ceil(math.log10(low)), math.floor(math.log10(high)) + 1)
    ]


def calibration_chart(
    rows: list[tuple], colours: dict[str, str], shown: dict[str, str] | None = None
) -> Scatter:
    """A point per (ctx, kernel_id, name, total_insts, duration_ns) row, on log axes: one
    kernel's launches fall on a line whose slope is its instructions per nanosecond."""
    chart = Scatter()
    rows = [row for row in rows if row[3] and row[4]]  # log axes: positive values only
    if not rows:
        return chart
    xs, ys = [row[3] for row in rows], [row[4] for row in rows]
    # Whole decades, so that the ticks land on the axes' ends.
    x_low, x_high = 10 ** math.floor(math.log10(min(xs))), 10 ** math.ceil(math.log10(max(xs)))
    y_low, y_high = 10 ** math.floor(math.log10(min(ys))), 10 ** math.ceil(math.log10(max(ys)))
    x_high, y_high = max(x_high, x_low * 10), max(y_high, y_low * 10)

    def place_x(value: float) -> float:
        span = math.log10(x_high) - math.log10(x_low)
        return chart.left + (chart.plot_right - chart.left) * (math.log10(value) - math.log10(x_low)) / span

    def place_y(value: float) -> float:
        span = math.log10(y_high) - math.log10(y_low)
        return (
            chart.plot_bottom
            - (chart.plot_bottom - chart.top) * (math.log10(value) - math.log10(y_low)) / span
        )

    used: set[str] = set()
    for ctx, kernel_id, name, insts, ns in rows:
        series = name if name in colours else OTHER
        used.add(series)
        chart.points.append(
            Point(
                x=round(place_x(insts), 2),
                y=round(place_y(ns), 2),
                colour=colours[series],
                # A short name per point, the whole one once in the legend (or the mix's table):
                # a long name repeated per launch made this page hundreds of megabytes.
                title=f"{ctx or 'no context'} kernel {kernel_id} {short_name(name, shown=shown)}: "
                f"{insts:,} instructions in {duration(ns)}",
            )
        )
    # The grey "other" points first, under the heavy kernels'.
    chart.points.sort(key=lambda point: point.colour != OTHER_COLOUR)
    chart.x_ticks = decade_ticks(x_low, x_high, place_x)
    chart.y_ticks = decade_ticks(y_low, y_high, place_y, duration)
    chart.legend = [
        LegendEntry(
            label=OTHER if name == OTHER else short_name(name, shown=shown), title=name, colour=colour
        )
        for name, colour in colours.items()
        if name in used
    ]
    return chart


# --- two traces: paired horizontal bars per kernel ------------------------------------------

A_COLOUR = "#0072b2"
B_COLOUR = "#e69f00"
PAIR_ROW = 30
PAIR_LEFT = 330  # the kernels' names
PAIR_LABEL_CHARS = 48


@dataclass(frozen=True)
class PairedRow:
    label: str
    title: str
    y: float
    a_width: float
    b_width: float
    a_title: str
    b_title: str


@dataclass
class PairedChart:
    rows: list[PairedRow] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    axis_title: str = "instructions"
    width: int = WIDTH
    left: int = PAIR_LEFT
    top: int = 24
    a_colour: str = A_COLOUR
    b_colour: str = B_COLOUR
    bar_height: int = (PAIR_ROW - 6) // 2

    @property
    def height(self) -> int:
        return self.top + PAIR_ROW * len(self.rows) + 40

    @property
    def plot_bottom(self) -> int:
        return self.top + PAIR_ROW * len(self.rows)

    @property
    def tick_label_y(self) -> int:
        return self.plot_bottom + 14

    @property
    def axis_title_y(self) -> int:
        return self.plot_bottom + 32

    @property
    def legend_b_x(self) -> int:
        return self.left + 300


# What a paired chart can draw of each side of a KernelComparison: the value, its axis title,
# how a tick and a tooltip say it.
PAIRED_MEASURES = {
    "insts": ("total_insts", "instructions", si, lambda value: f"{value:,} instructions"),
    "time": ("duration_ns", "measured time", duration, duration),
}


def paired_chart(
    kernels: list, *, a_label: str, b_label: str, measure: str = "insts", shown: dict[str, str] | None = None
) -> PairedChart:
    """Instructions (or measured time) of trace a and trace b for each KernelComparison, a's
    bar above b's."""
    attribute, axis_title, tick_label, value_text = PAIRED_MEASURES[measure]
    chart = PairedChart(axis_title=axis_title)

    def value(side) -> int:
        return getattr(side, attribute) or 0

    highest = max((max(value(k.a), value(k.b)) for k in kernels), default=0)
    if not highest:
        return chart
    plot_width = chart.width - chart.left - RIGHT
    for index, kernel in enumerate(kernels):
        name = shown_name(kernel.name, shown)
        a, b = value(kernel.a), value(kernel.b)
        chart.rows.append(
            PairedRow(
                label=Truncator(name).chars(PAIR_LABEL_CHARS),
                title=", ".join(kernel.names),
                y=chart.top + index * PAIR_ROW + 3,
                a_width=round(plot_width * a / highest, 2),
                b_width=round(plot_width * b / highest, 2),
                a_title=f"{a_label}: {name}: {value_text(a)}",
                b_title=f"{b_label}: {name}: {value_text(b)}",
            )
        )
    chart.ticks = [
        Tick(
            round(chart.left + plot_width * fraction, 2), tick_label(highest * fraction) if fraction else "0"
        )
        for fraction in (0, 0.5, 1)
    ]
    return chart
