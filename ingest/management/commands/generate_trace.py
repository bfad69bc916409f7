"""Write a realistic trace folder of any size: for tests, demos and benchmarks (tools.generator)."""

import argparse
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ingest import bucket
from tools import generator


class Command(BaseCommand):
    help = "Generate an Accel-Sim run folder (deterministic for a seed) into a local folder or the bucket."

    def add_arguments(self, parser):
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument(
            "--out", type=Path, metavar="DIR", help="write the run folder DIR (its name is the run id)"
        )
        where.add_argument("--upload", metavar="RUN_ID", help="upload to CASCADE_S3_BUCKET as run RUN_ID")
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
        parser.add_argument("--model", default=generator.RunSpec.model)
        parser.add_argument("--source-gpu", default=generator.RunSpec.source_gpu)
        parser.add_argument("--arch", default=generator.RunSpec.trace_gpu_arch)
        parser.add_argument("--sim-config", default=generator.RunSpec.suggested_sim_config)
        parser.add_argument(
            "--layers", default=",".join(generator.OPT_125M_LAYERS), help="comma-separated step labels"
        )

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
                model=options["model"] or None,
                source_gpu=options["source_gpu"] or None,
                trace_gpu_arch=options["arch"],
                suggested_sim_config=options["sim_config"] or None,
                layers=tuple(layer.strip() for layer in options["layers"].split(",") if layer.strip()),
            )
        except ValueError as problem:
            raise CommandError(str(problem)) from None
        if out is not None:
            if out.exists() and any(out.iterdir()):
                # Old files would be uploaded with the new run and parsed as part of it.
                raise CommandError(f"{out} is not empty: give a new folder, or empty this one first")
            files = generator.write_run(out, spec)
            self.stdout.write(f"{out}: {len(files)} files, {sum(f.bytes for f in files)} bytes")
        else:
            result = generator.upload_run(upload, spec)
            self.stdout.write(f"{bucket.run_prefix(upload)}: {len(result.uploaded)} objects uploaded")
