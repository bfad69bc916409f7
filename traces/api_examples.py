"""The traces API's examples, in one place: the OpenAPI schema shows them (`traces.serializers`
attaches each to the shape it illustrates; the lists' are set by `traces.openapi.finish_schema`)
and docs/api.md's ```json blocks are written from `DOCS_EXAMPLES`, its lists of keys from
`DOCS_KEYS` (`python -m cascade.api_docs` rewrites both, with the simulations' examples,
`simulations.api_examples`). Data: one example of every answer of every route, each a literal a
reader can compare with a real answer.

tests/traces/test_api_docs_examples.py checks that the docs hold exactly these, and that they
have the keys, order and types of the live API's answers.
"""

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


# --- docs/api.md's blocks of the traces' routes (cascade.api_docs writes them) -------------------

# Each block follows a `<!-- example: NAME -->` line in docs/api.md; lists trimmed to stay short.
# --- a run pushed through the API (`cascade push`) ---------------------------------------------

_PUSH_URL = (
    "https://s3.example.org/traces/accelsim-traces/lab-b-run-7/{path}?X-Amz-Expires=3600&X-Amz-Signature=..."
)


def _push_put(path: str, size: int) -> dict:
    return shaped(
        shapes.UPLOAD_TARGET,
        {
            "name": path,
            "size": size,
            "url": _PUSH_URL.format(path=path),
            "headers": {"Content-Length": str(size)},
        },
    )


PUSH_REQUEST = {
    "files": [
        {"name": "traces/stats_ctx_0x5603c1b0", "size": 8388608},
        {"name": "traces/kernelslist_ctx_0x5603c1b0", "size": 2210},
        {"name": "timing.csv", "size": 61440},
        {"name": "metadata.json", "size": 1024},
    ]
}
PUSH_EXAMPLE = shaped(
    shapes.TRACE_PUSH,
    {
        "trace_id": "lab-b-run-7",
        "owner": "lab-b",
        "expires_at": "2026-11-09T12:02:03Z",
        "files": [
            _push_put("traces/stats_ctx_0x5603c1b0", 8388608),
            _push_put("traces/kernelslist_ctx_0x5603c1b0", 2210),
            _push_put("timing.csv", 61440),
        ],
    },
)
PUSH_COMPLETE_REQUEST = {"files": PUSH_REQUEST["files"], "multipart": []}
PUSH_COMPLETE_EXAMPLE = shaped(
    shapes.TRACE_PUSH_COMPLETE,
    {
        "trace_id": "lab-b-run-7",
        "expires_at": "2026-11-09T12:04:41Z",
        "metadata": _push_put("metadata.json", 1024),
        "url": "/api/traces/lab-b-run-7",
    },
)
PUSH_EXAMPLES = [
    OpenApiExample("Files", summary="The run's files to upload", value=PUSH_REQUEST, request_only=True),
    OpenApiExample(
        "Push", summary="Where to PUT them, metadata.json aside", value=PUSH_EXAMPLE, response_only=True
    ),
]
PUSH_COMPLETE_EXAMPLES = [
    OpenApiExample(
        "Files", summary="The files again, no multipart", value=PUSH_COMPLETE_REQUEST, request_only=True
    ),
    OpenApiExample(
        "Complete",
        summary="Every file landed: metadata.json's PUT",
        value=PUSH_COMPLETE_EXAMPLE,
        response_only=True,
    ),
]


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
    "push-request": PUSH_REQUEST,
    "push": {**PUSH_EXAMPLE, "files": PUSH_EXAMPLE["files"][:1]},
    "push-complete": PUSH_COMPLETE_EXAMPLE,
}
# Each list of keys follows a `<!-- keys: NAME -->` line in docs/api.md: a line per field, its doc.
DOCS_KEYS = {"trace-added": shapes.TRACE_ADDED}
