"""Per-launch holders of a pass in flat memory: a context's traced kernel ids as
ranges, timing.csv's durations in chunks on disk. Each reads exactly as the set and the dict
it replaced (written out here as the reference), and holds a million launches in little."""

import random
import tracemalloc
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.kernelslist import LAST_ID, TracedIds, parse_kernelslist_lines
from ingest.timing import timing_csv
from ingest.timing.timing_csv import read_timing

INT64_MAX = 2**63 - 1
CTX = "0x7f3a5c000000"


def kernelslist(ids, ctx: str | None = CTX) -> list[bytes]:
    """A kernelslist as the tracer writes it: memcpys, then the traced kernels' files."""
    scheme = f"-ctx_{ctx}.trace.xz" if ctx else ".trace"
    return [b"MemcpyHtoD,0x00007f0000000000,800\n"] + [f"kernel-{n}{scheme}\n".encode() for n in ids]


def held_by(build):
    """What `build()` returns and the bytes it still holds once built (tracemalloc)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        built = build()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return built, held


def test_a_kernelslist_naming_every_launch_is_held_in_a_few_bytes():
    lines = kernelslist(range(1, 200_001))
    traced, held = held_by(lambda: parse_kernelslist_lines(iter(lines)))
    # A set of the same ids held 14 MB (an 8 MB table and an int object an id): 62 MB a million.
    assert held < 10_000, held
    assert len(traced) == 200_000 and traced.ranges == 1
    assert 1 in traced and 200_000 in traced and 0 not in traced and 200_001 not in traced


def test_ids_far_apart_cost_a_range_each_never_the_span_between_them():
    traced, held = held_by(lambda: parse_kernelslist_lines(kernelslist([INT64_MAX, 1, 2**40, 2])))
    assert held < 10_000, held
    assert traced == {1, 2, 2**40, INT64_MAX} and traced.ranges == 3
    assert INT64_MAX in traced and INT64_MAX - 1 not in traced and 2**40 + 1 not in traced


# Kernelslists as they come: runs of consecutive ids (the tracer's default), gaps, ids listed
# twice, out of order, near 2^63 - 1.
RUN = st.tuples(
    st.one_of(st.integers(1, 50), st.integers(1, 2**40), st.integers(INT64_MAX - 40, INT64_MAX)),
    st.integers(0, 30),
).map(lambda run: list(range(run[0], min(run[0] + run[1], INT64_MAX) + 1)))
KERNELSLIST = st.tuples(
    st.lists(RUN, max_size=6).map(lambda runs: [n for run in runs for n in run]),
    st.randoms(use_true_random=False),
    st.sampled_from(["as listed", "shuffled", "reversed", "doubled"]),
)


def arranged(ids: list[int], rng: random.Random, order: str) -> list[int]:
    if order == "shuffled":
        rng.shuffle(ids)
    elif order == "reversed":
        ids.reverse()
    elif order == "doubled":
        ids = ids + ids[: len(ids) // 2]
    return ids


@settings(max_examples=300, deadline=None)
@given(KERNELSLIST, st.sampled_from([CTX, None]))
def test_traced_ids_are_what_a_set_of_the_listed_ids_would_say(drawn, ctx):
    ids = arranged(*drawn)
    traced = parse_kernelslist_lines(kernelslist(ids, ctx))
    expected = set(ids)
    assert traced == expected and len(traced) == len(expected) and bool(traced) == bool(expected)
    assert list(traced) == sorted(expected)
    probes = {0, 1, 2, INT64_MAX, INT64_MAX - 1} | {n + d for n in ids for d in (-1, 0, 1)}
    assert {n for n in probes if n in traced} == {n for n in probes if n in expected}
    # Ranges are merged: never more than the runs of consecutive ids.
    runs = sum(1 for n in expected if n - 1 not in expected)
    assert traced.ranges == runs


@settings(max_examples=300, deadline=None)
@given(KERNELSLIST, st.lists(st.integers(0, 2**40), max_size=20))
def test_a_span_is_every_id_from_one_on_that_the_set_says_the_same_of(drawn, extra_probes):
    ids = arranged(*drawn)
    traced = parse_kernelslist_lines(kernelslist(ids))
    expected = set(ids)
    probes = {0, 1, 2, INT64_MAX - 1} | set(extra_probes) | {n + d for n in ids for d in (-1, 0, 1)}
    for n in probes:
        inside, until = traced.span(n)
        assert inside == (n in expected) and until >= n
        # The same from n to until, and not one id past it (or nothing past it changes).
        changes = [m for m in expected | {m + 1 for m in expected} if m > n and (m in expected) != inside]
        assert until == (min(changes) - 1 if changes else LAST_ID)


def test_an_empty_kernelslist_traces_nothing():
    traced = parse_kernelslist_lines(kernelslist([]))
    assert not traced and len(traced) == 0 and traced == set() and 5 not in traced
    assert TracedIds() == set()


# --- timing.csv's durations ---------------------------------------------------------------------


def timing_lines(rows) -> list[bytes]:
    return [b"ctx,kernel_id,start_ns,end_ns,duration_ns\n"] + [
        f"{ctx},{kernel_id},0,{duration},{duration}\n".encode() for ctx, kernel_id, duration in rows
    ]


def test_durations_held_in_memory_do_not_grow_with_the_launches():
    """A few chunks in memory, the rest in the file: 100,000 launches' durations in 4 chunks of
    8192 (128 kB), where an array indexed by kernel id held 400 kB, 4 bytes more a launch."""
    rows = ((CTX, n, 1000 + n % 977) for n in range(1, 100_001))
    with mock.patch.object(timing_csv, "OPEN_CHUNKS", 4):
        durations, held = held_by(lambda: read_timing(iter(timing_lines(rows))))
        got = [durations.duration_of(CTX, n, None, None) for n in (1, 977, 99_999, 100_000, 100_001)]
    assert held < 200_000, held
    assert got == [1001, 1000, 1000 + 99_999 % 977, 1000 + 100_000 % 977, None]


DURATION = st.one_of(st.integers(0, 5000), st.integers(2**32 - 3, 2**32 + 3), st.just(2**63 - 1))
TIMING_ROWS = st.lists(
    st.tuples(st.sampled_from(["0xa", "0xb", ""]), st.integers(1, 200), DURATION), max_size=120
)


@settings(max_examples=200, deadline=None)
@given(TIMING_ROWS, st.integers(1, 4), st.integers(1, 3))
def test_durations_are_those_of_each_launch_s_last_row_whatever_the_chunks(rows, bits, open_chunks):
    """Tiny chunks, few in memory: rows out of order and contexts interleaved go back and
    forth to the file, and still read as a dict of each (ctx, kernel id)'s last row."""
    expected = {(ctx, kernel_id): duration for ctx, kernel_id, duration in rows}
    small = {
        "CHUNK_BITS": bits,
        "CHUNK_IDS": 1 << bits,
        "CHUNK_MASK": (1 << bits) - 1,
        "OPEN_CHUNKS": open_chunks,
    }
    with mock.patch.multiple(timing_csv, **small):
        durations = read_timing(timing_lines(rows))
        for ctx in ("0xa", "0xb", "", None, "0xc"):
            got = [durations.duration_of(ctx, n, None, None) for n in range(-1, 205)]
            assert got == [expected.get((ctx or "", n)) for n in range(-1, 205)]
