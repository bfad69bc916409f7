"""How close a simulation came to the measured run, read from the database: the metrics
(`simulations.metrics`) of one simulation, of its steps and kernel families, and of every
simulation of a simulator build or config pooled; its launches, its worst kernels; the
simulations API's reads (one snapshot, launches streamed). Two simulations compared:
`simulations.compare`.
"""

from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Sum

from simulations import shapes
from simulations.metrics import (
    ABS_ERROR,
    COMPARED,
    MEASURED,
    METRIC_KEYS,
    SUMS,
    add_sums,
    clean_sums,
    empty_sums,
    metric_values,
    signed_error,
    values_from_sums,
)
from simulations.models import SimulatedKernel, Simulation
from traces.demangle import demangle_all
from traces.launch_summaries import trace_context_names
from traces.models import KernelName, Step, TraceState
from traces.snapshots import snapshot

# Rows per round trip when a simulation's launches are streamed.
FETCH_ROWS = 2000
ACCURACY_BY = ("simulator_build", "config")
# The launches of largest |error| each accuracy row names (`worst`), and their keys.
WORST_IN_ROW = 3
WORST_KEYS = ("trace_id", "simulation", "ctx", "kernel_id", "name", "measured_ns", "sim_ns", "error")
# --- one simulation ------------------------------------------------------------------------


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


def _rows(rows: QuerySet[SimulatedKernel], steps: dict) -> list[SimKernelRow]:
    return [_kernel_row(row, steps) for row in rows.values_list(*_KERNEL_COLUMNS)]


def _kernel_row(row: tuple, steps: dict) -> SimKernelRow:
    """A stored launch's _KERNEL_COLUMNS as a SimKernelRow."""
    ctx, kernel_id, name, step, uid, cycles, insn, sim_ns, measured_ns, overlapped = row
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


def worst_kernels(simulation: Simulation, count: int = 20) -> list[SimKernelRow]:
    """The `count` launches with the largest |error|, largest first (ties in the trace's
    order); launches without an error (no time, x = 0) are not ranked."""
    rows = (
        SimulatedKernel.objects.filter(COMPARED, simulation=simulation, measured_ns__gt=0)
        .annotate(abs_error=ABS_ERROR / MEASURED)
        .order_by("-abs_error", "context", "kernel_id")[:count]
    )
    return _rows(rows, _steps(simulation))


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


# --- every simulation of a build or a config -------------------------------------------------


def accuracy_by(by: str, simulations: QuerySet[Simulation]) -> list[dict]:
    """One row per simulator build (or config) over the ready simulations among
    `simulations`: `accuracy_rows` grouped by one of ACCURACY_BY."""
    if by not in ACCURACY_BY:
        raise ValueError(f"by must be one of {', '.join(ACCURACY_BY)}, not {by!r}")
    return accuracy_rows((by,), simulations)


def accuracy_rows(keys: tuple[str, ...], simulations: QuerySet[Simulation]) -> list[dict]:
    """One row per value of `keys` (of ACCURACY_BY, in that order: a sweep's rows are per
    config and build) over the ready simulations among `simulations` that compared at least
    one kernel: how many simulations and traces, and the metrics pooled over every launch they
    compared (a build's MAPE is over its kernels, not a mean of its simulations'), its
    `worst` launches, and `left_out`: how many ready simulations of that build compared
    nothing, and why (a build whose simulations all did has a row of 0 simulations). The most
    accurate (lowest MAPE) first, those with nothing compared last: three queries and two a row."""
    keys = tuple(key for key in ACCURACY_BY if key in keys)
    ready = simulations.filter(state=TraceState.READY).order_by()
    compared_any = Exists(SimulatedKernel.objects.filter(COMPARED, simulation=OuterRef("pk")))
    counted = ready.filter(compared_any)

    def group(row: dict, prefix: str = "") -> tuple:
        return tuple(row[f"{prefix}{key}"] for key in keys)

    counts = {
        group(row): row
        for row in counted.values(*keys).annotate(
            simulations=Count("id"), traces=Count("trace", distinct=True)
        )
    }
    left_out = {
        group(row): row["n"] for row in ready.filter(~compared_any).values(*keys).annotate(n=Count("id"))
    }
    launches = SimulatedKernel.objects.filter(COMPARED, simulation__in=counted.values("id")).order_by()
    by_simulation = [f"simulation__{key}" for key in keys]
    sums = {
        group(row, "simulation__"): clean_sums(row)
        for row in launches.values(*by_simulation).annotate(**SUMS)
    }
    worst = worst_launches(counted, keys, sums)
    rows = []
    for value in dict.fromkeys([*counts, *left_out]):
        count = counts.get(value, {"simulations": 0, "traces": 0})
        metrics = values_from_sums(sums.get(value, empty_sums()))
        rows.append(
            {
                **dict(zip(keys, value, strict=True)),
                "simulations": count["simulations"],
                "traces": count["traces"],
                "kernels_compared": metrics["kernels_compared"],
                "mape": metrics["mape"],
                "aggregate_error": metrics["aggregate_error"],
                "pearson_r": metrics["pearson_r"],
                "worst": worst.get(value, []),
                "left_out": {
                    "simulations": left_out.get(value, 0),
                    "why": NOTHING_COMPARED if left_out.get(value) else None,
                },
            }
        )
    rows.sort(
        key=lambda row: (
            row["mape"] is None,
            row["mape"] or 0,
            *((row[key] is None, row[key] or "") for key in keys),
        )
    )
    return rows


def worst_launches(counted: QuerySet[Simulation], keys: tuple[str, ...], groups) -> dict[tuple, list[dict]]:
    """The WORST_IN_ROW launches with the largest |error| of each of `groups` (values of
    `keys`) among the `counted` simulations (largest first; ties by simulation, then the
    trace's order), as WORST_KEYS dicts: two queries a group, a top-N scan of its launches (no
    sort of them all), then the few it keeps joined to their names. Launches measured at 0
    have no error to rank."""
    worst = {}
    for value in groups:
        group = Q()
        for key, part in zip(keys, value, strict=True):
            group &= Q(**{f"{key}__isnull": True}) if part is None else Q(**{key: part})
        simulations = counted.filter(group).values("id")
        # The ranking reads one table; the few launches it keeps are joined to their names after.
        top = list(
            SimulatedKernel.objects.filter(COMPARED, simulation__in=simulations, measured_ns__gt=0)
            .annotate(relative_error=ABS_ERROR / MEASURED)
            .order_by("-relative_error", "simulation_id", "context", "kernel_id")
            .values_list("pk", flat=True)[:WORST_IN_ROW]
        )
        found = {
            row[0]: row[1:]
            for row in SimulatedKernel.objects.filter(pk__in=top).values_list("pk", *_WORST_COLUMNS)
        }
        worst[value] = [
            dict(zip(WORST_KEYS, (*found[pk], signed_error(found[pk][-1], found[pk][-2])), strict=True))
            for pk in top
        ]
    return worst


_WORST_COLUMNS = (
    "simulation__trace_id",
    "simulation__name",
    "launch_context__ctx",
    "kernel_id",
    "kernel_name__name",
    "measured_ns",
    "sim_ns",
)


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
    """The simulation `name` of the trace, read from one snapshot of the database
    (`traces.snapshots`), or None: a simulation read again meanwhile cannot mix two reads in
    one answer. Launches are served while the simulation is ready or read again."""
    with snapshot(held=True) as reads:
        parts = _detail_parts(trace_id, name)
        if parts is None:
            return None
        found, simulation, steps, families = parts
        if found[_STATE] not in SERVES_KERNELS:
            return SimulationDetail(found[:-2], found[-2], steps, families, iter(()))
        contexts, step_names = trace_context_names(simulation.trace_id), _steps(simulation)
        rows = reads.held_rows(*kernels_sql(simulation.pk, limit), FETCH_ROWS)
    return SimulationDetail(found[:-2], found[-2], steps, families, api_kernels(rows, contexts, step_names))
