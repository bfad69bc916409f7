"""What a pass asks of S3 and the database, measured: the figures `ingest_traces` prints and
the poll task logs, summed over a pass's processes."""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connection

from ingest import storage


@dataclass
class PassCost:
    """What a pass asked of S3 and the database: requests, and seconds spent waiting on each."""

    s3_requests: int = 0
    s3_seconds: float = 0.0  # summed over the S3 threads: more than the pass's time when they overlap
    db_queries: int = 0
    db_seconds: float = 0.0
    runs: int = 0  # the runs the pass looked at (listed), for the requests a run

    def add(self, other: "PassCost | None") -> None:
        if other is not None:
            self.s3_requests += other.s3_requests
            self.s3_seconds += other.s3_seconds
            self.db_queries += other.db_queries
            self.db_seconds += other.db_seconds

    def __str__(self) -> str:
        per_run = f" ({self.s3_requests / self.runs:.1f} a run looked at)" if self.runs else ""
        return (
            f"S3: {self.s3_requests} requests{per_run}, {self.s3_seconds:.1f} s waiting; "
            f"database: {self.db_queries} queries, {self.db_seconds:.1f} s"
        )


@contextmanager
def measured() -> Iterator[PassCost]:
    """The cost of what runs inside, in this thread's database connection and every S3 client."""
    cost = PassCost()
    requests, seconds = storage.meter.snapshot()

    def timed(execute, sql, params, many, context):
        started = time.monotonic()
        try:
            return execute(sql, params, many, context)
        finally:
            cost.db_queries += 1
            cost.db_seconds += time.monotonic() - started

    with connection.execute_wrapper(timed):
        yield cost
    now_requests, now_seconds = storage.meter.snapshot()
    cost.s3_requests, cost.s3_seconds = now_requests - requests, now_seconds - seconds
