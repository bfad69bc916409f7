"""Setup shared by the benchmarks: Django on PostgreSQL, moto's S3 server, a generated trace.

Benchmarks run against their own database (`cascade_bench`, created if missing) so that they
never touch the registry's data; set BENCH_DATABASE_URL to use another one.
"""

import logging
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/cascade_bench"
BUCKET = "cascade-bench"


def ensure_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def setup() -> str:
    """Configure Django for the bench database and an embedded S3; returns the database URL."""
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    ensure_database(url)
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request log lines

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="cascade.settings",
        CASCADE_S3_BUCKET=BUCKET,
        CASCADE_S3_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        CASCADE_LOG_LEVEL="WARNING",
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    from ingest import bucket

    call_command("migrate", verbosity=0, interactive=False)
    bucket.ensure_bucket()
    return url


@contextmanager
def timed(results: dict, name: str):
    started = time.perf_counter()
    yield
    results[name] = time.perf_counter() - started


def ingest_generated(run_id: str, kernels: int, contexts: int, seed: int = 1) -> dict:
    """Generate and upload a run of `kernels` launches, then ingest it as the poller does."""
    from ingest import passes
    from tools import generator

    seconds: dict = {}
    spec = generator.RunSpec(kernels=kernels, contexts=contexts, seed=seed, timing=False)
    with timed(seconds, "generate+upload"):
        generator.upload_run(run_id, spec)
    with timed(seconds, "ingest"):
        change = passes.ingest_trace(run_id, reparse=True)
    if change is None or change.new_state != "ready":
        raise SystemExit(f"ingestion did not make {run_id} ready: {change}")
    return seconds
