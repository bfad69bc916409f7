"""`pull`'s downloads against a real HTTP server that lies (tests/client/hostile.py): a body
longer than listed, a length announced larger, a download slow enough to interrupt. What must
hold whatever the server does: no more bytes on disk than the listing says, the listed ETag
sent as If-Match and no token, and Ctrl-C stopping at once with the `.part` files left."""

import hashlib
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.client.conftest import ROOT
from tests.client.hostile import LIMIT, File, HostileServer

TRACE = "hostile"


def pull(server, dest, **kwargs):
    from cascade_client import Cascade

    with Cascade(server.url, "cas_test") as client:
        return client.pull(TRACE, dest, **kwargs)


def test_a_10_byte_listing_never_writes_more_than_10_bytes(tmp_path):
    from cascade_client import FileChanged

    file = File(b"0123456789", mode="longer")  # then the same bytes again, up to 300 MiB
    dest = tmp_path / "run"
    file.watch = dest / "configs/gpgpusim.config.part"
    with HostileServer(TRACE, {"configs/gpgpusim.config": file}) as server:
        with pytest.raises(FileChanged, match=r"longer in the bucket than listed \(10 bytes\): cut off"):
            pull(server, dest)
    assert file.largest_seen <= 10
    assert not (dest / "configs/gpgpusim.config").exists() and not file.watch.exists()
    assert file.sent < LIMIT // 10  # the client hung up; it did not read 300 MiB


def test_a_length_announced_larger_than_listed_fails_before_the_body(tmp_path):
    from cascade_client import FileChanged

    file = File(b"0123456789", mode="announce", announce=LIMIT)
    with HostileServer(TRACE, {"configs/gpgpusim.config": file}) as server:
        with pytest.raises(FileChanged, match=rf"\({LIMIT} bytes, listed 10\)"):
            pull(server, tmp_path / "run")
    assert not list((tmp_path / "run").rglob("*.part"))
    assert file.sent < LIMIT // 10


def test_the_listed_etag_goes_as_if_match_and_no_token_to_the_bucket(tmp_path):
    body = b"-gpgpu_n_clusters 1\n"
    etag = f'"{hashlib.md5(body).hexdigest()}"'
    file = File(body, etag=etag)
    with HostileServer(TRACE, {"configs/gpgpusim.config": file}) as server:
        pull(server, tmp_path / "run")
    assert (tmp_path / "run/configs/gpgpusim.config").read_bytes() == body
    headers = {name.lower(): value for name, value in file.headers.items()}
    assert headers["if-match"] == etag and "authorization" not in headers


@pytest.mark.slow
def test_the_first_ctrl_c_stops_every_download_at_once_leaving_part_files(tmp_path):
    """Both downloads are caught mid-body, by a server that sends nothing more until the test
    ends: a pull that waited for a download's next chunk, or its end, would never stop."""
    slow = {
        f"traces/kernel-{n}-ctx_0x1.trace.xz": File(os.urandom(4 << 20), mode="stall", stall_after=256 * 1024)
        for n in (1, 2)
    }
    dest = tmp_path / "run"
    with HostileServer(TRACE, slow) as server:
        env = {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(ROOT / "client"),
            "CASCADE_URL": server.url,
            "CASCADE_TOKEN": "cas_test",
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "cascade_client", "pull", TRACE, str(dest), "--jobs", "2"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        parts = [dest / (path + ".part") for path in slow]
        deadline = time.monotonic() + 30
        while not all(part.exists() and part.stat().st_size > 0 for part in parts):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        # Only a pull that never stops reaches this timeout; one that stops at once, however
        # loaded the machine, does so while both downloads still wait for their next byte.
        out, err = process.communicate(timeout=120)
        assert all(file.sent == file.stall_after for file in slow.values())
    assert process.returncode == 130
    assert err.splitlines()[-1] == "cascade: interrupted; run the same command again to resume"
    assert all(part.exists() for part in parts)
    assert not any((dest / path).exists() for path in slow)
    assert out == ""


def test_the_shell_recipe_in_the_api_docs_stays_in_its_folder_whatever_the_listing(tmp_path):
    """docs/api.md's curl and jq recipe, run by bash as written, against a listing of hostile
    paths (the server refuses to list them; the recipe must not trust that)."""
    import re
    import shutil

    if not (shutil.which("jq") and shutil.which("curl") and shutil.which("bash")):
        pytest.skip("the recipe needs bash, curl and jq")
    docs = (ROOT / "docs/api.md").read_text()
    (recipe,) = re.findall(r"By hand .*?```sh\n(.*?)```", docs, re.S)
    body = b"-gpgpu_n_clusters 1\n"
    etag = f'"{hashlib.md5(body).hexdigest()}"'
    hostile = ["../x", "a/../../y", "/tmp/z", "C:\\Windows\\x.dll", "a\\..\\..\\w", "q\tr", "./s", "t/.."]
    files = {"configs/gpgpusim.config": File(body, etag=etag), **{path: File(b"owned") for path in hostile}}
    work = tmp_path / "work"
    work.mkdir()
    with HostileServer("demo", files) as server:
        done = subprocess.run(
            ["bash", "-c", recipe],
            cwd=work,
            env={"PATH": os.environ["PATH"], "CASCADE_URL": server.url, "TOKEN": "cas_test"},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["work/demo/configs/gpgpusim.config"]
    assert (work / "demo/configs/gpgpusim.config").read_bytes() == body
    assert files["configs/gpgpusim.config"].headers["If-Match"] == etag
    assert all(files[path].sent == 0 for path in hostile)
