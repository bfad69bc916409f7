"""What a sweep answers (`GET /api/sweeps/{id}/accuracy`): its ready simulations' accuracy
per config and simulator build, computed as `/api/simulations/accuracy` computes its rows
(`accuracy.accuracy_rows`, one implementation); each job's cell; and, against another sweep,
the traces both simulated compared kernel by kernel (`compare.compare_simulations`).

A job's simulation is the Simulation (job.trace, job.simulation_name); a sweep's ready
simulations are those of its `ready` jobs (a job reused an existing simulation of the same
build under that simulation's own name).
"""

from dataclasses import dataclass

from django.db.models import Exists, OuterRef, QuerySet

from simulations import accuracy, compare
from simulations.models import Simulation, Sweep, SweepJob, SweepJobState
from traces.models import TraceState

# The kernels a pair names each way (better, worse): the admin's compare page's count.
AGAINST_KERNELS = 20
PAIRED_BY_CONFIG = "config"
PAIRED_BY_TRACE = "trace"


def sweep_simulations(sweep: Sweep) -> QuerySet[Simulation]:
    """The simulations of the sweep's ready jobs (any state: accuracy keeps the ready ones)."""
    jobs = SweepJob.objects.filter(
        sweep=sweep, state=SweepJobState.READY, trace=OuterRef("trace"), simulation_name=OuterRef("name")
    )
    return Simulation.objects.filter(Exists(jobs))


def by_config(sweep: Sweep) -> list[dict]:
    """One row per (config, simulator build) among the sweep's ready simulations, as
    `/api/simulations/accuracy` writes its rows (both keys)."""
    return accuracy.accuracy_rows(accuracy.ACCURACY_BY, sweep_simulations(sweep))


@dataclass(frozen=True)
class Cell:
    """A job and, once it is ready, its simulation (None before, or when it was deleted)."""

    job_id: int
    trace_id: str
    config: str
    state: str
    simulation_name: str | None
    simulation: Simulation | None


def cells(sweep: Sweep, limit: int | None = None) -> list[Cell]:
    """Each job of the sweep in its order (the first `limit`), with its ready simulation:
    two queries."""
    jobs = SweepJob.objects.filter(sweep=sweep).order_by("id")
    jobs = list(
        (jobs[:limit] if limit is not None else jobs).values_list(
            "id", "trace_id", "config", "state", "simulation_name"
        )
    )
    wanted = {
        (trace_id, name) for _, trace_id, _, state, name in jobs if name and state == SweepJobState.READY
    }
    found = {}
    if wanted:
        simulations = Simulation.objects.filter(
            trace_id__in={trace_id for trace_id, _ in wanted},
            name__in={name for _, name in wanted},
            state=TraceState.READY,
        ).only("pk", "trace_id", "name", "config", "kernels_compared", "metrics", "state", "created_at")
        found = {(sim.trace_id, sim.name): sim for sim in simulations}
    return [
        Cell(
            job_id=job_id,
            trace_id=trace_id,
            config=config,
            state=state,
            simulation_name=name,
            simulation=found.get((trace_id, name)) if state == SweepJobState.READY else None,
        )
        for job_id, trace_id, config, state, name in jobs
    ]


def cell_dict(cell: Cell) -> dict:
    simulation = cell.simulation
    return {
        "trace_id": cell.trace_id,
        "config": cell.config,
        "simulation": cell.simulation_name,
        "state": cell.state,
        "kernels_compared": None if simulation is None else simulation.kernels_compared,
        "mape": None if simulation is None else (simulation.metrics or {}).get("mape"),
    }


def sweep_accuracy(sweep: Sweep, against: Sweep | None = None) -> dict:
    """The answer of `GET /api/sweeps/{id}/accuracy[?against=]` (shapes.SWEEP_ACCURACY)."""
    answer = {
        "id": sweep.pk,
        "name": sweep.name,
        "by_config": by_config(sweep),
        "cells": [cell_dict(cell) for cell in cells(sweep)],
    }
    if against is not None:
        answer["against"] = against_dict(sweep, against)
    return answer


# --- two sweeps side by side ---------------------------------------------------------------------


def pairs(sweep: Sweep, against: Sweep) -> tuple[str, list[tuple[Cell, Cell]]]:
    """The cells both sweeps have a ready simulation in, as (against's, this sweep's): by
    (trace, config) when the sweeps share a config, else by trace (each config of one against
    each of the other's: one each when each sweep ran one config). In this sweep's job order."""
    mine = [cell for cell in cells(sweep) if cell.simulation is not None]
    theirs = [cell for cell in cells(against) if cell.simulation is not None]
    shared = {cell.config for cell in mine} & {cell.config for cell in theirs}
    if shared:
        by_cell = {(cell.trace_id, cell.config): cell for cell in theirs}
        found = [(by_cell.get((cell.trace_id, cell.config)), cell) for cell in mine]
        return PAIRED_BY_CONFIG, [(other, cell) for other, cell in found if other is not None]
    by_trace: dict[str, list[Cell]] = {}
    for cell in theirs:
        by_trace.setdefault(cell.trace_id, []).append(cell)
    return PAIRED_BY_TRACE, [(other, cell) for cell in mine for other in by_trace.get(cell.trace_id, [])]


def change_dict(change: compare.KernelChange) -> dict:
    return {
        "ctx": change.ctx,
        "kernel_id": change.kernel_id,
        "name": change.name,
        "measured_ns": change.measured_ns,
        "against_sim_ns": change.a_sim_ns,
        "sim_ns": change.b_sim_ns,
        "against_error": change.a_error,
        "error": change.b_error,
        "change": change.change,
    }


def pair_dict(other: Cell, cell: Cell, count: int = AGAINST_KERNELS) -> dict:
    """This sweep's simulation (b) against the other's (a), launch by launch."""
    comparison = compare.compare_simulations(other.simulation, cell.simulation, count=count)
    return {
        "trace_id": cell.trace_id,
        "config": cell.config,
        "against_config": other.config,
        "simulation": cell.simulation_name,
        "against_simulation": other.simulation_name,
        "mape": comparison.b["mape"],
        "against_mape": comparison.a["mape"],
        "compared": comparison.compared,
        "better": comparison.better,
        "worse": comparison.worse,
        "unchanged": comparison.unchanged,
        "mean_change": comparison.mean_change,
        "better_kernels": [change_dict(change) for change in comparison.most_improved],
        "worse_kernels": [change_dict(change) for change in comparison.most_worsened],
    }


def against_dict(sweep: Sweep, against: Sweep) -> dict:
    """The sweep against another (shapes.SWEEP_AGAINST): each shared cell's comparison and
    their totals."""
    paired_by, found = pairs(sweep, against)
    compared = [pair_dict(other, cell) for other, cell in found]
    return {
        "id": against.pk,
        "name": against.name,
        "paired_by": paired_by,
        "compared": sum(pair["compared"] for pair in compared),
        "better": sum(pair["better"] for pair in compared),
        "worse": sum(pair["worse"] for pair in compared),
        "unchanged": sum(pair["unchanged"] for pair in compared),
        "pairs": compared,
    }
