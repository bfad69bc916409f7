"""What `GET /api/traces/{id}` costs on a large trace: time, bytes, and memory, beside references.

    .venv/bin/python bench/api_bench.py [--kernels 1000000] [--repeat 3]

Ingests a generated run (tools.generator) into the bench database, then requests it
through Django's full stack (middleware, Bearer authentication, the streaming encoder) and
reads the whole body. Memory is measured twice: the peak of Python allocations during one
request (tracemalloc, in a separate untimed request since tracing slows it down), and the
process's peak RSS.

References, on the same rows: `psql \\copy (SELECT ...) TO` a file (PostgreSQL alone, no
JSON, no Python: the floor), and a DRF ModelSerializer with a nested kernel serializer
(the per-object way this API avoids), timed on up to --serializer-kernels rows.
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc

import common


def request_body(client, path: str, token: str) -> int:
    response = client.get(
        path, SERVER_NAME="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 200, response.status_code
    if response.streaming:
        return sum(len(chunk) for chunk in response.streaming_content)
    return len(response.content)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--contexts", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--serializer-kernels", type=int, default=100_000)
    args = parser.parse_args()
    database_url = common.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    from traces.models import ApiToken, Trace

    run_id = f"bench-api-{args.kernels}"
    if not Trace.objects.filter(pk=run_id, state="ready", kernel_count=args.kernels).exists():
        Trace.objects.filter(pk=run_id).delete()
        seconds = common.ingest_generated(run_id, args.kernels, args.contexts)
        print(f"ingested {args.kernels} kernels in {seconds['ingest']:.1f} s", flush=True)
    user, _ = get_user_model().objects.get_or_create(username="bench")
    _, token = ApiToken.issue(user)
    client = Client()
    path = f"/api/traces/{run_id}"

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        size = request_body(client, path, token)
        times.append(time.perf_counter() - started)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    request_body(client, path, token)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    copy_seconds = psql_export_seconds(database_url, run_id)
    serializer_rows = min(args.serializer_kernels, args.kernels)
    serializer_seconds = drf_serializer_seconds(run_id, serializer_rows)

    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    print(f"GET {path}: {args.kernels} kernels, {size / 1e6:.1f} MB of JSON")
    print(
        f"  time      best {min(times):.2f} s, median {sorted(times)[len(times) // 2]:.2f} s "
        f"({args.kernels / min(times):,.0f} kernels/s)"
    )
    print(
        f"  reference psql \\copy of the same rows to a file {copy_seconds:.2f} s "
        f"({args.kernels / copy_seconds:,.0f} kernels/s); DRF ModelSerializer "
        f"{serializer_rows / serializer_seconds:,.0f} kernels/s on {serializer_rows:,} kernels "
        f"(this API: {(args.kernels / min(times)) / (serializer_rows / serializer_seconds):.1f}x faster)"
    )
    print(
        f"  memory    Python peak during one request {peak / 1e6:.1f} MB (tracemalloc); "
        f"process peak RSS {rss_after * scale / 1e6:.0f} MB (was {rss_before * scale / 1e6:.0f} MB before the requests)"
    )


def psql_export_seconds(database_url: str, run_id: str) -> float:
    """PostgreSQL alone writing the same rows, in the same order, to a file."""
    from traces.models import KERNEL_COLUMNS, Kernel

    select = (
        f"SELECT {', '.join(KERNEL_COLUMNS)} FROM {Kernel._meta.db_table} "
        f"WHERE trace_id = '{run_id}' ORDER BY ctx, kernel_id"
    )
    with tempfile.NamedTemporaryFile(suffix=".csv") as target:
        started = time.perf_counter()
        subprocess.run(["psql", database_url, "-qc", f"\\copy ({select}) TO '{target.name}' CSV"], check=True)
        return time.perf_counter() - started


def drf_serializer_seconds(run_id: str, rows: int) -> float:
    """The per-object way: model instances through a nested ModelSerializer, then JSON."""
    from rest_framework import serializers
    from rest_framework.renderers import JSONRenderer

    from traces.models import Kernel

    class KernelSerializer(serializers.ModelSerializer):
        grid_dim = serializers.SerializerMethodField()
        block_dim = serializers.SerializerMethodField()

        class Meta:
            model = Kernel
            fields = [
                "ctx", "kernel_id", "name", "trace_file", "grid_dim", "block_dim", "blocks", "threads",
                "total_insts", "total_reported_insts", "traced",
            ]  # fmt: skip

        def get_grid_dim(self, kernel):
            return [kernel.grid_x, kernel.grid_y, kernel.grid_z]

        def get_block_dim(self, kernel):
            return [kernel.block_x, kernel.block_y, kernel.block_z]

    kernels = Kernel.objects.filter(trace_id=run_id).order_by("ctx", "kernel_id")[:rows]
    started = time.perf_counter()
    JSONRenderer().render(KernelSerializer(kernels, many=True).data)
    return time.perf_counter() - started


if __name__ == "__main__":
    os.chdir(common.ROOT)
    main()
