"""Re-ingest from the admin without Celery: one background worker per process, a bounded queue.
Each selected trace used to start a thread of its own, with a database
connection and a whole parse, inside the web process."""

import threading

import pytest

from ingest import passes
from ingest import reingest as reingest_module
from tests.traces.support import reingest


class BlockingParses:
    """Stands in for passes.ingest_trace: records the traces parsed, and how many at once,
    each parse waiting until the test releases it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.parsed: list[str] = []
        self.threads: set[str] = set()
        self.now = self.most = 0
        self.release = threading.Event()

    def __call__(self, trace_id, **kwargs):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.threads.add(threading.current_thread().name)
        self.release.wait(30)
        with self.lock:
            self.now -= 1
            self.parsed.append(trace_id)


@pytest.fixture
def parses(monkeypatch, settings):
    settings.CASCADE_CELERY_CONFIGURED = False
    settings.CASCADE_REINGEST_QUEUE = 2
    blocking = BlockingParses()
    monkeypatch.setattr(passes, "ingest_trace", blocking)
    yield blocking
    blocking.release.set()
    assert reingest_module.queue.wait_idle(30)


def test_a_selection_is_parsed_one_trace_at_a_time_and_the_queue_is_bounded(staff_client, make_trace, parses):
    for trace_id in ("t1", "t2", "t3", "t4", "t5"):
        make_trace(trace_id, state="ready")

    assert reingest(staff_client, "t1", "t2", "t3", "t4", "t5") == [
        "5 traces: re-ingest in the background: 1 started, 2 waiting, 2 refused: 2 already wait "
        "(CASCADE_REINGEST_QUEUE), ask again once they are done; reload the page to see the result"
    ]
    parses.release.set()
    assert reingest_module.queue.wait_idle(30)
    assert parses.most == 1, "one parse at a time in the web process"
    assert len(parses.threads) == 1, "one background worker, not a thread per trace"
    # The admin lists newest first: the traces are taken in the order they were selected there.
    assert len(parses.parsed) == 3 and len(set(parses.parsed)) == 3


def test_a_trace_already_waiting_is_not_queued_twice(staff_client, make_trace, parses):
    for trace_id in ("t1", "t2", "t3"):
        make_trace(trace_id, state="ready")
    assert reingest(staff_client, "t1") == [
        "Trace t1: re-ingest in the background: 1 started, 0 waiting, 0 refused; reload the page to see the result"
    ]
    assert reingest(staff_client, "t2") == [
        "Trace t2: re-ingest in the background: 0 started, 1 waiting, 0 refused; reload the page to see the result"
    ]
    # t2 waits already: counted as waiting, not added; t3 takes the last place.
    assert reingest(staff_client, "t2", "t3") == [
        "2 traces: re-ingest in the background: 0 started, 2 waiting, 0 refused; reload the page to see the result"
    ]
    assert list(reingest_module.queue.waiting) == ["t2", "t3"]
    parses.release.set()
    assert reingest_module.queue.wait_idle(30)
    assert parses.parsed == ["t1", "t2", "t3"]
