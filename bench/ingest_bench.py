"""How fast Cascade turns stats files into kernel rows, next to PostgreSQL's own bulk load.

    DATABASE_URL-free: .venv/bin/python bench/ingest_bench.py [--kernels 200000 1000000] [--contexts 4]

For each size: generate a run (tools.generator), upload it to an embedded S3, time
`passes.ingest_trace` (list, stream the stats files from S3, parse, COPY into PostgreSQL,
commit), then time `psql \\copy` of exactly the rows it stored, from a local CSV file: the
floor for loading those rows, with no S3, no parsing and no Django.
"""

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import common


def psql_copy_seconds(database_url: str, run_id: str) -> float:
    """Export the run's kernel rows to CSV, delete them, and time `\\copy` loading them back."""
    from django.db import connection

    from traces.models import KERNEL_COLUMNS, Kernel

    table = Kernel._meta.db_table
    columns = ", ".join(("trace_id", *KERNEL_COLUMNS))  # what ingestion's COPY writes
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "kernels.csv"
        select = f"SELECT {columns} FROM {table} WHERE trace_id = '{run_id}'"
        subprocess.run(["psql", database_url, "-qc", f"\\copy ({select}) TO '{csv_path}' CSV"], check=True)
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table} WHERE trace_id = %s", [run_id])
        started = time.perf_counter()
        subprocess.run(
            ["psql", database_url, "-qc", f"\\copy {table} ({columns}) FROM '{csv_path}' CSV"], check=True
        )
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--contexts", type=int, default=4)
    args = parser.parse_args()
    if not shutil.which("psql"):
        raise SystemExit("psql is needed for the comparison (apt-get install postgresql-client)")
    database_url = common.setup()
    from traces.models import Trace

    print(f"database {database_url}; {args.contexts} contexts per run")
    print(
        f"{'kernels':>10} {'stats MB':>9} {'generate+upload s':>18} {'ingest_trace s':>15} {'kernels/s':>10}"
        f" {'psql copy s':>13} {'kernels/s':>10} {'ratio':>6}"
    )
    for kernels in args.kernels:
        run_id = f"bench-ingest-{kernels}"
        Trace.objects.filter(pk=run_id).delete()
        seconds = common.ingest_generated(run_id, kernels, args.contexts)
        stats_bytes = sum(
            f["bytes"] for f in Trace.objects.get(pk=run_id).files if "/traces/stats" in f["key"]
        )
        copy = psql_copy_seconds(database_url, run_id)
        print(
            f"{kernels:>10} {stats_bytes / 1e6:>9.1f} {seconds['generate+upload']:>18.1f}"
            f" {seconds['ingest']:>15.2f} {kernels / seconds['ingest']:>10.0f}"
            f" {copy:>13.2f} {kernels / copy:>10.0f} {seconds['ingest'] / copy:>6.1f}",
            flush=True,
        )
        Trace.objects.filter(pk=run_id).delete()


if __name__ == "__main__":
    os.chdir(common.ROOT)
    main()
