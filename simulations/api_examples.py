"""The simulations API's examples, as the traces' (`traces.api_examples`, whose `shaped` builds
them): the schema shows them (`simulations.serializers`, `simulations.openapi`) and docs/api.md's
blocks of these routes are written from `DOCS_EXAMPLES` (`python -m cascade.api_docs`)."""

from drf_spectacular.utils import OpenApiExample

from simulations import shapes
from traces.api_examples import GEMM_EXAMPLE, shaped

# One simulation of the Turing sample's first five launches on SM75_RTX2060 (1365 MHz), by a
# release build that has that config: four compared, the fifth overlapped (concurrent kernels
# share one stat block).
SIMULATION_METRICS = shaped(
    shapes.SIMULATION_METRICS,
    {
        "mape": 10.0543,
        "aggregate_error": 11.2253,
        "pearson_r": 0.9918,
        "rpd": 9.8784,
        "nrmse": 0.1433,
        "within_10_percent": 2,
        "kernels_compared": 4,
        "sim_total_ns": 10317.2161,
        "measured_total_ns": 10480,
        "total_error": -1.5533,
        "run_sim_ns": 10882.7839,
        "run_measured_ns": 11120,
        "run_error": -2.1332,
    },
)
SIMULATION_SUMMARY = shaped(
    shapes.SIMULATION_SUMMARY,
    {
        "name": "accelsim-2260456e-SM75_RTX2060",
        "state": "ready",
        "error": None,
        "created_at": "2026-11-09T10:12:40.114205Z",
        "updated_at": "2026-11-09T10:12:41.020113Z",
        "simulator": "accel-sim",
        "simulator_build": "accelsim-commit-2260456ea5e6a1420f5734f145a4b7d8ab1d4737_modified_1.0",
        "gpgpusim_build": "4.2.0 [build gpgpu-sim_git-commit-13c67115070dc2f0876254a790d0238073ca364a_modified_2.0]",
        "config": "SM75_RTX2060",
        "core_clock_mhz": 1365.0,
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
        "owner": "alice",
    },
)
UPLOADING_SIMULATION = {
    **SIMULATION_SUMMARY,
    "name": "accelsim-dev-SM86_RTX3070",
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
# Each beside a sample whose SASS its config runs (SM86_RTX3070: 80-86; SM75_RTX2060: 75).
SAMPLE_TRACE = "sample__facebook_opt-125m__rtx2060-e2e"  # the ready one's
SAMPLE_TRACES = ("sample__facebook_opt-125m__a100-e2e", SAMPLE_TRACE)
SIMULATION_LIST_EXAMPLE = [
    {"trace_id": trace_id, **simulation}
    for trace_id, simulation in zip(SAMPLE_TRACES, SIMULATIONS_EXAMPLE, strict=True)
]


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
        "sim_ns": None if cycles is None else round(cycles * 1000 / 1365.0, 4),
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
            {"step": "step 0 (prefill)", "sim_ns": 6835.1648, "measured_ns": 7220, "error": -5.3301},
            {"step": "step 1 (decode)", "sim_ns": 3482.0513, "measured_ns": 3260, "error": 6.8114},
        ],
        "families": [
            {"family": "vecAdd", "count": 2, "mape": 10.1258, "aggregate_error": 11.0413},
            {"family": GEMM_EXAMPLE, "count": 2, "mape": 9.9828, "aggregate_error": 11.7348},
        ],
        "kernels": [
            example_simulated_kernel(1, GEMM_EXAMPLE, "step 0 (prefill)", 2873, 1820, 15.6463),
            example_simulated_kernel(2, "_Z6vecAddPdS_S_i", "step 0 (prefill)", 6457, 5400, -12.3999),
            example_simulated_kernel(3, GEMM_EXAMPLE, "step 1 (decode)", 1367, 960, 4.3193),
            example_simulated_kernel(4, "_Z6vecAddPdS_S_i", "step 1 (decode)", 3386, 2300, 7.8516),
            example_simulated_kernel(5, "_Z6vecAddPdS_S_i", "step 1 (decode)", None, 640, None),
        ],
    },
)
STOPPED_DETAIL_EXAMPLE = {
    **SIMULATION_DETAIL_EXAMPLE,
    "name": "accelsim-2260456e-SM75_RTX2060-short",
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
        "run_sim_ns": 10317.2161,
        "run_measured_ns": 10480,
        "run_error": -1.5533,
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
        "run_sim_ns": 10317.2161,
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
            "mape": 10.0543,
            "aggregate_error": 11.2253,
            "pearson_r": 0.9918,
            "worst": [
                shaped(
                    shapes.ACCURACY_WORST,
                    {
                        "trace_id": SAMPLE_TRACE,
                        "simulation": "accelsim-2260456e-SM75_RTX2060",
                        "ctx": "0x6165bdd7ec90",
                        "kernel_id": 31,
                        "name": "_Z6vecAddPdS_S_i",
                        "measured_ns": 2848,
                        "sim_ns": 5121.0,
                        "error": 79.8104,
                    },
                )
            ],
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


# --- docs/api.md's blocks of the simulations' routes (cascade.api_docs writes them) ----------------

DOCS_EXAMPLES = {
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
