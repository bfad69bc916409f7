"""Parse the Accel-Sim NVBit tracer's `stats_ctx_*` / `stats.csv` and kernelslist files.

Pure functions from lines (bytes, as read from S3) to rows: no Django, no I/O. The traps,
from docs/accel-sim-tracer-output (the tracer's own source and a real run):

- `", "` between fields but no space before the last one; CRLF when copied through Windows.
- The header is written once per process, into the first context's file only; forks append
  columns after `total_reported_insts`, so the header's width applies to every context.
- Demangled names contain commas: the name is everything between the first field and the
  numeric fields at the end.
- The totals are appended when a kernel finishes: a killed run leaves a last row without
  them (and often without a newline). Its totals are unknown, not zero.
- Unsigned 32-bit values are printed with `%d`: a negative number is read as unsigned.
"""

import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple

HEADER_START = "kernel id"
STANDARD_COLUMNS = 12
# After the trace file and the name: grid x/y/z, #blocks, block x/y/z, #threads, totals.
LAUNCH_NUMBERS = 8
COMPLETE_NUMBERS = 10
UINT32 = 2**32
INT64_MAX = 2**63 - 1

TRACE_FILE_ID = re.compile(r"^kernel-([0-9]+)(?:-ctx_0x[0-9a-fA-F]+)?\.trace")
STATS_CTX_NAME = re.compile(r"^stats_ctx_(.+)$")
# A CUDA context is a pointer: `0x` and hex digits (the column holds 64 characters).
CTX = re.compile(r"^0x[0-9a-fA-F]{1,62}$")


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


def decode_lines(lines: Iterable[bytes]) -> Iterator[tuple[int, str, bool]]:
    """(line number, text without its line ending, whether it is the last line) for each line.

    Raises StatsError on bytes that are not text: a binary file uploaded under a stats name.
    """
    previous: tuple[int, str] | None = None
    for number, raw in enumerate(lines, start=1):
        if b"\x00" in raw:
            raise StatsError(number, "binary data (NUL byte), not a text file")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise StatsError(number, "binary data (not UTF-8 text), not a text file") from None
        if previous is not None:
            yield (*previous, False)
        previous = (number, text.rstrip("\r\n"))
    if previous is not None:
        yield (*previous, True)


def header_extra_columns(line: str) -> int | None:
    """Columns after the standard twelve if `line` is the header, else None."""
    if not line.lstrip().lower().startswith(HEADER_START):
        return None
    return max(len(line.split(",")) - STANDARD_COLUMNS, 0)


def first_line_extra_columns(first_line: bytes) -> int | None:
    """The header's extra columns from a file's first line (None: the file has no header)."""
    return header_extra_columns(first_line.decode("utf-8", errors="replace").rstrip("\r\n"))


def parse_int(text: str) -> int | None:
    text = text.strip()
    if not text.isascii() or not (text.isdigit() or (text[:1] == "-" and text[1:].isdigit())):
        return None
    return int(text)


def as_unsigned(value: int, line_number: int, column: str) -> int:
    """`%d` prints unsigned 32-bit values of 2^31 or more as negative numbers."""
    if value < 0:
        if value < -(2**31):
            raise StatsError(line_number, f"{column} {value} is below any 32-bit value")
        return value + UINT32
    if value > INT64_MAX:
        raise StatsError(line_number, f"{column} {value} does not fit in 64 bits")
    return value


def kernel_id_from_trace_file(trace_file: str) -> int | None:
    match = TRACE_FILE_ID.match(trace_file)
    if match:
        kernel_id = int(match.group(1))
    elif trace_file.isascii() and trace_file.isdigit():
        kernel_id = int(trace_file)
    else:
        return None
    return kernel_id if kernel_id <= INT64_MAX else None


def parse_stats_lines(lines: Iterable[bytes], *, extra_columns: int = 0) -> Iterator[KernelRow]:
    """Every kernel launch in one stats file, in file order.

    `extra_columns` is the header's width beyond the standard twelve, for files that have
    no header of their own (every context but the first); a header in the file wins.
    """
    previous_id = 0
    for number, line, is_last in decode_lines(lines):
        if not line.strip():
            continue
        header = header_extra_columns(line)
        if header is not None:
            extra_columns = header
            continue
        row = parse_stats_row(line, number, is_last=is_last, extra_columns=extra_columns)
        if row.kernel_id <= previous_id:
            raise StatsError(
                number, f"kernel id {row.kernel_id} after kernel id {previous_id}: ids must increase"
            )
        previous_id = row.kernel_id
        yield row


def launch_numbers_consistent(fields: list[str]) -> bool:
    """Whether 8 numbers read as grid, #blocks, block, #threads (the products agree, mod 2^32).

    Tells a row the tracer left unfinished from a broken row that happens to end in 8 numbers.
    """
    gx, gy, gz, blocks, bx, by, bz, threads = (int(field) % UINT32 for field in fields)
    return (gx * gy * gz) % UINT32 == blocks and (bx * by * bz) % UINT32 == threads


def parse_stats_row(line: str, number: int, *, is_last: bool, extra_columns: int) -> KernelRow:
    fields = line.split(",")
    complete = COMPLETE_NUMBERS + extra_columns
    if len(fields) == complete + 2:
        # The common case, a mangled name without commas: one split, ten int() calls.
        try:
            numbers = list(map(int, fields[2 : 2 + COMPLETE_NUMBERS]))
            name_fields = fields[1:2]
        except ValueError:
            numbers, name_fields = split_name_and_numbers(fields, line, number, is_last, complete)
    else:
        numbers, name_fields = split_name_and_numbers(fields, line, number, is_last, complete)
    trace_file = fields[0].strip()
    kernel_id = kernel_id_from_trace_file(trace_file)
    if kernel_id is None:
        raise StatsError(number, f"first field {trace_file[:80]!r} is not a kernel trace file name")
    name = name_fields[0].strip() if len(name_fields) == 1 else ",".join(name_fields).strip()
    if not name:
        raise StatsError(number, "the kernel name is empty")
    if None in numbers or min(numbers) < 0 or max(numbers) > INT64_MAX:
        numbers = unsigned_numbers(numbers, number)
    return KernelRow(kernel_id, name, trace_file, *numbers[0:3], *numbers[4:7], numbers[3], *numbers[7:])


def split_name_and_numbers(
    fields: list[str], line: str, number: int, is_last: bool, complete: int
) -> tuple[list[int | None], list[str]]:
    """The slow path: a name with commas, a fork's extra columns, an unfinished last row."""
    trailing = 0
    for field in reversed(fields[1:]):
        if trailing == complete or parse_int(field) is None:
            break
        trailing += 1
    if len(fields) >= complete + 2 and trailing >= complete:
        return [int(field) for field in fields[-complete:]][:COMPLETE_NUMBERS], fields[1:-complete]
    if is_last and trailing == LAUNCH_NUMBERS and launch_numbers_consistent(fields[-LAUNCH_NUMBERS:]):
        # The run ended before this kernel finished: its totals were never written.
        return [int(field) for field in fields[-LAUNCH_NUMBERS:]] + [None, None], fields[1:-LAUNCH_NUMBERS]
    raise StatsError(
        number,
        f"expected {STANDARD_COLUMNS + complete - COMPLETE_NUMBERS} comma-separated fields "
        f"(trace file, name, {complete} numbers), got {len(fields)} fields "
        f"of which the last {trailing} are numbers: {line[:120]!r}",
    )


NUMBER_COLUMNS = (
    "grid_dimX",
    "grid_dimY",
    "grid_dimZ",
    "#blocks",
    "block_dimX",
    "block_dimY",
    "block_dimZ",
    "#threads",
    "total_insts",
    "total_reported_insts",
)


def unsigned_numbers(numbers: list[int | None], line_number: int) -> list[int | None]:
    return [
        value if value is None or 0 <= value <= INT64_MAX else as_unsigned(value, line_number, column)
        for value, column in zip(numbers, NUMBER_COLUMNS, strict=True)
    ]


def parse_kernelslist_lines(lines: Iterable[bytes]) -> set[int]:
    """The ids of the kernels that were traced: the trace files a kernelslist names.

    `MemcpyHtoD,<addr>,<bytes>` lines and anything else that names no kernel trace are
    skipped; v5 (`.trace.xz`), v4 (`.trace`) and post-processed (`.traceg`) names all count.
    """
    traced: set[int] = set()
    for _number, line, _is_last in decode_lines(lines):
        match = TRACE_FILE_ID.match(line.strip())
        if match:
            traced.add(int(match.group(1)))
    return traced
