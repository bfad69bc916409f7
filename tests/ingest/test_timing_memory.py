"""Timing and steps in flat memory (issue 11): compact holders that read exactly as before."""

import json
import tracemalloc

from ingest.timing import Step, StepIndex, parse_timeline, read_timing
from tests.ingest.test_timing import NSYS_HEADER, lines, nsys_row


def timeline(steps: int) -> bytes:
    return json.dumps(
        {
            "model": "facebook/opt-125m",
            "steps": [
                {
                    "step": n,
                    "ctx": "0x796d2265b1f0",
                    "first_kernel_id": 200 * n + 1,
                    "start_ns": 10**9 + n,
                    "last_kernel_id": 200 * n + 200,
                    "end_ns": 10**9 + n + 5,
                    "kernels": 200,
                    "captured_kernels": 180,
                    "name": f"step {n} (decode)",
                    "phase": "decode",
                }
                for n in range(steps)
            ],
        },
        indent=2,
    ).encode()


def test_a_timeline_of_many_steps_is_read_without_a_dict_per_step():
    raw = timeline(20_000)
    tracemalloc.start()
    try:
        steps = parse_timeline(raw)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(steps) == 20_000
    assert steps[7] == Step(
        7, "step 7 (decode)", "decode", "0x796d2265b1f0", 1401, 1600, 10**9 + 7, 10**9 + 12
    )
    assert steps[7].phase is steps[8].phase and steps[7].ctx is steps[8].ctx
    # With json.loads' dicts: 9.3 MB held, 17.5 MB at the peak (12.3 of them beside the text).
    assert held < 7 * 2**20, held
    assert peak < 8 * 2**20 + len(raw), peak
    assert StepIndex(steps).step_of("0x796d2265b1f0", 1601) == 8


def test_a_step_named_null_or_without_a_name_is_named_by_its_number():
    steps = parse_timeline(
        b'{"steps": [{"name": null, "step": 4, "first_kernel_id": 1, "last_kernel_id": 2},'
        b' {"first_kernel_id": 3, "last_kernel_id": 4}, {"name": "a", "name": "b", "first_kernel_id": 5,'
        b' "last_kernel_id": 6, "phase": "", "ctx": ""}]}'
    )
    assert [(step.name, step.phase, step.ctx) for step in steps] == [
        ("step 4", None, None),
        ("step 1", None, None),
        ("b", None, None),
    ]


def test_cascade_durations_of_4_3_seconds_and_more_are_kept_whole():
    durations = read_timing(
        lines(
            "ctx,kernel_id,start_ns,end_ns,duration_ns\n"
            "0x1,1,0,1,4294967295\n0x1,2,0,1,4294967294\n0x1,4,0,1,99999999999\n0x1,4,0,1,0\n0x1,5,0,1,2\n"
            "0x1,5,0,1,10000000000000\n"
        )
    )
    got = [durations.duration_of("0x1", n, (1, 1, 1), (1, 1, 1)) for n in range(1, 7)]
    assert got == [4294967295, 4294967294, None, 0, 10000000000000, None]


def test_nsys_kernels_in_order_or_not_are_matched_in_correlation_order():
    kernels = [(100 + n, 10 + n, corr, (n % 3 + 1, 1, 1)) for n, corr in enumerate([5, 3, 3, 9, 1, 3])]
    text = NSYS_HEADER + "".join(nsys_row(s, d, c, g, (32, 1, 1), "_Z1av") for s, d, c, g in kernels)
    durations = read_timing(lines(text))
    ordered = sorted(kernels, key=lambda kernel: kernel[2])  # stable: file order among equal ids
    assert [
        durations.duration_of("0xa", n, grid, (32, 1, 1))
        for n, (_, _, _, grid) in enumerate(ordered, start=1)
    ] == [duration for _, duration, _, _ in ordered]
    in_order = NSYS_HEADER + "".join(nsys_row(s, d, c, g, (32, 1, 1), "_Z1av") for s, d, c, g in ordered)
    durations = read_timing(lines(in_order))
    assert durations.duration_of("0xa", 1, ordered[0][3], (32, 1, 1)) == ordered[0][1]
