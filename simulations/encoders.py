"""A simulation's answers as JSON, from the rows `accuracy` reads: stored JSON objects in their
documented key order, a detail's kernels a chunk at a time (as a trace's, `traces.encoders`)."""

from collections.abc import Iterable, Iterator

from simulations import shapes
from simulations.accuracy import SIMULATION_SUMMARY_COLUMNS, SimulationDetail
from traces.encoders import encode_with_kernels, format_timestamp

_INTERRUPTED_KEYS = shapes.INTERRUPTED_KERNEL.keys
_SELECTION_KEYS = shapes.SIMULATION_SELECTION.keys
SIMULATED_KERNEL_KEYS = shapes.SIMULATED_KERNEL.keys
# A summary's key for each column read, where they differ (`owner` is the user's name, joined).
_KEY_OF_COLUMN = {field.column: field.name for field in shapes.SIMULATION_SUMMARY.fields if field.column}


def _ordered(value: dict | None, keys: tuple[str, ...]) -> dict | None:
    """A stored JSON object with the documented keys in the documented order (PostgreSQL's
    jsonb keeps no order); a key it lacks is null, one it has beyond them is not served."""
    return None if value is None else {key: encodable(value.get(key)) for key in keys}


def encodable(value):
    """A stored JSON value that orjson can write: an integer past 64 bits as the float it was
    (PostgreSQL's jsonb gives back a float that holds an integer, 1e20 say, as that integer,
    which orjson refuses), or null past a float's range. One row stored before its numbers were
    bounded must not fail every list it is in."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        try:
            return float(value)
        except OverflowError:
            return None
    if isinstance(value, dict):
        return {key: encodable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [encodable(item) for item in value]
    return value


def simulation_summary_dict(row: tuple, *, columns: tuple[str, ...] = SIMULATION_SUMMARY_COLUMNS) -> dict:
    """A SimulationSummary from `accuracy.simulation_summary_rows` (or, with `trace_id` first in
    `columns`, a row of `accuracy.simulation_list_rows`)."""
    summary = {}
    for column, value in zip(columns, row, strict=True):
        key = _KEY_OF_COLUMN.get(column, column)
        summary[key] = value
        if key == "kernels_compared":
            summary["compared"] = value
    for key in ("created_at", "updated_at"):
        summary[key] = format_timestamp(summary[key])
    summary["fatal"] = _ordered(summary["fatal"], shapes.SIMULATION_FATAL.keys)
    summary["left_out"] = _ordered(summary["left_out"], shapes.SIMULATION_LEFT_OUT.keys) or {
        "kernels": 0,
        "why": None,
    }
    run = _ordered(summary["run"], shapes.SIMULATION_RUN.keys)
    if run is not None and run["selection"] is not None:
        run["selection"] = _ordered(run["selection"], _SELECTION_KEYS)
    summary["run"] = run
    summary["metrics"] = _ordered(summary["metrics"], shapes.SIMULATION_METRICS.keys)
    return summary


def simulation_list_dicts(rows: Iterable[tuple]) -> list[dict]:
    columns = ("trace_id", *SIMULATION_SUMMARY_COLUMNS)
    return [simulation_summary_dict(row, columns=columns) for row in rows]


def simulation_detail_head(detail: SimulationDetail) -> dict:
    """A SimulationDetail without its kernels: the summary, `interrupted`, `steps`, `families`."""
    return {
        **simulation_summary_dict(detail.row),
        "interrupted": [_ordered(kernel, _INTERRUPTED_KEYS) for kernel in detail.interrupted or []],
        "steps": [
            {"step": step.step, "sim_ns": step.sim_ns, "measured_ns": step.measured_ns, "error": step.error}
            for step in detail.steps
        ],
        "families": [
            {
                "family": family.family,
                "count": family.count,
                "mape": family.mape,
                "aggregate_error": family.aggregate_error,
            }
            for family in detail.families
        ],
    }


def simulated_kernel_dict(row: tuple) -> dict:
    return dict(zip(SIMULATED_KERNEL_KEYS, row, strict=True))


def encode_simulation_detail(head: dict, rows: Iterable[tuple]) -> Iterator[bytes]:
    """The SimulationDetail JSON in pieces, kernels a chunk at a time (as `encode_trace_detail`)."""
    return encode_with_kernels(head, rows, simulated_kernel_dict)
