"""The client is tested as its users run it: importable from client/ (the main venv installs
its one dependency, httpx), against a fake Cascade and bucket (httpx.MockTransport) here, and
against gunicorn and moto's server in test_live.py."""

import contextlib
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "client") not in sys.path:
    sys.path.insert(0, str(ROOT / "client"))

SAMPLE = ROOT / "samples" / "sample__facebook_opt-125m__h100-e2e"
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextlib.contextmanager
def deployed_cascade(tmp: Path, bucket_name: str, **settings: str):
    """Cascade's environment as deployed on moto's S3 server: the environment for gunicorn and
    manage.py (its own SQLite, one parse process, `settings` on top), a boto3 client of the
    bucket, and `manage(*args)`, which runs a command in it and answers its stdout. The live
    tests (test_live.py, test_simulate.py) start gunicorn on it."""
    import boto3
    from moto.server import ThreadedMotoServer

    from tests.gunicorn_process import clean_environ

    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    try:
        host, port = moto.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        env = clean_environ(
            **{
                "CASCADE_VAR_DIR": str(tmp),
                "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",  # unless `settings` names one
                "CASCADE_S3_BUCKET": bucket_name,
                "CASCADE_S3_ENDPOINT_URL": endpoint,
                "CASCADE_PARSE_PROCESSES": "1",
                **S3_CREDENTIALS,
                **settings,
            }
        )

        def manage(*args: str) -> str:
            done = subprocess.run(
                [sys.executable, "manage.py", *args],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            return done.stdout

        bucket = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=S3_CREDENTIALS["AWS_DEFAULT_REGION"],
            aws_access_key_id=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )
        manage("migrate", "-v", "0")
        yield env, bucket, manage
    finally:
        moto.stop()


TOKEN = "cas_test"


class FakeCascade:
    """Cascade's routes and a bucket's presigned GETs, in memory: one run, read from the shipped
    sample's folder. Tests change `objects` (the bucket) or `selection` to set a scene."""

    def __init__(self, run: Path = SAMPLE, trace_id: str = "opt"):
        self.trace_id = trace_id
        self.objects = {
            str(path.relative_to(run)): path.read_bytes()
            for path in sorted(run.rglob("*"))
            if path.is_file() and path.parts[len(run.parts)] in ("traces", "configs")
        }
        self.listed = dict(self.objects)  # what /files lists: sizes and ETags as of the listing
        self.multipart = set()  # paths whose ETag is a multipart one (no MD5)
        self.kms = set()  # paths encrypted with SSE-KMS: their ETag is no MD5
        self.selection = None
        self.state, self.error = "ready", None
        self.refused: list[dict] = []  # what /files says it left out
        self.on_bucket = None  # called with each request to the bucket, before it is answered
        self.requests: list[httpx.Request] = []

    def etag(self, path: str, body: bytes | None = None) -> str:
        if path in self.multipart:
            return '"0123456789abcdef0123456789abcdef-2"'
        if path in self.kms:
            return f'"{hashlib.md5(b"kms" + (self.listed[path] if body is None else body)).hexdigest()}"'
        return f'"{hashlib.md5(self.listed[path] if body is None else body).hexdigest()}"'

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.host == "bucket.test":
            path = unquote(request.url.path.removeprefix("/"))
            if self.on_bucket is not None:
                self.on_bucket(request)
            if path not in self.objects:
                return httpx.Response(404, text="<Error><Code>NoSuchKey</Code></Error>")
            assert "authorization" not in request.headers, "the token went to the bucket"
            body = self.objects[path]  # streamed, as a real transport's answer is
            # S3's If-Match: the object's ETag now (a multipart one stands for the listed bytes).
            now = self.etag(path) if path in self.multipart else self.etag(path, body)
            if request.headers.get("if-match") not in (None, now):
                return httpx.Response(412, text="<Error><Code>PreconditionFailed</Code></Error>")
            headers = {"Content-Length": str(len(body))}
            if path in self.kms:
                headers["x-amz-server-side-encryption"] = "aws:kms"
            return httpx.Response(200, headers=headers, stream=httpx.ByteStream(body))
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return httpx.Response(401, json={"detail": "Invalid token."})
        parts = [unquote(p) for p in request.url.raw_path.decode().split("?")[0].split("/") if p]
        if parts[:2] != ["api", "traces"]:
            return httpx.Response(404, json={"detail": "Not found."})
        if len(parts) == 2:
            return httpx.Response(200, json=[self.summary_row()])
        if parts[2] != self.trace_id:
            return httpx.Response(404, json={"detail": f"trace {parts[2]} not found"})
        route = parts[3] if len(parts) > 3 else ""
        if route == "files":
            files = [
                {
                    "path": path,
                    "key": f"accelsim-traces/{self.trace_id}/{path}",
                    "bytes": len(body),
                    "etag": self.etag(path),
                    "url": f"http://bucket.test/{path}?X-Amz-Signature=x",
                }
                for path, body in sorted(self.listed.items())
            ]
            return httpx.Response(
                200,
                json={
                    "trace_id": self.trace_id,
                    "state": self.state,
                    "error": self.error,
                    "expires_at": "2030-01-01T00:00:00Z",
                    "files": files,
                    "refused": self.refused,
                },
            )
        if route == "selection":
            if self.selection is None:
                return httpx.Response(409, json={"detail": f"trace {self.trace_id} is parsing"})
            return httpx.Response(200, json=self.selection)
        if route == "kernels.csv":
            return httpx.Response(200, text="ctx,kernel_id,name\n0x1,1,k\n0x1,2,\n")
        if route == "":
            return httpx.Response(
                200, json={**self.summary_row(), "metadata": {}, "kernels": [{"ctx": "0x1", "kernel_id": 1}]}
            )
        return httpx.Response(404, json={"detail": "Not found."})

    def summary_row(self) -> dict:
        return {
            "id": self.trace_id,
            "state": self.state,
            "error": self.error,
            "created_at": "2026-11-08T06:19:57.515017Z",
            "updated_at": "2026-11-08T06:19:57.515017Z",
            "model": "facebook/opt-125m",
            "layers": [],
            "source_gpu": "NVIDIA H100 80GB HBM3",
            "trace_gpu_arch": "sm_90",
            "suggested_sim_config": "SM90_H100",
            "kernel_count": 712,
            "bytes": sum(len(b) for b in self.objects.values()),
            "has_real_timing": True,
            "has_step_timeline": True,
            "sample": True,
        }


def selection_of(representatives: list[tuple[str, int, int]]) -> dict:
    """A /selection answer whose groups have these (ctx, kernel_id, count)."""
    return {
        "trace_id": "opt",
        "by": "unique",
        "step": None,
        "cover": 1.0,
        "tolerance": 0.01,
        "launches": sum(count for *_, count in representatives),
        "basis": "time",
        "covered": 1.0,
        "groups": [
            {
                "name": f"k{i}",
                "grid": [1, 1, 1],
                "block": [32, 1, 1],
                "count": count,
                "total_insts": 10 * count,
                "duration_ns": 5 * count,
                "share": 0.5,
                "representative": {
                    "ctx": ctx,
                    "kernel_id": kid,
                    "trace_file": f"kernel-{kid}-ctx_{ctx}.trace.xz",
                },
            }
            for i, (ctx, kid, count) in enumerate(representatives)
        ],
    }


@pytest.fixture
def fake():
    return FakeCascade()


@pytest.fixture
def cascade(fake):
    from cascade_client import Cascade

    with Cascade("http://cascade.test", TOKEN, transport=httpx.MockTransport(fake.handler)) as client:
        yield client


def read_json(path: Path):
    return json.loads(path.read_text())
