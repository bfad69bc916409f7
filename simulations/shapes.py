"""Each JSON answer of the simulations API's shape, declared once, as the traces' are
(`traces.shapes`, whose machinery and kinds these use): the selectors' columns, the encoders'
keys, the schema's components and the examples' keys come from here."""

from simulations import sweep_shapes
from traces.shapes import (
    BOOLEAN,
    DATETIME,
    EXPIRES_AT,
    INT64,
    INTEGER,
    MULTIPART_UPLOAD,
    NUMBER,
    STATES,
    STRING,
    UPLOAD_PART,
    UPLOAD_TARGET,
    Field,
    Shape,
    many,
    nested,
    stored,
)

# --- a simulation, a trace's simulations, every trace's (simulations.accuracy) -------------------

SIMULATION_METRICS = Shape(
    "SimulationMetrics",
    "Accel-Sim's metrics over the launches with both a measured (x) and a simulated (y) time "
    "(docs/formats.md#accuracy-metrics has the formulas); null when none was compared, counts then 0.",
    (
        Field("mape", NUMBER, "mean(|y-x|/x) in % (0 for x = 0): Accel-Sim's Err.", null=True),
        Field("aggregate_error", NUMBER, "sum|y-x| / sum x, in %.", null=True),
        Field(
            "pearson_r",
            NUMBER,
            "Pearson's correlation (Correl); null under 2 points or a constant side.",
            null=True,
        ),
        Field("rpd", NUMBER, "mean(2|y-x|/(x+y)) in %.", null=True),
        Field("nrmse", NUMBER, "sqrt(mean((y-x)^2)) / mean(x).", null=True),
        Field("within_10_percent", INTEGER, "Launches with |y-x| <= 0.1 x."),
        Field("kernels_compared", INTEGER),
        Field("sim_total_ns", NUMBER, null=True),
        Field("measured_total_ns", INTEGER, null=True),
        Field("total_error", NUMBER, "(sum y - sum x) / sum x, in %, signed.", null=True),
        Field(
            "run_sim_ns", NUMBER, "The run's last complete gpu_tot_sim_cycle at the core clock.", null=True
        ),
        Field(
            "run_measured_ns",
            INTEGER,
            "Every simulated launch's measured time, overlapped ones included; null if one has none.",
            null=True,
        ),
        Field("run_error", NUMBER, "run_sim_ns against run_measured_ns, in %, signed.", null=True),
    ),
)
SIMULATION_FATAL = Shape(
    "SimulationFatal",
    "The simulator's fatal line in its log (unsupported binary version, a trace file `xz` could "
    "not open, an unknown config option, an assertion, a deadlock).",
    (
        Field("line", INTEGER, "Its line number in the log (1: the first)."),
        Field("text", STRING, "The line, as the simulator printed it."),
    ),
)
SIMULATION_LEFT_OUT = Shape(
    "SimulationLeftOut",
    "The kernels left out of every total (both sides): those that did not finish.",
    (Field("kernels", INTEGER), Field("why", STRING, "Null when none was left out.", null=True)),
)
SIMULATION_SELECTION = Shape(
    "SimulationSelection",
    "",
    (
        Field("select", STRING, '"unique" or "step:NAME": which launches were simulated.'),
        Field("cover", NUMBER, null=True),
    ),
)
SIMULATION_RUN = Shape(
    "SimulationRun",
    "What simulation.json says of the run (each key null when it does not say).",
    (
        Field("accel_sim_build", STRING, "The log's `Accel-Sim [build ...]`.", null=True),
        Field("gpgpu_sim_build", STRING, "The log's `GPGPU-Sim ... [build ...]`.", null=True),
        Field("host", STRING, null=True),
        Field("started_at", STRING, "ISO 8601.", null=True),
        Field("ended_at", STRING, "ISO 8601.", null=True),
        Field("exit_status", INTEGER, "The simulator's; it tells little.", null=True),
        nested("selection", SIMULATION_SELECTION, null=True),
    ),
)
SIMULATION_SUMMARY = Shape(
    "SimulationSummary",
    "A simulation of a trace, in any state, without its steps, families and kernels.",
    (
        stored("name", STRING, "Its folder: <run>/simulations/<name>/.", max_length=100),
        stored(
            "state",
            STRING,
            "uploading (waiting: see reason), parsing, ready, or failed (see error): failed when "
            "the log simulated no kernel.",
            enum=STATES,
        ),
        stored("error", STRING, null=True),
        stored("created_at", DATETIME),
        stored("updated_at", DATETIME),
        stored("simulator", STRING, null=True),
        stored("simulator_build", STRING, "Accel-Sim [build ...].", null=True),
        stored("gpgpusim_build", STRING, "GPGPU-Sim version [build ...].", null=True),
        stored("config", STRING, null=True),
        stored("core_clock_mhz", NUMBER, null=True),
        stored("complete", BOOLEAN, null=True),
        stored(
            "stopped",
            STRING,
            "How the log ended early: null (it did not), deadlock, killed, max_cycles, or error "
            "(the simulator quit on its fatal line after some kernels finished).",
            null=True,
            max_length=16,
        ),
        stored(
            "reason",
            STRING,
            "In words: what it waits for (waiting for simulation.json), or why a ready simulation "
            "compared nothing or fewer kernels than it simulated.",
            null=True,
        ),
        nested(
            "fatal",
            SIMULATION_FATAL,
            "The simulator's fatal line, when the log has one.",
            null=True,
            column="fatal",
        ),
        nested("left_out", SIMULATION_LEFT_OUT, column="left_out"),
        nested(
            "run", SIMULATION_RUN, "Null when simulation.json says nothing of it.", null=True, column="run"
        ),
        stored("kernels_simulated", INT64),
        stored("kernels_compared", INT64),
        Field("compared", INTEGER, "Kernels compared (= kernels_compared)."),
        nested(
            "metrics", SIMULATION_METRICS, "Null until the simulation is ready.", null=True, column="metrics"
        ),
        Field(
            "owner",
            STRING,
            "The username whose write token first uploaded it (recorded beside its files, "
            "cascade-owner.json); null for one put into the bucket directly.",
            null=True,
            column="owner__username",
        ),
    ),
)
SIMULATION_LIST_ITEM = Shape(
    "SimulationListItem",
    "A SimulationSummary after the id of the trace it simulates.",
    (stored("trace_id", STRING, "The trace it simulates."), *SIMULATION_SUMMARY.fields),
)
INTERRUPTED_KERNEL = Shape(
    "InterruptedKernel",
    "",
    (
        Field("uid", INTEGER),
        Field("ctx", STRING, null=True),
        Field("kernel_id", INTEGER),
        Field("name", STRING),
        Field("trace_file", STRING, "Its trace header's kernel-N.traceg file.", null=True),
    ),
)
SIMULATION_STEP = Shape(
    "SimulationStep",
    "A step of the trace the simulation has launches in, summed over its compared launches.",
    (
        Field("step", STRING),
        Field("sim_ns", NUMBER, null=True),
        Field("measured_ns", INTEGER, null=True),
        Field("error", NUMBER, "(sim - measured) / measured, in %, signed.", null=True),
    ),
)
KERNEL_FAMILY = Shape(
    "KernelFamily",
    "The compared launches whose demangled names agree without parameters and return type.",
    (
        Field("family", STRING),
        Field("count", INTEGER),
        Field("mape", NUMBER, null=True),
        Field("aggregate_error", NUMBER, null=True),
    ),
)
SIMULATED_KERNEL = Shape(
    "SimulatedKernel",
    "One simulated launch beside the trace's launch it pairs with.",
    (
        Field("ctx", STRING, null=True),
        Field("kernel_id", INTEGER),
        Field("name", STRING),
        Field("step", STRING, "The launch's step (its name in timeline.json).", null=True),
        Field("uid", INTEGER, "The simulator's kernel uid."),
        Field("sim_cycles", INTEGER, "Null for an overlapped launch.", null=True),
        Field("sim_insn", INTEGER, null=True),
        Field("sim_ns", NUMBER, "sim_cycles * 1000 / core_clock_mhz.", null=True),
        Field("measured_ns", INTEGER, null=True),
        Field("error", NUMBER, "(sim_ns - measured_ns) / measured_ns, in %, signed.", null=True),
        Field("overlapped", BOOLEAN, "Its stat block was shared with other kernels."),
    ),
)
SIMULATION_DETAIL = Shape(
    "SimulationDetail",
    "A SimulationSummary, the launches a cycle limit stopped, the steps (trace's order), the "
    "kernel families (most measured time first) and every simulated launch in the trace's order "
    "(steps, families and kernels empty unless the simulation is ready or being read again).",
    (
        *SIMULATION_SUMMARY.fields,
        many("interrupted", INTERRUPTED_KERNEL),
        many("steps", SIMULATION_STEP),
        many("families", KERNEL_FAMILY),
        many("kernels", SIMULATED_KERNEL),
    ),
)


# --- accuracy by simulator build or config (simulations.accuracy.accuracy_by) -------------------

ACCURACY_LEFT_OUT = Shape(
    "AccuracyLeftOut",
    "",
    (Field("simulations", INTEGER), Field("why", STRING, null=True)),
)
SIMULATION_ACCURACY = Shape(
    "SimulationAccuracy",
    "One simulator build (or config) over its ready simulations, pooled over every compared "
    "launch; the key is `simulator_build` or `config`, as `by` asks.",
    (
        Field("simulator_build", STRING, null=True, optional=True),
        Field("config", STRING, null=True, optional=True),
        Field("simulations", INTEGER),
        Field("traces", INTEGER),
        Field("kernels_compared", INTEGER),
        Field("mape", NUMBER, null=True),
        Field("aggregate_error", NUMBER, null=True),
        Field("pearson_r", NUMBER, null=True),
        nested(
            "left_out",
            ACCURACY_LEFT_OUT,
            "Its ready simulations that compared no kernel: not counted in the row.",
        ),
    ),
)


# --- a simulation's upload: the answers (the dicts are ingest.uploads'; the requests are
# simulations.serializers' own, which validate them); each file's is traces.shapes' UPLOAD_TARGET,
# as a pushed run's --------------------------------------------------------------------------------

__all__ = ["MULTIPART_UPLOAD", "UPLOAD_PART", "UPLOAD_TARGET"]  # the simulations' examples read them here

SIMULATION_UPLOAD = Shape(
    "SimulationUpload",
    "Where to PUT each file of the upload, simulation.json last.",
    (Field("trace_id", STRING), Field("name", STRING), EXPIRES_AT, many("files", UPLOAD_TARGET)),
)
SIMULATION_COMPLETE = Shape(
    "SimulationComplete",
    "The simulation registered and its read started: poll `url` until ready or failed.",
    (
        Field("trace_id", STRING),
        Field("name", STRING),
        Field("state", STRING, enum=STATES),
        Field("url", STRING, "The simulation's GET."),
    ),
)


# Every shape declared here, by its component's name.
SHAPES = {
    shape.name: shape
    for shape in (
        SIMULATION_METRICS,
        SIMULATION_FATAL,
        SIMULATION_LEFT_OUT,
        SIMULATION_SELECTION,
        SIMULATION_RUN,
        SIMULATION_SUMMARY,
        SIMULATION_LIST_ITEM,
        INTERRUPTED_KERNEL,
        SIMULATION_STEP,
        KERNEL_FAMILY,
        SIMULATED_KERNEL,
        SIMULATION_DETAIL,
        ACCURACY_LEFT_OUT,
        SIMULATION_ACCURACY,
        SIMULATION_UPLOAD,
        SIMULATION_COMPLETE,
    )
}
SHAPES.update(sweep_shapes.SHAPES)  # the sweeps' answers (simulations.sweep_shapes)
