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


# --- simulations ------------------------------------------------------------------------------------

# One simulation of the sample trace's first five launches at 1755 MHz: four compared, the fifth
# overlapped (concurrent kernels share one stat block).
SIMULATION_METRICS = {
    "mape": 10.0587,
    "aggregate_error": 11.2253,
    "pearson_r": 0.9918,
    "rpd": 9.8826,
    "nrmse": 0.1433,
    "within_10_percent": 2,
    "kernels_compared": 4,
    "sim_total_ns": 10317.3789,
    "measured_total_ns": 10480,
    "total_error": -1.5517,
    "run_sim_ns": 10883.1909,
    "run_measured_ns": 11120,
    "run_error": -2.1296,
}
SIMULATION_SUMMARY = {
    "name": "accelsim-2260456e-SM90_H100",
    "state": "ready",
    "error": None,
    "created_at": "2026-11-09T10:12:40.114205Z",
    "updated_at": "2026-11-09T10:12:41.020113Z",
    "simulator": "accel-sim",
    "simulator_build": "accelsim-commit-2260456ea5e6a1420f5734f145a4b7d8ab1d4737_modified_1.0",
    "gpgpusim_build": "4.2.0 [build gpgpu-sim_git-commit-13c67115070dc2f0876254a790d0238073ca364a_modified_2.0]",
    "config": "SM90_H100",
    "core_clock_mhz": 1755.0,
    "complete": True,
    "stopped": None,
    "kernels_simulated": 5,
    "kernels_compared": 4,
    "metrics": SIMULATION_METRICS,
}
UPLOADING_SIMULATION = {
    **SIMULATION_SUMMARY,
    "name": "accelsim-dev-SM90_H100",
    "state": "uploading",
    "created_at": "2026-11-09T11:02:03.000412Z",
    "updated_at": "2026-11-09T11:02:03.000412Z",
    "simulator": None,
    "simulator_build": None,
    "gpgpusim_build": None,
    "config": None,
    "core_clock_mhz": None,
    "complete": None,
    "kernels_simulated": 0,
    "kernels_compared": 0,
    "metrics": None,
}
SIMULATIONS_EXAMPLE = [UPLOADING_SIMULATION, SIMULATION_SUMMARY]
SAMPLE_TRACE = "sample__facebook_opt-125m__h100-e2e"
SIMULATION_LIST_EXAMPLE = [{"trace_id": SAMPLE_TRACE, **simulation} for simulation in SIMULATIONS_EXAMPLE]


def example_simulated_kernel(
    kernel_id: int, name: str, step: str, cycles: int | None, measured_ns: int, error: float | None
) -> dict:
    return {
        "ctx": "0x6165bdd7ec90",
        "kernel_id": kernel_id,
        "name": name,
        "step": step,
        "uid": kernel_id,
        "sim_cycles": cycles,
        "sim_insn": None if cycles is None else cycles * 41,
        "sim_ns": None if cycles is None else round(cycles * 1000 / 1755.0, 4),
        "measured_ns": measured_ns,
        "error": error,
        "overlapped": cycles is None,
    }


SIMULATION_DETAIL_EXAMPLE = {
    **SIMULATION_SUMMARY,
    "interrupted": [],
    "steps": [
        {"step": "step 0 (prefill)", "sim_ns": 6835.3276, "measured_ns": 7220, "error": -5.3279},
        {"step": "step 1 (decode)", "sim_ns": 3482.0513, "measured_ns": 3260, "error": 6.8114},
    ],
    "families": [
        {"family": "vecAdd", "count": 2, "mape": 10.1197, "aggregate_error": 11.0371},
        {"family": GEMM_EXAMPLE, "count": 2, "mape": 9.9977, "aggregate_error": 11.7465},
    ],
    "kernels": [
        example_simulated_kernel(1, GEMM_EXAMPLE, "step 0 (prefill)", 3694, 1820, 15.6507),
        example_simulated_kernel(2, "_Z6vecAddPdS_S_i", "step 0 (prefill)", 8302, 5400, -12.3984),
        example_simulated_kernel(3, GEMM_EXAMPLE, "step 1 (decode)", 1758, 960, 4.3447),
        example_simulated_kernel(4, "_Z6vecAddPdS_S_i", "step 1 (decode)", 4353, 2300, 7.841),
        example_simulated_kernel(5, "_Z6vecAddPdS_S_i", "step 1 (decode)", None, 640, None),
    ],
}
STOPPED_DETAIL_EXAMPLE = {
    **SIMULATION_DETAIL_EXAMPLE,
    "name": "accelsim-2260456e-SM90_H100-short",
    "complete": False,
    "stopped": "max_cycles",
    "kernels_simulated": 4,
    "interrupted": [{"uid": 5, "ctx": "0x6165bdd7ec90", "kernel_id": 5, "name": "_Z6vecAddPdS_S_i"}],
    "metrics": {
        **SIMULATION_METRICS,
        "run_sim_ns": 10317.3789,
        "run_measured_ns": 10480,
        "run_error": -1.5517,
    },
    "kernels": SIMULATION_DETAIL_EXAMPLE["kernels"][:4],
}
ACCURACY_EXAMPLE = [
    {
        "simulator_build": "accelsim-commit-2260456ea5e6a1420f5734f145a4b7d8ab1d4737_modified_1.0",
        "simulations": 12,
        "traces": 6,
        "kernels_compared": 48211,
        "mape": 10.0587,
        "aggregate_error": 11.2253,
        "pearson_r": 0.9918,
    },
    {
        "simulator_build": "accelsim-commit-73f9fac6_modified_0.0_24-10-08-10-02-11",
        "simulations": 9,
        "traces": 6,
        "kernels_compared": 40102,
        "mape": 14.7012,
        "aggregate_error": 12.903,
        "pearson_r": 0.9871,
    },
]

SIMULATION_DETAIL_EXAMPLES = [
    OpenApiExample("Simulation", value=SIMULATION_DETAIL_EXAMPLE, response_only=True),
    OpenApiExample(
        "StoppedAtMaxCycles",
        summary="Stopped at the cycle limit: the interrupted launch left out",
        value=STOPPED_DETAIL_EXAMPLE,
        response_only=True,
    ),
]


# --- representative kernels (traces.selection) --------------------------------------------------------

# The OPT-125m H100 sample at cover=0.5 (four groups, trimmed to two, members to three each): its
# two GEMMs of the twelve layers' prefill lead, each stood for by its first (traced) launch.
SAMPLE_CTX = "0x648ae66a3730"


def selection_group(name: str, grid: list, count: int, insts: int, ns: int, share: float, ids: list) -> dict:
    return {
        "name": name,
        "grid": grid,
        "block": [384, 1, 1],
        "count": count,
        "total_insts": insts,
        "duration_ns": ns,
        "share": share,
        "representative": {
            "ctx": SAMPLE_CTX,
            "kernel_id": ids[0],
            "trace_file": f"kernel-{ids[0]}-ctx_{SAMPLE_CTX}.trace.xz",
            "traced": True,
        },
        "members": [{"ctx": SAMPLE_CTX, "kernel_id": kernel_id} for kernel_id in ids],
    }


SELECTION_EXAMPLE = {
    "trace_id": "sample__facebook_opt-125m__h100-e2e",
    "by": "unique",
    "step": None,
    "cover": 0.5,
    "tolerance": 0.2,
    "launches": 700,
    "basis": "time",
    "covered": 0.5598,
    "groups": [
        selection_group(
            "nvjet_hsh_128x128_64x5_2x1_v_bz_coopA_TNT",
            [6, 8, 1],
            12,
            52162362,
            1304054,
            0.1898,
            [14, 25, 36],
        ),
        selection_group(
            "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
            [18, 8, 1],
            12,
            40016115,
            1000398,
            0.1456,
            [6, 17, 28],
        ),
    ],
}
SELECTION_EXAMPLES = [
    OpenApiExample(
        "Selection",
        value=SELECTION_EXAMPLE,
        summary="The OPT-125m sample at cover=0.5 (groups and members trimmed)",
        response_only=True,
    )
]
# --- a trace's downloads -------------------------------------------------------------------------


def _presigned(key: str) -> str:
    return (
        f"https://cascade-traces.s3.amazonaws.com/{key}?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20261108%2Fus-east-1%2Fs3%2Faws4_request"
        "&X-Amz-Date=20261108T085902Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
    )


def _example_file(path: str, size: int, etag: str) -> dict:
    key = f"accelsim-traces/demo/{path}"
    return {"path": path, "key": key, "bytes": size, "etag": etag, "url": _presigned(key)}


FILES_EXAMPLE = {
    "trace_id": "demo",
    "state": "ready",
    "error": None,
    "expires_at": "2026-11-08T09:59:02Z",
    "files": [
        _example_file("configs/config_hopper_islip.icnt", 1352, '"3c1f2a0e5b9d4c7e8f6a1b2c3d4e5f60"'),
        _example_file("configs/gpgpusim.config", 6028, '"9b8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d"'),
        _example_file("configs/trace.config", 1085, '"0f1e2d3c4b5a69788796a5b4c3d2e1f0"'),
        _example_file("metadata.json", 412, '"5e4d3c2b1a0f9e8d7c6b5a4938271605"'),
    ],
    "refused": [],
}
FILES_EXAMPLES = [
    OpenApiExample("Files", summary="The reference's demo", value=FILES_EXAMPLE, response_only=True)
]
KERNELS_CSV_EXAMPLE = (
    "ctx,kernel_id,name,trace_file,grid_x,grid_y,grid_z,block_x,block_y,block_z,blocks,threads,"
    "total_insts,total_reported_insts,traced,device,stream,step,duration_ns\r\n"
    "0x6165bdd7ec90,1,_Z6vecAddPdS_S_i,kernel-1-ctx_0x6165bdd7ec90.trace.xz,98,1,1,1024,1,1,98,1024,"
    "50066,50066,true,,,step 0 (prefill),2816\r\n"
    "0x6165bdd7ec90,2,_Z6vecAddPdS_S_i,kernel-2-ctx_0x6165bdd7ec90.trace.xz,98,1,1,1024,1,1,98,1024,"
    ",,true,,,step 0 (prefill),\r\n"
)
