"""The community bench: Cascade at 100,000 traces and 50M launches, each figure beside a reference.

    python3 run.py bench community [--scale tiny|small|full] [--only list,detail,...] [--output FILE] [--json FILE]
    .venv/bin/python -m bench community ...            (the same, inside the virtualenv)

One scratch PostgreSQL database is filled server-side (bench/community/data.py): `--scale`
registered traces (most ready, a quarter uploading, many tiny, one of 1M launches) and their
launches. Cascade then serves it as deployed (gunicorn, gunicorn.conf.py) and runs against it
as deployed (`manage.py ingest_traces` children, moto's S3 and SQS server on 127.0.0.1). The
figures, each printed beside its reference:

- list     `GET /api/traces`: the full list (identity, gzip and zstd), a page of 100 (first and
           half way, by Link), the 304 of each, beside PostgreSQL's `COPY (SELECT json_agg(...))`
           of the same rows and columns; the peak RSS (VmHWM) of the workers that served them;
- detail   a repeated gzip GET of the 1M-launch trace's detail beside its first, computed one;
- admin    logged in through the admin's own login form: the trace list (plain, filtered by state,
           searched), the page of the big trace and of a tiny one, the kernel list (plain, one
           trace's, a deep page of it), the first GET of each and the median of the next;
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
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

from bench import common, harness
from bench.common import http_get, log
from bench.harness import MB, Row, secs

FIGURES = ("list", "detail", "admin", "integrity", "events", "delete", "idle", "memory")
SERVED = {"list", "detail", "admin"}
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


# The same names run the lab bench's memory figure (its 1x, 2x, 4x) and watch.py's idle pass.
SCALES = {
    "tiny": Scale(2_000, 200_000, 50_000, 1, 3),
    "small": Scale(10_000, 5_000_000, 1_000_000, 2, 10),
    "full": Scale(100_000, 50_000_000, 1_000_000, 5, 30),
}


class Community:
    def __init__(self, server: str, scale_name: str, tmp: Path):
        self.server, self.scale_name, self.scale, self.tmp = server, scale_name, SCALES[scale_name], tmp
        self.rows: list[Row] = []
        self.values: dict = {}

    def add(self, figure: str, measured: str, reference: str, target: str, met: bool | None) -> None:
        self.rows.append(Row(figure, figure, measured, reference, "", target, met))
        log(f"  {figure}: {measured} | {reference} | met: {met}")

    def env(self, db: str, **extra: str) -> dict:
        return common.child_env(self.tmp / "var", DATABASE_URL=db, CASCADE_CACHE_URL=CACHE_URL, **extra)

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
        common.expect_ready(db, run_id, n)
        return run_id

    def served(self, db: str, seeded: dict, figures: set[str]) -> None:
        env = self.env(db)
        auth = {
            "Authorization": f"Bearer {common.create_token(env, 'bench-community')}",
            "Accept": "application/json",
        }
        log("gunicorn (gunicorn.conf.py) on 127.0.0.1")
        with common.gunicorn(env) as port:
            if "list" in figures:
                listed = measure_list(port, auth, self.scale.traces, repeat=3)
                log("the reference: COPY (SELECT json_agg(...)) TO STDOUT")
                listed["copy_list"] = copy_json_agg(db, None, repeat=3)
                listed["copy_page"] = copy_json_agg(db, 100, repeat=15)
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
            f"`GET /api/traces`, all {n:,} traces",
            f"{secs(r['list']['seconds'])}, {r['list']['bytes'] / MB:,.1f} MB",
            f"`COPY json_agg` {secs(copy_list['seconds'])}, {copy_list['bytes'] / MB:,.1f} MB",
            "< 2 s",
            r["list"]["seconds"] < 2,
        )
        for key, label in (("page", "first"), ("deep_page", "half way, by `Link`")):
            self.add(
                f"`GET /api/traces?limit=100`, {label}",
                secs(r[key]["seconds"]),
                f"`COPY json_agg` of 100 {secs(copy_page['seconds'])}",
                "< 50 ms",
                r[key]["seconds"] < 0.050,
            )
        for key, label in (("304", "the full list"), ("page_304", "a page of 100")):
            self.add(
                f"304 of {label} (`If-None-Match`)",
                secs(r[key]["seconds"]),
                f"its 200: {secs(r['list' if key == '304' else 'page']['seconds'])}",
                "< 20 ms",
                r[key]["seconds"] < 0.020,
            )

    def detail(self, port: int, auth: dict, big: str) -> None:
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
            f"gzip `GET /api/traces/{{id}}`, {self.scale.big:,} launches, again",
            f"{secs(repeated)} (median of 3), {first.nbytes / MB:,.1f} MB",
            f"the first, computed: {secs(first.seconds)}",
            "< 1.5 s",
            repeated < 1.5,
        )

    def admin(self, port: int, db: str, seeded: dict) -> None:
        pages = measure_admin(port, db, seeded)
        self.values["admin"] = pages
        for page in pages:
            self.add(
                f"admin: {page['page']}",
                f"first {secs(page['first'])}, then {secs(page['seconds'])} (median)",
                "",
                "< 1 s",
                max(page["first"], page["seconds"]) < 1,
            )

    def integrity(self, db: str) -> None:
        # It exits non-zero (run_child raises) on any problem: the seeded database has none.
        child = common.manage("check_integrity", env=self.env(db), timeout=3600)
        started = time.perf_counter()
        ((launches,),) = common.query(db, "SELECT count(*) FROM traces_kernel")
        counted = time.perf_counter() - started
        self.values["integrity"] = {"seconds": child.seconds, "count_seconds": counted}
        self.add(
            f"`manage.py check_integrity`, {launches:,} launches",
            secs(child.seconds),
            f"`SELECT count(*)` of the launches {secs(counted)}",
            "",
            None,
        )

    def events(self, db: str) -> None:
        from bench.community import watch

        s = self.scale
        log(f"events: {s.events_runs} runs each with events and polling every {s.poll_seconds} s")
        times = watch.ready_times(s.events_runs, s.poll_seconds, database_url=db)
        self.values["events"] = times
        worst, polled = max(times["events"]), times["polling"]
        self.add(
            f"`metadata.json` upload to `ready`, S3 events ({len(times['events'])} runs)",
            f"median {secs(statistics.median(times['events']))}, worst {secs(worst)}",
            f"polling every {s.poll_seconds} s: median {secs(statistics.median(polled))}, "
            f"worst {secs(max(polled))}",
            "within 3 s",
            worst <= 3,
        )

    def delete(self, db: str, seeded: dict) -> None:
        """The big trace and a copy of it: one deleted the old way, the other the new."""
        from bench.community import data

        copy = f"{seeded['big']}-copy"
        data.copy_trace(db, seeded["big"], copy)
        r = self.child_json(
            "delete",
            ["-m", "bench.community.delete", "--existing", f"{copy},{seeded['big']}"],
            env=self.env(db),
        )
        self.values["delete"] = r
        old, new = r["one_delete"], r["batches"]
        self.add(
            f"delete a {self.scale.big:,}-launch trace amid {self.scale.launches:,}",
            f"trace gone in {new['trace_gone_ms']:,.0f} ms; launches purged in {secs(new['seconds'])} "
            f"({new['statements']} batches of {r['batch']:,}, longest {new['batch_max_ms']:,.0f} ms), "
            f"a writer beside it waits at most {new['writer_max_ms']:,.0f} ms",
            f"one DELETE: {secs(old['seconds'])} in one transaction, a writer beside it waits at most "
            f"{old['writer_max_ms']:,.0f} ms",
            "beside the old",
            r["launches_left_of_deleted_traces"] == 0,
        )

    def idle(self) -> None:
        argv = ["-m", "bench.community.watch", "idle", "--scale", self.scale_name, "--server", self.server]
        r = self.child_json("idle", argv)
        self.values["idle"] = r
        without, events = r["without_events"], r["with_events"]
        self.add(
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

    def memory(self) -> None:
        argv = ["-m", "bench", "--only", "traced", "--scale", self.scale_name, "--server", self.server]
        r = self.child_json("memory", argv)
        (traced,) = [each for each in r["rows"] if each["key"] == "traced"]
        rss = {int(n): value for n, value in traced["values"]["rss"].items()}
        sizes = sorted(rss)
        growth = rss[sizes[-1]] - rss[sizes[0]]
        self.values["memory"] = rss
        self.add(
            "peak RSS of `ingest_traces`, one context, every launch traced: "
            + ", ".join(f"{n:,}" for n in sizes),
            " and ".join(f"{rss[n] / MB:,.1f} MB" for n in sizes),
            f"{sizes[-1]:,} launches beside {sizes[0]:,}: {growth / MB:+,.1f} MB",
            "< 100 MB, within 5 MB",
            max(rss.values()) < 100 * MB and abs(growth) <= 5 * MB,
        )


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments("python -m bench community", __doc__, SCALES, FIGURES)
    args = harness.parse(parser, argv, FIGURES)
    figures = args.figures
    started = time.perf_counter()
    machine = harness.start(args.server)
    scale = SCALES[args.scale]
    step = harness.Steps()
    with tempfile.TemporaryDirectory(prefix="cascade-bench-community-") as tmp:
        bench = Community(args.server, args.scale, Path(tmp))
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
        bench.rows.append(Row(figure, figure, f"not measured: {why}", "", "", "", None))
    sizes = f"{scale.traces:,} traces, {scale.launches:,} launches (one trace of {scale.big:,})"
    heading = harness.heading(f"Community bench, scale `{args.scale}`", sizes, machine)
    harness.report(args, heading, bench.rows, started, machine=machine, values=bench.values)
    return 1 if step.failures else 0


COLUMNS = (
    "id, state, error, created_at, updated_at, model, layers, source_gpu, trace_gpu_arch, "
    "suggested_sim_config, kernel_count, bytes, has_real_timing, has_step_timeline, sample"
)


def median_seconds(port: int, path: str, headers: dict, repeat: int, status: int = 200):
    answers = [http_get(port, path, headers) for _ in range(repeat)]
    for answer in answers:
        if answer.status != status:
            raise RuntimeError(f"GET {path} answered {answer.status}, not {status}")
    return statistics.median(a.seconds for a in answers), answers[-1]


def copy_json_agg(db: str, limit: int | None, repeat: int) -> dict:
    """The reference: PostgreSQL builds the same JSON array and sends it, COPY TO STDOUT."""
    import psycopg

    rows = f"SELECT {COLUMNS} FROM traces_trace ORDER BY created_at DESC, id" + (
        f" LIMIT {limit}" if limit else ""
    )
    sql = f"COPY (SELECT json_agg(t) FROM ({rows}) t) TO STDOUT"
    times, size = [], 0
    with psycopg.connect(db, autocommit=True) as conn:
        for _ in range(repeat):
            started = time.perf_counter()
            with conn.cursor().copy(sql) as copy:
                size = sum(len(block) for block in copy)
            times.append(time.perf_counter() - started)
    return {"seconds": statistics.median(times), "bytes": size}


def measure_list(port: int, auth: dict, traces: int, repeat: int) -> dict:
    """The list through a running gunicorn: full (identity, gzip, zstd), pages, 304s, the
    workers' peak RSS."""
    for _ in range(4):  # each worker's first request pays for its imports
        http_get(port, "/api/traces?limit=1", auth)
    results: dict = {"traces": traces}
    before = {pid: status["VmHWM"] for pid, status in common.gunicorn_processes(port).items()}
    log("GET /api/traces")
    answers = {}
    for key, coding in (("list", "identity"), ("list_gzip", "gzip"), ("list_zstd", "zstd")):
        seconds, answers[key] = median_seconds(
            port, "/api/traces", {**auth, "Accept-Encoding": coding}, repeat
        )
        results[key] = {"seconds": seconds, "bytes": answers[key].nbytes}
    after = {pid: status["VmHWM"] for pid, status in common.gunicorn_processes(port).items()}
    results["rss"] = {"before": max(before.values()), "after": max(after.values())}
    log("GET /api/traces?limit=100, then deep in the list")
    seconds, page = median_seconds(port, "/api/traces?limit=100", auth, repeat * 5)
    results["page"] = {"seconds": seconds, "bytes": page.nbytes}
    deep, deep_path = page, "/api/traces?limit=100"
    for _ in range(min(traces // 100 // 2, 500)):  # follow the links half way
        deep_path = deep.headers["link"].split(">")[0].split("127.0.0.1:" + str(port))[1]
        deep = http_get(port, deep_path, auth)
    seconds, _ = median_seconds(port, deep_path, auth, repeat * 5)
    results["deep_page"] = {"seconds": seconds, "path": deep_path}
    log("304s")
    tag = {**auth, "If-None-Match": answers["list"].headers["etag"]}
    results["304"] = {"seconds": median_seconds(port, "/api/traces", tag, repeat * 5, 304)[0]}
    tag = {**auth, "If-None-Match": page.headers["etag"]}
    results["page_304"] = {"seconds": median_seconds(port, "/api/traces?limit=100", tag, repeat * 5, 304)[0]}
    return results


# Launches a kernel list page shows (KernelAdmin.list_per_page): a deep page is this many rows
# times its number past the start.
KERNELS_PER_PAGE = 100


def admin_id(trace_id: str) -> str:
    """A trace id as it goes in an admin URL (django.contrib.admin.utils.quote, then %-escapes)."""
    from django.contrib.admin.utils import quote as admin_quote

    return quote(admin_quote(trace_id), safe="")


def pages(seeded: dict, *, big_launches: int) -> list[tuple[str, str]]:
    """(label, path) of every page timed, from seed()'s `big` and `tiny` traces."""
    big, tiny = seeded["big"], seeded["tiny"]
    deep = max(1, big_launches // KERNELS_PER_PAGE // 2)  # half way through the big trace's launches
    return [
        ("trace list", "/admin/traces/trace/"),
        ("trace list, state ready", "/admin/traces/trace/?state__exact=ready"),
        ("trace list, search 'llama'", "/admin/traces/trace/?q=llama"),
        (f"trace page, {big_launches:,} launches", f"/admin/traces/trace/{admin_id(big)}/change/"),
        ("trace page, tiny trace", f"/admin/traces/trace/{admin_id(tiny)}/change/"),
        ("kernel list", "/admin/traces/kernel/"),
        ("kernel list, the big trace's", "/admin/traces/kernel/?" + urlencode({"trace": big})),
        (
            f"kernel list, the big trace's page {deep:,}",
            "/admin/traces/kernel/?" + urlencode({"trace": big, "p": deep}),
        ),
        ("kernel list, name search", "/admin/traces/kernel/?q=flash_fwd"),
    ]


def admin_client(port: int, username: str, password: str):
    """An httpx client on 127.0.0.1:port logged in through /admin/login/ as a browser would:
    the form's CSRF token, the session cookie set by the redirect."""
    import httpx

    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
    form = client.get("/admin/login/?next=/admin/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    if form.status_code != 200 or token is None:
        raise RuntimeError(f"the login form answered {form.status_code} without a CSRF token")
    answer = client.post(
        "/admin/login/?next=/admin/",
        data={
            "csrfmiddlewaretoken": token.group(1),
            "username": username,
            "password": password,
            "next": "/admin/",
        },
        headers={"Referer": f"http://127.0.0.1:{port}/admin/login/"},
    )
    if answer.status_code != 302 or "sessionid" not in client.cookies:
        raise RuntimeError(f"logging in answered {answer.status_code}, no session")
    return client


def time_page(client, label: str, path: str, repeat: int) -> dict:
    """The first GET of `path` (a big trace's page is computed then, and kept for the others),
    and the median of `repeat` more, against the target of 1 s."""
    times, size = [], 0
    for _ in range(repeat + 1):
        started = time.perf_counter()
        answer = client.get(path)
        times.append(time.perf_counter() - started)
        if answer.status_code != 200:
            raise RuntimeError(f"GET {path} answered {answer.status_code}")
        size = len(answer.content)
    median = statistics.median(times[1:])
    return {"page": label, "path": path, "seconds": median, "first": times[0], "times": times[1:]} | {
        "bytes": size,
        "met": median < 1,
        "reference": f"first GET {secs(times[0])}",
    }


def measure_admin(port: int, database_url: str, seeded: dict, *, repeat: int = 5) -> list[dict]:
    """Each admin page (`pages`) timed on the gunicorn at `port`, logged in as a superuser made
    in the database it reads, as rows: `page`, `path`, `seconds` (the median of `repeat` GETs
    after the first), `first`, `times`, `bytes`, `met`, and `reference` (the first GET, said in
    words: a big trace's page is computed then). `seeded`: data.seed()'s answer."""
    username, password = f"bench-admin-{secrets.token_hex(3)}", secrets.token_urlsafe(16)
    env = common.child_env(DATABASE_URL=database_url, DJANGO_SUPERUSER_PASSWORD=password)
    common.manage(
        "createsuperuser", "--noinput", "--username", username, "--email", "bench@example.com", env=env
    )
    rows = []
    with closing(admin_client(port, username, password)) as client:
        for label, path in pages(seeded, big_launches=seeded["big_trace_launches"]):
            rows.append(time_page(client, label, path, repeat))
            log(f"  {label}: first {secs(rows[-1]['first'])}, then {secs(rows[-1]['seconds'])}")
    return rows
