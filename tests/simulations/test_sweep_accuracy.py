"""`GET /api/sweeps/{id}/accuracy[?against=OTHER]`, as issue 39 and docs/api.md state it:

- `by_config`: a row per (config, simulator build) over the sweep's ready simulations, computed
  exactly as `/api/simulations/accuracy` computes its rows: the same simulations give the same row
  through both routes;
- `cells`: one per job, `trace_id`, `config`, `simulation`, `state`, `kernels_compared`, `mape`;
- `against`: the traces both sweeps simulated, kernel by kernel: which kernels got better, which
  worse, by how much;
- 404 for an unknown sweep or `against`, 400 for an `against` that is not an integer.

Sweeps and jobs are made with the ORM (the models are the contract's); simulations with the
simulations' test helper, as ingestion stores them. Expected metrics come from the launches'
times, worked out here (tests/simulations/test_accuracy.py's reference).
"""

import json

import pytest

from simulations import sweep_shapes
from simulations.models import Sweep, SweepJob, SweepJobState
from tests.helpers import content
from tests.simulations.support import simulate
from tests.simulations.test_accuracy import reference
from tests.traces.support import assert_conforms
from traces.models import KernelContext, TraceState

CTX = "0x6165bdd7ec90"
GEMM = "sm90_xmma_gemm_f16f16_f32"
VECADD = "_Z6vecAddPdS_S_i"
# Two traces' launches: (context, kernel_id, name, step, measured ns); a simulation adds cycles
# (ns at 1000 MHz, None for an overlapped launch).
RUN_A = [(0, 1, GEMM, None, 100), (0, 2, VECADD, None, 200), (0, 3, GEMM, None, 400)]
RUN_B = [(0, 1, VECADD, None, 1000), (0, 2, GEMM, None, 50)]
SM90 = "SM90_H100"
SM80 = "SM80_A100"


def launches(run: list[tuple], cycles: list[int | None]) -> list[tuple]:
    return [(*launch, cycle) for launch, cycle in zip(run, cycles, strict=True)]


def make_traces(make_trace) -> dict:
    """The two ready traces run-a and run-b, each with its context."""
    made = {}
    for trace_id in ("run-a", "run-b"):
        made[trace_id] = make_trace(trace_id, state=TraceState.READY)
        KernelContext.objects.create(trace=made[trace_id], index=0, ctx=CTX)
    return made


@pytest.fixture
def traces(make_trace):
    return make_traces(make_trace)


def sweep_of(name: str, jobs: list[tuple], **fields) -> Sweep:
    """A sweep whose jobs are (trace, config, state, simulation name or None)."""
    sweep = Sweep.objects.create(name=name, configs=sorted({job[1] for job in jobs}), **fields)
    for trace, config, state, simulation in jobs:
        SweepJob.objects.create(
            sweep=sweep, trace=trace, config=config, state=state, simulation_name=simulation, attempts=1
        )
    return sweep


def get_json(api, path: str, params=None, status: int = 200):
    response = api.get(path, params or {})
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    return json.loads(content(response))


@pytest.fixture
def sweep(traces):
    return make_first_sweep(traces)


def make_first_sweep(traces: dict) -> Sweep:
    """Sweep 1: both traces on SM90 (build-a), run-a on SM80 too (build-a), run-b on SM80
    failed; plus a simulation of run-a outside the sweep."""
    a, b = traces["run-a"], traces["run-b"]
    simulate(a, "sweep1_SM90_H100", launches(RUN_A, [120, 150, 400]))
    simulate(b, "sweep1_SM90_H100", launches(RUN_B, [1100, None]))
    simulate(a, "sweep1_SM80_A100", launches(RUN_A, [100, 260, 300]), config=SM80)
    # Not the sweep's: another build's run of run-a, on SM90.
    simulate(a, "other", launches(RUN_A, [900, 900, 900]), simulator_build="build-z")
    return sweep_of(
        "first",
        [
            (a, SM90, SweepJobState.READY, "sweep1_SM90_H100"),
            (b, SM90, SweepJobState.READY, "sweep1_SM90_H100"),
            (a, SM80, SweepJobState.READY, "sweep1_SM80_A100"),
            (b, SM80, SweepJobState.FAILED, "sweep1_SM80_A100"),
        ],
    )


ROW_KEYS = [
    "simulator_build",
    "config",
    "simulations",
    "traces",
    "kernels_compared",
    "mape",
    "aggregate_error",
    "pearson_r",
    "worst",
    "left_out",
]
CELL_KEYS = ["trace_id", "config", "simulation", "state", "kernels_compared", "mape"]


def test_by_config_has_a_row_per_config_and_build_with_metrics_from_its_kernels(api, sweep):
    body = get_json(api, f"/api/sweeps/{sweep.pk}/accuracy")

    assert list(body) == ["id", "name", "by_config", "cells"]
    assert (body["id"], body["name"]) == (sweep.pk, "first")
    assert [list(row) for row in body["by_config"]] == [ROW_KEYS, ROW_KEYS]
    assert [
        (r["config"], r["simulator_build"], r["simulations"], r["traces"]) for r in body["by_config"]
    ] == [
        (SM90, "build-a", 2, 2),  # lower MAPE first
        (SM80, "build-a", 1, 1),
    ]
    sm90, sm80 = body["by_config"]
    # SM90 pooled over run-a's three and run-b's one compared launch (its second overlapped):
    # errors 20, 25, 0 and 10 %; never build-z's simulation, never run-b's overlapped launch.
    points = [(100, 120.0), (200, 150.0), (400, 400.0), (1000, 1100.0)]
    expected = reference(points)
    assert expected["mape"] == pytest.approx((20 + 25 + 0 + 10) / 4)
    assert sm90["kernels_compared"] == 4
    for key in ("mape", "aggregate_error", "pearson_r"):
        assert sm90[key] == pytest.approx(expected[key], rel=1e-9), key
    expected_sm80 = reference([(100, 100.0), (200, 260.0), (400, 300.0)])
    assert sm80["mape"] == pytest.approx(expected_sm80["mape"])  # (0 + 30 + 25) / 3
    # The worst launches, largest |error| first: run-a's vecAdd (-25 %) then run-b's (+10 %).
    assert [(w["trace_id"], w["kernel_id"], w["name"], w["error"]) for w in sm90["worst"]] == [
        ("run-a", 2, VECADD, pytest.approx(-25.0)),
        ("run-a", 1, GEMM, pytest.approx(20.0)),
        ("run-b", 1, VECADD, pytest.approx(10.0)),
    ]
    assert sm90["worst"][0] == {
        "trace_id": "run-a",
        "simulation": "sweep1_SM90_H100",
        "ctx": CTX,
        "kernel_id": 2,
        "name": VECADD,
        "measured_ns": 200,
        "sim_ns": 150.0,
        "error": pytest.approx(-25.0),
    }


def test_a_by_config_row_is_the_simulations_accuracy_row_of_the_same_simulations(api, sweep, traces):
    """The contract: the same simulations answer the same row through both routes."""
    body = get_json(api, f"/api/sweeps/{sweep.pk}/accuracy")
    # /api/simulations/accuracy by config over build-a: exactly the sweep's ready simulations.
    by_config = get_json(api, "/api/simulations/accuracy", {"by": "config", "simulator_build": "build-a"})
    by_build = get_json(
        api, "/api/simulations/accuracy", {"by": "simulator_build", "config": SM80, "trace": "run-a"}
    )

    registry = {row["config"]: row for row in by_config}
    for row in body["by_config"]:
        assert {k: v for k, v in row.items() if k != "simulator_build"} == registry[row["config"]]
    (sm80,) = [row for row in body["by_config"] if row["config"] == SM80]
    assert {k: v for k, v in sm80.items() if k != "config"} == by_build[0]


def test_a_ready_simulation_that_compared_nothing_is_left_out_as_the_registry_leaves_it_out(
    api, sweep, traces
):
    b = traces["run-b"]
    simulate(b, "sweep1_SM80_A100", launches(RUN_B, [None, None]), config=SM80)
    SweepJob.objects.filter(sweep=sweep, trace=b, config=SM80).update(state=SweepJobState.READY)

    (sm80,) = [
        r for r in get_json(api, f"/api/sweeps/{sweep.pk}/accuracy")["by_config"] if r["config"] == SM80
    ]
    (registry,) = [
        r
        for r in get_json(api, "/api/simulations/accuracy", {"by": "config", "simulator_build": "build-a"})
        if r["config"] == SM80
    ]
    assert sm80["left_out"] == {"simulations": 1, "why": registry["left_out"]["why"]}
    assert {k: v for k, v in sm80.items() if k != "simulator_build"} == registry


def test_cells_are_the_jobs_with_their_simulations_figures(api, sweep):
    body = get_json(api, f"/api/sweeps/{sweep.pk}/accuracy")

    assert [list(cell) for cell in body["cells"]] == [CELL_KEYS] * 4
    assert [
        (c["trace_id"], c["config"], c["simulation"], c["state"], c["kernels_compared"])
        for c in body["cells"]
    ] == [
        ("run-a", SM90, "sweep1_SM90_H100", "ready", 3),
        ("run-b", SM90, "sweep1_SM90_H100", "ready", 1),
        ("run-a", SM80, "sweep1_SM80_A100", "ready", 3),
        ("run-b", SM80, "sweep1_SM80_A100", "failed", None),
    ]
    mapes = [cell["mape"] for cell in body["cells"]]
    assert mapes[:3] == [pytest.approx(15.0), pytest.approx(10.0), pytest.approx(55 / 3)]
    assert mapes[3] is None
    # A cell's MAPE is its simulation's own page's.
    page = get_json(api, "/api/traces/run-a/simulations/sweep1_SM90_H100")
    assert mapes[0] == page["metrics"]["mape"]


def test_a_sweep_without_ready_jobs_has_no_rows_and_its_cells(api, traces):
    sweep = sweep_of("waiting", [(traces["run-a"], SM90, SweepJobState.QUEUED, None)])

    body = get_json(api, f"/api/sweeps/{sweep.pk}/accuracy")

    assert body["by_config"] == []
    assert body["cells"] == [
        {
            "trace_id": "run-a",
            "config": SM90,
            "simulation": None,
            "state": "queued",
            "kernels_compared": None,
            "mape": None,
        }
    ]


# --- against another sweep ---------------------------------------------------------------------------


@pytest.fixture
def second(sweep, traces):
    """Sweep 2, another build on SM90: run-a's GEMM 1 from +20 % to +5 %, vecAdd 2 from -25 % to
    -30 %, GEMM 3 unchanged; run-b's vecAdd from +10 % to -2 %."""
    a, b = traces["run-a"], traces["run-b"]
    simulate(a, "sweep2_SM90_H100", launches(RUN_A, [105, 140, 400]), simulator_build="build-b")
    simulate(b, "sweep2_SM90_H100", launches(RUN_B, [980, None]), simulator_build="build-b")
    return sweep_of(
        "second",
        [
            (a, SM90, SweepJobState.READY, "sweep2_SM90_H100"),
            (b, SM90, SweepJobState.READY, "sweep2_SM90_H100"),
        ],
    )


def test_against_names_the_kernels_that_got_better_and_worse_and_by_how_much(api, sweep, second):
    body = get_json(api, f"/api/sweeps/{second.pk}/accuracy", {"against": sweep.pk})

    against = body["against"]
    assert list(body) == ["id", "name", "by_config", "cells", "against"]
    assert (against["id"], against["name"], against["paired_by"]) == (sweep.pk, "first", "config")
    # Only SM90 is shared: run-a and run-b, in the sweep's job order.
    assert [
        (p["trace_id"], p["config"], p["simulation"], p["against_simulation"]) for p in against["pairs"]
    ] == [
        ("run-a", SM90, "sweep2_SM90_H100", "sweep1_SM90_H100"),
        ("run-b", SM90, "sweep2_SM90_H100", "sweep1_SM90_H100"),
    ]
    run_a, run_b = against["pairs"]
    assert (run_a["compared"], run_a["better"], run_a["worse"], run_a["unchanged"]) == (3, 1, 1, 1)
    (better,) = run_a["better_kernels"]
    assert (better["kernel_id"], better["name"], better["measured_ns"]) == (1, GEMM, 100)
    assert (better["against_sim_ns"], better["sim_ns"]) == (120.0, 105.0)
    assert (better["against_error"], better["error"]) == (pytest.approx(20.0), pytest.approx(5.0))
    assert better["change"] == pytest.approx(-15.0)  # |error| 20 -> 5 %: 15 points closer
    (worse,) = run_a["worse_kernels"]
    assert (worse["kernel_id"], worse["change"]) == (2, pytest.approx(5.0))  # 25 -> 30 %
    assert run_a["mean_change"] == pytest.approx((-15 + 5 + 0) / 3)
    assert (run_a["mape"], run_a["against_mape"]) == (pytest.approx(35 / 3), pytest.approx(15.0))
    assert [(k["kernel_id"], k["change"]) for k in run_b["better_kernels"]] == [(1, pytest.approx(-8.0))]
    assert (against["compared"], against["better"], against["worse"], against["unchanged"]) == (4, 2, 1, 1)


def test_against_a_sweep_of_another_config_pairs_by_trace(api, traces):
    a = traces["run-a"]
    simulate(a, "s_SM90", launches(RUN_A, [120, 150, 400]))
    simulate(a, "s_SM80", launches(RUN_A, [100, 200, 500]), config=SM80)
    on_sm90 = sweep_of("sm90", [(a, SM90, SweepJobState.READY, "s_SM90")])
    on_sm80 = sweep_of("sm80", [(a, SM80, SweepJobState.READY, "s_SM80")])

    against = get_json(api, f"/api/sweeps/{on_sm80.pk}/accuracy", {"against": on_sm90.pk})["against"]

    assert against["paired_by"] == "trace"
    (pair,) = against["pairs"]
    assert (pair["config"], pair["against_config"]) == (SM80, SM90)
    assert (pair["better"], pair["worse"], pair["unchanged"]) == (2, 1, 0)


def test_an_unknown_sweep_or_against_is_a_404_and_a_bad_against_a_400(api, sweep):
    assert get_json(api, "/api/sweeps/999999/accuracy", status=404) == {"detail": "sweep 999999 not found"}
    assert get_json(api, f"/api/sweeps/{sweep.pk}/accuracy", {"against": "999999"}, status=404) == {
        "detail": "sweep 999999 not found"
    }
    assert get_json(api, f"/api/sweeps/{sweep.pk}/accuracy", {"against": "x"}, status=400) == {
        "detail": "against must be a sweep's id (an integer), not 'x'"
    }
    assert get_json(api, f"/api/sweeps/{sweep.pk}/accuracy", {"against": "-1"}, status=400)
    assert get_json(api, "/api/sweeps/99999999999999999999999/accuracy", status=404)
    # The route answers with and without the trailing slash, as every route of the API.
    assert get_json(api, f"/api/sweeps/{sweep.pk}/accuracy/")["id"] == sweep.pk


def test_a_cells_states_are_the_jobs(api, traces):
    """Each state a job can be in is a state a cell says (the schema lists them)."""
    assert sweep_shapes.JOB_STATES == tuple(SweepJobState.values)
    a = traces["run-a"]
    sweep = sweep_of("every state", [(a, f"SM90_{state}", state, None) for state in SweepJobState.values])
    cells = get_json(api, f"/api/sweeps/{sweep.pk}/accuracy")["cells"]
    assert [cell["state"] for cell in cells] == list(SweepJobState.values)


def test_a_token_is_needed(client_anon, sweep):
    assert client_anon.get(f"/api/sweeps/{sweep.pk}/accuracy").status_code == 401


def test_the_answer_conforms_to_the_schema(api, openapi, sweep, second):
    operation = openapi["paths"]["/api/sweeps/{id}/accuracy"]["get"]
    assert operation["operationId"] == "sweeps_accuracy"
    assert operation["security"] == [{"bearerAuth": []}]
    for params in ({}, {"against": sweep.pk}):
        assert_conforms(
            openapi,
            "/api/sweeps/{id}/accuracy",
            api.get(f"/api/sweeps/{second.pk}/accuracy", params),
        )
