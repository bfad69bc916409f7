"""A trace's kernel launches: `Kernel` (one a launch, about 140 bytes with its index), the names
and contexts its rows point into (`KernelName`, `KernelContext`), and `KernelPurge`, a deleted
trace's launches still being deleted in batches."""

import hashlib

from django.db import models
from django.db.models.signals import pre_delete
from django.dispatch import receiver
from django.utils import timezone

from traces.models.trace import Trace


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
