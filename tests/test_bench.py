"""`python -m bench` works end to end: every figure taken, every row in the table.

Only the harness is checked, at the tiny scale (a few thousand launches, ten runs): the
figures themselves mean nothing at that size, and timings never go into the suite.
"""

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from tests.helpers import shared_fixture

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # starts manage.py, gunicorn and moto's server: ~30 s

ROWS = [
    "ingest",
    "ingest-more",
    "memory",
    "traced",
    "storage",
    "growth",
    "api",
    "api-gzip",
    "computed",
    "gzip",
    "zstd",
    "etag",
    "dataframe",
    "runs",
    "idle",
]


def run_bench(*args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`python -m <args>` in the checkout, to its end; its exit asserted zero."""
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def run_server_bench(*args: str, timeout: float) -> tuple[subprocess.Popen, str]:
    """`python -m bench <args>` against a server, to its end: the process (its pid names its
    scratch databases) and the table it printed; its exit asserted zero."""
    bench = subprocess.Popen(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        table, progress = bench.communicate(timeout=timeout)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.communicate()
    assert bench.returncode == 0, progress[-3000:]
    return bench, table


@pytest.fixture
def server() -> str:
    """The PostgreSQL server of the test database, where a bench makes its scratch databases."""
    db = connection.settings_dict
    login = db["USER"] or "postgres"
    if db["PASSWORD"]:
        login += f":{db['PASSWORD']}"
    return f"postgres://{login}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"


@pytest.mark.postgres("the bench makes scratch databases on the PostgreSQL server")
def test_the_lab_bench_measures_every_figure_at_the_tiny_scale(server, tmp_path):
    results, written = tmp_path / "bench.json", tmp_path / "bench.md"
    bench, table = run_server_bench(
        "--scale", "tiny", "--server", server, "--json", str(results), "--output", str(written), timeout=600
    )

    saved = json.loads(results.read_text())
    assert [row["key"] for row in saved["rows"]] == ROWS
    for row in saved["rows"]:
        assert not row["measured"].startswith("not measured"), row
    by_key = {row["key"]: row for row in saved["rows"]}
    assert by_key["ingest"]["values"]["launches"] == 2_000
    assert min(by_key["ingest"]["values"]["copy_seconds"]) > 0
    assert by_key["ingest-more"]["values"]["launches"] == 8_000
    assert set(by_key["memory"]["values"]["rss"]) == {"2000", "8000"}
    # One context, every launch traced: 1x, 2x and 4x the large run, side by side.
    assert set(by_key["traced"]["values"]["rss"]) == {"2000", "4000", "8000"}
    assert 0 < by_key["storage"]["values"]["bytes_per_launch"]
    # PostgreSQL's json_agg built the same JSON (compared whole), give or take its spacing.
    api = by_key["api"]["values"]
    assert 0.9 < api["json_agg_bytes"] / api["bytes"] < 1.3
    assert api["same_json"] is True
    # Both DataFrames hold every launch, the CSV's with the grid and block unfolded (19 columns).
    frames = by_key["dataframe"]["values"]
    assert frames["csv_rows"] == frames["json_rows"] == 2_000
    assert frames["csv_columns"] == 19
    assert 0 < frames["csv_bytes"] < frames["json_bytes"]
    assert frames["ratio"] == frames["csv_seconds"] / frames["json_seconds"]
    assert by_key["runs"]["values"]["s3_requests"] > 0
    assert by_key["idle"]["values"]["s3_requests"] is not None
    assert saved["machine"]["cores"] >= 1 and saved["machine"]["postgresql"]

    assert "| figure | measured | reference | ratio | target | met? |" in table
    # --output: the same Markdown, heading and table, in a file.
    assert written.read_text().strip() == table.strip() == saved["markdown"].strip()
    # The header, its rule, a row per figure.
    assert sum(line.startswith("|") for line in table.splitlines()) == 2 + len(ROWS)

    # Every scratch database it created was dropped.
    with psycopg.connect(f"{server}/postgres") as admin:
        left = admin.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s",
            (f"cascade\\_bench\\_%\\_{bench.pid}\\_%",),
        ).fetchall()
    assert left == []


def test_the_simulator_log_bench_runs_at_a_small_scale(tmp_path):
    """bench/simlog.py: a few MB built from halUW's real log, one reading; the reader read
    every block grep counted."""
    real_log = shared_fixture("real-sim-logs", "halUW__benchmark_1_stream_clean.log")
    results = tmp_path / "simlog.json"
    args = ["--scale", "small", "--repeat", "1", "--json", str(results), "--real-log", str(real_log)]
    bench = run_bench("bench.simlog", *args, timeout=300)
    rows = json.loads(results.read_text())["rows"]
    assert [row["file"] for row in rows] == ["log", "log.gz"]
    for row in rows:
        assert row["blocks"] == row["uids"] > 50  # a block per kernel, each its own uid
        assert row["grep_seconds"] > 0 and row["reader_seconds"] > 0 and row["peak_rss"] > 0
    assert rows[1]["inflate_seconds"] > 0
    assert sum(line.startswith("| log") for line in bench.stdout.splitlines()) == 2
    # Closing 40,000 uids is linear, also when one block lists them all.
    uids_rows = json.loads(results.read_text())["uids_rows"]
    assert [(row["shape"], row["uids"]) for row in uids_rows] == [("each", 40_000), ("one", 40_000)]
    assert all(row["reader_seconds"] > 0 for row in uids_rows)


def test_the_pull_bench_runs_at_a_small_scale(tmp_path):
    """bench/pull.py: two small runs pulled through gunicorn; every byte arrived, and the server's
    worker grew by far less than what passed (the files went around it)."""
    results = tmp_path / "pull.json"
    bench = run_bench("bench.pull", "--scale", "small", "--json", str(results), timeout=600)
    rows = json.loads(results.read_text())["rows"]
    # The trace files' megabytes, and a few hundred bytes of stats, kernelslist and config.
    assert [row["bytes"] // 1_000_000 for row in rows] == [8, 32]
    for row in rows:
        assert row["seconds"] > 0 and row["worker_rss_before"] > 0
        assert row["worker_peak"] - row["worker_rss_before"] < row["bytes"] / 4
    assert sum(line.startswith("| pull-") for line in bench.stdout.splitlines()) == 2


def test_the_events_bench_times_both_modes_at_a_small_scale(tmp_path):
    """`bench.community.watch events`: moto's S3 and SQS, two runs a mode, each timed (the 3 s
    target is the bench table's to judge, not the suite's)."""
    results = tmp_path / "events.json"
    bench = run_bench(
        "bench.community.watch", "events", "--scale", "small", "--json", str(results), timeout=300
    )
    saved = json.loads(results.read_text())
    assert [len(saved["seconds"][mode]) for mode in ("events", "polling")] == [2, 2]
    assert all(seconds > 0 for mode in ("events", "polling") for seconds in saved["seconds"][mode])
    assert (
        sum(
            line.startswith("| S3 events") or line.startswith("| polling")
            for line in bench.stdout.splitlines()
        )
        == 2
    )


@pytest.mark.postgres("the bench makes scratch databases on the PostgreSQL server")
def test_the_community_seeder_stores_what_ingestion_would(server, tmp_path):
    """bench/community/data.py: each trace's kernel_count and kernels_without_totals are its
    launches', names and contexts are shared as KernelWriter shares them, the launches total."""
    from bench import common
    from bench.community import data

    with common.scratch_database(server, "seedtest") as url:
        common.manage("migrate", "--noinput", env=common.child_env(DATABASE_URL=url))
        seeded = data.seed(url, traces=400, launches=30_000, big_trace_launches=10_000)
        [(wrong_counts, wrong_without, launches, big, orphans, unnamed, out_of_order)] = common.query(
            url,
            """
            SELECT
              (SELECT count(*) FROM traces_trace t
               WHERE kernel_count <> (SELECT count(*) FROM traces_kernel k WHERE k.trace_key = t.key)),
              (SELECT count(*) FROM traces_trace t WHERE kernels_without_totals <>
               (SELECT count(*) FROM traces_kernel k WHERE k.trace_key = t.key AND k.total_insts IS NULL)),
              (SELECT count(*) FROM traces_kernel),
              (SELECT kernel_count FROM traces_trace WHERE id = %s),
              (SELECT count(*) FROM traces_kernel k WHERE NOT EXISTS
               (SELECT 1 FROM traces_kernelcontext c WHERE c.trace_key = k.trace_key AND c.index = k.context)),
              (SELECT count(*) FROM traces_kernel k WHERE NOT EXISTS
               (SELECT 1 FROM traces_kernelname n WHERE n.id = k.name_id)),
              (SELECT count(*) FROM traces_kernelcontext a JOIN traces_kernelcontext b
               ON a.trace_key = b.trace_key AND a.index < b.index AND (a.ctx, a.device) > (b.ctx, b.device))
            """,
            (seeded["big"],),
        )
    assert (wrong_counts, wrong_without, orphans, unnamed, out_of_order) == (0, 0, 0, 0, 0)
    assert launches == 30_000 and big == 10_000
    assert seeded["uploading"] == 100


@pytest.mark.postgres("the bench makes scratch databases on the PostgreSQL server")
def test_the_community_bench_takes_every_figure_at_the_tiny_scale(server, tmp_path):
    """`python -m bench community --scale tiny`: every figure taken, a row each in the table,
    the values behind them saved, every scratch database dropped."""
    results = tmp_path / "community.json"
    bench, table = run_server_bench(
        "community", "--scale", "tiny", "--server", server, "--json", str(results), timeout=900
    )
    saved = json.loads(results.read_text())
    for row in saved["rows"]:
        assert not row["measured"].startswith("not measured"), row
    assert set(saved["values"]) == {
        "seed",
        "list",
        "detail",
        "admin",
        "integrity",
        "events",
        "delete",
        "idle",
        "memory",
    }
    values = saved["values"]
    seeded = values["seed"]
    # What the seeder promises: the counts asked for, a quarter uploading, one big trace.
    assert (seeded["traces"], seeded["launches"], seeded["big_trace_launches"]) == (2_000, 200_000, 50_000)
    assert seeded["uploading"] == 500 and seeded["ready"] == 1_500
    assert seeded["big"] != seeded["tiny"]
    listed = values["list"]
    assert listed["traces"] == 2_000
    # The same rows as PostgreSQL's json_agg, give or take its spacing.
    assert 0.8 < listed["copy_list"]["bytes"] / listed["list"]["bytes"] < 1.3
    assert listed["list_gzip"]["bytes"] < listed["list"]["bytes"] / 4
    assert listed["list_zstd"]["bytes"] < listed["list"]["bytes"] / 4
    for figure in ("list", "page", "deep_page", "304", "page_304"):
        assert listed[figure]["seconds"] > 0, figure
    assert listed["rss"]["after"] >= listed["rss"]["before"] > 0
    # Every admin page answered, logged in through the login form.
    assert [page["page"] for page in values["admin"]][:2] == ["trace list", "trace list, state ready"]
    assert len(values["admin"]) == 9
    for page in values["admin"]:
        assert page["seconds"] > 0 and page["bytes"] > 0, page
    assert values["delete"]["launches_left_of_deleted_traces"] == 0
    idle = values["idle"]
    assert (idle["traces"], idle["objects"]) == (1_000, 3_000)
    # The run folders (one page), then a HEAD and a simulations/ listing per ready run.
    assert idle["without_events"]["s3_requests"] == 1 + 2 * 1_000
    assert idle["polling_watch"]["s3_requests"] == 1 + 3  # the run folders, the prefix's 3 pages
    assert (idle["with_events"]["s3_requests"], idle["with_events"]["s3_requests_most"]) == (1, 1)
    assert idle["with_events"]["lap_passes"] == 3  # 3,000 keys, 1,000 a page
    assert idle["target_met"]
    assert sorted(values["memory"]) == ["2000", "4000", "8000"]
    # A row per figure: 5 for the list, 1 detail, 9 admin pages, 1 each for the rest.
    assert sum(line.startswith("| ") for line in table.splitlines()) == 1 + 5 + 1 + 9 + 5
    with psycopg.connect(f"{server}/postgres") as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s",
            (f"cascade\\_bench\\_%\\_{bench.pid}\\_%",),
        ).fetchall()
    assert left == []


def test_the_blank_lines_bench_prints_a_row_per_workload():
    """`bench.simlog blank-lines`: a few kB of each workload, beside real rows."""
    bench = run_bench("bench.simlog", "blank-lines", "--mb", "0.05", "--repeat", "1", timeout=120)
    rows = [line for line in bench.stdout.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 7 and rows[0].startswith("| real rows |") and rows[0].endswith("| 1.00x |")


@pytest.mark.parametrize(
    "module",
    [
        "bench.reads analysis",
        "bench.reads replica",
        "bench.load",
        "bench.community.delete",
        "bench.community.data",
    ],
)
def test_each_other_bench_parses_its_arguments(module):
    """The benches too large for the suite (or needing a running server) import and parse
    their command line; docs/performance.md gives their smallest runs."""
    assert run_bench(*module.split(), "--help").stdout.startswith("usage:")


@pytest.mark.postgres("the bench makes a scratch database on the PostgreSQL server")
def test_the_hostile_bench_times_both_phases_and_says_what_became_of_each_upload(server):
    """bench/hostile.py, briefly: every hostile log, marker and body refused or failed, the real
    log ready (the figures are the bench's to print, not the suite's to judge)."""
    bench = run_bench("bench.hostile", "--seconds", "2", "--clients", "1", "--server", server, timeout=600)
    lines = bench.stdout.splitlines()
    assert sum(line.strip().startswith(("alone:", "during hostile uploads:")) for line in lines) == 2
    outcomes = {line.split()[0]: line for line in lines if line.startswith("  ") and " s  " in line}
    assert outcomes.pop("control").endswith("ready")
    assert all(
        outcome.split(" s  ")[1].startswith("400: ")
        for name, outcome in outcomes.items()
        if name.startswith("body-")
    )
    failed = {name for name, outcome in outcomes.items() if outcome.split(" s  ")[1].startswith("failed: ")}
    assert failed == {name for name in outcomes if not name.startswith("body-")} and len(failed) == 6
