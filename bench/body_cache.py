"""A repeated gzip GET of a large detail: computed, then from its kept bytes (issue 22).

    .venv/bin/python bench/body_cache.py [--kernels 1000000] [--repeat 3]

Ingests a generated run (tools.generator) into the bench database (BENCH_DATABASE_URL), then
requests its detail with `Accept-Encoding: gzip` through Django's full stack, reading the whole
body: with the body cache off (every request encodes and compresses: the old way), then on
(the first request computes and keeps, the next ones read the file). Prints the median of
each and checks that the kept bytes are the computed ones. The issue's target: a 1M-launch
detail's repeated gzip GET under 1.5 s instead of about 11 s.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the project's root on the path, for `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402


def gzip_get(client, path: str, token: str) -> tuple[float, bytes, bool]:
    started = time.perf_counter()
    response = client.get(
        path,
        SERVER_NAME="127.0.0.1",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        HTTP_ACCEPT="application/json",
        HTTP_ACCEPT_ENCODING="gzip",
    )
    assert response.status_code == 200, response.status_code
    body = b"".join(response.streaming_content) if response.streaming else response.content
    from_file = response.has_header("Content-Length")
    response.close()
    return time.perf_counter() - started, body, from_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--contexts", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    common.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from traces.models import ApiToken, Trace

    run_id = f"bench-api-{args.kernels}"
    if not Trace.objects.filter(pk=run_id, state="ready", kernel_count=args.kernels).exists():
        Trace.objects.filter(pk=run_id).delete()
        seconds = common.ingest_generated(run_id, args.kernels, args.contexts)
        print(f"ingested {args.kernels:,} kernels in {seconds['ingest']:.1f} s", flush=True)
    user, _ = get_user_model().objects.get_or_create(username="bench")
    _, token = ApiToken.issue(user)
    client = Client()
    path = f"/api/traces/{run_id}"

    with tempfile.TemporaryDirectory(prefix="cascade-body-cache-") as var:
        settings.VAR_DIR = Path(var)
        settings.CASCADE_BODY_CACHE_BYTES = 0
        off = [gzip_get(client, path, token) for _ in range(args.repeat)]
        settings.CASCADE_BODY_CACHE_BYTES = 2 * 1024**3
        first = gzip_get(client, path, token)
        kept = [gzip_get(client, path, token) for _ in range(args.repeat)]
    assert not first[2] and all(answer[2] for answer in kept), "the later answers were not from the file"
    assert all(answer[1] == first[1] for answer in kept + off), "kept bytes differ from the computed ones"
    size = len(first[1])
    computed = statistics.median(answer[0] for answer in off)
    repeated = statistics.median(answer[0] for answer in kept)
    print(f"GET {path} (gzip): {args.kernels:,} launches, {size / 1e6:.1f} MB gzip")
    print(f"  cache off, every request computed    median {computed:.2f} s  ({args.repeat} requests)")
    print(f"  cache on, first request (computes)   {first[0]:.2f} s")
    print(
        f"  cache on, later requests (the file)  median {repeated:.2f} s  ({computed / repeated:.0f}x faster)"
    )


if __name__ == "__main__":
    main()
