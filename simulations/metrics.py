"""Accel-Sim's accuracy metrics as sums a GROUP BY reads: MAPE, aggregate error, Pearson's r,
RPD, NRMSE (their definitions: docs/formats.md#accuracy-metrics).

x is a launch's measured time (`measured_ns`), y its simulated time (`sim_ns`), over the
launches that have both (overlapped launches have no `sim_ns`). Every metric is a function
of a few sums (n, Σx, Σy, Σxy, Σx², Σy², Σ|y−x|, Σ|y−x|/x, Σ2|y−x|/(x+y), Σ(y−x)², the count
within 10%), read in one query: sums add up, so the same SQL serves one simulation, one of its
steps, a kernel family merged from several names, or every simulation of a simulator build
pooled (never a mean of means). No PostgreSQL-only aggregate (`corr()`): the suite also runs
on SQLite.

The definitions are Accel-Sim's (`plot-correlation.py`): a point with x = 0 adds 0 to the MAPE
(Accel-Sim's `err = 0 if hw == 0`) and to the RPD when x + y = 0; Pearson's r is null with
fewer than two points or a constant side. Every metric is null when nothing was compared;
counts are 0. Pearson's r comes from raw moments in double precision: a side whose variance is
lost in rounding (a spread under about a billionth of its values) counts as constant.
"""

import math

from django.db.models import Case, Count, FloatField, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Abs, Cast
from django.db.models.lookups import GreaterThan, LessThanOrEqual

from simulations.models import SimulatedKernel

# A side's variance below this fraction of its mean square is rounding, not spread.
CONSTANT_SIDE = 1e-9
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

# x, y and |y − x| as floats.
MEASURED = Cast("measured_ns", FloatField())
SIMULATED = Cast("sim_ns", FloatField())
ABS_ERROR = Abs(SIMULATED - MEASURED)
_ZERO = Value(0.0, output_field=FloatField())

# Launches that have both times (an overlapped launch has no simulated time of its own).
COMPARED = Q(sim_ns__isnull=False, measured_ns__isnull=False, overlapped=False)

# The sums every metric is made of, as aggregates over SimulatedKernel rows already narrowed
# to COMPARED ones. `sx_int`: the measured total exactly (a float sum past 2**53 ns rounds).
SUMS = {
    "n": Count("*"),
    "sx_int": Sum("measured_ns"),
    "sx": Sum(MEASURED),
    "sy": Sum(SIMULATED),
    "sxy": Sum(MEASURED * SIMULATED),
    "sxx": Sum(MEASURED * MEASURED),
    "syy": Sum(SIMULATED * SIMULATED),
    "sabs": Sum(ABS_ERROR),
    "sape": Sum(
        Case(
            When(GreaterThan(MEASURED, 0), then=ABS_ERROR / MEASURED),
            default=_ZERO,
            output_field=FloatField(),
        )
    ),
    "srpd": Sum(
        Case(
            When(GreaterThan(MEASURED + SIMULATED, 0), then=Value(2.0) * ABS_ERROR / (MEASURED + SIMULATED)),
            default=_ZERO,
            output_field=FloatField(),
        )
    ),
    "ssq": Sum((SIMULATED - MEASURED) * (SIMULATED - MEASURED)),
    "within": Sum(
        Case(When(LessThanOrEqual(ABS_ERROR, Value(0.1) * MEASURED), then=Value(1)), default=Value(0))
    ),
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


def signed_error(sim_ns: float | None, measured_ns: int | None) -> float | None:
    """(y − x) / x in %, signed; None when either is missing or x is 0."""
    if sim_ns is None or not measured_ns:
        return None
    return (sim_ns - measured_ns) / measured_ns * 100
