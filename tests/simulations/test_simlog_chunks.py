"""`read_sim_log_chunks` (the fast reader ingestion calls) reads exactly as `read_sim_log` (a
line at a time, the reference): each real log and hostile inputs, split at any chunk
boundaries, give equal SimLogs, or SimLogErrors naming the same line.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.bucket import iter_lines
from simulations import simlog
from simulations.simlog import MAX_LINE, SimLogError, read_sim_log, read_sim_log_chunks
from tests.ingest.support import LOGS, NAMES


def by_lines(data: bytes):
    try:
        return read_sim_log(iter_lines(data, MAX_LINE))
    except SimLogError as error:
        return error


def by_chunks(data: bytes, cuts: list[int]):
    bounds = [0, *sorted({cut % (len(data) + 1) for cut in cuts}), len(data)]
    try:
        return read_sim_log_chunks(data[a:b] for a, b in zip(bounds, bounds[1:], strict=False))
    except SimLogError as error:
        return error


def assert_same(data: bytes, cuts: list[int]) -> None:
    expected, got = by_lines(data), by_chunks(data, cuts)
    if isinstance(expected, SimLogError):
        assert isinstance(got, SimLogError), got
        # The same line; a line over the limit names the log's limit, not the stats files'.
        assert str(got).split(":")[0] == str(expected).split(":")[0]
        if "a line of more than" not in str(expected):
            assert str(got) == str(expected)
        else:
            assert "CASCADE_MAX_STATS_LINE" not in str(got) and f"{MAX_LINE} bytes" in str(got)
    else:
        assert got == expected


def test_the_real_logs_that_the_tests_read_are_all_there():
    assert len(NAMES) == 6


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("chunk", [1, 7, 4096, 65536, 1 << 22])
def test_each_real_log_reads_the_same_in_chunks_of_any_size(name, chunk):
    data = LOGS[name]
    if chunk == 1:
        data = data[:20_000]  # byte by byte: the start is enough
    expected = by_lines(data)
    assert not isinstance(expected, SimLogError)
    assert by_chunks(data, list(range(chunk, len(data), chunk))) == expected
    assert expected.lines == data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(NAMES), cuts=st.lists(st.integers(min_value=0), max_size=40))
def test_each_real_log_split_anywhere_reads_the_same(name, cuts):
    assert_same(LOGS[name], cuts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(NAMES),
    end=st.floats(min_value=0, max_value=1),
    cuts=st.lists(st.integers(min_value=0), max_size=10),
)
def test_each_real_log_cut_anywhere_reads_the_same(name, end, cuts):
    data = LOGS[name]
    assert_same(data[: int(len(data) * end)], cuts)


# Lines that matter, and their near misses, to mix with junk.
PIECES = [
    b"kernel_name = k \n",
    b"kernel_launch_uid = 1 \n",
    b"kernel_launch_uid = 2 3 \n",
    b"kernel_launch_uid = \n",
    b"gpu_sim_cycle = 100\n",
    b"gpu_sim_insn = 7\n",
    b"gpu_tot_sim_cycle = 300\n",
    b"gpu_sim_cycle = many\n",
    b"gpgpu_simulation_time = 0 days, 0 hrs, 0 min, 1 sec (1 sec)\n",
    b"\tL1D_cache_core[0]: Access = 96, Miss = 64\n",
    b"Destroy streams for kernel 1: size 0\n",
    b"Header info loaded for kernel command : ./t/kernel-5.traceg\n",
    b"-grid dim = (8,1,1)\n",
    b"launching kernel name: _Z1k uid: 1\n",
    b"launching kernel name: _Z1k uid: 2 cuda_stream_id: 0\n",
    b"GPGPU-Sim PTX: pushing kernel '_Z1k' to stream 0, gridDim= (1,1,1) blockDim = (32,1,1)\n",
    b"GPGPU-Sim: ** break due to reaching the maximum cycles (or instructions) **\n",
    b"GPGPU-Sim: *** exit detected ***\n",
    b"-gpgpu_clock_domains 1200.0:1200.0:1200.0:850.0 # core\n",
    b"Accel-Sim [build x]\n",
    b"        *** GPGPU-Sim Simulator Version 3.2.2  [build 0] ***\n",
    b"        *** GPGPU-Sim Simulator Version 4.2.0  [build b] ***\n",
    b"x' * X\n",
    b"\n",
    b"\x00\xff\xfe",
    b"kernel",
    b"\ngpgpu_simulation_time",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(st.one_of(st.sampled_from(PIECES), st.binary(max_size=30)), max_size=60),
    cuts=st.lists(st.integers(min_value=0), max_size=10),
)
def test_hostile_mixes_read_the_same(parts, cuts):
    assert_same(b"".join(parts), cuts)


@pytest.mark.parametrize(
    "data",
    [
        b"a\n" + b"x" * (MAX_LINE + 1) + b"\nb\n",
        b"a\n" + b"x" * (MAX_LINE + 1),
        b"a\n" + b"x" * MAX_LINE + b"\nb\n",
        b"kernel_name = k\n" * 3 + b"y" * (3 * MAX_LINE),
        b"\n".join([b"z" * 1000] * 3000) + b"\n" + b"w" * (MAX_LINE + 5) + b"\n",
    ],
)
@pytest.mark.parametrize("chunk", [4096, 1 << 20, 1 << 23])
def test_long_lines_read_the_same(data, chunk):
    assert_same(data, list(range(chunk, len(data), chunk)))


def test_a_line_over_the_limit_names_the_logs_limit_and_its_line():
    data = b"a\nb\n" + b"x" * (MAX_LINE + 1) + b"\n"
    with pytest.raises(SimLogError) as raised:
        read_sim_log_chunks([data])
    assert (
        str(raised.value)
        == f"line 3: a line of more than {MAX_LINE} bytes (a simulator log's limit) at byte 4"
    )
    assert simlog.MAX_LINE == MAX_LINE
