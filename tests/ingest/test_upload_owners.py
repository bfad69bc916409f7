"""Every simulation has an owner: the user whose write token first uploaded it, recorded beside
its files (`cascade-owner.json`), so that no other write token can replace, complete or delete
it, and a database rebuilt from the bucket knows it again. Uploads delete nothing: their files
wait in the folder's `.staging/` until their own `/complete` has checked them.

The simulations are real files: the sample run `sample__facebook_opt-125m__rtx2060-e2e` as `samples/`
ships it (two synthetic simulations put into the bucket directly, owned by no one), and the real Accel-Sim
run of vectoradd from the shared fixtures uploaded through the API as `cascade simulate` does.
"""

import json
import threading
from pathlib import Path

import httpx
import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core.management import call_command

from ingest import owners, passes, uploads
from simulations.models import Simulation
from simulations.signals import SimulationForbidden
from tests.helpers import PREFIX, TEST_BUCKET, bearer
from tests.ingest.test_uploads import MARKER, RUN, complete_path, post, put_all, real_run, upload_path
from traces.models import ApiToken, TraceState

SAMPLE = "sample__facebook_opt-125m__rtx2060-e2e"
SAMPLE_SIM = "accelsim-618c2ef_SM75_RTX2060"
NAME = "accelsim-SM6_TITANX"


def writer(username: str, *, staff: bool = False, scope: str = "write"):
    """An API client with a new token of `scope` for the user `username`."""
    user, _ = get_user_model().objects.get_or_create(username=username, defaults={"is_staff": staff})
    _, token = ApiToken.issue(user, scope=scope)
    return bearer(token)


def keys(s3, trace_id: str, name: str) -> list[str]:
    """The folder's keys relative to it, staged ones included."""
    base = f"{PREFIX}{trace_id}/simulations/{name}/"
    listed = s3.list_objects_v2(Bucket=TEST_BUCKET, Prefix=base)
    return sorted(obj["Key"][len(base) :] for obj in listed.get("Contents", []))


def detail(client, trace_id: str, name: str):
    return client.get(f"/api/traces/{trace_id}/simulations/{name}", HTTP_ACCEPT="application/json")


@pytest.fixture
def sample(s3, upload, db):
    """The sample run and its two simulations, as `samples/` holds them, read by a pass."""
    folder = Path(django_settings.BASE_DIR) / "samples" / SAMPLE
    files = {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != "metadata.json"
    }
    upload(SAMPLE, files, metadata=(folder / "metadata.json").read_bytes())
    passes.poll_bucket()
    assert Simulation.objects.get(trace_id=SAMPLE, name=SAMPLE_SIM).state == TraceState.READY


@pytest.fixture
def ready_trace(s3, upload, db):
    """The real vectoradd trace, ready; its log for the simulations."""
    files, log = real_run()
    upload(RUN, files, metadata={"status": "ok"})
    passes.poll_bucket()
    return log


def start(client, bodies: dict[str, bytes], name: str = NAME):
    files = [{"name": file_name, "size": len(body)} for file_name, body in bodies.items()]
    return post(client, upload_path(name), {"files": files})


def finish(client, bodies: dict[str, bytes], name: str = NAME):
    """/upload, every PUT, /complete; the completion's answer, once the read is done."""
    answer = start(client, bodies, name)
    assert answer.status_code == 200, answer.content
    completed = post(client, complete_path(name), {"multipart": put_all(answer.json(), bodies)})
    assert uploads.queue.wait_idle(60)
    return completed


# --- the reproduction: another token's /upload deletes nothing ------------------------------


@pytest.mark.django_db(transaction=True)
def test_another_tokens_upload_to_the_samples_simulation_is_a_403_and_deletes_nothing(sample, s3):
    before = keys(s3, SAMPLE, SAMPLE_SIM)
    assert before == ["sim.log.gz", "simulation.json"]
    second = writer("mallory")
    path = f"/api/traces/{SAMPLE}/simulations/{SAMPLE_SIM}/upload"
    answer = post(second, path, {"files": [{"name": "simulation.json", "size": 10}]})

    assert answer.status_code == 403
    assert answer.json() == {
        "detail": f"simulation {SAMPLE_SIM} of trace {SAMPLE} belongs to no user (its files were put "
        "into the bucket directly): only its owner or staff may replace it"
    }
    assert keys(s3, SAMPLE, SAMPLE_SIM) == before
    assert post(second, f"/api/traces/{SAMPLE}/simulations/{SAMPLE_SIM}/complete", {}).status_code == 400
    passes.poll_bucket()
    shown = detail(second, SAMPLE, SAMPLE_SIM)
    assert shown.status_code == 200
    assert (shown.json()["state"], shown.json()["owner"]) == (TraceState.READY, None)
    assert keys(s3, SAMPLE, SAMPLE_SIM) == before


# --- owners -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_uploader_owns_it_in_the_api_and_the_bucket_and_after_a_reparse(ready_trace, s3):
    alice = writer("alice")
    bodies = {"sim.log": ready_trace, "simulation.json": MARKER}
    assert finish(alice, bodies).status_code == 202
    shown = detail(alice, RUN, NAME).json()
    assert (shown["state"], shown["owner"]) == (TraceState.READY, "alice")
    listed = alice.get(f"/api/traces/{RUN}/simulations").json()
    assert [(item["name"], item["owner"]) for item in listed] == [(NAME, "alice")]
    everyone = alice.get("/api/simulations", {"trace": RUN}).json()
    assert [item["owner"] for item in everyone] == ["alice"]
    record = s3.get_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}{RUN}/simulations/{NAME}/cascade-owner.json")
    assert json.loads(record["Body"].read()) == {"owner": "alice"}

    # The database rebuilt from the bucket: the owner comes back from the record.
    Simulation.objects.all().delete()
    call_command("ingest_traces", "--reparse", stdout=open("/dev/null", "w"))
    rebuilt = Simulation.objects.get(trace_id=RUN, name=NAME)
    assert (rebuilt.state, rebuilt.owner.username) == (TraceState.READY, "alice"), rebuilt.error
    # The record is the folder's, never read as a simulator's file, nor staged files as any.
    assert [item["key"].rsplit("/", 1)[1] for item in rebuilt.files] == [
        "cascade-owner.json",
        "sim.log",
        "simulation.json",
    ]


@pytest.mark.django_db(transaction=True)
def test_another_users_upload_complete_and_delete_are_403s_naming_the_owner(ready_trace, s3):
    alice, bob = writer("alice"), writer("bob")
    bodies = {"sim.log": ready_trace, "simulation.json": MARKER}
    finish(alice, bodies)
    refused = start(bob, bodies)
    assert refused.status_code == 403
    assert refused.json() == {
        "detail": f"simulation {NAME} of trace {RUN} belongs to alice: only its owner or staff may replace it"
    }
    gone = bob.delete(f"/api/traces/{RUN}/simulations/{NAME}")
    assert gone.status_code == 403
    assert gone.json() == {
        "detail": f"simulation {NAME} of trace {RUN} belongs to alice: only its owner or staff may delete it"
    }
    # An upload alice left unfinished is hers to complete too.
    unfinished = start(alice, bodies, name="alice-later")
    assert unfinished.status_code == 200
    put_all(unfinished.json(), bodies)
    completing = post(bob, complete_path("alice-later"), {})
    assert completing.status_code == 403
    assert "is alice's: only they or staff may complete it" in completing.json()["detail"]
    assert keys(s3, RUN, "alice-later") == [
        ".staging/sim.log",
        ".staging/simulation.json",
        ".staging/upload.json",
        "cascade-owner.json",
    ]
    assert detail(alice, RUN, NAME).json()["state"] == TraceState.READY


@pytest.mark.django_db(transaction=True)
def test_a_ready_or_failed_simulation_is_never_replaced_by_an_upload_not_even_staffs(ready_trace, s3):
    alice, staff = writer("alice"), writer("operator", staff=True)
    failed = json.dumps({"status": "failed", "notes": "killed"}).encode()
    finish(alice, {"simulation.json": failed}, name="failed-run")
    finish(alice, {"sim.log": ready_trace, "simulation.json": MARKER})
    assert detail(alice, RUN, "failed-run").json()["state"] == TraceState.FAILED
    for name in (NAME, "failed-run"):
        before = keys(s3, RUN, name)
        for client in (alice, staff):
            answer = start(client, {"sim.log": b"x", "simulation.json": MARKER}, name)
            assert answer.status_code == 409
            assert answer.json() == {
                "detail": f"simulation {name} of trace {RUN} exists; delete it or choose another name"
            }
        assert keys(s3, RUN, name) == before


@pytest.mark.django_db(transaction=True)
def test_the_owner_continues_an_unfinished_upload_and_nothing_moves_before_complete(ready_trace, s3):
    alice = writer("alice")
    bodies = {"sim.log": ready_trace, "simulation.json": MARKER}
    first = start(alice, bodies)
    assert first.status_code == 200
    log = next(item for item in first.json()["files"] if item["name"] == "sim.log")
    assert f"/simulations/{NAME}/.staging/sim.log?" in log["url"]
    assert httpx.put(log["url"], content=ready_trace, headers=log["headers"]).status_code == 200
    # Registered as uploading (a pass sees the claim, never the staged files).
    passes.poll_bucket()
    waiting = detail(alice, RUN, NAME).json()
    assert (waiting["state"], waiting["owner"], waiting["reason"]) == (
        TraceState.UPLOADING,
        "alice",
        "waiting for simulation.json",
    )
    # A /complete before every file landed is a 400 that moves nothing.
    early = post(alice, complete_path(), {})
    assert early.status_code == 400
    assert early.json() == {"detail": "simulation.json has not landed: PUT the files /upload answered first"}
    assert "sim.log" not in keys(s3, RUN, NAME)
    # Asked again: the same owner's unfinished upload is continued, then completed.
    assert finish(alice, bodies).status_code == 202
    done = detail(alice, RUN, NAME).json()
    assert (done["state"], done["owner"]) == (TraceState.READY, "alice"), done["error"]
    assert keys(s3, RUN, NAME) == ["cascade-owner.json", "sim.log", "simulation.json"]


@pytest.mark.django_db(transaction=True)
def test_staff_may_replace_another_users_unfinished_upload_and_delete_any(ready_trace, sample, s3):
    alice, staff = writer("alice"), writer("operator", staff=True)
    bodies = {"sim.log": ready_trace, "simulation.json": MARKER}
    assert start(alice, bodies).status_code == 200  # never completed
    assert finish(staff, bodies).status_code == 202
    done = detail(staff, RUN, NAME).json()
    assert (done["state"], done["owner"]) == (TraceState.READY, "alice"), "staff acts on alice's"
    assert staff.delete(f"/api/traces/{RUN}/simulations/{NAME}").status_code == 204
    assert staff.delete(f"/api/traces/{SAMPLE}/simulations/{SAMPLE_SIM}").status_code == 204
    assert keys(s3, SAMPLE, SAMPLE_SIM) == [] and keys(s3, RUN, NAME) == []


@pytest.mark.django_db(transaction=True)
def test_delete_removes_the_row_and_every_file_so_no_pass_brings_it_back(ready_trace, s3):
    alice = writer("alice")
    bodies = {"sim.log": ready_trace, "simulation.json": MARKER}
    finish(alice, bodies)
    start(alice, bodies, name="half")  # a staged upload: its manifest, the claim
    for name in (NAME, "half"):
        answer = alice.delete(f"/api/traces/{RUN}/simulations/{name}")
        assert (answer.status_code, answer.content) == (204, b"")
        assert keys(s3, RUN, name) == []
    listed = s3.list_multipart_uploads(Bucket=TEST_BUCKET, Prefix=f"{PREFIX}{RUN}/")
    assert not listed.get("Uploads")
    passes.poll_bucket()
    call_command("ingest_traces", "--reparse", stdout=open("/dev/null", "w"))
    assert not Simulation.objects.filter(trace_id=RUN).exists()
    missing = detail(alice, RUN, NAME)
    assert (missing.status_code, missing.json()) == (
        404,
        {"detail": f"simulation {NAME} of trace {RUN} not found"},
    )
    # The name is free again: a new upload claims it.
    assert finish(writer("bob"), bodies).status_code == 202
    assert detail(alice, RUN, NAME).json()["owner"] == "bob"


@pytest.mark.django_db
def test_delete_says_what_is_wrong_in_the_apis_error_shape(make_trace, s3):
    make_trace(RUN, state=TraceState.READY)
    alice = writer("alice")
    for path, detail_text in (
        (f"/api/traces/{RUN}/simulations/nope", f"simulation nope of trace {RUN} not found"),
        ("/api/traces/nope/simulations/x", "trace nope not found"),
    ):
        answer = alice.delete(path)
        assert (answer.status_code, answer.json()) == (404, {"detail": detail_text})
    reader = writer("reader", scope="read").delete(f"/api/traces/{RUN}/simulations/x")
    assert reader.status_code == 403
    assert reader.json() == {
        "detail": "this token's scope is read: deleting a simulation needs a write token "
        "(manage.py create_token NAME --scope write)"
    }


# --- /complete -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_complete_with_a_bogus_upload_id_is_a_400(make_trace, s3, settings):
    settings.CASCADE_SIM_MULTIPART_BYTES = 1024
    make_trace(RUN, state=TraceState.READY)
    alice = writer("alice")
    files = [{"name": "sim.log", "size": 2000}, {"name": "simulation.json", "size": 10}]
    assert post(alice, upload_path(), {"files": files}).status_code == 200
    for upload_id in ("bogus", "x" * 1000, "../../etc"):
        bogus = [{"name": "sim.log", "upload_id": upload_id, "parts": [{"part_number": 1, "etag": '"e"'}]}]
        answer = post(alice, complete_path(), {"multipart": bogus})
        assert answer.status_code == 400, answer.content
        assert (
            answer.json()["detail"].startswith("sim.log: ")
            and "not the upload_id /upload answered" in (answer.json()["detail"])
        )


# --- names: the path rule ----------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "says"),
    [
        (".", "an empty or `.` component"),
        ("..", "a `..` component"),
        ("CON", "a Windows device name"),
        ("nul.txt", "a Windows device name"),
        ("com1", "a Windows device name"),
        ("a.", "a component ending in a dot or a space (Windows drops them)"),
    ],
)
def test_names_the_path_rule_refuses_are_a_400_in_one_sentence(make_trace, s3, name, says):
    make_trace(RUN, state=TraceState.READY)
    alice = writer("alice")
    files = [{"name": "simulation.json", "size": 10}]
    answer = post(alice, upload_path(name), {"files": files})
    assert answer.status_code == 400, answer.content
    assert answer.json() == {"detail": f"a simulation's name is a folder's name, and {name!r} is {says}"}
    assert post(alice, complete_path(name), {}).status_code == 400
    assert not s3.list_objects_v2(Bucket=TEST_BUCKET, Prefix=PREFIX).get("Contents")


@pytest.mark.django_db
def test_dot_dot_escaped_in_the_url_is_refused_too(make_trace, s3):
    make_trace(RUN, state=TraceState.READY)
    answer = post(
        writer("alice"),
        f"/api/traces/{RUN}/simulations/%2e%2e/upload",
        {"files": [{"name": "simulation.json", "size": 10}]},
    )
    assert answer.status_code in (400, 404), answer.content
    assert answer["Content-Type"].startswith("application/json")
    assert not s3.list_objects_v2(Bucket=TEST_BUCKET, Prefix=PREFIX).get("Contents")


@pytest.mark.django_db
def test_uploads_claiming_one_new_name_at_once_make_one_owner(s3):
    """Of users whose /upload claims the same new name at the same moment, exactly one owns it
    (S3's conditional PUT, as pushes claim a run); the others are refused, naming that owner,
    whatever the interleaving."""
    files = [{"name": "sim.log", "size": 10}, {"name": "simulation.json", "size": 10}]
    for attempt in range(5):
        name, start, answers = f"race-{attempt}", threading.Barrier(4), {}

        def claim(user: str, name=name, start=start, answers=answers) -> None:
            start.wait()
            try:
                uploads.upload_urls(trace_id=RUN, name=name, files=files, seconds=60, username=user)
                answers[user] = None
            except SimulationForbidden as error:
                answers[user] = str(error)

        threads = [threading.Thread(target=claim, args=(f"user{n}",)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        [owner] = [user for user, refusal in answers.items() if refusal is None]
        assert owners.read_owner(uploads.folder_key(RUN, name)) == owner
        assert {refusal for user, refusal in answers.items() if user != owner} == {
            f"simulation {name} of trace {RUN} belongs to {owner}: only its owner or staff may replace it"
        }
