"""A simulation's accuracy (simulations/metrics.py, simulations/accuracy.py) against an independent reading of the spec.

The definitions (docs/formats.md#accuracy-metrics, after Accel-Sim and COMMON20): x is the
measured time, y the simulated time, over the launches that have both. Expected values here
are computed in the test from those words with plain Python (`statistics`, `math`), never
from the module's sums; rows are made with the ORM.
"""

import math
import statistics
from fractions import Fraction

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulations import accuracy, compare
from simulations.metrics import METRIC_KEYS, metric_values
from simulations.models import SimulatedKernel, Simulation
from traces.models import KernelContext, KernelName, Step, Trace, TraceState, name_digest

CTX = "0x6165bdd7ec90"


# --- the reference: the spec's words, point by point ---------------------------------------------


def reference(points: list[tuple[int, float]]) -> dict:
    """The metrics of (x, y) points, as docs/formats.md#accuracy-metrics defines them."""
    n = len(points)
    if n == 0:
        return {
            "mape": None,
            "aggregate_error": None,
            "pearson_r": None,
            "rpd": None,
            "nrmse": None,
            "within_10_percent": 0,
            "kernels_compared": 0,
            "sim_total_ns": None,
            "measured_total_ns": None,
            "total_error": None,
        }
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    sum_x, sum_y = sum(xs), math.fsum(ys)
    return {
        # Accel-Sim: err = 0 if hw == 0
        "mape": statistics.fmean(abs(y - x) / x if x else 0.0 for x, y in points) * 100,
        "aggregate_error": math.fsum(abs(y - x) for x, y in points) / sum_x * 100 if sum_x else None,
        "pearson_r": reference_pearson(xs, ys),
        "rpd": statistics.fmean(2 * abs(y - x) / (x + y) if x + y else 0.0 for x, y in points) * 100,
        "nrmse": math.sqrt(statistics.fmean((y - x) ** 2 for x, y in points)) / statistics.fmean(xs)
        if sum_x
        else None,
        "within_10_percent": sum(1 for x, y in points if abs(y - x) <= 0.1 * x),
        "kernels_compared": n,
        "sim_total_ns": sum_y,
        "measured_total_ns": sum_x,
        "total_error": (sum_y - sum_x) / sum_x * 100 if sum_x else None,
    }


def relative_variance(values) -> Fraction:
    """Var / mean square, exactly: 0 for a constant side."""
    exact = [Fraction(value) for value in values]
    n = len(exact)
    square = sum(value * value for value in exact)
    return (n * square - sum(exact) ** 2) / (n * square) if square else Fraction(0)


def reference_pearson(xs, ys) -> float | None:
    if len(xs) < 2 or relative_variance(xs) == 0 or relative_variance(ys) == 0:
        return None
    return statistics.correlation(xs, ys)


def assert_metrics(actual: dict, expected: dict, *, pearson_exact: bool = True) -> None:
    assert list(actual)[: len(METRIC_KEYS)] == list(METRIC_KEYS)
    for key, value in expected.items():
        if key == "pearson_r" and not pearson_exact:
            continue
        if value is None or isinstance(value, int) and key != "sim_total_ns":
            assert actual[key] == value, key
        else:
            assert actual[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key


# --- rows ------------------------------------------------------------------------------------------


def make_names(*names: str) -> list[KernelName]:
    return [
        KernelName.objects.get_or_create(digest=name_digest(name), defaults={"name": name})[0]
        for name in names
    ]


@pytest.fixture
def trace(db) -> Trace:
    """A ready trace with two contexts and a prefill and a decode step."""
    trace = Trace.objects.create(id="run-a", state=TraceState.READY)
    KernelContext.objects.create(trace=trace, index=0, ctx=CTX)
    KernelContext.objects.create(trace=trace, index=1, ctx="0x7")
    Step.objects.create(
        trace=trace, index=0, name="prefill 0", phase="prefill", ctx=CTX, first_kernel_id=1, last_kernel_id=2
    )
    Step.objects.create(
        trace=trace, index=1, name="decode 1", phase="decode", ctx=CTX, first_kernel_id=3, last_kernel_id=9
    )
    return trace


def simulation(trace: Trace, name: str = "sim", **fields) -> Simulation:
    return Simulation.objects.create(trace=trace, name=name, **{"state": TraceState.READY, **fields})


def add_kernels(sim: Simulation, rows: list[dict]) -> None:
    """SimulatedKernel rows: `x` (measured ns), `y` (simulated ns), and any field; kernel ids
    from 1, context 0, the name `_Z6kernelPfi` unless given."""
    (default_name,) = make_names("_Z6kernelPfi")
    SimulatedKernel.objects.bulk_create(
        SimulatedKernel(
            simulation=sim,
            trace_key=sim.trace.key,
            context=row.get("context", 0),
            kernel_id=row.get("kernel_id", number),
            uid=row.get("uid", number),
            kernel_name=row.get("name", default_name),
            step=row.get("step"),
            measured_ns=row.get("x"),
            sim_ns=row.get("y"),
            sim_cycles=row.get("cycles"),
            sim_insn=row.get("insn"),
            overlapped=row.get("overlapped", False),
        )
        for number, row in enumerate(rows, start=1)
    )


def points_sim(trace: Trace, points, name: str = "sim", **fields) -> Simulation:
    sim = simulation(trace, name, **fields)
    add_kernels(sim, [{"x": x, "y": y} for x, y in points])
    return sim


WORKED = [(100, 120.0), (300, 250.0), (50, 60.0)]


# --- the metrics -----------------------------------------------------------------------------------


def test_the_worked_example_at_kernel_level_has_a_mape_of_18_9_percent(trace):
    """docs/formats.md#accuracy-metrics: kernel-level MAPE (20 + 16.7 + 20) / 3 = 18.9 %."""
    sim = points_sim(trace, WORKED)

    values = metric_values(sim.kernels.all())

    assert round(values["mape"], 1) == 18.9
    assert values["mape"] == pytest.approx((20 + 50 / 3 + 20) / 3)
    assert values["aggregate_error"] == pytest.approx((20 + 50 + 10) / 450 * 100)
    assert values["kernels_compared"] == 3
    assert values["measured_total_ns"] == 450
    assert values["sim_total_ns"] == pytest.approx(430)
    assert values["total_error"] == pytest.approx(-20 / 450 * 100)
    assert values["within_10_percent"] == 0
    assert_metrics(values, reference(WORKED))


def test_every_metric_matches_an_independent_computation(trace):
    points = [(1000, 1100.0), (2000, 1900.0), (500, 800.0), (40000, 39000.5), (123, 123.0), (7, 70.0)]
    sim = points_sim(trace, points)

    assert_metrics(metric_values(sim.kernels.all()), reference(points))


def test_within_10_percent_includes_its_edges(trace):
    sim = points_sim(trace, [(100, 110.0), (100, 90.0), (100, 111.0), (100, 89.0), (0, 0.0)])

    # x = 0, y = 0: |0| <= 0, a perfect prediction counts.
    assert metric_values(sim.kernels.all())["within_10_percent"] == 3


def test_a_point_measured_at_zero_adds_zero_to_the_mape_and_nothing_to_the_aggregate(trace):
    points = [(0, 50.0), (100, 150.0), (0, 0.0)]
    sim = points_sim(trace, points)

    values = metric_values(sim.kernels.all())

    assert values["mape"] == pytest.approx(50 / 3)  # (0 + 50 + 0) / 3
    assert values["aggregate_error"] == pytest.approx((50 + 50) / 100 * 100)
    # RPD: 2*50/50 = 2, 2*50/250 = 0.4, and 0 where x + y = 0
    assert values["rpd"] == pytest.approx((200 + 40 + 0) / 3)
    assert_metrics(values, reference(points))


def test_only_points_measured_at_zero_leave_the_ratios_of_sums_null(trace):
    sim = points_sim(trace, [(0, 5.0), (0, 7.0)])

    values = metric_values(sim.kernels.all())

    assert values["kernels_compared"] == 2
    assert values["mape"] == 0
    assert values["aggregate_error"] is None
    assert values["nrmse"] is None
    assert values["total_error"] is None
    assert values["pearson_r"] is None  # x is constant
    assert values["measured_total_ns"] == 0
    assert values["sim_total_ns"] == 12


def test_nothing_compared_gives_null_metrics_and_zero_counts(trace):
    sim = simulation(trace)
    assert metric_values(sim.kernels.all()) == reference([])
    assert all(
        value is None for key, value in reference([]).items() if "compared" not in key and "10" not in key
    )


def test_one_point_has_no_correlation(trace):
    sim = points_sim(trace, [(100, 120.0)])

    values = metric_values(sim.kernels.all())

    assert values["pearson_r"] is None
    assert values["mape"] == pytest.approx(20)
    assert values["nrmse"] == pytest.approx(0.2)
    assert_metrics(values, reference([(100, 120.0)]))


def test_a_constant_side_has_no_correlation(trace):
    sim = points_sim(trace, [(100, 120.0), (200, 120.0), (300, 120.0)])
    assert metric_values(sim.kernels.all())["pearson_r"] is None


def test_a_perfect_linear_relation_correlates_at_one(trace):
    sim = points_sim(trace, [(100, 300.0), (200, 500.0), (400, 900.0)])
    assert metric_values(sim.kernels.all())["pearson_r"] == pytest.approx(1.0)


def test_overlapped_launches_and_launches_without_a_time_are_left_out(trace):
    sim = simulation(trace)
    add_kernels(
        sim,
        [
            {"x": 100, "y": 120.0, "cycles": 120},
            {"x": 300, "y": 250.0, "cycles": 250},
            {"x": 50, "y": 60.0, "cycles": 60},
            {"x": 900, "y": None, "overlapped": True},
            {"x": 800, "y": None, "overlapped": True},
            {"x": None, "y": 40.0, "cycles": 40},  # the trace has no measured time for it
            {"x": 70, "y": None},  # no cycles
        ],
    )

    assert_metrics(metric_values(sim.kernels.all()), reference(WORKED))


def test_the_same_sums_pool_several_simulations(trace):
    """A build's metrics are over all its kernels, not a mean of its simulations' metrics."""
    first = points_sim(trace, WORKED, "first")
    second = points_sim(trace, [(1000, 1500.0)], "second")

    pooled = metric_values(SimulatedKernel.objects.filter(simulation__in=[first, second]))

    assert_metrics(pooled, reference([*WORKED, (1000, 1500.0)]))


points_strategy = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(min_value=0, max_value=10**10)),
        # Simulated times as ingestion makes them: cycles * 1000 / a core clock in MHz.
        st.one_of(
            st.none(),
            st.builds(
                lambda cycles, mhz: cycles * 1000 / mhz,
                st.integers(min_value=0, max_value=10**11),
                st.floats(min_value=100, max_value=5000),
            ),
        ),
        st.booleans(),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=points_strategy)
def test_any_rows_give_the_metrics_of_the_spec(trace, rows):
    """Random launches, some overlapped (no simulated time), some without a measured time."""
    rows = [(x, None if overlapped else y, overlapped) for x, y, overlapped in rows]
    compared = [(x, y) for x, y, _ in rows if x is not None and y is not None]
    with transaction.atomic():
        sim = simulation(trace)
        add_kernels(sim, [{"x": x, "y": y, "overlapped": overlapped} for x, y, overlapped in rows])
        values = metric_values(sim.kernels.all())
        transaction.set_rollback(True)

    expected = reference(compared)
    # Pearson's r from raw moments: exact where each side's spread is well above rounding;
    # where it is not, null or a correlation, never anything else.
    spread = len(compared) >= 2 and min(
        relative_variance([x for x, _ in compared]), relative_variance([y for _, y in compared])
    )
    clear = expected["pearson_r"] is None or spread > Fraction(1, 10**6)
    assert_metrics(values, expected, pearson_exact=False)
    if clear:
        if expected["pearson_r"] is None:
            assert values["pearson_r"] is None
        else:
            assert values["pearson_r"] == pytest.approx(expected["pearson_r"], abs=1e-6)
    else:
        assert values["pearson_r"] is None or -1 <= values["pearson_r"] <= 1


# --- one simulation --------------------------------------------------------------------------------


def test_simulation_metrics_add_the_whole_run_with_its_overlapped_launches(trace):
    sim = simulation(trace, sim_total_cycles=3510, core_clock_mhz=1755.0)
    add_kernels(
        sim,
        [
            {"x": 100, "y": 120.0},
            {"x": 300, "y": 250.0},
            {"x": 50, "y": 60.0},
            {"x": 900, "y": None, "overlapped": True},
        ],
    )

    metrics = accuracy.simulation_metrics(sim)

    assert_metrics(metrics, reference(WORKED))
    assert list(metrics)[len(METRIC_KEYS) :] == ["run_sim_ns", "run_measured_ns", "run_error"]
    assert metrics["run_sim_ns"] == pytest.approx(2000.0)  # 3510 cycles at 1755 MHz
    assert metrics["run_measured_ns"] == 1350  # 100 + 300 + 50 + 900
    assert metrics["run_error"] == pytest.approx((2000 - 1350) / 1350 * 100)


def test_a_launch_without_a_measured_time_leaves_the_run_unmeasured(trace):
    sim = simulation(trace, sim_total_cycles=1000, core_clock_mhz=1000.0)
    add_kernels(sim, [{"x": 100, "y": 120.0}, {"x": None, "y": 30.0}])

    metrics = accuracy.simulation_metrics(sim)

    assert metrics["run_sim_ns"] == pytest.approx(1000.0)
    assert metrics["run_measured_ns"] is None
    assert metrics["run_error"] is None
    assert metrics["kernels_compared"] == 1


def test_a_run_without_cycles_or_clock_has_no_simulated_total(trace):
    sim = points_sim(trace, WORKED, core_clock_mhz=None, sim_total_cycles=None)

    metrics = accuracy.simulation_metrics(sim)

    assert metrics["run_sim_ns"] is None
    assert metrics["run_measured_ns"] == 450
    assert metrics["run_error"] is None


def test_kernels_come_in_the_traces_order_with_their_step_and_error(trace):
    names = make_names("_Z6kernelPfi", "_Z3addIfEvPT_i")
    sim = simulation(trace)
    # Inserted out of order: the trace's order is (context, kernel_id), not the uid's.
    add_kernels(
        sim,
        [
            {"context": 1, "kernel_id": 1, "uid": 1, "x": 10, "y": 12.0, "cycles": 12, "insn": 5},
            {"context": 0, "kernel_id": 3, "uid": 3, "step": 1, "x": 200, "y": 150.0, "name": names[1]},
            {"context": 0, "kernel_id": 1, "uid": 2, "step": 0, "x": 100, "y": 125.0, "cycles": 125},
            {"context": 0, "kernel_id": 2, "uid": 4, "step": 0, "x": 0, "y": 5.0},
            {"context": 0, "kernel_id": 10, "uid": 5, "x": 50, "y": None, "overlapped": True},
        ],
    )

    rows = accuracy.simulation_detail(trace.id, sim.name).kernels

    assert not isinstance(rows, list)  # streamed
    assert list(rows) == [
        (CTX, 1, "_Z6kernelPfi", "prefill 0", 2, 125, None, 125.0, 100, 25.0, False),
        (CTX, 2, "_Z6kernelPfi", "prefill 0", 4, None, None, 5.0, 0, None, False),
        (CTX, 3, "_Z3addIfEvPT_i", "decode 1", 3, None, None, 150.0, 200, -25.0, False),
        (CTX, 10, "_Z6kernelPfi", None, 5, None, None, None, 50, None, True),
        ("0x7", 1, "_Z6kernelPfi", None, 1, 12, 5, 12.0, 10, pytest.approx(20.0), False),
    ]
    # The admin's rows name the step's phase too; ranked by |error|, ties in the trace's order.
    assert accuracy.worst_kernels(sim) == [
        accuracy.SimKernelRow(
            CTX, 1, "_Z6kernelPfi", "prefill 0", "prefill", 2, 125, None, 125.0, 100, 25.0, False
        ),
        accuracy.SimKernelRow(
            CTX, 3, "_Z3addIfEvPT_i", "decode 1", "decode", 3, None, None, 150.0, 200, -25.0, False
        ),
        accuracy.SimKernelRow(
            "0x7", 1, "_Z6kernelPfi", None, None, 1, 12, 5, 12.0, 10, pytest.approx(20.0), False
        ),
    ]


def test_steps_sum_their_compared_launches_in_step_order(trace):
    sim = simulation(trace)
    add_kernels(
        sim,
        [
            {"step": 1, "x": 200, "y": 150.0},
            {"step": 1, "x": 100, "y": 90.0},
            {"step": 1, "x": 500, "y": None, "overlapped": True},
            {"step": 0, "x": 100, "y": 125.0},
            {"x": 1000, "y": 1.0},  # in no step
        ],
    )

    steps = accuracy.simulation_steps(sim)

    assert [(s.step, s.phase, s.kernels_compared, s.measured_ns) for s in steps] == [
        ("prefill 0", "prefill", 1, 100),
        ("decode 1", "decode", 2, 300),
    ]
    assert steps[0].sim_ns == pytest.approx(125.0)
    assert steps[0].error == pytest.approx(25.0)
    assert steps[1].sim_ns == pytest.approx(240.0)
    assert steps[1].error == pytest.approx((240 - 300) / 300 * 100)


def test_a_step_of_overlapped_launches_only_has_null_times(trace):
    sim = simulation(trace)
    add_kernels(sim, [{"step": 0, "x": 500, "y": None, "overlapped": True}])

    (step,) = accuracy.simulation_steps(sim)

    assert (step.step, step.kernels_compared, step.sim_ns, step.measured_ns, step.error) == (
        "prefill 0",
        0,
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("demangled", "family"),
    [
        ("kernel(float*, int)", "kernel"),
        ("void add<float>(float*, int)", "add<float>"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
            "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1> >",
        ),
        ("void f<void (*)(int)>(void (*)(int))", "f<void (*)(int)>"),
        ("(anonymous namespace)::k(int)", "(anonymous namespace)::k"),
        ("sm90_xmma_gemm_f16f16_f32", "sm90_xmma_gemm_f16f16_f32"),
    ],
)
def test_a_family_is_the_demangled_name_without_parameters_or_return_type(demangled, family):
    assert accuracy.kernel_family(demangled) == family


def test_families_merge_names_that_demangle_alike_largest_measured_time_first(trace):
    floats, doubles, add = make_names("_Z6kernelPfi", "_Z6kernelPdi", "_Z3addIfEvPT_i")
    sim = simulation(trace)
    add_kernels(
        sim,
        [
            {"name": floats, "x": 100, "y": 120.0},
            {"name": doubles, "x": 300, "y": 250.0},
            {"name": add, "x": 1000, "y": 1100.0},
            {"name": add, "x": 50, "y": None, "overlapped": True},
        ],
    )

    families = accuracy.simulation_families(sim)

    assert [(f.family, f.count, f.measured_ns) for f in families] == [
        ("add<float>", 1, 1000),
        ("kernel", 2, 400),
    ]
    kernel = families[1]
    assert kernel.mape == pytest.approx(reference([(100, 120.0), (300, 250.0)])["mape"])
    assert kernel.aggregate_error == pytest.approx((20 + 50) / 400 * 100)
    assert families[0].mape == pytest.approx(10.0)


def test_the_worst_kernels_by_absolute_error(trace):
    sim = simulation(trace)
    add_kernels(
        sim,
        [
            {"x": 100, "y": 101.0},
            {"x": 100, "y": 40.0},  # -60 %
            {"x": 0, "y": 40.0},  # no error
            {"x": 100, "y": 180.0},  # +80 %
            {"x": 100, "y": None, "overlapped": True},
            {"x": 100, "y": 110.0},
        ],
    )

    worst = accuracy.worst_kernels(sim, count=3)

    assert [(row.kernel_id, row.error) for row in worst] == [
        (4, pytest.approx(80.0)),
        (2, pytest.approx(-60.0)),
        (6, pytest.approx(10.0)),
    ]


# --- two simulations -------------------------------------------------------------------------------


def test_two_simulations_of_a_trace_compared_launch_by_launch(trace):
    a = points_sim(trace, [(100, 120.0), (300, 250.0), (50, 60.0), (80, 80.0)], "a")
    b = points_sim(trace, [(100, 105.0), (300, 200.0), (50, 60.0)], "b")
    add_kernels(b, [{"kernel_id": 4, "x": 80, "y": None, "overlapped": True}])

    comparison = compare.compare_simulations(a, b)

    # Both compared launches 1-3; 4 is overlapped in b.
    assert comparison.compared == 3
    assert (comparison.better, comparison.worse, comparison.unchanged) == (1, 1, 1)
    assert [row.kernel_id for row in comparison.most_improved] == [1]
    improved = comparison.most_improved[0]
    assert (improved.measured_ns, improved.a_sim_ns, improved.b_sim_ns) == (100, 120.0, 105.0)
    assert improved.a_error == pytest.approx(20.0)
    assert improved.b_error == pytest.approx(5.0)
    assert improved.change == pytest.approx(-15.0)
    (worsened,) = comparison.most_worsened
    assert worsened.kernel_id == 2
    assert worsened.change == pytest.approx(100 / 3 - 50 / 3)
    assert comparison.mean_change == pytest.approx((-15 + 50 / 3 + 0) / 3)
    assert comparison.a == accuracy.simulation_metrics(a)
    assert comparison.b["kernels_compared"] == 3


def test_simulations_of_two_traces_cannot_be_compared(trace):
    other = Trace.objects.create(id="run-b", state=TraceState.READY)
    with pytest.raises(ValueError, match="different traces"):
        compare.compare_simulations(simulation(trace), simulation(other))


# --- builds and configs ----------------------------------------------------------------------------


def test_accuracy_by_build_pools_every_kernel_and_ranks_the_most_accurate_first(trace):
    other = Trace.objects.create(id="run-b", state=TraceState.READY)
    KernelContext.objects.create(trace=other, index=0, ctx=CTX)
    old_points = [[(100, 150.0)], [(100, 110.0), (100, 110.0), (100, 110.0)]]
    points_sim(trace, old_points[0], "old-1", simulator_build="old", config="SM90")
    points_sim(other, old_points[1], "old-2", simulator_build="old", config="SM90")
    points_sim(trace, [(100, 125.0)], "new-1", simulator_build="new", config="SM80")
    points_sim(trace, [], "empty", simulator_build="nothing", config="SM80")
    # Not ready: left out whatever its kernels say.
    points_sim(trace, [(100, 100.0)], "parsing", simulator_build="new", state=TraceState.PARSING)

    rows = accuracy.accuracy_by("simulator_build", Simulation.objects.all())

    old = reference([*old_points[0], *old_points[1]])
    # Pooled: (50 + 10 * 3) / 4 = 20 %, not the mean of 50 % and 10 % (30 %).
    assert old["mape"] == pytest.approx(20.0)
    assert rows == [
        {
            "simulator_build": "old",
            "simulations": 2,
            "traces": 2,
            "kernels_compared": 4,
            "mape": pytest.approx(old["mape"]),
            "aggregate_error": pytest.approx(old["aggregate_error"]),
            "pearson_r": None,  # x is constant
            # The largest |error| first: old-1's +50 %, then old-2's +10 % in the trace's order.
            "worst": [
                worst("run-a", "old-1", 1, 100, 150.0),
                worst("run-b", "old-2", 1, 100, 110.0),
                worst("run-b", "old-2", 2, 100, 110.0),
            ],
            "left_out": {"simulations": 0, "why": None},
        },
        {
            "simulator_build": "new",
            "simulations": 1,
            "traces": 1,
            "kernels_compared": 1,
            "mape": pytest.approx(25.0),
            "aggregate_error": pytest.approx(25.0),
            "pearson_r": None,
            "worst": [worst("run-a", "new-1", 1, 100, 125.0)],
            "left_out": {"simulations": 0, "why": None},
        },
        {
            # A ready simulation that compared nothing does not count; the row says so.
            "simulator_build": "nothing",
            "simulations": 0,
            "traces": 0,
            "kernels_compared": 0,
            "mape": None,
            "aggregate_error": None,
            "pearson_r": None,
            "worst": [],
            "left_out": {"simulations": 1, "why": accuracy.NOTHING_COMPARED},
        },
    ]
    by_config = accuracy.accuracy_by("config", Simulation.objects.filter(trace=trace))
    assert [(row["config"], row["simulations"], row["kernels_compared"]) for row in by_config] == [
        ("SM80", 1, 1),
        ("SM90", 1, 1),
    ]
    assert by_config[0]["left_out"]["simulations"] == 1  # "empty"


def worst(trace_id: str, simulation: str, kernel_id: int, measured: int, sim: float) -> dict:
    """A row's `worst` launch: context 0 (CTX), add_kernels' name."""
    return {
        "trace_id": trace_id,
        "simulation": simulation,
        "ctx": CTX,
        "kernel_id": kernel_id,
        "name": "_Z6kernelPfi",
        "measured_ns": measured,
        "sim_ns": sim,
        "error": pytest.approx((sim - measured) / measured * 100),
    }


def test_accuracy_by_is_a_build_or_a_config():
    with pytest.raises(ValueError, match="by must be one of simulator_build, config"):
        accuracy.accuracy_by("notes", Simulation.objects.none())
