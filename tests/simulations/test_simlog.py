"""The simulator's stdout read as docs/formats.md#the-simulators-log describes it.

Expected values come from the real logs (shared_fixture("real-sim-logs"), its SOURCES.txt), either counted
here with plain regular expressions over the whole text, or read by hand (cited by line), and
from the doc's rules; the rest are properties (a log cut anywhere is `killed`, never a crash).
"""

import re
import tracemalloc
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.bucket import iter_lines
from simulations.simlog import STOPPED_KILLED, STOPPED_MAX_CYCLES, SimLogError, read_sim_log
from tests.helpers import shared_fixture

MAX_LINE = 1 << 20

HALUW = "halUW__benchmark_1_stream_clean.log"
BACKPROP = "spapad__backprop_classic.out"
TRUNCATED = "spapad__classic_run_l1_bw_32f_out.TRUNCATED.log"
MAXCYCLE = "swayhrl__replay_1_run.MAXCYCLE.EXCERPT.log"
LUD = "bcpark__rodinia_lud_output.txt"
MATRIXMUL = "akj10__matrixMul_log_n128.log"
ALL = (HALUW, BACKPROP, TRUNCATED, MAXCYCLE, LUD, MATRIXMUL)


def raw(name: str) -> bytes:
    return shared_fixture("real-sim-logs", name).read_bytes()


def read(data: bytes, max_line: int = MAX_LINE):
    return read_sim_log(iter_lines(data, max_line))


def text(*lines: str) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


# --- an independent reading: whole-text regular expressions, the doc's rule applied by hand ---


def independent(data: bytes) -> dict:
    """What a reader of the whole text finds, without streaming: counts and the cycles rule."""
    body = data.decode("utf-8", "replace")
    complete = body if body.endswith("\n") else body[: body.rfind("\n") + 1]
    footers = [m.start() for m in re.finditer(r"(?m)^gpgpu_simulation_time", complete)]
    blocks = []  # (uids, gpu_sim_cycle, gpu_tot_sim_cycle, destroyed) of blocks with a footer
    for match in re.finditer(r"(?m)^kernel_launch_uid =([^\n]*)\n", complete):
        if not any(f > match.start() for f in footers):
            continue  # no footer after it: a partial block
        after = complete[match.end() :]
        cycle = int(re.search(r"(?m)^gpu_sim_cycle = (\d+)", after)[1])
        total = int(re.search(r"(?m)^gpu_tot_sim_cycle = (\d+)", after)[1])
        before = complete[: match.start()].rstrip("\n").rsplit("\n", 2)
        destroyed = re.match(r"Destroy streams for kernel (\d+):", before[-2]) if len(before) > 1 else None
        blocks.append(([int(u) for u in match[1].split()], cycle, total, destroyed and int(destroyed[1])))
    listed = Counter(uid for uids, *_ in blocks for uid in uids)
    overlapped = {uid for uids, *_ in blocks if len(uids) > 1 for uid in uids}
    overlapped |= {uid for uid, times in listed.items() if times > 1}
    overlapped |= {destroyed for uids, _, _, destroyed in blocks if not uids and destroyed}
    cycles = {uids[0]: cycle for uids, cycle, _, _ in blocks if len(uids) == 1 and uids[0] not in overlapped}
    return {
        "headers": len(re.findall(r"(?m)^Header info loaded for kernel command : ", body)),
        "launches": len(re.findall(r"(?m)^(?:launching kernel name: |GPGPU-Sim PTX: pushing kernel )", body)),
        "blocks": len(blocks),
        "total": blocks[-1][2] if blocks else None,
        "cycles": cycles,
        "overlapped": overlapped,
        "exit": "GPGPU-Sim: *** exit detected ***" in body,
        "clock": float(clock[1])
        if (clock := re.search(r"(?m)^-gpgpu_clock_domains\s+([\d.]+):", body))
        else None,
    }


@pytest.mark.parametrize("name", ALL)
def test_every_real_log_reads_as_an_independent_reading_of_its_blocks(name):
    data = raw(name)
    expected = independent(data)
    log = read(data)
    assert log.headers == expected["headers"]
    assert sum(kernel.name is not None for kernel in log.kernels.values()) == expected["launches"]
    assert log.blocks == expected["blocks"]
    assert log.total_cycles == expected["total"]
    assert log.core_clock_mhz == expected["clock"]
    assert log.exit_detected == expected["exit"]
    if log.stopped != STOPPED_MAX_CYCLES:
        assert {k.uid: k.sim_cycles for k in log.kernels.values() if k.sim_cycles is not None} == expected[
            "cycles"
        ]
        assert {k.uid for k in log.kernels.values() if k.overlapped} == expected["overlapped"]


def test_concurrent_streams_make_overlapped_kernels_and_keep_the_run_total():
    """halUW, read by hand: 4 headers (lines 289-331), blocks `1 3` (356, 750 cycles), `` after
    `Destroy streams for kernel 1` (2639-2642, 8 cycles), `2` (4917-4918, 489), `4` (7193-7194, 654);
    the last gpu_tot_sim_cycle is 1901 (7197); it ends with `exit detected`."""
    log = read(raw(HALUW))
    assert log.accelsim_build == "accelsim-commit-2260456ea5e6a1420f5734f145a4b7d8ab1d4737_modified_1.0"
    assert log.gpgpusim_version == "4.2.0"
    assert log.gpgpusim_build == "gpgpu-sim_git-commit-13c67115070dc2f0876254a790d0238073ca364a_modified_2.0"
    assert log.core_clock_mhz == 1200.0  # line 213
    assert [(k.uid, k.kernel_id, k.ctx) for k in log.in_uid_order()] == [
        (1, 1, None),
        (2, 2, None),
        (3, 3, None),
        (4, 4, None),
    ]
    assert [k.name for k in log.in_uid_order()] == [
        "_Z5saxpyifPfS_",
        "_Z5scaleifPf",
        "_Z5saxpyifPfS_",
        "_Z3addiPfS_",
    ]
    assert [(k.sim_cycles, k.overlapped) for k in log.in_uid_order()] == [
        (None, True),
        (489, False),
        (None, True),
        (654, False),
    ]
    assert log.blocks == 4 and log.total_cycles == 1901
    assert log.stopped is None and log.complete


def test_new_tracer_names_give_the_kernel_id_and_its_context():
    """spapad backprop, by hand: headers at 289 (kernel-1-ctx_0x56237acb3f90.traceg.xz) and 6747
    (kernel-2-...), launches with `cuda_stream_id: 0` (290, 6748), gpu_sim_cycle 38790 (4449) and
    32031 (10906), gpu_sim_insn 95092736 (4450) and 45089120 (10907), total 70821 (10910); clock
    1440 (214, integer form); a fork's `gpu_sim_insn calculated by classic` line (4451) is not a count."""
    log = read(raw(BACKPROP))
    assert log.accelsim_build == "accelsim-commit-_modified_0.0_26-01-25-23-20-13"
    assert log.gpgpusim_build == "gpgpu-sim_git-commit-_modified_0.0"
    assert log.core_clock_mhz == 1440.0
    kernels = log.in_uid_order()
    assert [(k.uid, k.kernel_id, k.ctx, k.stream) for k in kernels] == [
        (1, 1, "0x56237acb3f90", 0),
        (2, 2, "0x56237acb3f90", 0),
    ]
    assert kernels[0].trace_file.endswith("/traces/kernel-1-ctx_0x56237acb3f90.traceg.xz")
    assert [(k.sim_cycles, k.sim_insn) for k in kernels] == [(38790, 95092736), (32031, 45089120)]
    assert log.total_cycles == 70821 and log.complete


def test_a_cycle_limit_stop_still_prints_exit_detected_and_leaves_the_kernel_out():
    """swayhrl excerpt: header of kernel-34 (line 39) launched as uid 1 (line 40); its block says
    gpu_sim_cycle = 10000 (51), then the break line (102) and `exit detected` (104)."""
    log = read(raw(MAXCYCLE))
    assert log.exit_detected
    assert log.stopped == STOPPED_MAX_CYCLES and not log.complete
    (kernel,) = log.in_uid_order()
    assert (kernel.uid, kernel.kernel_id, kernel.ctx) == (1, 34, "0x5dd0a1addd30")
    assert kernel.name.startswith("void pytorch_flash::flash_fwd_kernel<")
    assert log.interrupted == [1] and kernel.sim_cycles is None
    assert log.total_cycles == 10000
    assert log.core_clock_mhz == 1500.0


def test_a_release_build_stopped_at_the_limit_names_the_launched_kernel_without_a_block():
    """Accel-Sim 2022 prints no block for the interrupted kernel (doc §7)."""
    log = read(
        text(
            "Header info loaded for kernel command : ./traces/kernel-1.traceg",
            "launching kernel name: first uid: 1",
            "Destroy streams for kernel 1: size 0",
            "kernel_name = first ",
            "kernel_launch_uid = 1 ",
            "gpu_sim_cycle = 700",
            "gpu_tot_sim_cycle = 700",
            "gpgpu_simulation_time = 0 days, 0 hrs, 0 min, 1 sec (1 sec)",
            "Header info loaded for kernel command : ./traces/kernel-2.traceg",
            "launching kernel name: second uid: 2",
            "gpgpu_simulation_time = 0 days, 0 hrs, 0 min, 2 sec (2 sec)",
            "GPGPU-Sim: ** break due to reaching the maximum cycles (or instructions) **",
            "GPGPU-Sim: *** simulation thread exiting ***",
            "GPGPU-Sim: *** exit detected ***",
        )
    )
    assert log.stopped == STOPPED_MAX_CYCLES
    assert log.interrupted == [2]
    assert log.kernels[1].sim_cycles == 700


def test_a_killed_log_ends_mid_line_at_a_4_kib_boundary():
    data = raw(TRUNCATED)
    assert len(data) == 6 * 4096 and not data.endswith(b"\n")
    log = read(data)
    assert log.stopped == STOPPED_KILLED and not log.complete
    assert log.core_clock_mhz == 1440.0  # line 214, before the cut
    assert log.gpgpusim_build == "gpgpu-sim_git-commit-d436c8d_modified_17.0"
    assert log.blocks == 0 and log.total_cycles is None and not log.kernels


def test_a_3x_log_is_complete_without_a_marker_when_every_launch_has_its_block():
    """akj10 (GPGPU-Sim 3.2.2) ends with the application's output: 3.x prints no end marker,
    even for a normal run (doc §7, §9); its one kernel has its block, so it is complete."""
    log = read(raw(MATRIXMUL))
    assert log.gpgpusim_version == "3.2.2" and log.gpgpusim_build == "0"
    assert log.accelsim_build is None and not log.exit_detected
    assert log.stopped is None and log.complete
    (kernel,) = log.in_uid_order()
    # line 222: pushing kernel '_Z12matrixMulGPUPiS_S_i' ... gridDim= (8,8,1) blockDim = (16,16,1)
    assert (kernel.name, kernel.grid, kernel.block) == ("_Z12matrixMulGPUPiS_S_i", "(8,8,1)", "(16,16,1)")
    assert (kernel.sim_cycles, kernel.sim_insn) == (54010, 9109504)  # lines 503-504


def test_a_3x_log_cut_before_its_launch_has_a_block_is_killed():
    """The same log cut at a line's end: inside the stat block (line 503's end, before its footer),
    and after the launch (line 222) but before any block."""
    lines = raw(MATRIXMUL).splitlines(keepends=True)
    for kept in (503, 222):
        log = read(b"".join(lines[:kept]))
        assert log.gpgpusim_version == "3.2.2"
        assert log.stopped == STOPPED_KILLED and not log.complete, kept
        assert log.blocks == 0 and log.kernels[1].name == "_Z12matrixMulGPUPiS_S_i"


def test_a_3x_log_cut_before_any_launch_is_killed():
    lines = raw(MATRIXMUL).splitlines(keepends=True)
    log = read(b"".join(lines[:100]))
    assert log.gpgpusim_version == "3.2.2" and not log.kernels
    assert log.stopped == STOPPED_KILLED


def test_ptx_mode_uids_are_launch_order():
    """bcpark lud: 46 `pushing kernel` lines, each block listing the next uid; the last block
    (44117-44121) lists uid 46, 27130 cycles, total 897189."""
    log = read(raw(LUD))
    assert log.headers == 0
    assert sorted(log.kernels) == list(range(1, 47))
    assert log.kernels[1].name == "_Z12lud_diagonalPfii" and log.kernels[1].sim_cycles == 29185  # 6050, 6056
    assert log.kernels[2].name == "_Z13lud_perimeterPfii" and log.kernels[2].grid == "(15,1,1)"  # 6909
    assert log.kernels[46].sim_cycles == 27130
    assert log.total_cycles == 897189 and log.complete


def test_uid_is_the_order_of_trace_headers_not_the_n_of_kernel_n():
    log = read(
        text(
            "-grid dim = (4,1,1)",
            "-block dim = (32,1,1)",
            "Header info loaded for kernel command : /t/kernel-34-ctx_0x5dd0a1addd30.traceg.xz",
            "-grid dim = (8,2,1)",
            "-block dim = (64,1,1)",
            "Header info loaded for kernel command : /t/kernel-7.traceg",
            "launching kernel name: a uid: 1 cuda_stream_id: 0",
            "launching kernel name: b uid: 2 cuda_stream_id: 1",
            "GPGPU-Sim: *** exit detected ***",
        )
    )
    assert [(k.uid, k.kernel_id, k.ctx, k.grid, k.block, k.stream) for k in log.in_uid_order()] == [
        (1, 34, "0x5dd0a1addd30", "(4,1,1)", "(32,1,1)", 0),
        (2, 7, None, "(8,2,1)", "(64,1,1)", 1),
    ]


def block(uids: str, cycles: int, total: int) -> list[str]:
    return [
        "kernel_name = k ",
        f"kernel_launch_uid = {uids}",
        f"gpu_sim_cycle = {cycles}",
        f"gpu_sim_insn = {cycles * 10}",
        f"gpu_tot_sim_cycle = {total}",
        "gpgpu_simulation_time = 0 days, 0 hrs, 0 min, 1 sec (1 sec)",
    ]


def test_a_uid_listed_twice_or_with_others_has_no_cycles_of_its_own():
    log = read(
        text(
            *block("1 2 ", 100, 100),
            *block("2 ", 50, 150),
            *block("3 3 ", 20, 170),
            *block("4 ", 30, 200),
            "GPGPU-Sim: *** exit detected ***",
        )
    )
    assert {uid: (k.sim_cycles, k.overlapped) for uid, k in log.kernels.items()} == {
        1: (None, True),
        2: (None, True),
        3: (None, True),
        4: (30, False),
    }
    assert log.kernels[4].sim_insn == 300
    assert log.total_cycles == 200


def test_a_partial_last_block_does_not_count():
    log = read(text(*block("1 ", 100, 100), *block("2 ", 50, 150)[:-1]))
    assert log.stopped == STOPPED_KILLED
    assert log.blocks == 1 and log.total_cycles == 100
    assert log.kernels[1].sim_cycles == 100 and 2 not in log.kernels


# --- malformed and hostile input: SimLogError with the line number --------------------------


@pytest.mark.parametrize(
    "lines, line_number",
    [
        (["kernel_name = k", "kernel_launch_uid = 1", "gpu_sim_cycle = many"], 3),
        (["kernel_name = k", "kernel_launch_uid = 1", "gpu_sim_cycle = " + "9" * 5000], 3),
        (["kernel_name = k", "kernel_launch_uid = 1 x"], 2),
        (["kernel_name = k", "kernel_launch_uid = " + "9" * 5000], 2),
        (["x", "kernel_name = k", "gpgpu_simulation_time = 1"], 3),  # no uids, no cycles
        (["kernel_name = k", "kernel_name = k"], 2),
        (["-gpgpu_clock_domains fast:1:1:1"], 1),
        (["-gpgpu_clock_domains " + "1" * 5000 + ":1:1:1"], 1),
        (["Header info loaded for kernel command : /t/trace.bin"], 1),
        (
            ["Header info loaded for kernel command : /t/kernel-1.traceg", "launching kernel name: a uid: 2"],
            2,
        ),
        (["launching kernel name: a uid: 1", "launching kernel name: a uid: 1"], 2),
        (["launching kernel name: a\x00b uid: 1"], 1),
        (["launching kernel name without a uid"], 1),
        (["GPGPU-Sim PTX: pushing kernel 'k' somewhere"], 1),
        (["Destroy streams for kernel x: size 0"], 1),
    ],
)
def test_malformed_lines_raise_simlogerror_naming_the_line(lines, line_number):
    with pytest.raises(SimLogError, match=rf"^line {line_number}: "):
        read(text(*lines))


def test_a_line_over_the_limit_is_a_simlogerror_naming_it():
    with pytest.raises(SimLogError, match=r"^line 3: .*1000"):
        read(text("a", "b", "x" * 1_000_000, "c"), max_line=1000)


@pytest.mark.parametrize("name", (HALUW, MAXCYCLE))
def test_a_log_cut_at_every_4_kib_boundary_is_killed_with_its_complete_blocks(name):
    data = raw(name)
    for end in range(4096, len(data), 4096):
        cut = data[:end]
        log = read(cut)
        assert log.stopped == STOPPED_KILLED
        assert log.blocks == independent(cut)["blocks"]


SMALL = raw(MAXCYCLE)


CUT_LOGS = {name: raw(name) for name in (HALUW, MAXCYCLE)}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(CUT_LOGS)), fraction=st.floats(min_value=0, max_value=1, exclude_max=True))
def test_a_log_cut_at_any_byte_is_killed_with_its_complete_blocks(name, fraction):
    data = CUT_LOGS[name]
    cut = data[: int(len(data) * fraction)]
    try:
        log = read(cut)
    except SimLogError:
        return
    assert log.stopped == STOPPED_KILLED and not log.complete
    assert log.blocks == independent(cut)["blocks"]


@settings(max_examples=200, deadline=None)
@given(junk=st.binary(max_size=2000), at=st.integers(min_value=0, max_value=len(SMALL)))
def test_binary_junk_anywhere_is_read_or_a_simlogerror(junk, at):
    try:
        log = read(SMALL[:at] + junk + SMALL[at:], max_line=4096)
    except SimLogError:
        return
    assert log.stopped in (None, STOPPED_KILLED, STOPPED_MAX_CYCLES)


# --- memory: bounded by the uids, not by the log's length ------------------------------------


def halUW_block() -> list[bytes]:
    """The real block of uid 2 (lines 4915-7176: Destroy line, block, cache stats, footer)."""
    return raw(HALUW).split(b"\n")[4914:7176]


def repeated(lines: list[bytes], times: int, uid_of=lambda n: 2):
    destroyed = set()
    for n in range(times):
        for line in lines:
            if line.startswith(b"kernel_launch_uid ="):
                line = b"kernel_launch_uid = %d " % uid_of(n)
            elif line.startswith(b"Destroy streams"):
                if uid_of(n) in destroyed:  # a kernel finishes once (twice is a bad log)
                    continue
                destroyed.add(uid_of(n))
                line = b"Destroy streams for kernel %d: size 0" % uid_of(n)
            yield line + b"\n"
    yield b"GPGPU-Sim: *** exit detected ***\n"


def peak(lines) -> int:
    tracemalloc.start()
    try:
        log = read_sim_log(lines)
        return tracemalloc.get_traced_memory()[1], log
    finally:
        tracemalloc.stop()


def test_memory_stays_flat_as_the_log_grows():
    lines = halUW_block()
    small, small_log = peak(repeated(lines, 10))
    large, large_log = peak(repeated(lines, 40))
    assert (small_log.blocks, large_log.blocks) == (10, 40)
    assert large_log.kernels[2].overlapped  # one uid listed in 40 blocks
    assert large < small * 1.25 + 16_384


def test_memory_grows_with_the_uids_only():
    lines = halUW_block()
    small, _ = peak(repeated(lines, 10, uid_of=lambda n: n + 1))
    large, log = peak(repeated(lines, 40, uid_of=lambda n: n + 1))
    assert [log.kernels[uid].sim_cycles for uid in (1, 40)] == [489, 489]  # line 4918
    assert large - small < 30 * 1024  # at most ~1 KiB per uid


def test_a_log_killed_after_the_break_line_is_killed_and_keeps_its_blocks():
    """Without `exit detected` the log just ends: `killed`, whose complete blocks all count."""
    log = read(
        text(
            *block("1 ", 100, 100),
            "GPGPU-Sim: ** break due to reaching the maximum cycles (or instructions) **",
        )
    )
    assert log.stopped == STOPPED_KILLED
    assert log.interrupted == [] and log.kernels[1].sim_cycles == 100


def test_more_uids_than_a_run_launches_is_a_simlogerror(monkeypatch):
    monkeypatch.setattr("simulations.simlog.MAX_UIDS", 3)
    assert len(read(text(*block("1 2 3 ", 100, 100), "GPGPU-Sim: *** exit detected ***")).kernels) == 3
    with pytest.raises(SimLogError, match=r"^line 12: more than 3 uids"):
        read(text(*block("1 2 3 ", 100, 100), *block("4 ", 1, 101)))  # at the 2nd block's end
