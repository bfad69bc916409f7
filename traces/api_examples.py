"""The API reference's examples, as the OpenAPI schema shows them (`traces.serializers`
attaches each to the shape it illustrates; the list's is set by `traces.openapi.finish_schema`).

The schema tests validate the list's and the detail's against their shapes.
"""

from drf_spectacular.utils import OpenApiExample

FAILED_SUMMARY = {
    "id": "demo-failed",
    "state": "failed",
    "error": "profiler reported status 'failed' in metadata.json",
    "created_at": "2026-11-08T08:59:02.590922Z",
    "updated_at": "2026-11-08T08:59:02.592166Z",
    "model": None,
    "layers": [],
    "source_gpu": None,
    "trace_gpu_arch": "sm_86",
    "suggested_sim_config": None,
    "kernel_count": 0,
    "bytes": 16650759,
    "has_real_timing": False,
    "has_step_timeline": False,
    "sample": False,
}
DEMO_SUMMARY = {
    "id": "demo",
    "state": "ready",
    "error": None,
    "created_at": "2026-11-08T08:59:02.587743Z",
    "updated_at": "2026-11-08T08:59:02.592073Z",
    "model": None,
    "layers": [],
    "source_gpu": None,
    "trace_gpu_arch": "sm_86",
    "suggested_sim_config": "SM86_RTX3070",
    "kernel_count": 20,
    "bytes": 16890250,
    "has_real_timing": False,
    "has_step_timeline": True,
    "sample": False,
}
SAMPLE_SUMMARY = {
    "id": "sample__facebook_opt-125m__h100-e2e",
    "state": "ready",
    "error": None,
    "created_at": "2026-11-08T06:19:57.515017Z",
    "updated_at": "2026-11-08T06:19:57.515017Z",
    "model": "facebook/opt-125m",
    "layers": ["step 0 (prefill)", "step 2 (decode)", "step 10 (decode)", "step 26 (decode)"],
    "source_gpu": "NVIDIA H100 80GB HBM3",
    "trace_gpu_arch": "sm_90",
    "suggested_sim_config": "SM90_H100",
    "kernel_count": 712,
    "bytes": 13065268,
    "has_real_timing": True,
    "has_step_timeline": True,
    "sample": True,
}
DEMO_METADATA = {
    "status": "ok",
    "files": [
        {"key": "accelsim-traces/demo/configs/config_hopper_islip.icnt", "bytes": 1352},
        {"key": "accelsim-traces/demo/configs/gpgpusim.config", "bytes": 6028},
        {"key": "accelsim-traces/demo/configs/trace.config", "bytes": 1085},
    ],
    "trace_gpu_arch": "sm_86",
    "suggested_sim_config": "SM86_RTX3070",
}


def example_kernel(kernel_id: int, *, insts: int | None = 50066, device: int | None = None) -> dict:
    kernel = {
        "ctx": "0x6165bdd7ec90",
        "kernel_id": kernel_id,
        "name": "_Z6vecAddPdS_S_i",
        "trace_file": f"kernel-{kernel_id}-ctx_0x6165bdd7ec90.trace.xz",
        "grid_dim": [98, 1, 1],
        "block_dim": [1024, 1, 1],
        "blocks": 98,
        "threads": 1024,
        "total_insts": insts,
        "total_reported_insts": insts,
        "traced": True,
        "step": "step 0 (prefill)",
        "duration_ns": None if insts is None else 2816,
    }
    if device is not None:
        kernel["device_id"] = device
        kernel["stream_id"] = 7
    return kernel


LIST_EXAMPLE = [FAILED_SUMMARY, DEMO_SUMMARY, SAMPLE_SUMMARY]
DETAIL_EXAMPLES = [
    OpenApiExample(
        "Demo",
        summary="The reference's demo (kernels trimmed)",
        value={**DEMO_SUMMARY, "metadata": DEMO_METADATA, "kernels": []},
        response_only=True,
    ),
    OpenApiExample(
        "NullTotals",
        summary="Kernels: one without totals (captured into a CUDA graph)",
        value={
            **DEMO_SUMMARY,
            "kernel_count": 2,
            "metadata": DEMO_METADATA,
            "kernels": [example_kernel(1), example_kernel(2, insts=None)],
        },
        response_only=True,
    ),
    OpenApiExample(
        "DeviceIdFork",
        summary="Kernels of the tracer fork that records devices",
        value={
            **DEMO_SUMMARY,
            "kernel_count": 2,
            "metadata": DEMO_METADATA,
            "kernels": [example_kernel(1, device=0), example_kernel(1, device=1)],
        },
        response_only=True,
    ),
]


GEMM_EXAMPLE = (
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
)
SUMMARY_EXAMPLE = {
    "id": "sample__facebook_opt-125m__h100-e2e",
    "kernel_count": 3,
    "total_insts": 2000,
    "duration_ns": 800,
    "steps": [
        {
            "name": "step 0 (prefill)",
            "phase": "prefill",
            "kernels": 3,
            "total_insts": 2000,
            "duration_ns": 800,
        }
    ],
    "kernels": [
        {
            "name": GEMM_EXAMPLE,
            "demangled": GEMM_EXAMPLE,
            "launches": 2,
            "traced": 1,
            "total_insts": 1500,
            "duration_ns": 600,
            "insts_share": 0.75,
            "time_share": 0.75,
        },
        {
            "name": "_Z6vecAddPdS_S_i",
            "demangled": "vecAdd(double*, double*, double*, int)",
            "launches": 1,
            "traced": 1,
            "total_insts": 500,
            "duration_ns": 200,
            "insts_share": 0.25,
            "time_share": 0.25,
        },
    ],
}
COMPARE_EXAMPLE = {
    "a": {"id": "h100", "kernel_count": 3, "total_insts": 2000, "duration_ns": 800},
    "b": {"id": "a100", "kernel_count": 2, "total_insts": 3000, "duration_ns": None},
    "by": "name",
    "kernels": [
        {
            "name": "_Z6vecAddPdS_S_i",
            "names": ["_Z6vecAddPdS_S_i"],
            "a": {"launches": 1, "total_insts": 500, "duration_ns": 200},
            "b": {"launches": 2, "total_insts": 3000, "duration_ns": None},
            "ratios": {"launches": 2.0, "total_insts": 6.0, "duration_ns": None},
        },
        {
            "name": GEMM_EXAMPLE,
            "names": [GEMM_EXAMPLE],
            "a": {"launches": 2, "total_insts": 1500, "duration_ns": 600},
            "b": {"launches": 0, "total_insts": 0, "duration_ns": None},
            "ratios": {"launches": 0.0, "total_insts": 0.0, "duration_ns": None},
        },
    ],
}


SUMMARY_EXAMPLES = [OpenApiExample("Summary", value=SUMMARY_EXAMPLE, response_only=True)]
COMPARISON_EXAMPLES = [OpenApiExample("Comparison", value=COMPARE_EXAMPLE, response_only=True)]
