"""The bucket as configured in STORAGES (ingest.storage): django-storages' S3Storage built on first
use, its options from the environment variables docs/configuration.md names, one boto3 session
for every thread, every request counted; presigned GETs through its `url()`, the SQS client
from the same options. Against moto's server."""

import threading
import urllib.error
import urllib.request
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from django.core.exceptions import ImproperlyConfigured
from storages.backends.s3 import S3Storage

from ingest import bucket, presigning, sqs, storage
from tests.helpers import PREFIX, TEST_BUCKET


def test_the_bucket_is_the_traces_storage_of_storages(s3, s3_server):
    traces = storage.traces()
    assert isinstance(traces, S3Storage)
    assert (traces.bucket_name, traces.endpoint_url) == (TEST_BUCKET, s3_server)
    assert storage.traces() is traces, "built once"


def test_without_a_bucket_it_is_improperly_configured(settings):
    settings.STORAGES = {
        **settings.STORAGES,
        "traces": {**settings.STORAGES["traces"], "OPTIONS": {"bucket_name": ""}},
    }
    with pytest.raises(ImproperlyConfigured, match="CASCADE_S3_BUCKET is not set"):
        storage.require_bucket()


def test_the_client_config_is_the_settings(s3):
    # docs/configuration.md: CASCADE_S3_CONNECT_TIMEOUT 5, CASCADE_S3_READ_TIMEOUT 10,
    # CASCADE_S3_MAX_ATTEMPTS 5; presigned URLs are Signature Version 4.
    config = bucket.client().meta.config
    assert (config.connect_timeout, config.read_timeout) == (5, 10)
    assert config.retries["total_max_attempts"] == 5
    assert config.signature_version == "s3v4"


def test_threads_share_the_process_s_one_client(s3, upload, monkeypatch, settings):
    settings.CASCADE_S3_THREADS = 4
    made = []
    real = boto3.session.Session
    monkeypatch.setattr(boto3.session, "Session", lambda **kw: made.append(1) or real(**kw))
    clients = set()

    def work(n):
        clients.add(id(bucket.client()))
        barrier.wait(10)  # every thread holds its client at once
        return n

    barrier = threading.Barrier(4)
    assert [future.result() for _, future in bucket.overlapped(work, range(4))] == [0, 1, 2, 3]
    assert len(clients) == 1  # boto3's clients are thread-safe
    assert len(made) == 1


def test_the_shared_client_has_a_connection_for_each_thread(s3, settings):
    assert storage.traces().shared_client.meta.config.max_pool_connections >= settings.CASCADE_S3_THREADS


def test_every_threads_requests_are_counted(s3, upload, settings):
    settings.CASCADE_S3_THREADS = 4
    for n in range(6):
        upload(f"run-{n}", {"a": "x"})
    before, _ = storage.meter.snapshot()
    keys = [f"{PREFIX}run-{n}/a" for n in range(6)]
    etags = [future.result() for _, future in bucket.overlapped(bucket.head_etag, keys)]
    assert all(etags)
    assert storage.meter.snapshot()[0] - before == 6


def test_a_presigned_get_is_pinned_to_its_etag(s3, upload):
    upload("run", {"a.txt": "first"})
    key = f"{PREFIX}run/a.txt"
    etag = s3.head_object(Bucket=TEST_BUCKET, Key=key)["ETag"]
    [url] = presigning.presigned_gets([key], 60, etags=[etag])
    query = parse_qs(urlsplit(url).query)
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert "if-match" in query["X-Amz-SignedHeaders"][0].split(";")
    with urllib.request.urlopen(urllib.request.Request(url, headers={"If-Match": etag})) as answer:
        assert answer.read() == b"first"


def test_a_key_the_storage_would_rename_is_not_signed(s3):
    with pytest.raises(ValueError, match="signs as it is"):
        presigning.presigned_gets([f"{PREFIX}run/./a.txt"], 60)


def test_urls_are_signed_for_the_public_endpoint(s3, settings):
    settings.CASCADE_S3_PUBLIC_ENDPOINT_URL = "https://downloads.example.org"
    [url] = presigning.presigned_gets([f"{PREFIX}run/a.txt"], 60)
    put = presigning.presigned_put(f"{PREFIX}run/b.txt", 3, 60)
    assert {urlsplit(url).netloc, urlsplit(put).netloc} == {"downloads.example.org"}


def test_the_sqs_client_has_the_storages_options_at_the_s3_endpoint(s3, s3_server, settings):
    client = sqs.sqs_client()
    assert client.meta.endpoint_url == s3_server
    assert client.meta.region_name == "us-east-1"
    assert client.meta.config.read_timeout == 10
    assert client.meta.config.signature_version != "s3v4", "SQS signs as SQS does"
    assert sqs.sqs_client() is client
    settings.CASCADE_SQS_ENDPOINT_URL = "http://127.0.0.1:9"
    settings.STORAGES = {**settings.STORAGES}  # a new storage: a new client
    assert sqs.sqs_client().meta.endpoint_url == "http://127.0.0.1:9"


def test_a_read_is_refused_once_the_object_is_replaced(s3, upload):
    upload("run", {"a.txt": "first"})
    key = f"{PREFIX}run/a.txt"
    etag = bucket.head_etag(key)
    upload("run", {"a.txt": "second"})
    with pytest.raises(Exception) as refused:
        list(bucket.iter_object_lines(key, etag=etag))
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    assert bucket.read_head(key, 3) == b"sec"


def test_deleted_keys_are_gone_and_a_missing_one_is_no_error(s3, upload):
    upload("run", {"a": "1", "b": "2"})
    bucket.delete_keys([f"{PREFIX}run/a", f"{PREFIX}run/b", f"{PREFIX}run/never"])
    assert bucket.list_run_objects("run") == []
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(presigning.presigned_gets([f"{PREFIX}run/a"], 60)[0])
