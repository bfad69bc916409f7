"""Cascade. The Celery app (cascade.celery) is loaded where tasks are: by `celery -A cascade`,
by ingest.tasks, and by `cascade.celery_app` on first use, not by every Django process (Celery,
kombu, amqp, billiard, click and yaml are memory that `ingest_traces` and the web workers never use)."""


def __getattr__(name: str):
    if name == "celery_app":
        from cascade.celery import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
