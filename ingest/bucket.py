"""Cascade's reads of the bucket: listings, streams, ranges, and the few writes the tools make.

The bucket is the `traces` storage of STORAGES (ingest.storage), and its boto3 client, taken
from the storage, does what django-storages has no call for: listing goes through boto3's
paginator (a run's keys with their ETags and sizes, a page at a time), and objects are read as
streams, pinned to the ETag listed, so that a large stats file never sits in memory (the
storage's `open()` downloads a whole object, after a HEAD). Presigned URLs are
ingest.presigning's, the SQS queue of the bucket's events ingest.sqs's.

Requests can overlap: `overlapped` runs S3 work on a bounded pool of threads
(`CASCADE_S3_THREADS`). Each thread has its own client, from the storage's one boto3 session,
and the pool's threads live as long as the process.
"""

import logging
import operator
import os
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from itertools import islice, repeat
from pathlib import Path

from boto3.s3.transfer import TransferConfig
from django.conf import settings

from ingest.storage import bucket_name, client

# An object's bytes read at a time, split into lines a chunk at a time: the chunk's lines are in
# memory together. timing.csv's lines are short (some 22 bytes): a 1 MB chunk was 45,000 line
# objects, 4 MB of a pass's peak; 256 KiB is 1 MB, and as fast to read.
READ_CHUNK = 256 * 1024

logger = logging.getLogger(__name__)


class LineTooLong(ValueError):
    """An object with a line longer than allowed: not a stats file (or a hostile one)."""


# --- Overlapping requests: a bounded pool of threads, one client each ---------------------------

_pool: tuple[int, int, ThreadPoolExecutor] | None = None  # (pid, size, pool)
_pool_lock = threading.Lock()


def threads() -> int:
    """`CASCADE_S3_THREADS`: how many S3 requests a pass keeps in flight (1: one after another)."""
    return max(1, settings.CASCADE_S3_THREADS)


def _executor(size: int) -> ThreadPoolExecutor:
    """The process's pool, made on first use: after a fork (Celery's prefork) a child makes its own."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[:2] != (os.getpid(), size):
            if _pool is not None and _pool[0] == os.getpid():
                _pool[2].shutdown(wait=False)
            _pool = (os.getpid(), size, ThreadPoolExecutor(size, thread_name_prefix="cascade-s3"))
        return _pool[2]


def overlapped(
    work: Callable, items: Iterable, *, ahead: int | None = None
) -> Iterator[tuple[object, Future]]:
    """`(item, future of work(item))` for each item, in the order of `items`.

    `work` runs on the S3 threads, at most `ahead` items (twice the threads) beyond the one the
    caller is at, so what the results hold in memory stays bounded. `work` must not touch the
    database (Django's connections are per thread). A failure is the failing item's alone:
    `future.result()` raises it. With one thread, `work` runs on the caller's thread when the
    caller reaches its item: exactly one request after another.
    """
    size = threads()
    if size == 1:
        for item in items:
            future = Future()
            try:
                future.set_result(work(item))
            except Exception as error:
                future.set_exception(error)
            yield item, future
        return
    pool = _executor(size)
    ahead = ahead or 2 * size
    pending: deque = deque()
    iterator = iter(items)
    try:
        for item in iterator:
            pending.append((item, pool.submit(work, item)))
            if len(pending) > ahead:
                yield pending.popleft()
        while pending:
            yield pending.popleft()
    finally:
        for _, future in pending:  # the caller stopped early: what has not started never does
            future.cancel()


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


# A run's simulations live in its folder but are not its trace's files.
SIMULATIONS_FOLDER = "simulations/"


def list_run_objects(run_id: str, *, simulations: list[S3Object] | None = None) -> list[S3Object]:
    """Every object of one run's trace, sorted by key: its `simulations/` folder aside (added
    to `simulations` when given, so that one listing serves both)."""
    folder = run_prefix(run_id) + SIMULATIONS_FOLDER
    trace_objects = []
    for obj in _list(run_prefix(run_id)):
        if not obj.key.startswith(folder):
            trace_objects.append(obj)
        elif simulations is not None:
            simulations.append(obj)
    return trace_objects


def list_simulation_objects(run_id: str) -> list[S3Object]:
    """Every object of one run's `simulations/` folder, sorted by key."""
    return _list(run_prefix(run_id) + SIMULATIONS_FOLDER)


def list_under(key_prefix: str) -> list[S3Object]:
    """Every object whose key starts with `key_prefix` (one simulation's folder), sorted by key."""
    return _list(key_prefix)


def _list(key_prefix: str) -> list[S3Object]:
    paginator = client().get_paginator("list_objects_v2")
    objects = [
        S3Object(
            key=item["Key"], size=item["Size"], etag=item["ETag"], last_modified=item.get("LastModified")
        )
        for page in paginator.paginate(Bucket=bucket_name(), Prefix=key_prefix, PaginationConfig=paging())
        for item in page.get("Contents", ())
    ]
    return sorted(objects, key=lambda obj: obj.key)


def list_runs_objects(
    run_ids: set[str], *, simulations: dict[str, list[S3Object]] | None = None
) -> dict[str, list[S3Object]]:
    """Every object of the runs' traces (`list_run_objects`), sorted by key, from one listing
    of the whole prefix; their simulations' objects added to `simulations` when given.

    One request per CASCADE_S3_PAGE_SIZE objects under the prefix, whoever they belong to:
    cheaper than a listing per run when most of the prefix's objects are these runs'.
    """
    paginator = client().get_paginator("list_objects_v2")
    base = prefix()
    objects: dict[str, list[S3Object]] = {}
    for page in paginator.paginate(Bucket=bucket_name(), Prefix=base, PaginationConfig=paging()):
        for item in page.get("Contents", ()):
            run_id, slash, rest = item["Key"][len(base) :].partition("/")
            if not slash or run_id not in run_ids:
                continue
            obj = S3Object(
                key=item["Key"], size=item["Size"], etag=item["ETag"], last_modified=item.get("LastModified")
            )
            if not rest.startswith(SIMULATIONS_FOLDER):
                objects.setdefault(run_id, []).append(obj)
            elif simulations is not None:
                simulations.setdefault(run_id, []).append(obj)
    return {run_id: sorted(found, key=lambda obj: obj.key) for run_id, found in objects.items()}


def list_page(*, start_after: str = "") -> tuple[list[S3Object], bool]:
    """One listing request: up to CASCADE_S3_PAGE_SIZE objects under the prefix, every run's
    and `simulations/` included, with keys after `start_after`, in S3's order (UTF-8 bytes);
    and whether more follow. The reconciler's sweep (ingest.sweep) reads a page a pass."""
    kwargs = {"Bucket": bucket_name(), "Prefix": prefix(), "MaxKeys": settings.CASCADE_S3_PAGE_SIZE}
    if start_after:
        kwargs["StartAfter"] = start_after
    page = client().list_objects_v2(**kwargs)
    objects = [
        S3Object(
            key=item["Key"], size=item["Size"], etag=item["ETag"], last_modified=item.get("LastModified")
        )
        for item in page.get("Contents", ())
    ]
    return objects, bool(page.get("IsTruncated"))


def head_etag(key: str) -> str | None:
    """An object's ETag from one HEAD request; None if it is not there."""
    s3 = client()
    try:
        return s3.head_object(Bucket=bucket_name(), Key=key)["ETag"]
    except s3.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


def get_object(key: str, etag: str | None = None, **kwargs) -> dict:
    """A GET of `key`; with `etag`, of that version only (`IfMatch`).

    A parse reads the objects of one listing: every read of it passes the listed ETag, so
    that an object replaced since (a re-upload under way) fails the read with S3's 412
    PreconditionFailed, a botocore ClientError that the pass retries on its next listing,
    instead of mixing two uploads' files in one trace.
    """
    if etag:
        kwargs["IfMatch"] = etag
    return client().get_object(Bucket=bucket_name(), Key=key, **kwargs)


def read_object(key: str, max_bytes: int, *, etag: str | None = None) -> bytes:
    """A small object whole; raises ValueError past `max_bytes`, before reading it."""
    return read_object_and_etag(key, max_bytes, etag=etag)[0]


def read_object_and_etag(key: str, max_bytes: int, *, etag: str | None = None) -> tuple[bytes, str]:
    """A small object whole and the ETag of what was read; ValueError past `max_bytes`."""
    response = get_object(key, etag)
    if response["ContentLength"] > max_bytes:
        response["Body"].close()
        raise too_large(response["ContentLength"], max_bytes)
    return response["Body"].read(), response["ETag"]


def too_large(size: int, max_bytes: int) -> ValueError:
    return ValueError(f"{size} bytes, more than the {max_bytes} expected")


def iter_object_lines(
    key: str, max_line: int | None = None, *, etag: str | None = None, blank_runs: bool = False
) -> Iterator[bytes]:
    """An object's lines as they stream in, each with its line ending (if it had one).

    Memory stays within a chunk and `max_line`: a line longer than that raises LineTooLong
    as soon as it is seen, however long the file (a file without newlines is one line).
    With `etag`, that version or a ClientError (get_object). With `blank_runs`, a run of
    blank lines comes as one piece (see `_lines`): for a reader that counts its lines.
    """
    body = get_object(key, etag)["Body"]
    try:
        yield from _lines(
            body.iter_chunks(READ_CHUNK), max_line or settings.CASCADE_MAX_STATS_LINE, blank_runs
        )
    finally:
        body.close()


def iter_lines(data: bytes, max_line: int | None = None, *, blank_runs: bool = False) -> Iterator[bytes]:
    """The lines of an object already read whole, exactly as `iter_object_lines` gives them."""
    chunks = (data[start : start + READ_CHUNK] for start in range(0, len(data), READ_CHUNK))
    return _lines(chunks, max_line or settings.CASCADE_MAX_STATS_LINE, blank_runs)


# What bytes.isspace calls blank (ingest.stats skips such lines), before a line's newline.
BLANK_LINE = rb"[ \t\r\x0b\x0c]*\n"
# From a line's start: a run of two blank lines or more (as far as the whitespace goes, back to
# its last newline: one class repeated, where a repeated group would cost a step per line), or
# one line. A single blank line costs less as a line of its own.
LINE_OR_BLANK_RUN = re.compile(BLANK_LINE * 2 + rb"(?:[ \t\r\x0b\x0c\n]*\n)?|[^\n]*\n").findall
# Runs of blank lines are looked for only in a chunk whose lines average fewer bytes than this:
# elsewhere a line at a time costs less per byte, blank lines included, than the rows around
# them, and splitting is faster than the regex.
SHORT_LINES = 32


def _lines(chunks: Iterable[bytes], max_line: int, blank_runs: bool = False) -> Iterator[bytes]:
    """Each line of the chunks' bytes with its newline; a line cut by a chunk's end is joined.

    With `blank_runs`, in a chunk of short lines (SHORT_LINES), each run of two blank lines or
    more is one piece, the lines' bytes as they are: a file of blank lines then costs a few
    pieces a chunk, not a step of the reader per line (ingest.stats counts a piece's newlines).
    """
    pending: list[bytes] = []  # the start of a line that began in earlier chunks
    pending_size = 0
    offset = 0
    for chunk in chunks:
        end = chunk.rfind(b"\n") + 1  # just after the chunk's last newline
        if end:
            start = 0  # where the chunk's first whole line starts
            if pending:
                start = chunk.find(b"\n") + 1
                first = b"".join((*pending, chunk[:start]))
                if len(first) - 1 > max_line:
                    raise _line_too_long(max_line, offset - pending_size)
                yield first
            # The chunk split whole, as it came (a slice of it would be a copy). For `blank_runs`,
            # no further than lines of SHORT_LINES bytes on average would go: a chunk of more
            # lines (blank ones, maybe) is read by LINE_OR_BLANK_RUN instead.
            most = -1  # no limit
            if blank_runs and end - start <= max_line:
                most = (end - start) // SHORT_LINES + (1 if start else 0)
            lines = chunk.split(b"\n", most)
            if len(lines) == most + 1 and b"\n" in lines[-1]:  # the limit was reached
                yield from LINE_OR_BLANK_RUN(chunk, start, end)
            else:
                lines.pop()  # what follows the last newline
                whole = islice(lines, 1, None) if start else lines  # less the line `first` ended
                if end - start > max_line:  # one of them may be too long
                    yield from _up_to_a_line_too_long(whole, max_line, offset + start)
                else:
                    yield from map(operator.add, whole, repeat(b"\n"))
            pending, pending_size = ([chunk[end:]], len(chunk) - end) if end < len(chunk) else ([], 0)
        else:
            pending.append(chunk)
            pending_size += len(chunk)
        offset += len(chunk)
        # Let go of this chunk and its lines before the next is read and split: else both
        # chunks' lines are in memory together at the split.
        chunk = lines = whole = None
        if pending_size > max_line:
            raise _line_too_long(max_line, offset - pending_size)
    last = b"".join(pending)
    if last:
        yield last


def _up_to_a_line_too_long(lines: Iterable[bytes], max_line: int, at: int) -> Iterator[bytes]:
    """`lines` (which start at byte `at`) with their newlines, up to LineTooLong for the first
    longer than `max_line`: what comes before it first, so errors come in the file's order."""
    for line in lines:
        if len(line) > max_line:
            raise _line_too_long(max_line, at)
        at += len(line) + 1
        yield line + b"\n"


def _line_too_long(max_line: int, at: int) -> LineTooLong:
    return LineTooLong(f"a line of more than {max_line} bytes (CASCADE_MAX_STATS_LINE) at byte {at}")


def put_object(key: str, body: bytes) -> None:
    client().put_object(Bucket=bucket_name(), Key=key, Body=body)


def put_object_if_absent(key: str, body: bytes) -> bool:
    """PUT `key` only if no object has that key (S3's conditional write, `If-None-Match: *`):
    whether this PUT made it. Of two at once, S3 lets exactly one through (412 to the other)."""
    s3 = client()
    try:
        s3.put_object(Bucket=bucket_name(), Key=key, Body=body, IfNoneMatch="*")
    except s3.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") in (
            "PreconditionFailed",
            "412",
            "ConditionalRequestConflict",
        ):
            return False
        raise
    return True


def holds_objects(key_prefix: str) -> bool:
    """Whether any object's key starts with `key_prefix` (one listing request of one key)."""
    page = client().list_objects_v2(Bucket=bucket_name(), Prefix=key_prefix, MaxKeys=1)
    return bool(page.get("Contents"))


def upload_file(path: Path, key: str) -> None:
    client().upload_file(str(path), bucket_name(), key)


def ensure_bucket() -> None:
    """Create the bucket if it does not exist (the embedded S3 endpoint starts empty)."""
    s3 = client()
    try:
        s3.head_bucket(Bucket=bucket_name())
    except s3.exceptions.ClientError:
        s3.create_bucket(Bucket=bucket_name())


def read_head(key: str, nbytes: int, *, etag: str | None = None) -> bytes:
    """The first `nbytes` of an object, with a ranged GET (of version `etag`, get_object)."""
    response = get_object(key, etag, Range=f"bytes=0-{nbytes - 1}")
    return response["Body"].read()


def iter_object_chunks(key: str, size: int = 64 * 1024, *, etag: str | None = None) -> Iterator[bytes]:
    """An object's bytes as they stream in, `size` at a time (of version `etag`, get_object)."""
    body = get_object(key, etag)["Body"]
    try:
        yield from body.iter_chunks(size)
    finally:
        body.close()


# CopyObject copies up to 5 GiB; a larger object is copied in UploadPartCopy parts of this size.
COPY_PART_BYTES = 5 * 1024**3


def copy_key(source: str, destination: str) -> None:
    """`source` copied to `destination` inside the bucket, no byte through Cascade: one
    CopyObject, or UploadPartCopy parts past 5 GiB (boto3's managed copy chooses)."""
    config = TransferConfig(multipart_threshold=COPY_PART_BYTES, multipart_chunksize=COPY_PART_BYTES)
    client().copy({"Bucket": bucket_name(), "Key": source}, bucket_name(), destination, Config=config)


def delete_keys(keys: list[str]) -> None:
    """DeleteObjects, 1,000 keys a request (S3's maximum); a key already gone is no error.

    Not the storage's `delete`: a request per key, and it normalises the name it is given
    (`a/./b` is `a/b`), where a key found in a listing must be deleted as it is."""
    s3, bucket = client(), bucket_name()
    for start in range(0, len(keys), 1000):
        batch = [{"Key": key} for key in keys[start : start + 1000]]
        s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
