"""The Celery app: `celery -A cascade beat` schedules bucket polls, `celery -A cascade worker` runs them
and parses traces. Configured from Django settings (the `CELERY_*` names), tasks in `ingest/tasks.py`.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cascade.settings")

app = Celery("cascade")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
