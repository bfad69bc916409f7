"""Deleting a 1M-launch trace, the old way (one DELETE) and the new (trace now, launches in
batches by `kernels_purge`, its default batch): time, and how long a writer of another trace
waits meanwhile. docs/performance.md quotes its figures.

    DATABASE_URL=postgres://... python -m bench.community.delete [--launches 1000000] [--json FILE]

Empties the database's trace tables first: point it at a scratch database. With
`--existing OLD,NEW` it deletes two traces of the database as it is instead (the community
bench's, amid 50M launches: bench/community/__init__.py).
"""

import argparse
import json
import os
import statistics
import threading
import time
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cascade.settings")
import django  # noqa: E402

django.setup()

from django.db import connection, connections, transaction  # noqa: E402

from traces.kernel_store import PURGE_BATCH, kernels_purge  # noqa: E402
from traces.models import KernelName, Trace, name_digest  # noqa: E402
from traces.services import trace_delete  # noqa: E402

CONTEXTS = 8


def sql(statement: str, args=()):
    with connection.cursor() as cursor:
        cursor.execute(statement, args)
        return cursor.fetchall() if cursor.description else None


def make_trace(run_id: str, launches: int, name_id: int) -> int:
    """A ready trace with `launches` launches in `contexts` contexts (interleaved, as a tracer
    writes them), inserted server-side."""
    trace = Trace.objects.create(id=run_id, state="ready", kernel_count=launches)
    for index in range(CONTEXTS):
        sql(
            "INSERT INTO traces_kernelcontext (index, ctx, device, trace_key) VALUES (%s, %s, 0, %s)",
            [index, f"0x{index:x}", trace.key],
        )
    sql(
        "INSERT INTO traces_kernel (trace_key, context, kernel_id, name_id, grid_x, grid_y, grid_z, "
        "block_x, block_y, block_z, blocks, threads, total_insts, total_reported_insts, traced, duration_ns) "
        "SELECT %s, i %% %s, i / %s, %s, 80, 1, 1, 256, 1, 1, 80, 20480, 1000000 + i %% 977, "
        "1000000 + i %% 977, false, 5000 + i %% 311 FROM generate_series(0, %s - 1) i",
        [trace.key, CONTEXTS, CONTEXTS, name_id, launches],
    )
    return trace.key


class Writer(threading.Thread):
    """Appends 100 launches at a time to another trace, and reads 1,000 of its launches,
    recording each transaction's time: what a pass or an API request beside the delete sees."""

    def __init__(self, trace_key: int, name_id: int):
        super().__init__(daemon=True)
        self.trace_key, self.name_id = trace_key, name_id
        # After the trace's own launches (and an earlier writer's): never a key taken.
        ((last,),) = sql("SELECT max(kernel_id) FROM traces_kernel WHERE trace_key = %s", [trace_key])
        self.first_id = (last or 0) + 1
        self.stop = threading.Event()
        self.times: list[float] = []

    def run(self):
        next_id = self.first_id
        try:
            while not self.stop.is_set():
                began = time.perf_counter()
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.execute(
                        "INSERT INTO traces_kernel (trace_key, context, kernel_id, name_id, grid_x, grid_y, "
                        "grid_z, block_x, block_y, block_z, blocks, threads, traced) "
                        "SELECT %s, 0, %s + i, %s, 1, 1, 1, 1, 1, 1, 1, 1, false FROM generate_series(0, 99) i",
                        [self.trace_key, next_id, self.name_id],
                    )
                    cursor.execute(
                        "SELECT kernel_id FROM traces_kernel WHERE trace_key = %s ORDER BY context, kernel_id "
                        "LIMIT 1000",
                        [self.trace_key],
                    )
                    cursor.fetchall()
                self.times.append(time.perf_counter() - began)
                next_id += 100
                time.sleep(0.01)
        finally:
            connections.close_all()


def measured(label: str, delete, name_id: int, neighbour_key: int) -> dict:
    sql("CHECKPOINT")  # both ways pay the full-page images that follow a checkpoint
    writer = Writer(neighbour_key, name_id)
    writer.start()
    time.sleep(1.0)
    began = time.perf_counter()
    detail = delete()
    elapsed = time.perf_counter() - began
    time.sleep(1.0)
    writer.stop.set()
    writer.join()
    result = {
        "label": label,
        "seconds": round(elapsed, 2),
        "writer_median_ms": round(statistics.median(writer.times) * 1000, 1),
        "writer_max_ms": round(max(writer.times) * 1000, 1),
        **(detail or {}),
    }
    print(result, flush=True)
    return result


def trace_key(run_id: str) -> int:
    return Trace.objects.values_list("key", flat=True).get(pk=run_id)


def one_statement_delete(key: int) -> None:
    """The old way: the trace's launches in one statement, in the deleting transaction."""
    with transaction.atomic():
        sql("DELETE FROM traces_kernel WHERE trace_key = %s", [key])
        Trace.objects.filter(key=key).delete()


def batched_delete(run_id: str) -> dict:
    """The new way: the trace at once (trace_delete), its launches by the purge."""
    batch_times: list[float] = []
    began = time.perf_counter()
    trace_delete(run_id)
    gone = time.perf_counter() - began
    last = [time.perf_counter()]

    def on_batch(key, deleted):
        now = time.perf_counter()
        batch_times.append(now - last[0])
        last[0] = now

    purged = kernels_purge(on_batch=on_batch)
    return {
        "trace_gone_ms": round(gone * 1000, 1),
        "statements": purged.statements,
        "batch_max_ms": round(max(batch_times) * 1000, 1),
        "batch_median_ms": round(statistics.median(batch_times) * 1000, 1),
    }


def compare(old: str, new: str, neighbour_key: int, name_id: int) -> dict:
    """Trace `old` deleted the old way and `new` the new way, a writer busy on `neighbour_key`."""
    sql("VACUUM ANALYZE traces_kernel")
    old_key, new_key = trace_key(old), trace_key(new)
    results = {
        "one_delete": measured("one DELETE", lambda: one_statement_delete(old_key), name_id, neighbour_key),
        "batches": measured(f"batches of {PURGE_BATCH}", lambda: batched_delete(new), name_id, neighbour_key),
        "batch": PURGE_BATCH,
    }
    ((left,),) = sql("SELECT COUNT(*) FROM traces_kernel WHERE trace_key IN (%s, %s)", [old_key, new_key])
    results["launches_left_of_deleted_traces"] = left
    print({"launches_left_of_deleted_traces": left}, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=1_000_000, help="of each deleted trace")
    parser.add_argument(
        "--existing",
        metavar="OLD,NEW",
        help="delete these two traces of the database as it is (nothing emptied or made): "
        "OLD the old way, NEW the new; a writer works on the largest other trace meanwhile",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    if args.existing:
        old, new = args.existing.split(",")
        ((neighbour, name_id),) = sql(
            "SELECT t.key, (SELECT min(id) FROM traces_kernelname) FROM traces_trace t"
            " WHERE t.id NOT IN (%s, %s) ORDER BY t.kernel_count DESC LIMIT 1",
            [old, new],
        )
    else:
        sql(
            "TRUNCATE traces_trace, traces_kernel, traces_kernelcontext, traces_kernelpurge, "
            "traces_deletedtrace CASCADE"
        )
        name, _ = KernelName.objects.get_or_create(
            digest=name_digest("bench_kernel"), defaults={"name": "bench_kernel"}
        )
        name_id = name.id
        # A writer's neighbour as large as the deleted traces.
        neighbour = make_trace("bench-neighbour", args.launches, name_id)
        old, new = "bench-old", "bench-new"
        make_trace(old, args.launches, name_id)
        make_trace(new, args.launches, name_id)
    results = compare(old, new, neighbour, name_id)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
