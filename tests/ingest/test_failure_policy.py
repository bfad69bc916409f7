"""One failure policy for every way a trace is ingested (ingest.failures): transient faults
retried, bad input failed at once in the user's terms, errors of ours failed after
CASCADE_PARSE_ATTEMPTS tries; a failed trace not downloaded again until its files change.

Against moto's S3 server and PostgreSQL; S3 requests counted from the server's own log.
"""

import io
import logging
import traceback

import psycopg
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from django.core.management import CommandError, call_command
from django.db import DataError, OperationalError

from ingest import decision, failures, passes, reingest, stats
from ingest.tasks import parse_trace_task
from tests.helpers import PREFIX, run_with_contexts, run_with_steps
from traces import kernel_store, services
from traces.models import Trace, TraceState

OK = {"status": "ok", "trace_gpu_arch": "sm_86"}


def run_pass(*args) -> str:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("ingest_traces", *args, stdout=out, stderr=err)
    except CommandError:
        pass  # "some traces could not be ingested": the policy's earlier tries
    return out.getvalue() + err.getvalue()


@pytest.fixture
def broken_parser(monkeypatch):
    """A bug of ours in the stats parser (not the input's fault), for every run."""

    def parse_stats_lines(*args, **kwargs):
        raise ZeroDivisionError("a bug of ours")
        yield  # a generator, as the real one

    monkeypatch.setattr(stats, "parse_stats_lines", parse_stats_lines)


def stats_gets(s3_log, run_id: str) -> int:
    return len(s3_log("GET", f"/{PREFIX}{run_id}/traces/stats"))


def test_an_error_of_ours_fails_the_trace_after_the_allowed_tries_and_then_downloads_nothing(
    transactional_db, upload, vecadd_files, broken_parser, settings, s3_log
):
    settings.CASCADE_PARSE_ATTEMPTS = 3
    upload("run", vecadd_files, metadata=OK)

    for attempt in (1, 2):
        output = run_pass()
        trace = Trace.objects.get(pk="run")
        assert trace.state == TraceState.PARSING, "tried again next pass"
        assert trace.parse_attempts == attempt
        assert f"try {attempt} of 3 failed" in output
    run_pass()
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.error) == (
        TraceState.FAILED,
        "internal error while parsing: ZeroDivisionError: a bug of ours",
    )
    downloads = stats_gets(s3_log, "run")
    assert downloads == 3

    for _ in range(3):
        Trace.objects.filter(pk="run").update(recheck_after=None)  # its recheck is due: listed again
        run_pass()
    assert stats_gets(s3_log, "run") == downloads, "a failed trace is not downloaded again"
    assert Trace.objects.get(pk="run").state == TraceState.FAILED


def test_each_try_is_logged_with_its_traceback(db, upload, vecadd_files, broken_parser, caplog):
    upload("run", vecadd_files, metadata=OK)
    with caplog.at_level(logging.ERROR, logger="ingest"):
        passes.poll_bucket()
    logged = [record for record in caplog.records if record.name == "ingest.failures"]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert "try 1 of 3" in logged[0].getMessage()


def test_new_files_start_the_count_over(transactional_db, upload, vecadd_files, broken_parser, settings):
    settings.CASCADE_PARSE_ATTEMPTS = 2
    upload("run", vecadd_files, metadata=OK)
    run_pass()
    assert Trace.objects.get(pk="run").parse_attempts == 1
    upload("run", {**vecadd_files, "notes.txt": "again"}, metadata=OK)
    run_pass()
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.parse_attempts) == (TraceState.PARSING, 1)


def test_a_transient_fault_leaves_the_trace_as_it_is(db, upload, vecadd_files, monkeypatch):
    upload("run", vecadd_files, metadata=OK)

    def database_away(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(decision, "parse_into", database_away)
    result = passes.poll_bucket()
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.parse_attempts, trace.error) == (TraceState.UPLOADING, 0, None)
    assert result.errors and "OperationalError" in result.errors[0]


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("connection lost"),
        psycopg.OperationalError("server closed the connection unexpectedly"),
        ConnectionResetError(),
        EndpointConnectionError(endpoint_url="http://s3"),
        ClientError({"Error": {"Code": "InternalError"}}, "GetObject"),
        services.TraceBusy("held"),
    ],
)
def test_transient_faults_are_retried_later(error):
    assert failures.failure_kind(error) == failures.TRANSIENT


@pytest.mark.parametrize(
    "error",
    [
        failures.TraceInputError("bad"),
        DataError("value too long"),
        psycopg.errors.NumericValueOutOfRange("out of range"),  # from inside a COPY: psycopg's own
        kernel_store.TraceDataTooLarge("too many contexts"),
    ],
)
def test_bad_input_fails_at_once(error):
    assert failures.failure_kind(error) == failures.INPUT


def test_anything_else_is_ours():
    assert failures.failure_kind(ValueError("Exceeds the limit (4300 digits)")) == failures.INTERNAL
    assert failures.failure_message(KeyError("x")) == "internal error while parsing: KeyError: 'x'"


def test_celery_goes_through_the_same_policy(db, eager, upload, vecadd_files, broken_parser, settings):
    settings.CASCADE_PARSE_ATTEMPTS = 2
    upload("run", vecadd_files, metadata=OK)
    passes.scan_bucket()

    parse_trace_task.delay("run")  # no autoretry for an error of ours: one try, counted
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.parse_attempts) == (TraceState.PARSING, 1)
    parse_trace_task.delay("run")  # the next poll's
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.error) == (
        TraceState.FAILED,
        "internal error while parsing: ZeroDivisionError: a bug of ours",
    )


def test_nul_in_metadata_fails_the_trace_with_a_clear_error(transactional_db, upload, vecadd_files):
    metadata = {**OK, "model": "opt\u0000125m", "layers": ["step 0\u0000", "decode"]}
    upload("nul", vecadd_files, metadata=metadata)
    run_pass()
    trace = Trace.objects.get(pk="nul")
    assert trace.state == TraceState.FAILED
    assert "NUL" in trace.error or "model" in trace.error or "layers" in trace.error


def test_the_failure_is_written_whatever_the_run_fields_hold(db, make_trace):
    trace = make_trace("run", state=TraceState.PARSING)
    run = {
        "model": "a\u0000b",
        "layers": ["x\u0000", {"k\u0000": "\ud800"}],
        "metadata_json": '{"m":"\u0000"}',
    }
    services.trace_fail(trace, "bad \u0000 input", fingerprint="f", run=run)
    trace.refresh_from_db()
    assert trace.state == TraceState.FAILED
    assert trace.error == "bad \ufffd input"
    assert trace.model == "a\ufffdb" and trace.layers == ["x\ufffd", {"k\ufffd": "\ufffd"}]


def test_more_contexts_than_a_trace_holds_fail_it_in_the_users_terms(transactional_db, upload, settings):
    upload("contexts", run_with_contexts(kernel_store.MAX_CONTEXTS + 1), metadata=OK)
    run_pass()
    trace = Trace.objects.get(pk="contexts")
    assert trace.state == TraceState.FAILED
    assert trace.error.startswith("more than 32,768 contexts (CUDA context and device pairs) in one run")


def test_steps_past_the_columns_never_leave_the_trace_unfinished(transactional_db, upload):
    upload("steps", run_with_steps(40_000), metadata=OK)
    run_pass()
    trace = Trace.objects.get(pk="steps")
    # Refused by the timeline's reader (its steps unused) or by the database: never stuck.
    assert (trace.state == TraceState.FAILED and trace.error) or (
        trace.state == TraceState.READY and "40000 steps" in (trace.timing_error or "")
    ), (trace.state, trace.error, trace.timing_error)


def test_a_failure_whose_run_fields_are_refused_is_written_without_them(db, make_trace, monkeypatch):
    trace = make_trace("run", state=TraceState.UPLOADING)
    real = services._write_failure

    def refuse_run_fields(trace, *args):
        if trace.model is not None:
            raise DataError("the database refuses this model")
        return real(trace, *args)

    monkeypatch.setattr(services, "_write_failure", refuse_run_fields)
    services.trace_fail(trace, "bad input", fingerprint="f", run={"model": "m", "layers": ["a"]})
    trace.refresh_from_db()
    assert (trace.state, trace.error, trace.model, trace.layers) == (TraceState.FAILED, "bad input", None, [])


def test_ingest_traces_trace_goes_through_the_same_policy(
    transactional_db, upload, vecadd_files, broken_parser, settings
):
    settings.CASCADE_PARSE_ATTEMPTS = 2
    upload("run", vecadd_files, metadata=OK)
    run_pass("--trace", "run")
    assert Trace.objects.get(pk="run").parse_attempts == 1
    run_pass("--trace", "run")
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.error) == (
        TraceState.FAILED,
        "internal error while parsing: ZeroDivisionError: a bug of ours",
    )


def test_the_admins_reingest_without_celery_logs_an_error_of_ours_with_one_traceback(
    transactional_db, upload, vecadd_files, broken_parser, settings, caplog
):
    settings.CASCADE_PARSE_ATTEMPTS = 3
    upload("run", vecadd_files, metadata=OK)
    passes.scan_bucket()

    with caplog.at_level(logging.DEBUG, logger="ingest"):  # pytest's handler is on `ingest` too
        reingest.reingest_in_background("run")  # what the admin's background worker runs
    ingest_log = [record for record in caplog.records if record.name.startswith("ingest")]

    assert Trace.objects.get(pk="run").parse_attempts == 1
    with_traceback = [record for record in ingest_log if record.exc_info is not None]
    assert len(with_traceback) == 1, "the policy logs the try with its traceback, once"
    assert "ZeroDivisionError: a bug of ours" in "".join(
        traceback.format_exception(*with_traceback[0].exc_info)
    )
    said = [record for record in ingest_log if record.name == "ingest.reingest"]
    assert [record.getMessage() for record in said] == [
        "run: re-ingest: try 1 of 3 failed, the next pass tries again: "
        "internal error while parsing: ZeroDivisionError: a bug of ours"
    ]


def test_celerys_soft_time_limit_is_a_timeout():
    from celery.exceptions import SoftTimeLimitExceeded  # loaded, as in a worker

    assert failures.failure_kind(SoftTimeLimitExceeded()) == failures.TIMEOUT


@pytest.mark.parametrize("sweeping", [False, True], ids=["polling", "sweeping with events on"])
def test_a_re_upload_whose_parse_met_a_transient_fault_is_parsed_by_a_later_pass(
    db, upload, vecadd_files, monkeypatch, settings, sweeping
):
    """A ready trace's new files are registered, then the parse meets S3 or the database away:
    the trace keeps its old launches, and a later pass parses the new files, though the
    listing it registered no longer differs from the bucket's (nor the metadata.json ETag a
    ready recheck compares)."""
    upload("run", vecadd_files, metadata=OK)
    passes.poll_bucket()
    assert Trace.objects.get(pk="run").state == TraceState.READY
    upload("run", vecadd_files, metadata={**OK, "model": "re-uploaded"})
    Trace.objects.filter(pk="run").update(recheck_after=None)  # its ready recheck is due

    real_parse_into = decision.parse_into

    def database_away(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(decision, "parse_into", database_away)
    assert passes.poll_bucket().errors
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.model) == (TraceState.READY, None), "the old launches still served"

    monkeypatch.setattr(decision, "parse_into", real_parse_into)
    if sweeping:
        settings.CASCADE_SQS_QUEUE_URL = "http://127.0.0.1:1/queue/unused"
    passes.poll_bucket(sweep=sweeping)
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.model) == (TraceState.READY, "re-uploaded")
    assert trace.parsed_fingerprint == trace.files_fingerprint()
