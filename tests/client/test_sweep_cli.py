"""`cascade sweep`: what a person reads, the exit statuses, and answers refused.

The first part reads answers written out here from the contract (docs/api.md, "Sweeps") through
a fake transport: the table's formatting, the shapes refused (status 11). The second part runs
the command against Cascade's real routes (Django's live server): sweeps made by the command,
their jobs driven by the test through the worker routes, the numbers printed against the API's
and against the errors worked out here by hand from the launches the test stored.
"""

import functools
import json

import httpx
import pytest

from tests.client.conftest import TOKEN
from tests.simulations import sweep_support

broker = sweep_support.broker  # the fixture: the server publishes to the sweeps' tests' Redis

# --- answers as the contract writes them --------------------------------------------------


def job(job_id, trace_id, config, state, **fields):
    return {
        "id": job_id,
        "trace_id": trace_id,
        "config": config,
        "state": state,
        "attempts": 0,
        "worker": None,
        "simulation": None,
        "error": None,
        "started_at": None,
        "ended_at": None,
        "reason": None,
        "progress": None,
        **fields,
    }


def detail(jobs, sweep_id=7, name="turing-vs-ampere"):
    counts = dict.fromkeys(("queued", "running", "ready", "failed", "skipped", "cancelled"), 0)
    for j in jobs:
        counts[j["state"]] += 1
    ended = counts["queued"] + counts["running"] == 0
    state = "running" if not ended else "failed" if counts["failed"] else "ready"
    return {
        "id": sweep_id,
        "name": name,
        "owner": "alice",
        "state": state,
        "created_at": "2026-12-05T17:40:00Z",
        "configs": ["SM75_RTX2060", "SM86_RTX3070"],
        "select": None,
        "cover": 1.0,
        "rerun": False,
        "counts": counts,
        "jobs": jobs,
    }


SKIP = "SM86_RTX3070 models SASS 80-87; the trace's is 75 (sm_75)"
CREATED = detail(
    [
        job(1, "turing", "SM75_RTX2060", "queued", simulation="sweep7_SM75_RTX2060"),
        job(2, "turing", "SM86_RTX3070", "skipped", reason=SKIP),
        job(3, "ampere", "SM75_RTX2060", "skipped", reason="SM75_RTX2060 models SASS 75; the trace's is 86"),
        job(4, "ampere", "SM86_RTX3070", "queued", simulation="sweep7_SM86_RTX3070"),
    ]
)
WORKER = {"host": "farm-1", "process": 4242}
RUNNING = detail(
    [
        job(1, "turing", "SM75_RTX2060", "running", attempts=1, worker=WORKER,
            progress={"kernels_finished": 3, "kernels_listed": 4}),
        CREATED["jobs"][1],
        CREATED["jobs"][2],
        CREATED["jobs"][3],
    ]
)  # fmt: skip
ENDED = detail(
    [
        job(1, "turing", "SM75_RTX2060", "ready", attempts=1, worker=WORKER, simulation="sweep7_SM75_RTX2060"),
        CREATED["jobs"][1],
        CREATED["jobs"][2],
        job(4, "ampere", "SM86_RTX3070", "failed", attempts=3, worker=WORKER, simulation="sweep7_SM86_RTX3070",
            error="the simulator stopped: Unable to open file: ./traces/kernel-1.traceg\nand more"),
    ]
)  # fmt: skip
ACCURACY = {
    "by_config": [
        {
            "config": "SM75_RTX2060",
            "simulator_build": "accelsim-commit-73f9fac_modified_0.0",
            "simulations": 1,
            "traces": 1,
            "kernels_compared": 2,
            "mape": 17.5,
            "pearson_r": 1.0,
            "aggregate_error": -13.3333,
            "worst": [
                {
                    "trace_id": "turing",
                    "simulation": "sweep7_SM75_RTX2060",
                    "ctx": "0x1",
                    "kernel_id": 2,
                    "name": "_Z6vecAddPdS_S_i",
                    "measured_ns": 2000,
                    "sim_ns": 1500.0,
                    "error": -25.0,
                }
            ],
        }
    ],
    "cells": [
        {
            "trace_id": "turing",
            "config": "SM75_RTX2060",
            "simulation": "sweep7_SM75_RTX2060",
            "state": "ready",
            "kernels_compared": 2,
            "mape": 17.5,
        },
        {
            "trace_id": "ampere",
            "config": "SM86_RTX3070",
            "simulation": "sweep7_SM86_RTX3070",
            "state": "failed",
            "kernels_compared": None,
            "mape": None,
        },
    ],
}


class Fake:
    """GET and POST /api/sweeps... answered from `routes` (path: JSON, or a list of them served
    in turn, the last again); every request kept."""

    def __init__(self, routes):
        self.routes, self.requests = routes, []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return httpx.Response(401, json={"detail": "Invalid token."})
        answers = self.routes.get(f"{request.method} {request.url.path}")
        if answers is None:
            return httpx.Response(404, json={"detail": "Not found."})
        if isinstance(answers, list):
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
        else:
            answer = answers
        if isinstance(answer, httpx.Response):
            return answer
        return httpx.Response(201 if request.method == "POST" else 200, json=answer)


@pytest.fixture
def cli_on(monkeypatch, capsys):
    """`cli_on(fake)(ARGS...)`: `cascade ARGS...` against the fake: (status, stdout, stderr)."""
    from cascade_client import Cascade, cli, sweep

    monkeypatch.setenv("CASCADE_URL", "http://cascade.test")
    monkeypatch.setenv("CASCADE_TOKEN", TOKEN)
    monkeypatch.setattr(sweep, "sleep", lambda seconds: None)

    def on(fake):
        monkeypatch.setattr(
            cli, "Cascade", functools.partial(Cascade, transport=httpx.MockTransport(fake.handler))
        )

        def run(*args):
            status = cli.main(list(args))
            out, err = capsys.readouterr()
            return status, out, err

        return run

    return on


def columns(out: str, *first: str) -> list[list[str]]:
    """The rows of the first table whose header starts with the words `first`, split on runs of
    2+ spaces."""
    import re

    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[: len(first)] == list(first))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip() or not line.startswith(" ") and len(re.split(r"\s{2,}", line)) < 3:
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def test_create_sends_the_contract_s_body_and_lists_queued_and_skipped_jobs(cli_on):
    fake = Fake({"POST /api/sweeps": CREATED})
    status, out, _ = cli_on(fake)(
        "sweep", "--sample", "--arch", "sm_75", "--config", "SM75_RTX2060", "--config", "SM86_RTX3070"
    )
    assert status == 0
    body = json.loads(fake.requests[0].content)
    name = body.pop("name")
    assert body == {"configs": ["SM75_RTX2060", "SM86_RTX3070"], "trace_gpu_arch": "sm_75", "sample": True}
    assert name.startswith("sweep_SM75_RTX2060+SM86_RTX3070_") and name.endswith("Z") and len(name) <= 100
    assert out.splitlines()[0] == "sweep 7 turing-vs-ampere: running, 4 jobs: 2 queued, 2 skipped"
    rows = columns(out, "JOB")
    assert [row[:4] for row in rows] == [
        ["1", "turing", "SM75_RTX2060", "queued"],
        ["2", "turing", "SM86_RTX3070", "skipped"],
        ["3", "ampere", "SM75_RTX2060", "skipped"],
        ["4", "ampere", "SM86_RTX3070", "queued"],
    ]
    assert rows[1][-1] == SKIP


def test_create_with_traces_select_cover_rerun_and_a_name(cli_on):
    fake = Fake({"POST /api/sweeps": CREATED})
    run = cli_on(fake)
    status, _, _ = run(
        "sweep", "--trace", "a", "--trace", "b", "--config", "SM75_RTX2060", "--select", "step:decode",
        "--cover", "0.9", "--rerun", "--name", "mine",
    )  # fmt: skip
    assert status == 0
    assert json.loads(fake.requests[0].content) == {
        "name": "mine",
        "configs": ["SM75_RTX2060"],
        "trace_ids": ["a", "b"],
        "select": "step:decode",
        "cover": 0.9,
        "rerun": True,
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sweep", "--sample"], "a sweep needs at least one --config NAME"),
        (["sweep", "--config", "SM75_RTX2060"], "say which traces"),
        (["sweep", "show"], "the following arguments are required: ID"),
    ],
)
def test_a_sweep_without_configs_or_traces_is_wrong_arguments(cli_on, args, message):
    run = cli_on(Fake({}))
    with pytest.raises(SystemExit) as exited:
        run(*args)
    assert exited.value.code == 2


def test_help_of_sweep_and_of_show_say_what_they_do(capsys):
    from cascade_client import cli

    for args in (["sweep", "--help"], ["sweep", "show", "--help"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(args)
        assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "skipped pairs are listed, not failures" in " ".join(out.split())
    assert "--against ID" in out and "kernel by kernel" in out


def test_wait_draws_progress_then_prints_the_table_and_exits_12_on_a_failed_job(cli_on):
    fake = Fake(
        {
            "POST /api/sweeps": CREATED,
            "GET /api/sweeps/7": [CREATED, RUNNING, ENDED],
            "GET /api/sweeps/7/accuracy": ACCURACY,
        }
    )
    status, out, err = cli_on(fake)("sweep", "--trace", "turing", "--config", "SM75_RTX2060", "--wait")
    assert status == 12
    # Not a terminal: a line each time the jobs ended change.
    assert err.splitlines()[:3] == [
        "2/4 jobs ended  (2 queued, 2 skipped)",
        "4/4 jobs ended  (1 ready, 1 failed, 2 skipped)",
        "cascade: sweep 7: 1 job(s) failed, 0 cancelled (`cascade sweep show 7` lists them)",
    ]
    table = columns(out, "CONFIG")
    assert table == [
        ["SM75_RTX2060", "accelsim-commit-73f9fac_modified_0.0", "1", "1", "2", "17.50", "1.0000", "-13.33"]
    ]
    assert "    -25.0 %  1.5 us vs 2.0 us  turing 0x1 kernel 2  _Z6vecAddPdS_S_i" in out
    assert columns(out, "TRACE")[1] == ["ampere", "SM86_RTX3070", "failed", "-", "-", "sweep7_SM86_RTX3070"]
    failed = out.split("jobs that failed or were cancelled")[1]
    assert "the simulator stopped: Unable to open file: ./traces/kernel-1.traceg" in failed
    assert "and more" not in failed  # an error's first line


def test_wait_exits_0_when_every_job_ended_ready_or_skipped(cli_on):
    ready = detail([ENDED["jobs"][0], CREATED["jobs"][1]])
    fake = Fake(
        {"POST /api/sweeps": CREATED, "GET /api/sweeps/7": ready, "GET /api/sweeps/7/accuracy": ACCURACY}
    )
    status, out, err = cli_on(fake)("sweep", "--sample", "--config", "SM75_RTX2060", "--wait")
    assert (status, err) == (0, "2/2 jobs ended  (1 ready, 1 skipped)\n")
    assert "sweep 7 turing-vs-ampere: ready, 2 jobs: 1 ready, 1 skipped" in out


def test_wait_exits_12_when_every_job_was_skipped(cli_on):
    skipped = detail([CREATED["jobs"][1]])
    fake = Fake(
        {"POST /api/sweeps": skipped, "GET /api/sweeps/7": skipped, "GET /api/sweeps/7/accuracy": ACCURACY}
    )
    status, _, err = cli_on(fake)("sweep", "--sample", "--config", "SM86_RTX3070", "--wait")
    assert status == 12 and err.endswith("cascade: sweep 7: no job ended ready (1 skipped)\n")


def test_the_bar_on_a_terminal_counts_a_running_job_s_kernels():
    import io

    from cascade_client.sweep import Bar

    stream = io.StringIO()
    bar = Bar(stream, redraw=True)
    bar(RUNNING)
    bar.close()
    # 2 skipped + 3/4 of the running job, of 4 jobs: 69 %.
    assert stream.getvalue() == (
        "\r[####################..........]  69%  2/4 jobs ended  3/4 kernels  (1 queued, 1 running, 2 skipped)"
        "\x1b[K\n"
    )


def change(kernel_id, measured, was, now):
    """A launch of two sweeps as the contract writes it: its errors and the change of |error|."""
    against_error, error = (was - measured) / measured * 100, (now - measured) / measured * 100
    return {
        "ctx": "0x1",
        "kernel_id": kernel_id,
        "name": "_Z6vecAddPdS_S_i",
        "measured_ns": measured,
        "against_sim_ns": was,
        "sim_ns": now,
        "against_error": against_error,
        "error": error,
        "change": abs(error) - abs(against_error),
    }


AGAINST = {
    "id": 6,
    "name": "before",
    "paired_by": "config",
    "compared": 3,
    "better": 1,
    "worse": 1,
    "unchanged": 1,
    "pairs": [
        {
            "trace_id": "turing",
            "config": "SM75_RTX2060",
            "against_config": "SM75_RTX2060",
            "simulation": "sweep7_SM75_RTX2060",
            "against_simulation": "sweep6_SM75_RTX2060",
            "mape": 15.0,
            "against_mape": 20.0,
            "compared": 3,
            "better": 1,
            "worse": 1,
            "unchanged": 1,
            "mean_change": -5.0,
            "better_kernels": [change(2, 2000, 1000, 1500)],
            "worse_kernels": [change(3, 4000, 4000, 4400)],
        }
    ],
}


def test_show_prints_the_table_against_another_sweep_and_the_jobs(cli_on):
    fake = Fake({"GET /api/sweeps/7": ENDED, "GET /api/sweeps/7/accuracy": dict(ACCURACY, against=AGAINST)})
    status, out, _ = cli_on(fake)("sweep", "show", "7", "--against", "6")
    assert status == 0
    assert dict(fake.requests[-1].url.params) == {"against": "6"}
    assert (
        "against sweep 6 before (paired by config): 3 kernels compared in both, 1 better, 1 worse, 1 unchanged"
        in out
    )
    assert columns(out, "TRACE", "CONFIG", "KERNELS", "BETTER") == [
        ["turing", "SM75_RTX2060", "3", "1", "1", "15.00 (was 20.00)", "-5.00"]
    ]
    # Kernel 2: -50 % before, -25 % now: 25 points closer; kernel 3: 0 %, then +10 %.
    closer = out.split("turing on SM75_RTX2060, closer to measured (change of |error|):\n")[1]
    assert closer.splitlines()[0] == "     -25.0 pp  -25.0 % (was -50.0 %)  0x1 kernel 2  _Z6vecAddPdS_S_i"
    further = out.split("turing on SM75_RTX2060, further from it (change of |error|):\n")[1]
    assert further.splitlines()[0] == "     +10.0 pp  +10.0 % (was +0.0 %)  0x1 kernel 3  _Z6vecAddPdS_S_i"
    assert [row[:4] for row in columns(out, "JOB")][-1] == ["4", "ampere", "SM86_RTX3070", "failed"]


def test_what_the_server_wrote_reaches_the_terminal_escaped(cli_on):
    hostile = json.loads(json.dumps(CREATED))
    hostile["name"] = "x\x1b]0;owned\x07"
    hostile["jobs"][1]["reason"] = "\u202eevil"
    status, out, _ = cli_on(Fake({"POST /api/sweeps": hostile}))(
        "sweep", "--sample", "--config", "SM75_RTX2060"
    )
    assert status == 0
    assert "\x1b" not in out and "\u202e" not in out
    assert "x\\x1b]0;owned\\x07" in out and "\\u202eevil" in out


@pytest.mark.parametrize(
    ("route", "answer", "what"),
    [
        ("POST /api/sweeps", [[]], "the answer is a list, where the API sends an object"),
        ("POST /api/sweeps", dict(CREATED, jobs={}), "`jobs` is an object, where the API sends a list"),
        ("POST /api/sweeps", dict(CREATED, counts={"queued": "2"}), "`counts.queued` is a string"),
        ("POST /api/sweeps", dict(CREATED, jobs=[{"id": 1}]), "`jobs[0].trace_id` is null"),
        ("GET /api/sweeps/7/accuracy", {"by_config": {}}, "`by_config` is an object"),
        ("GET /api/sweeps/7/accuracy", dict(ACCURACY, cells=[{"trace_id": 1}]), "`cells[0].trace_id` is a number"),
        ("GET /api/sweeps/7/accuracy", dict(ACCURACY, by_config=[dict(ACCURACY["by_config"][0], mape="17")]),
         "`by_config[0].mape` is a string"),
        ("GET /api/sweeps/7", httpx.Response(200, text="<html>"), "the answer is not JSON"),
        ("GET /api/sweeps/7/accuracy", dict(ACCURACY, against=dict(AGAINST, pairs=[{}])),
         "`against.pairs[0].trace_id` is null"),
    ],
)  # fmt: skip
def test_a_malformed_answer_is_one_line_and_status_11(cli_on, route, answer, what):
    routes = {"POST /api/sweeps": CREATED, "GET /api/sweeps/7": ENDED, "GET /api/sweeps/7/accuracy": ACCURACY}
    fake = Fake(routes | {route: answer})
    args = ["sweep", "show", "7"] if route.startswith("GET") else ["sweep", "--sample", "--config", "X"]
    status, _, err = cli_on(fake)(*args)
    assert status == 11
    assert err.count("\n") == 1 and err.startswith("cascade: ") and what in err, err


def test_list_shows_each_sweep_newest_first(cli_on):
    row = {k: v for k, v in ENDED.items() if k != "jobs"}
    fake = Fake({"GET /api/sweeps": [[row, dict(row, id=6, name="older", state="ready")]]})
    status, out, _ = cli_on(fake)("sweep", "list")
    assert status == 0
    assert [r[:3] for r in columns(out, "ID")] == [
        ["7", "turing-vs-ampere", "failed"],
        ["6", "older", "ready"],
    ]


# --- against Cascade's routes (Django's live server) -----------------------------------------

BUILD = "accelsim-commit-73f9fac6_modified_0.0"
# Launches of a simulation at 1000 MHz (a cycle is a ns): (ctx, kernel_id, name, step, measured
# ns, simulated cycles). Worked out here (docs/formats.md's definitions): errors +10 %, -25 %,
# +10 %: MAPE (10 + 25 + 10) / 3 = 15.00; aggregate (100 + 500 + 400) / 7000 = 14.29 %.
LAUNCHES = [
    (1, 1, "_Z6vecAddPdS_S_i", None, 1000, 1100),
    (1, 2, "_Z6vecAddPdS_S_i", None, 2000, 1500),
    (1, 3, "_Z4gemmPfS_S_", None, 4000, 4400),
]


@pytest.fixture
def live(live_server, broker, monkeypatch, capsys):
    """`cascade` against the live server with alice's write token; `live.worker` a worker's
    client of the job routes (another user's write token); `live.api(path)` the API's JSON. The
    server publishes the jobs' messages to the sweeps' tests' own Redis database (`broker`)."""
    from cascade_client import cli
    from django.contrib.auth import get_user_model

    from traces.models import ApiToken

    users = get_user_model().objects
    _, token = ApiToken.issue(users.create(username="alice"), scope="write")
    _, farm = ApiToken.issue(users.create(username="farm"), scope="write")
    monkeypatch.setenv("CASCADE_URL", live_server.url)
    monkeypatch.setenv("CASCADE_TOKEN", token)

    class Live:
        url = live_server.url

        @staticmethod
        def run(*args):
            status = cli.main(list(args))
            out, err = capsys.readouterr()
            return status, out, err

        @staticmethod
        def api(path, **params):
            answer = httpx.get(
                live_server.url + path, params=params, headers={"Authorization": f"Bearer {token}"}
            )
            assert answer.status_code == 200, answer.text
            return answer.json()

        worker = httpx.Client(
            base_url=live_server.url, headers={"Authorization": f"Bearer {farm}"}, timeout=30
        )

    yield Live()
    Live.worker.close()


def start(live, sweep_id, job_id, build=BUILD) -> dict:
    body = {
        "host": "farm-1",
        "process": 4242,
        "accel_sim_build": build,
        "gpgpusim_build": "4.2.0 [build gpgpu-sim_git-commit-667834c_modified_0.0]",
        "configs": ["SM75_RTX2060", "SM86_RTX3070"],
        "sass_versions": [70, 75, 80, 86],
    }
    answer = live.worker.post(f"/api/sweeps/{sweep_id}/jobs/{job_id}/start", json=body)
    assert answer.status_code == 200 and answer.json()["run"], answer.text
    return answer.json()


def report(live, sweep_id, job_id, route, body) -> dict:
    answer = live.worker.post(f"/api/sweeps/{sweep_id}/jobs/{job_id}/{route}", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def turing_and_ampere():
    sweep_support.ready_trace("turing", "sm_75", sample=True)
    sweep_support.ready_trace("ampere", "sm_86", sample=True)
    sweep_support.ready_trace("hopper", "sm_90")


def test_live_create_with_traces_lists_the_server_s_jobs_and_skip_reasons(live):
    turing_and_ampere()
    status, out, _ = live.run(
        "sweep", "--trace", "turing", "--trace", "ampere", "--config", "SM75_RTX2060", "--config", "SM86_RTX3070",
        "--name", "mine",
    )  # fmt: skip
    assert status == 0
    sweep_id = int(out.split()[1])
    api = live.api(f"/api/sweeps/{sweep_id}")
    assert out.splitlines()[0] == f"sweep {sweep_id} mine: queued, 4 jobs: 2 queued, 2 skipped"
    printed = {(row[1], row[2]): row for row in columns(out, "JOB")}
    assert len(printed) == 4
    for job in api["jobs"]:
        row = printed[job["trace_id"], job["config"]]
        assert row[3] == job["state"]
        if job["state"] == "skipped":
            assert row[-1] == job["reason"] and job["reason"]
    assert {(j["trace_id"], j["config"]) for j in api["jobs"] if j["state"] == "queued"} == {
        ("turing", "SM75_RTX2060"),
        ("ampere", "SM86_RTX3070"),
    }


def test_live_create_with_sample_and_arch_asks_the_list_s_filters(live):
    turing_and_ampere()
    status, out, _ = live.run("sweep", "--sample", "--arch", "sm_75", "--config", "SM75_RTX2060")
    assert status == 0
    assert [row[1:4] for row in columns(out, "JOB")] == [["turing", "SM75_RTX2060", "queued"]]
    assert out.split()[2].startswith("sweep_SM75_RTX2060_")
    # The samples only: hopper is none.
    status, out, _ = live.run("sweep", "--sample", "--config", "SM75_RTX2060", "--config", "SM86_RTX3070")
    assert status == 0
    assert sorted(row[1] + " " + row[2] for row in columns(out, "JOB")) == [
        "ampere SM75_RTX2060",
        "ampere SM86_RTX3070",
        "turing SM75_RTX2060",
        "turing SM86_RTX3070",
    ]


def drive(live, monkeypatch, *steps):
    """--wait's pauses each run the next of `steps(sweep detail)`, as a worker would between two polls."""
    from cascade_client import sweep

    pending = list(steps)

    def step(seconds):
        assert pending, "the command waited on after every step was done"
        newest = live.api("/api/sweeps")[0]
        pending.pop(0)(live.api(f"/api/sweeps/{newest['id']}"))

    monkeypatch.setattr(sweep, "sleep", step)
    return pending


def queued(detail) -> dict[str, dict]:
    return {j["trace_id"]: j for j in detail["jobs"] if j["state"] in ("queued", "running")}


def run_to_ready(live, detail, trace_id, *, launches=LAUNCHES, build=BUILD):
    """A worker's job done: started, its simulation ready (stored as ingestion stores one), finished."""
    from tests.simulations.support import simulate
    from traces.models import Kernel, Trace

    job = queued(detail)[trace_id]
    if job["state"] == "running":  # started by an earlier step: its attempt holds
        started = {"attempt": job["attempts"], "simulation": job["simulation"]}
    else:
        started = start(live, detail["id"], job["id"], build)
    trace = Trace.objects.get(pk=trace_id)
    # The launches in the trace's own context (its launches' ctx), as ingestion pairs them.
    context = Kernel.objects.filter(trace=trace).values_list("context", flat=True).first()
    launches = [(context, *launch[1:]) for launch in launches]
    simulate(trace, started["simulation"], launches, config=job["config"], simulator_build=build)
    report(live, detail["id"], job["id"], "finish", {"attempt": started["attempt"], "state": "ready"})


def test_live_wait_shows_progress_then_the_api_s_accuracy_and_exits_0(live, monkeypatch):
    turing_and_ampere()

    def first(detail):
        for job in queued(detail).values():
            started = start(live, detail["id"], job["id"])
            body = {"attempt": started["attempt"], "kernels_finished": 1, "kernels_listed": 3}
            assert report(live, detail["id"], job["id"], "progress", body) == {"continue": True}

    pending = drive(
        live,
        monkeypatch,
        first,
        lambda detail: run_to_ready(live, detail, "turing"),
        lambda detail: run_to_ready(live, detail, "ampere"),
    )
    status, out, err = live.run(
        "sweep", "--sample", "--config", "SM75_RTX2060", "--config", "SM86_RTX3070", "--wait"
    )
    assert (status, pending) == (0, []), err
    # Not a terminal: a line each time a job ends, with the kernels the jobs reported (a ready
    # job's all of its listed ones).
    assert [line for line in err.splitlines() if " jobs ended" in line] == [
        "2/4 jobs ended  (2 queued, 2 skipped)",
        "3/4 jobs ended  4/6 kernels  (1 running, 1 ready, 2 skipped)",
        "4/4 jobs ended  6/6 kernels  (2 ready, 2 skipped)",
    ]
    sweep_id = int(out.split()[1])
    api = live.api(f"/api/sweeps/{sweep_id}/accuracy")
    printed = {row[0]: row for row in columns(out, "CONFIG")}
    assert len(printed) == len(api["by_config"]) == 2
    for row in api["by_config"]:
        assert printed[row["config"]][2:] == [
            str(row["simulations"]), str(row["traces"]), str(row["kernels_compared"]),
            f"{row['mape']:.2f}", f"{row['pearson_r']:.4f}", f"{row['aggregate_error']:.2f}",
        ]  # fmt: skip
        # ... and the numbers are the ones worked out above from the launches.
        assert printed[row["config"]][5:8:2] == ["15.00", "14.29"]
    # Each row's worst launches, as the API ranks them: kernel 2 (-25 %) first.
    worst = next(row for row in api["by_config"] if row["config"] == "SM75_RTX2060")["worst"]
    lines = out.split("worst kernels of SM75_RTX2060")[1].splitlines()[1 : 1 + len(worst)]
    assert [(line.split()[0], line.split()[-2]) for line in lines] == [
        (f"{k['error']:+.1f}", str(k["kernel_id"])) for k in worst
    ]
    assert [line.split()[0] for line in lines] == ["-25.0", "+10.0", "+10.0"]
    cells = {(row[0], row[1]): row for row in columns(out, "TRACE")}
    assert cells["turing", "SM75_RTX2060"][2:5] == ["ready", "3", "15.00"]


def test_live_wait_exits_12_when_a_job_failed_every_attempt(live, monkeypatch, settings):
    turing_and_ampere()
    error = "the simulator stopped: Unable to open file: ./traces/kernel-1.traceg"

    def fail(detail):
        job = queued(detail)["ampere"]
        started = start(live, detail["id"], job["id"])
        report(
            live,
            detail["id"],
            job["id"],
            "finish",
            {"attempt": started["attempt"], "state": "failed", "error": error},
        )

    attempts = 3  # CASCADE_SWEEP_ATTEMPTS's default: queued again twice, then failed
    pending = drive(
        live, monkeypatch, lambda detail: run_to_ready(live, detail, "turing"), *[fail] * attempts
    )
    status, out, err = live.run(
        "sweep", "--sample", "--config", "SM75_RTX2060", "--config", "SM86_RTX3070", "--wait"
    )
    assert (status, pending) == (12, [])
    sweep_id = int(out.split()[1])
    assert err.splitlines()[-1] == (
        f"cascade: sweep {sweep_id}: 1 job(s) failed, 0 cancelled (`cascade sweep show {sweep_id}` lists them)"
    )
    failed = columns(out.split("jobs that failed or were cancelled")[1], "JOB")
    assert [row[1:] for row in failed] == [
        ["ampere", "SM86_RTX3070", "failed", str(attempts), "farm-1", f"sweep{sweep_id}_SM86_RTX3070", error]
    ]
    # The table still holds what ended ready.
    assert columns(out, "CONFIG")[0][:1] + columns(out, "CONFIG")[0][5:6] == ["SM75_RTX2060", "15.00"]


def test_live_show_against_names_the_kernels_that_got_better_and_worse(live):
    sweep_support.ready_trace("turing", "sm_75")
    # The build before: kernel 1 exact, kernel 2 -50 %, kernel 3 +10 %. LAUNCHES, after: +10 %,
    # -25 %, +10 %: kernel 1 10 points further, kernel 2 25 points closer, kernel 3 unchanged.
    before = [(1, 1, "_Z6vecAddPdS_S_i", None, 1000, 1000), (1, 2, "_Z6vecAddPdS_S_i", None, 2000, 1000)]
    before.append((1, 3, "_Z4gemmPfS_S_", None, 4000, 4400))
    ids = []
    for name, launches, build in (("before", before, "accelsim-before"), ("after", LAUNCHES, BUILD)):
        status, out, _ = live.run("sweep", "--trace", "turing", "--config", "SM75_RTX2060", "--name", name)
        assert status == 0
        ids.append(int(out.split()[1]))
        run_to_ready(live, live.api(f"/api/sweeps/{ids[-1]}"), "turing", launches=launches, build=build)
    status, out, _ = live.run("sweep", "show", str(ids[1]), "--against", str(ids[0]))
    assert status == 0
    api = live.api(f"/api/sweeps/{ids[1]}/accuracy", against=ids[0])["against"]
    assert (api["better"], api["worse"], api["unchanged"]) == (1, 1, 1)
    assert (
        f"against sweep {ids[0]} before (paired by {api['paired_by']}): 3 kernels compared in both, 1 better, "
        "1 worse, 1 unchanged"
    ) in out
    pair = api["pairs"][0]
    assert columns(out, "TRACE", "CONFIG", "KERNELS", "BETTER") == [
        [
            "turing",
            "SM75_RTX2060",
            "3",
            "1",
            "1",
            f"15.00 (was {pair['against_mape']:.2f})",
            f"{pair['mean_change']:+.2f}",
        ]
    ]
    assert pair["against_mape"] == pytest.approx((0 + 50 + 10) / 3)
    text = out.split("turing on SM75_RTX2060, closer to measured (change of |error|):\n")[1].splitlines()[0]
    assert (
        text.split()[:7] + text.split()[-3:]
        == "-25.0 pp -25.0 % (was -50.0 %) kernel 2 _Z6vecAddPdS_S_i".split()
    )
    text = out.split("turing on SM75_RTX2060, further from it (change of |error|):\n")[1].splitlines()[0]
    assert (
        text.split()[:7] + text.split()[-3:]
        == "+10.0 pp +10.0 % (was +0.0 %) kernel 1 _Z6vecAddPdS_S_i".split()
    )
    # And the list has both, newest first.
    status, out, _ = live.run("sweep", "list")
    assert [row[:3] for row in columns(out, "ID")] == [
        [str(ids[1]), "after", "ready"],
        [str(ids[0]), "before", "ready"],
    ]


def test_live_a_sweep_the_server_refuses_is_one_line_in_its_words(live):
    turing_and_ampere()
    status, out, err = live.run("sweep", "--trace", "turing", "--sample", "--config", "SM75_RTX2060")
    lines = [line for line in err.splitlines() if line.startswith("cascade: ")]
    assert (status, out) == (1, "") and len(lines) == 1
    assert "trace_ids or filters, not both (got sample)" in lines[0]
    status, _, err = live.run("sweep", "show", "999")
    assert status == 5 and "cascade: sweep 999 not found" in err
