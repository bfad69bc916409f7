"""The admin at 100,000 traces and 50M launches (issue 22): each page under a second.

    python -m bench.admin_pages [--scale tiny|small|full] [--server postgres://...] [--repeat 5] [--json FILE]
    python -m bench.admin_pages --database postgres://.../seeded   # a database seeded already

A scratch database (migrated, seeded by `bench/community_data.py`, then dropped), Cascade
through gunicorn as deployed, a superuser logged in through the admin's own login form; then
the median of `--repeat` GETs of each page, after one that warms the worker: the trace list
(plain, filtered by state, searched), the page of the big trace and of a tiny one, the kernel
list (plain, one trace's, a deep page of it). Printed as a Markdown table beside the issue's
target, 1 s a page.

Other benches reuse the pieces: `create_superuser(env, username, password)`,
`admin_client(port, username, password)` (an httpx client logged in),
`pages(ids)` (the pages to time, from seed()'s ids), `measure(port, client, ids)` (the rows),
`table(rows)`.
"""

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import quote as urlquote
from urllib.parse import urlencode

from bench import common, community_data
from bench.common import log

TARGET_SECONDS = 1.0
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
        return self.seconds < TARGET_SECONDS


def admin_id(trace_id: str) -> str:
    """A trace id as it goes in an admin URL (django.contrib.admin.utils.quote, then %-escapes)."""
    from django.contrib.admin.utils import quote

    return urlquote(quote(trace_id), safe="")


def pages(ids: dict, *, big_launches: int) -> list[tuple[str, str]]:
    """(label, path) of every page timed, from seed()'s `ids` (big, tiny)."""
    big, tiny = ids["big"], ids["tiny"]
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


def measure(port: int, client, ids: dict, *, big_launches: int, repeat: int = 5) -> list[PageTime]:
    """Each admin page of `pages(ids)` timed through `client` (admin_client's) on `port`."""
    del port  # the client knows it; kept so that callers name the server they measure
    rows = []
    for label, path in pages(ids, big_launches=big_launches):
        rows.append(time_page(client, label, path, repeat))
        log(f"  {label}: first {rows[-1].first * 1000:,.0f} ms, then {rows[-1].seconds * 1000:,.0f} ms")
    return rows


def table(rows: list[PageTime]) -> str:
    """Markdown: each page's first GET (the trace pages' reads computed) and the median of the
    later ones (a big trace's kept), beside the target; met on the median."""
    lines = ["| page | first GET | median of the next | target | met? |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {row.page} | {ms(row.first)} | {ms(row.seconds)} | < {TARGET_SECONDS:g} s | {'yes' if row.met else 'NO'} |"
        )
    return "\n".join(lines)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def run(
    db: str, seeded: dict | None, repeat: int, tmp: Path, *, big_launches: int
) -> tuple[dict, list[PageTime]]:
    """Through gunicorn on `db` (seeded; `seeded` is seed()'s answer, or None to find its
    traces): a superuser, its login, each page timed. Returns what --json saves, and the rows."""
    env = common.child_env(DATABASE_URL=db, CASCADE_VAR_DIR=str(tmp))
    username, password = f"{USERNAME}-{secrets.token_hex(3)}", secrets.token_urlsafe(16)
    create_superuser(env, username, password)
    ids = seeded["ids"] if seeded else seeded_ids(db)
    with common.gunicorn(env) as port, closing(admin_client(port, username, password)) as client:
        rows = measure(port, client, ids, big_launches=big_launches, repeat=repeat)
    results = {"seeded": seeded, "ids": ids, "pages": [asdict(row) | {"met": row.met} for row in rows]}
    return results, rows


def seeded_ids(db: str) -> dict:
    """The big trace (the most launches) and a tiny one of a database seeded before."""
    big, tiny = common.query(
        db,
        "SELECT (SELECT id FROM traces_trace ORDER BY kernel_count DESC, id LIMIT 1), "
        "(SELECT id FROM traces_trace WHERE state = 'ready' AND kernel_count >= 2 ORDER BY kernel_count, id LIMIT 1)",
    )[0]
    return {"big": big, "tiny": tiny}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=community_data.SCALES, default="small")
    parser.add_argument(
        "--server",
        default=common.server_url(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432")),
    )
    parser.add_argument("--database", help="a database seeded already (kept): measure only")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    traces, launches, big = community_data.SCALES[args.scale]
    with tempfile.TemporaryDirectory(prefix="cascade-bench-admin-") as tmp:
        if args.database:
            big = common.query(args.database, "SELECT max(kernel_count) FROM traces_trace")[0][0]
            results, rows = run(args.database, None, args.repeat, Path(tmp), big_launches=big)
        else:
            with common.scratch_database(args.server, "admin") as db:
                common.manage("migrate", "--noinput", env=common.child_env(DATABASE_URL=db))
                seeded = community_data.seed(db, traces=traces, launches=launches, big_trace_launches=big)
                results, rows = run(db, seeded, args.repeat, Path(tmp), big_launches=big)
                results["database"] = db.rsplit("/", 1)[1]  # dropped on the way out
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
