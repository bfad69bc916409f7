"""How close a simulation came to the measured run: Accel-Sim's metrics as GROUP BYs.

x is a launch's measured time (`measured_ns`), y its simulated time (`sim_ns`), over the
launches that have both (overlapped launches have no `sim_ns`). Every metric is a function
of a few sums (n, Σx, Σy, Σxy, Σx², Σy², Σ|y−x|, Σ|y−x|/x, Σ2|y−x|/(x+y), Σ(y−x)², the count
within 10%), read in one query: sums add up, so the same SQL serves one simulation, one of its
steps, a kernel family merged from several names, or every simulation of a simulator build
pooled (never a mean of means). No PostgreSQL-only aggregate (`corr()`): the suite also runs
on SQLite.

The definitions are Accel-Sim's (`plot-correlation.py`; ../shared/docs/accel-sim-correlation.md
section 5): a point with x = 0 adds 0 to the MAPE (Accel-Sim's `err = 0 if hw == 0`) and to
the RPD when x + y = 0; Pearson's r is null with fewer than two points or a constant side.
Every metric is null when nothing was compared; counts are 0. Pearson's r comes from raw
moments in double precision: a side whose variance is lost in rounding (a spread under about
a billionth of its values) counts as constant.
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Case, Count, Exists, FloatField, OuterRef, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Abs, Cast
from django.db.models.lookups import GreaterThan, LessThanOrEqual

from cascade.db_routers import read_connection
from traces import shapes
from traces.demangle import demangle_all
from traces.models import KernelContext, KernelName, SimulatedKernel, Simulation, Step, TraceState

# Rows per round trip when a simulation's launches are streamed.
FETCH_ROWS = 2000
# A side's variance below this fraction of its mean square is rounding, not spread.
CONSTANT_SIDE = 1e-9
ACCURACY_BY = ("simulator_build", "config")
METRIC_KEYS = (
    "mape",
    "aggregate_error",
    "pearson_r",
    "rpd",
    "nrmse",
    "within_10_percent",
    "kernels_compared",
    "sim_total_ns",
    "measured_total_ns",
    "total_error",
)

# --- the sums ------------------------------------------------------------------------------

_X = Cast("measured_ns", FloatField())
_Y = Cast("sim_ns", FloatField())
_ABS = Abs(_Y - _X)
_ZERO = Value(0.0, output_field=FloatField())

# Launches that have both times (an overlapped launch has no simulated time of its own).
COMPARED = Q(sim_ns__isnull=False, measured_ns__isnull=False, overlapped=False)

# The sums every metric is made of, as aggregates over SimulatedKernel rows already narrowed
# to COMPARED ones. `sx_int`: the measured total exactly (a float sum past 2**53 ns rounds).
SUMS = {
    "n": Count("*"),
    "sx_int": Sum("measured_ns"),
    "sx": Sum(_X),
    "sy": Sum(_Y),
    "sxy": Sum(_X * _Y),
    "sxx": Sum(_X * _X),
    "syy": Sum(_Y * _Y),
    "sabs": Sum(_ABS),
    "sape": Sum(Case(When(GreaterThan(_X, 0), then=_ABS / _X), default=_ZERO, output_field=FloatField())),
    "srpd": Sum(
        Case(
            When(GreaterThan(_X + _Y, 0), then=Value(2.0) * _ABS / (_X + _Y)),
            default=_ZERO,
            output_field=FloatField(),
        )
    ),
    "ssq": Sum((_Y - _X) * (_Y - _X)),
    "within": Sum(Case(When(LessThanOrEqual(_ABS, Value(0.1) * _X), then=Value(1)), default=Value(0))),
}
SUM_KEYS = tuple(SUMS)


def empty_sums() -> dict:
    return dict.fromkeys(SUM_KEYS, 0)


def clean_sums(row: dict) -> dict:
    """An aggregate's row as sums: SQL's SUM over no rows is null, here 0."""
    return {key: row.get(key) or 0 for key in SUM_KEYS}


def add_sums(into: dict, other: dict) -> dict:
    for key in SUM_KEYS:
        into[key] += other[key]
    return into


def sums_of(rows: QuerySet[SimulatedKernel]) -> dict:
    """The sums over the compared launches among `rows`: one query."""
    return clean_sums(rows.filter(COMPARED).order_by().aggregate(**SUMS))


def _percent(part: float, whole: float) -> float | None:
    return None if not whole else part / whole * 100


def pearson(n: int, sx: float, sy: float, sxy: float, sxx: float, syy: float) -> float | None:
    """Pearson's r from raw moments; None with fewer than two points or a constant side."""
    if n < 2:
        return None
    vx = n * sxx - sx * sx
    vy = n * syy - sy * sy
    if vx <= CONSTANT_SIDE * n * sxx or vy <= CONSTANT_SIDE * n * syy:
        return None
    r = (n * sxy - sx * sy) / math.sqrt(vx * vy)
    return max(-1.0, min(1.0, r))


def values_from_sums(sums: dict) -> dict:
    """The metrics (METRIC_KEYS, in that order) of these sums."""
    n = sums["n"]
    if n == 0:
        return {
            **dict.fromkeys(METRIC_KEYS),
            "within_10_percent": 0,
            "kernels_compared": 0,
        }
    sx, sy = sums["sx"], sums["sy"]
    return {
        "mape": sums["sape"] / n * 100,
        "aggregate_error": _percent(sums["sabs"], sx),
        "pearson_r": pearson(n, sx, sy, sums["sxy"], sums["sxx"], sums["syy"]),
        "rpd": sums["srpd"] / n * 100,
        "nrmse": math.sqrt(sums["ssq"] / n) / (sx / n) if sx else None,
        "within_10_percent": sums["within"],
        "kernels_compared": n,
        "sim_total_ns": sy,
        "measured_total_ns": sums["sx_int"],
        "total_error": _percent(sy - sx, sx),
    }


def metric_values(rows: QuerySet[SimulatedKernel]) -> dict:
    """The metrics over the compared launches among `rows` (any set: a simulation, a step,
    several simulations): one query."""
    return values_from_sums(sums_of(rows))


# --- one simulation ------------------------------------------------------------------------


def signed_error(sim_ns: float | None, measured_ns: int | None) -> float | None:
    """(y − x) / x in %, signed; None when either is missing or x is 0."""
    if sim_ns is None or not measured_ns:
        return None
    return (sim_ns - measured_ns) / measured_ns * 100


def simulation_metrics(simulation: Simulation) -> dict:
    """Simulation.metrics: the metrics over its compared launches, then the whole run's time
    against the measured time of every launch it simulated (overlapped ones included, the only
    comparison that can include them): two queries."""
    values = metric_values(simulation.kernels.all())
    run_sim_ns = None
    if simulation.sim_total_cycles is not None and simulation.core_clock_mhz:
        run_sim_ns = simulation.sim_total_cycles * 1000 / simulation.core_clock_mhz
    paired = simulation.kernels.order_by().aggregate(
        launches=Count("*"), timed=Count("measured_ns"), measured=Sum("measured_ns")
    )
    # A launch without a measured time leaves the run's measured total unknown.
    run_measured_ns = (
        paired["measured"] if paired["launches"] and paired["timed"] == paired["launches"] else None
    )
    return {
        **values,
        "run_sim_ns": run_sim_ns,
        "run_measured_ns": run_measured_ns,
        "run_error": signed_error(run_sim_ns, run_measured_ns),
    }


@dataclass(frozen=True)
class SimKernelRow:
    """One simulated launch beside its measured time, in the trace's terms."""

    ctx: str | None
    kernel_id: int
    name: str
    step: str | None  # the step's name
    phase: str | None  # the step's phase ("prefill", "decode")
    uid: int
    sim_cycles: int | None
    sim_insn: int | None
    sim_ns: float | None
    measured_ns: int | None
    error: float | None  # signed %
    overlapped: bool


# The columns read for a launch, in SimKernelRow's order (the step as its index, no phase or
# error: those are added from the step table and the times).
_KERNEL_COLUMNS = (
    "launch_context__ctx",
    "kernel_id",
    "kernel_name__name",
    "step",
    "uid",
    "sim_cycles",
    "sim_insn",
    "sim_ns",
    "measured_ns",
    "overlapped",
)


def _steps(simulation: Simulation) -> dict[int, tuple[str, str | None]]:
    """The trace's steps by index: (name, phase). A few rows."""
    return {
        index: (name, phase)
        for index, name, phase in Step.objects.filter(trace_id=simulation.trace_id).values_list(
            "index", "name", "phase"
        )
    }


def _rows(rows: QuerySet[SimulatedKernel], steps: dict, *, stream: bool) -> Iterator[SimKernelRow]:
    values = rows.values_list(*_KERNEL_COLUMNS)
    for ctx, *rest in values.iterator(chunk_size=FETCH_ROWS) if stream else values:
        yield _kernel_row(ctx, rest, steps)


def _kernel_row(ctx: str | None, row, steps: dict) -> SimKernelRow:
    """A stored launch's columns after its ctx (kernel_id ... overlapped), as a SimKernelRow."""
    kernel_id, name, step, uid, cycles, insn, sim_ns, measured_ns, overlapped = row
    step_name, phase = steps.get(step, (None, None)) if step is not None else (None, None)
    return SimKernelRow(
        ctx=ctx,
        kernel_id=kernel_id,
        name=name,
        step=step_name,
        phase=phase,
        uid=uid,
        sim_cycles=cycles,
        sim_insn=insn,
        sim_ns=sim_ns,
        measured_ns=measured_ns,
        error=signed_error(sim_ns, measured_ns),
        overlapped=overlapped,
    )


def simulation_kernels(simulation: Simulation) -> Iterator[SimKernelRow]:
    """Every launch of the simulation in the trace's order (context, kernel_id), streamed a
    chunk at a time (a server-side cursor on PostgreSQL)."""
    steps = _steps(simulation)
    contexts = _contexts(simulation)
    for context, *rest in _stored_rows(_cursor_rows(*kernels_sql(simulation.pk))):
        yield _kernel_row(contexts.get(context), rest, steps)


def worst_kernels(simulation: Simulation, count: int = 20) -> list[SimKernelRow]:
    """The `count` launches with the largest |error|, largest first (ties in the trace's
    order); launches without an error (no time, x = 0) are not ranked."""
    rows = (
        SimulatedKernel.objects.filter(COMPARED, simulation=simulation, measured_ns__gt=0)
        .annotate(abs_error=_ABS / _X)
        .order_by("-abs_error", "context", "kernel_id")[:count]
    )
    return list(_rows(rows, _steps(simulation), stream=False))


@dataclass(frozen=True)
class StepAccuracy:
    """One step of the trace: its compared launches' summed times (null when none)."""

    index: int
    step: str
    phase: str | None
    kernels_compared: int
    sim_ns: float | None
    measured_ns: int | None
    error: float | None  # signed %, of the sums


def simulation_steps(simulation: Simulation) -> list[StepAccuracy]:
    """The steps the simulation has launches in, in the trace's step order: two queries.

    Sums are over the step's compared launches, so both sides cover the same launches.
    """
    groups = {
        row["step"]: row
        for row in SimulatedKernel.objects.filter(simulation=simulation, step__isnull=False)
        .order_by()
        .values("step")
        .annotate(
            compared=Count("id", filter=COMPARED),
            sim=Sum("sim_ns", filter=COMPARED),
            measured=Sum("measured_ns", filter=COMPARED),
        )
    }
    steps = _steps(simulation)
    result = []
    for index in sorted(groups):
        if index not in steps:
            continue  # a step the trace no longer has (a re-parse pending): nothing to name
        row = groups[index]
        name, phase = steps[index]
        sim_ns = row["sim"] if row["compared"] else None
        measured_ns = row["measured"] if row["compared"] else None
        result.append(
            StepAccuracy(
                index=index,
                step=name,
                phase=phase,
                kernels_compared=row["compared"],
                sim_ns=sim_ns,
                measured_ns=measured_ns,
                error=signed_error(sim_ns, measured_ns),
            )
        )
    return result


@dataclass(frozen=True)
class FamilyAccuracy:
    """The compared launches of one kernel family (several names can share one)."""

    family: str
    count: int
    measured_ns: int
    sim_ns: float
    mape: float | None
    aggregate_error: float | None


def kernel_family(demangled: str) -> str:
    """A demangled name without its parameter list and its leading return type:
    `void flash::fwd<T, 4>(Params)` -> `flash::fwd<T, 4>`. A name without either is itself."""
    family = demangled.strip()
    if family.endswith(")"):
        depth = 0
        for position in range(len(family) - 1, -1, -1):
            if family[position] == ")":
                depth += 1
            elif family[position] == "(":
                depth -= 1
                if depth == 0:
                    if position > 0:  # "(anonymous)" alone is a name, not a parameter list
                        family = family[:position].rstrip()
                    break
    return family.removeprefix("void ")


def simulation_families(simulation: Simulation) -> list[FamilyAccuracy]:
    """The compared launches by kernel family, the largest share of measured time first
    (ties by family): one GROUP BY by name id, the names demangled and merged here.

    Ranked by measured time because that is where the run's time, and an error's weight, is;
    a reader after the worst family sorts by `aggregate_error` itself.
    """
    groups = list(
        SimulatedKernel.objects.filter(COMPARED, simulation=simulation)
        .order_by()
        .values("kernel_name")
        .annotate(**SUMS)
    )
    names = dict(
        KernelName.objects.filter(id__in={group["kernel_name"] for group in groups}).values_list("id", "name")
    )
    demangled = demangle_all(names.values())
    families: dict[str, dict] = {}
    for group in groups:
        family = kernel_family(demangled[names[group["kernel_name"]]])
        add_sums(families.setdefault(family, empty_sums()), clean_sums(group))
    result = []
    for family, sums in families.items():
        values = values_from_sums(sums)
        result.append(
            FamilyAccuracy(
                family=family,
                count=sums["n"],
                measured_ns=sums["sx_int"],
                sim_ns=sums["sy"],
                mape=values["mape"],
                aggregate_error=values["aggregate_error"],
            )
        )
    result.sort(key=lambda row: (-row.measured_ns, row.family))
    return result


# --- two simulations of one trace ------------------------------------------------------------


@dataclass(frozen=True)
class KernelChange:
    """One launch both simulations compared: its error in each, and the change of |error|
    in percentage points (negative: b is closer to the measured time)."""

    ctx: str | None
    kernel_id: int
    name: str
    measured_ns: int
    a_sim_ns: float
    b_sim_ns: float
    a_error: float
    b_error: float
    change: float


@dataclass(frozen=True)
class SimulationComparison:
    """Simulation b against simulation a on the launches both compared (x > 0)."""

    a: dict  # simulation_metrics(a)
    b: dict
    compared: int  # launches both compared
    better: int  # |error| smaller in b
    worse: int
    unchanged: int
    mean_change: float | None  # mean change of |error|, percentage points
    most_improved: list[KernelChange]  # the largest decreases of |error|, largest first
    most_worsened: list[KernelChange]  # the largest increases, largest first


def _both_sql(extra: str = "") -> str:
    """The launches both simulations compared (the trace's measured time > 0), joined by
    (context, kernel_id) on the unique index; `change` is the change of |error| in points."""
    table = SimulatedKernel._meta.db_table
    names = KernelName._meta.db_table
    return (
        "SELECT a.context, a.kernel_id, n.name, a.measured_ns, a.sim_ns, b.sim_ns, "
        "(ABS(b.sim_ns - a.measured_ns) - ABS(a.sim_ns - a.measured_ns)) * 100.0 / a.measured_ns AS change "
        f"FROM {table} a JOIN {table} b ON b.simulation_id = %s AND b.context = a.context "
        "AND b.kernel_id = a.kernel_id "
        f"JOIN {names} n ON n.id = a.name_id "
        "WHERE a.simulation_id = %s AND a.sim_ns IS NOT NULL AND b.sim_ns IS NOT NULL "
        "AND a.measured_ns > 0 AND NOT a.overlapped AND NOT b.overlapped" + extra
    )


def _change(row: tuple, contexts: dict[int, str | None]) -> KernelChange:
    context, kernel_id, name, measured, a_sim, b_sim, change = row
    return KernelChange(
        ctx=contexts.get(context),
        kernel_id=kernel_id,
        name=name,
        measured_ns=measured,
        a_sim_ns=a_sim,
        b_sim_ns=b_sim,
        a_error=signed_error(a_sim, measured),
        b_error=signed_error(b_sim, measured),
        change=change,
    )


def _changes(sql: str, params: list, contexts: dict[int, str | None]) -> list[KernelChange]:
    with read_connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [_change(row, contexts) for row in cursor.fetchall()]


def _contexts(simulation: Simulation) -> dict[int, str | None]:
    return dict(KernelContext.objects.filter(trace__id=simulation.trace_id).values_list("index", "ctx"))


def kernel_changes(a: Simulation, b: Simulation) -> Iterator[KernelChange]:
    """Every launch both compared, in the trace's order, streamed a chunk at a time."""
    if a.trace_id != b.trace_id:
        raise ValueError(f"{a} and {b} simulate different traces")
    contexts = _contexts(a)
    sql = _both_sql(" ORDER BY a.context, a.kernel_id")
    with read_connection.chunked_cursor() as cursor:
        cursor.execute(sql, [b.pk, a.pk])
        while rows := cursor.fetchmany(FETCH_ROWS):
            for row in rows:
                yield _change(row, contexts)


def compare_simulations(a: Simulation, b: Simulation, count: int = 20) -> SimulationComparison:
    """Simulation b against a, launch by launch: how many got closer or further from the
    measured time, by how much on average, and the `count` that moved most each way.

    Counts and extremes come from the database (four queries), whatever the launch count;
    `kernel_changes` streams every launch.
    """
    if a.trace_id != b.trace_id:
        raise ValueError(f"{a} and {b} simulate different traces")
    params = [b.pk, a.pk]
    with read_connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*), SUM(CASE WHEN change < 0 THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN change > 0 THEN 1 ELSE 0 END), SUM(change) "
            f"FROM ({_both_sql()}) AS both_compared",
            params,
        )
        compared, better, worse, total_change = cursor.fetchone()
    contexts = _contexts(a)
    order = " ORDER BY change {}, a.context, a.kernel_id LIMIT %s"
    improved = [
        row for row in _changes(_both_sql(order.format("ASC")), [*params, count], contexts) if row.change < 0
    ]
    worsened = [
        row for row in _changes(_both_sql(order.format("DESC")), [*params, count], contexts) if row.change > 0
    ]
    better, worse = better or 0, worse or 0
    return SimulationComparison(
        a=simulation_metrics(a),
        b=simulation_metrics(b),
        compared=compared,
        better=better,
        worse=worse,
        unchanged=compared - better - worse,
        mean_change=total_change / compared if compared else None,
        most_improved=improved,
        most_worsened=worsened,
    )


# --- every simulation of a build or a config -------------------------------------------------


def accuracy_by(by: str, simulations: QuerySet[Simulation]) -> list[dict]:
    """One row per simulator build (or config) over the ready simulations among
    `simulations` that compared at least one kernel: how many simulations and traces, and the
    metrics pooled over every launch they compared (a build's MAPE is over its kernels, not a
    mean of its simulations'), and `left_out`: how many ready simulations of that build compared
    nothing, and why (a build whose simulations all did has a row of 0 simulations). The most
    accurate (lowest MAPE) first, those with nothing compared last: three queries."""
    if by not in ACCURACY_BY:
        raise ValueError(f"by must be one of {', '.join(ACCURACY_BY)}, not {by!r}")
    ready = simulations.filter(state=TraceState.READY).order_by()
    compared_any = Exists(SimulatedKernel.objects.filter(COMPARED, simulation=OuterRef("pk")))
    counted = ready.filter(compared_any)
    counts = {
        row[by]: row
        for row in counted.values(by).annotate(simulations=Count("id"), traces=Count("trace", distinct=True))
    }
    left_out = dict(ready.filter(~compared_any).values(by).annotate(n=Count("id")).values_list(by, "n"))
    sums = {
        row[f"simulation__{by}"]: clean_sums(row)
        for row in SimulatedKernel.objects.filter(COMPARED, simulation__in=counted.values("id"))
        .order_by()
        .values(f"simulation__{by}")
        .annotate(**SUMS)
    }
    rows = []
    for value in dict.fromkeys([*counts, *left_out]):
        count = counts.get(value, {"simulations": 0, "traces": 0})
        metrics = values_from_sums(sums.get(value, empty_sums()))
        rows.append(
            {
                by: value,
                "simulations": count["simulations"],
                "traces": count["traces"],
                "kernels_compared": metrics["kernels_compared"],
                "mape": metrics["mape"],
                "aggregate_error": metrics["aggregate_error"],
                "pearson_r": metrics["pearson_r"],
                "left_out": {
                    "simulations": left_out.get(value, 0),
                    "why": NOTHING_COMPARED if left_out.get(value) else None,
                },
            }
        )
    rows.sort(key=lambda row: (row["mape"] is None, row["mape"] or 0, row[by] is None, row[by] or ""))
    return rows


# --- the API's reads ---------------------------------------------------------------------------

# A SimulationSummary's fields in the API's order (`traces.shapes`): the columns read; its keys
# add `compared` (= kernels_compared, the contract's name) after kernels_compared.
SIMULATION_SUMMARY_COLUMNS = shapes.SIMULATION_SUMMARY.columns()
SIMULATION_SUMMARY_KEYS = shapes.SIMULATION_SUMMARY.keys
RUN_FACT_KEYS = shapes.SIMULATION_RUN.keys
# Why /api/simulations/accuracy leaves a ready simulation out.
NOTHING_COMPARED = "ready, but no kernel compared (see each simulation's reason)"
# Simulation.metrics' keys in the API's order (simulation_metrics writes them).
RUN_KEYS = ("run_sim_ns", "run_measured_ns", "run_error")
SIMULATION_METRIC_KEYS = (*METRIC_KEYS, *RUN_KEYS)
# A simulated launch as the API writes it.
SIMULATED_KERNEL_KEYS = shapes.SIMULATED_KERNEL.keys
# A simulation serves the launches of its last read while ready, and while it is read again.
SERVES_KERNELS = (TraceState.READY, TraceState.PARSING)
_STATE = SIMULATION_SUMMARY_COLUMNS.index("state")


def simulation_summary_rows(trace_id: str) -> list[tuple]:
    """The trace's simulations' SIMULATION_SUMMARY_COLUMNS, newest first: one query."""
    return list(
        Simulation.objects.filter(trace_id=trace_id)
        .order_by("-created_at", "name")
        .values_list(*SIMULATION_SUMMARY_COLUMNS)
    )


def simulation_list_rows(simulations: QuerySet[Simulation]) -> list[tuple]:
    """(trace_id, *SIMULATION_SUMMARY_COLUMNS) of each of `simulations`, newest first (ties by
    trace and name): one query."""
    return list(
        simulations.order_by("-created_at", "trace_id", "name").values_list(
            "trace_id", *SIMULATION_SUMMARY_COLUMNS
        )
    )


@dataclass(frozen=True)
class SimulationDetail:
    """A simulation's summary row, the launches its last read left out, its steps and
    families, and its launches (API tuples, SIMULATED_KERNEL_KEYS), streamed."""

    row: tuple
    interrupted: list
    steps: list[StepAccuracy]
    families: list[FamilyAccuracy]
    kernels: Iterator[tuple]


def kernels_sql(simulation_id: int, limit: int | None = None) -> tuple[str, list]:
    """A simulation's launches in the trace's order, on the (simulation, context, kernel_id)
    unique index; the names joined (a few hundred), contexts and steps mapped in Python."""
    table = SimulatedKernel._meta.db_table
    names = KernelName._meta.db_table
    sql = (
        "SELECT k.context, k.kernel_id, n.name, k.step, k.uid, k.sim_cycles, k.sim_insn, k.sim_ns, "
        f"k.measured_ns, k.overlapped FROM {table} k JOIN {names} n ON n.id = k.name_id "
        "WHERE k.simulation_id = %s ORDER BY k.simulation_id, k.context, k.kernel_id"
    )
    params: list = [simulation_id]
    if limit is not None:
        sql += " LIMIT %s"
        params.append(limit)
    return sql, params


def _fetched(cursor) -> Iterator[tuple]:
    while rows := cursor.fetchmany(FETCH_ROWS):
        yield from rows


def _cursor_rows(sql: str, params: list) -> Iterator[tuple]:
    with read_connection.chunked_cursor() as cursor:
        cursor.execute(sql, params)
        yield from _fetched(cursor)


def _held_rows(cursor) -> Iterator[tuple]:
    with cursor:  # closed when streamed or dropped (a client gone)
        yield from _fetched(cursor)


def _stored_rows(rows: Iterator[tuple]) -> Iterator[tuple]:
    """SQLite answers booleans as 0 and 1."""
    for row in rows:
        yield (*row[:-1], bool(row[-1]))


def api_kernels(
    rows: Iterator[tuple], contexts: dict[int, str | None], steps: dict[int, tuple[str, str | None]]
) -> Iterator[tuple]:
    """Stored rows (kernels_sql) as the API's tuples (SIMULATED_KERNEL_KEYS)."""
    for context, kernel_id, name, step, uid, cycles, insn, sim_ns, measured_ns, overlapped in rows:
        yield (
            contexts.get(context),
            kernel_id,
            name,
            None if step is None else steps.get(step, (None,))[0],
            uid,
            cycles,
            insn,
            sim_ns,
            measured_ns,
            signed_error(sim_ns, measured_ns),
            bool(overlapped),
        )


def _detail_parts(trace_id: str, name: str) -> tuple | None:
    """The simulation's row (summary columns, interrupted, id), steps and families."""
    found = (
        Simulation.objects.filter(trace_id=trace_id, name=name)
        .values_list(*SIMULATION_SUMMARY_COLUMNS, "interrupted", "id")
        .first()
    )
    if found is None:
        return None
    simulation = Simulation(pk=found[-1], trace_id=trace_id)
    serves = found[_STATE] in SERVES_KERNELS
    steps = simulation_steps(simulation) if serves else []
    families = simulation_families(simulation) if serves else []
    return found, simulation, steps, families


def simulation_detail(trace_id: str, name: str, limit: int | None = None) -> SimulationDetail | None:
    """The simulation `name` of the trace, read from one snapshot of the database, or None.

    As `selectors.trace_detail_snapshot` does for a trace: on PostgreSQL the row, the sums and
    the launches' cursor are read and declared in one REPEATABLE READ transaction, the cursor
    held past its commit (WITH HOLD), so that a simulation read again meanwhile cannot mix two
    reads in one answer. Launches are served while the simulation is ready or read again.
    """
    if read_connection.vendor != "postgresql":
        parts = _detail_parts(trace_id, name)
        if parts is None:
            return None
        found, simulation, steps, families = parts
        kernels = iter(())
        if found[_STATE] in SERVES_KERNELS:
            kernels = api_kernels(
                _stored_rows(_cursor_rows(*kernels_sql(simulation.pk, limit))),
                _contexts(simulation),
                _steps(simulation),
            )
        return SimulationDetail(found[:-2], found[-2], steps, families, kernels)
    own_transaction = not read_connection.in_atomic_block
    held = read_connection.chunked_cursor()
    try:
        with transaction.atomic(using=read_connection.alias):
            if own_transaction:
                with read_connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            parts = _detail_parts(trace_id, name)
            if parts is None:
                held.close()
                return None
            found, simulation, steps, families = parts
            if found[_STATE] not in SERVES_KERNELS:
                held.close()
                return SimulationDetail(found[:-2], found[-2], steps, families, iter(()))
            contexts, step_names = _contexts(simulation), _steps(simulation)
            held.execute(*kernels_sql(simulation.pk, limit))
    except BaseException:
        held.close()
        raise
    return SimulationDetail(
        found[:-2], found[-2], steps, families, api_kernels(_held_rows(held), contexts, step_names)
    )
