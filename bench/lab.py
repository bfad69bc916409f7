"""The lab-scale bench: every figure beside its reference, measured in one run.

    python3 run.py bench [--scale tiny|small|full] [--only ingest,memory,...] [--output FILE] [--json FILE]
    .venv/bin/python -m bench ...                      (the same, inside the virtualenv)

Cascade runs as it is deployed: `manage.py ingest_traces` and gunicorn are child processes,
against scratch PostgreSQL databases this bench creates (copies of one migrated template)
and drops, reading an S3 bucket on moto's server, which it starts on 127.0.0.1 and stops. The
runs come from the project's generator (tools/generator.py). Progress goes to stderr; the
table, in Markdown, to stdout. The figures (docs/performance.md says how to read them):

- ingest   `ingest_traces` of one generated run beside `psql \\copy` of the rows it stored
           into an equivalent table (bench/harness.py), each the best of --repeat clean runs;
           with memory also the run twice as large;
- memory   the peak RSS of that `ingest_traces`, and of one on a run twice as large (4x at the
           smaller scales);
- traced   the peak RSS of `ingest_traces` on runs of one context whose kernelslist names every
           launch (the tracer's default), with timing.csv and timeline.json: 1x, 2x and 4x the
           large run's launches, side by side;
- storage  what PostgreSQL holds per launch, beside the stats text it came from;
- api      `GET /api/traces/{id}` of that run through gunicorn beside PostgreSQL's json_agg
           of the same JSON (bench/harness.py): the first identity and the first gzip GET
           after the detail was written once (`manage.py write_detail_bodies`, the process a
           one-shot `ingest_traces` starts for it, run and measured here), then the
           identity GET computed as before the write (the written bodies removed), then with
           gzip and zstd accepted: bytes on the wire;
- etag     the same GET again with If-None-Match;
- dataframe  that run's launches into a pandas DataFrame through `kernels.csv` beside through
           the JSON detail (bench/lab_runs.py);
- runs     one pass over many new small runs: seconds, S3 requests per run (bench/lab_runs.py,
           as traced and idle);
- idle     the second pass over a bucket of failed runs: S3 requests.

This module holds the run (`Lab`: the bucket, the template database, generated runs uploaded
and ingested) and the large run's figures; bench/lab_runs.py the others, given the `Lab`.
"""

import json
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import common, harness, lab_runs
from bench.common import log
from bench.harness import MB, Row, mb, secs

FIGURES = ("ingest", "memory", "traced", "storage", "api", "etag", "dataframe", "runs", "idle")
BIG_TRACE_FIGURES = {"ingest", "memory", "storage", "api", "etag", "dataframe"}
# The rows each figure gives, in the table's order.
ROW_KEYS = {
    "ingest": ["ingest", "ingest-more"],
    "memory": ["memory"],
    "traced": ["traced"],
    "storage": ["storage", "growth"],
    "api": ["api", "api-gzip", "computed", "gzip", "zstd"],
    "etag": ["etag"],
    "dataframe": ["dataframe"],
    "runs": ["runs"],
    "idle": ["idle"],
}
ROW_ORDER = [key for figure in FIGURES for key in ROW_KEYS[figure]]
# Up to this many launches the API's JSON and json_agg's are also compared, whole.
CHECK_JSON_LAUNCHES = 20_000
# Each run of the lab gets its own key prefix in the bucket, so each pass sees only its runs.
BUCKET = "cascade-lab"


@dataclass(frozen=True)
class Scale:
    launches: int  # the large run: ingest, storage, api, etag, and memory's first size
    memory_launches: int  # memory's second size
    runs: int  # new small runs in one pass
    failed_runs: int  # failed runs for the idle pass
    timeout: float  # seconds any one child may take


SCALES = {
    # For the test suite: proves the harness end to end in well under a minute.
    "tiny": Scale(launches=2_000, memory_launches=8_000, runs=10, failed_runs=10, timeout=300),
    "small": Scale(launches=100_000, memory_launches=400_000, runs=200, failed_runs=100, timeout=1800),
    "full": Scale(launches=1_000_000, memory_launches=2_000_000, runs=2_000, failed_runs=1_000, timeout=7200),
}


class Lab:
    """One bench run: the S3 server, the migrated template database, the results."""

    def __init__(self, server: str, endpoint: str, template: str, tmp: Path, scale: Scale):
        self.server = server
        self.endpoint = endpoint
        self.template = template
        self.tmp = tmp
        self.scale = scale
        self.s3 = common.s3_client(endpoint)
        self.rows: list[Row] = []
        self.large_rss: int | None = None  # the large run's ingest_traces, for memory
        self.repeat = 1  # clean runs of each ingest and its \copy, the best kept
        self.ingest_again = False  # memory's larger run also judged against \copy

    def env(self, database_url: str, prefix: str, **extra: str) -> dict:
        return common.child_env(
            self.tmp / "var",
            DATABASE_URL=database_url,
            CASCADE_S3_BUCKET=BUCKET,
            CASCADE_S3_ENDPOINT_URL=self.endpoint,
            CASCADE_S3_PREFIX=prefix,
            **extra,
        )

    def ingest(self, database_url: str, prefix: str, label: str) -> common.Child:
        """`manage.py ingest_traces`, without the process of their own a one-shot pass starts for
        its details' write: it would still be writing while the next figures run (`api` runs
        that process itself, `write_detail_bodies`, and measures it)."""
        log(f"{label}: manage.py ingest_traces")
        env = self.env(database_url, prefix, CASCADE_DETAIL_BODIES_BYTES="0")
        child = common.manage("ingest_traces", env=env, timeout=self.scale.timeout)
        log(f"{label}: {child.seconds:.1f} s, peak RSS {mb(child.max_rss)}; {child.summary_line()}")
        return child

    def add(self, row: Row) -> None:
        self.rows.append(row)
        log(f"  {row.figure}: {row.measured} | {row.reference} | {row.ratio} | met: {row.met}")

    def upload(self, prefix: str, run_id: str, spec, *, rewrite=None, copies: list[str] | None = None):
        """A run generated (tools/generator.py), `rewrite(folder)` if given, and uploaded under
        `prefix`: as `run_id`, or once per id of `copies`. Returns the generator's files."""
        from tools import generator

        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="cascade-bench-run-", dir=self.tmp) as tmp:
            folder = Path(tmp) / run_id
            files = generator.write_run(folder, spec, run_id=run_id, key_prefix=prefix)
            if rewrite:
                rewrite(folder)
            if copies:
                common.upload_copies(self.s3, BUCKET, folder, prefix, run_id, copies)
            else:
                common.upload_folder(self.s3, BUCKET, folder, f"{prefix}{run_id}/")
        what = f"{len(copies):,} runs" if copies else f"{spec.kernels:,} launches"
        log(f"{prefix}{run_id}: {what} generated and uploaded in {time.perf_counter() - started:.1f} s")
        return files

    # --- the large run: ingest, storage, api, etag, memory ------------------------------------

    def generate_and_upload(self, prefix: str, run_id: str, launches: int) -> int:
        """One large run; returns the bytes of its stats files (the raw text per launch)."""
        from tools import generator

        # No timeline.json or timing.csv: every launch's step and duration are null, so that
        # PostgreSQL's json_agg reference builds exactly the API's JSON (steps are named there).
        spec = generator.RunSpec(kernels=launches, contexts=4, seed=1, timing=False, timeline=False)
        files = self.upload(prefix, run_id, spec)
        return sum(f.bytes for f in files if f.name.startswith("traces/stats"))

    def large_run(self, figures: set[str]) -> None:
        n = self.scale.launches
        run_id, prefix = f"lab-{n}", f"lab-large-{n}/"
        with common.scratch_database(self.server, "large", template=self.template) as db:
            stats_bytes = self.generate_and_upload(prefix, run_id, n)
            size_before = common.query(db, "SELECT pg_database_size(current_database())")[0][0]
            child = self.ingest(db, prefix, run_id)
            common.expect_ready(db, run_id, n)
            self.large_rss = child.max_rss
            if "storage" in figures:
                self.storage(db, n, stats_bytes, size_before)
            if "ingest" in figures:
                lab_runs.ingest_row(self, "ingest", db, prefix, run_id, n, child)
            if figures & {"api", "etag", "dataframe"}:
                self.api(db, prefix, run_id, n, figures)

    def storage(self, db: str, n: int, stats_bytes: int, size_before: int) -> None:
        from traces.models import Kernel, Trace

        kernel, trace = Kernel._meta.db_table, Trace._meta.db_table
        # The kernel table, its companions (`traces_kernel*`: names, contexts), the tables it
        # refers to (the trace table aside) and those that refer to it: from the live schema.
        tables = [
            row[0]
            for row in common.query(
                db,
                "SELECT relname::text FROM pg_class WHERE relkind IN ('r', 'p') AND relname LIKE %s"
                " AND relnamespace = 'public'::regnamespace"
                " UNION SELECT confrelid::regclass::text FROM pg_constraint"
                " WHERE contype = 'f' AND conrelid = %s::regclass AND confrelid <> %s::regclass"
                " UNION SELECT conrelid::regclass::text FROM pg_constraint"
                " WHERE contype = 'f' AND confrelid = %s::regclass",
                (kernel.replace("_", "\\_") + "%", kernel, trace, kernel),
            )
        ]
        sizes = {
            table: common.query(db, "SELECT pg_table_size(%s), pg_indexes_size(%s)", (table, table))[0]
            for table in sorted(tables)
        }
        heap = sum(size[0] for size in sizes.values())
        index = sum(size[1] for size in sizes.values())
        growth = common.query(db, "SELECT pg_database_size(current_database())")[0][0] - size_before
        raw = stats_bytes / n
        per_launch = (heap + index) / n
        self.add(
            Row(
                "storage",
                f"PostgreSQL bytes per launch ({', '.join(sizes)})",
                f"{per_launch:,.0f} B ({heap / n:,.0f} heap + {index / n:,.0f} index)",
                f"raw stats text {raw:,.0f} B",
                f"{per_launch / raw:.2f}x",
                "≤ 150 B",
                per_launch <= 150,
                {
                    "bytes_per_launch": per_launch,
                    "heap": heap / n,
                    "index": index / n,
                    "raw": raw,
                    "tables": sizes,
                },
            )
        )
        self.add(
            Row(
                "growth",
                "Database growth per launch (`pg_database_size`)",
                f"{growth / n:,.0f} B",
                f"raw stats text {raw:,.0f} B",
                f"{growth / n / raw:.2f}x",
                "≤ 150 B",
                growth / n <= 150,
                {"bytes_per_launch": growth / n, "raw": raw},
            )
        )

    def api(self, db: str, prefix: str, run_id: str, n: int, figures: set[str]) -> None:
        from bench.common import http_get
        from bench.harness import json_agg_seconds
        from traces.detail_bodies import worth_writing

        env = self.env(db, prefix)
        writer = None
        if worth_writing("ready", n):  # what a one-shot ingest_traces starts once its pass is done
            log(f"{run_id}: manage.py write_detail_bodies")
            writer = common.manage("write_detail_bodies", run_id, env=env, timeout=self.scale.timeout)
            log(f"  {writer.seconds:.1f} s, peak RSS {mb(writer.max_rss)}")
        token = common.create_token(env, "bench-lab")
        path = f"/api/traces/{run_id}"
        auth = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        log("gunicorn (gunicorn.conf.py) on 127.0.0.1")
        with common.gunicorn(env) as port:
            http_get(port, "/api/traces", auth)  # each worker's first request pays for its imports
            http_get(port, "/api/traces", auth)
            # And its first detail request (the trace's row, a database connection): a HEAD,
            # which sends no byte of the detail, so that the GETs below are the first.
            for _ in range(4):
                http_get(port, path, {**auth, "Accept-Encoding": "identity"}, method="HEAD")
            log(f"GET {path}")
            plain = http_get(port, path, {**auth, "Accept-Encoding": "identity"})
            log(f"  {plain.status}, {mb(plain.nbytes)} in {plain.seconds:.1f} s; json_agg of the same JSON")
            agg_seconds, agg_bytes = json_agg_seconds(db, run_id)
            same_json = None
            if n <= CHECK_JSON_LAUNCHES:  # small enough to compare the two documents whole
                body = http_get(port, path, {**auth, "Accept-Encoding": "identity"}, keep=True).body
                json_agg_seconds(db, run_id, keep=self.tmp / "json_agg.json")
                same_json = json.loads(body) == json.loads((self.tmp / "json_agg.json").read_bytes())
                log(f"  the API's JSON and json_agg's are {'the same' if same_json else 'DIFFERENT'}")
            encoded = {}
            for encoding in ("gzip", "zstd"):
                log(f"GET {path}, Accept-Encoding: {encoding}")
                encoded[encoding] = http_get(port, path, {**auth, "Accept-Encoding": encoding})
            etag = plain.headers.get("etag")
            again = None
            if etag:
                log(f"GET {path}, If-None-Match: {etag}")
                again = http_get(port, path, {**auth, "Accept-Encoding": "identity", "If-None-Match": etag})
            second = http_get(port, path, {**auth, "Accept-Encoding": "identity"})
            log(f"  GET {path} again: {second.status}, {mb(second.nbytes)} in {second.seconds:.2f} s")
            written = {**lab_runs.written_bodies(db, run_id), **writer_values(writer)}
            log(f"GET {path} computed as before the write: the written bodies removed")
            lab_runs.remove_written_bodies(db)
            computed = http_get(port, path, {**auth, "Accept-Encoding": "identity"})
            frames = None
            if "dataframe" in figures:
                log(f"{path}/kernels.csv and {path} into pandas DataFrames")
                frames = lab_runs.dataframe_seconds(port, run_id, auth)
        if plain.status != 200:
            raise RuntimeError(f"GET {path} answered {plain.status}")
        if "api" in figures:
            self.api_rows(n, plain, (agg_seconds, agg_bytes, same_json), encoded, computed, written)
        if "etag" in figures:
            self.etag_row(plain, again)
        if frames is not None:
            self.dataframe(frames, n)

    def api_rows(self, n: int, plain, reference: tuple, encoded: dict, computed, written: dict) -> None:
        """The first identity and gzip GETs after the detail was written once, side by side
        beside json_agg's seconds (bytes and sameness); the GET computed as before the write;
        then one row per encoding's bytes."""
        agg_seconds, agg_bytes, same_json = reference
        after = (
            f"written in {written['writer_seconds']:.1f} s by `write_detail_bodies`, "
            f"peak RSS {mb(written['writer_rss'])}"
            if written.get("writer_seconds") is not None and written.get("written_bytes")
            else "**not written**"
        )
        for key, label, answer in (("api", "identity", plain), ("api-gzip", "gzip", encoded["gzip"])):
            ratio = answer.seconds / agg_seconds
            served = "written" if "accept-ranges" in answer.headers else "**computed**"
            self.add(
                Row(
                    key,
                    f"`GET /api/traces/{{id}}`, {n:,} launches, {label}, the first after its write ({after})",
                    f"{secs(answer.seconds)}, {mb(answer.nbytes)} ({served})",
                    f"PostgreSQL `json_agg` of the same JSON {secs(agg_seconds)}, {mb(agg_bytes)}"
                    + (" (**not the same JSON**)" if same_json is False else ""),
                    f"{ratio:.2f}x",
                    "≤ 0.15x",
                    answer.status == 200 and served == "written" and ratio <= 0.15,
                    {
                        "seconds": answer.seconds,
                        "bytes": answer.nbytes,
                        "served": served,
                        "json_agg_seconds": agg_seconds,
                        "json_agg_bytes": agg_bytes,
                        "same_json": same_json,
                        "ratio": ratio,
                        **written,
                    },
                )
            )
        ratio = computed.seconds / agg_seconds
        self.add(
            Row(
                "computed",
                "… identity computed, as before its write (or after a change)",
                f"{secs(computed.seconds)}, {mb(computed.nbytes)}",
                f"`json_agg` {secs(agg_seconds)}",
                f"{ratio:.2f}x",
                "≤ 0.7x",
                computed.status == 200 and computed.nbytes == plain.nbytes and ratio <= 0.7,
                {"seconds": computed.seconds, "bytes": computed.nbytes, "ratio": ratio},
            )
        )
        for encoding, answer in encoded.items():
            sent = answer.headers.get("content-encoding", "none")
            share = answer.nbytes / plain.nbytes
            self.add(
                Row(
                    encoding,
                    f"… with `Accept-Encoding: {encoding}`: bytes on the wire",
                    f"{mb(answer.nbytes)} (Content-Encoding: {sent}), {secs(answer.seconds)}",
                    f"identity {mb(plain.nbytes)}",
                    f"1/{1 / share:.1f}" if share else "0",
                    "≤ 1/8",
                    answer.status == 200 and share <= 1 / 8,
                    {
                        "status": answer.status,
                        "content_encoding": sent,
                        "bytes": answer.nbytes,
                        "seconds": answer.seconds,
                        "identity_bytes": plain.nbytes,
                    },
                )
            )

    def etag_row(self, plain, again) -> None:
        etag = plain.headers.get("etag")
        if again is None:
            measured, values = "no ETag in the first answer: nothing to send", {"etag": None}
        else:
            measured = f"{again.status}, {again.nbytes:,} B, {secs(again.seconds)}"
            values = {
                "etag": etag,
                "status": again.status,
                "bytes": again.nbytes,
                "seconds": again.seconds,
            }
        self.add(
            Row(
                "etag",
                "… again with `If-None-Match` of its ETag",
                measured,
                f"first GET {plain.status}, {mb(plain.nbytes)}",
                "",
                "304",
                again is not None and again.status == 304,
                values,
            )
        )

    def dataframe(self, frames: dict, n: int) -> None:
        if not frames["csv_rows"] == frames["json_rows"] == n:
            raise RuntimeError(f"DataFrames of {frames['csv_rows']} and {frames['json_rows']} rows, not {n}")
        self.add(
            Row(
                "dataframe",
                f"{n:,} launches into a pandas DataFrame: `read_csv` of `kernels.csv`",
                f"{secs(frames['csv_seconds'])}, {mb(frames['csv_bytes'])}",
                f"JSON detail, `json.loads` + `DataFrame` {secs(frames['json_seconds'])}, "
                f"{mb(frames['json_bytes'])}",
                f"{frames['ratio']:.2f}x",
                "≤ 1/3",
                frames["ratio"] <= 1 / 3,
                frames,
            )
        )

    def memory(self) -> None:
        if self.large_rss is None:
            raise RuntimeError("the large run was not ingested: nothing to compare with")
        n = self.scale.memory_launches
        run_id, prefix = f"lab-{n}", f"lab-large-{n}/"
        with common.scratch_database(self.server, "memory", template=self.template) as db:
            self.generate_and_upload(prefix, run_id, n)
            child = self.ingest(db, prefix, run_id)
            common.expect_ready(db, run_id, n)
            if self.ingest_again:
                lab_runs.ingest_row(self, "ingest-more", db, prefix, run_id, n, child)
        first, second = self.large_rss, child.max_rss
        growth = second - first
        small = self.scale.launches
        self.add(
            Row(
                "memory",
                f"Peak RSS of `ingest_traces`, {small:,} and {n:,} launches",
                f"{mb(first)} and {mb(second)}",
                f"{n // small}x the launches: {growth / MB:+,.1f} MB",
                f"{second / first:.2f}x",
                "< 100 MB, flat (within 5 MB)",
                max(first, second) < 100 * MB and abs(growth) <= 5 * MB,
                {"rss": {small: first, n: second}},
            )
        )


def writer_values(writer: common.Child | None) -> dict:
    return {} if writer is None else {"writer_seconds": writer.seconds, "writer_rss": writer.max_rss}


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments("python -m bench", __doc__, SCALES, FIGURES)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="ingest figures: the best of N clean runs (default 1)",
    )
    args = harness.parse(parser, sys.argv[1:] if argv is None else argv, FIGURES)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    scale = SCALES[args.scale]
    started = time.perf_counter()
    machine = harness.start(args.server)
    step = harness.Steps()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cascade-bench-")))
        log("moto's S3 server on 127.0.0.1")
        endpoint = stack.enter_context(common.moto_server())
        template = stack.enter_context(common.scratch_database(args.server, "template"))
        log(f"migrating the template database {template.rsplit('/', 1)[1]}")
        common.manage("migrate", "--noinput", env=common.child_env(tmp, DATABASE_URL=template))
        lab = Lab(args.server, endpoint, template.rsplit("/", 1)[1], tmp, scale)
        lab.repeat, lab.ingest_again = args.repeat, {"ingest", "memory"} <= args.figures
        lab.s3.create_bucket(Bucket=BUCKET)
        step(args.figures & BIG_TRACE_FIGURES, lambda: lab.large_run(args.figures))
        step(args.figures & {"memory"}, lab.memory)
        step(args.figures & {"traced"}, lambda: lab_runs.traced(lab))
        step(args.figures & {"runs"}, lambda: lab_runs.new_runs(lab))
        step(args.figures & {"idle"}, lambda: lab_runs.idle_pass(lab))
    measured = {row.key for row in lab.rows}
    for figure, why in step.failures.items():
        for key in ROW_KEYS[figure]:
            if key not in measured:
                lab.rows.append(Row(key, key, f"not measured: {why}", "", "", "", None))
    rows = sorted(lab.rows, key=lambda row: ROW_ORDER.index(row.key))
    sizes = (
        f"{scale.launches:,}-launch run (memory also at {scale.memory_launches:,}), "
        f"{scale.runs:,} new runs, {scale.failed_runs:,} failed runs"
    )
    title = f"Lab bench, scale `{args.scale}`"
    harness.report(
        args, harness.heading(title, sizes, machine), rows, started, sizes=asdict(scale), machine=machine
    )
    # A figure not taken is a failure (1). An unmet target is drift (2) at the full scale, the
    # one the targets are for; at the smaller ones fixed costs dominate and it is only shown.
    if step.failures:
        return 1
    if drifted := harness.unmet(rows):
        log(
            f"{'DRIFT' if args.scale == 'full' else 'not met (not judged below the full scale)'}: "
            + "; ".join(f"{row.figure}: {row.ratio or row.measured} (target {row.target})" for row in drifted)
        )
        return 2 if args.scale == "full" else 0
    return 0
