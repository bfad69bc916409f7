"""The stats parser on bytes, exactly as the tracer (and its forks) write them. No database."""

import pytest

from ingest.stats import KernelRow, StatsError, parse_kernelslist_lines, parse_stats_lines
from tests.ingest.conftest import DATA

HEADER = (
    b"kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, block_dimX, "
    b"block_dimY, block_dimZ, #threads, total_insts, total_reported_insts\n"
)


def rows(text: bytes, **options) -> list[KernelRow]:
    return list(parse_stats_lines(text.splitlines(keepends=True), **options))


def test_real_vecadd_stats_file():
    data = (DATA / "accelsim-vecadd-v5" / "stats_ctx_0x6165bdd7ec90").read_bytes()
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
    data = (DATA / "accelsim-vecadd-v5" / "kernelslist_ctx_0x6165bdd7ec90").read_bytes()
    assert parse_kernelslist_lines(data.splitlines(keepends=True)) == {1}


def test_postprocessed_kernelslist_names_traceg_files():
    data = (DATA / "accelsim-vecadd-v5" / "kernelslist.g").read_bytes()
    assert parse_kernelslist_lines(data.splitlines(keepends=True)) == {1}


def test_file_without_header_as_later_contexts_write_it():
    data = b"kernel-1-ctx_0x2.trace.xz, _Z1kv, 1, 1, 1, 1, 32, 1, 1, 32, 10,10\n"
    assert rows(data)[0].kernel_id == 1


def test_demangled_names_keep_their_commas():
    data = HEADER + b"kernel-7.trace, void foo<int, 2>(float*, int), 4, 2, 1, 8, 128, 1, 1, 128, 900,900\n"
    (row,) = rows(data)
    assert row.name == "void foo<int, 2>(float*, int)"
    assert (row.kernel_id, row.grid_x, row.grid_y, row.blocks, row.total_insts) == (7, 4, 2, 8, 900)


def test_last_row_without_totals_has_null_totals():
    data = (
        HEADER
        + b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\nkernel-2.trace, _Z1bv, 2, 1, 1, 2, 64, 1, 1, 64"
    )
    first, last = rows(data)
    assert (first.total_insts, first.total_reported_insts) == (5, 5)
    assert (last.kernel_id, last.grid_x, last.threads) == (2, 2, 64)
    assert (last.total_insts, last.total_reported_insts) == (None, None)


def test_unfinished_last_row_must_be_consistent_to_be_read_as_unfinished():
    # 8 trailing numbers, but not grid, #blocks, block, #threads: a broken row, not a killed run.
    data = b"kernel-1.trace, _Z1av, 2, 1, 1, 1, 32, 1, 1, 32"
    with pytest.raises(StatsError, match="line 1: expected 12"):
        rows(data)


def test_last_complete_row_without_final_newline():
    data = HEADER + b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,6"
    assert rows(data)[0].total_reported_insts == 6


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
