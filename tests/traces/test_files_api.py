"""`GET /api/traces/{trace_id}/files`: a run's files as presigned S3 GETs.

The contract, as these tests check it against moto's server and a real tracer run:
- the files metadata.json lists and metadata.json itself (or, without a list, every file of
  the run's folder), never its `simulations/` folder, in path order, each with its path in the
  folder, its key, its size and its ETag as the bucket has them;
- each URL downloads the file's exact bytes with no Authorization header, from the bucket:
  the request costs no S3 request and no byte passes through Cascade; it is pinned to the
  listed ETag (`If-Match`, a signed header): once the object is replaced, S3 answers 412;
- a key whose path is not a plain relative POSIX path (`..`, a backslash, a drive or UNC
  prefix, a control character) is neither listed nor signed, and is named under `refused`;
- each URL is a valid Signature Version 4 presigned GET for the host it names, valid for
  CASCADE_PRESIGN_SECONDS from `expires_at` at the latest, signed for
  CASCADE_S3_PUBLIC_ENDPOINT_URL's host when that is set;
- a trace still uploading answers with what has landed (401 and 404 are the endpoint battery's,
  tests/traces/test_endpoint_battery.py).

moto's server checks neither the signature nor the expiry of a presigned URL (it authenticates
only requests with an Authorization header, and only when its IAM checks are on; moto 5.2):
`sigv4_refusal` below is the check S3 makes, written from AWS's Signature Version 4
specification, and the expiry is checked with it.
"""

import hashlib
import hmac
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

import orjson
import pytest

from ingest import storage
from ingest.passes import poll_bucket
from tests.helpers import PREFIX, TEST_BUCKET, VECADD_CTX, shared_fixture
from traces.models import Trace, TraceState

RUN = "vecadd-files"
# The credentials tests/conftest.py's s3_server fixture puts in the environment.
SECRET_KEY = "testing"


# --- an independent check of a presigned URL: AWS Signature Version 4, query-string form ------


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def sigv4_refusal(
    url: str, *, secret_key: str = SECRET_KEY, now: datetime | None = None, headers: dict | None = None
) -> str | None:
    """Why S3 would refuse this presigned GET (None: it would accept it), from AWS's
    "Authenticating Requests: Using Query Parameters (AWS Signature Version 4)": the canonical
    request (method, URI, sorted query without the signature, the signed `host` header,
    UNSIGNED-PAYLOAD), the string to sign, the key derived from the secret, date, region and
    service, and the expiry, X-Amz-Date plus X-Amz-Expires. `headers` are the ones the GET
    sends besides `host` (the signed ones must be there, with their signed values)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if query.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
        return "not Signature Version 4"
    sent = {"host": parts.netloc, **{name.lower(): value for name, value in (headers or {}).items()}}
    signed = query.get("X-Amz-SignedHeaders", "").split(";")
    if signed[0] != "host" or signed != sorted(signed):
        return f"signs {query.get('X-Amz-SignedHeaders')}"
    if any(name not in sent for name in signed):
        return "a signed header is missing"
    signed_at = datetime.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    expires = int(query["X-Amz-Expires"])
    if not 1 <= expires <= 604800:
        return "X-Amz-Expires out of range"
    if (now or datetime.now(UTC)) > signed_at + timedelta(seconds=expires):
        return "Request has expired"
    canonical_query = "&".join(
        f"{quote(name, safe='-_.~')}={quote(value, safe='-_.~')}"
        for name, value in sorted(query.items())
        if name != "X-Amz-Signature"
    )
    canonical_request = "\n".join(
        [
            "GET",
            parts.path,
            canonical_query,
            *(f"{name}:{sent[name].strip()}" for name in signed),
            "",
            ";".join(signed),
            "UNSIGNED-PAYLOAD",
        ]
    )
    scope = query["X-Amz-Credential"].split("/", 1)[1]
    date, region, service, _ = scope.split("/")
    string_to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            query["X-Amz-Date"],
            scope,
            hashlib.sha256(canonical_request.encode()).hexdigest(),
        ]
    )
    key = _hmac(f"AWS4{secret_key}".encode(), date)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    expected = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    return None if hmac.compare_digest(expected, query["X-Amz-Signature"]) else "SignatureDoesNotMatch"


def download(url: str, etag: str | None = None) -> bytes:
    """A GET with urllib and nothing else: no Authorization header, no session; `If-Match`
    with the listed ETag, as the URL is signed for."""
    request = urllib.request.Request(url, headers={"If-Match": etag} if etag else {})
    assert "Authorization" not in request.headers
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read()


# --- runs in the bucket ---------------------------------------------------------------------------


def vecadd_files() -> dict[str, bytes]:
    """A real tracer run (shared_fixture("accelsim-vecadd-v5")) and what the tracer writes beside it."""
    folder = shared_fixture("accelsim-vecadd-v5")
    return {
        f"traces/stats_ctx_{VECADD_CTX}": (folder / f"stats_ctx_{VECADD_CTX}").read_bytes(),
        f"traces/kernelslist_ctx_{VECADD_CTX}": (folder / f"kernelslist_ctx_{VECADD_CTX}").read_bytes(),
        "traces/kernelslist.g": (folder / "kernelslist.g").read_bytes(),
        f"traces/kernel-1-ctx_{VECADD_CTX}.trace.xz": b"\xfd7zXZ\x00" + bytes(range(256)) * 4,
        "configs/gpgpusim.config": b"-gpgpu_n_clusters 46\n",
        "configs/trace.config": b"-trace_opcode_latency_initiation_int 4,1\n",
    }


def put(s3, run_id: str, name: str, body: bytes) -> None:
    s3.put_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}{run_id}/{name}", Body=body)


def upload_run(s3, run_id: str, files: dict[str, bytes], *, listed: list[str] | None, extra=None) -> bytes:
    """The files, then anything `extra` (left behind, not listed), then metadata.json listing
    `listed` (full keys and relative ones, as the contract allows; None: no list). Returns
    metadata.json's bytes."""
    for name, body in {**files, **(extra or {})}.items():
        put(s3, run_id, name, body)
    metadata = {"status": "ok"}
    if listed is not None:
        metadata["files"] = [
            {"key": f"{PREFIX}{run_id}/{name}" if n % 2 else name, "bytes": len(files[name])}
            for n, name in enumerate(listed)
        ]
    raw = orjson.dumps(metadata)
    put(s3, run_id, "metadata.json", raw)
    return raw


def expected_files(s3, run_id: str, names: dict[str, bytes]) -> list[dict]:
    """What the bucket itself says of these files (path order): key, size, ETag."""
    expected = []
    for name in sorted(names):
        key = f"{PREFIX}{run_id}/{name}"
        head = s3.head_object(Bucket=TEST_BUCKET, Key=key)
        expected.append({"path": name, "key": key, "bytes": head["ContentLength"], "etag": head["ETag"]})
    return expected


def without_urls(answer: dict) -> list[dict]:
    return [{key: value for key, value in item.items() if key != "url"} for item in answer["files"]]


@pytest.fixture
def vecadd_run(s3, db):
    """The vecadd run, ready, its metadata.json listing its files; a stale file beside them and a
    simulation in its folder, neither listed. Returns {path: bytes} of what must be served."""
    files = vecadd_files()
    raw = upload_run(
        s3,
        RUN,
        files,
        listed=list(files),
        extra={
            "traces/stats_ctx_0xold": b"left by an earlier upload\n",
            "simulations/accelsim-SM90_H100/sim.log": b"GPGPU-Sim ...\n",
        },
    )
    poll_bucket()
    assert Trace.objects.get(pk=RUN).state == TraceState.READY
    return {**files, "metadata.json": raw}


# --- the listed files ---------------------------------------------------------------------------------


def test_the_listed_files_and_metadata_json_in_path_order(api, s3, vecadd_run):
    response = api.get(f"/api/traces/{RUN}/files")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    answer = response.json()
    assert list(answer) == ["trace_id", "state", "error", "expires_at", "files", "refused"]
    assert (answer["trace_id"], answer["state"], answer["error"], answer["refused"]) == (
        RUN,
        "ready",
        None,
        [],
    )
    assert without_urls(answer) == expected_files(s3, RUN, vecadd_run)
    paths = [item["path"] for item in answer["files"]]
    assert paths == sorted(paths)
    assert "metadata.json" in paths
    assert not any(path.startswith("simulations/") or path.endswith("0xold") for path in paths)


def test_each_url_downloads_the_exact_bytes_without_a_token(api, vecadd_run):
    answer = api.get(f"/api/traces/{RUN}/files").json()
    assert len(answer["files"]) == len(vecadd_run)
    for item in answer["files"]:
        assert download(item["url"], item["etag"]) == vecadd_run[item["path"]], item["path"]
        assert hashlib.md5(vecadd_run[item["path"]]).hexdigest() == item["etag"].strip('"')


def test_the_urls_are_valid_sigv4_until_expires_at(api, vecadd_run, settings):
    settings.CASCADE_PRESIGN_SECONDS = 900
    before = datetime.now(UTC).replace(microsecond=0)
    answer = api.get(f"/api/traces/{RUN}/files").json()
    after = datetime.now(UTC)
    expires_at = datetime.strptime(answer["expires_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert before + timedelta(seconds=900) <= expires_at <= after + timedelta(seconds=900)
    for item in answer["files"]:
        query = dict(parse_qsl(urlsplit(item["url"]).query))
        assert query["X-Amz-Expires"] == "900"
        signed_at = datetime.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        assert expires_at <= signed_at + timedelta(seconds=900)  # valid at least until expires_at
        pinned = {"If-Match": item["etag"]}
        assert sigv4_refusal(item["url"], headers=pinned) is None
        assert sigv4_refusal(item["url"], headers=pinned, now=expires_at) is None
        late = signed_at + timedelta(seconds=901)  # its own expiry: signed later, it lasts later
        assert sigv4_refusal(item["url"], headers=pinned, now=late) == "Request has expired"
        assert sigv4_refusal(item["url"], headers=pinned, secret_key="another") == "SignatureDoesNotMatch"
        # Pinned to the listed ETag: a GET without it, or with another, is refused.
        assert sigv4_refusal(item["url"]) == "a signed header is missing"
        assert sigv4_refusal(item["url"], headers={"If-Match": '"0"'}) == "SignatureDoesNotMatch"


@pytest.mark.slow
def test_a_url_past_its_expiry_is_refused(api, vecadd_run, settings):
    settings.CASCADE_PRESIGN_SECONDS = 1
    item = api.get(f"/api/traces/{RUN}/files").json()["files"][0]
    assert sigv4_refusal(item["url"], headers={"If-Match": item["etag"]}) is None
    time.sleep(2)
    assert sigv4_refusal(item["url"], headers={"If-Match": item["etag"]}) == "Request has expired"


def test_the_public_endpoint_is_the_urls_host_and_signed(api, vecadd_run, settings, s3_server):
    settings.CASCADE_S3_PUBLIC_ENDPOINT_URL = "https://downloads.example.org:8443"
    answer = api.get(f"/api/traces/{RUN}/files").json()
    internal = urlsplit(s3_server).netloc
    for item in answer["files"]:
        url = urlsplit(item["url"])
        pinned = {"If-Match": item["etag"]}
        assert (url.scheme, url.netloc) == ("https", "downloads.example.org:8443")
        assert sigv4_refusal(item["url"], headers=pinned) is None
        # The host is signed: the same URL sent to the server's own address is refused.
        moved = urlunsplit(url._replace(netloc=internal))
        assert sigv4_refusal(moved, headers=pinned) == "SignatureDoesNotMatch"
    settings.CASCADE_S3_PUBLIC_ENDPOINT_URL = None
    for item in api.get(f"/api/traces/{RUN}/files").json()["files"]:
        assert urlsplit(item["url"]).netloc == internal


def test_no_s3_request_and_one_query_per_answer(api, vecadd_run, django_assert_num_queries):
    api.get("/api/traces")  # the token's first use is recorded once
    requests_before, _ = storage.meter.snapshot()
    with django_assert_num_queries(2):  # the token, the trace's row
        assert api.get(f"/api/traces/{RUN}/files").status_code == 200
    assert storage.meter.snapshot()[0] == requests_before


def test_keys_with_spaces_and_symbols_download(api, s3, db):
    files = {"configs/my config+v2 (copy).txt": b"-gpgpu_n_clusters 46\n", "traces/ü.txt": b"x"}
    upload_run(s3, "odd keys+1", files, listed=list(files))
    poll_bucket()
    answer = api.get("/api/traces/odd keys+1/files").json()
    got = {item["path"]: item for item in answer["files"]}
    assert sorted(got) == sorted([*files, "metadata.json"])
    for name, body in files.items():
        assert download(got[name]["url"], got[name]["etag"]) == body
        assert sigv4_refusal(got[name]["url"], headers={"If-Match": got[name]["etag"]}) is None


# --- runs without a list, uploads under way --------------------------------------------------------


def test_a_run_without_a_list_serves_its_whole_folder_but_simulations(api, s3, db):
    files = vecadd_files()
    raw = upload_run(s3, "unlisted", files, listed=None, extra={"simulations/a/sim.log": b"log"})
    poll_bucket()
    answer = api.get("/api/traces/unlisted/files").json()
    assert without_urls(answer) == expected_files(s3, "unlisted", {**files, "metadata.json": raw})


def test_an_uploading_trace_answers_with_what_has_landed(api, s3, db):
    files = vecadd_files()
    landed = dict(list(files.items())[:2])
    for name, body in landed.items():
        put(s3, "arriving", name, body)
    poll_bucket()
    assert Trace.objects.get(pk="arriving").state == TraceState.UPLOADING
    answer = api.get("/api/traces/arriving/files").json()
    assert without_urls(answer) == expected_files(s3, "arriving", landed)
    for item in answer["files"]:
        assert download(item["url"], item["etag"]) == landed[item["path"]]


def test_an_upload_waiting_for_listed_files_answers_with_those_landed(api, s3, db):
    files = vecadd_files()
    landed = dict(list(files.items())[:3])
    for name, body in landed.items():
        put(s3, "waiting", name, body)
    metadata = orjson.dumps(
        {"status": "ok", "files": [{"key": name, "bytes": len(body)} for name, body in files.items()]}
    )
    put(s3, "waiting", "metadata.json", metadata)
    put(s3, "waiting", "traces/not-listed", b"?")
    poll_bucket()
    assert Trace.objects.get(pk="waiting").state == TraceState.UPLOADING
    answer = api.get("/api/traces/waiting/files").json()
    assert without_urls(answer) == expected_files(s3, "waiting", {**landed, "metadata.json": metadata})


def test_a_trace_with_no_files_listed_yet(api, make_trace):
    make_trace("empty")
    answer = api.get("/api/traces/empty/files").json()
    assert answer["trace_id"] == "empty"
    assert answer["files"] == []


# --- the schema ---------------------------------------------------------------------------------------


def test_the_answer_conforms_to_the_schema(api, client_anon, vecadd_run):
    from tests.traces.support import response_validator

    openapi = client_anon.get("/api/schema", HTTP_ACCEPT="application/json").json()
    validator = response_validator(openapi, "/api/traces/{trace_id}/files", 200)
    validator.validate(api.get(f"/api/traces/{RUN}/files").json())
    content = openapi["paths"]["/api/traces/{trace_id}/files"]["get"]["responses"]["200"]["content"]
    (example,) = content["application/json"]["examples"].values()
    validator.validate(example["value"])
    with pytest.raises(Exception, match="Additional properties"):
        validator.validate({**api.get(f"/api/traces/{RUN}/files").json(), "extra": 1})


# --- pinned to the listed ETag; keys that would leave a client's folder -------------------------------


def test_a_replaced_object_answers_412_before_any_byte(api, s3, vecadd_run):
    """moto's server honours If-Match as S3 does (it checks no signature: sigv4_refusal above
    shows that the header is signed, so a GET without it is refused by S3)."""
    item = next(
        i for i in api.get(f"/api/traces/{RUN}/files").json()["files"] if i["path"] == "configs/trace.config"
    )
    put(s3, RUN, "configs/trace.config", b"-trace_opcode_latency_initiation_int 8,1\n")
    with pytest.raises(urllib.error.HTTPError) as refused:
        download(item["url"], item["etag"])
    assert refused.value.code == 412
    assert b"PreconditionFailed" in refused.value.read()


HOSTILE_KEYS = {
    "C:\\Windows\\x.dll": "a backslash",
    "C:/Windows/x.dll": "a colon",
    "\\\\server\\share\\x": "a backslash",
    "//server/share/x": "an absolute path",
    "a\\..\\..\\win.txt": "a backslash",
    "a/../../x": "a `..` component",
    "/etc/x": "an absolute path",
    "traces/nul\x00.trace": "a control character",
    "traces/\x1b]0;owned\x07.trace": "a control character",
    "traces/": "an empty or `.` component",
    "traces/./x": "an empty or `.` component",
    "configs/NUL.txt": "a Windows device name",
    "configs/trailing. ": "a component ending in a dot or a space",
    # Shown as `configs/exe.config`: U+202E reverses what follows it.
    "configs/\u202egifnoc.exe": "an invisible or bidirectional formatting character (U+202E)",
    "traces/\u2066kernel-1.traceg.xz": "an invisible or bidirectional formatting character (U+2066)",
    "traces/kernel\u200b-1.traceg.xz": "an invisible or bidirectional formatting character (U+200B)",
}


@pytest.mark.parametrize("path", list(HOSTILE_KEYS), ids=[repr(p) for p in HOSTILE_KEYS])
def test_a_path_that_leaves_the_folder_on_posix_or_windows_is_refused(path):
    from ingest.downloads import path_problem

    assert (path_problem(path) or "").startswith(HOSTILE_KEYS[path])


@pytest.mark.parametrize(
    "path",
    [
        "traces/kernel-1-ctx_0x6165bdd7ec90.trace.xz",
        "configs/my config+v2 (copy).txt",
        "traces/ü.txt",
        "a..b/c..d",
    ],
)
def test_plain_relative_paths_pass(path):
    from ingest.downloads import path_problem

    assert path_problem(path) is None


def test_hostile_keys_are_neither_listed_nor_signed_and_the_answer_names_them(api, make_trace, s3):
    """A trace's recorded listing (as one recorded before ingestion left such keys out) holding
    keys whose paths would leave a client's folder: `/files` signs none of them."""
    prefix = f"{PREFIX}hostile/"
    plain = {"key": f"{prefix}configs/gpgpusim.config", "bytes": 21, "etag": '"0"'}
    # Not NUL: neither S3 nor a jsonb column holds it (its rule is tested above).
    hostile = [*(path for path in HOSTILE_KEYS if "\x00" not in path), "a/b:stream"]
    make_trace(
        "hostile",
        state=TraceState.READY,
        files=[plain, *({"key": prefix + path, "bytes": 7, "etag": '"1"'} for path in hostile)],
    )
    answer = api.get("/api/traces/hostile/files").json()
    assert [item["path"] for item in answer["files"]] == ["configs/gpgpusim.config"]
    refused = {item["key"].removeprefix(prefix): item["reason"] for item in answer["refused"]}
    assert set(refused) == set(hostile)
    assert all(reason.startswith("not listed: its path has ") for reason in refused.values())


def test_hostile_keys_uploaded_are_never_listed(api, s3, db):
    files = {"configs/gpgpusim.config": b"-gpgpu_n_clusters 46\n"}
    # Keys S3 accepts (moto refuses NUL in a key; the rule for it is tested above).
    hostile = ["C:\\Windows\\x.dll", "\\\\server\\share\\x", "a\\..\\..\\win.txt", "a/../../x", "x\x1b[2J"]
    upload_run(s3, "hostile-up", files, listed=None, extra={name: b"payload" for name in hostile})
    poll_bucket()
    answer = api.get("/api/traces/hostile-up/files").json()
    assert [item["path"] for item in answer["files"]] == ["configs/gpgpusim.config", "metadata.json"]


def test_a_failed_trace_says_so_with_its_error(api, make_trace):
    make_trace("broken", state=TraceState.FAILED, error="stats_ctx_0x1: line 3 is not a launch")
    answer = api.get("/api/traces/broken/files").json()
    assert (answer["state"], answer["error"]) == ("failed", "stats_ctx_0x1: line 3 is not a launch")
