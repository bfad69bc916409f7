"""A large trace detail's compressed bytes kept on local disk, so that it is encoded once.

Encoding a 1M-launch detail and compressing it takes seconds of CPU and a read of every
launch; a second client asking for the same coding of the same representation gets the
bytes the first one got, streamed from a file (sendfile where the server has it).

- Key: the detail's ETag digest (`http.trace_digest`: the trace row's id and `updated_at`)
  and the coding. A changed trace has a new digest, so an old file is never served; writing
  a trace's new file removes its older ones, and the byte bound removes the rest.
- Layout: `<CASCADE_VAR_DIR>/body-cache/<hash of the trace id>/<digest>.<coding>`, one folder
  per trace, so that deleting a trace removes its folder without listing the others, and a
  request for a trace that has no folder costs a stat and no query.
- Atomic: the first answer is written to a temporary file in that folder as it streams (a
  tee), renamed only once the client was sent the whole body. An exception, a client that
  hangs up or a body over the bound leaves no file; two workers writing at once each rename
  a complete file, the second one wins.
- Bounded by `CASCADE_BODY_CACHE_BYTES` (0 disables): when a new file makes the folder
  larger, the least recently served files go first (serving a file touches its mtime).

Everything under `body-cache/` can be deleted at any time: the next request recomputes.
"""

import hashlib
import logging
import os
import secrets
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from django.conf import settings

logger = logging.getLogger(__name__)

FOLDER = "body-cache"
PARTIAL = ".partial-"


def root() -> Path:
    return Path(settings.VAR_DIR) / FOLDER


def enabled() -> bool:
    return settings.CASCADE_BODY_CACHE_BYTES > 0


def trace_folder(trace_id: str) -> Path:
    """A trace's folder: a hash of its id (ids are S3 folder names, not file names)."""
    return root() / hashlib.blake2b(trace_id.encode(), digest_size=12).hexdigest()


def body_path(trace_id: str, digest: str, coding: str) -> Path:
    return trace_folder(trace_id) / f"{digest}.{coding}"


def has_bodies(trace_id: str) -> bool:
    """Could this trace have a kept body? A stat, before any query is spent on the ETag."""
    return enabled() and trace_folder(trace_id).is_dir()


def open_body(trace_id: str, digest: str, coding: str):
    """The kept body's open file (its use recorded for the LRU), or None."""
    path = body_path(trace_id, digest, coding)
    try:
        body = path.open("rb")
    except FileNotFoundError:
        return None
    try:
        os.utime(path)
    except OSError:  # evicted between the open and now: the open file is still whole
        pass
    return body


def tee(chunks: Iterable[bytes], trace_id: str, digest: str, coding: str) -> Iterator[bytes]:
    """`chunks` as they come, written to a temporary file renamed to the body's once the last
    one was sent. Closing this generator (a client that hung up) closes `chunks` and removes
    the temporary file; so does an exception, or a body larger than the whole bound."""
    limit = settings.CASCADE_BODY_CACHE_BYTES
    final = body_path(trace_id, digest, coding)
    partial = None
    out = None
    try:
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            partial = final.parent / f"{PARTIAL}{digest}.{coding}.{os.getpid()}.{secrets.token_hex(4)}"
            out = partial.open("wb")
        except OSError as error:  # a full or read-only disk: serve without keeping
            logger.warning("body cache: cannot write in %s: %s", final.parent, error)
        written = 0
        for chunk in chunks:
            if out is not None:
                written += len(chunk)
                if written > limit:
                    out.close()
                    out = None
                    partial.unlink(missing_ok=True)
                else:
                    out.write(chunk)
            yield chunk
        if out is not None:
            out.close()
            out = None
            os.replace(partial, final)
            partial = None
            forget_others(final)
            evict(limit)
    finally:
        if out is not None:
            out.close()
        if partial is not None:
            partial.unlink(missing_ok=True)
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def forget_others(kept: Path) -> None:
    """The trace's older bodies (other digests): its row changed since, they are never served."""
    digest = kept.name.split(".", 1)[0]
    for path in kept.parent.iterdir():
        if not path.name.startswith((digest + ".", PARTIAL)):
            path.unlink(missing_ok=True)


def evict(limit: int) -> None:
    """Remove the least recently served bodies until the folder holds at most `limit` bytes."""
    files = []
    for folder in root().iterdir():
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if path.name.startswith(PARTIAL):
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            files.append((stat.st_mtime_ns, stat.st_size, path))
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files, key=lambda file: file[0]):
        if total <= limit:
            break
        path.unlink(missing_ok=True)
        total -= size
        try:
            path.parent.rmdir()  # its trace's last body
        except OSError:
            pass


def forget(trace_id: str) -> None:
    """A deleted trace's bodies: its folder goes."""
    shutil.rmtree(trace_folder(trace_id), ignore_errors=True)
