"""Everything Cascade does with S3, in one place.

The connection comes from the `traces` storage that django-storages builds from settings
(bucket, endpoint, region; credentials from the standard AWS variables). Listing goes
through boto3's paginator, since `Storage.listdir` gives neither sizes nor ETags, and
objects are read as streams so that a large stats file never sits in memory.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import storages

READ_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class S3Object:
    key: str
    size: int
    etag: str  # opaque: compared, never interpreted
    last_modified: datetime | None = None

    @property
    def name(self) -> str:
        """The key relative to its run folder, e.g. `traces/stats_ctx_0x6165bdd7ec90`."""
        return self.key.split("/", maxsplit=prefix_depth() + 1)[-1]


def prefix() -> str:
    """`CASCADE_S3_PREFIX`, always ending with "/" unless empty (the bucket's root)."""
    value = settings.CASCADE_S3_PREFIX.lstrip("/")
    return value if not value or value.endswith("/") else value + "/"


def prefix_depth() -> int:
    return prefix().count("/")


def run_prefix(run_id: str) -> str:
    return f"{prefix()}{run_id}/"


def traces_storage():
    storage = storages["traces"]
    if not storage.bucket_name:
        raise ImproperlyConfigured(
            "CASCADE_S3_BUCKET is not set: Cascade needs the bucket the profiler uploads to."
        )
    return storage


def client():
    return traces_storage().connection.meta.client


def bucket_name() -> str:
    return traces_storage().bucket_name


def paging() -> dict:
    """`CASCADE_S3_PAGE_SIZE` keys per listing request (S3 returns at most 1,000)."""
    return {"PageSize": settings.CASCADE_S3_PAGE_SIZE}


def list_run_ids() -> Iterator[str]:
    """The run folders under the prefix: one entry per run, whatever each holds."""
    paginator = client().get_paginator("list_objects_v2")
    base = prefix()
    pages = paginator.paginate(Bucket=bucket_name(), Prefix=base, Delimiter="/", PaginationConfig=paging())
    for page in pages:
        for common in page.get("CommonPrefixes", ()):
            run_id = common["Prefix"][len(base) :].rstrip("/")
            if run_id:
                yield run_id


def list_run_objects(run_id: str) -> list[S3Object]:
    """Every object of one run, sorted by key."""
    paginator = client().get_paginator("list_objects_v2")
    objects = [
        S3Object(
            key=item["Key"], size=item["Size"], etag=item["ETag"], last_modified=item.get("LastModified")
        )
        for page in paginator.paginate(
            Bucket=bucket_name(), Prefix=run_prefix(run_id), PaginationConfig=paging()
        )
        for item in page.get("Contents", ())
    ]
    return sorted(objects, key=lambda obj: obj.key)


def read_object(key: str, max_bytes: int) -> bytes:
    """A small object whole; raises ValueError past `max_bytes`, before reading it."""
    response = client().get_object(Bucket=bucket_name(), Key=key)
    if response["ContentLength"] > max_bytes:
        response["Body"].close()
        raise ValueError(f"{response['ContentLength']} bytes, more than the {max_bytes} expected")
    return response["Body"].read()


def iter_object_lines(key: str) -> Iterator[bytes]:
    """An object's lines as they stream in, each with its line ending (if it had one)."""
    body = client().get_object(Bucket=bucket_name(), Key=key)["Body"]
    try:
        pending = b""
        for chunk in body.iter_chunks(READ_CHUNK):
            pending += chunk
            lines = pending.split(b"\n")
            pending = lines.pop()
            for line in lines:
                yield line + b"\n"
        if pending:
            yield pending
    finally:
        body.close()


def put_object(key: str, body: bytes) -> None:
    client().put_object(Bucket=bucket_name(), Key=key, Body=body)


def upload_file(path: Path, key: str) -> None:
    client().upload_file(str(path), bucket_name(), key)


def ensure_bucket() -> None:
    """Create the bucket if it does not exist (the embedded S3 endpoint starts empty)."""
    s3 = client()
    try:
        s3.head_bucket(Bucket=bucket_name())
    except s3.exceptions.ClientError:
        s3.create_bucket(Bucket=bucket_name())


def read_head(key: str, nbytes: int) -> bytes:
    """The first `nbytes` of an object, with a ranged GET."""
    response = client().get_object(Bucket=bucket_name(), Key=key, Range=f"bytes=0-{nbytes - 1}")
    return response["Body"].read()
