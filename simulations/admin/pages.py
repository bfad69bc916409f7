"""What a simulation's page and the compare page show, read and laid out.

The numbers are `simulations.accuracy`'s (metrics, steps, worst kernels, the comparison); this
module reads only what a chart draws and accuracy has no use for: a bounded, deterministic
sample of the simulation's launches for the scatter. A page costs the same few queries for
a hundred simulated launches or a million.
"""

from dataclasses import dataclass

from django.db.models import BigIntegerField, ExpressionWrapper, F, QuerySet, Value
from django.template.loader import render_to_string

from simulations import accuracy, compare, metrics
from simulations.admin.charts import ScatterInput, StepInput, accuracy_scatter, step_chart
from simulations.models import SimulatedKernel, Simulation
from traces.admin.analysis_charts import duration, short_name
from traces.models import Step, TraceState

# The scatter draws at most this many launches: a simulation of more gets a hashed sample of
# its uids, chosen in the database (one scan, SCATTER_POINTS rows), the same on every visit.
SCATTER_POINTS = 2000
_HASH_MULTIPLIER = 2654435761  # Knuth's multiplicative hash: uids in order spread evenly
_HASH_RANGE = 2**32
_HASH_KEY_RANGE = 2**31
WORST_KERNELS = 20
COMPARE_KERNELS = 20

# The metrics as the page lists them: key, label, how to show the value.
METRIC_ROWS = (
    ("mape", "MAPE (Accel-Sim's Err)", "percent"),
    ("aggregate_error", "aggregate error (Σ|y−x| / Σx)", "percent"),
    ("pearson_r", "Pearson r (Correl)", "ratio"),
    ("rpd", "RPD", "percent"),
    ("nrmse", "NRMSE", "ratio"),
    ("within_10_percent", "kernels within ±10%", "count"),
    ("kernels_compared", "kernels compared", "count"),
    ("sim_total_ns", "simulated time, compared kernels", "ns"),
    ("measured_total_ns", "measured time, compared kernels", "ns"),
    ("total_error", "total error (signed)", "signed"),
    ("run_sim_ns", "simulated time, whole run", "ns"),
    ("run_measured_ns", "measured time, whole run", "ns"),
    ("run_error", "whole run's error (signed)", "signed"),
)
# Which way a metric is better: errors lower, agreement higher, signed errors nearer 0. The
# totals and counts are not better either way.
LOWER_IS_BETTER = {"mape", "aggregate_error", "rpd", "nrmse"}
HIGHER_IS_BETTER = {"pearson_r", "within_10_percent"}
NEARER_ZERO_IS_BETTER = {"total_error", "run_error"}


def show(value, kind: str) -> str:
    """A metric as a person reads it; "-" for null."""
    if value is None:
        return "-"
    if kind == "percent":
        return f"{value:.2f}%"
    if kind == "signed":
        return f"{value:+.2f}%"
    if kind == "ratio":
        return f"{value:.4f}"
    if kind == "count":
        return f"{value:,}"
    return duration(value)


def difference(value, kind: str) -> str:
    """b − a of a metric, signed: percentage points for percentages."""
    if value is None:
        return "-"
    if kind in ("percent", "signed"):
        return f"{value:+.2f} pp"
    if kind == "ratio":
        return f"{value:+.4f}"
    if kind == "count":
        return f"{value:+,}"
    return ("+" if value >= 0 else "−") + duration(abs(value))


def signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def metric_rows(metrics: dict | None) -> list[tuple[str, str, str]]:
    """(key, label, value) per metric; none before the simulation is ready."""
    if not metrics:
        return []
    return [(key, label, show(metrics.get(key), kind)) for key, label, kind in METRIC_ROWS]


# --- one simulation ------------------------------------------------------------------------


def hashed_sample(rows: QuerySet, limit: int, key) -> tuple[QuerySet, int]:
    """At most `limit` of `rows` and how many there are (one count): past `limit`, those
    whose hashed `key` (an integer expression: a launch's uid) falls lowest, chosen in the
    database in one scan, the same on every visit."""
    total = rows.count()
    if total > limit:
        # Below 2**31 before Knuth's multiplier: the product stays within a signed 64-bit integer.
        spread = ExpressionWrapper(
            ((key % Value(_HASH_KEY_RANGE)) * Value(_HASH_MULTIPLIER)) % Value(_HASH_RANGE),
            output_field=BigIntegerField(),
        )
        # A hash spread over [0, 2**32): about `limit` rows fall below the threshold; the
        # ordered cut keeps the bound (and the same rows) when more do.
        rows = (
            rows.annotate(spread=spread)
            .filter(spread__lt=_HASH_RANGE * limit // total)
            .order_by("spread", "simulation_id", "uid")[:limit]
        )
    return rows, total


def scatter_sample(simulation: Simulation, *, limit: int | None = None) -> tuple[list[ScatterInput], int]:
    """Up to `limit` (SCATTER_POINTS) compared launches with both times above zero, as
    ScatterInputs, and how many such launches there are: three queries (the count, the
    steps, the sample)."""
    limit = SCATTER_POINTS if limit is None else limit
    rows = SimulatedKernel.objects.filter(
        metrics.COMPARED, simulation=simulation, measured_ns__gt=0, sim_ns__gt=0
    ).order_by()
    rows, total = hashed_sample(rows, limit, F("uid"))
    steps = {
        index: (name, phase)
        for index, name, phase in Step.objects.filter(trace_id=simulation.trace_id).values_list(
            "index", "name", "phase"
        )
    }
    sample = []
    for ctx, kernel_id, name, step, measured, sim in rows.values_list(
        "launch_context__ctx", "kernel_id", "kernel_name__name", "step", "measured_ns", "sim_ns"
    ):
        step_name, phase = steps.get(step, (None, None))
        where = f", {step_name}" if step_name else ""
        sample.append(
            ScatterInput(
                measured_ns=measured,
                sim_ns=sim,
                group=phase,
                title=f"{ctx or 'no context'} kernel {kernel_id} {short_name(name)}{where}: measured "
                f"{duration(measured)}, simulated {duration(sim)} "
                f"({signed(metrics.signed_error(sim, measured))})",
            )
        )
    return sample, total


@dataclass(frozen=True)
class KernelRow:
    """A launch of the worst-kernels table, formatted."""

    kernel: accuracy.SimKernelRow
    label: str
    measured: str
    simulated: str
    error: str


def kernel_rows(kernels: list[accuracy.SimKernelRow]) -> list[KernelRow]:
    return [
        KernelRow(
            kernel=kernel,
            label=short_name(kernel.name, 120),
            measured="-" if kernel.measured_ns is None else duration(kernel.measured_ns),
            simulated="-" if kernel.sim_ns is None else duration(kernel.sim_ns),
            error=signed(kernel.error),
        )
        for kernel in kernels
    ]


def simulation_page(simulation: Simulation) -> dict:
    """The simulation page's context below its summary: metrics, the scatter, the steps,
    the worst kernels. Before the simulation is ready, nothing is read."""
    context = {"metric_rows": metric_rows(simulation.metrics)}
    if simulation.state != TraceState.READY:
        return context
    sample, total = scatter_sample(simulation)
    scatter = accuracy_scatter(sample)
    steps = accuracy.simulation_steps(simulation)
    chart = step_chart(
        [StepInput(label=s.step, phase=s.phase, sim_ns=s.sim_ns, measured_ns=s.measured_ns) for s in steps]
    )
    context.update(
        scatter_drawn=len(scatter.points),
        scatter_total=total,
        scatter_svg=render_to_string("admin/simulations/simulation/scatter.svg", {"chart": scatter}),
        scatter_legend=scatter.legend,
        step_rows=[
            (step, show(step.sim_ns, "ns"), show(step.measured_ns, "ns"), signed(step.error))
            for step in steps
        ],
        steps_per_bar=chart.steps_per_bar,
        step_svg=render_to_string("admin/simulations/simulation/step_bars.svg", {"chart": chart})
        if chart.groups
        else "",
        step_legend=chart.legend,
        worst_rows=kernel_rows(accuracy.worst_kernels(simulation, count=WORST_KERNELS)),
    )
    return context


# --- two simulations of one trace ------------------------------------------------------------


def compare_problem(a: Simulation, b: Simulation) -> str | None:
    """Why these two cannot be compared, in a sentence; None when they can."""
    if a.pk == b.pk:
        return f"{a} is compared with itself: pick two different simulations of one trace."
    if a.trace_id != b.trace_id:
        return (
            f"{a.name} simulates trace {a.trace_id} and {b.name} trace {b.trace_id}: only two "
            "simulations of one trace compare kernel by kernel."
        )
    waiting = [sim for sim in (a, b) if sim.state != TraceState.READY]
    if waiting:
        return "Not ready: " + "; ".join(
            f"{sim.name} is {sim.state}{f' ({sim.error})' if sim.error else ''}" for sim in waiting
        )
    return None


def better_of(key: str, a, b) -> str:
    """Which side a metric favours: "a", "b" or "" (equal, unknown, or not a measure of accuracy)."""
    if a is None or b is None or a == b:
        return ""
    if key in LOWER_IS_BETTER:
        return "b" if b < a else "a"
    if key in HIGHER_IS_BETTER:
        return "b" if b > a else "a"
    if key in NEARER_ZERO_IS_BETTER:
        return "" if abs(a) == abs(b) else ("b" if abs(b) < abs(a) else "a")
    return ""


@dataclass(frozen=True)
class ChangeRow:
    change: compare.KernelChange
    label: str
    measured: str
    a_sim: str
    b_sim: str
    a_error: str
    b_error: str
    points: str


def change_rows(changes: list[compare.KernelChange]) -> list[ChangeRow]:
    return [
        ChangeRow(
            change=change,
            label=short_name(change.name, 120),
            measured=duration(change.measured_ns),
            a_sim=duration(change.a_sim_ns),
            b_sim=duration(change.b_sim_ns),
            a_error=signed(change.a_error),
            b_error=signed(change.b_error),
            points=f"{change.change:+.1f} pp",
        )
        for change in changes
    ]


def compare_page(a: Simulation, b: Simulation) -> dict:
    """The compare page's metrics side by side and the kernels that moved most each way."""
    comparison = compare.compare_simulations(a, b, count=COMPARE_KERNELS)
    rows = []
    for key, label, kind in METRIC_ROWS:
        value_a, value_b = comparison.a.get(key), comparison.b.get(key)
        rows.append(
            (
                label,
                show(value_a, kind),
                show(value_b, kind),
                difference(None if value_a is None or value_b is None else value_b - value_a, kind),
                better_of(key, value_a, value_b),
            )
        )
    return {
        "comparison": comparison,
        "compare_metric_rows": rows,
        "mean_change": "-" if comparison.mean_change is None else f"{comparison.mean_change:+.2f} pp",
        "improved_rows": change_rows(comparison.most_improved),
        "worsened_rows": change_rows(comparison.most_worsened),
    }
