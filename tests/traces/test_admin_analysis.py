"""The trace page's analysis (kernel mix, steps, calibration) and the compare page.

Read as an operator reads them: tables under their headers, tooltips, links, the charts'
tooltips; never CSS classes.
"""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.traces.support import (
    ADD,
    CUBLAS,
    GEMM,
    add_run,
    add_steps,
    change_url,
    field,
    query_count,
    read,
    table_rows,
)
from traces import launch_summaries
from traces.models import Trace, TraceState

CHANGELIST = "/admin/traces/trace/"
GEMM_READ = "gemm_tiled(float const*, float const*, float*, int)"
ADD_READ = "void at::native::kernel<int>(int)"


@pytest.fixture
def timed(make_trace) -> Trace:
    """A prefill and a decode step: gemm heaviest, then add, then cuBLAS; every launch timed."""
    trace = make_trace(
        "opt-h100", state=TraceState.READY, has_real_timing=True, has_step_timeline=True, source_gpu="H100"
    )
    add_steps(trace, [("step 0 (prefill)", "prefill"), ("step 1 (decode)", "decode")])
    add_run(
        trace,
        [
            (GEMM, 6000, 3000, 0),
            (ADD, 1000, 1000, 0),
            (CUBLAS, 500, 500, 0),
            (GEMM, 2000, 1000, 1),
            (ADD, 500, 500, 1),
        ],
    )
    return trace


@pytest.fixture
def untimed(make_trace) -> Trace:
    trace = make_trace(
        "opt-untimed",
        state=TraceState.READY,
        timing_error="timing.csv: line 2: kernel 7 of ctx 0xa is not in the stats",
        source_gpu="A100",
    )
    add_run(trace, [(GEMM, 3000, None, None), (ADD, 1000, None, None), (CUBLAS, 1000, None, None)])
    return trace


def section(page, section_id):
    found = page.find(id=section_id)
    assert found is not None, f"the page has no {section_id}"
    return found


def svg_tooltips(element) -> list[str]:
    """The tooltips of what a chart draws (bars, segments, points), in drawing order."""
    svg = element.find("svg")
    assert svg is not None
    assert not svg.find_all("script"), "nothing to run"
    return [title.text for title in svg.find_all("title")[1:]]


# --- the kernel mix ----------------------------------------------------------------------


def test_kernel_mix_shows_demangled_names_most_instructions_first_with_the_symbol_on_hover(
    staff_client, timed
):
    page = read(staff_client.get(change_url(timed.pk)))
    rows = table_rows(section(page, "trace-kernel-mix").find("table"))

    assert [row["kernel"].text for row in rows] == [GEMM_READ, ADD_READ, CUBLAS]
    assert [row["kernel"].tooltips() for row in rows] == [[GEMM], [ADD], [CUBLAS]]
    values = [{name: cell.text for name, cell in row.items() if name != "kernel"} for row in rows]
    assert values[0] == {
        "launches": "2",
        "traced": "1",
        "instructions": "8,000",
        "share of instructions": "80.0%",
        "measured time": "4 µs",
        "share of time": "66.7%",
    }
    assert values[2]["share of instructions"] == "5.0%" and values[2]["measured time"] == "500 ns"
    # A name is a link to its launches in the kernel list.
    href = rows[0]["kernel"].find("a").attrs["href"]
    assert href.startswith(reverse("admin:traces_kernel_changelist")) and "trace=opt-h100" in href
    assert "q=_Z10gemm_tiledPKfS0_Pfi" in href


def test_kernel_mix_without_timing_has_no_time_columns(staff_client, untimed):
    page = read(staff_client.get(change_url(untimed.pk)))
    rows = table_rows(section(page, "trace-kernel-mix").find("table"))
    assert list(rows[0]) == ["kernel", "launches", "traced", "instructions", "share of instructions"]
    assert [(row["kernel"].text, row["share of instructions"].text) for row in rows] == [
        (GEMM_READ, "60.0%"),
        (ADD_READ, "20.0%"),
        (CUBLAS, "20.0%"),
    ]


# --- the steps ---------------------------------------------------------------------------


def test_steps_are_stacked_bars_of_instructions_split_by_the_heaviest_kernels(staff_client, timed):
    page = read(staff_client.get(change_url(timed.pk)))
    steps = section(page, "trace-steps")

    tooltips = svg_tooltips(steps.find(id="trace-step-insts"))
    assert tooltips == [
        "step 0 (prefill): 7,500 instructions",
        f"step 0 (prefill): {GEMM_READ}: 6,000 instructions (80.0%)",
        f"step 0 (prefill): {ADD_READ}: 1,000 instructions (13.3%)",
        f"step 0 (prefill): {CUBLAS}: 500 instructions (6.7%)",
        "step 1 (decode): 2,500 instructions",
        f"step 1 (decode): {GEMM_READ}: 2,000 instructions (80.0%)",
        f"step 1 (decode): {ADD_READ}: 500 instructions (20.0%)",
    ]
    time_tooltips = svg_tooltips(steps.find(id="trace-step-time"))
    assert time_tooltips[0] == "step 0 (prefill): 4.5 µs"
    assert "step 1 (decode): 1.5 µs" in time_tooltips

    rows = table_rows(steps.find("table"))
    assert [
        (row["step"].text, row["phase"].text, row["launches"].text, row["instructions"].text) for row in rows
    ] == [
        ("step 0 (prefill)", "prefill", "3", "7,500"),
        ("step 1 (decode)", "decode", "2", "2,500"),
    ]
    assert [row["share of time"].text for row in rows] == ["75.0%", "25.0%"]


def test_bars_are_stacked_in_proportion(staff_client, timed):
    page = read(staff_client.get(change_url(timed.pk)))
    svg = section(page, "trace-step-insts").find("svg")
    prefill, decode = [group for group in svg.find_all("g") if group.find("title")]
    heights = [float(rect.attrs["height"]) for rect in prefill.find_all("rect")]
    # Drawn to 0.01 px.
    assert heights[0] == pytest.approx(6 * heights[1], abs=0.1)
    assert heights[1] == pytest.approx(2 * heights[2], abs=0.1)
    decode_total = sum(float(rect.attrs["height"]) for rect in decode.find_all("rect"))
    assert decode_total == pytest.approx(sum(heights) / 3, abs=0.1)


def test_many_steps_share_bars(db, make_trace, staff_client):
    trace = make_trace("long-run", state=TraceState.READY, has_step_timeline=True)
    count = launch_summaries.MAX_STEP_BARS * 2 + 1
    add_steps(trace, [(f"step {n}", "decode") for n in range(count)])
    add_run(trace, [(GEMM, 10, None, n) for n in range(count)])
    page = read(staff_client.get(change_url(trace.pk)))
    steps = section(page, "trace-step-insts")
    assert f"{count} steps, 3 consecutive steps per bar." in steps.text
    bars = [group for group in steps.find("svg").find_all("g") if group.find("title")]
    assert len(bars) == 81  # 241 steps, 3 per bar
    assert bars[0].find("title").text == "step 0 – step 2: 30 instructions"


def test_a_run_without_timeline_says_so_and_why(staff_client, untimed):
    page = read(staff_client.get(change_url(untimed.pk)))
    steps = section(page, "trace-steps")
    assert steps.find("svg") is None
    assert (
        "No step timeline: the run has no timeline.json, or it was not used (timing.csv: line 2" in steps.text
    )


# --- calibration and timing_error ----------------------------------------------------------


def test_calibration_chart_plots_each_timed_launch(staff_client, timed):
    page = read(staff_client.get(change_url(timed.pk)))
    tooltips = svg_tooltips(section(page, "trace-calibration"))
    assert f"0xa kernel 1 {GEMM_READ}: 6,000 instructions in 3 µs" in tooltips
    assert len([tip for tip in tooltips if " instructions in " in tip]) == 5


def test_calibration_chart_only_when_timed(staff_client, untimed):
    page = read(staff_client.get(change_url(untimed.pk)))
    calibration = section(page, "trace-calibration")
    assert calibration.find("svg") is None
    assert "No measured times: the run has no timing.csv, or it was not used (timing.csv: line 2" in (
        calibration.text
    )


def test_timing_error_is_shown_beside_the_timing_fields(staff_client, untimed):
    page = read(staff_client.get(change_url(untimed.pk)))
    assert field(page, "Has real timing").find("img").attrs["alt"] == "False"
    assert field(page, "Timing error").text.startswith(
        "timing.csv: line 2: kernel 7 of ctx 0xa is not in the stats"
    )


def test_calibration_sample_is_bounded_and_spread_over_every_kernel(db, make_trace):
    trace = make_trace("big", state=TraceState.READY)
    names = [f"k{n}" for n in range(10)]
    # Ten kernels repeating, as a decode step repeats its launches.
    add_run(trace, [(names[n % 10], 100 + n, 50 + n, None) for n in range(2000)])
    sample = launch_summaries.calibration_sample(trace.pk, kernel_count=2000, limit=100)
    assert 50 <= len(sample) <= 100
    assert {row[2] for row in sample} == set(names)


def test_calibration_sample_draws_from_every_context_in_proportion(db, make_trace):
    trace = make_trace("contexts", state=TraceState.READY)
    names = [f"k{n}" for n in range(7)]
    add_run(trace, [(names[n % 7], 100 + n, 50 + n, None) for n in range(3000)], ctx="0xa")
    add_run(trace, [(names[n % 7], 100 + n, 50 + n, None) for n in range(1000)], ctx="0xb")
    sample = launch_summaries.calibration_sample(trace.pk, kernel_count=4000, limit=200)
    by_ctx = {ctx: [row for row in sample if row[0] == ctx] for ctx in ("0xa", "0xb")}
    # About 200 launches, three in four from the context with three in four of the launches
    # (its ids run three times as far), each a launch of the trace, none twice.
    assert 150 <= len(sample) <= 200
    assert 0.6 < len(by_ctx["0xa"]) / len(sample) < 0.9
    assert len({(row[0], row[1]) for row in sample}) == len(sample)
    assert all(1 <= row[1] <= 3000 for row in by_ctx["0xa"]) and all(
        1 <= row[1] <= 1000 for row in by_ctx["0xb"]
    )
    assert {row[2] for row in by_ctx["0xa"]} == set(names)


def test_sampled_kernel_ids_fall_one_in_each_bin_with_no_period():
    ids = launch_summaries.sampled_kernel_ids(10_000, 100)
    assert len(ids) == 100
    assert [(kernel_id - 1) // 100 for kernel_id in ids] == list(range(100))
    # A decode step of 10 launches repeated: every one of its positions is sampled.
    assert {kernel_id % 10 for kernel_id in ids} == set(range(10))
    assert launch_summaries.sampled_kernel_ids(50, 100) == list(range(1, 51))  # fewer ids than asked: all


def test_a_big_trace_page_is_read_once_until_the_trace_changes(staff_client, timed, monkeypatch):
    """Past KEEP_PAGE_READS_FROM launches the page's reads are kept (Django's cache), keyed by
    the trace's updated_at: a later view reads no launch, a parse (which saves the trace)
    makes the next view read them again."""
    from traces.admin import analysis_pages

    monkeypatch.setattr(analysis_pages, "KEEP_PAGE_READS_FROM", 1)

    def launch_reads() -> tuple[int, list]:
        with CaptureQueriesContext(connection) as captured:
            page = read(staff_client.get(change_url(timed.pk)))
        rows = table_rows(section(page, "trace-steps").find("table"))
        return sum("traces_kernel" in query["sql"] for query in captured.captured_queries), rows

    first, rows = launch_reads()
    assert first > 0
    later, kept_rows = launch_reads()
    assert later == 0
    assert [row["launches"].text for row in kept_rows] == [row["launches"].text for row in rows] == ["3", "2"]

    # A parse replaces the launches and saves the trace: the page reads them again.
    add_run(timed, [(GEMM, 10, 10, 1)], ctx="0xb")
    Trace.objects.get(pk=timed.pk).save()
    again, new_rows = launch_reads()
    assert again > 0
    assert [row["launches"].text for row in new_rows] == ["3", "3"]


# --- bounded queries ------------------------------------------------------------------------


def test_page_query_count_does_not_grow_with_kernels_or_steps(staff_client, timed, make_trace):
    big = make_trace("big-run", state=TraceState.READY, has_real_timing=True, has_step_timeline=True)
    add_steps(big, [(f"step {n}", "decode") for n in range(40)])
    add_run(big, [(f"_Z6kernel{n % 30}v", 100 + n, 10 + n, n % 40) for n in range(600)])
    query_count(staff_client, change_url(timed.pk))  # warm Django's caches
    assert query_count(staff_client, change_url(big.pk)) == query_count(staff_client, change_url(timed.pk))


def test_compare_query_count_does_not_grow_with_kernels(staff_client, timed, untimed, make_trace):
    big = make_trace("big-run", state=TraceState.READY, has_real_timing=True)
    add_run(big, [(f"_Z6kernel{n % 30}v", 100 + n, 10 + n, None) for n in range(600)])
    small = compare_url(untimed.pk, timed.pk)
    query_count(staff_client, small)
    assert query_count(staff_client, compare_url(untimed.pk, big.pk)) == query_count(staff_client, small)


# --- compare ---------------------------------------------------------------------------------


def compare_url(a: str, b: str, **extra) -> str:
    from urllib.parse import urlencode

    return f"{reverse('admin:traces_trace_compare')}?{urlencode({'a': a, 'b': b, **extra})}"


def run_action(client, action: str, ids: list[str]):
    return client.post(CHANGELIST, {"action": action, "_selected_action": ids}, follow=True)


def test_compare_action_on_two_traces_shows_the_compare_table(staff_client, timed, untimed):
    response = run_action(staff_client, "compare", [timed.pk, untimed.pk])
    # The older trace is a.
    assert response.redirect_chain[-1][0] == compare_url(timed.pk, untimed.pk)
    page = read(response)
    traces = page.find(id="compare-traces")
    assert ("opt-h100", change_url("opt-h100")) in traces.links()
    assert ("opt-untimed", change_url("opt-untimed")) in traces.links()

    rows = table_rows(page.find(id="compare-table"))
    by_kernel = {row["kernel"].text: {name: cell.text for name, cell in row.items()} for row in rows}
    assert list(by_kernel) == ["all kernels", GEMM_READ, ADD_READ, CUBLAS]
    assert by_kernel[GEMM_READ] | {"kernel": ""} == {
        "kernel": "",
        "launches a": "2",
        "launches b": "1",
        "launches b/a": "0.5×",
        "instructions a": "8,000",
        "instructions b": "3,000",
        "instructions b/a": "0.375×",
        "time a": "4 µs",
        "time b": "-",
        "time b/a": "-",
    }
    assert by_kernel["all kernels"]["instructions a"] == "10,000"
    assert by_kernel["all kernels"]["instructions b/a"] == "0.5×"
    assert [row["kernel"].tooltips() for row in rows[1:]] == [[GEMM], [ADD], [CUBLAS]]

    chart = svg_tooltips(page.find(id="compare-chart"))
    assert f"opt-h100: {GEMM_READ}: 8,000 instructions" in chart
    assert f"opt-untimed: {GEMM_READ}: 3,000 instructions" in chart


def test_compare_matches_by_demangled_name_on_request(staff_client, make_trace):
    a = make_trace("a-run", state=TraceState.READY)
    b = make_trace("b-run", state=TraceState.READY)
    add_run(a, [("_Z3fooi", 100, None, None)])
    add_run(b, [("foo(int)", 300, None, None)])  # a tracer that recorded the readable name

    page = read(staff_client.get(compare_url("a-run", "b-run")))
    assert [row["kernel"].text for row in table_rows(page.find(id="compare-table"))] == [
        "all kernels",
        "foo(int)",
        "foo(int)",
    ]
    toggle = page.find(id="compare-by")
    demangled = dict(toggle.links())["by demangled name"]

    page = read(staff_client.get(demangled))
    rows = table_rows(page.find(id="compare-table"))
    assert [(row["kernel"].text, row["instructions b/a"].text) for row in rows] == [
        ("all kernels", "3×"),
        ("foo(int)", "3×"),
    ]
    assert rows[1]["kernel"].tooltips() == ["_Z3fooi\nfoo(int)"]
    assert dict(page.find(id="compare-by").links())["by symbol"] == compare_url("a-run", "b-run")


@pytest.mark.parametrize("count", [1, 3])
def test_compare_action_needs_exactly_two_traces(staff_client, timed, untimed, make_trace, count):
    make_trace("third", state=TraceState.READY)
    ids = ["opt-h100", "opt-untimed", "third"][:count]
    response = run_action(staff_client, "compare", ids)
    assert response.redirect_chain == [] or response.redirect_chain[-1][0].startswith(CHANGELIST)
    messages = [str(message) for message in response.context["messages"]]
    assert any("Pick exactly two traces to compare" in message for message in messages), messages


def test_viewers_may_compare(viewer_client, timed, untimed):
    response = run_action(viewer_client, "compare", [timed.pk, untimed.pk])
    assert read(response).find(id="compare-table") is not None


def test_compare_of_an_unknown_trace_is_not_found(staff_client, timed):
    assert staff_client.get(compare_url(timed.pk, "nope")).status_code == 404


def test_a_trace_without_kernels_has_no_analysis(staff_client, make_trace):
    make_trace("failed-run", state=TraceState.FAILED, error="profiler reported status 'failed'")
    page = read(staff_client.get(change_url("failed-run")))
    assert page.find(id="trace-kernels").text == "Kernels No kernels (the trace is failed)."
    assert [page.find(id=name) for name in ("trace-kernel-mix", "trace-steps", "trace-calibration")] == [
        None
    ] * 3


def test_steps_say_when_launches_have_no_instruction_count(staff_client, make_trace):
    trace = make_trace("graphs", state=TraceState.READY, has_step_timeline=True, kernels_without_totals=1)
    add_steps(trace, [("step 0 (decode)", "decode")])
    add_run(trace, [(GEMM, 100, 50, 0), (ADD, None, 40, 0)])
    steps = section(read(staff_client.get(change_url("graphs"))), "trace-step-insts")
    assert (
        "1 of the 2 launches have no instruction count (captured into a CUDA graph, as decode steps often "
        "are): a step's bar counts its other launches only, while its measured time counts them all."
    ) in steps.text


def test_a_big_trace_page_is_kept_as_its_parse_commits_where_the_cache_is_shared(
    staff_client, make_trace, monkeypatch, settings, django_capture_on_commit_callbacks
):
    """With a shared cache (CASCADE_CACHE_URL) the parse that makes a big trace ready also keeps
    its page's reads: the first view reads no launch. Without one, nothing is read ahead."""
    from django.core.cache import cache

    from tests.helpers import kernel_row
    from traces import services
    from traces.admin import analysis_pages

    monkeypatch.setattr(analysis_pages, "KEEP_PAGE_READS_FROM", 10)
    cache.clear()

    def parsed(name: str) -> Trace:
        trace = make_trace(name, state=TraceState.PARSING)
        with django_capture_on_commit_callbacks(execute=True):
            services.trace_store_kernels(trace, (kernel_row(n) for n in range(1, 13)), fingerprint="f")
        return Trace.objects.get(pk=name)

    def launch_reads(trace: Trace) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert staff_client.get(change_url(trace.pk)).status_code == 200
        return sum("traces_kernel" in query["sql"] for query in captured.captured_queries)

    settings.CASCADE_CACHE_URL = ""
    assert launch_reads(parsed("not-shared")) > 0

    settings.CASCADE_CACHE_URL = "redis://cache.internal:6379/1"  # the cache itself stays local
    kept = parsed("shared")
    assert launch_reads(kept) == 0

    small = make_trace("small", state=TraceState.PARSING)
    with django_capture_on_commit_callbacks(execute=True):
        services.trace_store_kernels(small, (kernel_row(n) for n in range(1, 4)), fingerprint="f")
    assert launch_reads(Trace.objects.get(pk="small")) > 0
