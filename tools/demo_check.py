"""What `run.py demo` waits for and `--check` checks, read through the API as a client reads it:
the samples ready or failed as their metadata.json says, their simulations as their
simulation.json says (each build ranked by /api/simulations/accuracy), the showcase's launches as
its timeline.json counts them, and a simulation uploaded once the samples are ready read within
SIMULATION_BOUND seconds.
"""

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
SHOWCASE = "sample__facebook_opt-125m__h100-e2e"
FINAL_STATES = ("ready", "failed")
# `--check`'s own simulation: of a ready sample that names a tested config (SM75_RTX2060), read
# within SIMULATION_BOUND seconds of its marker's upload.
CHECK_SIMULATION_RUN = "sample__facebook_opt-125m__rtx2060-e2e"
CHECK_SIMULATION_NAME = "demo-check"
SIMULATION_BOUND = 10.0


def expected_states() -> dict[str, str]:
    """Each shipped sample and the state its metadata.json should lead to."""
    states = {}
    for folder in sorted(p for p in SAMPLES.iterdir() if p.is_dir()):
        status = json.loads((folder / "metadata.json").read_text()).get("status")
        states[folder.name] = "ready" if status == "ok" else "failed"
    return states


def expected_simulations() -> dict[tuple[str, str], str]:
    """Each shipped sample's simulations, (run, name), and the state its simulation.json should lead to."""
    states = {}
    for marker in sorted(SAMPLES.glob("*/simulations/*/simulation.json")):
        status = json.loads(marker.read_text()).get("status")
        states[marker.parents[2].name, marker.parent.name] = "ready" if status == "ok" else "failed"
    return states


def check_simulation_files(run_id: str, name: str) -> list[tuple[str, bytes]]:
    """A simulation of the shipped sample `run_id`, as tools/simulation.py writes one beside a
    run (its log from the sample's own trace headers): (file name, bytes), simulation.json last."""
    import shutil
    import tempfile

    from tools.samples import SAMPLES as SPECS
    from tools.simulation import SimSpec, write_simulation

    spec = SimSpec(name=name, with_config=False, notes="written by `run.py demo --check`")
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(scratch) / run_id  # a copy: samples/ is never written to
        shutil.copytree(SAMPLES / run_id, run_dir, ignore=shutil.ignore_patterns("simulations"))
        written = write_simulation(run_dir, SPECS[run_id], spec, run_id=run_id)
        return [(file, (written.folder / file).read_bytes()) for file in written.files]


def expected_launches(run_id: str) -> tuple[int, int] | None:
    """(launches, launches captured into CUDA graphs) the harness recorded in a sample's timeline.json.

    Every launch leaves a stats row, so each is a kernel; a captured one left its launch half
    only, so its totals are null. A parser that glued a graph line into one kernel, or dropped
    it, is caught here; a trace that is merely ready is not enough.
    """
    path = SAMPLES / run_id / "timeline.json"
    if not path.is_file():
        return None
    steps = json.loads(path.read_text())["steps"]
    return sum(step["kernels"] for step in steps), sum(step.get("captured_kernels", 0) for step in steps)


class SampleChecks:
    """The demo's API seen with its token; `ensure_running` raises if a child died, `say` reports."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float,
        ensure_running: Callable[[], None],
        say: Callable[[str], None],
    ):
        self.url = url
        self.token = token
        self.timeout = timeout
        self.ensure_running = ensure_running
        self.say = say

    def api(self, path: str):
        request = urllib.request.Request(
            f"{self.url}{path}", headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def wait_for_samples(self) -> list[dict]:
        expected = expected_states()
        deadline = time.monotonic() + self.timeout
        while True:
            self.ensure_running()
            states = {trace["id"]: trace["state"] for trace in self.api("/api/traces")}
            if all(states.get(run_id) in FINAL_STATES for run_id in expected):
                break
            if time.monotonic() > deadline:
                waiting = {run_id: states.get(run_id, "not seen") for run_id in expected}
                raise RuntimeError(f"samples not ingested within {self.timeout:.0f} s: {waiting}")
            time.sleep(0.5)
        traces = [trace for trace in self.api("/api/traces") if trace["id"] in expected]
        wrong = {t["id"]: (t["state"], t["error"]) for t in traces if t["state"] != expected[t["id"]]}
        if wrong:
            raise RuntimeError(f"samples ingested, but not as expected: {wrong}")
        self.wait_for_simulations(deadline)
        return traces

    def wait_for_simulations(self, deadline: float) -> list[dict]:
        """The samples' simulations, once each is ready or failed as its simulation.json says."""
        expected = expected_simulations()
        while True:
            self.ensure_running()
            found = {}
            for run_id in sorted({run_id for run_id, _ in expected}):
                for simulation in self.api(f"/api/traces/{run_id}/simulations"):
                    found[run_id, simulation["name"]] = simulation
            states = {key: found.get(key, {}).get("state", "not seen") for key in expected}
            if all(state in FINAL_STATES for state in states.values()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"sample simulations not read within {self.timeout:.0f} s: {states}")
            time.sleep(0.5)
        wrong = {
            f"{run_id}/{name}": (found[run_id, name]["state"], found[run_id, name]["error"])
            for (run_id, name), state in expected.items()
            if found[run_id, name]["state"] != state
        }
        if wrong:
            raise RuntimeError(f"sample simulations read, but not as expected: {wrong}")
        return [found[key] for key in expected]

    def check_simulation_upload(self, *, embedded_s3: bool) -> dict:
        """Upload a simulation of a ready sample (the log, then simulation.json) and time how
        long the API takes to show it decided: {"state", "error", "seconds"}, or "skipped"."""
        from ingest import bucket

        run_id, name = CHECK_SIMULATION_RUN, CHECK_SIMULATION_NAME
        result = {"trace": run_id, "name": name, "bound_s": SIMULATION_BOUND}
        if not embedded_s3:
            self.say("check: no simulation uploaded (not the embedded S3: your bucket is left alone)")
            return {**result, "skipped": True}
        folder = f"{bucket.run_prefix(run_id)}simulations/{name}/"
        for file, body in check_simulation_files(run_id, name):
            bucket.put_object(folder + file, body)
        uploaded = time.monotonic()
        deadline = uploaded + SIMULATION_BOUND
        simulation = {}
        while True:
            self.ensure_running()
            found = {sim["name"]: sim for sim in self.api(f"/api/traces/{run_id}/simulations")}
            simulation = found.get(name, {})
            if simulation.get("state") in FINAL_STATES or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        seconds = round(time.monotonic() - uploaded, 2)
        state = simulation.get("state", "not seen")
        self.say(
            f"check: simulation {name} of {run_id}: {state} {seconds:.2f} s after its simulation.json"
            f" (bound {SIMULATION_BOUND:.0f} s)"
        )
        compared = (simulation.get("metrics") or {}).get("kernels_compared")
        return {
            **result,
            "state": state,
            "error": simulation.get("error"),
            "seconds": seconds,
            "kernels_compared": compared,
        }

    def showcase(self, uploaded: dict) -> tuple[dict, list[str]]:
        """The showcase's detail as the report shows it, and what is wrong with it or with the
        uploaded simulation (`check_simulation_upload`'s result); nothing wrong is an empty list."""
        detail = self.api(f"/api/traces/{SHOWCASE}")
        kernels = detail.pop("kernels")
        problems = []
        if not uploaded.get("skipped") and (
            uploaded["state"] != "ready" or uploaded["seconds"] > SIMULATION_BOUND
        ):
            problems.append(
                f"{uploaded['trace']}: simulation {uploaded['name']} {uploaded['state']}"
                f" ({uploaded['error']}) {uploaded['seconds']} s after its upload, not ready within"
                f" {SIMULATION_BOUND:.0f} s"
            )
        if detail["state"] != "ready" or len(kernels) != detail["kernel_count"] or not kernels:
            problems.append(
                f"{SHOWCASE}: {detail['state']}, {len(kernels)} kernels of {detail['kernel_count']}"
            )
        without_totals = sum(1 for kernel in kernels if kernel["total_insts"] is None)
        expected = expected_launches(SHOWCASE)
        if expected is not None and (detail["kernel_count"], without_totals) != expected:
            problems.append(
                f"{SHOWCASE}: {detail['kernel_count']} kernels, {without_totals} without totals; "
                f"its timeline.json says {expected[0]} launches, {expected[1]} captured into CUDA graphs"
            )
        detail["kernels_received"] = len(kernels)
        detail["kernels_without_totals"] = without_totals
        detail["first_kernel"] = kernels[0] if kernels else None
        return detail, problems

    def sample_simulations(self) -> tuple[dict[str, dict], list[str]]:
        """Per sample that ships simulations: its simulations (name, state, metrics), ready and
        scored as their simulation.json says, and /api/simulations/accuracy's rows for it (one per
        build, ranked by MAPE); and what is wrong with them. Reading them changes no trace."""
        expected = expected_simulations()
        found, problems = {}, []
        for run_id in sorted({run_id for run_id, _ in expected}):
            before = self.api(f"/api/traces/{run_id}")["updated_at"]
            names = sorted(name for sample, name in expected if sample == run_id)
            simulations = [
                sim for sim in self.api(f"/api/traces/{run_id}/simulations") if sim["name"] in names
            ]
            ready = [sim for sim in simulations if sim["state"] == "ready" and sim["metrics"] is not None]
            if sorted(sim["name"] for sim in ready) != names:
                problems.append(f"{run_id}: simulations {[(s['name'], s['state']) for s in simulations]}")
            ranked = self.api(f"/api/simulations/accuracy?by=simulator_build&trace={run_id}")
            if len(ranked) != len(names):
                problems.append(f"{run_id}: /api/simulations/accuracy ranks {len(ranked)} builds")
            if self.api(f"/api/traces/{run_id}")["updated_at"] != before:
                problems.append(f"{run_id}: its simulations changed the trace")
            found[run_id] = {
                "simulations": [
                    {key: sim[key] for key in ("name", "state", "metrics")} for sim in simulations
                ],
                "accuracy": ranked,
            }
        return found, problems
