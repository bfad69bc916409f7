"""The registry's data: one Trace per profiler run, one Kernel per kernel launch.

One module of over 500 lines because it is the schema: Django's migrations, the app registry
and every `from traces.models import ...` name these models here, and a split would move
their import path without shortening what a reader of the schema must read."""

import hashlib
import json
import secrets

from django.conf import settings
from django.db import models
from django.db.models import Value
from django.db.models.signals import pre_delete
from django.dispatch import receiver
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


class UnsignedIntegerField(models.IntegerField):
    """0 to 2**32 - 1 in four bytes: PostgreSQL's unsigned `oid`, SQLite's integer.

    The tracer prints #blocks, #threads and the totals as unsigned 32-bit values; `integer`
    would need a conversion on every read and write. `oid` has no SUM: cast to bigint first
    (`analysis.as_bigint`).
    """

    description = "An unsigned 32-bit integer"

    def db_type(self, connection):
        return "oid" if connection.vendor == "postgresql" else "integer"

    @property
    def validators(self):
        from django.core.validators import MaxValueValidator, MinValueValidator

        return [MinValueValidator(0), MaxValueValidator(UINT32_MAX)]


UINT32_MAX = 2**32 - 1


class TraceKeyForeignKey(models.ForeignKey):
    """A foreign key to Trace.key, the four-byte key kernel rows repeat.

    Its attribute (and column) is `trace_key`, not `trace_id`: in Cascade `trace_id` is the
    run's name, the API's `{id}` (Kernel's default manager annotates it).
    """

    def get_attname(self):
        return f"{self.name}_key"


class KernelName(models.Model):
    """A kernel's name, stored once: launches and traces repeat a few hundred names.

    Names can be several kilobytes (demangled templates), too long for a btree entry: the
    unique key is their SHA-256. The demangled text is stored with the name when it is first
    written (`traces/demangle.py`, within a budget per trace), so that reads never demangle.
    """

    id = models.AutoField(primary_key=True)
    digest = models.BinaryField(max_length=32, unique=True)
    name = models.TextField()
    demangled = models.TextField(
        null=True,
        blank=True,
        help_text="The name as a page shows it: demangled (cut past 16,384 characters), or as it is. "
        "Null: stored before names were demangled at ingest (a read demangles it within a budget).",
    )
    demangle_limited = models.BooleanField(
        default=False,
        db_default=False,
        help_text="The demangler's limit or the trace's budget ran out first: kept mangled.",
    )

    def __str__(self) -> str:
        return self.name


def name_digest(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


class KernelContext(models.Model):
    """A (CUDA context, device) of a trace, numbered within the trace in (ctx, device) order.

    Kernel rows hold the number (`Kernel.context`), so that the ctx string is stored once and
    the primary key (trace, context, kernel_id) is the API's launch order. The trace file
    names of its launches are `kernel-<kernel_id><trace_file_suffix>` (v4 `.trace`, v5
    `-ctx_0x<ctx>.trace.xz`, the distributed fork `_<gpu>.trace`); a launch whose file does not
    follow stores its own. NULL suffix: the first launch followed no scheme.
    """

    trace = TraceKeyForeignKey(
        Trace, to_field="key", on_delete=models.CASCADE, related_name="kernel_contexts", db_index=False
    )
    index = models.SmallIntegerField()
    ctx = models.CharField(max_length=64, null=True, blank=True)
    device = models.IntegerField(default=-1)
    trace_file_suffix = models.TextField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["trace", "index"], name="kernelcontext_unique_index"),
        ]

    def __str__(self) -> str:
        return f"{self.ctx or '-'} device {self.device}"


class KernelManager(models.Manager):
    """Kernels with the launch's fields as before the storage was normalised (docs/decisions/0001):
    `trace_id` (the run's name), `ctx`, `device`, `name` and `trace_file`, annotated from the
    trace, context and name tables. For reads that want them; `Kernel.stored` has none."""

    def get_queryset(self):
        return (
            super()
            .get_queryset()
            .annotate(
                trace_id=models.F("trace__id"),
                ctx=models.F("launch_context__ctx"),
                device=models.F("launch_context__device"),
                name=models.F("kernel_name__name"),
                trace_file=trace_file_expression(),
            )
        )


def trace_file_expression():
    from django.db.models.functions import Cast, Coalesce, Concat

    return Coalesce(
        "odd_trace_file",
        Concat(
            models.Value("kernel-"),
            Cast("kernel_id", models.TextField()),
            "launch_context__trace_file_suffix",
            output_field=models.TextField(),
        ),
        output_field=models.TextField(),
    )


class Kernel(models.Model):
    """One kernel launch, as one row of a tracer `stats_ctx_*` (or legacy `stats.csv`) file.

    About 140 bytes a launch with its index, where the first schema took about 380
    (docs/decisions/0001; tests/traces/test_kernel_storage.py measures it): the trace is a four-byte key, the
    ctx and device a two-byte number into the trace's KernelContext rows, the name a
    four-byte key into KernelName, the trace file derived from the context's scheme; the
    tracer's unsigned 32-bit values take four bytes each. Columns are declared widest first,
    so that PostgreSQL pads none of them. The primary key (trace, context, kernel_id) is the
    only index, and the API's order.
    """

    pk = models.CompositePrimaryKey("trace", "context", "kernel_id")
    kernel_id = models.BigIntegerField()
    duration_ns = models.BigIntegerField(null=True, blank=True)
    stream = models.BigIntegerField(null=True, blank=True, help_text="The device-id fork's stream id.")
    # No database constraints on the trace and the name: PostgreSQL checks a foreign key with
    # a trigger per row, which more than doubled a COPY's time (docs/performance.md).
    # Launches are written by KernelWriter alone, inside the
    # transaction that holds their trace. Deleting a trace leaves them to `kernels_purge`
    # (KernelPurge: a million launches are deleted in short batches, not by Django's cascade
    # in one statement), and trace keys come from a sequence, never reused. Names are only
    # ever added, never deleted.
    trace = TraceKeyForeignKey(
        Trace,
        to_field="key",
        on_delete=models.DO_NOTHING,
        related_name="kernels",
        db_index=False,
        db_constraint=False,
    )
    kernel_name = models.ForeignKey(
        KernelName,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
        db_column="name_id",
        db_constraint=False,
    )
    grid_x = UnsignedIntegerField()
    grid_y = UnsignedIntegerField()
    grid_z = UnsignedIntegerField()
    block_x = UnsignedIntegerField()
    block_y = UnsignedIntegerField()
    block_z = UnsignedIntegerField()
    blocks = UnsignedIntegerField()
    threads = UnsignedIntegerField()
    total_insts = UnsignedIntegerField(null=True, blank=True)
    total_reported_insts = UnsignedIntegerField(null=True, blank=True)
    context = models.SmallIntegerField(help_text="KernelContext.index of the trace: its ctx and device.")
    # The launch's step (Step.index of its trace; timeline.json) and measured time (timing.csv).
    step = models.SmallIntegerField(null=True, blank=True)
    traced = models.BooleanField(default=False)
    # NULL where the context's scheme gives the name (trace_file_expression).
    odd_trace_file = models.TextField(null=True, blank=True, db_column="trace_file")
    launch_context = models.ForeignObject(
        KernelContext,
        from_fields=["trace", "context"],
        to_fields=["trace", "index"],
        on_delete=models.DO_NOTHING,
        related_name="+",
    )

    objects = KernelManager()
    stored = models.Manager()  # noqa: DJ012 (the default is `objects`, first)

    class Meta:
        # The primary key's columns (ordering by "trace" would join Trace for its ordering).
        ordering = ["trace_key", "context", "kernel_id"]
        base_manager_name = "stored"

    def __str__(self) -> str:
        return f"{getattr(self, 'ctx', None) or '-'}/{self.kernel_id}"


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
# The API's order of a trace's launches, in `Kernel.objects`' names; stored, it is the
# primary key's (trace, context, kernel_id), contexts being numbered in (ctx, device) order.
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


class KernelPurge(models.Model):
    """A deleted trace whose launches are still being deleted, in batches (`kernels_purge`).

    Deleting a trace removes its row at once; its launches (a million for a big run) go in
    short transactions afterwards, so that no one statement writes a million rows of WAL and
    dead tuples. Launches whose key is here are being purged, not orphans; keys are never
    reused (`next_trace_keys`), so a run registered again never sees them.
    """

    trace_key = models.IntegerField(primary_key=True)
    trace_id = models.CharField(max_length=1024, help_text="The run the deleted trace was.")
    deleted_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.trace_id} (key {self.trace_key})"


@receiver(pre_delete, sender=Trace, dispatch_uid="traces.kernel_purge")
def purge_launches_later(sender, instance: Trace, **kwargs) -> None:
    """However a trace is deleted (trace_delete, the admin, a queryset in a shell), its
    launches are left to `kernels_purge`: Kernel.trace does not cascade."""
    KernelPurge.objects.update_or_create(pk=instance.key, defaults={"trace_id": instance.id})


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


TOKEN_PREFIX = "cas_"  # so that secret scanners can spot a leaked Cascade token


class TokenScope(models.TextChoices):
    """What a token's holder may do: `read` everything the API serves (every token before
    scopes were), or `write`, which may also upload a trace's simulations."""

    READ = "read", "read"
    WRITE = "write", "write"


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
    scope = models.CharField(
        max_length=8,
        choices=TokenScope.choices,
        default=TokenScope.READ,
        db_default=TokenScope.READ,
        help_text="read: the API's reads; write: also uploads simulations (create_token --scope write).",
    )

    class Meta:
        verbose_name = "API token"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name or self.user} ({self.prefix}…)"

    @classmethod
    def issue(
        cls, user, *, name: str = "", expires_at=None, rate: str = "", scope: str = TokenScope.READ
    ) -> tuple["ApiToken", str]:
        """Create a token for `user`; the plain token is returned once and never stored."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        record = cls.objects.create(
            user=user,
            name=name or user.get_username(),
            digest=token_digest(token),
            prefix=token[:12],
            expires_at=expires_at,
            rate=rate,
            scope=scope,
        )
        return record, token

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()
