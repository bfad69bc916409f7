"""A run's steps (`timeline.json`) and measured kernel times (`timing.csv`): pure readers.

Two timing formats (docs/trace-a-workload.md, "Steps and timing"):

- Cascade's own, as the profiling harness writes it: `ctx,kernel_id,start_ns,end_ns,duration_ns`,
  one row per launch, keyed by the launch's context and kernel id.
- Nsight Systems' export, `nsys stats --report cuda_gpu_trace --format csv`, from a separate,
  untraced run of the workload: one row per GPU operation (kernels, memcpy, memset) with
  `Start (ns)`, `Duration (ns)`, `CorrId`, grid and block dimensions, `Ctx` and `Name`. Its
  kernel rows are matched to the launches in correlation-id order per context, checking each
  pair's grid and block; the first mismatch drops the timing (the trace stays ready) and
  says where.

Durations are held in one array of 8-byte integers per context, indexed by kernel id, so a
million launches cost 8 MB, not a dictionary of a million tuples. Timing or a timeline that
cannot be read never fails a trace: the reader raises TimingError, and ingestion keeps the
kernels, says what was wrong, and serves them without it.
"""

import csv
import json
from array import array
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass

CASCADE_COLUMNS = ("ctx", "kernel_id", "start_ns", "end_ns", "duration_ns")
NSYS_REQUIRED = (
    "Start (ns)",
    "Duration (ns)",
    "CorrId",
    "GrdX",
    "GrdY",
    "GrdZ",
    "BlkX",
    "BlkY",
    "BlkZ",
    "Name",
)
NO_DURATION = -1
MAX_STEPS = 100_000


class TimingError(ValueError):
    """timeline.json or timing.csv cannot be used; the message says why (and where)."""


@dataclass(frozen=True)
class Step:
    index: int
    name: str
    phase: str | None
    ctx: str | None
    first_kernel_id: int
    last_kernel_id: int
    start_ns: int | None
    end_ns: int | None


def parse_timeline(raw: bytes) -> list[Step]:
    """The steps of timeline.json, checked: each names the context and kernel ids it spans."""
    try:
        timeline = json.loads(raw)
    except (ValueError, RecursionError) as problem:
        raise TimingError(f"timeline.json is not valid JSON: {problem}") from None
    steps = timeline.get("steps") if isinstance(timeline, dict) else None
    if not isinstance(steps, list):
        raise TimingError('timeline.json: expected an object with a "steps" list')
    if len(steps) > MAX_STEPS:
        raise TimingError(f"timeline.json: {len(steps)} steps, more than {MAX_STEPS}")
    parsed = []
    for index, step in enumerate(steps):
        if not isinstance(step, dict):
            raise TimingError(f"timeline.json: step {index} is not an object")
        first, last = step.get("first_kernel_id"), step.get("last_kernel_id")
        if not (is_int(first) and is_int(last) and 0 < first <= last):
            raise TimingError(
                f"timeline.json: step {index} needs first_kernel_id <= last_kernel_id, positive integers"
            )
        name = step.get("name", f"step {step.get('step', index)}")
        phase = step.get("phase")
        ctx = step.get("ctx")
        for field, value in (("name", name), ("phase", phase), ("ctx", ctx)):
            if value is not None and not isinstance(value, str):
                raise TimingError(f"timeline.json: step {index}'s {field} must be a string")
        start, end = step.get("start_ns"), step.get("end_ns")
        parsed.append(
            Step(
                index=index,
                name=name[:200],
                phase=phase[:32] if phase else None,
                ctx=ctx or None,
                first_kernel_id=first,
                last_kernel_id=last,
                start_ns=start if is_int(start) else None,
                end_ns=end if is_int(end) else None,
            )
        )
    return parsed


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class StepIndex:
    """Which step a launch belongs to, by (ctx, kernel id): a bisect over each context's steps."""

    def __init__(self, steps: list[Step]):
        self._by_ctx: dict[str | None, tuple[list[int], list[Step]]] = {}
        for step in sorted(steps, key=lambda s: (s.ctx or "", s.first_kernel_id)):
            firsts, ordered = self._by_ctx.setdefault(step.ctx, ([], []))
            firsts.append(step.first_kernel_id)
            ordered.append(step)

    def step_of(self, ctx: str | None, kernel_id: int) -> int | None:
        found = self._by_ctx.get(ctx) or self._by_ctx.get(None)
        if found is None:
            return None
        firsts, ordered = found
        at = bisect_right(firsts, kernel_id) - 1
        if at < 0 or kernel_id > ordered[at].last_kernel_id:
            return None
        return ordered[at].index


def timing_format(header: str) -> str:
    """ "cascade" or "nsys" from timing.csv's header line."""
    header = header.rstrip("\r\n")
    columns = [column.strip() for column in next(csv.reader([header]))]
    if tuple(columns[: len(CASCADE_COLUMNS)]) == CASCADE_COLUMNS:
        return "cascade"
    if all(column in columns for column in NSYS_REQUIRED):
        return "nsys"
    raise TimingError(
        f"timing.csv: unknown header {header[:120]!r}; expected {','.join(CASCADE_COLUMNS)} or the columns "
        "of `nsys stats --report cuda_gpu_trace --format csv`"
    )


class CascadeDurations:
    """Durations from Cascade's own timing.csv, by (ctx, kernel id)."""

    def __init__(self, lines: Iterable[str]):
        self._by_ctx: dict[str, array] = {}
        reader = csv.reader(lines)
        next(reader, None)
        for number, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                ctx, kernel_id, duration = row[0], int(row[1]), int(row[4])
            except (IndexError, ValueError):
                raise TimingError(
                    f"timing.csv line {number}: expected ctx,kernel_id,start_ns,end_ns,duration_ns"
                ) from None
            if kernel_id <= 0 or kernel_id > 50_000_000 or duration < 0:
                raise TimingError(
                    f"timing.csv line {number}: kernel id {kernel_id} or duration {duration} out of range"
                )
            durations = self._by_ctx.setdefault(ctx, array("q"))
            if len(durations) < kernel_id:
                durations.extend([NO_DURATION] * (kernel_id - len(durations)))
            durations[kernel_id - 1] = duration

    def duration_of(self, ctx: str | None, kernel_id: int, grid: tuple, block: tuple) -> int | None:
        durations = self._by_ctx.get(ctx or "")
        if durations is None or kernel_id > len(durations):
            return None
        value = durations[kernel_id - 1]
        return None if value == NO_DURATION else value


class NsysDurations:
    """Durations from an Nsight Systems cuda_gpu_trace export, matched in correlation-id order.

    Each of the trace's contexts takes the first unused nsys context whose first kernel has
    the shape of the context's first launch, and its kernel rows one by one; a pair whose
    grid or block differs raises TimingError naming both.
    """

    def __init__(self, lines: Iterable[str]):
        reader = csv.DictReader(lines)
        rows: dict[str, list[tuple[int, tuple, tuple, int]]] = {}
        for number, row in enumerate(reader, start=2):
            if not (row.get("GrdX") or "").strip():
                continue  # a memcpy or memset: no grid
            try:
                corr = int(row["CorrId"])
                grid = (int(row["GrdX"]), int(row["GrdY"]), int(row["GrdZ"]))
                block = (int(row["BlkX"]), int(row["BlkY"]), int(row["BlkZ"]))
                duration = int(float(row["Duration (ns)"]))
            except (KeyError, TypeError, ValueError):
                raise TimingError(f"timing.csv (nsys) line {number}: unreadable kernel row") from None
            rows.setdefault((row.get("Ctx") or "").strip(), []).append((corr, grid, block, duration))
        # By correlation id, keeping file (start-time) order among equal ids: every kernel of
        # one CUDA graph replay carries its cuGraphLaunch's id.
        self._contexts = [sorted(kernels, key=lambda kernel: kernel[0]) for kernels in rows.values()]
        self._assigned: dict[str | None, list] = {}
        self._next: dict[str | None, int] = {}

    def duration_of(self, ctx: str | None, kernel_id: int, grid: tuple, block: tuple) -> int | None:
        kernels = self._assigned.get(ctx)
        if kernels is None:
            if not self._contexts:
                raise TimingError(f"timing.csv (nsys) has no kernels for the trace's context {ctx}")
            # Nsight numbers contexts, the tracer names them by pointer: a trace context takes
            # the first unused Nsight context that starts with its first launch's shape.
            shape = (tuple(grid), tuple(block))
            pick = next((i for i, ks in enumerate(self._contexts) if ks[0][1:3] == shape), 0)
            kernels = self._assigned[ctx] = self._contexts.pop(pick)
            self._next[ctx] = 0
        position = self._next[ctx]
        if position >= len(kernels):
            raise TimingError(
                f"timing.csv (nsys) has {len(kernels)} kernels for context {ctx}, the stats more "
                f"(kernel {kernel_id} has no row)"
            )
        corr, nsys_grid, nsys_block, duration = kernels[position]
        if (nsys_grid, nsys_block) != (tuple(grid), tuple(block)):
            raise TimingError(
                f"timing.csv (nsys) does not match the stats at context {ctx} kernel {kernel_id}: "
                f"grid {tuple(grid)} block {tuple(block)} in the stats, grid {nsys_grid} block {nsys_block} "
                f"at CorrId {corr}"
            )
        self._next[ctx] = position + 1
        return duration


def read_timing(lines: Iterable[bytes]):
    """The durations of timing.csv in whichever of the two formats it is."""
    text = (line.decode("utf-8", errors="replace") for line in lines)
    text = iter(text)
    header = next(text, "")
    kind = timing_format(header)
    reader = CascadeDurations if kind == "cascade" else NsysDurations
    return reader(_chain_first(header, text))


def _chain_first(first: str, rest):
    yield first
    yield from rest
