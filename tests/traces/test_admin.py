"""The operators' admin: find, inspect, re-ingest, mark failed and delete traces.

Pages are read as an operator reads them (text, links, tables under their headers, buttons,
the boxes the page names by id), not by their CSS classes or exact markup.
"""

import threading
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib import admin
from django.contrib.admin import AdminSite
from django.contrib.admin.utils import quote
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from ingest import passes
from ingest import reingest as reingest_module
from ingest.tasks import parse_trace_task
from tests.traces.support import (
    CHANGELIST,
    Element,
    change_url,
    field,
    header_label,
    query_count,
    read,
    reingest,
    result_rows,
    table_rows,
    upload_minimal_run,
)
from traces import launch_summaries
from traces.admin import paginators, register_listed_only
from traces.admin.chart import MAX_BARS, instruction_chart
from traces.admin.display import size_text
from traces.admin.kernel import KernelAdmin
from traces.models import CURRENT_PARSER_VERSION, Kernel, KernelName, Trace, TraceState
from traces.views import TraceViewSet

KERNELS = "/admin/traces/kernel/"
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def delete_url(trace_id: str) -> str:
    return reverse("admin:traces_trace_delete", args=[quote(trace_id)])


def listed_trace_ids(response) -> list[str]:
    return [trace.pk for trace in response.context["cl"].result_list]


@pytest.fixture
def queued_tasks(settings, monkeypatch) -> list[tuple[str, bool]]:
    """Celery configured; the parse tasks it is sent, (trace_id, reparse), kept instead of a broker."""
    settings.CASCADE_CELERY_CONFIGURED = True
    queued = []
    monkeypatch.setattr(
        parse_trace_task, "delay", lambda trace_id, reparse=False: queued.append((trace_id, reparse))
    )
    return queued


# --- reading a page as an operator does ---------------------------------------------------


def column_headers(page: Element) -> list[str]:
    return [header_label(cell) for cell in page.find("table", id="result_list").find("thead").find_all("th")]


def section_headings(page: Element) -> list[str]:
    return [heading.text for heading in page.find_all("h2")]


def buttons(page: Element) -> list[str]:
    """The buttons of the page's content (not of the header: log out, the theme)."""
    content = page.find(id="content")
    submits = [element.attrs.get("value", "") for element in content.find_all("input", type="submit")]
    return submits + [button.text for button in content.find_all("button")]


def form_fields(page: Element) -> set[str]:
    return {
        element.attrs["name"]
        for element in page.descendants()
        if element.tag in ("input", "select", "textarea") and "name" in element.attrs
    }


def press(client, page: Element, button_text: str):
    """Submit the form of the button labelled `button_text`, as a click would, and follow."""
    button = next(b for b in page.find_all("button") if b.text == button_text)
    form = button.parent
    while form.tag != "form":
        form = form.parent
    data = {element.attrs["name"]: element.attrs.get("value", "") for element in form.find_all("input")}
    return client.post(form.attrs["action"], data, follow=True)


def query(href: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(href).query)


@pytest.fixture
def traces(make_trace):
    """Three runs, created an hour apart: the newest failed."""
    return [
        make_trace(
            "resnet-a100",
            state=TraceState.READY,
            created_at=T0,
            model="resnet50",
            source_gpu="NVIDIA A100-SXM4-80GB",
            trace_gpu_arch="sm_80",
            suggested_sim_config="SM80_A100",
            bytes=1536 * 1024**2,
            kernel_count=0,
            has_real_timing=True,
            sample=True,
        ),
        make_trace(
            "bert-h100",
            state=TraceState.READY,
            created_at=T0 + timedelta(hours=1),
            model="bert-base",
            source_gpu="NVIDIA H100 80GB HBM3",
            trace_gpu_arch="sm_90",
            suggested_sim_config="SM90_H100",
            has_step_timeline=True,
        ),
        make_trace(
            "broken.run+v2@x=1",
            state=TraceState.FAILED,
            created_at=T0 + timedelta(hours=2),
            error="traces/stats_ctx_0x1: line 3: expected 12 columns, got 7",
            model="resnet50",
        ),
    ]


# --- who gets in ----------------------------------------------------------------------


@pytest.mark.parametrize("path", [CHANGELIST, KERNELS, "/admin/traces/trace/bert-h100/change/"])
def test_anonymous_is_sent_to_login(client, traces, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=")


def test_non_staff_user_is_refused(client, traces, django_user_model):
    user = django_user_model.objects.create_user("someone", password="someone-pass-123")
    client.force_login(user)
    response = client.get(CHANGELIST)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=")


def test_staff_without_permissions_is_forbidden(client, traces, django_user_model):
    user = django_user_model.objects.create_user("staff", password="staff-pass-123", is_staff=True)
    client.force_login(user)
    assert client.get(CHANGELIST).status_code == 403


def test_admin_is_titled_cascade_and_links_to_the_browsable_api(staff_client):
    page = read(staff_client.get("/admin/"))
    assert page.find("title").text == "Trace registry | Cascade"
    assert ("Browsable Traces API", "/api/traces") in page.links()


def test_browsable_api_works_for_a_logged_in_staff_user(staff_client, traces):
    listing = staff_client.get("/api/traces", HTTP_ACCEPT="text/html")
    assert listing["Content-Type"].startswith("text/html")
    page = read(listing)
    assert "bert-h100" in page.text
    # Operators read what the API is for and how scripts call it, not the developers' docstring.
    assert (
        "Traces registered from the S3 bucket. JSON clients: Authorization: Bearer <token>; "
        "?format=json for the raw JSON." in page.text
    )
    assert TraceViewSet.__doc__.strip().splitlines()[0] not in page.text
    assert ("Cascade", "/admin/") in page.links()
    assert "Django REST framework" not in page.text
    detail = read(staff_client.get("/api/traces/bert-h100", HTTP_ACCEPT="text/html"))
    assert "SM90_H100" in detail.text


# --- the trace list -------------------------------------------------------------------


@pytest.mark.parametrize(
    "count, shown",
    [
        (None, "-"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (3 * 1024**2, "3.0 MiB"),
        (1024**3 + 512 * 1024**2, "1.5 GiB"),
        (3 * 1024**4, "3072.0 GiB"),
    ],
)
def test_sizes_read_in_the_binary_units_cascade_pull_prints(count, shown):
    assert size_text(count) == shown


def test_changelist_shows_newest_first_with_state_and_human_size(staff_client, traces):
    rows = result_rows(read(staff_client.get(CHANGELIST)))
    assert [(row["Id"].text, row["State"].text) for row in rows] == [
        ("broken.run+v2@x=1", "failed"),
        ("bert-h100", "ready"),
        ("resnet-a100", "ready"),
    ]
    resnet = rows[2]
    # In the units `cascade pull` prints (one system for both).
    assert resnet["Size"].text == "1.5 GiB"
    assert (resnet["Model"].text, resnet["Arch"].text, resnet["Sim config"].text) == (
        "resnet50",
        "sm_80",
        "SM80_A100",
    )
    assert resnet["Source GPU"].text == "NVIDIA A100-SXM4-80GB"


def test_changelist_columns_are_compact(staff_client, traces):
    page = read(staff_client.get(CHANGELIST))
    resnet = result_rows(page)[2]
    # Dates as "2026-11-01 12:00", the exact time in a tooltip.
    assert resnet["Created"].text == "2026-11-01 12:00"
    assert "2026-11-01T12:00:00+00:00" in resnet["Created"].tooltips()
    assert "Nov. 1, 2026" not in page.text
    # GPU names whole (they wrap).
    assert resnet["Source GPU"].text == "NVIDIA A100-SXM4-80GB"
    # Short headers, each of which sorts the list.
    sorting_links = [text for text, href in page.find("table", id="result_list").links() if "o=" in href]
    for header in ("Created", "Updated", "Source GPU", "Size", "Kernels"):
        assert header in column_headers(page) and header in sorting_links, header


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("state__exact=failed", ["broken.run+v2@x=1"]),
        ("sample__exact=1", ["resnet-a100"]),
        ("trace_gpu_arch__exact=sm_90", ["bert-h100"]),
        ("has_real_timing__exact=1", ["resnet-a100"]),
        ("has_step_timeline__exact=1", ["bert-h100"]),
    ],
)
def test_changelist_filters(staff_client, traces, query, expected):
    response = staff_client.get(f"{CHANGELIST}?{query}")
    assert listed_trace_ids(response) == expected


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("broken.run", ["broken.run+v2@x=1"]),
        ("resnet50", ["broken.run+v2@x=1", "resnet-a100"]),
        ("H100 80GB", ["bert-h100"]),
    ],
)
def test_changelist_search_by_id_model_and_source_gpu(staff_client, traces, term, expected):
    response = staff_client.get(CHANGELIST, {"q": term})
    assert listed_trace_ids(response) == expected


def test_traces_are_read_only(staff_client, traces):
    assert staff_client.get("/admin/traces/trace/add/").status_code == 403
    page = read(staff_client.get(change_url("bert-h100")))
    assert not any("Save" in label for label in buttons(page))
    assert "model" not in form_fields(page)  # no input: the bucket is the source of truth
    assert field(page, "Model").text == "bert-base"
    staff_client.post(change_url("bert-h100"), {"model": "changed"})
    assert Trace.objects.get(pk="bert-h100").model == "bert-base"


# --- the trace page -------------------------------------------------------------------


def test_change_page_shows_every_field_the_error_metadata_and_files(staff_client, traces):
    trace = traces[2]
    trace.metadata = {"status": "failed", "model": "resnet50", "layers": ["conv1"]}
    trace.files = [
        {"key": "accelsim-traces/broken.run+v2@x=1/metadata.json", "bytes": 210, "etag": '"a1"'},
        {
            "key": "accelsim-traces/broken.run+v2@x=1/traces/stats_ctx_0x1",
            "bytes": 3 * 1024**2,
            "etag": '"b2"',
        },
    ]
    trace.parsed_fingerprint = "f" * 64
    trace.save()

    page = read(staff_client.get(change_url(trace.pk)))
    error_box = page.find(id="trace-error")
    assert error_box.attrs["role"] == "alert"
    assert "Ingestion failed" in error_box.text and "expected 12 columns, got 7" in error_box.text
    # metadata.json re-indented, line by line.
    assert '{\n  "status": "failed",\n  "model": "resnet50",' in field(page, "Metadata.json").raw_text()
    files = table_rows(field(page, "Files").find("table"))
    assert [(row["key"].text, row["size"].text, row["ETag"].text) for row in files] == [
        ("accelsim-traces/broken.run+v2@x=1/metadata.json", "210 B", '"a1"'),
        ("accelsim-traces/broken.run+v2@x=1/traces/stats_ctx_0x1", "3.0 MiB", '"b2"'),
    ]
    assert "3,145,728 bytes" in files[1]["size"].tooltips()
    for label, value in [
        ("Model", "resnet50"),
        ("Source gpu", "-"),
        ("Trace gpu arch", "-"),
        ("Suggested sim config", "-"),
        ("Kernel count", "0"),
        ("Parsed fingerprint", "f" * 64),
    ]:
        assert field(page, label).text == value, label
    assert field(page, "Has real timing").find("img").attrs["alt"] == "False"
    assert page.find(id="trace-kernels").find("h2").text == "Kernels"


def test_change_page_shows_the_kernels_before_metadata_and_files(staff_client, traces):
    """The summary comes first: metadata.json and the file list can be long (the browser
    test checks that they scroll in boxes of their own)."""
    trace = traces[1]
    trace.metadata = {
        "status": "ok",
        "files": [{"key": f"traces/kernel-{n}.trace.xz", "bytes": n} for n in range(50)],
    }
    trace.files = [
        {"key": f"accelsim-traces/bert-h100/traces/kernel-{n}.trace.xz", "bytes": n, "etag": '"e"'}
        for n in range(50)
    ]
    trace.save()

    headings = section_headings(read(staff_client.get(change_url(trace.pk))))
    assert headings.index("Kernels") < headings.index("metadata.json") < headings.index("Files")


def test_change_page_summarises_kernels_per_context_top_and_traced(staff_client, traces, make_kernels):
    trace = traces[1]
    make_kernels(trace, [100, 900, 300, None], ctx="0xa")  # kernel ids 1..4; odd ids traced
    make_kernels(trace, [500, 50], ctx="0xb")

    response = staff_client.get(change_url(trace.pk))
    summary = response.context["kernel_summary"]
    assert [(c.ctx, c.kernels, c.traced, c.untraced, c.total_insts) for c in summary.contexts] == [
        ("0xa", 4, 2, 2, 1300),
        ("0xb", 2, 1, 1, 550),
    ]
    assert (summary.kernels, summary.traced, summary.untraced) == (6, 3, 3)
    assert [(k.ctx, k.kernel_id, k.total_insts) for k in summary.top_kernels] == [
        ("0xa", 2, 900),
        ("0xb", 1, 500),
        ("0xa", 3, 300),
        ("0xa", 1, 100),
        ("0xb", 2, 50),
    ]
    kernels = read(response).find(id="trace-kernels")
    assert "6 kernels: 3 traced, 3 untraced; 1,850 instructions in all." in kernels.text
    assert ("Browse them in the kernel list", f"{KERNELS}?trace=bert-h100") in kernels.links()
    contexts = table_rows(kernels.find(id="trace-contexts"))
    assert [
        (row["context"].text, row["kernels"].text, row["traced"].text, row["kernel ids"].text)
        for row in contexts
    ] == [("0xa", "4", "2", "1–4"), ("0xb", "2", "1", "1–2")]
    assert contexts[1]["context"].links() == [("0xb", f"{KERNELS}?trace=bert-h100&ctx=0xb")]
    top = table_rows(kernels.find(id="trace-top-kernels"))
    assert [(row["context"].text, row["kernel id"].text, row["traced"].text) for row in top][:2] == [
        ("0xa", "2", "no"),
        ("0xb", "1", "yes"),
    ]


def test_change_page_chart_is_an_inline_svg_bar_per_kernel_in_launch_order(
    staff_client, traces, make_kernels
):
    trace = traces[1]
    make_kernels(trace, [100, 400], ctx="0xa")
    make_kernels(trace, [200], ctx="0xb")

    svg = read(staff_client.get(change_url(trace.pk))).find(id="trace-chart").find("svg")
    assert svg is not None, "the chart is drawn into the page"
    # A bar is a group with a tooltip; the contexts' bands under the bars have none.
    bars = [group for group in svg.find_all("g") if group.find("title")]
    assert [bar.find("title").text for bar in bars] == [
        "0xa kernel 1: 100 instructions",
        "0xa kernel 2: 400 instructions",
        "0xb kernel 1: 200 instructions",
    ]
    heights = [max(float(rect.attrs["height"]) for rect in bar.find_all("rect")) for bar in bars]
    assert heights[1] == max(heights) and heights[0] == pytest.approx(heights[1] / 4)
    assert [
        group.text
        for group in svg.find_all("g")
        if not group.find("title") and group.attrs.get("class") == "context"
    ] == ["0xa", "0xb"]
    # Nothing to run and nothing to fetch: no script, no address but the SVG namespace.
    assert not svg.find_all("script")
    addresses = [value for element in [svg, *svg.descendants()] for value in element.attrs.values()]
    assert [value for value in addresses if value and "://" in value] == ["http://www.w3.org/2000/svg"]


def test_chart_groups_consecutive_kernels_past_max_bars(db, make_trace, make_kernels):
    trace = make_trace("many")
    make_kernels(trace, [n % 7 * 10 for n in range(1, 1001)], ctx="0xa")
    make_kernels(trace, [5] * 200, ctx="0xb")

    summary = launch_summaries.kernel_summary(trace.pk, kernel_count=trace.kernel_count, run_count=MAX_BARS)
    chart = instruction_chart(summary.runs)
    assert len(chart.bars) <= MAX_BARS + 2
    assert sum(bar.kernels for bar in chart.bars) == 1200
    assert chart.kernels_per_bar == 4
    first = chart.bars[0]
    assert (first.ctx, first.first_kernel_id, first.last_kernel_id, first.max_insts) == ("0xa", 1, 4, 40)
    assert [band.ctx for band in chart.contexts] == ["0xa", "0xb"]
    assert [k.total_insts for k in summary.top_kernels] == [60] * 10


def test_top_kernels_are_the_heaviest_even_when_they_share_a_bar(db, make_trace, make_kernels):
    trace = make_trace("crowded")
    values = [1] * 3000
    values[10:14] = [1000, 999, 998, 997]  # one bar holds four of the heaviest
    values[2000] = 996
    make_kernels(trace, values, ctx="0xa")

    summary = launch_summaries.kernel_summary(trace.pk, kernel_count=trace.kernel_count, run_count=MAX_BARS)
    expected = sorted(values, reverse=True)[: launch_summaries.TOP_KERNELS]
    assert [k.total_insts for k in summary.top_kernels] == expected


def test_change_page_query_count_does_not_grow_with_kernels(staff_client, traces, make_kernels):
    make_kernels(traces[0], [10, 20])
    make_kernels(traces[1], list(range(500)))
    query_count(staff_client, change_url("resnet-a100"))  # warm Django's caches (content types)
    assert query_count(staff_client, change_url("bert-h100")) == query_count(
        staff_client, change_url("resnet-a100")
    )


def test_change_page_of_a_trace_without_kernels(staff_client, traces):
    page = read(staff_client.get(change_url("broken.run+v2@x=1")))
    assert page.find(id="trace-kernels").text == "Kernels No kernels (the trace is failed)."


def test_change_page_shows_instruction_totals_with_thousands_separators(staff_client, traces, make_kernels):
    make_kernels(traces[1], [6180720, 1234567, None])

    kernels = read(staff_client.get(change_url("bert-h100"))).find(id="trace-kernels")
    assert "7,415,287 instructions in all" in kernels.text
    assert [row["instructions"].text for row in table_rows(kernels.find(id="trace-contexts"))] == [
        "7,415,287"
    ]
    top = table_rows(kernels.find(id="trace-top-kernels"))
    assert [row["instructions"].text for row in top] == ["6,180,720", "1,234,567"]


# --- an upload in progress: what it waits for ------------------------------------------


def waiting_notice(response) -> str | None:
    """The notice an uploading trace's page shows, a status (not an alert), or None."""
    box = read(response).find(id="trace-waiting")
    if box is None:
        return None
    assert box.attrs["role"] == "status"
    return box.text


def test_uploading_trace_says_which_listed_files_it_waits_for(staff_client, make_trace):
    prefix = "accelsim-traces/llama/"
    trace = make_trace(
        "llama",
        state=TraceState.UPLOADING,
        files=[
            {"key": prefix + "metadata.json", "bytes": 90, "etag": '"m"'},
            {"key": prefix + "traces/stats_ctx_0x1", "bytes": 700, "etag": '"s"'},
            {"key": prefix + "traces/kernel-1-ctx_0x1.trace.xz", "bytes": 10, "etag": '"k"'},
        ],
    )
    trace.metadata = {
        "status": "ok",
        "files": [
            {"key": "traces/stats_ctx_0x1", "bytes": 700},
            {"key": prefix + "traces/kernel-1-ctx_0x1.trace.xz", "bytes": 10},
            {"key": "traces/kernel-2-ctx_0x1.trace.xz", "bytes": 12},
            {"key": "traces/stats_ctx_0x2", "bytes": 800},
        ],
    }
    # What ingestion found missing at its last decision (ingest.metadata.missing_listed_files).
    trace.waiting_for = ["traces/kernel-2-ctx_0x1.trace.xz", "traces/stats_ctx_0x2"]
    trace.save()

    response = staff_client.get(change_url("llama"))
    assert waiting_notice(response) == (
        "Waiting for 2 file(s) listed in metadata.json: traces/kernel-2-ctx_0x1.trace.xz, "
        "traces/stats_ctx_0x2 (fails CASCADE_UPLOAD_TIMEOUT after the last new file)"
    )
    assert read(response).find(id="trace-error") is None  # waiting is not failing


def test_uploading_trace_without_metadata_says_the_upload_is_in_progress(staff_client, make_trace):
    make_trace("half", state=TraceState.UPLOADING)
    assert waiting_notice(staff_client.get(change_url("half"))) == (
        "No metadata.json yet: the upload is still in progress."
    )


def test_no_waiting_notice_once_every_listed_file_arrived_or_the_trace_is_not_uploading(
    staff_client, make_trace
):
    listed = {"status": "ok", "files": [{"key": "traces/stats_ctx_0x1", "bytes": 700}]}
    arrived = make_trace(
        "arrived",
        state=TraceState.UPLOADING,
        files=[{"key": "accelsim-traces/arrived/traces/stats_ctx_0x1", "bytes": 700, "etag": '"s"'}],
    )
    arrived.metadata = listed
    arrived.save()
    parsing = make_trace("parsing", state=TraceState.PARSING)
    parsing.metadata = listed
    parsing.save()

    for trace_id in ("arrived", "parsing"):
        assert waiting_notice(staff_client.get(change_url(trace_id))) is None


# --- actions --------------------------------------------------------------------------


def test_reingest_action_reads_the_trace_again_in_the_background(
    transactional_db, staff_client, make_trace, s3
):
    make_trace("vecadd", state=TraceState.FAILED, error="stats file was truncated")
    upload_minimal_run(s3, "vecadd")

    assert reingest(staff_client, "vecadd") == [
        "Trace vecadd: re-ingest in the background: 1 started, 0 waiting, 0 refused; "
        "reload the page to see the result"
    ]
    assert reingest_module.queue.wait_idle(30)
    trace = Trace.objects.get(pk="vecadd")
    assert (trace.state, trace.kernel_count) == (TraceState.READY, 1)
    assert list(Kernel.objects.filter(trace=trace).values_list("ctx", "kernel_id", "total_insts")) == [
        ("0x1", 1, 50066)
    ]


def test_reingest_never_parses_inside_the_web_request(staff_client, traces, monkeypatch):
    """Behind gunicorn's timeout a large trace was killed mid-parse."""
    request_thread = threading.current_thread()
    parsed_in = []
    monkeypatch.setattr(
        passes, "ingest_trace", lambda trace_id, **kwargs: parsed_in.append(threading.current_thread())
    )
    reingest(staff_client, "bert-h100")
    assert reingest_module.queue.wait_idle(30)
    assert parsed_in and request_thread not in parsed_in


def test_reingest_queues_a_celery_task_when_celery_is_configured(staff_client, traces, queued_tasks):
    assert reingest(staff_client, "bert-h100") == [
        "Trace bert-h100: queued for re-ingestion; a Celery worker parses it"
    ]
    assert queued_tasks == [("bert-h100", True)]


def test_reingest_reports_an_unreachable_broker_instead_of_failing(
    staff_client, traces, queued_tasks, monkeypatch
):
    def unreachable(trace_id, reparse=False):
        raise ConnectionError("could not connect to the broker")

    monkeypatch.setattr(parse_trace_task, "delay", unreachable)
    assert reingest(staff_client, "bert-h100") == [
        "Trace bert-h100: not re-ingested: could not connect to the broker"
    ]


def test_reingest_action_says_an_upload_without_metadata_has_nothing_to_parse(staff_client, make_trace):
    make_trace("half-uploaded", state=TraceState.UPLOADING)
    assert reingest(staff_client, "half-uploaded") == [
        "Trace half-uploaded: not re-ingested: still uploading, metadata.json has not landed: nothing to parse yet"
    ]


def test_mark_failed_action_records_who_did_it(staff_client, traces, admin_user):
    response = staff_client.post(
        CHANGELIST, {"action": "mark_failed", "_selected_action": ["bert-h100", "resnet-a100"]}, follow=True
    )
    assert response.status_code == 200
    for trace_id in ("bert-h100", "resnet-a100"):
        trace = Trace.objects.get(pk=trace_id)
        assert trace.state == TraceState.FAILED
        assert trace.error == f"marked failed by {admin_user.username} in the admin"
    assert Trace.objects.get(pk="broken.run+v2@x=1").error.startswith("traces/stats_ctx_0x1")


def test_operators_mark_samples_and_the_api_shows_it_at_once(staff_client, traces, api):
    """`sample` is an operator's word: the admin sets and clears it,
    and a client holding the trace's old ETag gets the new answer, not a 304."""
    before = api.get("/api/traces/bert-h100")
    assert before.json()["sample"] is False
    others = dict(Trace.objects.exclude(pk="bert-h100").values_list("pk", "sample"))

    staff_client.post(CHANGELIST, {"action": "mark_sample", "_selected_action": ["bert-h100"]}, follow=True)
    after = api.get("/api/traces/bert-h100", HTTP_IF_NONE_MATCH=before["ETag"])
    assert after.status_code == 200
    assert after.json()["sample"] is True
    assert dict(Trace.objects.exclude(pk="bert-h100").values_list("pk", "sample")) == others

    staff_client.post(CHANGELIST, {"action": "unmark_sample", "_selected_action": ["bert-h100"]}, follow=True)
    assert Trace.objects.get(pk="bert-h100").sample is False


def test_change_page_offers_the_actions_as_buttons(staff_client, traces, queued_tasks):
    page = read(staff_client.get(change_url("bert-h100")))
    assert {"Re-ingest this trace", "Mark failed"} <= set(buttons(page))

    response = press(staff_client, page, "Re-ingest this trace")
    assert [str(m) for m in response.context["messages"]] == [
        "Trace bert-h100: queued for re-ingestion; a Celery worker parses it"
    ]
    press(staff_client, page, "Mark failed")
    assert Trace.objects.get(pk="bert-h100").state == TraceState.FAILED
    # A failed trace is not offered "Mark failed" again.
    assert "Mark failed" not in buttons(read(staff_client.get(change_url("bert-h100"))))


def test_viewers_see_traces_but_get_no_actions(viewer_client, traces):
    listing = read(viewer_client.get(CHANGELIST))
    # Comparing two traces only reads them: the one action a viewer is offered.
    actions = listing.find("select", name="action").find_all("option")
    assert [option.text for option in actions if option.attrs.get("value")] == ["Compare two selected traces"]
    assert "Re-ingest selected traces" not in listing.text
    viewer_client.post(CHANGELIST, {"action": "mark_failed", "_selected_action": ["bert-h100"]})
    assert Trace.objects.get(pk="bert-h100").state == TraceState.READY
    assert buttons(read(viewer_client.get(change_url("bert-h100")))) == []


# --- deleting ---------------------------------------------------------------------------


def test_delete_confirmation_counts_kernels_without_listing_them(staff_client, traces, make_kernels):
    make_kernels(traces[1], list(range(300)))
    with CaptureQueriesContext(connection) as captured:
        page = read(staff_client.get(delete_url("bert-h100")))
    assert "Kernels: 300" in page.text
    assert "_Z6kernel" not in page.text
    assert not any("traces_kernel" in q["sql"] and "COUNT" not in q["sql"] for q in captured.captured_queries)


def test_deleting_a_trace_deletes_its_kernels(staff_client, traces, make_kernels):
    make_kernels(traces[1], [1, 2, 3])
    make_kernels(traces[0], [4])
    response = staff_client.post(delete_url("bert-h100"), {"post": "yes"})
    assert response.status_code == 302
    assert not Trace.objects.filter(pk="bert-h100").exists()
    assert Kernel.objects.filter(trace_id="bert-h100").count() == 0
    assert Kernel.objects.filter(trace_id="resnet-a100").count() == 1


def test_delete_selected_action_deletes_traces_and_kernels(staff_client, traces, make_kernels):
    make_kernels(traces[1], [1, 2, 3])
    confirm = staff_client.post(
        CHANGELIST, {"action": "delete_selected", "_selected_action": ["bert-h100", "resnet-a100"]}
    )
    assert "Kernels: 3" in read(confirm).text
    staff_client.post(
        CHANGELIST,
        {"action": "delete_selected", "_selected_action": ["bert-h100", "resnet-a100"], "post": "yes"},
    )
    assert list(Trace.objects.values_list("pk", flat=True)) == ["broken.run+v2@x=1"]
    assert not Kernel.objects.exists()


# --- the kernel list --------------------------------------------------------------------


def kernel_rows(response) -> list[tuple]:
    return [(k.run, k.launch_context.ctx, k.kernel_id) for k in response.context["cl"].result_list]


def test_kernel_changelist_filters_by_trace_and_context(staff_client, traces, make_kernels):
    make_kernels(traces[1], [1, 2], ctx="0xa")
    make_kernels(traces[1], [3], ctx="0xb")
    make_kernels(traces[0], [4], ctx="0xa")

    response = staff_client.get(KERNELS, {"trace": "bert-h100"})
    assert kernel_rows(response) == [
        ("bert-h100", "0xa", 1),
        ("bert-h100", "0xa", 2),
        ("bert-h100", "0xb", 1),
    ]
    page = read(response)
    assert [(row["Grid"].text, row["Block"].text) for row in result_rows(page)] == [
        ("98×1×1", "1024×1×1")
    ] * 3
    # The context filter offers the trace's contexts, keeping the trace.
    assert [query(href) for text, href in page.links() if text == "0xb"] == [
        {"trace": ["bert-h100"], "ctx": ["0xb"]}
    ]

    response = staff_client.get(KERNELS, {"trace": "bert-h100", "ctx": "0xb"})
    assert kernel_rows(response) == [("bert-h100", "0xb", 1)]
    response = staff_client.get(KERNELS, {"traced__exact": "1", "trace": "bert-h100"})
    assert kernel_rows(response) == [("bert-h100", "0xa", 1), ("bert-h100", "0xb", 1)]


def test_kernel_changelist_fits_grid_block_totals_and_traced_beside_the_names(
    staff_client, traces, make_kernels
):
    make_kernels(traces[1], [1234567])
    # A name stored before names were demangled at ingest: the list demangles it.
    KernelName.objects.update(
        name="_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEEEEviT0_", demangled=None
    )

    page = read(staff_client.get(KERNELS))
    [row] = result_rows(page)
    full = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEEEEviT0_"
    # Demangled whole (c++filt's reading of it), the symbol on hover.
    assert row["Name"].text == (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >"
        "(int, at::native::FillFunctor<float>)"
    )
    assert row["Name"].tooltips() == [full]
    assert (row["Insts"].text, row["Reported"].text) == ("1,234,567", "1,234,567")  # thousands separators
    assert row["Trace"].links() == [("bert-h100", change_url("bert-h100"))]

    # One trace's kernels: the trace is the filter's, not a column repeated on every row.
    assert "Trace" not in column_headers(read(staff_client.get(KERNELS, {"trace": "bert-h100"})))
    assert "Trace" in column_headers(page)


def test_kernel_changelist_search_by_name(staff_client, traces, make_kernels):
    make_kernels(traces[1], [1, 2, 3])
    response = staff_client.get(KERNELS, {"q": "kernel2P"})
    assert kernel_rows(response) == [("bert-h100", "0x6165bdd7ec90", 2)]


def test_kernel_changelist_query_count_does_not_grow_with_rows(staff_client, traces, make_kernels):
    make_kernels(traces[0], [1, 2])
    query_count(staff_client, KERNELS)  # warm Django's caches (content types)
    unfiltered = query_count(staff_client, KERNELS)
    make_kernels(traces[1], list(range(90)))
    assert query_count(staff_client, KERNELS) == unfiltered
    assert query_count(staff_client, KERNELS, {"trace": "bert-h100"}) == query_count(
        staff_client, KERNELS, {"trace": "resnet-a100"}
    )


def test_kernels_are_read_only(staff_client, traces, make_kernels):
    make_kernels(traces[1], [1])
    assert staff_client.get("/admin/traces/kernel/add/").status_code == 403
    # A launch has no page of its own (its primary key is composite): its row links to its trace only.
    [row] = result_rows(read(staff_client.get(KERNELS)))
    assert [link for cell in row.values() for link in cell.links()] == [
        ("bert-h100", change_url("bert-h100"))
    ]


def test_django_admin_still_refuses_composite_primary_keys():
    # The day a Django registers them, `register_listed_only` can become `admin.site.register`.
    with pytest.raises(ImproperlyConfigured, match="composite primary key"):
        AdminSite().register(Kernel, KernelAdmin)


def test_kernels_are_registered_with_the_admin_for_their_list():
    site = AdminSite()
    register_listed_only(site, Kernel, KernelAdmin)
    assert site.is_registered(Kernel)
    assert isinstance(site.get_model_admin(Kernel), KernelAdmin)
    assert isinstance(admin.site.get_model_admin(Kernel), KernelAdmin)


def test_a_list_is_counted_exactly_where_there_is_no_planner_to_ask(db, rf):
    listed = admin.site.get_model_admin(Kernel).get_queryset(rf.get(KERNELS))
    assert (paginators.estimated_rows(listed) is None) == (connection.vendor != "postgresql")


@pytest.mark.postgres("the estimate is PostgreSQL's planner statistics")
def test_a_filter_nothing_can_match_is_estimated_at_no_rows(db, rf):
    listed = admin.site.get_model_admin(Kernel).get_queryset(rf.get(KERNELS))
    assert paginators.estimated_rows(listed.none()) == 0
    assert paginators.estimated_rows(listed.filter(trace_key__in=[])) == 0


@pytest.mark.postgres("the estimate is PostgreSQL's planner statistics")
def test_unfiltered_kernel_changelist_uses_the_planner_estimate_on_postgres(
    staff_client, traces, make_kernels, monkeypatch
):
    make_kernels(traces[1], list(range(250)))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE traces_kernel")
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = 'traces_kernel'::regclass")
        estimate = cursor.fetchone()[0]
    monkeypatch.setattr(paginators, "ESTIMATE_COUNTS_ABOVE", 0)

    with CaptureQueriesContext(connection) as captured:
        response = staff_client.get(KERNELS)
    assert not [q["sql"] for q in captured.captured_queries if "COUNT(" in q["sql"].upper()]
    assert response.context["cl"].result_count == estimate
    # The planner can read the list's order straight from an index (on a table this small it
    # would rather sort, so sorting is made to look expensive): the "-pk" Django appends to the
    # order repeats the primary key's columns, which PostgreSQL drops; no sort of any kind.
    plan = explain(response.context["cl"].queryset[:100])
    assert "Index Scan using traces_kernel_pkey" in plan, plan
    assert "Sort" not in plan, plan

    filtered = staff_client.get(KERNELS, {"trace": "bert-h100"})
    assert filtered.context["cl"].result_count == 250


def paginator_text(response) -> str:
    [paginator] = read(response).find_all("p", **{"class": "paginator"})
    return paginator.text


@pytest.mark.postgres("the estimate is PostgreSQL's planner statistics")
def test_the_trace_list_uses_the_estimated_count_above_the_threshold_and_says_so(
    staff_client, make_trace, monkeypatch
):
    for n in range(30):
        make_trace(f"run-{n:02d}", state=TraceState.READY if n % 3 else TraceState.UPLOADING)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE traces_trace")
    # Below the threshold (100,000 traces), Django's exact count, said plainly.
    exact = staff_client.get(CHANGELIST)
    assert exact.context["cl"].result_count == 30
    assert paginator_text(exact) == "30 traces"

    monkeypatch.setattr(paginators, "ESTIMATE_COUNTS_ABOVE", 10)
    with CaptureQueriesContext(connection) as captured:
        estimated = staff_client.get(CHANGELIST)
    assert not [q["sql"] for q in captured.captured_queries if "COUNT(" in q["sql"].upper()]
    # The planner's statistics after ANALYZE (all 30 rows sampled), and the page says "about".
    assert estimated.context["cl"].result_count == 30
    assert paginator_text(estimated) == "about 30 traces"
    # A filter the planner expects more rows of than the threshold: estimated too; below it, exact.
    ready = staff_client.get(CHANGELIST, {"state__exact": "ready"})
    assert ready.context["cl"].result_count == 20
    assert paginator_text(ready) == "about 20 traces"
    monkeypatch.setattr(paginators, "ESTIMATE_COUNTS_ABOVE", 25)
    assert paginator_text(staff_client.get(CHANGELIST, {"state__exact": "ready"})) == "20 traces"
    # No count of the whole table beside a filtered one ("20 results (30 total)").
    assert "total" not in paginator_text(staff_client.get(CHANGELIST, {"q": "run-1"}))


def test_a_deep_kernel_page_shows_the_launches_an_offset_would(staff_client, traces, make_kernels):
    """Pages are read by their keys first (KernelPaginator.page_keys): the same launches, in
    the same order, as Django's own slice of the list."""
    make_kernels(traces[1], list(range(250)))
    make_kernels(traces[0], list(range(30)), first=1000)
    kernel_admin = admin.site.get_model_admin(Kernel)
    for query, page in (({}, 2), ({}, 3), ({"trace": "bert-h100"}, 2), ({"o": "-3"}, 2)):
        response = staff_client.get(KERNELS, {**query, "p": page})
        cl = response.context["cl"]
        expected = list(
            cl.queryset.values_list("trace_key", "context", "kernel_id")[(page - 1) * 100 : page * 100]
        )
        shown = [(kernel.trace_key, kernel.context, kernel.kernel_id) for kernel in cl.result_list]
        assert shown == expected, query
        assert len(shown) == (80 if (query, page) == ({}, 3) else 100), query
    assert kernel_admin.paginator.page_keys == ("trace_key", "context", "kernel_id")


def test_the_kernel_list_of_an_unknown_trace_or_an_unknown_name_is_empty(staff_client, traces, make_kernels):
    make_kernels(traces[1], [1, 2, 3])
    for query in ({"trace": "no-such-trace"}, {"q": "no_such_kernel"}):
        response = staff_client.get(KERNELS, query)
        assert response.context["cl"].result_count == 0, query
        assert list(response.context["cl"].result_list) == [], query


def explain(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("SET LOCAL enable_incremental_sort = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_change_page_says_how_many_launches_have_no_totals_and_why(staff_client, make_trace):
    make_trace("vllm-decode", state=TraceState.READY, kernel_count=744, kernels_without_totals=520)
    without_totals = field(read(staff_client.get(change_url("vllm-decode"))), "Launches without totals").text
    assert without_totals.startswith("520 of 744: ")
    assert "CUDA graph" in without_totals
    assert "killed run" in without_totals


def test_change_page_shows_the_parser_version_and_whether_it_is_outdated(staff_client, make_trace):
    make_trace("old", state=TraceState.READY, parser_version=1)
    make_trace("current", state=TraceState.READY, parser_version=CURRENT_PARSER_VERSION)
    old = field(read(staff_client.get(change_url("old"))), "Parser version").text
    assert old.startswith("1 (outdated") and "--reparse-outdated" in old
    current = field(read(staff_client.get(change_url("current"))), "Parser version").text
    assert current == f"{CURRENT_PARSER_VERSION} (current)"


def test_changelist_filters_traces_an_older_parser_read(staff_client, make_trace):
    make_trace("old", state=TraceState.READY, parser_version=1)
    make_trace("failed-old", state=TraceState.FAILED, parser_version=1)
    make_trace("current", state=TraceState.READY, parser_version=CURRENT_PARSER_VERSION)
    make_trace("never-parsed", state=TraceState.UPLOADING)
    outdated = staff_client.get(CHANGELIST, {"parser": "outdated"})
    assert sorted(listed_trace_ids(outdated)) == ["failed-old", "old"]
    assert listed_trace_ids(staff_client.get(CHANGELIST, {"parser": "current"})) == ["current"]
