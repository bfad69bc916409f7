"""`pip install ./client` on a new virtualenv: the client installs on its own (httpx, Celery for
`cascade worker`, and pandas with the extra), and `cascade` runs. pip reaches the package index
as a user's would."""

import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.client.conftest import ROOT


@pytest.mark.parametrize(
    "path", ["client/build/lib/x.py", "client/cascade_client.egg-info/PKG-INFO", "client/dist/a.whl", "x.whl"]
)
def test_build_outputs_are_ignored_by_git(path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", path])
    assert done.returncode == 0, f"{path} is not ignored"


@pytest.mark.slow
def test_pip_install_client_on_a_fresh_virtualenv(tmp_path):
    # A copy: building in place would leave build/ and *.egg-info in the repository.
    source = tmp_path / "client"
    shutil.copytree(
        ROOT / "client", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = subprocess.run(
        [str(venv / "bin/pip"), "install", "--quiet", f"{source}[pandas]"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]

    help = subprocess.run([str(venv / "bin/cascade"), "--help"], capture_output=True, text=True, env={})
    assert help.returncode == 0 and help.stdout.startswith("usage: cascade")
    for command in ("traces", "show", "kernels", "pull", "worker"):
        assert command in help.stdout
    no_token = subprocess.run([str(venv / "bin/cascade"), "traces"], capture_output=True, text=True, env={})
    assert (no_token.returncode, no_token.stderr.split(":")[:2]) == (3, ["cascade", " no token"])

    # Nothing of Cascade's server came along; the DataFrame is read from kernels.csv.
    script = textwrap.dedent(
        """
        import importlib.util, httpx
        from cascade_client import Cascade
        assert importlib.util.find_spec("django") is None
        import celery, redis  # `cascade worker` on RabbitMQ or Redis
        csv = b"ctx,kernel_id,name,total_insts,duration_ns\\n0x1,1,k,10,\\n0x1,2,k,,5\\n"
        def answer(request):
            assert request.url.path == "/api/traces/t/kernels.csv", request.url
            assert request.url.params["raw"] == "1", request.url  # the text as it is, for pandas
            return httpx.Response(200, content=csv)
        frame = Cascade("http://c.test", "tok", transport=httpx.MockTransport(answer)).kernels("t", as_frame=True)
        assert list(frame.columns) == ["ctx", "kernel_id", "name", "total_insts", "duration_ns"]
        assert frame["kernel_id"].tolist() == [1, 2]
        assert frame["total_insts"].isna().tolist() == [False, True]
        assert frame["duration_ns"].isna().tolist() == [True, False]
        print("ok")
        """
    )
    frame = subprocess.run([str(venv / "bin/python"), "-c", script], capture_output=True, text=True, env={})
    assert frame.stdout == "ok\n", frame.stderr
