"""What the API's reads cost, Cascade in this process: the analysis endpoints beside PostgreSQL
alone (`analysis`), and a streaming standby beside the primary (`replica`).

What `/summary` and `/compare` cost on million-launch traces, beside PostgreSQL alone.

    python -m bench.reads analysis [--kernels 1000000] [--repeat 5]

Loads two generated runs (tools.generator: an H100 run and an A100 run, with steps and
measured times) into the bench database with COPY (`traces.kernel_store.kernels_replace`),
reusing them when they are already there, then requests `GET /api/traces/{a}/summary` and
`GET /api/traces/{a}/compare/{b}` (by name and by demangled name) through Django's full
stack: middleware, Bearer authentication, the view, JSON.

The reference is `psql -c` running the same GROUP BYs on the same rows (PostgreSQL alone, no
Django, no Python per group; the time includes psql's start and connection); the target is
within 1.5x.

The API read from a PostgreSQL streaming standby (DATABASE_REPLICA_URL) beside the primary,
and how far the standby trails an ingest.

    python -m bench.reads replica [--traces 20000] [--kernels 200000] [--repeat 5]

Starts two PostgreSQL clusters of its own in a temporary folder, on ports of their own: a
primary (initdb) and a hot standby made from it by `pg_basebackup -R` (streaming replication),
as the `postgres` OS user when run as root, since the server refuses root. The machine's own
PostgreSQL is not touched. Both are stopped and removed on the way out.

Then, in this process, Cascade configured with DATABASE_URL on the primary and
DATABASE_REPLICA_URL on the standby: `--traces` registered traces and one ingested trace of
`--kernels` launches (tools.generator through the poller's `ingest_trace`, moto's S3). The same
requests go through Django's whole stack (Bearer token, the middleware) twice: read from the
standby (the router's choice for an API GET), and from the primary (the same request carrying
the pin cookie a browser gets after a write). Both servers share this machine's CPUs and
disk: the figures say what a standby costs a request, not what a second machine adds.

Lag: after an ingest commits on the primary, how long until the standby has replayed its WAL
(pg_last_wal_replay_lsn) and until the API, read from the standby, answers the trace `ready`.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the project's root on the path, for `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

RUNS = {"bench-analysis-h100": "sm_90", "bench-analysis-a100": "sm_80"}


def load_run(run_id: str, arch: str, kernels: int) -> None:
    """The generator's launches as kernels (with steps and durations) and steps, by COPY."""
    from django.db import transaction

    from tools import generator
    from traces.kernel_store import kernels_replace
    from traces.models import CURRENT_PARSER_VERSION, Step, Trace, TraceState

    spec = generator.RunSpec(kernels=kernels, contexts=4, seed=7, trace_gpu_arch=arch)
    platform = generator.platform_for(arch)
    steps: dict[int, dict] = {}  # generator step number -> its Step fields

    def rows():
        for launch in generator.launches(spec):
            step = steps.setdefault(
                launch.step,
                {"index": len(steps), "ctx": launch.ctx, "first": launch.kernel_id, "captured": 0},
            )
            step["last"] = launch.kernel_id
            insts = None if launch.captured else launch.total_insts + launch.replayed_insts
            yield (
                launch.ctx, launch.kernel_id, launch.name,
                f"kernel-{launch.kernel_id}-ctx_{launch.ctx}.trace" if launch.traced else "",
                *launch.grid, *launch.block,
                launch.grid[0] * launch.grid[1] * launch.grid[2],
                launch.block[0] * launch.block[1] * launch.block[2],
                insts, insts, launch.traced, -1, None, step["index"],
                generator.kernel_duration(launch, platform),
            )  # fmt: skip

    started = time.perf_counter()
    with transaction.atomic():
        Trace.objects.filter(pk=run_id).delete()
        Trace.objects.create(
            id=run_id,
            state=TraceState.PARSING,
            trace_gpu_arch=arch,
            has_real_timing=True,
            has_step_timeline=True,
            parser_version=CURRENT_PARSER_VERSION,
        )
        count = kernels_replace(run_id, rows())
        Step.objects.bulk_create(
            Step(
                trace_id=run_id,
                index=step["index"],
                name=f"step {number}",
                phase="prefill" if step["index"] == 0 else "decode",
                ctx=step["ctx"],
                first_kernel_id=step["first"],
                last_kernel_id=step["last"],
            )
            for number, step in steps.items()
        )
        Trace.objects.filter(pk=run_id).update(state=TraceState.READY, kernel_count=count)
    print(
        f"loaded {run_id}: {count:,} launches, {len(steps):,} steps in {time.perf_counter() - started:.1f} s"
    )


def request_seconds(client, path: str, token: str) -> tuple[float, int]:
    """One GET through Django's whole stack: its seconds and its body's bytes."""
    started = time.perf_counter()
    response = client.get(
        path, SERVER_NAME="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 200, (path, response.status_code, response.content[:200])
    return time.perf_counter() - started, len(response.content)


def psql_seconds(database_url: str, sql: str) -> float:
    started = time.perf_counter()
    subprocess.run(["psql", database_url, "-qAtc", sql], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def reference_sql(a: str, b: str) -> dict[str, str]:
    """The GROUP BYs each route runs (`traces.analysis`: by the trace's key and the name's id,
    then by step), as one psql would send them; column names from the live models."""
    from traces.models import Kernel, Trace

    table, column = Kernel._meta.db_table, lambda name: Kernel._meta.get_field(name).column
    keys = dict(Trace.objects.filter(pk__in=[a, b]).values_list("id", "key"))
    trace, name, insts = column("trace"), column("kernel_name"), column("total_insts")
    by_name = (
        f"SELECT {trace}, {name}, count(*), count(kernel_id) FILTER (WHERE traced), "
        f"sum({insts}::bigint), sum(duration_ns) FROM {table} WHERE {trace} {{}} GROUP BY {trace}, {name}"
    )
    by_step = (
        f"SELECT step, count(*), sum({insts}::bigint), sum(duration_ns) FROM {table} "
        f"WHERE {trace} = {keys[a]} AND step IS NOT NULL GROUP BY step"
    )
    return {
        "summary": f"{by_name.format(f'= {keys[a]}')}; {by_step}",
        "compare": by_name.format(f"IN ({keys[a]}, {keys[b]})"),
    }


def parse(command: str, description: str, argv: list[str], **defaults: int) -> argparse.Namespace:
    """`python -m bench.reads COMMAND`'s options: whole numbers, with their defaults."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.reads {command}", description=description)
    for name, default in defaults.items():
        parser.add_argument(f"--{name}", type=int, default=default, help=f"(default: {default:,})")
    return parser.parse_args(argv)


def analysis_main(argv: list[str]) -> None:
    description = "What /summary and /compare cost, beside PostgreSQL alone."
    args = parse("analysis", description, argv, kernels=1_000_000, repeat=5)
    database_url = common.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    from traces.models import ApiToken, Trace

    for run_id, arch in RUNS.items():
        if not Trace.objects.filter(pk=run_id, state="ready", kernel_count=args.kernels).exists():
            load_run(run_id, arch, args.kernels)
    subprocess.run(["psql", database_url, "-qc", "VACUUM ANALYZE traces_kernel"], check=True)
    user, _ = get_user_model().objects.get_or_create(username="bench")
    _, token = ApiToken.issue(user)
    client = Client()
    a, b = RUNS
    sql = reference_sql(a, b)

    print(f"two traces of {args.kernels:,} launches; best of {args.repeat} rounds")
    rows = [
        ("summary", f"/api/traces/{a}/summary", sql["summary"]),
        ("compare", f"/api/traces/{a}/compare/{b}", sql["compare"]),
        ("compare by=demangled", f"/api/traces/{a}/compare/{b}?by=demangled", sql["compare"]),
    ]
    for label, path, reference in rows:
        # Interleaved, one of each per round: a busy machine slows both alike.
        seconds = floor = float("inf")
        for _ in range(args.repeat):
            once, size = request_seconds(client, path, token)
            seconds = min(seconds, once)
            floor = min(floor, psql_seconds(database_url, reference))
        print(
            f"  {label:<22} {seconds * 1000:7.0f} ms ({size / 1000:.0f} kB)   psql -c, same GROUP BYs "
            f"{floor * 1000:7.0f} ms ({seconds / floor:.2f}x)"
        )


PG_BIN = Path(os.environ.get("BENCH_PG_BIN", "/usr/lib/postgresql/15/bin"))
OS_USER = "postgres"


def as_postgres(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    """A PostgreSQL binary as the `postgres` OS user when this process is root."""
    prefix = ["runuser", "-u", OS_USER, "--"] if os.geteuid() == 0 else []
    return subprocess.run([*prefix, *command], check=check, capture_output=True, text=True)


@contextmanager
def primary_and_standby() -> Iterator[tuple[int, int]]:
    """(primary port, standby port): two clusters in a temporary folder, stopped and removed after."""
    root = Path(tempfile.mkdtemp(prefix="cascade-replica-"))
    if os.geteuid() == 0:
        shutil.chown(root, OS_USER, OS_USER)
    primary, standby = root / "primary", root / "standby"
    ports = common.free_port(), common.free_port()
    started = []
    try:
        as_postgres(str(PG_BIN / "initdb"), "-D", str(primary), "-A", "trust", "-U", "postgres", "--no-sync")
        settings = f"-c listen_addresses=127.0.0.1 -c unix_socket_directories={root} -c fsync=off"
        as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(primary), "-l", str(root / "primary.log"), "-w",
            "-o", f"-p {ports[0]} {settings}", "start",
        )  # fmt: skip
        started.append(primary)
        # A base backup with a replication slot's worth of WAL streamed alongside, and the
        # standby's connection to the primary written (-R: standby.signal, primary_conninfo).
        as_postgres(
            str(PG_BIN / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(ports[0]), "-U", "postgres",
            "-D", str(standby), "-R", "-X", "stream", "--no-sync",
        )  # fmt: skip
        as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(standby), "-l", str(root / "standby.log"), "-w",
            "-o", f"-p {ports[1]} {settings} -c hot_standby=on -c hot_standby_feedback=on", "start",
        )  # fmt: skip
        started.append(standby)
        yield ports
    finally:
        for folder in reversed(started):
            as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(folder), "-m", "fast", "-w", "stop", check=False)
        shutil.rmtree(root, ignore_errors=True)


def ingest_generated(run_id: str, kernels: int, contexts: int, seed: int = 1) -> None:
    """Generate and upload a run of `kernels` launches, then ingest it as the poller does."""
    from ingest import passes
    from tools import generator

    generator.upload_run(
        run_id, generator.RunSpec(kernels=kernels, contexts=contexts, seed=seed, timing=False)
    )
    change = passes.ingest_trace(run_id, reparse=True)
    if change is None or change.new_state != "ready":
        raise SystemExit(f"ingestion did not make {run_id} ready: {change}")


def wait_for_replay(primary, standby, timeout: float = 120) -> float:
    """Seconds until the standby has replayed the primary's WAL as of now (open connections)."""
    started = time.perf_counter()
    (lsn,) = primary.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    while time.perf_counter() - started < timeout:
        if standby.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0]:
            return time.perf_counter() - started
        time.sleep(0.001)
    raise SystemExit(f"the standby did not replay {lsn} within {timeout} s")


def replica_main(argv: list[str]) -> None:
    description = "The API read from a streaming standby beside the primary."
    args = parse("replica", description, argv, traces=20_000, kernels=200_000, repeat=5)

    with primary_and_standby() as (primary_port, standby_port):
        common.log(f"primary on {primary_port}, standby on {standby_port}")
        primary_url = f"postgres://postgres@127.0.0.1:{primary_port}/cascade_bench"
        standby_url = f"postgres://postgres@127.0.0.1:{standby_port}/cascade_bench"
        os.environ.update(BENCH_DATABASE_URL=primary_url, DATABASE_REPLICA_URL=standby_url)
        common.setup()  # creates the database and migrates it, on the primary
        measure(args, primary_url, standby_url)


def measure(args, primary_url: str, standby_url: str) -> None:
    import psycopg
    from django.contrib.auth import get_user_model

    from traces.models import ApiToken, Trace, next_trace_keys

    common.log(f"registering {args.traces:,} traces")
    keys = next_trace_keys(args.traces)
    Trace.objects.bulk_create(
        (
            Trace(id=f"bench-{n:06d}", key=keys[n], state="ready", model="opt-125m")
            for n in range(args.traces)
        ),
        batch_size=5000,
    )
    run_id = f"bench-replica-{args.kernels}"
    common.log(f"ingesting {args.kernels:,} launches")
    ingest_generated(run_id, args.kernels, contexts=4)
    user, _ = get_user_model().objects.get_or_create(username="bench")
    _, token = ApiToken.issue(user)
    with (
        psycopg.connect(primary_url, autocommit=True) as primary,
        psycopg.connect(standby_url, autocommit=True) as standby,
    ):
        assert standby.execute("SELECT pg_is_in_recovery()").fetchone()[0], "not a standby"
        replay = wait_for_replay(primary, standby)
        common.log(f"standby caught up with the load in {replay:.2f} s")
        get = getter(token)
        reads(args, get, run_id)
        lag(args, get, primary, standby)


def getter(token: str):
    """A GET through Django's whole stack in this process: (status, body bytes). `where`:
    "standby" as a fresh client reads, "primary" with the pin a browser carries after a write."""
    from django.core import signing
    from django.test import Client

    from cascade.db_routers import PIN_COOKIE

    signer = signing.get_cookie_signer(salt=PIN_COOKIE + PIN_COOKIE)

    def get(path: str, where: str, **headers) -> tuple[int, int]:
        client = Client()
        if where == "primary":
            client.cookies[PIN_COOKIE] = signer.sign("1")
        response = client.get(
            path, SERVER_NAME="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_ACCEPT="application/json",
            **headers,
        )  # fmt: skip
        size = sum(map(len, response.streaming_content)) if response.streaming else len(response.content)
        return response.status_code, size

    return get


def reads(args, get, run_id: str) -> None:
    """Each API read from the standby beside the primary, best of `--repeat`, interleaved."""
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    from cascade.db_routers import REPLICA

    requests = [
        (f"GET /api/traces ({args.traces + 1:,} traces)", "/api/traces", {}),
        ("GET /api/traces?limit=100", "/api/traces?limit=100", {}),
        (f"GET /api/traces/{{id}} ({args.kernels:,} launches)", f"/api/traces/{run_id}", {}),
        ("GET /api/traces/{id}/summary", f"/api/traces/{run_id}/summary", {}),
        ("GET /api/traces/{id}, 304", f"/api/traces/{run_id}", {"HTTP_IF_NONE_MATCH": "*"}),
    ]
    print(
        f"API reads, {args.traces + 1:,} traces and one of {args.kernels:,} launches; "
        f"best of {args.repeat}, Django's whole stack in one process"
    )
    print(f"  {'request':<42} {'standby':>10} {'primary':>10}")
    for label, path, headers in requests:
        for where in ("standby", "primary"):
            with CaptureQueriesContext(connections[REPLICA]) as on_replica:
                status, size = get(path, where, **headers)
            assert status in (200, 304), (path, status)
            assert bool(on_replica.captured_queries) == (where == "standby"), (path, where)
        # Interleaved, so that a neighbour's load falls on both columns alike.
        times = {"standby": [], "primary": []}
        for _ in range(args.repeat):
            for where, spent in times.items():
                started = time.perf_counter()
                get(path, where, **headers)
                spent.append(time.perf_counter() - started)
        row = {where: min(spent) for where, spent in times.items()}
        print(f"  {label:<42} {row['standby'] * 1000:>8.1f} ms {row['primary'] * 1000:>7.1f} ms")


def lag(args, get, primary, standby) -> None:
    """How far the standby trails a whole ingest."""
    lag_run = f"bench-replica-lag-{args.kernels}"
    common.log(f"ingesting {args.kernels:,} more launches, then waiting for the standby")
    ingest_generated(lag_run, args.kernels, contexts=4)
    committed = time.perf_counter()
    replay = wait_for_replay(primary, standby)
    tries = 0
    while True:  # a 304 once the standby has the trace; no body either way
        tries += 1
        asked = time.perf_counter()
        if get(f"/api/traces/{lag_run}", "standby", HTTP_IF_NONE_MATCH="*")[0] == 304:
            break
        time.sleep(0.002)
    visible, last_request = time.perf_counter() - committed, time.perf_counter() - asked
    print(
        f"Standby lag on this machine (streaming replication, asynchronous, {args.kernels:,}-launch ingest)"
    )
    print(f"  WAL replayed after the ingest's commit       {replay * 1000:>8.1f} ms")
    print(
        f"  the trace answered by the API from the standby {visible * 1000:>6.1f} ms after the commit "
        f"({tries} request{'s' if tries > 1 else ''}, the last one {last_request * 1000:.1f} ms)"
    )


if __name__ == "__main__":
    commands = {"analysis": analysis_main, "replica": replica_main}
    if sys.argv[1:2] and sys.argv[1] in commands:
        commands[sys.argv[1]](sys.argv[2:])
    else:
        sys.exit(f"usage: python -m bench.reads {{{','.join(commands)}}} [--help] ...")
