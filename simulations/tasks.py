"""The sweeps' watcher on a schedule: beat sends `watch_sweeps_task` every
CASCADE_SWEEP_WATCH_SECONDS (cascade/settings.py), as `ingest_traces --watch` runs it each pass."""

import logging

from celery import shared_task

import cascade.celery  # noqa: F401  (shared tasks bind to Cascade's app)
from simulations.sweep_watcher import watch_sweeps

logger = logging.getLogger(__name__)


@shared_task(acks_late=False)
def watch_sweeps_task() -> str:
    """One pass of the watcher. Not acknowledged late: a pass lost with its worker is replaced
    by the next one, and beat's expiry drops passes nobody took in time."""
    result = watch_sweeps()
    if result.requeued or result.failed or result.republished:
        logger.info("%s", result.summary())
    return result.summary()
