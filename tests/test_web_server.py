"""The production web server as docs/production.md runs it: slow clients hold a thread, not the site.

Three connections sending a byte every 2 s stopped all three sync workers.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests import gunicorn_process
from tests.gunicorn_process import clean_environ

pytestmark = pytest.mark.slow


@pytest.fixture
def gunicorn(tmp_path):
    env = clean_environ(CASCADE_VAR_DIR=str(tmp_path), DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    # As few workers as the README's old sync setup had slow clients to block.
    with gunicorn_process.gunicorn(env, tmp_path, workers=1) as server:
        yield server.port


def test_slow_clients_do_not_stop_the_server(gunicorn):
    slow = []
    for _ in range(4):
        sock = socket.create_connection(("127.0.0.1", gunicorn), timeout=5)
        sock.sendall(b"GET /api/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # ... and the rest never comes
        slow.append(sock)
    try:
        # The timeout only ends a server that never answers: the verdict is below.
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(f"http://127.0.0.1:{gunicorn}/api/traces", timeout=120)
        assert answer.value.code == 401
        # Answered while every slow client still holds its connection, unanswered: a server that
        # had to drop them first (a sync worker's timeout) would have closed or answered them.
        for sock in slow:
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in slow:
            sock.close()


DOCS = Path(__file__).resolve().parents[1] / "docs" / "production.md"

# Requests refused before Django reads them: what gunicorn answers alone (an HTML page), and
# what a client behind docs/production.md's nginx is answered (JSON, the same kind of refusal).
REFUSALS = {
    "uri-too-long": (b"GET /api/traces?" + b"x" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 414, 414),
    "header-too-large": (
        b"GET /api/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"y" * 9000 + b"\r\n\r\n",
        431,
        400,  # nginx's own "Request Header Or Cookie Too Large"
    ),
    "too-many-headers": (
        b"GET /api/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + b"".join(b"X-Header-%d: 1\r\n" % n for n in range(150))
        + b"Connection: close\r\n\r\n",
        431,
        431,  # nginx counts no headers: gunicorn refuses, nginx rewrites the page
    ),
    "garbage": (b"NOT A REQUEST\r\n\r\n", 400, 400),
}


def exchange(port: int, request_bytes: bytes) -> tuple[int, bytes, bytes]:
    """(status, head, body) of one request sent as raw bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request_bytes)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


def documented_nginx() -> str:
    """The nginx server block docs/production.md gives."""
    return re.search(r"```nginx\n(server \{.*?\n\})\n```", DOCS.read_text(), re.DOTALL).group(1)


def error_page_statuses(config: str) -> set[int]:
    return {int(code) for line in re.findall(r"error_page ([\d ]+)", config) for code in line.split()}


@pytest.mark.parametrize(("request_bytes", "alone", "proxied"), REFUSALS.values(), ids=REFUSALS.keys())
def test_gunicorn_refuses_with_statuses_the_documented_proxy_answers_in_json(
    gunicorn, request_bytes, alone, proxied
):
    """gunicorn has no hook for its refusal page: the proxy answers these statuses in JSON. An
    upgrade that refuses with another status fails here until the docs' nginx lists it."""
    status, head, _ = exchange(gunicorn, request_bytes)
    assert status == alone
    assert b"Content-Type: text/html" in head
    assert {alone, proxied} <= error_page_statuses(documented_nginx())


@pytest.fixture
def proxied(gunicorn, tmp_path):
    """docs/production.md's nginx, on a free port, in front of the gunicorn fixture."""
    nginx = shutil.which("nginx") or next(
        (path for path in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.path.exists(path)), None
    )
    if nginx is None:
        pytest.skip("needs nginx (Debian: apt-get install nginx-light) to run the documented proxy")
    port = gunicorn_process.free_port()
    server = documented_nginx().replace("server {", f"server {{\n    listen 127.0.0.1:{port};", 1)
    server = server.replace("http://127.0.0.1:8000", f"http://127.0.0.1:{gunicorn}")
    temp = " ".join(
        f"{kind}_temp_path {tmp_path / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (tmp_path / "nginx.conf").write_text(
        f"daemon off; pid {tmp_path / 'nginx.pid'}; error_log {tmp_path / 'nginx.log'};\n"
        f"events {{}}\nhttp {{\n  access_log off; {temp}\n{server}\n}}\n"
    )
    process = subprocess.Popen([nginx, "-c", str(tmp_path / "nginx.conf")], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nginx did not start: {process.stderr.read()!r}") from None
                time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.mark.parametrize(("request_bytes", "alone", "proxied_status"), REFUSALS.values(), ids=REFUSALS.keys())
def test_behind_the_documented_proxy_refusals_are_answered_in_json(
    proxied, request_bytes, alone, proxied_status
):
    status, head, body = exchange(proxied, request_bytes)
    assert status == proxied_status
    assert b"Content-Type: application/json" in head
    assert json.loads(body)["detail"].startswith(f"{proxied_status}: refused before Cascade read it")


def test_behind_the_documented_proxy_django_s_own_errors_pass_untouched(proxied):
    # A 400 of Cascade's says what was wrong; the proxy rewrites only refusals Django never makes.
    status, head, body = exchange(
        proxied, b"GET /api/traces?state=%00 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    assert status == 400
    assert "NUL" in json.loads(body)["detail"]
