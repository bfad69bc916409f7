"""Sweeps in the admin: the list (name, owner, state, counts, created) and a sweep's read-only
page: its accuracy per config and build, its jobs, and a chart of simulated against measured
time per kernel (log-log, one colour per config, the diagonal y = x), bounded.

Pages are read as an operator reads them; the sweeps are test_sweep_accuracy's.
"""

import math

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from simulations.admin import sweep as sweep_admin
from simulations.models import SweepJob, SweepJobState
from tests.simulations.support import simulate
from tests.simulations.test_sweep_accuracy import (
    RUN_A,
    SM80,
    SM90,
    launches,
    make_first_sweep,
    make_traces,
    sweep_of,
)
from tests.traces.support import read, result_rows, table_rows
from traces.models import TraceState

SWEEPS = "/admin/simulations/sweep/"


@pytest.fixture
def traces(make_trace):
    return make_traces(make_trace)


@pytest.fixture
def sweep(traces):
    return make_first_sweep(traces)


def sweep_url(pk: int) -> str:
    return reverse("admin:simulations_sweep_change", args=[pk])


def test_the_list_shows_each_sweep_with_its_owner_state_and_counts(staff_client, sweep, traces, admin_user):
    sweep.owner = admin_user
    sweep.save()
    sweep_of("waiting", [(traces["run-a"], SM90, SweepJobState.QUEUED, None)])

    page = read(staff_client.get(SWEEPS))

    rows = result_rows(page)
    assert [(r["Name"].text, r["Owner"].text, r["State"].text, r["Jobs"].text) for r in rows] == [
        ("waiting", "-", "queued", "1 queued"),
        ("first", admin_user.username, "failed", "3 ready, 1 failed"),
    ]
    assert list(rows[0]) == ["Name", "Owner", "State", "Jobs", "Created at"]
    assert page.find("a", href=f"{SWEEPS}add/") is None  # sweeps are made through the API


def test_the_page_shows_the_accuracy_table_and_the_jobs_read_only(staff_client, sweep):
    page = read(staff_client.get(sweep_url(sweep.pk)))

    rows = table_rows(page.find(id="sweep-accuracy-table"))
    assert [
        (r["config"].text, r["simulator build"].text, r["simulations"].text, r["traces"].text, r["MAPE"].text)
        for r in rows
    ] == [
        (SM90, "build-a", "2", "2", "13.75%"),  # (20 + 25 + 0 + 10) / 4
        (SM80, "build-a", "1", "1", "18.33%"),  # (0 + 30 + 25) / 3
    ]
    assert "run-a" in rows[0]["worst kernel"].text and "-25.0%" in rows[0]["worst kernel"].text
    jobs = table_rows(page.find(id="sweep-job-table"))
    assert [(r["trace"].text, r["config"].text, r["state"].text, r["MAPE"].text) for r in jobs] == [
        ("run-a", SM90, "ready", "15.00%"),
        ("run-b", SM90, "ready", "10.00%"),
        ("run-a", SM80, "ready", "18.33%"),
        ("run-b", SM80, "failed", "-"),
    ]
    # A ready job links to its simulation's page; a failed one names no page.
    assert jobs[0]["simulation"].links()[0][1].startswith("/admin/simulations/simulation/")
    assert jobs[3]["simulation"].links() == []
    assert page.find("input", name="_save") is None


def diagonal_holds(line, x: float, y: float) -> bool:
    """(x, y) lies on the segment's line."""
    x1, y1, x2, y2 = (float(line.attrs[key]) for key in ("x1", "y1", "x2", "y2"))
    return math.isclose((x2 - x1) * (y - y1), (y2 - y1) * (x - x1), abs_tol=0.05 * abs(x2 - x1))


def test_the_chart_draws_every_kernel_log_log_one_colour_per_config_with_the_diagonal(staff_client, sweep):
    page = read(staff_client.get(sweep_url(sweep.pk)))

    chart = page.find(id="sweep-scatter")
    circles = chart.find_all("circle")
    # Every compared kernel of the three ready simulations with both times: 3 + 1 + 3.
    assert len(circles) == 7
    assert "All 7 kernels with both times drawn" in chart.text
    colours = {}
    for circle in circles:
        config = SM90 if f"on {SM90}" in circle.find("title").text else SM80
        colours.setdefault(config, set()).add(circle.attrs["fill"])
    assert set(colours) == {SM90, SM80}
    assert all(len(fills) == 1 for fills in colours.values())
    assert colours[SM90] != colours[SM80]
    assert [item.text for item in chart.find_all("li")] == [f"{SM80} (3)", f"{SM90} (4)"]
    # The diagonal y = x: a 45 degree line across the square, and the kernels simulated exactly
    # as measured (run-a's 400 ns GEMM on SM90, its 100 ns GEMM on SM80) lie on it.
    line = chart.find("line", **{"class": "identity"})
    x1, y1, x2, y2 = (float(line.attrs[key]) for key in ("x1", "y1", "x2", "y2"))
    assert x2 - x1 == pytest.approx(y1 - y2) and x2 > x1
    exact = [c for c in circles if "(+0.0%)" in c.find("title").text]
    assert len(exact) == 2
    assert all(diagonal_holds(line, float(c.attrs["cx"]), float(c.attrs["cy"])) for c in exact)
    off = [c for c in circles if "(+0.0%)" not in c.find("title").text]
    assert not any(diagonal_holds(line, float(c.attrs["cx"]), float(c.attrs["cy"])) for c in off)
    # Log axes: measured 100 ns and 1 µs are a decade apart, as 1 µs and 10 µs would be.
    ticks = [t.text for t in chart.find_all("text")]
    assert "100 ns" in ticks and "1 µs" in ticks


def test_the_chart_is_bounded_and_says_so(staff_client, sweep, traces, monkeypatch):
    """Past the bound, a fixed sample of at most the bound, the same on every visit."""
    a = traces["run-a"]
    count = 3000
    big = [(0, 100 + n, "k", None, 1000 + n, 900 + n) for n in range(count)]
    simulate(a, "sweep1_big", big, config=SM90)
    SweepJob.objects.create(
        sweep=sweep, trace=a, config="SM90_big", state=SweepJobState.READY, simulation_name="sweep1_big"
    )
    monkeypatch.setattr(sweep_admin, "SWEEP_SCATTER_POINTS", 500)

    first = read(staff_client.get(sweep_url(sweep.pk))).find(id="sweep-scatter")
    again = read(staff_client.get(sweep_url(sweep.pk))).find(id="sweep-scatter")

    drawn = first.find_all("circle")
    total = count + 7
    assert 0.8 * 500 <= len(drawn) <= 500
    assert f"{len(drawn):,} of {total:,} kernels drawn: at most 500" in first.text
    assert [c.find("title").text for c in again.find_all("circle")] == [c.find("title").text for c in drawn]


def test_a_sweep_without_ready_simulations_says_so(staff_client, traces):
    waiting = sweep_of("waiting", [(traces["run-a"], SM90, SweepJobState.QUEUED, None)])

    page = read(staff_client.get(sweep_url(waiting.pk)))

    assert "No ready simulation yet." in page.find(id="sweep-accuracy").text
    assert page.find(id="sweep-scatter").find_all("circle") == []


def test_a_non_staff_user_is_refused(db, sweep):
    user = get_user_model().objects.create_user("plain", password="plain-pass-123")
    client = Client()
    client.force_login(user)

    for url in (SWEEPS, sweep_url(sweep.pk)):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_staff_without_the_sweeps_view_permission_is_refused(make_viewer, sweep):
    client = make_viewer("view_trace", "view_simulation")
    assert client.get(sweep_url(sweep.pk)).status_code == 403


@pytest.mark.parametrize("state", [TraceState.PARSING, TraceState.FAILED])
def test_a_simulation_not_ready_is_not_drawn(staff_client, traces, state):
    a = traces["run-a"]
    simulate(a, "s_SM90", launches(RUN_A, [120, 150, 400]), state=state)
    not_ready = sweep_of("not-ready", [(a, SM90, SweepJobState.READY, "s_SM90")])

    page = read(staff_client.get(sweep_url(not_ready.pk)))

    assert page.find(id="sweep-scatter").find_all("circle") == []
    (job,) = table_rows(page.find(id="sweep-job-table"))
    assert job["MAPE"].text == "-"
