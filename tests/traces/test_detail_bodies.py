"""A ready trace's detail written once, then served from its written bytes.

The contract: once a parse makes a large trace ready, its detail is written in the background
in identity, gzip and zstd, byte for byte the answer a GET computes; GETs then stream those
bytes (a Content-Length, one range with a 206, the same ETag, a 304 as before), on every web
node since they live in the database. A GET before the write, or after the trace changed, is
answered as before. The bodies go with the trace, are written again after a re-parse (the
old ones never served again), and CASCADE_DETAIL_BODIES_BYTES bounds them.
"""

import io
from pathlib import Path

import orjson
import pytest
from django.core.management import call_command
from django.core.signals import request_finished
from django.db import close_old_connections, connection
from django.test import RequestFactory

from ingest import passes, receivers
from tests.helpers import content, decompress, ingested, kernel_rows, lock_held_elsewhere, shared_fixture
from traces import detail_bodies, services, views
from traces.models import DetailBody, DetailBodyChunk, Trace, TraceState
from traces.views import TraceViewSet

LARGE = detail_bodies.STREAM_KERNELS_ABOVE + 500
URL = "/api/traces/{}"
CODINGS = ("identity", "gzip", "zstd")
SAMPLES = Path(__file__).resolve().parents[2] / "samples"
OK = {"status": "ok", "trace_gpu_arch": "sm_80"}


@pytest.fixture(autouse=True)
def detail_bodies_on(settings):
    """Written once after a parse, as deployed (tests/conftest.py turns it off elsewhere); no
    background write left running after a test."""
    from ingest import bodies

    settings.CASCADE_DETAIL_BODIES_BYTES = 20 * 1024**3
    yield
    assert bodies.bodies.wait_idle(60)


def get(api, trace_id: str, coding: str = "identity", **headers):
    return api.get(URL.format(trace_id), HTTP_ACCEPT_ENCODING=coding, **headers)


def written_bytes(trace_id: str, coding: str) -> bytes:
    body = DetailBody.objects.get(trace_id=trace_id, coding=coding)
    return b"".join(detail_bodies.read_body(body.pk, 0, body.size))


def served_as_written(response) -> bool:
    """A written body's answer: its length known, ranges offered."""
    return response.get("Accept-Ranges") == "bytes" and response.has_header("Content-Length")


@pytest.fixture
def small_pieces(monkeypatch):
    """Pieces of 4 kB, so that a test's body spans many of them and ranges cross their edges."""
    monkeypatch.setattr(detail_bodies, "CHUNK_BYTES", 4096)


@pytest.fixture
def every_detail_large(monkeypatch):
    """A sample's or a real run's few hundred launches treated as a large detail (streamed,
    written once), so that real traces go through the large path end to end."""
    monkeypatch.setattr(detail_bodies, "STREAM_KERNELS_ABOVE", 0)
    monkeypatch.setattr(views, "STREAM_KERNELS_ABOVE", 0)


@pytest.fixture
def big(db, small_pieces):
    return ingested("big", kernel_rows(LARGE))


def upload_sample(upload, name: str) -> str:
    """A shipped sample run, uploaded file by file, metadata.json last."""
    folder = SAMPLES / name
    files = {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != "metadata.json"
    }
    upload(name, files, metadata=(folder / "metadata.json").read_bytes())
    return name


def upload_real_run(upload, prefix: str) -> str:
    """A real tracer's files from a public repository (shared_fixture("real-tracer")), as a run."""
    folder = shared_fixture("real-tracer")
    files = {
        "traces/" + path.name.removeprefix(prefix + "__traces__"): path.read_bytes()
        for path in sorted(folder.glob(prefix + "__traces__*"))
    }
    run_id = prefix.split("+")[0].lower()
    upload(run_id, files, metadata=OK)
    return run_id


RUNS = [
    ("sample", "sample__facebook_opt-125m__a100-e2e"),
    ("sample", "sample__facebook_opt-125m__rtx2060-e2e"),
    ("real", "Jen1us+Accel-MQ-Ramulator__hw_run"),
    ("real", "liuweibupt+accel-sim-framework__modal__artifacts__fp16-512x512x512"),
]


@pytest.mark.parametrize(("kind", "name"), RUNS)
def test_each_written_coding_is_the_computed_answer_byte_for_byte(
    db, api, upload, every_detail_large, small_pieces, kind, name
):
    trace_id = upload_sample(upload, name) if kind == "sample" else upload_real_run(upload, name)
    passes.poll_bucket()
    assert Trace.objects.get(pk=trace_id).state == TraceState.READY
    computed = {}
    for coding in CODINGS:
        first = get(api, trace_id, coding)
        assert first.status_code == 200 and not served_as_written(first)  # before the write: as today
        computed[coding] = (content(first), first["ETag"])

    written = detail_bodies.detail_bodies_write(trace_id)

    assert set(written) == set(CODINGS)
    for coding in CODINGS:
        body, etag = computed[coding]
        assert written[coding] == len(body)
        assert written_bytes(trace_id, coding) == body
        again = get(api, trace_id, coding)
        assert served_as_written(again)
        assert content(again) == body and again["ETag"] == etag
    assert orjson.loads(computed["identity"][0])["id"] == trace_id


@pytest.mark.parametrize("coding", CODINGS)
def test_a_large_trace_is_written_then_served_with_its_headers(api, big, coding, django_assert_num_queries):
    before = get(api, "big", coding)
    computed = content(before)
    assert before.streaming and not served_as_written(before)

    detail_bodies.detail_bodies_write("big")
    pieces = DetailBodyChunk.objects.filter(body__trace_id="big", body__coding=coding).count()
    assert pieces == -(-len(computed) // detail_bodies.CHUNK_BYTES) > 1

    # The token's check, the trace's row with its body, then a query a piece (psycopg's own on
    # PostgreSQL, which Django does not count): no kernel is read.
    with django_assert_num_queries(2 if connection.vendor == "postgresql" else 2 + pieces):
        served = get(api, "big", coding)
        body = content(served)
    assert body == computed
    assert int(served["Content-Length"]) == len(body)
    for header in ("Content-Type", "ETag", "Vary", "Cache-Control"):
        assert served[header] == before[header], header
    assert served.get("Content-Encoding") == before.get("Content-Encoding")
    if coding != "identity":
        assert decompress(body, coding) == written_bytes("big", "identity")


@pytest.mark.parametrize("coding", ["identity", "gzip"])
def test_ranges_of_a_written_body(api, big, coding):
    detail_bodies.detail_bodies_write("big")
    whole = content(get(api, "big", coding))
    size, etag = len(whole), get(api, "big", coding)["ETag"]
    edge = detail_bodies.CHUNK_BYTES
    for header, (start, stop) in {
        "bytes=0-99": (0, 100),
        f"bytes={edge - 10}-{edge + 9}": (edge - 10, edge + 10),  # across two pieces
        f"bytes={edge}-": (edge, size),
        "bytes=-50": (size - 50, size),
        f"bytes=10-{size * 2}": (10, size),  # a last byte past the end: up to the end
    }.items():
        part = get(api, "big", coding, HTTP_RANGE=header)
        assert part.status_code == 206, header
        assert content(part) == whole[start:stop], header
        assert part["Content-Range"] == f"bytes {start}-{stop - 1}/{size}"
        assert int(part["Content-Length"]) == stop - start
        assert part["ETag"] == etag

    past = get(api, "big", coding, HTTP_RANGE=f"bytes={size}-")
    assert past.status_code == 416 and past["Content-Range"] == f"bytes */{size}"
    # If-Range naming this body: the range; another (the trace changed since): the whole body.
    assert get(api, "big", coding, HTTP_RANGE="bytes=0-9", HTTP_IF_RANGE=etag).status_code == 206
    other = get(api, "big", coding, HTTP_RANGE="bytes=0-9", HTTP_IF_RANGE='"older"')
    assert other.status_code == 200 and content(other) == whole
    # Several ranges, or a unit that is not bytes: the whole body, as RFC 9110 allows.
    for header in ("bytes=0-9,20-29", "items=0-9", "bytes=9-0"):
        answer = get(api, "big", coding, HTTP_RANGE=header)
        assert answer.status_code == 200 and content(answer) == whole, header


# The pieces' query made slow (a few ms a piece), so that a client hanging up always finds it
# still running on PostgreSQL and it is cancelled inside the test's transaction.
SLOW_PIECES = (
    "SELECT seq, data FROM (SELECT seq, data FROM traces_detailbodychunk"
    " WHERE body_id = %s AND seq BETWEEN %s AND %s ORDER BY seq) AS piece"
    " WHERE pg_sleep(0.005) IS NOT NULL"
)


def test_a_client_that_hangs_up_leaves_the_connection_usable(api, api_token, big, monkeypatch):
    detail_bodies.detail_bodies_write("big")
    whole = content(get(api, "big"))
    with monkeypatch.context() as slow:
        if connection.vendor == "postgresql":
            slow.setattr(detail_bodies, "SELECT_PIECES", SLOW_PIECES)
        # The view itself (the test client's wrapper would end the test's transaction on close).
        request = RequestFactory().get(URL.format("big"), HTTP_AUTHORIZATION=f"Bearer {api_token}")
        cut = TraceViewSet.as_view({"get": "retrieve"})(request, trace_id="big")
        assert served_as_written(cut)
        next(iter(cut.streaming_content))
        # What the server does when the client goes (the pieces' query cancelled), without the
        # end of request's closing of the database connection.
        request_finished.disconnect(close_old_connections)
        try:
            cut.close()
        finally:
            request_finished.connect(close_old_connections)

    assert content(get(api, "big")) == whole


def test_if_none_match_and_head_of_a_written_body(api, big, django_assert_num_queries):
    detail_bodies.detail_bodies_write("big")
    etag = get(api, "big", "gzip")["ETag"]
    # Each: the token's check, the trace's row.
    with django_assert_num_queries(2):
        assert get(api, "big", "zstd", HTTP_IF_NONE_MATCH=etag).status_code == 304
    with django_assert_num_queries(2):
        head = api.head(URL.format("big"), HTTP_ACCEPT_ENCODING="gzip")
    assert head.status_code == 200 and head["ETag"] == etag


def test_the_bodies_go_with_their_trace(api, big):
    detail_bodies.detail_bodies_write("big")
    assert DetailBody.objects.filter(trace_id="big").count() == 3

    services.trace_delete("big")

    assert not DetailBody.objects.exists() and not DetailBodyChunk.objects.exists()
    assert get(api, "big").status_code == 404


def test_a_reparse_writes_them_again_and_the_old_ones_are_never_served(api, big):
    detail_bodies.detail_bodies_write("big")
    old_etag = get(api, "big")["ETag"]

    ingested("big", kernel_rows(LARGE + 7))  # the kernels changed: a re-parse

    before = get(api, "big")
    computed = content(before)
    assert not served_as_written(before) and before["ETag"] != old_etag
    assert len(orjson.loads(computed)["kernels"]) == LARGE + 7
    written = detail_bodies.detail_bodies_write("big")
    assert set(written) == set(CODINGS)
    assert DetailBody.objects.filter(trace_id="big").count() == 3  # the old version went
    after = get(api, "big")
    assert served_as_written(after) and after["ETag"] == before["ETag"]
    assert content(after) == computed


def test_a_changed_trace_row_is_computed_again(api, big):
    detail_bodies.detail_bodies_write("big")

    services.traces_mark_sample(["big"])  # `sample` is in the detail: its ETag moves

    answer = get(api, "big", "gzip")
    assert not served_as_written(answer)
    assert orjson.loads(decompress(content(answer), "gzip"))["sample"] is True


def test_only_ready_large_traces_are_written(db, make_trace, make_kernels):
    small = ingested("small", kernel_rows(10))
    parsing = make_trace("parsing", state=TraceState.PARSING)
    make_kernels(parsing, [1] * LARGE)
    assert detail_bodies.detail_bodies_write(small.pk) == {}
    assert detail_bodies.detail_bodies_write("parsing") == {}
    assert detail_bodies.detail_bodies_write("no-such-trace") == {}
    assert not DetailBody.objects.exists()


def test_nothing_is_written_while_another_pass_holds_the_trace(big, monkeypatch):
    """A pass parsing it again (which asks for a write when it commits), or a delete."""
    monkeypatch.setattr(detail_bodies, "LOCK_WAIT_SECONDS", 0)
    with lock_held_elsewhere("big"):
        assert detail_bodies.detail_bodies_write("big") == {}
    assert not DetailBody.objects.exists()
    assert set(detail_bodies.detail_bodies_write("big")) == set(CODINGS)


def test_written_once_per_version(big):
    assert detail_bodies.detail_bodies_write("big")
    assert detail_bodies.detail_bodies_write("big") == {}
    assert DetailBody.objects.count() == 3


def test_a_coding_larger_than_the_bound_is_not_kept(api, big, settings):
    gzip_size = len(content(get(api, "big", "gzip")))
    identity_size = len(content(get(api, "big")))
    settings.CASCADE_DETAIL_BODIES_BYTES = gzip_size + 1
    assert identity_size > settings.CASCADE_DETAIL_BODIES_BYTES

    written = detail_bodies.detail_bodies_write("big")

    assert set(written) == {"gzip", "zstd"}
    assert not DetailBodyChunk.objects.filter(body__coding="identity").exists()
    assert served_as_written(get(api, "big", "gzip"))
    assert not served_as_written(get(api, "big"))


def test_the_bound_removes_the_oldest_written_traces_first(api, big, settings):
    detail_bodies.detail_bodies_write("big")
    one_trace = sum(DetailBody.objects.values_list("size", flat=True))
    ingested("second", kernel_rows(LARGE))
    settings.CASCADE_DETAIL_BODIES_BYTES = one_trace + one_trace // 2

    detail_bodies.detail_bodies_write("second")

    assert sum(DetailBody.objects.values_list("size", flat=True)) <= settings.CASCADE_DETAIL_BODIES_BYTES
    assert DetailBody.objects.filter(trace_id="second").count() == 3
    assert not served_as_written(get(api, "big"))  # its identity body, the oldest written, went first


def test_nothing_is_written_when_the_bound_is_zero(api, big, settings):
    settings.CASCADE_DETAIL_BODIES_BYTES = 0
    assert detail_bodies.detail_bodies_write("big") == {}
    assert get(api, "big").status_code == 200 and not DetailBody.objects.exists()


@pytest.mark.postgres("PostgreSQL's TOAST storage of the pieces")
def test_pieces_are_stored_without_postgresql_compression(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'traces_detailbodychunk'::regclass "
            "AND attname = 'data'"
        )
        assert cursor.fetchone()[0] == "e"


# --- end to end: a pass, the background write, a re-parse, a delete ---------------------------


@pytest.fixture
def writer_process_in_this_one(monkeypatch):
    """`manage.py write_detail_bodies`, which a one-shot pass starts and does not wait for, run
    here and waited for: a process of its own would not know the test's database."""
    from ingest import bodies

    started = []

    def write_in_a_process(trace_ids):
        started.append(list(trace_ids))
        call_command("write_detail_bodies", *trace_ids, stdout=io.StringIO())

    monkeypatch.setattr(bodies, "write_in_a_process", write_in_a_process)
    return started


def test_a_one_shot_pass_starts_a_process_of_its_own_for_the_write_and_does_not_wait(monkeypatch, settings):
    from ingest import bodies

    started = []
    monkeypatch.setattr(
        bodies.subprocess, "Popen", lambda command, **options: started.append((command, options))
    )
    bodies.write_in_a_process(["a", "b"])
    ((command, options),) = started
    assert command[1:] == [str(settings.BASE_DIR / "manage.py"), "write_detail_bodies", "a", "b"]
    assert options["start_new_session"] is True  # it outlives the command, whatever its terminal does


def test_a_pass_writes_the_detail_in_the_background_and_a_reparse_again(
    transactional_db, api, upload, every_detail_large, small_pieces, writer_process_in_this_one
):
    name = upload_sample(upload, "sample__facebook_opt-125m__a100-e2e")
    out = io.StringIO()
    call_command("ingest_traces", stdout=out, stderr=io.StringIO())
    assert writer_process_in_this_one == [[name]]  # once its pass is done
    first = {body.coding: body.updated_at for body in DetailBody.objects.filter(trace_id=name)}
    assert set(first) == set(CODINGS)
    written = {coding: content(get(api, name, coding)) for coding in CODINGS}
    assert all(served_as_written(get(api, name, coding)) for coding in CODINGS)

    # The same answer computed, as a GET before the write gets it.
    DetailBody.objects.all().delete()
    for coding in CODINGS:
        computed = get(api, name, coding)
        assert not served_as_written(computed)
        assert content(computed) == written[coding]

    # A re-parse (an operator's re-ingest): its kernels replaced, its detail written again.
    call_command("ingest_traces", "--reparse", "--trace", name, stdout=io.StringIO(), stderr=io.StringIO())
    again = {body.coding: body.updated_at for body in DetailBody.objects.filter(trace_id=name)}
    assert set(again) == set(CODINGS)
    assert all(again[coding] > first[coding] for coding in CODINGS)
    assert served_as_written(get(api, name))

    services.trace_delete(name)
    assert not DetailBodyChunk.objects.exists()


def test_without_celery_a_web_process_writes_it_on_its_background_thread(transactional_db, small_pieces):
    """An operator's re-ingest in the web process: its parse's commit asks, the thread writes."""
    from ingest import bodies

    trace = ingested("big", kernel_rows(LARGE))

    receivers.write_detail_bodies_soon(trace=trace)

    assert bodies.bodies.wait_idle(60)
    assert set(DetailBody.objects.filter(trace_id="big").values_list("coding", flat=True)) == set(CODINGS)


def test_with_celery_the_write_is_a_task(db, settings, monkeypatch, big):
    from ingest import tasks

    settings.CASCADE_CELERY_CONFIGURED = True
    asked = []
    monkeypatch.setattr(tasks.write_detail_bodies_task, "delay", asked.append)

    receivers.write_detail_bodies_soon(trace=big)
    receivers.write_detail_bodies_soon(trace=ingested("small", kernel_rows(10)))

    assert asked == ["big"]
