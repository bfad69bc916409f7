"""The operators' admin: find, inspect, re-ingest, mark failed and delete traces."""

import re
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.utils import quote
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from ingest import passes
from ingest import reingest as reingest_module
from ingest.tasks import parse_trace_task
from traces import selectors
from traces.admin import paginators
from traces.admin.chart import MAX_BARS, instruction_chart
from traces.models import CURRENT_PARSER_VERSION, Kernel, Trace, TraceState

CHANGELIST = "/admin/traces/trace/"
KERNELS = "/admin/traces/kernel/"
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def change_url(trace_id: str) -> str:
    return reverse("admin:traces_trace_change", args=[quote(trace_id)])


def delete_url(trace_id: str) -> str:
    return reverse("admin:traces_trace_delete", args=[quote(trace_id)])


def listed_trace_ids(response) -> list[str]:
    return [trace.pk for trace in response.context["cl"].result_list]


def bar_titles(html: str) -> list[str]:
    return re.findall(r'<g class="bar">\s*<title>([^<]*)</title>', html)


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
    response = staff_client.get("/admin/")
    html = response.content.decode()
    assert "<title>Trace registry | Cascade</title>" in html
    assert '<a href="/api/traces">Browsable Traces API</a>' in html


def test_browsable_api_works_for_a_logged_in_staff_user(staff_client, traces):
    listing = staff_client.get("/api/traces", HTTP_ACCEPT="text/html")
    assert listing.status_code == 200
    assert listing["Content-Type"].startswith("text/html")
    html = listing.content.decode()
    assert "bert-h100" in html
    # Operators read what the API is for and how scripts call it, not the developers' docstring.
    assert (
        "Traces registered from the S3 bucket. JSON clients: Authorization: Bearer &lt;token&gt;; "
        "?format=json for the raw JSON." in html
    )
    assert "traces.encoders" not in html
    assert '<a class="navbar-brand" href="/admin/"' in html and ">Cascade</a>" in html
    assert "Django REST framework" not in html
    detail = staff_client.get("/api/traces/bert-h100", HTTP_ACCEPT="text/html")
    assert detail.status_code == 200
    assert "SM90_H100" in detail.content.decode()


# --- the trace list -------------------------------------------------------------------


def test_changelist_shows_newest_first_with_badge_and_human_size(staff_client, traces):
    response = staff_client.get(CHANGELIST)
    assert response.status_code == 200
    assert listed_trace_ids(response) == ["broken.run+v2@x=1", "bert-h100", "resnet-a100"]
    html = response.content.decode()
    assert re.search(r'<span class="state-badge state-failed"[^>]*>failed</span>', html)
    assert re.search(r'<span class="state-badge state-ready"[^>]*>ready</span>', html)
    assert "1.5\xa0GB" in html
    for column in ("SM80_A100", "sm_80", "NVIDIA A100-SXM4-80GB", "resnet50"):
        assert column in html


def test_changelist_columns_are_compact(staff_client, traces):
    html = staff_client.get(CHANGELIST).content.decode()
    # Dates as "2026-11-01 12:00", wrapping between the date and the time only.
    assert (
        '<span class="nowrap" title="2026-11-01T12:00:00+00:00">2026-11-01</span> <span class="nowrap">12:00</span>'
        in html
    )
    assert "Nov. 1, 2026" not in html
    # Long GPU names are cut, the whole name in a tooltip.
    assert '<span title="NVIDIA A100-SXM4-80GB">NVIDIA A100-SXM…</span>' in html
    for header in ("created", "updated", "source GPU", "size", "kernels"):
        assert re.search(rf">{header}</a>", html, re.I), header


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
    page = staff_client.get(change_url("bert-h100")).content.decode()
    assert 'name="_save"' not in page
    assert 'name="model"' not in page  # no input: the bucket is the source of truth
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

    response = staff_client.get(change_url(trace.pk))
    assert response.status_code == 200
    html = response.content.decode()
    error_box = re.search(r'<div class="trace-error" role="alert" id="trace-error">(.*?)</div>', html, re.S)
    assert error_box and "expected 12 columns, got 7" in error_box.group(1)
    assert "<pre" in html and "&quot;status&quot;: &quot;failed&quot;,\n  &quot;model&quot;" in html
    assert "<code>accelsim-traces/broken.run+v2@x=1/traces/stats_ctx_0x1</code>" in html
    assert "3.0\xa0MB" in html and "<code>&quot;b2&quot;</code>" in html
    for label in ("source gpu", "trace gpu arch", "suggested sim config", "kernel count", "has real timing"):
        assert label in html.lower().replace("_", " ")
    assert "f" * 64 in html
    assert 'id="trace-kernels"' in html


def test_change_page_shows_the_kernels_before_metadata_and_files_in_scrolling_boxes(staff_client, traces):
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

    html = staff_client.get(change_url(trace.pk)).content.decode()
    kernels = html.index('id="trace-kernels"')
    assert kernels < html.index('<pre class="trace-metadata">') < html.index('<table class="trace-files">')
    assert '<div class="trace-scroll"><pre class="trace-metadata">' in html
    assert '<div class="trace-scroll"><table class="trace-files">' in html
    assert re.search(r"\.trace-scroll \{[^}]*max-height:[^}]*overflow: auto", html)
    assert re.search(r"pre\.trace-metadata \{[^}]*white-space: pre;", html)


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
    html = response.content.decode()
    assert "<strong>3</strong> traced, <strong>3</strong> untraced" in html
    link = f'href="{KERNELS}?trace=bert-h100"'
    assert link in html
    assert f'href="{KERNELS}?trace=bert-h100&amp;ctx=0xb"' in html


def test_change_page_chart_is_an_inline_svg_bar_per_kernel_in_launch_order(
    staff_client, traces, make_kernels
):
    trace = traces[1]
    make_kernels(trace, [100, 400], ctx="0xa")
    make_kernels(trace, [200], ctx="0xb")

    html = staff_client.get(change_url(trace.pk)).content.decode()
    svg = re.search(r'<svg xmlns="http://www.w3.org/2000/svg" class="kernel-chart".*?</svg>', html, re.S)
    assert svg, "the chart is rendered into the page"
    assert bar_titles(svg.group(0)) == [
        "0xa kernel 1: 100 instructions",
        "0xa kernel 2: 400 instructions",
        "0xb kernel 1: 200 instructions",
    ]
    heights = [float(h) for h in re.findall(r'height="([\d.]+)" fill="#2b6cb0"', svg.group(0))]
    assert heights[1] == max(heights) and heights[0] == pytest.approx(heights[1] / 4)
    assert "<script" not in svg.group(0) and "http" not in svg.group(0).replace(
        "http://www.w3.org/2000/svg", ""
    )


def test_chart_groups_consecutive_kernels_past_max_bars(db, make_trace, make_kernels):
    trace = make_trace("many")
    make_kernels(trace, [n % 7 * 10 for n in range(1, 1001)], ctx="0xa")
    make_kernels(trace, [5] * 200, ctx="0xb")

    summary = selectors.kernel_summary(trace.pk, kernel_count=trace.kernel_count, run_count=MAX_BARS)
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

    summary = selectors.kernel_summary(trace.pk, kernel_count=trace.kernel_count, run_count=MAX_BARS)
    expected = sorted(values, reverse=True)[: selectors.TOP_KERNELS]
    assert [k.total_insts for k in summary.top_kernels] == expected


def test_change_page_query_count_does_not_grow_with_kernels(staff_client, traces, make_kernels):
    def queries_for(trace):
        with CaptureQueriesContext(connection) as captured:
            assert staff_client.get(change_url(trace.pk)).status_code == 200
        return len(captured)

    make_kernels(traces[0], [10, 20])
    make_kernels(traces[1], list(range(500)))
    queries_for(traces[0])  # warm Django's caches (content types)
    assert queries_for(traces[1]) == queries_for(traces[0])


def test_change_page_of_a_trace_without_kernels(staff_client, traces):
    html = staff_client.get(change_url("broken.run+v2@x=1")).content.decode()
    assert "No kernels (the trace is failed)." in html


def test_change_page_shows_instruction_totals_with_thousands_separators(staff_client, traces, make_kernels):
    make_kernels(traces[1], [6180720, 1234567, None])

    html = staff_client.get(change_url("bert-h100")).content.decode()
    assert "7,415,287 instructions in all" in html
    assert '<td class="num">7,415,287</td>' in html  # the context's total
    assert '<td class="num">6,180,720</td>' in html and '<td class="num">1,234,567</td>' in html


# --- an upload in progress: what it waits for ------------------------------------------


def waiting_notice(html: str) -> str | None:
    box = re.search(r'<div class="trace-waiting" role="status" id="trace-waiting">(.*?)</div>', html, re.S)
    return box and box.group(1)


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

    html = staff_client.get(change_url("llama")).content.decode()
    assert waiting_notice(html) == (
        "Waiting for 2 file(s) listed in metadata.json: traces/kernel-2-ctx_0x1.trace.xz, "
        "traces/stats_ctx_0x2 (fails CASCADE_UPLOAD_TIMEOUT after the last new file)"
    )
    assert 'id="trace-error"' not in html  # waiting is not failing


def test_uploading_trace_without_metadata_says_the_upload_is_in_progress(staff_client, make_trace):
    make_trace("half", state=TraceState.UPLOADING)
    html = staff_client.get(change_url("half")).content.decode()
    assert waiting_notice(html) == "No metadata.json yet: the upload is still in progress."


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
        assert waiting_notice(staff_client.get(change_url(trace_id)).content.decode()) is None


# --- actions --------------------------------------------------------------------------


def upload_minimal_run(s3, run_id: str) -> None:
    from django.conf import settings

    bucket = settings.CASCADE_S3_BUCKET
    prefix = f"{settings.CASCADE_S3_PREFIX}{run_id}/"
    stats = (
        b"kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, block_dimX, "
        b"block_dimY, block_dimZ, #threads, total_insts, total_reported_insts\n"
        b"kernel-1-ctx_0x1.trace.xz, _Z6vecAddPdS_S_i, 98, 1, 1, 98, 1024, 1, 1, 1024, 50066,50066\n"
    )
    s3.put_object(Bucket=bucket, Key=f"{prefix}traces/stats_ctx_0x1", Body=stats)
    s3.put_object(Bucket=bucket, Key=f"{prefix}metadata.json", Body=b'{"status": "ok"}')


def reingest(client, *trace_ids):
    response = client.post(
        CHANGELIST, {"action": "reingest", "_selected_action": list(trace_ids)}, follow=True
    )
    assert response.status_code == 200
    return [str(message) for message in response.context["messages"]]


def test_reingest_action_reads_the_trace_again_in_the_background(
    transactional_db, staff_client, make_trace, s3
):
    make_trace("vecadd", state=TraceState.FAILED, error="stats file was truncated")
    upload_minimal_run(s3, "vecadd")

    assert reingest(staff_client, "vecadd") == [
        "Trace vecadd: re-ingesting in the background; reload the page to see the result"
    ]
    reingest_module.background[0].join(30)
    trace = Trace.objects.get(pk="vecadd")
    assert (trace.state, trace.kernel_count) == (TraceState.READY, 1)
    assert list(Kernel.objects.filter(trace=trace).values_list("ctx", "kernel_id", "total_insts")) == [
        ("0x1", 1, 50066)
    ]


def test_reingest_never_parses_inside_the_web_request(staff_client, traces, monkeypatch):
    """Issue 10, bug 4: behind gunicorn's timeout a large trace was killed mid-parse."""
    request_thread = threading.current_thread()
    parsed_in = []
    monkeypatch.setattr(
        passes, "ingest_trace", lambda trace_id, **kwargs: parsed_in.append(threading.current_thread())
    )
    reingest(staff_client, "bert-h100")
    for thread in reingest_module.background:
        thread.join(30)
    assert parsed_in and request_thread not in parsed_in


def test_reingest_queues_a_celery_task_when_celery_is_configured(staff_client, traces, settings, monkeypatch):
    settings.CASCADE_CELERY_CONFIGURED = True
    queued = []
    monkeypatch.setattr(
        parse_trace_task, "delay", lambda trace_id, reparse=False: queued.append((trace_id, reparse))
    )
    assert reingest(staff_client, "bert-h100") == [
        "Trace bert-h100: queued for re-ingestion; a Celery worker parses it"
    ]
    assert queued == [("bert-h100", True)]


def test_reingest_reports_an_unreachable_broker_instead_of_failing(
    staff_client, traces, settings, monkeypatch
):
    settings.CASCADE_CELERY_CONFIGURED = True

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


def test_change_page_offers_the_actions_as_buttons(staff_client, traces):
    html = staff_client.get(change_url("bert-h100")).content.decode()
    assert 'id="trace-reingest"' in html and 'id="trace-mark-failed"' in html


def test_viewers_see_traces_but_get_no_actions(viewer_client, traces):
    response = viewer_client.get(CHANGELIST)
    assert response.status_code == 200
    assert "reingest" not in response.content.decode()
    viewer_client.post(CHANGELIST, {"action": "mark_failed", "_selected_action": ["bert-h100"]})
    assert Trace.objects.get(pk="bert-h100").state == TraceState.READY
    assert 'id="trace-reingest"' not in viewer_client.get(change_url("bert-h100")).content.decode()


# --- deleting ---------------------------------------------------------------------------


def test_delete_confirmation_counts_kernels_without_listing_them(staff_client, traces, make_kernels):
    make_kernels(traces[1], list(range(300)))
    with CaptureQueriesContext(connection) as captured:
        response = staff_client.get(delete_url("bert-h100"))
    assert response.status_code == 200
    html = response.content.decode()
    assert re.search(r"Kernels:\s*300", html, re.I)
    assert "_Z6kernel" not in html
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
    assert re.search(r"Kernels:\s*3", confirm.content.decode(), re.I)
    staff_client.post(
        CHANGELIST,
        {"action": "delete_selected", "_selected_action": ["bert-h100", "resnet-a100"], "post": "yes"},
    )
    assert list(Trace.objects.values_list("pk", flat=True)) == ["broken.run+v2@x=1"]
    assert not Kernel.objects.exists()


# --- the kernel list --------------------------------------------------------------------


def kernel_rows(response) -> list[tuple]:
    return [(k.trace_id, k.ctx, k.kernel_id) for k in response.context["cl"].result_list]


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
    html = response.content.decode()
    assert "98×1×1" in html and "1024×1×1" in html
    assert "?ctx=0xb&amp;trace=bert-h100" in html or "?trace=bert-h100&amp;ctx=0xb" in html

    response = staff_client.get(KERNELS, {"trace": "bert-h100", "ctx": "0xb"})
    assert kernel_rows(response) == [("bert-h100", "0xb", 1)]
    response = staff_client.get(KERNELS, {"traced__exact": "1", "trace": "bert-h100"})
    assert kernel_rows(response) == [("bert-h100", "0xa", 1), ("bert-h100", "0xb", 1)]


def test_kernel_changelist_fits_grid_block_totals_and_traced_beside_the_names(
    staff_client, traces, make_kernels
):
    make_kernels(traces[1], [1234567])
    Kernel.objects.update(name="_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEE")

    html = staff_client.get(KERNELS).content.decode()
    full = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEE"
    assert f'<span title="{full}">_ZN2at6native29vectorized…</span>' in html
    assert "1,234,567" in html  # totals with thousands separators
    assert 'title="bert-h100">bert-h100</a>' in html

    # One trace's kernels: the trace is the filter's, not a column repeated on every row.
    filtered = staff_client.get(KERNELS, {"trace": "bert-h100"})
    assert "trace_display" not in filtered.context["cl"].list_display
    assert "trace_display" in staff_client.get(KERNELS).context["cl"].list_display


def test_kernel_changelist_search_by_name(staff_client, traces, make_kernels):
    make_kernels(traces[1], [1, 2, 3])
    response = staff_client.get(KERNELS, {"q": "kernel2P"})
    assert kernel_rows(response) == [("bert-h100", "0x6165bdd7ec90", 2)]


def test_kernel_changelist_query_count_does_not_grow_with_rows(staff_client, traces, make_kernels):
    def queries_for(params):
        with CaptureQueriesContext(connection) as captured:
            assert staff_client.get(KERNELS, params).status_code == 200
        return len(captured)

    make_kernels(traces[0], [1, 2])
    queries_for({})  # warm Django's caches (content types)
    unfiltered = queries_for({})
    make_kernels(traces[1], list(range(90)))
    assert queries_for({}) == unfiltered
    assert queries_for({"trace": "bert-h100"}) == queries_for({"trace": "resnet-a100"})


def test_kernels_are_read_only(staff_client, traces, make_kernels):
    make_kernels(traces[1], [1])
    kernel = Kernel.objects.get()
    assert staff_client.get("/admin/traces/kernel/add/").status_code == 403
    page = staff_client.get(reverse("admin:traces_kernel_change", args=[kernel.pk])).content.decode()
    assert 'name="_save"' not in page
    assert change_url("bert-h100") in page  # the raw id field shows its trace as a link


@pytest.mark.postgres
def test_unfiltered_kernel_changelist_uses_the_planner_estimate_on_postgres(
    on_postgres, staff_client, traces, make_kernels, monkeypatch
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
    # would rather sort, so sorting is made to look expensive).
    plan = explain(response.context["cl"].queryset[:100])
    assert "Index Scan using kernel_unique_launch" in plan, plan
    assert "Sort" not in plan, plan

    filtered = staff_client.get(KERNELS, {"trace": "bert-h100"})
    assert filtered.context["cl"].result_count == 250


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
    page = staff_client.get(change_url("vllm-decode")).content.decode()
    assert "520 of 744" in page
    assert "CUDA graph" in page
    assert "killed run" in page


def test_change_page_shows_the_parser_version_and_whether_it_is_outdated(staff_client, make_trace):
    make_trace("old", state=TraceState.READY, parser_version=1)
    make_trace("current", state=TraceState.READY, parser_version=CURRENT_PARSER_VERSION)
    old = staff_client.get(change_url("old")).content.decode()
    assert "1 (outdated" in old and "--reparse-outdated" in old
    assert f"{CURRENT_PARSER_VERSION} (current)" in staff_client.get(change_url("current")).content.decode()


def test_changelist_filters_traces_an_older_parser_read(staff_client, make_trace):
    make_trace("old", state=TraceState.READY, parser_version=1)
    make_trace("failed-old", state=TraceState.FAILED, parser_version=1)
    make_trace("current", state=TraceState.READY, parser_version=CURRENT_PARSER_VERSION)
    make_trace("never-parsed", state=TraceState.UPLOADING)
    outdated = staff_client.get(CHANGELIST, {"parser": "outdated"})
    assert sorted(listed_trace_ids(outdated)) == ["failed-old", "old"]
    assert listed_trace_ids(staff_client.get(CHANGELIST, {"parser": "current"})) == ["current"]
