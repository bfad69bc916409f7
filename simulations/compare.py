"""Two simulations of one trace compared, launch by launch: which launches got closer to the
measured time, which further, by how much (the admin's compare page reads it)."""

from dataclasses import dataclass

from cascade.db_routers import read_connection
from simulations.accuracy import simulation_metrics
from simulations.metrics import signed_error
from simulations.models import SimulatedKernel, Simulation
from traces.launch_summaries import trace_context_names
from traces.models import KernelName


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


def compare_simulations(a: Simulation, b: Simulation, count: int = 20) -> SimulationComparison:
    """Simulation b against a, launch by launch: how many got closer or further from the
    measured time, by how much on average, and the `count` that moved most each way.

    Counts and extremes come from the database (four queries), whatever the launch count.
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
    contexts = trace_context_names(a.trace_id)
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
