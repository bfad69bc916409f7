"""Every simulation's state says what happened, in the simulator's own words.

The real logs are `shared_fixture("real-sim-logs")`'s `accel-sim-73f9fac__*.log`, one real run of
each way a run ends badly (SOURCES.txt there). What each should read as is decided HERE, by
regular expressions over the log's text (docs/formats.md#the-simulators-log says how each
failure looks), never by simulations/simlog.py: the simulator's fatal line and its number, the stat
blocks of the kernels that finished, how the log ends. The run totals are then checked against
a sum over those blocks.
"""

import json
import re

import pytest

from ingest import passes
from simulations.models import SimulatedKernel
from tests.helpers import shared_fixture
from tests.ingest.support import GOOD, GOOD_LAUNCHES, simulation, spec_of, trace_files, upload_simulation
from traces.models import TraceState

# The simulator's lines that say it cannot go on (accel-sim-simulator.md, "How each kind of
# failure looks"; "Trace files the simulator ... accept" for the assertions).
FATAL_LINES = [
    re.compile(rb"^unsupported binary version: \d+ *$", re.M),
    re.compile(rb"^xz: .*: No such file or directory *$", re.M),
    re.compile(rb"^GPGPU-Sim \*\* ERROR: Unknown Option: '[^']+' *$", re.M),
    re.compile(rb"^GPGPU-Sim uArch: ERROR \*\* deadlock detected: .*$", re.M),
    re.compile(rb"^.*Assertion .* failed\.? *$", re.M),
    # A kernel list it cannot open (accel-sim-framework 73f9fac, gpu-simulator/trace-parser/
    # trace_parser.cc:239, parse_commandlist_file: this line, then exit(1)).
    re.compile(rb"^Unable to open file: .*$", re.M),
]
DEADLOCK = re.compile(rb"^GPGPU-Sim uArch: ERROR \*\* deadlock detected", re.M)
EXIT = re.compile(rb"^GPGPU-Sim: \*\*\* exit detected \*\*\*$", re.M)
BREAK = re.compile(rb"^GPGPU-Sim: \*\* break due to reaching the maximum cycles", re.M)
# A finished kernel's block: a name, one uid, its cycles, then (later) its footer.
NAMED_BLOCK = re.compile(
    rb"^kernel_name = (\S+) *\nkernel_launch_uid = (\d+) *\n(?:.*\n)*?^gpu_sim_cycle = (\d+)\n", re.M
)
FOOTER = re.compile(rb"^gpgpu_simulation_time", re.M)
LAUNCHED = re.compile(rb"^launching kernel name: (\S+) uid: (\d+)", re.M)
HEADERS = re.compile(rb"^Header info loaded for kernel command : (\S+)$", re.M)
CLOCK = re.compile(rb"-gpgpu_clock_domains\s+([0-9.]+)")

CASES = [
    "sm90-unsupported",
    "missing-trace-file",
    "unknown-option",
    "max-cycle",
    "killed",
    "deadlock",
    "unable-to-open",
]
NO_TIMES = (
    "the trace has no measured kernel times: upload an Nsight Systems export or a timing file to compare"
)


def real(case: str) -> bytes:
    if case == UNABLE_TO_OPEN:
        return unable_to_open()
    return shared_fixture("real-sim-logs", f"accel-sim-73f9fac__{case}.log").read_bytes()


UNABLE_TO_OPEN = "unable-to-open"


def unable_to_open() -> bytes:
    """A release build given a kernel list it cannot open: the real sm90-unsupported run up to
    where the simulator opens its kernel list (after `performance model initialization
    complete.`, the last line before it reads its first kernel: accel-sim-framework 73f9fac
    gpu-simulator/accel-sim.cc's constructor initialises the model, then init() opens the list,
    accel-sim.h:41), then the line trace_parser.cc:239 prints for the `-trace` it was given."""
    log = shared_fixture("real-sim-logs", "accel-sim-73f9fac__sm90-unsupported.log").read_bytes()
    ready = b"GPGPU-Sim uArch: performance model initialization complete.\n"
    listing = re.search(rb"^-trace\s+(\S+)", log, re.M)[1]
    return log[: log.index(ready) + len(ready)] + b"Unable to open file: " + listing + b"\n"


def line_of(log: bytes, at: int) -> int:
    return log.count(b"\n", 0, at) + 1


def first_fatal(log: bytes) -> tuple[int, str] | None:
    found = [match for pattern in FATAL_LINES if (match := pattern.search(log))]
    if not found:
        return None
    match = min(found, key=lambda m: m.start())
    return line_of(log, match.start()), match[0].decode().strip()


def finished_blocks(log: bytes) -> dict[int, int]:
    """uid: gpu_sim_cycle of each named single-uid block followed by its footer."""
    return {int(m[2]): int(m[3]) for m in NAMED_BLOCK.finditer(log) if FOOTER.search(log, m.end())}


def expectation(log: bytes) -> dict:
    fatal = first_fatal(log)
    finished = finished_blocks(log)
    if DEADLOCK.search(log):
        stopped = "deadlock"
    elif BREAK.search(log):
        stopped = "max_cycles"
    elif fatal and not EXIT.search(log):
        stopped = "error"
    elif not EXIT.search(log):
        stopped = "killed"
    else:
        stopped = None
    launched = {int(uid): name.decode() for name, uid in LAUNCHED.findall(log)}
    headers = [path.decode() for path in HEADERS.findall(log)]
    return {
        "state": TraceState.READY if finished else TraceState.FAILED,
        "fatal": fatal,
        "stopped": stopped,
        "finished": finished,
        "unfinished": {
            uid: (headers[uid - 1], name) for uid, name in launched.items() if uid not in finished
        },
    }


def measured(kernel_id: int) -> int:
    return 1000 + 7 * kernel_id  # trace_files' timing.csv


def test_the_expectations_read_the_logs_as_their_sources_say():
    """A check of the test's own reading against SOURCES.txt's account of each run."""
    assert expectation(real("sm90-unsupported"))["fatal"][1] == "unsupported binary version: 90"
    assert expectation(real("missing-trace-file"))["fatal"][1].startswith("xz: ")
    assert expectation(real("unknown-option"))["fatal"][0] == 3
    unable = expectation(real(UNABLE_TO_OPEN))
    assert unable["fatal"][1].startswith("Unable to open file: /home/researcher/")
    assert (unable["stopped"], unable["state"]) == ("error", TraceState.FAILED)
    deadlock = expectation(real("deadlock"))
    assert (len(deadlock["finished"]), list(deadlock["unfinished"])) == (28, [29])
    assert sum(deadlock["finished"].values()) == 163571
    assert sum(expectation(real("max-cycle"))["finished"].values()) == 18451
    assert expectation(real("killed"))["finished"] == {1: 53918}


@pytest.mark.django_db
@pytest.mark.parametrize("case", CASES)
def test_each_real_bad_run_reads_as_its_text_says(s3, upload, case):
    log = real(case)
    expected = expectation(log)
    ctx, launches = spec_of(log)
    upload("run", trace_files(ctx, launches or [(1, 1, "_Z5firstv")]), metadata={"status": "ok"})
    upload_simulation(s3, "run", case, log)
    passes.poll_bucket()
    sim = simulation("run", case)

    assert sim.state == expected["state"], sim.error
    assert sim.stopped == expected["stopped"]
    if expected["fatal"] is not None:
        assert sim.fatal == {"line": expected["fatal"][0], "text": expected["fatal"][1]}
    else:
        assert sim.fatal is None
    if sim.state == TraceState.FAILED:
        line, text = expected["fatal"]
        assert sim.error.startswith("the log simulated no kernel")
        assert f"line {line}: {text}" in sim.error
        assert not SimulatedKernel.objects.filter(simulation=sim).exists()
        return
    # The pairs are the finished kernels, with their own cycles; the others are named, left out.
    kernel_of = {uid: kernel_id for uid, kernel_id, _ in launches}
    stored = dict(SimulatedKernel.objects.filter(simulation=sim).values_list("uid", "sim_cycles"))
    assert stored == expected["finished"]
    assert [(k["uid"], k["trace_file"], k["name"]) for k in sim.interrupted] == [
        (uid, path, name) for uid, (path, name) in sorted(expected["unfinished"].items())
    ]
    assert sim.left_out["kernels"] == len(expected["unfinished"])
    if expected["unfinished"]:
        assert sim.left_out["why"].startswith("did not finish")
    # Both sides of the run's totals over the finished kernels only.
    clock = float(CLOCK.search(log)[1])
    run_sim = sum(expected["finished"].values()) * 1000 / clock
    run_measured = sum(measured(kernel_of[uid]) for uid in expected["finished"])
    assert sim.metrics["run_sim_ns"] == pytest.approx(run_sim)
    assert sim.metrics["run_measured_ns"] == run_measured
    assert sim.metrics["run_error"] == pytest.approx((run_sim - run_measured) / run_measured * 100)
    assert sim.kernels_compared == len(expected["finished"])
    if case == "deadlock":
        assert sim.interrupted[0]["kernel_id"] == 35 and "reduce_kernel" in sim.interrupted[0]["name"]
        assert "deadlock" in sim.left_out["why"] and "line 46556" in sim.left_out["why"]


@pytest.mark.django_db
def test_the_deadlocked_step_reads_as_its_finished_kernels_give_in_the_api(s3, upload, api):
    log = real("deadlock")
    ctx, launches = spec_of(log)
    upload("run", trace_files(ctx, launches), metadata={"status": "ok"})
    upload_simulation(s3, "run", "step", log)
    passes.poll_bucket()
    body = api.get("/api/traces/run/simulations/step").json()
    finished = finished_blocks(log)
    assert (body["state"], body["stopped"], body["compared"]) == ("ready", "deadlock", len(finished))
    assert body["left_out"]["kernels"] == 1
    assert body["interrupted"][0]["uid"] == 29
    assert body["fatal"]["text"].startswith("GPGPU-Sim uArch: ERROR ** deadlock detected")


@pytest.mark.django_db
def test_a_trace_without_measured_times_is_ready_with_nothing_compared_and_says_why(s3, upload, api):
    log = real("killed")
    ctx, launches = spec_of(log)
    files = trace_files(ctx, launches)
    del files["timing.csv"]
    upload("run", files, metadata={"status": "ok"})
    upload_simulation(s3, "run", "untimed", log)
    passes.poll_bucket()
    sim = simulation("run", "untimed")
    assert (sim.state, sim.kernels_compared, sim.reason) == (TraceState.READY, 0, NO_TIMES)
    body = api.get("/api/traces/run/simulations/untimed").json()
    assert (body["compared"], body["reason"]) == (0, NO_TIMES)
    assert api.get("/api/simulations/accuracy").json()[0]["left_out"]["simulations"] == 1


# --- Bad logs: failures naming their line, never internal errors -------------------------------


# (what is wrong, the line as it was, the line instead): the bad line is the one replaced.
BAD = [
    ("uid 0", b"launching kernel name: _Z5firstv uid: 1 ", b"launching kernel name: _Z5firstv uid: 0 "),
    ("uid past the trace", b"kernel command : /t/kernel-2.traceg", b"kernel command : /t/kernel-9.traceg"),
    ("uid past the headers", b"_Z6secondv uid: 2 ", b"_Z6secondv uid: 3 "),
    ("duplicate uid", b"_Z6secondv uid: 2 ", b"_Z5firstv uid: 1 "),
    ("finished twice", b"Destroy streams for kernel 2:", b"Destroy streams for kernel 1:"),
    ("negative cycles", b"gpu_sim_cycle = 200", b"gpu_sim_cycle = -200"),
    ("non-numeric cycles", b"gpu_sim_cycle = 200", b"gpu_sim_cycle = 2x0"),
    ("a block of a uid never launched", b"kernel_launch_uid = 2", b"kernel_launch_uid = 7"),
]


@pytest.mark.django_db
def test_the_good_log_of_the_battery_is_ready(s3, upload):
    upload("run", trace_files(None, GOOD_LAUNCHES), metadata={"status": "ok"})
    upload_simulation(s3, "run", "good", GOOD)
    passes.poll_bucket()
    sim = simulation("run", "good")
    assert (sim.state, sim.stopped, sim.kernels_compared) == (TraceState.READY, None, 2), sim.error


@pytest.mark.django_db
@pytest.mark.parametrize(("what", "was", "instead"), BAD, ids=[case[0] for case in BAD])
def test_a_bad_log_fails_naming_its_line(s3, upload, what, was, instead):
    assert GOOD.count(was) == 1
    log = GOOD.replace(was, instead)
    bad_line = line_of(GOOD, GOOD.index(was))  # the replacement keeps the lines
    if what == "a block of a uid never launched":
        bad_line -= 1  # the block is named by its first line, `kernel_name =`
    upload("run", trace_files(None, GOOD_LAUNCHES), metadata={"status": "ok"})
    upload_simulation(s3, "run", "bad", log)
    passes.poll_bucket()
    sim = simulation("run", "bad")
    assert sim.state == TraceState.FAILED
    assert not sim.error.startswith("internal error"), sim.error
    assert f"line {bad_line}:" in sim.error, sim.error


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("exit_status", "0"),
        ("exit_status", True),
        ("started_at", "yesterday"),
        ("ended_at", 5),
        ("host", ["a"]),
        ("accel_sim_build", 1),
        ("selection", "unique"),
        ("selection", {"select": "all"}),
        ("selection", {"select": "unique", "cover": "most"}),
        ("selection", {"select": "unique", "extra": 1}),
    ],
)
def test_simulation_json_new_keys_are_typed_strictly(s3, upload, key, value):
    upload("run", trace_files(None, GOOD_LAUNCHES), metadata={"status": "ok"})
    upload_simulation(s3, "run", "typed", GOOD, marker={"status": "ok", key: value})
    passes.poll_bucket()
    sim = simulation("run", "typed")
    assert sim.state == TraceState.FAILED and f'"{key}"' in sim.error, sim.error


@pytest.mark.django_db
def test_simulation_json_new_keys_are_stored_and_served(s3, upload, api):
    marker = {
        "status": "ok",
        "accel_sim_build": "accelsim-commit-73f9fac_modified_0.0_26-12-02-01-32-08",
        "gpgpu_sim_build": "gpgpu-sim_git-commit-667834c_modified_0.0",
        "selection": {"select": "step:step 3 (decode)", "cover": 0.9},
        "host": "node-1",
        "started_at": "2026-12-02T01:32:08Z",
        "ended_at": "2026-12-02T01:33:06+00:00",
        "exit_status": 134,
    }
    upload("run", trace_files(None, GOOD_LAUNCHES), metadata={"status": "ok"})
    upload_simulation(s3, "run", "facts", GOOD, marker=marker)
    passes.poll_bucket()
    body = api.get("/api/traces/run/simulations/facts").json()
    assert body["state"] == "ready"
    assert body["run"] == {key: value for key, value in marker.items() if key != "status"}
    assert list(body["run"]) == [
        "accel_sim_build",
        "gpgpu_sim_build",
        "host",
        "started_at",
        "ended_at",
        "exit_status",
        "selection",
    ]
    assert json.loads(json.dumps(body["run"]["selection"])) == marker["selection"]
