"""The production web server as docs/production.md runs it: slow clients hold a thread, not the site.

Issue 12, finding 4: three connections sending a byte every 2 s stopped all three sync workers.
"""

import socket
import urllib.error
import urllib.request

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
