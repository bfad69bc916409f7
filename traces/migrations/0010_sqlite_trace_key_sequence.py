"""On SQLite, Trace.key from a one-row table that only grows (PostgreSQL has its sequence).

Keys were the largest plus one: deleting the newest trace handed its key to the next, and
launches the deleted trace left behind (a hand-written DELETE; kernel rows have no foreign key
since 0008) would have reappeared under it. Trace.key is not the primary key, so SQLite's
AUTOINCREMENT cannot serve: `traces.models.next_trace_keys` reads and advances this table.
"""

from django.db import migrations


def create_key_sequence(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS traces_trace_key_seq "
            "(id integer PRIMARY KEY CHECK (id = 1), last integer NOT NULL)"
        )
        cursor.execute(
            "INSERT OR IGNORE INTO traces_trace_key_seq (id, last) "
            "SELECT 1, COALESCE(MAX(key), 0) FROM traces_trace"
        )


def drop_key_sequence(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS traces_trace_key_seq")


class Migration(migrations.Migration):
    # 0009 is another change's (the lead orders the chain when merging).
    dependencies = [
        ("traces", "0009_trace_parse_attempts"),
    ]

    operations = [migrations.RunPython(create_key_sequence, drop_key_sequence)]
