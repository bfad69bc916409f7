"""A plain Celery worker's app (not `cascade worker`) for tests/tools/test_demo_broker.py: given
a broker URL as `cascade worker --broker` takes it (CASCADE_TEST_BROKER), it runs the task the
server publishes sweep jobs as, writing each job's arguments to CASCADE_TEST_RECEIVED, a line each."""

import json
import os

from cascade_client.broker import JOB_TASK, celery_broker
from celery import Celery

url, options = celery_broker(os.environ["CASCADE_TEST_BROKER"])
app = Celery("job_consumer", broker=url)
app.conf.broker_transport_options = options
app.conf.task_acks_late = True
app.conf.worker_prefetch_multiplier = 1


@app.task(name=JOB_TASK)
def sweep_job(sweep_id: int, job_id: int) -> None:
    with open(os.environ["CASCADE_TEST_RECEIVED"], "a", encoding="utf-8") as out:
        out.write(json.dumps([sweep_id, job_id]) + "\n")
