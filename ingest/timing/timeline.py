"""A run's steps, `timeline.json`: each names the context and the kernel ids it spans.

The document is decoded one value at a time as it streams in, and each step kept in columns
(`Steps`: arrays, one text buffer), never a dictionary per step; `StepIndex` answers which
step a launch belongs to. A timeline that cannot be used raises TimingError.
"""

import codecs
import json
import re
import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from ingest.timing import INT64, TimingError
from traces.storable_text import unstorable_character

# A step's index is a smallint in the database (Step.index, Kernel.step): 0 .. 2^15 - 1. A longer
# timeline is refused here, as timing that cannot be used, not by the COPY that stores launches.
MAX_STEPS = 2**15
MAX_CTX = 64  # Step.ctx's length


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
    (Step objects cost 300, lists of names, phases and ctxs 120): a 32,768-step timeline
    (MAX_STEPS) is 2 MB."""

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

    Not ijson (version 3.6 with its C backend, yajl; docs/decisions/0004): it reads an escaped
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
    (copies in arrays would be 24 bytes a step, lists of keys and ints 6 MB more at MAX_STEPS).
    Steps in another order are copied, sorted, once.
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
