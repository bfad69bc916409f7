"""Write a realistic trace folder of any size: for tests, demos and benchmarks (tools.generator),
and simulations of it: the simulator's stdout for its kernelslists (tools.simulation)."""

import argparse
import tempfile
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ingest import bucket
from tools import generator, simulation


class Command(BaseCommand):
    help = (
        "Generate an Accel-Sim run folder (deterministic for a seed) into a local folder or the bucket; "
        "with --simulation NAME, also the folder simulations/NAME/ of a simulator run of it: sim.log "
        "(Accel-Sim's stdout for the run's kernelslists, one uid per traced launch, each kernel's cycles "
        "its measured time at the config's clock times the build's error), gpgpusim.config, and last "
        "simulation.json. Given --out DIR holding a run generated earlier with the same options, only the "
        "simulation is added to it."
    )

    def add_arguments(self, parser):
        add_destination(parser)
        add_run_options(parser)
        add_file_options(parser)
        add_labels(parser)
        add_simulation_options(parser)

    def handle(self, *args, out, upload, **options):
        try:
            spec = generator.RunSpec(
                kernels=options["kernels"],
                contexts=options["contexts"],
                format=options["format"],
                seed=options["seed"],
                status=options["status"],
                unfinished=options["unfinished"],
                crashed=options["crashed"],
                cuda_graphs=options["cuda_graphs"],
                timeline=options["timeline"],
                timing=options["timing"],
                timing_format=options["timing_format"],
                max_traced=options["max_traced"],
                max_traced_warps=options["max_traced_warps"],
                trace_files=options["trace_files"],
                configs=options["configs"],
                model=options["model"] or None,
                source_gpu=options["source_gpu"] or None,
                trace_gpu_arch=options["arch"],
                suggested_sim_config=options["sim_config"] or None,
                layers=tuple(layer.strip() for layer in options["layers"].split(",") if layer.strip()),
            )
            sim = self.simulation_spec(options)
            if sim is not None:
                simulation.possible_config(spec, sim)  # before any file is written
        except ValueError as problem:
            raise CommandError(str(problem)) from None
        if out is None:
            result = generator.upload_run(upload, spec, [sim] if sim else [])
            self.stdout.write(f"{bucket.run_prefix(upload)}: {len(result.uploaded)} objects uploaded")
            return
        if out.exists() and any(out.iterdir()):
            if sim is None:
                # Old files would be uploaded with the new run and parsed as part of it.
                raise CommandError(f"{out} is not empty: give a new folder, or empty this one first")
            self.check_same_run(out, spec, sim)
        else:
            files = generator.write_run(out, spec)
            self.stdout.write(f"{out}: {len(files)} files, {sum(f.bytes for f in files)} bytes")
        if sim is not None:
            written = simulation.write_simulation(out, spec, sim)
            self.stdout.write(
                f"{written.folder}: {', '.join(written.files)}; {len(written.launches)} kernels simulated"
            )

    @staticmethod
    def simulation_spec(options) -> "simulation.SimSpec | None":
        if options["simulation"] is None:
            return None
        return simulation.SimSpec(
            name=options["simulation"],
            build=options["simulation_build"],
            config=options["simulation_config"],
            compress=options["simulation_gzip"],
            with_config=not options["simulation_no_config"],
            status=options["simulation_status"],
            notes=options["simulation_notes"],
            max_cycle=options["simulation_max_cycle"],
            killed=options["simulation_killed"],
            wrong_name_uid=options["simulation_wrong_name"],
            concurrent_uid=options["simulation_concurrent"],
        )

    @staticmethod
    def check_same_run(out: Path, spec, sim) -> None:
        """A simulation is added to a run folder only if these options made that run: its trace
        headers and measured times come from the spec."""
        if (out / "simulations" / sim.name).exists():
            raise CommandError(f"{out / 'simulations' / sim.name} exists: give another --simulation name")
        with tempfile.TemporaryDirectory(prefix="cascade-run-") as tmp:
            expected = Path(tmp) / out.name
            generator.write_run(expected, spec)
            for path in expected.rglob("*"):
                twin = out / path.relative_to(expected)
                if path.is_file() and (not twin.is_file() or twin.read_bytes() != path.read_bytes()):
                    raise CommandError(
                        f"{out} is not the run these options generate ({twin.name} differs): "
                        "give the options it was generated with, or a new folder"
                    )


def add_destination(parser) -> None:
    """Where the run goes: a local folder or the bucket."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--out", type=Path, metavar="DIR", help="write the run folder DIR (its name is the run id)"
    )
    where.add_argument("--upload", metavar="RUN_ID", help="upload to CASCADE_S3_BUCKET as run RUN_ID")


def add_run_options(parser) -> None:
    """What the run is: its size, its format, its seed, how it ended, CUDA graphs."""
    parser.add_argument(
        "--kernels", type=int, default=generator.RunSpec.kernels, help="kernel launches (744)"
    )
    parser.add_argument("--contexts", type=int, default=1, help="CUDA contexts (v5 only)")
    parser.add_argument("--format", choices=("v5", "legacy"), default="v5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--status", default="ok", help='metadata.json status; not "ok" = a failed run')
    parser.add_argument("--unfinished", action="store_true", help="leave out metadata.json")
    parser.add_argument(
        "--crashed",
        action="store_true",
        help='killed during the last launch: the stats file ends in its launch half (", ", no newline)',
    )
    parser.add_argument(
        "--cuda-graphs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="decode steps captured into CUDA graphs: launch halves without totals, run together on "
        "one line until the eager logits and sampler launches end it (default: on, as in vLLM)",
    )


def add_file_options(parser) -> None:
    """Which files it has beside the stats: timeline.json, timing.csv, traces, configs/."""
    parser.add_argument("--no-timeline", dest="timeline", action="store_false")
    parser.add_argument("--no-timing", dest="timing", action="store_false")
    parser.add_argument(
        "--timing-format",
        choices=generator.TIMING_FORMATS,
        default="cascade",
        help="timing.csv as Cascade's harness writes it (cascade) or as "
        "`nsys stats --report cuda_gpu_trace:mangled --format csv` exports it (nsys)",
    )
    parser.add_argument("--max-traced", type=int, default=generator.RunSpec.max_traced)
    parser.add_argument(
        "--max-traced-warps",
        type=int,
        default=generator.RunSpec.max_traced_warps,
        help="trace only launches of at most this many warps (%(default)s): each trace holds every "
        "warp of every block, as the simulator needs",
    )
    parser.add_argument(
        "--trace-files",
        choices=generator.TRACE_LAYOUTS,
        default="raw",
        help="instruction traces as the tracer writes them (raw: .trace.xz, kernelslist) or as "
        "Accel-Sim's post-processing groups them (grouped: .traceg.xz, kernelslist*.g)",
    )
    parser.add_argument(
        "--configs",
        action="store_true",
        help="also write configs/ (abridged files of ours, not a simulator's)",
    )


def add_labels(parser) -> None:
    """What metadata.json says of it: the model, the GPU, the suggested config, the steps."""
    parser.add_argument("--model", default=generator.RunSpec.model)
    parser.add_argument("--source-gpu", default=generator.RunSpec.source_gpu)
    parser.add_argument("--arch", default=generator.RunSpec.trace_gpu_arch)
    parser.add_argument("--sim-config", default=generator.RunSpec.suggested_sim_config)
    parser.add_argument(
        "--layers", default=",".join(generator.OPT_125M_LAYERS), help="comma-separated step labels"
    )


def add_simulation_options(parser) -> None:
    """simulations/NAME/: a simulator run of it, and how that went."""
    sim = parser.add_argument_group("simulation (with --simulation NAME)")
    sim.add_argument(
        "--simulation",
        metavar="NAME",
        help="also write simulations/NAME/ (NAME: letters, digits, '.', '_', '-')",
    )
    sim.add_argument(
        "--simulation-build",
        choices=simulation.BUILDS,
        default=simulation.DEFAULT_BUILD,
        help="the Accel-Sim build, which sets the synthetic error (default %(default)s: about 10-20%% "
        "MAPE; dev-618c2ef: about 25-40%%, prefill and decode erring differently)",
    )
    sim.add_argument(
        "--simulation-config",
        choices=simulation.CONFIGS,
        help="the simulator config, which sets the core clock (default: --sim-config, else by --arch)",
    )
    sim.add_argument("--simulation-gzip", action="store_true", help="write sim.log.gz instead of sim.log")
    sim.add_argument("--simulation-status", default="ok", help='simulation.json\'s status ("ok" or "failed")')
    sim.add_argument("--simulation-notes", help="simulation.json's notes")
    sim.add_argument("--simulation-no-config", action="store_true", help="leave out gpgpusim.config")
    sim.add_argument(
        "--simulation-max-cycle",
        type=int,
        metavar="CYCLES",
        help="-gpgpu_max_cycle: stop when the run's total reaches CYCLES (a block for the "
        "interrupted kernel, then the break line and the exit lines)",
    )
    sim.add_argument(
        "--simulation-killed",
        type=float,
        metavar="FRACTION",
        help="a killed run: the log cut at a 4 KiB boundary inside a line, at about FRACTION (0-1) of it",
    )
    sim.add_argument(
        "--simulation-wrong-name",
        type=int,
        metavar="UID",
        help="the trace loaded as UID names another kernel (a trace file from another run)",
    )
    sim.add_argument(
        "--simulation-concurrent",
        type=int,
        metavar="UID",
        help="UID and UID+1 run concurrently, on two streams: one stat block lists both",
    )
