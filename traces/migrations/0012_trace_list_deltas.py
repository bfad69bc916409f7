"""The whole list's version kept by PostgreSQL: `selectors.trace_list_version`.

Every statement that inserts, updates or deletes traces adds one row of what it changed:
traces (+1/-1 each), the sum of their keys, the sum of their `updated_at` stamps
(`selectors._STAMP_SQL`). Their sums equal count(*), sum(key) and sum(stamp) over the trace
table in every snapshot (the row is written in the writer's transaction), read in a
millisecond where the aggregate scans 100,000 rows. Rows are only inserted, so writers of
different traces never wait for each other; readers fold them into one now and then. A TRUNCATE (Django's flush) empties it too.
SQLite (the embedded mode) has no such table: its lists are small and aggregated.
"""

from django.db import migrations

STAMP = "MOD(CAST(EXTRACT(EPOCH FROM updated_at) * 1000000 AS BIGINT), 2147483648)"

FORWARD = f"""
CREATE TABLE traces_tracelistdelta (
    id bigserial PRIMARY KEY,
    traces bigint NOT NULL,
    key_sum bigint NOT NULL,
    stamp_sum bigint NOT NULL
);
CREATE FUNCTION traces_trace_list_delta() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN  -- Django's flush, a test's: nothing left to count
        DELETE FROM traces_tracelistdelta;
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO traces_tracelistdelta (traces, key_sum, stamp_sum)
        SELECT COUNT(*), SUM(key), SUM({STAMP}) FROM new_rows HAVING COUNT(*) > 0;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO traces_tracelistdelta (traces, key_sum, stamp_sum)
        SELECT -COUNT(*), -SUM(key), -SUM({STAMP}) FROM old_rows HAVING COUNT(*) > 0;
    ELSE
        INSERT INTO traces_tracelistdelta (traces, key_sum, stamp_sum)
        SELECT 0, COALESCE(SUM(k), 0), COALESCE(SUM(s), 0)
        FROM (
            SELECT key AS k, {STAMP} AS s FROM new_rows
            UNION ALL
            SELECT -key, -{STAMP} FROM old_rows
        ) AS changed
        HAVING COALESCE(SUM(k), 0) <> 0 OR COALESCE(SUM(s), 0) <> 0;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER traces_trace_list_insert AFTER INSERT ON traces_trace
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION traces_trace_list_delta();
CREATE TRIGGER traces_trace_list_update AFTER UPDATE ON traces_trace
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION traces_trace_list_delta();
CREATE TRIGGER traces_trace_list_delete AFTER DELETE ON traces_trace
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION traces_trace_list_delta();
CREATE TRIGGER traces_trace_list_truncate AFTER TRUNCATE ON traces_trace
    FOR EACH STATEMENT EXECUTE FUNCTION traces_trace_list_delta();
LOCK TABLE traces_trace IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO traces_tracelistdelta (traces, key_sum, stamp_sum)
SELECT COUNT(*), COALESCE(SUM(key), 0), COALESCE(SUM({STAMP}), 0) FROM traces_trace;
"""

BACKWARD = """
DROP TRIGGER traces_trace_list_insert ON traces_trace;
DROP TRIGGER traces_trace_list_update ON traces_trace;
DROP TRIGGER traces_trace_list_delete ON traces_trace;
DROP TRIGGER traces_trace_list_truncate ON traces_trace;
DROP FUNCTION traces_trace_list_delta();
DROP TABLE traces_tracelistdelta;
"""


def run(sql):
    def operation(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return operation


class Migration(migrations.Migration):
    dependencies = [("traces", "0011_simulations")]

    operations = [migrations.RunPython(run(FORWARD), run(BACKWARD))]
