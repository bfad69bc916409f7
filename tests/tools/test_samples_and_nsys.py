"""The shipped OPT samples look like vLLM serving runs, and timing.csv can be Nsight Systems' export."""

import csv
import json
from collections import Counter
from pathlib import Path

import pytest
from django.core.management import call_command

from tools import generator
from tools.generator import NSYS_GPU_TRACE_COLUMNS, RunSpec
from tools.samples import SAMPLES

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
        text = stats.read_text().removeprefix(generator.STATS_HEADER)
        names += [half.split(", ")[0] for half in text.split(".trace.xz, ")[1:]]
    return names


def metadata(run_id: str) -> dict:
    return json.loads((REPO / "samples" / run_id / "metadata.json").read_text())


# --- The samples ---------------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", [H100_SAMPLE, A100_SAMPLE])
def test_the_opt_samples_show_a_real_vllm_kernel_mix(run_id):
    names = kernel_names(run_id)
    assert len(names) == 700 == generator.steps_kernel_count(generator.OPT_125M_LAYERS)
    assert 25 <= len(set(names)) <= 40
    distinct = set(names)
    for kernel in (
        generator.K_EMBED,
        generator.K_EMBED_SMALL,
        generator.K_LAYER_NORM,
        generator.K_CACHE,
        generator.K_RELU,
        generator.K_ADD,
        generator.K_SOFTMAX,
        generator.K_TOPK,
        generator.K_ARGMAX,
    ):
        assert kernel in distinct
    gemms = {name for name in distinct if generator.kernel_kind(name) == "gemm"}
    assert len(gemms) >= 6  # QKV, out, FC1, FC2 and the logits in prefill and decode tile shapes


def test_the_a100_sample_is_the_same_model_on_ampere_with_ampere_kernels_and_slower():
    h100, a100 = metadata(H100_SAMPLE), metadata(A100_SAMPLE)
    assert (a100["trace_gpu_arch"], a100["suggested_sim_config"], a100["source_gpu"]) == (
        "sm_80",
        "SM80_A100",
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
    assert generator.K_CACHE in h100_names & a100_names  # PyTorch's and vLLM's own kernels are shared

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


@pytest.fixture(scope="module")
def nsys_run(tmp_path_factory) -> tuple[RunSpec, list[dict], list[str]]:
    spec = RunSpec(contexts=2, seed=21, timing_format="nsys")
    folder = tmp_path_factory.mktemp("nsys") / "run"
    generator.write_run(folder, spec)
    lines = (folder / "timing.csv").read_text().splitlines()
    with open(folder / "timing.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return spec, rows, lines


def test_the_nsys_header_is_the_documented_column_list(nsys_run):
    _, _, lines = nsys_run
    assert lines[0] == NSYS_2024_HEADER == ",".join(NSYS_GPU_TRACE_COLUMNS)


def test_memcpy_and_memset_rows_have_no_grid_and_kernel_rows_no_bytes(nsys_run):
    _, rows, _ = nsys_run
    grid_columns = ("GrdX", "GrdY", "GrdZ", "BlkX", "BlkY", "BlkZ", "Reg/Trd", "StcSMem (MB)", "DymSMem (MB)")
    memory = [row for row in rows if row["Name"].startswith("[CUDA mem")]
    kinds = Counter(row["Name"] for row in memory)
    assert set(kinds) == {"[CUDA memcpy Host-to-Device]", "[CUDA memcpy Device-to-Host]", "[CUDA memset]"}
    for row in memory:
        assert all(row[column] == "" for column in grid_columns)
        assert float(row["Bytes (MB)"]) >= 0 and row["Throughput (MB/s)"] and row["SrcMemKd"]
        assert (row["DstMemKd"] == "") == (row["Name"] == "[CUDA memset]")
    for row in rows:
        if not row["Name"].startswith("[CUDA mem"):
            assert all(row[column] != "" for column in grid_columns)
            assert row["Bytes (MB)"] == row["Throughput (MB/s)"] == row["SrcMemKd"] == ""
        assert row["GreenCtx"] == "" and row["Device"] == "NVIDIA H100 80GB HBM3 (0)"


def test_nsys_rows_are_by_start_and_correlation_ids_increase_one_id_per_graph_replay(nsys_run):
    spec, rows, _ = nsys_run
    starts = [int(row["Start (ns)"]) for row in rows]
    assert starts == sorted(starts)
    launches = list(generator.launches(spec))
    by_ctx: dict[str, list[dict]] = {}
    for row in rows:
        by_ctx.setdefault(row["Ctx"], []).append(row)
    assert sorted(by_ctx) == ["1", "2"]
    ctx_order = list(dict.fromkeys(launch.ctx for launch in launches))
    for nsys_ctx, ctx in zip(sorted(by_ctx), ctx_order, strict=True):
        ctx_rows = by_ctx[nsys_ctx]
        ids = [int(row["CorrId"]) for row in ctx_rows]
        assert ids == sorted(ids)  # non-decreasing: a replay's kernels share the graph launch's id
        kernels = [row for row in ctx_rows if row["GrdX"]]
        ctx_launches = [launch for launch in launches if launch.ctx == ctx]
        # Every execution in launch order, with the grid and block the tracer recorded.
        assert [
            (row["Name"], tuple(int(row[c]) for c in ("GrdX", "GrdY", "GrdZ", "BlkX", "BlkY", "BlkZ")))
            for row in kernels
        ] == [(launch.name, (*launch.grid, *launch.block)) for launch in ctx_launches]
        eager = [
            int(row["CorrId"])
            for row, launch in zip(kernels, ctx_launches, strict=True)
            if not launch.captured
        ]
        assert len(set(eager)) == len(eager)  # every ordinary launch is a call of its own
        replays: dict[int, set[int]] = {}
        for row, launch in zip(kernels, ctx_launches, strict=True):
            if launch.captured:
                replays.setdefault(launch.step, set()).add(int(row["CorrId"]))
        assert replays and all(len(corr_ids) == 1 for corr_ids in replays.values())
        assert not set().union(*replays.values()) & set(eager)


def test_the_timing_format_changes_only_timing_csv(tmp_path):
    generator.write_run(tmp_path / "cascade" / "run", RunSpec(kernels=300, seed=5))
    generator.write_run(tmp_path / "nsys" / "run", RunSpec(kernels=300, seed=5, timing_format="nsys"))

    def files(root: Path) -> dict[str, bytes]:
        return {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in root.rglob("*")
            if p.is_file() and p.name not in ("timing.csv", "metadata.json")
        }

    assert files(tmp_path / "cascade" / "run") == files(tmp_path / "nsys" / "run")
    cascade = (tmp_path / "cascade" / "run" / "timing.csv").read_text().splitlines()
    nsys = list(csv.DictReader((tmp_path / "nsys" / "run" / "timing.csv").read_text().splitlines()))
    durations = [int(line.split(",")[4]) for line in cascade[1:]]
    assert [int(row["Duration (ns)"]) for row in nsys if row["GrdX"]] == durations
    with pytest.raises(ValueError, match="timing_format"):
        RunSpec(timing_format="ncu")


def test_generate_trace_command_writes_nsys_timing(tmp_path):
    call_command(
        "generate_trace", "--out", str(tmp_path / "run"), "--kernels", "50", "--timing-format", "nsys"
    )
    assert (tmp_path / "run" / "timing.csv").read_text().startswith(NSYS_2024_HEADER + "\n")
