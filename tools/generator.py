"""Realistic Accel-Sim trace folders of any size, for the tests, the samples and the benchmarks.

A generated run looks like what the NVBit tracer and the profiling harness upload for an LLM
inference workload (by default `facebook/opt-125m` on an H100): per-context `stats_ctx_*` files
(the CSV header only in the first context's file, as the tracer writes it), `kernelslist_ctx_*`,
small but genuine xz instruction traces for the traced kernels, simulator configs, an optional
`timeline.json` and `timing.csv`, and `metadata.json` written last, listing every other file.

The stats files hold the tracer's bytes, not a tidy CSV: each launch is the tracer's launch half
(`"%s, %s, %d, ... %d, "`), followed by `"%d,%d\n"` only when the kernel ran to its exit (both
from `tools.tracer_format`, the one definition of the row). Decode
steps run as CUDA graphs, as vLLM runs them: their model forward is captured, so those launches
get the launch half only and run together on one line until the next ordinary launch (the logits
and the sampler, which vLLM runs eagerly) ends it. A replay writes no row, but the tracer's
global counters add what it executed to the next ordinary launch's totals. A killed run ends in a
launch half. (vLLM captures its graphs once, at start-up; here each decode step is written as its
own capture and one replay, so its launches keep their ids and timings.)

The workload is vLLM serving OPT-125m: per step the embeddings, twelve pre-LN decoder blocks
(QKV/out/FC1/FC2 GEMMs, KV-cache write, attention, ReLU, residual adds) and the final norm, then
eagerly the LM head and the sampler; some 28 distinct kernels. cuBLAS and attention kernels are
chosen per GPU (`Platform`: H100 for sm_90, A100 for sm_80/86), as are durations.

`timing.csv` comes in two formats (`RunSpec.timing_format`). "cascade" has one row per launch
the stats list, keyed by (ctx, kernel id). "nsys" is what `nsys stats --report
cuda_gpu_trace:mangled --format csv` exports from a separate, untraced run of the same steps
(profiled with `--cuda-graph-trace=node`, or graph replays show no kernel rows): one row per GPU
operation sorted by start, memcpy and memset rows (no grid) between the kernels, `Ctx` an nsys
context id (1, 2, ...) rather than the tracer's pointer. How its kernel rows relate to the stats:
the tracer writes a captured kernel once, when the graph is captured, and nothing per replay;
nsys sees only executions, so it lists the kernels once per replay and nothing at capture. Here
each decode step is one capture and one replay, so per context the kernel rows are the stats'
launches one for one, in order, with the same grid and block. Correlation ids increase with the
API calls; every kernel of one replay carries its `cuGraphLaunch`'s id, so within a context they
are non-decreasing, and rows must be matched in start (file) order, not by sorting on CorrId.

Simulations of a generated run (the simulator's stdout for its kernelslists, beside the run as
`simulations/<name>/`) are written by `tools.simulation.write_simulation`.

Everything is drawn from `random.Random(seed)`: the same spec gives the same bytes, so the
shipped samples can be regenerated and a benchmark's input is reproducible. Rows are streamed
to disk, so a million kernels cost a few hundred megabytes of file, not of memory.
"""

import json
import random
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from tools.kernels import ARCH_SASS, HIDDEN, platform_for
from tools.sass_trace import instruction_trace
from tools.simulation import SimSpec, write_simulation
from tools.timing_files import HarnessClock, kernel_duration, timeline_json
from tools.tracer_format import STATS_HEADER
from tools.workload import (
    OPT_125M_LAYERS,
    TIMING_FORMATS,
    TRACE_LAYOUTS,
    Launch,
    RunSpec,
    grouped_name,
    launches,
    stats_rows,
)

if TYPE_CHECKING:
    from tools.upload import UploadResult

# What callers import from here: the run folder, and what the benchmarks read beside it (the
# spec, its launches, their platform and durations), whose homes are tools.workload and the rest.
__all__ = [
    "DEFAULT_KEY_PREFIX",
    "OPT_125M_LAYERS",
    "TIMING_FORMATS",
    "TRACE_LAYOUTS",
    "GeneratedFile",
    "RunSpec",
    "kernel_duration",
    "launches",
    "platform_for",
    "upload_run",
    "write_run",
]

DEFAULT_KEY_PREFIX = "accelsim-traces/"
ARCH_ICNT = {70: "volta", 75: "turing", 80: "ampere", 86: "ampere", 89: "ada", 90: "hopper"}


def gpgpusim_config(spec: RunSpec, sass: int) -> str:
    name = spec.suggested_sim_config or f"SM{sass}"
    return (
        f"# {name}: Accel-Sim tested config (abridged), selected for {spec.trace_gpu_arch}\n"
        f"-gpgpu_ptx_force_max_capability {sass}\n-gpgpu_ptx_convert_to_ptxplus 0\n"
        f"-gpgpu_n_clusters {108 if sass in (80, 86) else 132}\n-gpgpu_n_cores_per_cluster 1\n"
        "-gpgpu_n_mem 80\n-gpgpu_n_sub_partition_per_mchannel 2\n"
        f"-gpgpu_clock_domains {'1410:1410:1410:1593' if sass in (80, 86) else '1755:1755:1755:2619'}\n"
        "-gpgpu_shader_registers 65536\n-gpgpu_registers_per_block 65536\n"
        "-gpgpu_occupancy_sm_number 90\n-gpgpu_shader_core_pipeline 2048:32\n"
        "-gpgpu_shader_cta 32\n-gpgpu_simd_model 1\n-gpgpu_num_sched_per_core 4\n"
        f"-gpgpu_shmem_size {167936 if sass in (80, 86) else 233472}\n-gpgpu_l1_latency 30\n"
        "-gpgpu_smem_latency 29\n"
        "-gpgpu_cache:dl2 S:32:128:24,L:B:m:L:P,A:192:4,32:0,32\n-gpgpu_dram_timing_opt "
        '"nbk=16:CCD=2:RRD=12:RCD=24:RAS=55:RP=24:RC=78:CL=24:WL=8:CDLR=10:WR=24:nbkgrp=4:CCDL=6:RTPL=4"\n'
        "-network_mode 2\n-icnt_in_buffer_limit 512\n"
    )


@dataclass(frozen=True)
class GeneratedFile:
    name: str  # relative to the run folder, e.g. "traces/stats_ctx_0x6165bdd7ec90"
    bytes: int


class RunFolder:
    """The run folder being written: each file's bytes, and the order they were written in."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.written: list[str] = []

    def write(self, name: str, data: bytes) -> None:
        path = self.directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.written.append(name)

    def files(self) -> list[GeneratedFile]:
        return [GeneratedFile(name, (self.directory / name).stat().st_size) for name in self.written]


def write_run(
    directory: Path, spec: RunSpec, *, run_id: str | None = None, key_prefix: str = DEFAULT_KEY_PREFIX
) -> list[GeneratedFile]:
    """Write the run folder `directory` (created if needed); metadata.json is written last.

    `metadata.json`'s `files` lists every other file by its bucket key, `<key_prefix><run_id>/<name>`,
    as the profiling harness writes it. Returns the files in the order they were written.
    """
    folder = RunFolder(Path(directory))
    sass = ARCH_SASS.get(spec.trace_gpu_arch, 90)
    if spec.configs:
        write_configs(folder, spec, sass)
    clock = HarnessClock(spec)
    lists = write_stats_and_traces(folder, spec, sass, clock)
    if spec.trace_files == "grouped":
        write_grouped_lists(folder, lists)
    if spec.timing:
        folder.write("timing.csv", clock.timing_csv())
    if spec.timeline:
        folder.write("timeline.json", timeline_json(spec, clock.rows))
    files = folder.files()
    if spec.unfinished:
        return files
    metadata = run_metadata(spec, files, run_id=run_id or folder.directory.name, key_prefix=key_prefix)
    folder.write("metadata.json", (json.dumps(metadata, indent=2) + "\n").encode())
    return folder.files()


def write_configs(folder: RunFolder, spec: RunSpec, sass: int) -> None:
    """configs/: simulator config files of our own making (`RunSpec.configs`)."""
    icnt = f"config_{ARCH_ICNT.get(sass, 'hopper')}_islip.icnt"
    folder.write("configs/gpgpusim.config", gpgpusim_config(spec, sass).encode())
    folder.write(
        "configs/trace.config",
        f"-trace_opcode_latency_initiation_int 4,2\n-gpgpu_ptx_force_max_capability {sass}\n".encode(),
    )
    folder.write(
        f"configs/{icnt}",
        b"// interconnect: iSLIP crossbar\nnetwork_count = 2;\ntopology = fly;\n"
        b"k = 212;\nn = 1;\nrouting_function = dest_tag;\nvc_allocator = islip;\n",
    )


def write_stats_and_traces(folder: RunFolder, spec: RunSpec, sass: int, clock: HarnessClock) -> list[str]:
    """Each context's stats file and kernelslist, streamed launch by launch, and the traced
    kernels' instruction traces; every launch also goes through the harness's clock. Returns the
    kernelslists' names."""
    stats_files: dict[str | None, TextIO] = {}
    lists: dict[str | None, TextIO] = {}
    (folder.directory / "traces").mkdir(parents=True, exist_ok=True)
    try:
        for launch, row in stats_rows(launches(spec), killed=spec.crashed):
            if launch.ctx not in stats_files:
                stats_files[launch.ctx], lists[launch.ctx] = open_context_files(
                    folder, launch.ctx, first=not stats_files
                )
            stats_files[launch.ctx].write(row)
            if launch.traced:
                lists[launch.ctx].write(launch.trace_file + "\n")
                write_instruction_trace(folder, spec, sass, launch)
            clock.launch(launch)
        clock.finish()
    finally:
        for handle in (*stats_files.values(), *lists.values()):
            handle.close()
    return [Path(handle.name).relative_to(folder.directory).as_posix() for handle in lists.values()]


def open_context_files(folder: RunFolder, ctx: str | None, *, first: bool) -> tuple[TextIO, TextIO]:
    """A context's stats file (`stats_ctx_*`, or the legacy `stats.csv`) and kernelslist, opened
    for streaming; the kernelslist starts with the memcpy commands."""
    suffix = f"_ctx_{ctx}" if ctx is not None else ""
    stats_name = f"traces/stats{suffix}" if ctx is not None else "traces/stats.csv"
    list_name = f"traces/kernelslist{suffix}"
    stats = open(folder.directory / stats_name, "w", newline="\n")  # noqa: SIM115
    kernels = open(folder.directory / list_name, "w", newline="\n")  # noqa: SIM115
    folder.written.extend((stats_name, list_name))
    if first:
        # The tracer writes the header once per process: into the first context's file only.
        stats.write(STATS_HEADER)
    for n in range(3):
        kernels.write(f"MemcpyHtoD,0x{0x502000000 + n * 0xC3600:016x},{HIDDEN * 1024}\n")
    return stats, kernels


def write_instruction_trace(folder: RunFolder, spec: RunSpec, sass: int, launch: Launch) -> None:
    grouped = spec.trace_files == "grouped"
    name = launch.grouped_trace_file if grouped else launch.trace_file
    # Its own generator: the raw and the grouped layout hold the same warps.
    trace_rng = random.Random(f"{spec.seed}:{launch.ctx}:{launch.kernel_id}:trace")
    folder.write(f"traces/{name}", instruction_trace(launch, sass, trace_rng, grouped=grouped))


def write_grouped_lists(folder: RunFolder, lists: list[str]) -> None:
    """Post-processing writes `<list>.g` beside each list: the same lines, trace files renamed."""
    for name in lists:
        lines = (folder.directory / name).read_text().splitlines()
        renamed = [line if line.startswith("MemcpyHtoD") else grouped_name(line) for line in lines]
        folder.write(f"{name}.g", "".join(f"{line}\n" for line in renamed).encode())


def run_metadata(spec: RunSpec, files: list[GeneratedFile], *, run_id: str, key_prefix: str) -> dict:
    """metadata.json as the profiling harness writes it: the status, every other file by its key,
    what the run was."""
    metadata: dict = {"status": spec.status}
    if spec.status != "ok":
        metadata["error"] = spec.error or "profiler exited with status 1 before the tracer finished"
    metadata["files"] = [{"key": f"{key_prefix}{run_id}/{f.name}", "bytes": f.bytes} for f in files]
    for name in ("model", "source_gpu", "trace_gpu_arch", "suggested_sim_config"):
        if getattr(spec, name) is not None:
            metadata[name] = getattr(spec, name)
    metadata["layers"] = list(spec.layers)
    metadata["tracer"] = {"name": "accel-sim nvbit tracer", "version": 5 if spec.format == "v5" else 4}
    if spec.sample:
        metadata["sample"] = True
    metadata.update(spec.extra_metadata)
    return metadata


# --- The bucket -------------------------------------------------------------------------------------


def upload_run(run_id: str, spec: RunSpec, simulations: Iterable[SimSpec] = ()) -> "UploadResult":
    """Generate a run (and simulations of it) and upload it to the configured bucket as `run_id`.

    Django and the bucket are imported here, not above: writing folders needs neither.
    """
    from ingest import bucket
    from tools.upload import upload_run_folder

    with tempfile.TemporaryDirectory(prefix="cascade-run-") as tmp:
        folder = Path(tmp) / "run"
        write_run(folder, spec, run_id=run_id, key_prefix=bucket.prefix())
        for simulation in simulations:
            write_simulation(folder, spec, simulation, run_id=run_id)
        return upload_run_folder(folder, run_id, skip_unchanged=False)
