"""Counting a list of 100,000 traces or 50M kernels without reading them all, and a deep page
of them without reading the rows before it."""

import json

from django.core.paginator import Page, Paginator
from django.db import connections
from django.utils.functional import cached_property

# Below this many rows an exact COUNT(*) is cheap, and the estimate may be stale.
ESTIMATE_COUNTS_ABOVE = 100_000


class EstimatedCountPaginator(Paginator):
    """On PostgreSQL, a list of more than ESTIMATE_COUNTS_ABOVE rows is counted from the
    planner's statistics, and says so (`estimated`; admin/traces/pagination.html: "about").

    `COUNT(*)` over 50M kernels reads the whole table on every page load, and over the
    launches of a name search as much. The estimate is the planner's (EXPLAIN): for an
    unfiltered list the table's size since the last ANALYZE (autovacuum keeps it close), for a
    filtered one statistics that know the big traces and the common names. A list the planner
    expects to be small is counted exactly, as Django does.

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
    """The planner's estimate of the rows of `queryset` on PostgreSQL (None elsewhere).

    For a list every row is in, that is the table's row count at its last ANALYZE scaled to
    the table's current size; for a filtered one, the statistics' estimate of the filter."""
    # The list's own database: the replica, for the admin's pages when there is one.
    if connections[queryset.db].vendor != "postgresql":
        return None
    plan = queryset.order_by().values_list("pk").explain(format="json")
    if not plan:  # a filter nothing can match (no name found, no such trace): no query is sent
        return 0
    plan = json.loads(plan)
    # One plan, or the list of one plan, depending on whether psycopg decoded the JSON.
    if isinstance(plan, list):
        [plan] = plan
    return int(plan["Plan"]["Plan Rows"])
