"""S3's event notifications, read from an SQS queue (ingest.events decides what they mean).

The SQS client is the `traces` storage's kind (ingest.storage: its session, region,
credentials and client config), at CASCADE_SQS_ENDPOINT_URL, else at the S3 endpoint (moto's
and LocalStack's servers answer both; on AWS both are None and boto3 finds the region's).
django-storages has nothing for SQS. One client a process: only the events loop's thread uses it.
"""

import threading
from dataclasses import dataclass

from django.conf import settings

from ingest.storage import TraceStorage, traces

_made: tuple[TraceStorage, object] | None = None  # (the storage it was made from, client)
_lock = threading.Lock()


def sqs_client():
    """The events loop's SQS client; a new one once the storage is rebuilt (new settings)."""
    global _made
    storage = traces()
    with _lock:
        if _made is None or _made[0] is not storage:
            endpoint = settings.CASCADE_SQS_ENDPOINT_URL or storage.endpoint_url
            _made = (storage, storage.client("sqs", endpoint_url=endpoint))
        return _made[1]


@dataclass(frozen=True)
class QueueMessage:
    message_id: str
    receipt: str
    body: str


def receive_messages(queue_url: str, *, wait_seconds: int, max_messages: int = 10) -> list[QueueMessage]:
    """Up to `max_messages` (SQS's most: 10) of the queue's messages, waiting up to `wait_seconds`
    for the first (a long poll: one request, not one a second)."""
    response = sqs_client().receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=max_messages, WaitTimeSeconds=wait_seconds
    )
    return [
        QueueMessage(message["MessageId"], message["ReceiptHandle"], message.get("Body") or "")
        for message in response.get("Messages", ())
    ]


def delete_messages(queue_url: str, messages: list[QueueMessage]) -> list[str]:
    """Delete `messages` (at most 10: one request); the ids of those SQS did not delete (their
    receipt expired: redelivered, and the next delivery finds nothing left to do)."""
    if not messages:
        return []
    response = sqs_client().delete_message_batch(
        QueueUrl=queue_url,
        Entries=[{"Id": str(index), "ReceiptHandle": m.receipt} for index, m in enumerate(messages)],
    )
    return [messages[int(failed["Id"])].message_id for failed in response.get("Failed", ())]
