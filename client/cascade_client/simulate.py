"""`cascade simulate`: pull a trace, run the researcher's own Accel-Sim on it, bring the accuracy back.

Cascade never builds or ships the simulator: ROOT (`--accel-sim`, or `ACCEL_SIM_ROOT`) is an
accel-sim-framework checkout built as its README says. What a real build showed
(docs/simulations.md, "Simulate a trace") decides each step:

- the post-processor exits 0 when it fails and, for `.xz`, returns before its `xz` writers
  finish: its output is checked, each `.traceg.xz` waited for until `xz -t` passes;
- the simulator stops on what it cannot run, often with exit status 0: a config it does not
  have, a SASS version it has no opcode map for, a kernel list naming a file that is not
  there, a 4-field MemcpyHtoD line. Those are refused (or fixed: the memcpy lines are cut to 3
  fields) before it starts, each in one line;
- the log, not the exit status, says what was simulated: the log goes to Cascade whenever the
  simulator ran, and Cascade's answer (pairs, metrics, what was left out) is printed.

`jobs` is the pull's downloads at once and the `xz -t` checks at once; the simulator is
single-threaded and one run is one simulation (one log), so it runs once.
"""

import inspect
import json
import lzma
import os
import re
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from cascade_client import answers
from cascade_client.accel_sim import (
    SimulateError,
    arch_version,
    builds,
    check_sass,
    check_tree,
    config_folder,
    prepare,
    run_simulator,
    suggestion_note,
)
from cascade_client.errors import CascadeError
from cascade_client.paths import name_problem
from cascade_client.uploads import bucket_client, post_json, send

SIM_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
POLL_SECONDS = 900.0  # how long Cascade may take to read the log


@dataclass
class Timing:
    """Where the wall time went: Cascade's share is everything but `simulator`."""

    pull: float = 0.0
    prepare: float = 0.0  # post-processing, checks, the work folder
    simulator: float = 0.0
    upload: float = 0.0  # compressing the log, the PUTs, /complete
    read: float = 0.0  # waiting for Cascade to read the log

    @property
    def cascade(self) -> float:
        return self.pull + self.upload + self.read

    @property
    def total(self) -> float:
        return self.pull + self.prepare + self.simulator + self.upload + self.read


@dataclass
class SimulateResult:
    trace_id: str
    name: str
    workdir: Path
    log: Path
    exit_status: int | None
    simulation: dict = field(default_factory=dict)
    timing: Timing = field(default_factory=Timing)

    @property
    def succeeded(self) -> bool:
        return self.simulation.get("state") == "ready" and (self.simulation.get("kernels_compared") or 0) > 0


# --- Cascade's upload routes --------------------------------------------------------------


def upload(client, trace_id: str, name: str, files: dict[str, Path]) -> dict:
    """The files into the trace's simulations/NAME/ through presigned PUTs, simulation.json last,
    then /complete. Returns /complete's answer."""
    check_name(name)
    base = client._path(trace_id, "simulations", quote(name, safe=""))
    asked = {name: path.stat().st_size for name, path in files.items()}
    answer = post_json(
        client, f"{base}/upload", {"files": [{"name": n, "size": s} for n, s in asked.items()]}
    )
    # Only the files asked for, each whole: the answer names what is read from disk and sent.
    listed = answers.upload_files(answer, asked, f"POST {base}/upload")
    ordered = sorted(listed, key=lambda f: f["name"] == "simulation.json")
    completed = []
    with bucket_client(client) as http:
        for entry in ordered:
            item = send(http, entry, files[entry["name"]])
            if item is not None:
                completed.append(item)
    return post_json(client, f"{base}/complete", {"multipart": completed})


def wait_for(client, trace_id: str, name: str, *, timeout: float = POLL_SECONDS) -> dict:
    """The simulation once Cascade has read it: `ready` or `failed`."""
    path = client._path(trace_id, "simulations", quote(name, safe=""))
    deadline, pause = time.monotonic() + timeout, 0.1
    while True:
        simulation = client._get_json(path)
        if simulation.get("state") in ("ready", "failed"):
            return simulation
        if time.monotonic() > deadline:
            raise CascadeError(
                f"Cascade has not read simulation {name} after {timeout:.0f} s (state {simulation.get('state')})"
            )
        time.sleep(pause)
        pause = min(pause * 1.2, 2.0)  # a read of a small log takes a fraction of a second


# --- the command ----------------------------------------------------------------------------


def check_name(name: str) -> None:
    """The server's rule for a simulation's name, before any request: its characters, then the
    path rule as one folder's name (no `.`, `..`, Windows device name, trailing dot)."""
    if not SIM_NAME.fullmatch(name):
        raise SimulateError(f"--name {name!r}: letters, digits, '.', '_' and '-', at most 100 characters")
    problem = name_problem(name)
    if problem is not None:
        raise SimulateError(f"--name {name!r} is not a folder's name: {problem}")


def default_name(config: str, select: str | None) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    what = "" if not select else "_" + re.sub(r"[^A-Za-z0-9._-]", "-", select)
    return f"accelsim_{config}{what}_{stamp}"[:100]


def simulate(
    client,
    trace_id: str,
    *,
    config: str,
    root: str | Path | None = None,
    name: str | None = None,
    select: str | None = None,
    cover: float = 1.0,
    jobs: int = 8,
    workdir: str | Path | None = None,
    timeout: float | None = None,
    force: bool = False,
    out=None,
    progress=None,
) -> SimulateResult:
    """`progress(finished, listed, process)`: the simulator's kernels as it finishes them
    (accel_sim.run_simulator); `cascade worker` reports them and stops a dropped job with it."""
    out = out or sys.stderr
    root = checked_root(root, config)
    name = name or default_name(config, select)
    check_name(name)
    timing = Timing()

    started = time.monotonic()
    dest = Path(workdir) if workdir else Path(trace_id)
    pull_checked(
        client,
        trace_id,
        dest,
        root=root,
        config=config,
        select=select,
        cover=cover,
        jobs=jobs,
        force=force,
        out=out,
    )
    timing.pull = time.monotonic() - started

    started = time.monotonic()
    listing = prepare(root, dest / "traces", config=config, jobs=jobs, force=force, out=out)
    run = dest / "simulations" / name
    config_folder(root, config, run)
    timing.prepare = time.monotonic() - started

    started_at = now()
    started = time.monotonic()
    exit_status = run_simulator(root, run, listing, timeout=timeout, out=out, progress=progress)
    timing.simulator = time.monotonic() - started
    ran = {"started_at": started_at, "ended_at": now(), "exit_status": exit_status}

    started = time.monotonic()
    log = run / "sim.log"
    marker = simulation_marker(log, config=config, select=select, cover=cover, ran=ran)
    (run / "simulation.json").write_text(json.dumps(marker, indent=2) + "\n")
    upload_run_folder(client, trace_id, name, run, out=out)
    timing.upload = time.monotonic() - started

    started = time.monotonic()
    simulation = wait_for(client, trace_id, name)
    timing.read = time.monotonic() - started
    return SimulateResult(trace_id, name, dest, log, exit_status, simulation, timing)


def checked_root(root: str | Path | None, config: str) -> Path:
    """ROOT (`--accel-sim`, else ACCEL_SIM_ROOT), absolute, a built checkout that has `config`."""
    root = Path(root or os.environ.get("ACCEL_SIM_ROOT") or "")
    if not str(root) or str(root) == ".":
        raise SimulateError("no Accel-Sim: give --accel-sim ROOT or set ACCEL_SIM_ROOT")
    root = root.resolve()
    check_tree(root, config)
    return root


def pull_checked(
    client, trace_id: str, dest: Path, *, root: Path, config, select, cover, jobs, force, out
) -> None:
    """The trace's SASS checked against the config before any byte is pulled (from its
    `trace_gpu_arch`), a word when the tree lacks the trace's suggested config, then the pull;
    its warnings printed."""
    trace = next((t for t in client.traces() if t["id"] == trace_id), None) or client.trace(trace_id)
    arch = arch_version(trace.get("trace_gpu_arch"))
    if arch is not None:
        said_by = f"its trace_gpu_arch is {trace['trace_gpu_arch']}"
        check_sass(root, config, {trace_id: arch}, force=force, said_by=said_by)
    note = suggestion_note(root, trace.get("suggested_sim_config"))
    if note:
        print(f"cascade: note: {note}", file=out, flush=True)
    options = {"select": select, "cover": cover, "jobs": jobs, "progress": True}
    if "allow_missing" in inspect.signature(client.pull).parameters:
        options["allow_missing"] = True  # what is missing is refused below, in one line, unless --force
    pulled = client.pull(trace_id, dest, **options)
    for warning in pulled.warnings:
        print(f"cascade: warning: {warning}", file=out, flush=True)


def simulation_marker(log: Path, *, config: str, select: str | None, cover: float, ran: dict) -> dict:
    """simulation.json: what ran (the builds its log names), on which host, when, how it exited."""
    accel, gpgpu = builds(log)
    marker = {
        "status": "ok" if log.stat().st_size > 0 else "failed",
        "simulator": "accel-sim",
        "config": config,
        "accel_sim_build": accel,
        "gpgpu_sim_build": gpgpu,
        "selection": None if not select else {"select": select, "cover": cover},
        "host": socket.gethostname(),
        **ran,
    }
    if marker["status"] == "failed":
        marker["notes"] = f"the simulator printed nothing (exit status {ran['exit_status']})"
    return marker


def upload_run_folder(client, trace_id: str, name: str, run: Path, *, out) -> None:
    """The log compressed (xz), the config it ran with, simulation.json: uploaded as `name`."""
    compressed = run / "sim.log.xz"
    with (run / "sim.log").open("rb") as source, lzma.open(compressed, "wb", preset=3) as sink:
        shutil.copyfileobj(source, sink, 1 << 20)
    print(f"uploading {compressed.name} ({compressed.stat().st_size:,} bytes) as simulation {name}", file=out)
    files = {"sim.log.xz": compressed, "gpgpusim.config": run / "gpgpusim.config"}
    files["simulation.json"] = run / "simulation.json"
    upload(client, trace_id, name, files)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def summary_lines(result: SimulateResult) -> list[str]:
    """What a person reads at the end: the pairs, the metrics, the worst kernels, what was left out."""
    s = result.simulation
    metrics = s.get("metrics") or {}
    lines = [f"simulation {result.name} of {result.trace_id}: {s.get('state')}"]
    if s.get("error"):
        lines.append(f"  error: {s['error']}")
    if s.get("stopped"):
        lines.append(f"  stopped: {s['stopped']}")
    lines.append(
        f"  builds: {s.get('simulator_build') or '?'} / {s.get('gpgpusim_build') or '?'}, config {s.get('config')}"
    )
    compared = s.get("kernels_compared") or 0
    lines.append(f"  pairs: {compared} compared of {s.get('kernels_simulated') or 0} simulated")
    if metrics:
        lines.append(
            f"  MAPE {_pct(metrics.get('mape'))}, correlation {_num(metrics.get('pearson_r'))}, "
            f"aggregate error {_pct(metrics.get('aggregate_error'))}, run error {_pct(metrics.get('run_error'))}"
        )
    if s.get("reason"):
        lines.append(f"  {s['reason']}")
    worst = sorted(
        (k for k in s.get("kernels") or [] if k.get("error") is not None), key=lambda k: -abs(k["error"])
    )[:5]
    if worst:
        lines.append("  worst kernels (simulated vs measured):")
        for k in worst:
            lines.append(
                f"    {k['error']:+8.1f} %  {k.get('sim_cycles')} cycles = {_ns(k.get('sim_ns'))} vs "
                f"{_ns(k.get('measured_ns'))}  kernel {k.get('kernel_id')}  {(k.get('name') or '')[:60]}"
            )
    fatal = s.get("fatal")
    if isinstance(fatal, dict):
        lines.append(f"  the simulator's fatal line (log line {fatal.get('line')}): {fatal.get('text')}")
    left = s.get("left_out")
    if isinstance(left, dict) and left.get("kernels"):
        lines.append(f"  left out: {left['kernels']} kernel(s): {left.get('why') or 'not said'}")
    elif isinstance(left, dict):
        lines.append("  left out: none")
    overlapped = sum(1 for k in s.get("kernels") or [] if k.get("overlapped"))
    if overlapped:
        lines.append(
            f"  {overlapped} overlapped kernel(s) shared a stat block: compared only in the run's total"
        )
    for k in s.get("interrupted") or []:
        lines.append(
            f"  interrupted: kernel {k.get('kernel_id')} {(k.get('name') or '')[:60]} (uid {k.get('uid')})"
        )
    t = result.timing
    lines.append(
        f"  time: simulator {t.simulator:.1f} s; Cascade {t.cascade:.1f} s (pull {t.pull:.1f}, upload "
        f"{t.upload:.1f}, read {t.read:.1f}); preparing {t.prepare:.1f} s"
    )
    return lines


def _pct(value) -> str:
    return "-" if value is None else f"{value:.2f} %"


def _num(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def _ns(value) -> str:
    return "-" if value is None else f"{value / 1000:,.1f} us"
