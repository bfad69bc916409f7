"""A simulation is seen at once, and a folder waiting for its marker costs nothing.

- With plain polling, a ready trace that received files in its `simulations/` folder is found
  within one poll (ingest.sweep.watch_pages), at 1,000 ready traces, for a few listing pages,
  whatever the ready recheck (CASCADE_READY_RECHECK_SECONDS) says.
- A folder holding only `sim.log` waits (`waiting for simulation.json`) and is decided on again
  only when its listing changes: no UPDATE, no listing of its own, pass after pass.
- With S3 events, the marker's event has it read in that one pass.
"""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from ingest import passes
from ingest.simulations import read_simulations_now
from simulations.models import CURRENT_SIMULATION_READER_VERSION, Simulation
from tests.helpers import PREFIX, TEST_BUCKET
from tests.ingest.support import (
    GOOD,
    GOOD_LAUNCHES,
    register_ready,
    simulation,
    trace_files,
    upload_run,
    upload_simulation,
)
from traces.models import Trace, TraceState

WAITING = "waiting for simulation.json"


def put(s3, key: str, body: bytes) -> None:
    s3.put_object(Bucket=TEST_BUCKET, Key=PREFIX + key, Body=body)


@pytest.mark.django_db
def test_a_simulation_landing_on_one_of_1000_ready_traces_is_read_within_one_poll(s3, upload, settings):
    settings.CASCADE_S3_PAGE_SIZE = 1000
    others = [f"run-{n:04d}" for n in range(999)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda run_id: upload_run(s3, run_id), others))
    register_ready(others)
    upload("target", trace_files(None, GOOD_LAUNCHES), metadata={"status": "ok"})
    passes.poll_bucket()
    assert Trace.objects.filter(state=TraceState.READY).count() == 1000
    # No ready recheck is sent: the watch, which saw the whole prefix, stands for them.
    assert not Trace.objects.filter(pk__in=others, recheck_after__isnull=False).exists()
    idle = passes.poll_bucket()
    # The run folders (1,000: one page) and the prefix's keys (about 2,000: three pages).
    assert idle.cost.s3_requests <= 1 + 3

    upload_simulation(s3, "target", "late", GOOD)  # after its trace is ready
    found = passes.poll_bucket()
    sim = simulation("target", "late")
    assert (sim.state, sim.kernels_compared) == (TraceState.READY, 2), sim.error
    # The watch's pages, then the run's simulations/ listing and its two files.
    assert found.cost.s3_requests <= idle.cost.s3_requests + 3
    print(
        f"\nidle pass at 1,000 ready traces: {idle.cost.s3_requests} S3 requests; found: {found.cost.s3_requests}"
    )


@pytest.mark.django_db
def test_without_the_watch_a_late_simulation_waits_for_the_ready_recheck(s3, upload, settings):
    """The reference the watch improves on (570 s in the demo)."""
    settings.CASCADE_POLL_WATCH_PAGES = 0
    upload("target", trace_files(None, GOOD_LAUNCHES), metadata={"status": "ok"})
    passes.poll_bucket()
    upload_simulation(s3, "target", "late", GOOD)
    passes.poll_bucket()
    assert not Simulation.objects.filter(name="late").exists()


@pytest.mark.django_db
def test_a_folder_waiting_for_its_marker_is_looked_at_again_only_when_its_listing_changes(
    s3, upload, settings, django_assert_max_num_queries, api
):
    upload("target", trace_files(None, GOOD_LAUNCHES), metadata={"status": "ok"})
    passes.poll_bucket()
    put(s3, "target/simulations/waits/sim.log", GOOD)
    passes.poll_bucket()
    sim = simulation("target", "waits")
    assert (sim.state, sim.reason) == (TraceState.UPLOADING, WAITING)
    body = api.get("/api/traces/target/simulations/waits").json()
    assert (body["state"], body["reason"]) == ("uploading", WAITING)

    idle = passes.poll_bucket()
    again = passes.poll_bucket()
    assert simulation("target", "waits").updated_at == sim.updated_at  # no UPDATE
    assert again.cost.s3_requests == idle.cost.s3_requests == 2  # the run folders, the watch's page
    assert again.simulation_changes == []

    put(s3, "target/simulations/waits/simulation.json", json.dumps({"status": "ok"}).encode())
    passes.poll_bucket()
    sim = simulation("target", "waits")
    assert (sim.state, sim.reason, sim.kernels_compared) == (TraceState.READY, None, 2), sim.error


@pytest.mark.django_db
def test_read_simulations_now_reads_a_run_without_a_pass(s3, upload, settings):
    """What the upload's /complete route calls: the run's simulations read at once."""
    settings.CASCADE_POLL_WATCH_PAGES = 0
    upload("target", trace_files(None, GOOD_LAUNCHES), metadata={"status": "ok"})
    passes.poll_bucket()
    upload_simulation(s3, "target", "now", GOOD)
    changes = read_simulations_now("target")
    assert [(c.name, c.new_state) for c in changes] == [("now", TraceState.READY)]
    assert simulation("target", "now").kernels_compared == 2


@pytest.mark.django_db
def test_with_events_the_markers_event_has_it_read_in_that_pass(queue, s3, upload):
    from tests.ingest.support import drain

    upload("target", trace_files(None, GOOD_LAUNCHES), metadata={"status": "ok"})
    drain(queue)
    assert Trace.objects.get(pk="target").state == TraceState.READY
    put(s3, "target/simulations/evented/sim.log", GOOD)
    drain(queue)
    assert (simulation("target", "evented").state, simulation("target", "evented").reason) == (
        TraceState.UPLOADING,
        WAITING,
    )
    put(s3, "target/simulations/evented/simulation.json", json.dumps({"status": "ok"}).encode())
    batches = drain(queue)
    assert simulation("target", "evented").state == TraceState.READY
    assert any(batch.simulation_changes for batch in batches)


@pytest.mark.django_db
def test_a_simulation_an_older_reader_read_is_read_again_once(s3, upload):
    """What a log means changed (a log that simulated nothing was ready; docs/decisions/0006): the
    simulations read before are read again at the next pass, then left alone."""
    upload("target", trace_files(None, GOOD_LAUNCHES), metadata={"status": "ok"})
    passes.poll_bucket()
    upload_simulation(s3, "target", "old", GOOD)
    passes.poll_bucket()
    # As version 1 left it: its fingerprint covered that version.
    Simulation.objects.filter(name="old").update(
        reader_version=1, kernels_compared=0, parsed_fingerprint="v1"
    )
    passes.poll_bucket()
    sim = simulation("target", "old")
    assert (sim.kernels_compared, sim.reader_version) == (2, CURRENT_SIMULATION_READER_VERSION)
    assert passes.poll_bucket().simulation_changes == []
