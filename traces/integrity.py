"""What the database's constraints no longer guard, checked and repaired (`check_integrity`).

Kernel rows have no foreign key to their trace nor to their name (migration 0008: a COPY
checked them with a trigger per row, at twice the time), so a TRUNCATE of the trace table, a
hand-written DELETE or a partial restore leaves launches that nothing points at, and nothing
else would notice. The same goes for contexts and steps restored without their trace, for a
trace left in `parsing` by a pass that died (and no pass holds it), and for a trace whose
counts no longer match its launches. Launches of a trace deleted the ordinary way are not
orphans: `kernels_purge` deletes them in batches (KernelPurge), and this says so in a note.

Each check is one query, whatever the number of launches (a full scan of the kernel table for
some: a command for cron or for after an incident, not for every request). Repairs take the
trace's lock, as a pass would, and leave alone a trace that a pass holds right now.
"""

from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from traces.locks import trace_lock
from traces.models import Trace, TraceState
from traces.services import TraceBusy, trace_mark_failed

STUCK_ERROR = "stuck in parsing with no pass ingesting it; check_integrity --fix asked for a new parse"
MISSING_NAME_ERROR = (
    "launches refer to kernel names that are gone; check_integrity --fix asked for a new parse"
)
SHOWN = 5  # ids named in a finding's line


@dataclass
class Finding:
    """One kind of problem: how many rows or traces, which (a few), and what --fix did."""

    problem: str
    count: int
    examples: list[str]
    repaired: str | None = None

    def __str__(self) -> str:
        more = f", ... ({self.count - len(self.examples)} more)" if self.count > len(self.examples) else ""
        which = f": {', '.join(self.examples)}{more}" if self.examples else ""
        return f"{self.problem}: {self.count}{which}" + (f" -> {self.repaired}" if self.repaired else "")


@dataclass
class Report:
    findings: list[Finding]
    notes: list[str]  # what is worth knowing but not wrong (names no launch uses)


# Launches of a deleted trace that kernels_purge has not reached yet are no orphans: the
# purge deletes them in batches (a --fix here would delete them in one statement).
NOT_PURGING = "NOT EXISTS (SELECT 1 FROM traces_kernelpurge p WHERE p.trace_key = {key})"
PURGING_SQL = (
    "SELECT COUNT(DISTINCT p.trace_key), COUNT(k.trace_key) FROM traces_kernelpurge p "
    "LEFT JOIN traces_kernel k ON k.trace_key = p.trace_key"
)
# (problem, the rows, the statement that deletes them): rows whose trace is gone.
ORPHANS = (
    (
        "launches without their trace",
        "FROM traces_kernel k WHERE NOT EXISTS (SELECT 1 FROM traces_trace t WHERE t.key = k.trace_key) "
        f"AND {NOT_PURGING.format(key='k.trace_key')}",
        "trace_key",
        "DELETE FROM traces_kernel WHERE NOT EXISTS "
        "(SELECT 1 FROM traces_trace t WHERE t.key = traces_kernel.trace_key) "
        f"AND {NOT_PURGING.format(key='traces_kernel.trace_key')}",
    ),
    (
        "contexts without their trace",
        "FROM traces_kernelcontext k WHERE NOT EXISTS (SELECT 1 FROM traces_trace t WHERE t.key = k.trace_key)",
        "trace_key",
        "DELETE FROM traces_kernelcontext WHERE NOT EXISTS "
        "(SELECT 1 FROM traces_trace t WHERE t.key = traces_kernelcontext.trace_key)",
    ),
    (
        "steps without their trace",
        "FROM traces_step k WHERE NOT EXISTS (SELECT 1 FROM traces_trace t WHERE t.id = k.trace_id)",
        "trace_id",
        "DELETE FROM traces_step WHERE NOT EXISTS (SELECT 1 FROM traces_trace t WHERE t.id = traces_step.trace_id)",
    ),
)

COUNTS_SQL = """
    SELECT t.id, t.kernel_count, COALESCE(k.launches, 0), t.kernels_without_totals, COALESCE(k.without_totals, 0)
    FROM traces_trace t LEFT JOIN (
        SELECT trace_key, COUNT(*) AS launches,
            SUM(CASE WHEN total_insts IS NULL THEN 1 ELSE 0 END) AS without_totals
        FROM traces_kernel GROUP BY trace_key
    ) k ON k.trace_key = t.key
    WHERE t.state <> 'parsing'
        AND (t.kernel_count <> COALESCE(k.launches, 0) OR t.kernels_without_totals <> COALESCE(k.without_totals, 0))
    ORDER BY t.id
"""
MISSING_NAMES_SQL = """
    SELECT t.id FROM traces_trace t WHERE EXISTS (
        SELECT 1 FROM traces_kernel k WHERE k.trace_key = t.key
            AND NOT EXISTS (SELECT 1 FROM traces_kernelname n WHERE n.id = k.name_id)
    ) ORDER BY t.id
"""
UNUSED_NAMES = (
    "FROM traces_kernelname n WHERE NOT EXISTS (SELECT 1 FROM traces_kernel k WHERE k.name_id = n.id)"
)


def integrity_check(*, fix: bool = False) -> Report:
    """Every problem found (repaired with `fix`), and the notes."""
    findings = [
        finding for finding in (*orphans(fix), stuck_parsing(fix), missing_names(fix), counts(fix)) if finding
    ]
    return Report(findings=findings, notes=being_purged() + unused_names(fix))


def being_purged() -> list[str]:
    """Deleted traces whose launches kernels_purge is still deleting: no problem, a note."""
    with connection.cursor() as cursor:
        cursor.execute(PURGING_SQL)
        traces, launches = cursor.fetchone()
    if not traces:
        return []
    return [
        f"launches of deleted traces being purged: {launches} of {traces} trace(s) "
        "(the poll pass or `manage.py purge_deleted_kernels` deletes them)"
    ]


def orphans(fix: bool) -> list[Finding | None]:
    found = []
    with connection.cursor() as cursor:
        for problem, rows, owner, delete in ORPHANS:
            cursor.execute(f"SELECT COUNT(*) {rows}")
            count = cursor.fetchone()[0]
            if not count:
                found.append(None)
                continue
            cursor.execute(f"SELECT DISTINCT k.{owner} {rows} ORDER BY k.{owner} LIMIT {SHOWN}")
            finding = Finding(
                problem, count, [f"of trace {owner.split('_')[1]} {key}" for (key,) in cursor.fetchall()]
            )
            if fix:
                # Only what has no trace when the statement runs: a trace created meanwhile keeps its rows.
                cursor.execute(delete)
                finding.repaired = f"{cursor.rowcount} deleted"
            found.append(finding)
    return found


def stuck_parsing(fix: bool) -> Finding | None:
    """Traces in `parsing` whose lock nobody holds: the pass that parsed them is gone."""
    stuck = []
    for trace_id in (
        Trace.objects.filter(state=TraceState.PARSING).order_by("id").values_list("id", flat=True)
    ):
        with trace_lock(trace_id) as acquired:
            if acquired:
                stuck.append(trace_id)
    return requeued_finding("traces stuck in parsing with no pass holding them", stuck, STUCK_ERROR, fix)


def missing_names(fix: bool) -> Finding | None:
    """Traces with launches whose name row is gone (a partial restore): parsed again."""
    with connection.cursor() as cursor:
        cursor.execute(MISSING_NAMES_SQL)
        trace_ids = [trace_id for (trace_id,) in cursor.fetchall()]
    return requeued_finding(
        "traces with launches whose kernel name is gone", trace_ids, MISSING_NAME_ERROR, fix
    )


def requeued_finding(what: str, trace_ids: list[str], error: str, fix: bool) -> Finding | None:
    """Traces that parsing again cures: a finding (None if there are none), and with `fix`
    each one requeued with `error`."""
    if not trace_ids:
        return None
    finding = Finding(what, len(trace_ids), trace_ids[:SHOWN])
    if fix:
        finding.repaired = requeue(trace_ids, error)
    return finding


def requeue(trace_ids: list[str], error: str) -> str:
    """Failed with `error` and retried by the next poll (trace_mark_failed's `retry`)."""
    done, busy = 0, 0
    for trace_id in trace_ids:
        try:
            trace_mark_failed(trace_id, error, retry=True)
            done += 1
        except TraceBusy:  # a pass took it meanwhile: it is not stuck
            busy += 1
    return f"{done} failed for the next pass to parse again" + (
        f", {busy} taken by a pass meanwhile" if busy else ""
    )


def counts(fix: bool) -> Finding | None:
    """Traces whose kernel_count (or kernels_without_totals) is not what their launches say."""
    with connection.cursor() as cursor:
        cursor.execute(COUNTS_SQL)
        wrong = cursor.fetchall()
    if not wrong:
        return None
    finding = Finding(
        "traces whose counts disagree with their launches",
        len(wrong),
        [f"{trace_id} ({said} said, {stored} stored)" for trace_id, said, stored, *_ in wrong[:SHOWN]],
    )
    if fix:
        recounted = sum(recount(trace_id) for trace_id, *_ in wrong)
        finding.repaired = f"{recounted} recounted"
    return finding


def recount(trace_id: str) -> bool:
    """The trace's counts from its launches, under its lock; False if a pass holds it."""
    with trace_lock(trace_id) as acquired:
        if not acquired:
            return False
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "UPDATE traces_trace SET updated_at = %s, "
                "kernel_count = (SELECT COUNT(*) FROM traces_kernel k WHERE k.trace_key = traces_trace.key), "
                "kernels_without_totals = (SELECT COUNT(*) FROM traces_kernel k "
                "WHERE k.trace_key = traces_trace.key AND k.total_insts IS NULL) WHERE id = %s",
                [timezone.now(), trace_id],
            )
        return True


def unused_names(fix: bool) -> list[str]:
    """Names no launch uses: left by every deleted trace (names are shared and only added), so
    harmless and no problem; `fix` deletes them while no parse can be writing launches.

    On PostgreSQL a parse writes its launches in a transaction that first deletes the trace's
    old ones: holding SHARE on traces_kernel waits for those under way and keeps new ones from
    starting, so no parse can be holding the id of a name deleted here.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        if fix and connection.vendor == "postgresql":
            cursor.execute("LOCK TABLE traces_kernel IN SHARE MODE")
        cursor.execute(f"SELECT COUNT(*) {UNUSED_NAMES}")
        count = cursor.fetchone()[0]
        if not count:
            return []
        if not fix:
            return [f"kernel names no launch uses: {count} (harmless; --fix deletes them)"]
        cursor.execute(f"DELETE FROM traces_kernelname WHERE id IN (SELECT n.id {UNUSED_NAMES})")
        return [f"kernel names no launch uses: {count} -> {cursor.rowcount} deleted"]
