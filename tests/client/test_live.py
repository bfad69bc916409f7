"""The client against Cascade as deployed: gunicorn, the shipped samples ingested from moto's S3
server by `manage.py`, a token from `create_token`. Expected bytes come from the bucket itself
(boto3), expected groups from the trace's JSON detail, added up here."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from tests.client.conftest import ROOT, deployed_cascade
from tests.gunicorn_process import free_port, gunicorn

pytestmark = pytest.mark.slow

BUCKET = "cascade-client-live"
PREFIX = "accelsim-traces/"
OPT = "sample__facebook_opt-125m__h100-e2e"
BIG = "client-big-run"
BIG_CTX = "0x55aa00"
BIG_BYTES = 96 * 1024 * 1024  # long enough to kill a download of it midway
VECADD = "client-vecadd"  # the real tracer's vecadd run: its kernelslist.g names a .traceg.xz it lacks
FAILED = "client-failed"


class Live:
    def __init__(self, url, token, bucket, env, tmp):
        self.url, self.token, self.bucket, self.env, self.tmp = url, token, bucket, env, tmp

    def client(self, token=None):
        from cascade_client import Cascade

        return Cascade(self.url, self.token if token is None else token)

    def cli(self, *args, token=None, url=None, **popen):
        """`python -m cascade_client ARGS` as a user's shell runs it."""
        env = {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(ROOT / "client"),
            "CASCADE_URL": url or self.url,
            "CASCADE_TOKEN": self.token if token is None else token,
        }
        return [sys.executable, "-m", "cascade_client", *args], env

    def run(self, *args, **kwargs):
        command, env = self.cli(*args, **kwargs)
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    def objects(self, run_id: str, folders=("traces/", "configs/")) -> dict[str, bytes]:
        prefix = f"{PREFIX}{run_id}/"
        found = {}
        for page in self.bucket.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            for item in page.get("Contents", []):
                path = item["Key"][len(prefix) :]
                if path.startswith(folders):
                    found[path] = self.bucket.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
        return found


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("client-live")
    with deployed_cascade(tmp, BUCKET) as (env, bucket, manage):
        manage("load_samples", "--create-bucket", "--settings", "cascade.settings_demo")
        upload_big_run(bucket)
        upload_vecadd_and_failed_runs(bucket)
        manage("ingest_traces")
        token = manage("create_token", "client-tests").splitlines()[-1]
        with gunicorn(env, tmp, workers=2) as server:
            live = Live(server.url, token, bucket, env, tmp)
            deadline = time.monotonic() + 60
            while {t["id"] for t in live.client().traces(state="ready")} < {OPT, BIG, VECADD}:
                assert time.monotonic() < deadline, "the samples never became ready"
                manage("ingest_traces")
            yield live


def upload_big_run(bucket) -> None:
    """One launch whose trace file is large, uploaded in one part (its ETag is its MD5)."""
    from tools.tracer_format import STATS_HEADER, stats_launch_half, stats_totals

    trace_file = f"kernel-1-ctx_{BIG_CTX}.trace.xz"
    files = {
        f"traces/stats_ctx_{BIG_CTX}": (
            STATS_HEADER
            + stats_launch_half(trace_file, "_Z3bigv", (4, 1, 1), (128, 1, 1))
            + stats_totals(99, 99)
        ).encode(),
        f"traces/kernelslist_ctx_{BIG_CTX}": f"MemcpyHtoD,0x0000000502000000,1024\n{trace_file}\n".encode(),
        f"traces/{trace_file}": os.urandom(BIG_BYTES),
        "configs/gpgpusim.config": b"-gpgpu_n_clusters 1\n",
        "metadata.json": b'{"status": "ok"}',
    }
    for path, body in files.items():
        bucket.put_object(Bucket=BUCKET, Key=f"{PREFIX}{BIG}/{path}", Body=body)


def upload_vecadd_and_failed_runs(bucket) -> None:
    from tests.helpers import VECADD_CTX, shared_fixture

    vecadd = shared_fixture("accelsim-vecadd-v5")
    files = {
        f"traces/{name}": (vecadd / name).read_bytes()
        for name in ("kernelslist.g", f"kernelslist_ctx_{VECADD_CTX}", f"stats_ctx_{VECADD_CTX}")
    }
    for path, body in {**files, "configs/gpgpusim.config": b"-gpgpu_n_clusters 1\n"}.items():
        bucket.put_object(Bucket=BUCKET, Key=f"{PREFIX}{VECADD}/{path}", Body=body)
        bucket.put_object(Bucket=BUCKET, Key=f"{PREFIX}{FAILED}/{path}", Body=body)
    bucket.put_object(Bucket=BUCKET, Key=f"{PREFIX}{VECADD}/metadata.json", Body=b'{"status": "ok"}')
    bucket.put_object(Bucket=BUCKET, Key=f"{PREFIX}{FAILED}/metadata.json", Body=b'{"status": "failed"}')


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_pull_of_each_shipped_sample_matches_the_bucket_byte_for_byte(live, tmp_path):
    samples = [t["id"] for t in live.client().traces(sample=True, state="ready")]
    assert OPT in samples
    for trace_id in samples:
        done = live.run("pull", trace_id, str(tmp_path / trace_id))
        assert done.returncode == 0, done.stderr
        pulled = tree(tmp_path / trace_id)
        expected = live.objects(trace_id)
        assert {path: pulled.get(path) for path in expected} == expected
        assert not [p for p in pulled if p.endswith(".part")]
        assert json.loads(pulled["cascade.json"])["trace_id"] == trace_id


def test_a_presigned_link_needs_no_token_and_the_server_serves_no_file_bytes(live):
    import httpx

    listing = live.client().files(OPT)
    entry = next(e for e in listing["files"] if e["path"] == "traces/kernelslist_ctx_0x648ae66a3730")
    # No Authorization header at all; If-Match with the listed ETag, as the URL is signed for.
    answer = httpx.get(entry["url"], headers={"If-Match": entry["etag"]})
    assert answer.status_code == 200 and answer.content == live.objects(OPT)[entry["path"]]
    assert "if-match" in dict(parse_qsl(urlsplit(entry["url"]).query))["X-Amz-SignedHeaders"].split(";")
    assert not entry["url"].startswith(live.url)


def test_a_pull_killed_midway_resumes_and_redoes_only_the_partial_file(live, tmp_path):
    dest = tmp_path / "big"
    big = dest / f"traces/kernel-1-ctx_{BIG_CTX}.trace.xz"
    part = big.with_name(big.name + ".part")
    command, env = live.cli("pull", BIG, str(dest), "--jobs", "1")
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (part.exists() and part.stat().st_size > 0):
        assert process.poll() is None and time.monotonic() < deadline, (
            "the pull ended before it could be killed"
        )
        time.sleep(0.002)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    assert 0 < part.stat().st_size < BIG_BYTES and not big.exists()
    before = tree(dest)

    done = live.run("pull", BIG, str(dest), "--jobs", "1")
    assert done.returncode == 0, done.stderr
    expected = live.objects(BIG)
    assert {path: tree(dest)[path] for path in expected} == expected
    assert not part.exists()
    # Only what was not complete was fetched again.
    assert json.loads(before["cascade.json"])["trace_id"] == BIG  # the claim came first
    finished_before = {p for p in before if not p.endswith(".part") and p != "cascade.json"}
    fetched = {line.split()[1] for line in done.stderr.splitlines() if line.startswith("downloaded ")}
    assert fetched == set(expected) - finished_before
    assert f"{len(finished_before)} already there" in done.stdout


@pytest.mark.parametrize("change", ["rewritten, same size", "longer", "deleted"])
def test_a_file_changed_in_the_bucket_after_the_listing_is_detected(live, tmp_path, change):
    """The object changes between `/files` and its GET, as when a profiler re-uploads a run."""
    from cascade_client import Cascade, FileChanged

    key = f"{PREFIX}{OPT}/traces/stats_ctx_0x7b50cedc2670"  # the samples have no configs/
    original = live.bucket.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    class ChangedAfterListing(Cascade):
        def files(self, trace_id):
            listing = super().files(trace_id)
            if change == "deleted":
                live.bucket.delete_object(Bucket=BUCKET, Key=key)
            else:
                body = bytes(reversed(original)) if change == "rewritten, same size" else original + b"\n"
                live.bucket.put_object(Bucket=BUCKET, Key=key, Body=body)
            return listing

    try:
        with ChangedAfterListing(live.url, live.token) as client, pytest.raises(FileChanged) as error:
            client.pull(OPT, tmp_path, jobs=2)
        assert "traces/stats_ctx_0x7b50cedc2670" in str(error.value)
        # Pinned to the listed ETag: the bucket refused the replaced object before any byte.
        assert "412" in str(error.value) if change != "deleted" else "404" in str(error.value)
        assert not (tmp_path / "traces/stats_ctx_0x7b50cedc2670").exists()
        assert not (tmp_path / "traces/stats_ctx_0x7b50cedc2670.part").exists()
    finally:
        live.bucket.put_object(Bucket=BUCKET, Key=key, Body=original)


def test_select_unique_names_one_launch_per_group_and_weights_add_up_to_the_run(live, tmp_path):
    dest = tmp_path / "opt"
    done = live.run("pull", OPT, str(dest), "--select", "unique")
    assert done.returncode == 0, done.stderr
    detail = live.client().trace(OPT)
    saved = json.loads((dest / "cascade.json").read_text())
    groups = saved["groups"]
    by_launch = {(k["ctx"], k["kernel_id"]): k for k in detail["kernels"]}

    # Weights: every launch stands behind exactly one representative (cover 1.0).
    assert sum(g["weight"] for g in groups) == detail["kernel_count"] == len(detail["kernels"])
    # Each group is work of one shape: its representative has the group's name, grid and block,
    # and the launches of each (name, grid, block) in the detail are the weights of its groups.
    shapes = Counter((k["name"], tuple(k["grid_dim"]), tuple(k["block_dim"])) for k in detail["kernels"])
    weights = Counter()
    for group in groups:
        rep = by_launch[(group["representative"]["ctx"], group["representative"]["kernel_id"])]
        assert (rep["name"], rep["grid_dim"], rep["block_dim"]) == (
            group["name"],
            group["grid"],
            group["block"],
        )
        assert rep["trace_file"] == group["representative"]["trace_file"]
        weights[(group["name"], tuple(group["grid"]), tuple(group["block"]))] += group["weight"]
    assert weights == shapes

    # kernelslist.g: the run's memcpy lines in order, and the traced representatives alone, in the
    # run's order, named as post-processing names them.
    run = live.objects(OPT)
    lists = sorted(p for p in run if p.startswith("traces/kernelslist_ctx_"))
    representatives = {g["representative"]["trace_file"] for g in groups}
    expected = []
    for path in lists:
        for line in run[path].decode().splitlines():
            if line.startswith("Memcpy"):
                expected.append(line)
            elif line in representatives:
                expected.append(line.removesuffix(".xz") + "g.xz")
    assert (dest / "traces/kernelslist.g").read_text().splitlines() == expected
    kernels = [line for line in expected if not line.startswith("Memcpy")]
    assert len(kernels) == len(set(kernels)) == sum(g["in_kernelslist"] for g in groups) > 0
    # Only the representatives' trace files were fetched.
    fetched = {p.name for p in (dest / "traces").glob("kernel-*")}
    assert fetched == representatives & {Path(p).name for p in run}
    assert f"post-traces-processing {dest}/traces/kernelslist.cascade" in done.stdout


def test_cover_keeps_the_largest_groups_until_the_share(live):
    full = live.client().selection(OPT, "unique")
    part = live.client().selection(OPT, "unique", cover=0.5)
    shares = [g["share"] for g in full["groups"]]
    assert shares == sorted(shares, reverse=True)
    assert 0 < len(part["groups"]) <= len(full["groups"])
    assert sum(g["share"] for g in part["groups"]) >= 0.5 - 1e-9
    assert sum(g["share"] for g in part["groups"][:-1]) < 0.5


def test_kernels_from_python_and_the_command(live, tmp_path):
    detail = live.client().trace(OPT)
    assert live.client().kernels(OPT) == detail["kernels"]
    rows = list(live.client().kernel_rows(OPT))
    assert [(r["ctx"], int(r["kernel_id"])) for r in rows] == [
        (k["ctx"], k["kernel_id"]) for k in detail["kernels"]
    ]
    done = live.run("kernels", OPT, "--output", str(tmp_path / "k.csv"))
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "k.csv").read_text().splitlines()) == 1 + detail["kernel_count"]
    shown = live.run("show", OPT)
    assert (
        shown.returncode == 0
        and f"{detail['kernel_count']:,}" in shown.stdout
        and "kernel mix" in shown.stdout
    )
    listed = live.run("traces", "--arch", "sm_90")
    assert listed.returncode == 0 and OPT in listed.stdout


@pytest.mark.parametrize(
    ("args", "kwargs", "status", "message"),
    [
        (["traces"], {"token": ""}, 3, "cascade: no token: set CASCADE_TOKEN"),
        (["traces"], {"token": "cas_wrong"}, 4, "refused the token (401)"),
        (["pull", "no-such-trace"], {}, 5, "cascade: trace no-such-trace not found"),
        (["show", "no-such-trace"], {}, 5, "cascade: trace no-such-trace not found"),
        (["traces"], {"url": "unreachable"}, 6, "cascade: cannot reach Cascade at http://127.0.0.1:"),
    ],
    ids=["no-token", "wrong-token", "unknown-trace", "unknown-trace-show", "unreachable"],
)
def test_each_error_is_one_line_with_its_exit_status(live, tmp_path, args, kwargs, status, message):
    if kwargs.get("url") == "unreachable":
        kwargs["url"] = f"http://127.0.0.1:{free_port()}"
    done = live.run(*args, **kwargs)
    assert (done.returncode, done.stdout) == (status, "")
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


def test_kernels_as_a_dataframe_hold_the_detail_launch_for_launch(live):
    """kernels.csv into pandas (pandas is pinned in requirements-dev.txt for the bench)."""
    detail = live.client().trace(OPT)
    frame = live.client().kernels(OPT, as_frame=True)
    assert len(frame) == detail["kernel_count"]
    assert list(zip(frame["ctx"], frame["kernel_id"], strict=True)) == [
        (k["ctx"], k["kernel_id"]) for k in detail["kernels"]
    ]
    assert frame["total_insts"].fillna(-1).tolist() == [
        -1 if k["total_insts"] is None else k["total_insts"] for k in detail["kernels"]
    ]
    assert list(zip(frame["grid_x"], frame["block_x"], strict=True)) == [
        (k["grid_dim"][0], k["block_dim"][0]) for k in detail["kernels"]
    ]


# --- a pull that cannot mix or mislead ---------------------------------------------------


def test_a_pull_into_another_trace_s_folder_is_refused_unless_forced(live, tmp_path):
    dest = tmp_path / "run"
    assert live.run("pull", VECADD, str(dest), "--allow-missing").returncode == 0
    done = live.run("pull", OPT, str(dest))
    assert (done.returncode, done.stdout) == (10, "")
    assert done.stderr == (
        f"cascade: {dest} holds trace {VECADD} (its cascade.json): pull {OPT} into another folder, "
        "or --force to pull over it\n"
    )
    assert json.loads((dest / "cascade.json").read_text())["trace_id"] == VECADD
    forced = live.run("pull", OPT, str(dest), "--force")
    assert forced.returncode == 0, forced.stderr
    assert json.loads((dest / "cascade.json").read_text())["trace_id"] == OPT


def test_a_pull_into_a_file_is_one_line(live, tmp_path):
    (tmp_path / "afile").write_text("x")
    done = live.run("pull", OPT, str(tmp_path / "afile"))
    assert (done.returncode, done.stdout) == (10, "")
    assert done.stderr == f"cascade: {tmp_path}/afile is a file, not a folder: pull into a folder\n"


def test_a_failed_trace_is_not_pulled_and_says_why(live, tmp_path):
    done = live.run("pull", FAILED, str(tmp_path / "failed"))
    assert (done.returncode, done.stdout) == (8, "")
    assert done.stderr == (
        f"cascade: trace {FAILED} is failed: profiler reported status 'failed' in metadata.json; "
        "nothing pulled (ask an operator to fix the run and re-ingest it)\n"
    )
    assert not (tmp_path / "failed").exists()


def test_the_real_vecadd_run_lacks_the_trace_its_kernelslist_g_names(live, tmp_path):
    from tests.helpers import shared_fixture

    named = [
        line
        for line in shared_fixture("accelsim-vecadd-v5", "kernelslist.g").read_text().splitlines()
        if line and not line.startswith("Memcpy")
    ]
    done = live.run("pull", VECADD, str(tmp_path / "v"))
    assert (done.returncode, done.stdout) == (9, "")
    assert done.stderr.splitlines()[-1] == (
        f"cascade: traces/kernelslist.g names 1 instruction trace file that the run lacks: {named[0]}; "
        "nothing else pulled (--allow-missing pulls the rest)"
    )
    allowed = live.run("pull", VECADD, str(tmp_path / "v"), "--allow-missing")
    assert allowed.returncode == 0 and "cascade: warning: traces/kernelslist.g names 1" in allowed.stderr
    assert json.loads((tmp_path / "v/cascade.json").read_text())["missing"] == named


def test_the_next_commands_are_absolute_from_a_relative_destination(live, tmp_path):
    command, env = live.cli("pull", OPT, "rel")
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    steps = done.stdout.split("next, from your accel-sim-framework checkout:\n")[1]
    assert f"post-traces-processing {tmp_path}/rel/traces/kernelslist.cascade" in steps
    assert f"--workdir {tmp_path}/rel\n" in steps
    assert (
        f"-trace {tmp_path}/rel/traces/kernelslist.g -config ./gpgpusim.config -config ./trace.config"
        in steps
    )
    assert f"(cd {tmp_path}/rel/simulations/" in steps  # the samples carry no configs/ of their own
