"""Timing and steps in flat memory: compact holders that read exactly as before."""

import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.timing import TimingError
from ingest.timing.timeline import MAX_STEPS, Step, StepIndex, Steps, is_int, parse_timeline
from ingest.timing.timing_csv import read_timing
from tests.ingest.support import NSYS_HEADER, lines, nsys_row


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
    # json.loads and a Step per step: 9.3 MB held, 17.5 MB at the peak (the text is 5.8 MB).
    assert held < 3 * 2**20, held
    assert peak < len(raw) + 3 * 2**20, peak
    assert StepIndex(steps).step_of("0x796d2265b1f0", 1601) == 8


def test_a_timeline_streamed_in_lines_is_never_whole_in_memory():
    raw = timeline(20_000)
    lines = raw.splitlines(keepends=True)
    tracemalloc.start()
    try:
        steps = parse_timeline(iter(lines))
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert list(steps) == list(parse_timeline(raw))
    assert held < 3 * 2**20, held
    assert peak < 4 * 2**20, peak  # the text is 5.8 MB


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


# --- Read one value at a time, as json.loads and the checks after it would --------------------------


def reference_steps(raw: bytes) -> list[Step] | str:
    """timeline.json read whole with json.loads, then checked: what parse_timeline must agree with."""
    try:
        timeline = json.loads(raw)
    except (ValueError, RecursionError):
        return "not valid JSON"
    steps = timeline.get("steps") if isinstance(timeline, dict) else None
    if not isinstance(steps, list):
        return 'expected an object with a "steps" list'
    if len(steps) > MAX_STEPS:
        return f"{len(steps)} steps, more than {MAX_STEPS}, the most a trace holds (a step's index is a 16-bit integer in the database)"
    parsed = []
    for index, step in enumerate(steps):
        if not isinstance(step, dict):
            return f"step {index} is not an object"
        first, last = step.get("first_kernel_id"), step.get("last_kernel_id")
        if not (is_int(first) and is_int(last) and 0 < first <= last < 2**63):
            return f"step {index} needs first_kernel_id <= last_kernel_id, positive integers of 64 bits"
        name, phase, ctx = step.get("name"), step.get("phase"), step.get("ctx")
        for field, value in (("name", name), ("phase", phase), ("ctx", ctx)):
            if value is not None and not isinstance(value, str):
                return f"step {index}'s {field} must be a string"
        if name is None:
            number = step.get("step", index)
            name = f"step {index if isinstance(number, dict) else number}"
        # What Step's columns cannot hold: NUL and surrogates anywhere, a ctx past 64 characters.
        for field, value in (("name", name), ("phase", phase), ("ctx", ctx)):
            bad = next((c for c in value or "" if c == "\x00" or 0xD800 <= ord(c) <= 0xDFFF), None)
            if bad is not None:
                return f"step {index}'s {field} holds {'a NUL character' if bad == chr(0) else 'an unpaired surrogate'}"
        if ctx is not None and len(ctx) > 64:
            return f"step {index}'s ctx is {len(ctx)} characters long, more than 64"
        start, end = step.get("start_ns"), step.get("end_ns")
        for field, value in (("start_ns", start), ("end_ns", end)):
            if is_int(value) and not -(2**63) <= value < 2**63:
                return f"step {index}'s {field} does not fit in 64 bits"
        parsed.append(
            Step(
                index,
                name[:200],
                phase[:32] if phase else None,
                ctx or None,
                first,
                last,
                start if is_int(start) else None,
                end if is_int(end) else None,
            )
        )
    return parsed


def read(raw: bytes, chunk: int | None = None) -> list[Step] | str:
    """What parse_timeline makes of `raw`, given whole or in chunks of `chunk` bytes."""
    given = raw if chunk is None else (raw[at : at + chunk] for at in range(0, len(raw), chunk))
    try:
        return list(parse_timeline(given))
    except TimingError as problem:
        message = str(problem).removeprefix("timeline.json: ")
        if "s holds a" in message or "characters long" in message:  # the reference says less
            message = message.split(" (", 1)[0]
        return "not valid JSON" if message.startswith("timeline.json is not valid JSON") else message


SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["decode", "prefill", "0x1", "", "step", "é\\u2028", "a\x00", "\ud800", "0x" + "f" * 63]),
)
FIELD = st.sampled_from(
    [
        "first_kernel_id",
        "last_kernel_id",
        "name",
        "step",
        "phase",
        "ctx",
        "start_ns",
        "end_ns",
        "kernels",
        "x",
    ]
)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(FIELD, inner, max_size=4)),
    max_leaves=8,
)
STEP = st.one_of(
    st.fixed_dictionaries(
        {"first_kernel_id": st.integers(-1, 2**64), "last_kernel_id": st.integers(-1, 2**64)},
        optional={
            "name": VALUE,
            "step": VALUE,
            "phase": VALUE,
            "ctx": VALUE,
            "start_ns": VALUE,
            "end_ns": VALUE,
        },
    ),
    VALUE,
)
DOCUMENT = st.one_of(
    st.dictionaries(
        st.sampled_from(["steps", "model", "clock"]), st.one_of(st.lists(STEP, max_size=6), VALUE)
    ),
    VALUE,
)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(
    DOCUMENT, st.sampled_from([None, 0, 2]), st.integers(0, 40), st.booleans(), st.sampled_from([1, 3, 64])
)
def test_a_timeline_read_one_value_at_a_time_reads_as_json_loads_would(
    document, indent, cut, duplicate, chunk
):
    raw = json.dumps(document, indent=indent).encode()
    if duplicate and raw.startswith(b"{") and raw != b"{}":
        raw = b'{"steps": [{"first_kernel_id": 1, "last_kernel_id": 1}], ' + raw[1:]
    if cut:
        raw = raw[: max(len(raw) - cut, 0)] if cut % 2 else raw + b" " * cut
    assert read(raw) == reference_steps(raw) == read(raw, chunk)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"  ",
        b"{",
        b"{}",
        b'{"steps": []}',
        b'{"steps": [] ,}',
        b'{"steps": [1,]}',
        b'{"steps": [}',
        b"[] x",
        b'{"steps": null}',
        b'{"steps": {}}',
        b"{1: 2}",
        b'{"steps" []}',
        b'\xef\xbb\xbf{"steps": []}',
        '{"steps": []}'.encode("utf-16"),
    ],
)
def test_edge_documents_read_as_json_loads_would(raw):
    assert read(raw) == reference_steps(raw) == read(raw, 1) == read(raw, 2)


def test_too_many_steps_are_counted_not_kept(monkeypatch):
    monkeypatch.setattr("ingest.timing.timeline.MAX_STEPS", 3)
    monkeypatch.setattr("tests.ingest.test_timing_memory.MAX_STEPS", 3)
    raw = json.dumps({"steps": [{"first_kernel_id": 1, "last_kernel_id": 1}] * 5 + ["x"]}).encode()
    assert read(raw) == reference_steps(raw)
    assert read(raw).startswith("6 steps, more than 3, the most a trace holds")


def test_timing_csv_is_split_into_lines_a_short_chunk_at_a_time():
    from ingest import bucket

    # Cascade's timing.csv: some 30 bytes a line, the shortest lines a pass reads.
    rows = b"".join(b"0x7f3a5c000000,%d,%d,%d,%d\n" % (n, 10 * n, 10 * n + 7, 7) for n in range(1, 200_001))
    tracemalloc.start()
    try:
        count = sum(1 for _ in bucket.iter_lines(rows, 1024))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 200_000
    # A chunk's lines are in memory together, some 80 bytes each for 40 of text: twice the
    # chunk's bytes, and the chunk. Before: 5.5 MB at the peak, the lines of two 1 MB
    # chunks at once; now 0.8 MB.
    assert bucket.READ_CHUNK <= 256 * 1024
    assert peak < 4 * bucket.READ_CHUNK, peak


def test_steps_and_their_index_hold_some_60_bytes_a_step():
    raw = timeline(20_000)
    steps, held = held_by(lambda: parse_timeline(raw))
    names = sum(len(f"step {n} (decode)") for n in range(20_000))
    # The names' bytes and 8 a step where each ends, 4 a step for phase and ctx each, 34 for
    # the kernel ids and times (120 bytes a step, lists of names, phases and ctxs).
    assert held < names + 20_000 * (8 + 4 + 4 + 34) * 1.2, held
    assert steps[19_999].name == "step 19999 (decode)" and steps[-1].index == 19_999
    # A timeline in order is its own index: nothing a step (arrays of 24 bytes a step before).
    index, held = held_by(lambda: StepIndex(steps))
    assert held < 2_000, held
    assert index.step_of("0x796d2265b1f0", 200 * 19_999 + 200) == 19_999


def held_by(build):
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        built = build()
        return built, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


CTXS = st.sampled_from([None, "", "0x1", "0x2"])
STEP = st.tuples(CTXS, st.integers(1, 60), st.integers(0, 20))


def step_of_by_hand(steps: list[Step], ctx, kernel_id):
    """The step of a launch, as the index had it: its context's steps (else those of no
    context) by first kernel id, the last one starting at or before it, if it reaches it."""
    group = [step for step in steps if step.ctx == ctx] or [step for step in steps if step.ctx is None]
    started = [
        step
        for step in sorted(group, key=lambda step: step.first_kernel_id)
        if step.first_kernel_id <= kernel_id
    ]
    if not started or kernel_id > started[-1].last_kernel_id:
        return None
    return started[-1].index


@given(st.lists(STEP, max_size=12), st.booleans())
@settings(max_examples=300, deadline=None)
def test_a_step_index_finds_the_step_a_search_by_hand_finds(drawn, in_order):
    if in_order:
        drawn = sorted(drawn, key=lambda step: (step[0] or "", step[0] is None, step[1]))
    steps = Steps()
    for n, (ctx, first, length) in enumerate(drawn):
        steps.append(f"step {n}", None, ctx, first, first + length, None, None)
    by_hand = list(steps)
    for index in (StepIndex(steps), StepIndex(by_hand)):
        for ctx in (None, "", "0x1", "0x2", "0x3"):
            for kernel_id in range(0, 85):
                assert index.step_of(ctx, kernel_id) == step_of_by_hand(by_hand, ctx, kernel_id), (
                    ctx,
                    kernel_id,
                )
