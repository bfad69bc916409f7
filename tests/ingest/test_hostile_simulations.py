"""Simulations that try to hurt other users: each fails alone, in one sentence, on its first
pass (never retried as Cascade's own error), and no stored row breaks a list.

A `simulation.json` whose `cover` is 1e20, or a log whose `gpu_sim_cycle` is 2^63 - 1, was
`ready`, then every list of simulations a 500 ("Integer exceeds 64-bit range"); a core clock of
1e-300 MHz failed as "the database refused this trace's data"; an integer of 4,300 digits, a
number over 1e308 or a marker nested 1,000 deep were retried three times as an internal error; a
gzip log cut short was read as a killed run, `ready`.
"""

import gzip
import json
import lzma

import pytest

from ingest import passes
from ingest.simulations import within_cpu_budget
from simulations.errors import SimulationInputError
from simulations.models import CURRENT_SIMULATION_READER_VERSION, Simulation
from simulations.simlog import MAX_COUNT
from tests.helpers import PREFIX, TEST_BUCKET
from tests.ingest.support import (
    GOOD,
    GOOD_LAUNCHES,
    OK_MARKER,
    hal_trace,
    real_log,
    simulation,
    trace_of,
    upload_simulation,
)
from traces.models import TraceState


@pytest.fixture
def good_run(upload):
    upload(
        "run", trace_of([(k, n) for _, k, n in GOOD_LAUNCHES], {1: 100, 2: 200}), metadata={"status": "ok"}
    )


def one_sentence(text: str) -> bool:
    return text.count(". ") == 0 and "\n" not in text and "Traceback" not in text


def read_alone(s3, marker: bytes | None = None, log: bytes = GOOD, log_name: str = "sim.log") -> Simulation:
    """The hostile simulation beside a good one, one pass: the hostile one's state and error."""
    upload_simulation(s3, "run", "good", GOOD)
    folder = f"{PREFIX}run/simulations/hostile/"
    s3.put_object(Bucket=TEST_BUCKET, Key=folder + log_name, Body=log)
    body = marker if marker is not None else json.dumps(OK_MARKER).encode()
    s3.put_object(Bucket=TEST_BUCKET, Key=folder + "simulation.json", Body=body)
    passes.poll_bucket()
    assert simulation("run", "good").state == TraceState.READY
    hostile = simulation("run", "hostile")
    assert hostile.state == TraceState.FAILED, hostile.state
    assert one_sentence(hostile.error), hostile.error
    return hostile


# --- simulation.json: numbers bounded where they are read ------------------------------------

COVER = '"selection": {"select": "unique", "cover": %s}'


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("marker", "error"),
    [
        (
            COVER % "1e20",
            'simulation.json: "selection": "cover" must be a number above 0 and at most 1, or null, '
            "not 1e+20",
        ),
        (
            COVER % "0",
            'simulation.json: "selection": "cover" must be a number above 0 and at most 1, or null, not 0',
        ),
        (
            COVER % "1.5",
            'simulation.json: "selection": "cover" must be a number above 0 and at most 1, or null, not 1.5',
        ),
        (
            '"core_clock_mhz": 1e-300',
            'simulation.json: "core_clock_mhz" must be a number of MHz from 10 to 100000, not 1e-300',
        ),
        ('"core_clock_mhz": 1e309', "simulation.json is not valid JSON: the number 1e309 is too large"),
        (COVER % "1e309", "simulation.json is not valid JSON: the number 1e309 is too large"),
        ('"core_clock_mhz": ' + "9" * 4300, "simulation.json is not valid JSON: an integer of 4300 digits"),
        (COVER % ("9" * 400), "simulation.json is not valid JSON: an integer of 400 digits"),
        ('"notes": ' + "[" * 1000 + "]" * 1000, "simulation.json is nested too deeply to be a marker"),
    ],
    ids=[
        "cover-1e20",
        "cover-0",
        "cover-1.5",
        "clock-1e-300",
        "clock-1e309",
        "cover-1e309",
        "clock-4300-digits",
        "cover-400-digits",
        "nested-1000",
    ],
)
def test_a_markers_number_out_of_its_range_fails_the_simulation_in_one_sentence(s3, good_run, marker, error):
    hostile = read_alone(s3, ('{"status": "ok", ' + marker + "}").encode())
    assert hostile.error.startswith(error), hostile.error


@pytest.mark.django_db
def test_a_cover_of_1_and_a_real_clock_are_read(s3, good_run):
    marker = {**OK_MARKER, "core_clock_mhz": 1755.0, "selection": {"select": "unique", "cover": 1}}
    upload_simulation(s3, "run", "fine", GOOD, marker=marker)
    passes.poll_bucket()
    fine = simulation("run", "fine")
    assert (fine.state, fine.core_clock_mhz, fine.run["selection"]["cover"]) == (TraceState.READY, 1755.0, 1)


# --- The log: counts within 64 bits, a clock within reason, a truncated stream ---------------


@pytest.mark.django_db
def test_a_log_whose_gpu_sim_cycle_is_2_63_minus_1_fails_naming_its_line(s3, good_run):
    log = GOOD.replace(b"gpu_sim_cycle = 100\n", b"gpu_sim_cycle = 9223372036854775807\n")
    hostile = read_alone(s3, log=log)
    assert hostile.error == (
        f"line 9: gpu_sim_cycle 9223372036854775807 is more than {MAX_COUNT}, the most Cascade reads"
    ), hostile.error


@pytest.mark.django_db
def test_a_logs_clock_of_a_billionth_of_a_mhz_is_not_a_clock(s3, good_run):
    log = GOOD.replace(b"-gpgpu_clock_domains 1000.0:", b"-gpgpu_clock_domains 0.000000001:")
    hostile = read_alone(s3, log=log)
    assert hostile.error == (
        "the log's core clock (1e-09 MHz, -gpgpu_clock_domains) is not a clock (from 10 to 100000 MHz)"
    ), hostile.error


@pytest.mark.django_db
@pytest.mark.parametrize("compress", ["gz", "xz"])
def test_a_real_log_compressed_and_cut_says_the_compressed_log_is_truncated(s3, upload, compress):
    """A third of the stream: what it holds reads as a killed run, which it is not."""
    log = real_log("halUW__benchmark_1_stream_clean.log")
    upload("hal", hal_trace(log), metadata={"status": "ok"})
    packed = gzip.compress(log) if compress == "gz" else lzma.compress(log)
    upload_simulation(s3, "hal", "cut", packed[: len(packed) // 3], log_name=f"sim.log.{compress}")
    upload_simulation(s3, "hal", "whole", packed, log_name=f"sim.log.{compress}")
    passes.poll_bucket()
    cut = simulation("hal", "cut")
    what = "gzip" if compress == "gz" else "xz"
    assert (cut.state, cut.error) == (
        TraceState.FAILED,
        f"sim.log.{compress}: the compressed log is truncated (its {what} stream ends before its end marker)",
    )
    assert simulation("hal", "whole").state == TraceState.READY


# --- A CPU budget per log, on a clock handed in -------------------------------------------------


class Clock:
    """CPU seconds that advance by `step` each time they are read."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_the_chunks_stop_once_their_reading_has_cost_more_than_the_budget():
    chunks = within_cpu_budget(iter([b"a" * 10] * 100), 3, clock=Clock(1.0))
    taken = []
    with pytest.raises(SimulationInputError) as raised:
        for chunk in chunks:
            taken.append(chunk)
    assert len(taken) == 3  # read at 1, 2 and 3 s after the start; the fourth at 4 s is over
    assert str(raised.value) == (
        "the log took more than CASCADE_SIM_LOG_CPU_SECONDS (3 s) of CPU time to read, "
        "so it was not read past byte 30"
    )


def test_a_log_read_within_the_budget_is_read_whole():
    assert list(within_cpu_budget(iter([b"x"] * 5), 10, clock=Clock(1.0))) == [b"x"] * 5


@pytest.mark.django_db
def test_a_log_over_its_cpu_budget_fails_its_simulation_saying_so(s3, good_run, settings, monkeypatch):
    settings.CASCADE_SIM_LOG_CPU_SECONDS = 1
    monkeypatch.setattr("ingest.simulations.cpu_clock", Clock(2.0))
    upload_simulation(s3, "run", "slow", GOOD)
    passes.poll_bucket()
    slow = simulation("run", "slow")
    assert (slow.state, slow.error) == (
        TraceState.FAILED,
        "the log took more than CASCADE_SIM_LOG_CPU_SECONDS (1 s) of CPU time to read, "
        "so it was not read past byte 0",
    )


# --- A list never fails for one row stored before its numbers were bounded ---------------------


@pytest.mark.django_db
def test_rows_stored_with_numbers_past_64_bits_do_not_break_the_lists(s3, good_run, api):
    """What earlier versions stored: PostgreSQL's jsonb gives 1e20 back as the integer
    100000000000000000000, which the encoder could not write: a 500 for every token."""
    upload_simulation(s3, "run", "good", GOOD)
    passes.poll_bucket()
    huge = 10**20
    Simulation.objects.filter(trace_id="run", name="good").update(
        run={"selection": {"select": "unique", "cover": huge}},
        metrics={"mape": huge, "sim_total_ns": 3 * 2**63, "kernels_compared": 2},
        left_out={"kernels": 10**400, "why": "x"},
    )
    for path in ("/api/simulations", "/api/traces/run/simulations", "/api/traces/run/simulations/good"):
        answer = api.get(path)
        assert answer.status_code == 200, path
        body = json.loads(b"".join(answer.streaming_content) if answer.streaming else answer.content)
        summary = body[0] if isinstance(body, list) else body
        assert summary["run"]["selection"]["cover"] == 1e20
        assert (summary["metrics"]["mape"], summary["metrics"]["sim_total_ns"]) == (1e20, 3.0 * 2**63)
        assert summary["left_out"]["kernels"] is None  # past a float's range


@pytest.mark.django_db
def test_a_simulation_an_older_reader_let_through_is_read_again_and_fails(s3, good_run, monkeypatch):
    log = GOOD.replace(b"gpu_sim_cycle = 100\n", b"gpu_sim_cycle = 9223372036854775807\n")
    with monkeypatch.context() as older:  # the reader before counts were bounded
        older.setattr("simulations.simlog.MAX_COUNT", 10**20)
        upload_simulation(s3, "run", "huge", log)
        passes.poll_bucket()
    assert simulation("run", "huge").state == TraceState.READY
    # As version 2 left it: its fingerprint covered that version.
    Simulation.objects.filter(name="huge").update(reader_version=2, parsed_fingerprint="v2")
    passes.poll_bucket()
    huge = simulation("run", "huge")
    assert (huge.state, huge.reader_version) == (TraceState.FAILED, CURRENT_SIMULATION_READER_VERSION)
    assert huge.error.startswith("line 9: gpu_sim_cycle 9223372036854775807 is more than")
