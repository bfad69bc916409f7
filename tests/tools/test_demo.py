"""The README's first command: the demo starts everything, ingests the samples, and stops it all.

The demo runs as a real subprocess, with its own S3 (moto), SQLite, poller and web server,
in a temporary folder; what it reports comes from its API, through the poller.
"""

import json
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.tools.support import ROOT, TIMEOUT, gone, listening, start_demo, wait_until_ready

SHOWCASE = "sample__facebook_opt-125m__h100-e2e"
SAMPLES = ROOT / "samples"
# The showcase's launches: a prefill step and three decode steps, whose model forward (173
# launches each) was captured into a CUDA graph and so has no totals in the stats files.
SHOWCASE_LAUNCHES, SHOWCASE_WITHOUT_TOTALS = 700, 3 * 173

pytestmark = pytest.mark.slow


def assert_samples(traces: list[dict]) -> None:
    by_id = {trace["id"]: trace for trace in traces}
    showcase = by_id[SHOWCASE]
    assert showcase["state"] == "ready", showcase["error"]
    assert showcase["model"] == "facebook/opt-125m"
    assert showcase["source_gpu"] == "NVIDIA H100 80GB HBM3"
    assert showcase["trace_gpu_arch"] == "sm_90"
    assert showcase["suggested_sim_config"] == "SM90_H100"
    assert showcase["layers"] == [
        "step 0 (prefill)",
        "step 2 (decode)",
        "step 10 (decode)",
        "step 26 (decode)",
    ]
    assert showcase["kernel_count"] == SHOWCASE_LAUNCHES
    assert showcase["has_real_timing"] and showcase["has_step_timeline"] and showcase["sample"]
    assert 0 < showcase["bytes"] < 5 * 1024**2
    # A Turing and an Ampere sample that name a config the simulator has.
    for run_id, arch, config in (
        ("sample__facebook_opt-125m__rtx2060-e2e", "sm_75", "SM75_RTX2060"),
        ("sample__facebook_opt-125m__a100-e2e", "sm_80", "SM86_RTX3070"),
    ):
        trace = by_id[run_id]
        assert trace["state"] == "ready", trace["error"]
        assert (trace["trace_gpu_arch"], trace["suggested_sim_config"]) == (arch, config)
    failed = by_id["sample__failed-run"]
    assert failed["state"] == "failed"
    assert "failed" in failed["error"]


def assert_simulation_read_within_10_s(report: dict) -> None:
    """A simulation uploaded (log, then simulation.json) after its trace is ready
    reads `ready` through the API within 10 s; the check uploads one and reports the time."""
    uploaded = report["simulation_upload"]
    assert uploaded["trace"] == "sample__facebook_opt-125m__rtx2060-e2e"
    assert uploaded["state"] == "ready", uploaded
    assert 0 <= uploaded["seconds"] <= 10
    assert uploaded["kernels_compared"] > 0


def test_check_mode_ingests_the_samples_through_the_api_and_stops_everything(demo_env):
    result = subprocess.run(
        [sys.executable, "-m", "tools.demo", "--check"],
        cwd=ROOT,
        env=demo_env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["problems"] == []
    assert_samples(report["traces"])
    assert_simulation_read_within_10_s(report)
    detail = report["detail"]
    assert detail["state"] == "ready"
    assert detail["kernels_received"] == detail["kernel_count"]
    assert detail["kernels_without_totals"] == SHOWCASE_WITHOUT_TOTALS
    assert detail["metadata"]["status"] == "ok"
    assert detail["first_kernel"]["ctx"].startswith("0x")
    # Each sample's shipped simulations (two builds on the Turing and on the Ampere sample): ready,
    # scored, the two builds ranked by MAPE. The H100 showcase ships none (no pre-2.0 Accel-Sim
    # runs SASS 90).
    shipped = {}
    for marker in SAMPLES.glob("*/simulations/*/simulation.json"):
        shipped.setdefault(marker.parents[2].name, set()).add(marker.parent.name)
    assert set(shipped) == {"sample__facebook_opt-125m__rtx2060-e2e", "sample__facebook_opt-125m__a100-e2e"}
    assert set(report["sample_simulations"]) == set(shipped)
    for run_id, names in shipped.items():
        found = report["sample_simulations"][run_id]
        simulations = {sim["name"]: sim for sim in found["simulations"]}
        assert set(simulations) == names
        assert all(
            sim["state"] == "ready" and sim["metrics"]["kernels_compared"] > 0 for sim in simulations.values()
        )
        mapes = [row["mape"] for row in found["accuracy"]]
        assert len(mapes) == 2 and mapes == sorted(mapes)
    # Sweep jobs on the embedded broker: kombu's file transport in the demo's folder.
    broker = Path(demo_env["CASCADE_VAR_DIR"]).resolve() / "broker"
    assert report["worker"] == f"cascade worker --accel-sim ROOT --broker filesystem://{broker}"
    assert (broker / "queue").is_dir()
    assert set(report["pids"]) == {"s3", "poller", "web"}
    assert all(gone(pid) for pid in report["pids"].values()), report["pids"]
    assert not listening(report["url"])


def test_interactive_demo_prints_a_working_curl_command_and_ctrl_c_stops_everything(demo_env):
    demo, lines = start_demo([sys.executable, "-m", "tools.demo"], demo_env)
    output = []
    try:
        pids = wait_until_ready(lines, output)
        text = "".join(output)
        curl = next(line.strip() for line in output if line.strip().startswith("curl "))
        token = next(line.split()[-1] for line in output if "API token" in line)

        args = shlex.split(curl)
        assert args[:2] == ["curl", "-H"] and args[2] == f"Authorization: Bearer {token}"
        if shutil.which("curl"):
            body = subprocess.run(
                [*args, "--silent", "--fail"], capture_output=True, timeout=60, check=True
            ).stdout
        else:
            request = urllib.request.Request(args[3], headers={"Authorization": f"Bearer {token}"})
            body = urllib.request.urlopen(request, timeout=60).read()
        detail = json.loads(body)
        assert detail["id"] == SHOWCASE and detail["state"] == "ready"
        assert len(detail["kernels"]) == detail["kernel_count"]
        assert sum(kernel["total_insts"] is None for kernel in detail["kernels"]) == SHOWCASE_WITHOUT_TOTALS

        url = args[3].split("/api/")[0]
        request = urllib.request.Request(f"{url}/api/traces", headers={"Authorization": f"Bearer {token}"})
        assert_samples(json.loads(urllib.request.urlopen(request, timeout=60).read()))
        assert "admin login" in text and "user admin" in text
        # The two lines that point the client at this demo, as a shell runs them.
        exports = dict(
            line.strip().removeprefix("export ").split("=", 1)
            for line in output
            if line.strip().startswith("export CASCADE_URL=")
            or line.strip().startswith("export CASCADE_TOKEN=")
        )
        assert exports == {"CASCADE_URL": url, "CASCADE_TOKEN": token}
        # The simulation worker's command, on the demo's embedded broker (a folder of its own).
        worker = next(line.strip() for line in output if line.strip().startswith("cascade worker "))
        broker = Path(demo_env["CASCADE_VAR_DIR"]).resolve() / "broker"
        assert shlex.split(worker) == [
            "cascade",
            "worker",
            "--accel-sim",
            "ROOT",
            "--broker",
            f"filesystem://{broker}",
        ]
    finally:
        demo.send_signal(signal.SIGINT)
        returncode = demo.wait(timeout=60)
    assert returncode == 0
    assert all(gone(pid) for pid in pids.values()), pids
    assert not listening(url)


def test_check_mode_with_events_ingests_the_samples_from_their_events_alone(demo_env):
    """`--events`: moto's SQS notified by the bucket; the samples are ready before the poller's
    first (reconciling) poll, so from their events."""
    result = subprocess.run(
        [sys.executable, "-m", "tools.demo", "--check", "--events"],
        cwd=ROOT,
        env=demo_env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["problems"] == [] and report["events"] is True
    assert_samples(report["traces"])
    assert_simulation_read_within_10_s(report)
    ready = [trace for trace in report["traces"] if trace["state"] == "ready"]
    assert report["ready_before_first_poll"] >= len(ready) > 0
    assert all(gone(pid) for pid in report["pids"].values()), report["pids"]
