"""What the shipped samples may claim: their (synthetic) measured kernel times follow each kernel's
traced work, as a real GPU's do, so that correlating a simulator with them means something; and
no simulation beside a sample names a config its simulator build could not have run.

Everything is read from the files in samples/, as a user (or a real Accel-Sim) reads them: the
instruction lines of each `kernel-*.trace.xz`, the durations in `timing.csv`, each simulation's
`simulation.json` and the build line of its log.
"""

import csv
import gzip
import json
import lzma
import re
import statistics
from pathlib import Path

import pytest

from tests.client.accel_sim_trees import DOCUMENTED_73F9FAC

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
TRACE_FILE = re.compile(r"kernel-(?P<kernel_id>\d+)-ctx_(?P<ctx>0x[0-9a-f]+)\.trace\.xz")

# The bounds a sample's traced kernels must reach between warp instructions and measured time.
# The samples' noise (2%, log-normal) lets a few near-equal kernels swap places, no more.
MIN_SPEARMAN = 0.85
MIN_PEARSON = 0.9

# Known facts of Accel-Sim (../shared/docs/accel-sim-simulator.md): before Accel-Sim 2.0
# (accel-sim-framework pull request 553, merged into dev on 2026-08-25) the tested configs with a
# trace.config and the SASS versions (`-binary version`) each runs are these; nothing runs SASS 89
# or 90. SM90_* configs (Hopper) need Accel-Sim 2.0, and no 2.0 build's commit is known here.
TESTED_BEFORE_2_0 = DOCUMENTED_73F9FAC
KNOWN_2_0_BUILDS: set[str] = set()  # accel-sim-framework commits of 2.0 or later: none known here
BUILD_LINE = re.compile(rb"^Accel-Sim \[build accelsim-commit-(?P<commit>[0-9a-f]+)", re.MULTILINE)


def timed_samples() -> list[Path]:
    return sorted(folder for folder in SAMPLES.iterdir() if (folder / "timing.csv").is_file())


def warp_instructions(path: Path) -> int:
    """The instruction lines of a raw trace: every line after the header that is not a comment."""
    lines = lzma.decompress(path.read_bytes()).decode().splitlines()
    return sum(1 for line in lines if line.strip() and not line.startswith(("-", "#")))


def ranks(values: list[float]) -> list[float]:
    """Ranks from 0, ties sharing their mean rank (as Spearman's coefficient takes them)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    result = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            result[order[position]] = (start + end) / 2
        start = end + 1
    return result


def traced_work_and_times(folder: Path) -> tuple[list[int], list[int]]:
    """Per traced kernel: its trace's warp instructions, and the duration timing.csv holds for it."""
    with open(folder / "timing.csv", newline="") as handle:
        durations = {
            (row["ctx"], int(row["kernel_id"])): int(row["duration_ns"]) for row in csv.DictReader(handle)
        }
    work, times = [], []
    for path in sorted((folder / "traces").glob("kernel-*.trace.xz")):
        match = TRACE_FILE.fullmatch(path.name)
        work.append(warp_instructions(path))
        times.append(durations[match["ctx"], int(match["kernel_id"])])
    return work, times


@pytest.mark.parametrize("folder", timed_samples(), ids=lambda folder: folder.name)
def test_each_samples_measured_times_follow_its_traced_kernels_work(folder):
    work, times = traced_work_and_times(folder)
    assert len(work) >= 10, "too few traced kernels to correlate"
    assert len(set(times)) > len(times) // 2, f"measured times barely vary: {sorted(set(times))}"
    spearman = statistics.correlation(ranks(work), ranks(times))
    pearson = statistics.correlation(work, times)
    assert spearman > MIN_SPEARMAN and pearson > MIN_PEARSON, (
        spearman,
        pearson,
        list(zip(work, times, strict=True)),
    )


@pytest.mark.parametrize("folder", timed_samples(), ids=lambda folder: folder.name)
def test_each_sample_says_its_times_are_synthetic_and_how_they_were_made(folder):
    note = json.loads((folder / "metadata.json").read_text())["timing_note"]
    assert "SYNTHETIC" in note and "warp instructions" in note and "kernel_duration" in note


def sample_simulations() -> list[Path]:
    return sorted(SAMPLES.glob("*/simulations/*/simulation.json"))


def test_the_samples_ship_simulations_of_two_builds_on_turing_and_ampere():
    found = {
        (marker.parents[2].name, json.loads(marker.read_text())["config"]) for marker in sample_simulations()
    }
    assert found == {
        ("sample__facebook_opt-125m__rtx2060-e2e", "SM75_RTX2060"),
        ("sample__facebook_opt-125m__a100-e2e", "SM86_RTX3070"),
    }
    assert len(sample_simulations()) == 4


@pytest.mark.parametrize("marker", sample_simulations(), ids=lambda marker: marker.parent.name)
def test_no_sample_simulation_claims_a_config_its_build_could_not_have_run(marker):
    simulation = json.loads(marker.read_text())
    config = simulation["config"]
    log = next(marker.parent.glob("sim.log*"))
    text = gzip.decompress(log.read_bytes()) if log.suffix == ".gz" else log.read_bytes()
    commit = BUILD_LINE.search(text)["commit"].decode()
    metadata = json.loads((marker.parents[2] / "metadata.json").read_text())
    sass = int(metadata["trace_gpu_arch"].removeprefix("sm_"))
    binary_versions = {int(v) for v in re.findall(rb"^-binary version = (\d+)$", text, re.MULTILINE)}
    assert binary_versions == {sass}
    if config.startswith("SM90_") or sass >= 89:
        assert commit in KNOWN_2_0_BUILDS, (
            f"{commit} predates Accel-Sim 2.0: it has no {config}, no SASS {sass}"
        )
    else:
        assert sass in TESTED_BEFORE_2_0[config], f"{config} does not run SASS {sass}"
    assert "SYNTHETIC" in simulation["notes"]  # made by tools/simulation.py, and saying so
