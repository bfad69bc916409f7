"""Upload the sample traces shipped in samples/ to the configured bucket, registered as
samples (`sample: true`): an operator's choice, never a run's name.

For the demo and for real deployments alike: a new installation shows a ready trace and a
failed one as soon as the poller has run, and the Turing and Ampere samples' synthetic
simulations (`<run>/simulations/<name>/`, each uploaded after its trace with simulation.json
last). Idempotent: objects already in the bucket with the same size and ETag are not uploaded
again, so the traces are not re-parsed. The folders on
disk are the samples (`tools/samples.py` is only how they were made), so this needs no generator.
"""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from cascade.commands import require_migrated_database
from ingest import bucket, scan
from tools.upload import upload_run_folder


class Command(BaseCommand):
    help = "Upload the sample trace folders (samples/) to CASCADE_S3_BUCKET; unchanged objects are skipped."

    def add_arguments(self, parser):
        parser.add_argument(
            "--dir",
            type=Path,
            default=settings.BASE_DIR / "samples",
            help="folder holding one folder per run",
        )
        parser.add_argument(
            "--create-bucket", action="store_true", help="create the bucket if it does not exist"
        )

    def handle(self, *args, dir, create_bucket, **options):
        runs = sorted(path for path in dir.iterdir() if path.is_dir()) if dir.is_dir() else []
        if not runs:
            raise CommandError(f"no sample run folders in {dir}")
        require_migrated_database()
        if create_bucket:
            bucket.ensure_bucket()
        for run in runs:
            result = upload_run_folder(run, run.name)
            self.stdout.write(
                f"{bucket.run_prefix(run.name)}: {len(result.uploaded)} uploaded, {len(result.skipped)} unchanged"
            )
        scan.register_samples([run.name for run in runs])
