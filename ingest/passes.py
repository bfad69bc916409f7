"""A poll pass, from end to end: the scan, then the decision on each trace that needs one.

Two callers, one implementation: `manage.py ingest_traces` runs `poll_bucket` (scan, then
parse inline); the Celery poll task runs `scan_bucket` and fans `ingest_trace` out to
workers. `ingest_trace` holds the trace's lock (traces.locks) for the whole decision, so
concurrent passes never parse one trace twice, and stores kernels in one transaction, so a
killed pass leaves either the old kernels or the new ones; a trace it left in `parsing` is
picked up by the next pass.

    ingest.scan        what the bucket holds: listings, registration, which traces to decide on
    ingest.decision    wait, fail or parse, from metadata.json (and what to read ahead for it)
    ingest.parse       the stats files, steps and timing into the trace's kernels
    ingest.read_ahead  a run's small files, read ahead on the S3 threads
    ingest.processes   a pass's parses shared among processes
    ingest.metering    what a pass cost, in S3 requests and database queries
    ingest.failures    what an error while deciding means for the trace
    ingest.simulations the runs' simulations, once their traces are decided on
    ingest.sweep       with S3 events on, the reconciling pass's scan: one page of the bucket

Speed: S3 requests overlap on `CASCADE_S3_THREADS` threads (`bucket.overlapped`), each with its
own client: the scan's listings and HEADs, and for each trace a pass parses, its listing's small
files, read a few traces ahead of the one being parsed. Everything else stays on the pass's
thread, one trace after another, in order: the database, the lock, the decision; a larger stats
file streams there. A body read ahead is used only if it is the version (ETag) of the listing
the decision is made on, and that listing only if it is still the one the trace's row holds
once its lock is taken.
"""

import logging
import os
import sys
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection

from ingest import bodies, bucket, decision, failures, processes, simulations, sweep
from ingest.bucket import S3Object
from ingest.decision import Fetched, decide
from ingest.listing import Swept, fingerprint, inventory
from ingest.metering import PassCost, measured
from ingest.parse import Progress
from ingest.scan import Scan, TraceChange, needs_decision, register_objects, scan_bucket
from simulations.services import SimulationChange
from traces.kernel_store import kernels_purge
from traces.locks import trace_lock
from traces.models import Trace, TraceState

logger = logging.getLogger(__name__)
# A pass's share of purging deleted traces' launches: about 2M launches' worth, then the next pass.
PURGE_SECONDS = 5.0

__all__ = ["PassResult", "ingest_trace", "parse_traces", "poll_bucket", "scan_bucket"]


@dataclass
class PassResult:
    listed: int = 0
    changes: list[TraceChange] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cost: "PassCost | None" = None
    simulation_changes: list[SimulationChange] = field(default_factory=list)
    swept: Swept | None = None  # a reconciling pass with events on: the page it read

    def summary(self) -> str:
        states = [change.new_state for change in self.changes]
        summary = (
            f"{self.listed} traces looked at, {len(self.changes)} changed: "
            f"{states.count(TraceState.READY)} ready, {states.count(TraceState.FAILED)} failed, "
            f"{states.count(TraceState.UPLOADING)} uploading"
        )
        if self.simulation_changes:
            ready = [c for c in self.simulation_changes if c.new_state == TraceState.READY]
            failed = [c for c in self.simulation_changes if c.new_state == TraceState.FAILED]
            summary += f"; {len(self.simulation_changes)} simulations changed: {len(ready)} ready, {len(failed)} failed"
        if self.errors:
            summary += f"; {len(self.errors)} could not be ingested (retried next pass)"
        if self.swept is not None:
            summary += f"; {self.swept}"
        if self.cost is not None:
            summary += f"; {self.cost}"
        return summary


# --- The pass -----------------------------------------------------------------------------


def poll_bucket(
    *,
    trace_id: str | None = None,
    reparse: bool = False,
    reparse_outdated: bool = False,
    outdated_batch: int | None = None,
    progress: Progress | None = None,
    processes: int = 1,
    undelete: bool = True,
    sweep: bool = False,
) -> PassResult:
    """One whole pass: register what landed, then parse every trace that is ready, inline.

    `processes` > 1 lets a pass with many traces to parse share them among that many
    processes (ingest.processes); `manage.py ingest_traces` passes CASCADE_PARSE_PROCESSES.
    A caller that is not a command's main module (a Celery task, a script without a main
    guard) keeps the default: a spawned process imports the caller's main module again.
    `undelete` as in scan_bucket. `sweep`: a reconciling pass with S3 events on, which reads
    one page of the bucket instead of all of it (ingest.sweep); not with `trace_id`.
    """
    with measured() as cost:
        result = _poll_bucket(
            trace_id, reparse, reparse_outdated, outdated_batch, progress, processes, undelete, sweep
        )
    cost.add(result.cost)  # the parse processes', if any
    cost.runs = result.listed
    result.cost = cost
    return result


def _poll_bucket(
    trace_id,
    reparse,
    reparse_outdated,
    outdated_batch,
    progress,
    processes_wanted,
    undelete=True,
    sweeping=False,
) -> PassResult:
    options = {"reparse": reparse, "reparse_outdated": reparse_outdated, "outdated_batch": outdated_batch}
    if sweeping and trace_id is None and not reparse:
        scan = sweep.sweep_bucket(**options)
    elif trace_id is None and not reparse and settings.CASCADE_POLL_WATCH_PAGES:
        scan = sweep.watch_bucket(undelete=undelete, **options)
    else:
        scan = scan_bucket(trace_id=trace_id, undelete=undelete, **options)
    changes = {change.trace_id: change for change in scan.changes}
    to_reparse = scan.to_reparse | (set(scan.to_parse) if reparse else set())
    count = processes.process_count(
        len(scan.to_parse),
        processes_wanted,
        settings.CASCADE_PARSES_PER_PROCESS,
        postgres=connection.vendor == "postgresql",
    )
    if count == 1:
        parsed, errors = parse_traces(scan.to_parse, to_reparse, scan.listings, progress)
        children = PassCost()
    else:
        parsed, errors, children = parse_in_processes(scan, to_reparse, count, progress)
    for change in parsed:
        first = changes.get(change.trace_id, change)
        changes[change.trace_id] = TraceChange(
            change.trace_id,
            first.old_state,
            change.new_state,
            change.kernel_count,
            change.bytes,
            change.error,
        )
    # The runs' simulations, after their traces: a trace this pass made ready is paired at once.
    simulation_changes = simulations.simulation_pass(
        scan.looked_at, listings=scan.simulation_listings, trace_id=trace_id
    )
    for change in simulation_changes:
        logger.info("%s", change)
    if trace_id is None:  # a whole pass: deleted traces' launches, a few seconds' worth
        purged = kernels_purge(seconds=PURGE_SECONDS)
        if purged.statements or purged.traces:
            logger.info("purge of deleted traces' launches: %s", purged)
    return PassResult(
        listed=scan.listed,
        changes=list(changes.values()),
        errors=errors,
        cost=children,
        simulation_changes=simulation_changes,
        swept=scan.swept,
    )


def parse_traces(
    run_ids: list[str], to_reparse: set[str], listings: dict[str, list[S3Object]], progress: Progress | None
) -> tuple[list[TraceChange], list[str]]:
    """Parse each run in turn on this thread, the next ones' small files read meanwhile on the
    S3 threads; (what changed, the errors of those that could not be ingested)."""
    changes, errors = [], []

    def read_ahead(run_id: str) -> Fetched:  # on an S3 thread: no database
        objects = listings.get(run_id)
        return decision.fetch_small_files(
            run_id, bucket.list_run_objects(run_id) if objects is None else objects
        )

    for ready_id, fetched in bucket.overlapped(read_ahead, run_ids):
        try:
            change = ingest_trace(
                ready_id, reparse=ready_id in to_reparse, progress=progress, fetched=fetched.result()
            )
        except failures.ParseAttemptFailed as error:  # logged, with its traceback, and counted
            errors.append(f"{ready_id}: {error}")
            continue
        except Exception as error:  # S3 trouble: the other traces still get their turn
            logger.exception("%s: ingestion error, the next pass tries again", ready_id)
            errors.append(f"{ready_id}: {type(error).__name__}: {error}")
            continue
        if change is not None:
            changes.append(change)
    return changes, errors


def parse_in_processes(
    scan: Scan, to_reparse: set[str], count: int, progress: Progress | None
) -> tuple[list[TraceChange], list[str], PassCost]:
    """parse_traces over `count` shares of the runs: this process's and `count - 1` spawned
    ones' (ingest.processes); their costs summed."""
    own, *others = processes.shares(scan.to_parse, count)
    logger.info("parsing %d traces in %d processes", len(scan.to_parse), count)
    changes, errors, cost = [], [], PassCost()
    with processes.pool(len(others)) as pool:
        futures = [
            (
                share,
                pool.submit(
                    parse_share,
                    share,
                    to_reparse & set(share),
                    {run_id: scan.listings[run_id] for run_id in share if run_id in scan.listings},
                    progress is not None,
                ),
            )
            for share in others
        ]
        changes, errors = parse_traces(own, to_reparse, scan.listings, progress)
        for share, future in futures:
            try:
                share_changes, share_errors, share_cost = future.result()
            except Exception as error:  # the process died: its runs are parsed next pass
                logger.exception("a parse process failed")
                errors += [
                    f"{run_id}: parse process failed: {type(error).__name__}: {error}" for run_id in share
                ]
                continue
            changes += share_changes
            errors += share_errors
            cost.add(share_cost)
    return changes, errors, cost


def parse_share(
    run_ids: list[str], to_reparse: set[str], listings: dict, progress: bool
) -> tuple[list[TraceChange], list[str], PassCost]:
    """Parse `run_ids` in a process of ingest.processes' pool; (changes, errors, cost), as parse_traces."""
    logger.info("parse process %d: %d traces to parse", os.getpid(), len(run_ids))
    with bodies.written_at_the_end():  # this process ends with the pass
        with measured() as cost:
            changes, errors = parse_traces(
                run_ids, to_reparse, listings, progress_to_stderr if progress else None
            )
    return changes, errors, cost


def progress_to_stderr(message: str) -> None:
    """A parse process's progress lines, where the command writes its own."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def ingest_trace(
    trace_id: str,
    *,
    reparse: bool = False,
    progress: Progress | None = None,
    fetched: Fetched | None = None,
) -> TraceChange | None:
    """Bring one trace up to date with its objects; None if there was nothing to do.

    Returns None at once when another process holds the trace. What goes wrong while it is
    decided or parsed goes through ingest.failures: transient errors (S3, the network, the
    database away) are raised for the caller to retry; a trace's own bad input marks it failed;
    an error of ours raises ParseAttemptFailed, and fails the trace at the last try.

    `fetched`, a listing and small files read ahead without the lock, saves the listing if
    the trace's row still holds that listing once the lock is taken (else the run is listed
    again, as without it), and the downloads of the files it holds.
    """
    with trace_lock(trace_id) as acquired:
        if not acquired:
            logger.info("%s: another pass holds it, skipped", trace_id)
            return None
        trace, registered, objects = None, None, None
        if fetched is not None:
            # Registered by this pass's scan with that listing, and no pass has seen another since.
            trace = Trace.objects.filter(pk=trace_id).first()
            if trace is not None and trace.files == inventory(fetched.objects):
                objects = fetched.objects
        if objects is None:
            objects = bucket.list_run_objects(trace_id)
            if not objects:
                return None
            trace, registered = register_objects(trace_id, objects)
        if trace is None:
            logger.info(
                "%s: deleted by an operator and its files have not changed, or not storable: left alone",
                trace_id,
            )
            return None
        old_state = registered.old_state if registered else trace.state
        if not needs_decision(trace, reparse=reparse):
            return registered
        decided_on = trace.parsed_fingerprint, trace.kernel_count, trace.error
        try:
            decide(trace, objects, progress=progress, files=fetched.files if fetched is not None else None)
        except Exception as error:
            # Retried later (raised), counted (ParseAttemptFailed raised) or failed: ingest.failures.
            failures.trace_parse_error(trace, error, fingerprint=fingerprint(objects))
        else:
            if trace.state == TraceState.READY:  # a decision ends ready only by storing the kernels
                timing_error = f" ({trace.timing_error})" if trace.timing_error else ""
                logger.info("%s: ready, %d kernels%s", trace_id, trace.kernel_count, timing_error)
        unchanged = (trace.parsed_fingerprint, trace.kernel_count, trace.error) == decided_on
        if registered is None and trace.state == old_state and unchanged and not reparse:
            return None
        # What the trace holds now: a pass reports the parse it just made, not the listing before it.
        return TraceChange(trace_id, old_state, trace.state, trace.kernel_count, trace.bytes, trace.error)
