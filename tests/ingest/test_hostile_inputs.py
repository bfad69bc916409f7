"""Inputs the parsers let through but the database cannot hold: each ends in a state a person can read.

A timeline.json of more steps than the step column holds, a NUL
character or an unpaired surrogate in metadata.json or a step's name, a kernelslist id of
thousands of digits, a launch with kernel id 0. Each upload goes through the poll pass into
PostgreSQL, as an operator would meet it: a bad metadata.json or stats file fails its trace with
a message that says why; a bad timeline.json or timing.csv leaves the trace ready, its
`timing_error` saying why.
"""

import json

import orjson
import pytest

from ingest import passes
from ingest.timing.timeline import MAX_STEPS
from tests.helpers import STATS_HEADER, VECADD_CTX, shared_fixture, stats_row
from tools.tracer_format import stats_launch_half, stats_totals
from traces.models import Kernel, Step, Trace, TraceState

pytestmark = pytest.mark.postgres("the limits are PostgreSQL's column types (smallint, text without NUL)")

OK = {"status": "ok", "trace_gpu_arch": "sm_90"}
SMALLINT_MAX = 2**15 - 1  # PostgreSQL's smallint: Step.index and Kernel.step
# A real `nsys stats --report cuda_gpu_trace` export: 12 kernels of grid 32, block 1024 (SOURCES.md).
BEEHIVE = "beehive-lab+TornadoVM__docs__perf__cuda-streams__chains_after_cuda_gpu_trace.csv"


def one_launch(kernel_id: int) -> dict:
    return {f"traces/stats_ctx_{VECADD_CTX}": STATS_HEADER + stats_row(kernel_id)}


def timeline(count: int) -> bytes:
    """`count` steps of one kernel each: step i is kernel id i + 1."""
    return orjson.dumps(
        {
            "steps": [
                {"ctx": VECADD_CTX, "first_kernel_id": i + 1, "last_kernel_id": i + 1} for i in range(count)
            ]
        }
    )


# --- Steps: as many as the column holds, and no more ---------------------------------


def test_the_step_limit_is_what_the_step_columns_hold():
    assert MAX_STEPS == SMALLINT_MAX + 1  # indexes 0 .. 32,767


def test_a_timeline_of_as_many_steps_as_the_column_holds_is_stored(db, upload):
    upload("steps", {**one_launch(MAX_STEPS), "timeline.json": timeline(MAX_STEPS)}, OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="steps")
    assert (trace.state, trace.timing_error, trace.has_step_timeline) == (TraceState.READY, None, True)
    assert Step.objects.filter(trace=trace).count() == MAX_STEPS
    assert Kernel.objects.get(trace=trace.key).step == SMALLINT_MAX


def test_a_timeline_of_more_steps_than_the_column_holds_is_not_used_and_says_why(db, upload):
    upload("steps", {**one_launch(MAX_STEPS + 1), "timeline.json": timeline(MAX_STEPS + 1)}, OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="steps")
    assert (trace.state, trace.has_step_timeline, trace.kernel_count) == (TraceState.READY, False, 1)
    assert trace.timing_error == (
        "timeline.json: 32769 steps, more than 32768, the most a trace holds "
        "(a step's index is a 16-bit integer in the database)"
    )
    assert Kernel.objects.get(trace=trace.key).step is None


# --- Characters PostgreSQL cannot store ----------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "error"),
    [
        (
            b'{"status": "ok", "model": "opt-125m\\u0000"}',
            "metadata.json: 'model' holds a NUL character (\\u0000), which the database cannot store",
        ),
        (
            b'{"status": "ok", "layers": ["decode", "\\ud800"]}',
            "metadata.json: 'layers'[1] holds an unpaired surrogate (\\ud800), which is not a character, "
            "which the database cannot store",
        ),
    ],
    ids=["nul-model", "surrogate-layer"],
)
def test_metadata_the_database_cannot_store_fails_its_trace_saying_which_field(
    db, upload, vecadd_files, metadata, error
):
    upload("good", vecadd_files, OK)
    upload("bad", vecadd_files, metadata)
    passes.poll_bucket()
    bad = Trace.objects.get(pk="bad")
    assert (bad.state, bad.error) == (TraceState.FAILED, error)
    assert (bad.metadata_json, bad.layers, bad.model) == (None, [], None)
    assert Trace.objects.get(pk="good").state == TraceState.READY


@pytest.mark.parametrize(
    ("step", "error"),
    [
        ({"name": "decode\u0000"}, "timeline.json: step 1's name holds a NUL character (\\u0000)"),
        ({"phase": "\ud800"}, "timeline.json: step 1's phase holds an unpaired surrogate (\\ud800)"),
        ({"step": "7\u0000"}, "timeline.json: step 1's name holds a NUL character (\\u0000)"),
        ({"ctx": "0x" + "a" * 63}, "timeline.json: step 1's ctx is 65 characters long, more than 64"),
        ({"last_kernel_id": 2**63}, "timeline.json: step 1 needs first_kernel_id <= last_kernel_id"),
        ({"start_ns": 2**63}, "timeline.json: step 1's start_ns does not fit in 64 bits"),
    ],
    ids=["nul-name", "surrogate-phase", "nul-step-number", "long-ctx", "huge-kernel-id", "huge-start"],
)
def test_a_step_the_database_cannot_store_leaves_the_trace_ready_without_steps(db, upload, step, error):
    first = {"ctx": VECADD_CTX, "first_kernel_id": 1, "last_kernel_id": 1, "name": "prefill"}
    second = {"ctx": VECADD_CTX, "first_kernel_id": 2, "last_kernel_id": 2**62, **step}
    raw = json.dumps({"steps": [first, second]}).encode()  # ASCII: `\\u0000`, `\\ud800` as JSON spells them
    files = {f"traces/stats_ctx_{VECADD_CTX}": STATS_HEADER + stats_row(1) + stats_row(2)}
    upload("run", {**files, "timeline.json": raw}, OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.kernel_count, trace.has_step_timeline) == (TraceState.READY, 2, False)
    assert trace.timing_error.startswith(error), trace.timing_error
    assert not Step.objects.filter(trace=trace).exists()


def test_a_duration_the_column_cannot_hold_leaves_the_trace_ready_without_timing(db, upload):
    timing_csv = f"ctx,kernel_id,start_ns,end_ns,duration_ns\n{VECADD_CTX},1,0,1,{2**63}\n"
    upload("run", {**one_launch(1), "timing.csv": timing_csv}, OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.kernel_count, trace.has_real_timing) == (TraceState.READY, 1, False)
    assert trace.timing_error == (
        "timing.csv line 2: kernel id 1 or duration 9223372036854775808 out of range "
        "(kernel ids 1 to 50000000, durations 0 to 2^63 - 1 ns)"
    )


# --- Kernel ids the tracer never writes --------------------------------------


def test_a_launch_with_kernel_id_0_fails_its_trace_and_takes_no_duration(db, upload):
    """It took the duration of its context's last timing.csv row (a negative index)."""
    stats = STATS_HEADER + stats_row(0) + stats_row(1)
    timing_csv = (
        f"ctx,kernel_id,start_ns,end_ns,duration_ns\n{VECADD_CTX},1,0,30,30\n{VECADD_CTX},2,0,70,70\n"
    )
    upload("run", {f"traces/stats_ctx_{VECADD_CTX}": stats, "timing.csv": timing_csv}, OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.kernel_count) == (TraceState.FAILED, 0)
    assert trace.error == (
        f"traces/stats_ctx_{VECADD_CTX}: line 2: kernel id 0 in 'kernel-0-ctx_{VECADD_CTX}.trace.xz' is 0: "
        "the tracer numbers each context's kernels from 1"
    )


def test_a_kernelslist_id_of_5000_digits_fails_its_trace(db, upload, vecadd_files):
    kernelslist = b"MemcpyHtoD,0x00007f0000000000,800\nkernel-" + b"9" * 5000 + b"-ctx_0x1.trace.xz\n"
    upload("run", {**vecadd_files, f"traces/kernelslist_ctx_{VECADD_CTX}": kernelslist}, OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="run")
    assert trace.state == TraceState.FAILED
    assert trace.error.startswith(
        f"traces/kernelslist_ctx_{VECADD_CTX}: line 2: kernel id 99999999999999999999... (5000 digits) in "
    ), trace.error


def nsys_shaped_launches(count: int) -> str:
    """`count` launches of the export's one shape (grid 32, block 1024)."""
    return STATS_HEADER + "".join(
        stats_launch_half(f"kernel-{n}-ctx_{VECADD_CTX}.trace.xz", "scale", (32, 1, 1), (1024, 1, 1))
        + stats_totals(7, 7)
        for n in range(1, count + 1)
    )


def test_an_nsight_export_with_more_kernels_than_launches_is_not_used_and_says_why(db, upload):
    upload(
        "run",
        {
            f"traces/stats_ctx_{VECADD_CTX}": nsys_shaped_launches(9),
            "timing.csv": shared_fixture("real-nsys", BEEHIVE).read_bytes(),
        },
        OK,
    )
    upload(
        "whole",
        {
            f"traces/stats_ctx_{VECADD_CTX}": nsys_shaped_launches(12),
            "timing.csv": shared_fixture("real-nsys", BEEHIVE).read_bytes(),
        },
        OK,
    )
    passes.poll_bucket()
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.kernel_count, trace.has_real_timing) == (TraceState.READY, 9, False)
    assert trace.timing_error == (
        "timing.csv (nsys) has 3 more kernels than the trace has launches, so its timing is not used: "
        f"3 in Nsight context '1' after the trace's context {VECADD_CTX} kernel 9 (the first at CorrId 269)"
    )
    assert not Kernel.objects.filter(trace=trace.key, duration_ns__isnull=False).exists()
    whole = Trace.objects.get(pk="whole")
    assert (whole.has_real_timing, whole.timing_error) == (True, None)
