"""A large detail served once, then from its encoded bytes.

The contract: the first gzip or zstd answer of a ready trace's large detail is kept on disk,
keyed by its ETag and coding; a later GET for that coding gets the same bytes from the file
(no kernel read, a Content-Length, the computed answer's headers); a changed trace never gets
an old body; a body not sent whole leaves no file; CASCADE_BODY_CACHE_BYTES bounds the files
(least recently served out first), 0 turns the cache off; HEAD, 304 and identity unchanged.
"""

import orjson
import pytest
from django.core.signals import request_finished
from django.db import close_old_connections
from django.test import RequestFactory

from tests.helpers import content, decompress, ingested, kernel_rows
from traces import body_cache, services
from traces.views import STREAM_KERNELS_ABOVE, TraceViewSet

LARGE = STREAM_KERNELS_ABOVE + 500
URL = "/api/traces/{}"


def kept_files(folder) -> list:
    return sorted(path for path in folder.rglob("*") if path.is_file()) if folder.exists() else []


def get(api, trace_id: str, coding: str, **headers):
    return api.get(URL.format(trace_id), HTTP_ACCEPT_ENCODING=coding, **headers)


@pytest.fixture
def big(db):
    return ingested("big", kernel_rows(LARGE))


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
def test_the_second_request_is_served_from_the_kept_file(
    api, big, coding, body_cache_dir, django_assert_num_queries
):
    plain = orjson.loads(content(api.get(URL.format("big"))))
    assert len(plain["kernels"]) == LARGE

    first = get(api, "big", coding)
    first_body = content(first)
    assert first.streaming and not first.has_header("Content-Length")
    [kept] = kept_files(body_cache_dir)
    assert kept.read_bytes() == first_body

    # The token's check, the trace's updated_at: no kernel is read.
    with django_assert_num_queries(2):
        second = get(api, "big", coding)
        second_body = content(second)
    assert second_body == first_body
    assert orjson.loads(decompress(second_body, coding)) == plain
    assert int(second["Content-Length"]) == len(second_body)
    for header in ("Content-Type", "Content-Encoding", "ETag", "Vary", "Cache-Control"):
        assert second[header] == first[header], header
    assert not second.has_header("Content-Disposition")


def test_each_coding_is_kept_apart(api, big, body_cache_dir):
    gz = content(get(api, "big", "gzip"))
    zs = content(get(api, "big", "zstd"))
    assert len(kept_files(body_cache_dir)) == 2
    assert content(get(api, "big", "gzip")) == gz
    assert content(get(api, "big", "zstd")) == zs
    assert decompress(gz, "gzip") == decompress(zs, "zstd")


def test_plain_and_small_details_are_not_kept(api, db, body_cache_dir):
    ingested("big", kernel_rows(LARGE))
    ingested("small", kernel_rows(3))
    content(api.get(URL.format("big")))
    content(get(api, "small", "gzip"))
    assert kept_files(body_cache_dir) == []


@pytest.mark.parametrize(
    "change",
    [
        lambda: ingested("big", kernel_rows(LARGE + 1)),
        lambda: services.traces_mark_sample(["big"]),
    ],
    ids=["re-ingested", "marked-sample"],
)
def test_a_changed_trace_never_gets_the_old_body(api, big, change, body_cache_dir):
    old = content(get(api, "big", "gzip"))
    change()
    fresh = get(api, "big", "gzip")
    body = content(fresh)
    assert body != old
    expected = orjson.loads(content(api.get(URL.format("big"))))
    assert orjson.loads(decompress(body, "gzip")) == expected
    # The old body is gone with its version; the new one is kept.
    [kept] = kept_files(body_cache_dir)
    assert kept.read_bytes() == body
    assert content(get(api, "big", "gzip")) == body


def test_a_client_that_hangs_up_leaves_no_file(api, api_token, big, body_cache_dir):
    # The view itself (the test client's wrapper would end the test's transaction on close).
    request = RequestFactory().get(
        URL.format("big"), HTTP_ACCEPT_ENCODING="gzip", HTTP_AUTHORIZATION=f"Bearer {api_token}"
    )
    response = TraceViewSet.as_view({"get": "retrieve"})(request, trace_id="big")
    chunks = iter(response.streaming_content)
    next(chunks)
    next(chunks)
    # What the server does when the client is gone, without the end of request's closing of
    # the database connection.
    request_finished.disconnect(close_old_connections)
    try:
        response.close()
    finally:
        request_finished.connect(close_old_connections)
    assert kept_files(body_cache_dir) == []
    # The next client gets the whole body computed, and kept.
    whole = content(get(api, "big", "gzip"))
    assert kept_files(body_cache_dir)[0].read_bytes() == whole


def test_an_error_mid_stream_leaves_no_file(big, settings, tmp_path, body_cache_dir):
    def failing():
        yield b"x" * 100
        raise RuntimeError("the database went away")

    stream = body_cache.tee(failing(), "big", "digest", "gzip")
    with pytest.raises(RuntimeError):
        list(stream)
    assert kept_files(body_cache_dir) == []


def test_a_body_over_the_whole_bound_is_not_kept(api, big, settings, body_cache_dir):
    settings.CASCADE_BODY_CACHE_BYTES = 1000
    body = content(get(api, "big", "gzip"))
    assert len(body) > 1000
    assert kept_files(body_cache_dir) == []


def test_the_bound_evicts_the_least_recently_served(api, db, settings, body_cache_dir):
    for name in ("a", "b", "c"):
        ingested(name, kernel_rows(LARGE))
    size = len(content(get(api, "a", "gzip")))
    content(get(api, "b", "gzip"))
    assert len(kept_files(body_cache_dir)) == 2
    # Room for two bodies; "a" served again, so "b" is the least recently served.
    settings.CASCADE_BODY_CACHE_BYTES = 2 * size + size // 2
    content(get(api, "a", "gzip"))
    content(get(api, "c", "gzip"))
    kept = kept_files(body_cache_dir)
    assert len(kept) == 2
    assert body_cache.trace_folder("b") not in {path.parent for path in kept}
    assert sum(path.stat().st_size for path in kept) <= settings.CASCADE_BODY_CACHE_BYTES


def test_zero_bytes_turns_the_cache_off(api, big, settings, body_cache_dir):
    settings.CASCADE_BODY_CACHE_BYTES = 0
    first = content(get(api, "big", "gzip"))
    second = get(api, "big", "gzip")
    assert second.streaming and content(second) == first
    assert kept_files(body_cache_dir) == []


def test_head_and_304_are_unchanged(api, big, body_cache_dir, django_assert_num_queries):
    first = get(api, "big", "gzip")
    content(first)
    with django_assert_num_queries(2):
        head = api.head(URL.format("big"), HTTP_ACCEPT_ENCODING="gzip")
    assert head.status_code == 200 and content(head) == b""
    assert head["ETag"] == first["ETag"] and head["Content-Encoding"] == "gzip"
    with django_assert_num_queries(2):
        cached = get(api, "big", "gzip", HTTP_IF_NONE_MATCH=first["ETag"])
    assert cached.status_code == 304 and cached.content == b""
    assert cached["ETag"] == first["ETag"]


def test_a_deleted_trace_loses_its_files(api, big, body_cache_dir):
    content(get(api, "big", "gzip"))
    assert kept_files(body_cache_dir)
    services.trace_delete("big")
    assert kept_files(body_cache_dir) == []
    assert get(api, "big", "gzip").status_code == 404


def test_a_file_removed_by_hand_is_recomputed(api, big, body_cache_dir):
    """Everything under body-cache/ may be deleted at any time."""
    body = content(get(api, "big", "gzip"))
    for path in kept_files(body_cache_dir):
        path.unlink()
    again = get(api, "big", "gzip")
    assert again.streaming and content(again) == body
