"""`cascade worker`: a Celery worker on a host that holds a built Accel-Sim, running a sweep's
jobs (docs/simulations.md, "Sweeps").

It consumes the queue of each config its tree has (`broker.config_queue`), or of the
`--configs` given, and knows nothing of a job but its ids: the start route answers what to run
and under which name, `simulate()` runs it exactly as `cascade simulate` does (pull,
post-process, run, upload, `/complete`, wait for Cascade's read) in a work folder of its own,
removed after, and the finish route gets the verdict. It needs the broker, `CASCADE_URL` and a
write token in `CASCADE_TOKEN`; never the database.

Nothing lost, nothing twice: a message is acknowledged only once its job has ended
(`acks_late`, prefetch 1, one simulator per pool process), so a worker lost mid-job leaves the
job to the broker and to Cascade's lease; each report carries the job's `attempt`, and a 409
(another attempt holds the job now) kills the simulator and drops the job. A pool process dies
with the worker's main process (Linux), so `kill -9` of the worker is a host lost, not a
simulator left running for nobody.
"""

import ctypes
import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote

from cascade_client import accel_sim, sass
from cascade_client.accel_sim import SIMULATOR, WrongSass
from cascade_client.api import Cascade, check
from cascade_client.broker import JOB_TASK, celery_broker, config_queue
from cascade_client.errors import CascadeError, NotFound, NotReady, Unreachable

HEARTBEAT_SECONDS = 20.0  # well inside the server's lease (CASCADE_SWEEP_LEASE_SECONDS, 120 s)
REPORT_GAP_SECONDS = 2.0  # kernels finished are reported at most this often
START_RETRY_SECONDS = 30.0  # Cascade unreachable at a job's start: the message is sent again then
FINISH_TRIES = 6  # Cascade unreachable at a job's end: tried again after 1, 2, 4, ... s
# Redis hands an unacknowledged message to another consumer after this: longer than a job runs
# (a lost worker's job comes back sooner through Cascade's lease; a duplicate is dropped by it).
VISIBILITY_SECONDS = 48 * 3600
BUILD_STRINGS = {
    "accel_sim_build": re.compile(rb"accelsim-commit-[\x21-\x5c\x5e-\x7e]+"),
    "gpgpusim_build": re.compile(rb"gpgpu-sim_git-commit-[\x21-\x5c\x5e-\x7e]+"),
}
LIBCUDART = (
    "gpu-simulator/gpgpu-sim/lib/*/*/release/libcudart.so*",
    "gpu-simulator/gpgpu-sim/lib/*/*/*/libcudart.so*",
)


class WrongArguments(CascadeError):
    exit_code = 2


class Dropped(Exception):
    """Cascade answered 409: another attempt holds the job now."""


# --- the command ----------------------------------------------------------------------------


def add_worker(commands) -> None:
    worker = commands.add_parser(
        "worker",
        help="run sweep jobs from the broker with your Accel-Sim (a Celery worker)",
        description="Consume the simulation queue of each tested config your accel-sim-framework "
        "checkout has and run each sweep job as `cascade simulate` does, reporting progress to "
        "Cascade (CASCADE_URL, a write token in CASCADE_TOKEN). docs/simulations.md, Sweeps.",
    )
    worker.add_argument("--accel-sim", metavar="ROOT", help="your built checkout (default $ACCEL_SIM_ROOT)")
    worker.add_argument("--broker", metavar="URL", help="the server's broker (default $CELERY_BROKER_URL)")
    worker.add_argument(
        "--configs", metavar="A,B,...", help="only these tested configs (default: all the tree has)"
    )
    worker.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="jobs at once, one simulator each (default: the host's cores)",
    )


def command(cascade: Cascade, args) -> int:
    root = Path(args.accel_sim or os.environ.get("ACCEL_SIM_ROOT") or "")
    if not str(root) or str(root) == ".":
        raise WrongArguments("no Accel-Sim: give --accel-sim ROOT or set ACCEL_SIM_ROOT")
    root = root.resolve()
    if not (root / SIMULATOR).is_file():
        raise WrongArguments(f"{root} has no {SIMULATOR}: build the simulator (make -C gpu-simulator)")
    has = accel_sim.tree_configs(root)
    configs = has
    if args.configs:
        configs = [c.strip() for c in args.configs.split(",") if c.strip()]
        lacking = [c for c in configs if c not in has]
        if lacking:
            raise WrongArguments(f"config {lacking[0]} is not in {root}; it has: {', '.join(has) or 'none'}")
    if not configs:
        raise WrongArguments(f"{root} has no tested config with both gpgpusim.config and trace.config")
    broker = args.broker or os.environ.get("CELERY_BROKER_URL")
    if not broker:
        raise WrongArguments("no broker: give --broker URL or set CELERY_BROKER_URL (the server's)")
    concurrency = args.concurrency or os.cpu_count() or 1
    if concurrency < 1:
        raise WrongArguments(f"--concurrency {concurrency}: at least 1")
    response, content = cascade._send("GET", "/api/sweeps")  # no token, a wrong one, no server:
    check(response, cascade.url, content)  # one line now, not at the first job
    try:
        app = make_app(broker, root, configs)
    except ValueError as error:
        raise WrongArguments(str(error)) from None
    tree = app.conf.cascade_tree
    print(
        f"cascade worker: {root} ({tree['accel_sim_build'] or 'build unknown'} / "
        f"{tree['gpgpusim_build'] or 'build unknown'}), configs {', '.join(configs)}, "
        f"SASS {'/'.join(map(str, tree['sass_versions'])) or 'none'}, {concurrency} at once",
        file=sys.stderr,
        flush=True,
    )
    argv = ["worker", "--loglevel", os.environ.get("CASCADE_WORKER_LOGLEVEL", "INFO"), "-P", "prefork"]
    argv += ["-c", str(concurrency), "-Q", ",".join(config_queue(c) for c in configs)]
    argv += ["-n", f"cascade-{os.getpid()}@{socket.gethostname()}", "--without-mingle", "--without-gossip"]
    try:
        app.worker_main(argv)
    finally:
        shutil.rmtree(app.conf.cascade_tree["tmp"], ignore_errors=True)
    return 0


def make_app(broker: str, root: Path, configs: list[str]):
    """The Celery app: the broker as the server names it, late acknowledgement, one message per
    pool process, the job task."""
    from celery import Celery
    from celery.signals import worker_process_init

    url, options = celery_broker(broker)
    if url.startswith(("redis://", "rediss://", "redis+socket://")):
        options = {**options, "visibility_timeout": VISIBILITY_SECONDS}
    # httpx logs each request at INFO, presigned URLs and their signatures included: not in a log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    app = Celery("cascade_worker", set_as_current=False)
    app.conf.update(
        broker_url=url,
        broker_transport_options=options,
        broker_connection_retry_on_startup=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        accept_content=["json"],
        task_serializer="json",
        result_backend=None,
        task_ignore_result=True,
        # A lost connection leaves the running job to finish: Cascade, not the broker, fences it.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        # kombu's file transport (the demo's) has no fanout for remote control.
        worker_enable_remote_control=url != "filesystem://",
        cascade_tree={
            "root": str(root),
            "configs": configs,
            **tree_builds(root),
            "sass_versions": sorted(accel_sim.tree_sass_versions(root)),
            "tmp": tempfile.mkdtemp(prefix="cascade-worker-"),
        },
    )

    @app.task(name=JOB_TASK, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def sweep_job(task, sweep_id: int, job_id: int) -> None:
        try:
            run_job(task.app.conf.cascade_tree, int(sweep_id), int(job_id))
        except Unreachable as error:  # Cascade away before the job started: ask again later
            raise task.retry(exc=error, countdown=START_RETRY_SECONDS, max_retries=None) from None

    worker_process_init.connect(die_with_parent, weak=False)
    return app


def die_with_parent(**_) -> None:
    """A pool process is killed when the worker's main process dies (Linux's PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
        except (OSError, AttributeError):
            pass


# --- what the tree has ----------------------------------------------------------------------


def tree_builds(root: Path) -> dict[str, str | None]:
    """The builds the simulator prints in its log header, read from the built files' bytes:
    accel-sim.out and GPGPU-Sim's libcudart.so. None when a build does not say."""
    files = [root / SIMULATOR] + sorted({p for pattern in LIBCUDART for p in root.glob(pattern)})
    found: dict[str, str | None] = dict.fromkeys(BUILD_STRINGS)
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        for key, pattern in BUILD_STRINGS.items():
            if found[key] is None:  # a whole string, not a format it is printed with
                whole = (m.group() for m in pattern.finditer(data) if b"%" not in m.group())
                found[key] = next((w.decode("ascii") for w in whole), None)
    return found


# --- one job --------------------------------------------------------------------------------


class Reporter:
    """The job's lease: progress every HEARTBEAT_SECONDS (unchanged or not) from a thread, and
    sooner when kernels finish. A 409 kills the simulator and marks the job dropped."""

    def __init__(self, base: str, attempt: int):
        self.base, self.attempt = base, attempt
        self.finished = self.listed = 0
        self.process = None
        self.dropped = False
        self.wake, self.stopping = threading.Event(), threading.Event()
        self.last = 0.0
        self.seconds = float(os.environ.get("CASCADE_WORKER_HEARTBEAT_SECONDS") or HEARTBEAT_SECONDS)
        self.thread = threading.Thread(target=self.loop, name="cascade-heartbeat", daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.wake.set()
        self.thread.join(timeout=60)
        if not self.dropped:  # the last figures, before the finish
            with Cascade() as client:
                self.report(client)

    def progress(self, finished: int, listed: int, process) -> None:
        """accel_sim.run_simulator's callback: raises Dropped (which stops the simulator)."""
        self.finished, self.listed, self.process = finished, listed, process
        if self.dropped:
            raise Dropped()
        if time.monotonic() - self.last >= REPORT_GAP_SECONDS:
            self.wake.set()

    def loop(self) -> None:
        with Cascade() as client:  # its own connection: httpx's client is not shared across threads
            while not self.stopping.is_set():
                self.report(client)
                self.wake.wait(self.seconds)
                self.wake.clear()

    def report(self, client) -> None:
        self.last = time.monotonic()
        body = {"attempt": self.attempt, "kernels_finished": self.finished, "kernels_listed": self.listed}
        try:
            client._post_json(f"{self.base}/progress", body, refused="the server refused the report")
        except NotReady as error:  # 409: the attempt is no longer the job's
            log(f"{self.base}: dropped ({error}); stopping the simulator")
            self.dropped = True
            self.stopping.set()
            if self.process is not None and self.process.poll() is None:
                self.process.kill()
        except CascadeError as error:  # the next report may reach it; the lease is generous
            log(f"{self.base}: progress not reported: {error}")


def run_job(tree: dict, sweep_id: int, job_id: int) -> str | None:
    """Start, run and finish one job; the state it was finished with (None when not run or
    dropped). Every error ends as a `failed` finish, so that Cascade queues the job again."""
    base = f"/api/sweeps/{sweep_id}/jobs/{job_id}"
    with Cascade() as client:
        start = client._post_json(
            f"{base}/start",
            {
                "host": socket.gethostname(),
                "process": os.getpid(),
                "accel_sim_build": tree["accel_sim_build"],
                "gpgpusim_build": tree["gpgpusim_build"],
                "configs": tree["configs"],
                "sass_versions": tree["sass_versions"],
            },
            refused="the server refused the job's start",
        )
        if not start.get("run"):
            log(f"{base}: not run ({start.get('state')}): {start.get('why')}")
            return None
        attempt = start["attempt"]
        started = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix=f"sweep{sweep_id}-job{job_id}-", dir=tree["tmp"]))
        with Reporter(base, attempt) as reporter:
            try:
                verdict, timing = attempt_verdict(client, tree, start, work, reporter)
            except Dropped:
                verdict, timing = {}, None
            finally:
                shutil.rmtree(work, ignore_errors=True)
        if reporter.dropped:
            log(f"{base}: attempt {attempt} dropped")
            return None
        if not finish(client, base, attempt, verdict):
            return None
        log(finished_line(base, start, verdict, time.monotonic() - started, timing))
        return verdict["state"]


def attempt_verdict(client, tree: dict, start: dict, work: Path, reporter: "Reporter") -> tuple[dict, object]:
    """What the attempt ends with (the finish's body but its attempt), and simulate()'s timing.
    Raises Dropped only."""
    try:
        verdict = skip_reason(tree, start["config"], start.get("sass_version"))
        if verdict is None and earlier_attempt_ready(client, start["trace_id"], start["simulation"]):
            verdict = {"state": "ready"}
        if verdict is not None:
            return verdict, None
        from cascade_client.simulate import simulate

        result = simulate(
            client,
            start["trace_id"],
            config=start["config"],
            root=Path(tree["root"]),
            name=start["simulation"],
            select=start.get("select"),
            cover=float(start.get("cover") or 1.0),
            workdir=work,
            out=sys.stderr,
            progress=reporter.progress,
        )
        simulation = result.simulation
        if simulation.get("state") == "ready":
            return {"state": "ready"}, result.timing
        error = simulation.get("error") or f"the simulation is {simulation.get('state')}"
        return {"state": "failed", "error": error}, result.timing
    except Dropped:
        raise
    except WrongSass as error:
        return {"state": "skipped", "reason": str(error)}, None
    except CascadeError as error:  # SimulateError: refused in one sentence
        return {"state": "failed", "error": str(error)}, None
    except Exception as error:  # noqa: BLE001 (an error of ours still ends the attempt)
        logging.getLogger(__name__).exception("cascade worker: job %s ended by an error of Cascade's", start)
        return {"state": "failed", "error": f"{type(error).__name__}: {error}"[:2000]}, None


def finish(client, base: str, attempt: int, verdict: dict) -> bool:
    """POST finish, Cascade unreachable tried again a few times; False when it never took it."""
    for pause in [2**n for n in range(FINISH_TRIES - 1)] + [None]:
        try:
            client._post_json(
                f"{base}/finish", {"attempt": attempt, **verdict}, refused="the server refused the finish"
            )
            return True
        except NotReady as error:
            log(f"{base}: attempt {attempt} is stale: {error}")
            return False
        except Unreachable as error:  # the lease lapses meanwhile: the job runs again
            if pause is None:
                log(f"{base}: attempt {attempt} not finished: {error}")
                return False
            time.sleep(pause)
    return False


def earlier_attempt_ready(client, trace_id: str, name: str) -> bool:
    """An earlier attempt's simulation of the job's name: ready, it is the job's (its finish was
    lost); else deleted, so that this attempt's upload may take the name (a folder once
    complete is never replaced)."""
    path = client._path(trace_id, "simulations", quote(name, safe=""))
    try:
        if client._get_json(path).get("state") == "ready":
            return True
    except NotFound:
        return False
    response, content = client._send("DELETE", path)
    if response.status_code != 404:
        check(response, client.url, content)
    return False


def skip_reason(tree: dict, config: str, sass_version: int | None) -> dict | None:
    """A `skipped` verdict when the tree lacks the config or cannot run the trace's SASS."""
    configs = tree["configs"]
    if config not in configs:
        close = sass.nearest_config(config, configs)
        return {
            "state": "skipped",
            "reason": f"config {config} is not in this worker's Accel-Sim ({', '.join(configs)})"
            + (f"; nearest: {close}" if close else ""),
        }
    known = tree["sass_versions"]  # empty: the tree does not say (simulate() checks the generation)
    if sass_version is not None and known and sass_version not in known:
        close = sass.nearest_config(f"SM{sass_version}_", configs)
        return {
            "state": "skipped",
            "reason": f"this worker's Accel-Sim runs SASS {'/'.join(map(str, tree['sass_versions']))}, "
            f"not {sass_version}; its configs: {', '.join(configs)}"
            + (f"; nearest: {close}" if close else ""),
        }
    return None


def finished_line(base: str, start: dict, verdict: dict, wall: float, timing) -> str:
    """The worker's line per job; `bench sweep` reads its times."""
    line = f"{base}: {verdict['state']} ({start['simulation']} of {start['trace_id']} on {start['config']}) in {wall:.2f} s"
    if timing is not None:
        line += f"; simulator {timing.simulator:.2f} s"
    why = verdict.get("error") or verdict.get("reason")
    return line + (f": {why}" if why else "")


def log(line: str) -> None:
    print(f"cascade worker: {line}", file=sys.stderr, flush=True)
