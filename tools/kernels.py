"""What vLLM runs for OPT-125m on each GPU the generator knows: the kernels' names, their
shapes' building blocks, each GPU generation's choices (`Platform`), and what a kernel's name
decides alone (its kind, its resources, its warp program's length).

The names are real (mangled C++ for PyTorch, vLLM and flash-attention, cuBLAS's own for its
GEMMs); the shapes and counts are made up so that a run looks like the tracer's output.
"""

import zlib
from dataclasses import dataclass

ARCH_SASS = {"sm_70": 70, "sm_75": 75, "sm_80": 80, "sm_86": 86, "sm_89": 89, "sm_90": 90}

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

# (name, grid, block, warp instructions per block): shapes as the real kernels launch them.
Shape = tuple[str, tuple[int, int, int], tuple[int, int, int], int]


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
    launch_ns: int  # an empty kernel's duration there: what every kernel takes before its work


# cuBLAS's kernel for each GEMM of the model, per GPU, for prefill- and decode-sized products:
# (GPU, role, prefill kernel, tile M, tile N, split-K ways, decode kernel, tile M, tile N, ways).
GEMM_CHOICES = (
    ("H100", "qkv", K_GEMM_PREFILL, 128, 128, 1, K_GEMM_DECODE, 8, 64, 4),
    ("H100", "out", K_NVJET_PREFILL_NARROW, 128, 64, 1, K_NVJET_DECODE, 8, 64, 1),
    ("H100", "fc1", K_GEMM_PREFILL_WIDE, 128, 256, 1, K_NVJET_DECODE_WIDE, 8, 128, 1),
    ("H100", "fc2", K_NVJET_PREFILL_DEEP, 128, 128, 1, K_GEMM_DECODE, 8, 64, 4),
    ("H100", "logits", K_NVJET_LOGITS, 8, 192, 1, K_NVJET_LOGITS, 8, 192, 1),
    ("A100", "qkv", K_SM80_PREFILL, 128, 128, 1, K_SM80_DECODE_SPLITK, 64, 32, 4),
    ("A100", "out", K_AMPERE_PREFILL_NARROW, 128, 64, 1, K_CUTLASS_DECODE, 16, 16, 1),
    ("A100", "fc1", K_SM80_PREFILL_WIDE, 256, 128, 1, K_SM80_DECODE_WIDE, 32, 64, 1),
    ("A100", "fc2", K_AMPERE_PREFILL_DEEP, 128, 128, 1, K_SM80_DECODE_SPLITK, 64, 32, 4),
    ("A100", "logits", K_AMPERE_LOGITS, 64, 64, 1, K_AMPERE_LOGITS, 64, 64, 1),
    ("RTX2060", "qkv", K_TURING_PREFILL, 128, 128, 1, K_TURING_DECODE, 64, 64, 1),
    ("RTX2060", "out", K_TURING_NARROW, 128, 64, 1, K_TURING_DECODE, 64, 64, 1),
    ("RTX2060", "fc1", K_TURING_PREFILL_WIDE, 256, 128, 1, K_TURING_DECODE, 64, 64, 1),
    ("RTX2060", "fc2", K_TURING_PREFILL, 128, 128, 1, K_TURING_DECODE, 64, 64, 1),
    ("RTX2060", "logits", K_TURING_DECODE, 64, 64, 1, K_TURING_DECODE, 64, 64, 1),
)  # fmt: skip


def _platform(
    gpu: str,
    attention: tuple[str, str, str],
    *,
    gemm_block: int,
    slowdown: tuple[float, float, float],
    launch_ns: int,
) -> Platform:
    """A GPU's `Platform`: its GEMMs from `GEMM_CHOICES`, its attention kernels (prefill, decode,
    combine), the large-tile GEMMs' threads per CTA, the slowdown of (gemm, attention, memory)
    kernels against an H100, and an empty kernel's nanoseconds (`tools.timing_files.kernel_duration`)."""
    rows = [row for row in GEMM_CHOICES if row[0] == gpu]
    return Platform(
        prefill_gemms={row[1]: row[2:6] for row in rows},
        decode_gemms={row[1]: row[6:10] for row in rows},
        attention_prefill=attention[0],
        attention_decode=attention[1],
        attention_combine=attention[2],
        gemm_block=gemm_block,
        slowdown=dict(zip(("gemm", "attention", "memory"), slowdown, strict=True)),
        launch_ns=launch_ns,
    )


H100 = _platform(
    "H100",
    (K_FA3_PREFILL, K_FA3_DECODE, K_FA3_COMBINE),
    gemm_block=384,
    slowdown=(1.0, 1.0, 1.0),
    launch_ns=1200,
)
# A100 against H100 (dense fp16: 312 vs 989 TFLOP/s; HBM: 2.0 vs 3.35 TB/s): GEMMs and
# attention lose most, memory-bound kernels about the bandwidth ratio.
A100 = _platform(
    "A100",
    (K_FLASH, K_FLASH_SPLITKV, K_FLASH_COMBINE),
    gemm_block=256,
    slowdown=(2.1, 1.8, 1.5),
    launch_ns=1800,
)
RTX2060 = _platform(
    "RTX2060",
    (K_XFORMERS_PREFILL, K_PAGED_ATTENTION, K_PAGED_ATTENTION_REDUCE),
    gemm_block=256,
    slowdown=(14.0, 11.0, 9.0),
    launch_ns=2500,
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


def warp_program_length(name: str) -> int:
    """Warp instructions each warp of the kernel executes: tens, the same for every launch of it."""
    return 6 + 4 * (2 + zlib.crc32(name.encode()) % 9)


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
