"""Simulations beside their traces, end to end: uploaded to moto's S3 server, ingested by a
pass, paired with the trace's launches.

The logs here are real (shared_fixture("real-sim-logs")) or cut from real ones; the traces are made
from each log's own kernel list, so that every expected pair and cycle count is read off the
log's text by the test itself, never by the code under test.
"""

import gzip
import json
import lzma
import re

import pytest

from ingest import passes
from simulations.models import SimulatedKernel, Simulation
from tests.helpers import PREFIX, TEST_BUCKET
from tests.ingest.support import (
    OK_MARKER,
    hal_trace,
    headers_of,
    launches_of,
    real_log,
    simulation,
    trace_of,
    upload_simulation,
)
from traces.models import Trace, TraceState


def pairs(sim: Simulation) -> list[tuple]:
    return list(
        SimulatedKernel.objects.filter(simulation=sim)
        .order_by("context", "kernel_id")
        .values_list("kernel_id", "uid", "sim_cycles", "overlapped")
    )


# --- An independent reading of a real log -------------------------------------------------

BLOCK = re.compile(
    rb"^kernel_name = .*\n^kernel_launch_uid = ([0-9 ]*)\n^gpu_sim_cycle = (\d+)\n", re.MULTILINE
)


def blocks_of(log: bytes) -> list[tuple[list[int], int]]:
    """Each stat block's uids and gpu_sim_cycle, straight from the text."""
    return [([int(u) for u in m[1].split()], int(m[2])) for m in BLOCK.finditer(log)]


def own_cycles(log: bytes) -> dict[int, int | None]:
    """uid -> its block's cycles when exactly one block lists it alone, else None (overlapped)."""
    listed: dict[int, list] = {}
    for uids, cycles in blocks_of(log):
        for uid in uids:
            listed.setdefault(uid, []).append(cycles if len(uids) == 1 else None)
    return {uid: found[0] if len(found) == 1 else None for uid, found in listed.items()}


# --- The halUW log: trace-driven, two streams, one block listing two uids -------------------


@pytest.fixture
def hal_log() -> bytes:
    return real_log("halUW__benchmark_1_stream_clean.log")


@pytest.mark.django_db
def test_a_trace_driven_log_pairs_uid_k_with_the_kernel_its_kth_header_names(s3, upload, hal_log):
    measured = {1: 700, 2: 400, 3: 650, 4: 500}
    upload("hal", hal_trace(hal_log, measured), metadata={"status": "ok"})
    upload_simulation(s3, "hal", "titanv", hal_log)
    result = passes.poll_bucket()

    sim = simulation("hal", "titanv")
    assert sim.state == TraceState.READY, sim.error
    cycles = own_cycles(hal_log)
    headers = headers_of(hal_log)
    expected = sorted(
        (kernel_id, uid, cycles[uid], cycles[uid] is None) for uid, kernel_id in enumerate(headers, 1)
    )
    assert pairs(sim) == expected
    assert (sim.complete, sim.stopped) == (True, None)
    assert sim.core_clock_mhz == 1200.0  # -gpgpu_clock_domains 1200.0:...
    assert sim.simulator_build.startswith("accelsim-commit-")
    assert sim.kernels_simulated == 4
    # Overlapped (uids 1 and 3 in one block) are not compared; 2 and 4 are.
    assert sim.kernels_compared == 2
    by_kernel = {row.kernel_id: row for row in SimulatedKernel.objects.filter(simulation=sim)}
    assert by_kernel[2].sim_ns == pytest.approx(cycles[2] * 1000 / 1200.0)
    assert by_kernel[2].measured_ns == 400
    assert any(change.name == "titanv" for change in result.simulation_changes)


@pytest.mark.django_db
def test_a_simulation_never_changes_its_trace(s3, upload, hal_log, api):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    passes.poll_bucket()
    before = Trace.objects.get(pk="hal")
    first = api.get("/api/traces/hal")
    upload_simulation(s3, "hal", "titanv", hal_log)
    passes.poll_bucket(trace_id="hal")
    assert simulation("hal", "titanv").state == TraceState.READY
    after = Trace.objects.get(pk="hal")
    assert (after.updated_at, after.files, after.state, after.kernel_count, after.parsed_fingerprint) == (
        before.updated_at,
        before.files,
        before.state,
        before.kernel_count,
        before.parsed_fingerprint,
    )
    again = api.get("/api/traces/hal")
    assert again["ETag"] == first["ETag"]
    assert again.content == first.content


@pytest.mark.django_db
def test_a_simulation_waits_for_its_marker_then_for_its_trace(s3, upload, hal_log):
    upload("hal", hal_trace(hal_log), metadata=None)  # the trace still uploading
    upload_simulation(s3, "hal", "titanv", hal_log, marker=None)
    passes.poll_bucket()
    assert simulation("hal", "titanv").state == TraceState.UPLOADING
    upload_simulation(s3, "hal", "titanv", hal_log)  # the marker lands; the trace is not ready
    passes.poll_bucket()
    assert simulation("hal", "titanv").state == TraceState.UPLOADING
    upload("hal", {}, metadata={"status": "ok"})  # the trace completes
    Trace.objects.filter(pk="hal").update(recheck_after=None)  # a folder without metadata.json: due
    passes.poll_bucket()
    assert Trace.objects.get(pk="hal").state == TraceState.READY
    assert simulation("hal", "titanv").state == TraceState.READY


@pytest.mark.django_db
def test_a_simulation_landing_beside_a_ready_trace_is_read_at_its_ready_recheck(
    s3, upload, hal_log, settings
):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    passes.poll_bucket()
    upload_simulation(s3, "hal", "titanv", hal_log)
    Trace.objects.filter(pk="hal").update(recheck_after=None)  # its recheck is due
    passes.poll_bucket()
    assert simulation("hal", "titanv").state == TraceState.READY


@pytest.mark.django_db
def test_ingest_traces_trace_reads_a_runs_simulations_at_once(s3, upload, hal_log):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    passes.poll_bucket()
    upload_simulation(s3, "hal", "titanv", hal_log)
    passes.poll_bucket(trace_id="hal")
    assert simulation("hal", "titanv").state == TraceState.READY


@pytest.mark.django_db
def test_the_simulation_is_read_again_when_its_trace_is_parsed_again(s3, upload, hal_log):
    upload("hal", hal_trace(hal_log, {1: 700, 2: 400, 3: 650, 4: 500}), metadata={"status": "ok"})
    upload_simulation(s3, "hal", "titanv", hal_log)
    passes.poll_bucket()
    assert SimulatedKernel.objects.get(simulation=simulation("hal", "titanv"), kernel_id=2).measured_ns == 400
    upload("hal", hal_trace(hal_log, {1: 700, 2: 800, 3: 650, 4: 500}), metadata={"status": "ok"})
    passes.poll_bucket(trace_id="hal")
    assert SimulatedKernel.objects.get(simulation=simulation("hal", "titanv"), kernel_id=2).measured_ns == 800


@pytest.mark.django_db
def test_a_second_pass_with_nothing_new_reads_nothing(s3, upload, hal_log, s3_log):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    upload_simulation(s3, "hal", "titanv", hal_log)
    passes.poll_bucket()
    before = len(s3_log("GET", "/simulations/titanv/sim.log"))
    result = passes.poll_bucket()
    assert result.simulation_changes == []
    assert len(s3_log("GET", "/simulations/titanv/sim.log")) == before


@pytest.mark.django_db
@pytest.mark.parametrize("compress", ["gz", "xz"])
def test_a_compressed_log_reads_as_the_plain_one(s3, upload, hal_log, compress):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    body = gzip.compress(hal_log) if compress == "gz" else lzma.compress(hal_log)
    upload_simulation(s3, "hal", "plain", hal_log)
    upload_simulation(s3, "hal", "packed", body, log_name=f"sim.log.{compress}")
    passes.poll_bucket()
    assert pairs(simulation("hal", "packed")) == pairs(simulation("hal", "plain"))


# --- Failures, each with a message naming what is wrong -------------------------------------


@pytest.mark.django_db
def test_a_wrong_kernel_name_fails_the_simulation_naming_the_uid_the_file_and_both_names(s3, upload, hal_log):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    wrong = hal_log.replace(
        b"launching kernel name: _Z5scaleifPf uid: 2", b"launching kernel name: _Z5wrongv uid: 2"
    )
    upload_simulation(s3, "hal", "wrong", wrong)
    passes.poll_bucket()
    sim = simulation("hal", "wrong")
    assert sim.state == TraceState.FAILED
    for part in ("uid 2", "kernel-2.traceg", "_Z5wrongv", "_Z5scaleifPf"):
        assert part in sim.error
    assert not SimulatedKernel.objects.filter(simulation=sim).exists()


@pytest.mark.django_db
def test_a_header_naming_a_launch_the_trace_lacks_fails(s3, upload, hal_log):
    names = launches_of(hal_log)
    upload("hal", trace_of([(1, names[1]), (2, names[2]), (3, names[3])]), metadata={"status": "ok"})
    upload_simulation(s3, "hal", "titanv", hal_log)
    passes.poll_bucket()
    sim = simulation("hal", "titanv")
    assert sim.state == TraceState.FAILED
    assert "uid 4" in sim.error and "kernel id 4" in sim.error


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        (b"not json", "not valid JSON"),
        (b"[1]", "must be a JSON object"),
        (b'{"simulator": "accel-sim"}', '"status" must be "ok" or "failed"'),
        (b'{"status": "ok", "core_clock_mz": 1}', "unknown key 'core_clock_mz'"),
        (b'{"status": "ok", "core_clock_mhz": -5}', '"core_clock_mhz" must be a number'),
        (b'{"status": "ok", "core_clock_mhz": NaN}', "NaN is not a number JSON allows"),
        (b'{"status": "ok", "config": "a\\u0000b"}', '"config" holds'),
    ],
)
def test_a_bad_marker_fails_saying_what_is_wrong(s3, upload, hal_log, marker, expected):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    folder = f"{PREFIX}hal/simulations/bad/"
    s3.put_object(Bucket=TEST_BUCKET, Key=folder + "sim.log", Body=hal_log)
    s3.put_object(Bucket=TEST_BUCKET, Key=folder + "simulation.json", Body=marker)
    passes.poll_bucket()
    sim = simulation("hal", "bad")
    assert sim.state == TraceState.FAILED
    assert expected in sim.error


@pytest.mark.django_db
def test_a_simulation_marked_failed_is_failed_with_its_notes(s3, upload, hal_log):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    upload_simulation(s3, "hal", "oom", hal_log, marker={"status": "failed", "notes": "out of memory"})
    passes.poll_bucket()
    sim = simulation("hal", "oom")
    assert sim.state == TraceState.FAILED
    assert "out of memory" in sim.error


@pytest.mark.django_db
def test_a_folder_without_a_log_fails(s3, upload, hal_log):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    s3.put_object(
        Bucket=TEST_BUCKET,
        Key=f"{PREFIX}hal/simulations/nolog/simulation.json",
        Body=json.dumps(OK_MARKER).encode(),
    )
    passes.poll_bucket()
    assert "no log" in simulation("hal", "nolog").error


@pytest.mark.django_db
def test_a_bad_folder_name_fails_naming_the_rule(s3, upload, hal_log):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    upload_simulation(s3, "hal", "with space", hal_log)
    passes.poll_bucket()
    sim = simulation("hal", "with space")
    assert sim.state == TraceState.FAILED
    assert "letters, digits" in sim.error


@pytest.mark.django_db
def test_a_log_over_the_size_limit_fails(s3, upload, hal_log, settings):
    settings.CASCADE_MAX_SIM_LOG_BYTES = 100_000
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    upload_simulation(s3, "hal", "big", gzip.compress(hal_log), log_name="sim.log.gz")
    passes.poll_bucket()
    sim = simulation("hal", "big")
    assert sim.state == TraceState.FAILED
    assert "CASCADE_MAX_SIM_LOG_BYTES" in sim.error


@pytest.mark.django_db
def test_binary_junk_as_a_gzip_log_fails_as_not_gzip(s3, upload, hal_log):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    upload_simulation(s3, "hal", "junk", b"\x1f\x8b" + bytes(range(256)) * 10, log_name="sim.log.gz")
    passes.poll_bucket()
    sim = simulation("hal", "junk")
    assert sim.state == TraceState.FAILED
    assert "not a valid gzip file" in sim.error


@pytest.mark.django_db
def test_a_simulation_of_a_failed_trace_fails_saying_so_and_is_read_once_the_trace_is_fixed(
    s3, upload, hal_log
):
    upload("hal", hal_trace(hal_log), metadata={"status": "failed", "error": "profiler crashed"})
    upload_simulation(s3, "hal", "titanv", hal_log)
    passes.poll_bucket()
    sim = simulation("hal", "titanv")
    assert sim.state == TraceState.FAILED
    assert "its trace failed" in sim.error
    upload("hal", {}, metadata={"status": "ok"})
    passes.poll_bucket(trace_id="hal")
    assert simulation("hal", "titanv").state == TraceState.READY


@pytest.mark.django_db
def test_a_deleted_simulation_folder_deletes_the_simulation(s3, upload, hal_log):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    upload_simulation(s3, "hal", "titanv", hal_log)
    passes.poll_bucket()
    for key in ("sim.log", "simulation.json"):
        s3.delete_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}hal/simulations/titanv/{key}")
    passes.poll_bucket(trace_id="hal")
    assert not Simulation.objects.filter(trace_id="hal").exists()


@pytest.mark.django_db
def test_deleting_a_trace_deletes_its_simulations_and_their_pairs(s3, upload, hal_log):
    from traces.services import trace_delete

    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    upload_simulation(s3, "hal", "titanv", hal_log)
    passes.poll_bucket()
    assert SimulatedKernel.objects.exists()
    trace_delete("hal")
    assert not Simulation.objects.exists()
    assert not SimulatedKernel.objects.exists()


# --- Hostile logs: failed with a clear error, or a documented partial result; never stuck ----


@pytest.mark.django_db
def test_a_million_character_line_is_read_past_and_a_longer_one_than_the_limit_fails(s3, upload, hal_log):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    cut = hal_log.index(b"Header info")
    upload_simulation(s3, "hal", "long", hal_log[:cut] + b"x" * 1_000_000 + b"\n" + hal_log[cut:])
    upload_simulation(s3, "hal", "plain", hal_log)
    upload_simulation(s3, "hal", "too-long", hal_log[:cut] + b"x" * 2_000_000 + b"\n" + hal_log[cut:])
    passes.poll_bucket()
    assert simulation("hal", "long").state == TraceState.READY
    assert pairs(simulation("hal", "long")) == pairs(simulation("hal", "plain"))
    failed = simulation("hal", "too-long")
    assert failed.state == TraceState.FAILED
    assert "line" in failed.error


@pytest.mark.django_db
def test_binary_junk_as_a_plain_log_fails_killed_with_nothing_simulated(s3, upload, hal_log):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    upload_simulation(s3, "hal", "junk", bytes(range(256)) * 4096)
    passes.poll_bucket()
    sim = simulation("hal", "junk")
    assert (sim.state, sim.stopped, sim.kernels_simulated) == (TraceState.FAILED, "killed", 0)
    assert sim.error.startswith("the log simulated no kernel")


@pytest.mark.django_db
def test_a_ptx_log_with_more_kernels_than_the_trace_has_launches_fails_naming_the_uid(s3, upload):
    log = real_log("bcpark__rodinia_lud_output.txt")
    names = [m.decode() for m in re.findall(rb"pushing kernel '([^']*)'", log)]
    upload("lud", trace_of([(k, names[k - 1]) for k in range(1, 11)]), metadata={"status": "ok"})
    upload_simulation(s3, "lud", "ptx", log)
    passes.poll_bucket()
    sim = simulation("lud", "ptx")
    assert sim.state == TraceState.FAILED
    assert "uid 11" in sim.error and "only 10 launches" in sim.error


@pytest.mark.django_db
def test_the_runs_total_is_compared_with_every_simulated_launchs_measured_time(s3, upload, hal_log):
    measured = {1: 700, 2: 400, 3: 650, 4: 500}
    upload("hal", hal_trace(hal_log, measured), metadata={"status": "ok"})
    upload_simulation(s3, "hal", "titanv", hal_log)
    passes.poll_bucket()
    metrics = simulation("hal", "titanv").metrics
    total_cycles = int(re.findall(rb"^gpu_tot_sim_cycle = (\d+)", hal_log, re.M)[-1])
    assert metrics["run_sim_ns"] == pytest.approx(total_cycles * 1000 / 1200.0)
    assert metrics["run_measured_ns"] == sum(measured.values())
    expected = (total_cycles * 1000 / 1200.0 - 2250) / 2250 * 100
    assert metrics["run_error"] == pytest.approx(expected)


@pytest.mark.django_db
def test_a_log_whose_core_clock_is_zero_fails_saying_so(s3, upload, hal_log):
    upload("hal", hal_trace(hal_log), metadata={"status": "ok"})
    upload_simulation(
        s3, "hal", "zero", hal_log.replace(b"-gpgpu_clock_domains 1200.0:", b"-gpgpu_clock_domains 0.0:")
    )
    passes.poll_bucket()
    sim = simulation("hal", "zero")
    assert sim.state == TraceState.FAILED
    assert "core clock" in sim.error
