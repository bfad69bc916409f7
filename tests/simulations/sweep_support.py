"""What the sweeps' tests share: ready traces of a given GPU architecture, write tokens of named
users, and a real broker (Redis, a database of its own) whose queues the tests read with kombu."""

import pytest
from django.contrib.auth import get_user_model

from tests.helpers import bearer, ingested, kernel_rows
from traces.models import ApiToken, Trace

# Redis database 11: the sweeps' tests' own (the Celery worker's tests use 14).
SWEEP_BROKER_URL = "redis://127.0.0.1:6379/11"


def ready_trace(trace_id: str, arch: str | None, **fields) -> Trace:
    """A ready trace of three launches, traced on `arch` (`sm_75`; None: it does not say)."""
    ingested(trace_id, kernel_rows(3))
    Trace.objects.filter(pk=trace_id).update(trace_gpu_arch=arch, **fields)
    return Trace.objects.get(pk=trace_id)


def writer(username: str, *, staff: bool = False):
    """An API client holding a write token of the user `username` (created, staff or not)."""
    user, _ = get_user_model().objects.get_or_create(username=username, defaults={"is_staff": staff})
    _, token = ApiToken.issue(user, scope="write")
    return bearer(token)


@pytest.fixture
def broker(settings):
    """The server publishes to Redis database 11, emptied before and after; `broker.messages(config)`
    takes the messages waiting on a config's queue: [(task name, args)]."""
    import redis
    from kombu import Connection

    client = redis.Redis.from_url(SWEEP_BROKER_URL)
    try:
        client.flushdb()
    except redis.ConnectionError:
        pytest.skip("needs Redis on 127.0.0.1:6379 as the sweeps' broker")
    settings.CELERY_BROKER_URL = SWEEP_BROKER_URL

    class Broker:
        url = SWEEP_BROKER_URL

        @staticmethod
        def messages(config: str) -> list[tuple[str, list]]:
            taken = []
            with Connection(SWEEP_BROKER_URL) as connection:
                channel = connection.default_channel
                while (message := channel.basic_get(f"cascade.sim.{config}", no_ack=True)) is not None:
                    args, _kwargs, _embed = message.decode()
                    taken.append((message.headers["task"], args))
            return taken

    yield Broker()
    client.flushdb()
