"""The shipped OPT samples look like vLLM serving runs, and timing.csv can be Nsight Systems' export."""

import csv
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from tools import generator, kernels, workload
from tools.generator import RunSpec
from tools.samples import SAMPLES
from tools.timing_files import NSYS_GPU_TRACE_COLUMNS
from tools.tracer_format import STATS_HEADER

REPO = Path(__file__).resolve().parents[2]
H100_SAMPLE = "sample__facebook_opt-125m__h100-e2e"
A100_SAMPLE = "sample__facebook_opt-125m__a100-e2e"

# `nsys stats --report cuda_gpu_trace` in Nsight Systems 2024 and later: the report script's
# columns (Start, Duration, CorrId, GrdX/Y/Z, BlkX/Y/Z, Reg/Trd, StcSMem, DymSMem, Bytes,
# Throughput, SrcMemKd, DstMemKd, Device, Ctx, GreenCtx, Strm, Name) with the units nsys appends.
NSYS_2024_HEADER = (
    "Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),"
    "Bytes (MB),Throughput (MB/s),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name"
)


def kernel_names(run_id: str) -> list[str]:
    names = []
    for stats in sorted((REPO / "samples" / run_id / "traces").glob("stats_ctx_*")):
        text = stats.read_text().removeprefix(STATS_HEADER)
        names += [half.split(", ")[0] for half in text.split(".trace.xz, ")[1:]]
    return names


def metadata(run_id: str) -> dict:
    return json.loads((REPO / "samples" / run_id / "metadata.json").read_text())


# --- The samples ---------------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", [H100_SAMPLE, A100_SAMPLE])
def test_the_opt_samples_show_a_real_vllm_kernel_mix(run_id):
    names = kernel_names(run_id)
    assert len(names) == 700 == workload.steps_kernel_count(workload.OPT_125M_LAYERS)
    assert 25 <= len(set(names)) <= 40
    distinct = set(names)
    for kernel in (
        kernels.K_EMBED,
        kernels.K_EMBED_SMALL,
        kernels.K_LAYER_NORM,
        kernels.K_CACHE,
        kernels.K_RELU,
        kernels.K_ADD,
        kernels.K_SOFTMAX,
        kernels.K_TOPK,
        kernels.K_ARGMAX,
    ):
        assert kernel in distinct
    gemms = {name for name in distinct if kernels.kernel_kind(name) == "gemm"}
    assert len(gemms) >= 6  # QKV, out, FC1, FC2 and the logits in prefill and decode tile shapes


def test_the_a100_sample_is_the_same_model_on_ampere_with_ampere_kernels_and_slower():
    h100, a100 = metadata(H100_SAMPLE), metadata(A100_SAMPLE)
    assert (a100["trace_gpu_arch"], a100["suggested_sim_config"], a100["source_gpu"]) == (
        "sm_80",
        "SM86_RTX3070",  # Accel-Sim has no SM80_A100: its one Ampere config runs SASS 80
        "NVIDIA A100-SXM4-80GB",
    )
    assert (h100["trace_gpu_arch"], h100["suggested_sim_config"]) == ("sm_90", "SM90_H100")
    assert a100["model"] == h100["model"] and a100["layers"] == h100["layers"]
    h100_names, a100_names = set(kernel_names(H100_SAMPLE)), set(kernel_names(A100_SAMPLE))
    assert not any(name.startswith(("sm90_", "nvjet_")) or "Sm90" in name for name in a100_names)
    assert any(name.startswith("sm80_xmma_gemm") for name in a100_names)
    assert any(name.startswith("ampere_fp16_s16816gemm") for name in a100_names)
    assert any(name.startswith("_ZN5flash24flash_fwd_splitkv_kernel") for name in a100_names)
    assert any(name.startswith("sm90_xmma_gemm") for name in h100_names)
    assert kernels.K_CACHE in h100_names & a100_names  # PyTorch's and vLLM's own kernels are shared

    def total_ns(run_id: str) -> int:
        with open(REPO / "samples" / run_id / "timing.csv", newline="") as f:
            return sum(int(row["duration_ns"]) for row in csv.DictReader(f))

    assert 1.3 < total_ns(A100_SAMPLE) / total_ns(H100_SAMPLE) < 3


def test_both_opt_samples_have_a_timeline_and_timing_and_stay_small():
    for run_id in (H100_SAMPLE, A100_SAMPLE):
        folder = REPO / "samples" / run_id
        assert (folder / "timeline.json").is_file() and (folder / "timing.csv").is_file()
        assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) < 1024**2
    assert set(SAMPLES) >= {H100_SAMPLE, A100_SAMPLE}


# --- timing.csv as Nsight Systems exports it ---------------------------------------------------------


def test_the_nsys_header_is_the_documented_column_list(tmp_path):
    generator.write_run(tmp_path / "run", RunSpec(kernels=50, seed=21, timing_format="nsys"))
    lines = (tmp_path / "run" / "timing.csv").read_text().splitlines()
    assert lines[0] == NSYS_2024_HEADER == ",".join(NSYS_GPU_TRACE_COLUMNS)


def test_generate_trace_command_writes_nsys_timing(tmp_path):
    call_command(
        "generate_trace", "--out", str(tmp_path / "run"), "--kernels", "50", "--timing-format", "nsys"
    )
    assert (tmp_path / "run" / "timing.csv").read_text().startswith(NSYS_2024_HEADER + "\n")
