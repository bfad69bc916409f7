"""A profiler run: `Trace` (the folder `<prefix><id>/` in the bucket), its `Step`s, and
`DeletedTrace`, the folder of a trace an operator deleted, left alone until its files change."""

import hashlib
import json

from django.conf import settings
from django.db import models
from django.db.models import Value
from django.utils import timezone

from traces.shapes import TRACE_DETAIL


class TraceState(models.TextChoices):
    UPLOADING = "uploading", "uploading"
    PARSING = "parsing", "parsing"
    READY = "ready", "ready"
    FAILED = "failed", "failed"


# The version of ingest/stats.py's reading of the tracer's files, recorded on each trace it
# reads: bumped whenever the parser reads some input differently, so that the traces an older
# version read can be found (admin filter) and read again (`ingest_traces --reparse-outdated`).
# 1: until 2026-11 (graph-captured launches merged, killed runs refused); 2: every launch;
# 3: each launch with its step (timeline.json) and measured time (timing.csv); 4: values
# past the tracer's unsigned 32 bits refused (they were stored as read); 5: kernel id 0 and
# kernelslist ids past 2^63 - 1 refused, Nsight exports with kernels left over not used;
# 6: a file cut mid-line keeps its complete rows (totals without their newline not trusted),
# `traced` only where the run holds the trace file, every kernel-list layout read (docs/decisions/0007).
CURRENT_PARSER_VERSION = 6


class Trace(models.Model):
    """A profiler run: the folder `<prefix><id>/` in the bucket.

    The public fields are the API's TraceSummary, described once in `traces.shapes` (a field's
    `help_text` is its declaration's doc). The `files*` and `parsed_fingerprint` fields are
    ingestion's bookkeeping: what the bucket held when Cascade last looked, so that a poll pass
    can tell "nothing new" without downloading anything.
    """

    # S3 keys are at most 1,024 bytes, so no run folder name is longer.
    id = models.CharField(primary_key=True, max_length=1024)
    # What kernel rows refer to (4 bytes, not the run's name): set when the trace is created.
    key = models.IntegerField(unique=True, editable=False)
    state = models.CharField(max_length=16, choices=TraceState.choices, default=TraceState.UPLOADING)
    error = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    model = models.TextField(null=True, blank=True)
    layers = models.JSONField(default=list, blank=True)
    source_gpu = models.TextField(null=True, blank=True)
    trace_gpu_arch = models.TextField(null=True, blank=True)
    suggested_sim_config = models.TextField(null=True, blank=True)
    kernel_count = models.BigIntegerField(default=0)
    bytes = models.BigIntegerField(default=0, help_text=TRACE_DETAIL.field("bytes").doc)
    has_real_timing = models.BooleanField(default=False)
    has_step_timeline = models.BooleanField(default=False)
    sample = models.BooleanField(default=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="owned_traces",
        help_text="Who pushed the run through the API (ingest.owners); empty for a run put into the bucket directly.",
    )
    parser_version = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="The version of the stats parser that read this trace's files (None: never parsed).",
    )
    timing_error = models.TextField(
        null=True,
        blank=True,
        help_text="Why timeline.json or timing.csv was not used (the kernels are served without it).",
    )
    kernels_without_totals = models.BigIntegerField(
        default=0,
        help_text="Launches whose totals the tracer never wrote: captured into a CUDA graph, or a killed run's last.",
    )
    # Defaults in the database too, as files_undecided's: rows inserted by SQL (the benches' seeders).
    traced_launches = models.BigIntegerField(
        default=0,
        db_default=0,
        help_text=TRACE_DETAIL.field("traced_launches").doc,
    )
    warnings = models.JSONField(
        default=list,
        db_default=Value([], output_field=models.JSONField()),
        blank=True,
        help_text=TRACE_DETAIL.field("warnings").doc,
    )
    # Kept as text, not jsonb, so that the API returns metadata.json's keys in their order.
    metadata_json = models.TextField(null=True, blank=True, help_text="metadata.json, parsed and re-encoded.")

    files = models.JSONField(
        default=list, blank=True, help_text="The run's objects as last listed: key, bytes, etag."
    )
    files_changed_at = models.DateTimeField(
        null=True, blank=True, help_text="When a new or changed object was last seen."
    )
    parsed_fingerprint = models.CharField(
        max_length=64, blank=True, default="", help_text="The objects the last decision was made on."
    )
    waiting_for = models.JSONField(
        default=list,
        blank=True,
        help_text="Keys metadata.json lists that had not arrived at the last decision.",
    )
    recheck_after = models.DateTimeField(
        null=True, blank=True, help_text="A failed trace's listing is not looked at again before this."
    )
    recheck_seconds = models.PositiveIntegerField(
        default=0, help_text="The current wait between looks at a failed trace's unchanged listing."
    )
    parse_attempts = models.PositiveSmallIntegerField(
        default=0,
        help_text="Tries of the current files that ended in an error of ours (CASCADE_PARSE_ATTEMPTS fails it).",
    )
    # A default in the database too: rows inserted by SQL (the benches' seeders) are decided.
    files_undecided = models.BooleanField(
        default=False,
        db_default=False,
        help_text="The listing changed since the last decision on the trace: a ready trace whose "
        "re-upload is still to be parsed (a pass that met S3 or the database away leaves it so).",
    )

    class Meta:
        ordering = ["-created_at", "id"]
        indexes = [
            models.Index(fields=["-created_at", "id"], name="trace_newest_first"),
            models.Index(fields=["state"], name="trace_state"),
        ]

    def __str__(self) -> str:
        return self.id

    def save(self, *args, **kwargs):
        update_fields = kwargs.get("update_fields")
        if self.key is None:
            self.key = next_trace_key()
        self.updated_at = timezone.now()
        if update_fields is not None:
            kwargs["update_fields"] = {*update_fields, "updated_at"}
        super().save(*args, **kwargs)

    @property
    def metadata(self) -> dict | None:
        return None if self.metadata_json is None else json.loads(self.metadata_json)

    @metadata.setter
    def metadata(self, value: dict | None) -> None:
        self.metadata_json = (
            None if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        )

    def files_fingerprint(self) -> str:
        """A digest of `files` (keys, sizes, ETags): equal digests, nothing changed in S3."""
        return files_fingerprint(self.files)


def next_trace_key() -> int:
    """A new Trace.key (`next_trace_keys`)."""
    return next_trace_keys(1)[0]


def next_trace_keys(count: int) -> list[int]:
    """`count` new Trace.keys, never one a trace had before: a deleted trace's launches left
    behind (kernel rows have no foreign key) must not reappear under a new trace.

    The sequence's next values on PostgreSQL; on SQLite, whose writers take turns, those after
    the last one handed out (the one-row table `traces_trace_key_seq`, migration 0010), or
    after the largest key if a trace was given one by hand.
    """
    from django.db import connection, transaction

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT nextval('traces_trace_key_seq') FROM generate_series(1, %s)", [count])
            return [key for (key,) in cursor.fetchall()]
        with transaction.atomic():
            cursor.execute(
                "UPDATE traces_trace_key_seq SET last = "
                "MAX(last, (SELECT COALESCE(MAX(key), 0) FROM traces_trace)) + %s",
                [count],
            )
            cursor.execute("SELECT last FROM traces_trace_key_seq")
            last = cursor.fetchone()[0]
        return list(range(last - count + 1, last + 1))


def files_fingerprint(files: list[dict]) -> str:
    digest = hashlib.sha256()
    for item in files:
        digest.update(f"{item['key']}\0{item['bytes']}\0{item['etag']}\n".encode())
    return digest.hexdigest()


class Step(models.Model):
    """One inference step of a run (timeline.json): a prefill or a decode, and its launches."""

    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="steps")
    index = models.SmallIntegerField(help_text="Its position in timeline.json; kernels refer to it.")
    name = models.CharField(max_length=200)
    phase = models.CharField(max_length=32, null=True, blank=True)
    ctx = models.CharField(max_length=64, null=True, blank=True)
    first_kernel_id = models.BigIntegerField()
    last_kernel_id = models.BigIntegerField()
    start_ns = models.BigIntegerField(null=True, blank=True)
    end_ns = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["trace", "index"]
        constraints = [models.UniqueConstraint(fields=["trace", "index"], name="step_unique_index")]

    def __str__(self) -> str:
        return self.name


class DeletedTrace(models.Model):
    """A trace an operator deleted while its folder stays in the bucket.

    The poll leaves the folder alone while its listing is the one the trace was deleted
    with, and looks at it less and less often (`recheck_after`); once its files change, the
    run is registered again as a new trace.
    """

    id = models.CharField(primary_key=True, max_length=1024)
    files_fingerprint = models.CharField(max_length=64, help_text="The listing the trace was deleted with.")
    deleted_at = models.DateTimeField(default=timezone.now)
    deleted_by = models.CharField(max_length=150, blank=True, default="")
    recheck_after = models.DateTimeField(null=True, blank=True)
    recheck_seconds = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return self.id
