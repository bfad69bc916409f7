"""The vecadd run's files; the requests the bucket answered; Celery run inline; an SQS queue the
bucket sends its events to. (`upload`, a run folder into the test bucket, is tests/conftest.py's.)"""

import logging

import pytest

from tests.helpers import TEST_BUCKET, VECADD_CTX, shared_fixture


@pytest.fixture
def vecadd_files() -> dict:
    folder = shared_fixture("accelsim-vecadd-v5")
    return {
        f"traces/stats_ctx_{VECADD_CTX}": (folder / f"stats_ctx_{VECADD_CTX}").read_bytes(),
        f"traces/kernelslist_ctx_{VECADD_CTX}": (folder / f"kernelslist_ctx_{VECADD_CTX}").read_bytes(),
        "traces/kernelslist.g": (folder / "kernelslist.g").read_bytes(),
        f"traces/kernel-1-ctx_{VECADD_CTX}.trace.xz": b"\xfd7zXZ\x00 not downloaded",
        "configs/gpgpusim.config": "-gpgpu_n_clusters 46\n",
    }


@pytest.fixture
def eager(settings):
    """Celery tasks run inline where they are queued; a memory broker, so no queue markers."""
    from cascade import celery_app  # Celery loaded by the tests that use it, as in production

    settings.CELERY_BROKER_URL = "memory://"
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


@pytest.fixture
def s3_log(caplog):
    """`s3_log(method, under)`: the paths (query included) of the `method` requests that moto's
    server, in this process, answered with `under` in their path, from its request log."""
    caplog.set_level(logging.INFO, logger="werkzeug")

    def requests(method: str = "GET", under: str = "") -> list[str]:
        found = []
        for record in caplog.records:
            if record.name != "werkzeug" or not record.args:
                continue
            line = str(record.args[0])  # '"GET /bucket/key HTTP/1.1"'
            verb, _, rest = line.strip('"').partition(" ")
            path = rest.rsplit(" ", 1)[0]
            if verb == method and under in path:
                found.append(path)
        return found

    return requests


@pytest.fixture
def sqs(s3, s3_server):
    import boto3

    return boto3.client("sqs", endpoint_url=s3_server, region_name="us-east-1")


@pytest.fixture
def queue(s3, sqs, settings):
    """A queue S3 sends the bucket's created and removed events to; CASCADE_SQS_QUEUE_URL.
    Messages not deleted come back after a second (the visibility timeout)."""
    url = sqs.create_queue(QueueName="cascade-events", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(
        Bucket=TEST_BUCKET,
        NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]
        },
    )
    settings.CASCADE_SQS_QUEUE_URL = url
    settings.CASCADE_SQS_WAIT_SECONDS = 0
    return url
