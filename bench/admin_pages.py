"""The admin at 100,000 traces and 50M launches (issue 22): each page under a second, taken by
`python -m bench community --only admin` on its seeded database.

Cascade through gunicorn as deployed, a superuser logged in through the admin's own login form; then
the median of `repeat` GETs of each page, after one that warms the worker: the trace list
(plain, filtered by state, searched), the page of the big trace and of a tiny one, the kernel
list (plain, one trace's, a deep page of it). Each page's target is 1 s.
"""

import secrets
import statistics
import time
from contextlib import ExitStack, closing
from dataclasses import asdict, dataclass
from urllib.parse import quote as urlquote
from urllib.parse import urlencode

from bench import common
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


def measure(port: int, access, seeded: dict, *, repeat: int = 5) -> list[dict]:
    """Each admin page (`pages`) timed on the gunicorn at `port`, as rows: `page`, `path`,
    `seconds` (the median of `repeat` GETs after the first), `first`, `times`, `bytes`, `met`,
    and `reference` (the first GET, said in words: a big trace's page is computed then).

    `access`: an httpx client logged in (`admin_client`), or the URL of the database the
    server reads, where a superuser is then created and logged in through the login form.
    `seeded`: `community_data.seed()`'s answer (its `big` and `tiny` traces and the big one's
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
