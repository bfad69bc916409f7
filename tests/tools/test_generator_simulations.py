"""Simulations of generated traces: logs in Accel-Sim's format that the simulator-log reader pairs right.

Every check reads the generated log with `simulations.simlog` (the reader Cascade ingests with) and
compares what it finds with what the run folder says on its own: its kernelslists (which trace
files, in which order), the trace files' headers (which kernel), `timing.csv` (measured times,
and the order the contexts ran in) and `timeline.json` (which launches are prefill).
"""

import csv
import gzip
import json
import lzma
import re
import statistics
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from ingest import bucket
from simulations.simlog import read_sim_log_chunks
from tools.generator import RunSpec, write_run
from tools.samples import SAMPLES, SIMULATIONS
from tools.simulation import SimSpec, write_simulation
from tools.upload import upload_run_folder

REPO = Path(__file__).resolve().parents[2]
# Each sample simulation: (run, its spec). The core clock domains of their configs as GPGPU-Sim's
# tested-cfgs/<config>/gpgpusim.config sets them (dev 667834c).
SAMPLE_SIMULATIONS = [(run_id, sim) for run_id, sims in SIMULATIONS.items() for sim in sims]
CLOCK_DOMAINS = {"SM75_RTX2060": "1365:1365:1365:3500.5", "SM86_RTX3070": "1132:1132:1132:3500.5"}
# A run with one context; its kernelslist names 6 launches: those of at most 256 warps (the
# generator traces only kernels small enough to hold whole) of the first decoder block and the
# eager tail of the prefill step, and of the eager tail of a decode step.
# Traced on an RTX 2060, so that its simulations' builds (Accel-Sim dev before 2.0) have its config,
# SM75_RTX2060: no build tools/simulation.py names runs SASS 90.
TURING = {
    "source_gpu": "NVIDIA GeForce RTX 2060",
    "trace_gpu_arch": "sm_75",
    "suggested_sim_config": "SM75_RTX2060",
}
TURING_OPTIONS = ["--source-gpu", TURING["source_gpu"], "--arch", "sm_75", "--sim-config", "SM75_RTX2060"]
SMALL = RunSpec(kernels=360, contexts=1, seed=3, layers=("step 0 (prefill)", "step 2 (decode)"), **TURING)


def read_log(folder: Path):
    (path,) = [p for p in folder.iterdir() if p.name.startswith("sim.log")]
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return read_sim_log_chunks([data[i : i + 65536] for i in range(0, len(data), 65536)]), data


def kernelslist_order(run: Path) -> list[tuple[str | None, int]]:
    """(ctx, kernel id) of every trace file the kernelslists name; contexts in the order they ran."""
    first_start: dict[str, int] = {}
    with open(run / "timing.csv") as handle:
        for row in csv.DictReader(handle):
            first_start.setdefault(row["ctx"], int(row["start_ns"]))
    order = []
    lists = sorted(run.glob("traces/kernelslist*"), key=lambda p: first_start[p.name.partition("_ctx_")[2]])
    for path in lists:
        for line in path.read_text().splitlines():
            match = re.fullmatch(r"kernel-(\d+)-ctx_(0x[0-9a-f]+)\.trace\.xz", line)
            if match:
                order.append((match[2], int(match[1])))
    return order


def header_name(run: Path, ctx: str, kernel_id: int) -> str:
    text = lzma.decompress((run / "traces" / f"kernel-{kernel_id}-ctx_{ctx}.trace.xz").read_bytes()).decode()
    return re.search(r"^-kernel name = (.*)$", text, re.M)[1]


def measured(run: Path) -> dict[tuple[str, int], int]:
    with open(run / "timing.csv") as handle:
        return {
            (row["ctx"], int(row["kernel_id"])): int(row["duration_ns"]) for row in csv.DictReader(handle)
        }


def prefill_launches(run: Path) -> set[tuple[str, int]]:
    steps = json.loads((run / "timeline.json").read_text())["steps"]
    return {
        (step["ctx"], kernel_id)
        for step in steps
        if step["phase"] == "prefill"
        for kernel_id in range(step["first_kernel_id"], step["last_kernel_id"] + 1)
    }


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("runs") / "small"
    write_run(run, SMALL)
    return run


def simulate(run: Path, **options) -> tuple[object, bytes, object]:
    written = write_simulation(run, SMALL, SimSpec(name=options.pop("name", "sim"), **options))
    log, data = read_log(written.folder)
    return log, data, written


# --- The shipped samples ---------------------------------------------------------------------------


@pytest.mark.parametrize(("run_id", "sim"), SAMPLE_SIMULATIONS, ids=lambda value: getattr(value, "name", ""))
def test_each_uid_of_a_sample_simulation_is_the_kth_kernelslist_entry(run_id, sim):
    run = REPO / "samples" / run_id
    folder = run / "simulations" / sim.name
    # No gpgpusim.config: a file of ours must not pose as one of the simulator's tested configs.
    assert [p.name for p in sorted(folder.iterdir())] == ["sim.log.gz", "simulation.json"]
    log, data = read_log(folder)
    order = kernelslist_order(run)
    assert len(order) == SAMPLES[run_id].max_traced
    assert log.headers == len(log.kernels) == log.blocks == len(order)
    assert (log.stopped, log.complete, log.interrupted) == (None, True, [])
    for uid, (ctx, kernel_id) in enumerate(order, start=1):
        kernel = log.kernels[uid]
        assert (kernel.ctx, kernel.kernel_id) == (ctx, kernel_id), uid
        assert kernel.name == header_name(run, ctx, kernel_id)
        assert kernel.trace_file.endswith(f"/traces/kernel-{kernel_id}-ctx_{ctx}.traceg")
        assert kernel.sim_cycles > 0 and not kernel.overlapped and kernel.stream == 0
    # The tracer's window skips launches: uid k is not kernel id k.
    assert log.kernels[1].kernel_id == 138
    # Each block's cycles are its own kernel's: the run's total is their sum.
    assert log.total_cycles == sum(kernel.sim_cycles for kernel in log.kernels.values())
    marker = json.loads((folder / "simulation.json").read_text())
    assert marker == {
        "status": "ok",
        "simulator": "accel-sim",
        "config": sim.config,
        "core_clock_mhz": log.core_clock_mhz,
        "notes": sim.notes,
    }
    assert sim.config == json.loads((run / "metadata.json").read_text())["suggested_sim_config"]
    domains = CLOCK_DOMAINS[sim.config]
    assert log.core_clock_mhz == float(domains.split(":")[0])
    assert re.search(rb"\n-gpgpu_clock_domains +" + re.escape(domains.encode()) + rb" ", data)
    assert re.fullmatch(r"accelsim-commit-[0-9a-f]{40}_modified_0\.0", log.accelsim_build)
    assert log.gpgpusim_version == "4.2.0"
    assert re.fullmatch(r"gpgpu-sim_git-commit-[0-9a-f]{40}_modified_0\.0", log.gpgpusim_build)


def errors(folder: Path, run: Path) -> dict[str, list[float]]:
    """Signed errors (y - x) / x in %, Accel-Sim's x = measured ns and y = cycles at the clock."""
    log, _ = read_log(folder)
    times, prefill = measured(run), prefill_launches(run)
    by_phase: dict[str, list[float]] = {"prefill": [], "decode": []}
    for kernel in log.kernels.values():
        x = times[(kernel.ctx, kernel.kernel_id)]
        y = kernel.sim_cycles * 1000 / log.core_clock_mhz
        by_phase["prefill" if (kernel.ctx, kernel.kernel_id) in prefill else "decode"].append(
            (y - x) / x * 100
        )
    return by_phase


@pytest.mark.parametrize("run_id", sorted(SIMULATIONS))
def test_the_two_sample_builds_err_plausibly_differently_and_prefill_unlike_decode(run_id):
    run = REPO / "samples" / run_id
    closer, further = (errors(run / "simulations" / sim.name, run) for sim in SIMULATIONS[run_id])
    traced = len(kernelslist_order(run))
    for by_phase, low, high in ((closer, 10, 20), (further, 25, 40)):
        assert len(by_phase["prefill"]) == 5 and len(by_phase["decode"]) == traced - 5
        mape = statistics.mean(abs(e) for e in by_phase["prefill"] + by_phase["decode"])
        assert low <= mape <= high
        # Prefill kernels run fast in the simulator and decode kernels slow, each build its own way.
        assert statistics.mean(by_phase["prefill"]) < 0 < statistics.mean(by_phase["decode"])
    assert closer != further


@pytest.mark.parametrize("run_id", sorted(SIMULATIONS))
def test_load_samples_uploads_each_simulation_after_its_trace_and_its_marker_last(
    s3, db, monkeypatch, run_id
):
    order = []
    monkeypatch.setattr(bucket, "put_object", lambda key, body: order.append(key))
    monkeypatch.setattr(bucket, "upload_file", lambda path, key: order.append(key))
    call_command("load_samples")
    prefix = f"accelsim-traces/{run_id}/"
    sample = [key.removeprefix(prefix) for key in order if key.startswith(prefix)]
    for sim in SIMULATIONS[run_id]:
        ours = [i for i, key in enumerate(sample) if key.startswith(f"simulations/{sim.name}/")]
        assert [sample[i] for i in ours] == [
            f"simulations/{sim.name}/sim.log.gz",
            f"simulations/{sim.name}/simulation.json",
        ]
        assert sample.index("metadata.json") < ours[0]


# --- Variants ----------------------------------------------------------------------------------


def test_a_small_run_pairs_and_reads_back_every_cycle(small_run):
    log, data, written = simulate(small_run)
    order = kernelslist_order(small_run)
    assert [(k.ctx, k.kernel_id) for k in log.in_uid_order()] == order
    assert [k.kernel_id for k in log.in_uid_order()] == [138, 143, 148, 298, 303, 308]
    assert [(k.uid, k.sim_cycles, k.sim_insn) for k in log.in_uid_order()] == [
        (k.uid, k.sim_cycles, k.sim_insn) for k in written.launches
    ]
    times = measured(small_run)
    assert [k.measured_ns for k in written.launches] == [times[key] for key in order]
    # Cycles are the measured time at the core clock, give or take the build's error.
    for kernel in log.in_uid_order():
        simulated_ns = kernel.sim_cycles * 1000 / log.core_clock_mhz
        assert 0.5 < simulated_ns / times[(kernel.ctx, kernel.kernel_id)] < 1.6
    assert data.endswith(b"GPGPU-Sim: *** simulation thread exiting ***\nGPGPU-Sim: *** exit detected ***\n")
    assert log.stopped is None and log.total_cycles == written.total_cycles


def test_a_run_stopped_at_the_cycle_limit_names_the_interrupted_kernel(small_run):
    full, _, _ = simulate(small_run, name="full")
    cycles = [k.sim_cycles for k in full.in_uid_order()]
    limit = sum(cycles[:5]) + cycles[5] // 2
    log, data, written = simulate(small_run, name="limited", max_cycle=limit)
    assert (log.stopped, log.complete, log.interrupted) == ("max_cycles", False, [6])
    assert [k.sim_cycles for k in log.in_uid_order()] == [*cycles[:5], None]
    assert log.total_cycles == limit == written.total_cycles and sorted(log.kernels) == [1, 2, 3, 4, 5, 6]
    # Accel-Sim dev: a block for the interrupted kernel up to the limit, then the break line.
    assert f"gpu_sim_cycle = {limit - sum(cycles[:5])}\n".encode() in data
    assert data.endswith(
        b"GPGPU-Sim: ** break due to reaching the maximum cycles (or instructions) **\n"
        b"GPGPU-Sim: *** simulation thread exiting ***\nGPGPU-Sim: *** exit detected ***\n"
    )
    assert f"-gpgpu_max_cycle {limit}\n" in (written.folder / "gpgpusim.config").read_text()
    first, first_data, _ = simulate(small_run, name="first", max_cycle=1000)
    assert first.interrupted == [1] and first.total_cycles == 1000 and b"gpu_sim_cycle = 1000\n" in first_data


@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.9])
def test_a_killed_run_ends_mid_line_at_a_4_kib_boundary(small_run, fraction):
    full, full_data, _ = simulate(small_run, name="full")
    log, data, written = simulate(small_run, name="killed", killed=fraction, compress=True)
    assert len(data) % 4096 == 0 and not data.endswith(b"\n") and full_data.startswith(data)
    assert abs(len(data) - fraction * len(full_data)) < 4096 * 4
    assert (log.stopped, log.complete) == ("killed", False)
    complete = data.count(b"\ngpgpu_simulation_time = ")
    assert 0 < complete < full.blocks and log.blocks == complete
    assert [k.sim_cycles for k in log.in_uid_order()][:complete] == [
        k.sim_cycles for k in full.in_uid_order()
    ][:complete]
    assert [k.uid for k in written.launches] == list(range(1, complete + 1))
    assert log.total_cycles == written.total_cycles


def test_a_wrong_kernel_name_at_one_uid(small_run):
    log, _, written = simulate(small_run, name="wrong", wrong_name_uid=3)
    order = kernelslist_order(small_run)
    names = [header_name(small_run, ctx, kernel_id) for ctx, kernel_id in order]
    read = [k.name for k in log.in_uid_order()]
    assert read[2] != names[2] and read[2] in names
    assert read[:2] + read[3:] == names[:2] + names[3:]
    assert written.launches[2].name == read[2]


def test_two_concurrent_kernels_share_one_block(small_run):
    log, data, _ = simulate(small_run, name="concurrent", concurrent_uid=4)
    assert b"\nkernel_launch_uid = 4 5 \n" in data and b"\n-gpgpu_concurrent_kernel_sm" in data
    overlapped = [k.uid for k in log.in_uid_order() if k.overlapped]
    assert overlapped == [4, 5] and log.kernels[4].sim_cycles is None and log.kernels[5].stream == 1
    assert all(k.sim_cycles for k in log.in_uid_order() if k.uid not in (4, 5))
    assert log.blocks == len(log.kernels) - 1 and log.stopped is None


def test_a_legacy_run_names_kernel_n_traceg_without_a_context(tmp_path):
    spec = RunSpec(kernels=120, format="legacy", seed=2, **TURING)
    write_run(tmp_path / "legacy", spec)
    written = write_simulation(tmp_path / "legacy", spec, SimSpec())
    log, _ = read_log(written.folder)
    listed = [
        int(line.split("-")[1].split(".")[0])
        for line in (tmp_path / "legacy" / "traces" / "kernelslist").read_text().splitlines()
        if line.startswith("kernel-")
    ]
    assert [(k.ctx, k.kernel_id) for k in log.in_uid_order()] == [(None, n) for n in listed]
    assert all(k.trace_file.endswith(f"/kernel-{k.kernel_id}.traceg") for k in log.in_uid_order())


def test_no_build_here_writes_a_simulation_it_could_not_have_run(tmp_path):
    """Accel-Sim before 2.0 (every build tools/simulation.py names) has no Hopper config and no
    opcode map for SASS 90 (its simulator stops: `unsupported binary version: 90`)."""
    h100 = RunSpec(kernels=120, seed=2)  # the default run: an H100's, SASS 90, SM90_H100 suggested
    assert (h100.trace_gpu_arch, h100.suggested_sim_config) == ("sm_90", "SM90_H100")
    write_run(tmp_path / "h100", h100)
    write_run(tmp_path / "turing", SMALL)
    for run, spec, config in ((tmp_path / "h100", h100, None), (tmp_path / "turing", SMALL, "SM90_H100")):
        for build in ("dev-e5653f0", "dev-618c2ef"):
            with pytest.raises(
                ValueError, match=f"build {build} is Accel-Sim before 2.0, which runs no SASS 90"
            ):
                write_simulation(run, spec, SimSpec(build=build, config=config))
        assert not (run / "simulations").exists()
    with pytest.raises(CommandError, match="could not have simulated this sm_90 trace on SM90_H100"):
        call_command(
            "generate_trace", "--out", str(tmp_path / "cli"), "--kernels", "120", "--simulation", "s"
        )
    assert not (tmp_path / "cli").exists()


def test_a_simulation_name_must_be_a_folder_name():
    for name in ("", "..", "a/b", "x" * 101):
        with pytest.raises(ValueError, match="a simulation's name"):
            SimSpec(name=name)


# --- The command -----------------------------------------------------------------------------------


def test_generate_trace_writes_a_simulation_and_adds_another_to_the_same_run(tmp_path, capsys):
    run = tmp_path / "cli-run"
    options = [
        "--out",
        str(run),
        "--kernels",
        "360",
        "--layers",
        "step 0 (prefill),step 2 (decode)",
        *TURING_OPTIONS,
    ]
    call_command("generate_trace", *options, "--simulation", "a", "--simulation-gzip")
    call_command("generate_trace", *options, "--simulation", "b", "--simulation-build", "dev-618c2ef")
    assert sorted(p.name for p in (run / "simulations" / "a").iterdir()) == [
        "gpgpusim.config",
        "sim.log.gz",
        "simulation.json",
    ]
    first, _ = read_log(run / "simulations" / "a")
    second, _ = read_log(run / "simulations" / "b")
    assert [(k.ctx, k.kernel_id) for k in first.in_uid_order()] == kernelslist_order(run)
    assert [(k.ctx, k.kernel_id) for k in second.in_uid_order()] == kernelslist_order(run)
    assert first.accelsim_build != second.accelsim_build and first.total_cycles != second.total_cycles
    assert "10 kernels simulated" in capsys.readouterr().out
    with pytest.raises(CommandError, match="is not the run these options generate"):
        call_command("generate_trace", *options, "--seed", "9", "--simulation", "c")
    with pytest.raises(CommandError, match="exists: give another --simulation name"):
        call_command("generate_trace", *options, "--simulation", "a")


def test_generate_trace_simulation_variants_from_the_command_line(tmp_path):
    base = ["--kernels", "360", "--layers", "step 0 (prefill),step 2 (decode)", *TURING_OPTIONS]
    call_command(
        "generate_trace",
        "--out",
        str(tmp_path / "k"),
        *base,
        "--simulation",
        "s",
        "--simulation-killed",
        "0.5",
    )
    call_command(
        "generate_trace",
        "--out",
        str(tmp_path / "m"),
        *base,
        "--simulation",
        "s",
        "--simulation-max-cycle",
        "5000",
    )
    assert read_log(tmp_path / "k" / "simulations" / "s")[0].stopped == "killed"
    assert read_log(tmp_path / "m" / "simulations" / "s")[0].stopped == "max_cycles"
    with pytest.raises(CommandError, match="killed is a fraction"):
        call_command(
            "generate_trace", "--out", str(tmp_path / "x"), "--simulation", "s", "--simulation-killed", "2"
        )


def test_upload_run_puts_the_simulation_after_the_trace(s3, db, monkeypatch, tmp_path):
    order = []
    monkeypatch.setattr(bucket, "put_object", lambda key, body: order.append(key))
    monkeypatch.setattr(bucket, "upload_file", lambda path, key: order.append(key))
    write_run(tmp_path / "run-1", SMALL)
    write_simulation(tmp_path / "run-1", SMALL, SimSpec(name="b", with_config=False))
    write_simulation(tmp_path / "run-1", SMALL, SimSpec(name="a"))
    upload_run_folder(tmp_path / "run-1", "run-1", skip_unchanged=False)
    names = [key.removeprefix("accelsim-traces/run-1/") for key in order]
    assert names[-6:] == [
        "metadata.json",
        "simulations/a/gpgpusim.config",
        "simulations/a/sim.log",
        "simulations/a/simulation.json",
        "simulations/b/sim.log",
        "simulations/b/simulation.json",
    ]
