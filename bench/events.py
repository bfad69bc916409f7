"""From a `metadata.json` upload to `ready`: with S3 events (issue 22's target: within 3 s) and with polling.

    python -m bench.events [--runs 5] [--poll-seconds 30] [--scale small] [--json FILE]

Starts moto's server (S3 and SQS on one endpoint), a queue the bucket notifies, and a scratch
SQLite database, then for each mode starts the real poller as a deployment runs it
(`manage.py ingest_traces --watch --events`, or `--watch --interval CASCADE_POLL_SECONDS`) and
uploads `--runs` small runs one after another, each at a random moment of the poll's cycle, as
uploads land; the time is from metadata.json's PUT returning to the trace's row reading `ready`
(the database polled every 20 ms). Prints both side by side: the median and the worst.
With polling the wait is half the interval on average, and the whole interval at worst.
"""

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUCKET = "cascade-bench-events"
PREFIX = "accelsim-traces/"
SCALES = {"small": {"runs": 2, "poll_seconds": 3}, "full": {"runs": 5, "poll_seconds": 30}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_files() -> dict[str, bytes]:
    """A run of vecadd's real tracer output (in CASCADE_SHARED_FIXTURES), metadata.json aside."""
    shared = Path(os.environ.get("CASCADE_SHARED_FIXTURES", ROOT.parent / "shared" / "fixtures"))
    folder = shared / "accelsim-vecadd-v5"
    return {f"traces/{path.name}": path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


def wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def state_of(db: Path | str, run_id: str) -> str | None:
    """The run's state in the poller's database: a SQLite file, or a PostgreSQL URL."""
    if isinstance(db, str):
        import psycopg

        with psycopg.connect(db, autocommit=True) as connection:
            row = connection.execute("SELECT state FROM traces_trace WHERE id = %s", (run_id,)).fetchone()
        return row[0] if row else None
    import sqlite3

    with sqlite3.connect(db, timeout=30) as connection:
        row = connection.execute("SELECT state FROM traces_trace WHERE id = ?", (run_id,)).fetchone()
    return row[0] if row else None


def measure(mode: str, env: dict, s3, runs: int, poll_seconds: int, db: Path | str) -> list[float]:
    argv = [sys.executable, str(ROOT / "manage.py"), "ingest_traces", "--watch"]
    argv += ["--events"] if mode == "events" else ["--interval", str(poll_seconds)]
    poller = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)  # its start (Django, the first poll on an empty bucket)
        files = run_files()
        seconds = []
        for n in range(runs):
            time.sleep(random.uniform(0, poll_seconds))  # anywhere in the poll's cycle
            run_id = f"{mode}-{n}"
            for name, body in files.items():
                s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}{run_id}/{name}", Body=body)
            s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}{run_id}/metadata.json", Body=b'{"status": "ok"}')
            landed = time.monotonic()
            deadline = landed + poll_seconds + 60
            while state_of(db, run_id) != "ready":
                if time.monotonic() > deadline or poller.poll() is not None:
                    raise RuntimeError(
                        f"{run_id} not ready with {mode} after {time.monotonic() - landed:.0f} s"
                    )
                time.sleep(0.02)
            seconds.append(time.monotonic() - landed)
            print(f"bench: {mode} {run_id}: ready {seconds[-1]:.2f} s after metadata.json", file=sys.stderr)
        return seconds
    finally:
        poller.terminate()
        poller.wait(timeout=30)


def ready_times(runs: int, poll_seconds: int, database_url: str | None = None) -> dict:
    """Seconds from metadata.json's PUT to `ready`, per run, with events and with polling:
    {"events": [...], "polling": [...]}. `database_url`: a migrated PostgreSQL database to
    run against (the community bench's, 100,000 traces in it); else a scratch SQLite file."""
    import boto3

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    workdir = Path(tempfile.mkdtemp(prefix="bench-events-"))
    credentials = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CASCADE_", "DATABASE_URL", "AWS_"))},
        **credentials,
        "CASCADE_VAR_DIR": str(workdir),
        "CASCADE_S3_BUCKET": BUCKET,
        "CASCADE_S3_ENDPOINT_URL": endpoint,
        "DJANGO_SETTINGS_MODULE": "cascade.settings",
    }
    if database_url:
        env["DATABASE_URL"] = database_url
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        session = boto3.session.Session(
            aws_access_key_id="bench", aws_secret_access_key="bench", region_name="us-east-1"
        )
        s3 = session.client("s3", endpoint_url=endpoint)
        sqs = session.client("sqs", endpoint_url=endpoint)
        s3.create_bucket(Bucket=BUCKET)
        queue = sqs.create_queue(QueueName="cascade-bench-events")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        s3.put_bucket_notification_configuration(
            Bucket=BUCKET,
            NotificationConfiguration={
                "QueueConfigurations": [
                    {"QueueArn": arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}
                ]
            },
        )
        subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
        )
        db = database_url or workdir / "cascade.sqlite3"
        return {
            "events": measure("events", {**env, "CASCADE_SQS_QUEUE_URL": queue}, s3, runs, poll_seconds, db),
            "polling": measure("polling", env, s3, runs, poll_seconds, db),
        }
    finally:
        moto.terminate()
        moto.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.events", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=SCALES, default="full")
    parser.add_argument("--runs", type=int, help="runs uploaded in each mode (5; small: 2)")
    parser.add_argument("--poll-seconds", type=int, help="the poll's interval (CASCADE_POLL_SECONDS: 30)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    options = parser.parse_args(argv)
    scale = SCALES[options.scale]
    runs = options.runs or scale["runs"]
    poll_seconds = options.poll_seconds or scale["poll_seconds"]
    figures = ready_times(runs, poll_seconds)
    print("| from metadata.json to ready | median | worst | runs | target |\n|---|---|---|---|---|")
    for mode, seconds in figures.items():
        label = "S3 events (moto's SQS)" if mode == "events" else f"polling every {poll_seconds} s"
        target = "within 3 s" if mode == "events" else f"{poll_seconds / 2:.0f} s on average"
        print(
            f"| {label} | {statistics.median(seconds):.2f} s | {max(seconds):.2f} s | {len(seconds)} | {target} |"
        )
    if options.json:
        options.json.write_text(json.dumps({"poll_seconds": poll_seconds, "seconds": figures}, indent=2))
    return 0 if max(figures["events"]) <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
