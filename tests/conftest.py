"""Fixtures shared by every test: API clients with tokens, traces, S3 and run folders uploaded to it,
the `postgres` marker.

Helpers that tests import (constants, rows, a lock held elsewhere) are in tests/helpers.py, which
re-exports SHARED_FIXTURES and shared_fixture from here.
"""

import functools
import os
from pathlib import Path

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import Client, override_settings
from rest_framework.test import APIClient

from traces import kernel_store
from traces.models import ApiToken, Kernel, Trace

# Real files from public repositories are not the repository's to carry: they are provided beside
# the checkout (CI always has them) and read where they are. The one setting that says where.
SHARED_FIXTURES = Path(
    os.environ.get(
        "CASCADE_SHARED_FIXTURES", Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures"
    )
).resolve()


def shared_fixture(*parts: str) -> Path:
    """A real file (or folder) under SHARED_FIXTURES. Where it is absent the test skips, saying why
    (or, called while a module is imported, the whole module does)."""
    path = SHARED_FIXTURES.joinpath(*parts)
    if not path.exists():
        pytest.skip(
            f"needs the real files in {SHARED_FIXTURES} (CASCADE_SHARED_FIXTURES): {path} is absent",
            allow_module_level=True,
        )
    return path


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing():
    """MD5 instead of PBKDF2 for the users tests create: PBKDF2 is slow on purpose, and the
    suite creates a user for most admin tests. Production settings are untouched."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(autouse=True)
def empty_cache():
    """Each test starts with an empty cache: request counts (throttling) are keyed by token
    primary keys, which a database rolled back between tests hands out again. Only the
    process's own memory cache: a shared one (CASCADE_CACHE_URL) is not the tests' to empty."""
    from django.core.cache import caches
    from django.core.cache.backends.locmem import LocMemCache

    if isinstance(caches["default"], LocMemCache):
        caches["default"].clear()


@pytest.fixture(autouse=True)
def one_parse_process(settings):
    """`ingest_traces` called in the test's own process parses there: a spawned parse process
    would set Django up from the environment, on another database than the test's
    (tests/ingest/test_parse_processes.py runs the command, with its processes, on the test's)."""
    settings.CASCADE_PARSE_PROCESSES = 1


@pytest.fixture(autouse=True)
def no_detail_bodies(settings):
    """No detail written once after a parse (traces.detail_bodies): in a test whose commits
    run, a large trace made ready would have it written by a background thread meanwhile, on
    its own connection. tests/traces/test_detail_bodies.py turns it on."""
    settings.CASCADE_DETAIL_BODIES_BYTES = 0


@pytest.fixture(autouse=True)
def body_cache_dir(tmp_path, monkeypatch):
    """Kept detail bodies (traces.body_cache) in the test's own folder, not the checkout's var/:
    a test database hands out the same trace ids again."""
    from traces import body_cache

    folder = tmp_path / body_cache.FOLDER
    monkeypatch.setattr(body_cache, "root", lambda: folder)
    return folder


def pytest_collection_modifyitems(items):
    """A test marked `postgres` (optionally with what it checks of PostgreSQL's,
    `@pytest.mark.postgres("the triggers are PostgreSQL's")`) skips on any other database,
    saying why and where, before its fixtures touch the database: the marker is its one
    declaration."""
    if connection.vendor == "postgresql":
        return
    for item in items:
        marker = item.get_closest_marker("postgres")
        if marker is not None:
            what = marker.args[0] if marker.args else "the test checks PostgreSQL behaviour"
            item.add_marker(
                pytest.mark.skip(reason=f"needs PostgreSQL (set DATABASE_URL=postgres://...): {what}")
            )


@pytest.fixture
def api_token(db) -> str:
    user = get_user_model().objects.create(username="api-user")
    _, token = ApiToken.issue(user)
    return token


@pytest.fixture
def client_anon() -> APIClient:
    return APIClient()


@pytest.fixture
def api(api_token) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token}")
    return client


@pytest.fixture
def make_trace(db):
    def make(trace_id: str, **fields) -> Trace:
        return Trace.objects.create(id=trace_id, **fields)

    return make


# --- S3: moto's server, a real HTTP endpoint on 127.0.0.1 ---------------------------------


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on a free port, for the whole session (reset before each test).

    Sets fake AWS credentials in os.environ meanwhile (boto3 reads them there, and child
    processes inherit them); the environment is restored when the session ends.
    """
    import botocore.loaders
    import botocore.session
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as patch:
        # boto3 reads botocore's service models (megabytes of JSON) once per session, and the
        # `traces` storage (ingest.storage.TraceStorage) makes one session, shared by its
        # threads, each time it is built: in every test, since the `s3` fixture changes
        # STORAGES. One loader for the whole run reads them once.
        patch.setattr(botocore.session, "create_loader", functools.cache(botocore.loaders.create_loader))
        for name, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            patch.setenv(name, value)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            yield f"http://{host}:{port}"
        finally:
            server.stop()


@pytest.fixture
def s3(s3_server, settings):
    """An empty bucket on the moto server, configured as Cascade's trace bucket.

    Returns a boto3 client for the test to upload with; the code under test goes through
    the `traces` storage of STORAGES, pointed at the server, exactly as in production: built
    on its first use in the test, with the server's endpoint and the same client config.
    """
    import urllib.request

    import boto3

    from tests.helpers import TEST_BUCKET, point_traces_storage_at

    urllib.request.urlopen(urllib.request.Request(f"{s3_server}/moto-api/reset", method="POST")).close()
    settings.CASCADE_S3_BUCKET = TEST_BUCKET
    point_traces_storage_at(settings, s3_server, bucket_name=TEST_BUCKET, region_name="us-east-1")
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    client.create_bucket(Bucket=TEST_BUCKET)
    return client


@pytest.fixture
def upload(s3):
    """upload(run_id, {relative key: bytes | str}, metadata=dict | bytes | None)

    Objects first, metadata.json last (as the profiler does); `metadata=None` leaves the
    upload unfinished. With `list_files=True` metadata.json lists every object it follows.
    """

    from tests.helpers import PREFIX, TEST_BUCKET

    def put(run_id: str, files: dict, metadata=None, list_files: bool = False) -> None:
        listed = []
        for name, body in files.items():
            body = body.encode() if isinstance(body, str) else body
            key = f"{PREFIX}{run_id}/{name}"
            s3.put_object(Bucket=TEST_BUCKET, Key=key, Body=body)
            listed.append({"key": key, "bytes": len(body)})
        if metadata is None:
            return
        if isinstance(metadata, dict):
            if list_files:
                metadata = {**metadata, "files": listed}
            metadata = orjson.dumps(metadata)
        s3.put_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}{run_id}/metadata.json", Body=metadata)

    return put


@pytest.fixture
def child_env(s3, settings):
    """Environment for a child process (a second pass, a Celery worker) that must share
    this test's database and bucket. Use with `transactional_db` so that rows are visible.
    """
    from tests.helpers import TEST_BUCKET

    db = connection.settings_dict
    if connection.vendor == "postgresql":
        url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    else:
        url = f"sqlite:///{db['NAME']}"
    return {
        **os.environ,
        "DATABASE_URL": url,
        "CASCADE_S3_BUCKET": TEST_BUCKET,
        "CASCADE_S3_ENDPOINT_URL": settings.CASCADE_S3_ENDPOINT_URL,
        "CASCADE_S3_PREFIX": settings.CASCADE_S3_PREFIX,
        "DJANGO_SETTINGS_MODULE": "cascade.settings",
    }


# --- the web's tests (traces, simulations): kernels in bulk, users of each kind, the schema, a browser


@pytest.fixture
def make_kernels(db):
    """`make_kernels(trace, [insts, ...], ctx=...)`: one kernel per value, ids from `first`."""

    from tests.helpers import kernel_row  # tests.helpers reads this module's SHARED_FIXTURES

    def make(trace: Trace, insts: list[int | None], *, ctx: str | None = "0x6165bdd7ec90", first: int = 1):
        with transaction.atomic():
            kernel_store.kernels_append(
                trace.pk,
                (
                    kernel_row(
                        first + n,
                        ctx=ctx,
                        name=f"_Z6kernel{first + n}Pdi",
                        insts=value,
                        traced=(first + n) % 2 == 1,
                    )
                    for n, value in enumerate(insts)
                ),
            )
        count = Kernel.objects.filter(trace=trace).count()
        Trace.objects.filter(pk=trace.pk).update(kernel_count=count)
        trace.kernel_count = count

    return make


@pytest.fixture
def staff_client(admin_user) -> Client:
    """A superuser's session: staff with every permission."""
    client = Client()
    client.force_login(admin_user)
    return client


@pytest.fixture
def make_viewer(db):
    """`make_viewer(*codenames)`: the session of staff who hold only these permissions (of the
    traces and simulations apps: codenames are unique across them)."""
    from django.contrib.auth.models import Permission

    def make(*codenames: str) -> Client:
        user = get_user_model().objects.create_user("viewer", password="viewer-pass-123", is_staff=True)
        user.user_permissions.set(
            Permission.objects.filter(
                content_type__app_label__in=("traces", "simulations"), codename__in=codenames
            )
        )
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def viewer_client(make_viewer) -> Client:
    """Staff who may only look at traces and kernels."""
    return make_viewer("view_trace", "view_kernel")


@pytest.fixture
def openapi(client_anon, db) -> dict:
    """The API's OpenAPI schema, as /api/schema serves it."""
    response = client_anon.get("/api/schema", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return response.json()


# --- the admin in headless Chromium (tests/traces/test_*_browser.py) ---------------------------


@pytest.fixture
def browser():
    from tests.traces.browser import chromium

    with chromium(implicit_wait=5) as driver:
        yield driver


@pytest.fixture
def operator(transactional_db):
    from tests.traces.browser import OPERATOR

    username, password = OPERATOR
    return get_user_model().objects.create_superuser(username, password=password)
