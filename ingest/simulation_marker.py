"""A simulation's completion marker, `simulation.json`, read strictly: an object of MARKER_KEYS
with `status` required, each text bounded, its dates ISO 8601, its selection one Cascade made.
What it may hold: docs/simulations.md; ingest/simulations.py reads the folder it completes."""

import json
import re
from datetime import datetime

from ingest import bucket
from ingest.bucket import S3Object
from ingest.metadata import bounded_int, finite_float
from simulations.accuracy import RUN_FACT_KEYS
from simulations.errors import SimulationInputError
from traces.storable_text import unstorable_character

MARKER_NAME = "simulation.json"
MAX_MARKER_BYTES = 64 * 1024
# A core clock is a few hundred to a few thousand MHz; outside these it is not one (and the
# nanoseconds of a kernel's cycles, cycles x 1000 / MHz, stay within 64 bits:
# simulations.simlog.MAX_COUNT).
MIN_CLOCK_MHZ = 10
MAX_CLOCK_MHZ = 100_000
MARKER_TEXT_MAX = {
    "simulator": 200,
    "config": 200,
    "notes": 10_000,
    "accel_sim_build": 500,
    "gpgpu_sim_build": 500,
    "host": 255,
    "started_at": 64,
    "ended_at": 64,
}
MARKER_KEYS = (
    "status",
    "simulator",
    "config",
    "core_clock_mhz",
    "notes",
    "accel_sim_build",
    "gpgpu_sim_build",
    "selection",
    "host",
    "started_at",
    "ended_at",
    "exit_status",
)
# The marker's facts of the run, stored as Simulation.run (the API's `run`), in the API's order.
RUN_KEYS = RUN_FACT_KEYS
SELECTION_KEYS = ("select", "cover")
SELECT_STEP = re.compile(r"step:.{1,200}", re.DOTALL)
MAX_EXIT_STATUS = 2**31
STATUSES = ("ok", "failed")


def read_marker(obj: S3Object) -> dict:
    """simulation.json, read strictly: an object of MARKER_KEYS, `status` required."""
    if obj.size > MAX_MARKER_BYTES:
        raise SimulationInputError(f"{MARKER_NAME} is {obj.size} bytes, more than {MAX_MARKER_BYTES}")
    data = bucket.read_object(obj.key, MAX_MARKER_BYTES, etag=obj.etag)

    def refuse_constant(name):
        raise SimulationInputError(f"{MARKER_NAME}: {name} is not a number JSON allows")

    try:
        # Numbers bounded as they are read: an integer of thousands of digits, or 1e999, is refused
        # here rather than overflowing a comparison later.
        marker = json.loads(
            data, parse_constant=refuse_constant, parse_float=finite_float, parse_int=bounded_int
        )
    except RecursionError:
        raise SimulationInputError(f"{MARKER_NAME} is nested too deeply to be a marker") from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, a number refused
        raise SimulationInputError(f"{MARKER_NAME} is not valid JSON: {error}") from None
    if not isinstance(marker, dict):
        raise SimulationInputError(f"{MARKER_NAME} must be a JSON object, not {type(marker).__name__}")
    unknown = sorted(set(marker) - set(MARKER_KEYS))
    if unknown:
        raise SimulationInputError(
            f"{MARKER_NAME}: unknown key {', '.join(map(repr, unknown))} (known: {', '.join(MARKER_KEYS)})"
        )
    status = marker.get("status")
    if status not in STATUSES:
        raise SimulationInputError(f'{MARKER_NAME}: "status" must be "ok" or "failed", not {status!r}')
    for key, most in MARKER_TEXT_MAX.items():
        value = marker.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise SimulationInputError(f'{MARKER_NAME}: "{key}" must be a string or null')
        if len(value) > most:
            raise SimulationInputError(f'{MARKER_NAME}: "{key}" is longer than {most} characters')
        problem = unstorable_character(value)
        if problem is not None:
            raise SimulationInputError(f'{MARKER_NAME}: "{key}" holds {problem}')
    for key in ("started_at", "ended_at"):
        if marker.get(key) is not None and parse_datetime_or_none(marker[key]) is None:
            raise SimulationInputError(
                f'{MARKER_NAME}: "{key}" must be an ISO 8601 time, not {marker[key]!r}'
            )
    exit_status = marker.get("exit_status")
    if exit_status is not None and (
        isinstance(exit_status, bool)
        or not isinstance(exit_status, int)
        or abs(exit_status) > MAX_EXIT_STATUS
    ):
        raise SimulationInputError(
            f'{MARKER_NAME}: "exit_status" must be an integer or null, not {exit_status!r}'
        )
    _check_selection(marker.get("selection"))
    clock = marker.get("core_clock_mhz")
    if clock is not None and not is_clock(clock):
        raise SimulationInputError(
            f'{MARKER_NAME}: "core_clock_mhz" must be a number of MHz from {MIN_CLOCK_MHZ} to '
            f"{MAX_CLOCK_MHZ}, not {clock!r}"
        )
    return marker


def is_clock(value) -> bool:
    """A number of MHz a GPU's core runs at (MIN_CLOCK_MHZ to MAX_CLOCK_MHZ); compared without
    a conversion to float, which an integer of hundreds of digits overflows."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and MIN_CLOCK_MHZ <= value <= MAX_CLOCK_MHZ
    )


def parse_datetime_or_none(value: str):
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _check_selection(selection) -> None:
    """null, or {"select": "unique" | "step:NAME", "cover": number | null} (the contract's)."""
    if selection is None:
        return
    where = f'{MARKER_NAME}: "selection"'
    if not isinstance(selection, dict):
        raise SimulationInputError(f"{where} must be an object or null")
    unknown = sorted(set(selection) - set(SELECTION_KEYS))
    if unknown:
        raise SimulationInputError(
            f"{where}: unknown key {', '.join(map(repr, unknown))} (known: select, cover)"
        )
    select = selection.get("select")
    if not isinstance(select, str) or not (select == "unique" or SELECT_STEP.fullmatch(select)):
        raise SimulationInputError(f'{where}: "select" must be "unique" or "step:NAME", not {select!r}')
    problem = unstorable_character(select)
    if problem is not None:
        raise SimulationInputError(f'{where}: "select" holds {problem}')
    cover = selection.get("cover")
    if cover is not None and (
        isinstance(cover, bool) or not isinstance(cover, int | float) or not 0 < cover <= 1
    ):
        raise SimulationInputError(
            f'{where}: "cover" must be a number above 0 and at most 1, or null, not {cover!r}'
        )


def run_facts(marker: dict) -> dict | None:
    """Simulation.run: the marker's RUN_KEYS (null when it has none of them)."""
    if not any(marker.get(key) is not None for key in RUN_KEYS):
        return None
    facts = {key: marker.get(key) for key in RUN_KEYS}
    if facts["selection"] is not None:
        facts["selection"] = {key: facts["selection"].get(key) for key in SELECTION_KEYS}
    return facts
