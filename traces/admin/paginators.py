"""Counting a list of a million kernels without reading them all."""

from django.core.paginator import Paginator
from django.db import connection
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
        if connection.vendor == "postgresql" and not queryset.query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [queryset.model._meta.db_table],
                )
                row = cursor.fetchone()
            if row and row[0] > ESTIMATE_COUNTS_ABOVE:
                return row[0]
        return super().count
