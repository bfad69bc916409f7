"""A pass's parses shared among processes: each has its own interpreter, so that parsing,
botocore's work for each S3 request and the database's round trips of one trace overlap with
another's on every core. ingest.passes hands the pool its shares (passes.parse_share).

Imports nothing of Django's, nor of ingest's, at module level: a spawned process imports this
module before Django is set up, and sets it up (`setup_django`, the pool's initializer) from
the same environment as the pass's before it reads the work it is given.
"""

import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

logger = logging.getLogger(__name__)


def process_count(traces: int, processes: int, per_process: int, *, postgres: bool) -> int:
    """How many processes parse `traces` traces: up to `processes`, one per `per_process`
    traces; 1 off PostgreSQL, or in a process that may not have children (a Celery worker's)."""
    if not postgres or multiprocessing.current_process().daemon:
        return 1
    return max(1, min(processes, traces // per_process))


def shares(run_ids: list[str], count: int) -> list[list[str]]:
    """`run_ids` dealt out in turn, so that every share holds large and small runs alike."""
    return [run_ids[start::count] for start in range(count)]


def pool(workers: int) -> ProcessPoolExecutor:
    # Spawned, not forked: the pass holds S3 threads and a database connection.
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=setup_django
    )


def setup_django() -> None:
    """In a spawned process, before the first share arrives (whose function imports Django's models)."""
    import django

    django.setup()
    logger.info("parse process %d started", os.getpid())
