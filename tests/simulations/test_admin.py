"""Simulations in the admin: the list, a trace's simulations on its page, a simulation's page
(metrics, the scatter, the steps, the worst and interrupted kernels), two compared, deleting.

Pages are read as an operator reads them (tables under their headers, tooltips, links);
expected numbers are worked out here from the launches' times, not by the code under test.
"""

import math

import pytest
from django.contrib.admin import site as admin_site
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from ingest import simulations as ingest_simulations
from simulations import accuracy
from simulations.admin import pages as simulation_pages
from simulations.admin.charts import (
    MEASURED_COLOUR,
    PHASE_COLOURS,
    SIM_COLOUR,
    ScatterInput,
    StepInput,
    accuracy_scatter,
    step_chart,
)
from simulations.admin.simulation import SimulationAdmin
from simulations.models import SimulatedKernel, Simulation
from tests.helpers import lock_held_elsewhere
from tests.traces.support import (
    ADD,
    CUBLAS,
    GEMM,
    add_run,
    add_steps,
    change_url,
    field,
    read,
    result_rows,
    table_rows,
)
from traces.models import Kernel, Trace, TraceState

SIMULATIONS = "/admin/simulations/simulation/"
COMPARE = "/admin/simulations/simulation/compare/"
CLOCK_MHZ = 1000.0  # a cycle is a nanosecond

# The trace's launches (name, instructions, measured ns, step): three prefill, two decode.
LAUNCHES = [
    (GEMM, 6000, 3000, 0),
    (ADD, 1000, 1000, 0),
    (CUBLAS, 500, 500, 0),
    (GEMM, 2000, 1000, 1),
    (ADD, 500, 500, 1),
]
# Two builds' simulated ns per kernel id; their errors: a +10, -20, 0, +50, -10 %;
# b 0, -10, +20, +10, 0 %.
SIM_A = {1: 3300, 2: 800, 3: 500, 4: 1500, 5: 450}
SIM_B = {1: 3000, 2: 900, 3: 600, 4: 1100, 5: 500}


def simulation_url(simulation: Simulation) -> str:
    return reverse("admin:simulations_simulation_change", args=[quote(simulation.pk)])


def simulate(
    trace: Trace, name: str, sim_ns: dict[int, float | None], *, overlapped=(), **fields
) -> Simulation:
    """A ready simulation of `trace` whose kernel `kernel_id` took `sim_ns[kernel_id]`, each
    paired with the trace's launch as ingestion pairs them (its name, step and measured time
    copied); its metrics stored as ingestion stores them."""
    simulation = Simulation.objects.create(
        trace=trace,
        name=name,
        state=fields.pop("state", TraceState.READY),
        status="ok",
        simulator="accel-sim",
        core_clock_mhz=CLOCK_MHZ,
        complete=fields.pop("complete", True),
        kernels_simulated=len(sim_ns),
        **fields,
    )
    launches = {
        kernel_id: (context, name_id, step, measured)
        for context, kernel_id, name_id, step, measured in Kernel.objects.filter(trace=trace).values_list(
            "context", "kernel_id", "kernel_name_id", "step", "duration_ns"
        )
    }
    SimulatedKernel.objects.bulk_create(
        SimulatedKernel(
            simulation=simulation,
            trace=trace,
            context=launches[kernel_id][0],
            kernel_id=kernel_id,
            uid=uid,
            kernel_name_id=launches[kernel_id][1],
            step=launches[kernel_id][2],
            measured_ns=launches[kernel_id][3],
            sim_cycles=None if kernel_id in overlapped or ns is None else round(ns * CLOCK_MHZ / 1000),
            sim_insn=1000,
            sim_ns=None if kernel_id in overlapped else ns,
            overlapped=kernel_id in overlapped,
        )
        for uid, (kernel_id, ns) in enumerate(sim_ns.items(), start=1)
    )
    if simulation.state == TraceState.READY:
        simulation.metrics = accuracy.simulation_metrics(simulation)
        simulation.kernels_compared = simulation.metrics["kernels_compared"]
        simulation.save()
    return simulation


def add_opt_h100() -> Trace:
    """The trace of LAUNCHES: two steps, prefill then decode, with measured times."""
    trace = Trace.objects.create(
        id="opt-h100", state=TraceState.READY, has_real_timing=True, has_step_timeline=True
    )
    add_steps(trace, [("step 0 (prefill)", "prefill"), ("step 1 (decode)", "decode")])
    add_run(trace, LAUNCHES)
    return trace


@pytest.fixture
def trace(db) -> Trace:
    return add_opt_h100()


@pytest.fixture
def killed_run(make_trace) -> Simulation:
    """A simulation of another trace, never finished, on another config."""
    other = make_trace("other-run", state=TraceState.READY)
    return Simulation.objects.create(
        trace=other, name="killed-run", state=TraceState.PARSING, config="SM86_RTX3070"
    )


def trace_page_simulations(client, trace_id: str) -> dict:
    """The rows of a trace page's simulations, by name."""
    group = read(client.get(change_url(trace_id))).find(id="simulations-group")
    return {row["Name"].text: row for row in table_rows(group.find("table"))}


@pytest.fixture
def two_builds(trace) -> tuple[Simulation, Simulation]:
    a = simulate(trace, "h100-build-a", SIM_A, simulator_build="a1b2c3", config="SM90_H100")
    b = simulate(trace, "h100-build-b", SIM_B, simulator_build="d4e5f6", config="SM90_H100")
    # b is the newer: the compare page's b.
    Simulation.objects.filter(pk=a.pk).update(created_at=b.created_at.replace(year=2020))
    a.refresh_from_db()
    return a, b


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


# --- the charts' geometry (no database) -----------------------------------------------------


def inside(polygon: str, x: float, y: float) -> bool:
    """Ray casting: whether (x, y) is inside the polygon given as SVG `points`."""
    corners = [tuple(map(float, pair.split(","))) for pair in polygon.split()]
    crossings = 0
    for (x1, y1), (x2, y2) in zip(corners, corners[1:] + corners[:1], strict=True):
        if (y1 > y) != (y2 > y) and x < x1 + (y - y1) * (x2 - x1) / (y2 - y1):
            crossings += 1
    return crossings % 2 == 1


def test_scatter_puts_exact_kernels_on_the_diagonal_and_ten_percent_on_the_bands_edge():
    rows = [
        ScatterInput(1000, 1000, "prefill", "exact"),
        ScatterInput(100, 1000, "decode", "ten times too slow"),
        ScatterInput(50_000, 50_000, "decode", "exact, larger"),
    ]
    chart = accuracy_scatter(rows)
    # Decades from 100 ns to 100 µs on both axes: a square whose diagonal is y = x.
    assert [tick.label for tick in chart.x_ticks] == ["100 ns", "1 µs", "10 µs", "100 µs"]
    assert [tick.label for tick in chart.y_ticks] == [tick.label for tick in chart.x_ticks]
    x1, y1, x2, y2 = chart.identity
    assert (x1, y1, x2, y2) == (chart.left, chart.plot_bottom, chart.plot_right, chart.top)
    by_title = {point.title: point for point in chart.points}
    for title in ("exact", "exact, larger"):
        point = by_title[title]
        # On the line through the plot's corners.
        assert math.isclose((point.x - x1) * (y2 - y1), (point.y - y1) * (x2 - x1), abs_tol=1)
    slow = by_title["ten times too slow"]
    assert slow.y == pytest.approx(by_title["exact"].y, abs=0.01)  # simulated 1 µs, like "exact"
    assert slow.x < by_title["exact"].x  # measured less: left of it
    # One decade is plot/3 px: a time 10% off is log10(1.1) decades off the diagonal.
    decade = chart.plot / 3

    def at(measured: float, simulated: float) -> tuple[float, float]:
        return (
            chart.left + decade * (math.log10(measured) - 2),
            chart.plot_bottom - decade * (math.log10(simulated) - 2),
        )

    for simulated, expected in (
        (1000, True),
        (1050, True),
        (950, True),
        (1150, False),
        (850, False),
        (3000, False),
    ):
        assert inside(chart.band, *at(1000, simulated)) is expected, simulated


def test_scatter_tells_prefill_and_decode_apart_and_skips_what_a_log_axis_cannot_place():
    rows = [ScatterInput(100, 110, "prefill", "p")] * 3 + [
        ScatterInput(100, 90, "decode", "d"),
        ScatterInput(100, 100, None, "outside every step"),
        ScatterInput(0, 100, "decode", "measured nothing"),
        ScatterInput(100, 0, "decode", "simulated nothing"),
    ]
    chart = accuracy_scatter(rows)
    assert chart.skipped == 2
    assert len(chart.points) == 5
    legend = {entry.title: (entry.label, entry.colour) for entry in chart.legend}
    assert legend["prefill"] == ("prefill (3)", PHASE_COLOURS["prefill"])
    assert legend["decode"] == ("decode (1)", PHASE_COLOURS["decode"])
    assert legend["no step"][0] == "no step (1)"
    assert len({colour for _, colour in legend.values()}) == 3
    # The most numerous phase is drawn first, underneath the others.
    assert [point.colour for point in chart.points][:3] == [PHASE_COLOURS["prefill"]] * 3


def test_scatter_of_nothing_draws_nothing():
    chart = accuracy_scatter([ScatterInput(0, 0, None, "x")])
    assert chart.points == [] and chart.x_ticks == [] and chart.skipped == 1


def test_step_chart_draws_simulated_beside_measured_on_one_scale():
    chart = step_chart(
        [
            StepInput("step 0", "prefill", 4600, 4500),
            StepInput("step 1", "decode", 1950, 1500),
            StepInput("s2", "decode", None, None),
        ]
    )
    first, second, third = chart.groups
    full = chart.plot_bottom - chart.top
    assert first.sim_height == pytest.approx(full)  # the largest value reaches the top
    assert first.measured_height == pytest.approx(full * 4500 / 4600, abs=0.01)
    assert second.sim_height == pytest.approx(full * 1950 / 4600, abs=0.01)
    assert third.sim_height == third.measured_height == 0
    assert first.measured_x == pytest.approx(first.x + first.bar_width)
    assert "error +2.2%" in first.title and "error +30.0%" in second.title
    assert (first.phase_colour, second.phase_colour) == (PHASE_COLOURS["prefill"], PHASE_COLOURS["decode"])
    assert [entry.colour for entry in chart.legend[:2]] == [SIM_COLOUR, MEASURED_COLOUR]


def test_a_step_named_with_its_phase_is_titled_with_it_once():
    """The timeline's names often carry the phase ("step 26 (decode)"): never "(decode) (decode)"."""
    named, bare = step_chart(
        [StepInput("step 26 (decode)", "decode", 1950, 1500), StepInput("step 27", "decode", 1950, 1500)]
    ).groups
    assert named.title.startswith("step 26 (decode): ") and "(decode) (decode)" not in named.title
    assert bare.title.startswith("step 27 (decode): ")


def test_step_chart_merges_consecutive_steps_past_its_bound():
    steps = [StepInput(f"step {n}", "prefill" if n < 4 else "decode", 10.0 * n, 5.0) for n in range(250)]
    chart = step_chart(steps, max_bars=120)
    assert chart.steps_per_bar == 3 and len(chart.groups) == 84  # ceil(250 / 3)
    assert chart.groups[0].label == "step 0 – step 2"
    assert chart.groups[-1].label == "step 249"
    # Steps 3-5 straddle prefill and decode.
    assert "(mixed)" in chart.groups[1].title
    # The last full group sums steps 246-248: 10 * (246 + 247 + 248) = 7410 ns simulated.
    assert "simulated 7.41 µs, measured 15 ns" in chart.groups[-2].title


# --- the list ---------------------------------------------------------------------------------


def test_the_list_shows_each_simulation_with_its_build_config_end_and_mape(
    staff_client, two_builds, killed_run
):
    a, b = two_builds
    page = read(staff_client.get(SIMULATIONS))
    rows = {row["Name"].text: row for row in result_rows(page)}
    assert set(rows) == {"h100-build-a", "h100-build-b", "killed-run"}
    row = rows["h100-build-a"]
    assert row["Trace"].text == "opt-h100"
    assert row["Trace"].find("a").attrs["href"] == change_url("opt-h100")
    assert row["Name"].find("a").attrs["href"] == simulation_url(a)
    assert row["State"].text == "ready"
    assert row["Build"].text == "a1b2c3"
    assert row["Config"].text == "SM90_H100"
    assert row["Ended"].text == "complete"
    assert row["Compared"].text == "5"
    # (10 + 20 + 0 + 50 + 10) / 5 and (0 + 10 + 20 + 10 + 0) / 5.
    assert row["MAPE"].text == "18.00%"
    assert rows["h100-build-b"]["MAPE"].text == "8.00%"
    assert rows["killed-run"]["MAPE"].text == "-"
    # Read-only: nothing to add.
    assert not [link for link in page.links() if link[1].endswith("/simulation/add/")]
    assert staff_client.get(f"{SIMULATIONS}add/").status_code == 403


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"state__exact": "ready"}, {"h100-build-a", "h100-build-b"}),
        ({"simulator_build": "d4e5f6"}, {"h100-build-b"}),
        ({"config": "SM86_RTX3070"}, {"killed-run"}),
        ({"trace__id__exact": "other-run"}, {"killed-run"}),
    ],
)
def test_the_list_filters_by_state_build_config_and_trace(
    staff_client, two_builds, killed_run, query, expected
):
    page = read(staff_client.get(SIMULATIONS, query))
    assert {row["Name"].text for row in result_rows(page)} == expected
    filters = page.find(id="changelist-filter").text
    for title in ("state", "simulator build", "config", "trace"):
        assert f"By {title}" in filters, filters


def test_the_list_and_the_page_show_the_owner_and_the_list_filters_by_it(staff_client, two_builds):
    from django.contrib.auth import get_user_model

    a, b = two_builds
    alice = get_user_model().objects.create(username="alice")
    Simulation.objects.filter(pk=a.pk).update(owner=alice)
    page = read(staff_client.get(SIMULATIONS))
    owners = {row["Name"].text: row["Owner"].text for row in result_rows(page)}
    assert owners == {"h100-build-a": "alice", "h100-build-b": "-"}
    assert "By owner" in page.find(id="changelist-filter").text
    only = read(staff_client.get(SIMULATIONS, {"owner__id__exact": alice.pk}))
    assert [row["Name"].text for row in result_rows(only)] == ["h100-build-a"]
    assert "alice" in staff_client.get(simulation_url(a)).content.decode()


def test_the_list_sorts_by_mape(staff_client, two_builds):
    page = read(staff_client.get(SIMULATIONS, {"o": "8"}))
    assert [row["Name"].text for row in result_rows(page)] == ["h100-build-b", "h100-build-a"]


def test_a_trace_without_simulations_says_so(staff_client, trace):
    page = read(staff_client.get(change_url("opt-h100")))
    assert "No simulation of this trace yet" in page.find(id="simulations-group").text


def test_a_trace_page_lists_its_simulations_with_links(staff_client, two_builds):
    a, b = two_builds
    rows = trace_page_simulations(staff_client, "opt-h100")
    assert rows["h100-build-a"]["Config"].text == "SM90_H100"
    assert set(rows) == {"h100-build-a", "h100-build-b"}
    assert rows["h100-build-a"]["Name"].find("a").attrs["href"] == simulation_url(a)
    assert rows["h100-build-a"]["MAPE"].text == "18.00%"
    # 1050 ns off of 6000 measured, and 300 of 6000.
    assert rows["h100-build-a"]["Aggregate error"].text == "17.50%"
    assert rows["h100-build-b"]["Aggregate error"].text == "5.00%"
    assert rows["h100-build-b"]["Build"].text == "d4e5f6"
    assert rows["h100-build-b"]["Compared"].text == "5"


# --- a simulation's page ----------------------------------------------------------------------


def test_the_page_shows_metrics_scatter_steps_and_worst_kernels(staff_client, two_builds):
    a, _ = two_builds
    page = read(staff_client.get(simulation_url(a)))
    metrics = {
        row["metric"].text: row["value"].text for row in table_rows(page.find(id="simulation-metric-table"))
    }
    assert metrics["MAPE (Accel-Sim's Err)"] == "18.00%"
    assert metrics["aggregate error (Σ|y−x| / Σx)"] == "17.50%"
    assert metrics["kernels within ±10%"] == "3"  # +10, 0, -10
    assert metrics["kernels compared"] == "5"
    # 6550 simulated against 6000 measured.
    assert metrics["total error (signed)"] == "+9.17%"

    scatter = page.find(id="simulation-scatter")
    assert "All 5 kernels with both times drawn" in scatter.text
    circles = scatter.find_all("circle")
    assert len(circles) == 5
    tooltips = [circle.find("title").text for circle in circles]
    assert any("kernel 4" in tip and "step 1 (decode)" in tip and "+50.0%" in tip for tip in tooltips), (
        tooltips
    )
    assert scatter.find("polygon") is not None  # the ±10% band
    legend = [item.text for item in scatter.find_all("li")]
    assert legend == ["prefill (3)", "decode (2)"]

    steps = table_rows(page.find(id="simulation-step-table"))
    assert [
        (r["step"].text, r["phase"].text, r["simulated"].text, r["measured"].text, r["error"].text)
        for r in steps
    ] == [
        ("step 0 (prefill)", "prefill", "4.6 µs", "4.5 µs", "+2.2%"),
        ("step 1 (decode)", "decode", "1.95 µs", "1.5 µs", "+30.0%"),
    ]
    assert len(page.find(id="simulation-steps").find_all("g")) == 2

    worst = table_rows(page.find(id="simulation-worst-table"))
    # The largest |error| first, ties in the trace's order.
    assert [(r["kernel id"].text, r["error"].text) for r in worst] == [
        ("4", "+50.0%"),
        ("2", "-20.0%"),
        ("1", "+10.0%"),
        ("5", "-10.0%"),
        ("3", "+0.0%"),
    ]
    assert page.find(id="simulation-interrupted") is None
    # The other build of the trace, one click away.
    compare_with = page.find(id="simulation-compare-with")
    assert compare_with.links() == [("h100-build-b", f"{COMPARE}?a={a.pk}&b={two_builds[1].pk}")]


def test_a_stopped_simulation_names_its_interrupted_kernels(staff_client, trace):
    stopped = simulate(
        trace,
        "max-cycles",
        {1: 3100, 2: 1000},
        complete=False,
        stopped="max_cycles",
        interrupted=[{"uid": 3, "ctx": "0xa", "kernel_id": 3, "name": CUBLAS}],
        sim_total_cycles=12_345_678,
        gpgpusim_build="4.2.0 [build gpgpu-sim_git-commit-90ec33997]",
    )
    page = read(staff_client.get(simulation_url(stopped)))
    assert field(page, "Ended").text == "stopped: max_cycles"
    assert field(page, "Core clock").text == "1000 MHz"
    assert field(page, "Simulated cycles, the finished kernels").text == "12,345,678"
    assert field(page, "GPGPU-Sim build").text == "4.2.0 [build gpgpu-sim_git-commit-90ec33997]"
    rows = table_rows(page.find(id="simulation-interrupted-table"))
    assert [(r["uid"].text, r["context"].text, r["kernel id"].text, r["kernel"].text) for r in rows] == [
        ("3", "0xa", "3", CUBLAS)
    ]
    assert "max_cycles" in page.find(id="simulation-interrupted").text
    row = read(staff_client.get(SIMULATIONS)).find(id="result_list")
    assert "stopped: max_cycles" in row.text


def test_a_deadlocked_simulation_says_so_in_words_with_its_line_and_the_kernel_left_out(staff_client, trace):
    line = "GPGPU-Sim uArch: ERROR ** deadlock detected: last writeback core 29 @ gpu_sim_cycle 5486"
    stopped = simulate(
        trace,
        "deadlock",
        {1: 3100, 2: 1000},
        complete=False,
        stopped="deadlock",
        fatal={"line": 46556, "text": line},
        left_out={"kernels": 1, "why": "did not finish: the simulator detected a deadlock"},
        interrupted=[
            {"uid": 3, "ctx": "0xa", "kernel_id": 3, "name": CUBLAS, "trace_file": "/t/kernel-3.traceg"}
        ],
    )
    page = read(staff_client.get(simulation_url(stopped)))
    assert field(page, "Stopped").text == "deadlock: the simulator detected a deadlock and aborted"
    assert field(page, "The simulator's fatal line").text == f"line 46556: {line}"
    left_out = field(page, "Left out").text
    assert left_out.startswith(
        "1 kernel left out of every total: did not finish: the simulator detected a deadlock"
    )
    assert "uid 3 (/t/kernel-3.traceg" in left_out
    # The trace's page lists it with its state and why.
    rows = trace_page_simulations(staff_client, trace.id)
    assert rows["deadlock"]["State"].text.strip() == "ready"
    assert "1 kernel left out" in rows["deadlock"]["Why"].text


def test_a_waiting_and_an_untimed_simulation_say_why(staff_client, trace):
    waiting = Simulation.objects.create(
        trace=trace, name="waits", state=TraceState.UPLOADING, reason="waiting for simulation.json"
    )
    page = read(staff_client.get(simulation_url(waiting)))
    assert field(page, "Reason").text == "waiting for simulation.json"
    rows = trace_page_simulations(staff_client, trace.id)
    assert rows["waits"]["Why"].text == "waiting for simulation.json"


def test_overlapped_kernels_are_left_out_of_the_scatter(staff_client, trace):
    sim = simulate(trace, "overlapping", SIM_A, overlapped={2, 3})
    page = read(staff_client.get(simulation_url(sim)))
    assert len(page.find(id="simulation-scatter").find_all("circle")) == 3
    assert "All 3 kernels" in page.find(id="simulation-scatter").text


def test_a_failed_simulation_says_why_and_draws_nothing(staff_client, trace):
    failed = Simulation.objects.create(
        trace=trace,
        name="bad-names",
        state=TraceState.FAILED,
        error="uid 3: kernel-3.traceg names gemm, the trace add",
    )
    page = read(staff_client.get(simulation_url(failed)))
    assert "uid 3: kernel-3.traceg names gemm, the trace add" in page.find(id="simulation-error").text
    assert page.find(id="simulation-scatter") is None
    assert "No metrics until the simulation is ready." in page.find(id="simulation-metrics").text
    # Read-only: no form to save.
    assert not page.find_all("input", type="submit")


def test_the_page_is_bounded_for_a_large_simulation(staff_client, make_trace, monkeypatch):
    """20,000 launches: the scatter draws its sample (at most SCATTER_POINTS, the same on
    every visit), and the page costs the same queries as for a few launches."""
    big = make_trace("big", state=TraceState.READY, has_real_timing=True, has_step_timeline=True)
    add_steps(big, [("step 0 (prefill)", "prefill"), ("step 1 (decode)", "decode")])
    count = 20_000
    add_run(big, [(GEMM if n % 3 else ADD, 100, 1000 + n, 0 if n < 500 else 1) for n in range(count)])
    sim = simulate(big, "big-sim", {n: 900.0 + 2 * n for n in range(1, count + 1)})
    small = simulate(make_small(make_trace), "small-sim", {1: 10.0, 2: 30.0})

    def visit(simulation):
        with CaptureQueriesContext(connection) as queries:
            page = read(staff_client.get(simulation_url(simulation)))
        return page, len(queries)

    page, _ = visit(sim)  # the first page of a session also reads what the next ones cache
    drawn = page.find(id="simulation-scatter").find_all("circle")
    assert 0.9 * simulation_pages.SCATTER_POINTS <= len(drawn) <= simulation_pages.SCATTER_POINTS
    assert f"{len(drawn):,} of {count:,} kernels drawn" in page.find(id="simulation-scatter-drawn").text
    again, queries = visit(sim)
    assert [c.find("title").text for c in again.find(id="simulation-scatter").find_all("circle")] == [
        c.find("title").text for c in drawn
    ]
    _, small_queries = visit(small)
    assert queries == small_queries
    # A smaller bound holds too.
    monkeypatch.setattr(simulation_pages, "SCATTER_POINTS", 50)
    assert len(visit(sim)[0].find(id="simulation-scatter").find_all("circle")) <= 50


def make_small(make_trace) -> Trace:
    small = make_trace("small", state=TraceState.READY, has_real_timing=True, has_step_timeline=True)
    add_steps(small, [("step 0 (prefill)", "prefill")])
    add_run(small, [(GEMM, 10, 10, 0), (ADD, 10, 20, 0)])
    return small


def test_a_viewer_with_view_permission_sees_the_page(two_builds, make_viewer):
    client = make_viewer("view_trace", "view_simulation")
    a, _ = two_builds
    assert client.get(simulation_url(a)).status_code == 200
    page = read(client.get(SIMULATIONS))
    assert len(result_rows(page)) == 2


# --- two compared -----------------------------------------------------------------------------


def run_action(client, action: str, simulations: list[Simulation]):
    return client.post(
        SIMULATIONS, {"action": action, "_selected_action": [sim.pk for sim in simulations]}, follow=True
    )


def test_the_compare_action_shows_both_metrics_and_which_kernels_moved(staff_client, two_builds):
    a, b = two_builds
    response = run_action(staff_client, "compare", [b, a])
    assert response.redirect_chain == [(f"{COMPARE}?a={a.pk}&b={b.pk}", 302)]
    page = read(response)
    metrics = {row["metric"].text: row for row in table_rows(page.find(id="compare-metrics"))}
    mape = metrics["MAPE (Accel-Sim's Err)"]
    assert (mape["a"].text, mape["b"].text, mape["b − a"].text) == ("18.00%", "8.00%", "-10.00 pp")
    # The better side is marked where a metric measures accuracy, not on the totals.
    marked = {label: [side for side in "ab" if row[side].tooltips()] for label, row in metrics.items()}
    assert marked["MAPE (Accel-Sim's Err)"] == ["b"]
    assert marked["Pearson r (Correl)"] == ["b"]
    assert marked["total error (signed)"] == ["b"]  # +9.17% against +1.67%
    assert marked["simulated time, compared kernels"] == marked["kernels compared"] == []
    within = metrics["kernels within ±10%"]  # a: +10, 0, -10; b: 0, -10, +10, 0
    assert (within["a"].text, within["b"].text, within["b − a"].text) == ("3", "4", "+1")
    # |error| per kernel: a 10, 20, 0, 50, 10; b 0, 10, 20, 10, 0.
    summary = page.find(id="compare-summary").text
    assert "5 kernels compared in both: 4 closer to the measured time in b, 1 further, 0 unchanged" in summary
    # (-10 - 10 + 20 - 40 - 10) / 5 = -10 points.
    assert "-10.00 pp on average" in summary
    improved = table_rows(page.find(id="compare-improved"))
    assert [(r["kernel id"].text, r["change of |error|"].text) for r in improved] == [
        ("4", "-40.0 pp"),
        ("1", "-10.0 pp"),
        ("2", "-10.0 pp"),
        ("5", "-10.0 pp"),
    ]
    assert (improved[0]["error a"].text, improved[0]["error b"].text) == ("+50.0%", "+10.0%")
    worsened = table_rows(page.find(id="compare-worsened"))
    assert [(r["kernel id"].text, r["change of |error|"].text, r["kernel"].text) for r in worsened] == [
        ("3", "+20.0 pp", CUBLAS)
    ]


def test_compare_refuses_two_simulations_of_different_traces(staff_client, two_builds, make_trace):
    a, _ = two_builds
    elsewhere = simulate(make_small(make_trace), "small-sim", {1: 10.0, 2: 30.0})
    response = run_action(staff_client, "compare", [a, elsewhere])
    assert response.redirect_chain == [(SIMULATIONS, 302)]  # back to the list
    [message] = messages_of(response)
    assert "only two simulations of one trace compare" in message
    assert "opt-h100" in message and "small" in message
    # Asked by its address, the page says the same, and shows no numbers.
    page = read(staff_client.get(COMPARE, {"a": a.pk, "b": elsewhere.pk}))
    assert "only two simulations of one trace compare" in page.find(id="compare-problem").text
    assert page.find(id="compare-metrics") is None


def test_compare_refuses_a_simulation_that_is_not_ready(staff_client, two_builds, trace):
    a, _ = two_builds
    parsing = Simulation.objects.create(trace=trace, name="still-reading", state=TraceState.PARSING)
    response = run_action(staff_client, "compare", [a, parsing])
    [message] = messages_of(response)
    assert "Not ready: still-reading is parsing" in message
    page = read(staff_client.get(COMPARE, {"a": a.pk, "b": parsing.pk}))
    assert "still-reading is parsing" in page.find(id="compare-problem").text


@pytest.mark.parametrize("count", [1, 3])
def test_compare_needs_exactly_two(staff_client, two_builds, trace, count):
    third = simulate(trace, "third", SIM_B)
    response = run_action(staff_client, "compare", [*two_builds, third][:count])
    assert any("Pick exactly two simulations of one trace" in m for m in messages_of(response))


@pytest.mark.parametrize("query", [{"a": "1"}, {"a": "x", "b": "y"}, {"a": "999999", "b": "999998"}])
def test_compare_of_unknown_simulations_says_so(staff_client, two_builds, query):
    page = read(staff_client.get(COMPARE, query))
    assert "No such simulation" in page.find(id="compare-problem").text


# --- deleting ---------------------------------------------------------------------------------


def test_deleting_a_simulation_counts_then_removes_its_kernels_and_leaves_its_trace(
    staff_client, two_builds, trace
):
    a, b = two_builds
    before = Trace.objects.get(pk=trace.pk)
    confirm = read(staff_client.get(reverse("admin:simulations_simulation_delete", args=[a.pk])))
    assert "Simulated kernels: 5" in confirm.text
    assert "Its trace is not touched" in confirm.text
    assert "the next poll reads it again unless the folder is gone" in confirm.text
    with CaptureQueriesContext(connection) as queries:
        response = staff_client.post(
            reverse("admin:simulations_simulation_delete", args=[a.pk]), {"post": "yes"}
        )
    assert response.status_code == 302
    # The kernels are counted and go in one statement, never read one by one.
    kernel_queries = [q["sql"] for q in queries if "simulatedkernel" in q["sql"].lower()]
    assert all(sql.startswith(("SELECT COUNT(*)", "DELETE")) for sql in kernel_queries), kernel_queries
    assert not Simulation.objects.filter(pk=a.pk).exists()
    assert not SimulatedKernel.objects.filter(simulation_id=a.pk).exists()
    assert SimulatedKernel.objects.filter(simulation=b).count() == 5
    after = Trace.objects.get(pk=trace.pk)
    assert (after.updated_at, after.state, after.kernel_count) == (
        before.updated_at,
        before.state,
        before.kernel_count,
    )
    assert Kernel.objects.filter(trace=trace).count() == 5


def test_a_simulation_being_read_is_not_deleted(staff_client, two_builds, transactional_db):
    a, b = two_builds
    # The lock ingestion reads a simulation under.
    with lock_held_elsewhere(f"{a.trace_id}/{ingest_simulations.FOLDER}{a.name}"):
        response = staff_client.post(
            reverse("admin:simulations_simulation_delete", args=[a.pk]), {"post": "yes"}, follow=True
        )
    assert any("not deleted: it is being read right now" in m for m in messages_of(response)), messages_of(
        response
    )
    assert SimulatedKernel.objects.filter(simulation=a).count() == 5
    # Once the read is done, it goes.
    staff_client.post(reverse("admin:simulations_simulation_delete", args=[a.pk]), {"post": "yes"})
    assert not Simulation.objects.filter(pk=a.pk).exists()


def test_a_deleted_simulation_whose_folder_stays_is_registered_again(two_builds, trace):
    """What the confirmation page promises: the next listing of the run registers it anew."""
    from simulations.services import simulations_register

    a, b = two_builds
    files = [{"key": f"{trace.id}/simulations/{a.name}/simulation.json", "bytes": 20, "etag": '"m"'}]
    Simulation.objects.filter(pk=a.pk).update(files=files)
    Simulation.objects.filter(pk=b.pk).update(files=[])
    SimulationAdmin(Simulation, admin_site).delete_queryset(None, Simulation.objects.filter(pk=a.pk))
    outcomes = {sim.name: how for sim, how in simulations_register(trace, {a.name: files, b.name: []})}
    assert outcomes == {a.name: "created", b.name: "unchanged"}


def test_deleting_selected_simulations_from_the_list(staff_client, two_builds):
    a, b = two_builds
    confirm = read(run_action(staff_client, "delete_selected", [a, b]))
    assert "Simulated kernels: 10" in confirm.text
    staff_client.post(
        SIMULATIONS, {"action": "delete_selected", "_selected_action": [a.pk, b.pk], "post": "yes"}
    )
    assert not Simulation.objects.exists() and not SimulatedKernel.objects.exists()


def test_each_simulation_deleted_is_in_the_audit_log(staff_client, two_builds, admin_user):
    from traces.models import AuditEntry

    a, b = two_builds
    staff_client.post(
        SIMULATIONS, {"action": "delete_selected", "_selected_action": [a.pk, b.pk], "post": "yes"}
    )
    deleted = AuditEntry.objects.filter(action="delete")
    assert sorted((e.trace_id, e.simulation) for e in deleted) == sorted(
        (sim.trace_id, sim.name) for sim in (a, b)
    )
    assert {(e.username, e.source) for e in deleted} == {(admin_user.username, "admin")}


# --- in a real browser ------------------------------------------------------------------------


@pytest.mark.slow
def test_simulation_and_compare_pages_in_a_browser_under_the_policy(live_server, transactional_db, tmp_path):
    from selenium.webdriver.common.by import By

    from tests.traces.browser import chromium, log_in

    trace = add_opt_h100()
    a = simulate(trace, "h100-build-a", SIM_A, simulator_build="a1b2c3")
    b = simulate(trace, "h100-build-b", SIM_B, simulator_build="d4e5f6")
    get_user_model().objects.create_superuser("operator", password="operator-pass-123")

    def problems(browser) -> list[str]:
        """The console's errors and policy refusals since the last call."""
        return [
            entry["message"]
            for entry in browser.get_log("browser")
            if (entry["level"] == "SEVERE" or "Content Security Policy" in entry["message"])
            # The admin has no favicon: every first page's console says so.
            and "favicon.ico" not in entry["message"]
        ]

    with chromium(implicit_wait=10, console=True) as browser:
        log_in(browser, live_server.url)
        browser.find_element(By.LINK_TEXT, "Simulations").click()
        # Every column fits a 1400 px window: the list does not scroll sideways.
        assert browser.execute_script(
            "return document.getElementById('result_list').getBoundingClientRect().right"
            " <= document.documentElement.clientWidth"
        )
        browser.save_screenshot(str(tmp_path / "list.png"))
        assert problems(browser) == []

        # The trace's page lists both, each a link to its page.
        browser.get(f"{live_server.url}/admin/traces/trace/opt-h100/change/")
        simulations = browser.find_element(By.ID, "simulations-group")
        simulations.screenshot(str(tmp_path / "trace-simulations.png"))
        assert {link.text for link in simulations.find_elements(By.TAG_NAME, "a")} >= {
            "h100-build-a",
            "h100-build-b",
        }
        assert problems(browser) == []

        browser.get(f"{live_server.url}{SIMULATIONS}")

        browser.find_element(By.LINK_TEXT, "h100-build-a").click()
        scatter = browser.find_element(By.ID, "simulation-scatter")
        assert len(scatter.find_elements(By.CSS_SELECTOR, "circle")) == 5
        assert scatter.find_element(By.CSS_SELECTOR, "svg").size["width"] > 200
        assert browser.find_element(By.ID, "simulation-steps").find_elements(By.CSS_SELECTOR, "svg")
        worst = browser.find_element(By.ID, "simulation-worst-table")
        assert len(worst.find_elements(By.CSS_SELECTOR, "tbody tr")) == 5
        assert problems(browser) == []
        browser.save_screenshot(str(tmp_path / "simulation.png"))

        # The compare action from the list: tick both, pick the action, go.
        browser.get(f"{live_server.url}{SIMULATIONS}")
        for sim in (a, b):
            browser.find_element(By.CSS_SELECTOR, f"input[name=_selected_action][value='{sim.pk}']").click()
        browser.find_element(By.CSS_SELECTOR, "select[name=action] option[value=compare]").click()
        browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
        assert browser.find_element(By.ID, "compare-metrics")
        assert "4 closer to the measured time in b" in browser.find_element(By.ID, "compare-summary").text
        assert problems(browser) == []
        browser.save_screenshot(str(tmp_path / "compare.png"))
        print(f"screenshots in {tmp_path}")


# --- the demo's samples -----------------------------------------------------------------------


@pytest.mark.slow
def test_the_samples_simulations_show_their_scatter_and_compare(s3, db, staff_client):
    """The issue's "done when": each sample's two simulations (two builds, on the Turing and on
    the Ampere sample), uploaded and read as the demo does, are ready with metrics shown on their
    pages and compared."""
    from django.core.management import call_command

    from ingest import passes

    call_command("load_samples")
    passes.poll_bucket()
    simulations = list(
        Simulation.objects.filter(trace__sample=True, state=TraceState.READY).order_by("created_at")
    )
    by_trace: dict[str, list[Simulation]] = {}
    for sim in simulations:
        by_trace.setdefault(sim.trace_id, []).append(sim)
    assert sorted(by_trace) == [
        "sample__facebook_opt-125m__a100-e2e",
        "sample__facebook_opt-125m__rtx2060-e2e",
    ]
    for pair in by_trace.values():
        assert len(pair) == 2 and len({sim.simulator_build for sim in pair}) == 2
        for sim in pair:
            page = read(staff_client.get(simulation_url(sim)))
            scatter = page.find(id="simulation-scatter")
            assert len(scatter.find_all("circle")) == min(
                sim.kernels_compared, simulation_pages.SCATTER_POINTS
            )
            legend = " ".join(item.text for item in scatter.find_all("li"))
            assert "prefill" in legend and "decode" in legend
            worst = table_rows(page.find(id="simulation-worst-table"))
            assert len(worst) == min(sim.kernels_compared, simulation_pages.WORST_KERNELS) > 0
        page = read(run_action(staff_client, "compare", pair))
        metrics = {row["metric"].text: row for row in table_rows(page.find(id="compare-metrics"))}
        assert metrics["MAPE (Accel-Sim's Err)"]["a"].text.endswith("%")
        assert table_rows(page.find(id="compare-improved")) and table_rows(page.find(id="compare-worsened"))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("/admin/traces/simulation/", "/admin/simulations/simulation/"),
        ("/admin/traces/simulation/7/change/", "/admin/simulations/simulation/7/change/"),
        ("/admin/traces/simulation/compare/?a=1&b=2", "/admin/simulations/simulation/compare/?a=1&b=2"),
    ],
)
def test_the_simulation_pages_where_they_were_before_their_app_redirect_for_good(client, old, new):
    response = client.get(old)
    assert (response.status_code, response["Location"]) == (301, new)
