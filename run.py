#!/usr/bin/env python3
"""Cascade's two commands, with nothing but Python 3.11+ on the machine.

    python3 run.py demo     set up, then run Cascade on embedded defaults
    python3 run.py test     set up, then run the whole test suite on every core (pytest arguments
                            may follow; `-n 0` runs it in one process)
    python3 run.py bench    set up, then print the lab-scale benchmark table (`python -m bench`;
                            `--scale small` for a quick look, `--help` for the options)

Setup is a virtualenv in .venv with requirements.txt installed; it is redone only when
requirements.txt changes.
"""

import hashlib
import os
import signal
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("CASCADE_VENV", ROOT / ".venv"))
REQUIREMENTS = ROOT / "requirements.txt"
MIN_PYTHON = (3, 11)


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def setup() -> Path:
    """Create .venv and install requirements.txt unless it is already installed as is."""
    if sys.version_info < MIN_PYTHON:
        sys.exit(f"Cascade needs Python {'.'.join(map(str, MIN_PYTHON))}+, this is {sys.version.split()[0]}")
    python = venv_python()
    if not python.exists():
        print(f"run.py: creating a virtualenv in {VENV}", flush=True)
        venv.create(VENV, with_pip=True)
    stamp = VENV / ".requirements.sha256"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if not stamp.exists() or stamp.read_text() != wanted:
        print("run.py: installing requirements.txt", flush=True)
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
        subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
        stamp.write_text(wanted)
    return python


def chose_processes(pytest_args: list[str]) -> bool:
    """Whether the pytest arguments already say how many processes (`-n 0` runs in one)."""
    return any(
        arg in ("-n", "--numprocesses", "no:xdist", "-pno:xdist") or arg.startswith(("-n", "--numprocesses="))
        for arg in pytest_args
    )


def main(argv: list[str]) -> int:
    commands = {"demo": ["-m", "tools.demo"], "test": ["-m", "pytest"], "bench": ["-m", "bench"]}
    if not argv or argv[0] not in commands:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    python = setup()
    os.chdir(ROOT)
    arguments = argv[1:]
    if argv[0] == "test" and not chose_processes(arguments):
        arguments = ["-n", "auto", *arguments]  # pytest-xdist: one worker per core
    # The demo in a session of its own: a terminal's Ctrl-C reaches run.py alone, which passes
    # it on once, as it passes on a `kill` of its PID (a service manager, a script), and the
    # demo stops what it started. Tests and the bench stay in the terminal's process group.
    own_session = argv[0] == "demo" and os.name == "posix"
    process = subprocess.Popen([str(python), *commands[argv[0]], *arguments], start_new_session=own_session)
    forwarded = (signal.SIGTERM, signal.SIGINT) if own_session else (signal.SIGTERM,)
    for signum in forwarded:
        signal.signal(signum, lambda signum, frame: process.send_signal(signum))
    while True:
        try:
            code = process.wait()
            return 128 - code if code < 0 else code  # killed by a signal: the shell's convention
        except KeyboardInterrupt:
            # Ctrl-C reached the child too: let it stop what it started, however long that takes.
            continue


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # during setup
        sys.exit(130)
