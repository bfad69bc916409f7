"""What a poll pass does with what it sees in the bucket: the trace state machine.

    (first object lands)        -> uploading
    metadata.json, files listed
      but not all there         -> uploading, until CASCADE_UPLOAD_TIMEOUT -> failed
    status != "ok"              -> failed
    status "ok"                 -> parsing -> ready (kernels stored) | failed (bad input)

Two callers, one implementation: `manage.py ingest_traces` runs `poll_bucket` (scan, then
parse inline); the Celery poll task runs `scan_bucket` and fans `ingest_trace` out to
workers. `ingest_trace` holds the trace's lock (traces.locks) for the whole decision, so
concurrent passes never parse one trace twice, and stores kernels in one transaction, so a
killed pass leaves either the old kernels or the new ones; a trace it left in `parsing` is
picked up by the next pass.

Cost: a pass lists the run folders (one request per thousand runs) and then only the runs
that are new or not finished (uploading, parsing, failed). Ready traces are not listed
again unless asked (`--trace`, `--reparse`). Objects are downloaded only when a run's
listing (keys, sizes, ETags) differs from the one its last decision was made on.
"""

import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import DataError, IntegrityError, transaction
from django.utils import timezone

from ingest import bucket, stats
from ingest.bucket import S3Object
from traces.locks import trace_lock
from traces.models import (
    CURRENT_PARSER_VERSION,
    NO_DEVICE,
    Kernel,
    Trace,
    TraceState,
    files_fingerprint,
    missing_listed_files,
)
from traces.services import kernels_replace

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]

METADATA_NAME = "metadata.json"
TIMELINE_NAME = "timeline.json"
TIMING_NAME = "timing.csv"
METADATA_MAX_BYTES = 64 * 1024**2
HEADER_PEEK_BYTES = 4096
PROGRESS_EVERY = 100_000
MISSING_KEYS_SHOWN = 10
UNFINISHED_STATES = (TraceState.UPLOADING, TraceState.PARSING, TraceState.FAILED)

# Accel-Sim's tested configs, by the SASS architecture they model.
SIM_CONFIG_FOR_ARCH = {
    "sm_70": "SM7_QV100",
    "sm_75": "SM75_RTX2060",
    "sm_80": "SM80_A100",
    "sm_86": "SM86_RTX3070",
    "sm_90": "SM90_H100",
}
SIM_CONFIG_ARCH = re.compile(r"^SM(\d)(\d?)_", re.IGNORECASE)
METADATA_STRINGS = ("model", "source_gpu", "trace_gpu_arch", "suggested_sim_config")


# What a decision writes; `files`, `bytes` and `files_changed_at` belong to registration,
# which a concurrent scan may update meanwhile.
DECISION_FIELDS = [
    "state",
    "error",
    "kernel_count",
    "parsed_fingerprint",
    "metadata_json",
    "model",
    "layers",
    "source_gpu",
    "trace_gpu_arch",
    "suggested_sim_config",
    "has_step_timeline",
    "has_real_timing",
    "sample",
    "parser_version",
    "kernels_without_totals",
]


class TraceInputError(Exception):
    """The upload itself is wrong (the trace's own fault): the trace fails with this message."""


@dataclass(frozen=True)
class TraceChange:
    trace_id: str
    old_state: str | None
    new_state: str
    kernel_count: int = 0
    bytes: int = 0
    error: str | None = None

    def __str__(self) -> str:
        line = f"{self.trace_id}: {self.old_state or 'new'} -> {self.new_state}, {self.kernel_count} kernels"
        if self.new_state == TraceState.UPLOADING:
            line += f", {self.bytes} bytes"
        if self.error:
            line += f" ({self.error})"
        return line


@dataclass
class Scan:
    listed: int = 0
    changes: list[TraceChange] = field(default_factory=list)
    to_parse: list[str] = field(default_factory=list)
    # Of to_parse, the traces to read again although their files did not change.
    to_reparse: set[str] = field(default_factory=set)


@dataclass
class PassResult:
    listed: int = 0
    changes: list[TraceChange] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        states = [change.new_state for change in self.changes]
        summary = (
            f"{self.listed} traces looked at, {len(self.changes)} changed: "
            f"{states.count(TraceState.READY)} ready, {states.count(TraceState.FAILED)} failed, "
            f"{states.count(TraceState.UPLOADING)} uploading"
        )
        if self.errors:
            summary += f"; {len(self.errors)} could not be ingested (retried next pass)"
        return summary


# --- The pass -----------------------------------------------------------------------------


def poll_bucket(
    *,
    trace_id: str | None = None,
    reparse: bool = False,
    reparse_outdated: bool = False,
    outdated_batch: int | None = None,
    progress: Progress | None = None,
) -> PassResult:
    """One whole pass: register what landed, then parse every trace that is ready, inline."""
    scan = scan_bucket(
        trace_id=trace_id, reparse=reparse, reparse_outdated=reparse_outdated, outdated_batch=outdated_batch
    )
    changes = {change.trace_id: change for change in scan.changes}
    errors = []
    for ready_id in scan.to_parse:
        try:
            change = ingest_trace(ready_id, reparse=reparse or ready_id in scan.to_reparse, progress=progress)
        except Exception as error:  # S3 trouble, or a bug: the other traces still get their turn
            logger.exception("%s: ingestion error, the next pass tries again", ready_id)
            errors.append(f"{ready_id}: {type(error).__name__}: {error}")
            continue
        if change is not None:
            first = changes.get(ready_id, change)
            changes[ready_id] = TraceChange(
                ready_id, first.old_state, change.new_state, change.kernel_count, change.bytes, change.error
            )
    return PassResult(listed=scan.listed, changes=list(changes.values()), errors=errors)


def scan_bucket(
    *,
    trace_id: str | None = None,
    reparse: bool = False,
    reparse_outdated: bool = False,
    outdated_batch: int | None = None,
) -> Scan:
    """Register new runs, follow the ones in progress, and say which are ready to parse.

    Downloads nothing: it lists. `trace_id` limits the scan to that run (in any state);
    `reparse` also lists ready traces and asks for every one to be parsed again;
    `reparse_outdated` asks for the traces an older parser read (`outdated_batch` of them
    at most, the least recently updated first) to be parsed again.
    """
    scan = Scan()
    if trace_id is not None:
        candidates = [trace_id]
    else:
        states = dict(Trace.objects.values_list("id", "state"))
        candidates = [
            run_id
            for run_id in bucket.list_run_ids()
            if reparse or states.get(run_id) is None or states[run_id] in UNFINISHED_STATES
        ]
    for run_id in candidates:
        objects = bucket.list_run_objects(run_id)
        if not objects:
            continue
        scan.listed += 1
        trace, change = register_objects(run_id, objects)
        if change is not None:
            scan.changes.append(change)
        if needs_decision(trace, reparse=reparse):
            scan.to_parse.append(run_id)
    if reparse_outdated and trace_id is None:
        for run_id in outdated_trace_ids(outdated_batch):
            if run_id not in scan.to_parse:
                scan.to_parse.append(run_id)
                scan.to_reparse.add(run_id)
    return scan


def outdated_trace_ids(limit: int | None = None) -> list[str]:
    """Traces whose files an older version of the stats parser read, least recently updated first."""
    outdated = Trace.objects.filter(parser_version__lt=CURRENT_PARSER_VERSION).order_by("updated_at", "id")
    return list(outdated.values_list("id", flat=True)[:limit])


def ingest_trace(
    trace_id: str, *, reparse: bool = False, progress: Progress | None = None
) -> TraceChange | None:
    """Bring one trace up to date with its objects; None if there was nothing to do.

    Returns None at once when another process holds the trace. Raises botocore errors
    (S3 or network trouble) so that the caller can retry; a trace's own bad input marks it
    failed instead.
    """
    with trace_lock(trace_id) as acquired:
        if not acquired:
            logger.info("%s: another pass holds it, skipped", trace_id)
            return None
        objects = bucket.list_run_objects(trace_id)
        if not objects:
            return None
        trace, registered = register_objects(trace_id, objects)
        old_state = registered.old_state if registered else trace.state
        if not needs_decision(trace, reparse=reparse):
            return registered
        try:
            decide(trace, objects, progress=progress)
        except TraceInputError as problem:
            fail(trace, str(problem), fingerprint(objects))
        except (DataError, IntegrityError) as problem:
            # Input the parser let through but the database refuses: still the upload's fault.
            logger.exception("%s: the database refused the trace's data", trace_id)
            fail(trace, f"the database refused this trace's data: {problem}".strip(), fingerprint(objects))
        if registered is None and trace.state == old_state and not reparse:
            return None
        return TraceChange(trace_id, old_state, trace.state, trace.kernel_count, trace.bytes, trace.error)


# --- Registration (listing only) ------------------------------------------------------------


def fingerprint(objects: list[S3Object]) -> str:
    return files_fingerprint(inventory(objects))


def inventory(objects: list[S3Object]) -> list[dict]:
    return [{"key": obj.key, "bytes": obj.size, "etag": obj.etag} for obj in objects]


def register_objects(run_id: str, objects: list[S3Object]) -> tuple[Trace, TraceChange | None]:
    """Create or update the trace's listing; writes only when the listing changed."""
    files = inventory(objects)
    size = sum(obj.size for obj in objects)
    now = timezone.now()
    trace, created = Trace.objects.get_or_create(
        pk=run_id,
        defaults={
            "state": TraceState.UPLOADING,
            "files": files,
            "bytes": size,
            "files_changed_at": now,
            "created_at": now,
            "sample": run_id.startswith("sample__"),
        },
    )
    if created:
        return trace, TraceChange(run_id, None, trace.state, 0, size)
    if trace.files == files:
        return trace, None
    trace.files, trace.bytes, trace.files_changed_at = files, size, now
    trace.save(update_fields=["files", "bytes", "files_changed_at"])
    return trace, TraceChange(run_id, trace.state, trace.state, trace.kernel_count, size, trace.error)


def needs_decision(trace: Trace, *, reparse: bool = False) -> bool:
    """Whether the trace's objects must be looked at (downloaded) again.

    Nothing is decided before metadata.json lands, even when asked to reparse.
    """
    metadata_key = bucket.run_prefix(trace.id) + METADATA_NAME
    if not any(item["key"] == metadata_key for item in trace.files):
        return False
    if reparse:
        return True
    if trace.state == TraceState.PARSING:
        return True  # its pass died mid-way: nobody holds it any more once we get the lock
    if trace.parsed_fingerprint != trace.files_fingerprint():
        return True
    return trace.state == TraceState.UPLOADING and upload_timed_out(trace)


def upload_timed_out(trace: Trace) -> bool:
    timeout = timedelta(seconds=settings.CASCADE_UPLOAD_TIMEOUT)
    return trace.files_changed_at is not None and timezone.now() - trace.files_changed_at >= timeout


# --- Decision (downloads) ------------------------------------------------------------------


def decide(trace: Trace, objects: list[S3Object], *, progress: Progress | None) -> None:
    by_name = {obj.name: obj for obj in objects}
    current = fingerprint(objects)
    metadata = read_metadata(by_name[METADATA_NAME])
    missing = missing_listed_files(listed_files(metadata), inventory(objects), bucket.run_prefix(trace.id))
    if missing:
        if upload_timed_out(trace):
            shown = ", ".join(missing[:MISSING_KEYS_SHOWN])
            more = (
                f" and {len(missing) - MISSING_KEYS_SHOWN} more" if len(missing) > MISSING_KEYS_SHOWN else ""
            )
            raise TraceInputError(
                f"upload incomplete: {len(missing)} file(s) listed in metadata.json did not arrive within "
                f"CASCADE_UPLOAD_TIMEOUT ({settings.CASCADE_UPLOAD_TIMEOUT} s) of the last new file: {shown}{more}"
            )
        wait_for_files(trace, metadata, current)
        logger.info(
            "%s: waiting for %d file(s) listed in metadata.json: %s",
            trace.id,
            len(missing),
            ", ".join(missing[:MISSING_KEYS_SHOWN]),
        )
        return
    apply_metadata(trace, metadata, objects)
    trace.parser_version = None  # until the stats files are read again
    status = metadata.get("status")
    if status != "ok":
        error = (
            'metadata.json has no "status" (expected "ok")'
            if status is None
            else f"profiler reported status '{status}' in metadata.json"
        )
        fail(trace, error, current)
        return
    parse_into(trace, objects, current, progress=progress)


def read_metadata(obj: S3Object) -> dict:
    try:
        raw = bucket.read_object(obj.key, METADATA_MAX_BYTES)
    except ValueError as too_large:
        raise TraceInputError(f"metadata.json: {too_large}") from None
    try:
        # The standard library keeps integers of any size, as written; NaN is not JSON.
        metadata = json.loads(raw, parse_constant=reject_constant)
    except ValueError as invalid:
        raise TraceInputError(f"metadata.json is not valid JSON: {invalid}") from None
    if not isinstance(metadata, dict):
        raise TraceInputError(f"metadata.json must be a JSON object, not {type(metadata).__name__}")
    for key in METADATA_STRINGS:
        if metadata.get(key) is not None and not isinstance(metadata[key], str):
            raise TraceInputError(
                f"metadata.json: {key!r} must be a string, not {type(metadata[key]).__name__}"
            )
    layers = metadata.get("layers")
    if layers is not None and not (isinstance(layers, list) and all(isinstance(x, str) for x in layers)):
        raise TraceInputError("metadata.json: 'layers' must be a list of strings")
    return metadata


def reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


def listed_files(metadata: dict) -> list[dict]:
    """metadata.json's `files`, checked: the keys the upload is complete with ([] if none)."""
    listed = metadata.get("files")
    if listed is None:
        return []
    if not isinstance(listed, list) or not all(well_formed_listing(item) for item in listed):
        raise TraceInputError('metadata.json: "files" must be a list of {"key": string, "bytes": integer}')
    return listed


def well_formed_listing(item) -> bool:
    return (
        isinstance(item, dict)
        and isinstance(item.get("key"), str)
        and isinstance(item.get("bytes"), int)
        and not isinstance(item.get("bytes"), bool)
    )


def wait_for_files(trace: Trace, metadata: dict, current: str) -> None:
    """Metadata is there but listed files are not: stay uploading until they land or time out."""
    trace.state = TraceState.UPLOADING
    trace.error = None
    trace.metadata = metadata
    trace.parsed_fingerprint = current
    trace.save(update_fields=["state", "error", "metadata_json", "parsed_fingerprint"])


def apply_metadata(trace: Trace, metadata: dict, objects: list[S3Object]) -> None:
    names = {obj.name for obj in objects}
    trace.metadata = metadata
    trace.model = metadata.get("model")
    trace.layers = metadata.get("layers") or []
    trace.source_gpu = metadata.get("source_gpu")
    trace.trace_gpu_arch = metadata.get("trace_gpu_arch")
    trace.suggested_sim_config = metadata.get("suggested_sim_config")
    trace.has_step_timeline = TIMELINE_NAME in names
    trace.has_real_timing = TIMING_NAME in names
    trace.sample = trace.id.startswith("sample__")


def derive_arch_and_config(trace: Trace) -> None:
    """Fill the one of arch and simulator config that metadata.json left out."""
    if trace.trace_gpu_arch and not trace.suggested_sim_config:
        trace.suggested_sim_config = SIM_CONFIG_FOR_ARCH.get(trace.trace_gpu_arch)
    elif trace.suggested_sim_config and not trace.trace_gpu_arch:
        match = SIM_CONFIG_ARCH.match(trace.suggested_sim_config)
        if match:
            trace.trace_gpu_arch = f"sm_{match.group(1)}{match.group(2) or '0'}"


def fail(trace: Trace, error: str, current: str) -> None:
    with transaction.atomic():
        Kernel.objects.filter(trace_id=trace.id)._raw_delete(using=Kernel.objects.db)
        trace.state = TraceState.FAILED
        trace.error = error
        trace.kernel_count = 0
        trace.kernels_without_totals = 0
        trace.parsed_fingerprint = current
        trace.save(update_fields=DECISION_FIELDS)
    logger.info("%s: failed: %s", trace.id, error)


# --- Parsing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatsSource:
    stats: S3Object
    kernelslist: S3Object | None
    ctx: str | None


def stats_sources(objects: list[S3Object]) -> list[StatsSource]:
    """The stats files under traces/, each with its context's kernelslist, in ctx order."""
    by_name = {obj.name: obj for obj in objects}
    sources = []
    for obj in objects:
        folder, _, filename = obj.name.rpartition("/")
        if folder != "traces":
            continue
        match = stats.STATS_CTX_NAME.match(filename)
        if match:
            ctx = match.group(1)
            if not stats.CTX.match(ctx):
                raise TraceInputError(
                    f"{obj.name}: {ctx[:80]!r} is not a CUDA context (0x and at most 62 hex digits)"
                )
            sources.append(StatsSource(obj, by_name.get(f"traces/kernelslist_ctx_{ctx}"), ctx))
        elif filename == "stats.csv":
            kernelslist = by_name.get("traces/kernelslist") or by_name.get("traces/kernelslist.g")
            sources.append(StatsSource(obj, kernelslist, None))
    return sorted(sources, key=lambda source: (source.ctx is None, source.ctx or ""))


def parse_into(trace: Trace, objects: list[S3Object], current: str, *, progress: Progress | None) -> None:
    sources = stats_sources(objects)
    if not sources:
        raise TraceInputError(
            "no stats file in the upload: expected traces/stats_ctx_0x<ctx> or traces/stats.csv"
        )
    for source in sources:
        for obj in (source.stats, source.kernelslist):
            if obj is not None and obj.size > settings.CASCADE_MAX_STATS_BYTES:
                raise TraceInputError(
                    f"{obj.name}: {obj.size} bytes is far too large for a tracer stats file "
                    f"(CASCADE_MAX_STATS_BYTES is {settings.CASCADE_MAX_STATS_BYTES})"
                )
    # Committed on its own, so that the API shows the parse under way. A failure from here on
    # is this parser's reading of the files: --reparse-outdated retries it after an upgrade.
    trace.state = TraceState.PARSING
    trace.error = None
    trace.parser_version = CURRENT_PARSER_VERSION
    trace.save(update_fields=["state", "error", "parser_version"])
    extra_columns = header_extra_columns(sources)
    tally = Tally()
    with transaction.atomic():
        count = kernels_replace(trace.id, kernel_rows(trace.id, sources, extra_columns, progress, tally))
        trace.state = TraceState.READY
        trace.kernel_count = count
        trace.kernels_without_totals = tally.without_totals
        trace.parsed_fingerprint = current
        derive_arch_and_config(trace)
        trace.save(update_fields=DECISION_FIELDS)
    logger.info("%s: ready, %d kernels", trace.id, count)


def header_extra_columns(sources: list[StatsSource]) -> int:
    """The run's extra stats columns, from the one file that has the header.

    The tracer writes the header into the first context's file only, so files of later
    contexts take its width. Reads only the first bytes of each file.
    """
    if len(sources) == 1:
        return 0  # the file's own header, if any, is read while parsing
    for source in sources:
        if source.stats.size == 0:
            continue  # a context without launches; and S3 refuses a ranged GET of 0 bytes
        first_line = bucket.read_head(source.stats.key, HEADER_PEEK_BYTES).split(b"\n", 1)[0]
        extra = stats.first_line_extra_columns(first_line)
        if extra is not None:
            return extra
    return 0


@dataclass
class Tally:
    without_totals: int = 0


def kernel_rows(
    trace_id: str, sources: list[StatsSource], extra_columns: int, progress: Progress | None, tally: Tally
) -> Iterator[tuple]:
    """Rows for `kernels_replace` (KERNEL_COLUMNS order), streamed file after file.

    Bad input raises TraceInputError; `tally` counts the launches without totals.
    """
    count = 0
    for source in sources:
        traced = set()
        if source.kernelslist is not None:
            try:
                traced = stats.parse_kernelslist_lines(bucket.iter_object_lines(source.kernelslist.key))
            except stats.StatsError as problem:
                raise TraceInputError(f"{source.kernelslist.name}: {problem}") from None
        lines = bucket.iter_object_lines(source.stats.key)
        try:
            for row in stats.parse_stats_lines(lines, extra_columns=extra_columns):
                *launch, device, stream = row
                yield (
                    source.ctx,
                    *launch,
                    row.kernel_id in traced,
                    NO_DEVICE if device is None else device,
                    stream,
                )
                tally.without_totals += row.total_insts is None
                count += 1
                if progress is not None and count % PROGRESS_EVERY == 0:
                    progress(f"{trace_id}: {count} kernels read ({source.stats.name})")
        except stats.StatsError as problem:
            raise TraceInputError(f"{source.stats.name}: {problem}") from None
