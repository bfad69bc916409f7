"""Kernel storage at a third of its size (docs/decisions/0001): names once, four-byte keys, derived files.

The old table is renamed `traces_kernel_old`, the new one created, the launches copied a
few traces at a time with INSERT .. SELECT (each batch committed on PostgreSQL: the migration
is not atomic, so that a table of a hundred million launches does not rewrite in one
transaction), then the old table dropped. The time per million launches is printed.
Reversible: the way back copies the launches into the old shape.
"""

import sys
import time

import django.db.models.deletion
from django.db import migrations, models, transaction

import traces.models

# Launches per committed batch (whole traces: a batch holds at least one).
BATCH_LAUNCHES = 500_000

KERNEL_NUMBERS = (
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
)


def add_trace_keys(apps, schema_editor):
    """Number the existing traces 1.. in creation order; new ones take the sequence's next."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM traces_trace ORDER BY created_at, id")
        ids = [row[0] for row in cursor.fetchall()]
        if connection.vendor == "postgresql":
            cursor.execute("CREATE SEQUENCE IF NOT EXISTS traces_trace_key_seq AS integer")
            cursor.execute(
                "UPDATE traces_trace SET key = numbered.key FROM (SELECT id, row_number() OVER "
                "(ORDER BY created_at, id) AS key FROM traces_trace) numbered "
                "WHERE traces_trace.id = numbered.id"
            )
            cursor.execute("SELECT setval('traces_trace_key_seq', %s, %s)", [max(len(ids), 1), bool(ids)])
        else:
            cursor.executemany("UPDATE traces_trace SET key = %s WHERE id = %s", list(enumerate(ids, 1)))


def drop_trace_key_sequence(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("DROP SEQUENCE IF EXISTS traces_trace_key_seq")


def own_trace_key_sequence(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("ALTER SEQUENCE traces_trace_key_seq OWNED BY traces_trace.key")


def trace_batches(cursor) -> list[list[str]]:
    """The traces with launches, a few at a time: about BATCH_LAUNCHES launches a batch."""
    cursor.execute(
        "SELECT id, kernel_count FROM traces_trace t WHERE EXISTS "
        "(SELECT 1 FROM traces_kernel_old k WHERE k.trace_id = t.id) ORDER BY key"
    )
    batches, batch, size = [], [], 0
    for trace_id, count in cursor.fetchall():
        batch.append(trace_id)
        size += count or 1
        if size >= BATCH_LAUNCHES:
            batches.append(batch)
            batch, size = [], 0
    if batch:
        batches.append(batch)
    return batches


# The suffix of a context's first launch's file after `kernel-<id>`, unless a digit follows
# the id (then the id and the suffix cannot be told apart): NULL, no scheme.
_PREFIX = "('kernel-' || f.kernel_id)"
CONTEXTS_SQL = f"""
    INSERT INTO traces_kernelcontext (trace_key, "index", ctx, device, trace_file_suffix)
    SELECT t.key,
        ROW_NUMBER() OVER (PARTITION BY f.trace_id ORDER BY f.ctx, f.device) - 1,
        f.ctx, f.device,
        CASE WHEN substr(f.trace_file, 1, length{_PREFIX}) = {_PREFIX}
            AND NOT (substr(f.trace_file, length{_PREFIX} + 1, 1) BETWEEN '0' AND '9')
        THEN substr(f.trace_file, length{_PREFIX} + 1) END
    FROM (
        SELECT trace_id, ctx, device, MIN(kernel_id) AS kernel_id FROM traces_kernel_old
        WHERE trace_id IN ({{traces}}) GROUP BY trace_id, ctx, device
    ) first_launch
    JOIN traces_kernel_old f ON f.trace_id = first_launch.trace_id
        AND f.ctx IS NOT DISTINCT FROM first_launch.ctx AND f.device = first_launch.device
        AND f.kernel_id = first_launch.kernel_id
    JOIN traces_trace t ON t.id = f.trace_id
"""
NUMBERS = ", ".join(KERNEL_NUMBERS)
KERNELS_SQL = f"""
    INSERT INTO traces_kernel (kernel_id, duration_ns, stream, trace_key, name_id, {NUMBERS},
        context, step, traced, trace_file)
    SELECT k.kernel_id, k.duration_ns, k.stream, t.key, n.id, {", ".join("k." + c for c in KERNEL_NUMBERS)},
        c."index", k.step, k.traced,
        CASE WHEN k.trace_file = 'kernel-' || k.kernel_id || c.trace_file_suffix THEN NULL ELSE k.trace_file END
    FROM traces_kernel_old k
    JOIN traces_trace t ON t.id = k.trace_id
    JOIN traces_kernelcontext c ON c.trace_key = t.key AND c.ctx IS NOT DISTINCT FROM k.ctx AND c.device = k.device
    JOIN traces_kernelname n ON n.name = k.name
    WHERE k.trace_id IN ({{traces}})
    ORDER BY t.key, c."index", k.kernel_id
"""


def insert_names(connection, cursor, placeholders: str, batch: list[str]) -> None:
    if connection.vendor == "postgresql":
        cursor.execute(
            "INSERT INTO traces_kernelname (digest, name) SELECT sha256(convert_to(name, 'UTF8')), name "
            f"FROM (SELECT DISTINCT name FROM traces_kernel_old WHERE trace_id IN ({placeholders})) names "
            "ON CONFLICT (digest) DO NOTHING",
            batch,
        )
        return
    cursor.execute(f"SELECT DISTINCT name FROM traces_kernel_old WHERE trace_id IN ({placeholders})", batch)
    names = [row[0] for row in cursor.fetchall()]
    cursor.executemany(
        "INSERT OR IGNORE INTO traces_kernelname (digest, name) VALUES (%s, %s)",
        [(traces.models.name_digest(name), name) for name in names],
    )


# Launches the new columns cannot hold (unsigned 32 bits): the parser refuses them since.
OUT_OF_RANGE = " OR ".join(f"{column} NOT BETWEEN 0 AND 4294967295" for column in KERNEL_NUMBERS)
# What undoes this migration's committed steps on PostgreSQL (the sequence goes with its column).
UNDO_SQL = (
    "DROP TABLE traces_kernel, traces_kernelcontext, traces_kernelname;",
    "ALTER TABLE traces_kernel_old RENAME TO traces_kernel;",
    "ALTER TABLE traces_trace DROP COLUMN key;",
)
# Run after UNDO_SQL: fail the traces with launches out of range, for the next pass to parse again.
FAIL_OUT_OF_RANGE_SQL = (
    "UPDATE traces_trace SET state = 'failed', kernel_count = 0, parsed_fingerprint = '', recheck_after = NULL, "
    "error = 'launches out of the unsigned 32-bit range: parsed again' "
    f"WHERE id IN (SELECT trace_id FROM traces_kernel WHERE {OUT_OF_RANGE});",
    f"DELETE FROM traces_kernel WHERE trace_id IN (SELECT trace_id FROM traces_kernel WHERE {OUT_OF_RANGE});",
)


def copy_failed(connection, batch: list[str], error: Exception) -> str:
    """What the operator must do now: the steps before this batch are committed (the new tables,
    Trace.key, the launches of earlier batches), so `migrate` cannot simply run again."""
    said = (
        f"copying the launches of {len(batch)} trace(s) ({', '.join(batch[:5])}"
        f"{', ...' if len(batch) > 5 else ''}) failed: {error}\n"
        "Migration 0007's earlier steps are committed, so running `migrate` again as it is fails. "
    )
    if connection.vendor != "postgresql":
        return said + "Put back the copy of the database file made before migrating, then migrate again."
    return (
        said
        + "Restore the backup made before migrating, or undo those steps in psql:\n  "
        + "\n  ".join(UNDO_SQL)
        + f"\nIf the error is a value of {', '.join(KERNEL_NUMBERS)} below 0 or above 2**32 - 1 "
        "(the parser refuses those since), then fail those traces (the next pass parses them again):\n  "
        + "\n  ".join(FAIL_OUT_OF_RANGE_SQL)
        + "\nthen migrate again."
    )


def copy_kernels_forward(apps, schema_editor):
    connection = schema_editor.connection
    started = time.monotonic()
    launches = 0
    with connection.cursor() as cursor:
        batches = trace_batches(cursor)
    for batch in batches:
        placeholders = ", ".join(["%s"] * len(batch))
        try:
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                insert_names(connection, cursor, placeholders, batch)
                cursor.execute(CONTEXTS_SQL.format(traces=placeholders), batch)
                cursor.execute(KERNELS_SQL.format(traces=placeholders), batch)
                launches += cursor.rowcount
        except Exception as error:
            raise RuntimeError(copy_failed(connection, batch, error)) from error
    seconds = time.monotonic() - started
    if launches:
        sys.stdout.write(
            f"\n  traces 0007: {launches:,} launches in {seconds:.1f} s, "
            f"{seconds / launches * 1e6:.1f} s per million launches\n"
        )


def pack_primary_key(apps, schema_editor):
    """Launches are written once, in key order, never updated in their key: index pages
    filled to 100% (btree's default keeps 10% free for updates that never come)."""
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(
                "SELECT conindid::regclass::text FROM pg_constraint "
                "WHERE conrelid = 'traces_kernel'::regclass AND contype = 'p'"
            )
            cursor.execute(f"ALTER INDEX {cursor.fetchone()[0]} SET (fillfactor = 100)")


def copy_kernels_backward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO traces_kernel_old (trace_id, ctx, kernel_id, name, trace_file, {NUMBERS},
                traced, device, stream, step, duration_ns)
            SELECT t.id, c.ctx, k.kernel_id, n.name,
                COALESCE(k.trace_file, 'kernel-' || k.kernel_id || c.trace_file_suffix),
                {", ".join("k." + c for c in KERNEL_NUMBERS)}, k.traced, c.device, k.stream, k.step, k.duration_ns
            FROM traces_kernel k
            JOIN traces_trace t ON t.key = k.trace_key
            JOIN traces_kernelcontext c ON c.trace_key = k.trace_key AND c."index" = k.context
            JOIN traces_kernelname n ON n.id = k.name_id
            """
        )


class Migration(migrations.Migration):
    # Batches of launches commit one by one (PostgreSQL): see the module's docstring.
    atomic = False

    dependencies = [
        ("traces", "0006_steps_and_measured_time"),
    ]

    operations = [
        migrations.AddField(
            model_name="trace",
            name="key",
            field=models.IntegerField(editable=False, null=True),
        ),
        migrations.RunPython(add_trace_keys, drop_trace_key_sequence),
        migrations.AlterField(
            model_name="trace",
            name="key",
            field=models.IntegerField(editable=False, unique=True),
        ),
        migrations.RunPython(own_trace_key_sequence, migrations.RunPython.noop),
        migrations.CreateModel(
            name="KernelName",
            fields=[
                ("id", models.AutoField(primary_key=True, serialize=False)),
                ("digest", models.BinaryField(max_length=32, unique=True)),
                ("name", models.TextField()),
            ],
        ),
        migrations.CreateModel(
            name="KernelContext",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("index", models.SmallIntegerField()),
                ("ctx", models.CharField(blank=True, max_length=64, null=True)),
                ("device", models.IntegerField(default=-1)),
                ("trace_file_suffix", models.TextField(blank=True, null=True)),
                (
                    "trace",
                    traces.models.TraceKeyForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="kernel_contexts",
                        to="traces.trace",
                        to_field="key",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("trace", "index"), name="kernelcontext_unique_index")
                ],
            },
        ),
        # The old table steps aside under another name and model.
        migrations.AlterModelTable(name="kernel", table="traces_kernel_old"),
        migrations.RenameModel(old_name="Kernel", new_name="OldKernel"),
        migrations.CreateModel(
            name="Kernel",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "trace",
                        "context",
                        "kernel_id",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("kernel_id", models.BigIntegerField()),
                ("duration_ns", models.BigIntegerField(blank=True, null=True)),
                (
                    "stream",
                    models.BigIntegerField(
                        blank=True, help_text="The device-id fork's stream id.", null=True
                    ),
                ),
                (
                    "trace",
                    traces.models.TraceKeyForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="kernels",
                        to="traces.trace",
                        to_field="key",
                    ),
                ),
                (
                    "kernel_name",
                    models.ForeignKey(
                        db_column="name_id",
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="traces.kernelname",
                    ),
                ),
                ("grid_x", traces.models.UnsignedIntegerField()),
                ("grid_y", traces.models.UnsignedIntegerField()),
                ("grid_z", traces.models.UnsignedIntegerField()),
                ("block_x", traces.models.UnsignedIntegerField()),
                ("block_y", traces.models.UnsignedIntegerField()),
                ("block_z", traces.models.UnsignedIntegerField()),
                ("blocks", traces.models.UnsignedIntegerField()),
                ("threads", traces.models.UnsignedIntegerField()),
                ("total_insts", traces.models.UnsignedIntegerField(blank=True, null=True)),
                ("total_reported_insts", traces.models.UnsignedIntegerField(blank=True, null=True)),
                (
                    "context",
                    models.SmallIntegerField(
                        help_text="KernelContext.index of the trace: its ctx and device."
                    ),
                ),
                ("step", models.SmallIntegerField(blank=True, null=True)),
                ("traced", models.BooleanField(default=False)),
                ("odd_trace_file", models.TextField(blank=True, db_column="trace_file", null=True)),
                (
                    "launch_context",
                    models.ForeignObject(
                        from_fields=["trace", "context"],
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="traces.kernelcontext",
                        to_fields=["trace", "index"],
                    ),
                ),
            ],
            options={
                "ordering": ["trace_key", "context", "kernel_id"],
                "base_manager_name": "stored",
            },
            managers=[
                ("objects", models.Manager()),
                ("stored", models.Manager()),
            ],
        ),
        migrations.RunPython(pack_primary_key, migrations.RunPython.noop),
        migrations.RunPython(copy_kernels_forward, copy_kernels_backward),
        migrations.DeleteModel(name="OldKernel"),
    ]
