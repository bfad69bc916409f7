# Loaded with Django so that `shared_task`s bind to Cascade's app (broker, queue, limits).
from cascade.celery import app as celery_app

__all__ = ("celery_app",)
