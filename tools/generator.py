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

Everything is drawn from `random.Random(seed)`: the same spec gives the same bytes, so the
shipped samples can be regenerated and a benchmark's input is reproducible. Rows are streamed
to disk, so a million kernels cost a few hundred megabytes of file, not of memory.
"""

import json
import lzma
import math
import random
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tools.tracer_format import STATS_HEADER, stats_launch_half, stats_totals

if TYPE_CHECKING:
    from tools.upload import UploadResult

DEFAULT_KEY_PREFIX = "accelsim-traces/"
OPT_125M_LAYERS = ("step 0 (prefill)", "step 2 (decode)", "step 10 (decode)", "step 26 (decode)")

ARCH_SASS = {"sm_70": 70, "sm_75": 75, "sm_80": 80, "sm_86": 86, "sm_89": 89, "sm_90": 90}
ARCH_ICNT = {70: "volta", 75: "turing", 80: "ampere", 86: "ampere", 89: "ada", 90: "hopper"}


@dataclass(frozen=True)
class RunSpec:
    """What to generate. The defaults are an opt-125m inference run traced on an H100."""

    kernels: int = 744  # = steps_kernel_count(OPT_125M_LAYERS): the four steps, whole
    contexts: int = 1
    format: str = "v5"  # "v5" (stats_ctx_* per context) or "legacy" (stats.csv + kernelslist)
    seed: int = 0
    timeline: bool = True
    timing: bool = True
    configs: bool = True
    status: str = "ok"  # metadata.json's "status"; anything but "ok" is a failed profiler run
    error: str | None = None  # the profiler's message for a failed run
    unfinished: bool = False  # stop before metadata.json: an upload still in progress (or abandoned)
    crashed: bool = False  # killed during the last launch: the file ends in its launch half, in ", "
    # Decode steps captured into CUDA graphs (None: the default, on for v5, as vLLM serves decode
    # steps; off for legacy, whose tracers predate graph support). Prefill steps are ordinary launches.
    cuda_graphs: bool | None = None
    max_traced: int = 64  # kernels with an instruction trace (the tracer's kernel window)
    model: str | None = "facebook/opt-125m"
    source_gpu: str | None = "NVIDIA H100 80GB HBM3"
    trace_gpu_arch: str = "sm_90"
    suggested_sim_config: str | None = "SM90_H100"
    layers: tuple[str, ...] = OPT_125M_LAYERS
    sample: bool = False
    extra_metadata: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.format not in ("v5", "legacy"):
            raise ValueError(f"format must be 'v5' or 'legacy', not {self.format!r}")
        if self.kernels < 0 or self.contexts < 1:
            raise ValueError("kernels must be >= 0 and contexts >= 1")
        if self.format == "legacy" and self.contexts != 1:
            raise ValueError("the legacy format has exactly one context")
        if self.format == "legacy" and self.cuda_graphs:
            # Tracers that write stats.csv (before 2025-03-16) hook no CUDA graph API.
            raise ValueError("the legacy format's tracers predate CUDA graph support: no cuda_graphs")

    @property
    def decode_graphs(self) -> bool:
        """Whether decode steps run as CUDA graphs: by default in v5, as LLM serving runs them."""
        return self.cuda_graphs if self.cuda_graphs is not None else self.format == "v5"


@dataclass(frozen=True)
class Launch:
    """One kernel launch as the tracer records it: its launch half, and its totals if it exits.

    `total_insts` is what the kernel executes (the harness's timing uses it); a launch
    `captured` into a CUDA graph never reports it in the stats file. `replayed_insts` is what
    graph replays executed since the previous ordinary launch finished: the tracer's counters are
    global and read only at an ordinary launch's exit, so they land in this launch's totals.
    """

    ctx: str | None
    kernel_id: int
    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    total_insts: int
    traced: bool
    step: int
    captured: bool = False
    replayed_insts: int = 0

    @property
    def trace_file(self) -> str:
        if self.ctx is None:
            return f"kernel-{self.kernel_id}.trace"
        return f"kernel-{self.kernel_id}-ctx_{self.ctx}.trace.xz"

    def stats_row(self, *, with_totals: bool | None = None) -> str:
        """What the tracer writes for this launch; by default totals unless it was captured."""
        if with_totals is None:
            with_totals = not self.captured
        half = stats_launch_half(self.trace_file, self.name, self.grid, self.block)
        counted = self.total_insts + self.replayed_insts
        return half + stats_totals(counted, counted) if with_totals else half


def stats_rows(launches: Iterable[Launch], *, killed: bool = False) -> Iterator[tuple[Launch, str]]:
    """Each launch with the text the tracer appends for it, in launch order.

    A captured launch gets its launch half only, so it runs together with whatever follows;
    with `killed`, the process died during the last launch, which gets its launch half only.
    """
    previous: Launch | None = None
    for launch in launches:
        if previous is not None:
            yield previous, previous.stats_row()
        previous = launch
    if previous is not None:
        yield previous, previous.stats_row(with_totals=False if killed else None)


# --- The workload: an OPT-style decoder forward pass per step ----------------------------------

HIDDEN, HEADS, FFN, VOCAB, BLOCKS = 768, 12, 3072, 50272, 12

K_EMBED = (
    "_ZN2at6native12_GLOBAL__N_127indexSelectLargeIndexIN3c104HalfElljLi2ELi2ELin2ELb1EEEv"
    "NS_4cuda6detail10TensorInfoIT_T1_EESA_NS7_IT0_S9_EEiiS9_S9_l"
)
K_ADD = (
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIN3c104HalfEEE"
    "St5arrayIPcLm3EEEEviT0_T1_"
)
K_LAYER_NORM = (
    "_ZN2at6native12_GLOBAL__N_128vectorized_layer_norm_kernelIN3c104HalfEfEEviT0_PKT_S8_S8_PS5_S9_PS6_"
)
K_RELU = (
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_21clamp_min_kernel_cudaERNS_18Tensor"
    "IteratorBaseERKN3c106ScalarEENKUlvE_clEvENKUlvE5_clEvEUlNS4_4HalfEE_St5arrayIPcLm2EEEEviT0_T1_"
)
K_CACHE = (
    "_ZN4vllm30reshape_and_cache_flash_kernelIttLNS_18Fp8KVCacheDataTypeE0EEEvPKT_S4_PT0_S7_PKliiiiiPKfSB_"
)
K_FLASH = (
    "_ZN5flash15flash_fwd_kernelI23Flash_fwd_kernel_traitsILi64ELi128ELi128ELi4ELb0ELb0EN7cutlass6half_tE"
    "19Flash_kernel_traitsILi64ELi128ELi128ELi4ES3_EELb0ELb1ELb0ELb0ELb0ELb0EEEvNS_16Flash_fwd_paramsE"
)
K_FLASH_SPLITKV = (
    "_ZN5flash23flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi64ELi64ELi128ELi4ELb0ELb0EN7cutlass"
    "6half_tE19Flash_kernel_traitsILi64ELi64ELi128ELi4ES3_EELb0ELb0ELb0ELb0ELb1ELb0ELb1ELb0EEEv"
    "NS_16Flash_fwd_paramsE"
)
K_FLASH_COMBINE = (
    "_ZN5flash32flash_fwd_splitkv_combine_kernelI23Flash_fwd_kernel_traitsILi64ELi64ELi128ELi4ELb0ELb0E"
    "N7cutlass6half_tE19Flash_kernel_traitsILi64ELi64ELi128ELi4ES3_EELi4ELi1ELb1EEEvNS_16Flash_fwd_paramsE"
)
K_GEMM_PREFILL = (
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
    "_kernel__5x_cublas"
)
K_GEMM_DECODE = "nvjet_hsh_64x8_64x16_4x1_v_bz_splitK_TNT"
K_GEMV = (
    "_Z17gemv2T_kernel_valIiiN3c104HalfES1_fLi128ELi16ELi4ELi4ELb0ELb0E19cublasGemvParamsExIi30cublas"
    "GemvTensorStridedBatchedIKS1_ES5_IS1_EfEEvT11_T4_S9_"
)
K_SPLITK_REDUCE = (
    "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb1ELb0ELb0ELb0ELb0ELb0EEEvNS_18cublasSplitKParams"
    "IT4_EEPKT2_PKT3_PT5_PKS5_SC_PKT6_PKT1_PS5_PvS9_S9_SB_"
)
K_SOFTMAX = (
    "_ZN2at6native43_GLOBAL__N__5b3d2ed9_10_SoftMax_cu_9f978f6319cunn_SoftMaxForwardILi4EN3c104HalfEff"
    "NS1_25SoftMaxForwardEpilogueEEEvPT2_PKT0_l"
)
K_ARGMAX = "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_10ArgMaxOpsIfEEjSt4pairIflELi4EEEEEvT1_"
K_COPY = (
    "_ZN2at6native27unrolled_elementwise_kernelINS0_13direct_copy_kernel_cuda_functorIN3c104HalfEEE"
    "St5arrayIPcLm2EELi4E23TrivialOffsetCalculatorILi1EjESB_NS0_6memory15LoadWithoutCastENSC_16Store"
    "WithoutCastEEEviT_T0_T2_T3_T4_T5_"
)

# (name, grid, block, warp instructions per block): shapes as the real kernels launch them.
Shape = tuple[str, tuple[int, int, int], tuple[int, int, int], int]


def _elementwise(name: str, numel: int, per_block: int) -> Shape:
    return name, (max(1, math.ceil(numel / 512)), 1, 1), (128, 1, 1), per_block


def _gemm(tokens: int, n: int, k: int) -> list[Shape]:
    if tokens >= 64:
        grid = (math.ceil(n / 128), math.ceil(tokens / 128), 1)
        return [(K_GEMM_PREFILL, grid, (384, 1, 1), 12 * (k // 64) * 180)]
    if tokens == 1:
        return [(K_GEMV, (math.ceil(n / 4), 1, 1), (128, 1, 1), 4 * (k // 16) * 9)]
    splits = 4
    return [
        (K_GEMM_DECODE, (math.ceil(n / 64), 1, splits), (128, 1, 1), 4 * (k // 64 // splits) * 160),
        (K_SPLITK_REDUCE, (math.ceil(n / 32), math.ceil(tokens / 16), 1), (32, 16, 1), 16 * 3 * splits),
    ]


def _block_kernels(tokens: int, prefill: bool, batch: int) -> list[Shape]:
    """One decoder block of OPT: pre-LN attention and a ReLU MLP."""
    norm = (K_LAYER_NORM, (tokens, 1, 1), (32, 4, 1), 4 * (HIDDEN // 128) * 30)
    if prefill:
        attention = [(K_FLASH, (math.ceil(tokens / batch / 128), batch, HEADS), (128, 1, 1), 4 * 2200)]
    else:
        attention = [
            (K_FLASH_SPLITKV, (1, HEADS, batch * 4), (128, 1, 1), 4 * 620),
            (K_FLASH_COMBINE, (math.ceil(batch * HEADS / 16), 1, 1), (128, 1, 1), 4 * 48),
        ]
    return [
        norm,
        *_gemm(tokens, 3 * HIDDEN, HIDDEN),
        (K_CACHE, (tokens, 1, 1), (min(HIDDEN, 1024), 1, 1), 24 * 22),
        *attention,
        *_gemm(tokens, HIDDEN, HIDDEN),
        _elementwise(K_ADD, tokens * HIDDEN, 4 * 14),
        norm,
        *_gemm(tokens, FFN, HIDDEN),
        _elementwise(K_RELU, tokens * FFN, 4 * 12),
        *_gemm(tokens, HIDDEN, FFN),
        _elementwise(K_ADD, tokens * HIDDEN, 4 * 14),
    ]


def _step_kernels(prefill: bool, tokens: int, batch: int) -> Iterator[tuple[int, Shape, bool]]:
    """One step as (decoder block, or -1 outside the blocks, shape, part of the model's forward).

    The model's forward (embeddings, the decoder blocks, the final norm) is what vLLM captures
    into a CUDA graph; selecting the last tokens' hidden states, the LM head and the sampler run
    eagerly after it, so the sampler's launch always ends the step as an ordinary launch.
    """
    yield -1, (K_EMBED, (math.ceil(tokens * HIDDEN / 256), 1, 1), (128, 1, 1), 4 * 11), True
    yield -1, (K_EMBED, (math.ceil(tokens * HIDDEN / 256), 1, 1), (128, 1, 1), 4 * 11), True
    yield -1, _elementwise(K_ADD, tokens * HIDDEN, 4 * 14), True
    for block in range(BLOCKS):
        for shape in _block_kernels(tokens, prefill, batch):
            yield block, shape, True
    yield -1, (K_LAYER_NORM, (tokens, 1, 1), (32, 4, 1), 4 * 180), True
    yield -1, _elementwise(K_COPY, batch * HIDDEN, 4 * 9), False
    for shape in _gemm(batch, VOCAB, HIDDEN):
        yield -1, shape, False
    yield -1, (K_SOFTMAX, (batch, 1, 1), (1024, 1, 1), 32 * 1500), False
    yield -1, (K_ARGMAX, (1, batch, 1), (32, 16, 1), 16 * 1800), False


def step_number(layer: str, index: int) -> int:
    """`step 10 (decode)` -> 10; any other label counts by position."""
    parts = layer.split()
    return int(parts[1]) if len(parts) > 1 and parts[0] == "step" and parts[1].isdigit() else index


def context_pointers(rng: random.Random, count: int) -> list[str]:
    """CUDA context pointers as the driver hands them out: 48-bit user-space addresses."""
    return [f"0x{rng.randrange(0x5500_0000_0000, 0x7FFF_0000_0000) & ~0xF:x}" for _ in range(count)]


def _steps(layers: tuple[str, ...]) -> Iterator[tuple[int, bool, bool]]:
    """(step number, prefill, listed): the steps named in `layers`, then further decode steps."""
    number = -1
    for index, layer in enumerate(layers):
        number = step_number(layer, index)
        yield number, "prefill" in layer, True
    while True:
        number += 1
        yield number, False, False


def context_sizes(spec: RunSpec) -> list[int]:
    """Kernels per context: an even split, each cut moved to the nearest step start if it can be.

    A context is a process here, so a step should not straddle two of them.
    """
    n, c = spec.kernels, spec.contexts
    starts, position = [], 0
    for _, prefill, _ in _steps(spec.layers):
        if position >= n:
            break
        starts.append(position)
        position += sum(1 for _ in _step_kernels(prefill, 2 if not prefill else 128, 2))
    cuts, previous = [], 0
    for k in range(1, c):
        target = round(k * n / c)
        choices = [s for s in starts if previous < s < n and s <= n - (c - k)]
        cut = (
            min(choices, key=lambda s: abs(s - target))
            if len(choices) >= c - k
            else max(target, previous + 1)
        )
        cuts.append(cut)
        previous = cut
    bounds = [0, *cuts, n]
    return [bounds[i + 1] - bounds[i] for i in range(c)]


def launches(spec: RunSpec) -> Iterator[Launch]:
    """Every launch of the run in launch order, kernel ids restarting at 1 in each context.

    Each step is a whole forward pass: the steps listed in `layers` first, then as many decode
    steps as `kernels` needs (the last one cut short). With CUDA graphs, a decode step's model
    forward is `captured`, then replayed: what the replay executes is counted into the totals of
    the step's first eager launch. The first decoder block of each listed step is traced, up to
    `max_traced` kernels, as the tracer's kernel window would do; nothing runs while a stream
    captures, so in a graph step the window covers the eager launches after the forward instead.
    """
    rng = random.Random(spec.seed)
    ctxs = context_pointers(rng, spec.contexts) if spec.format == "v5" else [None]
    per_ctx = context_sizes(spec)
    batch = rng.choice((4, 8, 16))
    prompt = rng.choice((96, 128, 160, 192))
    traced = emitted = 0
    ctx_index = kernel_id = 0
    replayed = 0  # instructions of the captured forward, counted when the graph replays
    for step, prefill, listed in _steps(spec.layers):
        tokens = batch * prompt if prefill else batch
        graph_step = spec.decode_graphs and not prefill
        for block, (name, grid, block_dim, per_block), forward in _step_kernels(prefill, tokens, batch):
            if emitted == spec.kernels:
                return
            while kernel_id == per_ctx[ctx_index]:
                ctx_index, kernel_id = ctx_index + 1, 0
            kernel_id += 1
            emitted += 1
            captured = graph_step and forward
            window = not forward if graph_step else block == 0
            is_traced = listed and window and traced < spec.max_traced
            traced += is_traced
            blocks = grid[0] * grid[1] * grid[2]
            insts = max(1, int(blocks * per_block * rng.uniform(0.93, 1.07)))
            counted_before = 0 if captured else replayed
            replayed = replayed + insts if captured else 0
            yield Launch(
                ctx=ctxs[ctx_index],
                kernel_id=kernel_id,
                name=name,
                grid=grid,
                block=block_dim,
                total_insts=insts % 2**32,
                traced=is_traced,
                step=step,
                captured=captured,
                replayed_insts=counted_before,
            )
        if spec.kernels == 0:
            return


def steps_kernel_count(layers: tuple[str, ...]) -> int:
    """How many launches the steps in `layers` make: the size of a run that is exactly them."""
    return sum(
        sum(1 for _ in _step_kernels(prefill, 8 * 128 if prefill else 8, 8))
        for _, (_, prefill, _) in zip(range(len(layers)), _steps(layers), strict=False)
    )


# --- Files ----------------------------------------------------------------------------------------


def instruction_trace(launch: Launch, sass: int, rng: random.Random) -> bytes:
    """The beginning of a kernel's instruction trace: the documented header and one warp."""
    gx, gy, gz = launch.grid
    bx, by, bz = launch.block
    header = (
        f"-kernel name = {launch.name}\n-kernel id = {launch.kernel_id}\n"
        f"-grid dim = ({gx},{gy},{gz})\n-block dim = ({bx},{by},{bz})\n"
        f"-shmem = {rng.choice((0, 16384, 49152))}\n-nregs = {rng.choice((16, 32, 40, 64, 128, 168))}\n"
        f"-binary version = {sass}\n-cuda stream id = 0\n"
        "-shmem base_addr = 0x00007f0000000000\n-local mem base_addr = 0x00007f0002000000\n"
        "-nvbit version = 1.7.4\n-accelsim tracer version = 5\n-enable lineinfo = 0\n\n"
        "#traces format = [line_num] PC mask dest_num [reg_dests] opcode src_num [reg_srcs] "
        "mem_width [adrrescompress?] [mem_addresses]\n\n"
        "#BEGIN_TB\n\nthread block = 0,0,0\n\nwarp = 0\ninsts = 8\n"
    )
    base = rng.randrange(0x7F00_0000_0000, 0x7F80_0000_0000) & ~0xFFF
    body = (
        "0000 ffffffff 1 R1 MOV 0 0 \n"
        "0010 ffffffff 1 R0 S2R 0 0 \n"
        "0020 ffffffff 1 R3 S2R 0 0 \n"
        "0030 ffffffff 1 R0 IMAD 2 R0 R3 0 \n"
        "0040 ffffffff 0 ISETP.GE.AND 1 R0 0 \n"
        f"0050 ffffffff 1 R4 LDG.E.64 1 R2 8 1 0x{base:x} 8\n"
        f"0060 ffffffff 0 STG.E.64 2 R2 R4 8 1 0x{base + 0x10000:x} 8\n"
        "0070 ffffffff 0 EXIT 0 0 \n#END_TB\n"
    )
    data = (header + body).encode()
    return lzma.compress(data, format=lzma.FORMAT_XZ) if launch.ctx is not None else data


def gpgpusim_config(spec: RunSpec, sass: int) -> str:
    name = spec.suggested_sim_config or f"SM{sass}"
    return (
        f"# {name}: Accel-Sim tested config (abridged), selected for {spec.trace_gpu_arch}\n"
        f"-gpgpu_ptx_force_max_capability {sass}\n-gpgpu_ptx_convert_to_ptxplus 0\n"
        "-gpgpu_n_clusters 132\n-gpgpu_n_cores_per_cluster 1\n-gpgpu_n_mem 80\n"
        "-gpgpu_n_sub_partition_per_mchannel 2\n-gpgpu_clock_domains 1755:1755:1755:2619\n"
        "-gpgpu_shader_registers 65536\n-gpgpu_registers_per_block 65536\n"
        "-gpgpu_occupancy_sm_number 90\n-gpgpu_shader_core_pipeline 2048:32\n"
        "-gpgpu_shader_cta 32\n-gpgpu_simd_model 1\n-gpgpu_num_sched_per_core 4\n"
        "-gpgpu_shmem_size 233472\n-gpgpu_l1_latency 30\n-gpgpu_smem_latency 29\n"
        "-gpgpu_cache:dl2 S:32:128:24,L:B:m:L:P,A:192:4,32:0,32\n-gpgpu_dram_timing_opt "
        '"nbk=16:CCD=2:RRD=12:RCD=24:RAS=55:RP=24:RC=78:CL=24:WL=8:CDLR=10:WR=24:nbkgrp=4:CCDL=6:RTPL=4"\n'
        "-network_mode 2\n-icnt_in_buffer_limit 512\n"
    )


# One launch as the harness's clock saw it: (step, ctx, kernel id, start ns, end ns, captured).
TimingRow = tuple[int, str | None, int, int, int, bool]


def timeline_json(spec: RunSpec, rows: list[TimingRow]) -> bytes:
    """Per step: which launches belong to it, when it ran (from the harness's clock), and how
    many of its launches were captured into a CUDA graph (the stats file has no totals for those)."""
    steps: dict[int, dict] = {}
    for step, ctx, kernel_id, start, end, captured in rows:
        entry = steps.setdefault(
            step, {"step": step, "ctx": ctx, "first_kernel_id": kernel_id, "start_ns": start}
        )
        entry.update(
            last_kernel_id=kernel_id,
            end_ns=end,
            kernels=entry.get("kernels", 0) + 1,
            captured_kernels=entry.get("captured_kernels", 0) + captured,
        )
    labels = {step_number(layer, i): layer for i, layer in enumerate(spec.layers)}
    for entry in steps.values():
        entry["name"] = labels.get(entry["step"], f"step {entry['step']}")
        entry["phase"] = "prefill" if "prefill" in entry["name"] else "decode"
        entry["cuda_graph"] = entry["captured_kernels"] > 0
    return (
        json.dumps({"model": spec.model, "clock": "ns", "steps": list(steps.values())}, indent=2) + "\n"
    ).encode()


@dataclass(frozen=True)
class GeneratedFile:
    name: str  # relative to the run folder, e.g. "traces/stats_ctx_0x6165bdd7ec90"
    bytes: int


def write_run(
    directory: Path, spec: RunSpec, *, run_id: str | None = None, key_prefix: str = DEFAULT_KEY_PREFIX
) -> list[GeneratedFile]:
    """Write the run folder `directory` (created if needed); metadata.json is written last.

    `metadata.json`'s `files` lists every other file by its bucket key, `<key_prefix><run_id>/<name>`,
    as the profiling harness writes it. Returns the files in the order they were written.
    """
    directory = Path(directory)
    run_id = run_id or directory.name
    rng = random.Random(f"{spec.seed}:files")
    sass = ARCH_SASS.get(spec.trace_gpu_arch, 90)
    written: list[str] = []

    def write(name: str, data: bytes) -> None:
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(name)

    if spec.configs:
        icnt = f"config_{ARCH_ICNT.get(sass, 'hopper')}_islip.icnt"
        write("configs/gpgpusim.config", gpgpusim_config(spec, sass).encode())
        write(
            "configs/trace.config",
            f"-trace_opcode_latency_initiation_int 4,2\n-gpgpu_subwarp_size 32\n"
            f"-gpgpu_ptx_force_max_capability {sass}\n".encode(),
        )
        write(
            f"configs/{icnt}",
            b"// interconnect: iSLIP crossbar\nnetwork_count = 2;\ntopology = fly;\n"
            b"k = 212;\nn = 1;\nrouting_function = dest_tag;\nvc_allocator = islip;\n",
        )

    timing_rows: list[TimingRow] = []
    clock = 1_000_000 + rng.randrange(1_000_000)
    stats_files: dict[str | None, object] = {}
    lists: dict[str | None, object] = {}
    (directory / "traces").mkdir(parents=True, exist_ok=True)
    try:
        for launch, row in stats_rows(launches(spec), killed=spec.crashed):
            if launch.ctx not in stats_files:
                suffix = f"_ctx_{launch.ctx}" if launch.ctx is not None else ""
                stats_name = f"traces/stats{suffix}" if launch.ctx is not None else "traces/stats.csv"
                list_name = f"traces/kernelslist{suffix}"
                stats_files[launch.ctx] = open(directory / stats_name, "w", newline="\n")  # noqa: SIM115
                lists[launch.ctx] = open(directory / list_name, "w", newline="\n")  # noqa: SIM115
                written.extend((stats_name, list_name))
                if len(stats_files) == 1:
                    # The tracer writes the header once per process: into the first context's file only.
                    stats_files[launch.ctx].write(STATS_HEADER)
                for n in range(3):
                    lists[launch.ctx].write(
                        f"MemcpyHtoD,0x{0x502000000 + n * 0xC3600:016x},{HIDDEN * 1024}\n"
                    )
            stats_files[launch.ctx].write(row)
            if launch.traced:
                lists[launch.ctx].write(launch.trace_file + "\n")
                write(f"traces/{launch.trace_file}", instruction_trace(launch, sass, rng))
            duration = max(1500, launch.total_insts // 40)
            # A graph replay launches its kernels back to back, without the CPU's launch overhead.
            clock += rng.randrange(600, 1800) if launch.captured else rng.randrange(2000, 9000)
            timing_rows.append(
                (launch.step, launch.ctx, launch.kernel_id, clock, clock + duration, launch.captured)
            )
            clock += duration
    finally:
        for handle in (*stats_files.values(), *lists.values()):
            handle.close()

    if spec.timing:
        lines = ["ctx,kernel_id,start_ns,end_ns,duration_ns\n"]
        lines += [
            f"{ctx or ''},{kid},{start},{end},{end - start}\n" for _, ctx, kid, start, end, _ in timing_rows
        ]
        write("timing.csv", "".join(lines).encode())
    if spec.timeline:
        write("timeline.json", timeline_json(spec, timing_rows))
    files = [GeneratedFile(name, (directory / name).stat().st_size) for name in written]
    if spec.unfinished:
        return files

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
    write("metadata.json", (json.dumps(metadata, indent=2) + "\n").encode())
    return [*files, GeneratedFile("metadata.json", (directory / "metadata.json").stat().st_size)]


# --- The bucket -------------------------------------------------------------------------------------


def upload_run(run_id: str, spec: RunSpec) -> "UploadResult":
    """Generate a run and upload it to the configured bucket as `run_id`.

    Django and the bucket are imported here, not above: writing folders needs neither.
    """
    from ingest import bucket
    from tools.upload import upload_run_folder

    with tempfile.TemporaryDirectory(prefix="cascade-run-") as tmp:
        folder = Path(tmp) / "run"
        write_run(folder, spec, run_id=run_id, key_prefix=bucket.prefix())
        return upload_run_folder(folder, run_id, skip_unchanged=False)
