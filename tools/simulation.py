"""A simulator run of a generated trace: the stdout Accel-Sim (trace-driven) would print for it.

`write_simulation` puts the folder `<run>/simulations/<name>/` next to a run that
`tools.generator.write_run` wrote: the simulator's stdout as `sim.log` (or `sim.log.gz`), the
`gpgpusim.config` it ran with, and last `simulation.json`, the marker Cascade waits for. The log
is what a real run of Accel-Sim's dev branch prints (docs/formats.md#the-simulators-log):

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

Every number in it is SYNTHETIC: no simulator ran. A kernel's cycles are its measured time (the
duration `timing.csv` holds for it, itself synthetic: `tools.timing_files.kernel_duration`) at the
config's core clock, times a deterministic error: per build a bias for prefill kernels, another for
decode kernels, and a per-kernel spread drawn from `Random(build, config, ctx, kernel id)`. The
builds below are named after Accel-Sim and GPGPU-Sim dev commits from before Accel-Sim 2.0, whose
tested configs stop at Ampere (SM75_RTX2060, SM86_RTX3070; no SASS 90): their errors here are made
up, chosen so that one is about 10-20% MAPE and the other 25-40%. So `write_simulation` refuses a
SASS 89/90 trace or an SM9x config (`HOPPER_BUILDS` is empty): no log here claims what its build
could not have run.

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
from tools.simlog_writer import LogWriter, SimBuild, SimConfig
from tools.timing_files import kernel_duration
from tools.workload import Launch, RunSpec, launches, run_steps

LOG_NAME = "sim.log"
MARKER_NAME = "simulation.json"
CONFIG_NAME = "gpgpusim.config"
SIMULATION_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
BLOCK_SIZE = 4096  # stdout redirected to a file is written in blocks of this size
# Where Accel-Sim's run_simulations.py puts a job: sim_run_<cuda>/<app>/<args>/<config>/.
SIM_RUN_DIR = "/scratch/accel-sim-framework/sim_run_12.4/{run_id}/NO_ARGS/{config}"


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
    # accel-sim-framework 618c2ef8 with gpgpu-sim 0874995e (dev, before Accel-Sim 2.0: no SASS 90):
    # about 25-40% MAPE here, prefill far too fast and decode far too slow.
    "dev-618c2ef": SimBuild(
        accelsim="accelsim-commit-618c2ef869fa6e4698ac7547bc9f967f8213cd45_modified_0.0",
        gpgpusim="gpgpu-sim_git-commit-0874995e8de6f60bb08d646b05020aa722a8562b_modified_0.0",
        prefill_bias=-0.36,
        decode_bias=0.27,
        spread=0.10,
    ),
}
DEFAULT_BUILD = "dev-e5653f0"
# Builds of Accel-Sim 2.0 or later (2026-08: Hopper, SM90_H100, SASS 90): none of BUILDS is one, so
# no simulation of a SASS 89/90 trace or on an SM9x config is written (what no build could print).
HOPPER_BUILDS: frozenset[str] = frozenset()


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


def possible_config(run: RunSpec, sim: SimSpec) -> SimConfig:
    """The config `sim` runs `run` on, if its build could have: ValueError for a SASS 89/90 trace
    or an SM9x config on a build before Accel-Sim 2.0."""
    config = config_for(run, sim)
    sass = max(ARCH_SASS.get(run.trace_gpu_arch, 90), config.capability)
    if sass >= 89 and sim.build not in HOPPER_BUILDS:
        raise ValueError(
            f"build {sim.build} is Accel-Sim before 2.0, which runs no SASS {sass}: it could not have "
            f"simulated this {run.trace_gpu_arch} trace on {config.name}"
        )
    return config


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
    config = possible_config(run, sim)
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
    log = _SimulationRun(run_dir, run, sim, config, run_id=run_id)
    log.out.banner(log.build, options(config, sim, trace_list=f"{log.traces_dir}/kernelslist.g"))
    kernels = simulated_launches(run)
    launched: list[SimulatedLaunch] = []
    stopped = None
    index = 0
    while index < len(kernels):
        group = [kernels[index]]
        if sim.concurrent_uid == index + 1 and index + 1 < len(kernels):
            group.append(kernels[index + 1])
        index += len(group)
        entries = [log.load(launch, stream, kernels) for stream, launch in enumerate(group)]
        for entry in entries:
            log.out.line(
                f"launching kernel name: {entry.name} uid: {entry.uid} cuda_stream_id: {entry.stream}"
            )
            log.out.line("GPGPU-Sim uArch: CTA/core = 8, limited by: threads")
        interrupted = log.run_block(entries)
        launched += [entry.simulated(alone=len(entries) == 1, interrupted=interrupted) for entry in entries]
        if interrupted:
            log.out.line("GPGPU-Sim: ** break due to reaching the maximum cycles (or instructions) **")
            stopped = "max_cycles"
            break
    log.out.line("GPGPU-Sim: *** simulation thread exiting ***")
    log.out.line("GPGPU-Sim: *** exit detected ***")
    data = log.out.bytes()
    total = log.out.tot_cycle if log.out.blocks else None
    if sim.killed is not None:
        data, complete_blocks = killed_log(data, sim.killed, log.out.block_ends)
        stopped = "killed"
        # What the cut log still tells: the uids of the blocks that end before the cut.
        kept = {uid for uids in log.out.block_uids[:complete_blocks] for uid in uids}
        total = log.out.block_totals[complete_blocks - 1] if complete_blocks else None
        launched = [launch for launch in launched if launch.uid in kept]
    return data, launched, total, stopped


@dataclass(frozen=True)
class _LoadedKernel:
    """A uid the simulator loaded: the launch, the name and stream the log gives it, its cycles."""

    uid: int
    launch: Launch
    name: str
    stream: int
    measured_ns: int
    prefill: bool
    cycles: int
    insn: int

    def simulated(self, *, alone: bool, interrupted: bool) -> SimulatedLaunch:
        """What the log says of it: its own cycles only when its block is its own and complete."""
        own = alone and not interrupted
        return SimulatedLaunch(
            uid=self.uid,
            ctx=self.launch.ctx,
            kernel_id=self.launch.kernel_id,
            name=self.name,
            prefill=self.prefill,
            measured_ns=self.measured_ns,
            sim_cycles=self.cycles if own else None,
            sim_insn=self.insn if own else None,
            overlapped=not alone,
            interrupted=interrupted,
        )


class _SimulationRun:
    """One simulator run being written: the log, the uid count, the contexts whose copies it made."""

    def __init__(self, run_dir: Path, run: RunSpec, sim: SimSpec, config: SimConfig, *, run_id: str):
        self.run_dir = run_dir
        self.sim = sim
        self.config = config
        self.build = BUILDS[sim.build]
        self.platform = platform_for(run.trace_gpu_arch)
        self.prefill_steps = {number for number, prefill, _ in _take_steps(run) if prefill}
        self.traces_dir = SIM_RUN_DIR.format(run_id=run_id, config=config.name) + "/traces"
        self.out = LogWriter(config)
        self.uid = 0
        self.ctx_seen: set[str | None] = set()

    def load(self, launch: Launch, stream: int, kernels: list[Launch]) -> _LoadedKernel:
        """The next uid: its context's copies the first time, its trace's header, its cycles.
        Concurrent kernels run on their own streams (`stream`)."""
        self.uid += 1
        if launch.ctx not in self.ctx_seen:  # each context's kernelslist starts with its copies
            self.ctx_seen.add(launch.ctx)
            for n in range(3):
                self.out.line(
                    f"launching memcpy command : MemcpyHtoD,0x{0x502000000 + n * 0xC3600:016x},786432"
                )
        name = launch.name
        if self.sim.wrong_name_uid == self.uid:
            name = next((other.name for other in kernels if other.name != launch.name), "_Z6kernelv")
        path = f"{self.traces_dir}/kernel-{launch.kernel_id}" + (
            f"-ctx_{launch.ctx}.traceg" if launch.ctx is not None else ".traceg"
        )
        self.out.line(f"Processing kernel {path}")
        for header in trace_header(self.run_dir, launch):
            if header.startswith("-kernel name = "):
                header = f"-kernel name = {name}"
            elif header.startswith("-cuda stream id = "):
                header = f"-cuda stream id = {stream}"
            self.out.line(header)
        self.out.line(f"Header info loaded for kernel command : {path}")
        measured = kernel_duration(launch, self.platform)
        prefill = launch.step in self.prefill_steps
        cycles = kernel_cycles(launch, measured, prefill=prefill, build=self.build, config=self.config)
        return _LoadedKernel(self.uid, launch, name, stream, measured, prefill, cycles, _instructions(launch))

    def run_block(self, entries: list[_LoadedKernel]) -> bool:
        """The stat block of the kernels that ran together; True when `-gpgpu_max_cycle` cut it."""
        cycles = max(entry.cycles for entry in entries) + sum(entry.cycles for entry in entries[1:]) // 3
        insn = sum(entry.insn for entry in entries)
        ctas = sum(_ctas(entry.launch) for entry in entries)
        max_cycle = self.sim.max_cycle
        interrupted = max_cycle is not None and self.out.tot_cycle + cycles >= max_cycle
        if interrupted:
            # Accel-Sim stops when the run's total reaches the limit; the interrupted kernel's
            # block holds the cycles up to there, and no kernel finished, so no `Destroy streams`.
            part = max_cycle - self.out.tot_cycle
            insn, ctas, cycles = insn * part // cycles, ctas * part // cycles, part
        else:
            self.out.line(f"Destroy streams for kernel {entries[-1].uid}: size 0")
        self.out.block([(entry.uid, entry.name, entry.stream) for entry in entries], cycles, insn, ctas)
        return interrupted


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
