"""Find what the database's constraints no longer guard (traces.integrity); --fix repairs it.

Exits 1 when it found a problem (repaired or not), so that cron or a monitor can say so.
"""

from django.core.management.base import BaseCommand, CommandError

from cascade.commands import require_migrated_database
from traces.integrity import integrity_check


class Command(BaseCommand):
    help = (
        "Check launches, contexts and steps without their trace, traces stuck in parsing, counts that "
        "disagree with the launches stored; exit 1 if anything is wrong. --fix repairs what it finds."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--fix",
            action="store_true",
            help="delete rows without their trace, have stuck traces parsed again, recount counts",
        )

    def handle(self, *args, fix, **options):
        require_migrated_database()
        report = integrity_check(fix=fix)
        for finding in report.findings:
            self.stdout.write(str(finding))
        for note in report.notes:
            self.stdout.write(note)
        if report.findings:
            done = "repaired" if fix else "found (--fix repairs them)"
            raise CommandError(f"{len(report.findings)} kind(s) of integrity problem {done}")
        self.stdout.write("no integrity problem found")
