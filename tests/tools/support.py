"""Helpers the tools tests share: the demo started, read and waited for (not tests themselves)."""

import os
import queue
import socket
import subprocess
import threading
import time
from pathlib import Path


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def listening(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port.split("/")[0]))) == 0


def start_demo(command: list[str], env: dict, **popen) -> tuple[subprocess.Popen, queue.Queue]:
    """The interactive demo started by `command` in the repository, its output (stderr too)
    read line by line on a thread: None once it ends."""
    demo = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=read_lines, args=(demo.stdout, lines), daemon=True).start()
    return demo, lines


def wait_until_ready(lines: queue.Queue, output: list[str]) -> dict[str, int]:
    """Reads the demo's lines into `output` until it says "Ctrl-C stops everything" (TIMEOUT s
    at most): the processes it started, by name, as its `demo: processes:` line says."""
    deadline = time.monotonic() + TIMEOUT
    while not any("Ctrl-C stops everything" in line for line in output):
        line = lines.get(timeout=max(1, deadline - time.monotonic()))
        assert line is not None, "".join(output)
        output.append(line)
    named = "".join(output).split("demo: processes: ")[1].split("\n")[0].split()
    return {name: int(pid) for name, pid in (item.split("=") for item in named)}


ROOT = Path(__file__).resolve().parents[2]


TIMEOUT = 240


def read_lines(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)
