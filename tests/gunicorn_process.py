"""gunicorn as docs/production.md runs it (gunicorn.conf.py), in a child process the test can read."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_environ(**extra: str) -> dict[str, str]:
    """The environment without the test run's Django, Cascade and metrics settings, plus `extra`."""
    prefixes = ("DJANGO_", "CASCADE_", "DATABASE_URL", "PROMETHEUS_MULTIPROC_DIR")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(prefixes)}, **extra}


class Gunicorn:
    def __init__(self, process: subprocess.Popen, port: int, stderr_path: Path):
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.stderr_path = stderr_path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def get(self, path: str, headers: dict | None = None, timeout: float = 10) -> tuple[int, dict, bytes]:
        """(status, headers, body) of a GET, whatever the status."""
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in children.read_text().split()]


@contextmanager
def gunicorn(env: dict[str, str], workdir: Path, *, workers: int = 1) -> Iterator[Gunicorn]:
    """gunicorn on a free port of 127.0.0.1, answering once /healthz does; stopped after."""
    port = free_port()
    stderr_path = workdir / f"gunicorn-{port}.stderr"
    env = {**env, "CASCADE_BIND": f"127.0.0.1:{port}", "CASCADE_WEB_WORKERS": str(workers)}
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "cascade.wsgi"], cwd=ROOT, env=env, stderr=stderr
        )
    server = Gunicorn(process, port, stderr_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{server.url}/healthz", timeout=1).close()
                break
            except urllib.error.HTTPError:
                break  # it answers
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"gunicorn did not start:\n{server.stderr()}") from None
                time.sleep(0.1)
        if workers > 1:  # every worker up, not only the first
            while len(server.worker_pids()) < workers and time.monotonic() < deadline:
                time.sleep(0.1)
        yield server
    finally:
        # Quick shutdown: nothing is left to finish, and a graceful one waits for idle workers.
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
