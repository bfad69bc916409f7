"""What the two tables share (`python -m bench`: bench/lab.py; `python -m bench community`):
the command line, Django in this process, each figure taken apart from the others, the
Markdown table under a heading that names the machine, printed and also written where
`--output` and `--json` say, its figures' units (`mb`, `secs`); and the references
a figure is printed beside, PostgreSQL doing the same work without Cascade: `psql_copy_seconds`
(`psql \\copy` of the rows ingestion stored, the lab's ingest row) and `json_agg_seconds`
(PostgreSQL building a trace's detail JSON itself, the lab's api row)."""

import argparse
import json
import os
import platform
import secrets
import shlex
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench import common
from bench.common import log

MB = 1e6


def mb(nbytes: float) -> str:
    """Bytes as MB, or kB and B where MB would say 0.0."""
    if nbytes >= 100_000:
        return f"{nbytes / MB:,.1f} MB"
    return f"{nbytes / 1000:,.1f} kB" if nbytes >= 1000 else f"{nbytes:,.0f} B"


def secs(seconds: float) -> str:
    """Seconds as ms below one, else s."""
    if seconds < 1:
        return f"{seconds * 1000:,.1f} ms"
    return f"{seconds:,.2f} s" if seconds < 10 else f"{seconds:,.1f} s"


@dataclass
class Row:
    key: str
    figure: str
    measured: str
    reference: str
    ratio: str
    target: str
    met: bool | None  # None: nothing to judge (the figure could not be taken)
    values: dict = field(default_factory=dict)  # the raw numbers, for --json


def arguments(prog: str, doc: str, scales, figures) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    parser.set_defaults(prog=prog)
    parser.add_argument("--scale", choices=scales, default="full", help="sizes (default: full, the issue's)")
    parser.add_argument(
        "--only", default=",".join(figures), help=f"comma-separated, of: {', '.join(figures)}"
    )
    parser.add_argument("--json", metavar="FILE", help="also write every value here")
    parser.add_argument("--output", metavar="FILE", help="also write the table here (Markdown)")
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="also keep the table, dated, with the command that made it, between FILE's `<!-- bench: PROG -->` "
        "and `<!-- /bench: PROG -->` lines (docs/performance.md)",
    )
    parser.add_argument(
        "--server",
        default=common.server_url(os.environ.get("BENCH_DATABASE_URL", common.DEFAULT_SERVER_URL)),
        help="the PostgreSQL server for the scratch databases (default: BENCH_DATABASE_URL's, else %(default)s)",
    )
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None, figures) -> argparse.Namespace:
    args = parser.parse_args(argv)
    args.figures = {name.strip() for name in args.only.split(",") if name.strip()}
    if unknown := args.figures - set(figures):
        parser.error(f"unknown figures {', '.join(sorted(unknown))}; choose among {', '.join(figures)}")
    return args


def start(server: str) -> dict:
    """This process ready to take a table's figures: in the project's root, Django configured
    only for the models' table names and the API's own queries (pointed at the maintenance
    database, never at a scratch one it would hold open); the machine it runs on."""
    os.chdir(common.ROOT)
    if str(common.ROOT) not in sys.path:
        sys.path.insert(0, str(common.ROOT))
    os.environ.update(
        DJANGO_SETTINGS_MODULE="cascade.settings",
        DATABASE_URL=common.database_url(server, "postgres"),
        DJANGO_SECRET_KEY=os.environ.get("DJANGO_SECRET_KEY", "bench-not-a-secret"),
    )
    import django

    django.setup()
    return machine(server)


class Steps:
    """Runs each step; one that fails leaves the others, its figures noted with the reason."""

    def __init__(self):
        self.failures: dict[str, str] = {}

    def __call__(self, names: set[str], run) -> None:
        if not names:
            return
        try:
            run()
        except Exception as error:
            log(f"failed: {''.join(traceback.format_exception(error)).rstrip()}")
            self.failures.update(dict.fromkeys(names, f"{type(error).__name__}: {error}".splitlines()[0]))


def table(rows: list[Row]) -> str:
    """The rows as Markdown, with a ratio column where any row has one."""
    ratios = any(row.ratio for row in rows)
    head = ["figure", "measured", "reference", *(["ratio"] if ratios else []), "target", "met?"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        met = "—" if row.met is None else ("yes" if row.met else "**no**")
        cells = [row.figure, row.measured, row.reference, *([row.ratio] if ratios else []), row.target, met]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def report(args: argparse.Namespace, heading: str, rows: list[Row], started: float, **extra) -> str:
    """Print the table under its heading; write it to --output and --record, everything to --json."""
    output = f"{heading}\n\n{table(rows)}\n"
    print(output)
    log(f"done in {time.perf_counter() - started:.0f} s")
    if args.output:
        Path(args.output).write_text(output)
    if args.record:
        record(Path(args.record), args.prog, output)
    if args.json:
        document = {"scale": args.scale, **extra, "rows": [asdict(r) for r in rows], "markdown": output}
        document["seconds"] = time.perf_counter() - started
        Path(args.json).write_text(json.dumps(document, indent=2, default=str) + "\n")
    return output


def record(path: Path, prog: str, output: str) -> None:
    """Keep `output` in `path` between its `<!-- bench: PROG -->` and `<!-- /bench: PROG -->`
    lines, with the command that made it: the last figures stay beside the command behind them."""
    start, end = f"<!-- bench: {prog} -->", f"<!-- /bench: {prog} -->"
    text = path.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"--record: {path} has no `{start}` ... `{end}` lines to keep the table between")
    command = shlex.join(["python", "-m", *prog.split()[2:], *sys.argv[1:]])
    before, _, rest = text.partition(start)
    _, _, after = rest.partition(end)
    path.write_text(f"{before}{start}\nReproduced by `{command}`.\n\n{output}{end}{after}")
    log(f"recorded in {path}")


def unmet(rows: list[Row]) -> list[Row]:
    """The rows whose target was not met: drift, when the scale is the one the targets are for."""
    return [row for row in rows if row.met is False]


def machine(server: str) -> dict:
    """What the figures were measured on: cores, CPU, RAM, and the versions that matter."""
    import django
    import psycopg

    model = platform.processor() or platform.machine()
    ram = 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    postgres = common.query(common.database_url(server, "postgres"), "SHOW server_version")[0][0]
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "ram_bytes": ram,
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "postgresql": postgres,
        "django": django.get_version(),
        "psycopg": psycopg.__version__,
        "libpq": f"{psycopg.pq.version() // 10000}.{psycopg.pq.version() % 10000}",
    }


def heading(title: str, sizes: str, machine: dict) -> str:
    """The table's heading: what was measured at which sizes, when, and on what."""
    load = machine["load_average"]
    return (
        f"{title}: {sizes}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n"
        f"Machine: {machine['cores']} cores ({machine['cpu']}), {machine['ram_bytes'] / 2**30:.1f} GiB RAM"
        + (f", load average {load[0]:.1f} at the start" if load else "")
        + f"; Python {machine['python']}, PostgreSQL {machine['postgresql']}, Django {machine['django']}, "
        f"psycopg {machine['psycopg']} (libpq {machine['libpq']}); Cascade's processes on "
        + (
            "requirements.txt alone."
            if common.CASCADE_PYTHON != sys.executable
            else "the bench's virtualenv."
        )
    )


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


def kernel_query_sql(database_url: str, run_id: str) -> str:
    """The API's query of a trace's kernels (`traces.selectors`: KERNEL_COLUMNS in
    KERNEL_ORDER) as one SQL statement with its values written in, for psql."""
    import psycopg

    from traces.models import KERNEL_COLUMNS, KERNEL_ORDER, Kernel

    kernels = Kernel.objects.filter(trace_id=run_id).order_by(*KERNEL_ORDER).values_list(*KERNEL_COLUMNS)
    sql, params = kernels.query.sql_with_params()
    with psycopg.connect(database_url) as conn:
        return psycopg.ClientCursor(conn).mogrify(sql, params)


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


# The detail's keys the API does not write as their column stores them: metadata.json's text as
# JSON; `waiting_for` null but for an uploading trace, which the bench's runs never are (the API's
# sentence of files is not built here).
_ANSWERED_OTHERWISE = {
    "metadata": 't."metadata_json"::json',
    "waiting_for": "CASE WHEN t.state = 'uploading' AND t.metadata_json IS NULL THEN 'metadata.json' END",
    "owner": "(SELECT u.username FROM auth_user u WHERE u.id = t.owner_id)",
}


def json_agg_sql(database_url: str, run_id: str) -> str:
    """One statement in which PostgreSQL builds the trace's TraceDetail JSON itself: the same
    keys in the same order, kernels read by the API's own query (`traces.selectors`) and
    aggregated with json_agg. Only the steps stay their numbers (the API names them from
    timeline.json; the bench's runs have none) and PostgreSQL's spacing differs."""
    import psycopg
    from psycopg.sql import Literal

    from traces.encoders import kernel_row_to_dict
    from traces.models import KERNEL_COLUMNS, Trace
    from traces.shapes import DATETIME, TRACE_DETAIL, Shape

    kernel_sql = kernel_query_sql(database_url, run_id)
    aliases = ", ".join(f"c{i}" for i in range(len(KERNEL_COLUMNS)))
    with psycopg.connect(database_url) as conn:
        trace_id = Literal(run_id).as_string(conn)
        cursor = conn.execute(f"SELECT * FROM ({kernel_sql}) AS k({aliases}) LIMIT 0")
        types = [column.type_code for column in cursor.description]
    oid = 26  # pg_type's oid of `oid`
    columns = tuple(_Column(i, as_number=types[i] == oid) for i in range(len(KERNEL_COLUMNS)))
    kernels = (
        f"coalesce((SELECT json_agg({_json_sql(kernel_row_to_dict(columns))}) "
        f"FROM ({kernel_sql}) AS k({aliases})), '[]'::json)"
    )
    # The detail's keys in its order (`traces.shapes`), each its column as stored but where the
    # API writes it otherwise.
    values = {"kernels": kernels, **_ANSWERED_OTHERWISE}
    pairs = []
    for declared in TRACE_DETAIL.fields:
        value = values.get(declared.name)
        if value is None:
            value = f't."{Trace._meta.get_field(declared.column).column}"'
            if declared.kind == DATETIME:
                value = f"""to_char({value} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""
            elif isinstance(declared.items, Shape):  # jsonb objects: their keys in the declared order
                keys = ", ".join(f"'{key}', w->'{key}'" for key in declared.items.keys)
                value = (
                    f"coalesce((SELECT json_agg(json_build_object({keys}) ORDER BY n) "
                    f"FROM jsonb_array_elements({value}) WITH ORDINALITY AS e(w, n)), '[]'::json)"
                )
        pairs.append(f"'{declared.name}', {value}")
    return (
        f"SELECT json_build_object({', '.join(pairs)}) FROM {Trace._meta.db_table} t WHERE t.id = {trace_id}"
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
