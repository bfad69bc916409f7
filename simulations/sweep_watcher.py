"""The sweeps' watcher: nothing lost when a worker or the broker is.

A `running` job whose worker has not reported for CASCADE_SWEEP_LEASE_SECONDS (killed with -9,
its host lost) is queued again and its message published again, until CASCADE_SWEEP_ATTEMPTS
starts, then `failed`. A `queued` job whose message was published more than a lease ago, while
its config's queue holds no message, lost its message (a broker restarted without it, a publish
that failed): it is published again. The fencing of `simulations.sweep_jobs` makes a message
sent twice harmless.

It runs as a Celery beat task (`simulations.tasks.watch_sweeps_task`) and on each pass of
`manage.py ingest_traces --watch`. With nothing overdue it costs one query on the indexes
`sweepjob_lease` (state, heartbeat_at) and `sweepjob_queued` (state, queued_at), and no broker
round trip; with jobs waiting in their queues, one more round trip per config to count them.
"""

import logging
from collections import defaultdict
from dataclasses import dataclass

from cascade_client.broker import config_queue
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from simulations.models import SweepJob, SweepJobState
from simulations.sweep_jobs import lapsed_error, lease, locked_job, requeue_or_fail
from simulations.sweeps import celery_app, publish

logger = logging.getLogger(__name__)


@dataclass
class WatchResult:
    requeued: int = 0  # running jobs whose lease lapsed, queued again
    failed: int = 0  # ... that had no attempt left
    republished: int = 0  # queued jobs whose message was lost, published again

    def summary(self) -> str:
        return (
            f"sweeps: {self.requeued} jobs queued again (lease lapsed), {self.failed} failed, "
            f"{self.republished} messages published again"
        )


def watch_sweeps() -> WatchResult:
    """One pass: the overdue jobs counted by state and config (one query on the indexes); then
    each lapsed lease's fate, and the queued jobs of each config whose queue is empty."""
    cutoff = timezone.now() - lease()
    overdue = (
        SweepJob.objects.filter(
            Q(state=SweepJobState.RUNNING, heartbeat_at__lt=cutoff)
            | Q(state=SweepJobState.QUEUED, queued_at__lt=cutoff)
        )
        .order_by()
        .values_list("state", "config")
        .distinct()
    )
    rows, result = list(overdue), WatchResult()
    if any(state == SweepJobState.RUNNING for state, _ in rows):
        lapsed = SweepJob.objects.filter(state=SweepJobState.RUNNING, heartbeat_at__lt=cutoff)
        for job_id, sweep_id in lapsed.order_by("id").values_list("pk", "sweep_id"):
            _lease_lapsed(sweep_id, job_id, result)
    queued_configs = {config for state, config in rows if state == SweepJobState.QUEUED}
    if queued_configs:
        _republish(queued_configs, result)
    return result


def _lease_lapsed(sweep_id: int, job_id: int, result: WatchResult) -> None:
    with transaction.atomic():
        job = locked_job(sweep_id, job_id)
        now = timezone.now()
        if job.state != SweepJobState.RUNNING or job.heartbeat_at is None or now - job.heartbeat_at < lease():
            return  # it reported, or ended, since the query
        error = lapsed_error(job, now)
        if requeue_or_fail(job, error, now):
            result.requeued += 1
        elif job.state == SweepJobState.FAILED:
            result.failed += 1


def queue_size(connection, queue: str) -> int | None:
    """The messages waiting in `queue` (a passive declare: amqp and redis alike); 0 for a queue
    the broker does not have; None when the broker cannot say."""
    channel = connection.channel()
    try:
        return channel.queue_declare(queue=queue, passive=True).message_count
    except connection.channel_errors:  # no such queue (redis: an empty one is no key at all)
        return 0
    finally:
        try:
            channel.close()
        except Exception:  # a channel the broker closed on its 404
            pass


def _republish(configs: set[str], result: WatchResult) -> None:
    """Publish again the overdue queued jobs of each config whose queue is empty."""
    app = celery_app()
    try:
        with app.connection_for_write() as connection:
            empty = {config for config in configs if queue_size(connection, config_queue(config)) == 0}
    except Exception:  # the broker away: nothing can be published now; the next pass tries
        logger.exception("sweeps: the broker cannot be reached to count the queues")
        return
    for config in sorted(empty):
        now = timezone.now()
        lost = SweepJob.objects.filter(state=SweepJobState.QUEUED, config=config, queued_at__lt=now - lease())
        jobs = list(lost.order_by("id").values_list("pk", "sweep_id"))
        # Stamped, then sent: a job started meanwhile gets a message too, which its fencing makes
        # harmless (its lease is fresh).
        lost.update(queued_at=now)
        by_sweep = defaultdict(list)
        for job_id, sweep_id in jobs:
            by_sweep[sweep_id].append((job_id, config))
        for sweep_id, sweep_jobs in by_sweep.items():
            result.republished += publish(sweep_id, sweep_jobs)
