"""Delete the launches of deleted traces in short batches (traces.kernel_store.kernels_purge).

The poll pass does this a few seconds at a time; this command does it all now (or for
`--seconds`), for cron, for a deployment without a poller, or after deleting many traces.
"""

from django.core.management.base import BaseCommand

from cascade.commands import require_migrated_database
from traces.kernel_store import PURGE_BATCH, kernels_purge


class Command(BaseCommand):
    help = (
        "Delete the launches of deleted traces, at most --batch launches a statement, each its own "
        "transaction; safe to stop and run again (it resumes)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=PURGE_BATCH, help="launches per statement")
        parser.add_argument(
            "--pause", type=float, default=0.0, help="seconds between statements (to spare replicas, vacuum)"
        )
        parser.add_argument("--seconds", type=float, default=None, help="stop after about this long")

    def handle(self, *args, batch, pause, seconds, **options):
        require_migrated_database()
        self.stdout.write(str(kernels_purge(batch=batch, pause=pause, seconds=seconds)))
