"""A trace's summary and two traces compared: `traces.analysis` and its two routes.

The expected values are worked out by hand from the few launches each test creates.
"""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.helpers import store_kernels
from tests.traces.support import FLASH, assert_conforms, launch, response_validator
from traces import analysis
from traces.demangle import demangle
from traces.models import Step, Trace, TraceState

GEMM = "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
NVJET = "nvjet_hsh_64x8_64x16_4x1_v_bz_TNT"
AMPERE = "ampere_fp16_s16816gemm_fp16_128x64_ldg8_f2f_stages_64x4_tn"
# Two symbols of one function: `L` marks internal linkage, which the demangled name omits.
FOO, FOO_STATIC = "_Z3fooi", "_ZL3fooi"


@pytest.fixture
def add_launches(db):
    """`add_launches(trace, [(name, insts, traced, step, duration_ns), ...])`, ids from 1."""

    def add(trace: Trace, rows: list[tuple]) -> None:
        store_kernels(
            trace.pk,
            [
                launch(n, name, insts, traced=traced, step=step, duration_ns=duration)
                for n, (name, insts, traced, step, duration) in enumerate(rows, start=1)
            ],
        )
        Trace.objects.filter(pk=trace.pk).update(kernel_count=len(rows))

    return add


@pytest.fixture
def h100(make_trace, add_launches) -> Trace:
    """Five launches in two steps (the last in none), every one timed; one without totals."""
    trace = make_trace("h100", state=TraceState.READY, has_real_timing=True, has_step_timeline=True)
    Step.objects.bulk_create(
        [
            Step(
                trace=trace,
                index=0,
                name="step 0",
                phase="prefill",
                ctx="0x1",
                first_kernel_id=1,
                last_kernel_id=2,
            ),
            Step(
                trace=trace,
                index=1,
                name="step 1",
                phase="decode",
                ctx="0x1",
                first_kernel_id=3,
                last_kernel_id=4,
            ),
        ]
    )
    add_launches(
        trace,
        [
            (GEMM, 1000, True, 0, 300),
            (FLASH, 500, True, 0, 200),
            (GEMM, 600, False, 1, 100),
            (FLASH, None, False, 1, 50),  # captured into a CUDA graph: no totals
            (NVJET, 400, False, None, 150),
        ],
    )
    return trace


@pytest.fixture
def a100(make_trace, add_launches) -> Trace:
    """No GEMM of the H100's; FLASH once, NVJET three times, AMPERE twice; timed, no timeline."""
    trace = make_trace("a100", state=TraceState.READY, has_real_timing=True)
    add_launches(
        trace,
        [
            (FLASH, 1500, True, None, 900),
            (NVJET, 400, True, None, 100),
            (NVJET, 400, False, None, 100),
            (NVJET, 400, False, None, 100),
            (AMPERE, 1000, True, None, 500),
            (AMPERE, 1000, False, None, 500),
        ],
    )
    return trace


@pytest.fixture
def untimed(make_trace, add_launches) -> Trace:
    """No timing.csv, no timeline.json; one name none of whose launches has totals."""
    trace = make_trace("untimed", state=TraceState.READY)
    add_launches(
        trace,
        [
            (FOO, 100, True, None, None),
            (FOO, 100, False, None, None),
            (FOO_STATIC, 50, False, None, None),
            (NVJET, None, False, None, None),
        ],
    )
    return trace


# --- the demangler -------------------------------------------------------------------------


def test_demangles_cxx_symbols_and_leaves_cublas_names_alone():
    assert demangle(FLASH).startswith(
        "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<64, 64, 256"
    )
    assert demangle("_Z9vectorAddPKfS0_Pfi") == "vectorAdd(float const*, float const*, float*, int)"
    assert demangle(GEMM) == GEMM
    assert demangle(NVJET) == NVJET
    assert demangle("_Z3foo_truncated_by_a_trac") == "_Z3foo_truncated_by_a_trac"  # not a symbol: as is
    assert demangle(FOO) == demangle(FOO_STATIC) == "foo(int)"


# --- /summary ------------------------------------------------------------------------------


def test_summary_of_a_timed_run_with_steps(api, h100):
    response = api.get("/api/traces/h100/summary")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    body = response.json()
    # After the keys it had, launches with their instruction trace file in the run.
    assert list(body) == [
        "id",
        "kernel_count",
        "total_insts",
        "duration_ns",
        "steps",
        "kernels",
        "traced_launches",
    ]
    assert body["traced_launches"] == sum(kernel["traced"] for kernel in body["kernels"])
    # 1000 + 500 + 600 + 400 (the graph-captured launch has none); 300 + 200 + 100 + 50 + 150.
    assert body["id"] == "h100"
    assert (body["kernel_count"], body["total_insts"], body["duration_ns"]) == (5, 2500, 800)
    assert body["steps"] == [
        {"name": "step 0", "phase": "prefill", "kernels": 2, "total_insts": 1500, "duration_ns": 500},
        {"name": "step 1", "phase": "decode", "kernels": 2, "total_insts": 600, "duration_ns": 150},
    ]
    assert body["kernels"] == [
        {
            "name": GEMM,
            "demangled": GEMM,
            "launches": 2,
            "traced": 1,
            "total_insts": 1600,
            "duration_ns": 400,
            "insts_share": 1600 / 2500,
            "time_share": 400 / 800,
        },
        {
            "name": FLASH,
            "demangled": demangle(FLASH),
            "launches": 2,
            "traced": 1,
            "total_insts": 500,
            "duration_ns": 250,
            "insts_share": 500 / 2500,
            "time_share": 250 / 800,
        },
        {
            "name": NVJET,
            "demangled": NVJET,
            "launches": 1,
            "traced": 0,
            "total_insts": 400,
            "duration_ns": 150,
            "insts_share": 400 / 2500,
            "time_share": 150 / 800,
        },
    ]


def test_summary_without_timing_or_timeline_has_nulls(api, untimed):
    body = api.get("/api/traces/untimed/summary").json()
    assert (body["kernel_count"], body["total_insts"], body["duration_ns"]) == (4, 250, None)
    assert body["steps"] == []
    # Ties on instructions by name; a name without totals last, its share null.
    assert [(k["name"], k["launches"], k["traced"], k["total_insts"]) for k in body["kernels"]] == [
        (FOO, 2, 1, 200),
        (FOO_STATIC, 1, 0, 50),
        (NVJET, 1, 0, None),
    ]
    assert [k["insts_share"] for k in body["kernels"]] == [0.8, 0.2, None]
    assert {k["duration_ns"] for k in body["kernels"]} == {None}
    assert {k["time_share"] for k in body["kernels"]} == {None}
    assert [k["demangled"] for k in body["kernels"]] == ["foo(int)", "foo(int)", NVJET]


def test_summary_of_a_ready_trace_without_kernels(api, make_trace):
    make_trace("empty", state=TraceState.READY)
    assert api.get("/api/traces/empty/summary/").json() == {
        "id": "empty",
        "kernel_count": 0,
        "total_insts": None,
        "duration_ns": None,
        "steps": [],
        "kernels": [],
        "traced_launches": 0,
    }


def test_step_without_launches_counts_zero(h100):
    Step.objects.create(
        trace=h100, index=2, name="step 2", phase="decode", first_kernel_id=9, last_kernel_id=9
    )
    assert analysis.step_totals("h100")[-1] == analysis.StepTotal(
        index=2, name="step 2", phase="decode", kernels=0, total_insts=None, duration_ns=None
    )


def test_kernel_mix_and_totals_for_the_admin(h100):
    summary = analysis.summary("h100")
    assert [(k.name, k.launches, k.traced, k.total_insts) for k in summary.kernels] == [
        (GEMM, 2, 1, 1600),
        (FLASH, 2, 1, 500),
        (NVJET, 1, 0, 400),
    ]
    assert summary.totals == analysis.TraceTotals(
        id="h100", kernel_count=5, total_insts=2500, duration_ns=800
    )


@pytest.mark.parametrize(
    ("state", "route"),
    [
        (TraceState.UPLOADING, "/api/traces/t/summary"),
        (TraceState.PARSING, "/api/traces/t/summary"),
        (TraceState.FAILED, "/api/traces/t/summary"),
        (TraceState.PARSING, "/api/traces/t/compare/h100"),
        (TraceState.FAILED, "/api/traces/h100/compare/t"),
    ],
)
def test_trace_not_ready_is_409(api, make_trace, h100, state, route):
    make_trace("t", state=state)
    response = api.get(route)
    assert response.status_code == 409
    assert response.json() == {"detail": f"trace t is {state}"}


@pytest.mark.parametrize(
    ("route", "missing"),
    [
        # An unknown {trace_id} alone is the endpoint battery's (tests/traces/test_endpoint_battery.py).
        ("/api/traces/h100/compare/nope", "nope"),
        ("/api/traces/nope/compare/gone", "nope"),  # the first missing one is named
        ("/api/traces/nul%00/summary", "nul\x00"),
    ],
)
def test_missing_trace_is_404_naming_it(api, h100, route, missing):
    response = api.get(route)
    assert response.status_code == 404
    assert response.json() == {"detail": f"trace {missing} not found"}


def test_missing_trace_outranks_a_trace_not_ready(api, make_trace):
    make_trace("t", state=TraceState.PARSING)
    assert api.get("/api/traces/t/compare/nope").json() == {"detail": "trace nope not found"}


def test_summary_query_count_does_not_grow_with_kernels(api, h100, add_launches, make_trace):
    def queries(path: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert api.get(path).status_code == 200
        return len(captured)

    big = make_trace("big", state=TraceState.READY, has_step_timeline=True)
    Step.objects.create(trace=big, index=0, name="step 0", first_kernel_id=1, last_kernel_id=500)
    add_launches(big, [(f"_Z6kernel{n % 40}Pdi", n, n % 2 == 0, 0, n) for n in range(500)])
    api.get("/api/traces")  # the token's first use of the minute writes last_used_at
    assert queries("/api/traces/big/summary") == queries("/api/traces/h100/summary")
    assert queries("/api/traces/big/compare/h100") == queries("/api/traces/h100/compare/h100")


def test_browsable_summary_for_a_staff_session(client, admin_user, h100):
    client.force_login(admin_user)
    response = client.get("/api/traces/h100/summary", HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")


# --- /compare ------------------------------------------------------------------------------


def test_compare_by_name(api, h100, a100):
    response = api.get("/api/traces/h100/compare/a100")
    assert response.status_code == 200
    body = response.json()
    assert list(body) == ["a", "b", "by", "kernels"]
    assert body["a"] == {"id": "h100", "kernel_count": 5, "total_insts": 2500, "duration_ns": 800}
    assert body["b"] == {"id": "a100", "kernel_count": 6, "total_insts": 4700, "duration_ns": 2200}
    assert body["by"] == "name"
    # By the larger instruction count of the two: AMPERE 2000 (b), GEMM 1600 (a), FLASH 1500 (b),
    # NVJET 1200 (b).
    assert body["kernels"] == [
        {
            "name": AMPERE,
            "names": [AMPERE],
            "a": {"launches": 0, "total_insts": 0, "duration_ns": 0},
            "b": {"launches": 2, "total_insts": 2000, "duration_ns": 1000},
            "ratios": {"launches": None, "total_insts": None, "duration_ns": None},
        },
        {
            "name": GEMM,
            "names": [GEMM],
            "a": {"launches": 2, "total_insts": 1600, "duration_ns": 400},
            "b": {"launches": 0, "total_insts": 0, "duration_ns": 0},
            "ratios": {"launches": 0.0, "total_insts": 0.0, "duration_ns": 0.0},
        },
        {
            "name": FLASH,
            "names": [FLASH],
            "a": {"launches": 2, "total_insts": 500, "duration_ns": 250},
            "b": {"launches": 1, "total_insts": 1500, "duration_ns": 900},
            "ratios": {"launches": 0.5, "total_insts": 3.0, "duration_ns": 3.6},
        },
        {
            "name": NVJET,
            "names": [NVJET],
            "a": {"launches": 1, "total_insts": 400, "duration_ns": 150},
            "b": {"launches": 3, "total_insts": 1200, "duration_ns": 300},
            "ratios": {"launches": 3.0, "total_insts": 3.0, "duration_ns": 2.0},
        },
    ]


def test_compare_by_demangled_merges_symbols_of_one_function(api, untimed, make_trace, add_launches):
    other = make_trace("other", state=TraceState.READY)
    add_launches(other, [(FOO, 300, True, None, None)])
    body = api.get("/api/traces/untimed/compare/other?by=demangled").json()
    assert body["by"] == "demangled"
    # Untimed on both sides: times null, even where a name is absent; ratios of nulls null.
    assert body["kernels"] == [
        {
            "name": "foo(int)",
            "names": [FOO, FOO_STATIC],
            "a": {"launches": 3, "total_insts": 250, "duration_ns": None},
            "b": {"launches": 1, "total_insts": 300, "duration_ns": None},
            "ratios": {"launches": 1 / 3, "total_insts": 1.2, "duration_ns": None},
        },
        {
            "name": NVJET,
            "names": [NVJET],
            "a": {"launches": 1, "total_insts": None, "duration_ns": None},
            "b": {"launches": 0, "total_insts": 0, "duration_ns": None},
            "ratios": {"launches": 0.0, "total_insts": None, "duration_ns": None},
        },
    ]
    by_name = api.get("/api/traces/untimed/compare/other?by=name").json()
    assert [(k["name"], k["a"]["launches"], k["b"]["launches"]) for k in by_name["kernels"]] == [
        (FOO, 2, 1),
        (FOO_STATIC, 1, 0),
        (NVJET, 1, 0),
    ]


def test_compare_a_trace_with_itself(api, h100):
    body = api.get("/api/traces/h100/compare/h100/").json()
    assert body["a"] == body["b"]
    assert [k["ratios"] for k in body["kernels"]] == [
        {"launches": 1.0, "total_insts": 1.0, "duration_ns": 1.0}
    ] * 3


def test_invalid_by_is_400(api, h100, a100):
    response = api.get("/api/traces/h100/compare/a100?by=mangled")
    assert response.status_code == 400
    assert response.json() == {"detail": "by must be one of name, demangled, not 'mangled'"}


def test_compare_function_refuses_an_unknown_by(h100):
    with pytest.raises(ValueError, match="by must be one of"):
        analysis.compare("h100", "h100", by="mangled")


# --- the OpenAPI schema ----------------------------------------------------------------------

SUMMARY_PATH = "/api/traces/{trace_id}/summary"
COMPARE_PATH = "/api/traces/{trace_id}/compare/{other_id}"


@pytest.fixture
def schema(client_anon, db) -> dict:
    return client_anon.get("/api/schema", HTTP_ACCEPT="application/json").json()


def test_answers_conform_to_the_schema(api, client_anon, schema, h100, a100, untimed, make_trace):
    make_trace("t", state=TraceState.PARSING)
    for template, path, status in [
        (SUMMARY_PATH, "/api/traces/h100/summary", 200),
        (SUMMARY_PATH, "/api/traces/untimed/summary", 200),
        (SUMMARY_PATH, "/api/traces/nope/summary", 404),
        (SUMMARY_PATH, "/api/traces/t/summary", 409),
        (COMPARE_PATH, "/api/traces/h100/compare/a100", 200),
        (COMPARE_PATH, "/api/traces/untimed/compare/h100?by=demangled", 200),
        (COMPARE_PATH, "/api/traces/h100/compare/a100?by=x", 400),
        (COMPARE_PATH, "/api/traces/h100/compare/nope", 404),
        (COMPARE_PATH, "/api/traces/h100/compare/t", 409),
    ]:
        response = api.get(path)
        assert response.status_code == status, path
        assert_conforms(schema, template, response)
    assert_conforms(schema, SUMMARY_PATH, client_anon.get("/api/traces/h100/summary"))
    assert_conforms(schema, COMPARE_PATH, client_anon.get("/api/traces/h100/compare/a100"))


def test_schema_documents_the_errors(schema):
    summary = schema["paths"][SUMMARY_PATH]["get"]["responses"]
    compare = schema["paths"][COMPARE_PATH]["get"]["responses"]
    assert sorted(summary) == ["200", "401", "404", "409", "429"]
    assert sorted(compare) == ["200", "400", "401", "404", "409", "429"]
    for path, response in [(SUMMARY_PATH, summary["200"]), (COMPARE_PATH, compare["200"])]:
        examples = response["content"]["application/json"]["examples"].values()
        assert examples
        for example in examples:
            response_validator(schema, path, 200).validate(example["value"])
