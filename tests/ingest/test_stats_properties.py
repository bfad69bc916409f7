"""Properties of the stats parser: what the tracer writes is read back exactly; nothing else crashes it.

Launches are drawn at random (mangled and demangled names, 32-bit values printed negative by `%d`,
CUDA-graph launches that only get their launch half, a run killed mid-kernel, CRLF copies,
headerless later-context files, the latency and device-id forks) and rendered with the tracer's
own fprintf format strings, copied here from tracer_tool.cu and applied as C's printf applies
them (`tracer_launch_half`, `tracer_totals`). Not with tools.tracer_format, the generator's
writer: it and the parser were written from one reading of the format, so a test feeding one to
the other would pass on a shared mistake. The expected rows come from the drawn launches, never
from the parser. tests/ingest/test_stats_real.py checks the parser on files the tracer wrote.

The suite runs 300 examples per property, derandomized (the same examples on every run, no
`.hypothesis/` database written). For a deeper run:

    CASCADE_HYPOTHESIS_EXAMPLES=10000 python3 run.py test tests/ingest/test_stats_properties.py
"""

import re
from unittest import mock

from hypothesis import example, given
from hypothesis import strategies as st

from ingest import stats
from ingest.stats import KernelRow, StatsError, first_line_extra_columns, parse_stats_lines
from tests.ingest.support import (
    LONG_GRID,
    LONG_KERNEL_ID,
    LONG_TOTALS,
    PROPERTY,
    SOUP,
    StatsFile,
    long_numbers,
    mutated_files,
    stats_files,
)

# tracer_tool.cu's header and fprintf formats, as its source spells them.
STATS_HEADER = (
    "kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, "
    "block_dimX, block_dimY, block_dimZ, #threads, total_insts, total_reported_insts\n"
)


# --- Kernel names -----------------------------------------------------------------------------------
# NVBit's mangled names have no commas; other tracer builds write demangled ones, with ", " and
# numbers between the commas (`void foo<int, 2>(float*, int)`). The one input a parser cannot read
# unambiguously is a name that holds a whole launch half: `, ` + eight numbers + `, ` + a trace file
# name (`kernel-<n>...trace`), since graph-captured halves run together on one line. No compiler
# emits that; these names never contain `-` or `.`, so they cannot hold a trace file name.


def parse(data: bytes, extra_columns: int) -> list[KernelRow]:
    return list(parse_stats_lines(data.splitlines(keepends=True), extra_columns=extra_columns))


@PROPERTY
@given(stats_files())
def test_what_the_tracer_writes_is_read_back_exactly(file: StatsFile):
    assert parse(file.data, file.extra_columns) == file.expected


@PROPERTY
@given(stats_files(variants=("standard", "latency", "distributed"), min_launches=1))
def test_the_first_line_tells_the_width_for_later_contexts(file: StatsFile):
    """The poller reads the first context's first line to parse the headerless files of the others."""
    first_line = file.data.splitlines(keepends=True)[0]
    if file.header:
        assert first_line_extra_columns(first_line) == (1 if file.variant == "latency" else 0)
        later_context = file.data.split(b"\n", 1)[1] if b"\n" in file.data else b""
        assert parse(later_context, first_line_extra_columns(first_line)) == file.expected
    else:
        assert first_line_extra_columns(first_line) is None


def two_runs():
    """Two runs of the same tracer build; the second's ids start again at 1 (with or without its header)."""
    return stats_files(variants=("standard", "latency"), min_launches=1).flatmap(
        lambda first: st.tuples(st.just(first), stats_files(variants=(first.variant,), min_launches=1))
    )


@PROPERTY
@given(two_runs())
def test_a_second_run_appended_to_the_same_file_is_refused(runs: tuple[StatsFile, StatsFile]):
    """Ids restarting at 1 in one file: a context re-created at the same address, or a reused folder."""
    first, second = runs
    restart = re.sub(rb"^(.*?)kernel-[0-9]+", rb"\1kernel-1", second.data, count=1, flags=re.DOTALL)
    data = first.data if first.data.endswith(b"\n") else first.data + b"\n"
    try:
        parse(data + restart, first.extra_columns)
    except StatsError as problem:
        assert re.search(r"restart|second run", str(problem), re.IGNORECASE), str(problem)
    else:
        raise AssertionError("a second run's ids restarting at 1 were read as one run")


# --- Anything else: rows or a StatsError that names a line, never another exception -----------------


def assert_rows_or_stats_error(data: bytes, extra_columns: int) -> None:
    lines = data.splitlines(keepends=True)
    try:
        rows = list(parse_stats_lines(lines, extra_columns=extra_columns))
    except StatsError as problem:
        assert isinstance(problem.line_number, int)
        assert 1 <= problem.line_number <= max(len(lines), 1), (problem.line_number, len(lines))
        assert str(problem).startswith(f"line {problem.line_number}: ")
    else:
        for row in rows:
            assert isinstance(row, KernelRow)
            # A name is never empty and never padded: what the tracer prints between `", "`s.
            assert row.name and row.name == row.name.strip(), row


@PROPERTY
@given(st.one_of(st.binary(max_size=3000), SOUP), st.integers(0, 3))
@example(b"kernel-1.trace,  , 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n", 0)
def test_arbitrary_bytes_give_rows_or_a_stats_error(data: bytes, extra_columns: int):
    assert_rows_or_stats_error(data, extra_columns)


@PROPERTY
@given(mutated_files(), st.integers(0, 3))
def test_damaged_files_give_rows_or_a_stats_error(data: bytes, extra_columns: int):
    assert_rows_or_stats_error(data, extra_columns)


def test_a_damaged_line_of_many_launch_halves_is_answered_in_linear_time(monkeypatch):
    """LLM serving puts thousands of graph-captured halves on one line. In a damaged copy whose
    numbers disagree (#blocks is not the grid's product) and whose names hold commas, the parser
    must not scan the rest of the line once per half: one such file would hold a worker for hours.

    The work is counted, not timed: the fields the reader tries as a launch's numbers
    (`is_integer`), for a line of 100 halves and one of 300. Linear work is three times as much;
    a scan of the rest of the line per half, nine."""
    half = "kernel-{}.trace, void foo<int, 2>(float*, int), 3, 1, 1, 4, 7, 1, 1, 7, "
    tried = [0]
    is_integer = stats.is_integer

    def counted(field: str) -> bool:
        tried[0] += 1
        return is_integer(field)

    monkeypatch.setattr(stats, "is_integer", counted)

    def work(halves: int) -> int:
        tried[0] = 0
        assert_rows_or_stats_error(
            "".join(half.format(n) for n in range(1, halves + 1)).encode() + b"5,5\n", 0
        )
        return tried[0]

    assert 0 < work(300) <= 3.1 * work(100)


# --- The fast reading of the common lines is the general reader's, rows and errors alike -----------


def rows_or_error(data: bytes, extra_columns: int) -> list[KernelRow] | str:
    try:
        return parse(data, extra_columns)
    except StatsError as problem:
        return f"StatsError: {problem}"


def general_reader_only():
    """Every line through `parse_launches`: no line matches the fast patterns."""
    never = lambda *args: None  # noqa: E731
    return mock.patch.object(stats, "fast_patterns", lambda extra_columns: (never, never, never))


def assert_read_as_the_general_reader_reads(data: bytes, extra_columns: int) -> None:
    fast = rows_or_error(data, extra_columns)
    with general_reader_only():
        general = rows_or_error(data, extra_columns)
    assert fast == general


@PROPERTY
@given(stats_files())
def test_the_fast_reading_is_the_general_one_on_what_the_tracer_writes(file: StatsFile):
    assert_read_as_the_general_reader_reads(file.data, file.extra_columns)


@PROPERTY
@given(st.one_of(mutated_files(), SOUP), st.integers(0, 3))
@example(
    b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\nkernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n",
    0,
)
@example(
    b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, kernel-2.trace,  , 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n", 0
)
@example(b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n\x00", 0)
@example(b"kernel-1.trace, _Z1av, 1, 1, 1, -1, 32, 1, 1, 32, -5,4294967295\n", 0)
def test_the_fast_reading_is_the_general_one_on_damaged_files(data: bytes, extra_columns: int):
    assert_read_as_the_general_reader_reads(data, extra_columns)


@PROPERTY
@given(long_numbers(), st.integers(0, 3))
@example(LONG_TOTALS, 0)
@example(LONG_GRID, 0)
@example(LONG_KERNEL_ID, 0)
def test_very_long_numbers_give_the_same_stats_error_on_both_readings(data: bytes, extra_columns: int):
    assert_rows_or_stats_error(data, extra_columns)
    assert_read_as_the_general_reader_reads(data, extra_columns)
