"""The demo's embedded broker: a sweep job the server's Celery app publishes on kombu's file
transport reaches a real Celery worker given the same `filesystem:///FOLDER` URL, on its config's
queue only, whatever folder either process was started in."""

import json
import os
import subprocess
import sys
import time

import pytest
from cascade_client.broker import config_queue

from tests.tools.support import ROOT

pytestmark = pytest.mark.slow

# The server's side, as the web process and the poller run it: cascade.settings read from the
# environment, then `cascade.celery.app.send_task` by name (it never imports the worker's code).
PUBLISH = """
import json, sys
from cascade.celery import app
from cascade_client.broker import JOB_TASK, config_queue
for sweep_id, job_id, config in json.loads(sys.argv[1]):
    app.send_task(JOB_TASK, args=[sweep_id, job_id], queue=config_queue(config))
"""


def queued(folder, config: str) -> int:
    """Messages waiting on CONFIG's queue: kombu's file transport names each `<id>.<queue>.msg`."""
    return sum(name.partition(".")[2] == f"{config_queue(config)}.msg" for name in os.listdir(folder))


def test_a_job_the_server_publishes_reaches_a_worker_of_its_config_on_the_same_url(tmp_path):
    url = f"filesystem://{tmp_path / 'broker'}"
    received = tmp_path / "received.jsonl"
    worker_folder, server_folder = tmp_path / "worker", tmp_path / "server"
    worker_folder.mkdir()
    server_folder.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "cascade.settings",
        "CASCADE_VAR_DIR": str(tmp_path / "var"),
        "CELERY_BROKER_URL": url,
        "CASCADE_TEST_BROKER": url,
        "CASCADE_TEST_RECEIVED": str(received),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.tools.job_consumer", "worker", "--pool", "solo"]
        + ["-Q", config_queue("SM75_RTX2060"), "--without-mingle", "--without-gossip", "-l", "INFO"],
        cwd=worker_folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        jobs = [[7, 1, "SM86_RTX3070"], [7, 2, "SM75_RTX2060"]]
        subprocess.run(
            [sys.executable, "-c", PUBLISH, json.dumps(jobs)],
            cwd=server_folder,
            env=env,
            check=True,
            timeout=60,
        )
        deadline = time.monotonic() + 60
        while not received.exists() and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert worker.poll() is None, worker.stdout.read()
        assert [json.loads(line) for line in received.read_text().splitlines()] == [[7, 2]]
        # The other config's job waits for a worker of that config.
        assert queued(tmp_path / "broker" / "queue", "SM86_RTX3070") == 1
        assert queued(tmp_path / "broker" / "queue", "SM75_RTX2060") == 0
        # Nothing of the broker's in either process's working folder (kombu's default `control`).
        assert list(worker_folder.iterdir()) == list(server_folder.iterdir()) == []
    finally:
        worker.terminate()
        worker.wait(timeout=60)
