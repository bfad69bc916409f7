"""Simulations in the bucket (docs/decisions/0005): `<prefix><run>/simulations/<name>/`, registered when
their first file lands, read when their trace is ready, and again when either changes.

A simulation folder holds the simulator's stdout (`sim.log`, `sim.log.gz` or `sim.log.xz`),
maybe the `gpgpusim.config` it ran with, and last `simulation.json`, the completion marker;
beside them Cascade's own `cascade-owner.json` (ingest.owners: who uploaded it through the API,
read into `Simulation.owner` whenever the folder is decided on) and `.staging/`, where an API
upload's files wait until its `/complete` checks them (ingest.uploads): no simulation's file,
never registered or read.
The log is streamed through simulations/simlog.py, then each simulated kernel is paired with the
trace's launch:

- trace-driven logs: uid k is the k-th trace header, `kernel-N[-ctx_0x...].traceg`, which
  names kernel id N of that context (of the trace's only context when it names none);
- PTX-mode logs (no trace headers): uid k is the trace's k-th launch, in the API's order,
  as Accel-Sim's own scripts pair them;
- every pair's kernel name is checked: the first mismatch fails the simulation, naming the
  uid, the trace file and both names.

Which runs a pass looks at (`simulation_pass`): those the trace scan listed or rechecked
(new, unfinished, due for their ready recheck), those whose `simulations/` objects the polling
watch or the reconciler's sweep found differing from the database (ingest.sweep), runs with a
simulation parsing, registered but not decided on, or read by an older reader while its trace
is ready, and runs whose trace changed since their simulations were read. A folder waiting
for its marker keeps its fingerprint and is not among them: it costs nothing until its
listing changes. A listing of `<run>/simulations/` each: the cost follows the work in progress.
`read_simulations_now(run)` reads one run's simulations at once (the upload's /complete route).
"""

import logging
import lzma
import re
import time
import zlib
from collections.abc import Iterable, Iterator

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.db.models import F, Q

from ingest import bucket, failures, owners
from ingest.bucket import S3Object
from ingest.listing import inventory
from ingest.paths import path_problem
from ingest.simulation_marker import (
    MARKER_NAME,
    MAX_CLOCK_MHZ,
    MIN_CLOCK_MHZ,
    is_clock,
    read_marker,
    run_facts,
)
from simulations import services
from simulations.accuracy import simulation_metrics
from simulations.errors import SimulationInputError
from simulations.models import CURRENT_SIMULATION_READER_VERSION, SIMULATION_NAME_MAX, Simulation
from simulations.pairing import Pairing, fatal_words
from simulations.services import SimulationChange, simulation_fingerprint
from simulations.simlog import SimLog, read_sim_log_chunks
from traces.locks import trace_lock
from traces.models import Trace, TraceState
from traces.storable_text import is_storable, unstorable_character

logger = logging.getLogger(__name__)

FOLDER = "simulations/"
LOG_NAMES = ("sim.log", "sim.log.gz", "sim.log.xz")
CONFIG_NAME = "gpgpusim.config"
NAME = re.compile(rf"[A-Za-z0-9._-]{{1,{SIMULATION_NAME_MAX}}}")
# An API upload's files until its /complete moves them into the folder (ingest.uploads).
STAGING = ".staging/"
DECOMPRESSED_CHUNK = 1024 * 1024


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a simulation's folder, in a sentence (None: it can): its
    characters, then the project's one path rule (`ingest.paths`), as one folder's name: no `.`
    or `..`, no Windows device name (`CON`, `nul.txt`), no trailing dot or space."""
    if not NAME.fullmatch(name):
        return (
            f"a simulation's name is letters, digits, '.', '_' and '-', at most {SIMULATION_NAME_MAX} "
            f"characters: {name[:200]!r}"
        )
    problem = path_problem(name)
    if problem is not None:
        return f"a simulation's name is a folder's name, and {name!r} is {problem}"
    return None


# --- Which runs, and their listings --------------------------------------------------------


def simulation_pass(
    run_ids: Iterable[str] = (),
    *,
    listings: dict[str, list[S3Object]] | None = None,
    trace_id: str | None = None,
) -> list[SimulationChange]:
    """Register and read the simulations of `run_ids` (the runs a trace pass listed or
    rechecked) and of the runs with simulation work (runs_with_simulation_work); with
    `trace_id`, of that run only. `listings` holds the `simulations/` objects of runs already
    listed this pass (no second listing). One run's S3 trouble is left to the next pass."""
    listings = listings or {}
    runs = {trace_id} if trace_id is not None else set(run_ids) | runs_with_simulation_work()
    runs = {run_id for run_id in runs if is_storable(run_id)}  # no trace: listing.storable_run_id
    runs = sorted(Trace.objects.filter(pk__in=runs).values_list("pk", flat=True)) if runs else []

    def simulation_objects(run_id: str) -> list[S3Object]:  # on an S3 thread
        known = listings.get(run_id)
        return bucket.list_simulation_objects(run_id) if known is None else known

    changes: list[SimulationChange] = []
    for run_id, listed in bucket.overlapped(simulation_objects, runs):
        try:
            objects = listed.result()
        except (BotoCoreError, ClientError) as problem:
            logger.warning("%s: cannot list its simulations: %s", run_id, problem)
            continue
        changes += ingest_simulations(run_id, objects)
    return changes


def read_simulations_now(run_id: str) -> list[SimulationChange]:
    """Read the run's simulations at once, without waiting for a pass: its `simulations/`
    folder listed, registered and each simulation decided on (read when its marker is there
    and its trace ready). What the upload's `/complete` route calls (in a Celery task, or on a
    background thread), as `ingest_traces --trace RUN` would for the whole run."""
    return simulation_pass(trace_id=run_id)


def runs_with_simulation_work() -> set[str]:
    """Runs whose simulations need a look without a listing telling so: one parsing while its
    trace is ready (a pass died mid-way), one uploading whose listing was registered but not
    decided on, one an older reader read, or one whose trace changed since it was decided on. A
    folder decided to wait
    for its marker is not: it is looked at again when its listing changes (a watch, an event,
    the ready recheck), as a trace's is."""
    undecided = Q(parsed_fingerprint__isnull=True) | Q(files_changed_at__gte=F("updated_at"))
    work = Simulation.objects.filter(
        Q(state=TraceState.PARSING, trace__state=TraceState.READY)
        | (Q(state=TraceState.UPLOADING, trace__state=TraceState.READY) & undecided)
        # Read by an older reader (CURRENT_SIMULATION_READER_VERSION): read again once.
        | Q(
            state__in=(TraceState.READY, TraceState.FAILED),
            trace__state=TraceState.READY,
            reader_version__lt=CURRENT_SIMULATION_READER_VERSION,
        )
        | Q(trace_seen_at__isnull=True)
        | Q(trace_seen_at__lt=F("trace__updated_at"))
    )
    return set(work.values_list("trace_id", flat=True).distinct())


def folders(run_id: str, objects: list[S3Object]) -> tuple[dict[str, list[S3Object]], list[str]]:
    """The listing of `<run>/simulations/` by simulation name, and the keys that are in no
    simulation's folder (a file directly in `simulations/`, or one folder too deep). An upload's
    staged files (`<name>/.staging/`) are neither: no simulation's files until its /complete."""
    base = bucket.run_prefix(run_id) + FOLDER
    by_name: dict[str, list[S3Object]] = {}
    stray = []
    for obj in objects:
        name, slash, rest = obj.key[len(base) :].partition("/")
        if slash and rest.startswith(STAGING):
            continue
        if not slash or not rest or "/" in rest:
            stray.append(obj.key)
        else:
            by_name.setdefault(name, []).append(obj)
    return by_name, stray


# --- One run's simulations -----------------------------------------------------------------


def ingest_simulations(run_id: str, objects: list[S3Object]) -> list[SimulationChange]:
    """Register the run's simulation folders from their listing, then decide on each."""
    trace = Trace.objects.filter(pk=run_id).first()
    if trace is None:
        return []
    by_name, stray = folders(run_id, objects)
    if stray:
        logger.warning("%s: not in a simulation's folder, ignored: %s", run_id, ", ".join(stray[:5]))
    storable = {}
    for name, listed in by_name.items():
        if len(name) > SIMULATION_NAME_MAX or unstorable_character(name) is not None:
            logger.warning("%s: simulation folder %r: a name the database cannot hold, ignored", run_id, name)
        else:
            storable[name] = listed
    changes = []
    registered = services.simulations_register(
        trace, {name: inventory(listed, every_path=True) for name, listed in storable.items()}
    )
    for simulation, how in registered:
        if how == "deleted":
            logger.info("%s: its folder is gone: deleted", simulation)
            changes.append(SimulationChange(run_id, simulation.name, simulation.state, "deleted"))
            continue
        old_state = None if how == "created" else simulation.state
        try:
            change = decide_simulation(trace, simulation.name, storable[simulation.name])
        except failures.ParseAttemptFailed as error:  # logged with its traceback, and counted
            logger.warning("%s: %s", simulation, error)
            continue
        except Exception:  # transient (S3, the database): the next pass tries again
            logger.exception("%s: ingestion error, the next pass tries again", simulation)
            continue
        if change is not None:
            changes.append(SimulationChange(run_id, simulation.name, old_state, *change))
        elif how != "unchanged":
            changes.append(SimulationChange(run_id, simulation.name, old_state, simulation.state))
    return changes


def decide_simulation(trace: Trace, name: str, objects: list[S3Object]):
    """Wait, fail or read one simulation, its lock held; (new state, kernels compared, error)
    when it was decided on, None when another pass holds it or nothing changed."""
    with trace_lock(f"{trace.id}/{FOLDER}{name}") as acquired:
        if not acquired:
            return None
        simulation = Simulation.objects.filter(trace=trace, name=name).first()
        if simulation is None or simulation.files != inventory(objects, every_path=True):
            return None  # deleted, or a newer listing registered by another pass: it decides
        trace = Trace.objects.get(pk=trace.pk)  # its state now
        fingerprint = simulation_fingerprint(simulation.files, trace)
        seen = trace.updated_at
        if simulation.parsed_fingerprint == fingerprint and simulation.state != TraceState.PARSING:
            if simulation.trace_seen_at != seen:
                services.simulation_seen(simulation, seen)
            return None
        files = {obj.key.rsplit("/", 1)[1]: obj for obj in objects}
        owner_of(simulation, files)
        problem = name_problem(name)
        if problem is not None:
            services.simulation_fail(simulation, problem, fingerprint=fingerprint, trace_seen_at=seen)
        elif MARKER_NAME not in files or trace.state in (TraceState.UPLOADING, TraceState.PARSING):
            # Its files are landing (simulation.json comes last), or its trace is not ready yet.
            reason = (
                services.WAITING_FOR_MARKER
                if MARKER_NAME not in files
                else f"waiting for its trace to be ready (the trace is {trace.state})"
            )
            services.simulation_wait(simulation, fingerprint=fingerprint, trace_seen_at=seen, reason=reason)
        elif trace.state == TraceState.FAILED:
            services.simulation_fail(
                simulation,
                f"its trace failed ({trace.error}); the simulation is read once the trace is ready",
                fingerprint=fingerprint,
                trace_seen_at=seen,
            )
        else:
            services.simulation_start_parsing(simulation)
            try:
                read_simulation(trace, simulation, files, fingerprint=fingerprint, trace_seen_at=seen)
            except Exception as error:
                failures.simulation_parse_error(
                    simulation, error, fingerprint=fingerprint, trace_seen_at=seen
                )
        return simulation.state, simulation.kernels_compared, simulation.error


def owner_of(simulation: Simulation, files: dict[str, S3Object]) -> None:
    """`Simulation.owner` from the folder's owner record (ingest.owners), read only when the
    listing holds one: the bucket says who owns it, so a rebuilt database finds the owner again."""
    username = None
    if owners.OWNER_NAME in files:
        username = owners.read_owner(files[owners.OWNER_NAME].key.rsplit("/", 1)[0] + "/")
    owner = owners.owner_named(username)
    if simulation.owner_id != (owner.pk if owner is not None else None):
        services.simulation_owner_set(simulation, owner)


# --- Reading it ------------------------------------------------------------------------------


def read_simulation(
    trace: Trace, simulation: Simulation, files: dict[str, S3Object], *, fingerprint, trace_seen_at
):
    """The marker, then the log, then the pairs: stored with the metrics, or failed."""
    marker = read_marker(files[MARKER_NAME])
    read = {key: marker.get(key) for key in ("status", "simulator", "config", "notes")}
    read["run"] = run_facts(marker)
    if marker["status"] == "failed":
        notes = f": {marker['notes']}" if marker.get("notes") else ""
        services.simulation_fail(
            simulation,
            f'the simulator run failed (simulation.json says "status": "failed"){notes}',
            fingerprint=fingerprint,
            trace_seen_at=trace_seen_at,
            read=read,
        )
        return
    logs = [files[name] for name in LOG_NAMES if name in files]
    if len(logs) != 1:
        problem = (
            "no log"
            if not logs
            else "more than one log (" + ", ".join(o.key.rsplit("/", 1)[1] for o in logs) + ")"
        )
        raise SimulationInputError(
            f"{problem}: a simulation's folder holds the simulator's stdout as one of {', '.join(LOG_NAMES)}"
        )
    log = read_log(logs[0])
    read.update(
        simulator_build=log.accelsim_build,
        gpgpusim_build=None
        if log.gpgpusim_version is None
        else f"{log.gpgpusim_version} [build {log.gpgpusim_build}]",
        complete=log.complete,
        stopped=log.stopped,
        fatal=None if log.fatal is None else {"line": log.fatal[0], "text": log.fatal[1]},
    )
    if not log.finished:
        services.simulation_fail(
            simulation,
            simulated_nothing(log),
            fingerprint=fingerprint,
            trace_seen_at=trace_seen_at,
            read=read,
        )
        return
    clock = core_clock(marker, log)
    read.update(core_clock_mhz=clock, sim_total_cycles=log.finished_cycles)
    pairing = Pairing(trace, log, clock)

    def facts() -> dict:
        return {
            **read,
            "interrupted": pairing.interrupted,
            "left_out": left_out(log, pairing.interrupted),
            "reason": pairing.reason(log),
        }

    count = services.simulation_store(
        simulation,
        pairing.rows(simulation),
        read=facts,
        metrics=simulation_metrics,
        fingerprint=fingerprint,
        trace_seen_at=trace_seen_at,
    )
    if simulation.kernels_compared == 0:  # the reason that matters most
        simulation.reason = pairing.no_comparison_reason()
        Simulation.objects.filter(pk=simulation.pk).update(reason=simulation.reason)
    logger.info(
        "%s: ready, %d kernels simulated, %d compared", simulation, count, simulation.kernels_compared
    )


def core_clock(marker: dict, log: SimLog) -> float | None:
    """The marker's core clock, else the log's; SimulationInputError when neither is a clock and
    the log has cycles to turn into time."""
    clock = marker.get("core_clock_mhz") or log.core_clock_mhz
    if clock is not None and not is_clock(clock):
        raise SimulationInputError(
            f"the log's core clock ({clock} MHz, -gpgpu_clock_domains) is not a clock "
            f"(from {MIN_CLOCK_MHZ} to {MAX_CLOCK_MHZ} MHz)"
        )
    if not clock and any(kernel.sim_cycles is not None for kernel in log.kernels.values()):
        raise SimulationInputError(
            "no core clock: the log has no -gpgpu_clock_domains line and simulation.json no core_clock_mhz"
        )
    return clock


STOPPED_WHY = {
    "deadlock": "did not finish: the simulator detected a deadlock",
    "killed": "did not finish: the log ends while it ran (the run was killed or cut)",
    "max_cycles": "did not finish: the cycle limit (-gpgpu_max_cycle) stopped it",
    "error": "did not finish: the simulator stopped on an error",
}


def simulated_nothing(log: SimLog) -> str:
    """The error of a log in which no kernel finished, in the simulator's own words if it gave any."""
    running = [kernel for kernel in log.in_uid_order() if kernel.interrupted][:1]
    during = f" (uid {running[0].uid}, {running[0].name}, did not finish)" if running else ""
    if log.fatal is not None:
        return f"the log simulated no kernel{during}: the simulator stopped at {fatal_words(log)}"
    if log.stopped == "max_cycles":
        return f"the log simulated no kernel{during}: the cycle limit (-gpgpu_max_cycle) stopped the run"
    if log.stopped == "killed":
        return (
            f"the log simulated no kernel{during}: it ends at line {log.lines} without the simulator's "
            "exit line (the run was killed, or the log cut)"
        )
    return f"the log simulated no kernel: the simulator exited (line {log.lines}) without launching one"


def left_out(log: SimLog, interrupted: list[dict]) -> dict:
    """Simulation.left_out: how many kernels the totals leave out, and why."""
    if not interrupted:
        return {"kernels": 0, "why": None}
    why = STOPPED_WHY.get(log.stopped, "did not finish")
    if log.fatal is not None:
        why += f" ({fatal_words(log)})"
    return {"kernels": len(interrupted), "why": why}


def read_log(obj: S3Object) -> SimLog:
    """The log streamed, decompressed and read within CASCADE_SIM_LOG_CPU_SECONDS."""
    chunks = within_cpu_budget(log_chunks(obj), settings.CASCADE_SIM_LOG_CPU_SECONDS, clock=cpu_clock)
    return read_sim_log_chunks(chunks)


# The CPU time of the thread reading a log: its download, decompression and reading, not what
# the process's other threads (a web server's requests) spend meanwhile.
cpu_clock = time.thread_time


def within_cpu_budget(chunks: Iterable[bytes], seconds: float, *, clock=cpu_clock) -> Iterator[bytes]:
    """The log's chunks until reading them has cost more than `seconds` of `clock`'s CPU time
    (CASCADE_SIM_LOG_CPU_SECONDS), then SimulationInputError: the time to read a chunk is
    bounded (the reader is linear, a chunk at most a MiB), so a log holds its pass and its
    thread no longer than the budget and a chunk."""
    start = clock()
    read = 0
    for chunk in chunks:
        if clock() - start > seconds:
            raise SimulationInputError(
                f"the log took more than CASCADE_SIM_LOG_CPU_SECONDS ({seconds:g} s) of CPU time to read, "
                f"so it was not read past byte {read}"
            )
        read += len(chunk)
        yield chunk


def log_chunks(obj: S3Object) -> Iterator[bytes]:
    """The log's text as it streams in, decompressed (gzip, xz) within CASCADE_MAX_SIM_LOG_BYTES.

    A compressed stream that ends before its end marker is a SimulationInputError ("the
    compressed log is truncated"): a stream cut in the middle says nothing of how the run ended
    (a killed job leaves its compressor's end unwritten, and so does an upload cut short).
    """
    limit = settings.CASCADE_MAX_SIM_LOG_BYTES
    file_name = obj.key.rsplit("/", 1)[1]
    if obj.size > limit:
        raise SimulationInputError(
            f"{file_name} is {obj.size} bytes, more than CASCADE_MAX_SIM_LOG_BYTES ({limit})"
        )
    chunks = bucket.iter_object_chunks(obj.key, 1024 * 1024, etag=obj.etag)
    if file_name.endswith(".gz"):
        chunks = _decompressed(
            chunks, lambda: zlib.decompressobj(zlib.MAX_WBITS | 16), zlib.error, file_name, "gzip"
        )
    elif file_name.endswith(".xz"):
        chunks = _decompressed(chunks, lzma.LZMADecompressor, lzma.LZMAError, file_name, "xz")
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise SimulationInputError(
                f"{file_name} holds more than CASCADE_MAX_SIM_LOG_BYTES ({limit}) bytes of log"
            )
        yield chunk


def _decompressed(chunks, new, error_class, file_name: str, what: str) -> Iterator[bytes]:
    """Decompressed output DECOMPRESSED_CHUNK bytes at most at a time, so that a small bomb
    never expands whole; concatenated members (gzip, xz) are read one after another, and a
    member begun and not ended is a truncated log."""
    decompressor = new()
    begun = False  # the member `decompressor` reads has been given bytes
    try:
        for chunk in chunks:
            data = chunk
            while True:
                begun = begun or bool(data)
                out = decompressor.decompress(data, DECOMPRESSED_CHUNK)
                if out:
                    yield out
                if decompressor.eof:  # a member ended: another may follow
                    data, decompressor, begun = decompressor.unused_data, new(), False
                    if data:
                        continue
                    break
                # zlib hands back the input it could not take; lzma keeps it and says so.
                data = getattr(decompressor, "unconsumed_tail", b"")
                if not data and getattr(decompressor, "needs_input", True):
                    break
        flush = getattr(decompressor, "flush", None)
        if flush is not None:
            out = flush()
            if out:
                yield out
        if begun and not decompressor.eof:
            raise SimulationInputError(
                f"{file_name}: the compressed log is truncated (its {what} stream ends before its end marker)"
            )
    except error_class as error:
        raise SimulationInputError(f"{file_name} is not a valid {what} file: {error}") from None
