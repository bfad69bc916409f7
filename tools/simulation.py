"""A simulator run of a generated trace: the stdout Accel-Sim (trace-driven) would print for it.

`write_simulation` puts the folder `<run>/simulations/<name>/` next to a run that
`tools.generator.write_run` wrote: the simulator's stdout as `sim.log` (or `sim.log.gz`), the
`gpgpusim.config` it ran with, and last `simulation.json`, the marker Cascade waits for. The log
is what a real run of Accel-Sim's dev branch prints (../shared/docs/gpgpu-sim-output.md; the real
logs in tests/data/real-sim-logs/):

- the build lines, the option dump with `-gpgpu_clock_domains <core>:<icnt>:<l2>:<dram>`, the
  memory and clock lines;
- the run's kernelslists post-processed into one `kernelslist.g` (contexts in launch order): the
  memcpy commands, then per kernel its trace header (`Processing kernel .../kernel-N-ctx_0x....traceg`,
  the header lines the tracer wrote into the trace file, `Header info loaded for kernel command`),
  `launching kernel name: <name> uid: <k> cuda_stream_id: <s>`, `Destroy streams for kernel <k>`,
  then its stat block. With `-gpgpu_concurrent_kernel_sm 0` Accel-Sim's window holds one kernel,
  so headers, launches and blocks alternate, and uid k is the k-th header: the k-th traced launch,
  not kernel id k (the tracer's window skips launches).
- the stat block's headline numbers and cumulative counters as `gpu_print_stat` prints them, the
  L1D per core and L2 per bank cache lines, the shader, latency and interconnect counters, and the
  `gpgpu_simulation_time` footer; the per-channel DRAM matrices and memory-partition dumps of a
  real block are left out (they hold nothing Cascade reads, and would make the samples large);
- `GPGPU-Sim: *** simulation thread exiting ***` and `GPGPU-Sim: *** exit detected ***`.

A kernel's cycles are its measured time (the duration `timing.csv` holds for it) at the config's
core clock, times a deterministic error: per build a bias for prefill kernels, another for decode
kernels, and a per-kernel spread drawn from `Random(build, config, ctx, kernel id)`. The builds
below are real Accel-Sim and GPGPU-Sim commits; their errors here are made up, chosen so that one
is about 10-20% MAPE and the other 25-40%.

Variants, for tests and hostile cases: a run stopped at `-gpgpu_max_cycle` (Accel-Sim dev prints a
block for the interrupted kernel, then the break line, then the exit lines), a killed run (the log
cut at a 4 KiB boundary mid-line, as block-buffered stdout leaves it), a wrong kernel name at a uid
(a trace file from another run), and two concurrent kernels (one block listing both uids).
"""

import gzip
import json
import lzma
import random
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from tools.kernels import ARCH_SASS, platform_for
from tools.timing_files import kernel_duration
from tools.workload import Launch, RunSpec, launches, run_steps

LOG_NAME = "sim.log"
MARKER_NAME = "simulation.json"
CONFIG_NAME = "gpgpusim.config"
SIMULATION_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
BLOCK_SIZE = 4096  # stdout redirected to a file is written in blocks of this size
# Where Accel-Sim's run_simulations.py puts a job: sim_run_<cuda>/<app>/<args>/<config>/.
SIM_RUN_DIR = "/scratch/accel-sim-framework/sim_run_12.4/{run_id}/NO_ARGS/{config}"


@dataclass(frozen=True)
class SimBuild:
    """An Accel-Sim build, and how far its cycles are from the hardware (synthetic)."""

    accelsim: str  # what `Accel-Sim [build ...]` prints
    gpgpusim: str  # what GPGPU-Sim's banner prints in `[build ...]`
    prefill_bias: float  # mean of simulated/measured - 1 for prefill kernels
    decode_bias: float  # the same for decode kernels
    spread: float  # standard deviation of the per-kernel error around the bias


BUILDS: dict[str, SimBuild] = {
    # accel-sim-framework e5653f02 (the dev simulation loop printing cuda_stream_id) with
    # gpgpu-sim_distribution c6349f3f: about 10-20% MAPE here.
    "dev-e5653f0": SimBuild(
        accelsim="accelsim-commit-e5653f024d0013de8d41a13845201da86c5490a6_modified_0.0",
        gpgpusim="gpgpu-sim_git-commit-c6349f3f0bb3d049371219fb10514461fc0ffb22_modified_0.0",
        prefill_bias=-0.07,
        decode_bias=0.15,
        spread=0.07,
    ),
    # accel-sim-framework 618c2ef8 (SM90_H100's trace.config) with gpgpu-sim 0874995e: about
    # 25-40% MAPE here, prefill far too fast and decode far too slow.
    "dev-618c2ef": SimBuild(
        accelsim="accelsim-commit-618c2ef869fa6e4698ac7547bc9f967f8213cd45_modified_0.0",
        gpgpusim="gpgpu-sim_git-commit-0874995e8de6f60bb08d646b05020aa722a8562b_modified_0.0",
        prefill_bias=-0.36,
        decode_bias=0.27,
        spread=0.10,
    ),
}
DEFAULT_BUILD = "dev-e5653f0"


@dataclass(frozen=True)
class SimConfig:
    """The parts of an Accel-Sim tested config that the log shows."""

    name: str
    capability: int
    clusters: int
    mem_channels: int
    clock_domains: str  # core:icnt:l2:dram, MHz, as the config file writes it
    shmem_size: int
    dram_timing: str

    @property
    def core_clock_mhz(self) -> float:
        return float(self.clock_domains.split(":")[0])

    @property
    def clocks_mhz(self) -> list[float]:
        return [float(value) for value in self.clock_domains.split(":")]


CONFIGS: dict[str, SimConfig] = {
    "SM90_H100": SimConfig(
        "SM90_H100",
        90,
        132,
        80,
        "1755:1755:1755:2619",
        233472,
        "nbk=16:CCD=2:RRD=12:RCD=24:RAS=55:RP=24:RC=78:CL=24:WL=8:CDLR=10:WR=24:nbkgrp=4:CCDL=6:RTPL=4",
    ),
    # Two tested configs of GPGPU-Sim dev (667834c), their values as configs/tested-cfgs/ has them.
    "SM75_RTX2060": SimConfig(
        "SM75_RTX2060",
        75,
        30,
        12,
        "1365:1365:1365:3500.5",
        65536,
        "nbk=16:CCD=4:RRD=12:RCD=24:RAS=55:RP=24:RC=78:CL=24:WL=8:CDLR=10:WR=24:nbkgrp=4:CCDL=6:RTPL=4",
    ),
    "SM86_RTX3070": SimConfig(
        "SM86_RTX3070",
        86,
        46,
        16,
        "1132:1132:1132:3500.5",
        102400,
        "nbk=16:CCD=4:RRD=12:RCD=24:RAS=55:RP=24:RC=78:CL=24:WL=8:CDLR=10:WR=24:nbkgrp=4:CCDL=6:RTPL=4",
    ),
    "SM80_A100": SimConfig(
        "SM80_A100",
        80,
        108,
        80,
        "1410:1410:1410:1593",
        167936,
        "nbk=16:CCD=1:RRD=5:RCD=17:RAS=45:RP=19:RC=64:CL=19:WL=6:CDLR=4:WR=19:nbkgrp=4:CCDL=3:RTPL=5",
    ),
}


@dataclass(frozen=True)
class SimSpec:
    """Which simulation of a run to write, and how it went."""

    name: str = "accel-sim"
    build: str = DEFAULT_BUILD  # a key of BUILDS
    config: str | None = None  # a key of CONFIGS; None: the run's suggested config (by arch if none)
    compress: bool = False  # sim.log.gz instead of sim.log
    with_config: bool = True  # also write the gpgpusim.config it ran with
    status: str = "ok"  # simulation.json's status
    notes: str | None = None
    max_cycle: int | None = None  # -gpgpu_max_cycle: stop when the run's total reaches it
    killed: float | None = None  # cut the log at about this fraction of its bytes (4 KiB, mid-line)
    wrong_name_uid: int | None = None  # this uid's trace names another kernel
    concurrent_uid: int | None = None  # this uid and the next run together: one block lists both

    def __post_init__(self):
        if not SIMULATION_NAME.fullmatch(self.name) or self.name in (".", ".."):
            raise ValueError(
                f"a simulation's name is letters, digits, '.', '_', '-', at most 100: {self.name!r}"
            )
        if self.build not in BUILDS:
            raise ValueError(f"unknown simulator build {self.build!r}: one of {', '.join(BUILDS)}")
        if self.config is not None and self.config not in CONFIGS:
            raise ValueError(f"unknown simulator config {self.config!r}: one of {', '.join(CONFIGS)}")
        if self.killed is not None and not 0 < self.killed < 1:
            raise ValueError("killed is a fraction of the log, between 0 and 1")
        if self.max_cycle is not None and self.max_cycle < 1:
            raise ValueError("max_cycle must be at least 1")
        for uid in (self.wrong_name_uid, self.concurrent_uid):
            if uid is not None and uid < 1:
                raise ValueError("uids start at 1")


@dataclass(frozen=True)
class SimulatedLaunch:
    """What the log says of one uid: the launch it names and the cycles its own block holds."""

    uid: int
    ctx: str | None
    kernel_id: int
    name: str  # as the log prints it (another kernel's for the wrong-name uid)
    prefill: bool
    measured_ns: int
    sim_cycles: int | None  # None: overlapped (a block shared with another uid) or interrupted
    sim_insn: int | None
    overlapped: bool = False
    interrupted: bool = False


@dataclass(frozen=True)
class WrittenSimulation:
    folder: Path
    files: list[str]  # in the order written: simulation.json last
    launches: list[SimulatedLaunch]  # the uids launched, in uid order
    core_clock_mhz: float
    total_cycles: int | None  # the last complete block's gpu_tot_sim_cycle
    stopped: str | None  # None, "max_cycles" or "killed"


def config_for(run: RunSpec, sim: SimSpec) -> SimConfig:
    if sim.config is not None:
        return CONFIGS[sim.config]
    if run.suggested_sim_config in CONFIGS:
        return CONFIGS[run.suggested_sim_config]
    sass = ARCH_SASS.get(run.trace_gpu_arch, 90)
    if sass in (80, 86):
        return CONFIGS["SM86_RTX3070"]  # the only Ampere tested config: A100 traces run on it
    return CONFIGS["SM75_RTX2060"] if sass == 75 else CONFIGS["SM90_H100"]


def simulated_launches(run: RunSpec) -> list[Launch]:
    """The launches the kernelslists name (the traced ones), in launch order: uid k is the k-th."""
    return [launch for launch in launches(run) if launch.traced]


def kernel_cycles(
    launch: Launch, measured_ns: int, *, prefill: bool, build: SimBuild, config: SimConfig
) -> int:
    """The measured time at the core clock, times the build's error for this kernel."""
    rng = random.Random(f"{build.accelsim}:{config.name}:{launch.ctx}:{launch.kernel_id}")
    error = (build.prefill_bias if prefill else build.decode_bias) + rng.gauss(0, build.spread)
    ratio = max(0.2, 1 + error)
    return max(1, round(measured_ns * ratio * config.core_clock_mhz / 1000))


def write_simulation(
    run_dir: Path, run: RunSpec, sim: SimSpec, *, run_id: str | None = None
) -> WrittenSimulation:
    """Write `run_dir/simulations/<sim.name>/` for the run `write_run` wrote there from `run`.

    The trace headers are read from the run's trace files (Accel-Sim's post-processing keeps
    them); everything else follows from the spec, so the same specs give the same bytes.
    """
    run_dir = Path(run_dir)
    run_id = run_id or run_dir.name
    config = config_for(run, sim)
    log, launched, total, stopped = simulation_log(run_dir, run, sim, config, run_id=run_id)
    folder = run_dir / "simulations" / sim.name
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    if sim.with_config:
        (folder / CONFIG_NAME).write_text(config_file(config, sim))
        files.append(CONFIG_NAME)
    log_name = LOG_NAME + (".gz" if sim.compress else "")
    (folder / log_name).write_bytes(gzip.compress(log, mtime=0) if sim.compress else log)
    files.append(log_name)
    marker = {
        "status": sim.status,
        "simulator": "accel-sim",
        "config": config.name,
        "core_clock_mhz": config.core_clock_mhz,
        "notes": sim.notes or f"generated by tools/simulation.py: build {sim.build}, synthetic errors",
    }
    (folder / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n")
    files.append(MARKER_NAME)
    return WrittenSimulation(folder, files, launched, config.core_clock_mhz, total, stopped)


def config_file(config: SimConfig, sim: SimSpec) -> str:
    """The gpgpusim.config the run used (abridged, as the trace's configs/ one)."""
    lines = [f"# {config.name}: Accel-Sim tested config (abridged)"]
    lines += [
        f"-{name} {value}" for name, value, _ in options(config, sim, trace_list="") if name in CONFIG_KEYS
    ]
    return "\n".join(lines) + "\n"


CONFIG_KEYS = {
    "gpgpu_ptx_force_max_capability",
    "gpgpu_n_clusters",
    "gpgpu_n_cores_per_cluster",
    "gpgpu_n_mem",
    "gpgpu_n_sub_partition_per_mchannel",
    "gpgpu_clock_domains",
    "gpgpu_shader_registers",
    "gpgpu_shmem_size",
    "gpgpu_concurrent_kernel_sm",
    "gpgpu_max_cycle",
    "gpgpu_dram_timing_opt",
    "gpgpu_cache:dl2",
}


def options(config: SimConfig, sim: SimSpec, *, trace_list: str) -> list[tuple[str, str, str]]:
    """(name, value, help) in the order GPGPU-Sim registers them: an abridged option dump."""
    concurrent = "1" if sim.concurrent_uid is not None else "0"
    return [
        ("save_embedded_ptx", "0", "saves ptx files embedded in binary as <n>.ptx"),
        ("gpgpu_occupancy_sm_number", str(config.capability), "The SM number to pass to ptxas when getting register usage for computing GPU occupancy. This parameter is required in the config."),
        ("network_mode", "2", "Interconnection network mode"),
        ("inter_config_file", "mesh", "Interconnection network config file"),
        ("icnt_in_buffer_limit", "512", "in_buffer_limit"),
        ("icnt_out_buffer_limit", "512", "out_buffer_limit"),
        ("gpgpu_ptx_convert_to_ptxplus", "0", "Convert SASS (native ISA) to ptxplus and run ptxplus"),
        ("gpgpu_ptx_force_max_capability", str(config.capability), "Force maximum compute capability"),
        ("gpgpu_simd_model", "1", "1 = post-dominator"),
        ("gpgpu_shader_core_pipeline", "2048:32", "shader core pipeline config, i.e., {<nthread>:<warpsize>}"),
        ("gpgpu_cache:dl1", "S:4:128:256,L:T:m:L:L,A:384:48,16:0,32", "per-shader L1 data cache config  {<sector?>:<nsets>:<bsize>:<assoc>,<rep>:<wr>:<alloc>:<wr_alloc>:<set_index_fn>,<mshr>:<N>:<merge>,<mq>:<fifo_entry>,<data_port_width> | none}"),
        ("gpgpu_l1_latency", "30", "L1 Hit Latency"),
        ("gpgpu_smem_latency", "29", "smem Latency"),
        ("gpgpu_shader_registers", "65536", "Number of registers per shader core. Limits number of concurrent CTAs. (default 8192)"),
        ("gpgpu_registers_per_block", "65536", "Maximum number of registers per CTA. (default 8192)"),
        ("gpgpu_shader_cta", "32", "Maximum number of concurrent CTAs in shader (default 32)"),
        ("gpgpu_n_clusters", str(config.clusters), "number of processing clusters"),
        ("gpgpu_n_cores_per_cluster", "1", "number of simd cores per cluster"),
        ("gpgpu_shmem_size", str(config.shmem_size), "Size of shared memory per shader core (default 16kB)"),
        ("gpgpu_num_sched_per_core", "4", "Number of warp schedulers per core"),
        ("gpgpu_scheduler", "lrr", "Scheduler configuration: < lrr | gto | two_level_active > If two_level_active:<num_active_warps>:<inner_prioritization>:<outer_prioritization>For complete list of prioritization values see shader.h enum scheduler_prioritization_typeDefault: gto"),
        ("gpgpu_concurrent_kernel_sm", concurrent, "Support concurrent kernels on a SM (default = disabled)"),
        ("gpgpu_cache:dl2", "S:32:128:24,L:B:m:L:P,A:192:4,32:0,32", "unified banked L2 data cache config  {<sector?>:<nsets>:<bsize>:<assoc>,<rep>:<wr>:<alloc>:<wr_alloc>:<set_index_fn>,<mshr>:<N>:<merge>,<mq>:<fifo_entry>,<data_port_width>"),
        ("gpgpu_n_mem", str(config.mem_channels), "number of memory modules (e.g. memory controllers) in gpu"),
        ("gpgpu_n_sub_partition_per_mchannel", "2", "number of memory subpartition in each memory module"),
        ("gpgpu_dram_timing_opt", config.dram_timing, "DRAM timing parameters = {nbk:tCCD:tRRD:tRCD:tRAS:tRP:tRC:CL:WL:tCDLR:tWR:nbkgrp:tCCDL:tRTPL}"),
        ("gpgpu_max_cycle", str(sim.max_cycle or 0), "terminates gpu simulation early (0 = no limit)"),
        ("gpgpu_max_insn", "0", "terminates gpu simulation early (0 = no limit)"),
        ("gpgpu_max_cta", "0", "terminates gpu simulation early (0 = no limit)"),
        ("gpgpu_max_completed_cta", "0", "terminates gpu simulation early (0 = no limit)"),
        ("gpgpu_compute_capability_major", str(config.capability // 10), "Major compute capability version number"),
        ("gpgpu_compute_capability_minor", str(config.capability % 10), "Minor compute capability version number"),
        ("gpgpu_flush_l1_cache", "1", "Flush L1 cache at the end of each kernel call"),
        ("gpgpu_clock_domains", config.clock_domains, "Clock Domain Frequencies in MhZ {<Core Clock>:<ICNT Clock>:<L2 Clock>:<DRAM Clock>}"),
        ("gpgpu_max_concurrent_kernel", "128", "maximum kernels that can run concurrently on GPU, set this value according to max resident grids for your compute capability"),
        ("gpgpu_kernel_launch_latency", "5000", "Kernel launch latency in cycles. Default: 0"),
        ("trace", trace_list, "traces kernel filetraces kernel file directory"),
        ("trace_opcode_latency_initiation_int", "4,2", "Opcode latencies and initiation for integers in trace driven mode <latency,initiation>"),
        ("trace_opcode_latency_initiation_tensor", "2,1", "Opcode latencies and initiation for tensor in trace driven mode <latency,initiation>"),
    ]  # fmt: skip


def trace_header(run_dir: Path, launch: Launch) -> list[str]:
    """The header lines of the launch's trace file, as the post-processed .traceg keeps them."""
    path = run_dir / "traces" / launch.trace_file
    if not path.exists():  # a run written grouped, as post-processing leaves it
        path = run_dir / "traces" / launch.grouped_trace_file
    data = path.read_bytes()
    text = (lzma.decompress(data) if path.suffix == ".xz" else data).decode()
    return text.split("\n\n", 1)[0].splitlines()


def simulation_log(
    run_dir: Path, run: RunSpec, sim: SimSpec, config: SimConfig, *, run_id: str
) -> tuple[bytes, list[SimulatedLaunch], int | None, str | None]:
    """The log's bytes, each uid's launch, the run's total cycles and how the log ended."""
    build = BUILDS[sim.build]
    platform = platform_for(run.trace_gpu_arch)
    prefill_steps = {number for number, prefill, _ in _take_steps(run) if prefill}
    traces_dir = SIM_RUN_DIR.format(run_id=run_id, config=config.name) + "/traces"
    out = _Writer(config)
    out.banner(build, options(config, sim, trace_list=f"{traces_dir}/kernelslist.g"))

    kernels = simulated_launches(run)
    names = [launch.name for launch in kernels]
    launched: list[SimulatedLaunch] = []
    stopped = None
    uid = 0
    ctx_seen: set[str | None] = set()
    index = 0
    while index < len(kernels):
        group = [kernels[index]]
        if sim.concurrent_uid == index + 1 and index + 1 < len(kernels):
            group.append(kernels[index + 1])
        entries = []
        for launch in group:
            uid += 1
            if launch.ctx not in ctx_seen:  # each context's kernelslist starts with its copies
                ctx_seen.add(launch.ctx)
                for n in range(3):
                    out.line(
                        f"launching memcpy command : MemcpyHtoD,0x{0x502000000 + n * 0xC3600:016x},786432"
                    )
            name = launch.name
            if sim.wrong_name_uid == uid:
                name = next((other for other in names if other != launch.name), "_Z6kernelv")
            stream = len(entries)  # concurrent kernels run on their own streams
            path = f"{traces_dir}/kernel-{launch.kernel_id}" + (
                f"-ctx_{launch.ctx}.traceg" if launch.ctx is not None else ".traceg"
            )
            out.line(f"Processing kernel {path}")
            for header in trace_header(run_dir, launch):
                if header.startswith("-kernel name = "):
                    header = f"-kernel name = {name}"
                elif header.startswith("-cuda stream id = "):
                    header = f"-cuda stream id = {stream}"
                out.line(header)
            out.line(f"Header info loaded for kernel command : {path}")
            measured = kernel_duration(launch, platform)
            prefill = launch.step in prefill_steps
            cycles = kernel_cycles(launch, measured, prefill=prefill, build=build, config=config)
            insn = _instructions(launch)
            entries.append((uid, launch, name, stream, measured, prefill, cycles, insn))
        for entry_uid, _, name, stream, *_ in entries:
            out.line(f"launching kernel name: {name} uid: {entry_uid} cuda_stream_id: {stream}")
            out.line("GPGPU-Sim uArch: CTA/core = 8, limited by: threads")
        index += len(group)

        cycles = max(entry[6] for entry in entries) + sum(entry[6] for entry in entries[1:]) // 3
        insn = sum(entry[7] for entry in entries)
        ctas = sum(_ctas(entry[1]) for entry in entries)
        interrupted = sim.max_cycle is not None and out.tot_cycle + cycles >= sim.max_cycle
        if interrupted:
            # Accel-Sim stops when the run's total reaches the limit; the interrupted kernel's
            # block holds the cycles up to there, and no kernel finished, so no `Destroy streams`.
            part = sim.max_cycle - out.tot_cycle
            insn, ctas, cycles = insn * part // cycles, ctas * part // cycles, part
        else:
            out.line(f"Destroy streams for kernel {entries[-1][0]}: size 0")
        out.block([(entry[0], entry[2], entry[3]) for entry in entries], cycles, insn, ctas)
        for entry_uid, launch, name, _, measured, prefill, own, own_insn in entries:
            alone = len(entries) == 1 and not interrupted
            launched.append(
                SimulatedLaunch(
                    uid=entry_uid,
                    ctx=launch.ctx,
                    kernel_id=launch.kernel_id,
                    name=name,
                    prefill=prefill,
                    measured_ns=measured,
                    sim_cycles=own if alone else None,
                    sim_insn=own_insn if alone else None,
                    overlapped=len(entries) > 1,
                    interrupted=interrupted,
                )
            )
        if interrupted:
            out.line("GPGPU-Sim: ** break due to reaching the maximum cycles (or instructions) **")
            stopped = "max_cycles"
            break
    out.line("GPGPU-Sim: *** simulation thread exiting ***")
    out.line("GPGPU-Sim: *** exit detected ***")
    data = out.bytes()
    total = out.tot_cycle if out.blocks else None
    if sim.killed is not None:
        data, complete_blocks = killed_log(data, sim.killed, out.block_ends)
        stopped = "killed"
        # What the cut log still tells: the uids of the blocks that end before the cut.
        kept = {uid for uids in out.block_uids[:complete_blocks] for uid in uids}
        total = out.block_totals[complete_blocks - 1] if complete_blocks else None
        launched = [launch for launch in launched if launch.uid in kept]
    return data, launched, total, stopped


def killed_log(data: bytes, fraction: float, block_ends: list[int]) -> tuple[bytes, int]:
    """The log cut where a killed job's block-buffered stdout stops: at a multiple of 4 KiB that
    falls inside a line, at or before `fraction` of it. Also how many blocks end (with their
    `gpgpu_simulation_time` footer) before the cut."""
    cut = max(BLOCK_SIZE, int(len(data) * fraction) // BLOCK_SIZE * BLOCK_SIZE)
    while cut > BLOCK_SIZE and data[cut - 1 : cut] == b"\n":
        cut -= BLOCK_SIZE
    cut = min(cut, len(data) - 1)
    return data[:cut], sum(1 for end in block_ends if end <= cut)


def _take_steps(run: RunSpec):
    for entry, _ in zip(run_steps(run.layers), range(len(run.layers)), strict=False):
        yield entry


def _ctas(launch: Launch) -> int:
    gx, gy, gz = launch.grid
    return gx * gy * gz


def _instructions(launch: Launch) -> int:
    """Thread instructions (GPGPU-Sim counts active threads): the tracer's warp instructions x 32."""
    active = 28 + zlib.crc32(launch.name.encode()) % 5  # partial warps in tails and guards
    return launch.total_insts * active


DRAM_TIMING_HELP = {
    "nbk": "number of banks",
    "CCD": "column to column delay",
    "RRD": "minimal delay between activation of rows in different banks",
    "RCD": "row to column delay",
    "RAS": "time needed to activate row",
    "RP": "time needed to precharge (deactivate) row",
    "RC": "row cycle time",
    "CDLR": "switching from write to read (changes tWTR)",
    "WR": "last data-in to row precharge",
    "CL": "CAS latency",
    "WL": "Write latency",
    "nbkgrp": "number of bank groups",
    "CCDL": "column to column delay between accesses to different bank groups",
    "RTPL": "read to precharge delay between accesses to different bank groups",
}


class _Writer:
    """The log's lines, and the cumulative counters the stat blocks print."""

    def __init__(self, config: SimConfig):
        self.config = config
        self.parts: list[str] = []
        self.size = 0
        self.blocks = 0
        self.tot_cycle = 0
        self.tot_insn = 0
        self.tot_cta = 0
        self.seconds = 0
        self.block_ends: list[int] = []  # byte offset after each block's footer
        self.block_uids: list[list[int]] = []
        self.block_totals: list[int] = []
        self.cores = config.clusters
        self.banks = config.mem_channels * 2
        self.l1d = [[0, 0, 0] for _ in range(self.cores)]  # access, miss, reservation fails
        self.l2 = [[0, 0] for _ in range(self.banks)]
        self.counters: dict[str, int] = {}

    def line(self, text: str) -> None:
        data = text + "\n"
        self.parts.append(data)
        self.size += len(data.encode())

    def bytes(self) -> bytes:
        return "".join(self.parts).encode()

    def banner(self, build: SimBuild, dump: list[tuple[str, str, str]]) -> None:
        # main.cc prints the Accel-Sim line without a newline; GPGPU-Sim's banner starts with two.
        self.line(f"Accel-Sim [build {build.accelsim}]")
        self.line("")
        self.line(f"        *** GPGPU-Sim Simulator Version 4.2.0  [build {build.gpgpusim}] ***")
        self.line("")
        self.line("")
        self.line("GPGPU-Sim: Configuration options:")
        self.line("")
        for name, value, help_text in dump:
            self.line(f"-{name:<20} {value:>20} # {help_text}")
        self.line("DRAM Timing Options:")
        timing = dict(item.split("=") for item in self.config.dram_timing.split(":"))
        for key, help_text in DRAM_TIMING_HELP.items():
            self.line(f"{key:<20} {timing[key]:>20} # {help_text}")
        self.line(f"Total number of memory sub partition = {self.banks}")
        self.line("addr_dec_mask[CHIP]  = 0000000000000000 \thigh:64 low:0")
        self.line("addr_dec_mask[BK]    = 0000000000007080 \thigh:15 low:7")
        self.line("addr_dec_mask[ROW]   = 000000000fff8000 \thigh:28 low:15")
        self.line("addr_dec_mask[COL]   = 0000000000000f7f \thigh:12 low:0")
        self.line("addr_dec_mask[BURST] = 000000000000001f \thigh:5 low:0")
        self.line("sub_partition_id_mask = 0000000000000080")
        clocks = self.config.clocks_mhz
        self.line("GPGPU-Sim uArch: clock freqs: " + ":".join(f"{mhz * 1e6:.6f}" for mhz in clocks))
        self.line("GPGPU-Sim uArch: clock periods: " + ":".join(f"{1 / (mhz * 1e6):.20f}" for mhz in clocks))
        self.line("*** Initializing Memory Statistics ***")
        self.line("GPGPU-Sim uArch: performance model initialization complete.")

    def add(self, name: str, value: int) -> int:
        self.counters[name] = self.counters.get(name, 0) + value
        return self.counters[name]

    def block(self, kernels: list[tuple[int, str, int]], cycles: int, insn: int, ctas: int) -> None:
        """One `gpu_print_stat` block and its `print_simulation_time` footer."""
        rng = random.Random(f"{self.blocks}:{cycles}:{insn}")
        self.tot_cycle += cycles
        self.tot_insn += insn
        self.tot_cta += ctas
        self.line("kernel_name = " + "".join(f"{name} " for _, name, _ in kernels))
        self.line("kernel_launch_uid = " + "".join(f"{uid} " for uid, _, _ in kernels))
        self.line(f"kernel_stream_id = {kernels[0][2]}")
        self.line(f"gpu_sim_cycle = {cycles}")
        self.line(f"gpu_sim_insn = {insn}")
        self.line(f"gpu_ipc = {insn / cycles:12.4f}")
        self.line(f"gpu_tot_sim_cycle = {self.tot_cycle}")
        self.line(f"gpu_tot_sim_insn = {self.tot_insn}")
        self.line(f"gpu_tot_ipc = {self.tot_insn / self.tot_cycle:12.4f}")
        self.line(f"gpu_tot_issued_cta = {self.tot_cta}")
        occupancy = min(95.0, 8 + 80 * min(1.0, ctas / (4 * self.cores)) * rng.uniform(0.7, 1.0))
        total_occ = self.add("occ_weighted", int(occupancy * cycles)) / self.tot_cycle
        self.line(f"gpu_occupancy = {occupancy:.4f}% ")
        self.line(f"gpu_tot_occupancy = {total_occ:.4f}% ")
        self.line("max_total_param_size = 0")
        self.line(f"gpu_stall_dramfull = {self.add('stall_dramfull', rng.randrange(0, cycles // 4 + 1))}")
        self.line(f"gpu_stall_icnt2sh    = {self.add('stall_icnt2sh', rng.randrange(0, cycles // 8 + 1))}")
        accesses = max(32, insn // rng.randrange(40, 90))
        replies = accesses * 3 // 4
        parallel = replies / cycles
        total_parallel = self.add("replies", replies) / self.tot_cycle
        self.line(f"partiton_level_parallism = {parallel:12.4f}")
        self.line(f"partiton_level_parallism_total  = {total_parallel:12.4f}")
        self.line(f"partiton_level_parallism_util = {parallel * 1.6 + 1:12.4f}")
        self.line(f"partiton_level_parallism_util_total  = {total_parallel * 1.6 + 1:12.4f}")
        core_hz = self.config.core_clock_mhz * 1e6
        self.line(f"L2_BW  = {replies * 32 / (cycles / core_hz) / 1e9:12.4f} GB/Sec")
        self.line(
            f"L2_BW_total  = {self.counters['replies'] * 32 / (self.tot_cycle / core_hz) / 1e9:12.4f} GB/Sec"
        )
        # The simulator runs at some thousands of cycles a second of wall time.
        seconds = max(1, cycles // rng.randrange(1500, 4000))
        self.seconds += seconds
        self.line(f"gpu_total_sim_rate={self.tot_insn // max(1, self.seconds)}")
        self._cache_stats(accesses, ctas, rng)
        self._shader_stats(insn, accesses, rng)
        self._l2_stats(replies, rng)
        self.line("")
        self.line(f"icnt_total_pkts_mem_to_simt={self.add('pkts_mem_to_simt', replies)}")
        self.line(f"icnt_total_pkts_simt_to_mem={self.add('pkts_simt_to_mem', accesses)}")
        self._interconnect(accesses, replies, cycles)
        self.line("")
        self.line("")
        days, rest = divmod(self.seconds, 86400)
        hours, rest = divmod(rest, 3600)
        minutes, secs = divmod(rest, 60)
        self.line(
            f"gpgpu_simulation_time = {days} days, {hours} hrs, {minutes} min, {secs} sec ({self.seconds} sec)"
        )
        self.line(f"gpgpu_simulation_rate = {self.tot_insn // self.seconds} (inst/sec)")
        self.line(f"gpgpu_simulation_rate = {self.tot_cycle // self.seconds} (cycle/sec)")
        self.line(f"gpgpu_silicon_slowdown = {int(core_hz // max(1, self.tot_cycle // self.seconds))}x")
        self.blocks += 1
        self.block_ends.append(self.size)
        self.block_uids.append([uid for uid, _, _ in kernels])
        self.block_totals.append(self.tot_cycle)

    def _cache_stats(self, accesses: int, ctas: int, rng: random.Random) -> None:
        self.line("")
        self.line("========= Core cache stats =========")
        self.line("L1I_cache:")
        for name in ("accesses", "misses", "pending_hits", "reservation_fails"):
            self.line(f"\tL1I_total_cache_{name} = 0")
        self.line("L1D_cache:")
        busy = max(1, min(self.cores, ctas))
        miss_rate = rng.uniform(0.3, 0.8)
        for core in range(busy):
            share = accesses // busy
            self.l1d[core][0] += share
            self.l1d[core][1] += int(share * miss_rate)
            self.l1d[core][2] += rng.randrange(0, share // 8 + 1)
        for core, (access, miss, fails) in enumerate(self.l1d):
            rate = f"{miss / access:.3f}" if access else "-nan"
            self.line(
                f"\tL1D_cache_core[{core}]: Access = {access}, Miss = {miss}, Miss_rate = {rate}, "
                f"Pending_hits = 0, Reservation_fails = {fails}"
            )
        access = sum(core[0] for core in self.l1d)
        miss = sum(core[1] for core in self.l1d)
        fails = sum(core[2] for core in self.l1d)
        self.line(f"\tL1D_total_cache_accesses = {access}")
        self.line(f"\tL1D_total_cache_misses = {miss}")
        self.line(f"\tL1D_total_cache_miss_rate = {miss / max(1, access):.4f}")
        self.line("\tL1D_total_cache_pending_hits = 0")
        self.line(f"\tL1D_total_cache_reservation_fails = {fails}")
        self.line(f"\tL1D_cache_data_port_util = {rng.uniform(0.01, 0.2):.3f}")
        self.line(f"\tL1D_cache_fill_port_util = {rng.uniform(0.01, 0.2):.3f}")
        for cache in ("L1C", "L1T"):
            self.line(f"{cache}_cache:")
            for name in ("accesses", "misses", "pending_hits", "reservation_fails"):
                self.line(f"\t{cache}_total_cache_{name} = 0")
        self.line("")
        self.line("Total_core_cache_stats:")
        self._breakdown("Total_core_cache_stats_breakdown", access, miss, fails)
        self.line("")
        self.line("Total_core_cache_fail_stats:")
        self.line(f"\tTotal_core_cache_fail_stats_breakdown[GLOBAL_ACC_R][MISS_QUEUE_FULL] = {fails}")

    def _breakdown(self, prefix: str, access: int, miss: int, fails: int) -> None:
        reads, writes = access * 2 // 3, access - access * 2 // 3
        values = {
            ("GLOBAL_ACC_R", "HIT"): reads - miss * 2 // 3,
            ("GLOBAL_ACC_R", "MISS"): miss * 2 // 3 // 4,
            ("GLOBAL_ACC_R", "RESERVATION_FAIL"): fails,
            ("GLOBAL_ACC_R", "SECTOR_MISS"): miss * 2 // 3 - miss * 2 // 3 // 4,
            ("GLOBAL_ACC_W", "HIT"): writes - (miss - miss * 2 // 3),
            ("GLOBAL_ACC_W", "MISS"): miss - miss * 2 // 3,
        }
        for access_type in (
            "GLOBAL_ACC_R",
            "LOCAL_ACC_R",
            "CONST_ACC_R",
            "TEXTURE_ACC_R",
            "GLOBAL_ACC_W",
            "LOCAL_ACC_W",
        ):
            for outcome in ("HIT", "HIT_RESERVED", "MISS", "RESERVATION_FAIL", "SECTOR_MISS", "MSHR_HIT"):
                self.line(
                    f"\t{prefix}[{access_type}][{outcome}] = {max(0, values.get((access_type, outcome), 0))}"
                )
        self.line(f"\t{prefix}[GLOBAL_ACC_R][TOTAL_ACCESS] = {reads}")
        self.line(f"\t{prefix}[GLOBAL_ACC_W][TOTAL_ACCESS] = {writes}")

    def _shader_stats(self, insn: int, accesses: int, rng: random.Random) -> None:
        threads = self.add("thrd_icount", insn)
        self.line(f"gpgpu_n_tot_thrd_icount = {threads}")
        self.line(f"gpgpu_n_tot_w_icount = {self.add('w_icount', insn // 30)}")
        self.line(f"gpgpu_n_stall_shd_mem = {self.add('stall_shd_mem', rng.randrange(0, accesses + 1))}")
        self.line("gpgpu_n_mem_read_local = 0")
        self.line("gpgpu_n_mem_write_local = 0")
        self.line(f"gpgpu_n_mem_read_global = {self.add('read_global', accesses * 2 // 3)}")
        self.line(f"gpgpu_n_mem_write_global = {self.add('write_global', accesses - accesses * 2 // 3)}")
        self.line("gpgpu_n_mem_texture = 0")
        self.line("gpgpu_n_mem_const = 0")
        self.line(f"gpgpu_n_load_insn  = {self.add('load_insn', insn // 9)}")
        self.line(f"gpgpu_n_store_insn = {self.add('store_insn', insn // 27)}")
        self.line(f"gpgpu_n_shmem_insn = {self.add('shmem_insn', insn // 7)}")
        self.line("gpgpu_n_sstarr_insn = 0")
        self.line("gpgpu_n_tex_insn = 0")
        self.line(f"gpgpu_n_const_mem_insn = {self.add('const_insn', insn // 50)}")
        self.line(f"gpgpu_n_param_mem_insn = {self.add('param_insn', insn // 60)}")
        self.line(
            f"gpgpu_n_shmem_bkconflict = {self.add('bkconflict', rng.randrange(0, accesses // 10 + 1))}"
        )
        self.line("gpgpu_n_cache_bkconflict = 0")
        self.line("gpgpu_n_intrawarp_mshr_merge = 0")
        self.line("gpgpu_n_cmem_portconflict = 0")
        self.line("gpu_reg_bank_conflict_stalls = 0")
        self.line("Warp Occupancy Distribution:")
        self.line(
            f"Stall:{self.add('warp_stall', rng.randrange(100, 5000))}\tW0_Idle:{self.add('w0_idle', rng.randrange(1000, 90000))}"
            f"\tW0_Scoreboard:{self.add('w0_score', rng.randrange(1000, 90000))}\tW32:{self.add('w32', insn // 32)}"
        )
        reads = self.counters["read_global"]
        self.line(f"traffic_breakdown_coretomem[GLOBAL_ACC_R] = {reads * 8} {{8:{reads},}}")
        self.line(f"traffic_breakdown_memtocore[GLOBAL_ACC_R] = {reads * 40} {{40:{reads},}}")
        self.counters["maxmflatency"] = max(self.counters.get("maxmflatency", 0), rng.randrange(400, 900))
        self.line(f"maxmflatency = {self.counters['maxmflatency']} ")
        self.line(f"averagemflatency = {rng.randrange(250, 450)} ")
        self.line(f"total dram reads = {self.add('dram_reads', accesses // 3)}")
        self.line(f"total dram writes = {self.add('dram_writes', accesses // 9)}")

    def _l2_stats(self, replies: int, rng: random.Random) -> None:
        self.line("")
        self.line("========= L2 cache stats =========")
        per_bank = replies // self.banks
        miss_rate = rng.uniform(0.1, 0.5)
        for bank in range(self.banks):
            share = per_bank + (1 if bank < replies % self.banks else 0)
            self.l2[bank][0] += share
            self.l2[bank][1] += int(share * miss_rate)
        for bank, (access, miss) in enumerate(self.l2):
            rate = f"{miss / access:.3f}" if access else "-nan"
            self.line(
                f"L2_cache_bank[{bank}]: Access = {access}, Miss = {miss}, Miss_rate = {rate}, "
                f"Pending_hits = 0, Reservation_fails = 0"
            )
        access = sum(bank[0] for bank in self.l2)
        miss = sum(bank[1] for bank in self.l2)
        self.line(f"L2_total_cache_accesses = {access}")
        self.line(f"L2_total_cache_misses = {miss}")
        self.line(f"L2_total_cache_miss_rate = {miss / max(1, access):.4f}")
        self.line("L2_total_cache_pending_hits = 0")
        self.line("L2_total_cache_reservation_fails = 0")
        self.line("L2_total_cache_breakdown:")
        self._breakdown("L2_cache_stats_breakdown", access, miss, 0)
        self.line("L2_total_cache_reservation_fail_breakdown:")
        self.line(f"L2_cache_data_port_util = {rng.uniform(0.01, 0.1):.3f}")
        self.line(f"L2_cache_fill_port_util = {rng.uniform(0.01, 0.1):.3f}")

    def _interconnect(self, accesses: int, replies: int, cycles: int) -> None:
        self.line("----------------------------Interconnect-DETAILS--------------------------------")
        for network, packets in (("Req", accesses), ("Reply", replies)):
            self.line(f"{network}_Network_injected_packets_num = {packets}")
            self.line(f"{network}_Network_cycles = {cycles}")
            self.line(f"{network}_Network_injected_packets_per_cycle = {packets / cycles:12.4f} ")
            self.line(f"{network}_Network_conflicts_per_cycle = {packets / cycles / 3:12.4f}")
            self.line(f"{network}_Bank_Level_Parallism = {1 + packets / cycles:12.4f}")
            self.line(f"{network}_Network_in_buffer_full_per_cycle = {0:12.4f}")
            self.line(f"{network}_Network_out_buffer_full_per_cycle = {0:12.4f}")
            if network == "Req":
                self.line("")
        self.line("----------------------------END-of-Interconnect-DETAILS-------------------------")
