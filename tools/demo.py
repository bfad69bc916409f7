"""Cascade on embedded defaults, in one command: `python3 run.py demo` (or `python -m tools.demo`).

Starts what a deployment runs, as child processes of this one: an S3 endpoint (moto's server
on 127.0.0.1, unless CASCADE_S3_BUCKET or CASCADE_S3_ENDPOINT_URL point elsewhere), the poller
(`manage.py ingest_traces --watch`) and the web server, on SQLite in var/demo unless
DATABASE_URL is set, all on the demo's settings (cascade.settings_demo: the tools app too). It uploads the sample traces, waits until the poller has made them
ready *through the API*, and prints how to use it. Ctrl-C stops everything it started.

Sweeps created in the demo publish their jobs on an embedded broker, kombu's file transport in
var/demo/broker (`filesystem:///...`, cascade_client.broker), unless CELERY_BROKER_URL names
RabbitMQ or Redis; the banner prints the `cascade worker` command that consumes them there.

`--check` does the same without a human: start, wait for the samples, query the API, stop
everything, and exit 0 only if the samples came out as expected (the showcase with every launch
its timeline.json lists, those captured into CUDA graphs without totals), and a simulation uploaded
to the embedded S3 once the samples are ready (a Turing sample's log, as tools/simulation.py writes
it) reads `ready` through the API within 10 s of its simulation.json. Its last line on
stdout is a JSON report (the API's answers and the pids it started), for the test that runs it.

`--events` runs the poller on S3's event notifications (`ingest_traces --watch --events`): on the
embedded S3, moto's SQS holds the queue the bucket notifies before the samples are uploaded; the
poller reads the queue before its first (reconciling) poll, so the samples are ingested from their
events alone (the report counts the traces made ready before that poll). On another endpoint,
CASCADE_SQS_QUEUE_URL names a queue already notified (docs/production.md).
"""

import argparse
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from io import StringIO
from pathlib import Path

from tools.demo_check import SAMPLES, SHOWCASE, SampleChecks

ROOT = Path(__file__).resolve().parent.parent
DEMO_MARKER = ".cascade-demo"
LOG_INFO = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ INFO ")
# The web server's port when none is given: the client's default address (`cascade` without
# CASCADE_URL talks to http://127.0.0.1:8000), and Django's. Taken when free; else a free one.
DEFAULT_PORT = 8000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def notify_queue(endpoint: str) -> str:
    """A queue on the embedded endpoint (moto's SQS) that the bucket sends its created and
    removed events to, as docs/production.md sets one up on AWS; its URL."""
    import boto3

    from ingest import bucket

    sqs = boto3.client("sqs", endpoint_url=endpoint)
    url = sqs.create_queue(QueueName="cascade-demo-events")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    bucket.client().put_bucket_notification_configuration(
        Bucket=bucket.bucket_name(),
        NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]
        },
    )
    return url


class Demo:
    def __init__(self, *, check: bool, web_port: int | None, timeout: float, events: bool = False):
        self.check = check
        self.events = events
        self.first_pass = threading.Event()  # the poller's first poll is over
        self.ready_before_first_pass = 0  # traces the poller made ready from events alone
        self.timeout = timeout
        self.processes: dict[str, subprocess.Popen] = {}
        self.threads: list[threading.Thread] = []
        self.env = dict(os.environ)
        self.var_dir = Path(self.env.get("CASCADE_VAR_DIR") or ROOT / "var" / "demo")
        self.log_dir = self.var_dir / "logs"
        self.embedded_s3 = not (self.env.get("CASCADE_S3_BUCKET") or self.env.get("CASCADE_S3_ENDPOINT_URL"))
        self.embedded_db = not self.env.get("DATABASE_URL")
        self.embedded_broker = not self.env.get("CELERY_BROKER_URL")
        self.s3_port = int(self.env.get("CASCADE_DEMO_S3_PORT") or free_port()) if self.embedded_s3 else None
        self.web_port = web_port or int(self.env.get("CASCADE_DEMO_PORT") or self.default_port())
        self.url = f"http://127.0.0.1:{self.web_port}"
        self.token = ""

    def default_port(self) -> int:
        """8000 (what the client assumes) when it is free; `--check` takes a free port, so that
        runs side by side (tests, CI) never meet."""
        if not self.check and not port_open(DEFAULT_PORT):
            return DEFAULT_PORT
        return free_port()

    # --- output ---------------------------------------------------------------------------

    def say(self, message: str) -> None:
        print(f"demo: {message}", file=sys.stderr if self.check else sys.stdout, flush=True)

    # --- setup ----------------------------------------------------------------------------

    def configure(self) -> None:
        """The environment this process and its children share; then Django, in-process."""
        env = self.env
        env["CASCADE_VAR_DIR"] = str(self.var_dir)
        # Cascade's settings and the tools app, whose load_samples the demo runs (and the
        # operator may, with the `export` line it prints).
        env["DJANGO_SETTINGS_MODULE"] = "cascade.settings_demo"
        env["PYTHONUNBUFFERED"] = "1"
        if self.embedded_s3:
            env["CASCADE_S3_ENDPOINT_URL"] = f"http://127.0.0.1:{self.s3_port}"
            env["CASCADE_S3_BUCKET"] = "cascade-demo"
            # moto accepts any credentials; boto3 refuses to sign without some.
            env.setdefault("AWS_ACCESS_KEY_ID", "demo")
            env.setdefault("AWS_SECRET_ACCESS_KEY", "demo")
            env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        env.setdefault("CASCADE_S3_BUCKET", "cascade-demo")
        if self.embedded_broker:
            # Every process the demo starts, and the workers its banner tells of, on one folder.
            env["CELERY_BROKER_URL"] = f"filesystem://{(self.var_dir / 'broker').resolve()}"
        if self.embedded_s3 and self.embedded_db:
            self.fresh_database()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        os.environ.update(env)
        import django

        django.setup()

    def fresh_database(self) -> None:
        """The embedded S3 lives in memory, so its database must start empty too.

        Only a folder this demo created (it holds the marker) is cleared: a CASCADE_VAR_DIR
        that points at someone's data is never touched.
        """
        marker = self.var_dir / DEMO_MARKER
        if self.var_dir.exists() and not marker.exists() and any(self.var_dir.iterdir()):
            self.say(f"{self.var_dir} is not a demo folder: keeping its database as it is")
            return
        self.var_dir.mkdir(parents=True, exist_ok=True)
        marker.touch()
        for name in (
            "cascade.sqlite3",
            "cascade.sqlite3-journal",
            "cascade.sqlite3-wal",
            "cascade.sqlite3-shm",
        ):
            (self.var_dir / name).unlink(missing_ok=True)
        if self.embedded_broker:  # the jobs of the sweeps of the database just cleared
            shutil.rmtree(self.var_dir / "broker", ignore_errors=True)

    def start(self, name: str, argv: list[str], *, echo: bool = False) -> subprocess.Popen:
        """A child in its own process group: the terminal's Ctrl-C reaches only this process,
        which then stops the children in order instead of leaving half of them behind."""
        log = open(self.log_dir / f"{name}.log", "w", encoding="utf-8")  # noqa: SIM115
        options = (
            {"start_new_session": True}
            if os.name == "posix"
            else {
                "creationflags": subprocess.CREATE_NEW_PROCESS_GROUP  # type: ignore[attr-defined]
            }
        )
        process = subprocess.Popen(
            [sys.executable, *argv],
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            **options,
        )
        self.processes[name] = process
        thread = threading.Thread(target=self.copy_output, args=(name, process, log, echo), daemon=True)
        thread.start()
        self.threads.append(thread)
        return process

    def copy_output(self, name: str, process: subprocess.Popen, log, echo: bool) -> None:
        with log:
            for line in process.stdout:
                log.write(line)
                log.flush()
                if name == "poller" and line.startswith("pass: "):
                    self.first_pass.set()
                elif name == "poller" and " -> ready, " in line and not self.first_pass.is_set():
                    self.ready_before_first_pass += 1
                # The poller's per-pass summary and INFO log lines would drown its news.
                if echo and not self.check and not line.startswith("pass: ") and not LOG_INFO.match(line):
                    print(f"{name}: {line}", end="", flush=True)

    def wait_for_port(self, name: str, port: int) -> None:
        deadline = time.monotonic() + 60
        while not port_open(port):
            self.ensure_running()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not listen on 127.0.0.1:{port} within 60 s")
            time.sleep(0.1)

    def ensure_running(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {process.returncode}; see {self.log_dir / (name + '.log')}"
                )

    def setup(self) -> tuple[str, str]:
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.db import connections

        from ingest import bucket

        if self.embedded_s3:
            self.start("s3", ["-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.s3_port)])
            self.wait_for_port("s3", self.s3_port)
            self.say(f"embedded S3 (moto) on http://127.0.0.1:{self.s3_port}, bucket {bucket.bucket_name()}")
        else:
            self.say(
                f"S3 bucket {bucket.bucket_name()} at {self.env.get('CASCADE_S3_ENDPOINT_URL') or 'AWS'}"
            )
        if self.embedded_broker:
            self.say(
                f"embedded broker (kombu's file transport) for sweep jobs: {self.env['CELERY_BROKER_URL']}"
            )
        call_command("migrate", verbosity=0, interactive=False)
        call_command("collectstatic", verbosity=0, interactive=False)
        if self.embedded_s3 or self.env.get("CASCADE_S3_ENDPOINT_URL"):
            bucket.ensure_bucket()
        if self.events:
            self.notify_queue()
        out = StringIO()
        call_command("load_samples", stdout=out)
        for line in out.getvalue().splitlines():
            self.say(f"samples: {line}")

        password = self.env.get("CASCADE_DEMO_ADMIN_PASSWORD") or ""
        admin, created = get_user_model().objects.get_or_create(
            username="admin", defaults={"is_staff": True, "is_superuser": True}
        )
        if created or password:
            password = password or secrets.token_urlsafe(12)
            admin.set_password(password)
            admin.is_staff = admin.is_superuser = admin.is_active = True
            admin.save()
        else:
            password = (
                "(unchanged: the existing admin's password; set CASCADE_DEMO_ADMIN_PASSWORD to reset it)"
            )
        self.token = self.issue_token()
        connections.close_all()  # the children use the database from here on

        manage = str(ROOT / "manage.py")
        poller = ["--watch", "--events"] if self.events else ["--watch", "--interval", "2"]
        self.start("poller", [manage, "ingest_traces", *poller], echo=True)
        self.start("web", [manage, "runserver", f"127.0.0.1:{self.web_port}", "--noreload"])
        self.wait_for_port("web", self.web_port)
        self.say("processes: " + " ".join(f"{name}={p.pid}" for name, p in self.processes.items()))
        return "admin", password

    @staticmethod
    def issue_token() -> str:
        """The demo's token: a `write` one, so that `cascade simulate` may upload simulations."""
        from django.core.management import call_command

        out = StringIO()
        call_command("create_token", "demo", scope="write", stdout=out, stderr=StringIO())
        return out.getvalue().strip().splitlines()[-1]

    def notify_queue(self) -> None:
        """The queue the bucket notifies, made on the embedded S3 (before the samples land)."""
        if self.embedded_s3:
            self.env["CASCADE_SQS_QUEUE_URL"] = notify_queue(self.env["CASCADE_S3_ENDPOINT_URL"])
        elif not self.env.get("CASCADE_SQS_QUEUE_URL"):
            raise RuntimeError("--events on your own bucket needs CASCADE_SQS_QUEUE_URL (docs/production.md)")
        self.say(f"S3 events through {self.env['CASCADE_SQS_QUEUE_URL']}")

    # --- stopping ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the children, newest first: the web server, the poller, then S3."""
        for name, process in reversed(list(self.processes.items())):
            if process.poll() is None:
                self.signal(process, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.say(f"{name} ignored SIGTERM: killing it")
                    self.signal(process, signal.SIGKILL if os.name == "posix" else signal.SIGTERM)
                    process.wait()
        for thread in self.threads:
            thread.join(timeout=5)
        if self.processes:
            self.say("stopped " + ", ".join(self.processes))

    @staticmethod
    def signal(process: subprocess.Popen, signum: int) -> None:
        try:
            if os.name == "posix":
                os.killpg(process.pid, signum)  # the whole group: no grandchild outlives the demo
            else:
                process.terminate()
        except ProcessLookupError:
            pass

    # --- the two modes --------------------------------------------------------------------------

    def run(self) -> int:
        self.configure()
        username, password = self.setup()
        self.say(f"waiting for the poller to ingest the samples (up to {self.timeout:.0f} s)...")
        checks = SampleChecks(
            self.url, self.token, timeout=self.timeout, ensure_running=self.ensure_running, say=self.say
        )
        traces = checks.wait_for_samples()
        curl = f'curl -H "Authorization: Bearer {self.token}" {self.url}/api/traces/{SHOWCASE}'
        if self.check:
            uploaded = checks.check_simulation_upload(embedded_s3=self.embedded_s3)
            return self.report(traces, curl, uploaded, checks)
        ready = ", ".join(f"{t['id']} ({t['state']}, {t['kernel_count']} kernels)" for t in traces)
        print(
            f"\nCascade is running.\n\n"
            f"  URL          {self.url}/\n"
            f"  API token    {self.token}\n"
            f"  admin login  {self.url}/admin/  user {username}  password {password}\n"
            f"  S3           {self.env.get('CASCADE_S3_ENDPOINT_URL') or 'AWS'}  bucket {self.env['CASCADE_S3_BUCKET']}"
            f"{'  (any credentials)' if self.embedded_s3 else ''}\n"
            f"  samples      {ready}\n"
            f"  logs         {self.log_dir}\n\n"
            f"The client (`pip install ./client`), from any terminal:\n"
            f"  export CASCADE_URL={self.url}\n"
            f"  export CASCADE_TOKEN={self.token}\n"
            f"  cascade traces\n\n"
            f"Simulation workers for sweeps (docs/simulations.md), with the two exports above, on "
            f"{'this machine' if self.embedded_broker else 'any host that reaches the broker'}\n"
            f"where Accel-Sim is built (ROOT: its accel-sim-framework checkout):\n"
            f"  {self.worker_command()}\n\n"
            f"Try:\n  {curl}\n\n"
            f"manage.py against this demo, from another terminal in {ROOT}:\n"
            f"  {self.manage_env()}\n"
            f"  .venv/bin/python manage.py create_token me | tail -1\n\n"
            f"Upload your own runs to s3://{self.env['CASCADE_S3_BUCKET']}/"
            f"{self.env.get('CASCADE_S3_PREFIX', 'accelsim-traces/')}<run>/ "
            f"(docs/trace-a-workload.md). Ctrl-C stops everything.\n",
            flush=True,
        )
        while True:
            self.ensure_running()
            time.sleep(0.5)

    def worker_command(self) -> str:
        """The `cascade worker` command that consumes this demo's sweep jobs."""
        return f"cascade worker --accel-sim ROOT --broker {shlex.quote(self.env['CELERY_BROKER_URL'])}"

    def manage_env(self) -> str:
        """The `export` line that points manage.py at this demo's settings, database and bucket."""
        names = [
            "DJANGO_SETTINGS_MODULE",
            "CASCADE_VAR_DIR",
            "DATABASE_URL",
            "CASCADE_S3_BUCKET",
            "CASCADE_S3_ENDPOINT_URL",
            "CELERY_BROKER_URL",
        ]
        if self.embedded_s3:
            names += ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"]
        values = {name: self.env[name] for name in names if self.env.get(name)}
        return "export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in values.items())

    def report(self, traces: list[dict], curl: str, uploaded: dict, checks: SampleChecks) -> int:
        """`--check`'s verdict, and its last line on stdout: the JSON report the test reads."""
        detail, problems = checks.showcase(uploaded)
        simulations, wrong = checks.sample_simulations()
        report = {
            "url": self.url,
            "token": self.token,
            "curl": curl,
            "pids": {name: p.pid for name, p in self.processes.items()},
            "worker": self.worker_command(),
            "events": self.events,
            "ready_before_first_poll": self.ready_before_first_pass,
            "traces": traces,
            "detail": detail,
            "simulation_upload": uploaded,
            "sample_simulations": simulations,
            "problems": problems + wrong,
        }
        self.say("check: " + ("passed" if not report["problems"] else "; ".join(report["problems"])))
        print(json.dumps(report), flush=True)
        return 1 if report["problems"] else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="start, wait for the samples, query the API, stop"
    )
    parser.add_argument(
        "--port", type=int, help="the web server's port (default: CASCADE_DEMO_PORT or a free one)"
    )
    parser.add_argument("--timeout", type=float, default=180, help="seconds to wait for the samples (180)")
    parser.add_argument(
        "--events", action="store_true", help="ingest from S3's event notifications (moto's SQS), not polls"
    )
    args = parser.parse_args(argv)
    if not SAMPLES.is_dir():
        print(f"demo: no samples in {SAMPLES}", file=sys.stderr)
        return 2
    demo = Demo(check=args.check, web_port=args.port, timeout=args.timeout, events=args.events)

    def interrupted(signum, frame):
        # Once: a second signal (Ctrl-C pressed again, run.py passing one on) must not cut
        # short the stop that the first one started; stop() kills what ignores SIGTERM.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    # Also when started with SIGINT ignored (`&` in a non-interactive shell, nohup), where
    # Python leaves it ignored: Ctrl-C or `kill -INT` must still stop the demo.
    signal.signal(signal.SIGINT, interrupted)
    try:
        return demo.run()
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 0 if not demo.check else 130
    except (RuntimeError, urllib.error.URLError, OSError) as problem:
        demo.say(f"error: {problem}")
        return 1
    finally:
        demo.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
