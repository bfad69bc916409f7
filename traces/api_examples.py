"""The API's examples, in one place: the OpenAPI schema shows them (`traces.serializers`
attaches each to the shape it illustrates; the lists' are set by `traces.openapi.finish_schema`)
and docs/api.md's ```json blocks are written from `DOCS_EXAMPLES`, its lists of keys from
`DOCS_KEYS` (`python -m traces.api_examples` rewrites both). Longer than 500 lines because it
is data: one example of every answer of every route, each a literal a reader can compare with a
real answer.

tests/traces/test_api_docs_examples.py checks that the docs hold exactly these, and that they
have the keys, order and types of the live API's answers.
"""

import json
import re
import sys
import textwrap
from pathlib import Path

from drf_spectacular.utils import OpenApiExample

from traces import shapes


def shaped(shape: shapes.Shape, values: dict) -> dict:
    """An example of `shape`: its keys in its order, each from `values` or the field's own
    (`Field.example_value`); an optional field only where `values` has it."""
    unknown = set(values) - set(shape.keys)
    assert not unknown, f"{shape.name} has no {sorted(unknown)}"
    return {
        field.name: values[field.name] if field.name in values else field.example_value
        for field in shape.fields
        if field.name in values or not field.optional
    }


FAILED_SUMMARY = shaped(
    shapes.TRACE_SUMMARY,
    {
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
        "waiting_for": None,
        "warnings": [],
        "traced_launches": 0,
    },
)
DEMO_SUMMARY = shaped(
    shapes.TRACE_SUMMARY,
    {
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
        "waiting_for": None,
        "warnings": [],
        "traced_launches": 20,
    },
)
SAMPLE_SUMMARY = shaped(
    shapes.TRACE_SUMMARY,
    {
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
        "waiting_for": None,
        "warnings": [],
        "traced_launches": 712,
    },
)
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
    return shaped(shapes.KERNEL, kernel)


UPLOADING_SUMMARY = {
    **DEMO_SUMMARY,
    "id": "demo-uploading",
    "state": "uploading",
    "suggested_sim_config": None,
    "kernel_count": 0,
    "bytes": 4822,
    "has_step_timeline": False,
    "waiting_for": "2 files listed in metadata.json: traces/stats_ctx_0x6165bdd7ec90, traces/kernelslist.g",
    "traced_launches": 0,
}
CUT_SUMMARY = {
    **DEMO_SUMMARY,
    "id": "demo-cut",
    "kernel_count": 1100,
    "traced_launches": 0,
    "warnings": [
        {
            "file": "traces/stats.csv",
            "offset": 301327,
            "what": "the file ends inside a launch: its last line 'kernel-1101.tra' dropped",
        }
    ],
}


def detail_example(summary: dict, kernels: list[dict]) -> dict:
    """A TraceDetail: the reference's keys (`metadata`, `kernels` last), then those added since."""
    return shaped(shapes.TRACE_DETAIL, {**summary, "metadata": DEMO_METADATA, "kernels": kernels})


LIST_EXAMPLE = [FAILED_SUMMARY, DEMO_SUMMARY, SAMPLE_SUMMARY]
# The demo's first two kernels (the rest trimmed): the second without totals.
NULL_TOTALS_DETAIL = detail_example(DEMO_SUMMARY, [example_kernel(1), example_kernel(2, insts=None)])
DETAIL_EXAMPLES = [
    OpenApiExample(
        "Uploading",
        summary="Uploading: what it waits for",
        value=detail_example(UPLOADING_SUMMARY, []),
        response_only=True,
    ),
    OpenApiExample(
        "CutShort",
        summary="A stats file cut short: the complete rows kept, the cut named (kernels trimmed)",
        value=detail_example(CUT_SUMMARY, []),
        response_only=True,
    ),
    OpenApiExample(
        "Demo",
        summary="The reference's demo (kernels trimmed)",
        value=detail_example(DEMO_SUMMARY, []),
        response_only=True,
    ),
    OpenApiExample(
        "NullTotals",
        summary="Kernels: one without totals (captured into a CUDA graph)",
        value=NULL_TOTALS_DETAIL,
        response_only=True,
    ),
    OpenApiExample(
        "DeviceIdFork",
        summary="Kernels of the tracer fork that records devices",
        value=detail_example(
            {**DEMO_SUMMARY, "kernel_count": 2}, [example_kernel(1, device=0), example_kernel(1, device=1)]
        ),
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
    "traced_launches": 2,
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
SIMULATION_METRICS = shaped(
    shapes.SIMULATION_METRICS,
    {
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
    },
)
SIMULATION_SUMMARY = shaped(
    shapes.SIMULATION_SUMMARY,
    {
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
        "reason": None,
        "fatal": None,
        "left_out": {"kernels": 0, "why": None},
        "run": {
            "accel_sim_build": "accelsim-commit-2260456ea5e6a1420f5734f145a4b7d8ab1d4737_modified_1.0",
            "gpgpu_sim_build": "gpgpu-sim_git-commit-13c67115070dc2f0876254a790d0238073ca364a_modified_2.0",
            "host": "sim-node-07",
            "started_at": "2026-11-09T10:12:40Z",
            "ended_at": "2026-11-09T10:58:02Z",
            "exit_status": 0,
            "selection": {"select": "unique", "cover": 0.95},
        },
        "kernels_simulated": 5,
        "kernels_compared": 4,
        "compared": 4,
        "metrics": SIMULATION_METRICS,
    },
)
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
    "reason": "waiting for simulation.json",
    "run": None,
    "kernels_simulated": 0,
    "kernels_compared": 0,
    "compared": 0,
    "metrics": None,
}
SIMULATIONS_EXAMPLE = [UPLOADING_SIMULATION, SIMULATION_SUMMARY]
SAMPLE_TRACE = "sample__facebook_opt-125m__h100-e2e"
SIMULATION_LIST_EXAMPLE = [{"trace_id": SAMPLE_TRACE, **simulation} for simulation in SIMULATIONS_EXAMPLE]


def example_simulated_kernel(
    kernel_id: int, name: str, step: str, cycles: int | None, measured_ns: int, error: float | None
) -> dict:
    values = {
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
    return shaped(shapes.SIMULATED_KERNEL, values)


SIMULATION_DETAIL_EXAMPLE = shaped(
    shapes.SIMULATION_DETAIL,
    {
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
    },
)
STOPPED_DETAIL_EXAMPLE = {
    **SIMULATION_DETAIL_EXAMPLE,
    "name": "accelsim-2260456e-SM90_H100-short",
    "complete": False,
    "stopped": "max_cycles",
    "kernels_simulated": 4,
    "left_out": {"kernels": 1, "why": "did not finish: the cycle limit (-gpgpu_max_cycle) stopped it"},
    "interrupted": [
        {
            "uid": 5,
            "ctx": "0x6165bdd7ec90",
            "kernel_id": 5,
            "name": "_Z6vecAddPdS_S_i",
            "trace_file": "/home/researcher/traces/kernel-5-ctx_0x6165bdd7ec90.traceg.xz",
        }
    ],
    "metrics": {
        **SIMULATION_METRICS,
        "run_sim_ns": 10317.3789,
        "run_measured_ns": 10480,
        "run_error": -1.5517,
    },
    "kernels": SIMULATION_DETAIL_EXAMPLE["kernels"][:4],
}
DEADLOCK_LINE = (
    "GPGPU-Sim uArch: ERROR ** deadlock detected: last writeback core 29 @ gpu_sim_cycle 5486 "
    "(+ gpu_tot_sim_cycle 63571) (94514 cycles ago)"
)
DEADLOCK_DETAIL_EXAMPLE = {
    **STOPPED_DETAIL_EXAMPLE,
    "name": "accelsim-73f9fac-RTX3070-deadlock",
    "stopped": "deadlock",
    "fatal": {"line": 46556, "text": DEADLOCK_LINE},
    "left_out": {
        "kernels": 1,
        "why": f"did not finish: the simulator detected a deadlock (line 46556: {DEADLOCK_LINE})",
    },
}
FAILED_DETAIL_EXAMPLE = {
    **UPLOADING_SIMULATION,
    "name": "accelsim-73f9fac-RTX3070-sm90",
    "state": "failed",
    "error": "the log simulated no kernel: the simulator stopped at line 286: unsupported binary version: 90",
    "reason": None,
    "complete": False,
    "stopped": "error",
    "fatal": {"line": 286, "text": "unsupported binary version: 90"},
    "left_out": {"kernels": 0, "why": None},
    "interrupted": [],
    "steps": [],
    "families": [],
    "kernels": [],
}
NO_TIMES_DETAIL_EXAMPLE = {
    **SIMULATION_DETAIL_EXAMPLE,
    "name": "accelsim-73f9fac-RTX2060",
    "reason": "the trace has no measured kernel times: upload an Nsight Systems export or a timing file to compare",
    "kernels_compared": 0,
    "compared": 0,
    "metrics": {
        **dict.fromkeys(SIMULATION_METRICS),
        "within_10_percent": 0,
        "kernels_compared": 0,
        "run_sim_ns": 10317.3789,
        "run_measured_ns": None,
        "run_error": None,
    },
    "steps": [],
    "families": [],
    "kernels": [
        {**kernel, "measured_ns": None, "error": None} for kernel in SIMULATION_DETAIL_EXAMPLE["kernels"]
    ],
}
ACCURACY_EXAMPLE = [
    shaped(
        shapes.SIMULATION_ACCURACY,
        {
            "simulator_build": "accelsim-commit-2260456ea5e6a1420f5734f145a4b7d8ab1d4737_modified_1.0",
            "simulations": 12,
            "traces": 6,
            "kernels_compared": 48211,
            "mape": 10.0587,
            "aggregate_error": 11.2253,
            "pearson_r": 0.9918,
            "left_out": shaped(shapes.ACCURACY_LEFT_OUT, {"simulations": 0, "why": None}),
        },
    ),
    shaped(
        shapes.SIMULATION_ACCURACY,
        {
            "simulator_build": "accelsim-commit-73f9fac6_modified_0.0_24-10-08-10-02-11",
            "simulations": 9,
            "traces": 6,
            "kernels_compared": 40102,
            "mape": 14.7012,
            "aggregate_error": 12.903,
            "pearson_r": 0.9871,
            "left_out": shaped(
                shapes.ACCURACY_LEFT_OUT,
                {"simulations": 2, "why": "ready, but no kernel compared (see each simulation's reason)"},
            ),
        },
    ),
]

SIMULATION_DETAIL_EXAMPLES = [
    OpenApiExample("Simulation", value=SIMULATION_DETAIL_EXAMPLE, response_only=True),
    OpenApiExample(
        "StoppedAtMaxCycles",
        summary="Stopped at the cycle limit: the interrupted launch left out",
        value=STOPPED_DETAIL_EXAMPLE,
        response_only=True,
    ),
    OpenApiExample(
        "Deadlock",
        summary="A deadlock: the kernel that deadlocked named and left out of every total",
        value=DEADLOCK_DETAIL_EXAMPLE,
        response_only=True,
    ),
    OpenApiExample(
        "SimulatedNothing",
        summary="Failed: the log simulated no kernel, the simulator's fatal line quoted",
        value=FAILED_DETAIL_EXAMPLE,
        response_only=True,
    ),
    OpenApiExample(
        "NoMeasuredTimes",
        summary="Ready, nothing compared: the trace has no measured times",
        value=NO_TIMES_DETAIL_EXAMPLE,
        response_only=True,
    ),
]


# --- representative kernels (traces.selection) --------------------------------------------------------

# The OPT-125m H100 sample at cover=0.5 (four groups, trimmed to two, members to three each): its
# two GEMMs of the twelve layers' prefill lead, each stood for by its first (traced) launch.
SAMPLE_CTX = "0x648ae66a3730"


def selection_group(name: str, grid: list, count: int, insts: int, ns: int, share: float, ids: list) -> dict:
    representative = {
        "ctx": SAMPLE_CTX,
        "kernel_id": ids[0],
        "trace_file": f"kernel-{ids[0]}-ctx_{SAMPLE_CTX}.trace.xz",
        "traced": True,
    }
    values = {
        "name": name,
        "grid": grid,
        "block": [384, 1, 1],
        "count": count,
        "total_insts": insts,
        "duration_ns": ns,
        "share": share,
        "representative": shaped(shapes.SELECTION_REPRESENTATIVE, representative),
        "members": [
            shaped(shapes.SELECTION_MEMBER, {"ctx": SAMPLE_CTX, "kernel_id": kernel_id}) for kernel_id in ids
        ],
    }
    return shaped(shapes.SELECTION_GROUP, values)


SELECTION_EXAMPLE = shaped(
    shapes.SELECTION,
    {
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
    },
)
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
    return shaped(
        shapes.TRACE_FILE, {"path": path, "key": key, "bytes": size, "etag": etag, "url": _presigned(key)}
    )


FILES_EXAMPLE = shaped(
    shapes.TRACE_FILES,
    {
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
    },
)
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


# A simulation's upload (`cascade simulate`): the URLs are the shape S3's presigned URLs have,
# abridged; a real answer's are signed for the bucket's public endpoint.
_PUT = (
    "https://s3.example.org/traces/accelsim-traces/demo/simulations/accelsim-SM86_RTX3070/{name}"
    "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=3600&X-Amz-Signature=..."
)
_PART = (
    "https://s3.example.org/traces/accelsim-traces/demo/simulations/accelsim-SM86_RTX3070/sim.log.xz"
    "?uploadId=2~n2xQ...&partNumber={number}&X-Amz-Expires=3600&X-Amz-Signature=..."
)
SIMULATION_UPLOAD_REQUEST = {
    "files": [
        {"name": "sim.log.xz", "size": 100663296},
        {"name": "gpgpusim.config", "size": 9120},
        {"name": "simulation.json", "size": 412},
    ]
}


def _put(name: str, size: int) -> dict:
    """An upload target of one presigned PUT."""
    values = {
        "name": name,
        "size": size,
        "url": _PUT.format(name=name),
        "headers": {"Content-Length": str(size)},
    }
    return shaped(shapes.UPLOAD_TARGET, values)


_MULTIPART = shaped(
    shapes.MULTIPART_UPLOAD,
    {
        "upload_id": "2~n2xQ...",
        "part_size": 67108864,
        "parts": [
            shaped(shapes.UPLOAD_PART, {"part_number": number, "url": _PART.format(number=number)})
            for number in (1, 2)
        ],
    },
)
SIMULATION_UPLOAD_EXAMPLE = shaped(
    shapes.SIMULATION_UPLOAD,
    {
        "trace_id": "demo",
        "name": "accelsim-SM86_RTX3070",
        "expires_at": "2026-11-08T09:59:02Z",
        "files": [
            shaped(shapes.UPLOAD_TARGET, {"name": "sim.log.xz", "size": 100663296, "multipart": _MULTIPART}),
            _put("gpgpusim.config", 9120),
            _put("simulation.json", 412),
        ],
    },
)
SIMULATION_COMPLETE_REQUEST = {
    "multipart": [
        {
            "name": "sim.log.xz",
            "upload_id": "2~n2xQ...",
            "parts": [
                {"part_number": 1, "etag": '"0f343b0931126a20f133d67c2b018a3b"'},
                {"part_number": 2, "etag": '"5d41402abc4b2a76b9719d911017c592"'},
            ],
        }
    ]
}
SIMULATION_COMPLETE_EXAMPLE = shaped(
    shapes.SIMULATION_COMPLETE,
    {
        "trace_id": "demo",
        "name": "accelsim-SM86_RTX3070",
        "state": "uploading",
        "url": "/api/traces/demo/simulations/accelsim-SM86_RTX3070",
    },
)
SIMULATION_UPLOAD_EXAMPLES = [
    OpenApiExample(
        "Files", summary="The files to upload", value=SIMULATION_UPLOAD_REQUEST, request_only=True
    ),
    OpenApiExample(
        "Upload",
        summary="A log in two parts, two small files",
        value=SIMULATION_UPLOAD_EXAMPLE,
        response_only=True,
    ),
]
SIMULATION_COMPLETE_EXAMPLES = [
    OpenApiExample(
        "Multipart", summary="The log's parts", value=SIMULATION_COMPLETE_REQUEST, request_only=True
    ),
    OpenApiExample(
        "Complete", summary="Registered, being read", value=SIMULATION_COMPLETE_EXAMPLE, response_only=True
    ),
]


# --- docs/api.md: its ```json blocks, written from these values, and its lists of keys ------------

# Each block follows a `<!-- example: NAME -->` line in docs/api.md; lists trimmed to stay short.
DOCS_EXAMPLES = {
    "traces": [DEMO_SUMMARY],
    "trace": NULL_TOTALS_DETAIL,
    "summary": {**SUMMARY_EXAMPLE, "kernels": SUMMARY_EXAMPLE["kernels"][1:]},
    "compare": {**COMPARE_EXAMPLE, "kernels": COMPARE_EXAMPLE["kernels"][:1]},
    "selection": {
        **SELECTION_EXAMPLE,
        "groups": [{**group, "members": group["members"][:2]} for group in SELECTION_EXAMPLE["groups"][:1]],
    },
    "files": {**FILES_EXAMPLE, "files": FILES_EXAMPLE["files"][1:2]},
    "trace-simulations": [UPLOADING_SIMULATION],
    "simulation": {
        **SIMULATION_DETAIL_EXAMPLE,
        "steps": SIMULATION_DETAIL_EXAMPLE["steps"][1:],
        "families": SIMULATION_DETAIL_EXAMPLE["families"][:1],
        "kernels": SIMULATION_DETAIL_EXAMPLE["kernels"][3:],
    },
    "simulations": SIMULATION_LIST_EXAMPLE[:1],
    "accuracy": ACCURACY_EXAMPLE[:1],
    "upload-request": SIMULATION_UPLOAD_REQUEST,
    "upload": SIMULATION_UPLOAD_EXAMPLE,
    "complete-request": SIMULATION_COMPLETE_REQUEST,
    "complete": SIMULATION_COMPLETE_EXAMPLE,
}
DOCS_BLOCK = re.compile(r"(<!-- example: (?P<name>[a-z-]+) -->\n```json\n)(?P<body>.*?)(\n```)", re.DOTALL)
DOCS_WIDTH = 100


def docs_json(value, indent: str = "") -> str:
    """`value` as JSON a reader can scan: on one line where it fits DOCS_WIDTH, else its keys
    (or items) packed into lines of that width, a long one on lines of its own."""
    flat = json.dumps(value, ensure_ascii=False)
    if len(indent) + len(flat) <= DOCS_WIDTH or not isinstance(value, dict | list) or not value:
        return flat
    inner = indent + "  "
    if isinstance(value, dict):
        parts = [f"{json.dumps(key)}: {docs_json(item, inner)}" for key, item in value.items()]
    else:
        parts = [docs_json(item, inner) for item in value]
    lines, line = [], ""
    for part in parts:
        if line and ("\n" in part or len(inner) + len(line) + len(part) + 2 > DOCS_WIDTH):
            lines.append(line)
            line = ""
        line = f"{line}, {part}" if line else part
    lines.append(line)
    opening, closing = "{}" if isinstance(value, dict) else "[]"
    return f"{opening}\n{inner}" + f",\n{inner}".join(lines) + f"\n{indent}{closing}"


# Each list of keys follows a `<!-- keys: NAME -->` line in docs/api.md: a line per field, its doc.
DOCS_KEYS = {"trace-added": shapes.TRACE_ADDED}
DOCS_KEY_LIST = re.compile(r"(<!-- keys: (?P<name>[a-z-]+) -->\n)(?P<body>(?:(?:- |  ).*\n)*)")


def docs_keys(fields: tuple[shapes.Field, ...]) -> str:
    """A Markdown item per field, its doc wrapped at DOCS_WIDTH."""
    items = (f"`{field.name}`" + (f": {field.doc}" if field.doc else "") for field in fields)
    return "".join(
        textwrap.fill(item, DOCS_WIDTH, initial_indent="- ", subsequent_indent="  ", break_on_hyphens=False)
        + "\n"
        for item in items
    )


def docs_with_examples(text: str) -> str:
    """docs/api.md's text with each example block rewritten from DOCS_EXAMPLES, each list of
    keys from DOCS_KEYS."""
    text = DOCS_BLOCK.sub(lambda block: block[1] + docs_json(DOCS_EXAMPLES[block["name"]]) + block[4], text)
    return DOCS_KEY_LIST.sub(lambda keys: keys[1] + docs_keys(DOCS_KEYS[keys["name"]]), text)


if __name__ == "__main__":  # python -m traces.api_examples [docs/api.md]
    docs = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/api.md")
    docs.write_text(docs_with_examples(docs.read_text()))
