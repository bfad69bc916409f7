"""Hostile logs at the reader level: each gives a documented partial result (`killed`, with the
complete blocks) or a SimLogError naming the line, never an exception of another kind."""

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulations.simlog import (
    MAX_COUNT,
    MAX_ID,
    MAX_LINE,
    MAX_UIDS,
    STOPPED_KILLED,
    SimLogError,
    read_sim_log_chunks,
)
from tests.ingest.support import LOGS, NAMES  # the six real logs, read once


def read(data: bytes, chunk: int = 65536):
    return read_sim_log_chunks(data[at : at + chunk] for at in range(0, len(data), chunk))


def complete_blocks(data: bytes) -> int:
    """Footers of blocks (`gpgpu_simulation_time` after a `kernel_name =`), whole lines only."""
    text = data[: data.rfind(b"\n") + 1]
    return len(re.findall(rb"(?ms)^kernel_name =.*?^gpgpu_simulation_time", text))


@pytest.mark.parametrize("name", NAMES)
def test_a_log_killed_at_every_4_kib_boundary_is_killed_with_its_complete_blocks(name):
    data = LOGS[name]
    for end in range(4096, len(data), 4096):
        cut = data[:end]
        try:
            log = read(cut, 4096)
        except SimLogError:
            continue
        if not cut.endswith(b"\n"):
            assert log.stopped == STOPPED_KILLED and not log.complete, end
        elif log.stopped is None:  # cut on a line's end: only a 3.x log may end there, complete
            assert log.gpgpusim_version.startswith("3."), end
        assert log.blocks == complete_blocks(cut), end


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(NAMES), junk=st.binary(max_size=3000), at=st.floats(min_value=0, max_value=1))
def test_binary_junk_anywhere_is_read_or_a_simlogerror(name, junk, at):
    data = LOGS[name]
    where = int(len(data) * at)
    try:
        log = read(data[:where] + junk + data[where:])
    except SimLogError:
        return
    assert log.blocks <= complete_blocks(data) + complete_blocks(junk) + 1


def test_a_1_000_000_character_line_is_read_past():
    """Under MAX_LINE: a line like any other, that says nothing."""
    data = LOGS["halUW__benchmark_1_stream_clean.log"]
    cut = data.index(b"\nlaunching kernel name:") + 1
    log = read(data[:cut] + b"x" * 1_000_000 + b"\n" + data[cut:])
    assert log.complete and log.blocks == 4 and log.total_cycles == 1901
    assert log.lines == data.count(b"\n") + 1


@pytest.mark.parametrize("chunk", [4096, 1 << 20, 1 << 24])
def test_a_line_over_max_line_is_a_simlogerror_naming_the_line_and_the_logs_limit(chunk):
    data = b"a\n" * 10 + b"kernel_name = " + b"k" * MAX_LINE + b"\n"
    with pytest.raises(SimLogError) as raised:
        read(data, chunk)
    message = str(raised.value)
    assert message == f"line 11: a line of more than {MAX_LINE} bytes (a simulator log's limit) at byte 20"
    assert "CASCADE_MAX_STATS_LINE" not in message


def test_a_log_without_newlines_is_a_simlogerror_once_over_the_limit():
    with pytest.raises(SimLogError, match=r"^line 1: a line of more than"):
        read(b"\xff" * (MAX_LINE + 1), 4096)
    assert read(b"\xff" * 1000).stopped == STOPPED_KILLED


def test_nul_bytes_in_a_name_are_a_simlogerror_elsewhere_nothing():
    with pytest.raises(SimLogError, match=r"^line 2: a NUL character"):
        read(b"x\nlaunching kernel name: a\x00b uid: 1\n")
    log = read(b"\x00\x00\n\x00kernel_name = k\nGPGPU-Sim: *** exit detected ***\n")
    assert log.complete and log.blocks == 0 and not log.kernels


def test_uids_past_max_uids_are_a_simlogerror(monkeypatch):
    monkeypatch.setattr("simulations.simlog.MAX_UIDS", 5)
    lines = [b"launching kernel name: k uid: %d\n" % uid for uid in range(1, 6)]
    assert len(read(b"".join(lines)).kernels) == 5
    with pytest.raises(SimLogError, match=r"^line 6: more than 5 uids"):
        read(b"".join(lines) + b"launching kernel name: k uid: 6\n")


@pytest.mark.parametrize(
    "line",
    [
        b"kernel_launch_uid = " + b"9" * 21,
        b"gpu_sim_cycle = " + b"9" * 21,
        b"gpu_tot_sim_cycle = " + b"9" * 100_000,
        b"launching kernel name: k uid: " + b"9" * 21,
        b"Destroy streams for kernel " + b"9" * 21 + b": size 0",
        b"Header info loaded for kernel command : /t/kernel-" + b"9" * 21 + b".traceg",
        b"-gpgpu_clock_domains " + b"9" * 10 + b":1:1:1",
    ],
)
def test_huge_numbers_are_a_simlogerror_naming_the_line(line):
    second = b"x\n" if line.startswith(b"kernel_launch_uid") else b"kernel_launch_uid = 1\n"
    with pytest.raises(SimLogError, match=r"^line 3: "):
        read(b"kernel_name = k\n" + second + line + b"\n")


def block(uid: int, cycles: int, insn: int = 1) -> bytes:
    return (
        b"kernel_name = k\nkernel_launch_uid = %d\ngpu_sim_cycle = %d\ngpu_sim_insn = %d\n"
        b"gpu_tot_sim_cycle = %d\ngpgpu_simulation_time = 1\nGPGPU-Sim: *** exit detected ***\n"
        % (uid, cycles, insn, cycles)
    )


def test_the_largest_counts_are_read():
    """Ids within a signed 64-bit integer; counts within what every uid's nanoseconds can add up to
    in one (80,000 uids at 10 MHz: 1000 / 10 ns a cycle)."""
    assert MAX_ID == 2**63 - 1
    assert MAX_UIDS * MAX_COUNT * (1000 // 10) <= 2**63 - 1
    log = read(block(MAX_ID, MAX_COUNT, MAX_COUNT))
    kernel = log.kernels[MAX_ID]
    assert (kernel.sim_cycles, kernel.sim_insn, log.total_cycles) == (MAX_COUNT, MAX_COUNT, MAX_COUNT)


@pytest.mark.parametrize(
    ("log", "error"),
    [
        (
            block(1, 9223372036854775807),
            f"line 3: gpu_sim_cycle 9223372036854775807 is more than {MAX_COUNT}",
        ),
        (block(1, 1, MAX_COUNT + 1), f"line 4: gpu_sim_insn {MAX_COUNT + 1} is more than {MAX_COUNT}"),
        (block(2**63, 1), f"line 2: uid {2**63} is more than {MAX_ID}"),
        (
            b"launching kernel name: k uid: 1 cuda_stream_id: %d\n" % 2**64,
            f"line 1: cuda_stream_id {2**64} is more",
        ),
        (
            b"Header info loaded for kernel command : /t/kernel-%d.traceg\n" % 2**63,
            f"line 1: kernel id {2**63} is",
        ),
    ],
    ids=["cycles-2^63-1", "insn", "uid", "stream", "kernel-id"],
)
def test_counts_and_ids_past_64_bits_are_a_simlogerror_in_one_sentence(log, error):
    with pytest.raises(SimLogError) as raised:
        read(log)
    assert str(raised.value).startswith(error), raised.value
    assert str(raised.value).endswith("the most Cascade reads")
