"""The `cascade` command against the fake Cascade: what a person reads, and the exit status of
each error (cascade_client/errors.py documents them)."""

import functools
import json

import httpx
import pytest

from tests.client.conftest import TOKEN


@pytest.fixture
def run(fake, monkeypatch, capsys):
    """`cascade ARGS...` against the fake: (status, stdout, stderr)."""
    from cascade_client import Cascade, cli

    monkeypatch.setenv("CASCADE_URL", "http://cascade.test")
    monkeypatch.setenv("CASCADE_TOKEN", TOKEN)
    monkeypatch.setattr(
        cli, "Cascade", functools.partial(Cascade, transport=httpx.MockTransport(fake.handler))
    )

    def run(*args):
        status = cli.main(list(args))
        out, err = capsys.readouterr()
        return status, out, err

    return run


def test_traces_is_a_table_a_person_reads(run):
    status, out, err = run("traces", "--state", "ready")
    lines = out.splitlines()
    assert status == 0
    assert lines[0].split() == ["ID", "STATE", "MODEL", "ARCH", "GPU", "KERNELS", "SIZE", "CREATED", "(UTC)"]
    assert lines[1].split()[:4] == ["opt", "ready", "facebook/opt-125m", "sm_90"]
    assert "712" in lines[1] and "2026-11-08 06:19" in lines[1]
    assert err == "1 trace\n"


def test_traces_passes_the_filters_under_the_api_s_names(run, fake):
    run("traces", "--state", "ready", "--model", "m", "--arch", "sm_90")
    assert dict(fake.requests[-1].url.params) == {"state": "ready", "model": "m", "trace_gpu_arch": "sm_90"}
    status, out, _ = run("traces", "--json")
    assert status == 0 and json.loads(out)[0]["id"] == "opt"


def test_kernels_csv_goes_to_a_file_as_served(run, tmp_path):
    status, out, _ = run("kernels", "opt", "--output", str(tmp_path / "k.csv"))
    assert status == 0 and out == ""
    assert (tmp_path / "k.csv").read_text() == "ctx,kernel_id,name\n0x1,1,k\n0x1,2,\n"
    status, out, _ = run("kernels", "opt", "--format", "json")
    assert json.loads(out) == [{"ctx": "0x1", "kernel_id": 1}]


def test_pull_says_what_to_run_next(run, tmp_path):
    dest = tmp_path / "traces-root" / "opt125m" / "NO_ARGS"
    status, out, err = run("pull", "opt", str(dest))
    assert status == 0
    assert out.splitlines()[0].startswith(f"pulled opt into {dest}: ")
    assert f"post-traces-processing {dest}/traces/kernelslist.cascade" in out
    assert f"accel-sim.out -trace {dest}/traces/kernelslist.g" in out
    assert (
        f"run_simulations.py -B <suite with app opt125m> -C SM90_H100-SASS -T {tmp_path / 'traces-root'}"
        in out
    )
    # Not a terminal: one plain line per file, no carriage return.
    assert (
        "\r" not in err
        and err.count("downloaded ") == len(list((dest / "traces").glob("kernel-*.trace.xz"))) + 7
    )


@pytest.mark.parametrize(
    ("args", "env", "status", "message"),
    [
        (["traces"], {"CASCADE_TOKEN": ""}, 3, "cascade: no token: set CASCADE_TOKEN"),
        (["traces"], {"CASCADE_TOKEN": "cas_wrong"}, 4, "refused the token (401): Invalid token."),
        (["show", "nope"], {}, 5, "cascade: trace nope not found"),
        (["pull", "nope"], {}, 5, "cascade: trace nope not found"),
        (["pull", "opt", "--select", "unique"], {}, 8, "cascade: trace opt is parsing"),
        (["pull", "opt", "--select", "steps"], {}, 1, "--select takes unique or step:NAME"),
    ],
    ids=["no-token", "wrong-token", "unknown-trace", "unknown-trace-pull", "not-ready", "bad-select"],
)
def test_each_error_is_one_line_and_its_own_status(run, monkeypatch, tmp_path, args, env, status, message):
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    got, out, err = run(*args)
    assert got == status
    assert err.count("\n") == 1 and message in err


def test_a_file_changed_in_the_bucket_is_status_7(run, fake, tmp_path):
    fake.objects["configs/trace.config"] += b"more"
    status, _, err = run("pull", "opt", str(tmp_path))
    assert status == 7
    assert err.splitlines()[-1] == (
        "cascade: configs/trace.config changed in the bucket since the listing "
        "(412: its ETag is no longer the listed one); run the pull again"
    )
    # A multipart object's ETag says nothing of a change its size shows.
    fake.multipart.add("configs/trace.config")
    status, _, err = run("pull", "opt", str(tmp_path))
    assert status == 7
    assert err.splitlines()[-1] == (
        "cascade: configs/trace.config changed in the bucket since the listing "
        f"({len(fake.objects['configs/trace.config'])} bytes, listed {len(fake.listed['configs/trace.config'])}); "
        "run the pull again"
    )


def test_an_unreachable_server_is_status_6(monkeypatch, capsys):
    from cascade_client import cli

    from tests.gunicorn_process import free_port

    monkeypatch.setenv("CASCADE_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("CASCADE_TOKEN", TOKEN)
    assert cli.main(["traces"]) == 6
    assert capsys.readouterr().err.startswith("cascade: cannot reach Cascade at http://127.0.0.1:")


def test_show_prints_the_summary_mix_and_steps(run, fake, monkeypatch):
    summary = {
        "id": "opt",
        "kernel_count": 3,
        "total_insts": 600,
        "duration_ns": 2_000_000,
        "steps": [
            {
                "name": "step 0 (prefill)",
                "phase": "prefill",
                "kernels": 3,
                "total_insts": 600,
                "duration_ns": 2_000_000,
            }
        ],
        "kernels": [
            {
                "name": "_Z1kv",
                "demangled": "k()",
                "launches": 2,
                "traced": 2,
                "total_insts": 400,
                "duration_ns": 1_500_000,
                "insts_share": 2 / 3,
                "time_share": 0.75,
            },
            {
                "name": "_Z1jv",
                "demangled": "j()",
                "launches": 1,
                "traced": 1,
                "total_insts": 200,
                "duration_ns": 500_000,
                "insts_share": 1 / 3,
                "time_share": 0.25,
            },
        ],
    }
    handler = fake.handler

    def with_summary(request):
        if request.url.path.endswith("/summary"):
            return httpx.Response(200, json=summary)
        return handler(request)

    monkeypatch.setattr(fake, "handler", with_summary)
    from cascade_client import Cascade, cli

    monkeypatch.setattr(
        cli, "Cascade", functools.partial(Cascade, transport=httpx.MockTransport(with_summary))
    )
    status, out, _ = run("show", "opt")
    assert status == 0
    assert "launches       3, 600 instructions, 2.000 ms measured" in out
    mix = out.split("kernel mix")[1].split("steps")[0].splitlines()
    assert mix[2].split() == ["66.7", "75.0", "2", "400", "k()"]
    assert out.split("steps (1)")[1].splitlines()[2].split() == [
        "step",
        "0",
        "(prefill)",
        "prefill",
        "3",
        "600",
        "2.000",
    ]
