"""Every change of a simulation's state, and what it writes. Ingestion decides
(ingest/simulations.py); the functions here write.

A simulation never writes its trace: not its state, kernels, `updated_at` or ETag. Its
launches are SimulatedKernel rows, replaced in one transaction with the simulation's
state, so readers see the old pairing or the new one, never a mix.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from simulations.models import CURRENT_SIMULATION_READER_VERSION, SimulatedKernel, Simulation
from traces.models import Trace, TraceState, files_fingerprint
from traces.storable_text import replace_unstorable

# What a decision writes; `files` and `files_changed_at` belong to registration.
DECISION_FIELDS = [
    "state",
    "error",
    "updated_at",
    "status",
    "simulator",
    "config",
    "notes",
    "simulator_build",
    "gpgpusim_build",
    "core_clock_mhz",
    "complete",
    "stopped",
    "interrupted",
    "reason",
    "fatal",
    "left_out",
    "run",
    "sim_total_cycles",
    "kernels_simulated",
    "kernels_compared",
    "metrics",
    "parsed_fingerprint",
    "reader_version",
    "parse_attempts",
    "trace_seen_at",
]
# The fields of what was read (the marker, the log): cleared when a simulation fails or waits.
READ_FIELDS = {
    "status": None,
    "simulator": None,
    "config": None,
    "notes": None,
    "simulator_build": None,
    "gpgpusim_build": None,
    "core_clock_mhz": None,
    "complete": None,
    "stopped": None,
    "interrupted": [],
    "reason": None,
    "fatal": None,
    "left_out": None,
    "run": None,
    "sim_total_cycles": None,
    "kernels_simulated": 0,
    "kernels_compared": 0,
    "metrics": None,
}
BATCH = 5_000


@dataclass(frozen=True)
class SimulationChange:
    trace_id: str
    name: str
    old_state: str | None
    new_state: str
    kernels_compared: int = 0
    error: str | None = None

    def __str__(self) -> str:
        line = f"{self.trace_id}/simulations/{self.name}: {self.old_state or 'new'} -> {self.new_state}"
        if self.new_state == TraceState.READY:
            line += f", {self.kernels_compared} kernels compared"
        if self.error:
            line += f" ({self.error})"
        return line


def simulations_register(trace: Trace, folders: dict[str, list[dict]]) -> list[tuple[Simulation, str]]:
    """Record the listing of the trace's `simulations/` folder: {name: files}. Each simulation
    with "created", "changed" or "unchanged"; one whose folder is gone is deleted ("deleted").

    A simulation whose files changed is `uploading` again: its marker may not have landed.
    """
    now = timezone.now()
    outcomes = []
    with transaction.atomic():
        existing = {sim.name: sim for sim in Simulation.objects.select_for_update().filter(trace=trace)}
        for name, files in folders.items():
            simulation = existing.pop(name, None)
            if simulation is None:
                # get_or_create: another registration of this trace's listing (a /complete, and
                # the read of another of its simulations) may insert the name meanwhile.
                simulation, created = Simulation.objects.get_or_create(
                    trace=trace,
                    name=name,
                    defaults={"files": files, "files_changed_at": now, "created_at": now, "updated_at": now},
                )
                if created:
                    outcomes.append((simulation, "created"))
                    continue
            if simulation.files != files:
                simulation.files, simulation.files_changed_at = files, now
                simulation.state, simulation.error, simulation.updated_at = TraceState.UPLOADING, None, now
                simulation.parse_attempts = 0
                simulation.save(
                    update_fields=[
                        "files",
                        "files_changed_at",
                        "state",
                        "error",
                        "updated_at",
                        "parse_attempts",
                    ]
                )
                outcomes.append((simulation, "changed"))
            else:
                outcomes.append((simulation, "unchanged"))
        for simulation in existing.values():
            simulation.delete()
            outcomes.append((simulation, "deleted"))
    return outcomes


WAITING_FOR_MARKER = "waiting for simulation.json"


def simulation_wait(simulation: Simulation, *, fingerprint: str, trace_seen_at, reason: str) -> None:
    """Files landed, not its marker (or its trace is not ready yet): `uploading`, nothing read,
    `reason` saying what it waits for. Its fingerprint is kept: it is decided on again only when
    its listing (or its trace) changes, not every pass."""
    _decided(
        simulation,
        TraceState.UPLOADING,
        None,
        fingerprint=fingerprint,
        trace_seen_at=trace_seen_at,
        read={"reason": reason},
    )


def simulation_start_parsing(simulation: Simulation) -> None:
    simulation.state, simulation.updated_at = TraceState.PARSING, timezone.now()
    simulation.save(update_fields=["state", "updated_at"])


def simulation_fail(
    simulation: Simulation, error: str, *, fingerprint: str, trace_seen_at, read: dict | None = None
) -> None:
    """Failed with `error` (what is wrong, in the uploader's terms); its pairs dropped. `read`:
    what was read before the failure (the marker's fields, the builds), kept for the operator."""
    with transaction.atomic():
        SimulatedKernel.objects.filter(simulation=simulation).delete()
        _decided(
            simulation,
            TraceState.FAILED,
            replace_unstorable(error),
            fingerprint=fingerprint,
            trace_seen_at=trace_seen_at,
            read={
                key: replace_unstorable(value) if isinstance(value, str) else value
                for key, value in (read or {}).items()
            },
        )


def simulation_store(
    simulation: Simulation,
    rows: Iterable[SimulatedKernel],
    *,
    read: Callable[[], dict],
    metrics: Callable[[Simulation], dict],
    fingerprint: str,
    trace_seen_at,
) -> int:
    """Replace the simulation's pairs with `rows` and make it ready, with what was `read`
    and its `metrics`, both asked for once the rows are stored.

    `rows` are consumed as they come, in batches: an error raised while they are produced
    (a name that does not match) rolls the whole replacement back.
    """
    count = 0
    with transaction.atomic():
        SimulatedKernel.objects.filter(simulation=simulation).delete()
        batch = []
        for row in rows:
            batch.append(row)
            if len(batch) == BATCH:
                SimulatedKernel.objects.bulk_create(batch)
                count += len(batch)
                batch = []
        SimulatedKernel.objects.bulk_create(batch)
        count += len(batch)
        facts = {**read(), "kernels_simulated": count}
        for key, value in facts.items():  # what the metrics read of it (its clock, its total)
            setattr(simulation, key, value)
        values = metrics(simulation)
        facts.update(metrics=values, kernels_compared=values["kernels_compared"])
        _decided(
            simulation,
            TraceState.READY,
            None,
            fingerprint=fingerprint,
            trace_seen_at=trace_seen_at,
            read=facts,
        )
    return count


def simulation_seen(simulation: Simulation, trace_seen_at) -> None:
    """Its trace changed, but not in a way that changes the pairing (a sample mark): noted, so
    that the next pass does not look again."""
    Simulation.objects.filter(pk=simulation.pk).update(trace_seen_at=trace_seen_at)
    simulation.trace_seen_at = trace_seen_at


def simulation_owner_set(simulation: Simulation, owner) -> None:
    """Its owner (a user, or None) as the folder's owner record names it. Not a decision: its
    state and `updated_at` stay."""
    Simulation.objects.filter(pk=simulation.pk).update(owner=owner)
    simulation.owner = owner


def simulation_delete(simulation: Simulation) -> None:
    """The simulation and its pairs gone in one transaction (its folder already emptied by
    ingestion, its lock held by the caller)."""
    with transaction.atomic():
        # No model refers to a simulated kernel: Django deletes them in one statement.
        SimulatedKernel.objects.filter(simulation=simulation).delete()
        Simulation.objects.filter(pk=simulation.pk).delete()


def count_attempt(simulation: Simulation) -> int:
    """One more try of the simulation's current files ended in an error of ours: how many now."""
    Simulation.objects.filter(pk=simulation.pk).update(parse_attempts=F("parse_attempts") + 1)
    simulation.parse_attempts = Simulation.objects.values_list("parse_attempts", flat=True).get(
        pk=simulation.pk
    )
    return simulation.parse_attempts


def _decided(
    simulation: Simulation, state: str, error, *, fingerprint, trace_seen_at, read: dict | None = None
):
    for key, value in {**READ_FIELDS, **(read or {})}.items():
        setattr(simulation, key, value)
    simulation.state, simulation.error = state, error
    simulation.parsed_fingerprint = fingerprint
    simulation.reader_version = CURRENT_SIMULATION_READER_VERSION
    simulation.trace_seen_at = trace_seen_at
    simulation.updated_at = timezone.now()
    if state != TraceState.FAILED or not error.startswith("internal error"):
        simulation.parse_attempts = 0
    simulation.save(update_fields=DECISION_FIELDS)


def simulation_fingerprint(files: list[dict], trace: Trace) -> str:
    """What a simulation's reading depends on: its files, and its trace's parse (state, files,
    parser, launches). Equal fingerprints, nothing to read again."""
    trace_part = [
        {
            "key": "trace",
            "bytes": trace.kernel_count,
            "etag": f"{trace.state}:{trace.parsed_fingerprint}:{trace.parser_version}",
        },
        {"key": "reader", "bytes": CURRENT_SIMULATION_READER_VERSION, "etag": ""},
    ]
    return files_fingerprint([*files, *trace_part])
