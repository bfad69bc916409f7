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
