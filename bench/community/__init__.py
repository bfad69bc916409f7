"""The community bench (issue 22): Cascade at 100,000 traces and 50M launches, each figure beside a reference.

    python3 run.py bench community [--scale tiny|small|full] [--only list,detail,...] [--output FILE] [--json FILE]
    .venv/bin/python -m bench community ...            (the same, inside the virtualenv)

One scratch PostgreSQL database is filled server-side (bench/community/data.py): `--scale`
registered traces (most ready, a quarter uploading, many tiny, one of 1M launches) and their
launches. Cascade then serves it as deployed (gunicorn, gunicorn.conf.py) and runs against it
as deployed (`manage.py ingest_traces` children, moto's S3 and SQS server on 127.0.0.1). The
figures, each printed beside its reference:

- list     `GET /api/traces`: the full list, a page of 100 (first and half way, by Link), the
           304 of each, beside PostgreSQL's `COPY (SELECT json_agg(...))` (bench/community/served.py);
- detail   a repeated gzip GET of the 1M-launch trace's detail beside its first, computed one;
- admin    the trace list, a trace's page and the kernel list, logged in (bench/community/served.py);
- integrity  `manage.py check_integrity` over every launch, beside `SELECT count(*)` of them;
- events   from a `metadata.json` upload to `ready`, with S3 events and with polling every
           30 s, the poller running on this database (bench/community/watch.py);
- delete   a 1M-launch trace deleted amid the others: the old way (one DELETE) beside the new
           (the trace at once, its launches purged in batches; bench/community/delete.py);
- idle     the S3 requests of an idle pass with events on beside without (bench/community/watch.py; its
           own bucket and database, since the idle pass needs every trace in the bucket too);
- memory   the peak RSS of `ingest_traces` on runs of one context with every launch traced,
           1x, 2x and 4x (the lab bench's `traced` figure; 1M to 4M at full scale).

Progress goes to stderr, the Markdown table to stdout. docs/performance.md holds the last table.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from bench import common, harness
from bench.common import log
from bench.harness import Row

FIGURES = ("list", "detail", "admin", "integrity", "events", "delete", "idle", "memory")
SERVED = {"list", "detail", "admin"}
MB = 1e6
# A shared cache, as production's (CASCADE_CACHE_URL): the parse keeps a big trace's admin page
# reads there. Its keys hold the trace's key and updated_at: no run of the bench reads another's.
CACHE_URL = "redis://127.0.0.1:6379/13"
BUCKET = "cascade-community"
PREFIX = "community/"


@dataclass(frozen=True)
class Scale:
    traces: int
    launches: int  # in all, the big trace's among them
    big: int  # the trace whose detail is fetched and which is deleted
    events_runs: int  # runs uploaded in each mode
    poll_seconds: int  # the polling mode's interval
    lab_scale: str  # the lab bench's scale for memory (its 1x, 2x, 4x)
    idle_scale: str  # bench/community/watch.py's idle scale


SCALES = {
    "tiny": Scale(2_000, 200_000, 50_000, 1, 3, "tiny", "tiny"),
    "small": Scale(10_000, 5_000_000, 1_000_000, 2, 10, "small", "small"),
    "full": Scale(100_000, 50_000_000, 1_000_000, 5, 30, "full", "full"),
}


def row(figure: str, measured: str, reference: str, target: str, met: bool | None) -> Row:
    return Row(figure, figure, measured, reference, "", target, met)


def secs(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:,.1f} ms"
    return f"{seconds:,.2f} s" if seconds < 10 else f"{seconds:,.1f} s"


class Community:
    def __init__(self, server: str, scale: Scale, tmp: Path):
        self.server, self.scale, self.tmp = server, scale, tmp
        self.rows: list[Row] = []
        self.values: dict = {}
        self.secret = os.urandom(16).hex()

    def add(self, row: Row) -> None:
        self.rows.append(row)
        log(f"  {row.figure}: {row.measured} | {row.reference} | met: {row.met}")

    def env(self, db: str, **extra: str) -> dict:
        return common.child_env(
            DATABASE_URL=db,
            DJANGO_SECRET_KEY=f"bench-{self.secret}",
            CASCADE_VAR_DIR=str(self.tmp / "var"),
            CASCADE_API_RATE="",
            CASCADE_CACHE_URL=CACHE_URL,
            **extra,
        )

    def child_json(self, label: str, argv: list[str], env: dict | None = None) -> dict:
        """A bench script in a child process, its figures read from its --json file."""
        out = self.tmp / f"{label}.json"
        log(f"{label}: {' '.join(argv)}")
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, *argv, "--json", str(out)],
            cwd=common.ROOT,
            env=env or os.environ.copy(),
            stdout=sys.stderr,  # its table is progress here; ours goes to stdout
            check=True,
        )
        log(f"{label}: {time.perf_counter() - started:.0f} s")
        return json.loads(out.read_text())

    # --- the community database ----------------------------------------------------------------

    def seeded(self, stack: ExitStack) -> tuple[str, dict]:
        from bench.community import data

        db = stack.enter_context(common.scratch_database(self.server, "community"))
        common.manage("migrate", "--noinput", env=self.env(db))
        s = self.scale
        log(f"seeding {s.traces:,} traces, {s.launches:,} launches (one of {s.big:,})")
        started = time.perf_counter()
        seeded = data.seed(db, traces=s.traces, launches=s.launches, big_trace_launches=s.big)
        self.values["seed"] = {**seeded, "seconds": time.perf_counter() - started}
        log(f"seeded in {time.perf_counter() - started:.0f} s: {seeded}")
        return db, seeded

    def ingested(self, stack: ExitStack, db: str) -> str:
        """A run of the big trace's size generated, uploaded to moto's S3 and ingested by
        `manage.py ingest_traces`, as a lab's upload is: the trace whose detail and admin page
        are timed (the seeded one, stored by SQL, was never parsed)."""
        from tools import generator

        n = self.scale.big
        run_id = f"community-ingested-{n}"
        endpoint = stack.enter_context(common.moto_server())
        s3 = common.s3_client(endpoint)
        s3.create_bucket(Bucket=BUCKET)
        spec = generator.RunSpec(kernels=n, contexts=4, seed=3)
        with tempfile.TemporaryDirectory(prefix="cascade-bench-run-", dir=self.tmp) as tmp:
            folder = Path(tmp) / run_id
            generator.write_run(folder, spec, run_id=run_id, key_prefix=PREFIX)
            common.upload_folder(s3, BUCKET, folder, f"{PREFIX}{run_id}/")
        env = self.env(
            db, CASCADE_S3_BUCKET=BUCKET, CASCADE_S3_ENDPOINT_URL=endpoint, CASCADE_S3_PREFIX=PREFIX
        )
        child = common.manage("ingest_traces", "--trace", run_id, env=env, timeout=1800)
        log(f"{run_id}: ingested in {child.timing()}")
        state, count = common.query(
            db, "SELECT state, kernel_count FROM traces_trace WHERE id = %s", (run_id,)
        )[0]
        if state != "ready" or count != n:
            raise RuntimeError(f"{run_id} came out {state} with {count} launches, not ready with {n}")
        return run_id

    def served(self, db: str, seeded: dict, figures: set[str]) -> None:
        from bench.community import served

        env = self.env(db)
        token = common.manage("create_token", "bench-community", env=env).stdout.split()[-1]
        auth = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        log("gunicorn (gunicorn.conf.py) on 127.0.0.1")
        with common.gunicorn(env) as port:
            if "list" in figures:
                listed = served.measure_served(port, auth, self.scale.traces, repeat=3)
                listed.update(served.measure_reference(db, repeat=3))
                self.values["list"] = listed
                self.list_rows(listed)
            if "detail" in figures:
                self.detail(port, auth, seeded["ingested"])
            if "admin" in figures:
                self.admin(port, db, {**seeded, "big": seeded["ingested"]})

    def list_rows(self, r: dict) -> None:
        n = self.scale.traces
        copy_list, copy_page = r["copy_list"], r["copy_page"]
        self.add(
            row(
                f"`GET /api/traces`, all {n:,} traces",
                f"{secs(r['list']['seconds'])}, {r['list']['bytes'] / MB:,.1f} MB",
                f"`COPY json_agg` {secs(copy_list['seconds'])}, {copy_list['bytes'] / MB:,.1f} MB",
                "< 2 s",
                r["list"]["seconds"] < 2,
            )
        )
        for key, label in (("page", "first"), ("deep_page", "half way, by `Link`")):
            self.add(
                row(
                    f"`GET /api/traces?limit=100`, {label}",
                    secs(r[key]["seconds"]),
                    f"`COPY json_agg` of 100 {secs(copy_page['seconds'])}",
                    "< 50 ms",
                    r[key]["seconds"] < 0.050,
                )
            )
        for key, label in (("304", "the full list"), ("page_304", "a page of 100")):
            self.add(
                row(
                    f"304 of {label} (`If-None-Match`)",
                    secs(r[key]["seconds"]),
                    f"its 200: {secs(r['list' if key == '304' else 'page']['seconds'])}",
                    "< 20 ms",
                    r[key]["seconds"] < 0.020,
                )
            )

    def detail(self, port: int, auth: dict, big: str) -> None:
        from bench.common import http_get

        path = f"/api/traces/{big}"
        headers = {**auth, "Accept-Encoding": "gzip"}
        log(f"GET {path} (gzip): the first computes, the next are the kept bytes")
        first = http_get(port, path, headers)
        again = [http_get(port, path, headers) for _ in range(3)]
        if first.status != 200 or any(a.status != 200 for a in again):
            raise RuntimeError(f"GET {path} answered {first.status}, {[a.status for a in again]}")
        repeated = statistics.median(a.seconds for a in again)
        self.values["detail"] = {
            "first_seconds": first.seconds,
            "repeated_seconds": [a.seconds for a in again],
            "bytes": first.nbytes,
        }
        self.add(
            row(
                f"gzip `GET /api/traces/{{id}}`, {self.scale.big:,} launches, again",
                f"{secs(repeated)} (median of 3), {first.nbytes / MB:,.1f} MB",
                f"the first, computed: {secs(first.seconds)}",
                "< 1.5 s",
                repeated < 1.5,
            )
        )

    def admin(self, port: int, db: str, seeded: dict) -> None:
        from bench.community import served

        pages = served.measure_admin(port, db, seeded)
        self.values["admin"] = pages
        for page in pages:
            self.add(
                row(
                    f"admin: {page['page']}",
                    f"first {secs(page['first'])}, then {secs(page['seconds'])} (median)",
                    "",
                    "< 1 s",
                    max(page["first"], page["seconds"]) < 1,
                )
            )

    def integrity(self, db: str) -> None:
        # It exits non-zero (run_child raises) on any problem: the seeded database has none.
        child = common.manage("check_integrity", env=self.env(db), timeout=3600)
        started = time.perf_counter()
        ((launches,),) = common.query(db, "SELECT count(*) FROM traces_kernel")
        counted = time.perf_counter() - started
        self.values["integrity"] = {"seconds": child.seconds, "count_seconds": counted}
        self.add(
            row(
                f"`manage.py check_integrity`, {launches:,} launches",
                secs(child.seconds),
                f"`SELECT count(*)` of the launches {secs(counted)}",
                "",
                None,
            )
        )

    def events(self, db: str) -> None:
        from bench.community import watch

        s = self.scale
        log(f"events: {s.events_runs} runs each with events and polling every {s.poll_seconds} s")
        times = watch.ready_times(s.events_runs, s.poll_seconds, database_url=db)
        self.values["events"] = times
        worst, polled = max(times["events"]), times["polling"]
        self.add(
            row(
                f"`metadata.json` upload to `ready`, S3 events ({len(times['events'])} runs)",
                f"median {secs(statistics.median(times['events']))}, worst {secs(worst)}",
                f"polling every {s.poll_seconds} s: median {secs(statistics.median(polled))}, "
                f"worst {secs(max(polled))}",
                "within 3 s",
                worst <= 3,
            )
        )

    def delete(self, db: str, seeded: dict) -> None:
        """The big trace and a copy of it: one deleted the old way, the other the new."""
        copy = f"{seeded['big']}-copy"
        copy_trace(db, seeded["big"], copy)
        env = {**self.env(db), "DJANGO_SETTINGS_MODULE": "cascade.settings"}
        r = self.child_json(
            "delete", ["-m", "bench.community.delete", "--existing", f"{copy},{seeded['big']}"], env=env
        )
        self.values["delete"] = r
        old, new = r["one_delete"], r["batches"]
        self.add(
            row(
                f"delete a {self.scale.big:,}-launch trace amid {self.scale.launches:,}",
                f"trace gone in {new['trace_gone_ms']:,.0f} ms; launches purged in {secs(new['seconds'])} "
                f"({new['statements']} batches of {r['batch']:,}, longest {new['batch_max_ms']:,.0f} ms), "
                f"a writer beside it waits at most {new['writer_max_ms']:,.0f} ms",
                f"one DELETE: {secs(old['seconds'])} in one transaction, a writer beside it waits at most "
                f"{old['writer_max_ms']:,.0f} ms",
                "beside the old",
                r["launches_left_of_deleted_traces"] == 0,
            )
        )

    def idle(self) -> None:
        argv = [
            "-m",
            "bench.community.watch",
            "idle",
            "--scale",
            self.scale.idle_scale,
            "--server",
            self.server,
        ]
        r = self.child_json("idle", argv)
        self.values["idle"] = r
        without, events = r["without_events"], r["with_events"]
        self.add(
            row(
                f"S3 requests of an idle pass, {r['traces']:,} ready traces ({r['objects']:,} objects), "
                "events on: the reconciler's sweep",
                f"{events['s3_requests']:,} a pass (most in a lap of {events['lap_passes']:,} passes: "
                f"{events['s3_requests_most']:,}), {events['per_poll_seconds_with_events']:,} per 600 s",
                f"events off: {without['s3_requests']:,} a pass"
                + ("" if without["measured"] else " (computed: a page per 1,000 runs, 2 a ready run)")
                + f", {without['per_poll_seconds_with_events']:,} per 600 s",
                "≤ 1 listing page per CASCADE_POLL_SECONDS_WITH_EVENTS",
                r["target_met"],
            )
        )

    def memory(self) -> None:
        argv = ["-m", "bench", "--only", "traced", "--scale", self.scale.lab_scale, "--server", self.server]
        r = self.child_json("memory", argv)
        (traced,) = [each for each in r["rows"] if each["key"] == "traced"]
        rss = {int(n): value for n, value in traced["values"]["rss"].items()}
        sizes = sorted(rss)
        growth = rss[sizes[-1]] - rss[sizes[0]]
        self.values["memory"] = rss
        self.add(
            row(
                "peak RSS of `ingest_traces`, one context, every launch traced: "
                + ", ".join(f"{n:,}" for n in sizes),
                " and ".join(f"{rss[n] / MB:,.1f} MB" for n in sizes),
                f"{sizes[-1]:,} launches beside {sizes[0]:,}: {growth / MB:+,.1f} MB",
                "< 100 MB, within 5 MB",
                max(rss.values()) < 100 * MB and abs(growth) <= 5 * MB,
            )
        )


def copy_trace(db: str, source: str, new_id: str) -> None:
    """A copy of trace `source` named `new_id`: its row and every row keyed by its trace_key."""
    import psycopg

    trace_columns = [c for c in harness.loaded_columns(db, "traces_trace") if c not in ("id", "key")]
    keyed = [
        table
        for (table,) in common.query(
            db,
            "SELECT table_name::text FROM information_schema.columns WHERE table_schema = 'public'"
            " AND column_name = 'trace_key' AND table_name NOT IN ('traces_trace', 'traces_kernelpurge')",
        )
    ]
    with psycopg.connect(db) as conn:
        listed = ", ".join(trace_columns)
        (key,) = conn.execute(
            f"INSERT INTO traces_trace (id, key, {listed}) SELECT %s, nextval('traces_trace_key_seq'), "
            f"{listed} FROM traces_trace WHERE id = %s RETURNING key",
            (new_id, source),
        ).fetchone()
        for table in keyed:
            others = ", ".join(c for c in harness.loaded_columns(db, table) if c != "trace_key")
            conn.execute(
                f"INSERT INTO {table} (trace_key, {others}) SELECT %s, {others} FROM {table}"
                " WHERE trace_key = (SELECT key FROM traces_trace WHERE id = %s)",
                (key, source),
            )
    log(f"{new_id}: a copy of {source} ({', '.join(keyed)})")


def heading(name: str, scale: Scale, machine: dict) -> str:
    load = machine["load_average"]
    return (
        f"Community bench, scale `{name}`: {scale.traces:,} traces, {scale.launches:,} launches "
        f"(one trace of {scale.big:,}); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"Machine: {machine['cores']} cores, {machine['ram_bytes'] / 2**30:.1f} GiB RAM"
        + (f", load average {load[0]:.1f} at the start" if load else "")
        + f"; PostgreSQL {machine['postgresql']}, Django {machine['django']}."
    )


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments("python -m bench community", __doc__, SCALES, FIGURES)
    args = harness.parse(parser, argv, FIGURES)
    figures = args.figures
    os.chdir(common.ROOT)
    started = time.perf_counter()
    harness.configure_django(args.server)
    scale = SCALES[args.scale]
    machine = common.machine(args.server)
    step = harness.Steps()
    with tempfile.TemporaryDirectory(prefix="cascade-bench-community-") as tmp:
        bench = Community(args.server, scale, Path(tmp))
        if figures & (SERVED | {"integrity", "events", "delete"}):
            with ExitStack() as stack:
                db, seeded = bench.seeded(stack)
                if figures & {"detail", "admin"}:
                    seeded["ingested"] = bench.ingested(stack, db)
                step(figures & SERVED, lambda: bench.served(db, seeded, figures))
                step(figures & {"integrity"}, lambda: bench.integrity(db))
                step(figures & {"events"}, lambda: bench.events(db))
                step(figures & {"delete"}, lambda: bench.delete(db, seeded))
        step(figures & {"idle"}, bench.idle)
        step(figures & {"memory"}, bench.memory)
    for figure, why in sorted(step.failures.items()):
        bench.rows.append(row(figure, f"not measured: {why}", "", "", None))
    harness.report(
        args, heading(args.scale, scale, machine), bench.rows, started, machine=machine, values=bench.values
    )
    return 1 if step.failures else 0
