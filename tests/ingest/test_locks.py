"""Per-trace locks that two traces never share.

A 32-bit hash of the run's name collides by the birthday bound once a registry holds about
100,000 traces: two runs whose names collide would make a pass skip, or an operator's
action refuse, a trace that nobody is ingesting.
"""

import pytest
from django.db import connection

from tests.helpers import lock_held_elsewhere
from traces.locks import trace_lock


def names_that_collide_in_hashtext() -> tuple[str, str]:
    """Two run names with the same 32-bit `hashtext`: a birthday search over 200,000 names."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT array_agg(id ORDER BY id) FROM ("
            "  SELECT 'run-' || i AS id, hashtext('run-' || i) AS h FROM generate_series(1, 200000) AS i"
            ") AS runs GROUP BY h HAVING count(*) > 1 LIMIT 1"
        )
        first, second = cursor.fetchone()[0][:2]
    return first, second


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres("the collision is PostgreSQL's hashtext, the locks its advisory locks")
def test_two_traces_whose_names_collide_in_a_32_bit_hash_are_locked_apart():
    first, second = names_that_collide_in_hashtext()
    with lock_held_elsewhere(first):
        with trace_lock(second) as acquired:
            assert acquired, f"{second} was refused while only {first} was held"
        with trace_lock(first) as acquired:
            assert not acquired


@pytest.mark.django_db(transaction=True)
def test_a_trace_held_by_another_connection_is_refused_then_free_once_released():
    with lock_held_elsewhere("run-a"):
        with trace_lock("run-a") as acquired:
            assert not acquired
    with trace_lock("run-a") as acquired:
        assert acquired
