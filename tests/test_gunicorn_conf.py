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


@pytest.mark.parametrize(("env", "expected"), [(None, "127.0.0.1:8000"), ("0.0.0.0:9000", "0.0.0.0:9000")])
def test_gunicorn_binds_this_host_only_unless_told_otherwise(monkeypatch, env, expected):
    """A request straight to gunicorn bypasses the proxy; by default only this
    host can send one. CASCADE_BIND binds elsewhere (a container's 0.0.0.0)."""
    if env is None:
        monkeypatch.delenv("CASCADE_BIND", raising=False)
    else:
        monkeypatch.setenv("CASCADE_BIND", env)
    assert runpy.run_path(str(CONF))["bind"] == expected
