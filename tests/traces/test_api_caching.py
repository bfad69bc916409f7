"""Compressed and cacheable traces: Accept-Encoding, ETag, If-None-Match, Cache-Control.

The contract, as these tests check it:
- `Accept-Encoding` chooses zstd or gzip (zstd at equal q, q=0 refuses, no header: none); the
  body decompresses to exactly the bytes of the plain answer, a large detail is compressed
  chunk by chunk as it streams (no Content-Length) and memory stays at one chunk.
- Every JSON answer of the list and the detail has a strong `ETag`, one per coding, and
  `Cache-Control: private, no-cache`, `Vary: Accept, Accept-Encoding`.
- `If-None-Match` naming the current representation (in any coding, weakly, in a list, or `*`)
  is a 304 without a body, and for a detail without reading a kernel.
- What every route shares (a 304's headers, errors never compressed, the token checked before
  If-None-Match, a small list or detail compressed) is the endpoint battery's
  (tests/traces/test_endpoint_battery.py).
- The ETag changes when the answer does: a detail when its trace is re-ingested, changes state
  or metadata; a list when a trace is added, changed, deleted or filtered out.
"""

import gzip
import zlib

import orjson
import pytest
import zstandard
from django.db import connection
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import content, decompress, ingested, kernel_rows, streamed_peak
from traces import http, services
from traces.models import Trace, TraceState
from traces.views import STREAM_KERNELS_ABOVE

# --- helpers ----------------------------------------------------------------------------------


def tag_digest(tag: str) -> str:
    return tag.strip('"').removesuffix("-gzip").removesuffix("-zstd")


@pytest.fixture
def big(db) -> Trace:
    """A ready trace large enough to be streamed."""
    return ingested("big", kernel_rows(STREAM_KERNELS_ABOVE + 1000))


@pytest.fixture
def small(db) -> Trace:
    """A ready trace sent in one piece."""
    return ingested("small", kernel_rows(3))


@pytest.fixture
def listed(make_trace):
    """Traces enough for a list of several kilobytes."""
    for n in range(12):
        make_trace(f"run-{n:02}", state=TraceState.READY if n % 2 else TraceState.FAILED)


# --- Accept-Encoding ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept_encoding", "coding"),
    [
        (None, "identity"),  # curl without --compressed: plain bytes
        ("", "identity"),
        ("gzip", "gzip"),
        ("gzip, deflate", "gzip"),  # requests, httpx
        ("zstd", "zstd"),
        ("gzip, deflate, br, zstd", "zstd"),  # browsers: zstd at equal q
        ("gzip;q=0.8, zstd;q=0.8", "zstd"),
        ("gzip;q=1.0, zstd;q=0.5", "gzip"),
        ("gzip;q=0", "identity"),
        ("gzip;q=0, zstd;q=0", "identity"),
        ("zstd;q=0, gzip", "gzip"),
        ("*", "zstd"),
        ("*;q=0", "identity"),
        ("*, zstd;q=0", "gzip"),
        ("identity", "identity"),
        ("identity;q=1, gzip;q=0.5", "identity"),
        ("gzip, identity;q=0", "gzip"),
        ("x-gzip", "gzip"),
        ("GZip", "gzip"),
        ("br, deflate", "identity"),
        ("gzip;q=abc", "identity"),  # a q that cannot be read refuses its coding
        ("gzip;q=2", "identity"),
        ("gzip;q=nan", "identity"),
        (" ,;, gzip ;q= 0.5 ,", "gzip"),
    ],
)
def test_accept_encoding_chooses_the_coding(accept_encoding, coding):
    assert http.choose_coding(accept_encoding) == coding


@given(st.text())
def test_any_accept_encoding_or_if_none_match_is_read_without_error(header):
    assert http.choose_coding(header) in ("identity", "gzip", "zstd")
    assert http.if_none_match_hits(header, "0123") in (True, False)


# --- compression ----------------------------------------------------------------------------------


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
@pytest.mark.parametrize("trace", ["big", "small"])
def test_a_compressed_detail_decompresses_to_exactly_the_plain_bytes(api, request, trace, coding):
    request.getfixturevalue(trace)
    plain = api.get(f"/api/traces/{trace}")
    assert "Content-Encoding" not in plain
    identity = content(plain)

    compressed = api.get(f"/api/traces/{trace}", HTTP_ACCEPT_ENCODING=coding)

    assert compressed.status_code == 200
    assert compressed["Content-Encoding"] == coding
    assert compressed["Content-Type"] == "application/json"
    assert compressed["Vary"] == "Accept, Accept-Encoding"
    assert compressed.streaming is (trace == "big")
    data = content(compressed)
    assert decompress(data, coding) == identity
    assert len(data) < len(identity) / 8 if trace == "big" else True


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
def test_a_streamed_detail_is_compressed_chunk_by_chunk(api, big, coding):
    response = api.get("/api/traces/big", HTTP_ACCEPT_ENCODING=coding)

    assert response.streaming and not response.has_header("Content-Length")
    chunks = iter(response.streaming_content)
    # The first chunk decodes on its own (flushed): the client starts reading the trace at once.
    first = next(chunks)
    if coding == "gzip":
        head = zlib.decompressobj(31).decompress(first)
    else:
        head = zstandard.ZstdDecompressor().decompressobj().decompress(first)
    assert head.startswith(b'{"id":"big","state":"ready"')
    assert len(list(chunks)) > (STREAM_KERNELS_ABOVE + 1000) // 2000  # one or more per kernel chunk


def test_gzip_q0_gives_the_plain_bytes(api, big):
    plain = content(api.get("/api/traces/big"))

    response = api.get("/api/traces/big", HTTP_ACCEPT_ENCODING="gzip;q=0")

    assert not response.has_header("Content-Encoding")
    assert content(response) == plain
    assert response["Vary"] == "Accept, Accept-Encoding"  # another Accept-Encoding gets another body


def test_a_short_list_is_sent_plain(api, make_trace):
    make_trace("only")
    plain = api.get("/api/traces").content
    assert len(plain) <= http.COMPRESS_ABOVE

    response = api.get("/api/traces", HTTP_ACCEPT_ENCODING="gzip")

    assert not response.has_header("Content-Encoding")
    assert response.content == plain
    assert response["ETag"] == api.get("/api/traces")["ETag"]  # the same representation


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
def test_memory_stays_flat_while_a_compressed_detail_streams(api, db, coding):
    ingested("ten", kernel_rows(10_000))
    ingested("forty", kernel_rows(40_000))

    ten_bytes, ten_peak = streamed_peak(api.get("/api/traces/ten", HTTP_ACCEPT_ENCODING=coding), coding)
    forty_bytes, forty_peak = streamed_peak(api.get("/api/traces/forty", HTTP_ACCEPT_ENCODING=coding), coding)

    assert forty_bytes > 10_000_000 and forty_bytes > 3.5 * ten_bytes
    # A chunk of kernels at a time (a few MB), whatever the trace's size: 4x the launches, not
    # 4x the memory.
    assert forty_peak < 1.5 * ten_peak, (ten_peak, forty_peak)


@pytest.mark.postgres("the held cursor is PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_a_client_that_hangs_up_releases_the_kernels_cursor(api_token, db):
    ingested("big", kernel_rows(STREAM_KERNELS_ABOVE + 1000))
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_token}")
    response = client.get("/api/traces/big", HTTP_ACCEPT_ENCODING="gzip")
    next(iter(response.streaming_content))

    response.close()  # what the WSGI server does when the client is gone

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_cursors WHERE name LIKE 'kernels_%%'")
        assert cursor.fetchone() == (0,)


# --- ETag, If-None-Match, 304 ---------------------------------------------------------------


def test_each_coding_has_its_own_etag_and_any_of_them_matches(api, big):
    tags = {
        coding: api.get("/api/traces/big", HTTP_ACCEPT_ENCODING=coding)["ETag"]
        for coding in ("identity", "gzip", "zstd")
    }
    digest = tag_digest(tags["identity"])
    assert tags == {"identity": f'"{digest}"', "gzip": f'"{digest}-gzip"', "zstd": f'"{digest}-zstd"'}

    # A client that cached the gzip answer and now accepts zstd holds the current content: 304,
    # with the ETag the 200 would have carried.
    response = api.get("/api/traces/big", HTTP_ACCEPT_ENCODING="zstd", HTTP_IF_NONE_MATCH=tags["gzip"])
    assert response.status_code == 304
    assert response["ETag"] == tags["zstd"]


@pytest.mark.parametrize(
    "if_none_match",
    [
        '"{digest}"',
        'W/"{digest}"',  # weak comparison
        '"stale", W/"{digest}-gzip", "other"',
        '"a","{digest}-zstd"',
        "*",
    ],
)
def test_if_none_match_compares_weakly_and_takes_lists_and_star(api, big, if_none_match):
    digest = tag_digest(api.get("/api/traces/big")["ETag"])

    response = api.get("/api/traces/big", HTTP_IF_NONE_MATCH=if_none_match.format(digest=digest))

    assert response.status_code == 304


@pytest.mark.parametrize("if_none_match", ['"stale"', 'W/"stale"', "garbage", '"{digest}-br"', '"{digest}x"'])
def test_if_none_match_with_other_tags_gets_the_body(api, small, if_none_match):
    plain = api.get("/api/traces/small")
    digest = tag_digest(plain["ETag"])

    response = api.get("/api/traces/small", HTTP_IF_NONE_MATCH=if_none_match.format(digest=digest))

    assert response.status_code == 200
    assert response.content == plain.content
    assert response["ETag"] == plain["ETag"]


def test_a_304_reads_the_trace_row_only(api, big, django_assert_num_queries):
    tag = api.get("/api/traces/big")["ETag"]

    with django_assert_num_queries(2) as queries:  # the token, the trace's updated_at
        response = api.get("/api/traces/big", HTTP_ACCEPT_ENCODING="gzip", HTTP_IF_NONE_MATCH=tag)

    assert response.status_code == 304
    sql = " ".join(query["sql"] for query in queries.captured_queries)
    assert "traces_kernel" not in sql and "traces_step" not in sql


# --- the detail's ETag changes when the detail does -----------------------------------------------


def detail_etag(api, trace_id: str) -> str:
    return api.get(f"/api/traces/{trace_id}")["ETag"]


def test_the_detail_etag_changes_when_the_trace_is_re_ingested(api, small):
    before = api.get("/api/traces/small")

    ingested("small", kernel_rows(3, name="_Z3newv"))  # the same count, other kernels

    after = api.get("/api/traces/small", HTTP_IF_NONE_MATCH=before["ETag"])
    assert after.status_code == 200
    assert after["ETag"] != before["ETag"]
    assert {k["name"] for k in after.json()["kernels"]} == {"_Z3newv"}


def test_the_detail_etag_changes_with_the_state(api, small):
    tags = [detail_etag(api, "small")]
    services.trace_start_parsing(Trace.objects.get(pk="small"), run={})  # serves its kernels, parsing
    tags.append(detail_etag(api, "small"))
    services.trace_mark_failed("small", "marked failed by an operator")
    tags.append(detail_etag(api, "small"))

    assert len(set(tags)) == 3
    assert api.get("/api/traces/small", HTTP_IF_NONE_MATCH=tags[-1]).status_code == 304


def test_the_detail_etag_changes_with_the_metadata(api, small):
    before = detail_etag(api, "small")

    trace = Trace.objects.get(pk="small")
    services.trace_wait_for_files(
        trace,
        run={"metadata_json": '{"status":"ok","files":[]}'},
        waiting_for=["stats_ctx_0"],
        fingerprint="g",
    )

    assert detail_etag(api, "small") != before


def test_the_detail_etag_depends_on_the_trace_only(api, small, make_trace):
    before = detail_etag(api, "small")

    ingested("other", kernel_rows(5))
    make_trace("another")

    assert api.get("/api/traces/small", HTTP_IF_NONE_MATCH=before).status_code == 304


def test_a_deleted_and_registered_again_trace_gets_a_new_etag(api, small):
    before = detail_etag(api, "small")

    services.trace_delete("small")
    assert api.get("/api/traces/small", HTTP_IF_NONE_MATCH=before).status_code == 404
    ingested("small", kernel_rows(3))

    assert api.get("/api/traces/small", HTTP_IF_NONE_MATCH=before).status_code == 200


# --- the list's ETag changes when the list does ---------------------------------------------------


def list_etag(api, **params) -> str:
    return api.get("/api/traces", params)["ETag"]


def test_a_repeated_list_request_is_a_304(api, listed, django_assert_num_queries):
    first = api.get("/api/traces", HTTP_ACCEPT_ENCODING="gzip")

    with django_assert_num_queries(2):  # the token, the list: one query, as without If-None-Match
        again = api.get("/api/traces", HTTP_ACCEPT_ENCODING="gzip", HTTP_IF_NONE_MATCH=first["ETag"])

    assert again.status_code == 304 and again.content == b""
    assert again["ETag"] == first["ETag"] and first["ETag"].endswith('-gzip"')
    assert again["Cache-Control"] == "private, no-cache"


def test_the_list_etag_changes_when_a_trace_is_added_changed_or_deleted(api, listed):
    tags = [list_etag(api)]
    ingested("run-05", kernel_rows(4))  # changed: ready with kernels
    tags.append(list_etag(api))
    Trace.objects.create(pk="new")
    tags.append(list_etag(api))
    services.trace_delete("run-03")
    tags.append(list_etag(api))

    assert len(set(tags)) == 4


def test_the_list_etag_changes_on_a_delete_that_keeps_the_count_and_the_latest_update(api, listed):
    """What a digest of (count, max(updated_at)) would miss: one trace deleted, another changed
    with an older `updated_at` (a worker whose clock is behind). The list's ETag is a digest of
    the list itself."""
    latest = Trace.objects.order_by("-updated_at").first()
    older = Trace.objects.exclude(pk=latest.pk).order_by("updated_at").first()
    before = list_etag(api)

    services.trace_delete(Trace.objects.exclude(pk__in=[latest.pk, older.pk]).first().pk)
    Trace.objects.filter(pk=older.pk).update(model="facebook/opt-125m", updated_at=older.updated_at)
    Trace.objects.create(pk="zz-new")
    Trace.objects.filter(pk="zz-new").update(updated_at=latest.updated_at)

    assert Trace.objects.count() == 12
    assert Trace.objects.order_by("-updated_at").first().updated_at == latest.updated_at
    assert list_etag(api) != before


def test_the_list_etag_follows_the_filters(api, listed):
    everything = list_etag(api)
    ready = list_etag(api, state="ready")
    failed = list_etag(api, state="failed")
    assert len({everything, ready, failed}) == 3

    # The same traces under other parameters: the same answer, the same ETag.
    assert list_etag(api, state="ready", format="json") == ready
    assert list_etag(api, state="ready", model="") == ready

    # A trace that leaves the filtered set changes the filtered list.
    services.trace_mark_failed("run-01", "marked failed by an operator")
    assert list_etag(api, state="ready") != ready


def test_the_list_and_a_detail_do_not_share_etags(api, small):
    assert tag_digest(list_etag(api)) != tag_digest(detail_etag(api, "small"))


# --- HEAD, the browsable API ---------------------------------------------------------------------


def test_head_answers_the_headers_of_get_without_reading_kernels(api, big, django_assert_num_queries):
    get = api.get("/api/traces/big", HTTP_ACCEPT_ENCODING="zstd")

    with django_assert_num_queries(2) as queries:  # the token, the trace's updated_at
        head = api.head("/api/traces/big", HTTP_ACCEPT_ENCODING="zstd")

    assert head.status_code == 200
    assert content(head) == b""
    for header in ("ETag", "Content-Type", "Content-Encoding", "Cache-Control", "Vary"):
        assert head[header] == get[header], header
    assert "traces_kernel" not in " ".join(query["sql"] for query in queries.captured_queries)
    assert api.head("/api/traces/big", HTTP_IF_NONE_MATCH=get["ETag"]).status_code == 304
    assert api.head("/api/traces/nope").status_code == 404


def test_head_on_the_list(api, listed):
    get = api.get("/api/traces")

    head = api.head("/api/traces")

    assert head.status_code == 200 and head.content == b""
    assert head["ETag"] == get["ETag"]


def test_the_browsable_api_still_works(staff_client, small, listed):
    for path in ("/api/traces", "/api/traces/small"):
        response = staff_client.get(path, HTTP_ACCEPT="text/html", HTTP_ACCEPT_ENCODING="gzip, zstd")
        assert response.status_code == 200, path
        assert response["Content-Type"].startswith("text/html")
        assert b"_Z6vecAddPdS_S_i" in response.content or path == "/api/traces"
        # An operator's page is not a cached representation: no ETag, never a 304.
        assert not response.has_header("ETag") and not response.has_header("Content-Encoding")
        repeat = staff_client.get(path, HTTP_ACCEPT="text/html", HTTP_IF_NONE_MATCH="*")
        assert repeat.status_code == 200


def test_json_through_format_is_cacheable_too(api, small):
    response = api.get("/api/traces/small", {"format": "json"}, HTTP_ACCEPT_ENCODING="gzip")

    assert response["Content-Encoding"] == "gzip"
    assert orjson.loads(gzip.decompress(response.content))["id"] == "small"
    again = api.get("/api/traces/small", {"format": "json"}, HTTP_IF_NONE_MATCH=response["ETag"])
    assert again.status_code == 304
