"""Poll the bucket: one pass, or `--watch` to keep polling (the embedded mode's poller);
`--events` ingests the runs S3's event notifications name (ingest.events), `--watch --events`
does so with a reconciling poll every CASCADE_POLL_SECONDS_WITH_EVENTS, which reads one page of
the bucket a pass (ingest.sweep). A pass without `--watch` always looks at the whole bucket:
the operator's full reconcile."""

import gc
import time

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from cascade import metrics
from cascade.commands import require_migrated_database
from ingest import bucket, events, passes, storage
from ingest.bodies import written_at_the_end
from simulations import sweep_watcher
from traces import audit
from traces.models import AuditAction


class Command(BaseCommand):
    help = "Register new uploads in the S3 bucket and parse every trace that is ready."
    # The system checks import the URLconf (views, DRF, drf-spectacular, the admin): memory a
    # poller never uses. `manage.py check` and the web server run them.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--trace", metavar="ID", help="only this trace (listed whatever its state)")
        parser.add_argument("--reparse", action="store_true", help="read the files again even if unchanged")
        parser.add_argument(
            "--reparse-outdated",
            action="store_true",
            help="also read again every trace an older version of the stats parser read",
        )
        parser.add_argument("--watch", action="store_true", help="keep polling until interrupted")
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            metavar="N",
            help="seconds between passes with --watch (5; with --events CASCADE_POLL_SECONDS_WITH_EVENTS)",
        )
        parser.add_argument(
            "--events",
            action="store_true",
            help="ingest the runs named by S3 events in CASCADE_SQS_QUEUE_URL, until the queue is empty "
            "(with --watch: until interrupted, polling every --interval)",
        )

    def handle(self, *args, trace, reparse, reparse_outdated, watch, interval, events, **options):
        if interval is not None and not watch:
            raise CommandError("--interval goes with --watch")
        if interval is not None and interval <= 0:
            raise CommandError("--interval must be a positive number of seconds")
        # What Django's start made lives as long as the process: frozen, the collector walks it
        # neither during a parse nor at exit (a fifth of a second of teardown otherwise).
        gc.freeze()
        require_migrated_database()
        try:
            storage.require_bucket()
        except ImproperlyConfigured as problem:
            raise CommandError(str(problem)) from None
        if reparse_outdated and trace is not None:
            raise CommandError("--reparse-outdated goes over every trace; without --trace")
        if events:
            if not settings.CASCADE_SQS_QUEUE_URL:
                raise CommandError("--events needs CASCADE_SQS_QUEUE_URL: the queue S3 sends its events to")
            if trace is not None:
                raise CommandError("--events ingests the runs the events name; without --trace")
            if not watch:
                with written_at_the_end():  # the details its parses ask for: before it exits
                    self.drain_events()
                return
            interval = interval or settings.CASCADE_POLL_SECONDS_WITH_EVENTS
        if reparse or reparse_outdated:  # an operator's re-ingest, not the poller's routine
            audit.record(
                AuditAction.REINGEST,
                trace_id=trace,
                detail={"command": "ingest_traces", "reparse": reparse, "reparse_outdated": reparse_outdated},
            )
        if not watch:
            with written_at_the_end():  # the details its parses ask for: before it exits
                result = self.run_pass(trace, reparse, outdated=reparse_outdated)
            if result.errors:
                raise CommandError("some traces could not be ingested (see above); a new pass retries them")
            return
        try:
            if events:  # what is queued first (since the last run), then the reconciling poll
                self.events_until(time.monotonic() + interval, until_empty=True)
            while True:
                # Idle between passes, the connection may have been dropped (a restart, a
                # failover): Django reconnects only once an unusable one is closed.
                close_old_connections()
                try:
                    # The scheduled poll's setting: a few outdated traces a pass.
                    scheduled = settings.CASCADE_REPARSE_OUTDATED and trace is None
                    self.run_pass(
                        trace,
                        reparse,
                        outdated=reparse_outdated or scheduled,
                        outdated_batch=None if reparse_outdated else settings.CASCADE_REPARSE_OUTDATED_BATCH,
                        # Events announce the runs; the poll reconciles, a page at a time.
                        sweep=events and not reparse,
                    )
                    reparse = reparse_outdated = False  # re-read once, not on every pass
                except KeyboardInterrupt:
                    raise
                except Exception as error:  # S3 or the database away: keep watching
                    self.stderr.write(f"pass failed, retrying: {type(error).__name__}: {error}")
                self.watch_sweeps()
                if events:
                    self.events_until(time.monotonic() + interval)
                else:
                    time.sleep(interval or 5)
        except KeyboardInterrupt:
            self.stdout.write("stopped")

    @metrics.measured_pass("ingest_traces")
    def run_pass(self, trace_id, reparse, *, outdated=False, outdated_batch=None, sweep=False):
        started = time.monotonic()
        try:
            result = passes.poll_bucket(
                trace_id=trace_id,
                reparse=reparse,
                reparse_outdated=outdated,
                outdated_batch=outdated_batch,
                progress=self.progress,
                processes=settings.CASCADE_PARSE_PROCESSES,
                sweep=sweep,
            )
        except (BotoCoreError, ClientError) as problem:
            raise CommandError(f"cannot list the bucket {bucket.bucket_name()}: {problem}") from None
        for change in result.changes:
            self.stdout.write(str(change))
        for error in result.errors:
            self.stderr.write(f"error: {error}")
        if trace_id is not None and not result.listed:
            raise CommandError(
                f"no objects under {bucket.run_prefix(trace_id)} in bucket {bucket.bucket_name()}"
            )
        if trace_id is not None and not result.changes:
            self.stdout.write(f"{trace_id}: nothing new")
        seconds = time.monotonic() - started
        self.stdout.write(f"pass: {result.summary()} in {seconds:.{1 if seconds >= 10 else 2}f} s")
        self.stdout.flush()
        return result

    def watch_sweeps(self):
        """The sweeps' watcher (simulations.sweep_watcher): lapsed leases, lost messages."""
        try:
            result = sweep_watcher.watch_sweeps()
        except KeyboardInterrupt:
            raise
        except Exception as error:  # the database or the broker away: the next pass tries
            self.stderr.write(f"sweep watcher failed, retrying: {type(error).__name__}: {error}")
            return
        if result.requeued or result.failed or result.republished:
            self.stdout.write(result.summary())

    def drain_events(self):
        """Batches until a receive finds the queue empty."""
        while self.run_events_batch().received:
            pass

    def events_until(self, deadline: float, *, until_empty: bool = False) -> None:
        """Batches until `deadline` (the next poll), or a receive that finds the queue empty:
        each a long poll, so an idle queue costs a request every CASCADE_SQS_WAIT_SECONDS."""
        while time.monotonic() < deadline:
            close_old_connections()
            try:
                batch = self.run_events_batch(
                    wait=min(settings.CASCADE_SQS_WAIT_SECONDS, deadline - time.monotonic())
                )
                if until_empty and not batch.received:
                    return
            except KeyboardInterrupt:
                raise
            except Exception as error:  # SQS, S3 or the database away: keep watching
                self.stderr.write(f"events failed, retrying: {type(error).__name__}: {error}")
                time.sleep(min(5, max(0, deadline - time.monotonic())))

    @metrics.measured_pass("ingest_traces_events")
    def run_events_batch(self, wait: float | None = None) -> events.BatchResult:
        started = time.monotonic()
        wait_seconds = None if wait is None else max(0, int(wait))
        try:
            result = events.consume_batch(
                settings.CASCADE_SQS_QUEUE_URL, wait_seconds=wait_seconds, progress=self.progress
            )
        except (BotoCoreError, ClientError) as problem:
            raise CommandError(f"cannot read the queue {settings.CASCADE_SQS_QUEUE_URL}: {problem}") from None
        if not result.received:
            return result
        for change in result.changes:
            self.stdout.write(str(change))
        for error in result.errors:
            self.stderr.write(f"error: {error}")
        seconds = time.monotonic() - started
        self.stdout.write(f"events: {result.summary()} in {seconds:.2f} s")
        self.stdout.flush()
        return result

    def progress(self, message):
        self.stderr.write(message)
        self.stderr.flush()
