"""What tests import: constants, stats rows, run folders past the columns, ready traces, API clients
and their answers' bytes, the storage setting, a lock held elsewhere. Fixtures stay in conftest.py."""

import contextlib
import gzip
import json
import math
import threading
import tracemalloc
import zlib

import zstandard
from django.db import connection
from rest_framework.test import APIClient

from tests.conftest import SHARED_FIXTURES, shared_fixture
from tools.tracer_format import DEVICE_STATS_HEADER, STATS_HEADER, stats_launch_half, stats_totals

__all__ = [
    "PREFIX",
    "SHARED_FIXTURES",
    "STATS_HEADER",
    "TEST_BUCKET",
    "VECADD_CTX",
    "bearer",
    "content",
    "decompress",
    "ingested",
    "kernel_dict",
    "kernel_rows",
    "lock_held_elsewhere",
    "point_traces_storage_at",
    "run_with_contexts",
    "run_with_steps",
    "shared_fixture",
    "stats_row",
    "streamed_peak",
    "token_client",
]

TEST_BUCKET = "cascade-test-traces"
PREFIX = "accelsim-traces/"  # CASCADE_S3_PREFIX's default
VECADD_CTX = "0x6165bdd7ec90"  # the context of the real run shared_fixture("accelsim-vecadd-v5")


def stats_row(
    kernel_id: int, ctx: str | None = VECADD_CTX, name: str = "_Z6vecAddPdS_S_i", insts: int = 50066
) -> str:
    """A launch that ran to its exit, as the tracer writes it (vecadd's shape by default);
    `ctx=None` gives the legacy `kernel-<id>.trace` file name."""
    trace_file = f"kernel-{kernel_id}-ctx_{ctx}.trace.xz" if ctx else f"kernel-{kernel_id}.trace"
    return stats_launch_half(trace_file, name, (98, 1, 1), (1024, 1, 1)) + stats_totals(insts, insts)


def run_with_steps(count: int) -> dict[str, str]:
    """A run folder whose timeline.json has `count` steps of one launch each (more
    than a smallint's 32,767 used to wedge the trace in `parsing`)."""
    steps = [
        {
            "name": f"step {n}",
            "phase": "decode",
            "ctx": VECADD_CTX,
            "first_kernel_id": n + 1,
            "last_kernel_id": n + 1,
        }
        for n in range(count)
    ]
    return {
        f"traces/stats_ctx_{VECADD_CTX}": STATS_HEADER + stats_row(count),
        "timeline.json": json.dumps({"steps": steps}),
    }


def run_with_contexts(count: int) -> dict[str, str]:
    """A run folder whose one stats file has `count` launches, each on a device of its own: one
    context apiece (more than a trace holds used to raise a bare ValueError)."""
    launches = (
        stats_launch_half(
            f"kernel-{device + 1}.trace", "k", (1, 1, 1), (32, 1, 1), device_id=device, stream_id=0
        )
        + stats_totals(10, 10)
        for device in range(count)
    )
    return {"traces/stats.csv": DEVICE_STATS_HEADER + "".join(launches)}


def kernel_row(
    kernel_id: int,
    *,
    ctx: str | None = VECADD_CTX,
    name: str = "_Z6vecAddPdS_S_i",
    insts: int | None = 50066,
    traced: bool = False,
    trace_file: str | None = None,
    device: int = -1,
    stream: int | None = None,
    step: int | None = None,
    duration_ns: int | None = None,
) -> tuple:
    """A launch in KERNEL_COLUMNS order, as ingestion hands it to `traces.kernel_store` (vecadd's
    shape by default; the trace file is the tracer's for `ctx`)."""
    if trace_file is None:
        trace_file = f"kernel-{kernel_id}-ctx_{ctx}.trace.xz" if ctx else f"kernel-{kernel_id}.trace"
    return (
        ctx,
        kernel_id,
        name,
        trace_file,
        98,
        1,
        1,
        1024,
        1,
        1,
        98,
        1024,
        insts,
        insts,
        traced,
        device,
        stream,
        step,
        duration_ns,
    )


def kernel_dict(
    kernel_id: int,
    *,
    ctx: str = VECADD_CTX,
    grid: tuple[int, int, int] = (98, 1, 1),
    block: tuple[int, int, int] = (1024, 1, 1),
    insts: int | None = 50066,
    **columns,
) -> dict:
    """A launch as `store_kernels` takes it, by KERNEL_COLUMNS' names: vecadd's by default (the
    tracer's trace file for `ctx`, `insts` both totals, not traced); any other column by name."""
    return {
        "ctx": ctx,
        "kernel_id": kernel_id,
        "name": "_Z6vecAddPdS_S_i",
        "trace_file": f"kernel-{kernel_id}-ctx_{ctx}.trace.xz",
        **dict(zip(("grid_x", "grid_y", "grid_z"), grid, strict=True)),
        **dict(zip(("block_x", "block_y", "block_z"), block, strict=True)),
        "blocks": math.prod(grid),
        "threads": math.prod(block),
        "total_insts": insts,
        "total_reported_insts": insts,
        **columns,
    }


def store_kernels(trace_id: str, launches) -> None:
    """Add launches given as dicts of KERNEL_COLUMNS' names (absent: null, no device, not
    traced) to a trace, through the one path that stores kernels."""
    from django.db import transaction

    from traces import kernel_store
    from traces.models import KERNEL_COLUMNS, NO_DEVICE

    defaults = {column: None for column in KERNEL_COLUMNS} | {"device": NO_DEVICE, "traced": False}
    with transaction.atomic():
        kernel_store.kernels_append(
            trace_id, (tuple((defaults | launch)[column] for column in KERNEL_COLUMNS) for launch in launches)
        )


def kernel_rows(count: int, *, name: str = "_Z6vecAddPdS_S_i", ctx: str = "0x1") -> list[tuple]:
    """Launches 1..`count` as `services.trace_store_kernels` takes them: vecadd's shape, 50,066 + n
    instructions, every seventh traced."""
    return [
        kernel_row(n, ctx=ctx, name=name, insts=50066 + n, traced=n % 7 == 1) for n in range(1, count + 1)
    ]


def ingested(trace_id: str, rows):
    """What a poll pass does with a run of these launches (KERNEL_COLUMNS tuples): parsing, then
    ready with them, through the services. Returns the trace as stored."""
    from traces import services
    from traces.models import Trace

    trace, _ = Trace.objects.get_or_create(pk=trace_id)
    services.trace_start_parsing(trace, run={"metadata_json": '{"status":"ok"}'})
    services.trace_store_kernels(trace, iter(rows), fingerprint="f")
    return Trace.objects.get(pk=trace_id)


def bearer(token: str) -> APIClient:
    """An API client that sends `Authorization: Bearer <token>`."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def token_client(scope: str = "read") -> APIClient:
    """An API client holding a new token of `scope` (read, write), issued to the user `<scope>-token`."""
    from django.contrib.auth import get_user_model

    from traces.models import ApiToken

    user, _ = get_user_model().objects.get_or_create(username=f"{scope}-token")
    _, token = ApiToken.issue(user, scope=scope)
    return bearer(token)


def content(response) -> bytes:
    """A response's body, streamed or not."""
    return b"".join(response.streaming_content) if response.streaming else response.content


def decompress(data: bytes, coding: str) -> bytes:
    """A gzip or zstd body decoded."""
    if coding == "gzip":
        return gzip.decompress(data)
    return zstandard.ZstdDecompressor().decompressobj().decompress(data)


def streamed_peak(response, coding: str | None = None) -> tuple[int, int]:
    """(the bytes a streamed answer decodes to from `coding`, the peak of Python allocations while
    it is read): what a test of memory that stays at a chunk compares for two lengths."""
    if coding is None:
        decoder = None
    else:
        decoder = zlib.decompressobj(31) if coding == "gzip" else zstandard.ZstdDecompressor().decompressobj()
    tracemalloc.start()
    try:
        size = sum(
            len(decoder.decompress(chunk) if decoder else chunk) for chunk in response.streaming_content
        )
        return size, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


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
