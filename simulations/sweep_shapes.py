"""Each JSON answer of the sweeps' routes, declared once as the simulations' are
(`simulations.shapes`, whose registry lists these too): the encoders' keys
(`simulations.sweeps`) and the schema's components come from here."""

from traces.shapes import BOOLEAN, DATETIME, INT64, INTEGER, NUMBER, STRING, Field, Shape, many, nested

JOB_STATES = ("queued", "running", "ready", "failed", "skipped", "cancelled")
SWEEP_STATES = ("queued", "running", "ready", "failed", "cancelled")
FINISH_STATES = ("ready", "failed", "skipped")  # how a worker ends an attempt

SWEEP_COUNTS = Shape(
    "SweepCounts", "Its jobs by state.", tuple(Field(state, INTEGER) for state in JOB_STATES)
)
SWEEP_WORKER = Shape(
    "SweepWorker",
    "The worker of the job's last start.",
    (Field("host", STRING), Field("process", INTEGER, "Its process id.")),
)
SWEEP_PROGRESS = Shape(
    "SweepProgress",
    "The running attempt's last report.",
    (Field("kernels_finished", INT64), Field("kernels_listed", INT64)),
)
SWEEP_JOB = Shape(
    "SweepJob",
    "One (trace, config) of the sweep: one simulation, run by one worker at a time.",
    (
        Field("id", INTEGER),
        Field("trace_id", STRING),
        Field("config", STRING),
        Field(
            "state",
            STRING,
            "skipped at creation where the config's SMxx_ generation does not model the trace's SASS.",
            enum=JOB_STATES,
        ),
        Field("attempts", INTEGER, "Starts so far."),
        nested("worker", SWEEP_WORKER, "The last start's host and process.", null=True),
        Field("simulation", STRING, "Its simulation's name on the trace: `sweep<id>_<config>`.", null=True),
        Field("error", STRING, "Why the last attempt failed.", null=True),
        Field("started_at", DATETIME, null=True),
        Field("ended_at", DATETIME, null=True),
        Field("reason", STRING, "Why it was skipped, or not run again.", null=True),
        nested("progress", SWEEP_PROGRESS, "Kernels finished of those listed.", null=True),
    ),
)
SWEEP_SUMMARY = Shape(
    "SweepSummary",
    "A sweep without its jobs.",
    (
        Field("id", INTEGER),
        Field("name", STRING),
        Field("owner", STRING, "The username of the token that created it.", null=True),
        Field(
            "state",
            STRING,
            "cancelled; queued until a job starts; running while a job is queued or running; then "
            "ready (every job ready or skipped), else failed.",
            enum=SWEEP_STATES,
        ),
        Field("created_at", DATETIME),
        many("configs", STRING, "As asked, in order."),
        Field("select", STRING, '"unique" or "step:NAME": the launches each job simulates.', null=True),
        Field("cover", NUMBER, "The share of the time `select` covers (1: all)."),
        Field("rerun", BOOLEAN, "Run jobs the same Accel-Sim build already simulated."),
        nested("counts", SWEEP_COUNTS, "Its jobs by state."),
    ),
)
SWEEP_DETAIL = Shape("SweepDetail", "A sweep and its jobs.", (*SWEEP_SUMMARY.fields, many("jobs", SWEEP_JOB)))
SWEEP_JOB_START = Shape(
    "SweepJobStart",
    "Run it (`run` true: the attempt and what to run) or not (`state`, `why`).",
    (
        Field("run", BOOLEAN),
        Field("attempt", INTEGER, "Every later report of the job carries it.", optional=True),
        Field("trace_id", STRING, optional=True),
        Field("config", STRING, optional=True),
        Field("simulation", STRING, "The name to upload the simulation as.", optional=True),
        Field("select", STRING, null=True, optional=True),
        Field("cover", NUMBER, optional=True),
        Field("sass_version", INTEGER, "From the trace's trace_gpu_arch.", null=True, optional=True),
        Field("state", STRING, enum=JOB_STATES, optional=True),
        Field("why", STRING, optional=True),
    ),
)
SWEEP_JOB_CONTINUE = Shape("SweepJobContinue", "", (Field("continue", BOOLEAN),))

SHAPES = {
    shape.name: shape
    for shape in (
        SWEEP_COUNTS,
        SWEEP_WORKER,
        SWEEP_PROGRESS,
        SWEEP_JOB,
        SWEEP_SUMMARY,
        SWEEP_DETAIL,
        SWEEP_JOB_START,
        SWEEP_JOB_CONTINUE,
    )
}
