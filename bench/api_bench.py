"""What `GET /api/traces/{id}` costs on a large trace: time, bytes, and memory.

    .venv/bin/python bench/api_bench.py [--kernels 1000000] [--repeat 3]

Ingests a generated run (ingest.generator) into the bench database, then requests it
through Django's full stack (middleware, Bearer authentication, the streaming encoder) and
reads the whole body. Memory is measured twice: the peak of Python allocations during one
request (tracemalloc, in a separate untimed request since tracing slows it down), and the
process's peak RSS.
"""

import argparse
import os
import resource
import sys
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
    args = parser.parse_args()
    common.setup()
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

    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    print(f"GET {path}: {args.kernels} kernels, {size / 1e6:.1f} MB of JSON")
    print(
        f"  time      best {min(times):.2f} s, median {sorted(times)[len(times) // 2]:.2f} s "
        f"({args.kernels / min(times):,.0f} kernels/s)"
    )
    print(
        f"  memory    Python peak during one request {peak / 1e6:.1f} MB (tracemalloc); "
        f"process peak RSS {rss_after * scale / 1e6:.0f} MB (was {rss_before * scale / 1e6:.0f} MB before the requests)"
    )


if __name__ == "__main__":
    os.chdir(common.ROOT)
    main()
