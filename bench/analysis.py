"""What `/summary` and `/compare` cost on million-launch traces, beside PostgreSQL alone.

    python -m bench.analysis [--kernels 1000000] [--repeat 5]

Loads two generated runs (tools.generator: an H100 run and an A100 run, with steps and
measured times) into the bench database with COPY (`traces.kernel_store.kernels_replace`),
reusing them when they are already there, then requests `GET /api/traces/{a}/summary` and
`GET /api/traces/{a}/compare/{b}` (by name and by demangled name) through Django's full
stack: middleware, Bearer authentication, the view, JSON.

The reference is `psql -c` running the same GROUP BYs on the same rows (PostgreSQL alone, no
Django, no Python per group; the time includes psql's start and connection), and the same
statements on an already open connection (the database's time alone); the target is
within 1.5x. The plans (EXPLAIN) are printed so
that one can see which index serves `trace_id = X`.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the project's root on the path, for `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

RUNS = {"bench-analysis-h100": "sm_90", "bench-analysis-a100": "sm_80"}
# A small trace beside them: its plan shows `trace_id = X` served by the kernel_unique_launch
# index, as every trace's is once the table holds many (a half of the table is scanned instead).
SMALL_RUN, SMALL_KERNELS = "bench-analysis-small", 5000


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


def best_request(client, path: str, token: str, repeat: int) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(
            path,
            SERVER_NAME="127.0.0.1",
            HTTP_AUTHORIZATION=f"Bearer {token}",
            HTTP_ACCEPT="application/json",
        )
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, (path, response.status_code, response.content[:200])
        size = len(response.content)
    return min(times), size


def best_psql(database_url: str, sql: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(["psql", database_url, "-qAtc", sql], check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return min(times)


def best_direct(sql: str, repeat: int) -> float:
    """The same statements on Django's open connection: no process start, no new session."""
    from django.db import connection

    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        with connection.cursor() as cursor:
            for statement in sql.split("; "):
                cursor.execute(statement)
                cursor.fetchall()
        times.append(time.perf_counter() - started)
    return min(times)


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


def plan_lines(sql: str) -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        return [row[0] for row in cursor.fetchall()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    database_url = common.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    from traces.models import ApiToken, Trace

    for run_id, arch, kernels in [
        *((r, arch, args.kernels) for r, arch in RUNS.items()),
        (SMALL_RUN, "sm_90", SMALL_KERNELS),
    ]:
        if not Trace.objects.filter(pk=run_id, state="ready", kernel_count=kernels).exists():
            load_run(run_id, arch, kernels)
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
        # Interleaved, one of each per round: a busy machine slows all three alike.
        seconds = floor = direct = float("inf")
        for _ in range(args.repeat):
            once, size = best_request(client, path, token, 1)
            seconds = min(seconds, once)
            floor = min(floor, best_psql(database_url, reference, 1))
            direct = min(direct, best_direct(reference, 1))
        print(
            f"  {label:<22} {seconds * 1000:7.0f} ms ({size / 1000:.0f} kB)   psql -c, same GROUP BYs "
            f"{floor * 1000:7.0f} ms ({seconds / floor:.2f}x)   same SQL on an open connection "
            f"{direct * 1000:7.0f} ms ({seconds / direct:.2f}x)"
        )
    print("plans:")
    small = reference_sql(SMALL_RUN, SMALL_RUN)["summary"].split("; ")[0]
    for label, statement in [
        ("summary, by name", sql["summary"].split("; ")[0]),
        ("compare", sql["compare"]),
        (f"summary of {SMALL_RUN} ({SMALL_KERNELS:,} launches)", small),
    ]:
        print(f"  {label}:")
        for line in plan_lines(statement):
            print(f"    {line}")


if __name__ == "__main__":
    os.chdir(common.ROOT)
    main()
