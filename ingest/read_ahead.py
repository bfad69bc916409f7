"""A run's small files, read ahead on the S3 threads while an earlier trace is parsed, and
where a decision on the run reads every file from.

A pass reads metadata.json and the small files a parse will read (up to PREFETCH_FILE_BYTES
each) a few traces ahead of the one it parses (ingest.decision.fetch_small_files). The
decision then asks this object for each file: the body read ahead if it is the listed version
(the same ETag), else a stream from S3, as without it. One more GET is saved on a parse with
several contexts: the stream opened to read the first line of the first stats file (its
header) is kept for the parse to go on with.
"""

from collections.abc import Iterator, Mapping
from itertools import chain

from ingest import bucket
from ingest.bucket import S3Object

# What a pass reads ahead for each trace: files up to this size. Larger files stream on the
# pass's thread when they are parsed.
PREFETCH_FILE_BYTES = 1024 * 1024


class ReadAhead:
    """What was read of one run's files before the decision reads them.

    `bodies`, by (key, ETag of what was read): a body serves only that version of its key. A
    read that failed (S3 trouble, retries spent) is kept and raised where the decision reads
    that file, exactly as if it had been read then (a stats file's, after `parsing`).
    """

    def __init__(self, bodies: Mapping[tuple[str, str], bytes] | None = None):
        self.bodies: dict[tuple[str, str], bytes] = dict(bodies or {})
        self.errors: dict[tuple[str, str], Exception] = {}
        self.opened: dict[str, Iterator[bytes]] = {}  # streams a header peek started, by key

    # On an S3 thread: S3 only, never the database.

    def fetch(self, obj: S3Object, max_bytes: int | None = None) -> bool:
        """Read `obj` whole if it is small; False if it is not (left to the parse) or could not
        be read (the error is kept for the decision to raise)."""
        limit = min(PREFETCH_FILE_BYTES, max_bytes or PREFETCH_FILE_BYTES, obj.size)
        if obj.size > limit:
            return False
        try:
            data, etag = bucket.read_object_and_etag(obj.key, limit)
        except ValueError:  # larger than listed: replaced since; the decision reads it itself
            return False
        except Exception as error:  # S3 trouble, retries spent: this file's, raised when it is read
            self.errors[obj.key, obj.etag] = error
            return False
        self.bodies[obj.key, etag] = data
        return True

    # On the pass's thread, for the decision.

    def body(self, obj: S3Object) -> bytes | None:
        """The listed version of `obj` if it was read ahead; None if not; its read's error if that failed."""
        key = (obj.key, obj.etag)
        error = self.errors.get(key)
        if error is not None:
            raise error
        return self.bodies.get(key)

    def read_whole(self, obj: S3Object, max_bytes: int) -> bytes:
        """A small object whole; ValueError past `max_bytes`."""
        data = self.body(obj)
        if data is None:
            return bucket.read_object(obj.key, max_bytes, etag=obj.etag)
        if len(data) > max_bytes:
            raise bucket.too_large(len(data), max_bytes)
        return data

    def read_lines(self, obj: S3Object, *, blank_runs: bool = False) -> Iterator[bytes]:
        """An object's lines: the stream `first_line` opened, the body read ahead, or a stream
        from S3 of the listed version only (a replaced object raises ClientError, bucket.get_object).
        `blank_runs`: runs of blank lines as one piece each, for the stats parser (bucket._lines)."""
        opened = self.opened.pop(obj.key, None)
        if opened is not None:
            return opened
        data = self.body(obj)
        if data is None:
            return bucket.iter_object_lines(obj.key, etag=obj.etag, blank_runs=blank_runs)
        return bucket.iter_lines(data, blank_runs=blank_runs)

    def head(self, obj: S3Object, peek_bytes: int) -> bytes:
        """The first `peek_bytes` of `obj`: of the body read ahead, else a ranged GET (on any thread)."""
        data = self.body(obj)
        if data is not None:
            return data[:peek_bytes]
        return bucket.read_head(obj.key, peek_bytes, etag=obj.etag)

    def first_line(self, obj: S3Object, peek_bytes: int) -> bytes:
        """The start of a stats file `obj`, its first line in it unless that is longer than `peek_bytes`.

        The first file read from S3 so is opened for the parse and its stream kept (read_lines
        goes on with it); others are ranged GETs of `peek_bytes`.
        """
        if self.opened or self.body(obj) is not None:
            return self.head(obj, peek_bytes)
        lines = bucket.iter_object_lines(obj.key, etag=obj.etag, blank_runs=True)
        try:
            head = next(lines, b"")
        except bucket.LineTooLong:  # the parse says so, in its turn
            return bucket.read_head(obj.key, peek_bytes, etag=obj.etag)
        self.opened[obj.key] = chain([head], lines)
        return head
