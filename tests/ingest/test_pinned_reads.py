"""A parse reads the objects of the listing it decided on, never a newer upload's:
every streamed or ranged read is pinned to the listed ETag, and an object replaced
since fails the read with S3's 412 (a botocore ClientError, retried by the next pass)."""

import pytest
from botocore.exceptions import ClientError

from ingest import bucket, passes
from tests.helpers import PREFIX, STATS_HEADER, TEST_BUCKET, stats_row
from traces.models import Kernel, Trace, TraceState

OK = {"status": "ok"}
KEY = f"{PREFIX}run/traces/stats_ctx_0x1"


def stats(name: str, count: int, ctx: str, header: bool = True) -> str:
    rows = "".join(stats_row(n, ctx, name=name, insts=n) for n in range(1, count + 1))
    return (STATS_HEADER if header else "") + rows


def precondition_failed(error: ClientError) -> bool:
    return error.response["ResponseMetadata"]["HTTPStatusCode"] == 412


@pytest.mark.parametrize(
    "read",
    [
        lambda etag: list(bucket.iter_object_lines(KEY, etag=etag)),
        lambda etag: list(bucket.iter_object_chunks(KEY, etag=etag)),
        lambda etag: bucket.read_head(KEY, 10, etag=etag),
        lambda etag: bucket.read_object(KEY, 1000, etag=etag),
    ],
    ids=["lines", "chunks", "head", "whole"],
)
def test_a_read_of_a_listed_version_that_was_replaced_fails_with_412(s3, read):
    s3.put_object(Bucket=TEST_BUCKET, Key=KEY, Body=b"first upload\n")
    (listed,) = bucket.list_run_objects("run")
    s3.put_object(Bucket=TEST_BUCKET, Key=KEY, Body=b"second upload\n")

    with pytest.raises(ClientError) as raised:
        read(listed.etag)
    assert precondition_failed(raised.value)
    # The version that is there now reads as usual.
    (current,) = bucket.list_run_objects("run")
    assert read(current.etag)


def test_a_stats_file_replaced_during_a_parse_is_not_mixed_with_the_listed_upload(
    db, s3, upload, monkeypatch
):
    upload(
        "run",
        {
            "traces/stats_ctx_0x1": stats("_Z5firstv", 3, "0x1"),
            "traces/stats_ctx_0x2": stats("_Z5firstv", 2, "0x2", header=False),
        },
        OK,
    )
    listed = bucket.list_run_objects

    def then_reuploaded(run_id):
        objects = listed(run_id)
        # A re-upload lands between the pass's listing and its reads of the files.
        s3.put_object(
            Bucket=TEST_BUCKET,
            Key=f"{PREFIX}run/traces/stats_ctx_0x2",
            Body=stats("_Z6secondv", 4, "0x2", header=False).encode(),
        )
        return objects

    monkeypatch.setattr(bucket, "list_run_objects", then_reuploaded)
    with pytest.raises(ClientError) as raised:
        passes.ingest_trace("run")  # nothing read ahead: every file streamed
    assert precondition_failed(raised.value)
    trace = Trace.objects.get(pk="run")
    assert trace.state != TraceState.READY
    assert not Kernel.objects.filter(trace=trace).exists()

    # The next pass lists the bucket as it is now and reads exactly that.
    monkeypatch.undo()
    change = passes.ingest_trace("run")
    assert (change.new_state, change.kernel_count) == (TraceState.READY, 3 + 4)
    names = set(Kernel.objects.filter(trace=trace).values_list("ctx", "name"))
    assert names == {("0x1", "_Z5firstv"), ("0x2", "_Z6secondv")}
