"""S3 misbehaving between Cascade and the bucket: no fault loses or duplicates a kernel.

Each scenario uploads several generated runs straight into moto, then runs
`manage.py ingest_traces` (in this process, on this test's database) through an
S3FaultProxy that answers as the scenario's script says, pass after pass, until every trace
is ready or MAX_PASSES have run. It ends with `runs.assert_every_kernel_once`: every trace
ready with exactly the launches counted in its files, none stored twice, and the API never
answered 5xx or invalid JSON, after any pass.

What retries what: botocore retries, for every S3 call, 500s, 503s (SlowDown with a longer
backoff), connections closed or reset (also in the middle of a listing's body) and read
timeouts, up to the attempts Cascade's client allows (`s3_attempts()`; the scenarios are
scripted in those terms, so they hold whatever the setting). A stats file, kernelslist or
metadata.json whose body breaks off is not retried by botocore (the caller holds a stream):
the trace's ingestion fails for this pass, its kernels' transaction rolls back, and the next
pass parses it whole.
"""

import io
from dataclasses import dataclass, field

import pytest
from botocore.config import Config
from django.core.management import CommandError, call_command

from ingest import bucket
from tests.faults import proxies
from tests.faults.runs import (
    SEVERAL,
    all_ready,
    api_problems,
    assert_every_kernel_once,
    generate,
    generate_several,
    upload,
)
from tests.helpers import point_traces_storage_at
from traces.models import Kernel, Trace, TraceState

pytestmark = pytest.mark.slow

MAX_PASSES = 6
LISTING = r"list-type=2"
STATS = r"^GET \S*/traces/stats"
KERNELSLIST = r"^GET \S*/traces/kernelslist"
METADATA = r"^GET \S*/metadata\.json"
TIMING = r"^GET \S*/timing\.csv"
TIMELINE = r"^GET \S*/timeline\.json"
# The re-upload check of a ready trace: one HEAD of its metadata.json.
HEAD_OF_ONE_READY = r"^HEAD \S*/opt-graphs/metadata\.json"


@dataclass
class Passes:
    count: int = 0
    errors: list[str] = field(default_factory=list)  # what each failed pass raised
    api_problems: list[str] = field(default_factory=list)


def passes_until_ready(runs, api, *args: str, max_passes: int = MAX_PASSES) -> Passes:
    """`ingest_traces` again and again (at most `max_passes`), checking the API after each pass."""
    passes = Passes()
    while passes.count < max_passes:
        passes.count += 1
        try:
            call_command("ingest_traces", *args, stdout=io.StringIO(), stderr=io.StringIO())
        except Exception as error:  # noqa: BLE001 - recorded: a scenario asserts what it expects
            passes.errors.append(f"{type(error).__module__}.{type(error).__name__}: {error}")
        passes.api_problems += api_problems(api, runs)
        if all_ready(runs):
            break
    return passes


@pytest.fixture
def runs(s3, tmp_path):
    several = generate_several(tmp_path)
    for run in several:
        upload(s3, run)
    return several


def s3_attempts() -> int:
    """Tries in all that Cascade's S3 client makes of one call before it gives up."""
    return bucket.client().meta.config.retries.get("total_max_attempts", 3)


def assert_fired(faults: list[proxies.Fault], proxy: proxies.S3FaultProxy) -> None:
    """Every fault of the script was used up: the scenario tested what it says."""
    for fault in faults:
        seen = "\n".join(f"{e.outcome:>9} {e.request[:120]}" for e in proxy.exchanges)
        assert fault.fired == fault.times, (
            f"{fault.kind} {fault.match!r}: {fault.fired}/{fault.times}\n{seen}"
        )


COMMAND_RETRIES = "django.core.management.base.CommandError: some traces could not be ingested"
COMMAND_CANNOT_LIST = "django.core.management.base.CommandError: cannot list the bucket"


def test_internal_errors(db, runs, s3_proxy, api, settings):
    """500 InternalError: absorbed by botocore's retries, except on one stats file, where they
    use up every attempt: that trace waits for the next pass."""
    settings.CASCADE_S3_THREADS = 1  # the script's errors meet one request after another
    faults = s3_proxy.script(
        proxies.internal_error(LISTING, times=2),
        proxies.internal_error(METADATA, times=2),
        proxies.internal_error(STATS, times=s3_attempts() + 2),
        proxies.internal_error(KERNELSLIST, times=1),
        proxies.internal_error(TIMING, times=1),
        proxies.internal_error(TIMELINE, times=s3_attempts()),
    )
    passes = passes_until_ready(runs, api)
    assert_fired(faults, s3_proxy)
    assert passes.count == 2, passes
    assert [error[: len(COMMAND_RETRIES)] for error in passes.errors] == [COMMAND_RETRIES]
    assert passes.api_problems == []
    assert_every_kernel_once(api, runs)


def test_an_outage_then_recovery(db, runs, s3_proxy, api):
    """Every request fails for a while (S3 down): whole passes fail with one clear line, and
    the first pass after the outage ingests everything."""
    faults = s3_proxy.script(proxies.internal_error(r".", times=2 * s3_attempts() + 2))
    passes = passes_until_ready(runs, api)
    assert_fired(faults, s3_proxy)
    assert passes.count == 3, passes
    assert [error[: len(COMMAND_CANNOT_LIST)] for error in passes.errors] == [COMMAND_CANNOT_LIST] * 2
    assert passes.api_problems == []
    assert_every_kernel_once(api, runs)


def test_slow_down(db, runs, s3_proxy, api):
    """503 SlowDown (S3's throttling) on listings and reads: botocore backs off and retries."""
    faults = s3_proxy.script(
        proxies.slow_down(LISTING, times=3),
        proxies.slow_down(r"^GET \S*/traces/", times=4),
        proxies.slow_down(METADATA, times=1),
    )
    passes = passes_until_ready(runs, api)
    assert_fired(faults, s3_proxy)
    assert passes.api_problems == []
    assert_every_kernel_once(api, runs)


def test_connections_reset_mid_body(db, runs, s3_proxy, api):
    """A TCP reset halfway through an answer's body: of stats files (one of them a ranged GET of
    the header), a kernelslist, a metadata.json, a timing.csv, a timeline.json and listings.
    Not retried by botocore once the head has arrived (but for listings): the pass fails those
    traces, the next pass parses them whole."""
    faults = s3_proxy.script(
        proxies.reset_mid_body(STATS, times=3),
        proxies.reset_mid_body(KERNELSLIST, times=1),
        proxies.reset_mid_body(METADATA, times=1),
        proxies.reset_mid_body(TIMING, times=1),
        proxies.reset_mid_body(TIMELINE, times=1),
        proxies.reset_mid_body(LISTING, times=2),
    )
    passes = passes_until_ready(runs, api)
    assert_fired(faults, s3_proxy)
    assert passes.count >= 2, passes
    assert passes.api_problems == []
    assert_every_kernel_once(api, runs)


def test_stalls(db, runs, s3_proxy, api):
    """Stalls shorter than the client's timeouts: a server that accepts, says nothing for 2 s,
    then hangs up (botocore retries); one that answers 2 s late; and one that stops 2 s in the
    middle of a body, then resets."""
    faults = s3_proxy.script(
        proxies.stall(STATS, seconds=2, times=2, then="close"),
        proxies.stall(METADATA, seconds=2, times=1, then="forward"),
        proxies.reset_mid_body(KERNELSLIST, times=1, pause=2),
    )
    passes = passes_until_ready(runs, api)
    assert_fired(faults, s3_proxy)
    assert passes.api_problems == []
    assert_every_kernel_once(api, runs)


def test_stalls_longer_than_the_read_timeout(db, runs, s3_proxy, api, settings):
    """Stalls longer than the client's read timeout (CASCADE_S3_READ_TIMEOUT), shortened to 1 s
    here to make the point in seconds: the read times out and botocore retries; on the stats
    file that stalls every attempt, the trace waits for the next pass."""
    settings.CASCADE_S3_THREADS = 1  # the script's stalls meet one request after another
    config = bucket.client().meta.config.merge(Config(connect_timeout=1, read_timeout=1))
    point_traces_storage_at(settings, s3_proxy.url, client_config=config)
    faults = s3_proxy.script(
        proxies.stall(LISTING, seconds=3, times=1),
        proxies.stall(STATS, seconds=3, times=s3_attempts() + 1),
    )
    passes = passes_until_ready(runs, api)
    assert_fired(faults, s3_proxy)
    assert passes.count == 2, passes
    assert passes.api_problems == []
    assert_every_kernel_once(api, runs)


def test_an_interrupted_reparse_keeps_the_old_kernels(db, runs, s3_proxy, api):
    """`--reparse` of ready traces cut short by resets: the kernels stored before stay in the
    database (one transaction replaces them), and the next pass parses again."""
    assert passes_until_ready(runs, api).errors == []
    before = dict(Trace.objects.values_list("id", "kernel_count"))
    faults = s3_proxy.script(proxies.reset_mid_body(STATS, times=len(runs) + 2))
    with pytest.raises(CommandError, match="could not be ingested"):
        call_command("ingest_traces", "--reparse", stdout=io.StringIO(), stderr=io.StringIO())
    for run in runs:
        assert Kernel.objects.filter(trace_id=run.run_id).count() == before[run.run_id], run.run_id
    assert set(Trace.objects.values_list("state", flat=True)) == {TraceState.PARSING}
    assert api_problems(api, runs) == []
    passes = passes_until_ready(runs, api)
    assert_fired(faults, s3_proxy)
    assert passes.api_problems == []
    assert_every_kernel_once(api, runs)


def test_a_failing_recheck_of_a_ready_trace(db, runs, s3, s3_proxy, api, tmp_path, settings):
    """The HEAD that checks a ready trace for a re-upload fails every attempt, once: that pass
    fails, the ready traces keep their kernels, and the next pass ingests the new run."""
    settings.CASCADE_READY_RECHECK_SECONDS = 0  # every pass checks every ready trace
    settings.CASCADE_POLL_WATCH_PAGES = 0  # the recheck's HEADs, not the watch's pages
    assert passes_until_ready(runs, api).errors == []
    newcomer = generate(tmp_path, "newcomer", SEVERAL["legacy"])
    upload(s3, newcomer)
    faults = s3_proxy.script(proxies.internal_error(HEAD_OF_ONE_READY, times=s3_attempts()))
    passes = passes_until_ready([newcomer], api)
    assert_fired(faults, s3_proxy)
    assert passes.count == 1, passes  # the ready trace is skipped, the newcomer parsed
    assert passes.api_problems == []
    assert_every_kernel_once(api, [*runs, newcomer])


def test_a_ready_trace_that_cannot_be_rechecked_does_not_stop_new_runs(
    db, runs, s3, s3_proxy, api, tmp_path, settings
):
    """An object the bucket owner may list but not read (another account's upload without
    bucket-owner-full-control, a policy on one prefix): its trace's HEAD is refused for good."""
    settings.CASCADE_READY_RECHECK_SECONDS = 0  # every pass checks every ready trace
    settings.CASCADE_POLL_WATCH_PAGES = 0  # the recheck's HEADs, not the watch's pages
    assert passes_until_ready(runs, api).errors == []
    newcomer = generate(tmp_path, "newcomer", SEVERAL["legacy"])
    upload(s3, newcomer)
    s3_proxy.script(proxies.access_denied(HEAD_OF_ONE_READY, times=1000))
    passes = passes_until_ready([newcomer], api, max_passes=3)
    assert passes.api_problems == []
    assert_every_kernel_once(api, [*runs, newcomer])
