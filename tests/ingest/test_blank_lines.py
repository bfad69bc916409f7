"""Blank lines in a stats file cost no more per byte than real rows.

A stats file is read with its runs of blank lines as one piece each (`blank_runs`,
ingest.bucket), which the parser counts line by line; every other reader (kernelslist,
timing.csv) still gets one line at a time.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import bucket, passes
from ingest.kernelslist import parse_kernelslist_lines
from ingest.stats import StatsError, parse_stats_lines
from ingest.timing import TimingError
from ingest.timing.timing_csv import read_timing
from tests.helpers import STATS_HEADER, stats_row
from traces.models import Trace

HEADER = STATS_HEADER.encode()
MAX_LINE = 16 * 1024**2
BLANK_LINES = [b"\n", b"\r\n", b"  \n", b" \t \r\n", b"\x0b\x0c\n"]


def row(kernel_id: int) -> bytes:
    return stats_row(kernel_id, "0x1").encode()


def pieces(data: bytes, chunk: int = bucket.READ_CHUNK, max_line: int = MAX_LINE) -> list[bytes]:
    """How a stats file's parse reads `data`: chunk by chunk, runs of blank lines whole."""
    chunks = (data[start : start + chunk] for start in range(0, len(data), chunk))
    return list(bucket._lines(chunks, max_line, blank_runs=True))


@pytest.mark.parametrize("blank", BLANK_LINES)
def test_a_file_of_blank_lines_reaches_the_parser_in_a_few_pieces_a_chunk(blank):
    """Before: one step of the parser per blank line, 1.3 MB/s (LF) against 45 MB/s for rows.
    Now a run of them is one piece, at most two a chunk read, whatever the lines: they cost
    less per byte than rows (the figures: `python -m bench.simlog blank-lines`)."""
    blanks = blank * (1024**2 // len(blank))
    chunks = -(-len(blanks) // bucket.READ_CHUNK)

    read = pieces(blanks)

    assert b"".join(read) == blanks
    assert len(read) <= 2 * chunks
    assert sum(1 for _ in parse_stats_lines(read)) == 0


@pytest.mark.parametrize("chunk", [7, 4096, bucket.READ_CHUNK])
@pytest.mark.parametrize("blank", BLANK_LINES)
def test_an_error_after_1000_blank_lines_names_its_line(chunk, blank):
    # Line 1 the header, line 2 a row, lines 3 to 1002 blank: the repeated id is on line 1003.
    data = HEADER + row(1) + blank * 1000 + row(1)
    with pytest.raises(StatsError) as problem:
        for _ in parse_stats_lines(pieces(data, chunk)):
            pass
    assert str(problem.value).startswith("line 1003: kernel ids start again at 1 after kernel id 1 (line 2)")


def test_a_run_of_blank_lines_is_one_piece_and_every_other_line_its_own():
    data = HEADER + row(1) + b"\n" + row(2) + b"\n\r\n  \n" * 100 + row(3) + b"\n\n"
    assert pieces(data) == [HEADER, row(1), b"\n", row(2), b"\n\r\n  \n" * 100, row(3), b"\n\n"]


def test_rows_with_a_few_blank_lines_between_come_one_line_at_a_time():
    """Where lines are long on average, blank lines read one by one cost less than the rows."""
    long_row = b"kernel-%d-ctx_0x6165bdd7ec90.trace.xz, _Z6vecAddPdS_S_i, 98, 1, 1, 98, 1024, 1, 1, 1024, 50066,50066\n"
    data = HEADER + b"".join(long_row % n + b"\n\n" for n in range(1, 100))  # 34 bytes a line
    assert pieces(data) == one_line_at_a_time(data)


def test_other_readers_get_one_line_at_a_time():
    """kernelslist and timing.csv are read without `blank_runs`: their line numbers count lines."""
    data = b"kernel-1.traceg\n" + b"\n\n\n" + b"kernel-0.traceg\n"
    assert list(bucket.iter_lines(data, MAX_LINE)) == [
        b"kernel-1.traceg\n",
        b"\n",
        b"\n",
        b"\n",
        b"kernel-0.traceg\n",
    ]
    with pytest.raises(StatsError, match="^line 5: kernel id 0"):
        parse_kernelslist_lines(bucket.iter_lines(data, MAX_LINE))
    timing_csv = b"ctx,kernel_id,start_ns,end_ns,duration_ns\n" + b"\n" * 5 + b"0x1,x,0,1,1\n"
    with pytest.raises(TimingError, match="^timing.csv line 7: "):
        read_timing(bucket.iter_lines(timing_csv, MAX_LINE))


def test_a_blank_line_past_the_limit_is_too_long_at_its_byte():
    data = b"\n\n\n" + b" " * 100 + b"\n\n\n"
    with pytest.raises(
        bucket.LineTooLong, match=r"a line of more than 50 bytes \(CASCADE_MAX_STATS_LINE\) at byte 3$"
    ):
        pieces(data, max_line=50)
    with pytest.raises(bucket.LineTooLong, match=r"at byte 3$"):
        list(bucket.iter_lines(data, 50))


LINE = st.one_of(
    st.sampled_from(BLANK_LINES),
    st.builds(lambda n: b" " * n + b"\n", st.integers(0, 40)),
    st.just(b"ROW"),  # the next kernel id's row
    st.just(b"kernel-1.trace, _Z1av, 1, x\n"),  # an error, wherever it is
)


@settings(
    max_examples=300,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(LINE, max_size=60), st.integers(1, 64), st.booleans())
def test_runs_of_blank_lines_read_as_line_by_line(lines, chunk, last_newline):
    """The same rows, or the same error on the same line, whatever the runs and the chunks."""
    rows = iter(range(1, 100))
    data = HEADER + b"".join(row(next(rows)) if line == b"ROW" else line for line in lines)
    if not last_newline:
        data = data.removesuffix(b"\n")

    def read(lines):
        try:
            return list(parse_stats_lines(lines))
        except StatsError as error:
            return str(error)

    assert read(pieces(data, chunk)) == read(one_line_at_a_time(data))


def one_line_at_a_time(data: bytes) -> list[bytes]:
    *lines, last = data.split(b"\n")
    return [line + b"\n" for line in lines] + ([last] if last else [])


OK = {"status": "ok", "trace_gpu_arch": "sm_90"}


def test_a_pass_reads_a_stats_file_s_blank_lines_in_runs_and_names_the_line_after(db, upload, monkeypatch):
    stats = STATS_HEADER + stats_row(1, "0x1") + "\n" * 1000 + "kernel-2.trace, _Z1av, 1, x\n"
    upload("blank", {"traces/stats_ctx_0x1": stats}, OK)
    read = []
    lines = bucket._lines

    def spied(*args, **kwargs):
        for piece in lines(*args, **kwargs):
            read.append(piece)
            yield piece

    monkeypatch.setattr(bucket, "_lines", spied)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="blank")
    assert trace.state == "failed"
    assert trace.error.startswith("traces/stats_ctx_0x1: line 1003: "), trace.error
    assert b"\n" * 1000 in read, "the run of blank lines came as one piece"
