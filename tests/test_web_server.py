"""The production web server as the README runs it: slow clients hold a thread, not the site.

Issue 12, finding 4: three connections sending a byte every 2 s stopped all three sync workers.
"""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def gunicorn(tmp_path):
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CASCADE_", "DATABASE_URL"))},
        "CASCADE_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "CASCADE_BIND": f"127.0.0.1:{port}",
        # As few workers as the README's old sync setup had slow clients to block.
        "CASCADE_WEB_WORKERS": "1",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "cascade.wsgi"], cwd=ROOT, env=env, stderr=subprocess.PIPE
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(f"{base}/api/traces", timeout=1)
        except urllib.error.HTTPError:
            break  # 401: it answers
        except OSError:
            time.sleep(0.1)
    yield port
    # Quick shutdown: nothing is left to finish, and a graceful one waits seconds for idle workers.
    process.send_signal(signal.SIGINT)
    process.wait(30)


def test_slow_clients_do_not_stop_the_server(gunicorn):
    slow = []
    for _ in range(4):
        sock = socket.create_connection(("127.0.0.1", gunicorn), timeout=5)
        sock.sendall(b"GET /api/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # ... and the rest never comes
        slow.append(sock)
    try:
        started = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(f"http://127.0.0.1:{gunicorn}/api/traces", timeout=10)
        assert answer.value.code == 401
        assert time.monotonic() - started < 10
    finally:
        for sock in slow:
            sock.close()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /api/traces?" + b"x" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 414),
        (b"GET /api/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"y" * 9000 + b"\r\n\r\n", 431),
        (b"NOT A REQUEST\r\n\r\n", 400),
    ],
    ids=["uri-too-long", "header-too-large", "garbage"],
)
def test_requests_the_server_refuses_are_answered_in_json(gunicorn, request_bytes, status):
    """Issue 12, finding 8: gunicorn's own refusals were HTML pages."""
    import json

    with socket.create_connection(("127.0.0.1", gunicorn), timeout=10) as sock:
        sock.sendall(request_bytes)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ", 2)[1] == str(status).encode()
    assert b"Content-Type: application/json" in head
    assert "detail" in json.loads(body)
