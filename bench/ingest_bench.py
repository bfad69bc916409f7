"""How fast Cascade turns stats files into kernel rows, next to PostgreSQL's own bulk load.

    DATABASE_URL-free: .venv/bin/python bench/ingest_bench.py [--kernels 200000 1000000] [--contexts 4]

For each size: generate a run (tools.generator), upload it to an embedded S3, time
`passes.ingest_trace` (list, stream the stats files from S3, parse, COPY into PostgreSQL,
commit), then time `psql \\copy` of exactly the rows it stored, from a local file, into an
equivalent table (`psql_copy_seconds`): the floor for loading those rows, with no S3, no parsing
and no Django. `python -m bench` (bench/lab.py) measures the same through `manage.py ingest_traces`.
"""

import argparse
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the project's root on the path, for `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402


def kernel_rows_of(database_url: str, run_id: str) -> tuple[str, str]:
    """The kernel table's name, and the condition that picks a trace's rows in it, from
    Django's models: its foreign key to the trace (whichever trace field it refers to)."""
    from psycopg.sql import Literal

    from traces.models import Kernel, Trace

    to_trace = Kernel._meta.get_field("trace")
    value = common.query(
        database_url,
        f'SELECT "{to_trace.target_field.column}" FROM {Trace._meta.db_table} WHERE id = %s',
        (run_id,),
    )[0][0]
    return Kernel._meta.db_table, f'"{to_trace.column}" = {Literal(value).as_string()}'


def loaded_columns(database_url: str, table: str) -> list[str]:
    """The table's columns as migrated, less those PostgreSQL fills itself (identity, serial,
    generated): what a bulk load of its rows writes. Read from the live database, so that the
    reference follows the kernel table's schema as it is today."""
    rows = common.query(
        database_url,
        "SELECT attname FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
        " WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped"
        " AND a.attidentity = '' AND a.attgenerated = ''"
        " AND coalesce(pg_get_expr(d.adbin, d.adrelid), '') NOT LIKE 'nextval(%%'"
        " ORDER BY a.attnum",
        (table,),
    )
    return [row[0] for row in rows]


def psql_copy_seconds(database_url: str, run_id: str) -> float:
    """`psql \\copy` of the run's kernel rows, already clean, into an equivalent table.

    The rows are the ones ingestion stored, exported with `COPY (SELECT ...) TO` from the kernel
    table itself; the table is `LIKE <kernel table> INCLUDING ALL` (columns, defaults, NOT NULL,
    CHECKs, every index and unique constraint; LIKE never copies foreign keys), created empty,
    loaded by one `\\copy` (one transaction, as ingestion's), then dropped.
    """
    table, condition = kernel_rows_of(database_url, run_id)
    columns = ", ".join(f'"{name}"' for name in loaded_columns(database_url, table))
    reference = f"bench_reference_{secrets.token_hex(4)}"
    with tempfile.TemporaryDirectory(prefix="cascade-bench-copy-") as tmp:
        rows = Path(tmp) / "kernels.copy"
        select = f"SELECT {columns} FROM {table} WHERE {condition}"
        common.psql(database_url, "-c", f"\\copy ({select}) TO '{rows}'")
        common.psql(database_url, "-c", f"CREATE TABLE {reference} (LIKE {table} INCLUDING ALL)")
        try:
            started = time.perf_counter()
            common.psql(database_url, "-c", f"\\copy {reference} ({columns}) FROM '{rows}'")
            return time.perf_counter() - started
        finally:
            common.psql(database_url, "-c", f"DROP TABLE {reference}")


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
