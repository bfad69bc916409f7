"""The sweeps' watcher: nothing lost when a worker or the broker is.

A `running` job whose worker has not reported for CASCADE_SWEEP_LEASE_SECONDS (killed with -9,
its host lost) is queued again and its message published again, until CASCADE_SWEEP_ATTEMPTS
starts, then `failed`. A `queued` job whose message was published more than a lease ago, while
its config's queue holds no message, lost its message (a broker restarted without it, a publish
that failed): it is published again. The fencing of `simulations.sweep_jobs` makes a message
sent twice harmless.

It runs as a Celery beat task (`simulations.tasks.watch_sweeps_task`) and on each pass of
`manage.py ingest_traces --watch`. With nothing overdue it costs one query on the
`sweepjob_lease` index (state, heartbeat_at) and no broker round trip.
"""

import logging
from collections import defaultdict
from dataclasses import dataclass

from cascade_client.broker import config_queue
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from simulations.models import SweepJob, SweepJobState
from simulations.sweep_jobs import lease, locked_job, requeue_or_fail
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
    """One pass: the overdue jobs, in one query; then each one's fate."""
    now = timezone.now()
    cutoff = now - lease()
    overdue = list(
        SweepJob.objects.filter(
            Q(state=SweepJobState.RUNNING, heartbeat_at__lt=cutoff)
            | Q(state=SweepJobState.QUEUED, queued_at__lt=cutoff)
        ).values_list("pk", "sweep_id", "state", "config")
    )
    result = WatchResult()
    lost = defaultdict(list)  # config -> [(sweep_id, job_id)]
    for job_id, sweep_id, state, config in overdue:
        if state == SweepJobState.RUNNING:
            _lease_lapsed(sweep_id, job_id, result)
        else:
            lost[config].append((sweep_id, job_id))
    if lost:
        _republish(lost, result)
    return result


def _lease_lapsed(sweep_id: int, job_id: int, result: WatchResult) -> None:
    with transaction.atomic():
        job = locked_job(sweep_id, job_id)
        now = timezone.now()
        if job.state != SweepJobState.RUNNING or job.heartbeat_at is None or now - job.heartbeat_at < lease():
            return  # it reported, or ended, since the query
        worker = job.worker or {}
        seconds = int((now - job.heartbeat_at).total_seconds())
        error = (
            f"its worker ({worker.get('host')}, process {worker.get('process')}) stopped reporting "
            f"during attempt {job.attempts} (no report for {seconds} s)"
        )
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


def _republish(lost: dict[str, list[tuple[int, int]]], result: WatchResult) -> None:
    """Publish again the queued jobs of each config whose queue is empty."""
    app = celery_app()
    try:
        with app.connection_for_write() as connection:
            empty = {config for config in lost if queue_size(connection, config_queue(config)) == 0}
    except Exception:  # the broker away: nothing can be published now; the next pass tries
        logger.exception("sweeps: the broker cannot be reached to count the queues")
        return
    cutoff = timezone.now() - lease()
    for config in sorted(empty):
        by_sweep = defaultdict(list)
        for sweep_id, job_id in lost[config]:
            # Only those still queued and overdue: a start or a cancel may have come meanwhile.
            if SweepJob.objects.filter(pk=job_id, state=SweepJobState.QUEUED, queued_at__lt=cutoff).update(
                queued_at=timezone.now()
            ):
                by_sweep[sweep_id].append((job_id, config))
        for sweep_id, jobs in by_sweep.items():
            result.republished += publish(sweep_id, jobs)
