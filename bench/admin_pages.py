"""The admin at 100,000 traces and 50M launches (issue 22): each page under a second.

    python -m bench.admin_pages [--scale tiny|small|full] [--server postgres://...] [--repeat 5] [--json FILE]
    python -m bench.admin_pages --database postgres://.../seeded   # a database seeded already

A scratch database (migrated, seeded by `bench/community_data.py`, then dropped), Cascade
through gunicorn as deployed, a superuser logged in through the admin's own login form; then
the median of `--repeat` GETs of each page, after one that warms the worker: the trace list
(plain, filtered by state, searched), the page of the big trace and of a tiny one, the kernel
list (plain, one trace's, a deep page of it). Printed as a Markdown table beside the issue's
target, 1 s a page.

Other benches reuse the pieces (bench/community.py): `measure(port, database_url, seeded)`
(a superuser made and logged in, every page timed: the rows), or with a client of your own
`admin_client(port, username, password)` after `create_superuser(env, username, password)`;
`pages(seeded)` (what is timed), `table(rows)`.
"""

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack, closing
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


def measure(port: int, access, seeded: dict | None = None, *, repeat: int = 5) -> list[dict]:
    """Each admin page (`pages`) timed on the gunicorn at `port`, as rows: `page`, `path`,
    `seconds` (the median of `repeat` GETs after the first), `first`, `times`, `bytes`, `met`,
    and `reference` (the first GET, said in words: a big trace's page is computed then).

    `access`: an httpx client logged in (`admin_client`), or the URL of the database the
    server reads, where a superuser is then created and logged in through the login form.
    `seeded`: `community_data.seed()`'s answer (its `big` and `tiny` traces and the big one's
    launches); None: the database's biggest trace and a tiny one (`seeded_ids`).
    """
    if seeded is None:
        if not isinstance(access, str):
            raise ValueError("measure needs seed()'s answer, or the database URL to find the traces in")
        seeded = seeded_ids(access)
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


def table(rows: list[dict]) -> str:
    """Markdown of measure()'s rows: each page's first GET (a big trace's page computed) and
    the median of the later ones (its reads kept), beside the target; met on the median."""
    lines = ["| page | first GET | median of the next | target | met? |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {row['page']} | {ms(row['first'])} | {ms(row['seconds'])} | < {TARGET_SECONDS:g} s "
            f"| {'yes' if row['met'] else 'NO'} |"
        )
    return "\n".join(lines)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def run(db: str, seeded: dict | None, repeat: int, tmp: Path) -> dict:
    """Gunicorn on `db` (seeded), each page measured; what --json saves."""
    env = common.child_env(DATABASE_URL=db, CASCADE_VAR_DIR=str(tmp))
    with common.gunicorn(env) as port:
        rows = measure(port, db, seeded, repeat=repeat)
    return {"seeded": seeded, "pages": rows}


def seeded_ids(db: str) -> dict:
    """The big trace (the most launches), its launches, and a tiny one of a database seeded
    before: what measure() reads of seed()'s answer."""
    big, launches, tiny = common.query(
        db,
        "SELECT (SELECT id FROM traces_trace ORDER BY kernel_count DESC, id LIMIT 1), "
        "(SELECT max(kernel_count) FROM traces_trace), "
        "(SELECT id FROM traces_trace WHERE state = 'ready' AND kernel_count >= 2 ORDER BY kernel_count, id LIMIT 1)",
    )[0]
    return {"big": big, "big_trace_launches": launches, "tiny": tiny}


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
            results = run(args.database, None, args.repeat, Path(tmp))
        else:
            with common.scratch_database(args.server, "admin") as db:
                common.manage("migrate", "--noinput", env=common.child_env(DATABASE_URL=db))
                seeded = community_data.seed(db, traces=traces, launches=launches, big_trace_launches=big)
                results = run(db, seeded, args.repeat, Path(tmp))
                results["database"] = db.rsplit("/", 1)[1]  # dropped on the way out
    print(table(results["pages"]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
