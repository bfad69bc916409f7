"""Everything Cascade does with S3, in one place.

The connection comes from the `traces` storage that django-storages builds from settings
(bucket, endpoint, region; credentials from the standard AWS variables). Listing goes
through boto3's paginator, since `Storage.listdir` gives neither sizes nor ETags, and
objects are read as streams so that a large stats file never sits in memory.
"""

import logging
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import storages

READ_CHUNK = 1024 * 1024

logger = logging.getLogger(__name__)


class LineTooLong(ValueError):
    """An object with a line longer than allowed: not a stats file (or a hostile one)."""


# --- What a pass costs: S3 requests counted by botocore's own events ---------------------------


class S3Meter:
    """Requests sent and seconds spent waiting for their responses, across every thread's client."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests = 0
        self.seconds = 0.0

    def add(self, seconds: float) -> None:
        with self._lock:
            self.requests += 1
            self.seconds += seconds

    def snapshot(self) -> tuple[int, float]:
        with self._lock:
            return self.requests, self.seconds


meter = S3Meter()
_metered_clients: "weakref.WeakSet" = weakref.WeakSet()
_sent_at = threading.local()


def _before_send(request=None, **kwargs):
    _sent_at.value = time.monotonic()


def _after_response(**kwargs):
    started = getattr(_sent_at, "value", None)
    if started is not None:
        meter.add(time.monotonic() - started)
        _sent_at.value = None


def _log_retry(attempts=None, caught_exception=None, response=None, operation=None, **kwargs):
    """Says why S3 is retried: a stalled read (CASCADE_S3_READ_TIMEOUT), a reset, a 5xx, SlowDown."""
    if caught_exception is not None:
        reason = f"{type(caught_exception).__name__}: {caught_exception}"
    elif response is not None and response[1].get("Error"):
        status = response[1].get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        code = response[1]["Error"].get("Code")
        if status < 500 and code not in ("SlowDown", "Throttling", "RequestTimeout"):
            return None  # an answer (404, 403), not trouble: nothing is retried
        reason = f"{code} ({status})"
    else:
        return None
    logger.warning("S3 %s, attempt %s: %s", getattr(operation, "name", "request"), attempts, reason)
    return None  # botocore's own retry handler decides


def _metered(s3):
    if s3 not in _metered_clients:
        events = s3.meta.events
        events.register("before-send.s3", _before_send)
        events.register("response-received.s3", _after_response)
        events.register("needs-retry.s3", _log_retry)
        _metered_clients.add(s3)
    return s3


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
    return _metered(traces_storage().connection.meta.client)


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


def head_etag(key: str) -> str | None:
    """An object's ETag from one HEAD request; None if it is not there."""
    s3 = client()
    try:
        return s3.head_object(Bucket=bucket_name(), Key=key)["ETag"]
    except s3.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


def read_object(key: str, max_bytes: int) -> bytes:
    """A small object whole; raises ValueError past `max_bytes`, before reading it."""
    response = client().get_object(Bucket=bucket_name(), Key=key)
    if response["ContentLength"] > max_bytes:
        response["Body"].close()
        raise ValueError(f"{response['ContentLength']} bytes, more than the {max_bytes} expected")
    return response["Body"].read()


def iter_object_lines(key: str, max_line: int | None = None) -> Iterator[bytes]:
    """An object's lines as they stream in, each with its line ending (if it had one).

    Memory stays within a chunk and `max_line`: a line longer than that raises LineTooLong
    as soon as it is seen, however long the file (a file without newlines is one line).
    """
    max_line = max_line or settings.CASCADE_MAX_STATS_LINE
    body = client().get_object(Bucket=bucket_name(), Key=key)["Body"]
    try:
        pending: list[bytes] = []  # the start of a line that began in earlier chunks
        pending_size = 0
        offset = 0
        for chunk in body.iter_chunks(READ_CHUNK):
            lines = chunk.split(b"\n")
            if len(lines) > 1:
                first = b"".join((*pending, lines[0])) if pending else lines[0]
                if len(first) > max_line:
                    raise LineTooLong(
                        f"a line of more than {max_line} bytes (CASCADE_MAX_STATS_LINE) at byte {offset - pending_size}"
                    )
                yield first + b"\n"
                for line in lines[1:-1]:
                    if len(line) > max_line:
                        raise LineTooLong(f"a line of more than {max_line} bytes (CASCADE_MAX_STATS_LINE)")
                    yield line + b"\n"
                pending, pending_size = [lines[-1]], len(lines[-1])
            else:
                pending.append(chunk)
                pending_size += len(chunk)
            offset += len(chunk)
            if pending_size > max_line:
                raise LineTooLong(
                    f"a line of more than {max_line} bytes (CASCADE_MAX_STATS_LINE) at byte {offset - pending_size}"
                )
        last = b"".join(pending)
        if last:
            yield last
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
