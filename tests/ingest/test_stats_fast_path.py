"""LaunchText, the fast path that writes a stats file's common lines as COPY text, stores what the
general reader stores: the same launches, or the same error, for what the tracer writes and for
damaged files alike. The inputs are the stats parser's property strategies (rendered by the
tracer's own two fprintf calls, then damaged), and the real tracer files
(shared_fixture).

Each case is stored twice through KernelWriter, once with every line read into a KernelRow
(ingest.parse.kernel_rows without a writer) and once with LaunchText taking the lines it can,
and read back through the API's view of a launch (`Kernel.objects`). PostgreSQL only: COPY text
is its format.
"""

import csv

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ingest.stats_fast_path import LaunchText
from ingest.timing.timeline import Step, StepIndex, parse_timeline
from tests.helpers import shared_fixture, stats_row
from tests.ingest.support import (
    EXAMPLES,
    LONG_GRID,
    LONG_KERNEL_ID,
    LONG_TOTALS,
    PROPERTY,
    SOUP,
    assert_stored_alike,
    long_numbers,
    mutated_files,
    stats_files,
)
from traces import kernel_store

pytestmark = [pytest.mark.django_db, pytest.mark.postgres("the fast path writes PostgreSQL's COPY text")]
# A third of the parser's examples: each one is stored twice, on PostgreSQL.
CASES = settings(
    PROPERTY,
    max_examples=max(EXAMPLES // 3, 1),
    suppress_health_check=[*PROPERTY.suppress_health_check, HealthCheck.function_scoped_fixture],
)
DURATION = st.one_of(st.integers(0, 10**6), st.integers(2**32 - 2, 2**40))


@CASES
@given(st.lists(stats_files(), min_size=1, max_size=3), st.data())
def test_what_the_tracer_writes_is_stored_alike(files, data):
    """And as the tracer wrote it: the launches the strategy drew, whichever path read them."""
    steps = None
    if data.draw(st.booleans()):
        cuts = sorted(data.draw(st.lists(st.integers(1, 60), max_size=4, unique=True)))
        firsts, lasts = [1, *(cut + 1 for cut in cuts)], [*cuts, 10**6]
        steps = [
            Step(i, f"step {i}", None, None, *span, None, None)
            for i, span in enumerate(zip(firsts, lasts, strict=True))
        ]
    timing_csv, timed = None, []
    launches = [(i, row.kernel_id) for i, file in enumerate(files) for row in file.expected]
    if launches and data.draw(st.booleans()):  # Cascade's timing.csv: some launches, some over 2^32 ns
        timed = [
            (*launch, duration)
            for launch, duration in data.draw(st.lists(st.tuples(st.sampled_from(launches), DURATION)))
        ]
        timing_csv = "ctx,kernel_id,start_ns,end_ns,duration_ns\n" + "".join(
            f"0x{1000 + i:x},{kernel_id},0,{duration},{duration}\n" for i, kernel_id, duration in timed
        )
    result, _ = assert_stored_alike([file.data for file in files], files[0].extra_columns, steps, timing_csv)
    if isinstance(result, list):  # a launch's duration: its (ctx, kernel id)'s last row in timing.csv
        measured = {(f"0x{1000 + i:x}", kernel_id): duration for i, kernel_id, duration in timed}
        assert [launch[-1] for launch in result] == [
            measured.get((launch[0], launch[2])) for launch in result
        ]
    if all(file.variant == "standard" and file.extra_columns == 0 for file in files):
        assert [
            (ctx, kernel_id, name, totals) for ctx, _, kernel_id, name, *_, totals, _, _, _, _ in result
        ] == [
            (f"0x{1000 + i:x}", row.kernel_id, row.name, row.total_reported_insts)
            for i, file in enumerate(files)
            for row in file.expected
        ]


@CASES
@given(st.one_of(mutated_files(), SOUP), st.integers(0, 3))
@example(
    b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\nkernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n",
    0,
)
@example(b"kernel-1.trace, _Z1av, 1, 1, 1, -1, 32, 1, 1, 32, -5,4294967295\n", 0)
@example(b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 4294967296,1\n", 0)
@example(b"kernel-01.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n", 0)
@example(b"kernel-1.trace, kernel-2.trace, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n", 0)
@example(b"kernel-1_3.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n", 0)
@example(
    b"kernel-1.odd, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\nkernel-2.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n",
    0,
)
def test_damaged_files_are_stored_or_refused_alike(data: bytes, extra_columns: int):
    assert_stored_alike([data], extra_columns)


@CASES
@given(long_numbers(), st.integers(0, 3))
@example(LONG_TOTALS, 0)
@example(b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5," + b"9" * 4301 + b"\n", 0)
@example(b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, " + b"0" * 5000 + b"1,5\n", 0)
@example(LONG_GRID, 0)
@example(LONG_KERNEL_ID, 0)
@example(b"kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n" + LONG_KERNEL_ID.replace(b"-9", b"-29"), 0)
@example(b"kernel-1_2147483648.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n", 0)  # no CUDA device
def test_very_long_numbers_are_refused_alike(data: bytes, extra_columns: int):
    """Totals, dimensions and kernel ids of thousands of digits (past Python's int() limit of
    4,300): the same StatsError whichever path reads the line, never a bare ValueError."""
    result, _ = assert_stored_alike([data], extra_columns)
    if data in (LONG_TOTALS, LONG_GRID, LONG_KERNEL_ID):
        assert isinstance(result, str) and result.startswith("TraceInputError: stats_ctx_0x3e8: line 1: ")


@pytest.mark.parametrize(
    "data",
    [
        b"kernel-0.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n",
        b"kernel-0.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n",
        b"kernel-0.trace, void f<1, 2>(int), 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n",
    ],
    ids=["common-line", "graph-captured-half", "demangled-name"],
)
def test_a_launch_with_kernel_id_0_is_refused_alike_and_takes_no_duration(data: bytes):
    """Id 0 would read the last timing.csv row of its context (a negative index): the tracer
    numbers kernels from 1, so both paths refuse it, with the parser's message."""
    timing_csv = "ctx,kernel_id,start_ns,end_ns,duration_ns\n0x3e8,1,0,30,30\n0x3e8,2,0,70,70\n"
    result, _ = assert_stored_alike([data], 0, timing_csv=timing_csv)
    assert result == (
        "TraceInputError: stats_ctx_0x3e8: line 1: kernel id 0 in 'kernel-0.trace' is 0: "
        "the tracer numbers each context's kernels from 1"
    )


@pytest.mark.parametrize(
    "path",
    [
        ("accelsim-vecadd-v5", "stats_ctx_0x6165bdd7ec90"),
        ("real-tracer", "MrTang-Yuhan+Accel-Sim-Flashinfer__test-traces__flashinfer-gemm__traces__stats.csv"),
        ("real-tracer", "MrTang-Yuhan+Accel-Sim-Flashinfer__test-traces__nn-onestep__traces__stats.csv"),
        (
            "real-tracer",
            "liuweibupt+accel-sim-framework__modal__artifacts__fp16-512x512x512__traces__stats_ctx_0x56201b8d3c00",
        ),
        (
            "real-tracer",
            "qishao-chalmers+accel-sim-framework__util__tracer_nvbit__traces__traces__stats_ctx_0x2356c30",
        ),
    ],
    ids=lambda parts: parts[1][-40:],
)
def test_real_tracer_files_are_stored_alike_and_taken_by_the_fast_path(path: tuple[str, str]):
    result, taken = assert_stored_alike([shared_fixture(*path).read_bytes()], 0)
    assert isinstance(result, list) and result
    assert taken > 0, "LaunchText took none of the real file's lines"


def test_a_generated_llm_run_is_taken_whole_by_the_fast_path(tmp_path):
    """Prefill and decode steps with CUDA-graph launches run together: all common lines, their
    steps and measured times those of the run's timeline.json and timing.csv."""
    from tools import generator

    spec = generator.RunSpec(kernels=3000, contexts=2, seed=5)
    generator.write_run(tmp_path / "run", spec, run_id="run", key_prefix="")
    traces = tmp_path / "run" / "traces"
    files = {
        path.name.removeprefix("stats_ctx_"): path.read_bytes() for path in sorted(traces.glob("stats_ctx_*"))
    }
    steps = parse_timeline((tmp_path / "run" / "timeline.json").read_bytes())
    timing_csv = (tmp_path / "run" / "timing.csv").read_text()
    result, taken = assert_stored_alike(files, 0, steps, timing_csv)
    assert taken == len(result) == 3000
    measured = {
        (ctx, int(kernel_id)): int(duration)
        for ctx, kernel_id, _, _, duration in csv.reader(timing_csv.splitlines()[1:])
    }
    assert [launch[-1] for launch in result] == [measured[launch[0], launch[2]] for launch in result]
    assert {launch[-2] for launch in result} == set(range(len(steps)))


class OneContextWriter:
    """What LaunchText asks of its KernelWriter, without a database: one context, its files
    named as the tracer names them."""

    copies = True
    launch_tail = staticmethod(kernel_store.KernelWriter.launch_tail)

    def context_of(self, ctx, device, trace_file, kernel_id):
        return 0, trace_file.removeprefix(f"kernel-{kernel_id}")

    def finish_shapes(self, context, shapes):
        for shape in shapes:
            shape.text = b"1\t0\t1\t"


def test_the_tails_kept_are_the_current_steps_whatever_the_steps():
    # 20,000 steps of 3 launches, every other launch traced: a tail each (traced or not) of the
    # step at hand, where every step's were kept.
    steps = [Step(n, f"step {n}", None, "0x1", 3 * n + 1, 3 * n + 3, None, None) for n in range(20_000)]
    text = LaunchText("0x1", OneContextWriter(), set(range(1, 60_001, 2)), StepIndex(steps).step_of)
    last = 0
    for kernel_id in range(1, 60_001):
        last = text.line(stats_row(kernel_id, "0x1").encode(), last)
        assert last == kernel_id
        assert len(text.tails) <= 2
    block = text.take()
    assert block.launches == 60_000
    rows = block.text.split(b"\n")
    assert rows[0].endswith(b"\tt\t0\t\\N\t\\N\t\\N") and rows[4].endswith(b"\tt\t1\t\\N\t\\N\t\\N")
    assert rows[59_998].endswith(b"\tt\t19999\t\\N\t\\N\t\\N")
    assert rows[59_999].endswith(b"\tf\t19999\t\\N\t\\N\t\\N")
