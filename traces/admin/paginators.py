"""Counting a list of a million kernels without reading them all."""

from django.core.paginator import Paginator
from django.db import connections
from django.utils.functional import cached_property

# Below this many rows an exact COUNT(*) is cheap, and the estimate may be stale.
ESTIMATE_COUNTS_ABOVE = 100_000


class EstimatedCountPaginator(Paginator):
    """On PostgreSQL, an unfiltered list is counted from the planner's statistics.

    `COUNT(*)` over a million kernels reads the whole table on every page load; the
    estimate is what `pg_class.reltuples` says since the last ANALYZE (autovacuum keeps it
    close). Filtered lists are counted exactly: the filter's index makes that cheap.
    """

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        # The list's own database: the replica, for the admin's pages when there is one.
        connection = connections[queryset.db]
        if connection.vendor == "postgresql" and lists_every_row(queryset):
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [queryset.model._meta.db_table],
                )
                row = cursor.fetchone()
            if row and row[0] > ESTIMATE_COUNTS_ABOVE:
                return row[0]
        return super().count


def lists_every_row(queryset) -> bool:
    """Whether no filter or search narrows the list: its count is the table's.

    Reads Django's private `Query.where`. The public ways fail a need: `count()` is the scan
    of every row the estimate avoids (docs/performance.md measures both); the request's
    parameters tell a filter only by restating which of them the ChangeList treats as
    filters, and miss a filter applied by default; `QuerySet.explain()` estimates filtered
    lists too, which are counted exactly. test_admin's
    test_a_list_is_unfiltered_until_a_filter_or_search_narrows_it fails if an upgrade breaks it.
    """
    return not queryset.query.where
