"""A sweep job as the worker that runs it reports it: `start_job`, `report_progress`,
`finish_job` (the routes `POST /api/sweeps/{id}/jobs/{job_id}/start|progress|finish`).

Each start gives the job a new attempt (`SweepJob.attempts`); progress and finish must carry it,
so a worker presumed dead (its lease lapsed, the job given to another) cannot change the job
again: its reports are 409s. The job's row is locked (select_for_update) and every change is a
conditional UPDATE on the state and attempt it was read with, so two workers that take the same
job at once (a redelivered message) never both run it, on PostgreSQL or SQLite.
"""

from dataclasses import dataclass
from datetime import timedelta

from cascade_client.sass import arch_version
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from simulations.errors import SweepConflict, SweepMissing
from simulations.models import Simulation, SweepJob, SweepJobState
from simulations.sweeps import ended, job_dict, publish_on_commit, simulation_name
from traces.models import TraceState


@dataclass(frozen=True)
class Worker:
    """Who starts a job: its host and process, its builds, what its Accel-Sim tree runs."""

    host: str
    process: int
    accel_sim_build: str | None = None
    gpgpusim_build: str | None = None
    configs: tuple[str, ...] = ()
    sass_versions: tuple[int, ...] = ()

    def facts(self) -> dict:
        return {
            "host": self.host,
            "process": self.process,
            "accel_sim_build": self.accel_sim_build,
            "gpgpusim_build": self.gpgpusim_build,
        }


def lease() -> timedelta:
    return timedelta(seconds=settings.CASCADE_SWEEP_LEASE_SECONDS)


def locked_job(sweep_id: int, job_id: int) -> SweepJob:
    """The job, its row locked until the transaction ends; SweepMissing for none in the sweep."""
    job = (
        SweepJob.objects.select_for_update(of=("self",))
        .select_related("sweep", "trace")
        .filter(pk=job_id, sweep_id=sweep_id)
        .first()
    )
    if job is None:
        raise SweepMissing(f"job {job_id} of sweep {sweep_id} not found")
    return job


def _changed(job: SweepJob, **fields) -> bool:
    """Write `fields` if the job is still in the state and attempt it was read with."""
    done = SweepJob.objects.filter(pk=job.pk, state=job.state, attempts=job.attempts).update(**fields)
    if done:
        for key, value in fields.items():
            setattr(job, key, value)
    return bool(done)


def not_run(job: SweepJob, why: str) -> dict:
    return {"run": False, "state": job.state, "why": why}


def start_job(sweep_id: int, job_id: int, worker: Worker) -> dict:
    """The start route's answer: run it (with a new attempt), or why not."""
    with transaction.atomic():
        job = locked_job(sweep_id, job_id)
        now = timezone.now()
        if ended(job.state):
            why = (
                "the sweep was cancelled"
                if job.state == SweepJobState.CANCELLED
                else f"the job ended {job.state}"
            )
            return not_run(job, f"{why}.")
        if job.state == SweepJobState.RUNNING and job.heartbeat_at and now - job.heartbeat_at < lease():
            running = job.worker or {}
            return not_run(
                job,
                f"attempt {job.attempts} runs on {running.get('host')} (process {running.get('process')}), "
                "whose lease is fresh.",
            )
        if job.sweep.cancelled_at is not None:  # its run's lease lapsed: it does not run again
            _changed(job, state=SweepJobState.CANCELLED, ended_at=now, reason="the sweep was cancelled")
            return not_run(job, "the sweep was cancelled.")
        refused = _refusal(job, worker, now)
        if refused is not None:
            return refused
        name = simulation_name(job.sweep_id, job.config, job.sweep.select)
        started = _changed(
            job,
            state=SweepJobState.RUNNING,
            attempts=job.attempts + 1,
            worker=worker.facts(),
            simulation_name=name,
            started_at=now,
            heartbeat_at=now,
            progress=None,
            error=None,
            reason=None,
            ended_at=None,
        )
        if not started:  # another start changed it between our read and our write (SQLite)
            job.refresh_from_db()
            return not_run(job, "another worker started it at the same moment.")
    return {
        "run": True,
        "attempt": job.attempts,
        "trace_id": job.trace_id,
        "config": job.config,
        "simulation": name,
        "select": job.sweep.select,
        "cover": job.sweep.cover,
        "sass_version": arch_version(job.trace.trace_gpu_arch),
    }


def lapsed_error(job: SweepJob, now) -> str:
    """What a running job whose lease lapsed says of its worker."""
    worker = job.worker or {}
    seconds = int((now - job.heartbeat_at).total_seconds()) if job.heartbeat_at else 0
    return (
        f"its worker ({worker.get('host')}, process {worker.get('process')}) stopped reporting "
        f"during attempt {job.attempts} (no report for {seconds} s)"
    )


def _refusal(job: SweepJob, worker: Worker, now) -> dict | None:
    """Why this worker does not run the job: an earlier attempt's simulation is ready, a lapsed
    last attempt (failed), its tree lacks the config (left queued), runs no such SASS (skipped),
    or the same build's simulation is ready."""
    own = simulation_name(job.sweep_id, job.config, job.sweep.select)
    if Simulation.objects.filter(trace_id=job.trace_id, name=own, state=TraceState.READY).exists():
        # An earlier attempt uploaded it, and its worker was lost before it said so.
        reason = f"simulation {own}, an earlier attempt's, is ready."
        _changed(job, state=SweepJobState.READY, simulation_name=own, reason=reason, ended_at=now)
        return not_run(job, reason)
    if job.state == SweepJobState.RUNNING and job.attempts >= settings.CASCADE_SWEEP_ATTEMPTS:
        _changed(job, state=SweepJobState.FAILED, error=lapsed_error(job, now), ended_at=now)
        return not_run(job, f"its last attempt's worker stopped reporting: {job.error}.")
    if worker.configs and job.config not in worker.configs:
        # Not published again at once (a worker misconfigured to take the queue would loop): the
        # watcher publishes it once its queue is empty a lease after its last message.
        _changed(job, state=SweepJobState.QUEUED)
        return not_run(job, f"this worker's Accel-Sim has no config {job.config}; the job stays queued.")
    version = arch_version(job.trace.trace_gpu_arch)
    if version is not None and worker.sass_versions and version not in worker.sass_versions:
        runs = "/".join(map(str, sorted(worker.sass_versions)))
        reason = f"the worker's Accel-Sim runs SASS {runs}, and the trace is SASS {version}."
        _changed(job, state=SweepJobState.SKIPPED, reason=reason, ended_at=now)
        return not_run(job, reason)
    if job.sweep.rerun or not worker.accel_sim_build:
        return None
    done = ready_simulation(job, worker.accel_sim_build)
    if done is None:
        return None
    reason = f"simulation {done.name} of the same build ({worker.accel_sim_build}) is ready; the sweep has no rerun."
    _changed(job, state=SweepJobState.READY, simulation_name=done.name, reason=reason, ended_at=now)
    return not_run(job, reason)


def selection(select: str | None, cover: float | None) -> tuple | None:
    """A selection as compared: (select, cover), a cover not given being 1 (all), or None."""
    return None if not select else (select, 1.0 if cover is None else float(cover))


def ready_simulation(job: SweepJob, accel_sim_build: str) -> Simulation | None:
    """A ready simulation of the job's (trace, config, selection) by `accel_sim_build`."""
    wanted = selection(job.sweep.select, job.sweep.cover)
    candidates = Simulation.objects.filter(
        trace_id=job.trace_id, config=job.config, simulator_build=accel_sim_build, state=TraceState.READY
    ).order_by("-created_at")
    for simulation in candidates:
        found = (simulation.run or {}).get("selection") or {}
        if selection(found.get("select"), found.get("cover")) == wanted:
            return simulation
    return None


def fenced_job(sweep_id: int, job_id: int, attempt: int) -> SweepJob:
    """The job locked, if `attempt` is still its running attempt; else SweepConflict (a 409)."""
    job = locked_job(sweep_id, job_id)
    if job.state != SweepJobState.RUNNING or job.attempts != attempt:
        now = f"running attempt {job.attempts}" if job.state == SweepJobState.RUNNING else job.state
        raise SweepConflict(f"attempt {attempt} is no longer job {job_id}'s: the job is {now}")
    return job


def report_progress(
    sweep_id: int, job_id: int, attempt: int, kernels_finished: int, kernels_listed: int
) -> dict:
    """The worker's progress: the lease renewed. One conditional UPDATE when the attempt holds."""
    progress = {"kernels_finished": kernels_finished, "kernels_listed": kernels_listed}
    done = SweepJob.objects.filter(
        pk=job_id, sweep_id=sweep_id, state=SweepJobState.RUNNING, attempts=attempt
    ).update(progress=progress, heartbeat_at=timezone.now())
    if not done:
        with transaction.atomic():
            fenced_job(sweep_id, job_id, attempt)  # raises: missing, or stale
    return {"continue": True}


def finish_job(sweep_id: int, job_id: int, attempt: int, state: str, *, error=None, reason=None) -> dict:
    """The attempt's end: `ready` (once its simulation is), `failed` (queued again while attempts
    remain), `skipped`. The job as the detail shows it."""
    with transaction.atomic():
        job = fenced_job(sweep_id, job_id, attempt)
        now = timezone.now()
        if state == SweepJobState.READY:
            simulation = Simulation.objects.filter(trace_id=job.trace_id, name=job.simulation_name).first()
            if simulation is not None and simulation.state == TraceState.READY:
                _changed(job, state=SweepJobState.READY, ended_at=now, heartbeat_at=now)
                return job_dict(job)
            state, error = SweepJobState.FAILED, _not_ready(job, simulation)
            _changed(job, state=state, error=error, ended_at=now, heartbeat_at=now)
        elif state == SweepJobState.SKIPPED:
            _changed(job, state=state, reason=reason, ended_at=now, heartbeat_at=now)
        else:
            requeue_or_fail(job, error or "the worker gave no reason", now)
    return job_dict(job)


def _not_ready(job: SweepJob, simulation: Simulation | None) -> str:
    if simulation is None:
        return f"simulation {job.simulation_name} of trace {job.trace_id} was not uploaded"
    if simulation.error:
        return simulation.error
    return f"simulation {simulation.name} of trace {job.trace_id} is {simulation.state}, not ready"


def requeue_or_fail(job: SweepJob, error: str, now) -> bool:
    """A failed attempt (or a lapsed lease): queued again and published while it has attempts
    left (CASCADE_SWEEP_ATTEMPTS), else `failed` with `error`. True if queued again."""
    if job.sweep.cancelled_at is not None:
        _changed(job, state=SweepJobState.CANCELLED, error=error, ended_at=now)
        return False
    if job.attempts < settings.CASCADE_SWEEP_ATTEMPTS:
        if _changed(job, state=SweepJobState.QUEUED, error=error, queued_at=now, progress=None):
            publish_on_commit(job.sweep_id, [(job.pk, job.config)])
            return True
        return False
    _changed(job, state=SweepJobState.FAILED, error=error, ended_at=now)
    return False
