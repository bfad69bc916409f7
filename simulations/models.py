"""A simulator's runs of a trace: `Simulation` (the folder `<run>/simulations/<name>/`) and
`SimulatedKernel` (each simulated launch paired with the trace's launch)."""

from django.conf import settings
from django.db import models
from django.utils import timezone

from simulations.shapes import SIMULATION_SUMMARY
from traces.models import KernelContext, KernelName, Trace, TraceKeyForeignKey, TraceState, files_fingerprint


def _doc(name: str) -> str:
    """A served field's help text: its declaration's (`simulations.shapes`), written once."""
    return SIMULATION_SUMMARY.field(name).doc


SIMULATION_NAME_MAX = 100
# The version of the reading of a log and its pairing (simlog.py, pairing.py), recorded on each
# simulation read (as traces' CURRENT_PARSER_VERSION is on each trace). 3: counts past
# simlog.MAX_COUNT, clocks outside 10 to 100,000 MHz and truncated compressed logs fail.
CURRENT_SIMULATION_READER_VERSION = 3


class Simulation(models.Model):
    """A simulator run of a trace: the folder `<prefix><run>/simulations/<name>/`.

    The public fields are the API's SimulationSummary; the log's facts (builds, clock, how it
    ended) come from simulations/simlog.py, the marker's (`simulation.json`) from the uploader. A
    simulation never changes its trace: it is read when its trace is ready, and again when its
    files or its trace's parse change (`parsed_fingerprint` covers both).
    """

    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="simulations")
    name = models.CharField(max_length=SIMULATION_NAME_MAX)
    state = models.CharField(max_length=16, choices=TraceState.choices, default=TraceState.UPLOADING)
    error = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # From simulation.json.
    status = models.CharField(max_length=16, null=True, blank=True, help_text="simulation.json's status.")
    simulator = models.TextField(null=True, blank=True)
    config = models.TextField(null=True, blank=True)
    notes = models.TextField(null=True, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="owned_simulations",
        help_text="The user whose token uploaded it (ingest.owners); empty for one put into the bucket directly.",
    )
    # From the log.
    simulator_build = models.TextField(null=True, blank=True, help_text=_doc("simulator_build"))
    gpgpusim_build = models.TextField(null=True, blank=True, help_text=_doc("gpgpusim_build"))
    core_clock_mhz = models.FloatField(null=True, blank=True)
    complete = models.BooleanField(null=True, blank=True)
    stopped = models.CharField(max_length=16, null=True, blank=True)
    interrupted = models.JSONField(
        default=list,
        blank=True,
        help_text="The launches that did not finish (a cycle limit, a kill, a deadlock): left out of the pairs.",
    )
    # What the simulation's state means, in words.
    reason = models.TextField(
        null=True, blank=True, help_text="Why it waits, or why fewer kernels than simulated were compared."
    )
    fatal = models.JSONField(
        null=True, blank=True, help_text="The simulator's fatal line in the log: {line, text}."
    )
    left_out = models.JSONField(
        null=True, blank=True, help_text="The kernels left out of every total: {kernels, why}."
    )
    run = models.JSONField(
        null=True,
        blank=True,
        help_text="simulation.json's facts of the run (host, times, builds, selection).",
    )
    sim_total_cycles = models.BigIntegerField(null=True, blank=True)
    kernels_simulated = models.BigIntegerField(default=0)
    kernels_compared = models.BigIntegerField(default=0)
    metrics = models.JSONField(null=True, blank=True)
    # Ingestion's bookkeeping, as Trace's.
    files = models.JSONField(default=list, blank=True, help_text="The folder's objects when last listed.")
    files_changed_at = models.DateTimeField(null=True, blank=True)
    parsed_fingerprint = models.CharField(max_length=64, null=True, blank=True)
    reader_version = models.PositiveSmallIntegerField(default=0)
    parse_attempts = models.PositiveSmallIntegerField(default=0)
    trace_seen_at = models.DateTimeField(
        null=True, blank=True, help_text="The trace's updated_at when this simulation was last decided on."
    )

    class Meta:
        ordering = ["-created_at", "name"]
        constraints = [models.UniqueConstraint(fields=["trace", "name"], name="simulation_unique_name")]
        indexes = [
            models.Index(fields=["state"], name="simulation_state"),
            models.Index(fields=["simulator_build"], name="simulation_build"),
            models.Index(fields=["config"], name="simulation_config"),
        ]

    def __str__(self) -> str:
        return f"{self.trace_id}/simulations/{self.name}"

    def files_fingerprint(self) -> str:
        return files_fingerprint(self.files)


class SimulatedKernel(models.Model):
    """One simulated launch, paired with the trace's launch (context, kernel_id).

    The launch's name, step and measured time are copied at pairing time: every metric is
    then a GROUP BY over this table alone (simulations/accuracy.py), and a trace parsed again makes
    its simulations read again (their fingerprint covers the trace's parse).
    """

    simulation = models.ForeignKey(
        Simulation, on_delete=models.CASCADE, related_name="kernels", db_index=False
    )
    trace = TraceKeyForeignKey(
        Trace,
        to_field="key",
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    context = models.SmallIntegerField()
    kernel_id = models.BigIntegerField()
    uid = models.BigIntegerField(help_text="The simulator's kernel uid: its launch order in the log.")
    kernel_name = models.ForeignKey(
        KernelName,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_index=False,
        db_column="name_id",
        db_constraint=False,
    )
    step = models.SmallIntegerField(null=True, blank=True)
    measured_ns = models.BigIntegerField(null=True, blank=True)
    sim_cycles = models.BigIntegerField(null=True, blank=True)
    sim_insn = models.BigIntegerField(null=True, blank=True)
    sim_ns = models.FloatField(null=True, blank=True)
    overlapped = models.BooleanField(default=False)
    launch_context = models.ForeignObject(
        KernelContext,
        from_fields=["trace", "context"],
        to_fields=["trace", "index"],
        on_delete=models.DO_NOTHING,
        related_name="+",
    )

    class Meta:
        ordering = ["simulation", "context", "kernel_id"]
        constraints = [
            # Also the index every read uses: a simulation's launches in the trace's order.
            models.UniqueConstraint(
                fields=["simulation", "context", "kernel_id"], name="simulatedkernel_unique_launch"
            ),
        ]

    def __str__(self) -> str:
        return f"uid {self.uid}: {self.kernel_id}"


class SweepJobState(models.TextChoices):
    """A sweep job's life: queued on its config's Celery queue, running on a worker, then one of
    the ends. `skipped` is decided at creation (the config does not model the trace's GPU
    generation) or by the worker (its tree runs no such SASS); `cancelled` by the sweep's DELETE."""

    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    READY = "ready", "ready"
    FAILED = "failed", "failed"
    SKIPPED = "skipped", "skipped"
    CANCELLED = "cancelled", "cancelled"


SWEEP_JOB_ENDED = (SweepJobState.READY, SweepJobState.FAILED, SweepJobState.SKIPPED, SweepJobState.CANCELLED)


class Sweep(models.Model):
    """Every chosen trace on every chosen config, run by `cascade worker` processes: one
    `SweepJob` per (trace, config). Its state and counts are its jobs' (simulations.sweeps)."""

    name = models.CharField(max_length=SIMULATION_NAME_MAX)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="owned_sweeps",
        help_text="The user whose token created it: only they or staff cancel it.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    configs = models.JSONField(default=list, help_text="The configs asked for, in the order given.")
    request = models.JSONField(
        default=dict, help_text="The traces asked for as given: trace_ids or the list's filters."
    )
    select = models.TextField(
        null=True, blank=True, help_text="`unique` or `step:NAME`: representatives only."
    )
    cover = models.FloatField(default=1.0)
    rerun = models.BooleanField(
        default=False, help_text="Run a job even where this build already simulated it."
    )
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"sweep {self.pk}: {self.name}"


class SweepJob(models.Model):
    """One (trace, config) of a sweep: one simulation, run by one worker at a time.

    `attempt` fences workers: each start gives the job a new attempt number and every later
    report must carry it, so a worker presumed dead (its lease lapsed, the job given to another)
    cannot change the job again. `heartbeat_at` is the lease: a running job whose worker has
    not reported for CASCADE_SWEEP_LEASE_SECONDS is queued again (simulations.sweeps)."""

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="jobs")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="sweep_jobs")
    config = models.CharField(max_length=SIMULATION_NAME_MAX)
    state = models.CharField(max_length=16, choices=SweepJobState.choices, default=SweepJobState.QUEUED)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Starts so far.")
    simulation_name = models.CharField(
        max_length=SIMULATION_NAME_MAX,
        null=True,
        blank=True,
        help_text="The simulation it writes (or found already written by the same build).",
    )
    worker = models.JSONField(
        null=True,
        blank=True,
        help_text="The worker of the last start: {host, process, accel_sim_build, gpgpusim_build}.",
    )
    progress = models.JSONField(
        null=True,
        blank=True,
        help_text="The last report of the running attempt: {kernels_finished, kernels_listed}.",
    )
    error = models.TextField(null=True, blank=True)
    reason = models.TextField(null=True, blank=True, help_text="Why it was skipped or not run again.")
    queued_at = models.DateTimeField(default=timezone.now, help_text="When its message was last published.")
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["sweep", "id"]
        constraints = [
            models.UniqueConstraint(fields=["sweep", "trace", "config"], name="sweepjob_unique_pair"),
        ]
        indexes = [
            models.Index(fields=["state", "heartbeat_at"], name="sweepjob_lease"),
            # The watcher's other half: queued jobs whose message went out more than a lease ago.
            models.Index(fields=["state", "queued_at"], name="sweepjob_queued"),
        ]

    def __str__(self) -> str:
        return f"sweep {self.sweep_id} job {self.pk}: {self.trace_id} on {self.config}"
