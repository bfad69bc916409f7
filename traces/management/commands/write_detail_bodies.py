"""Write ready traces' details once, in every coding the API serves (traces.detail_bodies): what
a one-shot `ingest_traces` hands to a process of its own, so that its parse's time and memory
stay the parse's. An operator may run it too, for traces whose details were never written."""

from django.core.management.base import BaseCommand

from traces import detail_bodies


class Command(BaseCommand):
    help = "Write the detail of each ready trace named once, in identity, gzip and zstd."
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("trace_ids", nargs="+", metavar="TRACE_ID")

    def handle(self, *args, trace_ids, **options):
        for trace_id in dict.fromkeys(trace_ids):
            detail_bodies.write_in_background(trace_id)
