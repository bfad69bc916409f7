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


class Broker:
    """The broker the server publishes to in a test; `messages(config)` takes the messages waiting
    on a config's queue: [(task name, args)]."""

    def __init__(self, url: str):
        self.url = url

    def messages(self, config: str) -> list[tuple[str, list]]:
        from kombu import Connection, Queue

        taken = []
        with Connection(self.url) as connection:
            queue = Queue(f"cascade.sim.{config}", no_declare=True)(connection.default_channel)
            while (message := queue.get(no_ack=True)) is not None:
                args, _kwargs, _embed = message.decode()
                taken.append((message.headers["task"], args))
        return taken

    def forget(self, *configs: str) -> None:
        """The configs' queues deleted (RabbitMQ keeps a queue; Redis drops an empty one)."""
        from kombu import Connection

        with Connection(self.url) as connection:
            for config in configs:
                channel = connection.channel()
                try:
                    channel.queue_delete(f"cascade.sim.{config}")
                except connection.channel_errors:
                    pass
                finally:
                    channel.close()


@pytest.fixture
def broker(settings):
    """The server publishes to Redis database 11, emptied before and after."""
    import redis

    client = redis.Redis.from_url(SWEEP_BROKER_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.skip("needs Redis on 127.0.0.1:6379 as the sweeps' broker")
    # One test at a time across pytest-xdist's workers: each reads and empties the same queues.
    with client.lock(LOCK, timeout=300, blocking_timeout=300):
        emptied(client)
        settings.CELERY_BROKER_URL = SWEEP_BROKER_URL
        yield Broker(SWEEP_BROKER_URL)
        emptied(client)


LOCK = "sweeps-tests-broker"


def emptied(client) -> None:
    """The database's keys deleted (queues, bindings), the lock's aside."""
    for key in client.scan_iter():
        if key != LOCK.encode():
            client.delete(key)


# RabbitMQ's queues are the machine's: the tests' config is named for them alone.
RABBIT_URL = "amqp://guest:guest@127.0.0.1:5672//"
RABBIT_CONFIG = "SM75_SWEEPSERVERTEST"


@pytest.fixture
def rabbit(settings):
    """The server publishes to the machine's RabbitMQ; the tests' config's queue deleted before
    and after."""
    from kombu import Connection

    try:
        with Connection(RABBIT_URL, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1)
    except Exception:
        pytest.skip("needs RabbitMQ on 127.0.0.1:5672 (guest/guest)")
    settings.CELERY_BROKER_URL = RABBIT_URL
    found = Broker(RABBIT_URL)
    found.forget(RABBIT_CONFIG)
    yield found
    found.forget(RABBIT_CONFIG)
