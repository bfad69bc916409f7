"""The simulations' routes, as docs/api.md and the OpenAPI schema state their contract:

- `GET /api/traces/{trace_id}/simulations`: SimulationSummary objects, newest first, keys in
  the documented order, `metrics` null until ready;
- `GET /api/traces/{trace_id}/simulations/{name}`: the summary's keys, then `interrupted`,
  `steps`, `families` and every launch in the trace's order; 404 for an unknown name;
- `GET /api/simulations` (filters `trace`, `simulator_build`, `config`, `state`; a bad value a
  400 as the trace list's): `trace_id` then the summary's keys;
- `GET /api/simulations/accuracy?by=simulator_build|config`: builds ranked by MAPE pooled over
  every compared launch; a bad `by` a 400;
- every answer conforms to the schema.

What every route shares (a token, an unknown trace's 404, throttling) is the endpoint battery's
(tests/traces/test_endpoint_battery.py). Simulations are made with the ORM (ingestion is tested
with it).
"""

import gzip
import json

import pytest

from simulations.models import Simulation
from tests.helpers import content
from tests.simulations.support import simulate
from tests.traces.support import assert_conforms
from traces.models import KernelContext, Step, TraceState
from traces.views import STREAM_KERNELS_ABOVE

CTX = "0x6165bdd7ec90"
SUMMARY_KEYS = [
    "name",
    "state",
    "error",
    "created_at",
    "updated_at",
    "simulator",
    "simulator_build",
    "gpgpusim_build",
    "config",
    "core_clock_mhz",
    "complete",
    "stopped",
    "reason",
    "fatal",
    "left_out",
    "run",
    "kernels_simulated",
    "kernels_compared",
    "compared",
    "metrics",
    "owner",
]
METRIC_KEYS = [
    "mape",
    "aggregate_error",
    "pearson_r",
    "rpd",
    "nrmse",
    "within_10_percent",
    "kernels_compared",
    "sim_total_ns",
    "measured_total_ns",
    "total_error",
    "run_sim_ns",
    "run_measured_ns",
    "run_error",
]
KERNEL_KEYS = [
    "ctx",
    "kernel_id",
    "name",
    "step",
    "uid",
    "sim_cycles",
    "sim_insn",
    "sim_ns",
    "measured_ns",
    "error",
    "overlapped",
]
GEMM = "sm90_xmma_gemm_f16f16_f32"
VECADD = "_Z6vecAddPdS_S_i"


@pytest.fixture
def demo(make_trace):
    """A ready trace with two contexts and two steps, a ready simulation of five of its
    launches (one overlapped) and a newer one still uploading."""
    trace = make_trace("demo", state=TraceState.READY)
    KernelContext.objects.create(trace=trace, index=0, ctx=CTX)
    KernelContext.objects.create(trace=trace, index=1, ctx="0x7")
    Step.objects.create(
        trace=trace, index=0, name="step 0 (prefill)", phase="prefill", first_kernel_id=1, last_kernel_id=2
    )
    Step.objects.create(
        trace=trace, index=1, name="step 1 (decode)", phase="decode", first_kernel_id=3, last_kernel_id=5
    )
    # Written out of the trace's order: uids are the log's order.
    simulate(
        trace,
        "sim-a",
        [
            (1, 1, GEMM, None, 400, 500),
            (0, 2, VECADD, 0, 200, 150),
            (0, 1, GEMM, 0, 100, 120),
            (0, 3, VECADD, 1, 300, 330),
            (0, 4, VECADD, 1, 250, None),
        ],
        interrupted=[{"uid": 6, "ctx": CTX, "kernel_id": 5, "name": GEMM}],
        complete=False,
        stopped="max_cycles",
    )
    simulate(
        trace,
        "sim-new",
        [],
        minutes=5,
        state=TraceState.UPLOADING,
        simulator=None,
        simulator_build=None,
        gpgpusim_build=None,
        config=None,
        core_clock_mhz=None,
        complete=None,
    )
    return trace


def get_json(api, path: str, params=None, status: int = 200):
    response = api.get(path, params or {})
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    return json.loads(content(response))


# --- a trace's simulations ----------------------------------------------------------------------------


def test_a_traces_simulations_newest_first_with_the_summary_keys_in_order(api, demo):
    body = get_json(api, "/api/traces/demo/simulations")

    assert [simulation["name"] for simulation in body] == ["sim-new", "sim-a"]
    assert [list(simulation) for simulation in body] == [SUMMARY_KEYS, SUMMARY_KEYS]
    new, ready = body
    assert new["state"] == "uploading"
    assert new["metrics"] is None  # null until ready
    assert ready["created_at"] == "2026-11-09T10:00:00.000000Z"
    assert (ready["complete"], ready["stopped"]) == (False, "max_cycles")
    assert (ready["kernels_simulated"], ready["kernels_compared"]) == (5, 4)
    assert list(ready["metrics"]) == METRIC_KEYS
    # x = 100, 200, 300, 400 against y = 120, 150, 330, 500: |err| 20, 25, 10, 25 %.
    assert ready["metrics"]["mape"] == pytest.approx(20.0)
    assert ready["metrics"]["aggregate_error"] == pytest.approx((20 + 50 + 30 + 100) / 1000 * 100)
    assert ready["metrics"]["within_10_percent"] == 1
    assert ready["metrics"]["run_sim_ns"] == pytest.approx(1100.0)
    assert ready["metrics"]["run_measured_ns"] == 1250  # the overlapped launch included


def test_a_trace_without_simulations_has_an_empty_list(api, make_trace):
    make_trace("bare", state=TraceState.READY)
    assert get_json(api, "/api/traces/bare/simulations") == []


def test_the_stored_metrics_keys_come_in_the_documented_order_whatever_the_database_keeps(api, demo):
    # PostgreSQL's jsonb keeps its own key order; a key the contract lacks is not served.
    Simulation.objects.filter(name="sim-a").update(metrics={"total_error": 1.0, "mape": 2.0, "extra": 3})
    (metrics,) = [s["metrics"] for s in get_json(api, "/api/traces/demo/simulations") if s["metrics"]]
    assert list(metrics) == METRIC_KEYS
    assert (metrics["mape"], metrics["total_error"], metrics["pearson_r"]) == (2.0, 1.0, None)


# --- one simulation -----------------------------------------------------------------------------------


def test_a_simulation_has_its_steps_families_and_kernels_in_the_traces_order(api, demo):
    body = get_json(api, "/api/traces/demo/simulations/sim-a")

    assert list(body) == [*SUMMARY_KEYS, "interrupted", "steps", "families", "kernels"]
    assert body["interrupted"] == [{"uid": 6, "ctx": CTX, "kernel_id": 5, "name": GEMM, "trace_file": None}]
    assert list(body["interrupted"][0]) == ["uid", "ctx", "kernel_id", "name", "trace_file"]
    assert body["steps"] == [
        {"step": "step 0 (prefill)", "sim_ns": 270.0, "measured_ns": 300, "error": pytest.approx(-10.0)},
        {"step": "step 1 (decode)", "sim_ns": 330.0, "measured_ns": 300, "error": pytest.approx(10.0)},
    ]
    # Most measured time first: the GEMM's 500 ns, then vecAdd's 500 ns, ties by family.
    assert [(f["family"], f["count"]) for f in body["families"]] == [(GEMM, 2), ("vecAdd", 2)]
    assert [list(f) for f in body["families"]] == [["family", "count", "mape", "aggregate_error"]] * 2
    assert body["families"][0]["mape"] == pytest.approx(22.5)  # 20 % and 25 %
    assert body["families"][0]["aggregate_error"] == pytest.approx(120 / 500 * 100)
    kernels = body["kernels"]
    assert [list(kernel) for kernel in kernels] == [KERNEL_KEYS] * 5
    assert [(k["ctx"], k["kernel_id"], k["uid"]) for k in kernels] == [
        (CTX, 1, 3),
        (CTX, 2, 2),
        (CTX, 3, 4),
        (CTX, 4, 5),
        ("0x7", 1, 1),
    ]
    assert kernels[0] == {
        "ctx": CTX,
        "kernel_id": 1,
        "name": GEMM,
        "step": "step 0 (prefill)",
        "uid": 3,
        "sim_cycles": 120,
        "sim_insn": 360,
        "sim_ns": 120.0,
        "measured_ns": 100,
        "error": pytest.approx(20.0),
        "overlapped": False,
    }
    overlapped = kernels[3]
    assert (
        overlapped["overlapped"],
        overlapped["sim_cycles"],
        overlapped["sim_ns"],
        overlapped["error"],
    ) == (
        True,
        None,
        None,
        None,
    )
    assert kernels[4]["step"] is None
    assert kernels[1]["error"] == pytest.approx(-25.0)


def test_a_simulation_not_yet_read_has_no_steps_families_or_kernels(api, demo):
    body = get_json(api, "/api/traces/demo/simulations/sim-new")
    assert (body["state"], body["metrics"], body["interrupted"]) == ("uploading", None, [])
    assert (body["steps"], body["families"], body["kernels"]) == ([], [], [])


def test_an_unknown_simulation_is_a_404_naming_it(api, demo):
    assert get_json(api, "/api/traces/demo/simulations/nope", status=404) == {
        "detail": "simulation nope of trace demo not found"
    }
    assert get_json(api, "/api/traces/demo/simulations/sim%00a", status=404) == {
        "detail": "simulation sim\x00a of trace demo not found"
    }


def test_a_large_simulation_streams_and_compresses_to_the_same_json(api, demo):
    launches = [(0, n, VECADD, None, 1000 + n, 1100 + n) for n in range(1, STREAM_KERNELS_ABOVE + 2)]
    simulate(demo, "big", launches)

    plain = api.get("/api/traces/demo/simulations/big")
    compressed = api.get("/api/traces/demo/simulations/big", HTTP_ACCEPT_ENCODING="gzip")

    assert plain.streaming and compressed.streaming
    body = b"".join(plain.streaming_content)
    assert compressed["Content-Encoding"] == "gzip"
    assert gzip.decompress(b"".join(compressed.streaming_content)) == body
    kernels = json.loads(body)["kernels"]
    assert [kernel["kernel_id"] for kernel in kernels] == list(range(1, STREAM_KERNELS_ABOVE + 2))


# --- every simulation ---------------------------------------------------------------------------------


@pytest.fixture
def builds(demo, make_trace):
    """Two builds over two traces: build-a 20 % off on sim-a's kernels and 0 % on 'other'
    (pooled: 16 %), build-b 50 % off on one kernel; a failed one of build-c."""
    other = make_trace("other", state=TraceState.READY)
    KernelContext.objects.create(trace=other, index=0, ctx=CTX)
    simulate(other, "sim-a", [(0, 1, GEMM, None, 100, 100)], minutes=1, config="SM80_A100")
    simulate(demo, "sim-b", [(0, 1, GEMM, 0, 100, 150)], minutes=2, simulator_build="build-b")
    simulate(
        other,
        "sim-c",
        [],
        minutes=3,
        simulator_build="build-c",
        state=TraceState.FAILED,
        error="names differ",
    )


def test_every_simulation_with_its_trace_id_first_newest_first(api, builds):
    body = get_json(api, "/api/simulations")

    assert [(s["trace_id"], s["name"]) for s in body] == [
        ("demo", "sim-new"),
        ("other", "sim-c"),
        ("demo", "sim-b"),
        ("other", "sim-a"),
        ("demo", "sim-a"),
    ]
    assert all(list(s) == ["trace_id", *SUMMARY_KEYS] for s in body)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"trace": "other"}, [("other", "sim-c"), ("other", "sim-a")]),
        ({"simulator_build": "build-a"}, [("other", "sim-a"), ("demo", "sim-a")]),
        ({"config": "SM80_A100"}, [("other", "sim-a")]),
        ({"state": "failed"}, [("other", "sim-c")]),
        ({"trace": "demo", "state": "ready"}, [("demo", "sim-b"), ("demo", "sim-a")]),
        ({"trace": "", "state": ""}, None),  # empty values narrow nothing
        ({"trace": "nope"}, []),
    ],
)
def test_each_filter_narrows_the_list(api, builds, params, expected):
    body = get_json(api, "/api/simulations", params)
    if expected is None:
        assert len(body) == 5
    else:
        assert [(s["trace_id"], s["name"]) for s in body] == expected


def test_a_bad_filter_value_is_a_400_as_the_trace_lists(api, builds):
    body = get_json(api, "/api/simulations", {"state": "done"}, status=400)
    assert body == {"detail": "state accepts one of uploading, parsing, ready, failed; got 'done'."}
    traces = get_json(api, "/api/traces", {"state": "done"}, status=400)
    assert body == traces  # the same words for the same parameter
    nul = get_json(api, "/api/simulations", {"config": "SM\x0090"}, status=400)
    assert nul["detail"].startswith("config accepts text without NUL characters")
    both = get_json(api, "/api/simulations", {"state": "x", "trace": "a\x00"}, status=400)
    # A NUL is refused before any filter reads the parameters (traces.params).
    assert both == {"detail": "trace accepts text without NUL characters; got 'a\\x00'."}


def test_accuracy_ranks_the_builds_most_accurate_first(api, builds):
    body = get_json(api, "/api/simulations/accuracy")

    assert [list(row) for row in body] == [
        [
            "simulator_build",
            "simulations",
            "traces",
            "kernels_compared",
            "mape",
            "aggregate_error",
            "pearson_r",
            "worst",
            "left_out",
        ]
    ] * 2
    build_a, build_b = body
    # build-a pooled over five launches: (20 + 25 + 10 + 25 + 0) / 5 = 16 %, not the mean of 20 and 0.
    assert (build_a["simulator_build"], build_a["simulations"], build_a["traces"]) == ("build-a", 2, 2)
    assert build_a["kernels_compared"] == 5
    assert build_a["mape"] == pytest.approx(16.0)
    assert build_a["aggregate_error"] == pytest.approx(200 / 1100 * 100)
    assert build_a["pearson_r"] is not None
    assert (build_b["simulator_build"], build_b["kernels_compared"], build_b["mape"]) == (
        "build-b",
        1,
        pytest.approx(50.0),
    )
    # The failed build-c and the uploading simulation have no row: only ready simulations count.
    assert get_json(api, "/api/simulations/accuracy", {"by": "simulator_build"}) == body


def test_accuracy_leaves_out_ready_simulations_that_compared_nothing_and_says_so(api, builds, make_trace):
    before = get_json(api, "/api/simulations/accuracy")
    untimed = make_trace("untimed", state=TraceState.READY)
    KernelContext.objects.create(trace=untimed, index=0, ctx=CTX)
    simulate(untimed, "sim-untimed", [(0, 1, GEMM, None, None, 100)], minutes=4)  # build-a
    simulate(untimed, "sim-d", [(0, 1, GEMM, None, None, 100)], minutes=5, simulator_build="build-d")
    body = get_json(api, "/api/simulations/accuracy")
    build_a = next(row for row in body if row["simulator_build"] == "build-a")
    # build-a's figures are those without the simulation that compared nothing.
    assert {key: build_a[key] for key in before[0] if key != "left_out"} == {
        key: before[0][key] for key in before[0] if key != "left_out"
    }
    assert build_a["left_out"]["simulations"] == 1 and "no kernel compared" in build_a["left_out"]["why"]
    build_d = body[-1]
    assert (build_d["simulator_build"], build_d["simulations"], build_d["mape"]) == ("build-d", 0, None)
    assert build_d["left_out"]["simulations"] == 1
    assert before[0]["left_out"] == {"simulations": 0, "why": None}


def test_accuracy_by_config_with_the_lists_filters(api, builds):
    by_config = get_json(api, "/api/simulations/accuracy", {"by": "config"})
    assert [(row["config"], row["simulations"], row["kernels_compared"]) for row in by_config] == [
        ("SM80_A100", 1, 1),
        ("SM90_H100", 2, 5),
    ]
    only_demo = get_json(api, "/api/simulations/accuracy", {"by": "config", "trace": "demo"})
    assert [(row["config"], row["simulations"]) for row in only_demo] == [("SM90_H100", 2)]
    assert only_demo[0]["mape"] == pytest.approx((20 + 25 + 10 + 25 + 50) / 5)


def test_a_bad_by_or_filter_is_a_400(api, builds):
    assert get_json(api, "/api/simulations/accuracy", {"by": "notes"}, status=400) == {
        "detail": "by must be one of simulator_build, config, not 'notes'"
    }
    assert get_json(api, "/api/simulations/accuracy", {"state": "done"}, status=400) == {
        "detail": "state accepts one of uploading, parsing, ready, failed; got 'done'."
    }


# --- the schema ---------------------------------------------------------------------------------------

SIMULATION_ROUTES = [
    "/api/traces/{trace_id}/simulations",
    "/api/traces/{trace_id}/simulations/{name}",
    "/api/simulations",
    "/api/simulations/accuracy",
]


def test_the_routes_are_in_the_schema_with_their_filters(openapi):  # noqa: F811
    paths = openapi["paths"]
    for path in SIMULATION_ROUTES:
        # A simulation is also deleted at its own route (its owner's or staff's write token).
        methods = ["get", "delete"] if path.endswith("{name}") else ["get"]
        assert list(paths[path]) == methods, path
        assert paths[path]["get"]["security"] == [{"bearerAuth": []}]

    def query(path: str) -> set[str]:
        return {p["name"] for p in paths[path]["get"].get("parameters", []) if p["in"] == "query"}

    assert query("/api/simulations") == {"trace", "simulator_build", "config", "state"}
    assert query("/api/simulations/accuracy") == {"by", "trace", "simulator_build", "config", "state"}
    assert query("/api/traces/{trace_id}/simulations") == set()  # not the trace list's filters
    schemas = openapi["components"]["schemas"]
    assert list(schemas["SimulationSummary"]["properties"]) == SUMMARY_KEYS
    assert list(schemas["SimulationListItem"]["properties"]) == ["trace_id", *SUMMARY_KEYS]
    assert list(schemas["SimulationDetail"]["properties"]) == [
        *SUMMARY_KEYS,
        "interrupted",
        "steps",
        "families",
        "kernels",
    ]
    assert list(schemas["SimulatedKernel"]["properties"]) == KERNEL_KEYS
    assert list(schemas["SimulationMetrics"]["properties"]) == METRIC_KEYS


def test_the_examples_conform(openapi):  # noqa: F811
    from tests.traces.support import response_validator

    for path in SIMULATION_ROUTES:
        examples = openapi["paths"][path]["get"]["responses"]["200"]["content"]["application/json"][
            "examples"
        ]
        assert examples, path
        for example in examples.values():
            response_validator(openapi, path, 200).validate(example["value"])


def test_real_answers_conform_to_the_schema(api, builds, openapi):  # noqa: F811
    assert_conforms(openapi, "/api/traces/{trace_id}/simulations", api.get("/api/traces/demo/simulations"))
    for name in ["sim-a", "sim-new"]:
        assert_conforms(
            openapi,
            "/api/traces/{trace_id}/simulations/{name}",
            api.get(f"/api/traces/demo/simulations/{name}"),
        )
    assert_conforms(
        openapi, "/api/traces/{trace_id}/simulations/{name}", api.get("/api/traces/demo/simulations/x")
    )
    assert_conforms(openapi, "/api/simulations", api.get("/api/simulations"))
    assert_conforms(openapi, "/api/simulations", api.get("/api/simulations", {"state": "x"}))
    for by in ["simulator_build", "config", "x"]:
        assert_conforms(
            openapi, "/api/simulations/accuracy", api.get("/api/simulations/accuracy", {"by": by})
        )


@pytest.mark.parametrize(
    "path",
    ["/api/traces/demo/simulations", "/api/traces/demo/simulations/sim-a", "/api/simulations/accuracy"],
)
def test_operators_browse_the_routes_in_html(staff_client, demo, path):
    response = staff_client.get(path, HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert b"sim-a" in response.content or b"simulator_build" in response.content
