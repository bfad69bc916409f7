"""A simulation uploaded through the API, as `cascade simulate` uploads it:
`POST /api/traces/{trace_id}/simulations/{name}/upload` answers presigned PUTs (multipart for
a large log), the test PUTs the real simulator's log to them over HTTP (httpx, to moto's real
server), then `POST .../complete` has the simulation read at once: `ready` without any poll
pass (the pass's functions are made to fail once the trace is ready).

The trace and the log are a real run of Accel-Sim (vectoradd, SM6_TITANX) from the shared
fixtures; the expected cycles are read from the log here with a regular expression.
"""

import json
import re

import httpx
import jsonschema
import pytest
from rest_framework.test import APIClient

from ingest import passes, scan, uploads
from simulations.models import SimulatedKernel, Simulation
from tests.helpers import PREFIX, TEST_BUCKET, shared_fixture, token_client
from tests.traces.support import nullable_to_json_schema
from traces.models import TraceState

RUN = "romnn+microgpusim__vectoradd-100-32-sm61"
LOG_NAME = "accel-sim.SM6_TITANX.log"
MARKER = json.dumps({"status": "ok", "simulator": "accel-sim", "config": "SM6_TITANX"}).encode()
CONFIG = b"-gpgpu_n_clusters 28\n"


def real_run() -> tuple[dict[str, bytes], bytes]:
    folder = shared_fixture("real-simulatable", RUN)
    traces = {f"traces/{path.name}": path.read_bytes() for path in (folder / "traces").iterdir()}
    return traces, (folder / LOG_NAME).read_bytes()


def log_cycles(log: bytes) -> list[int]:
    return [int(cycles) for cycles in re.findall(rb"^gpu_sim_cycle = (\d+)$", log, re.M)]


@pytest.fixture
def writer(db) -> APIClient:
    return token_client("write")


@pytest.fixture
def ready_run(s3, upload, monkeypatch):
    """The real trace uploaded and ingested by a pass; from then on no pass may run."""
    files, log = real_run()
    upload(RUN, files, metadata={"status": "ok"})
    passes.poll_bucket()
    assert Trace_state(RUN) == TraceState.READY

    def no_pass(*args, **kwargs):
        raise AssertionError("a poll pass ran: the upload's completion must read the simulation itself")

    monkeypatch.setattr(passes, "poll_bucket", no_pass)
    monkeypatch.setattr(scan, "scan_bucket", no_pass)
    return log


def Trace_state(trace_id: str) -> str:
    from traces.models import Trace

    return Trace.objects.get(pk=trace_id).state


def post(client: APIClient, path: str, body) -> object:
    return client.post(path, data=json.dumps(body), content_type="application/json")


def upload_path(name: str = "accelsim-SM6_TITANX", trace_id: str = RUN) -> str:
    return f"/api/traces/{trace_id}/simulations/{name}/upload"


def complete_path(name: str = "accelsim-SM6_TITANX", trace_id: str = RUN) -> str:
    return f"/api/traces/{trace_id}/simulations/{name}/complete"


def put_all(answer: dict, bodies: dict[str, bytes]) -> list[dict]:
    """Every file PUT as the answer says (simulation.json last); the multipart list to complete."""
    assert answer["files"][-1]["name"] == "simulation.json"
    multipart = []
    with httpx.Client(timeout=30) as http:
        for item in answer["files"]:
            body = bodies[item["name"]]
            if "multipart" in item:
                size = item["multipart"]["part_size"]
                parts = []
                for part in item["multipart"]["parts"]:
                    start = (part["part_number"] - 1) * size
                    put = http.put(part["url"], content=body[start : start + size])
                    assert put.status_code == 200, put.text
                    parts.append({"part_number": part["part_number"], "etag": put.headers["ETag"]})
                multipart.append(
                    {"name": item["name"], "upload_id": item["multipart"]["upload_id"], "parts": parts}
                )
            else:
                put = http.put(item["url"], content=body, headers=item["headers"])
                assert put.status_code == 200, put.text
    return multipart


def simulate_upload(client, bodies: dict[str, bytes], name: str = "accelsim-SM6_TITANX"):
    files = [{"name": file_name, "size": len(body)} for file_name, body in bodies.items()]
    answer = post(client, upload_path(name), {"files": files})
    assert answer.status_code == 200, answer.content
    multipart = put_all(answer.json(), bodies)
    return answer.json(), post(client, complete_path(name), {"multipart": multipart})


def read_done(client, name: str = "accelsim-SM6_TITANX") -> dict:
    assert uploads.queue.wait_idle(60)
    answer = client.get(f"/api/traces/{RUN}/simulations/{name}", HTTP_ACCEPT="application/json")
    assert answer.status_code == 200
    return answer.json()


def bucket_keys(s3, name: str = "accelsim-SM6_TITANX") -> list[str]:
    listed = s3.list_objects_v2(Bucket=TEST_BUCKET, Prefix=f"{PREFIX}{RUN}/simulations/{name}/")
    return sorted(obj["Key"].rsplit("/", 1)[1] for obj in listed.get("Contents", []))


def conforms(openapi: dict, path: str, response) -> dict:
    operation = openapi["paths"][path]["post"]
    content = operation["responses"][str(response.status_code)]["content"]["application/json"]
    schema = {**content["schema"], "components": nullable_to_json_schema(openapi["components"])}
    body = response.json()
    jsonschema.Draft4Validator(nullable_to_json_schema(schema)).validate(body)
    return body


# --- the loop ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_small_files_put_then_complete_read_the_real_log_at_once(ready_run, writer, s3):
    log = ready_run
    bodies = {"sim.log": log, "gpgpusim.config": CONFIG, "simulation.json": MARKER}
    answer, completed = simulate_upload(writer, bodies)
    assert [item["name"] for item in answer["files"]] == ["sim.log", "gpgpusim.config", "simulation.json"]
    for item in answer["files"]:
        assert item["headers"] == {"Content-Length": str(len(bodies[item["name"]]))}
        assert "X-Amz-SignedHeaders=content-length%3Bhost" in item["url"], "the length is signed"
    assert completed.status_code == 202
    body = completed.json()
    assert body["url"] == f"/api/traces/{RUN}/simulations/accelsim-SM6_TITANX"
    assert (body["trace_id"], body["name"]) == (RUN, "accelsim-SM6_TITANX")
    assert body["state"] in (TraceState.UPLOADING, TraceState.PARSING, TraceState.READY)

    detail = read_done(writer)
    assert detail["state"] == TraceState.READY, detail["error"]
    assert detail["config"] == "SM6_TITANX"
    sim = Simulation.objects.get(trace_id=RUN)
    cycles = list(
        SimulatedKernel.objects.filter(simulation=sim).order_by("uid").values_list("sim_cycles", flat=True)
    )
    assert cycles == log_cycles(log) == [5534]
    # The files, and who uploaded them (ingest.owners), nothing staged left behind.
    assert bucket_keys(s3) == ["cascade-owner.json", "gpgpusim.config", "sim.log", "simulation.json"]
    assert detail["owner"] == "write-token"


@pytest.mark.django_db(transaction=True)
def test_a_large_log_goes_up_in_parts_completed_by_the_server(ready_run, writer, s3, settings):
    settings.CASCADE_SIM_MULTIPART_BYTES = 1024**2
    settings.CASCADE_SIM_PART_BYTES = 5 * 1024**2  # moto's (and S3's) smallest part
    log = ready_run + b"\n" * (6 * 1024**2)  # blank lines: the same log to the simulator's reader
    answer, completed = simulate_upload(writer, {"sim.log": log, "simulation.json": MARKER})
    (large,) = [item for item in answer["files"] if item["name"] == "sim.log"]
    assert "url" not in large
    assert large["multipart"]["part_size"] == 5 * 1024**2
    assert [p["part_number"] for p in large["multipart"]["parts"]] == [1, 2]
    assert completed.status_code == 202, completed.content
    # Completed in the staging area, then copied into the folder whole.
    moved = s3.get_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}{RUN}/simulations/accelsim-SM6_TITANX/sim.log")
    assert moved["Body"].read() == log
    detail = read_done(writer)
    assert detail["state"] == TraceState.READY, detail["error"]
    sim = Simulation.objects.get(trace_id=RUN)
    assert list(SimulatedKernel.objects.filter(simulation=sim).values_list("sim_cycles", flat=True)) == [5534]


@pytest.mark.django_db(transaction=True)
def test_a_failed_run_is_failed_with_its_reason_at_once(ready_run, writer):
    marker = json.dumps({"status": "failed", "notes": "accel-sim.out was killed"}).encode()
    _, completed = simulate_upload(writer, {"simulation.json": marker})
    assert completed.status_code == 202
    detail = read_done(writer)
    assert detail["state"] == TraceState.FAILED
    assert "accel-sim.out was killed" in detail["error"]


@pytest.mark.django_db(transaction=True)
def test_a_ready_simulation_is_a_409_until_its_owner_deletes_it(ready_run, writer, s3):
    import lzma

    simulate_upload(writer, {"sim.log": ready_run, "gpgpusim.config": CONFIG, "simulation.json": MARKER})
    assert read_done(writer)["state"] == TraceState.READY
    # Again under the same name, compressed and without a config: refused, nothing touched.
    files = [{"name": "sim.log.xz", "size": 10}, {"name": "simulation.json", "size": len(MARKER)}]
    again = post(writer, upload_path(), {"files": files})
    assert again.status_code == 409
    assert again.json() == {
        "detail": f"simulation accelsim-SM6_TITANX of trace {RUN} exists; delete it or choose another name"
    }
    assert bucket_keys(s3) == ["cascade-owner.json", "gpgpusim.config", "sim.log", "simulation.json"]
    assert writer.delete(f"/api/traces/{RUN}/simulations/accelsim-SM6_TITANX").status_code == 204
    assert bucket_keys(s3) == []
    bodies = {"sim.log.xz": lzma.compress(ready_run), "simulation.json": MARKER}
    _, completed = simulate_upload(writer, bodies)
    assert completed.status_code == 202
    assert bucket_keys(s3) == ["cascade-owner.json", "sim.log.xz", "simulation.json"]
    detail = read_done(writer)
    assert detail["state"] == TraceState.READY, detail["error"]


@pytest.mark.django_db(transaction=True)
def test_with_celery_the_read_is_a_task(ready_run, writer, settings, eager):
    settings.CASCADE_CELERY_CONFIGURED = True
    _, completed = simulate_upload(writer, {"sim.log": ready_run, "simulation.json": MARKER})
    # The eager task ran inside the request: the answer's state is the read's.
    assert completed.json()["state"] == TraceState.READY
    assert uploads.queue.running is None and not uploads.queue.waiting


@pytest.mark.django_db(transaction=True)
def test_urls_are_signed_for_the_public_endpoint(ready_run, writer, settings, s3_server):
    public = s3_server.replace("127.0.0.1", "localhost")
    settings.CASCADE_S3_PUBLIC_ENDPOINT_URL = public
    answer, completed = simulate_upload(writer, {"sim.log": ready_run, "simulation.json": MARKER})
    assert all(item["url"].startswith(public + "/") for item in answer["files"])
    assert completed.status_code == 202
    assert read_done(writer)["state"] == TraceState.READY


@pytest.mark.django_db(transaction=True)
def test_both_answers_conform_to_the_schema(ready_run, writer, client_anon):
    openapi = client_anon.get("/api/schema", HTTP_ACCEPT="application/json").json()
    files = [{"name": "sim.log", "size": len(ready_run)}, {"name": "simulation.json", "size": len(MARKER)}]
    answer = post(writer, upload_path(), {"files": files})
    conforms(openapi, "/api/traces/{trace_id}/simulations/{name}/upload", answer)
    put_all(answer.json(), {"sim.log": ready_run, "simulation.json": MARKER})
    completed = post(writer, complete_path(), {})
    conforms(openapi, "/api/traces/{trace_id}/simulations/{name}/complete", completed)
    refused = post(token_client("read"), complete_path(), {})
    conforms(openapi, "/api/traces/{trace_id}/simulations/{name}/complete", refused)
    read_done(writer)


# --- what is refused -------------------------------------------------------------------------

FILES = [{"name": "sim.log.xz", "size": 1000}, {"name": "simulation.json", "size": 100}]


@pytest.mark.django_db
def test_a_read_token_is_a_403_that_says_how_to_get_a_write_one(make_trace, s3):
    make_trace(RUN, state=TraceState.READY)
    reader = token_client("read")
    for path in (upload_path(), complete_path()):
        answer = post(reader, path, {"files": FILES})
        assert answer.status_code == 403
        assert answer.json() == {
            "detail": "this token's scope is read: uploading a simulation needs a write token "
            "(manage.py create_token NAME --scope write)"
        }
    assert reader.get(f"/api/traces/{RUN}/simulations").status_code == 200, "it reads as before"
    assert APIClient().post(upload_path(), {"files": FILES}, format="json").status_code == 401


@pytest.mark.django_db
def test_an_unknown_trace_is_a_404_and_one_not_ready_a_409(writer, make_trace, s3):
    answer = post(writer, upload_path(trace_id="nope"), {"files": FILES})
    assert (answer.status_code, answer.json()) == (404, {"detail": "trace nope not found"})
    assert post(writer, complete_path(trace_id="nope"), {}).status_code == 404
    make_trace("arriving", state=TraceState.UPLOADING)
    for path in (upload_path(trace_id="arriving"), complete_path(trace_id="arriving")):
        answer = post(writer, path, {"files": FILES})
        assert answer.status_code == 409
        assert answer.json()["detail"].startswith("trace arriving is uploading")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "files", "says"),
    [
        ("bad name", FILES, "a simulation's name is letters, digits"),
        ("x" * 101, FILES, "at most 100 characters"),
        ("ok", [{"name": "notes.txt", "size": 1}, *FILES[1:]], "accepts sim.log, sim.log.gz"),
        ("ok", [{"name": "../sim.log", "size": 1}, *FILES[1:]], "not '../sim.log'"),
        ("ok", FILES[:1], "simulation.json is missing"),
        ("ok", [{"name": "sim.log", "size": 1}, *FILES], "one log"),
        ("ok", [*FILES, FILES[1]], "each file is named once"),
        ("ok", [FILES[0], {"name": "simulation.json", "size": 10**6}], "simulation.json: 1000000 bytes"),
        ("ok", [{"name": "sim.log", "size": 2**40}, FILES[1]], "sim.log: 1099511627776 bytes"),
        ("ok", [{"name": "sim.log", "size": -1}, FILES[1]], "files[0].size: "),
        ("ok", [{"name": "sim.log"}, FILES[1]], "files[0].size: This field is required."),
        ("ok", [], "files: "),
        ("ok", "sim.log", "files: "),
    ],
)
def test_a_bad_request_is_a_400_that_says_what(writer, make_trace, s3, settings, name, files, says):
    settings.CASCADE_MAX_SIM_LOG_BYTES = 2**30
    make_trace(RUN, state=TraceState.READY)
    answer = post(writer, upload_path(name), {"files": files})
    assert answer.status_code == 400, answer.content
    assert says in answer.json()["detail"]
    assert list(answer.json()) == ["detail"]


@pytest.mark.django_db
def test_a_body_that_is_not_json_or_too_large_is_refused(writer, make_trace, s3):
    make_trace(RUN, state=TraceState.READY)
    answer = writer.post(upload_path(), data="{not json", content_type="application/json")
    assert answer.status_code == 400 and answer.json()["detail"].startswith(
        "the request body is not valid JSON: "
    )
    big = {"files": FILES, "padding": "x" * (1024**2 + 1)}
    assert post(writer, upload_path(), big).status_code == 413


@pytest.mark.django_db
def test_completing_with_a_wrong_part_or_nothing_is_a_400(writer, make_trace, s3, settings):
    settings.CASCADE_SIM_MULTIPART_BYTES = 1024
    make_trace(RUN, state=TraceState.READY)
    answer = post(writer, upload_path(), {"files": [{"name": "sim.log", "size": 2000}, FILES[1]]})
    (log,) = [item for item in answer.json()["files"] if item["name"] == "sim.log"]
    assert httpx.put(log["multipart"]["parts"][0]["url"], content=b"x" * 2000).status_code == 200
    # Asking again aborts the unfinished upload: its id is no more.
    again = post(writer, upload_path(), {"files": [{"name": "sim.log", "size": 2000}, FILES[1]]}).json()
    listed = s3.list_multipart_uploads(Bucket=TEST_BUCKET, Prefix=f"{PREFIX}{RUN}/")
    (again_log,) = [item for item in again["files"] if item["name"] == "sim.log"]
    assert [u["UploadId"] for u in listed.get("Uploads", [])] == [again_log["multipart"]["upload_id"]]
    log = again_log
    assert httpx.put(log["multipart"]["parts"][0]["url"], content=b"x" * 2000).status_code == 200
    wrong = [{"part_number": 1, "etag": '"0123456789abcdef0123456789abcdef"'}]
    multipart = [{"name": "sim.log", "upload_id": log["multipart"]["upload_id"], "parts": wrong}]
    answer = post(writer, complete_path(), {"multipart": multipart})
    assert answer.status_code == 400, answer.content
    assert "sim.log: S3 refused to complete the upload: InvalidPart" in answer.json()["detail"]
    gap = [{"name": "sim.log", "upload_id": "u", "parts": [{"part_number": 2, "etag": '"x"'}]}]
    assert "numbered 1 to 1" in post(writer, complete_path(), {"multipart": gap}).json()["detail"]
    for nothing in ({}, {"multipart": []}, {"multipart": None}):
        answer = post(writer, complete_path(), nothing)
        assert answer.status_code == 400 and "PUT the files /upload answered first" in answer.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_upload_and_complete_are_in_the_audit_log_with_the_token_and_never_its_urls(ready_run, writer):
    from traces.models import ApiToken, AuditEntry

    token = ApiToken.objects.get(user__username="write-token")
    bodies = {"sim.log": ready_run, "simulation.json": MARKER}
    answer, completed = simulate_upload(writer, bodies)
    assert completed.status_code == 202
    upload, complete = AuditEntry.objects.order_by("id")
    for entry in (upload, complete):
        assert (entry.trace_id, entry.simulation) == (RUN, "accelsim-SM6_TITANX")
        assert (entry.username, entry.token_prefix, entry.source) == ("write-token", token.prefix, "api")
        assert entry.address == "127.0.0.1"
    assert (upload.action, complete.action) == ("upload", "complete")
    assert upload.detail == {"files": [{"name": name, "size": len(body)} for name, body in bodies.items()]}
    held = json.dumps([upload.detail, complete.detail])
    for item in answer["files"]:
        assert item["url"].split("?")[1] not in held
    assert "Signature" not in held


@pytest.mark.django_db(transaction=True)
def test_a_refused_upload_writes_no_audit_entry(ready_run, writer):
    from traces.models import AuditEntry

    assert post(writer, upload_path(), {"files": [{"name": "../x", "size": 1}]}).status_code == 400
    assert not AuditEntry.objects.exists()
