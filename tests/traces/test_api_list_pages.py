"""`GET /api/traces` at any size: streamed, an ETag read without the body, pages.

The contract, as these tests check it:
- Without `limit` the answer is every trace, newest first, a JSON array byte for byte what
  `json.dumps` of the documented serializer gives; a large list streams (no Content-Length)
  in bounded memory, compressed chunk by chunk when asked.
- `?limit=N` (1 to 1000) answers the first N rows after `?after=<cursor>`, with
  `Link: <the same URL, after the last row>; rel="next"` while rows follow: walking the links
  lists every trace once, in order, even while traces are created (newer, so not in later
  pages). Filters narrow the pages. A bad limit or cursor is a 400 as a bad filter is.
- The ETag of the list and of each page changes with each change of a trace it lists (state,
  metadata, sample, a new trace, a deleted one) and with nothing else; If-None-Match gets a
  304 from one query that reads no listed row's content.
"""

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.http import QueryDict

from tests.helpers import content, decompress, streamed_peak
from traces import http, services
from traces.filters import decode_cursor, encode_cursor
from traces.models import Trace, TraceState, next_trace_keys
from traces.selectors import LIST_FETCH_ROWS
from traces.serializers import TraceSummarySerializer

T0 = datetime(2026, 11, 8, 8, 0, 0, 123456, tzinfo=UTC)


def bulk_traces(count: int, *, prefix: str = "bulk", **fields) -> list[str]:
    """`count` registered traces, one second apart (the last created newest), some sharing a
    created_at (ties are ordered by id)."""
    keys = next_trace_keys(count)
    traces = [
        Trace(
            id=f"{prefix}-{n:06}",
            key=keys[n],
            created_at=T0 + timedelta(seconds=n // 3 * 3),  # three per instant
            updated_at=T0 + timedelta(seconds=n, microseconds=n),
            state=TraceState.READY if n % 4 else TraceState.UPLOADING,
            model="facebook/opt-125m" if n % 2 else "meta-llama/Llama-3.1-8B",
            layers=["prefill", "decode"],
            kernel_count=n * 7,
            **fields,
        )
        for n in range(count)
    ]
    Trace.objects.bulk_create(traces, batch_size=2000)
    return [trace.id for trace in traces]


def expected_json(**filters) -> bytes:
    """The list as the documented serializer says it, encoded by the standard library."""
    traces = Trace.objects.filter(**filters).order_by("-created_at", "id")
    data = TraceSummarySerializer(traces, many=True).data
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def ids(response) -> list[str]:
    return [trace["id"] for trace in json.loads(content(response))]


def next_link(response) -> str | None:
    """The URL of `Link: <url>; rel="next"`, or None."""
    if not response.has_header("Link"):
        return None
    url, rel = response["Link"].split(";")
    assert rel.strip() == 'rel="next"'
    assert url.startswith("<") and url.endswith(">")
    return url[1:-1]


def walk(api, path: str, **params) -> tuple[list[str], list]:
    """Every page from `path`, following the links: (the ids in order, the responses)."""
    responses = [api.get(path, params)]
    while (url := next_link(responses[-1])) is not None:
        assert len(responses) < 1000
        responses.append(api.get(url))
    for response in responses:
        assert response.status_code == 200
    return [trace_id for response in responses for trace_id in ids(response)], responses


def etag(api, **params) -> str:
    response = api.get("/api/traces", params)
    assert response.status_code == 200
    return response["ETag"]


# --- the whole list -----------------------------------------------------------------------------


def test_a_large_list_streams_exactly_the_serializer_s_json(api, db):
    bulk_traces(LIST_FETCH_ROWS + 500)

    response = api.get("/api/traces")

    assert response.status_code == 200 and response.streaming
    assert not response.has_header("Content-Length") and not response.has_header("Link")
    assert content(response) == expected_json()


def test_a_small_list_is_one_piece_and_the_serializer_s_json(api, db):
    bulk_traces(30)

    response = api.get("/api/traces")

    assert not response.streaming
    assert response.content == expected_json()
    assert response["Content-Length"] == str(len(response.content))


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
def test_a_large_list_is_compressed_as_it_streams(api, db, coding):
    bulk_traces(LIST_FETCH_ROWS + 10)
    plain = content(api.get("/api/traces"))

    response = api.get("/api/traces", HTTP_ACCEPT_ENCODING=coding)

    assert response.streaming and response["Content-Encoding"] == coding
    data = content(response)
    assert decompress(data, coding) == plain
    assert len(data) < len(plain) / 5


def test_memory_stays_at_a_chunk_whatever_the_list_s_length(api, db):
    bulk_traces(3 * LIST_FETCH_ROWS, prefix="a")
    three_bytes, three_peak = streamed_peak(api.get("/api/traces"))
    bulk_traces(9 * LIST_FETCH_ROWS, prefix="b")
    twelve_bytes, twelve_peak = streamed_peak(api.get("/api/traces"))

    assert twelve_bytes > 3.5 * three_bytes
    assert twelve_peak < 1.5 * three_peak, (three_peak, twelve_peak)


def test_filters_narrow_the_streamed_list(api, db):
    bulk_traces(LIST_FETCH_ROWS + 100)

    response = api.get("/api/traces", {"state": "ready", "model": "facebook/opt-125m"})

    assert content(response) == expected_json(state="ready", model="facebook/opt-125m")


# --- pages --------------------------------------------------------------------------------------


def test_pages_walk_the_whole_list_in_order(api, db):
    every = bulk_traces(53)
    whole = ids(api.get("/api/traces"))
    assert sorted(whole) == sorted(every)

    walked, responses = walk(api, "/api/traces", limit=10)

    assert walked == whole
    assert [len(ids(r)) for r in responses] == [10, 10, 10, 10, 10, 3]
    assert next_link(responses[-1]) is None


def test_a_list_that_fills_its_last_page_exactly_has_no_link_after_it(api, db):
    bulk_traces(20)

    walked, responses = walk(api, "/api/traces", limit=10)

    assert len(responses) == 2 and len(walked) == 20


def test_traces_created_during_a_walk_are_newer_and_not_in_later_pages(api, db):
    bulk_traces(40)
    whole = ids(api.get("/api/traces"))
    pages = [api.get("/api/traces", {"limit": 15})]
    created = 0
    while (url := next_link(pages[-1])) is not None:
        for _ in range(3):  # registered now: newer than every trace of the walk
            Trace.objects.create(pk=f"new-{created}")
            created += 1
        pages.append(api.get(url))

    walked = [trace_id for page in pages for trace_id in ids(page)]

    assert walked == whole  # no duplicate, no gap, none of the new ones
    assert created == 6
    assert ids(api.get("/api/traces", {"limit": 6})) == [f"new-{n}" for n in (5, 4, 3, 2, 1, 0)]


def test_the_link_keeps_the_url_the_filters_and_the_limit(api, db):
    bulk_traces(30)
    params = {"state": "ready", "model": "facebook/opt-125m", "limit": "4", "format": "json"}

    response = api.get("/api/traces", params)

    url = urlsplit(next_link(response))
    assert (url.scheme, url.netloc, url.path) == ("http", "testserver", "/api/traces")
    query = {name: values[0] for name, values in parse_qs(url.query).items()}
    last = json.loads(response.content)[-1]
    cursor = query.pop("after")
    assert query == params
    created_at, trace_id = decode_cursor(cursor)
    assert (created_at.isoformat().replace("+00:00", "Z"), trace_id) == (last["created_at"], last["id"])


def test_filters_combine_with_pages(api, db):
    bulk_traces(60)
    filters = {"state": "ready", "model": "facebook/opt-125m"}
    whole = ids(api.get("/api/traces", filters))
    assert 20 < len(whole) < 60

    walked, _ = walk(api, "/api/traces", limit=7, **filters)

    assert walked == whole
    assert walked == list(
        Trace.objects.filter(**filters).order_by("-created_at", "id").values_list("id", flat=True)
    )


def test_a_page_is_the_serializer_s_json_of_its_rows(api, db):
    bulk_traces(30)
    first = api.get("/api/traces", {"limit": 12})
    second = api.get(next_link(first))

    every = json.loads(expected_json())
    assert json.loads(first.content) + json.loads(second.content) == every[:24]
    assert second.content == json.dumps(every[12:24], separators=(",", ":")).encode()


def test_after_without_limit_is_the_rest_of_the_list(api, db):
    bulk_traces(30)
    whole = ids(api.get("/api/traces"))
    first = api.get("/api/traces", {"limit": 10})
    cursor = parse_qs(urlsplit(next_link(first)).query)["after"][0]

    rest = api.get("/api/traces", {"after": cursor})

    assert ids(rest) == whole[10:]
    assert not rest.has_header("Link")


def test_the_browsable_api_pages_too(staff_client, db):
    bulk_traces(12)

    response = staff_client.get("/api/traces", {"limit": 5}, HTTP_ACCEPT="text/html")

    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    assert next_link(response) is not None


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"limit": "0"}, "limit accepts an integer from 1 to 1000; got '0'."),
        ({"limit": "1001"}, "limit accepts an integer from 1 to 1000; got '1001'."),
        ({"limit": "-5"}, "limit accepts an integer from 1 to 1000; got '-5'."),
        ({"limit": "ten"}, "limit accepts an integer from 1 to 1000; got 'ten'."),
        ({"limit": "1.5"}, "limit accepts an integer from 1 to 1000; got '1.5'."),
        ({"limit": "1_0"}, "limit accepts an integer from 1 to 1000; got '1_0'."),
        ({"after": "garbage"}, "after accepts the cursor of a Link header of this list; got 'garbage'."),
        # Valid base64 of JSON that is not a cursor.
        ({"after": "WzEsMl0"}, "after accepts the cursor of a Link header of this list; got 'WzEsMl0'."),
        (
            {"limit": "0", "after": "x"},
            "limit accepts an integer from 1 to 1000; got '0'. "
            "after accepts the cursor of a Link header of this list; got 'x'.",
        ),
    ],
)
def test_a_bad_limit_or_cursor_is_a_400_like_a_bad_filter(api, db, params, detail, django_assert_num_queries):
    api.get("/api/traces")
    with django_assert_num_queries(1):  # the token only
        response = api.get("/api/traces", params)

    assert response.status_code == 400
    assert response.json() == {"detail": detail}


def test_the_largest_limit_and_an_empty_one(api, db):
    bulk_traces(5)
    assert len(ids(api.get("/api/traces", {"limit": "1000"}))) == 5
    assert api.get("/api/traces", {"limit": ""}).content == api.get("/api/traces").content


def test_a_cursor_is_opaque_and_round_trips():
    moment = datetime(2026, 11, 8, 8, 59, 2, 590922, tzinfo=UTC)
    cursor = encode_cursor("2026-11-08T08:59:02.590922Z", "run/with+odd=chars@x")
    assert "=" not in cursor and "/" not in cursor and "+" not in cursor
    assert decode_cursor(cursor) == (moment, "run/with+odd=chars@x")


# --- ETags --------------------------------------------------------------------------------------

# Each kind of change to one trace, as the services (or an operator's admin action) make it.
CHANGES = {
    "state": lambda trace_id: services.trace_mark_failed(trace_id, "marked failed by an operator"),
    "metadata": lambda trace_id: services.trace_wait_for_files(
        Trace.objects.get(pk=trace_id),
        run={"metadata_json": '{"status":"ok"}', "model": "facebook/opt-1.3b"},
        waiting_for=["stats_ctx_0"],
        fingerprint="g",
    ),
    "sample": lambda trace_id: services.traces_mark_sample([trace_id]),
    "deleted": lambda trace_id: services.trace_delete(trace_id),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("params", [{}, {"limit": "10"}, {"model": "facebook/opt-125m"}])
def test_each_change_of_a_listed_trace_changes_the_etag(api, db, change, params):
    bulk_traces(30)
    listed = ids(api.get("/api/traces", params))
    before = etag(api, **params)
    assert etag(api, **params) == before  # stable while nothing changes

    CHANGES[change](listed[3])

    assert etag(api, **params) != before


@pytest.mark.parametrize("params", [{}, {"limit": "10"}, {"model": "facebook/opt-125m"}])
def test_a_new_trace_changes_the_etag_of_the_lists_it_is_in(api, db, params):
    bulk_traces(30)
    before = etag(api, **params)

    Trace.objects.create(pk="new", model="facebook/opt-125m")

    assert etag(api, **params) != before


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_of_a_trace_outside_the_answer_keeps_its_etag(api, db, change):
    bulk_traces(30)
    filtered = {"model": "facebook/opt-125m"}
    first_page = api.get("/api/traces", {"limit": "10"})
    second_page_url = next_link(first_page)
    second_page = api.get(second_page_url)
    outside_filter = Trace.objects.exclude(**filtered).order_by("id").first().pk
    before = (etag(api, **filtered), api.get(second_page_url)["ETag"])

    CHANGES[change](outside_filter if outside_filter not in ids(second_page) else ids(first_page)[0])
    # A trace the second page does not show, and one the filtered list does not.
    CHANGES[change](ids(first_page)[1] if ids(first_page)[1] != outside_filter else ids(first_page)[2])
    Trace.objects.create(pk="newer", model="meta-llama/Llama-3.1-8B")  # newer: page 1, filtered out
    services.trace_recheck_later(Trace.objects.get(pk=ids(second_page)[0]))  # bookkeeping only
    services.trace_recheck_later(Trace.objects.filter(**filtered).first())

    assert (etag(api, **filtered), api.get(second_page_url)["ETag"]) == before


def test_a_change_that_keeps_count_and_latest_update_changes_the_etag(api, db):
    """A save whose `updated_at` is older than the newest (a worker whose clock is behind, or
    whose transaction committed after a later one's): count, keys and max(updated_at) stay."""
    bulk_traces(10)
    latest = Trace.objects.order_by("-updated_at").first().updated_at
    before = etag(api)

    middle = Trace.objects.order_by("updated_at")[4]
    Trace.objects.filter(pk=middle.pk).update(
        state="failed", updated_at=middle.updated_at + timedelta(seconds=1)
    )

    assert Trace.objects.order_by("-updated_at").first().updated_at == latest
    assert etag(api) != before


def test_a_delete_and_a_create_in_one_instant_change_the_etag(api, db):
    bulk_traces(10)
    latest = Trace.objects.order_by("-updated_at").first()
    before = etag(api)

    services.trace_delete(Trace.objects.exclude(pk=latest.pk).first().pk)
    Trace.objects.create(pk="zz", created_at=T0, updated_at=latest.updated_at)
    Trace.objects.filter(pk="zz").update(updated_at=latest.updated_at)

    assert Trace.objects.count() == 10
    assert etag(api) != before


@pytest.mark.parametrize("params", [{}, {"limit": "10"}, {"state": "ready", "limit": "4"}])
def test_if_none_match_is_a_304_from_one_query(api, db, params, django_assert_num_queries):
    bulk_traces(LIST_FETCH_ROWS + 10)
    first = api.get("/api/traces", params, HTTP_ACCEPT_ENCODING="gzip")
    content(first)  # read to its end: its cursor closed

    with django_assert_num_queries(2) as queries:  # the token, the list's version
        again = api.get("/api/traces", params, HTTP_ACCEPT_ENCODING="gzip", HTTP_IF_NONE_MATCH=first["ETag"])

    assert again.status_code == 304 and again.content == b""
    assert again["ETag"] == first["ETag"] and first["ETag"].endswith('-gzip"')
    sql = queries.captured_queries[-1]["sql"]
    assert '"model"' not in sql and '"error"' not in sql  # no column of the body is read


def test_each_page_has_its_own_etag(api, db):
    bulk_traces(30)
    first = api.get("/api/traces", {"limit": "10"})
    second = api.get(next_link(first))
    whole = api.get("/api/traces")

    assert len({first["ETag"], second["ETag"], whole["ETag"]}) == 3
    assert api.get(next_link(first), HTTP_IF_NONE_MATCH=second["ETag"]).status_code == 304
    assert api.get(next_link(first), HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 200


def test_a_page_whose_next_row_is_deleted_loses_its_link_and_its_etag(api, db):
    bulk_traces(11)
    page = api.get("/api/traces", {"limit": "10"})
    assert next_link(page) is not None

    services.trace_delete(Trace.objects.order_by("-created_at", "id").last().pk)

    again = api.get("/api/traces", {"limit": "10"}, HTTP_IF_NONE_MATCH=page["ETag"])
    assert again.status_code == 200 and next_link(again) is None
    assert again.content == page.content


@pytest.mark.postgres("PostgreSQL's EXTRACT(EPOCH)")
def test_the_etag_reads_updated_at_to_the_microsecond(api, db):
    bulk_traces(5)
    before = etag(api)

    Trace.objects.filter(pk="bulk-000002").update(updated_at=T0 + timedelta(seconds=2, microseconds=3))

    assert etag(api) != before


def test_a_list_is_compressed_from_four_traces_which_are_always_over_a_kilobyte(api, make_trace):
    """The coding follows the count (a 304 knows it without the body): four of the smallest
    summaries there can be (a one-letter id, every text null) are over COMPRESS_ABOVE."""
    for trace_id in "abcd":
        make_trace(trace_id, created_at=T0.replace(microsecond=0), updated_at=T0.replace(microsecond=0))
        response = api.get("/api/traces", HTTP_ACCEPT_ENCODING="gzip")
        assert response.has_header("Content-Encoding") is (trace_id == "d")
    assert len(api.get("/api/traces").content) > http.COMPRESS_ABOVE


@pytest.mark.postgres("the triggers are PostgreSQL's")
def test_the_kept_version_is_the_aggregate_of_the_rows(db):
    """PostgreSQL keeps the whole list's sums (migration 0012's triggers); they must be what
    the rows add up to after any mix of writes, as the filtered lists' aggregate reads them."""
    from traces import selectors
    from traces.filters import ListPage, trace_filters

    def both():
        kept = selectors.trace_list_version(trace_filters(QueryDict()), ListPage())
        # The same rows through the aggregate: a filter every trace passes.
        summed = selectors.trace_list_version(
            trace_filters(QueryDict("created_after=1970-01-01")), ListPage()
        )
        return kept, summed

    bulk_traces(50)
    Trace.objects.create(pk="one")
    services.trace_delete("bulk-000007")
    services.traces_mark_sample(["bulk-000008", "bulk-000009"])
    Trace.objects.filter(state="uploading").update(updated_at=T0)
    Trace.objects.filter(pk__startswith="bulk-00001").delete()
    kept, summed = both()
    assert kept == summed and kept.count == Trace.objects.count() == 50 + 1 - 1 - 10


@pytest.mark.postgres("the triggers are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_the_kept_version_survives_a_flush(api_token):
    """Django's flush (between transactional tests) TRUNCATEs the trace table: the kept sums
    start again from nothing, as the table does."""
    from django.core.management import call_command

    from traces import selectors
    from traces.filters import ListPage

    bulk_traces(5)
    call_command("flush", interactive=False, verbosity=0)
    Trace.objects.create(pk="after-the-flush")

    version = selectors.trace_list_version(None, ListPage())
    assert (version.count, version.key_sum) == (1, Trace.objects.get().key)


@pytest.mark.django_db
def test_a_page_parameter_given_twice_is_a_400(api):
    answer = api.get("/api/traces?limit=2&limit=")
    assert answer.status_code == 400
    assert "limit is given more than once" in answer.json()["detail"]
