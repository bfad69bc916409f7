"""Sweeps: every chosen trace on every chosen config, one `SweepJob` per (trace, config), run by
`cascade worker` processes that consume each config's Celery queue (docs/simulations.md).

Here: a sweep made from its request (`create_sweep`: the traces by id or by the trace list's own
filters, each paired with each config by the SASS generation the config models), its jobs'
messages published once the transaction commits (`publish`), its state and counts, its
cancellation. The worker's side of a job (start, progress, finish) is `simulations.sweep_jobs`,
the lease's watcher `simulations.sweep_watcher`.
"""

import logging
import re
from dataclasses import dataclass

from cascade_client import sass
from cascade_client.broker import JOB_TASK, config_queue
from django.db import transaction
from django.db.models import Count, Q
from django.http import QueryDict
from django.utils import timezone

from simulations.errors import SweepConflict, SweepForbidden, SweepMissing, SweepRefused
from simulations.models import SIMULATION_NAME_MAX, SWEEP_JOB_ENDED, Sweep, SweepJob, SweepJobState
from traces.encoders import format_timestamp
from traces.filters import TraceFilter, trace_filters
from traces.models import Trace, TraceState

logger = logging.getLogger(__name__)

# A sweep's size: its configs, the traces it names, and its jobs (traces x configs).
SWEEP_CONFIGS_MAX = 50
SWEEP_TRACE_IDS_MAX = 10_000
SWEEP_JOBS_MAX = 100_000
# The request's keys besides the trace list's filters (traces.filters.TraceFilter).
REQUEST_KEYS = ("name", "trace_ids", "configs", "select", "cover", "rerun")
FILTER_KEYS = tuple(TraceFilter.base_filters)
CONFIG_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
SWEEP_STATES = ("queued", "running", "ready", "failed", "cancelled")


# --- pairing: which SASS versions a config models (cascade_client.sass) ------------------------


def skip_reason(trace: Trace, config: str) -> str | None:
    """Why the pair is skipped at creation (the config models another GPU generation), or None:
    it is queued (a trace without a known SASS version too: the worker reads its headers)."""
    version, modeled = sass.arch_version(trace.trace_gpu_arch), sass.config_generation(config)
    if version is None or modeled is None or version in modeled:
        return None
    low, high = modeled[0], modeled[-1]
    models = f"SASS {low}" if low == high else f"SASS {low}-{high}"
    return f"{config} models {models}, and the trace is {trace.trace_gpu_arch} (SASS {version})."


def simulation_name(sweep_id: int, config: str, select: str | None) -> str:
    """The job's simulation: `sweep<ID>_<CONFIG>`, `_<select>` sanitised after it, cut to a
    simulation's name (no trailing dot: a folder's name on every system)."""
    what = "" if not select else "_" + re.sub(r"[^A-Za-z0-9._-]", "-", select)
    return f"sweep{sweep_id}_{config}{what}"[:SIMULATION_NAME_MAX].rstrip(".")


# --- creation --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepRequest:
    """A checked `POST /api/sweeps` body (simulations.serializers.SweepCreateRequestSerializer
    reads the types; `filters` holds the trace list's filters as given)."""

    name: str
    configs: list[str]
    trace_ids: list[str] | None = None
    filters: dict | None = None
    select: str | None = None
    cover: float = 1.0
    rerun: bool = False


# What pairing reads of a trace (its files and metadata stay unread).
TRACE_FIELDS = ("id", "state", "trace_gpu_arch", "created_at")


def chosen_traces(request: SweepRequest) -> list[Trace]:
    """The ready traces the request names (in its order), or that its filters find (oldest first)."""
    if request.trace_ids is not None:
        found = Trace.objects.only(*TRACE_FIELDS).in_bulk(request.trace_ids)
        missing = [trace_id for trace_id in request.trace_ids if trace_id not in found]
        if missing:
            raise SweepRefused(
                f"trace_ids: no trace {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"
            )
        waiting = [found[t] for t in request.trace_ids if found[t].state != TraceState.READY]
        if waiting:
            raise SweepConflict(f"trace {waiting[0].pk} is {waiting[0].state}: a sweep runs ready traces")
        return [found[trace_id] for trace_id in dict.fromkeys(request.trace_ids)]
    params = QueryDict(mutable=True)
    for key, value in (request.filters or {}).items():
        params[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    filters = trace_filters(params)
    queryset = filters.filter_queryset(Trace.objects.only(*TRACE_FIELDS).filter(state=TraceState.READY))
    traces = list(queryset.order_by("created_at", "id")[: SWEEP_JOBS_MAX + 1])
    if not traces:
        raise SweepRefused("no ready trace matches the filters")
    return traces


def create_sweep(request: SweepRequest, *, owner) -> Sweep:
    """The sweep and its jobs, in one transaction; each queued job's message is published once
    it commits. Skipped pairs carry their reason."""
    for config in request.configs:
        if not CONFIG_NAME.fullmatch(config):
            raise SweepRefused(f"configs: {config!r} is not a config's name (letters, digits, '.', '_', '-')")
    traces = chosen_traces(request)
    if len(traces) * len(request.configs) > SWEEP_JOBS_MAX:
        raise SweepRefused(
            f"{len(traces)} traces on {len(request.configs)} configs is more than {SWEEP_JOBS_MAX} jobs"
        )
    recorded = {"trace_ids": request.trace_ids} if request.trace_ids is not None else request.filters
    now = timezone.now()
    with transaction.atomic():
        sweep = Sweep.objects.create(
            name=request.name,
            owner=owner,
            created_at=now,
            configs=list(request.configs),
            request=recorded or {},
            select=request.select,
            cover=request.cover,
            rerun=request.rerun,
        )
        jobs = []
        for trace in traces:
            for config in request.configs:
                reason = skip_reason(trace, config)
                state = SweepJobState.QUEUED if reason is None else SweepJobState.SKIPPED
                jobs.append(
                    SweepJob(
                        sweep=sweep,
                        trace=trace,
                        config=config,
                        state=state,
                        reason=reason,
                        queued_at=now,
                        ended_at=None if reason is None else now,
                    )
                )
        SweepJob.objects.bulk_create(jobs, batch_size=2000)
        queued = list(
            SweepJob.objects.filter(sweep=sweep, state=SweepJobState.QUEUED).values_list("pk", "config")
        )
        publish_on_commit(sweep.pk, queued)
    return sweep


# --- publishing ------------------------------------------------------------------------------


def celery_app():
    """The server's Celery app (cascade.celery), loaded when a message is sent."""
    from cascade.celery import app

    return app


def publish(sweep_id: int, jobs: list[tuple[int, str]]) -> int:
    """One `cascade.sweep_job` message per (job id, config) on the config's queue, over one
    connection: JSON, persistent. How many were sent; a broker that cannot be reached is
    logged, and its jobs are published again by the watcher (simulations.sweep_watcher)."""
    if not jobs:
        return 0
    app, sent = celery_app(), 0
    try:
        with app.connection_for_write() as connection:
            for job_id, config in jobs:
                app.send_task(
                    JOB_TASK,
                    args=[sweep_id, job_id],
                    queue=config_queue(config),
                    connection=connection,
                    serializer="json",
                    delivery_mode=2,
                )
                sent += 1
    except Exception:  # the broker away: the jobs stay queued, the watcher sends them again
        logger.exception(
            "sweep %s: %d of %d job messages not published", sweep_id, len(jobs) - sent, len(jobs)
        )
    return sent


def publish_on_commit(sweep_id: int, jobs: list[tuple[int, str]]) -> None:
    """`publish` once the current transaction commits: a worker never asks for a job the
    database does not show yet, and a rolled-back job is never sent."""
    if jobs:
        transaction.on_commit(lambda: publish(sweep_id, jobs))


# --- reading -----------------------------------------------------------------------------------


def with_counts(queryset):
    """Sweeps with their jobs counted by state (`n_<state>`) and started (`n_started`): one GROUP BY."""
    counts = {f"n_{state}": Count("jobs", filter=Q(jobs__state=state)) for state in SweepJobState.values}
    return queryset.select_related("owner").annotate(
        **counts, n_started=Count("jobs", filter=Q(jobs__started_at__isnull=False))
    )


def get_sweep(sweep_id: int) -> Sweep:
    sweep = with_counts(Sweep.objects.filter(pk=sweep_id)).first()
    if sweep is None:
        raise SweepMissing(f"sweep {sweep_id} not found")
    return sweep


def counts(sweep: Sweep) -> dict:
    return {state: getattr(sweep, f"n_{state}") for state in SweepJobState.values}


def sweep_state(sweep: Sweep) -> str:
    """cancelled; queued while no job has started; running while a job is queued or running;
    then ready when every job ended ready or skipped, else failed."""
    if sweep.cancelled_at is not None:
        return "cancelled"
    by_state = counts(sweep)
    if by_state[SweepJobState.QUEUED] or by_state[SweepJobState.RUNNING]:
        waiting = by_state[SweepJobState.QUEUED] + by_state[SweepJobState.SKIPPED]
        untouched = sweep.n_started == 0 and waiting == sum(by_state.values())
        return "queued" if untouched else "running"
    return "failed" if by_state[SweepJobState.FAILED] or by_state[SweepJobState.CANCELLED] else "ready"


def _time(value):
    return None if value is None else format_timestamp(value)


def sweep_dict(sweep: Sweep) -> dict:
    """A sweep as the list shows it (SweepSummary): the detail without its jobs."""
    return {
        "id": sweep.pk,
        "name": sweep.name,
        "owner": sweep.owner.get_username() if sweep.owner is not None else None,
        "state": sweep_state(sweep),
        "created_at": _time(sweep.created_at),
        "configs": sweep.configs,
        "select": sweep.select,
        "cover": sweep.cover,
        "rerun": sweep.rerun,
        "counts": counts(sweep),
    }


def job_dict(job: SweepJob) -> dict:
    worker = {"host": job.worker.get("host"), "process": job.worker.get("process")} if job.worker else None
    return {
        "id": job.pk,
        "trace_id": job.trace_id,
        "config": job.config,
        "state": job.state,
        "attempts": job.attempts,
        "worker": worker,
        "simulation": job.simulation_name,
        "error": job.error,
        "started_at": _time(job.started_at),
        "ended_at": _time(job.ended_at),
        "reason": job.reason,
        "progress": job.progress,
    }


def sweep_detail(sweep_id: int) -> dict:
    """GET /api/sweeps/{id}: the summary and every job, in creation order."""
    sweep = get_sweep(sweep_id)
    jobs = SweepJob.objects.filter(sweep=sweep).order_by("id")
    return {**sweep_dict(sweep), "jobs": [job_dict(job) for job in jobs]}


def sweep_list() -> list[dict]:
    return [sweep_dict(sweep) for sweep in with_counts(Sweep.objects.order_by("-created_at", "-id"))]


# --- cancelling --------------------------------------------------------------------------------


def cancel_sweep(sweep_id: int, *, user) -> dict:
    """Its owner or staff cancel it: its queued jobs end `cancelled` (a worker that takes one of
    their messages is told so); running ones finish. Cancelling again changes nothing."""
    with transaction.atomic():
        sweep = (
            Sweep.objects.select_for_update(of=("self",)).select_related("owner").filter(pk=sweep_id).first()
        )
        if sweep is None:
            raise SweepMissing(f"sweep {sweep_id} not found")
        if not (user.is_staff or (sweep.owner_id is not None and sweep.owner_id == user.pk)):
            whose = f"belongs to {sweep.owner.get_username()}" if sweep.owner else "belongs to no user"
            raise SweepForbidden(f"sweep {sweep_id} {whose}: only its owner or staff may cancel it")
        if sweep.cancelled_at is None:
            now = timezone.now()
            sweep.cancelled_at = now
            sweep.save(update_fields=["cancelled_at"])
            SweepJob.objects.filter(sweep=sweep, state=SweepJobState.QUEUED).update(
                state=SweepJobState.CANCELLED, ended_at=now, reason="the sweep was cancelled"
            )
    return sweep_detail(sweep_id)


def ended(state: str) -> bool:
    return state in SWEEP_JOB_ENDED
