"""The shipped samples: the specs `samples/` is generated from (runs, and simulations of the
Turing and Ampere runs in `<run>/simulations/<name>/`), and the command that does it.

Everything measured or simulated in them is SYNTHETIC, and each says so: metadata.json's
`timing_note` says how timing.csv's kernel times were made (`tools.timing_files.kernel_duration`:
a launch overhead plus the kernel's warp instructions over a throughput, with a small seeded
noise, so that they vary with each kernel's work as a real GPU's do), each simulation.json's
`notes` how its cycles were (`tools.simulation.kernel_cycles`), and `simulator_note` which
Accel-Sim configs can run the trace.

    .venv/bin/python -m tools.samples      regenerate samples/ (the same bytes, unless the spec changed)

`load_samples` uploads the folders on disk and needs none of this; the test of the generator
checks that `samples/` is what this spec makes.
"""

import shutil
import sys
from pathlib import Path

from tools.generator import RunSpec, write_run
from tools.kernels import platform_for
from tools.simulation import SimSpec, write_simulation
from tools.timing_files import DURATION_NOISE, H100_WARP_INSTS_PER_NS

ROOT = Path(__file__).resolve().parent.parent

# What each sample says of the simulator (metadata.json's `simulator_note`): Accel-Sim dev before
# 2.0 (e.g. accel-sim-framework 73f9fac, gpgpu-sim 667834c) has tested configs up to Ampere, none
# for Hopper; Accel-Sim 2.0 (2026-08) has SM90_H100 (../shared/docs/accel-sim-simulator.md).
NO_HOPPER = (
    "Accel-Sim before 2.0 has no Hopper config and no opcode map for SASS 90: its simulator stops at "
    "the first kernel of this trace (unsupported binary version: 90)."
)
HOPPER_SHOWCASE = (
    f"{NO_HOPPER} SM90_H100 is Accel-Sim 2.0's H100 config; no simulation of this trace ships, since "
    "no simulator build this sample could name has run one."
)
AMPERE_ON_RTX3070 = (
    "Accel-Sim before 2.0 has no A100 config: SM86_RTX3070, its one Ampere tested config, runs SASS 80 "
    "traces. Every traced kernel's instruction trace holds every warp of every block; they simulate in "
    "seconds. The simulations beside it are synthetic (see their simulation.json)."
)
TURING = (
    "SM75_RTX2060 is an Accel-Sim tested config for this GPU. Every traced kernel's instruction trace "
    "holds every warp of every block; they simulate in seconds. The simulations beside it are synthetic "
    "(see their simulation.json)."
)


def timing_note(arch: str) -> str:
    """metadata.json's `timing_note`: how the sample's timing.csv was made (it was not measured)."""
    platform = platform_for(arch)
    slowdown = ", ".join(f"{kind} {factor:g}" for kind, factor in platform.slowdown.items())
    return (
        "timing.csv and timeline.json are SYNTHETIC: no GPU ran this workload. Each kernel's duration "
        f"is ({platform.launch_ns} ns + its warp instructions / {H100_WARP_INSTS_PER_NS} per ns x this "
        f"GPU's slowdown for its kind: {slowdown}) x exp(gauss(0, {DURATION_NOISE:g})), the noise "
        "seeded by the launch (ctx, kernel id, name); a traced kernel's warp instructions are the lines "
        "of its trace file. Made by tools/timing_files.py kernel_duration."
    )


SAMPLES: dict[str, RunSpec] = {
    "sample__facebook_opt-125m__h100-e2e": RunSpec(
        kernels=700,
        contexts=2,
        seed=125,
        sample=True,
        extra_metadata={"simulator_note": HOPPER_SHOWCASE, "timing_note": timing_note("sm_90")},
    ),
    # The same model and steps on an A100: Ampere's cuBLAS and FlashAttention 2 kernels, slower,
    # so that comparing the two traces' kernel mixes and times shows something real.
    "sample__facebook_opt-125m__a100-e2e": RunSpec(
        kernels=700,
        contexts=2,
        seed=80,
        # The small kernels of the prefill and two decode steps, so each context's kernelslist
        # names some (a list that ends in MemcpyHtoD lines aborts the simulator at its end).
        max_traced=15,
        source_gpu="NVIDIA A100-SXM4-80GB",
        trace_gpu_arch="sm_80",
        suggested_sim_config="SM86_RTX3070",
        sample=True,
        extra_metadata={"simulator_note": AMPERE_ON_RTX3070, "timing_note": timing_note("sm_80")},
    ),
    # And on a Turing card that Accel-Sim has a tested config for: cuBLAS's Turing kernels, vLLM's
    # XFormers backend (xFormers' attention for prefill, vLLM's paged attention for decode).
    "sample__facebook_opt-125m__rtx2060-e2e": RunSpec(
        kernels=700,
        contexts=1,
        seed=75,
        max_traced=10,  # the prefill and first decode step's small kernels: a run of seconds
        source_gpu="NVIDIA GeForce RTX 2060",
        trace_gpu_arch="sm_75",
        suggested_sim_config="SM75_RTX2060",
        sample=True,
        extra_metadata={"simulator_note": TURING, "timing_note": timing_note("sm_75")},
    ),
    "sample__failed-run": RunSpec(
        kernels=40,
        contexts=1,
        seed=7,
        status="failed",
        error="CUDA error: an illegal memory access was encountered (tracer killed during kernel 40)",
        crashed=True,
        timeline=False,
        timing=False,
        model="facebook/opt-125m",
        source_gpu="NVIDIA H100 80GB HBM3",
        suggested_sim_config=None,
        layers=("step 0 (prefill)",),
        sample=True,
        extra_metadata={"simulator_note": NO_HOPPER},
    ),
}

# Two builds of Accel-Sim on each config a pre-2.0 Accel-Sim has for these GPUs: what the compare
# page and a sweep's accuracy are for. SYNTHETIC: no simulator ran. Each kernel's cycles are its
# (synthetic) measured time at the config's core clock times a made-up error of the build
# (tools/simulation.py, `kernel_cycles`). The builds are Accel-Sim dev commits from before
# Accel-Sim 2.0 (2026-08), which have SM75_RTX2060 and SM86_RTX3070 but nothing for SASS 90: so
# the H100 sample carries none. No gpgpusim.config is shipped (no file of ours poses as a config).
SYNTHETIC_SIMULATION = (
    "sample, SYNTHETIC: no simulator ran. Written by tools/simulation.py: each kernel's cycles are "
    "its measured time in timing.csv (itself synthetic, tools/timing_files.py kernel_duration) at "
    "{config}'s core clock, times a made-up error for build {build} ({mape} MAPE)"
)
MAPE = {"dev-e5653f0": "about 10-20%", "dev-618c2ef": "about 25-40%"}


def sample_simulations(config: str) -> list[SimSpec]:
    """Both builds' synthetic simulations of a sample on `config`."""
    return [
        SimSpec(
            name=f"accelsim-{build.removeprefix('dev-')}_{config}",
            build=build,
            config=config,
            compress=True,
            with_config=False,
            notes=SYNTHETIC_SIMULATION.format(config=config, build=build, mape=mape),
        )
        for build, mape in MAPE.items()
    ]


SIMULATIONS: dict[str, list[SimSpec]] = {
    "sample__facebook_opt-125m__rtx2060-e2e": sample_simulations("SM75_RTX2060"),
    "sample__facebook_opt-125m__a100-e2e": sample_simulations("SM86_RTX3070"),
}


def write_samples(directory: Path) -> None:
    """Regenerate `samples/` (the specs above are the source of truth for the shipped files)."""
    for run_id, spec in SAMPLES.items():
        write_run(Path(directory) / run_id, spec, run_id=run_id)
        for simulation in SIMULATIONS.get(run_id, []):
            write_simulation(Path(directory) / run_id, spec, simulation, run_id=run_id)


if __name__ == "__main__":
    target = ROOT / "samples"
    for run_id in SAMPLES:
        shutil.rmtree(target / run_id, ignore_errors=True)  # a file the spec no longer makes would stay
    write_samples(target)
    print(f"wrote {', '.join(SAMPLES)} into {target}", file=sys.stderr)
