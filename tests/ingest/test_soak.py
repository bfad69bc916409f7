"""A soak: `manage.py ingest_traces --watch`, a real process, over a bucket holding
one run for each way a run used to wedge ingestion, and a healthy one, for ten passes and more.

Each bad run must end `failed` with its reason in the user's terms after at most
CASCADE_PARSE_ATTEMPTS tries (a timeline of more steps than the column holds is not used and the
trace is `ready`, its `timing_error` saying why, as for any timeline that cannot be used), the
healthy run `ready`, and no bad run's files downloaded again once it failed. Downloads are
counted by moto's server (in this process) from its request log.
"""

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from tests.helpers import PREFIX, STATS_HEADER, VECADD_CTX, run_with_contexts, run_with_steps, stats_row
from traces.models import Trace, TraceState

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OK = {"status": "ok", "trace_gpu_arch": "sm_86"}
ATTEMPTS = 3
PASSES = 10
SETTLE_SECONDS = 240


def bad_runs() -> dict[str, tuple[dict, dict]]:
    """Run id -> (files, metadata.json): the hostile uploads' ways in, and a parse that breaks."""
    long_total = "9" * 4_301
    stats_ctx = f"traces/stats_ctx_{VECADD_CTX}"
    return {
        "steps-40000": (run_with_steps(40_000), OK),
        "nul-metadata": (
            {stats_ctx: STATS_HEADER + stats_row(1)},
            {**OK, "model": "opt\u0000125m", "layers": ["prefill\u0000", "decode"]},
        ),
        "contexts-32769": (run_with_contexts(32_769), OK),
        "long-totals": (
            {stats_ctx: STATS_HEADER + stats_row(1).replace("50066,50066", f"{long_total},1")},
            OK,
        ),
        # A kernelslist id of 5,000 digits: it used to raise where nothing expected it.
        "kernelslist-5000-digits": (
            {
                stats_ctx: STATS_HEADER + stats_row(1),
                f"traces/kernelslist_ctx_{VECADD_CTX}": f"kernel-{'7' * 5000}-ctx_{VECADD_CTX}.trace.xz\n",
            },
            OK,
        ),
    }


def downloads(s3_log, run_id: str) -> int:
    """GETs of the run's files other than metadata.json (listings are GETs of the bucket)."""
    return sum(not path.endswith("/metadata.json") for path in s3_log("GET", f"/{PREFIX}{run_id}/"))


class Watch:
    """`ingest_traces --watch` in its own process; counts the passes it reports."""

    def __init__(self, env: dict):
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "ingest_traces", "--watch", "--interval", "0.2"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.passes = 0
        self.output: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.output.append(line)
            if line.startswith("pass: "):
                self.passes += 1

    def wait_for_passes(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.passes < count:
            assert self.process.poll() is None, "".join(self.output[-40:])
            assert time.monotonic() < deadline, f"{self.passes} passes only\n" + "".join(self.output[-40:])
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.reader.join(timeout=5)


def settled(run_ids: list[str]) -> bool:
    states = dict(Trace.objects.filter(pk__in=run_ids).values_list("id", "state"))
    return len(states) == len(run_ids) and all(
        state in (TraceState.FAILED, TraceState.READY) for state in states.values()
    )


def test_no_run_wedges_the_watching_poller(transactional_db, upload, vecadd_files, child_env, s3_log):
    runs = bad_runs()
    for run_id, (files, metadata) in runs.items():
        upload(run_id, files, metadata=metadata)
    upload("healthy", vecadd_files, metadata=OK)
    every = [*runs, "healthy"]

    # Two parse processes while two runs or more are to parse: the policy holds in both.
    env = {
        "CASCADE_PARSE_ATTEMPTS": str(ATTEMPTS),
        "CASCADE_PARSE_PROCESSES": "2",
        "CASCADE_PARSES_PER_PROCESS": "1",
    }
    watch = Watch({**child_env, **env})
    try:
        deadline = time.monotonic() + SETTLE_SECONDS
        while not settled(every):
            assert watch.process.poll() is None, "".join(watch.output[-40:])
            assert time.monotonic() < deadline, (
                dict(Trace.objects.values_list("id", "state")),
                "".join(watch.output[-60:]),
            )
            time.sleep(0.2)
        settled_at = watch.passes
        downloaded = {run_id: downloads(s3_log, run_id) for run_id in runs}
        watch.wait_for_passes(max(PASSES, settled_at + 5), timeout=SETTLE_SECONDS)
        after = {run_id: downloads(s3_log, run_id) for run_id in runs}
    finally:
        watch.stop()

    traces = {trace.id: trace for trace in Trace.objects.all()}
    assert traces["healthy"].state == TraceState.READY and traces["healthy"].kernel_count == 1
    # Each in the user's terms (never "internal error"), decided at the first try.
    steps = traces["steps-40000"]
    assert steps.state == TraceState.READY and steps.kernel_count == 1
    assert not steps.has_step_timeline
    assert "40000 steps, more than 32768" in steps.timing_error
    expected_errors = {
        "nul-metadata": "metadata.json: 'model' holds a NUL character",
        "contexts-32769": "more than 32,768 contexts",
        "long-totals": f"traces/stats_ctx_{VECADD_CTX}: line 2: a number too long",
        "kernelslist-5000-digits": f"traces/kernelslist_ctx_{VECADD_CTX}: line 1: kernel id 7777",
    }
    for run_id, expected in expected_errors.items():
        trace = traces[run_id]
        assert trace.state == TraceState.FAILED, (run_id, trace.state, trace.error)
        assert trace.error.startswith(expected), (run_id, trace.error)
        assert trace.parse_attempts == 0, (run_id, trace.parse_attempts)
    assert after == downloaded, "a failed run's files are not downloaded again"
    # At most one download of each file a try.
    for run_id, (files, _) in runs.items():
        assert downloaded[run_id] <= ATTEMPTS * len(files), (run_id, downloaded[run_id])
    for run_id in runs:
        sys.stderr.write(
            f"{run_id}: {traces[run_id].state}: {traces[run_id].error or traces[run_id].timing_error}\n"
        )
    if connection.vendor == "postgresql":  # parse processes are PostgreSQL's (ingest.processes)
        assert any("parsing 6 traces in 2 processes" in line for line in watch.output), "".join(
            watch.output[:40]
        )
