"""How soon a deployment sees a run, and what its idle passes cost in S3 requests.
`ready_times`: from a `metadata.json` upload to `ready`, with S3 events (within 3 s) and polling.

    python -m bench.community.watch events [--scale small] [--json FILE]

Starts moto's server (S3 and SQS on one endpoint), a queue the bucket notifies, and a scratch
SQLite database, then for each mode starts the real poller as a deployment runs it
(`manage.py ingest_traces --watch --events`, or `--watch --interval CASCADE_POLL_SECONDS`) and
uploads the scale's small runs (full: 5, polling every 30 s; small: 2, every 3 s) one after another, each at a random moment of the poll's cycle, as
uploads land; the time is from metadata.json's PUT returning to the trace's row reading `ready`
(the database polled every 20 ms). Prints both side by side: the median and the worst.
With polling the wait is half the interval on average, and the whole interval at worst.

`idle_requests`: the idle pass at 100,000 traces, with S3 events on and without.

    python -m bench.community.watch idle [--scale tiny|small|full] [--server postgres://...] [--json FILE]

moto's server (a process of its own: this one uploads on 16 threads), a bucket holding `--scale` run folders (1,000 / 10,000 /
100,000) of three small objects each (metadata.json, a kernelslist, a stats file), uploaded on
threads, and a scratch PostgreSQL database (migrated, then dropped) whose ready traces hold
those listings as a pass registers and parses them: one INSERT ... SELECT, the `files` and the
parsed fingerprint computed by SQL as ingest.scan and traces.models compute them. Checked before
anything is measured: `ingest_traces --trace <one run>` finds nothing new, and the sweep's whole
lap finds no run that differs.

Then, nothing having changed in the bucket, the S3 requests of an idle pass as a deployment runs
it, side by side:
- without events (the reference): `manage.py ingest_traces`, every ready trace's recheck due,
  as each is once per CASCADE_READY_RECHECK_SECONDS: the run folders, a HEAD of each ready
  run's metadata.json and a listing of its simulations/. Measured up to MEASURED_REFERENCE
  traces; past that computed (folder pages + 2 x traces, which the measured scale equals
  exactly, tests/test_bench.py): moto answers a prefix listing by going over every key of the
  bucket, so 100,000 listings of 300,000 keys would take it hours;
- without events, with the polling watch (the default): the run folders and the
  prefix's pages (up to CASCADE_POLL_WATCH_PAGES), which stand for every ready recheck while
  they cover the whole prefix: a file landed in any ready trace's simulations/ is seen within
  one poll;
- with events on: the reconciling pass (`ingest_traces --watch --events`, Celery's poll with a
  queue), `passes.poll_bucket(sweep=True)` (ingest.sweep): one page of the bucket. The
  target: at most one listing page per CASCADE_POLL_SECONDS_WITH_EVENTS.
"""

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import common
from bench.common import log
from bench.community.data import TRACE_COLUMNS

PREFIX = "accelsim-traces/"

EVENTS_BUCKET = "cascade-bench-events"
EVENTS_SCALES = {"small": {"runs": 2, "poll_seconds": 3}, "full": {"runs": 5, "poll_seconds": 30}}


def run_files() -> dict[str, bytes]:
    """A small generated run's files (tools.generator), metadata.json aside: it is put last."""
    from tools import generator

    spec = generator.RunSpec(kernels=50, max_traced=2, timing=False, timeline=False)
    with tempfile.TemporaryDirectory(prefix="bench-events-run-") as tmp:
        folder = Path(tmp) / "run"
        generator.write_run(folder, spec)
        paths = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "metadata.json")
        return {p.relative_to(folder).as_posix(): p.read_bytes() for p in paths}


def state_of(db: str, run_id: str) -> str | None:
    """The run's state in the poller's database: a PostgreSQL URL, or a SQLite file."""
    if db.startswith("postgres"):
        import psycopg

        with psycopg.connect(db, autocommit=True) as connection:
            row = connection.execute("SELECT state FROM traces_trace WHERE id = %s", (run_id,)).fetchone()
        return row[0] if row else None
    import sqlite3

    with sqlite3.connect(db, timeout=30) as connection:
        row = connection.execute("SELECT state FROM traces_trace WHERE id = ?", (run_id,)).fetchone()
    return row[0] if row else None


def ready_seconds(mode: str, env: dict, s3, runs: int, poll_seconds: int, db: str) -> list[float]:
    argv = [sys.executable, str(common.ROOT / "manage.py"), "ingest_traces", "--watch"]
    argv += ["--events"] if mode == "events" else ["--interval", str(poll_seconds)]
    poller = subprocess.Popen(
        argv, cwd=common.ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        time.sleep(3)  # its start (Django, the first poll on an empty bucket)
        files = run_files()
        seconds = []
        for n in range(runs):
            time.sleep(random.uniform(0, poll_seconds))  # anywhere in the poll's cycle
            run_id = f"{mode}-{n}"
            for name, body in files.items():
                s3.put_object(Bucket=EVENTS_BUCKET, Key=f"{PREFIX}{run_id}/{name}", Body=body)
            s3.put_object(
                Bucket=EVENTS_BUCKET, Key=f"{PREFIX}{run_id}/metadata.json", Body=b'{"status": "ok"}'
            )
            landed = time.monotonic()
            deadline = landed + poll_seconds + 60
            while state_of(db, run_id) != "ready":
                if time.monotonic() > deadline or poller.poll() is not None:
                    raise RuntimeError(
                        f"{run_id} not ready with {mode} after {time.monotonic() - landed:.0f} s"
                    )
                time.sleep(0.02)
            seconds.append(time.monotonic() - landed)
            print(f"bench: {mode} {run_id}: ready {seconds[-1]:.2f} s after metadata.json", file=sys.stderr)
        return seconds
    finally:
        poller.terminate()
        poller.wait(timeout=30)


def ready_times(runs: int, poll_seconds: int, database_url: str | None = None) -> dict:
    """Seconds from metadata.json's PUT to `ready`, per run, with events and with polling:
    {"events": [...], "polling": [...]}. `database_url`: a migrated PostgreSQL database to
    run against (the community bench's, 100,000 traces in it); else a scratch SQLite file."""
    with tempfile.TemporaryDirectory(prefix="bench-events-") as workdir, common.moto_server() as endpoint:
        env = common.child_env(workdir, CASCADE_S3_BUCKET=EVENTS_BUCKET, CASCADE_S3_ENDPOINT_URL=endpoint)
        if database_url:
            env["DATABASE_URL"] = database_url
        s3 = common.s3_client(endpoint)
        sqs = common.s3_client(endpoint, service="sqs")
        s3.create_bucket(Bucket=EVENTS_BUCKET)
        queue = sqs.create_queue(QueueName="cascade-bench-events")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events = {"QueueArn": arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}
        s3.put_bucket_notification_configuration(
            Bucket=EVENTS_BUCKET, NotificationConfiguration={"QueueConfigurations": [events]}
        )
        common.manage("migrate", "-v", "0", env=env)
        db = database_url or str(Path(workdir) / "cascade.sqlite3")
        return {
            "events": ready_seconds(
                "events", {**env, "CASCADE_SQS_QUEUE_URL": queue}, s3, runs, poll_seconds, db
            ),
            "polling": ready_seconds("polling", env, s3, runs, poll_seconds, db),
        }


def events_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.community.watch events", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--scale", choices=EVENTS_SCALES, default="full")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    options = parser.parse_args(argv)
    poll_seconds = EVENTS_SCALES[options.scale]["poll_seconds"]
    figures = ready_times(EVENTS_SCALES[options.scale]["runs"], poll_seconds)
    print("| from metadata.json to ready | median | worst | runs | target |\n|---|---|---|---|---|")
    for mode, seconds in figures.items():
        label = "S3 events (moto's SQS)" if mode == "events" else f"polling every {poll_seconds} s"
        target = "within 3 s" if mode == "events" else f"{poll_seconds / 2:.0f} s on average"
        print(
            f"| {label} | {statistics.median(seconds):.2f} s | {max(seconds):.2f} s | {len(seconds)} | {target} |"
        )
    if options.json:
        options.json.write_text(json.dumps({"poll_seconds": poll_seconds, "seconds": figures}, indent=2))
    return 0 if max(figures["events"]) <= 3 else 1


IDLE_SCALES = {"tiny": 1_000, "small": 10_000, "full": 100_000}
IDLE_BUCKET = "cascade-bench-idle"
PREFIX = "accelsim-traces/"
PAGE_SIZE = 1000  # CASCADE_S3_PAGE_SIZE's default: S3's most
MEASURED_REFERENCE = 1_000  # past this many traces the reference pass is computed (see above)
POLL_SECONDS = 30  # CASCADE_POLL_SECONDS's default
POLL_SECONDS_WITH_EVENTS = 600  # CASCADE_POLL_SECONDS_WITH_EVENTS's default
READY_RECHECK_SECONDS = 600  # CASCADE_READY_RECHECK_SECONDS's default
WATCH_PAGES = 20  # CASCADE_POLL_WATCH_PAGES's default
CTX = "0x7f0000000001"
# A run's objects, sorted by key as a listing gives them; the same bodies in every run (never
# read: the traces are registered as parsed, and an idle pass downloads nothing).
OBJECTS = {
    "metadata.json": b'{"status": "ok", "trace_gpu_arch": "sm_90"}',
    "traces/kernelslist.g": f"kernel-1-ctx_{CTX}.traceg\n".encode(),
    f"traces/stats_ctx_{CTX}": (
        b"kernel_id,kernel_name,grid,block,shmem,regs,stream,instructions\n1,_Z6vecAddPfS_S_i,(1 1 1),(256 1 1),0,16,0,1024\n"
    ),
}

INSERT_SQL = f"""
INSERT INTO traces_trace ({TRACE_COLUMNS})
SELECT
    run.id, nextval('traces_trace_key_seq'), 'ready', NULL, now(), now(), NULL, '[]'::jsonb,
    NULL, 'sm_90', NULL, 1, {{total_bytes}}, false, false, false, {{parser_version}}, NULL, 0,
    '{{{{"status":"ok","trace_gpu_arch":"sm_90"}}}}', {{files}}, now(), encode(sha256({{fingerprint}}), 'hex'),
    '[]'::jsonb, NULL, 0, 0
FROM (SELECT 'idle-' || lpad(n::text, 7, '0') AS id FROM generate_series(1, %(traces)s) AS n) AS run
"""


def run_ids(traces: int) -> list[str]:
    return [f"idle-{n:07d}" for n in range(1, traces + 1)]


def etag(body: bytes) -> str:
    """S3's ETag of a single-part PUT: the body's MD5, quoted."""
    return f'"{hashlib.md5(body).hexdigest()}"'  # noqa: S324 (S3's, not a security digest)


def insert_sql(parser_version: int) -> str:
    """The ready traces as a pass leaves them: `files` as ingest.scan.inventory lists them and
    the parsed fingerprint as traces.models.files_fingerprint digests them (key, bytes, ETag:
    `key\\0bytes\\0etag\\n` each, SHA-256), in SQL, for every run at once."""

    def text(value: str) -> str:
        return "'" + value.replace("'", "''") + "'"

    entries, digest = [], []
    for name, body in OBJECTS.items():
        key = f"{text(PREFIX)} || run.id || {text('/' + name)}"
        entries.append(f"jsonb_build_object('key', {key}, 'bytes', {len(body)}, 'etag', {text(etag(body))})")
        digest.append(
            f"convert_to({key}, 'UTF8') || '\\x00'::bytea || convert_to({text(str(len(body)))}, 'UTF8')"
            f" || '\\x00'::bytea || convert_to({text(etag(body))}, 'UTF8') || '\\x0a'::bytea"
        )
    return INSERT_SQL.format(
        total_bytes=sum(len(body) for body in OBJECTS.values()),
        parser_version=parser_version,
        files="jsonb_build_array(" + ", ".join(entries) + ")",
        fingerprint=" || ".join(digest),
    )


def upload(s3, traces: int) -> float:
    """Every run's objects, metadata.json last, on 16 threads; the seconds it took."""

    def one(run_id: str) -> None:
        for name in sorted(OBJECTS, key=lambda name: name == "metadata.json"):
            s3.put_object(Bucket=IDLE_BUCKET, Key=f"{PREFIX}{run_id}/{name}", Body=OBJECTS[name])

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=16) as pool:
        for done, _ in enumerate(pool.map(one, run_ids(traces)), start=1):
            if done % 10_000 == 0:
                log(f"  uploaded {done:,} of {traces:,} runs")
    return time.perf_counter() - started


SWEEP_LAP = """
import json
import time
from ingest import passes
laps = []
while True:
    started = time.perf_counter()
    result = passes.poll_bucket(sweep=True)
    laps.append({
        "seconds": time.perf_counter() - started,
        "s3_requests": result.cost.s3_requests, "seconds_s3": result.cost.s3_seconds,
        "db_queries": result.cost.db_queries, "objects": result.swept.objects,
        "differ": len(result.swept.runs) + len(result.swept.simulation_runs),
        "changes": len(result.changes) + len(result.simulation_changes), "errors": len(result.errors),
        "last": result.swept.last,
    })
    if result.swept.last:
        break
print("SWEEP " + json.dumps(laps))
"""


def sweep_lap(env: dict) -> tuple[list[dict], float]:
    """A whole lap of the sweep, pass after pass, in one child process (each pass exactly as
    the reconciling poll runs it): each pass's figures, and the child's wall time."""
    child = common.manage("shell", "-c", SWEEP_LAP, env=env, timeout=3600)
    line = [line for line in child.stdout.splitlines() if line.startswith("SWEEP ")][-1]
    return json.loads(line[len("SWEEP ") :]), child.seconds


def idle_requests(traces: int, *, server: str = common.DEFAULT_SERVER_URL) -> dict:
    """The S3 requests of an idle pass over `traces` ready traces, without events (every ready
    recheck due) and with events on (the reconciler's sweep); a dict of figures."""
    with common.moto_server(own_process=True) as endpoint:
        s3 = common.s3_client(endpoint)
        s3.create_bucket(Bucket=IDLE_BUCKET)
        log(f"{traces:,} run folders of {len(OBJECTS)} objects, on 16 threads")
        upload_seconds = upload(s3, traces)
        log(f"  uploaded in {upload_seconds:.0f} s")
        first = run_ids(1)[0]
        listed = s3.head_object(Bucket=IDLE_BUCKET, Key=f"{PREFIX}{first}/metadata.json")["ETag"]
        if listed != etag(OBJECTS["metadata.json"]):
            raise RuntimeError(
                f"moto's ETag {listed} is not the body's MD5: the inserted listings would differ"
            )
        with tempfile.TemporaryDirectory(prefix="cascade-bench-idle-") as tmp:
            with common.scratch_database(server, "idle") as db:
                env = common.child_env(
                    tmp,
                    DATABASE_URL=db,
                    CASCADE_S3_BUCKET=IDLE_BUCKET,
                    CASCADE_S3_ENDPOINT_URL=endpoint,
                    CASCADE_S3_PAGE_SIZE=str(PAGE_SIZE),
                )
                common.manage("migrate", "--noinput", env=env)
                return idle_measure(db, env, traces, upload_seconds)


def ready_traces(db: str, env: dict, traces: int) -> None:
    """`traces` ready traces as a pass leaves them, in one INSERT ... SELECT; checked by
    `ingest_traces --trace` of the first finding nothing new."""
    import psycopg

    parser_version = int(
        common.manage(
            "shell", "-c", "from traces.models import CURRENT_PARSER_VERSION as v; print(v)", env=env
        ).stdout.split()[-1]
    )
    log(f"{traces:,} ready traces, one INSERT ... SELECT")
    with psycopg.connect(db, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute(insert_sql(parser_version), {"traces": traces})
        conn.execute("VACUUM ANALYZE traces_trace")
        log(f"  inserted in {time.perf_counter() - started:.1f} s")
    first = run_ids(1)[0]
    check = common.manage("ingest_traces", "--trace", first, env=env)
    if f"{first}: nothing new" not in check.stdout:
        raise RuntimeError(f"the inserted trace {first} is not as a pass leaves it:\n{check.stdout}")


def unchanged_pass(env: dict, watch_pages: int, label: str) -> common.Child:
    """One `ingest_traces` pass without events, checked to change nothing."""
    log(f"without events, {label}: ingest_traces")
    child = common.manage(
        "ingest_traces", env={**env, "CASCADE_POLL_WATCH_PAGES": str(watch_pages)}, timeout=7200
    )
    if " 0 changed" not in child.summary_line():
        raise RuntimeError(f"the pass without events ({label}) changed something: {child.summary_line()}")
    return child


def idle_measure(db: str, env: dict, traces: int, upload_seconds: float) -> dict:
    ready_traces(db, env, traces)
    log("with events on: the reconciler's sweep, a whole lap")
    lap, lap_wall = sweep_lap(env)
    if any(p["differ"] or p["changes"] or p["errors"] for p in lap):
        raise RuntimeError(f"the sweep found runs that differ from their traces: {lap}")

    objects = traces * len(OBJECTS)
    folder_pages = -(-traces // PAGE_SIZE)
    polls = POLL_SECONDS_WITH_EVENTS // POLL_SECONDS
    reference_requests, reference_seconds = folder_pages + 2 * traces, None
    measured_reference = traces <= MEASURED_REFERENCE
    # The polling watch (ingest.sweep.watch_pages): the prefix's pages, up to
    # WATCH_PAGES; while it sees the whole prefix it stands for every ready recheck.
    prefix_pages = -(-objects // PAGE_SIZE)
    watch_requests = folder_pages + min(prefix_pages, WATCH_PAGES)
    if prefix_pages > WATCH_PAGES:
        watch_requests += 2 * traces  # the rest left to the ready recheck, all due here
    watch_seconds = None
    if measured_reference:
        reference = unchanged_pass(env, 0, "every ready recheck due, without the polling watch")
        reference_requests, reference_seconds = reference.s3_requests(), reference.pass_seconds()
        watched = unchanged_pass(env, WATCH_PAGES, "with the polling watch (the default)")
        watch_requests, watch_seconds = watched.s3_requests(), watched.pass_seconds()
    return {
        "traces": traces,
        "objects": objects,
        "page_size": PAGE_SIZE,
        "upload_seconds": upload_seconds,
        "without_events": {
            "s3_requests": reference_requests,
            "measured": measured_reference,
            "expected": folder_pages + 2 * traces,
            "seconds": reference_seconds,
            # Every CASCADE_POLL_SECONDS a pass lists the run folders; each ready run is
            # rechecked (a HEAD and a listing) once per CASCADE_READY_RECHECK_SECONDS.
            "per_poll_seconds_with_events": polls * folder_pages
            + 2 * traces * POLL_SECONDS_WITH_EVENTS // READY_RECHECK_SECONDS,
        },
        "polling_watch": {
            "s3_requests": watch_requests,
            "measured": measured_reference,
            "pages": WATCH_PAGES,
            "seconds": watch_seconds,
            "per_poll_seconds_with_events": polls * watch_requests,
        },
        "with_events": {
            "s3_requests": lap[0]["s3_requests"],
            "s3_requests_most": max(p["s3_requests"] for p in lap),
            "db_queries": lap[0]["db_queries"],
            "objects": lap[0]["objects"],
            "per_poll_seconds_with_events": lap[0]["s3_requests"],
            "seconds": statistics.median(p["seconds"] for p in lap),  # the first pays for the S3 client
            "lap_passes": len(lap),
            "lap_seconds": lap_wall,
            "lap_hours_at_interval": len(lap) * POLL_SECONDS_WITH_EVENTS / 3600,
        },
        "target_met": max(p["s3_requests"] for p in lap) <= 1,
    }


def idle_table(r: dict) -> str:
    n, without, events = r["traces"], r["without_events"], r["with_events"]
    watch = r["polling_watch"]
    reference_time = f"{without['seconds']:,.1f} s" if without["measured"] else "-"
    watch_time = f"{watch['seconds']:,.1f} s" if watch["measured"] else "-"
    return "\n".join(
        [
            f"| idle pass, {n:,} ready traces ({r['objects']:,} objects) | S3 requests a pass "
            f"| S3 requests per {POLL_SECONDS_WITH_EVENTS} s | pass time | target |",
            "|---|---|---|---|---|",
            f"| without events (reference): `ingest_traces`, every ready recheck due | "
            f"{without['s3_requests']:,}{'' if without['measured'] else ' (computed)'} | "
            f"{without['per_poll_seconds_with_events']:,} (a poll every {POLL_SECONDS} s) | "
            f"{reference_time} | |",
            f"| without events, with the polling watch (`simulations/` seen within a poll) | "
            f"{watch['s3_requests']:,}{'' if watch['measured'] else ' (computed)'} | "
            f"{watch['per_poll_seconds_with_events']:,} (a poll every {POLL_SECONDS} s) | "
            f"{watch_time} | the prefix's pages, up to {watch['pages']} |",
            f"| with events on: the reconciler's sweep (`--watch --events`, Celery's poll) | "
            f"{events['s3_requests']:,} (most in a lap: {events['s3_requests_most']}) | "
            f"{events['per_poll_seconds_with_events']:,} | "
            f"{events['seconds'] * 1000:,.0f} ms (median of the lap) | "
            f"≤ 1 listing page: {'met' if r['target_met'] else 'NOT met'} |",
            "",
            f"A whole sweep of the prefix: {events['lap_passes']:,} passes of {r['page_size']:,} keys, "
            f"{events['lap_hours_at_interval']:,.1f} h at CASCADE_POLL_SECONDS_WITH_EVENTS="
            f"{POLL_SECONDS_WITH_EVENTS}; every one of them found nothing to change.",
        ]
    )


def idle_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.community.watch idle", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--scale", choices=IDLE_SCALES, default="full")
    parser.add_argument(
        "--server",
        default=common.server_url(os.environ.get("DATABASE_URL", common.DEFAULT_SERVER_URL)),
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results = idle_requests(IDLE_SCALES[args.scale], server=args.server)
    print(idle_table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if results["target_met"] else 1


if __name__ == "__main__":
    commands = {"events": events_main, "idle": idle_main}
    if sys.argv[1:2] and sys.argv[1] in commands:
        sys.exit(commands[sys.argv[1]](sys.argv[2:]))
    sys.exit(f"usage: python -m bench.community.watch {{{','.join(commands)}}} [--help] ...")
