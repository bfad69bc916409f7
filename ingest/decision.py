"""The decision on a run whose listing changed: wait for its files, fail it, or parse it.

    (first object lands)        -> uploading
    metadata.json, files listed
      but not all there         -> uploading, until CASCADE_UPLOAD_TIMEOUT -> failed
    status != "ok"              -> failed
    status "ok"                 -> parsing -> ready (kernels stored: ingest.parse) | failed (bad input)

metadata.json is read first; `fetch_small_files` reads, a few traces ahead on the S3 threads,
what the decision will read first (ingest.read_ahead), and decides nothing. Every change of a
trace is written by traces.services; what goes wrong while deciding is ingest.failures' to judge.
"""

import logging
from dataclasses import dataclass

from django.conf import settings

from ingest import bucket, failures, owners
from ingest.bucket import S3Object
from ingest.failures import TraceInputError
from ingest.listing import fingerprint, inventory
from ingest.metadata import (
    METADATA_NAME,
    TIMELINE_NAME,
    TIMING_NAME,
    MetadataError,
    MetadataLimits,
    failure,
    listed_files,
    listed_keys,
    missing_listed_files,
    parse_metadata,
    run_fields,
    with_derived_arch_and_config,
)
from ingest.parse import Progress, parse_into, stats_sources
from ingest.paths import path_problem, shown_path
from ingest.read_ahead import ReadAhead
from ingest.scan import upload_timed_out
from traces import services
from traces.models import CURRENT_PARSER_VERSION, Trace

logger = logging.getLogger(__name__)

# What a pass reads ahead for each trace it parses, at most (files up to
# read_ahead.PREFETCH_FILE_BYTES): memory stays within (2 x CASCADE_S3_THREADS) x
# PREFETCH_RUN_BYTES whatever the traces' sizes.
PREFETCH_RUN_BYTES = 4 * 1024 * 1024
MISSING_KEYS_SHOWN = 10


def decide(
    trace: Trace, objects: list[S3Object], *, progress: Progress | None, files: ReadAhead | None = None
) -> None:
    """Look at the run's metadata.json, then wait, fail or parse. Bad input fails the trace;
    S3 trouble raises, for the caller to retry. `files`: what was read ahead (`fetch_small_files`)."""
    files = ReadAhead() if files is None else files
    current = fingerprint(objects)
    # Files whose path would leave a client's folder: in no listing, never read (listing.inventory).
    warnings = [left_out(obj.name, why) for obj in objects if (why := path_problem(obj.name))]
    objects = [obj for obj in with_owner_read(trace, objects) if path_problem(obj.name) is None]
    by_name = {obj.name: obj for obj in objects}
    if METADATA_NAME not in by_name:
        nested = next(name for name in by_name if name.endswith("/" + METADATA_NAME))
        error = (
            f"metadata.json is at {trace.id}/{nested}, one folder down: a run's name cannot contain "
            f"'/' ({trace.id}/{nested.rpartition('/')[0]} here); upload each run into a folder of its own "
            f"directly under {bucket.prefix() or 'the bucket root'}"
        )
        fail(trace, error, current, run=run_fields(None, set(by_name), trace.id))
        return
    try:
        metadata = read_metadata(by_name[METADATA_NAME], files)
    except TraceInputError as problem:
        # What metadata.json used to say is no longer what the run says: cleared.
        fail(trace, str(problem), current, run=run_fields(None, set(by_name), trace.id))
        return
    run = run_fields(metadata, set(by_name), trace.id)
    run_prefix = bucket.run_prefix(trace.id)
    listed = listed_files(metadata)
    missing = []
    for key in missing_listed_files(listed, inventory(objects), run_prefix):
        path = key.removeprefix(run_prefix) if key.startswith(run_prefix) else key.lstrip("/")
        if (why := path_problem(path)) is None:
            missing.append(key)
        elif (warning := left_out(path, why)) not in warnings:
            warnings.append(warning)  # listed, but never waited for
    # What the trace's files are to a reader: metadata.json's list and itself (else the listing).
    run["bytes"] = run_bytes(objects, listed, run_prefix)
    if missing and upload_timed_out(trace):
        shown = ", ".join(missing[:MISSING_KEYS_SHOWN])
        more = f" and {len(missing) - MISSING_KEYS_SHOWN} more" if len(missing) > MISSING_KEYS_SHOWN else ""
        error = (
            f"upload incomplete: {len(missing)} file(s) listed in metadata.json did not arrive within "
            f"CASCADE_UPLOAD_TIMEOUT ({settings.CASCADE_UPLOAD_TIMEOUT} s) of the last new file: {shown}{more}"
        )
        fail(trace, error, current, run=run, kind=failures.UPLOAD, warnings=warnings)
        return
    if missing:
        services.trace_wait_for_files(
            trace, run=run, waiting_for=missing, fingerprint=current, warnings=warnings
        )
        logger.info(
            "%s: waiting for %d file(s) listed in metadata.json: %s",
            trace.id,
            len(missing),
            ", ".join(missing[:MISSING_KEYS_SHOWN]),
        )
        return
    profiler_failure = failure(metadata)
    if profiler_failure is not None:
        fail(trace, profiler_failure, current, run=run, kind=failures.PROFILER, warnings=warnings)
        return
    run = with_derived_arch_and_config(run)
    if listed:
        # Only what the run says it is: files left over from an earlier upload are not read.
        keys = listed_keys(listed, inventory(objects), run_prefix)
        objects = [obj for obj in objects if obj.key in keys]
    try:
        parse_into(
            trace,
            objects,
            current,
            run=run,
            launches_expected=metadata.get("kernel_count") != 0,
            progress=progress,
            files=files,
            warnings=warnings,
        )
    except TraceInputError as problem:
        fail(trace, str(problem), current, run=run, parsed=True, warnings=warnings)
    # Input the parser let through but the database refuses, and anything else: ingest.failures.


def with_owner_read(trace: Trace, objects: list[S3Object]) -> list[S3Object]:
    """The trace's owner set from the run's owner record (a pushed run's: ingest.owners) where
    the trace has none yet; the objects without the record, which is Cascade's, not the run's
    (never read as a run's file, nor counted in its bytes; the fingerprint keeps it)."""
    record = next((obj for obj in objects if obj.name == owners.OWNER_NAME), None)
    if record is None:
        return objects
    if trace.owner_id is None:
        owner = owners.owner_named(owners.read_owner(bucket.run_prefix(trace.id)))
        if owner is not None:
            services.trace_set_owner(trace, owner)
    return [obj for obj in objects if obj is not record]


def fail(
    trace: Trace,
    error: str,
    current: str,
    *,
    run: dict,
    parsed: bool = False,
    kind: str = failures.INPUT,
    warnings: list[dict] | None = None,
) -> None:
    services.trace_fail(
        trace,
        error,
        fingerprint=current,
        run=run,
        parser_version=CURRENT_PARSER_VERSION if parsed else None,
        warnings=warnings,
    )
    failures.trace_failed(trace.id, kind, error)


def left_out(path: str, why: str) -> dict:
    """The warning for a file whose path is not a plain relative one (scan.path_problem)."""
    return {
        "file": shown_path(path),
        "offset": None,
        "what": f"not a plain relative POSIX path ({why}): left out of the trace's files, never read, "
        "listed or signed",
    }


def run_bytes(objects: list[S3Object], listed: list[dict], run_prefix: str) -> int:
    """The bytes of the files a reader of the trace gets (`/files`, `cascade pull`): those
    metadata.json lists and itself, or every file of a run without a list; never simulations/
    (not in a run's listing) nor a file left out (scan.path_problem)."""
    if not listed:
        return sum(obj.size for obj in objects)
    keys = listed_keys(listed, inventory(objects), run_prefix) | {run_prefix + METADATA_NAME}
    return sum(obj.size for obj in objects if obj.key in keys)


def metadata_limits() -> MetadataLimits:
    return MetadataLimits(
        max_bytes=settings.CASCADE_METADATA_MAX_BYTES,
        max_depth=settings.CASCADE_METADATA_MAX_DEPTH,
        max_string=settings.CASCADE_METADATA_MAX_STRING,
        max_layers=settings.CASCADE_METADATA_MAX_LAYERS,
    )


def read_metadata(obj: S3Object, files: ReadAhead) -> dict:
    limits = metadata_limits()
    try:
        raw = files.read_whole(obj, limits.max_bytes)
    except ValueError as too_large:
        raise TraceInputError(f"metadata.json: {too_large} (CASCADE_METADATA_MAX_BYTES)") from None
    try:
        return parse_metadata(raw, limits)
    except MetadataError as problem:
        raise TraceInputError(str(problem)) from None


# --- Reading ahead (on the S3 threads: S3 only, never the database) ---------------------------


@dataclass(frozen=True)
class Fetched:
    """A run's listing and the small files a decision on it will read, read ahead."""

    objects: list[S3Object]
    files: ReadAhead


def fetch_small_files(run_id: str, objects: list[S3Object]) -> Fetched:
    """metadata.json and, if it says the run is complete and fine, the small files a parse reads.

    Runs on an S3 thread: reads what `decide` would read first, decides nothing; whatever it
    skips (a large file, a run that will wait or fail) is read by `decide` itself if needed.
    A read that fails (retries spent) is kept, and raised where `decide` reads that file.
    """
    files = ReadAhead()
    meta = next((obj for obj in objects if obj.name == METADATA_NAME), None)
    if meta is None or not files.fetch(meta, settings.CASCADE_METADATA_MAX_BYTES):
        return Fetched(objects, files)
    raw_metadata = files.body(meta)
    if raw_metadata is None:  # replaced since the listing: the decision reads it again
        return Fetched(objects, files)
    try:
        wanted = files_to_parse(run_id, objects, raw_metadata)
    except (MetadataError, TraceInputError):
        wanted = []  # the decision fails the run, from metadata.json alone
    budget = PREFETCH_RUN_BYTES - meta.size
    for obj in wanted:
        if obj.size <= min(budget, settings.CASCADE_MAX_STATS_BYTES) and files.fetch(obj):
            budget -= obj.size
    return Fetched(objects, files)


def files_to_parse(run_id: str, objects: list[S3Object], raw_metadata: bytes) -> list[S3Object]:
    """What a parse of the run will read, if metadata.json says it is complete and fine ([] if not)."""
    metadata = parse_metadata(raw_metadata, metadata_limits())
    listed = listed_files(metadata)
    run_prefix = bucket.run_prefix(run_id)
    if failure(metadata) is not None or missing_listed_files(listed, inventory(objects), run_prefix):
        return []
    if listed:
        keys = listed_keys(listed, inventory(objects), run_prefix)
        objects = [obj for obj in objects if obj.key in keys]
    sources = stats_sources(objects)
    wanted = list(
        {obj.key: obj for source in sources for obj in (*source.kernelslists, source.stats)}.values()
    )
    return wanted + [obj for obj in objects if obj.name in (TIMELINE_NAME, TIMING_NAME)]
