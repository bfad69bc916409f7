"""Counting a list of 100,000 traces or 50M kernels without reading them all, and a deep page
of them without reading the rows before it."""

from django.core.exceptions import EmptyResultSet
from django.core.paginator import Page, Paginator
from django.db import connections
from django.utils.functional import cached_property

# Below this many rows an exact COUNT(*) is cheap, and the estimate may be stale.
ESTIMATE_COUNTS_ABOVE = 100_000


class EstimatedCountPaginator(Paginator):
    """On PostgreSQL, a list of more than ESTIMATE_COUNTS_ABOVE rows is counted from the
    planner's statistics, and says so (`estimated`; admin/traces/pagination.html: "about").

    `COUNT(*)` over 50M kernels reads the whole table on every page load, and over the
    launches of a name search as much. An unfiltered list's estimate is `pg_class.reltuples`
    since the last ANALYZE (autovacuum keeps it close); a filtered one's is the planner's
    estimate of the list's rows (EXPLAIN), whose statistics know the big traces and the common
    names. A list the planner expects to be small is counted exactly, as Django does.

    `page_keys`: the columns that identify a row (the primary key's). A page is then read in
    two steps: its keys (from the index alone, skipping the rows before the page there), then
    its rows with their joins and subqueries, which OFFSET would otherwise compute for every
    row it skips (page 5,000 of a trace's launches: 500,000 joins).
    """

    page_keys: tuple[str, ...] = ()
    estimated = False

    @cached_property
    def count(self) -> int:
        estimate = estimated_rows(self.object_list)
        if estimate is not None and estimate > ESTIMATE_COUNTS_ABOVE:
            self.estimated = True
            return estimate
        return super().count

    def page(self, number):
        if not self.page_keys:
            return super().page(number)
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        top = bottom + self.per_page
        if top + self.orphans >= self.count:
            top = self.count
        keys = list(self.object_list.values_list(*self.page_keys)[bottom:top])
        # Sliced as well: the planner, which cannot tell that a hundred keys are a hundred rows,
        # then plans for a page, not for the tens of thousands of rows it guesses, which on a
        # 50M-row table cost a JIT compilation of seconds (docs/performance.md).
        rows = self.object_list.filter(pk__in=keys)[: len(keys)] if keys else self.object_list.none()
        return Page(rows, number, self)


def estimated_rows(queryset) -> int | None:
    """The planner's estimate of the rows of `queryset` on PostgreSQL (None elsewhere): the
    table's for a list every row is in, EXPLAIN's for a filtered one."""
    # The list's own database: the replica, for the admin's pages when there is one.
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        if lists_every_row(queryset):
            cursor.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                [queryset.model._meta.db_table],
            )
            row = cursor.fetchone()
            return row[0] if row else None
        try:
            sql, params = queryset.order_by().values_list("pk").query.sql_with_params()
        except EmptyResultSet:  # a filter nothing can match (no name found, no such trace)
            return 0
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):  # psycopg returns json as text where no loader is set
        import json

        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def lists_every_row(queryset) -> bool:
    """Whether no filter or search narrows the list: its count is the table's.

    Reads Django's private `Query.where`. The public ways fail a need: `count()` is the scan
    of every row the estimate avoids (docs/performance.md measures both); the request's
    parameters tell a filter only by restating which of them the ChangeList treats as
    filters, and miss a filter applied by default; `QuerySet.explain()` would do, but a
    table's `reltuples` is closer than EXPLAIN's, which scales it by the pages' count. test_admin's
    test_a_list_is_unfiltered_until_a_filter_or_search_narrows_it fails if an upgrade breaks it.
    """
    return not queryset.query.where
