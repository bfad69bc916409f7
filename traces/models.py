"""The registry's data: one Trace per profiler run, one Kernel per kernel launch."""

import hashlib
import json
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone


class TraceState(models.TextChoices):
    UPLOADING = "uploading", "uploading"
    PARSING = "parsing", "parsing"
    READY = "ready", "ready"
    FAILED = "failed", "failed"


# The version of ingest/stats.py's reading of the tracer's files, recorded on each trace it
# reads: bumped whenever the parser reads some input differently, so that the traces an older
# version read can be found (admin filter) and read again (`ingest_traces --reparse-outdated`).
# 1: until 2026-11 (graph-captured launches merged, killed runs refused); 2: every launch;
# 3: each launch with its step (timeline.json) and measured time (timing.csv).
CURRENT_PARSER_VERSION = 3


class Trace(models.Model):
    """A profiler run: the folder `<prefix><id>/` in the bucket.

    The public fields are the API's TraceSummary. The `files*` and `parsed_fingerprint`
    fields are ingestion's bookkeeping: what the bucket held when Cascade last looked, so
    that a poll pass can tell "nothing new" without downloading anything.
    """

    # S3 keys are at most 1,024 bytes, so no run folder name is longer.
    id = models.CharField(primary_key=True, max_length=1024)
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
    bytes = models.BigIntegerField(default=0)
    has_real_timing = models.BooleanField(default=False)
    has_step_timeline = models.BooleanField(default=False)
    sample = models.BooleanField(default=False)
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


def files_fingerprint(files: list[dict]) -> str:
    digest = hashlib.sha256()
    for item in files:
        digest.update(f"{item['key']}\0{item['bytes']}\0{item['etag']}\n".encode())
    return digest.hexdigest()


class Kernel(models.Model):
    """One kernel launch, as one row of a tracer `stats_ctx_*` (or legacy `stats.csv`) file."""

    # No index of its own: kernel_unique_launch starts with trace_id and serves its lookups.
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="kernels", db_index=False)
    ctx = models.CharField(max_length=64, null=True, blank=True)
    kernel_id = models.BigIntegerField()
    name = models.TextField()
    trace_file = models.TextField()
    grid_x = models.BigIntegerField()
    grid_y = models.BigIntegerField()
    grid_z = models.BigIntegerField()
    block_x = models.BigIntegerField()
    block_y = models.BigIntegerField()
    block_z = models.BigIntegerField()
    blocks = models.BigIntegerField()
    threads = models.BigIntegerField()
    total_insts = models.BigIntegerField(null=True, blank=True)
    total_reported_insts = models.BigIntegerField(null=True, blank=True)
    traced = models.BooleanField(default=False)
    # The device-id fork of the tracer writes every device into one file, kernel ids
    # restarting per device; the distributed fork names the GPU in the trace file. NO_DEVICE
    # (not NULL) for every other tracer, so that the unique index below holds for all.
    device = models.IntegerField(default=-1, help_text="The fork's device id; -1: the tracer wrote none.")
    stream = models.BigIntegerField(null=True, blank=True, help_text="The device-id fork's stream id.")
    # The launch's step (Step.index of its trace; timeline.json) and measured time (timing.csv).
    step = models.SmallIntegerField(null=True, blank=True)
    duration_ns = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["trace", "ctx", "device", "kernel_id"]
        constraints = [
            # Also the index that serves the API's (ctx, kernel_id) order.
            models.UniqueConstraint(
                fields=["trace", "ctx", "device", "kernel_id"], name="kernel_unique_launch"
            ),
            # Legacy single-context files have no ctx, and NULLs are distinct in a unique
            # index: one more, partial, for them (portable, unlike nulls_distinct=False).
            models.UniqueConstraint(
                fields=["trace", "device", "kernel_id"],
                condition=models.Q(ctx__isnull=True),
                name="kernel_unique_legacy_launch",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.ctx or '-'}/{self.kernel_id} {self.name}"


# A kernel's columns in API order (grid and block unfolded): what the API reads and
# what ingestion loads, in one order.
KERNEL_COLUMNS = (
    "ctx",
    "kernel_id",
    "name",
    "trace_file",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "blocks",
    "threads",
    "total_insts",
    "total_reported_insts",
    "traced",
    "device",
    "stream",
    "step",
    "duration_ns",
)
# The API's order of a trace's launches: the unique index's.
KERNEL_ORDER = ("ctx", "device", "kernel_id")
NO_DEVICE = -1


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


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


TOKEN_PREFIX = "cas_"  # so that secret scanners can spot a leaked Cascade token


class ApiToken(models.Model):
    """A Bearer token. Only its SHA-256 is stored: a leaked database leaks no token.

    Tokens read `cas_<43 characters>`; `prefix` keeps the first twelve, enough to tell
    tokens apart in a list without revealing them.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=150, default="", help_text="What the token is for; revoke_token NAME.")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=16, editable=False, help_text="The token's first characters.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="Written at most once a minute."
    )
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Refused from then on; empty: never.")
    rate = models.CharField(
        max_length=32,
        blank=True,
        default="",
        help_text='Requests this token may make, like "100/minute"; empty: CASCADE_API_RATE.',
    )

    class Meta:
        verbose_name = "API token"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name or self.user} ({self.prefix}…)"

    @classmethod
    def issue(cls, user, *, name: str = "", expires_at=None, rate: str = "") -> tuple["ApiToken", str]:
        """Create a token for `user`; the plain token is returned once and never stored."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        record = cls.objects.create(
            user=user,
            name=name or user.get_username(),
            digest=token_digest(token),
            prefix=token[:12],
            expires_at=expires_at,
            rate=rate,
        )
        return record, token

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()
