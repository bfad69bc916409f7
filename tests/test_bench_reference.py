"""The lab bench's reference for the API's detail (`bench.harness.json_agg_sql`): PostgreSQL
builds the trace's TraceDetail itself, and it is the API's answer, key for key and in order.

tests/test_bench.py runs the whole bench (slow); this checks the one statement fast, so that a
field added to the detail's declaration reaches the reference too.
"""

import json

import pytest
from django.db import connection, transaction

from bench import harness
from tests.helpers import content, kernel_row
from traces import kernel_store
from traces.models import Trace, TraceState


@pytest.fixture
def database_url() -> str:
    """The test database's URL, for the statement's own connection (it reads the catalog)."""
    db = connection.settings_dict
    login = db["USER"] or "postgres"
    if db["PASSWORD"]:
        login += f":{db['PASSWORD']}"
    return f"postgres://{login}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.mark.postgres("the reference is PostgreSQL's json_build_object")
def test_postgres_builds_the_apis_detail_itself(api, database_url, make_trace):
    trace = make_trace(
        "bench-run",
        state=TraceState.READY,
        model="facebook/opt-125m",
        layers=["step 0 (prefill)"],
        source_gpu="NVIDIA H100 80GB HBM3",
        trace_gpu_arch="sm_90",
        bytes=13065268,
        has_real_timing=True,
        warnings=[{"file": "traces/stats.csv", "offset": 301327, "what": "the file ends inside a launch"}],
        traced_launches=1,
    )
    trace.metadata = {"status": "ok", "trace_gpu_arch": "sm_90"}
    trace.save()
    # Kernels as the bench's runs have them: no steps (the reference leaves a step its number),
    # no device (the reference writes no fork's keys).
    with transaction.atomic():
        kernel_store.kernels_append(
            trace.pk,
            [
                kernel_row(1, ctx="0x1", insts=2**32 - 1, traced=True, duration_ns=2816),
                kernel_row(2, ctx="0x1", insts=None),
                kernel_row(1, ctx="0x2", duration_ns=780),
            ],
        )
    Trace.objects.filter(pk=trace.pk).update(kernel_count=3)

    with connection.cursor() as cursor:
        cursor.execute(harness.json_agg_sql(database_url, "bench-run"))
        (built,) = cursor.fetchone()
    built = json.loads(built) if isinstance(built, str) else built
    answer = json.loads(content(api.get("/api/traces/bench-run")))
    assert list(built) == list(answer)
    assert built == answer
