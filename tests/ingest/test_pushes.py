"""A run pushed through the API (`POST /api/traces/{trace_id}/upload`, then `/complete`), against
moto's real S3 server: who may push, what a run's folder accepts, and metadata.json signed only
once every other file landed. `cascade push` end to end is tests/client/test_push.py."""

import json
import threading

import httpx
import pytest
from django.contrib.auth import get_user_model

from ingest import bucket, owners, passes
from tests.helpers import PREFIX, TEST_BUCKET, bearer, token_client
from traces.models import ApiToken, Trace

STATS = b"kernel_name,kernel_id\n"  # bytes are bytes here: no pass reads them
METADATA = b'{"status": "ok"}'


def client_of(username: str, *, staff: bool = False, scope: str = "write"):
    user, _ = get_user_model().objects.get_or_create(username=username, defaults={"is_staff": staff})
    _, token = ApiToken.issue(user, scope=scope)
    return bearer(token)


def post(client, path: str, body):
    return client.post(path, data=json.dumps(body), content_type="application/json")


RUN_FILES = [
    {"name": "traces/stats.csv", "size": len(STATS)},
    {"name": "metadata.json", "size": len(METADATA)},
]


def put(target: dict, body: bytes) -> None:
    response = httpx.put(target["url"], content=body, headers=target["headers"])
    assert response.status_code == 200, response.text


@pytest.mark.django_db
def test_a_push_signs_every_file_but_metadata_json_which_complete_signs_once_the_rest_landed(
    s3, admin_client
):
    alice = client_of("alice")
    answer = post(alice, "/api/traces/run-1/upload", {"files": RUN_FILES})
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert body["owner"] == "alice" and [f["name"] for f in body["files"]] == ["traces/stats.csv"]
    # Nothing landed yet: no metadata.json URL, and it is not in the bucket.
    early = post(alice, "/api/traces/run-1/complete", {"files": RUN_FILES})
    assert early.status_code == 400
    assert early.json()["detail"].startswith("1 file(s) have not landed whole: traces/stats.csv (not there")
    put(body["files"][0], STATS)
    done = post(alice, "/api/traces/run-1/complete", {"files": RUN_FILES})
    assert done.status_code == 200, done.json()
    assert (
        done.json()["url"] == "/api/traces/run-1" and bucket.head_etag(f"{PREFIX}run-1/metadata.json") is None
    )
    put(done.json()["metadata"], METADATA)
    assert s3.get_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}run-1/metadata.json")["Body"].read() == METADATA
    assert owners.read_owner(bucket.run_prefix("run-1")) == "alice"
    # The pass that reads it sets its owner from the record, whatever the parse makes of it
    # (these stats are no real ones); the admin shows who.
    passes.poll_bucket()
    assert Trace.objects.get(pk="run-1").owner.username == "alice"
    page = admin_client.get("/admin/traces/trace/run-1/change/")
    assert page.status_code == 200 and b"alice" in page.content


@pytest.mark.django_db
def test_only_the_owner_or_staff_pushes_to_a_trace_and_a_bucket_upload_is_staffs(s3, upload):
    post(client_of("alice"), "/api/traces/run-2/upload", {"files": RUN_FILES})
    refused = post(client_of("bob"), "/api/traces/run-2/upload", {"files": RUN_FILES})
    assert refused.status_code == 403
    assert refused.json()["detail"] == "trace run-2 belongs to alice: only its owner or staff may push to it"
    assert post(client_of("bob"), "/api/traces/run-2/complete", {"files": RUN_FILES}).status_code == 403
    staff = post(client_of("operator", staff=True), "/api/traces/run-2/upload", {"files": RUN_FILES})
    assert staff.status_code == 200 and staff.json()["owner"] == "alice"  # staff does not take it over
    upload("by-bucket", {"traces/stats.csv": STATS}, metadata=None)
    theirs = post(client_of("alice"), "/api/traces/by-bucket/upload", {"files": RUN_FILES})
    assert theirs.status_code == 403 and "put into the bucket directly" in theirs.json()["detail"]
    staff = post(client_of("operator", staff=True), "/api/traces/by-bucket/upload", {"files": RUN_FILES})
    assert staff.status_code == 200 and staff.json()["owner"] is None
    assert owners.read_owner(bucket.run_prefix("by-bucket")) is None


@pytest.mark.django_db
def test_two_claims_at_once_make_one_owner(s3):
    """S3's conditional PUT (`If-None-Match: *`): of users claiming one id at the same moment,
    exactly one writes the record, whatever the interleaving."""
    for attempt in range(5):
        folder = bucket.run_prefix(f"race-{attempt}")
        start, won = threading.Barrier(4), []

        def claim(user: str, folder=folder, start=start, won=won) -> None:
            start.wait()
            if owners.claim_owner(folder, user):
                won.append(user)

        threads = [threading.Thread(target=claim, args=(f"user{n}",)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(won) == 1 and owners.read_owner(folder) == won[0]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "trace_id, names, said",
    [
        ("..", RUN_FILES, "cannot be a run's id: it has a `..` component"),
        ("nul.txt", RUN_FILES, "a Windows device name"),
        ("run", [*RUN_FILES, {"name": "traces/../x", "size": 1}], "`..` component"),
        ("run", [*RUN_FILES, {"name": "cascade-owner.json", "size": 20}], "does not write Cascade's own"),
        ("run", [*RUN_FILES, {"name": "simulations/a/sim.log", "size": 1}], "does not write"),
        ("run", [RUN_FILES[0]], "metadata.json is missing"),
        ("run", [*RUN_FILES, {"name": "traces/stats_ctx_0x1", "size": 2 * 1024**3 + 1}], "not between 0 and"),
        (
            "run",
            [RUN_FILES[0], {"name": "metadata.json", "size": 8 * 1024**2 + 1}],
            "not between 1 and 8388608",
        ),
        ("run", [*RUN_FILES, RUN_FILES[0]], "each file is named once"),
    ],
)
def test_what_a_runs_folder_does_not_take_is_a_400_before_any_write(s3, trace_id, names, said):
    refused = post(client_of("alice"), f"/api/traces/{trace_id}/upload", {"files": names})
    assert refused.status_code == 400 and said in refused.json()["detail"], refused.json()
    assert not bucket.holds_objects(PREFIX)


@pytest.mark.django_db
def test_a_read_token_and_an_unknown_upload_id_are_refused(s3):
    read = post(token_client("read"), "/api/traces/run-3/upload", {"files": RUN_FILES})
    assert read.status_code == 403 and "pushing a trace needs a write token" in read.json()["detail"]
    bogus = [{**RUN_FILES[0], "upload_id": "nope"}, RUN_FILES[1]]
    refused = post(client_of("alice"), "/api/traces/run-3/upload", {"files": bogus})
    assert refused.status_code == 400
    assert refused.json()["detail"] == "traces/stats.csv: no multipart upload 'nope' is in progress for it"
