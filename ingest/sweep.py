"""The reconciler with S3 events on: one page of the bucket a pass, compared with the database.

With events (ingest.events), a run is ingested as its files land; the poll only reconciles what
an event did not announce (a message lost, a notification misconfigured for a while). Listing
every run folder and comparing every ready run for that (scan_bucket) costs a request per
thousand runs every pass, and two per ready run (a HEAD of its metadata.json, a listing of its
simulations/) every CASCADE_READY_RECHECK_SECONDS, for nothing most of the time (figures:
docs/performance.md, bench/community/watch.py). The sweep lists instead ONE page (CASCADE_S3_PAGE_SIZE keys) of
the prefix, without a delimiter, after a cursor kept in the database (SweepCursor), and moves
the cursor on; past the prefix's last key it starts again. A whole sweep takes
objects / CASCADE_S3_PAGE_SIZE reconciling passes.

A page holds keys, sizes and ETags. For each run on it, what the database holds in the page's
key range (a run can straddle two pages) is compared with it: the trace's `files`, its
simulations' files, or a deleted trace's fingerprint. Only the runs that differ are listed and
decided on, through the scan's own path (`scan.scan_bucket(swept=...)`), with the work in
progress (`scan.runs_in_progress`); a run whose simulations differ goes to the simulation
pass. So a lost event's run is found when its page comes round: a new run, a new, changed or
removed file, a re-upload. A run whose folder is gone altogether is left alone, as a scan of
the whole bucket leaves it.

`manage.py ingest_traces` without `--watch` stays a pass over the whole bucket: an operator's
full reconcile on demand.
"""

import logging
import re

from django.conf import settings
from django.utils import timezone

from ingest import bucket
from ingest.bucket import S3Object
from ingest.listing import Swept, storable_run_id
from ingest.models import SweepCursor
from ingest.paths import path_problem
from ingest.scan import Scan, scan_bucket
from ingest.simulations import FOLDER as SIMULATIONS_FOLDER
from ingest.simulations import folders
from simulations.models import SIMULATION_NAME_MAX, Simulation
from traces.models import DeletedTrace, Trace, files_fingerprint
from traces.storable_text import unstorable_character

logger = logging.getLogger(__name__)

Entry = tuple[str, int, str]  # (key, bytes, etag): what a listing and a row's `files` both say


def sweep_bucket(**options) -> Scan:
    """A reconciling pass's scan with events on: the next page compared with the database, the
    runs that differ and the work in progress listed and registered (`scan_bucket(swept=...)`,
    which takes `options`), then the cursor moved on. `Scan.swept` says what the page held."""
    swept = sweep_page()
    scan = scan_bucket(swept=swept, **options)
    scan.swept = swept
    # Moved only once the page's runs are registered: a pass that fails reads the page again.
    cursor_advance(swept)
    return scan


def watch_bucket(**options) -> Scan:
    """A polling pass's scan (no S3 events): the whole bucket's (`scan_bucket`), with what the
    watch's pages (`watch_pages`, CASCADE_POLL_WATCH_PAGES) found differing from the database."""
    watched = watch_pages(settings.CASCADE_POLL_WATCH_PAGES)
    scan = scan_bucket(watched=watched, **options)
    scan.swept = watched
    return scan


def watch_pages(most: int) -> Swept:
    """A polling pass's watch (no S3 events): the prefix's first `most` pages, each compared
    with the database as a reconciler's page is, merged. While the prefix holds at most `most`
    pages, a pass sees all of it: a file landed in a ready trace's `simulations/` folder (or a
    re-upload) is found within one poll, for `objects / CASCADE_S3_PAGE_SIZE` listing requests,
    whatever the number of ready traces. Past them, the runs are left to the ready recheck
    (CASCADE_READY_RECHECK_SECONDS). No cursor: the reconciler's is left alone."""
    merged = Swept(after="", pages=0, watch=True)
    after = ""
    for _ in range(most):
        swept = sweep_page(after)
        merged.objects += swept.objects
        merged.runs += [run_id for run_id in swept.runs if run_id not in merged.runs]
        merged.simulation_runs += [r for r in swept.simulation_runs if r not in merged.simulation_runs]
        merged.pages += 1
        merged.last, merged.next_after = swept.last, swept.next_after
        if swept.last:
            break
        after = swept.next_after
    return merged


def sweep_page(after: str | None = None) -> Swept:
    """The page after the cursor (or after `after`), one listing request, and the runs on it
    that differ."""
    after = cursor_position() if after is None else after
    objects, truncated = bucket.list_page(start_after=after)
    swept = Swept(after=after, objects=len(objects), last=not truncated)
    swept.next_after = next_cursor(objects) if truncated else ""
    high = objects[-1].key if truncated else None

    def in_range(key: str) -> bool:  # S3's order is UTF-8's, which is str's
        return key > after and (high is None or key <= high)

    base = bucket.prefix()
    trace_objects: dict[str, list[Entry]] = {}
    simulation_objects: dict[str, list[S3Object]] = {}
    for obj in objects:
        run_id, slash, rest = obj.key[len(base) :].partition("/")
        if not slash or not run_id:
            continue  # beside the runs: no run's
        if rest.startswith(SIMULATIONS_FOLDER):
            simulation_objects.setdefault(run_id, []).append(obj)
            trace_objects.setdefault(run_id, [])
        elif path_problem(rest) is None:  # as a trace records its listing (listing.inventory)
            trace_objects.setdefault(run_id, []).append((obj.key, obj.size, obj.etag))
        else:
            trace_objects.setdefault(run_id, [])
    # The run the cursor is in: its keys after the cursor may all be gone, and it on no page.
    cursor_run, slash, _ = after[len(base) :].partition("/") if after.startswith(base) else ("", "", "")
    if slash and cursor_run:
        trace_objects.setdefault(cursor_run, [])
    runs = [run_id for run_id in trace_objects if storable_run_id(run_id)]  # else never registered

    traces = dict(Trace.objects.filter(pk__in=runs).values_list("id", "files"))
    deleted = {gone.id: gone for gone in DeletedTrace.objects.filter(pk__in=runs)}
    simulations: dict[str, set[Entry]] = {}
    for run_id, files in Simulation.objects.filter(trace_id__in=runs).values_list("trace_id", "files"):
        simulations.setdefault(run_id, set()).update(entries(files, in_range))
    now = timezone.now()

    def whole(run_id: str) -> bool:
        """Whether every key of the run is in the page's range (its keys sort together)."""
        folder = bucket.run_prefix(run_id)
        return not after.startswith(folder) and (high is None or not high.startswith(folder))

    for run_id in runs:
        listed = trace_objects[run_id]
        if run_id in traces:
            if entries(traces[run_id], in_range) != sorted(listed):
                swept.runs.append(run_id)  # a file new, changed or removed: a re-upload, say
            listed_simulations = simulation_entries(run_id, simulation_objects.get(run_id, []))
            if simulations.get(run_id, set()) != set(listed_simulations):
                swept.simulation_runs.append(run_id)
        elif run_id in deleted:
            gone = deleted[run_id]
            if not listed:
                continue
            if whole(run_id):
                if files_fingerprint(as_files(sorted(listed))) != gone.files_fingerprint:
                    swept.runs.append(run_id)  # its files changed: registered anew
            elif gone.recheck_after is None or gone.recheck_after <= now:
                swept.runs.append(run_id)  # part of it here: the scan's rule, a listing when due
        elif listed:
            swept.runs.append(run_id)  # new: no event announced it
    if swept.runs or swept.simulation_runs:
        logger.info("%s: %s", swept, ", ".join(swept.runs + swept.simulation_runs)[:500])
    return swept


def entries(files: list[dict], in_range) -> list[Entry]:
    """A row's `files` in the page's range, as a listing gives them (sorted by key)."""
    return [(item["key"], item["bytes"], item["etag"]) for item in files if in_range(item["key"])]


def as_files(listed: list[Entry]) -> list[dict]:
    return [{"key": key, "bytes": size, "etag": etag} for key, size, etag in listed]


def simulation_entries(run_id: str, objects: list[S3Object]) -> list[Entry]:
    """The page's `simulations/` objects of a run that a simulation pass would register: in a
    simulation's folder whose name the database can hold (ingest.simulations)."""
    by_name, _ = folders(run_id, objects)
    return [
        (obj.key, obj.size, obj.etag)
        for name, listed in by_name.items()
        if len(name) <= SIMULATION_NAME_MAX and unstorable_character(name) is None
        for obj in listed
    ]


# --- The cursor: one row per bucket and prefix ----------------------------------------------------


def cursor_position() -> str:
    cursor = SweepCursor.objects.filter(bucket=bucket.bucket_name(), prefix=bucket.prefix()).first()
    return cursor.after if cursor is not None else ""


def cursor_advance(swept: Swept) -> None:
    """After `swept`'s page; back to the start after the last page (a lap completed)."""
    now = timezone.now()
    cursor, _ = SweepCursor.objects.get_or_create(
        bucket=bucket.bucket_name(), prefix=bucket.prefix(), defaults={"lap_started_at": now}
    )
    cursor.after, cursor.swept_at = swept.next_after, now
    if swept.last:
        cursor.laps += 1
        cursor.lap_started_at = now
    cursor.save()


def next_cursor(objects: list[S3Object]) -> str:
    """Where the next page starts: after the page's last key, or, when that key holds a control
    character, after its last key that holds none. S3 keeps a NUL in a key, which PostgreSQL's
    text cannot; and some servers (moto's) fail a StartAfter with a control character. The next
    page then lists the keys past it again, and moves on past them. A page of nothing but such
    keys goes on from just past them: the first control character and what follows become " "
    (only keys that hold a control character sort between)."""
    for obj in reversed(objects):
        if not CONTROL.search(obj.key):
            return obj.key
    key = objects[-1].key
    return key[: CONTROL.search(key).start()] + " "


CONTROL = re.compile("[\x00-\x1f]")
