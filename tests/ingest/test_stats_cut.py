"""Real stats files cut short at every byte of their last two lines.

A killed job, a full disk or an interrupted copy cuts a file anywhere. Whatever the cut, the
complete rows are the uncut file's, the cut row is dropped or kept without totals where its
launch half is whole, no value is ever wrong, and each cut is named in the parser's notes.

The expected rows come from `spec_lines`, a reader written here from the tracer's fprintf
format (`"%s, %s, %d, %d, %d, %d, %d, %d, %d, %d, "` at launch, `"%d,%d\\n"` at exit: split on
`", "`), never from the parser's helpers. The files are the real ones beside the checkout
(tests.helpers.shared_fixture).
"""

import re
from pathlib import Path

import pytest

from ingest.stats import parse_stats_lines
from tests.helpers import shared_fixture

UINT32 = 2**32
TRACE_FILE = re.compile(r"kernel-[0-9]+[^ ,]*\.trace[A-Za-z0-9.]*")


def stats_files() -> list[Path]:
    files = []
    for folder in ("real-tracer", "real-tracer-2"):
        files += sorted(
            p for p in shared_fixture(folder).iterdir() if re.search(r"stats(_ctx_|\.csv)", p.name)
        )
    return files


def unsigned(text: str) -> int:
    value = int(text)
    return value + UINT32 if value < 0 else value


def spec_lines(data: bytes) -> list[tuple[int, int, list[tuple]]]:
    """Each line of launches: (its first byte, the byte after its newline, its launches), each
    launch (fields..., totals or None, the offset within the line just after its `", "`)."""
    lines = []
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end == -1 else end + 1
        text = data[start:end].decode("utf-8").rstrip("\r\n")
        if text and not text.startswith("kernel id"):
            tokens = text.split(", ")
            launches, position, at = [], 0, 0
            while position < len(tokens) and TRACE_FILE.fullmatch(tokens[position]):
                # The name is everything up to 8 numbers that a half's `", "` (or the totals) follows.
                after = next(
                    i
                    for i in range(position + 2, len(tokens) - 7)
                    if all(re.fullmatch(r"-?[0-9]+", t) for t in tokens[i : i + 8])
                    and (i + 8 == len(tokens) - 1 or TRACE_FILE.fullmatch(tokens[i + 8]))
                )
                numbers = [unsigned(t) for t in tokens[after : after + 8]]
                at += len(", ".join(tokens[position : after + 8]).encode()) + 2
                launches.append((tokens[position], ", ".join(tokens[position + 1 : after]), *numbers, at))
                position = after + 8
            last = tokens[-1] if position == len(tokens) - 1 else ""
            totals = tuple(unsigned(t) for t in last.split(",")) if last else None
            lines.append((start, end, [(*launch[:-1], None, launch[-1]) for launch in launches[:-1]]))
            lines[-1][2].append((*launches[-1][:-1], totals, launches[-1][-1]))
        start = end
    return lines


def as_spec(row) -> tuple:
    """A parser's row in the spec reader's shape: trace file, name, the 8 numbers as written
    (grid, #blocks, block, #threads), totals."""
    totals = None if row.total_insts is None else (row.total_insts, row.total_reported_insts)
    return (
        row.trace_file,
        row.name,
        row.grid_x,
        row.grid_y,
        row.grid_z,
        row.blocks,
        row.block_x,
        row.block_y,
        row.block_z,
        row.threads,
        totals,
    )


def parse(data: bytes):
    notes = []
    rows = [as_spec(row) for row in parse_stats_lines(data.splitlines(keepends=True), notes=notes)]
    return rows, notes


@pytest.mark.parametrize("path", stats_files(), ids=lambda path: path.name[-60:])
def test_every_cut_point_of_the_last_two_lines_keeps_the_complete_rows_and_names_the_cut(path):
    data = path.read_bytes()
    lines = spec_lines(data)
    assert lines, "a real file has launches"
    whole_rows, whole_notes = parse(data)
    # The uncut file is read as the spec reads it (a killed run's last launch has no totals).
    assert whole_rows == [launch[:-1] for _, _, launches in lines for launch in launches]
    killed = not data.endswith(b"\n")
    assert bool(whole_notes) == killed
    # Every byte of the last two lines (the header, when the file has one row).
    first_line = data.rfind(b"\n", 0, data.rfind(b"\n", 0, len(data) - 1)) + 1
    cuts = 0
    for cut in range(first_line + 1, len(data)):
        rows, notes = parse(data[:cut])
        complete = [launch[:-1] for start, end, launches in lines if end <= cut for launch in launches]
        assert rows[: len(complete)] == complete, cut
        cut_line = next(((start, launches) for start, end, launches in lines if start < cut < end), None)
        kept = rows[len(complete) :]
        if cut_line is None:  # the cut is at a line's end (or inside the header): nothing is half read
            assert kept == []
        else:
            start, launches = cut_line
            # The whole halves before the cut, without totals: never a part of one, never its totals.
            whole = [launch[:-2] + (None,) for launch in launches if start + launch[-1] <= cut]
            assert kept == whole, (cut, data[start:cut])
        if data[:cut].endswith(b"\n"):
            assert notes == [], cut
        else:
            assert len(notes) == 1, (cut, notes)
            assert first_line <= notes[0].offset <= cut
            cuts += 1
    assert cuts > 0


@pytest.mark.postgres("the fast path writes PostgreSQL's COPY text")
def test_the_fast_path_stores_every_cut_point_as_the_general_reader_does(db):
    """Through ingest.stats_fast_path (PostgreSQL's COPY text) and the rows alike, at every cut."""
    from tests.ingest.support import assert_stored_alike

    name = "qishao-chalmers+accel-sim-framework__util__tracer_nvbit__traces__traces__stats_ctx_0x2356c30"
    data = shared_fixture("real-tracer", name).read_bytes()
    first_line = data.rfind(b"\n", 0, data.rfind(b"\n", 0, len(data) - 1)) + 1
    for cut in range(first_line + 1, len(data) + 1):
        result, _ = assert_stored_alike({"0x2356c30": data[:cut]}, 0)
        assert isinstance(result, list), (cut, result)  # never refused: at most the cut row dropped
