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
import lzma
import math
import random
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tools.tracer_format import STATS_HEADER, stats_launch_half, stats_totals

if TYPE_CHECKING:
    from tools.simulation import SimSpec
    from tools.upload import UploadResult

DEFAULT_KEY_PREFIX = "accelsim-traces/"
OPT_125M_LAYERS = ("step 0 (prefill)", "step 2 (decode)", "step 10 (decode)", "step 26 (decode)")

ARCH_SASS = {"sm_70": 70, "sm_75": 75, "sm_80": 80, "sm_86": 86, "sm_89": 89, "sm_90": 90}
TIMING_FORMATS = ("cascade", "nsys")
TRACE_LAYOUTS = ("raw", "grouped")
ARCH_ICNT = {70: "volta", 75: "turing", 80: "ampere", 86: "ampere", 89: "ada", 90: "hopper"}


@dataclass(frozen=True)
class RunSpec:
    """What to generate. The defaults are an opt-125m inference run traced on an H100."""

    kernels: int = 700  # = steps_kernel_count(OPT_125M_LAYERS): the four steps, whole
    contexts: int = 1
    format: str = "v5"  # "v5" (stats_ctx_* per context) or "legacy" (stats.csv + kernelslist)
    seed: int = 0
    timeline: bool = True
    timing: bool = True
    # timing.csv as the harness writes it ("cascade": ctx,kernel_id,start_ns,end_ns,duration_ns)
    # or as Nsight Systems exports it ("nsys": `nsys stats --report cuda_gpu_trace:mangled`).
    timing_format: str = "cascade"
    # configs/ with simulator config files of our own making: off by default, since a run should
    # name one of the simulator's own tested configs (`suggested_sim_config`) and the simulator
    # refuses files it does not know (tests of a run's configs/ folder turn it on).
    configs: bool = False
    status: str = "ok"  # metadata.json's "status"; anything but "ok" is a failed profiler run
    error: str | None = None  # the profiler's message for a failed run
    unfinished: bool = False  # stop before metadata.json: an upload still in progress (or abandoned)
    crashed: bool = False  # killed during the last launch: the file ends in its launch half, in ", "
    # Decode steps captured into CUDA graphs (None: the default, on for v5, as vLLM serves decode
    # steps; off for legacy, whose tracers predate graph support). Prefill steps are ordinary launches.
    cuda_graphs: bool | None = None
    max_traced: int = 64  # kernels with an instruction trace (the tracer's kernel window)
    # Only launches of at most this many warps (blocks x warps per block) are traced, so that every
    # generated instruction trace holds every warp of every block and simulates in seconds.
    max_traced_warps: int = 256
    # "raw": the tracer's `.trace[.xz]` files and kernelslist; "grouped": also what Accel-Sim's
    # post-processing makes of them, `.traceg[.xz]` files and `<kernelslist>.g`, in their place.
    trace_files: str = "raw"
    model: str | None = "facebook/opt-125m"
    source_gpu: str | None = "NVIDIA H100 80GB HBM3"
    trace_gpu_arch: str = "sm_90"
    suggested_sim_config: str | None = "SM90_H100"
    layers: tuple[str, ...] = OPT_125M_LAYERS
    sample: bool = False
    extra_metadata: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.timing_format not in TIMING_FORMATS:
            raise ValueError(f"timing_format must be 'cascade' or 'nsys', not {self.timing_format!r}")
        if self.trace_files not in TRACE_LAYOUTS:
            raise ValueError(f"trace_files must be 'raw' or 'grouped', not {self.trace_files!r}")
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
    batch: int = 1  # sequences in the step, and the tokens it processes (host copies size by them)
    tokens: int = 1

    @property
    def trace_file(self) -> str:
        """The file the tracer writes (and names in the stats and the kernelslist): raw lines."""
        if self.ctx is None:
            return f"kernel-{self.kernel_id}.trace"
        return f"kernel-{self.kernel_id}-ctx_{self.ctx}.trace.xz"

    @property
    def grouped_trace_file(self) -> str:
        """What Accel-Sim's post-processing writes from it: `.trace` -> `.traceg`, `.trace.xz` -> `.traceg.xz`."""
        return grouped_name(self.trace_file)

    @property
    def warps(self) -> int:
        """Every warp of every block: blocks x ceil(threads per block / 32), as the simulator counts them."""
        gx, gy, gz = self.grid
        bx, by, bz = self.block
        return gx * gy * gz * math.ceil(bx * by * bz / 32)

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

# What vLLM runs for OPT-125m (float16), as NVBit reports the names: mangled C++ for PyTorch,
# vLLM and flash-attention kernels, cuBLAS's own unmangled names for its GEMMs. The PyTorch and
# vLLM kernels are the same source on every GPU; cuBLAS and attention pick other kernels per
# architecture (the `Platform`s below).

# PyTorch: embeddings (index_select picks the small-index kernel for 16 indices or fewer, so
# prefill and decode differ), elementwise ops, layer norm.
K_POS_OFFSET = (  # OPT's learned positions: positions + 2, on int64
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_21CUDAFunctorOnSelf_addIlEESt5arrayIPcLm2EEEEviT0_T1_"
)
K_EMBED = (
    "_ZN2at6native12_GLOBAL__N_121indexSelectLargeIndexIN3c104HalfElljLi2ELi2ELin2ELb1EEEv"
    "NS_4cuda6detail10TensorInfoIT_T1_EESA_NS7_IT0_S9_EEiiS9_S9_l"
)
K_EMBED_SMALL = (
    "_ZN2at6native12_GLOBAL__N_121indexSelectSmallIndexIN3c104HalfElljLi2ELi2ELin2EEEv"
    "NS_4cuda6detail10TensorInfoIT_T1_EESA_NS7_IT0_S9_EEiiS9_l"
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
# vLLM: the paged KV cache write, one per layer.
K_CACHE = (
    "_ZN4vllm30reshape_and_cache_flash_kernelIttLNS_18Fp8KVCacheDataTypeE0EEEvPKT_S4_PT0_S7_PKliiiiiPKfSB_"
)
# After the forward, eagerly: the last token of each sequence, the logits, and the sampler
# (float32 logits, temperature, top-k, softmax, a random draw by exponential race, argmax).
K_GATHER = (
    "_ZN2at6native24index_elementwise_kernelILi128ELi4EZNS0_16gpu_index_kernelIZNS0_17index_kernel_impl"
    "INS0_10OpaqueTypeILi2EEEEEvRNS_18TensorIteratorBaseEN3c108ArrayRefIlEESA_EUlPcPKclE_EEvS8_SA_SA_"
    "RKT_bEUliE_EEvlT1_"
)
K_TO_FLOAT = (
    "_ZN2at6native27unrolled_elementwise_kernelIZZZNS0_23direct_copy_kernel_cudaERNS_18TensorIterator"
    "BaseEENKUlvE1_clEvENKUlvE5_clEvEUlfE_St5arrayIPcLm2EELi4E23TrivialOffsetCalculatorILi1EjESC_NS0_"
    "6memory12LoadWithCastILi1EEENSD_13StoreWithCastILi1EEEEEviT_T0_T2_T3_T4_T5_"
)
K_DIV = (  # logits / temperature, and later probs / q
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13BinaryFunctorIfffNS0_15binary_internal"
    "10DivFunctorIfEEEESt5arrayIPcLm3EEEEviT0_T1_"
)
K_TOPK = (
    "_ZN2at6native6sbtopk10gatherTopKIfjLi2ELb0EEEvNS_4cuda6detail10TensorInfoIKT_T0_EES8_S8_bS8_S8_"
    "NS5_IS6_S8_EES8_NS5_IlS8_EES8_PS6_"
)
K_SORT = (
    "_ZN2at6native20bitonicSortKVInPlaceILin1ELin1ELi16ELi16EfljNS0_4GTOpIfLb1EEEEEvNS_4cuda6detail"
    "10TensorInfoIT3_T2_EES8_S8_S8_NS6_IT4_S8_EES8_T5_"
)
K_MASKED_FILL = (
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_18masked_fill_kernelERNS_18TensorIterator"
    "BaseERKN3c106ScalarEENKUlvE_clEvENKUlvE5_clEvEUlfbE_St5arrayIPcLm3EEEEviT0_T1_"
)
K_SOFTMAX = (
    "_ZN2at6native43_GLOBAL__N__5b3d2ed9_10_SoftMax_cu_9f978f6319cunn_SoftMaxForwardILi4EfffNS1_25"
    "SoftMaxForwardEpilogueEEEvPT2_PKT0_l"
)
K_EXPONENTIAL = (
    "_ZN2at6native12_GLOBAL__N_143distribution_elementwise_grid_stride_kernelIfLi4EZNS0_9templates4cuda"
    "21uniform_and_transformIffPNS_17CUDAGeneratorImplEZZZNS4_18exponential_kernelIS7_EEvRNS_18Tensor"
    "IteratorBaseEdT_ENKUlvE_clEvENKUlvE0_clEvEUlfE_EEvSA_T1_T2_EUlP24curandStatePhilox4_32_10E0_ZNS1_"
    "27distribution_nullary_kernelIffLi4ES7_SJ_SE_EEvSA_SF_RKT3_T4_EUlifE_EEvlNS_15PhiloxCudaStateESG_SH_"
)
K_ARGMAX = "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_10ArgMaxOpsIfEEjSt4pairIflELi4EEEEEvT1_"
# cuBLAS(Lt): split-K GEMMs finish with a reduction; a one-row product is a GEMV.
K_SPLITK_REDUCE = (
    "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb1ELb0ELb0ELb0ELb0ELb0EEEvNS_18cublasSplitKParams"
    "IT4_EEPKT2_PKT3_PT5_PKS5_SC_PKT6_PKT1_PS5_PvS9_S9_SB_"
)
K_GEMV = (
    "_Z17gemv2T_kernel_valIiiN3c104HalfES1_fLi128ELi16ELi4ELi4ELb0ELb0E19cublasGemvParamsExIi30cublas"
    "GemvTensorStridedBatchedIKS1_ES5_IS1_EfEEvT11_T4_S9_"
)

# H100: cuBLAS's Hopper kernels (sm90_xmma for large tiles, nvjet for the rest), FlashAttention 3.
K_GEMM_PREFILL = (
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
    "_kernel__5x_cublas"
)
K_GEMM_PREFILL_WIDE = (
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off"
    "_kernel__5x_cublas"
)
K_NVJET_PREFILL_NARROW = "nvjet_hsh_128x64_64x6_2x1_v_bz_TNT"
K_NVJET_PREFILL_DEEP = "nvjet_hsh_128x128_64x5_2x1_v_bz_coopA_TNT"
K_GEMM_DECODE = "nvjet_hsh_64x8_64x16_4x1_v_bz_splitK_TNT"
K_NVJET_DECODE = "nvjet_hsh_64x8_64x16_4x1_v_bz_TNT"
K_NVJET_DECODE_WIDE = "nvjet_hsh_128x8_64x12_2x1_v_bz_TNT"
K_NVJET_LOGITS = "nvjet_hsh_192x8_64x8_2x1_v_bz_TNT"
K_FA3_PREFILL = (
    "_ZN7cutlass13device_kernelIN5flash20enable_sm90_or_laterINS1_16FlashAttnFwdSm90INS1_25Collective"
    "MainloopFwdSm90ILi2EN4cute5tupleIJNS5_1CILi1EEES8_S8_EEENS6_IJNS7_ILi128EEENS7_ILi112EEENS7_ILi64EEE"
    "EEELi64EN7cutlass6half_tEfNSF_4arch4Sm90ELb1ELb0ELb0ELb1ELb1ELb1ELb0ELb1ELb0ELb0ELb0ELb0EEENS1_21"
    "CollectiveEpilogueFwdINS6_IJSA_SB_SC_EEES9_SG_SI_Li256ELb1ELb1ELb0ELb0EEENS1_36VarlenDynamicPersistent"
    "TileSchedulerILi128ELi112ELi256ELi128ELb0ELb1ELb1ELb1ELb0ELb0EEEEEEEEvNT_6ParamsE"
)
K_FA3_DECODE = (
    "_ZN7cutlass13device_kernelIN5flash20enable_sm90_or_laterINS1_16FlashAttnFwdSm90INS1_25Collective"
    "MainloopFwdSm90ILi2EN4cute5tupleIJNS5_1CILi1EEES8_S8_EEENS6_IJNS7_ILi64EEENS7_ILi128EEENS7_ILi64EEE"
    "EEELi64EN7cutlass6half_tEfNSF_4arch4Sm90ELb0ELb0ELb0ELb1ELb1ELb1ELb1ELb0ELb0ELb0ELb1ELb0EEENS1_21"
    "CollectiveEpilogueFwdINS6_IJSA_SB_SC_EEES9_SG_SI_Li128ELb1ELb1ELb1ELb0EEENS1_36VarlenDynamicPersistent"
    "TileSchedulerILi64ELi128ELi128ELi128ELb1ELb1ELb1ELb1ELb0ELb0EEEEEEEEvNT_6ParamsE"
)
K_FA3_COMBINE = (
    "_ZN7cutlass13device_kernelIN5flash19FlashAttnFwdCombineIN4cute5tupleIJNS3_1CILi8EEENS5_ILi64EEEEEE"
    "Li7ELi256ELi1ELb0ELb1EN7cutlass6half_tEfNS_4arch4Sm90EEEEEvNT_6ParamsE"
)

# A100: cuBLAS's Ampere kernels (sm80_xmma, ampere_*, a CUTLASS wmma kernel for the smallest
# product), FlashAttention 2 as vLLM builds it: with a paged KV cache the split-KV kernel runs
# for prefill too (unsplit, causal), and decode adds the combine.
K_SM80_PREFILL = (
    "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage5_warpsize2x2x1_tensor16x8x16_kernel"
)
K_SM80_PREFILL_WIDE = (
    "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize256x128x32_stage3_warpsize4x2x1_tensor16x8x16_kernel"
)
K_AMPERE_PREFILL_NARROW = "ampere_fp16_s16816gemm_fp16_128x64_ldg8_f2f_stages_64x4_tn"
K_AMPERE_PREFILL_DEEP = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn"
K_SM80_DECODE_SPLITK = (
    "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize64x32x64_stage5_warpsize2x1x1_tensor16x8x16_kernel"
)
K_CUTLASS_DECODE = "cutlass_80_wmma_tensorop_f16_s161616gemm_f16_16x16_128x2_tn_align8"
K_SM80_DECODE_WIDE = (
    "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize32x64x64_stage6_warpsize2x2x1_tensor16x8x16_kernel"
)
K_AMPERE_LOGITS = "ampere_fp16_s16816gemm_fp16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn"
K_FLASH = (  # flash_fwd_splitkv_kernel<..., Is_causal, ..., Split=false, ...>: prefill
    "_ZN5flash24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi64ELi64ELi256ELi4ELb0ELb0EN7cutlass"
    "6half_tE19Flash_kernel_traitsILi64ELi64ELi256ELi4ES3_EELb1ELb0ELb0ELb0ELb1ELb0ELb0ELb0EEEv"
    "NS_16Flash_fwd_paramsE"
)
K_FLASH_SPLITKV = (  # Split=true: decode
    "_ZN5flash24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi64ELi64ELi128ELi4ELb0ELb0EN7cutlass"
    "6half_tE19Flash_kernel_traitsILi64ELi64ELi128ELi4ES3_EELb0ELb0ELb0ELb0ELb1ELb0ELb1ELb0EEEv"
    "NS_16Flash_fwd_paramsE"
)
K_FLASH_COMBINE = (
    "_ZN5flash32flash_fwd_splitkv_combine_kernelI23Flash_fwd_kernel_traitsILi64ELi64ELi128ELi4ELb0ELb0E"
    "N7cutlass6half_tE19Flash_kernel_traitsILi64ELi64ELi128ELi4ES3_EELi4ELi1ELb1EEEvNS_16Flash_fwd_paramsE"
)

# (name, grid, block, warp instructions per block): shapes as the real kernels launch them.
Shape = tuple[str, tuple[int, int, int], tuple[int, int, int], int]
# A GEMM of the model: its role, and whether its token count is a prefill's.
GEMM_ROLES = ("qkv", "out", "fc1", "fc2", "logits")


@dataclass(frozen=True)
class Platform:
    """What one GPU generation runs for the same model: cuBLAS's kernel per GEMM, the attention
    kernels, and how long kernels take there relative to an H100 (`slowdown`, by kind)."""

    # role -> (kernel, tile M, tile N, split-K ways) for prefill- and decode-sized products
    prefill_gemms: dict[str, tuple[str, int, int, int]]
    decode_gemms: dict[str, tuple[str, int, int, int]]
    attention_prefill: str
    attention_decode: str
    attention_combine: str
    gemm_block: int  # threads per CTA of the large-tile GEMMs
    slowdown: dict[str, float]
    min_duration_ns: int


H100 = Platform(
    prefill_gemms={
        "qkv": (K_GEMM_PREFILL, 128, 128, 1),
        "out": (K_NVJET_PREFILL_NARROW, 128, 64, 1),
        "fc1": (K_GEMM_PREFILL_WIDE, 128, 256, 1),
        "fc2": (K_NVJET_PREFILL_DEEP, 128, 128, 1),
        "logits": (K_NVJET_LOGITS, 8, 192, 1),
    },
    decode_gemms={
        "qkv": (K_GEMM_DECODE, 8, 64, 4),
        "out": (K_NVJET_DECODE, 8, 64, 1),
        "fc1": (K_NVJET_DECODE_WIDE, 8, 128, 1),
        "fc2": (K_GEMM_DECODE, 8, 64, 4),
        "logits": (K_NVJET_LOGITS, 8, 192, 1),
    },
    attention_prefill=K_FA3_PREFILL,
    attention_decode=K_FA3_DECODE,
    attention_combine=K_FA3_COMBINE,
    gemm_block=384,
    slowdown={"gemm": 1.0, "attention": 1.0, "memory": 1.0},
    min_duration_ns=1500,
)
# A100 against H100 (dense fp16: 312 vs 989 TFLOP/s; HBM: 2.0 vs 3.35 TB/s): GEMMs and
# attention lose most, memory-bound kernels about the bandwidth ratio.
A100 = Platform(
    prefill_gemms={
        "qkv": (K_SM80_PREFILL, 128, 128, 1),
        "out": (K_AMPERE_PREFILL_NARROW, 128, 64, 1),
        "fc1": (K_SM80_PREFILL_WIDE, 256, 128, 1),
        "fc2": (K_AMPERE_PREFILL_DEEP, 128, 128, 1),
        "logits": (K_AMPERE_LOGITS, 64, 64, 1),
    },
    decode_gemms={
        "qkv": (K_SM80_DECODE_SPLITK, 64, 32, 4),
        "out": (K_CUTLASS_DECODE, 16, 16, 1),
        "fc1": (K_SM80_DECODE_WIDE, 32, 64, 1),
        "fc2": (K_SM80_DECODE_SPLITK, 64, 32, 4),
        "logits": (K_AMPERE_LOGITS, 64, 64, 1),
    },
    attention_prefill=K_FLASH,
    attention_decode=K_FLASH_SPLITKV,
    attention_combine=K_FLASH_COMBINE,
    gemm_block=256,
    slowdown={"gemm": 2.1, "attention": 1.8, "memory": 1.5},
    min_duration_ns=2200,
)


# RTX 2060 (Turing, sm_75): cuBLAS's Turing kernels; vLLM runs its XFormers backend there (no
# FlashAttention before Ampere): xFormers' CUTLASS kernel for prefill, vLLM's paged attention v2
# and its reduce for decode. Against an H100: about 1/19 the fp16 tensor throughput, 1/10 the
# bandwidth.
K_TURING_PREFILL = "turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn"
K_TURING_PREFILL_WIDE = "turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn"
K_TURING_NARROW = "turing_fp16_s1688gemm_fp16_128x64_sliced1x2_ldg8_f2f_tn"
K_TURING_DECODE = "turing_fp16_s1688gemm_fp16_64x64_sliced1x2_ldg8_f2f_tn"
K_XFORMERS_PREFILL = (
    "_Z39fmha_cutlassF_f16_aligned_64x64_rf_sm75N15AttentionKernelIN7cutlass6half_tENS0_4arch4Sm75E"
    "Lb1ELi64ELi64ELi64ELb1ELb1EE6ParamsE"
)
K_PAGED_ATTENTION = (
    "_ZN4vllm25paged_attention_v2_kernelIttLi64ELi16ELi128ELNS_18Fp8KVCacheDataTypeE0ELb0ELi512EEEvPfS2_"
    "PT_PKS3_PKT0_S9_ifPKiSB_iPKfiiiSD_SD_"
)
K_PAGED_ATTENTION_REDUCE = (
    "_ZN4vllm32paged_attention_v2_reduce_kernelItLi64ELi128ELi512EEEvPT_PKfS4_PKS1_PKii"
)

RTX2060 = Platform(
    prefill_gemms={
        "qkv": (K_TURING_PREFILL, 128, 128, 1),
        "out": (K_TURING_NARROW, 128, 64, 1),
        "fc1": (K_TURING_PREFILL_WIDE, 256, 128, 1),
        "fc2": (K_TURING_PREFILL, 128, 128, 1),
        "logits": (K_TURING_DECODE, 64, 64, 1),
    },
    decode_gemms={
        "qkv": (K_TURING_DECODE, 64, 64, 1),
        "out": (K_TURING_DECODE, 64, 64, 1),
        "fc1": (K_TURING_DECODE, 64, 64, 1),
        "fc2": (K_TURING_DECODE, 64, 64, 1),
        "logits": (K_TURING_DECODE, 64, 64, 1),
    },
    attention_prefill=K_XFORMERS_PREFILL,
    attention_decode=K_PAGED_ATTENTION,
    attention_combine=K_PAGED_ATTENTION_REDUCE,
    gemm_block=256,
    slowdown={"gemm": 14.0, "attention": 11.0, "memory": 9.0},
    min_duration_ns=3000,
)


def platform_for(arch: str) -> Platform:
    """Ampere (sm_80, sm_86) gets the A100's kernels, Turing and Volta (sm_75, sm_70) the RTX
    2060's; everything else the H100's."""
    sass = ARCH_SASS.get(arch, 90)
    if sass in (80, 86):
        return A100
    return RTX2060 if sass in (70, 75) else H100


def kernel_kind(name: str) -> str:
    """ "gemm", "attention" or "memory" (elementwise, norms, copies, the sampler)."""
    if name.startswith(("sm90_", "sm80_", "nvjet_", "ampere_", "turing_", "cutlass_")) or "cublas" in name:
        return "gemm"
    if "flash" in name or "fmha_" in name or "paged_attention" in name:
        return "attention"
    return "memory"


def _elementwise(name: str, numel: int, per_block: int) -> Shape:
    return name, (max(1, math.ceil(numel / 512)), 1, 1), (128, 1, 1), per_block


def _gemm(platform: Platform, role: str, tokens: int, n: int, k: int, *, prefill: bool) -> list[Shape]:
    if tokens == 1 and role != "logits":
        return [(K_GEMV, (math.ceil(n / 4), 1, 1), (128, 1, 1), 4 * (k // 16) * 9)]
    name, tile_m, tile_n, splits = (platform.prefill_gemms if prefill else platform.decode_gemms)[role]
    large = tile_m >= 64 and tile_n >= 64
    block = (platform.gemm_block if large else 128, 1, 1)
    grid = (math.ceil(n / tile_n), math.ceil(tokens / tile_m), splits)
    per_block = (block[0] // 32) * (k // 64 // splits) * (160 if large else 60)
    shapes = [(name, grid, block, max(per_block, 40))]
    if splits > 1:
        shapes.append(
            (K_SPLITK_REDUCE, (math.ceil(n / 32), math.ceil(tokens / 16), 1), (32, 16, 1), 16 * 3 * splits)
        )
    return shapes


def _block_kernels(platform: Platform, tokens: int, prefill: bool, batch: int) -> list[Shape]:
    """One decoder block of OPT: pre-LN attention and a ReLU MLP."""
    norm = (K_LAYER_NORM, (tokens, 1, 1), (32, 4, 1), 4 * (HIDDEN // 128) * 30)
    if prefill:
        attention = [
            (
                platform.attention_prefill,
                (math.ceil(tokens / batch / 64), HEADS, batch),
                (128, 1, 1),
                4 * 2200,
            )
        ]
    else:
        attention = [
            (platform.attention_decode, (1, HEADS, batch * 4), (128, 1, 1), 4 * 620),
            (platform.attention_combine, (math.ceil(batch * HEADS / 16), 1, 1), (128, 1, 1), 4 * 48),
        ]
    return [
        norm,
        *_gemm(platform, "qkv", tokens, 3 * HIDDEN, HIDDEN, prefill=prefill),
        (K_CACHE, (tokens, 1, 1), (min(HIDDEN, 1024), 1, 1), 24 * 22),
        *attention,
        *_gemm(platform, "out", tokens, HIDDEN, HIDDEN, prefill=prefill),
        _elementwise(K_ADD, tokens * HIDDEN, 4 * 14),
        norm,
        *_gemm(platform, "fc1", tokens, FFN, HIDDEN, prefill=prefill),
        _elementwise(K_RELU, tokens * FFN, 4 * 12),
        *_gemm(platform, "fc2", tokens, HIDDEN, FFN, prefill=prefill),
        _elementwise(K_ADD, tokens * HIDDEN, 4 * 14),
    ]


def _step_kernels(
    prefill: bool, tokens: int, batch: int, platform: Platform = H100
) -> Iterator[tuple[int, Shape, bool]]:
    """One step as (decoder block, or -1 outside the blocks, shape, part of the model's forward).

    The model's forward (embeddings, the decoder blocks, the final norm) is what vLLM captures
    into a CUDA graph; selecting the last tokens' hidden states, the LM head and the sampler run
    eagerly after it, so the sampler's launch always ends the step as an ordinary launch.
    """
    embed = K_EMBED if tokens > 16 else K_EMBED_SMALL
    rows = math.ceil(tokens * HIDDEN / 256)
    yield -1, _elementwise(K_POS_OFFSET, tokens, 4 * 6), True
    yield -1, (embed, (rows, 1, 1), (128, 1, 1), 4 * 11), True
    yield -1, (embed, (rows, 1, 1), (128, 1, 1), 4 * 11), True
    yield -1, _elementwise(K_ADD, tokens * HIDDEN, 4 * 14), True
    for block in range(BLOCKS):
        for shape in _block_kernels(platform, tokens, prefill, batch):
            yield block, shape, True
    yield -1, (K_LAYER_NORM, (tokens, 1, 1), (32, 4, 1), 4 * 180), True
    yield -1, (K_GATHER, (math.ceil(batch * HIDDEN / 512), 1, 1), (128, 1, 1), 4 * 9), False
    for shape in _gemm(platform, "logits", batch, VOCAB, HIDDEN, prefill=prefill):
        yield -1, shape, False
    logits = batch * VOCAB
    yield -1, _elementwise(K_TO_FLOAT, logits, 4 * 10), False
    yield -1, _elementwise(K_DIV, logits, 4 * 12), False
    yield -1, (K_TOPK, (batch, 1, 1), (1024, 1, 1), 32 * 900), False
    yield -1, (K_SORT, (1, batch, 1), (16, 1, 1), 16 * 40), False
    yield -1, _elementwise(K_MASKED_FILL, logits, 4 * 12), False
    yield -1, (K_SOFTMAX, (batch, 1, 1), (1024, 1, 1), 32 * 1500), False
    yield -1, (K_EXPONENTIAL, (min(264, math.ceil(logits / 512)), 1, 1), (256, 1, 1), 8 * 160), False
    yield -1, _elementwise(K_DIV, logits, 4 * 12), False
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
    platform = platform_for(spec.trace_gpu_arch)
    starts, position = [], 0
    for _, prefill, _ in _steps(spec.layers):
        if position >= n:
            break
        starts.append(position)
        position += sum(1 for _ in _step_kernels(prefill, 2 if not prefill else 128, 2, platform))
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
    the step's first eager launch. The first decoder block and the eager tail (the LM head and the
    sampler) of each listed step are traced, up to `max_traced` kernels, as the tracer's kernel
    window would do; nothing runs while a stream captures, so in a graph step the window covers
    the eager tail only. Of those, only launches of at most `max_traced_warps` warps are traced:
    an instruction trace holds every warp of every block, and must simulate in seconds.
    """
    rng = random.Random(spec.seed)
    platform = platform_for(spec.trace_gpu_arch)
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
        for block, (name, grid, block_dim, per_block), forward in _step_kernels(
            prefill, tokens, batch, platform
        ):
            if emitted == spec.kernels:
                return
            while kernel_id == per_ctx[ctx_index]:
                ctx_index, kernel_id = ctx_index + 1, 0
            kernel_id += 1
            emitted += 1
            captured = graph_step and forward
            window = not forward if graph_step else (block == 0 or not forward)
            blocks = grid[0] * grid[1] * grid[2]
            warps = blocks * math.ceil(block_dim[0] * block_dim[1] * block_dim[2] / 32)
            is_traced = listed and window and traced < spec.max_traced and warps <= spec.max_traced_warps
            traced += is_traced
            insts = max(1, int(blocks * per_block * rng.uniform(0.93, 1.07)))
            if is_traced:  # what its instruction trace holds, warp instruction for warp instruction
                insts = warps * warp_program_length(name)
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
                batch=batch,
                tokens=tokens,
            )
        if spec.kernels == 0:
            return


def steps_kernel_count(layers: tuple[str, ...], arch: str = "sm_90") -> int:
    """How many launches the steps in `layers` make: the size of a run that is exactly them."""
    platform = platform_for(arch)
    return sum(
        sum(1 for _ in _step_kernels(prefill, 8 * 128 if prefill else 8, 8, platform))
        for _, (_, prefill, _) in zip(range(len(layers)), _steps(layers), strict=False)
    )


# --- Files ----------------------------------------------------------------------------------------


def grouped_name(trace_file: str) -> str:
    """The name Accel-Sim's post-processing gives a trace file: `.trace` -> `.traceg`, `.trace.xz` -> `.traceg.xz`."""
    if trace_file.endswith(".trace.xz"):
        return trace_file[: -len(".trace.xz")] + ".traceg.xz"
    return trace_file + "g"


@dataclass(frozen=True)
class Opcodes:
    """The SASS one generation's generated warps run: opcode names taken from real traces of it
    (../shared/fixtures/real-simulatable/), each one the simulator's opcode map for it knows."""

    mov: str
    s2r: str
    imad: str
    address: str  # the address arithmetic before a load or store
    compare: str
    load: str
    store: str
    alu: tuple[str, ...]
    width: int  # bytes per thread of `load` and `store`, as the tracer derives it from the name
    pc_step: int  # bytes per instruction
    control_words: bool = False  # Pascal: every fourth 8-byte slot is a control word, no instruction


# Turing: a vectorAdd traced on sm_75 (every opcode below appears in it).
TURING_OPCODES = Opcodes(
    "MOV", "S2R", "IMAD", "IMAD.WIDE", "ISETP.GE.AND", "LDG.E.SYS", "STG.E.SYS", ("FADD",), 4, 16
)
# Ampere: PyTorch kernels traced on an A100 (sm_80).
AMPERE_OPCODES = Opcodes(
    "IMAD.MOV.U32",
    "S2R",
    "IMAD",
    "IMAD.WIDE",
    "ISETP.GE.AND",
    "LDG.E.64",
    "STG.E.64",
    ("FFMA", "FMUL", "FADD", "IADD3", "LOP3.LUT"),
    8,
    16,
)
# Pascal: a vecAdd traced on sm_61.
PASCAL_OPCODES = Opcodes(
    "MOV", "S2R", "XMAD", "IADD", "ISETP.GE.AND", "LDG.E.CG", "STG.E", ("FADD", "SHL", "SHR"), 4, 8, True
)


def opcodes_for(sass: int) -> Opcodes:
    """Volta's SASS is Turing's; Ada and Hopper (no real trace here, and no opcode map in
    Accel-Sim, whose simulator stops at `unsupported binary version: 90`) keep Ampere's names."""
    if sass >= 80:
        return AMPERE_OPCODES
    return TURING_OPCODES if sass >= 70 else PASCAL_OPCODES


def warp_program_length(name: str) -> int:
    """Warp instructions each warp of the kernel executes: tens, the same for every launch of it."""
    return 6 + 4 * (2 + zlib.crc32(name.encode()) % 9)


TRACE_FORMAT_LINE = (
    "#traces format = [line_num] PC mask dest_num [reg_dests] opcode src_num [reg_srcs] "
    "mem_width [adrrescompress?] [mem_addresses] immediate"
)


def tracer_version(launch: Launch) -> int:
    """5 for per-context runs (`-ctx_` file names); 4 for legacy ones, whose tracer prints no immediate."""
    return 4 if launch.ctx is None else 5


def trace_header(launch: Launch, sass: int) -> str:
    """The header the tracer (accel-sim-framework tracer_tool.cu) writes, and its format line."""
    version = tracer_version(launch)
    format_line = TRACE_FORMAT_LINE if version >= 5 else TRACE_FORMAT_LINE.removesuffix(" immediate")
    gx, gy, gz = launch.grid
    bx, by, bz = launch.block
    regs, static, dynamic = kernel_resources(launch.name, sass)
    place = random.Random(f"{launch.ctx}:bases")  # one context, one stream and shared-memory window
    shmem_base = place.randrange(0x7F00, 0x7FFF) << 32
    stream = 0 if launch.ctx is None else int(launch.ctx, 16) % 2**32 // 16 * 16
    return (
        f"-kernel name = {launch.name}\n-kernel id = {launch.kernel_id}\n"
        f"-grid dim = ({gx},{gy},{gz})\n-block dim = ({bx},{by},{bz})\n"
        f"-shmem = {static + dynamic}\n-nregs = {regs}\n"
        f"-binary version = {sass}\n-cuda stream id = {stream}\n"
        f"-shmem base_addr = 0x{shmem_base:016x}\n-local mem base_addr = 0x{shmem_base - 0x2000000:016x}\n"
        f"-nvbit version = 1.7.4\n-accelsim tracer version = {version}\n-enable lineinfo = 0\n\n"
        f"{format_line}\n\n"
    )


def warp_program(launch: Launch, sass: int, rng: random.Random) -> list[tuple[str, str, int]]:
    """One warp's instructions as (opcode, operands before the memory part, memory operand index):
    the same program for every warp (SIMT), `warp_program_length` long. Index -1: no memory."""
    ops = opcodes_for(sass)
    body = (warp_program_length(launch.name) - 6) // 4
    program = [
        (ops.mov, "1 R1", "0", -1),
        (ops.s2r, "1 R0", "0", -1),
        (ops.s2r, "1 R3", "0", -1),
        (ops.imad, "1 R0", "2 R3 R0", -1),
        (ops.compare, "0", "1 R0", -1),
    ]
    for n in range(body):
        program += [
            (ops.address, "1 R2", "2 R0 R5", -1),
            (ops.load, "1 R4", "1 R2", 2 * n),
            (ops.alu[rng.randrange(len(ops.alu))], "1 R6", "2 R4 R6", -1),
            (ops.store, "0", "2 R2 R6", 2 * n + 1),
        ]
    program.append(("EXIT", "0", "0", -1))
    return program


def warp_lines(
    launch: Launch, sass: int, rng: random.Random
) -> Iterator[tuple[tuple[int, int, int], int, list[str]]]:
    """Every warp of every block, in block order (x fastest, as the simulator numbers them), with
    its instruction lines as the post-processor keeps them: everything after the warp id, i.e.
    `PC mask dest_num [reg_dests] opcode src_num [reg_srcs] mem_width [format base stride] immediate `,
    each field followed by a space, as the tracer prints them."""
    ops = opcodes_for(sass)
    gx, gy, gz = launch.grid
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    warps = math.ceil(threads / 32)
    program = warp_program(launch, sass, rng)
    immediate = "0 " if tracer_version(launch) >= 5 else ""  # v5 prints the immediate, v4 nothing
    arrays = [rng.randrange(0x7F00_0000_0000, 0x7F80_0000_0000) & ~0xFFFFF for _ in range(8)]
    pcs, pc = [], 0
    for _ in program:
        if ops.control_words and pc % 0x20 == 0:
            pc += ops.pc_step
        pcs.append(pc)
        pc += ops.pc_step
    for z in range(gz):
        for y in range(gy):
            for x in range(gx):
                block_index = (z * gy + y) * gx + x
                for warp in range(warps):
                    active = min(32, threads - 32 * warp)
                    mask = f"{(1 << active) - 1:08x}"
                    first = (block_index * threads + 32 * warp) * ops.width
                    lines = []
                    for (opcode, dest, sources, memory), at in zip(program, pcs, strict=True):
                        if memory < 0:
                            tail = "0 " + immediate
                        else:
                            base = arrays[memory % len(arrays)] + first + (memory // len(arrays)) * 0x100000
                            tail = f"{ops.width} 1 0x{base:x} {ops.width} " + immediate
                        lines.append(f"{at:04x} {mask} {dest} {opcode} {sources} {tail}")
                    yield (x, y, z), warp, lines


def raw_trace(launch: Launch, sass: int, rng: random.Random) -> str:
    """The instruction trace as the tracer writes it: the header, then one line per warp
    instruction prefixed by `block_x block_y block_z warp`, as warps retire them: warps of a few
    resident blocks interleaved, instruction by instruction."""
    warps = list(warp_lines(launch, sass, rng))
    order = random.Random(rng.random())
    out = [trace_header(launch, sass)]
    resident = 4  # blocks at a time
    per_block = math.ceil(launch.block[0] * launch.block[1] * launch.block[2] / 32)
    for start in range(0, len(warps), resident * per_block):
        wave = warps[start : start + resident * per_block]
        order.shuffle(wave)
        for step in range(max(len(lines) for _, _, lines in wave)):
            for (x, y, z), warp, lines in wave:
                if step < len(lines):
                    out.append(f"{x} {y} {z} {warp} {lines[step]}\n")
    return "".join(out)


def grouped_trace(launch: Launch, sass: int, rng: random.Random) -> str:
    """What Accel-Sim's post-processing writes from the raw trace (post-traces-processing.cpp): the
    header lines and blank lines as they were, one more blank line (its last, empty read), then per
    block `#BEGIN_TB`, `thread block = x,y,z`, and per warp `warp = w`, `insts = n` and its lines."""
    out = [trace_header(launch, sass), "\n"]
    current = None
    for block, warp, lines in warp_lines(launch, sass, rng):
        if block != current:
            if current is not None:
                out.append("\n#END_TB\n")
            out.append(f"\n#BEGIN_TB\n\nthread block = {block[0]},{block[1]},{block[2]}\n")
            current = block
        out.append(f"\nwarp = {warp}\ninsts = {len(lines)}\n")
        out.extend(f"{line}\n" for line in lines)
    if current is not None:
        out.append("\n#END_TB\n")
    return "".join(out)


def instruction_trace(launch: Launch, sass: int, rng: random.Random, *, grouped: bool = False) -> bytes:
    """A traced kernel's instruction trace, whole: every warp of every block of its grid, raw as
    the tracer writes `.trace[.xz]` or grouped as post-processing writes `.traceg[.xz]` (xz for
    per-context runs, whose tracer compresses). The same `rng` state gives the same warps either way."""
    text = (grouped_trace if grouped else raw_trace)(launch, sass, rng)
    data = text.encode()
    return lzma.compress(data, format=lzma.FORMAT_XZ, preset=6) if launch.ctx is not None else data


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


# One launch as the harness's clock saw it: (step, ctx, kernel id, start ns, end ns, captured).
TimingRow = tuple[int, str | None, int, int, int, bool]

# `nsys stats --report cuda_gpu_trace --format csv`: the columns in order, as Nsight Systems
# 2024 and later print them (the report script's `query_stub`, which also added `GreenCtx` and
# the `:mangled` option; the unit suffixes are what `nsys stats` appends to `:ts_ns`, `:dur_ns`,
# `:mem_B` and `:thru_B` columns). Releases before GreenCtx print the same list without it, and
# `Throughput (MBps)`.
NSYS_GPU_TRACE_COLUMNS = (
    "Start (ns)",
    "Duration (ns)",
    "CorrId",
    "GrdX",
    "GrdY",
    "GrdZ",
    "BlkX",
    "BlkY",
    "BlkZ",
    "Reg/Trd",
    "StcSMem (MB)",
    "DymSMem (MB)",
    "Bytes (MB)",
    "Throughput (MB/s)",
    "SrcMemKd",
    "DstMemKd",
    "Device",
    "Ctx",
    "GreenCtx",
    "Strm",
    "Name",
)
NSYS_STREAM = 7  # the stream vLLM's model runner works on; graph replays run there too


@dataclass(frozen=True)
class MemoryOp:
    """A memcpy or memset between the kernels: nsys lists them, the tracer does not."""

    ctx: str | None
    name: str  # "[CUDA memcpy Host-to-Device]", "[CUDA memcpy Device-to-Host]", "[CUDA memset]"
    start: int
    end: int
    bytes: int
    src_kind: str  # memcpy source kind, or the memset's memory kind
    dst_kind: str  # "" for a memset


def kernel_duration(launch: Launch, platform: Platform) -> int:
    """Nanoseconds on the GPU: instructions at an H100's rate, slowed by kind on other GPUs."""
    scaled = launch.total_insts / 40 * platform.slowdown[kernel_kind(launch.name)]
    return max(platform.min_duration_ns, int(scaled))


def step_host_copies(launch: Launch) -> list[tuple[str, int, str, str]]:
    """What vLLM's model runner copies before a step: (name, bytes, source, destination).

    Input ids (int32), positions and slot mapping (int64), query start offsets and sequence
    lengths (int32) and the block table, from pinned buffers; then a memset of the padding.
    """
    htod, pinned = "[CUDA memcpy Host-to-Device]", "Pinned"
    return [
        (htod, launch.tokens * 4, pinned, "Device"),
        (htod, launch.tokens * 8, pinned, "Device"),
        (htod, (launch.batch + 1) * 4, pinned, "Device"),
        (htod, launch.batch * 4, pinned, "Device"),
        (htod, launch.tokens * 8, pinned, "Device"),
        (htod, launch.batch * 128 * 4, pinned, "Device"),
        ("[CUDA memset]", 512, "Device", ""),
    ]


def kernel_resources(name: str, sass: int) -> tuple[int, int, int]:
    """(registers per thread, static and dynamic shared memory bytes) as CUPTI reports them."""
    pick = zlib.crc32(name.encode())
    kind = kernel_kind(name)
    if name in (K_SPLITK_REDUCE, K_GEMV) or name.startswith("cutlass_"):
        return 64 + pick % 3 * 16, 4096 * (1 + pick % 2), 0
    if kind == "gemm":
        dynamic = (98304, 147456, 196608, 221184) if sass >= 90 else (49152, 81920, 98304, 135168)
        return (128, 168, 232)[pick % 3], 0, dynamic[pick % 4]
    if kind == "attention":
        if "FlashAttnFwdCombine" in name or "combine" in name:
            return 90 + pick % 5 * 8, 0, 16896
        return (255 if sass < 90 else 128), 0, (49152 if sass < 90 else 114688)
    if name in (K_SOFTMAX, K_TOPK, K_SORT, K_ARGMAX, K_LAYER_NORM):
        return 32 + pick % 4 * 8, 1024 * (1 + pick % 4), 0 if name != K_SOFTMAX else 4096
    return 16 + pick % 4 * 8, 0, 0


def cascade_timing_csv(rows: list[TimingRow]) -> bytes:
    lines = ["ctx,kernel_id,start_ns,end_ns,duration_ns\n"]
    lines += [f"{ctx or ''},{kid},{start},{end},{end - start}\n" for _, ctx, kid, start, end, _ in rows]
    return "".join(lines).encode()


def nsys_timing_csv(
    spec: RunSpec, kernels: list[tuple[Launch, int, int]], memory: list[MemoryOp], rng: random.Random
) -> bytes:
    """timing.csv as `nsys stats --report cuda_gpu_trace:mangled --format csv` writes it.

    One row per GPU operation, sorted by start: kernels (with grid, block, registers and shared
    memory), memcpys and memsets (no grid; bytes, throughput and memory kinds). Every API call
    takes the next correlation id; a graph replay is one call (`cuGraphLaunch`), so all kernels
    of one replay carry the same CorrId. `Ctx` is nsys's context id (1, 2, ... here, one per
    process), not the tracer's pointer.
    """
    sass = ARCH_SASS.get(spec.trace_gpu_arch, 90)
    device = f"{spec.source_gpu or 'NVIDIA GPU'} (0)"
    contexts: dict[str | None, int] = {}
    correlation: dict[str | None, int] = {}
    replay: dict[str | None, tuple[int, int]] = {}  # ctx -> (step, CorrId) of the current replay

    def mb(value: int) -> str:
        return f"{value / 1e6:.3f}"

    def next_correlation(ctx: str | None) -> int:
        # Other API calls (stream queries, event records, allocator calls) take ids in between.
        correlation[ctx] = correlation.get(ctx, rng.randrange(300, 900)) + rng.randrange(1, 5)
        return correlation[ctx]

    operations: list[tuple[int, int, Launch | MemoryOp, int]] = [
        (start, index, launch, end) for index, (launch, start, end) in enumerate(kernels)
    ]
    operations += [(op.start, len(kernels) + index, op, op.end) for index, op in enumerate(memory)]
    operations.sort(key=lambda operation: operation[:2])
    lines = [",".join(NSYS_GPU_TRACE_COLUMNS) + "\n"]
    for start, _, operation, end in operations:
        ctx_id = str(contexts.setdefault(operation.ctx, len(contexts) + 1))
        if isinstance(operation, MemoryOp):
            corr = next_correlation(operation.ctx)
            duration = end - start
            fields = [
                str(start),
                str(duration),
                str(corr),
                *[""] * 9,
                mb(operation.bytes),
                # The report's own arithmetic: bytes * (1000000000 / duration), in integers.
                f"{operation.bytes * (1_000_000_000 // duration) / 1e6:.3f}",
                operation.src_kind,
                operation.dst_kind,
                device,
                ctx_id,
                "",
                str(NSYS_STREAM),
                operation.name,
            ]
        else:
            if operation.captured:
                step, corr = replay.get(operation.ctx, (None, 0))
                if step != operation.step:
                    corr = next_correlation(operation.ctx)
                    replay[operation.ctx] = (operation.step, corr)
            else:
                corr = next_correlation(operation.ctx)
            regs, static, dynamic = kernel_resources(operation.name, sass)
            fields = [
                str(start),
                str(end - start),
                str(corr),
                *(str(n) for n in operation.grid),
                *(str(n) for n in operation.block),
                str(regs),
                mb(static),
                mb(dynamic),
                *[""] * 4,
                device,
                ctx_id,
                "",
                str(NSYS_STREAM),
                operation.name,
            ]
        lines.append(",".join(fields) + "\n")
    return "".join(lines).encode()


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
            f"-trace_opcode_latency_initiation_int 4,2\n-gpgpu_ptx_force_max_capability {sass}\n".encode(),
        )
        write(
            f"configs/{icnt}",
            b"// interconnect: iSLIP crossbar\nnetwork_count = 2;\ntopology = fly;\n"
            b"k = 212;\nn = 1;\nrouting_function = dest_tag;\nvc_allocator = islip;\n",
        )

    platform = platform_for(spec.trace_gpu_arch)
    timing_rows: list[TimingRow] = []
    kernel_times: list[tuple[Launch, int, int]] = []
    memory_ops: list[MemoryOp] = []
    # The harness's clock has its own generator: the stats and traces are the same bytes
    # whichever timing format is asked for.
    timing_rng = random.Random(f"{spec.seed}:timing")
    clock = 1_000_000 + rng.randrange(1_000_000)
    current_step: tuple[str | None, int] | None = None
    last_launch: Launch | None = None

    def copy(ctx: str | None, name: str, size: int, src: str, dst: str) -> None:
        nonlocal clock
        clock += timing_rng.randrange(300, 1500)
        if name == "[CUDA memset]":
            duration = timing_rng.randrange(800, 1300)
        else:  # ~20 GB/s from pinned memory, ~8 GB/s into pageable, plus the DMA's start
            duration = 600 + size // (20 if src == "Pinned" else 8) + timing_rng.randrange(0, 400)
        memory_ops.append(MemoryOp(ctx, name, clock, clock + duration, size, src, dst))
        clock += duration

    def sampled_tokens_back(launch: Launch) -> None:
        if launch.name == K_ARGMAX:  # the step ran to its end: the tokens go to the host
            copy(launch.ctx, "[CUDA memcpy Device-to-Host]", launch.batch * 8, "Device", "Pageable")

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
                grouped = spec.trace_files == "grouped"
                name = launch.grouped_trace_file if grouped else launch.trace_file
                # Its own generator: the raw and the grouped layout hold the same warps.
                trace_rng = random.Random(f"{spec.seed}:{launch.ctx}:{launch.kernel_id}:trace")
                write(f"traces/{name}", instruction_trace(launch, sass, trace_rng, grouped=grouped))
            if (launch.ctx, launch.step) != current_step:
                if last_launch is not None:
                    sampled_tokens_back(last_launch)
                current_step = (launch.ctx, launch.step)
                for name, size, src, dst in step_host_copies(launch):
                    copy(launch.ctx, name, size, src, dst)
            duration = kernel_duration(launch, platform)
            # A graph replay launches its kernels back to back, without the CPU's launch overhead.
            clock += rng.randrange(600, 1800) if launch.captured else rng.randrange(2000, 9000)
            timing_rows.append(
                (launch.step, launch.ctx, launch.kernel_id, clock, clock + duration, launch.captured)
            )
            kernel_times.append((launch, clock, clock + duration))
            clock += duration
            last_launch = launch
        if last_launch is not None and not spec.crashed:
            sampled_tokens_back(last_launch)
    finally:
        for handle in (*stats_files.values(), *lists.values()):
            handle.close()
    if spec.trace_files == "grouped":
        # Post-processing writes `<list>.g` beside each list: the same lines, trace files renamed.
        for handle in lists.values():
            name = Path(handle.name).relative_to(directory).as_posix()
            lines = Path(handle.name).read_text().splitlines()
            renamed = [line if line.startswith("MemcpyHtoD") else grouped_name(line) for line in lines]
            write(f"{name}.g", "".join(f"{line}\n" for line in renamed).encode())

    if spec.timing and spec.timing_format == "nsys":
        write("timing.csv", nsys_timing_csv(spec, kernel_times, memory_ops, timing_rng))
    elif spec.timing:
        write("timing.csv", cascade_timing_csv(timing_rows))
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


def upload_run(run_id: str, spec: RunSpec, simulations: Iterable["SimSpec"] = ()) -> "UploadResult":
    """Generate a run (and simulations of it) and upload it to the configured bucket as `run_id`.

    Django and the bucket are imported here, not above: writing folders needs neither.
    """
    from ingest import bucket
    from tools.simulation import write_simulation
    from tools.upload import upload_run_folder

    with tempfile.TemporaryDirectory(prefix="cascade-run-") as tmp:
        folder = Path(tmp) / "run"
        write_run(folder, spec, run_id=run_id, key_prefix=bucket.prefix())
        for simulation in simulations:
            write_simulation(folder, spec, simulation, run_id=run_id)
        return upload_run_folder(folder, run_id, skip_unchanged=False)
