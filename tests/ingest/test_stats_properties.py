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

import ctypes
import os
import re
import string
from dataclasses import dataclass
from unittest import mock

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ingest import stats
from ingest.stats import KernelRow, StatsError, first_line_extra_columns, parse_stats_lines

EXAMPLES = int(os.environ.get("CASCADE_HYPOTHESIS_EXAMPLES", "300"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
UINT32 = 2**32

# tracer_tool.cu's header and fprintf formats, as its source spells them.
STATS_HEADER = (
    "kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, "
    "block_dimX, block_dimY, block_dimZ, #threads, total_insts, total_reported_insts\n"
)
LAUNCH_FORMAT = "%s, %s, %d, %d, %d, %d, %d, %d, %d, %d, "  # at launch: no newline
EXIT_FORMAT = "%d,%d"  # at exit; a fork appends ",%.6f" (latency), then "\n"
DEVICE_FORMAT = "%d, %d, "  # the device-id fork: device and stream before the launch half
DEVICE_HEADER = "device_id, stream_id, " + STATS_HEADER
LATENCY_HEADER = STATS_HEADER.rstrip("\n") + ", latency\n"


# --- Kernel names -----------------------------------------------------------------------------------
# NVBit's mangled names have no commas; other tracer builds write demangled ones, with ", " and
# numbers between the commas (`void foo<int, 2>(float*, int)`). The one input a parser cannot read
# unambiguously is a name that holds a whole launch half: `, ` + eight numbers + `, ` + a trace file
# name (`kernel-<n>...trace`), since graph-captured halves run together on one line. No compiler
# emits that; these names never contain `-` or `.`, so they cannot hold a trace file name.

IDENTIFIER_CHARS = string.ascii_letters + string.digits + "_"
IDENT = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from(string.ascii_letters + "_"),
    st.text(IDENTIFIER_CHARS, max_size=14),
)
MANGLED = st.one_of(
    st.builds(lambda n, rest: f"_Z{n}{rest}", st.integers(1, 200), IDENT),
    IDENT,  # extern "C" kernels: compute_sm80_group_gemm_args
    # CUTLASS-sized: real names run past 1,500 characters.
    st.text(IDENTIFIER_CHARS, min_size=1, max_size=2000).map(lambda s: "_ZN" + s),
)
SCOPE = st.lists(st.one_of(IDENT, st.just("(anonymous namespace)")), min_size=1, max_size=4).map("::".join)
BUILTIN = st.sampled_from(["float", "int", "unsigned int", "long", "bool", "double", "c10::Half", "__half"])
TEMPLATE_VALUE = st.one_of(
    st.integers(-(2**31), UINT32).map(str),
    st.sampled_from(["true", "false", "(cudaDataType_t)3", "128u", "4l"]),
)
TYPE = st.recursive(
    st.one_of(BUILTIN, SCOPE),
    lambda inner: st.builds(
        lambda scope, args, close: f"{scope}<{', '.join(args)}{close}",
        SCOPE,
        st.lists(st.one_of(inner, TEMPLATE_VALUE), min_size=1, max_size=4),
        st.sampled_from([">", " >"]),
    ),
    max_leaves=6,
)
PARAMETER = st.builds(
    lambda t, ref: t + ref, TYPE, st.sampled_from(["", "*", " const*", "&", " const&", "**"])
)
LAMBDA = st.integers(1, 9).map(lambda n: f"::{{lambda(int)#{n}}}")
DEMANGLED = st.builds(
    lambda ret, scope, targs, params, suffix: f"{ret}{scope}{targs}({', '.join(params)}){suffix}",
    st.sampled_from(["", "void "]),
    SCOPE,
    st.one_of(
        st.just(""),
        st.lists(st.one_of(TYPE, TEMPLATE_VALUE), min_size=1, max_size=10).map(
            lambda args: f"<{', '.join(args)}>"
        ),
    ),
    st.lists(PARAMETER, max_size=6),
    st.one_of(st.just(""), st.just(" const"), LAMBDA),
)
NAME = st.one_of(MANGLED, DEMANGLED)

# --- Values -----------------------------------------------------------------------------------------
# Unsigned 32-bit: `%d` prints 2^31 and above as negative numbers, which the parser reads back.
U32 = st.one_of(
    st.integers(1, 1024),
    st.integers(1, UINT32 - 1),
    st.sampled_from([2**31 - 1, 2**31, 2**31 + 1, UINT32 - 1]),
)
TOTAL = st.one_of(st.integers(0, 10**6), st.integers(0, UINT32 - 1), st.sampled_from([2**31, UINT32 - 1]))
DIM3 = st.tuples(U32, U32, U32)
LATENCY = st.one_of(st.just(-1.0), st.floats(0, 1e9, allow_nan=False, allow_infinity=False))
CTX = st.integers(2**20, 2**48).map(hex)


def c_int(value: int) -> int:
    """The int C's `%d` receives for an unsigned 32-bit value (2^31 and above print negative)."""
    return ctypes.c_int32(value).value


def tracer_launch_half(trace_file, name, grid, block, *, device_id=None, stream_id=None) -> str:
    gx, gy, gz = grid
    bx, by, bz = block
    numbers = (gx, gy, gz, gx * gy * gz, bx, by, bz, bx * by * bz)
    half = LAUNCH_FORMAT % (trace_file, name, *(c_int(n) for n in numbers))
    if device_id is None:
        return half
    return DEVICE_FORMAT % (c_int(device_id), c_int(stream_id)) + half


def tracer_totals(total_insts: int, total_reported_insts: int, *latency: str) -> str:
    return (
        EXIT_FORMAT % (c_int(total_insts), c_int(total_reported_insts))
        + "".join(f",{v}" for v in latency)
        + "\n"
    )


@dataclass(frozen=True)
class StatsFile:
    data: bytes
    expected: list[KernelRow]
    extra_columns: int  # what the caller passes (the first context's header width, for a headerless file)
    variant: str
    header: bool


def trace_file_namer(draw, variant: str):
    if variant == "distributed":
        gpu = draw(st.integers(0, 15))
        return (lambda kernel_id: f"kernel-{kernel_id}_{gpu}.trace"), gpu
    ctx = draw(CTX)
    form = draw(
        st.sampled_from(["{n}.trace", "{n}.trace.xz", "{n}-ctx_{ctx}.trace.xz", "{n}-ctx_{ctx}.trace"])
    )
    return (lambda kernel_id: "kernel-" + form.format(n=kernel_id, ctx=ctx)), None


@st.composite
def stats_files(draw, *, variants=("standard", "latency", "device", "distributed"), min_launches=0):
    """A stats file as the tracer (or a fork) writes it, and the rows it holds."""
    variant = draw(st.sampled_from(variants))
    # The device-id fork writes every device into one stats.csv, with its header.
    header = variant == "device" or draw(st.booleans())
    trace_file, gpu = trace_file_namer(draw, variant)
    count = draw(st.integers(min_launches, 12))
    increments = st.sampled_from([1, 1, 1, 2, 17])
    next_id: dict[int | None, int] = {}
    text = {"standard": STATS_HEADER, "latency": LATENCY_HEADER, "device": DEVICE_HEADER}.get(
        variant, STATS_HEADER
    )
    if not header:
        text = ""
    expected = []
    kinds: list[tuple] = []
    for _ in range(count):
        device = draw(st.integers(0, 3)) if variant == "device" else None
        stream = (
            draw(st.one_of(st.integers(0, 64), st.integers(0, UINT32 - 1))) if device is not None else None
        )
        kernel_id = (
            next_id.get(device, 0) + draw(increments) if device in next_id else draw(st.integers(1, 3))
        )
        next_id[device] = kernel_id
        # A run launches a few kernels in a few shapes, again and again.
        if kinds and draw(st.booleans()):
            name, grid, block = draw(st.sampled_from(kinds))
        else:
            name, grid, block = draw(NAME), draw(DIM3), draw(DIM3)
            kinds.append((name, grid, block))
        # None: a launch captured into a CUDA graph, or the kernel a killed run never finished.
        totals = draw(st.one_of(st.none(), st.tuples(TOTAL, TOTAL)))
        text += tracer_launch_half(
            trace_file(kernel_id), name, grid, block, device_id=device, stream_id=stream
        )
        if totals is not None:
            latency = (f"{draw(LATENCY):.6f}",) if variant == "latency" else ()
            text += tracer_totals(*totals, *latency)
        expected.append(
            KernelRow(
                kernel_id=kernel_id,
                name=name,
                trace_file=trace_file(kernel_id),
                grid_x=grid[0],
                grid_y=grid[1],
                grid_z=grid[2],
                block_x=block[0],
                block_y=block[1],
                block_z=block[2],
                blocks=grid[0] * grid[1] * grid[2] % UINT32,
                threads=block[0] * block[1] * block[2] % UINT32,
                total_insts=None if totals is None else totals[0],
                total_reported_insts=None if totals is None else totals[1],
                device_id=gpu if variant == "distributed" else device,
                stream_id=stream,
            )
        )
    # Copies through other systems: a final newline added or lost, CRLF line endings.
    if text.endswith("\n"):
        if draw(st.booleans()):
            # The tracer ends every totals line with a newline in the same write: totals
            # without one may be cut short, and are not trusted (issue 29).
            text = text[:-1]
            if expected and expected[-1].total_insts is not None:
                expected[-1] = expected[-1]._replace(total_insts=None, total_reported_insts=None)
    elif text and draw(st.booleans()):
        text += "\n"
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    extra = 1 if variant == "latency" else 0
    # A header in the file wins over what the caller passes; a headerless file needs the right width.
    extra_columns = draw(st.integers(0, 3)) if header else extra
    return StatsFile(text.encode(), expected, extra_columns, variant, header)


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

TOKENS = st.sampled_from(
    [
        b"kernel-1.trace",
        b"kernel-2-ctx_0x1f.trace.xz",
        b"kernel-3_1.trace",
        b"kernel-",
        b".trace",
        b", ",
        b",",
        b" ",
        b"\n",
        b"\r\n",
        b"\r",
        b"-",
        b"0",
        b"1",
        b"32",
        b"2147483648",
        b"-2147483648",
        b"-2147483649",
        b"4294967296",
        b"99999999999999999999999",
        b"1.500000",
        b"_Z1av",
        b"void f<1, 2>(int)",
        b"kernel id",
        STATS_HEADER.encode(),
        DEVICE_HEADER.encode(),
        LATENCY_HEADER.encode(),
        b"kernel name,total_insts,total_reported_insts\n",
        b"1-_Z6vecAddPdS_S_i.trace,50066,50066\n",
        b"\x00",
        b"\xff",
        b"\xc3\xa9",
        "\u2028".encode(),
        b"\xef\xbb\xbf",
    ]
)
SOUP = st.lists(TOKENS, max_size=60).map(b"".join)


@st.composite
def mutated_files(draw):
    """A valid file, truncated or with commas, newlines and stray bytes inserted, deleted, repeated."""
    data = draw(stats_files()).data
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        match draw(st.sampled_from(["truncate", "insert", "delete", "repeat"])):
            case "truncate":
                data = data[:at]
            case "insert":
                data = data[:at] + draw(TOKENS) + data[at:]
            case "delete":
                data = data[:at] + data[at + draw(st.integers(1, 12)) :]
            case "repeat":
                data = data[:at] + data[at : at + draw(st.integers(1, 200))] + data[at:]
    return data


# Digit strings past what any reader takes in one go: 20 digits (past 64 bits), Python's own limit
# for int() (4,300 digits) and beyond. The tracer prints none of them.
LONG_DIGITS = st.one_of(st.sampled_from([19, 20, 21, 4300, 4301, 5000]), st.integers(19, 6000)).map(
    lambda length: b"9" * length
)


@st.composite
def long_numbers(draw):
    """A file the tracer wrote, with one of its numbers (a kernel id, grid, block, a total, a
    latency) replaced by a very long digit string."""
    data = draw(stats_files(min_launches=1)).data
    numbers = list(re.finditer(rb"[0-9]+", data))
    if not numbers:
        return data
    number = draw(st.sampled_from(numbers))
    return data[: number.start()] + draw(LONG_DIGITS) + data[number.end() :]


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


LONG_TOTALS = b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, " + b"9" * 5000 + b",5\n"
LONG_GRID = b"kernel-1.trace, _Z1av, " + b"9" * 5000 + b", 1, 1, 1, 32, 1, 1, 32, 5,5\n"
LONG_KERNEL_ID = b"kernel-" + b"9" * 5000 + b".trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n"


@PROPERTY
@given(long_numbers(), st.integers(0, 3))
@example(LONG_TOTALS, 0)
@example(LONG_GRID, 0)
@example(LONG_KERNEL_ID, 0)
def test_very_long_numbers_give_the_same_stats_error_on_both_readings(data: bytes, extra_columns: int):
    assert_rows_or_stats_error(data, extra_columns)
    assert_read_as_the_general_reader_reads(data, extra_columns)
