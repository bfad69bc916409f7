"""`python3 run.py demo` stops everything when its own process is told to: a
terminal's Ctrl-C reaches the whole process group, but a service manager, a script or
`kill` signal the one process they started, run.py, which used to die (SIGTERM) or wait for
ever (SIGINT) while the demo it had started went on running."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tools.support import gone, listening, start_demo, wait_until_ready

pytestmark = pytest.mark.slow


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


def kill(pid: int) -> None:
    """SIGKILL to `pid`'s group if it leads one (the demo's children do), else to it alone."""
    try:
        os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads children from /proc (Linux)")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_signal_to_the_run_py_process_alone_stops_every_child(demo_env, signum):  # noqa: F811
    # Its own session: the signal below reaches run.py's PID only, never a process group.
    run, lines = start_demo([sys.executable, "run.py", "demo"], demo_env, start_new_session=True)
    output: list[str] = []
    pids: dict[str, int] = {}
    survivors: dict[str, int] = {}
    returncode = None
    try:
        pids = wait_until_ready(lines, output)
        pids["demo"] = next(iter(children(run.pid)))
        url = next(line.split()[1] for line in output if line.strip().startswith("URL"))

        os.kill(run.pid, signum)
        try:
            returncode = run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 30
        while not all(gone(pid) for pid in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        survivors = {name: pid for name, pid in pids.items() if not gone(pid)}
    finally:  # whatever happened, leave nothing behind
        for pid in [*pids.values(), run.pid]:
            kill(pid)
    assert survivors == {}, "".join(output[-20:])
    assert set(pids) == {"s3", "poller", "web", "demo"}
    assert returncode is not None, "run.py did not exit"
    assert returncode in (0, 128 + signum, -signum), returncode
    assert not listening(url)
