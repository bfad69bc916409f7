"""What the simulations' tests share: a ready simulation of given launches, stored as ingestion
stores one."""

from datetime import UTC, datetime, timedelta

from simulations import accuracy
from simulations.models import SimulatedKernel, Simulation
from traces.models import KernelName, TraceState, name_digest

T0 = datetime(2026, 11, 9, 10, 0, tzinfo=UTC)


def names(*values: str) -> dict[str, KernelName]:
    return {
        value: KernelName.objects.get_or_create(digest=name_digest(value), defaults={"name": value})[0]
        for value in values
    }


def simulate(trace, name: str, launches: list[tuple], *, minutes: int = 0, **fields) -> Simulation:
    """A ready simulation at 1000 MHz (a cycle is a ns) of `launches`:
    (context, kernel_id, name, step, measured_ns, cycles or None for an overlapped launch)."""
    fields = {
        "state": TraceState.READY,
        "simulator": "accel-sim",
        "simulator_build": "build-a",
        "gpgpusim_build": "4.2.0 [build gpgpu-sim_git-commit-13c6711_modified_2.0]",
        "config": "SM90_H100",
        "core_clock_mhz": 1000.0,
        "complete": True,
        "created_at": T0 + timedelta(minutes=minutes),
        **fields,
    }
    simulation = Simulation.objects.create(trace=trace, name=name, **fields)
    known = names(*{launch[2] for launch in launches})
    SimulatedKernel.objects.bulk_create(
        SimulatedKernel(
            simulation=simulation,
            trace_key=trace.key,
            context=context,
            kernel_id=kernel_id,
            uid=uid,
            kernel_name=known[kernel_name],
            step=step,
            measured_ns=measured,
            sim_cycles=cycles,
            sim_insn=None if cycles is None else cycles * 3,
            sim_ns=None if cycles is None else float(cycles),
            overlapped=cycles is None,
        )
        for uid, (context, kernel_id, kernel_name, step, measured, cycles) in enumerate(launches, start=1)
    )
    compared = sum(1 for launch in launches if launch[5] is not None and launch[4] is not None)
    simulation.kernels_simulated = len(launches)
    simulation.kernels_compared = compared
    simulation.sim_total_cycles = sum(launch[5] or 0 for launch in launches)
    if simulation.state == TraceState.READY:
        simulation.metrics = accuracy.simulation_metrics(simulation)
    simulation.save()
    return simulation
