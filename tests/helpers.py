"""What tests import: constants, stats rows, the storage setting, a lock held elsewhere. Fixtures stay in conftest.py."""

import contextlib
import threading
from pathlib import Path

from django.db import connection

from tools.tracer_format import STATS_HEADER, stats_launch_half, stats_totals

__all__ = [
    "DATA",
    "PREFIX",
    "STATS_HEADER",
    "TEST_BUCKET",
    "VECADD_CTX",
    "lock_held_elsewhere",
    "point_traces_storage_at",
    "stats_row",
]

DATA = Path(__file__).resolve().parent / "data"
TEST_BUCKET = "cascade-test-traces"
PREFIX = "accelsim-traces/"  # CASCADE_S3_PREFIX's default
VECADD_CTX = "0x6165bdd7ec90"  # the context of tests/data/accelsim-vecadd-v5


def stats_row(
    kernel_id: int, ctx: str | None = VECADD_CTX, name: str = "_Z6vecAddPdS_S_i", insts: int = 50066
) -> str:
    """A launch that ran to its exit, as the tracer writes it (vecadd's shape by default);
    `ctx=None` gives the legacy `kernel-<id>.trace` file name."""
    trace_file = f"kernel-{kernel_id}-ctx_{ctx}.trace.xz" if ctx else f"kernel-{kernel_id}.trace"
    return stats_launch_half(trace_file, name, (98, 1, 1), (1024, 1, 1)) + stats_totals(insts, insts)


def point_traces_storage_at(settings, url: str, **options) -> None:
    """Cascade's `traces` storage (and CASCADE_S3_ENDPOINT_URL) at `url`, through pytest-django's
    `settings`; `options` go to django-storages (`bucket_name`, `client_config`...)."""
    traces = settings.STORAGES["traces"]
    settings.CASCADE_S3_ENDPOINT_URL = url
    settings.STORAGES = {
        **settings.STORAGES,
        "traces": {**traces, "OPTIONS": {**traces["OPTIONS"], "endpoint_url": url, **options}},
    }


@contextlib.contextmanager
def lock_held_elsewhere(name: str):
    """`traces.locks.trace_lock(name)` held meanwhile by another thread, on its own connection,
    as another pass or worker would hold it."""
    from traces.locks import trace_lock

    held, release = threading.Event(), threading.Event()

    def hold():
        try:
            with trace_lock(name) as acquired:
                assert acquired
                held.set()
                release.wait(30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30), f"the other thread could not take the lock {name}"
        yield
    finally:
        release.set()
        holder.join()
