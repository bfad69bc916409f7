"""A run's steps (`timeline.json`) and measured kernel times (`timing.csv`): pure readers.

Two timing formats (docs/formats.md#nsight-exports):

- Cascade's own, as the profiling harness writes it: `ctx,kernel_id,start_ns,end_ns,duration_ns`,
  one row per launch, keyed by the launch's context and kernel id.
- Nsight Systems' export, `nsys stats --report cuda_gpu_trace --format csv`, from a separate,
  untraced run of the workload: one row per GPU operation (kernels, memcpy, memset) with
  `Start (ns)`, `Duration (ns)`, `CorrId`, grid and block dimensions, `Ctx` and `Name`. Its
  kernel rows are matched to the launches in correlation-id order per context, checking each
  pair's grid and block; the first mismatch, or kernels left over once every launch is
  matched, drops the timing (the trace stays ready) and says where.

Memory is what ingestion's stays flat with: durations are held as 4-byte integers indexed by
kernel id, in chunks in a temporary file with a few in memory (not a dictionary of a million
tuples, nor 4 MB of RAM a million launches), an Nsight export in three arrays per context (20
bytes a kernel); timeline.json is
decoded without a dictionary per step. Timing or a timeline that
cannot be read never fails a trace: the reader raises TimingError, and ingestion keeps the
kernels, says what was wrong, and serves them without it.

One module for the three readers (timeline.json, Cascade's timing.csv, Nsight's export): they
answer the one question a parse asks of a launch (its step, its duration: `step_of`,
`duration_of`, `unmatched`), share TimingError and the per-context arrays, and are tested
against each other's bounds; apart, that contract would be spread over three files.
"""

import codecs
import csv
import json
import re
import sys
import tempfile
import weakref
from array import array
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from traces.text import unstorable_character

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
# A step's index is a smallint in the database (Step.index, Kernel.step): 0 .. 2^15 - 1. A longer
# timeline is refused here, as timing that cannot be used, not by the COPY that stores launches.
MAX_STEPS = 2**15
MAX_CTX = 64  # Step.ctx's length
# Cascade's timing.csv holds a context's durations indexed by kernel id, in a temporary file:
# 200 MB of disk at most.
MAX_TIMED_KERNEL_ID = 50_000_000
CHUNK_BITS = 13
CHUNK_IDS = 1 << CHUNK_BITS  # 32 kB of durations
CHUNK_MASK = CHUNK_IDS - 1
OPEN_CHUNKS = 32  # in memory at once: 1 MB, and contexts interleaved in timing.csv stay cheap
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
# as it is decoded.
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
_WHITESPACE = re.compile(r"[ \t\n\r]*")


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


class _Shared(Sequence):
    """A column of few distinct values (a timeline's phases, its contexts): each value once, and
    a 4-byte index a step into them. The same object for every step that shares a value."""

    def __init__(self):
        self.values: list = []
        self._index: dict = {}
        self.indexes = array("I")

    def append(self, value) -> None:
        at = self._index.get(value)
        if at is None:
            at = self._index[value] = len(self.values)
            self.values.append(value)
        self.indexes.append(at)

    def __len__(self) -> int:
        return len(self.indexes)

    def __getitem__(self, index):
        return self.values[self.indexes[index]]

    def __iter__(self):
        return map(self.values.__getitem__, self.indexes)


class _Texts(Sequence):
    """Strings end to end in one UTF-8 buffer, and where each ends: its length and 8 bytes a
    string, where a str object costs 49 and a list's pointer 8 more."""

    def __init__(self):
        self.data = bytearray()
        self.ends = array("Q")

    def append(self, text: str) -> None:
        self.data += text.encode("utf-8", "surrogatepass")
        self.ends.append(len(self.data))

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, index: int) -> str:
        if index < 0:
            index += len(self.ends)
        start = self.ends[index - 1] if index > 0 else 0
        return self.data[start : self.ends[index]].decode("utf-8", "surrogatepass")


class Steps(Sequence):
    """A timeline's steps in columns: kernel ids and times in arrays of 8-byte integers, names
    in one buffer, phase and ctx an index each into their few values. Some 60 bytes a step
    (issue 22; Step objects cost 300, lists of names, phases and ctxs 120): a 32,768-step
    timeline (MAX_STEPS) is 2 MB."""

    _COLUMNS = ("first_kernel_id", "last_kernel_id", "start_ns", "end_ns")

    def __init__(self):
        self.names = _Texts()
        self.phases = _Shared()
        self.ctxs = _Shared()
        self.columns = {column: array("q") for column in self._COLUMNS}
        self.known = {"start_ns": array("b"), "end_ns": array("b")}  # 0: null

    def append(self, name: str, phase, ctx, first: int, last: int, start, end) -> None:
        self.names.append(name)
        self.phases.append(phase)
        self.ctxs.append(ctx)
        for column, value in zip(self._COLUMNS, (first, last, start, end), strict=True):
            if column in self.known:
                self.known[column].append(value is not None)
                value = value or 0
            self.columns[column].append(value)  # _add_step checked that it fits in 64 bits

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        first, last, start, end = (self.columns[column][index] for column in self._COLUMNS)
        return Step(
            index=index,
            name=self.names[index],
            phase=self.phases[index],
            ctx=self.ctxs[index],
            first_kernel_id=first,
            last_kernel_id=last,
            start_ns=start if self.known["start_ns"][index] else None,
            end_ns=end if self.known["end_ns"][index] else None,
        )


def parse_timeline(raw: bytes | Iterable[bytes]) -> Steps:
    """The steps of timeline.json, checked: each names the context and kernel ids it spans.

    `raw` is the file's bytes, or its chunks as they stream in (lines from S3: the text is then
    never whole in memory). The document is decoded one value at a time and each step kept in
    columns as it comes (Steps), never a Python object per JSON value.

    Not ijson (tried for issue 19, version 3.6 with its C backend, yajl): it reads an escaped
    unpaired surrogate (`\\ud800`) as "?", so a name the database cannot store would be stored
    altered instead of refused; it calls invalid JSON what json.loads reads (NaN, 1e400, a lone
    `\\udc00`, an integer past 64 bits, which the checks below refuse saying why: "does not fit
    in 64 bits") and accepts nesting of any depth; it reads UTF-8 only; and keeping the last of
    repeated "steps" keys takes a Python loop over its events, slower than this decoder
    (docs/performance.md).
    """
    try:
        steps, count = _decode_timeline(_Text(_text_pieces(raw)))
    except (ValueError, RecursionError) as problem:
        raise TimingError(f"timeline.json is not valid JSON: {problem}") from None
    if steps is None:
        raise TimingError('timeline.json: expected an object with a "steps" list')
    if count > MAX_STEPS:
        raise TimingError(
            f"timeline.json: {count} steps, more than {MAX_STEPS}, the most a trace holds "
            "(a step's index is a 16-bit integer in the database)"
        )
    if isinstance(steps, TimingError):
        raise steps
    return steps


def _text_pieces(raw: bytes | Iterable[bytes]) -> Iterator[str]:
    """The text of `raw` in pieces, decoded as json.loads decodes bytes (UTF-8, -16 or -32)."""
    if isinstance(raw, bytes | bytearray):
        yield raw.decode(json.detect_encoding(raw), "surrogatepass")
        return
    chunks = iter(raw)
    head = b""
    for chunk in chunks:
        head += chunk
        if len(head) >= 4:  # what json.detect_encoding looks at
            break
    decoder = codecs.getincrementaldecoder(json.detect_encoding(head))("surrogatepass")
    yield decoder.decode(head)
    for chunk in chunks:
        yield decoder.decode(chunk)
    yield decoder.decode(b"", final=True)


TEXT_WINDOW = 64 * 1024


class _Text:
    """The document's text as it comes: a window read ahead as far as the value being decoded
    needs. Every method takes a position in the window and returns where it went (reading
    on drops the text before it)."""

    def __init__(self, pieces: Iterator[str]):
        self.pieces = pieces
        self.text = ""
        self.done = False
        self.decode = json.JSONDecoder(object_pairs_hook=_json_object).raw_decode

    def read_on(self, at: int, more: int) -> int:
        kept = self.text[at:]
        self.text = ""
        parts = [kept] if kept else []
        size = len(kept)
        while size < len(kept) + more:
            piece = next(self.pieces, None)
            if piece is None:
                self.done = True
                break
            parts.append(piece)
            size += len(piece)
        # One piece (the whole text of a file given as bytes) is kept as it is, not copied.
        self.text = parts[0] if len(parts) == 1 else "".join(parts)
        return 0

    def skip(self, at: int) -> int:
        """Past whitespace."""
        while True:
            at = _WHITESPACE.match(self.text, at).end()
            if at < len(self.text) or self.done:
                return at
            at = self.read_on(at, TEXT_WINDOW)

    def char(self, at: int) -> tuple[str, int]:
        """The character at `at` ("" at the end)."""
        if at >= len(self.text) and not self.done:
            at = self.read_on(at, TEXT_WINDOW)
        return (self.text[at] if at < len(self.text) else ""), at

    def expect(self, at: int, characters: str) -> tuple[str, int]:
        found, at = self.char(self.skip(at))
        if not found or found not in characters:
            raise json.JSONDecodeError(f"Expecting one of {characters!r}", self.text, at)
        return found, at + 1

    def value(self, at: int):
        """(the JSON value at `at`, the position after it). A value that reaches the window's
        end may go on (a number, or one cut by the window): the window doubles, and again."""
        more = TEXT_WINDOW
        while True:
            try:
                value, end = self.decode(self.text, at)
                if end < len(self.text) or self.done:
                    return value, end
            except json.JSONDecodeError:
                if self.done:
                    raise
            at = self.read_on(at, more)
            more = max(more, len(self.text))


def _decode_timeline(text: _Text) -> tuple[Steps | TimingError | None, int]:
    """(the last "steps" list read into Steps, or its first problem, or None; its length).

    JSON errors come first, whatever the steps hold: the whole document is read before a step
    is refused, as json.loads would."""
    steps: Steps | TimingError | None = None
    count = 0
    first, at = text.char(text.skip(0))
    if first != "{":
        _, at = text.value(at)  # valid JSON, but not an object
        if text.char(text.skip(at))[0]:
            raise json.JSONDecodeError("Extra data", text.text, at)
        return None, 0
    found, at = text.char(text.skip(at + 1))
    while found != "}":
        _, at = text.expect(at, '"')
        key, at = text.value(at - 1)
        _, at = text.expect(at, ":")
        found, at = text.char(text.skip(at))
        if key == "steps" and found == "[":
            steps, count = Steps(), 0
            found, at = text.char(text.skip(at + 1))
            while found != "]":
                step, at = text.value(at)
                if count < MAX_STEPS and not isinstance(steps, TimingError):
                    steps = _add_step(steps, count, step)
                count += 1
                found, at = text.expect(at, ",]")
                if found == ",":
                    found, at = text.char(text.skip(at))
                    if found == "]":  # a trailing comma
                        raise json.JSONDecodeError("Expecting value", text.text, at)
                else:
                    found = "]"
                    at -= 1
            at += 1
        else:
            _, at = text.value(at)
            if key == "steps":
                steps, count = None, 0  # not a list
        found, at = text.expect(at, ",}")
        if found == "}":
            break
        found, at = text.char(text.skip(at))
        if found == "}":  # a trailing comma
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text.text, at)
    else:
        at += 1
    if text.char(text.skip(at))[0]:
        raise json.JSONDecodeError("Extra data", text.text, at)
    return steps, count


def _add_step(steps: Steps, index: int, step) -> Steps | TimingError:
    """`steps` with `step` checked and added, or the TimingError that refuses it."""
    if not isinstance(step, _JsonObject):
        return TimingError(f"timeline.json: step {index} is not an object")
    first, last = step.get("first_kernel_id"), step.get("last_kernel_id")
    if not (is_int(first) and is_int(last) and 0 < first <= last <= INT64.stop - 1):
        return TimingError(
            f"timeline.json: step {index} needs first_kernel_id <= last_kernel_id, positive integers "
            "of 64 bits"
        )
    name = step.get("name")
    phase = step.get("phase")
    ctx = step.get("ctx")
    for field, value in (("name", name), ("phase", phase), ("ctx", ctx)):
        if value is not None and not isinstance(value, str):
            return TimingError(f"timeline.json: step {index}'s {field} must be a string")
    if name is None:  # absent or null: the step's number says which it is
        number = step.get("step", index)
        name = f"step {index if isinstance(number, _JsonObject) else number}"
    # What the step columns (traces.models.Step) cannot hold at all is refused here, not by the
    # database while the launches are stored (a name and a phase are cut to their lengths).
    for field, value in (("name", name), ("phase", phase), ("ctx", ctx)):
        what = None if value is None else unstorable_character(value)
        if what is not None:
            return TimingError(
                f"timeline.json: step {index}'s {field} holds {what}, which the database cannot store"
            )
    if ctx is not None and len(ctx) > MAX_CTX:
        return TimingError(
            f"timeline.json: step {index}'s ctx is {len(ctx)} characters long, more than {MAX_CTX} "
            "(a CUDA context is 0x and at most 62 hex digits)"
        )
    start, end = step.get("start_ns"), step.get("end_ns")
    for field, value in (("start_ns", start), ("end_ns", end)):
        if is_int(value) and value not in INT64:
            return TimingError(f"timeline.json: step {index}'s {field} does not fit in 64 bits")
    steps.append(
        name[:200],
        sys.intern(phase[:32]) if phase else None,
        ctx or None,
        first,
        last,
        start if is_int(start) else None,
        end if is_int(end) else None,
    )
    return steps


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class StepIndex:
    """Which step a launch belongs to, by (ctx, kernel id): a bisect over its context's steps.

    A timeline's steps come grouped by context and in kernel-id order: the index is then the
    timeline's own columns (Steps'), each context a range of them, and holds nothing a step
    (issue 22: copies in arrays were 24 bytes a step, lists of keys and ints 6 MB more at
    MAX_STEPS). Steps in another order are copied, sorted, once.
    """

    def __init__(self, steps: Sequence[Step]):
        if isinstance(steps, Steps):
            ctxs, firsts, lasts = (
                steps.ctxs,
                steps.columns["first_kernel_id"],
                steps.columns["last_kernel_id"],
            )
        else:
            ctxs = [step.ctx for step in steps]
            firsts = [step.first_kernel_id for step in steps]
            lasts = [step.last_kernel_id for step in steps]
        keys = zip(map(_grouped, ctxs), firsts, strict=True)
        previous = next(keys, None)
        in_order = True
        for key in keys:
            if key < previous:
                in_order = False
                break
            previous = key
        self._indexes: array | None = None  # None: a position is the step's index
        if in_order:
            self._firsts, self._lasts = firsts, lasts
        else:
            order = sorted(range(len(firsts)), key=lambda i: (_grouped(ctxs[i]), firsts[i]))
            self._indexes = array("q", order)
            try:
                self._firsts = array("q", (firsts[i] for i in order))
                self._lasts = array("q", (lasts[i] for i in order))
            except OverflowError:  # Step objects beyond 64 bits (Steps' are checked): in lists
                self._firsts = [firsts[i] for i in order]
                self._lasts = [lasts[i] for i in order]
            ctxs = [ctxs[i] for i in order]
        # Each context's steps, a range of positions: contiguous, since grouped.
        ranges: dict[str | None, list[int]] = {}
        for position, ctx in enumerate(ctxs):
            found = ranges.get(ctx)
            if found is None:
                ranges[ctx] = [position, position + 1]
            else:
                found[1] = position + 1
        # What a lookup needs in one tuple a context: one dict lookup a launch.
        self._by_ctx = {
            ctx: (self._firsts, self._lasts, self._indexes, low, high) for ctx, (low, high) in ranges.items()
        }

    def step_of(self, ctx: str | None, kernel_id: int) -> int | None:
        found = self._by_ctx.get(ctx) or self._by_ctx.get(None)
        if found is None:
            return None
        firsts, lasts, indexes, low, high = found
        at = bisect_right(firsts, kernel_id, low, high) - 1
        if at < low or kernel_id > lasts[at]:
            return None
        return at if indexes is None else indexes[at]


def _grouped(ctx: str | None) -> tuple:
    """A context's place in the index's order: None and "" apart, each context's steps together."""
    return (ctx or "", ctx is None)


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
    file: at most OPEN_CHUNKS of them in memory (1 MB), whatever the launches (issue 22: an
    array per context in memory grew 4 bytes a launch, 12 MB from 1M to 4M launches). The
    harness writes rows in launch order and the parse asks in kernel-id order, so each chunk
    is written once and read once; rows out of order are right too, only slower.
    """

    # A launch's duration is its (ctx, kernel id)'s alone, whatever was asked before: a reader
    # may ask again, or without the grid and block (ingest.launch_text does).
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
