"""ReadAhead: a run's small files read ahead serve the decision only as the listed version, an
error met reading ahead is raised where the decision reads that file, and the stream a header
peek opens is the one the parse goes on with (one GET, not two)."""

import pytest
from botocore.exceptions import EndpointConnectionError

from ingest import bucket
from ingest.read_ahead import ReadAhead
from tests.helpers import PREFIX

pytestmark = pytest.mark.usefixtures("s3")


def listed(upload, files: dict) -> dict[str, bucket.S3Object]:
    upload("run", files)
    return {obj.name: obj for obj in bucket.list_run_objects("run")}


def test_a_small_file_read_ahead_is_served_without_another_request(upload, monkeypatch):
    objects = listed(upload, {"traces/kernelslist": b"kernel-1.trace\nkernel-2.trace\n"})
    files = ReadAhead()
    assert files.fetch(objects["traces/kernelslist"])
    monkeypatch.setattr(bucket, "get_object", lambda *a, **kw: pytest.fail("read from S3 again"))
    assert list(files.read_lines(objects["traces/kernelslist"])) == [b"kernel-1.trace\n", b"kernel-2.trace\n"]
    assert files.read_whole(objects["traces/kernelslist"], 100) == b"kernel-1.trace\nkernel-2.trace\n"


def test_a_body_serves_only_the_version_that_was_listed(upload):
    objects = listed(upload, {"timing.csv": b"old\n"})
    files = ReadAhead()
    assert files.fetch(objects["timing.csv"])
    upload("run", {"timing.csv": b"new\n"})
    replaced = {obj.name: obj for obj in bucket.list_run_objects("run")}["timing.csv"]
    assert replaced.etag != objects["timing.csv"].etag
    assert files.body(replaced) is None
    assert list(files.read_lines(replaced)) == [b"new\n"]


def test_a_file_larger_than_the_read_ahead_takes_is_left_to_the_parse(upload, monkeypatch):
    monkeypatch.setattr("ingest.read_ahead.PREFETCH_FILE_BYTES", 4)
    objects = listed(upload, {"traces/stats.csv": b"0123456789\n"})
    files = ReadAhead()
    assert not files.fetch(objects["traces/stats.csv"])
    assert files.body(objects["traces/stats.csv"]) is None
    assert list(files.read_lines(objects["traces/stats.csv"])) == [b"0123456789\n"]


def test_an_error_met_reading_ahead_is_raised_where_the_file_is_read(upload, monkeypatch):
    objects = listed(upload, {"metadata.json": b"{}"})
    unreachable = EndpointConnectionError(endpoint_url="http://s3.invalid")

    def fails(key, max_bytes):
        raise unreachable

    monkeypatch.setattr(bucket, "read_object_and_etag", fails)
    files = ReadAhead()
    assert not files.fetch(objects["metadata.json"])
    for read in (files.body, files.read_lines, lambda obj: files.read_whole(obj, 100)):
        with pytest.raises(EndpointConnectionError) as raised:
            read(objects["metadata.json"])
        assert raised.value is unreachable


def test_a_body_read_ahead_past_what_the_decision_allows_is_refused(upload):
    objects = listed(upload, {"metadata.json": b"x" * 50})
    files = ReadAhead()
    assert files.fetch(objects["metadata.json"])
    with pytest.raises(ValueError):
        files.read_whole(objects["metadata.json"], 10)


def test_the_first_header_read_from_s3_is_the_stream_the_parse_goes_on_with(upload, monkeypatch):
    objects = listed(
        upload,
        {
            "traces/stats_ctx_0x1": b"header\nkernel-1\nkernel-2\n",
            "traces/stats_ctx_0x2": b"other\nkernel-9\n",
        },
    )
    streams, heads = [], []
    stream, head = bucket.iter_object_lines, bucket.read_head
    monkeypatch.setattr(
        bucket, "iter_object_lines", lambda key, **kw: streams.append(key) or stream(key, **kw)
    )
    monkeypatch.setattr(bucket, "read_head", lambda key, n, **kw: heads.append(key) or head(key, n, **kw))
    files = ReadAhead()
    first, second = objects["traces/stats_ctx_0x1"], objects["traces/stats_ctx_0x2"]
    assert files.first_line(first, 4096) == b"header\n"
    assert files.first_line(second, 4096).split(b"\n", 1)[0] == b"other"
    assert (streams, heads) == ([first.key], [second.key])
    # The parse reads the first file from its start, on the stream already open.
    assert list(files.read_lines(first)) == [b"header\n", b"kernel-1\n", b"kernel-2\n"]
    assert streams == [first.key]
    assert list(files.read_lines(second)) == [b"other\n", b"kernel-9\n"]
    assert streams == [first.key, second.key]
    assert first.key.startswith(PREFIX)


def test_a_header_read_ahead_costs_no_request(upload, monkeypatch):
    objects = listed(upload, {"traces/stats_ctx_0x1": b"header\nkernel-1\n"})
    files = ReadAhead()
    assert files.fetch(objects["traces/stats_ctx_0x1"])
    monkeypatch.setattr(bucket, "get_object", lambda *a, **kw: pytest.fail("read from S3 again"))
    assert files.first_line(objects["traces/stats_ctx_0x1"], 4096).startswith(b"header\n")
