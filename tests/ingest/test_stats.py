"""The stats parser on bytes, exactly as the tracer (and its forks) write them. No database."""

import pytest

from ingest import stats
from ingest.kernelslist import parse_kernelslist_lines
from ingest.stats import KernelRow, StatsError, parse_stats_lines
from tests.helpers import STATS_HEADER, shared_fixture

HEADER = STATS_HEADER.encode()


def rows(text: bytes, **options) -> list[KernelRow]:
    return list(parse_stats_lines(text.splitlines(keepends=True), **options))


def test_real_vecadd_stats_file():
    data = shared_fixture("accelsim-vecadd-v5", "stats_ctx_0x6165bdd7ec90").read_bytes()
    assert rows(data) == [
        KernelRow(
            1,
            "_Z6vecAddPdS_S_i",
            "kernel-1-ctx_0x6165bdd7ec90.trace.xz",
            98,
            1,
            1,
            1024,
            1,
            1,
            98,
            1024,
            50066,
            50066,
        )
    ]


def test_real_vecadd_kernelslist():
    data = shared_fixture("accelsim-vecadd-v5", "kernelslist_ctx_0x6165bdd7ec90").read_bytes()
    assert parse_kernelslist_lines(data.splitlines(keepends=True)) == {1}


def test_postprocessed_kernelslist_names_traceg_files():
    data = shared_fixture("accelsim-vecadd-v5", "kernelslist.g").read_bytes()
    assert parse_kernelslist_lines(data.splitlines(keepends=True)) == {1}


def test_file_without_header_as_later_contexts_write_it():
    data = b"kernel-1-ctx_0x2.trace.xz, _Z1kv, 1, 1, 1, 1, 32, 1, 1, 32, 10,10\n"
    assert rows(data)[0].kernel_id == 1


def test_demangled_names_keep_their_commas():
    data = HEADER + b"kernel-7.trace, void foo<int, 2>(float*, int), 4, 2, 1, 8, 128, 1, 1, 128, 900,900\n"
    (row,) = rows(data)
    assert row.name == "void foo<int, 2>(float*, int)"
    assert (row.kernel_id, row.grid_x, row.grid_y, row.blocks, row.total_insts) == (7, 4, 2, 8, 900)


def test_a_last_row_cut_inside_its_numbers_is_dropped_and_named():
    # No `, ` after #threads: "64" may be what a cut left of "640". Nothing of it is read.
    data = (
        HEADER
        + b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\nkernel-2.trace, _Z1bv, 2, 1, 1, 2, 64, 1, 1, 64"
    )
    notes = []
    (first,) = parse_stats_lines(data.splitlines(keepends=True), notes=notes)
    assert (first.kernel_id, first.total_insts, first.total_reported_insts) == (1, 5, 5)
    (note,) = notes
    assert note.offset == data.index(b"kernel-2.trace")
    assert "kernel-2.trace, _Z1bv, 2, 1, 1, 2, 64, 1, 1, 64" in note.what


def test_unfinished_last_row_must_be_consistent_to_be_read_as_unfinished():
    # 8 trailing numbers, but not grid, #blocks, block, #threads: a broken row, not a killed run.
    data = b"kernel-1.trace, _Z1av, 2, 1, 1, 1, 32, 1, 1, 32\n"
    with pytest.raises(StatsError, match="line 1: expected 12"):
        rows(data)


def test_last_row_with_totals_but_no_final_newline_is_cut_its_totals_not_trusted():
    # The tracer writes `%d,%d\n` in one write: totals without their newline may be cut ("6" of "61").
    data = HEADER + b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,6"
    notes = []
    (row,) = parse_stats_lines(data.splitlines(keepends=True), notes=notes)
    assert (row.kernel_id, row.threads, row.total_insts, row.total_reported_insts) == (1, 32, None, None)
    (note,) = notes
    assert note.offset == data.index(b"5,6")
    assert "totals of kernel-1.trace" in note.what


def test_negative_percent_d_values_read_as_unsigned_32_bit():
    data = b"kernel-1.trace, _Z1av, 65536, 65535, 1, -65536, 1024, 1, 1, 1024, -1294967296,-2\n"
    (row,) = rows(data)
    assert row.blocks == 65536 * 65535
    assert row.total_insts == 3_000_000_000
    assert row.total_reported_insts == 2**32 - 2


def test_crlf_line_endings():
    data = HEADER.replace(b"\n", b"\r\n") + b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\r\n"
    (row,) = rows(data)
    assert (row.name, row.total_reported_insts) == ("_Z1av", 5)


def test_extra_columns_from_a_fork_follow_the_totals():
    header = HEADER.rstrip(b"\n") + b", latency\n"
    data = header + b"kernel-1.trace, void f<1, 2>(), 1, 1, 1, 1, 32, 1, 1, 32, 5,6, 777\n"
    (row,) = rows(data)
    assert (row.name, row.total_insts, row.total_reported_insts) == ("void f<1, 2>()", 5, 6)


def test_extra_columns_apply_to_files_without_header():
    data = b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,6, 777\n"
    (row,) = rows(data, extra_columns=1)
    assert (row.total_insts, row.total_reported_insts) == (5, 6)


def test_blank_lines_are_skipped():
    data = HEADER + b"\nkernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n\n"
    assert len(rows(data)) == 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (HEADER + b"kernel-1.trace, _Z1av, 1, 1\n", "line 2: expected 12 comma-separated fields"),
        (
            HEADER
            + b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32\nkernel-2.trace, _Z1bv, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n",
            "line 2: expected 12",
        ),
        (HEADER + b"kernel-1.trace, _Z1av, 1, x, 1, 1, 32, 1, 1, 32, 5,5\n", "line 2: expected 12"),
        (HEADER + b"kernel-1.trace, _Z1av, 1, 1_0, 1, 1, 32, 1, 1, 32, 5,5\n", "line 2: expected 12"),
        (
            HEADER + "kernel-1.trace, _Z1av, 1, \u0661, 1, 1, 32, 1, 1, 32, 5,5\n".encode(),
            "line 2: expected 12",
        ),
        (
            b"foo, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n",
            "line 1: first field 'foo' is not a kernel trace file name",
        ),
        (b"kernel-1.trace, , 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n", "line 1: the kernel name is empty"),
        (b"kernel-1.trace, _Z1av, 1, 1, 1, -4294967296, 32, 1, 1, 32, 5,5\n", "line 1: #blocks -4294967296"),
        (
            b"kernel-2.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\nkernel-2.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n",
            "line 2: kernel id 2 after kernel id 2",
        ),
        (b"\x00\x01\x02binary", "line 1: binary data (NUL byte)"),
        (b"\xff\xfe\xfa bad", "line 1: binary data (not UTF-8 text)"),
    ],
    ids=[
        "short-row",
        "middle-row-without-totals",
        "non-number",
        "underscore-digits",
        "non-ascii-digits",
        "bad-first-field",
        "empty-name",
        "out-of-range",
        "repeated-id",
        "nul-bytes",
        "not-utf8",
    ],
)
def test_malformed_input_names_the_line_and_problem(data, message):
    with pytest.raises(StatsError) as problem:
        rows(data)
    assert str(problem.value).startswith(message)


# --- What the tracer really writes (tracer_tool.cu): launch halves, graphs, forks -----------------


def test_killed_run_leaves_a_launch_half_with_its_trailing_comma_and_space():
    data = (
        HEADER
        + b"kernel-1.trace.xz, _Z1av, 1, 1, 1, 1, 256, 1, 1, 256, 2531,2531\n"
        + b"kernel-2.trace.xz, _Z1bv, 4, 1, 1, 4, 128, 1, 1, 128, "
    )
    first, killed = rows(data)
    assert (first.kernel_id, first.total_insts) == (1, 2531)
    assert killed == KernelRow(2, "_Z1bv", "kernel-2.trace.xz", 4, 1, 1, 128, 1, 1, 4, 128, None, None)


@pytest.mark.parametrize("ending", [b"\n", b"\r\n"])
def test_killed_run_copied_with_a_final_line_ending(ending):
    data = HEADER + b"kernel-1.trace, _Z1bv, 4, 1, 1, 4, 128, 1, 1, 128, " + ending
    (row,) = rows(data)
    assert (row.kernel_id, row.blocks, row.total_insts) == (1, 4, None)


def test_cuda_graph_captured_launches_run_together_until_an_ordinary_launch_ends_the_line():
    # Three launches on one line, the first two captured into a graph.
    data = (
        b"kernel-1-ctx_0x1.trace.xz, _Z4gemmv, 8, 4, 1, 32, 128, 1, 1, 128, "
        b"kernel-2-ctx_0x1.trace.xz, _Z7softmaxv, 16, 1, 1, 16, 256, 1, 1, 256, "
        b"kernel-3-ctx_0x1.trace.xz, _Z4copyv, 2, 1, 1, 2, 64, 1, 1, 64, 900,900\n"
    )
    assert rows(data) == [
        KernelRow(1, "_Z4gemmv", "kernel-1-ctx_0x1.trace.xz", 8, 4, 1, 128, 1, 1, 32, 128, None, None),
        KernelRow(2, "_Z7softmaxv", "kernel-2-ctx_0x1.trace.xz", 16, 1, 1, 256, 1, 1, 16, 256, None, None),
        KernelRow(3, "_Z4copyv", "kernel-3-ctx_0x1.trace.xz", 2, 1, 1, 64, 1, 1, 2, 64, 900, 900),
    ]


def test_graph_halves_with_demangled_names_and_a_file_ending_in_captured_halves():
    data = (
        b"kernel-1.trace, void f<int, 2>(float*, int), 2, 2, 1, 4, 32, 1, 1, 32, "
        b"kernel-2.trace, void g<1, 1, 1, 1, 1, 1, 1, 1>(int), 1, 1, 1, 1, 32, 1, 1, 32, 7,7\n"
        b"kernel-3.trace, _Z1cv, 1, 1, 1, 1, 32, 1, 1, 32, "
        b"kernel-4.trace, _Z1dv, 3, 1, 1, 3, 32, 1, 1, 32, "
    )
    parsed = rows(data)
    assert [(r.kernel_id, r.name, r.blocks, r.total_insts) for r in parsed] == [
        (1, "void f<int, 2>(float*, int)", 4, None),
        (2, "void g<1, 1, 1, 1, 1, 1, 1, 1>(int)", 1, 7),
        (3, "_Z1cv", 1, None),
        (4, "_Z1dv", 3, None),
    ]


def test_device_id_fork_keeps_device_and_stream_and_restarts_ids_per_device():
    data = (
        b"device_id, stream_id, kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, "
        b"#blocks, block_dimX, block_dimY, block_dimZ, #threads, total_insts, total_reported_insts\n"
        b"0, 7, kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 10,10\n"
        b"1, 9, kernel-1.trace, _Z1av, 2, 1, 1, 2, 32, 1, 1, 32, 20,20\n"
        b"0, 7, kernel-2.trace, _Z1bv, 1, 1, 1, 1, 32, 1, 1, 32, "
        b"0, 7, kernel-3.trace, _Z1cv, 1, 1, 1, 1, 32, 1, 1, 32, 30,30\n"
    )
    assert [(r.device_id, r.stream_id, r.kernel_id, r.name, r.total_insts) for r in rows(data)] == [
        (0, 7, 1, "_Z1av", 10),
        (1, 9, 1, "_Z1av", 20),
        (0, 7, 2, "_Z1bv", None),
        (0, 7, 3, "_Z1cv", 30),
    ]


def test_device_id_fork_without_header_is_not_read_as_kernel_ids():
    data = b"0, 0, kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 10,10\n"
    (row,) = rows(data)
    assert (row.device_id, row.stream_id, row.kernel_id, row.trace_file) == (0, 0, 1, "kernel-1.trace")


def test_latency_fork_extra_column_is_a_float_and_graph_halves_have_none():
    header = HEADER.rstrip(b"\n") + b", latency\n"
    data = (
        header
        + b"kernel-1-ctx_0x5.trace.xz, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 0,0,-1.000000\n"
        + b"kernel-2-ctx_0x5.trace.xz, void f<int, 2>(), 1, 1, 1, 1, 32, 1, 1, 32, "
        + b"kernel-3-ctx_0x5.trace.xz, _Z1cv, 1, 1, 1, 1, 32, 1, 1, 32, 5,6,0.123456\n"
    )
    assert [(r.kernel_id, r.name, r.total_insts, r.total_reported_insts) for r in rows(data)] == [
        (1, "_Z1av", 0, 0),
        (2, "void f<int, 2>()", None, None),
        (3, "_Z1cv", 5, 6),
    ]


def test_distributed_fork_names_the_gpu_in_the_trace_file():
    data = (
        b"kernel-1_0.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 10,10\n"
        b"kernel-1_1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 10,10\n"
        b"kernel-2_0.trace, _Z1bv, 1, 1, 1, 1, 32, 1, 1, 32, 10,10\n"
    )
    assert [(r.kernel_id, r.device_id, r.stream_id, r.trace_file) for r in rows(data)] == [
        (1, 0, None, "kernel-1_0.trace"),
        (1, 1, None, "kernel-1_1.trace"),
        (2, 0, None, "kernel-2_0.trace"),
    ]


@pytest.mark.parametrize(
    "data",
    [
        b"kernel name,total_insts,total_reported_insts\n1-_Z6vecAddPdS_S_i.trace,50066,50066\n",
        b"1-_Z6vecAddPdS_S_i.trace,50066,50066\n",
    ],
    ids=["with-header", "without-header"],
)
def test_2019_tracer_format_is_refused_saying_what_it_is(data):
    with pytest.raises(StatsError, match=r"line 1: this is the 2019 tracer's stats format .* v4 or later"):
        rows(data)


def test_a_second_run_appended_to_the_file_is_named_as_such():
    row = b"kernel-%d-ctx_0x1.trace.xz, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n"
    data = HEADER + row % 1 + row % 2 + row % 1 + row % 2
    with pytest.raises(StatsError) as problem:
        rows(data)
    assert str(problem.value).startswith("line 4: kernel ids start again at 1 after kernel id 2 (line 3)")
    assert "second run" in str(problem.value)


def test_a_name_of_spaces_is_empty_on_the_fast_path_too():
    # Found by the property test: the one-launch fast path took "  " for a name.
    with pytest.raises(StatsError, match="line 1: the kernel name is empty"):
        rows(b"kernel-1.trace,  , 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n")


def test_a_byte_order_mark_before_the_header_is_not_a_row():
    data = "\ufeff".encode() + HEADER + b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n"
    assert [row.kernel_id for row in rows(data)] == [1]


def test_more_kernel_shapes_than_are_remembered_read_the_same(monkeypatch):
    """Names and shapes are read once and remembered, up to a bound; past it, still read right."""
    data = HEADER + b"".join(
        b"kernel-%d.trace, _Z1%cv, %d, 1, 1, %d, 32, 1, 1, 32, %d,%d\n" % (n, 97 + n % 5, n, n, n, n + 1)
        for n in range(1, 40)
    )
    remembered = rows(data)
    monkeypatch.setattr("ingest.stats.LAUNCHES_CACHED", 2)
    assert rows(data) == remembered
    assert [(row.name, row.grid_x, row.total_reported_insts) for row in remembered[:2]] == [
        ("_Z1bv", 1, 2),
        ("_Z1cv", 2, 3),
    ]


# --- Unsigned 32-bit: what `%d` can print, and CUDA's dim3 ----------------------------------------

COLUMNS = (
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


def launch_line(numbers: list[int], name: bytes = b"_Z1av") -> bytes:
    *launch, insts, reported = numbers
    return b"kernel-1.trace, %s, %s%d,%d\n" % (name, b"".join(b"%d, " % n for n in launch), insts, reported)


@pytest.mark.parametrize("name", [b"_Z1av", b"void f<int, 2>(int)"], ids=["mangled", "demangled"])
@pytest.mark.parametrize("column", range(len(COLUMNS)), ids=COLUMNS)
def test_a_value_of_2_to_the_32_or_more_is_refused_naming_line_column_and_value(column, name):
    numbers = [1, 1, 1, 1, 32, 1, 1, 32, 5, 5]
    numbers[column] = 2**32
    with pytest.raises(StatsError) as problem:
        rows(HEADER + launch_line(numbers, name))
    message = str(problem.value)
    assert message.startswith(
        f"line 2: {COLUMNS[column]} 4294967296 does not fit the tracer's unsigned 32-bit"
    )
    assert ("dim3" in message) == (column in (0, 1, 2, 4, 5, 6))


@pytest.mark.parametrize("column", range(len(COLUMNS)), ids=COLUMNS)
def test_the_largest_unsigned_32_bit_value_is_read_printed_either_way(column):
    for printed in (2**32 - 1, -1):
        numbers = [1, 1, 1, 1, 32, 1, 1, 32, 5, 5]
        numbers[column] = printed
        (row,) = rows(launch_line(numbers))
        read = (row.grid_x, row.grid_y, row.grid_z, row.blocks, row.block_x, row.block_y, row.block_z)
        read += (row.threads, row.total_insts, row.total_reported_insts)
        assert read[column] == 2**32 - 1


def test_values_past_64_bits_in_a_graph_captured_half_are_refused_too():
    half = b"kernel-%d.trace, _Z1av, 1, 1, 1, 1, %d, 1, 1, 32, "
    data = half % (1, 32) + half % (2, 2**64) + b"5,5\n"
    with pytest.raises(StatsError, match=r"^line 1: block_dimX 18446744073709551616 does not fit .* dim3"):
        rows(data)
    with pytest.raises(StatsError, match=r"^line 1: total_insts 4294967296 does not fit"):
        rows(half % (1, 32) + b"4294967296,5\n")


def test_a_number_longer_than_python_reads_is_a_stats_error():
    data = b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, " + b"9" * 5000 + b",5\n"
    with pytest.raises(StatsError, match="^line 1: "):
        rows(data)


@pytest.mark.parametrize(
    "line",
    [
        b"kernel-1_2147483648.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n",
        b"2147483648, 7, kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n",
    ],
    ids=["distributed-fork-gpu", "device-fork-device-id"],
)
def test_a_device_id_past_any_cuda_device_is_refused(line):
    """A CUDA device ordinal is an int: 2^31 and more is damage (and no device column holds it)."""
    with pytest.raises(StatsError) as problem:
        list(parse_stats_lines([line]))
    assert str(problem.value) == (
        "line 1: device id 2147483648 is not a CUDA device ordinal (an int: at most 2147483647)"
    )


# --- Blank lines, kernel ids the tracer never writes -------------------

ROW = b"kernel-%d.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n"


def test_a_run_of_blank_lines_given_as_one_piece_counts_every_line():
    """A line source may hand a run of blank lines over whole: the lines after it keep their numbers."""
    pieces = [HEADER, ROW % 2, b"\n" * 5, b"  \r\n\t\n", ROW % 2]
    with pytest.raises(StatsError) as problem:
        list(parse_stats_lines(pieces))
    assert str(problem.value).startswith("line 10: kernel id 2 after kernel id 2 (line 2)")


def test_blank_lines_keep_the_line_numbers_of_what_follows():
    data = HEADER + b"\n\r\n   \n" + ROW % 1 + b"\n" * 1000 + b"kernel-2.trace, _Z1av, 1, x\n"
    with pytest.raises(StatsError, match="^line 1006: "):
        rows(data)


def test_blank_lines_are_skipped_before_any_reader_sees_them(monkeypatch):
    """A file of blank lines parsed 35-45 times slower per byte than real rows (one line each,
    through the whole loop): now blank lines are skipped in a loop of their own, which no
    pattern or reader of rows sees (their cost per byte: `python -m bench.simlog blank-lines`)."""
    seen: list[bytes] = []

    def watched(read):
        def reading(raw, *args, **kwargs):
            seen.append(bytes(raw))
            return read(raw, *args, **kwargs)

        return reading

    patterns = stats.fast_patterns
    monkeypatch.setattr(stats, "fast_patterns", lambda extra: tuple(map(watched, patterns(extra))))
    for reader in ("common_line_rows", "other_line_rows", "unended_line"):
        monkeypatch.setattr(stats, reader, watched(getattr(stats, reader)))
    blank = b"\n" * 10_000 + b"\r\n" * 1000 + b"  \t \n" * 1000

    assert [row.kernel_id for row in rows(HEADER + ROW % 1 + blank + ROW % 2 + blank)] == [1, 2]
    assert seen and set(seen) <= {HEADER, ROW % 1, ROW % 2}


def test_kernel_id_0_is_refused_on_both_readings():
    """The tracer numbers each context's kernels from 1 (`ctx_kernelid[ctx] = 1` in tracer_tool.cu,
    then +1 a launch): a timing.csv row or a step would otherwise be matched to nothing, or, by a
    negative index, to another launch."""
    expected = (
        "line 2: kernel id 0 in 'kernel-0.trace' is 0: the tracer numbers each context's kernels from 1"
    )
    for data in (
        HEADER + ROW % 0,  # the common line
        HEADER
        + b"kernel-0.trace, void f<int, 2>(int), 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n",  # the general reader
        HEADER + b"kernel-0.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, " + ROW % 1,  # a graph-captured half
    ):
        with pytest.raises(StatsError) as problem:
            rows(data)
        assert str(problem.value).startswith(expected), str(problem.value)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            b"kernel-" + b"7" * 5000 + b"-ctx_0x1.trace.xz\n",
            "line 2: kernel id 77777777777777777777... (5000 digits) in 'kernel-"
            + "7" * 73
            + "' is too large "
            "(at most 2^63 - 1): the tracer numbers each context's kernels from 1",
        ),
        (
            b"kernel-9223372036854775808.trace\n",
            "line 2: kernel id 9223372036854775808 in 'kernel-9223372036854775808.trace' is too large",
        ),
        (b"kernel-0.traceg\n", "line 2: kernel id 0 in 'kernel-0.traceg' is 0"),
    ],
    ids=["5000-digits", "past-64-bits", "zero"],
)
def test_a_kernelslist_id_out_of_the_tracer_s_range_is_a_stats_error(line, message):
    with pytest.raises(StatsError) as problem:
        parse_kernelslist_lines([b"MemcpyHtoD,0x00007f0000000000,800\n", line])
    assert str(problem.value).startswith(message), str(problem.value)


def test_kernelslist_ids_of_the_tracer_s_range_are_read():
    lines = [b"kernel-1-ctx_0x1.trace.xz\n", b"kernel-9223372036854775807.trace\n", b"kernel-007.trace\n"]
    assert parse_kernelslist_lines(lines) == {1, 2**63 - 1, 7}


def test_leading_zeros_past_python_s_int_limit_still_spell_a_kernel_id():
    assert parse_kernelslist_lines([b"kernel-" + b"0" * 5000 + b"7.trace\n"]) == {7}
