"""Kernel names' demangled text, stored with them (docs/decisions/0008): the names already stored
are demangled here, within a budget; any left over stay null and a read demangles them within
its own."""

from django.db import migrations, models

# Seconds of demangling in children for the names already stored; the in-process ones (real
# names) are not counted.
MIGRATION_BUDGET_SECONDS = 30.0
BATCH = 1000


def demangle_stored_names(apps, schema_editor):
    from traces.demangle import Budget, demangle_names

    KernelName = apps.get_model("traces", "KernelName")
    budget = Budget(MIGRATION_BUDGET_SECONDS)
    after = 0
    while True:
        batch = list(KernelName.objects.filter(id__gt=after).order_by("id")[:BATCH])
        if not batch:
            return
        after = batch[-1].id
        texts = demangle_names((row.name for row in batch), budget)
        for row in batch:
            if texts.get(row.name) is not None:
                row.demangled = texts[row.name]
            elif budget.left():  # its own limit: kept mangled and marked
                row.demangled, row.demangle_limited = row.name, True
        KernelName.objects.bulk_update(batch, ["demangled", "demangle_limited"])


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0016_apitoken_scope"),
    ]

    operations = [
        migrations.AddField(
            model_name="kernelname",
            name="demangled",
            field=models.TextField(
                blank=True,
                help_text="The name as a page shows it: demangled (cut past 16,384 characters), or as it is. "
                "Null: stored before names were demangled at ingest (a read demangles it within a budget).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="kernelname",
            name="demangle_limited",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="The demangler's limit or the trace's budget ran out first: kept mangled.",
            ),
        ),
        migrations.RunPython(demangle_stored_names, migrations.RunPython.noop, elidable=True),
    ]
