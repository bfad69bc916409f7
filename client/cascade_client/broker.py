"""The broker a sweep's jobs travel on, as the server (cascade/settings.py) and `cascade worker`
both name it: one URL, so that the demo's banner can print a worker command that works.

RabbitMQ (`amqp://`) and Redis (`redis://`) URLs pass through as Celery takes them. The demo's
embedded broker is kombu's file transport, which Celery configures with folders rather than a
URL; `filesystem:///ABS/FOLDER` names it here: messages are files in FOLDER/queue, read and
written by every process given the same URL (one machine only).
"""

import os
from pathlib import Path
from urllib.parse import urlsplit

# The queue of one tested config: a worker consumes the queues of the configs its tree has.
QUEUE_PREFIX = "cascade.sim."
# The task a sweep job's message names; the server publishes it by name (it never imports the worker).
JOB_TASK = "cascade.sweep_job"


def config_queue(config: str) -> str:
    """`cascade.sim.<CONFIG>`, after CASCADE_QUEUE_PREFIX when set: deployments (or test runs)
    sharing one broker keep apart by it, the server and its workers given the same."""
    return os.environ.get("CASCADE_QUEUE_PREFIX", "") + QUEUE_PREFIX + config


def celery_broker(url: str) -> tuple[str, dict]:
    """Celery's `broker_url` and `broker_transport_options` for URL."""
    parts = urlsplit(url)
    if parts.scheme != "filesystem":
        return url, {}
    folder = Path(parts.path)
    if parts.netloc or not parts.path or not folder.is_absolute():  # filesystem://var/x: host "var"
        raise ValueError(f"{url}: a file broker is filesystem:///ABSOLUTE/FOLDER")
    queue, control = folder / "queue", folder / "control"
    for made in (queue, control):
        made.mkdir(parents=True, exist_ok=True)
    # The exchanges' bindings (kombu's default: `control` in the process's working folder) beside
    # the messages, so that every process given the URL routes alike, wherever it was started.
    options = {
        "data_folder_in": str(queue),
        "data_folder_out": str(queue),
        "control_folder": str(control),
        "store_processed": False,
    }
    return "filesystem://", options
