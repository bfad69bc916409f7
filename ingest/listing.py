"""A listing as the database records it, and the page of a sweep: what the scan (ingest.scan),
the sweep (ingest.sweep) and the simulations (ingest.simulations) share, so that none of them
imports another for it."""

from collections.abc import Iterable
from dataclasses import dataclass, field

from ingest.bucket import S3Object
from ingest.paths import path_problem
from traces.models import Trace, files_fingerprint
from traces.storable_text import is_storable


def inventory(objects: Iterable[S3Object], *, every_path: bool = False) -> list[dict]:
    """The listing as a trace (`Trace.files`) or a simulation (`Simulation.files`) records it,
    in key order: a trace's without the objects whose path is not a plain relative one
    (`path_problem`), which no one lists, signs or reads; a simulation's (`every_path`) whole."""
    return [
        {"key": obj.key, "bytes": obj.size, "etag": obj.etag}
        for obj in sorted(objects, key=lambda obj: obj.key)
        if every_path or path_problem(obj.name) is None
    ]


def fingerprint(objects: list[S3Object]) -> str:
    return files_fingerprint(inventory(objects))


def storable_run_id(run_id: str) -> bool:
    """Whether the database can hold `run_id` as a trace's id (Trace.id: text of 1,024
    characters at most, no NUL, no lone surrogate)."""
    return len(run_id) <= Trace._meta.get_field("id").max_length and is_storable(run_id)


@dataclass
class Swept:
    """One page of the sweep (ingest.sweep) and what differs on it: what the scan lists for it."""

    after: str  # the page holds the keys after this one ("" from the prefix's start)
    objects: int = 0  # keys on the page
    last: bool = True  # no key follows the page: the next one starts the prefix again
    next_after: str = ""
    runs: list[str] = field(default_factory=list)  # runs whose trace differs: listed and decided on
    simulation_runs: list[str] = field(default_factory=list)  # runs whose simulations differ
    pages: int = 1  # listing requests (watch_pages merges several)
    watch: bool = False  # a polling pass's watch (watch_pages), not the reconciler's page

    def __str__(self) -> str:
        where = f"after {self.after!r}" if self.after else "from the start"
        differ = f"{len(self.runs)} runs differ"
        if self.simulation_runs:
            differ += f", {len(self.simulation_runs)} runs' simulations"
        pages = f" in {self.pages} pages" if self.pages != 1 else ""
        return (
            f"swept {self.objects} objects{pages} {where}{', the last page' if self.last else ''}: {differ}"
        )
