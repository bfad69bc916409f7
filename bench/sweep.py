"""A sweep's throughput with one `cascade worker` and with two, on the same jobs, and Cascade's
share of the wall time.

    python -m bench sweep [--jobs 8] [--burn 3] [--broker URL]

Cascade runs as deployed (gunicorn, moto's S3 server in this process, a Celery worker of the
server's own that reads the uploaded logs) on SQLite in a scratch folder; the jobs travel on
`--broker` (default Redis database 13 of this machine) in queues of their own. The simulator is
the STAND-IN of tests/client/accel_sim_stand_in.py: it burns `--burn` seconds of CPU (a real
simulator's time, on a core of its own), then prints the REAL log of the FlashInfer GEMM trace
(8 kernels) of shared_fixture("real-simulatable"), which `--jobs` traces are copies of.

A sweep of the traces on SM86_RTX3070 runs with one worker (one pool process), then the same
jobs (`rerun`) with two. Printed per round: wall time from the sweep's creation to its end,
jobs per minute, and Cascade's share of the jobs' time: everything but the simulator's own
(pull, post-processing checks, upload, Cascade's read, the reports), from the workers' lines
(`... in T s; simulator S s`). Then the ratio two/one (the issue's target: 0.6 or less).
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench import common
from bench.common import log

ROOT = common.ROOT
BUCKET = "cascade-bench-sweep"
CONFIG = "SM86_RTX3070"
GEMM = "MrTang-Yuhan+Accel-Sim-Flashinfer__flashinfer-gemm-sm80"
JOB_LINE = re.compile(
    r"cascade worker: /api/sweeps/(\d+)/jobs/\d+: ready .* in ([0-9.]+) s; simulator ([0-9.]+) s"
)
GIVE_UP_AFTER = 1800


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=8, help="traces in the sweep (default 8)")
    parser.add_argument("--burn", type=float, default=3.0, help="CPU seconds per simulation (default 3)")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/13", help="Redis or RabbitMQ URL")
    options = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "client"))
    from tests.client.accel_sim_stand_in import log_kernel_ids, stand_in_tree, upload_run

    prefix = f"bench-sweep-{uuid.uuid4().hex[:8]}."
    fixtures = common.shared_fixture("real-simulatable") or ROOT.parent / "shared/fixtures/real-simulatable"
    gemm = fixtures / GEMM
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp, common.moto_server() as endpoint:
        tmp = Path(tmp)
        s3 = common.s3_client(endpoint)
        s3.create_bucket(Bucket=BUCKET)
        env = common.child_env(
            tmp / "var",
            DATABASE_URL=f"sqlite:///{tmp / 'db.sqlite3'}",
            CASCADE_S3_BUCKET=BUCKET,
            CASCADE_S3_ENDPOINT_URL=endpoint,
            CASCADE_PARSE_PROCESSES="1",
            CASCADE_WEB_WORKERS="2",
            CELERY_BROKER_URL=options.broker,
            CASCADE_QUEUE_PREFIX=prefix,
            CASCADE_CELERY_QUEUE=f"{prefix}cascade",
        )
        common.manage("migrate", "-v", "0", env=env)
        traces = [f"bench-sweep-{n}" for n in range(1, options.jobs + 1)]
        ids = log_kernel_ids(gemm / "accel-sim.SM86_RTX3070.log")
        for trace_id in traces:
            upload_run(s3, BUCKET, trace_id, gemm, "", ids, arch="sm_80")
        common.manage("ingest_traces", env=env)
        token = common.create_token(env, "bench-sweep", "--scope", "write")
        root = stand_in_tree(tmp / "accel-sim-framework", {CONFIG: gemm / "accel-sim.SM86_RTX3070.log"})
        reader = start(
            [sys.executable, "-m", "celery", "-A", "cascade", "worker", "--pool=solo", "--without-mingle"]
            + ["--without-gossip", "-n", f"reader-{prefix}@%h", "-Q", f"{prefix}cascade", "-l", "WARNING"],
            env,
            tmp / "reader.log",
            cwd=ROOT,
        )
        try:
            with common.gunicorn(env) as port:
                url = f"http://127.0.0.1:{port}"
                worker_env = {
                    "PATH": os.environ["PATH"],
                    "PYTHONPATH": str(ROOT / "client"),
                    "CASCADE_URL": url,
                    "CASCADE_TOKEN": token,
                    "CASCADE_QUEUE_PREFIX": prefix,
                    "STAND_IN_BURN_SECONDS": str(options.burn),
                }
                rounds = [
                    run_round(url, token, traces, 1, root, options.broker, worker_env, tmp, rerun=False),
                    run_round(url, token, traces, 2, root, options.broker, worker_env, tmp, rerun=True),
                ]
        finally:
            stop(reader)
            forget_queues(options.broker, prefix)
    print(table(rounds, options))
    return 0


def run_round(url, token, traces, workers, root, broker, env, tmp, *, rerun) -> dict:
    """One sweep of `traces` with `workers` workers started before it; its figures."""
    import httpx

    logs = [tmp / f"worker-{workers}-{n}.log" for n in range(workers)]
    command = [sys.executable, "-m", "cascade_client", "worker", "--accel-sim", str(root)]
    command += ["--broker", broker, "--concurrency", "1"]
    processes = [start(command, env, path) for path in logs]
    try:
        for path, process in zip(logs, processes, strict=True):
            deadline = time.monotonic() + 60
            while " ready." not in path.read_text(errors="replace"):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"cascade worker did not start:\n{path.read_text()[-3000:]}")
                time.sleep(0.2)
        headers = {"Authorization": f"Bearer {token}"}
        body = {"name": f"bench {workers}", "trace_ids": traces, "configs": [CONFIG], "rerun": rerun}
        log(f"sweep of {len(traces)} jobs with {workers} worker(s)")
        started = time.monotonic()
        created = httpx.post(f"{url}/api/sweeps", json=body, headers=headers, timeout=60)
        created.raise_for_status()
        sweep_id = created.json()["id"]
        while True:
            detail = httpx.get(f"{url}/api/sweeps/{sweep_id}", headers=headers, timeout=60).json()
            if detail["state"] in ("ready", "failed", "cancelled"):
                break
            if time.monotonic() > started + GIVE_UP_AFTER:
                raise RuntimeError(f"sweep {sweep_id} did not end: {detail['counts']}")
            time.sleep(0.2)
        wall = time.monotonic() - started
    finally:
        for process in processes:
            stop(process)
    if detail["state"] != "ready":
        raise RuntimeError(f"sweep {sweep_id} ended {detail['state']}: {detail['counts']}")
    jobs = [
        (float(m.group(2)), float(m.group(3)))
        for path in logs
        for m in JOB_LINE.finditer(path.read_text(errors="replace"))
        if int(m.group(1)) == sweep_id
    ]
    if len(jobs) != len(traces):
        raise RuntimeError(f"sweep {sweep_id}: {len(jobs)} job lines in the workers' logs, not {len(traces)}")
    job_seconds = sum(total for total, _ in jobs)
    simulator = sum(sim for _, sim in jobs)
    return {
        "workers": workers,
        "jobs": len(jobs),
        "wall": wall,
        "per_minute": len(jobs) / wall * 60,
        "simulator": simulator,
        "cascade_share": (job_seconds - simulator) / job_seconds,
        "per_job_cascade": (job_seconds - simulator) / len(jobs),
    }


def start(command: list[str], env: dict, output: Path, cwd: Path | None = None) -> subprocess.Popen:
    with output.open("wb") as sink:
        return subprocess.Popen(
            command, env=env, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def forget_queues(url: str, prefix: str) -> None:
    from kombu import Connection

    with Connection(url) as connection:
        for name in [f"{prefix}cascade.sim.{CONFIG}", f"{prefix}cascade"]:
            try:
                connection.channel().queue_delete(name)
            except Exception:  # a queue never declared
                pass


def table(rounds: list[dict], options) -> str:
    one, two = rounds
    lines = [
        f"## bench sweep: {one['jobs']} jobs of the stand-in simulator ({options.burn:g} s of CPU each), "
        f"{os.cpu_count()} cores, broker {options.broker.split('@')[-1]}",
        "",
        "| workers | wall | jobs/minute | simulator (sum) | Cascade's share of the jobs' time | Cascade per job |",
        "|---|---|---|---|---|---|",
    ]
    for r in rounds:
        lines.append(
            f"| {r['workers']} | {r['wall']:.1f} s | {r['per_minute']:.1f} | {r['simulator']:.1f} s | "
            f"{r['cascade_share'] * 100:.1f} % | {r['per_job_cascade']:.2f} s |"
        )
    lines += ["", f"two workers / one: {two['wall'] / one['wall']:.2f} of the wall time (target 0.6 or less)"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
