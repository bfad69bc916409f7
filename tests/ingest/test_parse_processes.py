"""A pass with many traces to parse shares them among processes (ingest.processes): the same
traces, kernels and states as one process, the same S3 requests and queries counted."""

import re
import subprocess
import sys

import pytest

from ingest import passes, processes
from tests.ingest.support import outcome, upload_runs
from traces.kernel_store import kernels_purge
from traces.models import Trace

ROOT = passes.__file__.rsplit("/ingest/", 1)[0]


@pytest.mark.parametrize(
    ("traces", "configured", "per_process", "postgres", "expected"),
    [
        (2000, 2, 100, True, 2),
        (2000, 8, 100, True, 8),
        (150, 8, 100, True, 1),  # not worth a process's start
        (350, 8, 100, True, 3),
        (2000, 1, 100, True, 1),
        (2000, 8, 100, False, 1),  # SQLite: one writer at a time
        (0, 8, 100, True, 1),
    ],
)
def test_how_many_processes_parse(traces, configured, per_process, postgres, expected):
    assert processes.process_count(traces, configured, per_process, postgres=postgres) == expected


def test_a_celery_workers_process_parses_alone(monkeypatch):
    """Its processes are daemonic, and a daemonic process may not have children."""
    monkeypatch.setattr(processes.multiprocessing.current_process(), "daemon", True)
    assert processes.process_count(2000, 8, 100, postgres=True) == 1


def test_shares_deal_out_every_run_once():
    runs = [f"r{n}" for n in range(11)]
    dealt = processes.shares(runs, 3)
    assert dealt == [["r0", "r3", "r6", "r9"], ["r1", "r4", "r7", "r10"], ["r2", "r5", "r8"]]
    assert sorted(run for share in dealt for run in share) == sorted(runs)


@pytest.mark.postgres("a pass parses in several processes on PostgreSQL only (ingest.processes)")
def test_a_pass_in_three_processes_ingests_as_one_process_does(transactional_db, s3, api, child_env):
    upload_runs(s3, 36)
    shared = subprocess.run(
        [sys.executable, "manage.py", "ingest_traces"],
        cwd=ROOT,
        env={
            **child_env,
            "CASCADE_PARSE_PROCESSES": "3",
            "CASCADE_PARSES_PER_PROCESS": "8",
            "CASCADE_LOG_LEVEL": "INFO",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shared.returncode == 0, shared.stderr[-3000:]
    assert "parsing 30 traces in 3 processes" in shared.stderr
    children = set(re.findall(r"parse process (\d+): 10 traces to parse", shared.stderr))
    assert len(children) == 2, shared.stderr[-3000:]
    in_processes = outcome(api)

    Trace.objects.all().delete()
    kernels_purge()  # their launches: not this pass's work to count
    alone = passes.poll_bucket()  # this process only (the tests' setting)
    assert outcome(api) == in_processes
    requests, queries = re.search(r"S3: (\d+) requests .*database: (\d+) queries", shared.stdout).groups()
    assert int(requests) == alone.cost.s3_requests
    # Every process's queries are counted; a name two processes both add costs a look more.
    assert alone.cost.db_queries <= int(queries) <= alone.cost.db_queries + 4
    assert f"pass: {alone.summary().split(';')[0]}" in shared.stdout
