"""What a pass says matches what the database holds."""

import io

from django.core.management import call_command

from ingest import passes
from tests.helpers import STATS_HEADER, stats_row
from traces.models import Trace

OK = {"status": "ok", "trace_gpu_arch": "sm_90"}


def stats(count: int) -> str:
    return STATS_HEADER + "".join(stats_row(n, "0x1", name="_Z1kv", insts=7) for n in range(1, count + 1))


def test_a_re_uploaded_run_is_reported_with_the_kernels_it_now_holds(db, upload):
    upload("run", {"traces/stats_ctx_0x1": stats(1000)}, OK)
    passes.poll_bucket()
    upload("run", {"traces/stats_ctx_0x1": stats(3000)}, OK)
    out = io.StringIO()
    call_command("ingest_traces", "--trace", "run", stdout=out, stderr=io.StringIO())
    assert Trace.objects.get(pk="run").kernel_count == 3000
    assert "run: ready -> ready, 3000 kernels" in out.getvalue(), out.getvalue()


def test_the_pass_line_says_what_it_asked_of_s3_and_the_database(db, upload, settings):
    for run in ("a", "b", "c"):
        upload(run, {"traces/stats_ctx_0x1": stats(10)}, OK)
    upload("broken", {"traces/stats_ctx_0x1": "garbage\n"}, OK)
    first = passes.poll_bucket()
    assert first.cost.s3_requests >= 1 + 4 * 3  # the folders; per run a listing, metadata.json, the stats
    assert first.cost.db_queries > 0
    idle = passes.poll_bucket()
    # Nothing changed: one listing of the run folders and one page of the polling watch
    # (ingest.sweep.watch_pages: the prefix's keys, a page per CASCADE_S3_PAGE_SIZE).
    assert (idle.cost.s3_requests, idle.changes) == (2, [])
    assert idle.summary().endswith(
        f"; S3: 2 requests, {idle.cost.s3_seconds:.1f} s waiting; "
        f"database: {idle.cost.db_queries} queries, {idle.cost.db_seconds:.1f} s"
    )


def test_a_stats_line_past_the_limit_fails_the_trace_in_bounded_memory(db, upload, settings, monkeypatch):
    """A 20 MB file without a newline is refused after reading little more than the limit
    (50 MB once took 260 MB, copied quadratically)."""
    from botocore.response import StreamingBody

    settings.CASCADE_MAX_STATS_LINE = 1024 * 1024
    upload("no-newlines", {"traces/stats_ctx_0x1": b"kernel-1, " + b"x" * (20 * 1024 * 1024)}, OK)
    read = []
    chunks = StreamingBody.iter_chunks

    def counted(body, chunk_size=1024):
        for chunk in chunks(body, chunk_size):
            read.append(len(chunk))
            yield chunk

    monkeypatch.setattr(StreamingBody, "iter_chunks", counted)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="no-newlines")
    assert trace.state == "failed"
    assert trace.error.startswith(
        "traces/stats_ctx_0x1: a line of more than 1048576 bytes (CASCADE_MAX_STATS_LINE) at byte 0"
    ), trace.error
    assert sum(read) <= 3 * 1024 * 1024, f"{sum(read)} bytes read to refuse a file of one line"


def recheck_ready_now(trace_id: str) -> None:
    Trace.objects.filter(pk=trace_id).update(recheck_after=None)


def test_a_re_uploaded_ready_run_is_noticed_by_its_metadata_json(db, upload, settings):
    """A re-uploaded ready run was never noticed; the API served old data.
    Without the polling watch (which notices it at the next pass: test_simulation_watch.py)."""
    settings.CASCADE_POLL_WATCH_PAGES = 0
    upload("run", {"traces/stats_ctx_0x1": stats(10)}, OK)
    passes.poll_bucket()
    upload("run", {"traces/stats_ctx_0x1": stats(30)}, {**OK, "model": "second upload"})

    assert passes.poll_bucket().changes == [], "not due yet: CASCADE_READY_RECHECK_SECONDS"
    recheck_ready_now("run")
    result = passes.poll_bucket()
    assert [str(change) for change in result.changes] == ["run: ready -> ready, 30 kernels"]
    assert Trace.objects.get(pk="run").model == "second upload"


def test_an_unchanged_ready_run_costs_a_head_and_a_simulations_listing_when_due(db, upload, settings):
    settings.CASCADE_POLL_WATCH_PAGES = 0  # without the polling watch, which stands for the recheck
    for run in ("a", "b"):
        upload(run, {"traces/stats_ctx_0x1": stats(3)}, OK)
    passes.poll_bucket()
    recheck_ready_now("a")
    recheck_ready_now("b")
    due = passes.poll_bucket()
    # The run folders' listing, then one HEAD of each ready run's metadata.json and one listing
    # of its simulations/ folder; never a listing of the run's trace files.
    assert (due.cost.s3_requests, due.changes) == (1 + 2 * 2, [])
    assert passes.poll_bucket().cost.s3_requests == 1, "then not again before the next recheck"
