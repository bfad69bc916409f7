"""The web tier's reads from a PostgreSQL replica (`DATABASE_REPLICA_URL`); everything else on
the primary.

Why: at a community's scale most queries are scripts reading the API and operators browsing
the admin, while the primary's CPU and disk are the ingestion's (COPYs of millions of
launches, purges). A streaming standby serves those reads; the primary keeps every write and
every read that must see one.

What goes where (docs/production.md, "Reads from a replica"):
- `ReplicaReadsMiddleware` decides once per request: a GET or HEAD under `/api/` or `/admin/`
  reads from the replica, unless the same browser sent a write (a POST: an admin action, a
  delete, a login) less than `PIN_SECONDS` ago, told by a signed cookie set on that write's
  answer, so the redirect after an action shows the primary's view. Every other request reads
  from the primary. The decision holds for the whole request, a streamed body included: the
  stream's queries run after the view returned, so the alias is set again around each chunk.
- On the primary whatever the request: every write; every read while the primary's connection
  is inside a transaction (a service's, `select_for_update`, which Django also sends to the
  write database); the rest of a request once it wrote a model read from the replica (read
  your own writes); authentication and sessions (users, permissions, sessions, API tokens,
  django-axes, the admin's log), so that a token `create_token` just issued works at once and
  a revoked one stops at once, whatever the replica's lag.
- Outside a web request nothing is routed: `ingest_traces`, Celery tasks, management commands,
  migrations and the re-ingest thread never pass the middleware, so they read the primary; so
  do the advisory locks (`traces/locks.py` holds them on `django.db.connection`).
- Raw SQL on the read paths (`traces/selectors.py`, `analysis.py`, `selection.py`,
  `accuracy.py`) goes through `read_connection`, so its snapshot transactions and server-side
  cursors are on the same connection as the ORM's reads of the same request.

Lag shows as staleness, never as an error: an ETag computed on the replica is the replica's
(its digest names the trace's `updated_at` there, so a detail kept by `traces/body_cache.py`
under it is that version's bytes), and a trace ingested a moment ago may answer 404 on the API
a moment longer than on the primary.
"""

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.core.exceptions import MiddlewareNotUsed
from django.db import DEFAULT_DB_ALIAS, connections

PRIMARY = DEFAULT_DB_ALIAS
REPLICA = "replica"
# How long after a browser's write its reads stay on the primary: longer than a replica's lag
# under load (a second at most, on one network), short enough to leave the replica its share.
PIN_SECONDS = 10
PIN_COOKIE = "cascade_primary"
READ_PATHS = ("/api/", "/admin/")
READ_METHODS = frozenset({"GET", "HEAD"})
# Methods that change nothing: answering them does not pin the browser to the primary.
SAFE_METHODS = READ_METHODS | {"OPTIONS", "TRACE"}
# Who the request is, and what it may do: read where it was written, whatever the lag.
PRIMARY_APPS = frozenset({"auth", "sessions", "contenttypes", "admin", "axes"})
PRIMARY_MODELS = frozenset({"traces.apitoken"})

_reads: ContextVar[str] = ContextVar("cascade_reads", default=PRIMARY)


def read_alias() -> str:
    """The database this request's reads go to now."""
    alias = _reads.get()
    if alias != PRIMARY and connections[PRIMARY].in_atomic_block:
        return PRIMARY
    return alias


def reads_primary_only(model) -> bool:
    meta = model._meta
    return meta.app_label in PRIMARY_APPS or meta.label_lower in PRIMARY_MODELS


class ReadConnection:
    """`django.db.connection` for reads: the connection `read_alias()` names at each use."""

    def __getattr__(self, name):
        return getattr(connections[read_alias()], name)


read_connection = ReadConnection()


@contextmanager
def reads_from(alias: str) -> Iterator[None]:
    """Reads inside go to `alias` (the middleware's decision; a bench's or a test's)."""
    token = _reads.set(alias)
    try:
        yield
    finally:
        _reads.reset(token)


def streamed_from(alias: str, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """`chunks`, each one produced with reads on `alias`: a streamed body's queries run after
    the middleware returned, in whatever context the server iterates it from."""
    iterator = iter(chunks)
    try:
        while True:
            token = _reads.set(alias)
            try:
                chunk = next(iterator)
            except StopIteration:
                return
            finally:
                _reads.reset(token)
            yield chunk
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


class ReplicaRouter:
    """Django's router: reads where `read_alias()` says, writes on the primary (which pins the
    rest of the request there), migrations on the primary only (the replica replays them)."""

    def db_for_read(self, model, **hints):
        return PRIMARY if reads_primary_only(model) else read_alias()

    def db_for_write(self, model, **hints):
        if not reads_primary_only(model) and _reads.get() != PRIMARY:
            _reads.set(PRIMARY)  # undone with the middleware's own token, at the request's end
        return PRIMARY

    def allow_relation(self, obj1, obj2, **hints):
        return True  # one database, two servers

    def allow_migrate(self, db, app_label, **hints):
        return db == PRIMARY


def pinned_to_primary(request) -> bool:
    return (
        request.get_signed_cookie(PIN_COOKIE, default=None, salt=PIN_COOKIE, max_age=PIN_SECONDS) is not None
    )


def reads_replica(request) -> bool:
    return (
        request.method in READ_METHODS
        and request.path_info.startswith(READ_PATHS)
        and not pinned_to_primary(request)
    )


class ReplicaReadsMiddleware:
    """Decides where a request reads (see the module's docstring); pins a browser that wrote."""

    def __init__(self, get_response):
        if REPLICA not in connections:
            raise MiddlewareNotUsed
        self.get_response = get_response

    def __call__(self, request):
        if not reads_replica(request):
            response = self.get_response(request)
            if request.method not in SAFE_METHODS:
                response.set_signed_cookie(
                    PIN_COOKIE,
                    "1",
                    salt=PIN_COOKIE,
                    max_age=PIN_SECONDS,
                    httponly=True,
                    samesite="Lax",
                    secure=settings.SESSION_COOKIE_SECURE,
                )
            return response
        with reads_from(REPLICA):
            response = self.get_response(request)
            decided = _reads.get()  # the primary, if the view wrote
        # A file's body (a kept detail) reads no database: its sendfile is left alone.
        if (
            decided != PRIMARY
            and response.streaming
            and not response.is_async
            and getattr(response, "file_to_stream", None) is None
        ):
            response.streaming_content = streamed_from(decided, response.streaming_content)
        return response
