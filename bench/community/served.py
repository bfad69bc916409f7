"""What `python -m bench community` times through gunicorn on its seeded database (issue 22).

`--only list`: `GET /api/traces` at 100,000 traces: the full list (identity, gzip and zstd)
beside `COPY (SELECT json_agg(...)) TO STDOUT` of the same rows and columns; the first page of
100 and one deep in the list (followed from a Link) beside the same COPY of 100 rows; the 304 of
each; the peak RSS (VmHWM) of the worker that served them. Timings: the median of `repeat`.

`--only admin`: a superuser logged in through the admin's own login form, then the median of
`repeat` GETs of each page after one that warms the worker: the trace list (plain, filtered by
state, searched), the page of the big trace and of a tiny one, the kernel list (plain, one
trace's, a deep page of it). Each page's target is 1 s.
"""

import secrets
import statistics
import time
from contextlib import ExitStack, closing
from dataclasses import asdict, dataclass
from urllib.parse import quote as urlquote
from urllib.parse import urlencode

from bench import common
from bench.common import http_get, log

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


ADMIN_TARGET_SECONDS = 1.0
USERNAME = "bench-admin"
# Launches a kernel list page shows (KernelAdmin.list_per_page): a deep page is this many rows
# times its number past the start.
KERNELS_PER_PAGE = 100


@dataclass
class PageTime:
    """One page's row of the table."""

    page: str
    path: str
    seconds: float  # the median of the GETs after the first
    first: float  # the first GET: a big trace's page is computed then, and kept for the others
    times: list[float]
    bytes: int

    @property
    def met(self) -> bool:
        return self.seconds < ADMIN_TARGET_SECONDS


def admin_id(trace_id: str) -> str:
    """A trace id as it goes in an admin URL (django.contrib.admin.utils.quote, then %-escapes)."""
    from django.contrib.admin.utils import quote

    return urlquote(quote(trace_id), safe="")


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


def create_superuser(env: dict, username: str, password: str) -> None:
    common.manage(
        "createsuperuser",
        "--noinput",
        "--username",
        username,
        "--email",
        "bench@example.com",
        env={**env, "DJANGO_SUPERUSER_PASSWORD": password},
    )


def admin_client(port: int, username: str, password: str):
    """An httpx client on 127.0.0.1:port logged in through /admin/login/ as a browser would:
    the form's CSRF token, the session cookie set by the redirect."""
    import re

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


def time_page(client, label: str, path: str, repeat: int) -> PageTime:
    """The first GET of `path`, and the median of `repeat` more."""
    times, size = [], 0
    for _ in range(repeat + 1):
        started = time.perf_counter()
        answer = client.get(path)
        times.append(time.perf_counter() - started)
        if answer.status_code != 200:
            raise RuntimeError(f"GET {path} answered {answer.status_code}")
        size = len(answer.content)
    return PageTime(label, path, statistics.median(times[1:]), times[0], times[1:], size)


def measure_admin(port: int, access, seeded: dict, *, repeat: int = 5) -> list[dict]:
    """Each admin page (`pages`) timed on the gunicorn at `port`, as rows: `page`, `path`,
    `seconds` (the median of `repeat` GETs after the first), `first`, `times`, `bytes`, `met`,
    and `reference` (the first GET, said in words: a big trace's page is computed then).

    `access`: an httpx client logged in (`admin_client`), or the URL of the database the
    server reads, where a superuser is then created and logged in through the login form.
    `seeded`: `bench.community.data.seed()`'s answer (its `big` and `tiny` traces and the big one's
    launches).
    """
    with ExitStack() as stack:
        client = access
        if isinstance(access, str):
            username, password = f"{USERNAME}-{secrets.token_hex(3)}", secrets.token_urlsafe(16)
            create_superuser(common.child_env(DATABASE_URL=access), username, password)
            client = stack.enter_context(closing(admin_client(port, username, password)))
        rows = []
        for label, path in pages(seeded, big_launches=seeded["big_trace_launches"]):
            row = time_page(client, label, path, repeat)
            rows.append(asdict(row) | {"met": row.met, "reference": f"first GET {ms(row.first)}"})
            log(f"  {label}: first {ms(row.first)}, then {ms(row.seconds)}")
    return rows


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"
