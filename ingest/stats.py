"""Parse the Accel-Sim NVBit tracer's `stats_ctx_*` / `stats.csv` files (its kernelslists:
ingest.kernelslist).

Pure functions from lines (bytes, as read from S3) to rows: no Django, no I/O. How the
tracer writes a launch (tracer_tool.cu; docs/formats.md#the-tracers-files):

- At launch it appends the launch half, `"%s, %s, %d, %d, %d, %d, %d, %d, %d, %d, "`
  (trace file, name, grid x/y/z, #blocks, block x/y/z, #threads: comma and space after
  each); when the kernel exits, the totals `"%d,%d\\n"`. A launch that never exits in the
  tracer's view has a half only: the last launch of a killed run (the file ends in `", "`),
  and every launch captured into a CUDA graph, whose halves run together on one line until
  an ordinary launch's totals end it. So one line holds one or more launches; every half is
  a launch, with null totals unless totals follow it.
- The header is written once per process, into the first context's file only; a fork
  appends columns after the totals (`latency`, `%.6f`), so the header's width applies to
  every context of the run. Another fork prints `device_id, stream_id` before each half,
  with kernel ids restarting per device; a third names trace files `kernel-<id>_<gpu>.trace`.
- Demangled names contain commas: a name is everything between the trace file and eight
  numbers that are followed by what may follow a half (totals, the next half, the line's end).
- Unsigned 32-bit values are printed with `%d`: a negative number is read as unsigned, and
  2^32 or more (which `%d` cannot print) is refused, as are grid and block dimensions
  beyond CUDA's unsigned 32-bit dim3.
- The 2019 tracer wrote `kernel name,total_insts,total_reported_insts` with no launch
  dimensions: refused with a message that says so.

Whenever this module reads some input differently, bump `traces.models.CURRENT_PARSER_VERSION`:
traces read by an older version are then re-read by `ingest_traces --reparse-outdated`.

One piece, past 500 lines: one reading of the format. The rules above meet on one line (a
name with commas before graph-captured halves, a fork's columns after the totals), and
ingest.stats_fast_path takes a line only where this reader would read it the same way.
"""

import functools
import re
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

STANDARD_COLUMNS = 12
DEVICE_COLUMNS = 2  # the device-id fork's `device_id, stream_id` in front
# After the trace file and the name: grid x/y/z, #blocks, block x/y/z, #threads.
LAUNCH_NUMBERS = 8
TOTALS = 2
UINT32 = 2**32
INT64_MAX = 2**63 - 1
DEVICE_MAX = 2**31 - 1  # a CUDA device ordinal is an int (and KernelContext.device's column)

# kernel-<n>.trace (v4), kernel-<n>-ctx_0x<ctx>.trace (v5), kernel-<id>_<gpu>.trace (the
# distributed fork), each maybe .xz, .traceg after post-processing.
TRACE_FILE = re.compile(r"kernel-([0-9]+)(?:-ctx_0x[0-9a-fA-F]+|_([0-9]+))?\.trace[A-Za-z0-9.]*", re.ASCII)
TRACE_FILE_ID = re.compile(r"^kernel-([0-9]+)(?:-ctx_0x[0-9a-fA-F]+|_[0-9]+)?\.trace", re.ASCII)
TRACER_2019_ROW = re.compile(r"[0-9]+-[^,]+\.trace[A-Za-z0-9.]*,\s*-?[0-9]+,\s*-?[0-9]+", re.ASCII)
INTEGER = re.compile(r"\s*-?[0-9]+\s*", re.ASCII)
STATS_CTX_NAME = re.compile(r"^stats_ctx_(.+)$")
# A CUDA context is a pointer: `0x` and hex digits (the column holds 64 characters).
CTX = re.compile(r"^0x[0-9a-fA-F]{1,62}$")

TRACER_2019_MESSAGE = (
    "this is the 2019 tracer's stats format (`kernel name,total_insts,total_reported_insts`), "
    "which records no launch dimensions; re-trace the workload with the Accel-Sim tracer v4 or later"
)


class StatsError(ValueError):
    """A line the tracer cannot have written; the message names the line and the problem."""

    def __init__(self, line_number: int, problem: str):
        super().__init__(f"line {line_number}: {problem}")
        self.line_number = line_number


class KernelRow(NamedTuple):
    kernel_id: int
    name: str
    trace_file: str
    grid_x: int
    grid_y: int
    grid_z: int
    block_x: int
    block_y: int
    block_z: int
    blocks: int
    threads: int
    total_insts: int | None
    total_reported_insts: int | None
    device_id: int | None = None
    stream_id: int | None = None


def header_extra_columns(line: str, number: int = 1) -> int | None:
    """Columns after the totals if `line` is a header, else None.

    Raises StatsError for the 2019 tracer's header, whose rows Cascade cannot read.
    """
    start = line.lstrip().lower()
    if start.startswith("kernel id"):
        return max(len(line.split(",")) - STANDARD_COLUMNS, 0)
    if start.startswith("device_id"):
        return max(len(line.split(",")) - STANDARD_COLUMNS - DEVICE_COLUMNS, 0)
    if start.startswith("kernel name") and "total_insts" in start:
        raise StatsError(number, TRACER_2019_MESSAGE)
    return None


def first_line_extra_columns(first_line: bytes) -> int | None:
    """The header's extra columns from a file's first line (None: the file has no header)."""
    try:
        return header_extra_columns(first_line.decode("utf-8", errors="replace").rstrip("\r\n"))
    except StatsError:
        return None  # reported with its line when the file itself is parsed


def as_unsigned(value: int, line_number: int, column: str) -> int:
    """`%d` prints unsigned 32-bit values of 2^31 or more as negative numbers."""
    if value < 0:
        if value < -(2**31):
            raise StatsError(line_number, f"{column} {value} is below any 32-bit value")
        return value + UINT32
    if value > INT64_MAX:
        raise StatsError(line_number, f"{column} {value} does not fit in 64 bits")
    return value


def parse_stats_lines(
    lines: Iterable[bytes], *, extra_columns: int = 0, launch_text=None, notes: list | None = None
) -> Iterator:
    """Every kernel launch in one stats file, in file order.

    A file that ends mid-line was cut (a killed job, a full disk, an interrupted copy): the
    tracer ends every line it finishes with a newline. Its last line is read by `cut_line`:
    the whole launch halves on it are kept (without totals), the rest dropped, and `notes`,
    if given, receives a StatsNote saying where and what. A file whose last launches never got
    their totals (a killed run) says so in `notes` too.

    `extra_columns` is the header's width beyond the standard twelve, for files that have
    no header of their own (every context but the first); a header in the file wins.

    `launch_text`, if given, is offered each line of the tracer's standard width first
    (ingest.stats_fast_path.LaunchText: the common lines written as COPY text for the database);
    what it gathers is yielded as it fills (`full`, `take()`), among the KernelRows of the
    lines it left.

    The common lines (launches with names without commas, spaced as the tracer writes them:
    one per line, or graph-captured halves run together) are read from the bytes, one regex
    match per launch, without decoding the line; any other line goes to `parse_launches`,
    which reads these exactly so too. Each line is checked to be text before the line above
    it is parsed, so errors come in the same order whichever way a line is read.

    The loop is `stats_file_rows`, a generator returned as it is (nothing runs before the first
    launch is asked for, and no step stands between it and its caller).
    """
    return stats_file_rows(lines, extra_columns, launch_text, notes)


def stats_file_rows(lines: Iterable[bytes], extra_columns: int, launch_text, notes: list | None) -> Iterator:
    """parse_stats_lines's loop. It keeps the hot paths, the ones a line of a million-launch file
    takes: blank lines, `launch_text`'s lines, a common line whose name and shape it has read
    before, ids in order. Each other step is a function of its own, called where those decline:
    `unended_line`, `common_line_rows`, `other_line_rows` and `checked_order`."""
    line_match, half_match, tail_match, offer = line_readers(extra_columns, launch_text)
    last_id, last_line = 0, 0  # kernel ids increase from 1: the last of the launches without a device
    previous_ids: dict[int, tuple[int, int]] = {}  # and per device
    launches: dict[bytes, tuple] = {}  # a run's few hundred kernels have a few shapes: each read once
    new_row = tuple.__new__
    lines = iter(lines)
    following = next(lines, None)
    if following is not None:
        check_text(following, 1)
    number = position = 0  # position: the bytes before `following`
    final_raw, final_number, final_offset = None, 0, 0  # the last line with text
    cut = False  # the last line was cut and said so
    while following is not None:
        raw = following
        number += 1
        offset = position
        position += len(raw)
        if raw.isspace():
            # Blank lines, skipped in a loop of their own. A line source may give a run of them
            # as one piece (ingest.bucket's `blank_runs`, so that they cost less per byte than
            # rows): each of its lines counts.
            number += raw.count(b"\n") - raw.endswith(b"\n")
            for following in lines:
                if not following.isspace():
                    break
                position += len(following)
                number += 1 if following == b"\n" else 1 + following.count(b"\n") - following.endswith(b"\n")
            else:
                following = None
            if following is not None and (b"\x00" in following or not following.isascii()):
                check_text(following, number + 1)
            continue
        following = next(lines, None)
        if following is not None and (b"\x00" in following or not following.isascii()):
            check_text(following, number + 1)
        final_raw, final_number, final_offset = raw, number, offset
        if following is None and not raw.endswith(b"\n"):
            last = last_id, last_line
            cut = yield from unended_line(
                raw, number, offset, extra_columns, launch_text, notes, last, previous_ids
            )
            break
        if offer is not None and (taken := offer(raw, last_id)) is not None:
            last_id, last_line = taken, number
            if launch_text.full:
                yield launch_text.take()
            continue
        # The common line: one launch with its totals, its name and shape read before.
        if (match := line_match(raw)) is not None:
            trace_file, kernel_id, gpu, launch, insts, reported = match.groups()
            if gpu is None and (known := launches.get(launch)) is not None:
                kernel_id, insts, reported = int(kernel_id), int(insts), int(reported)
                if kernel_id > last_id and 0 <= insts < UINT32 and 0 <= reported < UINT32:
                    last_id, last_line = kernel_id, number
                    file = trace_file.decode("ascii")
                    row = (kernel_id, known[0], file, *known[1:], insts, reported, None, None)
                    yield new_row(KernelRow, row)
                    continue
        rows = common_line_rows(raw, match, number, launches, half_match, tail_match)
        if not rows:
            rows, header = other_line_rows(raw, number, following is None, extra_columns)
            if header is not None:
                extra_columns = header
                line_match, half_match, tail_match, offer = line_readers(extra_columns, launch_text)
        for row in rows:
            if row[13] is None and row[0] > last_id:  # checked_order's common case, inline
                last_id, last_line = row[0], number
            else:
                last_id, last_line = checked_order(row, number, last_id, last_line, previous_ids)
            yield row
    if final_raw is not None and not cut and notes is not None:
        note_unfinished_end(final_raw, final_number, final_offset, notes)
    if launch_text is not None and (block := launch_text.take()) is not None:
        yield block


def line_readers(extra_columns: int, launch_text) -> tuple[Callable, Callable, Callable, Callable | None]:
    """fast_patterns(extra_columns), and what offers a line to `launch_text` (None: no
    launch_text, or a header wider than the tracer's standard, which it does not take)."""
    return *fast_patterns(extra_columns), None if launch_text is None or extra_columns else launch_text.line


def unended_line(
    raw: bytes,
    number: int,
    offset: int,
    extra_columns: int,
    launch_text,
    notes: list | None,
    last: tuple[int, int],
    previous_ids: dict[int, tuple[int, int]],
) -> Iterator:
    """The file's last line, without the newline the tracer ends every line with: cut, or the
    halves of launches that never exited (a killed run's: note_unfinished_end), which the fast
    path takes where they are whole (it declines a half cut short); else `cut_line` reads it.
    Yields its launches (`last`: the last kernel id and its line before it); returns whether a
    note said it was cut."""
    if (
        raw.endswith(b", ")
        and launch_text is not None
        and not extra_columns
        and launch_text.line(raw, last[0]) is not None
    ):
        if launch_text.full:
            yield launch_text.take()
        return False
    rows, cut = cut_line(raw, number, offset, extra_columns, notes)
    last_id, last_line = last
    for row in rows:
        last_id, last_line = checked_order(row, number, last_id, last_line, previous_ids)
        yield row
    return cut


def common_line_rows(
    raw: bytes,
    match: re.Match | None,
    number: int,
    launches: dict,
    half_match: Callable,
    tail_match: Callable,
) -> list[KernelRow] | None:
    """The launches of a common line, read from its bytes: `match`, one launch with its totals,
    or else graph-captured halves (`, ` after each), then the totals or the line's end. [] for a
    line of another shape; None for an empty name (parse_launches says so). Each name and shape
    is read once, into `launches` (up to LAUNCHES_CACHED of them)."""
    if match is not None:
        matches = [match]
        totals = match.group(5, 6)
    elif (match := half_match(raw)) is not None:
        matches = [match]
        while True:
            if (tail := tail_match(raw, match.end())) is not None:
                totals = tail.group(1, 2)
                break
            if (match := half_match(raw, match.end())) is None:
                return []  # not the common shape after all
            matches.append(match)
    else:
        return []
    new_row = tuple.__new__
    rows = []
    for match in matches:
        trace_file, kernel_id, gpu, launch = match.group(1, 2, 3, 4)
        if (known := launches.get(launch)) is None:
            known = read_launch(launch, number)
            if known is None:
                return None
            if len(launches) < LAUNCHES_CACHED:
                launches[launch] = known
        rows.append(
            new_row(
                KernelRow,
                (
                    int(kernel_id),
                    known[0],
                    trace_file.decode("ascii"),
                    *known[1:],
                    None,
                    None,
                    None if gpu is None else int(gpu),
                    None,
                ),
            )
        )
    if totals[0] is not None:  # the last launch ran to its exit
        insts, reported = int(totals[0]), int(totals[1])
        if not (0 <= insts < UINT32 and 0 <= reported < UINT32):
            insts, reported = unsigned_numbers([insts, reported], number, TOTALS_COLUMNS)
        rows[-1] = rows[-1]._replace(total_insts=insts, total_reported_insts=reported)
    return rows


def other_line_rows(
    raw: bytes, number: int, is_last: bool, extra_columns: int
) -> tuple[list[KernelRow], int | None]:
    """Any line that is not the common shape: headers, blank lines, demangled names, forks,
    damage. (Its launches, read by parse_launches; the header's extra columns if it is one.)"""
    text = raw.decode("utf-8")
    if number == 1:
        text = text.removeprefix("\ufeff")  # a byte-order mark from a Windows editor
    line = text.rstrip("\r\n")
    if not line.strip():
        return [], None
    header = header_extra_columns(line, number)
    if header is not None:
        return [], header
    try:
        return parse_launches(line, number, is_last=is_last, extra_columns=extra_columns), None
    except StatsError:
        raise
    except ValueError:  # int() of a number longer than Python reads (4,300 digits)
        raise StatsError(number, f"a number too long for a tracer's value: {line[:120]!r}") from None


def checked_order(
    row: KernelRow, number: int, last_id: int, last_line: int, previous_ids: dict[int, tuple[int, int]]
) -> tuple[int, int]:
    """`row`'s kernel id and device checked: ids from 1, devices CUDA ordinals, ids increasing
    (per device for the device-id fork, in `previous_ids`). Returns the last id and its line of
    the launches without a device."""
    if row[0] < 1:
        raise kernel_id_error(str(row[0]), number, row[2])
    device = row[13]
    if device is not None and device > DEVICE_MAX:
        raise StatsError(
            number, f"device id {device} is not a CUDA device ordinal (an int: at most {DEVICE_MAX})"
        )
    if device is None:
        if row[0] <= last_id:
            raise order_error(row, number, (last_id, last_line))
        return row[0], number
    previous = previous_ids.get(device)
    if previous is not None and row[0] <= previous[0]:
        raise order_error(row, number, previous)
    previous_ids[device] = (row[0], number)
    return last_id, last_line


def kernel_id_number(digits: str, line_number: int, trace_file: str) -> int:
    """The kernel id `digits` spell (of a trace file's name), or StatsError past what Cascade
    reads (2^63 - 1: also beyond int()'s 4,300 digits)."""
    significant = digits.lstrip("0") or "0"  # int() counts leading zeros toward its limit too
    if len(significant) <= 19 and (kernel_id := int(significant)) <= INT64_MAX:
        return kernel_id
    raise kernel_id_error(digits, line_number, trace_file)


def kernel_id_error(digits: str, line_number: int, trace_file: str) -> StatsError:
    """The tracer numbers each context's kernels 1, 2, 3... (an `int`, printed with `%d`): an id
    of 0 or past 2^63 - 1 is not one it wrote."""
    shown = digits if len(digits) <= 24 else f"{digits[:20]}... ({len(digits)} digits)"
    problem = "is too large (at most 2^63 - 1)" if digits.strip("0") else "is 0"
    return StatsError(
        line_number,
        f"kernel id {shown} in {trace_file[:80]!r} {problem}: the tracer numbers each context's "
        "kernels from 1",
    )


def check_text(raw: bytes, number: int) -> None:
    """Raises StatsError on bytes that are not text: a binary file uploaded under a stats name.

    A last line (no newline) cut inside a character is text cut short: `cut_line` reads it."""
    if b"\x00" in raw:
        raise StatsError(number, "binary data (NUL byte), not a text file")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.reason == "unexpected end of data" and not raw.endswith(b"\n"):
            return
        raise StatsError(number, "binary data (not UTF-8 text), not a text file") from None


class StatsNote(NamedTuple):
    """Something a file's reader kept or dropped that a reader of the trace must know:
    `offset` is the byte of the file where it happened (where the dropped text starts)."""

    offset: int
    what: str


# Where a launch half starts on a line: a trace file name (after a device fork's two ids).
HALF_START = re.compile(r"(?:^|(?<=, ))(?:-?[0-9]+, -?[0-9]+, )?kernel-[0-9]", re.ASCII)
# What a cut can leave of the totals, `%d,%d` (and a fork's extra columns).
TOTALS_PREFIX = re.compile(r"\s*-?[0-9]*(?:,-?[0-9]*(?:,[^,]*)*)?", re.ASCII)
# Ends of the whole halves tried before the last half's start, at most (a line of graph-captured
# halves can be long: the search stays linear in it).
CUT_TRIES_BEFORE = 64


def cut_line(
    raw: bytes, number: int, offset: int, extra_columns: int, notes: list | None
) -> tuple[list[KernelRow], bool]:
    """A file's last line, which has no newline: the tracer was stopped (or the file cut) while
    writing it. (The launches kept, whether a note said what was dropped.)

    The tracer writes a launch half (ending in `", "`) at launch, then `"%d,%d\n"` in one write
    when the kernel exits: so totals without their newline may be cut short, and are never
    trusted. The whole halves on the line are kept, without totals; whatever follows the last
    of them (cut totals, a half cut short) is dropped. No row is ever read from a part of a
    half: a prefix is kept only where it parses as whole halves whose numbers agree (#blocks
    and #threads the products of the dimensions, as the tracer computes them).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:  # cut inside a character (check_text let only that by)
        text = raw[: error.start].decode("utf-8")
    bom = 0
    if number == 1 and text.startswith("\ufeff"):
        text, bom = text[1:], 3
    line = text.rstrip("\r")
    if not line.strip():
        return [], False
    if header_extra_columns(line, number) is not None:
        note(
            notes,
            offset,
            "the file ends inside its header line (no newline after it): nothing after it was read",
        )
        return [], True
    if line.endswith(", "):
        try:
            rows = parse_launches(line, number, is_last=False, extra_columns=extra_columns)
            if all(map(numbers_agree, rows)):
                return rows, False  # whole halves, no totals: note_unfinished_end says so
        except (StatsError, ValueError):
            pass
    rows, kept = [], 0
    for end in cut_candidates(line):
        try:
            candidate = parse_launches(line[:end], number, is_last=False, extra_columns=extra_columns)
        except (StatsError, ValueError):
            continue
        if candidate and all(map(numbers_agree, candidate)):
            rows, kept = candidate, end
            break
    dropped = line[kept:]
    at = offset + bom + len(line[:kept].encode("utf-8"))
    if rows and TOTALS_PREFIX.fullmatch(dropped):
        what = (
            f"the file ends inside the totals of {rows[-1].trace_file} ({dropped.strip()!r}, no newline "
            "after them): the launch is kept without totals"
        )
    elif rows:
        what = (
            f"the file ends inside a launch: {shown_text(dropped)} dropped; the {len(rows)} whole "
            f"launch(es) before it on the line ({span(rows)}) are kept "
            "without totals"
        )
    else:
        what = f"the file ends inside a launch: its last line {shown_text(dropped)} dropped"
    note(notes, at, what)
    return rows, True


def cut_candidates(line: str) -> Iterator[int]:
    """Where the whole halves of a cut line may end, longest first: after each `", "` from the
    start of the line's last half on, then a few before it."""
    starts = [match.start() for match in HALF_START.finditer(line)]
    last_start = starts[-1] if starts else 0
    end = len(line)
    tries_before = 0
    while (end := line.rfind(", ", 0, end)) != -1:
        after = end + 2
        if after <= last_start:
            tries_before += 1
            if tries_before > CUT_TRIES_BEFORE:
                return
        yield after


def numbers_agree(row: KernelRow) -> bool:
    return (row.grid_x * row.grid_y * row.grid_z) % UINT32 == row.blocks and (
        row.block_x * row.block_y * row.block_z
    ) % UINT32 == row.threads


def note_unfinished_end(raw: bytes, number: int, offset: int, notes: list) -> None:
    """The file's last line ends with launch halves (`", "`) that no totals followed: the
    launches the tracer saw start but never saw exit, a killed run's (or, for graph-captured
    ones, a run stopped before its next ordinary launch)."""
    line = raw.rstrip(b"\r\n")
    if not line.endswith(b", "):
        return
    files = re.findall(rb"(?:^|, )(?:-?[0-9]+, -?[0-9]+, )?(kernel-[0-9][^,]*)", line)
    count = len(files) or 1
    which = files[0].decode("utf-8", "replace") if files else "?"
    if count > 1:
        which += f" to {files[-1].decode('utf-8', 'replace')}"
    note(
        notes,
        offset + len(line),
        f"the file ends with {count} launch(es) whose totals were never written ({which}): the run "
        "was stopped (killed, or its copy cut) before they finished; kept without totals",
    )


def span(rows: list[KernelRow]) -> str:
    first, last = rows[0].trace_file, rows[-1].trace_file
    return first if first == last else f"{first} to {last}"


def note(notes: list | None, offset: int, what: str) -> None:
    if notes is not None:
        notes.append(StatsNote(offset, what))


def shown_text(text: str) -> str:
    return repr(text) if len(text) <= 80 else f"{text[:60]!r}... ({len(text)} characters)"


def order_error(row: KernelRow, number: int, previous: tuple[int, int]) -> StatsError:
    """Kernel ids increase within a file (per device for the device-id fork): this one did not."""
    previous_id, previous_line = previous
    device = "" if row.device_id is None else f" on device {row.device_id}"
    if row.kernel_id == 1:
        return StatsError(
            number,
            f"kernel ids start again at 1{device} after kernel id {previous_id} (line {previous_line}): "
            "the file holds a second run (a CUDA context re-created at the same address, or a "
            "traces/ folder reused by another run); upload each run from a traces/ folder of its own",
        )
    return StatsError(
        number,
        f"kernel id {row.kernel_id}{device} after kernel id {previous_id} (line {previous_line}): "
        "ids must increase",
    )


LAUNCHES_CACHED = 2048
# A launch half as the tracer prints it, `"%s, %s, %d, %d, %d, %d, %d, %d, %d, %d, "`, with a
# trace file name (TRACE_FILE) and a name without commas: groups trace file, kernel id, gpu
# (the distributed fork), then the name with the eight numbers (`name, %d, ..., %d`).
HALF = (
    rb"(kernel-([0-9]{1,18})(?:-ctx_0x[0-9a-fA-F]+|_([0-9]{1,18}))?\.trace[A-Za-z0-9.]*), ([^,]+"
    + rb", -?[0-9]{1,20}" * LAUNCH_NUMBERS
    + rb"), "
)


@functools.cache
def fast_patterns(extra_columns: int) -> tuple[Callable, Callable, Callable]:
    """(a launch with its totals, a launch half, what ends a line of halves), on raw lines.

    The line's end is the totals `"%d,%d"` (and a fork's extra columns), or nothing: the
    half's own `", "` ends the line. Line endings are part of the match.
    """
    tail = rb"(?:(-?[0-9]{1,20}),(-?[0-9]{1,20})" + rb"(?:,[^,]*)" * extra_columns + rb")?[\r\n]*"
    totals = rb"(-?[0-9]{1,20}),(-?[0-9]{1,20})" + rb"(?:,[^,]*)" * extra_columns + rb"[\r\n]*"
    return (
        re.compile(HALF + totals).fullmatch,
        re.compile(HALF).match,
        re.compile(tail).fullmatch,
    )


def read_launch(launch: bytes, number: int) -> tuple | None:
    """(name, grid x/y/z, block x/y/z, #blocks, #threads) of a launch half's `name, %d, ..., %d`
    part (its numbers in the tracer's order: grid, #blocks, block, #threads), checked; None
    for an empty name. Raises StatsError for a number no unsigned 32-bit field holds."""
    name, *numbers = launch.rsplit(b", ", LAUNCH_NUMBERS)
    name = name.decode("utf-8").strip()
    if not name:
        return None
    gx, gy, gz, blocks, bx, by, bz, threads = map(int, numbers)
    return (name, *unsigned_numbers([gx, gy, gz, bx, by, bz, blocks, threads], number, LAUNCH_COLUMNS))


NUMBER_COLUMNS = (
    "grid_dimX",
    "grid_dimY",
    "grid_dimZ",
    "block_dimX",
    "block_dimY",
    "block_dimZ",
    "#blocks",
    "#threads",
    "total_insts",
    "total_reported_insts",
)


LAUNCH_COLUMNS = NUMBER_COLUMNS[:LAUNCH_NUMBERS]
DIM3_COLUMNS = NUMBER_COLUMNS[:6]
TOTALS_COLUMNS = NUMBER_COLUMNS[LAUNCH_NUMBERS:]


def unsigned_numbers(
    numbers: list[int | None], line_number: int, columns: tuple[str, ...] = NUMBER_COLUMNS
) -> list[int | None]:
    """`numbers` (in `columns` order, KernelRow's) as unsigned 32-bit values, or StatsError."""
    return [
        value if value is None or 0 <= value < UINT32 else as_uint32(value, line_number, column)
        for value, column in zip(numbers, columns, strict=True)
    ]


def as_uint32(value: int, line_number: int, column: str) -> int:
    """The tracer prints `#blocks`, `#threads` and both totals, unsigned 32-bit, with `%d`, and
    CUDA's dim3 is unsigned 32-bit: a value of 2^32 or more is not one the tracer can write."""
    if value >= UINT32:
        what = "dimension (CUDA's dim3)" if column in DIM3_COLUMNS else "value (printed with %d)"
        raise StatsError(
            line_number,
            f"{column} {value} does not fit the tracer's unsigned 32-bit {what}: at most {UINT32 - 1}",
        )
    return as_unsigned(value, line_number, column)


def is_integer(field: str) -> bool:
    return INTEGER.fullmatch(field) is not None


def launch_numbers_consistent(fields: list[str]) -> bool:
    """Whether 8 numbers read as grid, #blocks, block, #threads (the products agree, mod 2^32)."""
    gx, gy, gz, blocks, bx, by, bz, threads = (int(field) % UINT32 for field in fields)
    return (gx * gy * gz) % UINT32 == blocks and (bx * by * bz) % UINT32 == threads


def half_start(fields: list[str], position: int) -> tuple[int, int | None, int | None, re.Match] | None:
    """Where a launch half starts at `position`: (trace file's index, device, stream, its match)."""
    if position < len(fields):
        match = TRACE_FILE.fullmatch(fields[position].strip())
        if match is not None:
            return position, None, None, match
    if position + 2 < len(fields) and is_integer(fields[position]) and is_integer(fields[position + 1]):
        match = TRACE_FILE.fullmatch(fields[position + 2].strip())
        if match is not None:
            return position + 2, int(fields[position]), int(fields[position + 1]), match
    return None


def what_follows(fields: list[str], position: int, extra_columns: int, is_last: bool) -> str | None:
    """What comes after a half's eight numbers: "totals", the "next" half, the line's "end",
    the file's end without the half's trailing `", "` ("cut"), or None: not a half's end."""
    remaining = len(fields) - position
    if remaining == 1 and not fields[position].strip():
        return "end"  # the half's own trailing ", " ends the line: no totals were written
    if (
        remaining == TOTALS + extra_columns
        and is_integer(fields[position])
        and is_integer(fields[position + 1])
    ):
        return "totals"
    if remaining == 0 and is_last:
        return "cut"  # the file ends right after the numbers: a half cut short in a copy?
    if half_start(fields, position) is not None:
        return "next"
    return None


def parse_launches(line: str, number: int, *, is_last: bool, extra_columns: int) -> list[KernelRow]:
    """Every launch on one line: graph-captured halves run together, then maybe totals."""
    fields = line.split(",")
    rows = []
    position = 0
    while position < len(fields):
        start = half_start(fields, position)
        if start is None:
            raise StatsError(number, not_a_launch(fields, position, line))
        file_index, device, stream, file_match = start
        name_start = file_index + 1
        chosen = fallback = None
        for end in range(name_start + 1, len(fields) - LAUNCH_NUMBERS + 1):
            if TRACE_FILE.fullmatch(fields[end].strip()):
                # No name holds a trace file's name: the next launch starts here, so this one
                # ended before it. The search stays within one launch: linear in the line.
                break
            numbers = fields[end : end + LAUNCH_NUMBERS]
            if not all(map(is_integer, numbers)):
                continue
            follows = what_follows(fields, end + LAUNCH_NUMBERS, extra_columns, is_last)
            if follows is None:
                continue
            consistent = launch_numbers_consistent(numbers)
            if follows == "cut" and not consistent:
                continue  # not even a launch cut short: a broken row
            if follows == "end" and not consistent and not fields[end + LAUNCH_NUMBERS]:
                continue  # `, ` ends a half; a bare `,` is what a cut left of the totals
            if end == name_start + 1 or consistent:
                # A name without commas (every mangled name), or the numbers agree with
                # each other: this is where the name ends.
                chosen = (end, follows)
                break
            fallback = fallback or (end, follows)
        chosen = chosen or fallback
        if chosen is None:
            raise StatsError(
                number, f"{unfinished_message(fields, file_index, extra_columns)}: {line[:120]!r}"
            )
        end, follows = chosen
        after = end + LAUNCH_NUMBERS
        name = ",".join(fields[name_start:end]).strip()
        if not name:
            raise StatsError(number, "the kernel name is empty")
        numbers = [int(field) for field in fields[end:after]]
        totals = [int(fields[after]), int(fields[after + 1])] if follows == "totals" else [None, None]
        gx, gy, gz, blocks, bx, by, bz, threads = numbers
        values = unsigned_numbers([gx, gy, gz, bx, by, bz, blocks, threads, *totals], number)
        gpu = file_match.group(2)
        # Id 0 is refused by parse_stats_lines once the whole line is read, as on the common
        # lines' path: the same error comes first either way.
        kernel_id = kernel_id_number(file_match.group(1), number, fields[file_index].strip())
        rows.append(
            KernelRow(
                kernel_id,
                name,
                fields[file_index].strip(),
                *values,
                # The fork prints both with `%d`, like every other number.
                as_unsigned(device, number, "device_id")
                if device is not None
                else (None if gpu is None else int(gpu)),
                None if stream is None else as_unsigned(stream, number, "stream_id"),
            )
        )
        position = after if follows == "next" else len(fields)
    return rows


def not_a_launch(fields: list[str], position: int, line: str) -> str:
    if position == 0 and TRACER_2019_ROW.fullmatch(line.strip()):
        return TRACER_2019_MESSAGE
    where = "first field" if position == 0 else f"field {position + 1}"
    return f"{where} {fields[position].strip()[:80]!r} is not a kernel trace file name: {line[:120]!r}"


def unfinished_message(fields: list[str], file_index: int, extra_columns: int) -> str:
    expected = STANDARD_COLUMNS + extra_columns
    return (
        f"expected {expected} comma-separated fields (trace file, name, {LAUNCH_NUMBERS} launch numbers, "
        f"{expected - STANDARD_COLUMNS + TOTALS} totals), or a launch without totals (trace file, name, "
        f"{LAUNCH_NUMBERS} numbers and `, ` before the next launch or the line's end); "
        f"got {len(fields) - file_index} fields"
    )
