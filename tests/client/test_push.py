"""`cascade push` against Cascade as deployed (gunicorn, moto's S3 server), from a client that holds
no bucket credentials: only CASCADE_URL and a write token.

The run is real tracer output (shared_fixture("real-tracer"): a PyTorch training step's legacy
`stats.csv` and `kernelslist.g`, as the NVBit tracer wrote them), copied into a run folder here
with a metadata.json. The truth it is compared with is the same folder put into the bucket
directly and ingested as any upload.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from cascade_client.progress import size

from tests.client.conftest import ROOT, deployed_cascade
from tests.gunicorn_process import gunicorn
from tests.helpers import shared_fixture

pytestmark = pytest.mark.slow

BUCKET = "cascade-client-push"
PREFIX = "accelsim-traces/"
REAL = "MrTang-Yuhan+Accel-Sim-Flashinfer__test-traces__nn-onestep__traces__"  # 121 launches
PART = 5 * 1024**2  # S3's smallest part


def real_run(folder: Path, extra: int = 0) -> Path:
    """A tracer's run folder from the real files (copied: the fixtures stay as they are); with
    `extra`, a file of that many bytes beside them (an upload in parts)."""
    source = shared_fixture("real-tracer")
    (folder / "traces").mkdir(parents=True)
    for name in ("stats.csv", "kernelslist.g"):
        shutil.copyfile(source / (REAL + name), folder / "traces" / name)
    if extra:
        (folder / "extra").mkdir()
        (folder / "extra" / "report.bin").write_bytes(os.urandom(extra))
    (folder / "metadata.json").write_text(json.dumps({"status": "ok", "model": "nn-onestep"}))
    return folder


class Live:
    def __init__(self, url, env, manage, bucket, tmp):
        self.url, self.env, self.manage, self.bucket, self.tmp = url, env, manage, bucket, tmp
        self.tokens = {}

    def token(self, user: str) -> str:
        if user not in self.tokens:
            self.tokens[user] = self.manage("create_token", user, "--scope", "write").splitlines()[-1]
        return self.tokens[user]

    def push(self, user: str, run: Path, *args: str) -> subprocess.CompletedProcess:
        """`cascade push` as a collaborator runs it: no AWS variable in its environment."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CASCADE_", "DJANGO_"))}
        env |= {
            "PYTHONPATH": str(ROOT / "client"),
            "CASCADE_URL": self.url,
            "CASCADE_TOKEN": self.token(user),
        }
        command = [sys.executable, "-m", "cascade_client", "push", str(run), *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=self.tmp)

    def get(self, path: str, user: str = "alice"):
        headers = {"Authorization": f"Bearer {self.token(user)}"}
        return httpx.get(self.url + path, headers=headers, timeout=30).json()

    def ingested(self, trace_id: str) -> dict:
        deadline = time.monotonic() + 120
        while True:
            self.manage("ingest_traces", "--trace", trace_id)
            trace = self.get(f"/api/traces/{trace_id}")
            if trace.get("state") in ("ready", "failed"):
                return trace
            assert time.monotonic() < deadline, trace
            time.sleep(0.2)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    shared_fixture("real-tracer")  # skips, saying why, where the shared fixtures are absent
    tmp = tmp_path_factory.mktemp("client-push")
    settings = {"CASCADE_SIM_MULTIPART_BYTES": str(PART), "CASCADE_SIM_PART_BYTES": str(PART)}
    with deployed_cascade(tmp, BUCKET, **settings) as (env, bucket, manage):
        bucket.create_bucket(Bucket=BUCKET)
        with gunicorn(env, tmp, workers=2) as server:
            yield Live(server.url, env, manage, bucket, tmp)


def test_a_pushed_run_becomes_ready_owned_by_its_pusher_with_the_kernels_of_a_direct_upload(live):
    run = real_run(live.tmp / "nn-onestep")
    done = live.push("alice", run, "--id", "pushed")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pushed pushed: 3 files" in done.stdout and "owned by alice" in done.stdout
    # Off a terminal, a line per file with its size on disk (it once said 0 B for every file).
    sizes = {path.name: path.stat().st_size for path in run.rglob("*") if path.is_file()}
    uploaded = [line for line in done.stderr.splitlines() if line.startswith("uploaded ")]
    assert uploaded and all(
        line.endswith(f"({size(sizes[line.split()[1].rsplit('/', 1)[-1]])})") for line in uploaded
    )
    pushed = live.ingested("pushed")
    assert pushed["state"] == "ready" and pushed["owner"] == "alice", pushed
    # The same folder put into the bucket directly, with the bucket's credentials.
    for path in sorted(p for p in run.rglob("*") if p.is_file()):
        key = f"{PREFIX}direct/{path.relative_to(run).as_posix()}"
        live.bucket.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
    direct = live.ingested("direct")
    assert direct["state"] == "ready" and direct["owner"] is None
    assert pushed["kernels"] == direct["kernels"] and pushed["kernel_count"] == 121
    assert pushed["bytes"] == direct["bytes"]  # the owner record is not the run's
    files = live.get("/api/traces/pushed/files")["files"]
    assert sorted(f["path"] for f in files) == ["metadata.json", "traces/kernelslist.g", "traces/stats.csv"]
    assert not (run / ".cascade-push.json").exists()
    # A database rebuilt from the bucket finds the owner again, in the record beside the files.
    live.manage("shell", "-c", "from traces.models import Trace; Trace.objects.update(owner=None)")
    live.manage("ingest_traces", "--trace", "pushed", "--reparse")
    assert live.get("/api/traces/pushed")["owner"] == "alice"


def test_another_users_push_is_403_naming_the_owner_and_a_ready_trace_is_409(live):
    run = real_run(live.tmp / "again")
    first = live.push("alice", run, "--id", "claimed")
    assert first.returncode == 0, first.stderr
    other = live.push("bob", run, "--id", "claimed")
    assert other.returncode == 1
    (line,) = other.stderr.strip().splitlines()
    assert line.startswith("cascade: ") and "403" in line and "belongs to alice" in line
    assert live.ingested("claimed")["state"] == "ready"
    again = live.push("alice", run, "--id", "claimed")
    assert again.returncode == 8  # not ready for what was asked (409)
    (line,) = again.stderr.strip().splitlines()
    assert "claimed is ready: a push never replaces it" in line
    # A trace put into the bucket directly has no owner: no user's push takes it over.
    live.bucket.put_object(Bucket=BUCKET, Key=f"{PREFIX}by-bucket/metadata.json", Body=b'{"status": "ok"}')
    theirs = live.push("bob", run, "--id", "by-bucket")
    assert theirs.returncode == 1 and "put into the bucket directly" in theirs.stderr


class Interrupting(httpx.HTTPTransport):
    """The network, cut at the `cut`-th PUT of a part (None: never); every PUT counted."""

    def __init__(self, cut: int | None = None):
        super().__init__()
        self.cut, self.parts, self.puts = cut, [], []

    def handle_request(self, request):
        if request.method == "PUT":
            query = dict(httpx.QueryParams(request.url.query))
            if "partNumber" in query:
                if self.cut is not None and len(self.parts) + 1 == self.cut:
                    raise httpx.ConnectError("the network went away")
                self.parts.append(int(query["partNumber"]))
            self.puts.append(request.url.path.rsplit("/", 1)[-1])
        return super().handle_request(request)


def test_an_interrupted_push_resumes_without_sending_finished_parts_again(live):
    from cascade_client import Cascade
    from cascade_client.errors import CascadeError
    from cascade_client.push import push

    run = real_run(live.tmp / "large", extra=2 * PART + 1024)  # three parts
    cut = Interrupting(cut=3)
    with Cascade(live.url, live.token("carol"), transport=cut) as client:
        with pytest.raises(CascadeError, match="cannot reach the bucket"):
            push(client, run, "resumed")
    assert sorted(cut.parts) == [1, 2]
    kept = json.loads((run / ".cascade-push.json").read_text())
    assert sorted(kept["multipart"]["extra/report.bin"]["parts"]) == ["1", "2"]
    assert live.get("/api/traces/resumed").get("state") != "ready"  # no metadata.json yet

    again = Interrupting()
    with Cascade(live.url, live.token("carol"), transport=again) as client:
        result = push(client, run, "resumed")
    assert again.parts == [3]  # parts 1 and 2 were not sent again
    sent_before = {name for name in cut.puts}
    assert not sent_before & set(again.puts) - {"report.bin"}  # nor the files already up
    assert again.puts[-1] == "metadata.json" and result.owner == "carol"
    trace = live.ingested("resumed")
    assert trace["state"] == "ready" and trace["owner"] == "carol" and trace["kernel_count"] == 121
    body = live.bucket.get_object(Bucket=BUCKET, Key=f"{PREFIX}resumed/extra/report.bin")["Body"].read()
    assert body == (run / "extra" / "report.bin").read_bytes()


def test_bad_names_and_oversized_files_are_refused_before_any_request(tmp_path):
    from cascade_client import Cascade
    from cascade_client.errors import CascadeError
    from cascade_client.push import push

    def refuse(request):
        raise AssertionError(f"a request was sent: {request.url}")

    run = real_run(tmp_path / "run")
    with Cascade("http://cascade.test", "cas_x", transport=httpx.MockTransport(refuse)) as client:
        for trace_id, said in (("..", "`..`"), ("CON", "device name"), ("a.", "ending in a dot")):
            with pytest.raises(CascadeError, match=said):
                push(client, run, trace_id)
        (run / "traces" / "bad\\name").write_text("x")
        with pytest.raises(CascadeError, match="cannot be uploaded"):
            push(client, run, "ok")
        (run / "traces" / "bad\\name").unlink()
        (run / "metadata.json").write_bytes(b" " * (8 * 1024**2 + 1))
        with pytest.raises(CascadeError, match="metadata.json: 8388609 bytes"):
            push(client, run, "ok")
        (run / "metadata.json").unlink()
        with pytest.raises(CascadeError, match="no metadata.json"):
            push(client, run, "ok")
