"""gunicorn.conf.py's hooks, called as gunicorn calls them."""

import runpy
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

CONF = Path(__file__).resolve().parent.parent / "gunicorn.conf.py"


def test_quick_shutdown_leaves_the_thread_pool_alone():
    """A SIGINT or SIGQUIT landing while the worker is inside its pool's submit() deadlocked
    gunicorn 27's threaded worker: its handler shut the pool down, whose lock submit() held."""

    class Pool:
        def shutdown(self, wait=True):
            raise AssertionError("the signal handler shut the thread pool down")

    stopped = []
    worker = SimpleNamespace(alive=True, tpool=Pool(), cfg=SimpleNamespace(worker_int=stopped.append))
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGQUIT)}
    try:
        runpy.run_path(str(CONF))["post_worker_init"](worker)
        for sig in (signal.SIGINT, signal.SIGQUIT):
            worker.alive = True
            with pytest.raises(SystemExit):
                signal.getsignal(sig)(sig, None)
            assert worker.alive is False
        assert stopped == [worker, worker]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_gunicorn_still_shuts_its_pool_down_in_the_quick_shutdown_handler():
    """The day gunicorn's threaded worker stops doing that, post_worker_init can go."""
    from gunicorn.workers.gthread import ThreadWorker

    class Pool:
        shut_down = False

        def shutdown(self, wait=True):
            self.shut_down = True

    worker = ThreadWorker.__new__(ThreadWorker)  # its state only, no server around it
    worker.alive, worker.tpool, worker.cfg = True, Pool(), SimpleNamespace(worker_int=lambda worker: None)
    with pytest.raises(SystemExit):
        worker.handle_quit(signal.SIGQUIT, None)
    assert worker.tpool.shut_down


def test_a_request_gunicorn_refuses_is_answered_in_json_by_its_own_error_path(monkeypatch):
    """gunicorn's worker writes its refusals through `gunicorn.util.write_error`, which the
    configuration replaces: an upgrade that writes them another way fails here."""
    import json
    import logging
    import socket

    import gunicorn.util
    from gunicorn.http.errors import LimitRequestLine
    from gunicorn.workers.base import Worker

    monkeypatch.setattr(gunicorn.util, "write_error", gunicorn.util.write_error)  # restored afterwards
    runpy.run_path(str(CONF))
    worker = SimpleNamespace(log=logging.getLogger("test_gunicorn_conf"))
    server, client = socket.socketpair()
    with server, client:
        Worker.handle_error(worker, None, server, ("127.0.0.1", 1), LimitRequestLine(9000, 8190))
        server.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 414 URI Too Long"
    assert b"Content-Type: application/json" in head
    assert json.loads(body)["detail"].startswith("URI Too Long: ")


@pytest.mark.parametrize(("env", "expected"), [(None, "127.0.0.1:8000"), ("0.0.0.0:9000", "0.0.0.0:9000")])
def test_gunicorn_binds_this_host_only_unless_told_otherwise(monkeypatch, env, expected):
    """A request straight to gunicorn bypasses the proxy; by default only this
    host can send one. CASCADE_BIND binds elsewhere (a container's 0.0.0.0)."""
    if env is None:
        monkeypatch.delenv("CASCADE_BIND", raising=False)
    else:
        monkeypatch.setenv("CASCADE_BIND", env)
    assert runpy.run_path(str(CONF))["bind"] == expected
