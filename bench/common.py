"""What the benchmarks share: scratch PostgreSQL databases, moto's S3 server, child processes
measured one by one (time and peak RSS), gunicorn and GETs of it, uploads of generated runs.

The benches run Cascade as it is deployed, as child processes (`manage.py ingest_traces`,
gunicorn) with the bench's settings (`child_env`), against scratch databases they create and
drop (`scratch_database`); `bench.reads` runs it in its own process instead.
"""

import http.client
import logging
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/cascade_bench"
DEFAULT_SERVER_URL = "postgres://postgres@127.0.0.1:5432"
BUCKET = "cascade-bench"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def log(message: str) -> None:
    """Progress, on stderr: stdout is for the figures."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- PostgreSQL ------------------------------------------------------------------------------


def server_url(database_url: str) -> str:
    """`postgres://user@host:port` from a database URL (its last path segment dropped)."""
    return database_url.rsplit("/", 1)[0] if database_url.count("/") > 2 else database_url


def database_url(server: str, name: str) -> str:
    return f"{server.rstrip('/')}/{name}"


@contextmanager
def scratch_database(server: str, label: str, *, template: str | None = None) -> Iterator[str]:
    """A new database with a unique name (a copy of `template`'s if given), dropped afterwards."""
    import psycopg

    name = f"cascade_bench_{label}_{os.getpid()}_{secrets.token_hex(3)}"
    admin = database_url(server, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield database_url(server, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def query(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def psql(url: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """psql without the user's .psqlrc, stopping at the first error."""
    return subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url, *args], check=True, **kwargs)


# --- S3 --------------------------------------------------------------------------------------


def _moto_thread():
    """moto's S3 and SQS server on a free port of 127.0.0.1, in a thread; (server, its URL)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request log lines
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


@contextmanager
def moto_server(*, own_process: bool = False) -> Iterator[str]:
    """moto's server on 127.0.0.1, stopped afterwards; its URL. In a thread of this process, or
    (`own_process`) a process of its own, for a bench that keeps this one's threads busy."""
    if not own_process:
        server, url = _moto_thread()
        try:
            yield url
        finally:
            server.stop()
        return
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not _answers(port):
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"moto's server does not answer on port {port}")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def s3_client(endpoint: str, service: str = "s3"):
    """A client of moto's server (S3, or `service`: SQS) with the bench's credentials."""
    import boto3

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=AWS_ENV["AWS_DEFAULT_REGION"],
        aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )


def upload_folder(
    client, bucket: str, folder: Path, base: str, *, rename: tuple[str, str] | None = None
) -> int:
    """Upload a generated run folder under `base` (`<prefix><run id>/`), metadata.json last,
    as the profiling harness does (tools/upload.py; boto3's multipart above its threshold).

    `rename` (old, new) rewrites the run folder named in metadata.json's keys: one generated
    folder uploaded as many runs. Returns the bytes uploaded.
    """
    from boto3.s3.transfer import TransferConfig

    from tools.upload import MULTIPART_CHUNK, MULTIPART_THRESHOLD

    config = TransferConfig(multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=MULTIPART_CHUNK)
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "metadata.json")
    total = 0
    for path in paths:
        client.upload_file(str(path), bucket, base + path.relative_to(folder).as_posix(), Config=config)
        total += path.stat().st_size
    metadata = (folder / "metadata.json").read_bytes()
    if rename:
        metadata = metadata.replace(rename[0].encode(), rename[1].encode())
    client.put_object(Bucket=bucket, Key=base + "metadata.json", Body=metadata)
    return total + len(metadata)


def upload_copies(
    client, bucket: str, folder: Path, prefix: str, template_id: str, run_ids: list[str]
) -> None:
    """The folder generated as `template_id` uploaded once per run id, a few runs at a time."""

    def one(run_id: str) -> int:
        return upload_folder(
            client, bucket, folder, f"{prefix}{run_id}/", rename=(f"/{template_id}/", f"/{run_id}/")
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        for done, _ in enumerate(pool.map(one, run_ids), start=1):
            if done % 500 == 0:
                log(f"  uploaded {done:,} of {len(run_ids):,} runs")


# --- Child processes ---------------------------------------------------------------------------


@dataclass
class Child:
    """A finished child process: its exit code, wall time, peak RSS, and what it printed."""

    args: list[str]
    returncode: int
    seconds: float
    max_rss: int  # bytes: the child's own peak resident set (VmHWM), from wait4's rusage
    stdout: str
    cpu_seconds: float = 0.0  # user and system, every thread's (wait4's rusage)

    def s3_requests(self) -> int | None:
        """From the pass summary (`... S3: N requests, ...`) of an ingest_traces pass."""
        found = re.findall(r"S3: (\d+) requests", self.stdout)
        return int(found[-1]) if found else None

    def summary_line(self) -> str:
        lines = [line for line in self.stdout.splitlines() if line.startswith("pass: ")]
        return lines[-1] if lines else ""

    def pass_seconds(self) -> float | None:
        """The pass's own time (`... in T s`), without the process's start."""
        found = re.search(r" in ([0-9.]+) s$", self.summary_line())
        return float(found.group(1)) if found else None

    def timing(self) -> str:
        """`12.3 s (11.1 s in the pass)`: wall time, then the pass's own where printed."""
        own = self.pass_seconds()
        wall = f"{self.seconds:,.1f} s" if self.seconds >= 10 else f"{self.seconds:,.2f} s"
        return wall if own is None else f"{wall} ({own:,.1f} s in the pass)"


def run_child(
    args: list[str], *, env: dict, timeout: float, cwd: Path = ROOT, hwm: Path | None = None
) -> Child:
    """Run `args` to its end (killed past `timeout`), stdout captured, stderr passed through.

    Peak RSS: the VmHWM the child wrote to `hwm` (`write_hwm`), else the child's own
    rusage from os.wait4 (not RUSAGE_CHILDREN's maximum over every child so far), which on
    Linux is at least this process's size at the fork (see `write_hwm`).
    """
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        process = subprocess.Popen(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out)
        killer = threading.Timer(timeout, _kill, (process.pid,))
        killer.start()
        reaped = False
        try:
            _, status, usage = os.wait4(process.pid, 0)
            reaped = True
        finally:
            killer.cancel()
            if not reaped:  # interrupted: the child goes too
                _kill(process.pid)
                process.wait(30)
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        stdout = out.read().decode(errors="replace")
    if process.returncode != 0:
        tail = "\n".join(stdout.splitlines()[-20:])
        raise RuntimeError(f"{' '.join(args)} exited with {process.returncode}:\n{tail}")
    if hwm is not None and hwm.exists() and hwm.read_text().strip():
        max_rss = int(hwm.read_text()) * 1024
    else:
        max_rss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # bytes on macOS, KiB on Linux
    return Child(args, process.returncode, seconds, max_rss, stdout, usage.ru_utime + usage.ru_stime)


def _kill(pid: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


# One secret for every child of a run: gunicorn's workers and the commands sign alike.
SECRET = f"bench-{secrets.token_hex(16)}"


def child_env(var_dir: str | Path | None = None, **settings: str) -> dict:
    """This environment without Django's and Cascade's settings, then the bench's (no request
    rate, `var_dir` as CASCADE_VAR_DIR), then `settings`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "CASCADE_", "DATABASE_URL", "AWS_"))
    }
    env.update(AWS_ENV, DJANGO_SETTINGS_MODULE="cascade.settings", CASCADE_LOG_LEVEL="WARNING")
    env.update(DJANGO_SECRET_KEY=SECRET, CASCADE_API_RATE="")
    if var_dir is not None:
        env["CASCADE_VAR_DIR"] = str(var_dir)
    env.update(settings)
    return env


# Cascade's processes on requirements.txt alone where `run.py bench` made it (a deployment's).
CASCADE_PYTHON = os.environ.get("CASCADE_BENCH_PYTHON") or sys.executable


def manage(*args: str, env: dict, timeout: float = 600) -> Child:
    """`python manage.py ARGS` in a child process, its peak RSS recorded by `write_hwm`."""
    if not Path("/proc/self/status").exists():
        return run_child([CASCADE_PYTHON, "manage.py", *args], env=env, timeout=timeout, cwd=ROOT)
    with tempfile.TemporaryDirectory(prefix="cascade-bench-hwm-") as tmp:
        hwm = Path(tmp) / "vmhwm"
        return run_child(
            [CASCADE_PYTHON, str(ROOT / "bench" / "common.py"), str(hwm), "manage.py", *args],
            env={**env, "PYTHONPATH": str(ROOT)},
            timeout=timeout,
            cwd=ROOT,
            hwm=hwm,
        )


def create_token(env: dict, name: str, *args: str) -> str:
    """A new API token (`manage.py create_token NAME ARGS`), the last word it prints."""
    return manage("create_token", name, *args, env=env).stdout.split()[-1]


def expect_ready(database_url: str, run_id: str, launches: int) -> None:
    """The trace of `run_id` is ready with `launches` kernels, or the figure is not taken."""
    state, count = query(
        database_url, "SELECT state, kernel_count FROM traces_trace WHERE id = %s", (run_id,)
    )[0]
    if state != "ready" or count != launches:
        raise RuntimeError(f"{run_id} came out {state} with {count} launches, not ready with {launches}")


def peak_rss() -> int:
    """This process's own peak RSS in bytes: VmHWM, or ru_maxrss where there is no /proc."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def write_hwm(path: str) -> None:
    """The process's own peak RSS (VmHWM, KiB) into `path` as it exits (`python bench/common.py
    OUT SCRIPT ARGS...`). Not wait4's ru_maxrss: Linux carries into it the RSS of the image exec
    replaced (a vfork'd child's, its large parent's)."""
    with open(path, "w") as out:
        out.write(str(peak_rss() // 1024))


def best_of(repeat: int, work) -> tuple[float, object]:
    """The least seconds of `repeat` calls of `work()`, and what the last call returned."""
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - started)
    return best, result


def _answers(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def gunicorn(env: dict, *, start_timeout: float = 120) -> Iterator[int]:
    """`gunicorn cascade.wsgi` with ./gunicorn.conf.py (production's settings) on 127.0.0.1;
    yields its port once it answers, stops it (quick shutdown, then kill) afterwards."""
    import urllib.error
    import urllib.request

    port = free_port()
    process = subprocess.Popen(
        [CASCADE_PYTHON, "-m", "gunicorn", "cascade.wsgi"],
        cwd=ROOT,
        env={**env, "CASCADE_BIND": f"127.0.0.1:{port}", "GUNICORN_CMD_ARGS": "--log-level warning"},
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its workers with it, if it must be killed
    )
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {process.returncode} before answering")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/traces", timeout=5).close()
                break
            except urllib.error.HTTPError:
                break  # 401: it answers
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"gunicorn did not answer within {start_timeout:.0f} s") from None
                time.sleep(0.2)
        yield port
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # quick shutdown: nothing is left to finish
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                # The master and its workers: a worker left alive keeps the port, and the
                # bench's output open for whoever reads it to its end.
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (bytes) and PPid of a process, from /proc."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM", "PPid"):
            values[name] = int(rest.split()[0]) * (1 if name == "PPid" else 1024)
    return values


def gunicorn_processes(port: int) -> dict[int, dict[str, int]]:
    """Each gunicorn process bound to `port` (its environment says so), master and workers:
    its `proc_status`."""
    found = {}
    marker = f"CASCADE_BIND=127.0.0.1:{port}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found[int(pid)] = proc_status(int(pid))
        except OSError:
            continue
    return found


def gunicorn_workers(port: int) -> list[int]:
    """The pids of the workers of the gunicorn on `port` (those whose parent is its master)."""
    processes = gunicorn_processes(port)
    return sorted(pid for pid, status in processes.items() if status["PPid"] in processes)


def setup() -> str:
    """Cascade in this process (`bench.reads`): Django configured for the bench database
    (created and migrated if need be) and moto's S3; returns the database URL."""
    import psycopg

    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(database_url(server_url(url), "postgres"), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    _, endpoint = _moto_thread()  # for the life of this process
    os.environ.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="cascade.settings",
        CASCADE_S3_BUCKET=BUCKET,
        CASCADE_S3_ENDPOINT_URL=endpoint,
        CASCADE_LOG_LEVEL="WARNING",
        **AWS_ENV,
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    from ingest import bucket

    call_command("migrate", verbosity=0, interactive=False)
    bucket.ensure_bucket()
    return url


@dataclass
class Answer:
    status: int
    headers: dict  # lower-cased names
    nbytes: int  # the body as sent (compressed if it was), without chunked framing
    seconds: float  # from sending the request to the body's last byte
    body: bytes | None = None  # with keep=True


def http_get(port: int, path: str, headers: dict, *, timeout=900, keep=False, method="GET") -> Answer:
    """A GET (or `method`) to 127.0.0.1:port read to its end, the body counted (kept if asked), not decoded."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        started = time.perf_counter()
        conn.request(method, path, headers=headers)
        response = conn.getresponse()
        nbytes, kept = 0, []
        while chunk := response.read(1 << 20):
            nbytes += len(chunk)
            if keep:
                kept.append(chunk)
        seconds = time.perf_counter() - started
        headers = {k.lower(): v for k, v in response.getheaders()}
        return Answer(response.status, headers, nbytes, seconds, b"".join(kept) if keep else None)
    finally:
        conn.close()


def shared_fixture(*parts: str) -> Path | None:
    """A real file from a public repository under CASCADE_SHARED_FIXTURES (read here only), or
    None where it is unset: the benches that build on one take it as an option's default."""
    root = os.environ.get("CASCADE_SHARED_FIXTURES")
    return Path(root, *parts) if root else None


if __name__ == "__main__":
    import atexit
    import runpy

    out_file, script, *script_args = sys.argv[1:]
    atexit.register(write_hwm, out_file)
    sys.argv = [script, *script_args]
    runpy.run_path(script, run_name="__main__")
