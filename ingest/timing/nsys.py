"""Nsight Systems' export as timing.csv: `nsys stats --report cuda_gpu_trace --format csv`.

From a separate, untraced run of the workload: one row per GPU operation (kernels, memcpy,
memset) with `Start (ns)`, `Duration (ns)`, `CorrId`, grid and block dimensions, `Ctx` and
`Name` (docs/formats.md#nsight-exports). Its kernel rows are matched to the launches in
correlation-id order per context, checking each pair's grid and block; the first mismatch, or
kernels left over once every launch is matched, drops the timing (the trace stays ready) and
says where. Held in three arrays per context: 20 bytes a kernel.
"""

import csv
from array import array
from collections.abc import Iterable

from ingest.timing import INT64, TimingError

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


class NsysContext:
    """One Nsight context's kernels in correlation-id order: ids, shapes (indexes into the
    export's distinct (grid, block) pairs) and durations, in arrays of 8, 4 and 8 bytes."""

    __slots__ = ("name", "corr", "shape", "duration")

    def __init__(self, name: str):
        self.name = name  # the export's `Ctx`: Nsight numbers contexts 1, 2...
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
        ordered = NsysContext(self.name)
        ordered.corr = array("q", (corr[i] for i in order))
        ordered.shape = array("I", (self.shape[i] for i in order))
        ordered.duration = array("q", (self.duration[i] for i in order))
        return ordered


class NsysDurations:
    """Durations from an Nsight Systems cuda_gpu_trace export, matched in correlation-id order.

    Each of the trace's contexts takes the first unused nsys context whose first kernel has
    the shape of the context's first launch, and its kernel rows one by one; a pair whose
    grid or block differs raises TimingError naming both. Kernels left over once every launch
    is matched are refused as well (`unmatched`, which the reader asks at the end).
    """

    by_kernel_id = False  # matched in order: each launch asked once, in the file's order

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
                kernels = contexts[ctx] = NsysContext(ctx)
            kernels.corr.append(corr)
            kernels.shape.append(index)
            kernels.duration.append(duration)
        self._contexts = [kernels.in_corr_order() for kernels in contexts.values()]
        self._assigned: dict[str | None, NsysContext] = {}
        self._next: dict[str | None, int] = {}
        self._last_id: dict[str | None, int] = {}  # of each trace context, the last launch matched

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
        self._last_id[ctx] = kernel_id
        return kernels.duration[position]

    def unmatched(self) -> TimingError | None:
        """Once every launch has been matched: the Nsight kernels that no launch took, as the
        TimingError that drops the timing (None if there are none).

        More kernels in the export than launches in the trace means the two runs differ (a
        longer run, launches the tracer does not see): matched in order, the pairs are not to
        be trusted, so the timing is not used, as for a mismatch.
        """
        parts, surplus = [], 0
        for ctx, kernels in self._assigned.items():
            used = self._next[ctx]
            if used < len(kernels):
                surplus += len(kernels) - used
                parts.append(
                    f"{len(kernels) - used} in Nsight context {kernels.name[:20]!r} after the trace's context "
                    f"{ctx} kernel {self._last_id.get(ctx)} (the first at CorrId {kernels.corr[used]})"
                )
        for kernels in self._contexts:
            surplus += len(kernels)
            parts.append(
                f"{len(kernels)} in Nsight context {kernels.name[:20]!r}, which no context of the trace took"
            )
        if not parts:
            return None
        return TimingError(
            f"timing.csv (nsys) has {surplus} more kernels than the trace has launches, so its timing "
            f"is not used: {'; '.join(parts)}"
        )
