"""The shipped samples: the spec that `samples/` is generated from, and the command that does it.

    .venv/bin/python -m tools.samples      regenerate samples/ (the same bytes, unless the spec changed)

`load_samples` uploads the folders on disk and needs none of this; the test of the generator
checks that `samples/` is what this spec makes.
"""

import shutil
import sys
from pathlib import Path

from tools.generator import RunSpec, write_run

ROOT = Path(__file__).resolve().parent.parent

SAMPLES: dict[str, RunSpec] = {
    "sample__facebook_opt-125m__h100-e2e": RunSpec(kernels=700, contexts=2, seed=125, sample=True),
    # The same model and steps on an A100: Ampere's cuBLAS and FlashAttention 2 kernels, slower,
    # so that comparing the two traces' kernel mixes and times shows something real.
    "sample__facebook_opt-125m__a100-e2e": RunSpec(
        kernels=700,
        contexts=2,
        seed=80,
        source_gpu="NVIDIA A100-SXM4-80GB",
        trace_gpu_arch="sm_80",
        suggested_sim_config="SM80_A100",
        sample=True,
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
    ),
}


def write_samples(directory: Path) -> None:
    """Regenerate `samples/` (the spec above is the source of truth for the shipped files)."""
    for run_id, spec in SAMPLES.items():
        write_run(Path(directory) / run_id, spec, run_id=run_id)


if __name__ == "__main__":
    target = ROOT / "samples"
    for run_id in SAMPLES:
        shutil.rmtree(target / run_id, ignore_errors=True)  # a file the spec no longer makes would stay
    write_samples(target)
    print(f"wrote {', '.join(SAMPLES)} into {target}", file=sys.stderr)
