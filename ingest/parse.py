"""Parsing a run into the store: its stats files, kernelslists, steps and timing, read as they
stream and handed to traces.services.trace_store_kernels in one transaction.

The stats files are read in ctx order, each with its context's kernelslist; the tracer writes
the header into the first context's file only, so the run's width is peeked first
(header_extra_columns). On PostgreSQL the common lines go the fast way (ingest.stats_fast_path:
split into fields, encoded by traces.kernel_store), the others as rows from
stats.parse_stats_lines. Steps (timeline.json) and measured durations (timing.csv, or
Nsight's) are joined on each launch; neither ever fails a trace. Every file is read through
the run's ReadAhead (ingest.read_ahead).
"""

from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from django.conf import settings

from ingest import bucket, kernelslist, stats
from ingest.bucket import S3Object
from ingest.failures import TraceInputError
from ingest.metadata import TIMELINE_NAME, TIMING_NAME
from ingest.read_ahead import ReadAhead
from ingest.stats_fast_path import LaunchText
from ingest.timing import TimingError, timeline, timing_csv
from traces import services
from traces.kernel_store import KernelWriter, LaunchBlock
from traces.models import KERNEL_COLUMNS, NO_DEVICE, Trace

Progress = Callable[[str], None]

HEADER_PEEK_BYTES = 4096


@dataclass(frozen=True)
class StatsSource:
    stats: S3Object
    # Every kernel list that may name the context's trace files (`kernelslists`).
    kernelslists: tuple[S3Object, ...]
    ctx: str | None


# The run-wide lists: the tracer's v4 `kernelslist`, the post-processor's `kernelslist.g`.
RUN_KERNELSLISTS = ("traces/kernelslist", "traces/kernelslist.g")


def stats_sources(objects: list[S3Object]) -> list[StatsSource]:
    """The stats files under traces/, each with the kernel lists of its context, in ctx order.

    A context's lists are every layout the simulator and its post-processor read:
    `kernelslist_ctx_<ctx>` (the tracer's) and `kernelslist_ctx_<ctx>.g` (post-processed),
    then the run-wide `kernelslist` and `kernelslist.g`, whose entries of other contexts are
    skipped when read (kernelslist.parse_kernelslist_lines).
    """
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
            names = (f"traces/kernelslist_ctx_{ctx}", f"traces/kernelslist_ctx_{ctx}.g", *RUN_KERNELSLISTS)
            sources.append(StatsSource(obj, tuple(by_name[n] for n in names if n in by_name), ctx))
        elif filename == "stats.csv":
            sources.append(
                StatsSource(obj, tuple(by_name[n] for n in RUN_KERNELSLISTS if n in by_name), None)
            )
    return sorted(sources, key=lambda source: (source.ctx is None, source.ctx or ""))


def parse_into(
    trace: Trace,
    objects: list[S3Object],
    current: str,
    *,
    run: dict,
    launches_expected: bool = True,
    progress: Progress | None,
    files: ReadAhead,
    warnings: list[dict] = (),
) -> None:
    """Parse the run's stats files (and steps, timing) into the trace's kernels: `parsing`, then
    `ready`; bad input raises TraceInputError. Every file is read through `files`. `warnings`:
    what the decision found already (files left out of the listing), the trace's first."""
    sources = stats_sources(objects)
    if not sources:
        raise TraceInputError(
            "no stats file in the upload: expected traces/stats_ctx_0x<ctx> or traces/stats.csv"
        )
    for source in sources:
        for obj in (source.stats, *source.kernelslists):
            if obj.size > settings.CASCADE_MAX_STATS_BYTES:
                raise TraceInputError(
                    f"{obj.name}: {obj.size} bytes is far too large for a tracer stats file "
                    f"(CASCADE_MAX_STATS_BYTES is {settings.CASCADE_MAX_STATS_BYTES})"
                )
    services.trace_start_parsing(trace, run=run)
    extra_columns = header_extra_columns(sources, files)
    extras = services.RunExtras()
    step_index, durations = read_steps_and_timing(objects, extras, files)

    def launches(writer: KernelWriter) -> Iterator:
        launch_text = None
        # Nsight's durations are matched launch by launch, in order: those runs are read row
        # by row; steps, and Cascade's timing.csv, are lookups by kernel id.
        if writer.copies and (durations is None or durations.by_kernel_id):
            step_of = None if step_index is None else step_index.step_of
            duration_of = None if durations is None else durations.duration_of

            def launch_text(source: StatsSource, traced: kernelslist.TracedIds) -> LaunchText:
                return LaunchText(source.ctx, writer, traced, step_of, duration_of)

        notes = RunNotes(list(warnings))
        rows = kernel_rows(
            trace.id, sources, extra_columns, progress, files, launch_text, listed=objects, notes=notes
        )
        rows = noted(rows, notes, extras)
        rows = with_steps_and_durations(rows, step_index, durations, extras)
        return at_least_one_launch(rows) if launches_expected else rows

    services.trace_store_kernels(trace, launches, fingerprint=current, extras=extras)


def noted(rows: Iterator, notes: "RunNotes", extras: services.RunExtras) -> Iterator:
    """`rows`, then what the parse noted handed to the store with the steps and timing."""
    yield from rows
    extras.warnings, extras.traced_launches = notes.warnings, notes.traced_launches


def read_steps_and_timing(
    objects: list[S3Object], extras, files: ReadAhead
) -> tuple[timeline.StepIndex | None, object | None]:
    """timeline.json's steps and timing.csv's durations, if the run has them and they can be read.

    Neither ever fails the trace: what could not be used is said in `extras.timing_error`.
    """
    by_name = {obj.name: obj for obj in objects}
    problems = []
    step_index = durations = None
    if TIMELINE_NAME in by_name:
        try:
            obj = by_name[TIMELINE_NAME]
            if obj.size > settings.CASCADE_METADATA_MAX_BYTES * 8:
                raise bucket.too_large(obj.size, settings.CASCADE_METADATA_MAX_BYTES * 8)
            data = files.body(obj)
            steps = timeline.parse_timeline(
                bucket.iter_object_chunks(obj.key, etag=obj.etag) if data is None else data
            )
            extras.steps = steps
            step_index = timeline.StepIndex(steps)
        except (TimingError, ValueError) as problem:
            problems.append(str(problem))
    if TIMING_NAME in by_name:
        obj = by_name[TIMING_NAME]
        try:
            if obj.size > settings.CASCADE_MAX_STATS_BYTES:
                raise TimingError(f"timing.csv: {obj.size} bytes, more than CASCADE_MAX_STATS_BYTES")
            durations = timing_csv.read_timing(files.read_lines(obj))
            extras.timing_used = True
        except (TimingError, bucket.LineTooLong) as problem:
            problems.append(str(problem))
    extras.timing_error = "; ".join(problems) or None
    return step_index, durations


GRID = slice(KERNEL_COLUMNS.index("grid_x"), KERNEL_COLUMNS.index("grid_z") + 1)
BLOCK = slice(KERNEL_COLUMNS.index("block_x"), KERNEL_COLUMNS.index("block_z") + 1)


def with_steps_and_durations(rows: Iterator[tuple], step_index, durations, extras) -> Iterator[tuple]:
    """Each row with its step and measured duration appended (KERNEL_COLUMNS' last two).

    A timing that stops matching the stats drops out from there on, with the reason; the
    durations already given are cleared when the kernels are stored.
    """
    for row in rows:
        if type(row) is LaunchBlock:  # LaunchText wrote the steps and durations
            yield row
            continue
        ctx, kernel_id = row[0], row[1]
        step = step_index.step_of(ctx, kernel_id) if step_index is not None else None
        duration = None
        if durations is not None:
            try:
                duration = durations.duration_of(ctx, kernel_id, row[GRID], row[BLOCK])
            except TimingError as problem:
                extras.timing_error = "; ".join(filter(None, (extras.timing_error, str(problem))))
                durations = None
        yield (*row, step, duration)
    # Every launch matched: Nsight kernels left over drop the timing too (ingest.timing.nsys).
    if durations is not None and (left_over := durations.unmatched()) is not None:
        extras.timing_error = "; ".join(filter(None, (extras.timing_error, str(left_over))))


def at_least_one_launch(rows: Iterator[tuple]) -> Iterator[tuple]:
    """`rows`, raising at the end if there were none: a blank stats file is not a run."""
    empty = True
    for row in rows:
        empty = False
        yield row
    if empty:
        raise TraceInputError(
            "no kernel launches in the stats files; a run that launched none says so with "
            '"kernel_count": 0 in metadata.json'
        )


def header_extra_columns(sources: list[StatsSource], files: ReadAhead) -> int:
    """The run's extra stats columns, from the one file that has the header.

    The tracer writes the header into the first context's file only, so files of later
    contexts take its width. Reads the first file's first line (ReadAhead.first_line: its
    stream kept for the parse when it comes from S3), and only where that has no header, the
    others' first bytes, together.
    """
    if len(sources) == 1:
        return 0  # the file's own header, if any, is read while parsing
    # A context without launches has no header; and S3 refuses a ranged GET of 0 bytes.
    first, *others = [source.stats for source in sources if source.stats.size] or [None]
    if first is None:
        return 0
    extra = stats.first_line_extra_columns(files.first_line(first, HEADER_PEEK_BYTES).split(b"\n", 1)[0])
    if extra is not None:
        return extra
    # Not where the tracer writes it: the other files' starts, read together on the S3 threads.
    for _, head in bucket.overlapped(lambda obj: files.head(obj, HEADER_PEEK_BYTES), others):
        extra = stats.first_line_extra_columns(head.result().split(b"\n", 1)[0])
        if extra is not None:
            return extra
    return 0


def kernel_rows(
    trace_id: str,
    sources: list[StatsSource],
    extra_columns: int,
    progress: Progress | None,
    files: ReadAhead,
    launch_text: Callable[[StatsSource, kernelslist.TracedIds], LaunchText] | None = None,
    *,
    listed: list[S3Object] | None = None,
    notes: "RunNotes | None" = None,
) -> Iterator:
    """Rows in KERNEL_COLUMNS order, streamed file after file; bad input raises TraceInputError.

    With `launch_text` (a file's LaunchText, from its source and traced kernel ids), the
    common lines come as LaunchBlocks of COPY text instead, steps and durations included,
    among the rows of the others.

    A launch is `traced` when a kernel list of its context names it and the run (`listed`: its
    objects) holds the file named. `notes` receives the files' warnings (a file cut short, a
    killed run's unfinished launches) and the count of traced launches, as they stream.
    """
    count = 0
    every = settings.CASCADE_PROGRESS_EVERY
    report_at = every
    notes = RunNotes() if notes is None else notes
    held = held_files(sources, listed)
    for source in sources:
        traced = kernelslist.TracedIds()
        for kernel_list in source.kernelslists:
            file_notes: list[stats.StatsNote] = []
            try:
                kernelslist.parse_kernelslist_lines(
                    files.read_lines(kernel_list),
                    held=held,
                    ctx=source.ctx,
                    notes=file_notes,
                    traced=traced,
                )
            except (stats.StatsError, bucket.LineTooLong) as problem:
                raise TraceInputError(f"{kernel_list.name}: {problem}") from None
            notes.add(kernel_list.name, file_notes)
        text = None if launch_text is None else launch_text(source, traced)
        lines = files.read_lines(source.stats, blank_runs=True)
        file_notes = []
        try:
            for row in stats.parse_stats_lines(
                lines, extra_columns=extra_columns, launch_text=text, notes=file_notes
            ):
                if type(row) is LaunchBlock:
                    yield row
                    count += row.launches
                else:
                    *launch, device, stream = row
                    is_traced = row.kernel_id in traced
                    notes.traced_launches += is_traced
                    yield (
                        source.ctx,
                        *launch,
                        is_traced,
                        NO_DEVICE if device is None else device,
                        stream,
                    )
                    count += 1
                if progress is not None and count >= report_at:
                    progress(f"{trace_id}: {count} kernels read ({source.stats.name})")
                    report_at = count + every - count % every
        except (stats.StatsError, bucket.LineTooLong) as problem:
            raise TraceInputError(f"{source.stats.name}: {problem}") from None
        if text is not None:
            notes.traced_launches += text.traced_launches
        notes.add(source.stats.name, file_notes)


@dataclass
class RunNotes:
    """What a parse tells besides the launches: the warnings (`{file, offset, what}`, each once,
    in the order met) and how many launches have their instruction trace file in the run."""

    warnings: list[dict] = field(default_factory=list)
    traced_launches: int = 0

    def add(self, file: str, notes: list[stats.StatsNote]) -> None:
        for offset, what in notes:
            warning = {"file": file, "offset": offset, "what": what}
            if warning not in self.warnings:  # a run-wide kernel list is read for each context
                self.warnings.append(warning)


def held_files(sources: list[StatsSource], listed: list[S3Object] | None) -> Callable[[str], bool]:
    """Whether the run holds a file a kernel list names (a name in traces/, beside the lists).

    Looked up in the listing's keys, sorted (S3 lists them so): a run that traced a million
    kernels lists a million trace files, and a set of their names would cost as much again."""
    if listed is None:
        listed = [obj for source in sources for obj in (source.stats, *source.kernelslists)]
    keys = [obj.key for obj in listed]
    if any(a > b for a, b in zip(keys, keys[1:], strict=False)):
        keys.sort()
    stats = sources[0].stats if sources else None
    folder = "" if stats is None else stats.key[: len(stats.key) - len(stats.name)] + "traces/"

    def held(name: str) -> bool:
        key = folder + name
        at = bisect_left(keys, key)
        return at < len(keys) and keys[at] == key

    return held
