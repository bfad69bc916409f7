"""A simulation page's charts as SVG geometry: measured against simulated time per kernel
(log-log, the y = x line and its ±10% band), and simulated against measured time per step.

Pure computation from rows the page has read (no database); the templates
`admin/simulations/simulation/scatter.svg` and `step_bars.svg` draw the result. Both charts are
bounded whatever the simulation's size: the page hands the scatter a bounded sample, and
the step chart merges consecutive steps past `MAX_STEP_BARS`.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from traces.admin.analysis_charts import PALETTE, LegendEntry, Tick, duration

# Prefill and decode in Okabe-Ito's vermillion and blue, any other phase in the palette's
# next colours, launches outside every step in grey.
PHASE_COLOURS = {"prefill": "#d55e00", "decode": "#0072b2"}
NO_PHASE = "no step"
NO_PHASE_COLOUR = "#8c8c8c"
BAND = 0.10  # the band around y = x: within 10% of the measured time

SCATTER_PLOT = 440  # the square plot's side
SCATTER_LEFT = 70  # the y axis' labels
SCATTER_TOP = 12
SCATTER_BOTTOM = 40  # the x axis' labels and title
SCATTER_RIGHT = 16


def phase_colours(phases: Sequence[str | None]) -> dict[str, str]:
    """A colour per phase label, in `phases`' order (None is NO_PHASE)."""
    extra = iter(colour for colour in PALETTE if colour not in PHASE_COLOURS.values())
    colours: dict[str, str] = {}
    for phase in phases:
        label = phase or NO_PHASE
        if label in colours:
            continue
        if label == NO_PHASE:
            colours[label] = NO_PHASE_COLOUR
        else:
            colours[label] = PHASE_COLOURS.get(label) or next(extra, NO_PHASE_COLOUR)
    return colours


@dataclass(frozen=True)
class ScatterInput:
    """One kernel to draw: its measured and simulated ns, the group it is coloured by (a
    simulation's: its step's phase; a sweep's: its config), its tooltip."""

    measured_ns: float
    sim_ns: float
    group: str | None
    title: str


@dataclass(frozen=True)
class ScatterPoint:
    x: float
    y: float
    colour: str
    title: str


@dataclass
class AccuracyScatter:
    points: list[ScatterPoint] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)  # the same decades on both axes
    y_ticks: list[Tick] = field(default_factory=list)
    legend: list[LegendEntry] = field(default_factory=list)
    band: str = ""  # the ±10% band's polygon, SVG `points`
    identity: tuple[float, float, float, float] = (0, 0, 0, 0)  # y = x: x1, y1, x2, y2
    skipped: int = 0  # rows a log axis cannot place (a time of zero)
    left: int = SCATTER_LEFT
    top: int = SCATTER_TOP
    plot: int = SCATTER_PLOT

    @property
    def width(self) -> int:
        return self.left + self.plot + SCATTER_RIGHT

    @property
    def height(self) -> int:
        return self.top + self.plot + SCATTER_BOTTOM

    @property
    def plot_right(self) -> int:
        return self.left + self.plot

    @property
    def plot_bottom(self) -> int:
        return self.top + self.plot

    @property
    def x_label_y(self) -> int:
        return self.plot_bottom + 16

    @property
    def axis_title_y(self) -> int:
        return self.height - 6


def accuracy_scatter(rows: Sequence[ScatterInput], colours: dict[str, str] | None = None) -> AccuracyScatter:
    """A point per row at (measured, simulated) on one log scale for both axes, so that
    y = x is the square's diagonal and a kernel simulated 10% too slow or fast sits on the
    band's edge. Points are drawn group by group, the most numerous first (underneath); a
    group's colour is `colours`' (by default its phase's, `phase_colours`; None is NO_PHASE)."""
    chart = AccuracyScatter()
    placed = [row for row in rows if row.measured_ns > 0 and row.sim_ns > 0]
    chart.skipped = len(rows) - len(placed)
    if not placed:
        return chart
    values = [value for row in placed for value in (row.measured_ns, row.sim_ns)]
    low = math.floor(math.log10(min(values)))
    high = max(math.ceil(math.log10(max(values))), low + 1)
    span = high - low

    def place_x(log_value: float) -> float:
        return round(chart.left + chart.plot * (log_value - low) / span, 2)

    def place_y(log_value: float) -> float:
        return round(chart.plot_bottom - chart.plot * (log_value - low) / span, 2)

    if colours is None:
        colours = phase_colours([row.group for row in placed])
    present = {row.group or NO_PHASE for row in placed}
    colours = {label: colour for label, colour in colours.items() if label in present}
    counts: dict[str, int] = {}
    for row in placed:
        label = row.group or NO_PHASE
        counts[label] = counts.get(label, 0) + 1
    order = sorted(colours, key=lambda label: -counts[label])
    points = sorted(placed, key=lambda row: order.index(row.group or NO_PHASE))
    chart.points = [
        ScatterPoint(
            x=place_x(math.log10(row.measured_ns)),
            y=place_y(math.log10(row.sim_ns)),
            colour=colours[row.group or NO_PHASE],
            title=row.title,
        )
        for row in points
    ]
    chart.x_ticks = [Tick(place_x(power), duration(10**power)) for power in range(low, high + 1)]
    chart.y_ticks = [Tick(place_y(power), duration(10**power)) for power in range(low, high + 1)]
    chart.identity = (place_x(low), place_y(low), place_x(high), place_y(high))
    # The band between y = 0.9x and y = 1.1x, cut to the square: on log axes both edges are
    # parallels of the diagonal, log10(0.9) below and log10(1.1) above it.
    below, above = math.log10(1 - BAND), math.log10(1 + BAND)
    corners = [
        (low, low),
        (low - below, low),
        (high, high + below),
        (high, high),
        (high - above, high),
        (low, low + above),
    ]
    chart.band = " ".join(f"{place_x(u)},{place_y(w)}" for u, w in corners)
    chart.legend = [
        LegendEntry(label=f"{label} ({counts[label]:,})", title=label, colour=colours[label])
        for label in colours
    ]
    return chart


# --- per step: simulated and measured time side by side -------------------------------------

MAX_STEP_BARS = 120
STEP_WIDTH = 900
STEP_HEIGHT = 260
STEP_LEFT = 80
STEP_RIGHT = 12
STEP_TOP = 12
STEP_BOTTOM = 48  # the phase strip and the steps' labels
SIM_COLOUR = "#cc79a7"
MEASURED_COLOUR = "#56b4e9"


@dataclass(frozen=True)
class StepInput:
    """One step's sums over its compared kernels (accuracy.StepAccuracy's values)."""

    label: str
    phase: str | None
    sim_ns: float | None
    measured_ns: float | None


@dataclass(frozen=True)
class StepGroup:
    """A step, or a run of consecutive steps, as two bars and a strip of its phase's colour."""

    label: str
    x: float  # the simulated bar's; the measured one is right of it
    measured_x: float
    bar_width: float
    sim_y: float
    sim_height: float
    measured_y: float
    measured_height: float
    strip_width: float
    phase_colour: str
    title: str
    labelled: bool


@dataclass
class StepChart:
    groups: list[StepGroup] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    legend: list[LegendEntry] = field(default_factory=list)
    steps_per_bar: int = 1
    width: int = STEP_WIDTH
    height: int = STEP_HEIGHT
    left: int = STEP_LEFT
    top: int = STEP_TOP
    sim_colour: str = SIM_COLOUR
    measured_colour: str = MEASURED_COLOUR

    @property
    def plot_bottom(self) -> int:
        return self.height - STEP_BOTTOM

    @property
    def plot_right(self) -> int:
        return self.width - STEP_RIGHT

    @property
    def strip_y(self) -> int:
        return self.plot_bottom + 2

    @property
    def label_y(self) -> int:
        return self.plot_bottom + 22


def signed_error(sim: float | None, measured: float | None) -> str:
    if sim is None or not measured:
        return "no error (nothing measured)"
    return f"error {(sim - measured) / measured * 100:+.1f}%"


def step_chart(steps: Sequence[StepInput], *, max_bars: int = MAX_STEP_BARS) -> StepChart:
    """Two bars per step, simulated then measured, on one linear scale; past `max_bars`
    steps, runs of consecutive steps share a group (their sums), labelled first – last. A
    run's phase is its steps' one phase, or "mixed"."""
    chart = StepChart()
    if not steps:
        return chart
    per = max(1, math.ceil(len(steps) / max_bars))
    chart.steps_per_bar = per
    runs = [steps[start : start + per] for start in range(0, len(steps), per)]

    def total(values: list[float | None]) -> float | None:
        present = [value for value in values if value is not None]
        return sum(present) if present else None

    sums = [(total([s.sim_ns for s in run]), total([s.measured_ns for s in run])) for run in runs]
    highest = max((value or 0 for pair in sums for value in pair), default=0)
    if not highest:
        return chart
    phases = [{step.phase for step in run} for run in runs]
    colours = phase_colours([step.phase for step in steps])
    colours["mixed"] = "#444444"
    plot_height = chart.plot_bottom - chart.top
    slot = (chart.plot_right - chart.left) / len(runs)
    bar_width = max(min(slot * 0.4, 30), 0.25)
    every = math.ceil(len(runs) / 12)  # at most a dozen labels
    used: set[str] = set()
    for index, (run, (sim, measured), phase_set) in enumerate(zip(runs, sums, phases, strict=True)):
        label = run[0].label if len(run) == 1 else f"{run[0].label} – {run[-1].label}"
        phase = (next(iter(phase_set)) or NO_PHASE) if len(phase_set) == 1 else "mixed"
        used.add(phase)
        sim_h = plot_height * (sim or 0) / highest
        measured_h = plot_height * (measured or 0) / highest
        x = chart.left + index * slot + (slot - 2 * bar_width) / 2
        chart.groups.append(
            StepGroup(
                label=label,
                x=round(x, 2),
                measured_x=round(x + bar_width, 2),
                bar_width=round(bar_width, 2),
                sim_y=round(chart.plot_bottom - sim_h, 2),
                sim_height=round(sim_h, 2),
                measured_y=round(chart.plot_bottom - measured_h, 2),
                measured_height=round(measured_h, 2),
                strip_width=round(2 * bar_width, 2),
                phase_colour=colours[phase],
                title=f"{with_phase(label, phase)}: simulated {'-' if sim is None else duration(sim)}, measured "
                f"{'-' if measured is None else duration(measured)}, {signed_error(sim, measured)}",
                labelled=index % every == 0,
            )
        )
    chart.ticks = [
        Tick(
            round(chart.plot_bottom - plot_height * fraction, 2),
            duration(highest * fraction) if fraction else "0",
        )
        for fraction in (0, 0.5, 1)
    ]
    chart.legend = [
        LegendEntry(label="simulated", title="simulated time", colour=SIM_COLOUR),
        LegendEntry(label="measured", title="measured time", colour=MEASURED_COLOUR),
        *(
            LegendEntry(label=f"phase: {label}", title=label, colour=colour)
            for label, colour in colours.items()
            if label in used
        ),
    ]
    return chart


def with_phase(label: str, phase: str) -> str:
    """`step 3 (decode)`, once: the timeline's step names often carry their phase already
    ("step 26 (decode)"), which a second one would double."""
    return label if phase.lower() in label.lower() else f"{label} ({phase})"
