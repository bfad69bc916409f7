#!/usr/bin/env python3
"""Cascade's two commands, with nothing but Python 3.11+ on the machine.

    python3 run.py demo     set up, then run Cascade on embedded defaults
    python3 run.py test     set up, then run the whole test suite on every core (pytest arguments
                            may follow; `-n 0` runs it in one process)
    python3 run.py bench    set up, then print the lab-scale benchmark table (`python -m bench`;
                            `--scale small` for a quick look, `--output FILE` to keep it, `--help`)

Setup is a virtualenv in .venv with requirements-demo.txt installed for `demo` (what a deployment
runs, requirements.txt, and the demo's embedded S3), and requirements-dev.txt for `test` and
`bench` (that, and the tools that test, lint and measure it); it is redone only when one of the
files it installs changes, the client's (client/, which requirements.txt installs) included.
`bench` also keeps .venv-deployed, requirements.txt alone, to run Cascade's processes as a
deployment does (bench/common.py's CASCADE_PYTHON).
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
DEPLOYED_VENV = VENV.with_name(f"{VENV.name}-deployed")
# Each file includes the one before it (`-r`): installing the last installs them all.
REQUIREMENTS = ROOT / "requirements.txt"
DEMO_REQUIREMENTS = ROOT / "requirements-demo.txt"
DEV_REQUIREMENTS = ROOT / "requirements-dev.txt"
# The client, which requirements.txt installs from its folder (`./client`), not from a registry.
CLIENT = ROOT / "client"
MIN_PYTHON = (3, 11)


def venv_python(folder: Path = VENV) -> Path:
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def tree_digest(folder: Path) -> str:
    """The SHA-256 of a package's sources: every file under `folder`, by its path, but for what
    building and running it leave there (build/, dist/, *.egg-info, __pycache__)."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        built = any(part in ("build", "dist", "__pycache__") or part.endswith(".egg-info") for part in parts)
        if path.is_file() and not built:
            content = path.read_bytes()
            digest.update(f"{'/'.join(parts)} {len(content)}\n".encode() + content)
    return digest.hexdigest()


def setup(*, dev: bool) -> Path:
    """Create .venv and install requirements-demo.txt (requirements-dev.txt when `dev`) unless
    it is already installed as it is."""
    return installed(VENV, (REQUIREMENTS, DEMO_REQUIREMENTS, *((DEV_REQUIREMENTS,) if dev else ())))


def installed(folder: Path, files: tuple[Path, ...]) -> Path:
    """The Python of a virtualenv in `folder` with the last of `files` installed (each includes
    the one before it), made or brought up to date where it is not."""
    if sys.version_info < MIN_PYTHON:
        sys.exit(f"Cascade needs Python {'.'.join(map(str, MIN_PYTHON))}+, this is {sys.version.split()[0]}")
    python = venv_python(folder)
    if not python.exists():
        print(f"run.py: creating a virtualenv in {folder}", flush=True)
        venv.create(folder, with_pip=True)
    # One line per file installed, "<name> <sha256>", and one for the client's sources: a demo
    # after the tests finds what it needs installed as it is and installs nothing; a change to a
    # file reinstalls what it lists, a change to the client reinstalls the client.
    stamp = folder / ".requirements.sha256"
    wanted = {f"{path.name} {hashlib.sha256(path.read_bytes()).hexdigest()}" for path in files}
    wanted.add(f"{CLIENT.name}/ {tree_digest(CLIENT)}")
    installed = set(stamp.read_text().splitlines()) if stamp.exists() else set()
    if not wanted <= installed:
        print(f"run.py: installing {files[-1].name}", flush=True)
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
        # In ROOT: requirements.txt names the client by its relative path (`./client`), which pip
        # builds and installs again on every install, so a changed client is the one installed.
        subprocess.run([*pip, "-r", str(files[-1])], check=True, cwd=ROOT)
        stamp.write_text("".join(f"{line}\n" for line in sorted(wanted)))
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
    python = setup(dev=argv[0] in ("test", "bench"))
    if argv[0] == "bench":
        os.environ["CASCADE_BENCH_PYTHON"] = str(installed(DEPLOYED_VENV, (REQUIREMENTS,)))
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
