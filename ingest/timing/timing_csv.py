"""timing.csv: which of the two formats it is, and Cascade's own (docs/formats.md#nsight-exports).

Cascade's format, as the profiling harness writes it: `ctx,kernel_id,start_ns,end_ns,duration_ns`,
one row per launch, keyed by the launch's context and kernel id. Its durations are held as
4-byte integers indexed by kernel id, in chunks in a temporary file with a few in memory (not
a dictionary of a million tuples, nor 4 MB of RAM a million launches). Nsight's export is
ingest.timing.nsys's.
"""

import csv
import tempfile
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Iterable

from ingest.timing import INT64, TimingError
from ingest.timing.nsys import NSYS_REQUIRED, NsysDurations

CASCADE_COLUMNS = ("ctx", "kernel_id", "start_ns", "end_ns", "duration_ns")
NO_DURATION = 2**32 - 1  # in the 4-byte arrays: no duration, or one kept in the overflow dict
# Cascade's timing.csv holds a context's durations indexed by kernel id, in a temporary file:
# 200 MB of disk at most.
MAX_TIMED_KERNEL_ID = 50_000_000
CHUNK_BITS = 13
CHUNK_IDS = 1 << CHUNK_BITS  # 32 kB of durations
CHUNK_MASK = CHUNK_IDS - 1
OPEN_CHUNKS = 32  # in memory at once: 1 MB, and contexts interleaved in timing.csv stay cheap


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
    """Durations from Cascade's own timing.csv, by (ctx, kernel id).

    Held in chunks of CHUNK_IDS 4-byte durations, indexed by kernel id, in an unnamed temporary
    file: at most OPEN_CHUNKS of them in memory (1 MB), whatever the launches (an array per
    context in memory grows 4 bytes a launch, 12 MB from 1M to 4M launches). The
    harness writes rows in launch order and the parse asks in kernel-id order, so each chunk
    is written once and read once; rows out of order are right too, only slower.
    """

    # A launch's duration is its (ctx, kernel id)'s alone, whatever was asked before: a reader
    # may ask again, or without the grid and block (ingest.stats_fast_path does).
    by_kernel_id = True

    def __init__(self, lines: Iterable[str]):
        self._file = tempfile.TemporaryFile(prefix="cascade-durations-")  # noqa: SIM115
        weakref.finalize(self, self._file.close)
        self._offsets: dict[tuple[str, int], int] = {}  # (ctx, chunk) -> where in the file
        self._open: OrderedDict[tuple[str, int], list] = OrderedDict()  # -> [durations, changed]
        self._hit: tuple[tuple[str, int], array] | None = None  # the chunk last asked for
        self._long: dict[tuple[str, int], int] = {}  # durations of 2^32 - 1 ns (4.3 s) or more
        reader = csv.reader(lines)
        next(reader, None)
        last_key = held = None
        for number, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                ctx, kernel_id, duration = row[0], int(row[1]), int(row[4])
            except (IndexError, ValueError):
                raise TimingError(
                    f"timing.csv line {number}: expected ctx,kernel_id,start_ns,end_ns,duration_ns"
                ) from None
            if not (0 < kernel_id <= MAX_TIMED_KERNEL_ID and 0 <= duration <= INT64.stop - 1):
                raise TimingError(
                    f"timing.csv line {number}: kernel id {row[1].strip()[:20]} or duration "
                    f"{row[4].strip()[:20]} out of range (kernel ids 1 to {MAX_TIMED_KERNEL_ID}, "
                    "durations 0 to 2^63 - 1 ns)"
                )
            index = kernel_id - 1
            key = (ctx, index >> CHUNK_BITS)
            if key != last_key:  # rows in launch order: the same chunk thousands of times
                held, last_key = self._chunk(key, create=True), key
                held[1] = True
            if duration < NO_DURATION:
                held[0][index & CHUNK_MASK] = duration
                self._long.pop((ctx, kernel_id), None)
            else:
                held[0][index & CHUNK_MASK] = NO_DURATION
                self._long[ctx, kernel_id] = duration

    def _chunk(self, key: tuple[str, int], create: bool = False) -> list | None:
        """The chunk `key` in memory, read back or made (`create`) if it is not; None if the
        file has no row in it. The least recently used one goes back to the file."""
        held = self._open.get(key)
        if held is not None:
            self._open.move_to_end(key)
            return held
        offset = self._offsets.get(key)
        if offset is None and not create:
            return None
        if len(self._open) >= OPEN_CHUNKS:
            self._write_back(*self._open.popitem(last=False))
        if offset is None:
            held = [array("I", [NO_DURATION]) * CHUNK_IDS, False]
        else:
            self._file.seek(offset)
            durations = array("I")
            durations.frombytes(self._file.read(CHUNK_IDS * 4))
            held = [durations, False]
        self._open[key] = held
        return held

    def _write_back(self, key: tuple[str, int], held: list) -> None:
        if not held[1]:
            return
        offset = self._offsets.get(key)
        if offset is None:
            offset = self._offsets[key] = self._file.seek(0, 2)
        self._file.seek(offset)
        self._file.write(held[0].tobytes())

    def duration_of(self, ctx: str | None, kernel_id: int, grid: tuple, block: tuple) -> int | None:
        if kernel_id < 1:  # never another launch's
            return None
        ctx, index = ctx or "", kernel_id - 1
        key = (ctx, index >> CHUNK_BITS)
        hit = self._hit
        if hit is not None and hit[0] == key:
            durations = hit[1]
        else:
            held = self._chunk(key)
            if held is None:
                return None
            durations = held[0]
            self._hit = (key, durations)
        value = durations[index & CHUNK_MASK]
        return value if value != NO_DURATION else self._long.get((ctx, kernel_id))

    def unmatched(self) -> None:
        """Rows are looked up by (ctx, kernel id): a row for no launch is never another's."""
        return None
