"""`GET /api/traces` at 100,000 traces (issue 22): the full list, a page of 100, a 304, taken by
`python -m bench community --only list` on its seeded database. Beside a reference: the full list (identity, gzip and zstd) beside `COPY (SELECT
json_agg(...)) TO STDOUT` of the same rows and columns; the first page of 100 and one deep in
the list (followed from a Link) beside the same COPY of 100 rows; the 304 of each; and the
peak RSS (VmHWM) of the gunicorn worker that served them. Targets, from the issue: the full
list under 2 s, a page under 50 ms, a 304 under 20 ms. Timings are the median of `--repeat`.
"""

import statistics
import time

from bench import common
from bench.common import http_get, log

SCALES = {"tiny": 3_000, "small": 20_000, "full": 100_000}
TARGETS = {"list": 2.0, "page": 0.050, "304": 0.020}
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


def copy_seconds(db: str, limit: int | None, repeat: int) -> tuple[float, int]:
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
    return statistics.median(times), size


def measure_served(port: int, auth: dict, traces: int, repeat: int) -> dict:
    """The list through a running gunicorn: full (identity, gzip, zstd), pages, 304s, the
    workers' peak RSS. The community bench (bench/community.py) calls it on its database."""
    for _ in range(4):  # each worker's first request pays for its imports
        http_get(port, "/api/traces?limit=1", auth)
    results: dict = {"traces": traces}
    before = {pid: status["VmHWM"] for pid, status in common.gunicorn_processes(port).items()}
    log("GET /api/traces")
    seconds, full = median_seconds(port, "/api/traces", auth, repeat)
    results["list"] = {"seconds": seconds, "bytes": full.nbytes}
    gz_seconds, gz = median_seconds(port, "/api/traces", {**auth, "Accept-Encoding": "gzip"}, repeat)
    results["list_gzip"] = {"seconds": gz_seconds, "bytes": gz.nbytes}
    zs_seconds, zs = median_seconds(port, "/api/traces", {**auth, "Accept-Encoding": "zstd"}, repeat)
    results["list_zstd"] = {"seconds": zs_seconds, "bytes": zs.nbytes}
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
    tag = {**auth, "If-None-Match": full.headers["etag"]}
    results["304"] = {"seconds": median_seconds(port, "/api/traces", tag, repeat * 5, 304)[0]}
    tag = {**auth, "If-None-Match": page.headers["etag"]}
    results["page_304"] = {"seconds": median_seconds(port, "/api/traces?limit=100", tag, repeat * 5, 304)[0]}
    return results


def measure_reference(db: str, repeat: int) -> dict:
    log("the reference: COPY (SELECT json_agg(...)) TO STDOUT")
    return {
        "copy_list": dict(zip(("seconds", "bytes"), copy_seconds(db, None, repeat), strict=True)),
        "copy_page": dict(zip(("seconds", "bytes"), copy_seconds(db, 100, repeat * 5), strict=True)),
    }
