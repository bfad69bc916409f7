"""Every real log of shared_fixture("real-sim-logs") read here, uploaded as a simulation of a trace made from
the log's own kernel list, pairs as an independent reading of its text says.

The expected pairs are read here with a few regular expressions over the whole text: the
trace headers (or PTX pushes) in order, the launch lines, and the stat blocks' uids and
`gpu_sim_cycle`. Nothing of simulations/simlog.py is used to compute them.
"""

import re

import pytest

from ingest import passes
from simulations.models import SimulatedKernel, Simulation
from tests.ingest.support import (
    real_log,
    simulation,
    spec_of,
    trace_files,
    upload_simulation,
)
from traces.models import TraceState

BLOCK = re.compile(rb"^kernel_launch_uid = ([0-9 ]*)\n(?:.*\n)*?^gpu_sim_cycle = (\d+)\n", re.M)
FOOTER = re.compile(rb"^gpgpu_simulation_time", re.M)


def complete_blocks(log: bytes) -> list[tuple[list[int], int]]:
    """The stat blocks followed by their gpgpu_simulation_time footer (a cut block does not count)."""
    found = []
    for match in BLOCK.finditer(log):
        if FOOTER.search(log, match.end()):
            found.append(([int(u) for u in match[1].split()], int(match[2])))
    return found


def expected_cycles(log: bytes) -> dict[int, int | None]:
    listed: dict[int, list] = {}
    for uids, cycles in complete_blocks(log):
        for uid in uids:
            listed.setdefault(uid, []).append(cycles if len(uids) == 1 else None)
    return {uid: found[0] if len(found) == 1 else None for uid, found in listed.items()}


REAL_LOGS = [
    ("halUW__benchmark_1_stream_clean.log", True, None),
    ("spapad__backprop_classic.out", True, None),
    ("bcpark__rodinia_lud_output.txt", True, None),
    ("akj10__matrixMul_log_n128.log", True, None),  # GPGPU-Sim 3.2.2: no end marker at all
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "complete", "stopped"), REAL_LOGS)
def test_each_real_log_pairs_as_an_independent_reading_says(s3, upload, name, complete, stopped):
    log = real_log(name)
    ctx, launches = spec_of(log)
    assert launches, "the log names its kernels"
    upload("run", trace_files(ctx, launches), metadata={"status": "ok"})
    upload_simulation(s3, "run", "real", log)
    passes.poll_bucket()

    sim = simulation("run", "real")
    assert sim.state == TraceState.READY, sim.error
    cycles = expected_cycles(log)
    expected = sorted((kernel_id, uid, cycles.get(uid)) for uid, kernel_id, _ in launches)
    stored = list(
        SimulatedKernel.objects.filter(simulation=sim)
        .order_by("kernel_id")
        .values_list("kernel_id", "uid", "sim_cycles")
    )
    assert stored == expected
    assert (sim.complete, sim.stopped) == (complete, stopped)
    assert sim.kernels_simulated == len(launches)
    assert sim.kernels_compared == sum(1 for c in cycles.values() if c is not None)
    clock = float(re.search(rb"-gpgpu_clock_domains\s+([0-9.]+)", log)[1])
    assert sim.core_clock_mhz == clock
    for row in SimulatedKernel.objects.filter(simulation=sim, sim_cycles__isnull=False):
        assert row.sim_ns == pytest.approx(row.sim_cycles * 1000 / clock)
        assert row.measured_ns == 1000 + 7 * row.kernel_id


@pytest.mark.django_db
def test_a_max_cycle_log_that_finished_no_kernel_fails_naming_the_interrupted_one(s3, upload):
    log = real_log("swayhrl__replay_1_run.MAXCYCLE.EXCERPT.log")
    ctx, launches = spec_of(log)
    assert [(uid, kernel_id) for uid, kernel_id, _ in launches] == [(1, 34)]  # kernel-34 is uid 1
    # The trace's stats file has the mangled name; the log prints it demangled.
    mangled = (
        "_ZN13pytorch_flash16flash_fwd_kernelINS_23Flash_fwd_kernel_traitsILi64ELi128ELi128ELi4ELb0ELb0EN7"
        "cutlass6half_tENS_19Flash_kernel_traitsILi64ELi128ELi128ELi4ES3_EEEELb0ELb1ELb0ELb0ELb1ELb1ELb0EEEvNS_16Flash_fwd_paramsE"
    )
    upload("run", trace_files(ctx, [(1, 33, "_Z5otherv"), (1, 34, mangled)]), metadata={"status": "ok"})
    upload_simulation(s3, "run", "limit", log)
    passes.poll_bucket()
    sim = simulation("run", "limit")
    # Its only kernel did not finish: nothing was simulated, the limit and uid 1 named.
    assert sim.state == TraceState.FAILED
    assert (sim.complete, sim.stopped) == (False, "max_cycles")
    assert "simulated no kernel" in sim.error and "uid 1" in sim.error and "flash_fwd_kernel" in sim.error
    assert "cycle limit" in sim.error
    assert not SimulatedKernel.objects.filter(simulation=sim).exists()  # left out of the pairs


@pytest.mark.django_db
def test_a_log_killed_in_its_option_dump_fails_killed_with_nothing_simulated(s3, upload):
    log = real_log("spapad__classic_run_l1_bw_32f_out.TRUNCATED.log")
    assert len(log) % 4096 == 0 and not log.endswith(b"\n")
    upload("run", trace_files(None, [(1, 1, "_Z5firstv")]), metadata={"status": "ok"})
    upload_simulation(s3, "run", "killed", log)
    passes.poll_bucket()
    sim = simulation("run", "killed")
    assert sim.state == TraceState.FAILED
    assert (sim.complete, sim.stopped, sim.kernels_simulated, sim.kernels_compared) == (False, "killed", 0, 0)
    assert "simulated no kernel" in sim.error and "killed" in sim.error


@pytest.mark.django_db
def test_a_real_log_killed_at_each_4k_boundary_is_ready_killed_or_failed_never_stuck(s3, upload):
    """The halUW log cut where a killed job's block-buffered stdout ends; every 8th boundary."""
    log = real_log("halUW__benchmark_1_stream_clean.log")
    ctx, launches = spec_of(log)
    upload("run", trace_files(ctx, launches), metadata={"status": "ok"})
    for n, end in enumerate(range(4096, len(log), 4096 * 8)):
        upload_simulation(s3, "run", f"cut{n}", log[:end])
    passes.poll_bucket()
    for sim in Simulation.objects.filter(trace_id="run"):
        assert sim.state in (TraceState.READY, TraceState.FAILED), (sim.name, sim.state)
        if sim.state == TraceState.READY:
            assert (sim.complete, sim.stopped) == (False, "killed")
            end = int(sim.name[3:]) * 4096 * 8 + 4096
            cycles = expected_cycles(log[:end])
            for row in SimulatedKernel.objects.filter(simulation=sim):
                assert row.sim_cycles == cycles.get(row.uid)
        else:
            assert sim.error


@pytest.mark.django_db
def test_a_trace_driven_log_whose_kernelslist_skips_launches_pairs_uid_k_with_the_right_kernel(s3, upload):
    """Only some launches traced (the kernelslist names kernels 3, 5 and 9 of 10): uid 1 is
    kernel-3, not launch 1. The halUW log with its trace files renamed so."""
    log = real_log("halUW__benchmark_1_stream_clean.log")
    renamed = {1: 3, 2: 5, 3: 9, 4: 10}
    log = re.sub(
        rb"traces/kernel-(\d+)\.traceg", lambda m: b"traces/kernel-%d.traceg" % renamed[int(m[1])], log
    )
    _, launches = spec_of(log)
    assert [(uid, kernel_id) for uid, kernel_id, _ in launches] == [(1, 3), (2, 5), (3, 9), (4, 10)]
    names = {kernel_id: name for _, kernel_id, name in launches}
    everything = [(0, kernel_id, names.get(kernel_id, "_Z7untracedv")) for kernel_id in range(1, 11)]
    upload("run", trace_files(None, everything), metadata={"status": "ok"})
    upload_simulation(s3, "run", "skips", log)
    passes.poll_bucket()
    sim = simulation("run", "skips")
    assert sim.state == TraceState.READY, sim.error
    cycles = expected_cycles(log)
    stored = list(
        SimulatedKernel.objects.filter(simulation=sim)
        .order_by("kernel_id")
        .values_list("uid", "kernel_id", "sim_cycles")
    )
    assert stored == [(uid, kernel_id, cycles[uid]) for uid, kernel_id in [(1, 3), (2, 5), (3, 9), (4, 10)]]
