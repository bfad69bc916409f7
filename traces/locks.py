"""One ingestion at a time per trace, across processes and machines.

On PostgreSQL a session-level advisory lock: it is released when the holder's connection
ends, so a killed pass frees its traces at once and the next pass picks them up. Its key is
64 bits of the SHA-256 of the name (`advisory_key`): with a 32-bit hash (`hashtext`), two of
100,000 traces share a key more often than not, and a pass would skip, or an operator's action
refuse, a trace that nobody holds. 64 bits make a shared key as unlikely as a lost disk. For the
embedded SQLite mode (one machine) an flock on a file under VAR_DIR does the same job, one
file per (database, trace): installations that share VAR_DIR with different databases (the
test suite's parallel workers) do not block each other.
"""

import contextlib
import hashlib
from collections.abc import Iterator

from django.conf import settings
from django.db import connection

# Hashed with each name: Cascade's keys are its own, not another application's on the same
# database (PostgreSQL's single-bigint advisory keys have no namespace).
ADVISORY_NAMESPACE = b"cascade trace lock\0"


def advisory_key(trace_id: str) -> int:
    """The PostgreSQL advisory lock key of `trace_id` (or of the poll, "/poll_bucket"): a signed
    64-bit integer, the first 8 bytes of a SHA-256."""
    digest = hashlib.sha256(ADVISORY_NAMESPACE + trace_id.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextlib.contextmanager
def trace_lock(trace_id: str) -> Iterator[bool]:
    """Yields True with the trace's lock held, or False at once if another process holds it."""
    if connection.vendor == "postgresql":
        key = advisory_key(trace_id)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s::bigint)", [key])
            acquired = cursor.fetchone()[0]
        try:
            yield acquired
        finally:
            if acquired:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s::bigint)", [key])
        return
    with _file_lock(trace_id) as acquired:
        yield acquired


@contextlib.contextmanager
def _file_lock(trace_id: str) -> Iterator[bool]:
    try:
        import fcntl
    except ImportError:  # no flock (Windows): the embedded mode runs one poller
        yield True
        return
    lock_dir = settings.VAR_DIR / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    database = str(connection.settings_dict["NAME"])
    path = lock_dir / hashlib.sha256(f"{database}\0{trace_id}".encode()).hexdigest()[:32]
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
