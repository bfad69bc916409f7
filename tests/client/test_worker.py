"""`cascade worker` as a simulation farm runs it: real Celery workers (subprocesses of the client's
command) on the machine's Redis and RabbitMQ, Cascade as deployed (gunicorn, moto's S3 server,
a Celery worker of the server's own with beat, which reads the uploaded logs and runs the sweeps'
watcher), and the STAND-IN Accel-Sim of tests/client/accel_sim_stand_in.py, which replays the
REAL simulator's logs from shared_fixture("real-simulatable").

Each broker gets queues of its own (CASCADE_QUEUE_PREFIX, given to the server and the workers),
removed after. Expected values come from outside Cascade: cycles by the test's own regex over the
real log, the measured times the test uploads, the simulator runs counted by the stand-in itself
(STAND_IN_INVOCATIONS: one line per run, naming the job's work folder), the fatal line of the
real log of a simulator that stopped on SASS it has no map for.
"""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.client.accel_sim_stand_in import log_cycles, log_kernel_ids, stand_in_tree, upload_run
from tests.client.conftest import ROOT, deployed_cascade
from tests.gunicorn_process import gunicorn
from tests.helpers import shared_fixture

# A bucket per broker: moto's servers in one process share their buckets.
BUCKET = "cascade-client-worker-{}"
GEMM = "MrTang-Yuhan+Accel-Sim-Flashinfer__flashinfer-gemm-sm80"  # 8 kernels, SASS 80
RAW = "qishao-chalmers+accel-sim-framework__vecadd-raw-sm75"  # raw traces, SASS 75 (headers only)
RAW_CTX = "0x189ec30"
BROKERS = {
    "redis": "redis://127.0.0.1:6379/12",  # this module's own database
    "rabbitmq": "amqp://guest:guest@127.0.0.1:5672//",
}
LEASE_SECONDS = 6  # the server's CASCADE_SWEEP_LEASE_SECONDS here; workers report every second
# Only a guard against a hung farm: the tests wait on states, not on a clock.
GIVE_UP_AFTER = 240
TRACES = {
    "gemm-one": "gemm",
    "gemm-shared-1": "gemm",
    "gemm-shared-2": "gemm",
    "gemm-shared-3": "gemm",
    "gemm-killed": "gemm",
    "gemm-fails": "gemm",
    "gemm-dropped": "gemm",
    "raw": "raw",
}


class Farm:
    def __init__(self, url, token, broker, prefix, root, tmp, logs):
        self.url, self.token, self.broker, self.prefix = url, token, broker, prefix
        self.root, self.tmp, self.logs = root, tmp, logs
        self.invocations = tmp / "invocations"
        self.invocations.touch()
        self.processes: list[subprocess.Popen] = []
        self.outputs: list[Path] = []

    def worker(self, name: str, heartbeat: float = 1, **stand_in) -> subprocess.Popen:
        """`cascade worker` with one pool process, in a session of its own, once it is ready."""
        env = {
            **{f"STAND_IN_{key.upper()}": str(value) for key, value in stand_in.items()},
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(ROOT / "client"),
            "CASCADE_URL": self.url,
            "CASCADE_TOKEN": self.token,
            "CASCADE_QUEUE_PREFIX": self.prefix,
            "CASCADE_WORKER_HEARTBEAT_SECONDS": str(heartbeat),
            "STAND_IN_INVOCATIONS": str(self.invocations),
        }
        output = self.tmp / f"worker-{name}-{uuid.uuid4().hex[:6]}.log"
        command = [sys.executable, "-m", "cascade_client", "worker", "--accel-sim", str(self.root)]
        command += ["--broker", self.broker, "--concurrency", "1"]
        with output.open("wb") as sink:
            process = subprocess.Popen(
                command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.processes.append(process)
        self.outputs.append(output)
        deadline = time.monotonic() + 60
        while " ready." not in output.read_text(errors="replace"):
            assert process.poll() is None and time.monotonic() < deadline, self.said()
            time.sleep(0.2)
        return process

    def stop_workers(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)  # a warm shutdown: the main process alone
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            try:  # whatever it left in its session (a stalled stand-in of a killed worker)
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.processes.clear()

    def said(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in self.outputs)

    def get(self, path: str):
        response = httpx.get(self.url + path, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    def sweep(self, trace_ids: list[str], configs: list[str]) -> dict:
        body = {"name": f"test {uuid.uuid4().hex[:6]}", "trace_ids": trace_ids, "configs": configs}
        response = httpx.post(
            self.url + "/api/sweeps", json=body, headers={"Authorization": f"Bearer {self.token}"}, timeout=30
        )
        assert response.status_code == 201, response.text
        return response.json()

    def wait(self, sweep_id: int, until) -> dict:
        """The sweep's detail once `until(detail)` holds."""
        deadline = time.monotonic() + GIVE_UP_AFTER
        while True:
            detail = self.get(f"/api/sweeps/{sweep_id}")
            if until(detail):
                return detail
            if time.monotonic() > deadline:
                pytest.fail(
                    f"sweep {sweep_id} never got there: {json.dumps(detail, indent=1)}\n{self.said()}"
                )
            time.sleep(0.3)

    def ended(self, sweep_id: int) -> dict:
        return self.wait(sweep_id, lambda d: d["state"] in ("ready", "failed", "cancelled"))

    def runs(self, sweep_id: int, job_id: int) -> int:
        """How many times the stand-in simulator ran for the job (its work folder's name)."""
        return len(self.simulator_pids(sweep_id, job_id))

    def simulator_pids(self, sweep_id: int, job_id: int) -> list[int]:
        folder = re.compile(rf"/sweep{sweep_id}-job{job_id}-[^/]*/\S* (\d+)$")
        return [int(m.group(1)) for m in map(folder.search, self.invocations.read_text().splitlines()) if m]

    def expected_rows(self, trace_id: str) -> dict[int, tuple]:
        """kernel id -> (cycles of the real log, the measured time uploaded)."""
        log = self.logs[TRACES[trace_id]]
        kernel_ids = log_kernel_ids(log)
        measured = self.measured[trace_id]
        return {kernel_ids[uid - 1]: (c, measured[kernel_ids[uid - 1]]) for uid, c in log_cycles(log).items()}

    def rows(self, trace_id: str, name: str) -> dict[int, tuple]:
        simulation = self.get(f"/api/traces/{trace_id}/simulations/{name}")
        assert simulation["state"] == "ready", simulation
        return {k["kernel_id"]: (k["sim_cycles"], k["measured_ns"]) for k in simulation["kernels"]}


def broker_reachable(url: str) -> bool:
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1)
        return True
    except Exception:
        return False


def forget_queues(url: str, prefix: str) -> None:
    """The test's queues (and Redis's bindings of them) removed from the shared broker."""
    if url.startswith("redis"):
        import redis

        client = redis.Redis.from_url(url)
        for key in [*client.scan_iter(f"{prefix}*"), *client.scan_iter(f"_kombu.binding.{prefix}*")]:
            client.delete(key)
        return
    from kombu import Connection

    with Connection(url) as connection:
        for name in [f"{prefix}cascade.sim.{c}" for c in ("SM86_RTX3070", "SM75_RTX2060")] + [
            f"{prefix}cascade"
        ]:
            try:
                connection.channel().queue_delete(name)
            except Exception:
                pass


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


@contextlib.contextmanager
def farm_database(tmp: Path):
    """SQLite in `tmp`; on PostgreSQL when the test run is (DATABASE_URL), a scratch database of
    that server, dropped after: workers hitting the start route at once, as deployed."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        yield f"sqlite:///{tmp / 'db.sqlite3'}"
        return
    import psycopg

    server, name = url.rsplit("/", 1)[0], f"cascade_farm_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module", params=sorted(BROKERS))
def farm(request, tmp_path_factory):
    url = BROKERS[request.param]
    if not broker_reachable(url):
        pytest.skip(f"needs {request.param} at {url.split('@')[-1]}")
    prefix = f"worker-test-{uuid.uuid4().hex[:8]}."
    tmp = tmp_path_factory.mktemp(f"client-worker-{request.param}")
    gemm = shared_fixture("real-simulatable", GEMM)
    raw = shared_fixture("real-simulatable", RAW)
    logs = {"gemm": gemm / "accel-sim.SM86_RTX3070.log", "raw": raw / "accel-sim.SM75_RTX2060.log"}
    settings = {
        "CELERY_BROKER_URL": url,
        "CASCADE_QUEUE_PREFIX": prefix,
        "CASCADE_CELERY_QUEUE": f"{prefix}cascade",
        "CASCADE_SWEEP_LEASE_SECONDS": str(LEASE_SECONDS),
        "CASCADE_SWEEP_WATCH_SECONDS": "2",
        "PYTHONUNBUFFERED": "1",
    }
    try:
        name = BUCKET.format(request.param)
        with (
            farm_database(tmp) as database,
            deployed_cascade(tmp, name, DATABASE_URL=database, **settings) as (env, bucket, manage),
        ):
            bucket.create_bucket(Bucket=name)
            measured = {}
            for trace_id, run in TRACES.items():
                folder, ctx, arch = (gemm, "", "sm_80") if run == "gemm" else (raw, RAW_CTX, None)
                ids = log_kernel_ids(logs[run])
                measured[trace_id] = upload_run(bucket, name, trace_id, folder, ctx, ids, arch=arch)
            manage("ingest_traces")
            token = manage("create_token", "worker-tests", "--scope", "write").splitlines()[-1]
            root = stand_in_tree(
                tmp / "accel-sim-framework",
                {
                    "SM86_RTX3070": logs["gemm"],
                    "SM75_RTX2060": logs["raw"],
                    # A real log of a simulator that stopped on SASS it has no opcode map for.
                    "sm90": shared_fixture("real-sim-logs", "accel-sim-73f9fac__sm90-unsupported.log"),
                },
            )
            server_log = tmp / "server-celery.log"
            with gunicorn(env, tmp, workers=2) as server, server_log.open("wb") as sink:
                # The server's own Celery worker: reads uploaded logs, beat runs the sweeps' watcher.
                command = [sys.executable, "-m", "celery", "-A", "cascade", "worker", "-B", "--pool=solo"]
                command += ["--without-mingle", "--without-gossip", "-n", f"server-{prefix}@%h"]
                command += [
                    "-s",
                    str(tmp / "beat-schedule"),
                    "-Q",
                    settings["CASCADE_CELERY_QUEUE"],
                    "-l",
                    "INFO",
                ]
                celery = subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
                farm = Farm(server.url, token, url, prefix, root, tmp, logs)
                farm.outputs.append(server_log)
                farm.measured = measured
                try:
                    deadline = time.monotonic() + 60
                    while {t["id"] for t in farm.get("/api/traces?state=ready")} < set(TRACES):
                        assert time.monotonic() < deadline, "the runs never became ready"
                        manage("ingest_traces")
                    yield farm
                finally:
                    farm.stop_workers()
                    celery.send_signal(signal.SIGTERM)
                    try:
                        celery.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        celery.kill()
                        celery.wait()
    finally:
        forget_queues(url, prefix)


@pytest.fixture
def workers(farm):
    yield farm
    farm.stop_workers()


def build_of(log: Path, pattern: str) -> str:
    return re.search(pattern, log.read_text(errors="replace")).group(1)


@pytest.mark.slow
def test_one_job_runs_end_to_end_and_its_cycles_are_the_real_logs(workers):
    farm = workers
    worker = farm.worker("one")
    sweep = farm.sweep(["gemm-one"], ["SM86_RTX3070"])
    (job,) = farm.ended(sweep["id"])["jobs"]
    assert job["state"] == "ready" and job["attempts"] == 1, job
    name = f"sweep{sweep['id']}_SM86_RTX3070"
    assert job["simulation"] == name and job["error"] is None
    assert job["progress"] == {"kernels_finished": 8, "kernels_listed": 8}
    # Its host, and the pool process that ran it: a child of the worker's main process.
    assert job["worker"]["host"] == socket.gethostname()
    assert parent_of(job["worker"]["process"]) == worker.pid
    assert farm.runs(sweep["id"], job["id"]) == 1
    assert farm.rows("gemm-one", name) == farm.expected_rows("gemm-one")
    simulation = farm.get(f"/api/traces/gemm-one/simulations/{name}")
    assert simulation["simulator_build"] == build_of(farm.logs["gemm"], r"Accel-Sim \[build ([^\]]*)\]")

    # The worker read its build from the simulator's bytes: the same build's ready simulation is
    # not run again by a second sweep without rerun.
    again = farm.sweep(["gemm-one"], ["SM86_RTX3070"])
    (repeat,) = farm.ended(again["id"])["jobs"]
    assert repeat["state"] == "ready" and repeat["simulation"] == name, repeat
    assert name in repeat["reason"] and farm.runs(again["id"], repeat["id"]) == 0


@pytest.mark.slow
def test_two_workers_share_a_sweep_and_run_each_job_once(workers):
    farm = workers
    first, second = farm.worker("a"), farm.worker("b")
    traces = ["gemm-shared-1", "gemm-shared-2", "gemm-shared-3", "raw"]
    sweep = farm.sweep(traces, ["SM86_RTX3070", "SM75_RTX2060"])
    detail = farm.ended(sweep["id"])
    assert detail["state"] == "ready", detail
    jobs = {(job["trace_id"], job["config"]): job for job in detail["jobs"]}
    assert len(jobs) == 8
    ran = [jobs[(t, "SM86_RTX3070")] for t in traces[:3]] + [jobs[("raw", "SM75_RTX2060")]]
    for job in ran:
        assert job["state"] == "ready" and job["attempts"] == 1, job
        assert farm.runs(sweep["id"], job["id"]) == 1, job
        assert farm.rows(job["trace_id"], job["simulation"]) == farm.expected_rows(job["trace_id"])
    # Both workers took jobs: each ran in a pool process of one of them.
    assert {parent_of(job["worker"]["process"]) for job in ran} == {first.pid, second.pid}
    # An Ampere trace on the Turing config: skipped when the sweep was made, never run.
    for trace_id in traces[:3]:
        skipped = jobs[(trace_id, "SM75_RTX2060")]
        assert skipped["state"] == "skipped" and skipped["attempts"] == 0 and skipped["reason"], skipped
    # The raw trace says no SASS version: the worker read its headers (75) and skipped it,
    # before the simulator ran.
    raw = jobs[("raw", "SM86_RTX3070")]
    assert raw["state"] == "skipped" and "the trace is SASS 75" in raw["reason"], raw
    assert farm.runs(sweep["id"], raw["id"]) == 0


@pytest.mark.slow
def test_a_worker_killed_mid_job_has_its_job_run_once_more_elsewhere(workers):
    farm = workers
    text = farm.logs["gemm"].read_text(errors="replace").splitlines(keepends=True)
    # Stall once the third kernel's stat block is whole: three of eight finished.
    stall = [i for i, line in enumerate(text) if line.startswith("Header info loaded")][3]
    doomed = farm.worker("doomed", stall_after_lines=stall)
    sweep = farm.sweep(["gemm-killed"], ["SM86_RTX3070"])
    detail = farm.wait(sweep["id"], lambda d: (d["jobs"][0]["progress"] or {}).get("kernels_finished") == 3)
    pool = detail["jobs"][0]["worker"]["process"]
    assert parent_of(pool) == doomed.pid
    other = farm.worker("other")
    os.kill(doomed.pid, signal.SIGKILL)

    (job,) = farm.ended(sweep["id"])["jobs"]
    assert job["state"] == "ready" and job["attempts"] == 2, job
    assert parent_of(job["worker"]["process"]) == other.pid
    assert farm.runs(sweep["id"], job["id"]) == 2  # the stalled run, and the whole one
    # One simulation of that name, the whole run's.
    names = [s["name"] for s in farm.get("/api/traces/gemm-killed/simulations")]
    assert names.count(job["simulation"]) == 1
    assert farm.rows("gemm-killed", job["simulation"]) == farm.expected_rows("gemm-killed")
    # The killed worker's pool process went with it (it died with its parent).
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pool}").exists() and parent_of(pool) == doomed.pid:
        assert time.monotonic() < deadline, f"pool process {pool} outlived its worker"
        time.sleep(0.2)


@pytest.mark.slow
def test_a_worker_whose_attempt_went_to_another_stops_its_simulator_and_drops_the_job(workers):
    farm = workers
    text = farm.logs["gemm"].read_text(errors="replace").splitlines(keepends=True)
    stall = [i for i, line in enumerate(text) if line.startswith("Header info loaded")][3]
    # Its reports come further apart than the lease: Cascade presumes it dead meanwhile.
    late = farm.worker("late", heartbeat=LEASE_SECONDS * 3, stall_after_lines=stall)
    sweep = farm.sweep(["gemm-dropped"], ["SM86_RTX3070"])
    job_id = farm.wait(sweep["id"], lambda d: d["jobs"][0]["state"] == "running")["jobs"][0]["id"]
    deadline = time.monotonic() + 60
    while not farm.simulator_pids(sweep["id"], job_id):
        assert time.monotonic() < deadline, farm.said()
        time.sleep(0.2)
    (stalled,) = farm.simulator_pids(sweep["id"], job_id)
    other = farm.worker("other")  # ready before the late one's next report
    (job,) = farm.ended(sweep["id"])["jobs"]
    assert job["state"] == "ready" and job["attempts"] == 2, job
    assert parent_of(job["worker"]["process"]) == other.pid
    # Its next report is a 409: it kills its simulator and finishes nothing.
    deadline = time.monotonic() + 60
    while Path(f"/proc/{stalled}").exists() or "attempt 1 dropped" not in farm.said():
        assert time.monotonic() < deadline, f"stand-in {stalled} still runs\n{farm.said()}"
        time.sleep(0.2)
    assert late.poll() is None  # the worker itself goes on
    assert farm.get(f"/api/sweeps/{sweep['id']}")["jobs"][0] == job


@pytest.mark.slow
def test_a_simulator_that_stops_on_its_error_line_fails_after_the_attempts_with_it_quoted(workers):
    farm = workers
    log = shared_fixture("real-sim-logs", "accel-sim-73f9fac__sm90-unsupported.log")
    lines = log.read_text(errors="replace").splitlines()
    (number,) = [n for n, line in enumerate(lines, start=1) if line.startswith("unsupported binary version")]
    farm.worker("fails", log="sm90")
    sweep = farm.sweep(["gemm-fails"], ["SM86_RTX3070"])
    detail = farm.ended(sweep["id"])
    (job,) = detail["jobs"]
    assert detail["state"] == "failed" and job["state"] == "failed", detail
    assert job["attempts"] == 3 and farm.runs(sweep["id"], job["id"]) == 3
    assert f"line {number}: {lines[number - 1]}" in job["error"], job


def test_a_config_the_tree_lacks_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "log").write_text("")
    root = stand_in_tree(tmp_path / "tree", {"SM86_RTX3070": tmp_path / "log"})
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT / "client"), "CASCADE_TOKEN": "x"}
    command = [sys.executable, "-m", "cascade_client", "worker", "--accel-sim", str(root)]
    command += ["--configs", "SM86_RTX3070,SM90_H100", "--broker", "redis://127.0.0.1:1/0"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "config SM90_H100 is not in" in line and line.endswith("it has: SM75_RTX2060, SM86_RTX3070")


def test_the_builds_are_read_from_the_built_simulator_and_library(tmp_path):
    """The strings the real log's header prints, found in the bytes of accel-sim.out and of
    GPGPU-Sim's libcudart.so as a build lays them out; a format string is not a build."""
    from cascade_client.worker import tree_builds

    log = shared_fixture("real-simulatable", GEMM, "accel-sim.SM86_RTX3070.log")
    accel = build_of(log, r"Accel-Sim \[build ([^\]]*)\]")
    gpgpu = build_of(log, r"GPGPU-Sim Simulator Version \S+\s+\[build ([^\]]*)\]")
    simulator = tmp_path / "gpu-simulator/bin/release/accel-sim.out"
    simulator.parent.mkdir(parents=True)
    assert tree_builds(tmp_path) == {"accel_sim_build": None, "gpgpusim_build": None}
    simulator.write_bytes(b"\x7fELF\0accelsim-commit-%s_modified_%s\0" + accel.encode() + b"\0\x01\x02")
    library = tmp_path / "gpu-simulator/gpgpu-sim/lib/gcc-11.4.0/cuda-11080/release/libcudart.so.11.0"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"\x7fELF\0\0" + gpgpu.encode() + b"\0GPGPU-Sim PTX: %s\n\0")
    assert tree_builds(tmp_path) == {"accel_sim_build": accel, "gpgpusim_build": gpgpu}
