"""What `GET /api/traces/{id}` costs on a large trace: time, bytes, and memory, beside references.

    .venv/bin/python bench/api_bench.py [--kernels 1000000] [--repeat 3]

Ingests a generated run (tools.generator) into the bench database, then requests it
through Django's full stack (middleware, Bearer authentication, the streaming encoder) and
reads the whole body. Memory is measured twice: the peak of Python allocations during one
request (tracemalloc, in a separate untimed request since tracing slows it down), and the
process's peak RSS.

References, on the same rows: `psql \\copy (SELECT ...) TO` a file (PostgreSQL alone, no
JSON, no Python: the floor), PostgreSQL building the same JSON itself (`json_agg`, written
to a file by psql: `json_agg_seconds`), and a DRF ModelSerializer with a nested kernel serializer
(the per-object way this API avoids), timed on up to --serializer-kernels rows.
"""

import argparse
import http.client
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the project's root on the path, for `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402


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
    json_agg, json_agg_bytes = json_agg_seconds(database_url, run_id)
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
        f"  reference PostgreSQL's json_agg of the same JSON {json_agg:.2f} s ({json_agg_bytes / 1e6:.1f} MB; "
        f"this API: {min(times) / json_agg:.2f}x its time)"
    )
    print(
        f"  memory    Python peak during one request {peak / 1e6:.1f} MB (tracemalloc); "
        f"process peak RSS {rss_after * scale / 1e6:.0f} MB (was {rss_before * scale / 1e6:.0f} MB before the requests)"
    )


def kernel_query_sql(database_url: str, run_id: str) -> str:
    """The API's query of a trace's kernels (`traces.selectors`: KERNEL_COLUMNS in
    KERNEL_ORDER) as one SQL statement with its values written in, for psql."""
    import psycopg

    from traces.models import KERNEL_COLUMNS, KERNEL_ORDER, Kernel

    kernels = Kernel.objects.filter(trace_id=run_id).order_by(*KERNEL_ORDER).values_list(*KERNEL_COLUMNS)
    sql, params = kernels.query.sql_with_params()
    with psycopg.connect(database_url) as conn:
        return psycopg.ClientCursor(conn).mogrify(sql, params)


def psql_export_seconds(database_url: str, run_id: str) -> float:
    """PostgreSQL alone writing the same rows (the API's query), in the same order, to a file."""
    select = kernel_query_sql(database_url, run_id)
    with tempfile.NamedTemporaryFile(suffix=".csv") as target:
        started = time.perf_counter()
        common.psql(database_url, "-c", f"\\copy ({select}) TO '{target.name}' CSV")
        return time.perf_counter() - started


class _Column:
    """One column of a kernel row, standing in for its value when the encoder builds a kernel:
    what `traces.encoders.kernel_row_to_dict` makes of a row is rebuilt as SQL from them.

    It compares as a column's default does (the API adds a fork's device and stream ids only
    when the device is not NO_DEVICE; generated runs have none), so the shape is that of the
    generated runs' kernels.
    """

    def __init__(self, index: int, *, as_number: bool = False):
        # PostgreSQL's JSON writes an `oid` (unsigned 32-bit) as a string; Python reads a number.
        self.sql = f"k.c{index}::bigint" if as_number else f"k.c{index}"

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


def _json_sql(value) -> str:
    if isinstance(value, _Column):
        return value.sql
    if isinstance(value, list | tuple):
        return f"json_build_array({', '.join(map(_json_sql, value))})"
    if isinstance(value, dict):
        pairs = (f"'{key}', {_json_sql(item)}" for key, item in value.items())
        return f"json_build_object({', '.join(pairs)})"
    raise TypeError(f"cannot write {value!r} as SQL")


def json_agg_sql(database_url: str, run_id: str) -> str:
    """One statement in which PostgreSQL builds the trace's TraceDetail JSON itself: the same
    keys in the same order, kernels read by the API's own query (`traces.selectors`) and
    aggregated with json_agg. Only the steps stay their numbers (the API names them from
    timeline.json; the bench's runs have none) and PostgreSQL's spacing differs."""
    import psycopg
    from psycopg.sql import Literal

    from traces.encoders import kernel_row_to_dict
    from traces.models import KERNEL_COLUMNS, Trace
    from traces.selectors import TRACE_PUBLISHED_COLUMNS

    kernel_sql = kernel_query_sql(database_url, run_id)
    aliases = ", ".join(f"c{i}" for i in range(len(KERNEL_COLUMNS)))
    with psycopg.connect(database_url) as conn:
        trace_id = Literal(run_id).as_string(conn)
        cursor = conn.execute(f"SELECT * FROM ({kernel_sql}) AS k({aliases}) LIMIT 0")
        types = [column.type_code for column in cursor.description]
    oid = 26  # pg_type's oid of `oid`
    columns = tuple(_Column(i, as_number=types[i] == oid) for i in range(len(KERNEL_COLUMNS)))
    kernel = _json_sql(kernel_row_to_dict(columns))
    head = []
    for name in TRACE_PUBLISHED_COLUMNS:
        column = f't."{Trace._meta.get_field(name).column}"'
        if name in ("created_at", "updated_at"):
            column = f"""to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""
        head.append(f"'{name}', {column}")
    metadata = f't."{Trace._meta.get_field("metadata_json").column}"::json'
    # After `kernels` (issues 28-31). `waiting_for` is null but for an uploading trace, which
    # the bench's runs never are (the API's sentence of files is not built here).
    tail = (
        "'waiting_for', CASE WHEN t.state = 'uploading' AND t.metadata_json IS NULL THEN 'metadata.json' END, "
        "'warnings', t.warnings, 'traced_launches', t.traced_launches"
    )
    return (
        f"SELECT json_build_object({', '.join(head)}, 'metadata', {metadata}, 'kernels', "
        f"coalesce((SELECT json_agg({kernel}) FROM ({kernel_sql}) AS k({aliases})), '[]'::json), {tail}) "
        f"FROM {Trace._meta.db_table} t WHERE t.id = {trace_id}"
    )


def json_agg_seconds(database_url: str, run_id: str, *, keep: Path | None = None) -> tuple[float, int]:
    """PostgreSQL writing the trace's JSON (`json_agg_sql`) through psql to a file (`keep`, or
    a temporary one): seconds, bytes."""
    sql = json_agg_sql(database_url, run_id)
    with tempfile.NamedTemporaryFile(suffix=".json") as scratch:
        target = str(keep or scratch.name)
        started = time.perf_counter()
        common.psql(database_url, "-At", "-o", target, "-c", sql)
        seconds = time.perf_counter() - started
        return seconds, os.path.getsize(target)


@dataclass
class Answer:
    status: int
    headers: dict  # lower-cased names
    nbytes: int  # the body as sent (compressed if it was), without chunked framing
    seconds: float  # from sending the request to the body's last byte
    body: bytes | None = None  # with keep=True


def http_get(port: int, path: str, headers: dict, *, timeout: float = 900, keep: bool = False) -> Answer:
    """A GET to 127.0.0.1:port read to its end, the body counted (kept if asked), not decoded."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        started = time.perf_counter()
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        nbytes, kept = 0, []
        while chunk := response.read(1 << 20):
            nbytes += len(chunk)
            if keep:
                kept.append(chunk)
        seconds = time.perf_counter() - started
        headers = {k.lower(): v for k, v in response.getheaders()}
        return Answer(response.status, headers, nbytes, seconds, b"".join(kept) if keep else None)
    finally:
        conn.close()


def drf_serializer_seconds(run_id: str, rows: int) -> float:
    """The per-object way: model instances through a nested ModelSerializer, then JSON."""
    from rest_framework import serializers
    from rest_framework.renderers import JSONRenderer

    from traces.models import Kernel

    class KernelSerializer(serializers.ModelSerializer):
        # Read as attributes: where the kernel table is normalised they are annotations.
        ctx = serializers.ReadOnlyField()
        name = serializers.ReadOnlyField()
        trace_file = serializers.ReadOnlyField()
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
