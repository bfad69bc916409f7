"""The sweeps' routes, as the issue (39) and the sweeps' contract state them:

- `POST /api/sweeps` makes one job per (trace, config): the traces by `trace_ids` or by the trace
  list's filters; a config whose `SMxx_` name models another GPU generation than the trace's SASS
  version is `skipped` with its reason (SM6_* 60-69, SM7_* 70-72, SM75_* 75, SM8x_* 80-87,
  SM89_* 89, SM90_* 90-99); a trace whose SASS version is unknown is queued; each queued job's
  message (`cascade.sweep_job`, [sweep id, job id]) is on its config's queue `cascade.sim.<CONFIG>`;
- `GET /api/sweeps[/{id}]`: state and counts by state, the jobs;
- `DELETE /api/sweeps/{id}`: its owner or staff; queued jobs cancelled, running ones finish.

The worker's routes (start, progress, finish) are tests/simulations/test_sweep_jobs.py's.
"""

import pytest

from simulations.models import Sweep, SweepJob
from tests.simulations import sweep_support
from tests.simulations.support import simulate
from tests.simulations.sweep_support import ready_trace, writer
from tests.traces.support import assert_conforms
from traces.models import AuditEntry, TraceState

pytestmark = pytest.mark.django_db
broker = sweep_support.broker  # the fixture


@pytest.fixture(autouse=True)
def own_broker(broker):
    """Every message these tests publish goes to the tests' own Redis database, never the
    machine's default one (where a real worker could take it)."""
    return broker


CONFIGS = ["SM6_TITANX", "SM7_QV100", "SM75_RTX2060", "SM86_RTX3070", "SM89_RTX4090", "SM90_H100"]
# The rule, written out: which of CONFIGS runs a trace of each architecture.
RUNS = {
    "sm_61": {"SM6_TITANX"},
    "sm_70": {"SM7_QV100"},
    "sm_75": {"SM75_RTX2060"},
    "sm_80": {"SM86_RTX3070"},
    "sm_86": {"SM86_RTX3070"},
    "sm_89": {"SM89_RTX4090"},
    "sm_90": {"SM90_H100"},
    None: set(CONFIGS),  # no known SASS version: queued, the worker reads the headers
}
# The contract's keys, in its order.
SWEEP_KEYS = ["id", "name", "owner", "state", "created_at", "configs", "select", "cover", "rerun", "counts"]
JOB_KEYS = [
    "id",
    "trace_id",
    "config",
    "state",
    "attempts",
    "worker",
    "simulation",
    "error",
    "started_at",
    "ended_at",
    "reason",
    "progress",
]


def create(client, body, capture):
    with capture(execute=True):
        return client.post("/api/sweeps", body, format="json")


def test_a_sweep_pairs_each_trace_with_the_configs_of_its_gpu_generation(
    broker,
    django_capture_on_commit_callbacks,
):
    for arch in RUNS:
        ready_trace(f"run-{arch}", arch)
    ids = [f"run-{arch}" for arch in RUNS]
    response = create(
        writer("alice"),
        {"name": "all", "trace_ids": ids, "configs": CONFIGS},
        django_capture_on_commit_callbacks,
    )
    assert response.status_code == 201, response.content
    sweep = response.json()
    assert sweep["owner"] == "alice" and sweep["state"] == "queued" and sweep["configs"] == CONFIGS
    jobs = {(job["trace_id"], job["config"]): job for job in sweep["jobs"]}
    assert len(jobs) == len(RUNS) * len(CONFIGS)
    for arch, runs in RUNS.items():
        for config in CONFIGS:
            job = jobs[(f"run-{arch}", config)]
            if config in runs:
                assert (job["state"], job["reason"]) == ("queued", None), (arch, config)
            else:
                assert job["state"] == "skipped", (arch, config)
                assert config in job["reason"] and arch in job["reason"], job["reason"]
                assert job["ended_at"] is not None
    queued = sum(len(runs) for runs in RUNS.values())
    assert sweep["counts"] == {
        "queued": queued,
        "running": 0,
        "ready": 0,
        "failed": 0,
        "skipped": len(RUNS) * len(CONFIGS) - queued,
        "cancelled": 0,
    }
    # One message per queued job, on its config's queue, naming the sweep and the job.
    for config in CONFIGS:
        expected = sorted(
            ["cascade.sweep_job", [sweep["id"], job["id"]]]
            for job in sweep["jobs"]
            if job["config"] == config and job["state"] == "queued"
        )
        assert sorted([task, args] for task, args in broker.messages(config)) == expected, config


def test_a_config_outside_the_sm_naming_is_queued_for_the_worker_to_decide(
    django_capture_on_commit_callbacks,
):
    ready_trace("turing", "sm_75")
    response = create(
        writer("alice"),
        {"name": "custom", "trace_ids": ["turing"], "configs": ["MY_GPU"]},
        django_capture_on_commit_callbacks,
    )
    assert [job["state"] for job in response.json()["jobs"]] == ["queued"]


def test_the_trace_lists_filters_choose_the_traces(django_capture_on_commit_callbacks):
    ready_trace("sample-turing", "sm_75", sample=True, model="demo")
    ready_trace("sample-ampere", "sm_86", sample=True, model="demo")
    ready_trace("real-turing", "sm_75", model="demo")
    ready_trace("other-model", "sm_75", sample=True, model="other")
    parsing = ready_trace("sample-parsing", "sm_75", sample=True, model="demo")
    type(parsing).objects.filter(pk=parsing.pk).update(state=TraceState.PARSING)
    client = writer("alice")
    body = {"name": "samples", "sample": True, "model": "demo", "configs": ["SM75_RTX2060"]}
    response = create(client, body, django_capture_on_commit_callbacks)
    assert response.status_code == 201, response.content
    jobs = {job["trace_id"]: job["state"] for job in response.json()["jobs"]}
    assert jobs == {"sample-turing": "queued", "sample-ampere": "skipped"}
    assert Sweep.objects.get().request == {"sample": True, "model": "demo"}


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"name": "x", "configs": ["SM75_RTX2060"], "trace_ids": ["nope"]}, 400, "trace_ids: no trace nope"),
        ({"name": "x", "configs": ["SM75_RTX2060"], "trace_ids": ["turing"], "model": "m"}, 400, "not both"),
        ({"name": "x", "configs": ["SM75_RTX2060"], "stat": "ready"}, 400, "unknown key 'stat'"),
        ({"name": "x", "configs": ["SM75_RTX2060"], "sample": "maybe"}, 400, "sample"),
        ({"name": "x", "configs": ["SM75_RTX2060"], "model": "no-such-model"}, 400, "no ready trace"),
        ({"name": "x", "configs": [], "trace_ids": ["turing"]}, 400, "configs"),
        ({"name": "x", "configs": ["../etc"], "trace_ids": ["turing"]}, 400, "not a config's name"),
        ({"name": "x", "configs": ["SM75_RTX2060"], "trace_ids": ["turing"], "select": "all"}, 400, "select"),
        ({"name": "x", "configs": ["SM75_RTX2060"], "trace_ids": ["turing"], "cover": 0}, 400, "cover"),
        ({"name": "x", "configs": ["SM75_RTX2060"], "trace_ids": ["parsing"]}, 409, "parsing"),
    ],
)
def test_a_wrong_request_is_one_sentence(body, status, says):
    ready_trace("turing", "sm_75")
    parsing = ready_trace("parsing", "sm_75")
    type(parsing).objects.filter(pk="parsing").update(state=TraceState.PARSING)
    response = writer("alice").post("/api/sweeps", body, format="json")
    assert response.status_code == status, response.content
    assert says in response.json()["detail"]
    assert not Sweep.objects.exists()


def test_a_read_token_cannot_create_a_sweep(api):
    ready_trace("turing", "sm_75")
    response = api.post(
        "/api/sweeps", {"name": "x", "configs": ["SM75_RTX2060"], "trace_ids": ["turing"]}, format="json"
    )
    assert response.status_code == 403
    assert "write token" in response.json()["detail"]


def test_the_list_and_the_detail_conform_to_the_schema(api, openapi, django_capture_on_commit_callbacks):
    ready_trace("turing", "sm_75")
    first = create(
        writer("alice"),
        {
            "name": "one",
            "trace_ids": ["turing"],
            "configs": ["SM75_RTX2060"],
            "select": "unique",
            "cover": 0.9,
        },
        django_capture_on_commit_callbacks,
    ).json()
    second = create(
        writer("alice"),
        {"name": "two", "trace_ids": ["turing"], "configs": ["SM86_RTX3070"]},
        django_capture_on_commit_callbacks,
    ).json()
    listed = assert_conforms(openapi, "/api/sweeps", api.get("/api/sweeps"))
    assert [sweep["id"] for sweep in listed] == [second["id"], first["id"]]
    assert "jobs" not in listed[0]
    assert listed[0]["state"] == "ready"  # its only job was skipped at creation
    detail = assert_conforms(openapi, "/api/sweeps/{id}", api.get(f"/api/sweeps/{first['id']}"))
    assert (detail["select"], detail["cover"], detail["rerun"]) == ("unique", 0.9, False)
    assert list(detail) == [*SWEEP_KEYS, "jobs"]
    assert list(detail["jobs"][0]) == JOB_KEYS
    assert api.get("/api/sweeps/999999").status_code == 404
    refused = api.get("/api/sweeps", {"state": "ready"})  # the list has no filters
    assert (refused.status_code, refused.json()["detail"]) == (
        400,
        "unknown parameter 'state'; this route accepts format.",
    )


def test_cancel_by_the_owner_cancels_what_has_not_started(django_capture_on_commit_callbacks):
    for name in ("a", "b"):
        ready_trace(name, "sm_75")
    alice = writer("alice")
    sweep = create(
        alice,
        {"name": "c", "trace_ids": ["a", "b"], "configs": ["SM75_RTX2060"]},
        django_capture_on_commit_callbacks,
    ).json()
    first, second = (job["id"] for job in sweep["jobs"])
    start = writer("worker").post(
        f"/api/sweeps/{sweep['id']}/jobs/{first}/start", {"host": "h", "process": 1}, format="json"
    )
    assert start.json()["run"] is True

    refused = writer("bob").delete(f"/api/sweeps/{sweep['id']}")
    assert refused.status_code == 403
    assert (
        refused.json()["detail"]
        == f"sweep {sweep['id']} belongs to alice: only its owner or staff may cancel it"
    )

    cancelled = alice.delete(f"/api/sweeps/{sweep['id']}")
    assert cancelled.status_code == 200
    states = {job["id"]: job["state"] for job in cancelled.json()["jobs"]}
    assert states == {first: "running", second: "cancelled"}
    assert cancelled.json()["state"] == "cancelled"
    late = writer("worker").post(
        f"/api/sweeps/{sweep['id']}/jobs/{second}/start", {"host": "h", "process": 2}, format="json"
    )
    assert late.json() == {"run": False, "state": "cancelled", "why": "the sweep was cancelled."}
    actions = list(AuditEntry.objects.order_by("at").values_list("action", "username"))
    assert actions == [("sweep_create", "alice"), ("sweep_cancel", "alice")]


def test_staff_cancel_another_users_sweep(django_capture_on_commit_callbacks):
    ready_trace("a", "sm_75")
    sweep = create(
        writer("alice"),
        {"name": "c", "trace_ids": ["a"], "configs": ["SM75_RTX2060"]},
        django_capture_on_commit_callbacks,
    ).json()
    response = writer("operator", staff=True).delete(f"/api/sweeps/{sweep['id']}")
    assert response.status_code == 200
    assert [job["state"] for job in response.json()["jobs"]] == ["cancelled"]


def test_a_sweep_is_running_then_ready_or_failed(settings, django_capture_on_commit_callbacks):
    settings.CASCADE_SWEEP_ATTEMPTS = 1
    for name in ("a", "b"):
        ready_trace(name, "sm_75")
    sweep = create(
        writer("alice"),
        {"name": "s", "trace_ids": ["a", "b"], "configs": ["SM75_RTX2060"]},
        django_capture_on_commit_callbacks,
    ).json()
    worker, base = writer("worker"), f"/api/sweeps/{sweep['id']}"
    first, second = (job["id"] for job in sweep["jobs"])
    worker.post(f"{base}/jobs/{first}/start", {"host": "h", "process": 1}, format="json")
    assert worker.get(base).json()["state"] == "running"
    simulate(
        type(SweepJob.objects.get(pk=first).trace).objects.get(pk="a"), f"sweep{sweep['id']}_SM75_RTX2060", []
    )
    finish = worker.post(f"{base}/jobs/{first}/finish", {"attempt": 1, "state": "ready"}, format="json")
    assert finish.json()["state"] == "ready"
    assert worker.get(base).json()["state"] == "running"  # the second job is still queued
    worker.post(f"{base}/jobs/{second}/start", {"host": "h", "process": 2}, format="json")
    worker.post(
        f"{base}/jobs/{second}/finish", {"attempt": 1, "state": "failed", "error": "boom"}, format="json"
    )
    detail = worker.get(base).json()
    assert detail["state"] == "failed"
    assert detail["counts"]["ready"] == 1 and detail["counts"]["failed"] == 1


def test_a_jobs_simulation_is_named_for_the_sweep_config_and_selection(django_capture_on_commit_callbacks):
    ready_trace("turing", "sm_75")
    body = {
        "name": "steps",
        "trace_ids": ["turing"],
        "configs": ["SM75_RTX2060"],
        "select": "step:decode 1/2",
    }
    sweep = create(writer("alice"), body, django_capture_on_commit_callbacks).json()
    job = sweep["jobs"][0]
    start = writer("worker").post(
        f"/api/sweeps/{sweep['id']}/jobs/{job['id']}/start", {"host": "h", "process": 1}, format="json"
    )
    assert start.json()["simulation"] == f"sweep{sweep['id']}_SM75_RTX2060_step-decode-1-2"
    assert start.json()["select"] == "step:decode 1/2"
