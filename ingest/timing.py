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

Memory is what ingestion's stays flat with: durations are held in one array of 4-byte integers
per context, indexed by kernel id (a million launches cost 4 MB, not a dictionary of a million
tuples), an Nsight export in three arrays per context (20 bytes a kernel); timeline.json is
decoded without a dictionary per step. Timing or a timeline that
cannot be read never fails a trace: the reader raises TimingError, and ingestion keeps the
kernels, says what was wrong, and serves them without it.
"""

import csv
import json
import sys
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
NO_DURATION = 2**32 - 1  # in the 4-byte arrays: no duration, or one kept in the overflow dict
MAX_STEPS = 100_000
INT64 = range(-(2**63), 2**63)


class TimingError(ValueError):
    """timeline.json or timing.csv cannot be used; the message says why (and where)."""


@dataclass(frozen=True, slots=True)
class Step:
    index: int
    name: str
    phase: str | None
    ctx: str | None
    first_kernel_id: int
    last_kernel_id: int
    start_ns: int | None
    end_ns: int | None


# What parse_timeline reads of a JSON object; the rest of each step (kernel counts...) is dropped
# as it is decoded, so a timeline of many steps never sits in memory as a dict per step.
TIMELINE_FIELDS = (
    "steps",
    "first_kernel_id",
    "last_kernel_id",
    "name",
    "step",
    "phase",
    "ctx",
    "start_ns",
    "end_ns",
)
_FIELD = {name: index for index, name in enumerate(TIMELINE_FIELDS)}
_ABSENT = object()
_SHARED = {_FIELD["phase"], _FIELD["ctx"]}


class _JsonObject(tuple):
    """A JSON object of timeline.json, reduced to TIMELINE_FIELDS (a tuple: no dict per step)."""

    __slots__ = ()

    def get(self, key: str, default=None):
        value = self[_FIELD[key]]
        return default if value is _ABSENT else value


def _json_object(pairs: list[tuple]) -> _JsonObject:
    values = [_ABSENT] * len(TIMELINE_FIELDS)
    for key, value in pairs:
        at = _FIELD.get(key)
        if at is not None:
            # The same phase and context strings, thousands of times: one object each.
            values[at] = sys.intern(value) if at in _SHARED and isinstance(value, str) else value
    return _JsonObject(values)


def parse_timeline(raw: bytes) -> list[Step]:
    """The steps of timeline.json, checked: each names the context and kernel ids it spans."""
    try:
        timeline = json.loads(raw, object_pairs_hook=_json_object)
    except (ValueError, RecursionError) as problem:
        raise TimingError(f"timeline.json is not valid JSON: {problem}") from None
    steps = timeline.get("steps") if isinstance(timeline, _JsonObject) else None
    del timeline
    if not isinstance(steps, list):
        raise TimingError('timeline.json: expected an object with a "steps" list')
    if len(steps) > MAX_STEPS:
        raise TimingError(f"timeline.json: {len(steps)} steps, more than {MAX_STEPS}")
    parsed = []
    for index, step in enumerate(steps):
        if not isinstance(step, _JsonObject):
            raise TimingError(f"timeline.json: step {index} is not an object")
        first, last = step.get("first_kernel_id"), step.get("last_kernel_id")
        if not (is_int(first) and is_int(last) and 0 < first <= last):
            raise TimingError(
                f"timeline.json: step {index} needs first_kernel_id <= last_kernel_id, positive integers"
            )
        name = step.get("name")
        phase = step.get("phase")
        ctx = step.get("ctx")
        for field, value in (("name", name), ("phase", phase), ("ctx", ctx)):
            if value is not None and not isinstance(value, str):
                raise TimingError(f"timeline.json: step {index}'s {field} must be a string")
        if name is None:  # absent or null: the step's number says which it is
            number = step.get("step", index)
            name = f"step {index if isinstance(number, _JsonObject) else number}"
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
        steps[index] = None  # each decoded step goes as its Step comes
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
        self._long: dict[tuple[str, int], int] = {}  # durations of 2^32 - 1 ns (4.3 s) or more
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
            durations = self._by_ctx.get(ctx)
            if durations is None:
                durations = self._by_ctx[ctx] = array("I")
            if len(durations) < kernel_id:
                durations.extend(array("I", [NO_DURATION]) * (kernel_id - len(durations)))
            if duration < NO_DURATION:
                durations[kernel_id - 1] = duration
                self._long.pop((ctx, kernel_id), None)
            else:
                durations[kernel_id - 1] = NO_DURATION
                self._long[ctx, kernel_id] = duration

    def duration_of(self, ctx: str | None, kernel_id: int, grid: tuple, block: tuple) -> int | None:
        durations = self._by_ctx.get(ctx or "")
        if durations is None or kernel_id > len(durations):
            return None
        value = durations[kernel_id - 1]
        return value if value != NO_DURATION else self._long.get((ctx or "", kernel_id))


class NsysContext:
    """One Nsight context's kernels in correlation-id order: ids, shapes (indexes into the
    export's distinct (grid, block) pairs) and durations, in arrays of 8, 4 and 8 bytes."""

    __slots__ = ("corr", "shape", "duration")

    def __init__(self):
        self.corr, self.shape, self.duration = array("q"), array("I"), array("q")

    def __len__(self) -> int:
        return len(self.corr)

    def in_corr_order(self) -> "NsysContext":
        """By correlation id, keeping file (start-time) order among equal ids: every kernel of
        one CUDA graph replay carries its cuGraphLaunch's id."""
        corr = self.corr
        if all(corr[i] <= corr[i + 1] for i in range(len(corr) - 1)):
            return self
        order = sorted(range(len(corr)), key=corr.__getitem__)  # stable
        ordered = NsysContext()
        ordered.corr = array("q", (corr[i] for i in order))
        ordered.shape = array("I", (self.shape[i] for i in order))
        ordered.duration = array("q", (self.duration[i] for i in order))
        return ordered


class NsysDurations:
    """Durations from an Nsight Systems cuda_gpu_trace export, matched in correlation-id order.

    Each of the trace's contexts takes the first unused nsys context whose first kernel has
    the shape of the context's first launch, and its kernel rows one by one; a pair whose
    grid or block differs raises TimingError naming both.
    """

    def __init__(self, lines: Iterable[str]):
        reader = csv.DictReader(lines)
        contexts: dict[str, NsysContext] = {}
        self._shapes: list[tuple[tuple, tuple]] = []
        shape_index: dict[tuple[tuple, tuple], int] = {}
        for number, row in enumerate(reader, start=2):
            if not (row.get("GrdX") or "").strip():
                continue  # a memcpy or memset: no grid
            try:
                corr = int(row["CorrId"])
                grid = (int(row["GrdX"]), int(row["GrdY"]), int(row["GrdZ"]))
                block = (int(row["BlkX"]), int(row["BlkY"]), int(row["BlkZ"]))
                duration = int(float(row["Duration (ns)"]))
                if corr not in INT64 or duration not in INT64:
                    raise ValueError
            except (KeyError, TypeError, ValueError, OverflowError):
                raise TimingError(f"timing.csv (nsys) line {number}: unreadable kernel row") from None
            shape = (grid, block)
            index = shape_index.get(shape)
            if index is None:
                index = shape_index[shape] = len(self._shapes)
                self._shapes.append(shape)
            kernels = contexts.get(ctx := (row.get("Ctx") or "").strip())
            if kernels is None:
                kernels = contexts[ctx] = NsysContext()
            kernels.corr.append(corr)
            kernels.shape.append(index)
            kernels.duration.append(duration)
        self._contexts = [kernels.in_corr_order() for kernels in contexts.values()]
        self._assigned: dict[str | None, NsysContext] = {}
        self._next: dict[str | None, int] = {}

    def duration_of(self, ctx: str | None, kernel_id: int, grid: tuple, block: tuple) -> int | None:
        kernels = self._assigned.get(ctx)
        if kernels is None:
            if not self._contexts:
                raise TimingError(f"timing.csv (nsys) has no kernels for the trace's context {ctx}")
            # Nsight numbers contexts, the tracer names them by pointer: a trace context takes
            # the first unused Nsight context that starts with its first launch's shape.
            shape = (tuple(grid), tuple(block))
            pick = next((i for i, ks in enumerate(self._contexts) if self._shapes[ks.shape[0]] == shape), 0)
            kernels = self._assigned[ctx] = self._contexts.pop(pick)
            self._next[ctx] = 0
        position = self._next[ctx]
        if position >= len(kernels):
            raise TimingError(
                f"timing.csv (nsys) has {len(kernels)} kernels for context {ctx}, the stats more "
                f"(kernel {kernel_id} has no row)"
            )
        nsys_grid, nsys_block = self._shapes[kernels.shape[position]]
        if (nsys_grid, nsys_block) != (tuple(grid), tuple(block)):
            raise TimingError(
                f"timing.csv (nsys) does not match the stats at context {ctx} kernel {kernel_id}: "
                f"grid {tuple(grid)} block {tuple(block)} in the stats, grid {nsys_grid} block {nsys_block} "
                f"at CorrId {kernels.corr[position]}"
            )
        self._next[ctx] = position + 1
        return kernels.duration[position]


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
