"""Steps and measured times: the two timing formats, matched to launches. Pure: no S3, no database."""

import csv
from pathlib import Path

import pytest

from ingest.timing import TimingError
from ingest.timing.timeline import StepIndex, parse_timeline
from ingest.timing.timing_csv import read_timing
from tests.helpers import shared_fixture
from tests.ingest.support import NSYS_HEADER, lines, nsys_row


def memcpy_row(start, corr, ctx=1):
    return f"{start},1200,{corr},,,,,,,,,,0.786,655.360,Pageable,Device,NVIDIA H100 (0),{ctx},,7,[CUDA memcpy Host-to-Device]\n"


def test_cascade_timing_by_context_and_kernel_id():
    durations = read_timing(
        lines("ctx,kernel_id,start_ns,end_ns,duration_ns\n0x1,1,10,40,30\n0x1,3,50,57,7\n0x2,1,0,5,5\n")
    )
    assert durations.duration_of("0x1", 1, (1, 1, 1), (1, 1, 1)) == 30
    assert durations.duration_of("0x1", 2, (1, 1, 1), (1, 1, 1)) is None
    assert durations.duration_of("0x1", 3, (1, 1, 1), (1, 1, 1)) == 7
    assert durations.duration_of("0x2", 1, (1, 1, 1), (1, 1, 1)) == 5
    assert durations.duration_of("0x9", 1, (1, 1, 1), (1, 1, 1)) is None


def test_nsys_kernels_are_matched_in_correlation_order_skipping_memcpy():
    text = (
        NSYS_HEADER
        + memcpy_row(100, 5)
        + nsys_row(300, 40, 9, (2, 1, 1), (64, 1, 1), "_Z1bv")  # listed out of order: CorrId decides
        + nsys_row(200, 30, 7, (1, 1, 1), (32, 1, 1), "_Z1av")
    )
    durations = read_timing(lines(text))
    assert durations.duration_of("0xaaaa", 1, (1, 1, 1), (32, 1, 1)) == 30
    assert durations.duration_of("0xaaaa", 2, (2, 1, 1), (64, 1, 1)) == 40


def test_nsys_rows_that_do_not_match_the_launches_say_where():
    durations = read_timing(lines(NSYS_HEADER + nsys_row(200, 30, 7, (1, 1, 1), (32, 1, 1), "_Z1av")))
    with pytest.raises(TimingError) as problem:
        durations.duration_of("0xaaaa", 1, (4, 1, 1), (32, 1, 1))
    assert str(problem.value) == (
        "timing.csv (nsys) does not match the stats at context 0xaaaa kernel 1: grid (4, 1, 1) block (32, 1, 1) "
        "in the stats, grid (1, 1, 1) block (32, 1, 1) at CorrId 7"
    )


def test_nsys_with_fewer_kernels_than_the_stats_says_so():
    durations = read_timing(lines(NSYS_HEADER + nsys_row(200, 30, 7, (1, 1, 1), (32, 1, 1), "_Z1av")))
    durations.duration_of("0xaaaa", 1, (1, 1, 1), (32, 1, 1))
    with pytest.raises(TimingError, match="has 1 kernels for context 0xaaaa, the stats more"):
        durations.duration_of("0xaaaa", 2, (1, 1, 1), (32, 1, 1))


def test_an_unknown_timing_header_is_refused_with_both_formats_named():
    with pytest.raises(
        TimingError, match="expected ctx,kernel_id,start_ns,end_ns,duration_ns or the columns of"
    ):
        read_timing(lines("kernel,us\n1,3\n"))


def test_steps_cover_the_launches_of_their_context():
    steps = parse_timeline(
        b'{"steps": ['
        b'{"name": "step 0 (prefill)", "phase": "prefill", "ctx": "0x1", "first_kernel_id": 1, "last_kernel_id": 141},'
        b'{"name": "step 2 (decode)", "phase": "decode", "ctx": "0x1", "first_kernel_id": 142, "last_kernel_id": 342},'
        b'{"name": "step 10 (decode)", "phase": "decode", "ctx": "0x2", "first_kernel_id": 1, "last_kernel_id": 201}'
        b"]}"
    )
    index = StepIndex(steps)
    assert [index.step_of("0x1", k) for k in (1, 141, 142, 342, 343)] == [0, 0, 1, 1, None]
    assert index.step_of("0x2", 5) == 2
    assert index.step_of("0x3", 5) is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[]", 'timeline.json: expected an object with a "steps" list'),
        (
            b'{"steps": [{"first_kernel_id": 5, "last_kernel_id": 2}]}',
            "timeline.json: step 0 needs first_kernel_id",
        ),
        (b'{"steps": [1]}', "timeline.json: step 0 is not an object"),
        (b"{", "timeline.json is not valid JSON"),
    ],
)
def test_a_timeline_that_cannot_be_used_says_why(raw, message):
    with pytest.raises(TimingError) as problem:
        parse_timeline(raw)
    assert str(problem.value).startswith(message)


def test_a_graph_replay_s_kernels_share_a_correlation_id_and_keep_their_order():
    # nsys --cuda-graph-trace=node: the replayed kernels all carry the cuGraphLaunch's CorrId.
    text = (
        NSYS_HEADER
        + nsys_row(100, 11, 5, (1, 1, 1), (32, 1, 1), "_Z4gemmv")
        + nsys_row(200, 22, 40, (9, 1, 1), (64, 1, 1), "_Z7softmaxv")
        + nsys_row(300, 33, 40, (2, 1, 1), (64, 1, 1), "_Z4copyv")
        + nsys_row(400, 44, 40, (5, 1, 1), (32, 1, 1), "_Z3addv")
    )
    durations = read_timing(lines(text))
    shapes = [
        ((1, 1, 1), (32, 1, 1)),
        ((9, 1, 1), (64, 1, 1)),
        ((2, 1, 1), (64, 1, 1)),
        ((5, 1, 1), (32, 1, 1)),
    ]
    assert [durations.duration_of("0x1", n, *shape) for n, shape in enumerate(shapes, start=1)] == [
        11,
        22,
        33,
        44,
    ]


def test_kernel_id_0_or_below_has_no_cascade_duration_never_another_launch_s():
    """Durations are held by kernel id in an array: id 0 must not read the last one (index -1)."""
    durations = read_timing(
        lines("ctx,kernel_id,start_ns,end_ns,duration_ns\n0x1,1,0,30,30\n0x1,2,0,70,70\n")
    )
    assert [durations.duration_of("0x1", kernel_id, None, None) for kernel_id in (0, -1, 1, 2, 3)] == [
        None,
        None,
        30,
        70,
        None,
    ]


# --- Nsight exports with kernels left over -----------------------------------

BEEHIVE = "beehive-lab+TornadoVM__docs__perf__cuda-streams__chains_after_cuda_gpu_trace.csv"
ATOPOS = "Atopos0313+cuda_learning__doc__day09__results__day09_cuda_gpu_trace.csv"


def real_kernels(path: Path) -> list[dict]:
    """The export's kernel rows (a grid), in CorrId order: read with the csv module alone."""
    with path.open(newline="") as file:
        kernels = [row for row in csv.DictReader(file) if row["GrdX"].strip()]
    return sorted(kernels, key=lambda row: int(row["CorrId"]))


def shape(row: dict) -> tuple[tuple, tuple]:
    return tuple(int(row[f"Grd{a}"]) for a in "XYZ"), tuple(int(row[f"Blk{a}"]) for a in "XYZ")


def test_a_real_export_with_as_many_kernels_as_launches_matches_whole():
    path = shared_fixture("real-nsys", ATOPOS)
    kernels = real_kernels(path)
    durations = read_timing(path.read_bytes().splitlines(keepends=True))
    measured = [durations.duration_of("0xa", n, *shape(row)) for n, row in enumerate(kernels, start=1)]
    assert measured == [int(row["Duration (ns)"]) for row in kernels]
    assert durations.unmatched() is None


def test_a_real_export_with_more_kernels_than_launches_is_not_used_and_says_where():
    """The trace launched 9 kernels; the export's context 1 holds 12: the timing is dropped, naming
    how many were left, after which launch, in which Nsight context."""
    path = shared_fixture("real-nsys", BEEHIVE)
    kernels = real_kernels(path)
    assert len(kernels) == 12 and {row["Ctx"] for row in kernels} == {"1"}
    durations = read_timing(path.read_bytes().splitlines(keepends=True))
    measured = [durations.duration_of("0xa", n, *shape(row)) for n, row in enumerate(kernels[:9], start=1)]
    assert measured == [int(row["Duration (ns)"]) for row in kernels[:9]]
    assert str(durations.unmatched()) == (
        "timing.csv (nsys) has 3 more kernels than the trace has launches, so its timing is not used: "
        f"3 in Nsight context '1' after the trace's context 0xa kernel 9 (the first at CorrId {kernels[9]['CorrId']})"
    )


def test_an_nsight_context_no_trace_context_took_is_left_over_too():
    text = (
        NSYS_HEADER
        + nsys_row(100, 11, 5, (1, 1, 1), (32, 1, 1), "_Z1av", ctx=1)
        + nsys_row(200, 22, 6, (7, 1, 1), (64, 1, 1), "_Z1bv", ctx=2)
        + nsys_row(300, 33, 8, (7, 1, 1), (64, 1, 1), "_Z1bv", ctx=2)
    )
    durations = read_timing(lines(text))
    assert durations.duration_of("0xa", 1, (1, 1, 1), (32, 1, 1)) == 11
    assert str(durations.unmatched()) == (
        "timing.csv (nsys) has 2 more kernels than the trace has launches, so its timing is not used: "
        "2 in Nsight context '2', which no context of the trace took"
    )


def test_cascade_timing_rows_for_no_launch_are_not_another_s():
    durations = read_timing(
        lines("ctx,kernel_id,start_ns,end_ns,duration_ns\n0x1,1,0,30,30\n0x1,9,0,70,70\n")
    )
    assert durations.duration_of("0x1", 1, None, None) == 30
    assert durations.unmatched() is None
