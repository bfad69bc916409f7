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


def test_pull_says_what_to_run_next(run, fake, tmp_path, monkeypatch):
    monkeypatch.delenv("ACCEL_SIM_ROOT", raising=False)
    dest = tmp_path / "traces-root" / "opt125m" / "NO_ARGS"
    status, out, err = run("pull", "opt", str(dest))
    assert status == 0
    assert out.splitlines()[0].startswith(f"pulled opt into {dest}: ")
    assert f"  cascade simulate opt --config SM90_H100 --accel-sim <ROOT> --workdir {dest}\n" in out
    assert f"post-traces-processing {dest}/traces/kernelslist.cascade" in out
    assert f"accel-sim.out -trace {dest}/traces/kernelslist.g -config ./gpgpusim.config" in out
    assert "/configs/gpgpusim.config" not in out  # the run has no configs/
    assert f"run_simulations.py -B <suite with app opt125m> -C H100-SASS -T {tmp_path / 'traces-root'}" in out
    # Not a terminal: one plain line per file, no carriage return.
    assert "\r" not in err and err.count("downloaded ") == len(fake.objects)


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
    path = "traces/stats_ctx_0x7b50cedc2670"
    fake.objects[path] += b"more"
    status, _, err = run("pull", "opt", str(tmp_path))
    assert status == 7
    assert err.splitlines()[-1] == (
        f"cascade: {path} changed in the bucket since the listing "
        "(412: its ETag is no longer the listed one); run the pull again"
    )
    # A multipart object's ETag says nothing of a change its size shows.
    fake.multipart.add(path)
    status, _, err = run("pull", "opt", str(tmp_path))
    assert status == 7
    assert err.splitlines()[-1] == (
        f"cascade: {path} changed in the bucket since the listing "
        f"({len(fake.objects[path])} bytes, listed {len(fake.listed[path])}); "
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


# --- a pull that says what is wrong in one line ------------------------------------------


def test_pulls_that_cannot_be_done_are_one_line_and_their_own_status(run, fake, tmp_path):
    (tmp_path / "afile").write_text("x")
    status, out, err = run("pull", "opt", str(tmp_path / "afile"))
    assert (status, out, err) == (
        10,
        "",
        f"cascade: {tmp_path}/afile is a file, not a folder: pull into a folder\n",
    )

    (tmp_path / "other").mkdir()
    (tmp_path / "other/cascade.json").write_text('{"trace_id": "llama"}')
    status, out, err = run("pull", "opt", str(tmp_path / "other"))
    assert (status, out) == (10, "") and err.count("\n") == 1 and "holds trace llama" in err
    assert run("pull", "opt", str(tmp_path / "other"), "--force")[0] == 0

    fake.state, fake.error = "failed", "stats_ctx_0x1: line 3 is not a launch"
    status, out, err = run("pull", "opt", str(tmp_path / "failed"))
    assert (status, out) == (8, "")  # no "next" commands
    assert err == (
        "cascade: trace opt is failed: stats_ctx_0x1: line 3 is not a launch; nothing pulled "
        "(ask an operator to fix the run and re-ingest it)\n"
    )

    fake.state, fake.error = "ready", None
    gone = next(path for path in fake.listed if path.endswith(".trace.xz"))
    del fake.listed[gone]
    status, out, err = run("pull", "opt", str(tmp_path / "missing"))
    # The lists came first (a line each, as on a log); then the one line that says why not the rest.
    assert (status, out) == (9, "") and all(
        line.startswith("downloaded traces/kernelslist_ctx_") for line in err.splitlines()[:-1]
    )
    assert (
        f"instruction trace file that the run lacks: {gone.removeprefix('traces/')};" in err.splitlines()[-1]
    )
    status, out, err = run("pull", "opt", str(tmp_path / "missing"), "--allow-missing")
    assert status == 0 and "next, from your accel-sim-framework checkout" in out
    assert (
        f"cascade: warning: the kernel lists name 1 instruction trace file that the run lacks: {gone.removeprefix('traces/')}"
        in err
    )


def test_the_next_commands_name_absolute_paths(run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ACCEL_SIM_ROOT", "accel-sim-framework")  # relative too: made absolute
    status, out, _ = run("pull", "opt", "here")
    assert status == 0
    assert out.splitlines()[0].startswith(f"pulled opt into {tmp_path}/here: ")
    steps = out.split("next, from your accel-sim-framework checkout:\n")[1]
    root = tmp_path / "accel-sim-framework"
    assert f"cascade simulate opt --config SM90_H100 --accel-sim {root} --workdir {tmp_path}/here\n" in steps
    assert f"post-traces-processing {tmp_path}/here/traces/kernelslist.cascade" in steps
    assert (
        f"(cd {tmp_path}/here/simulations/SM90_H100 && {root}/gpu-simulator/bin/release/accel-sim.out "
        f"-trace {tmp_path}/here/traces/kernelslist.g -config ./gpgpusim.config -config ./trace.config)"
        in steps
    )


def test_a_token_pasted_with_spaces_works(run, monkeypatch):
    monkeypatch.setenv("CASCADE_TOKEN", f" {TOKEN}  \n")
    assert run("traces")[0] == 0
    monkeypatch.setenv("CASCADE_TOKEN", f"{TOKEN} x")
    status, out, err = run("traces")
    assert (status, out) == (4, "")
    assert (
        err
        == "cascade: CASCADE_TOKEN is malformed: it holds a space or a character no token has; copy it again\n"
    )


# --- untrusted text on a terminal --------------------------------------------------------

ESCAPES = "\x1b]0;owned\x07\x1b[2J\x9b\u202e"
SHOWN = "\\x1b]0;owned\\x07\\x1b[2J\\x9b\\u202e"


def test_traces_and_show_escape_control_characters(run, fake, monkeypatch):
    row = fake.summary_row()
    row |= {
        "model": f"m{ESCAPES}",
        "source_gpu": f"gpu{ESCAPES}",
        "state": "failed",
        "error": f"bad{ESCAPES}",
    }
    monkeypatch.setattr(fake, "summary_row", lambda: row)
    status, out, _ = run("traces")
    assert status == 0 and "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert f"m{SHOWN}" in out
    status, out, _ = run("show", "opt")
    assert status == 0 and "\x1b" not in out
    assert f"failed (bad{SHOWN})" in out and f"gpu{SHOWN}, traced for sm_90" in out
    status, out, _ = run("traces", "--json")
    assert "\x1b" not in out and json.loads(out)[0]["model"] == f"m{ESCAPES}"  # JSON keeps the text


def test_kernel_names_and_server_errors_are_escaped(run, fake, monkeypatch):
    handler = fake.handler
    summary = {
        "id": "opt",
        "kernel_count": 1,
        "total_insts": 1,
        "duration_ns": None,
        "steps": [
            {"name": f"s{ESCAPES}", "phase": None, "kernels": 1, "total_insts": 1, "duration_ns": None}
        ],
        "kernels": [
            {
                "name": f"_Z1k{ESCAPES}",
                "demangled": None,
                "launches": 1,
                "traced": 1,
                "total_insts": 1,
                "duration_ns": None,
                "insts_share": 1.0,
                "time_share": None,
            }
        ],
    }

    def hostile(request):
        if request.url.path.endswith("/summary"):
            return httpx.Response(200, json=summary)
        if request.url.path.endswith("/files"):
            return httpx.Response(500, json={"detail": f"boom{ESCAPES}"})
        return handler(request)

    from cascade_client import Cascade, cli

    monkeypatch.setattr(cli, "Cascade", functools.partial(Cascade, transport=httpx.MockTransport(hostile)))
    status, out, _ = run("show", "opt")
    assert status == 0 and "\x1b" not in out and f"_Z1k{SHOWN}" in out and f"s{SHOWN}" in out
    status, out, err = run("pull", "opt")
    assert status == 1 and err == f"cascade: the server answered 500: boom{SHOWN}\n"


def test_kernels_csv_on_a_terminal_is_escaped_and_in_a_file_as_served(run, fake, monkeypatch, tmp_path):
    import io

    handler = fake.handler
    body = f"ctx,kernel_id,name\r\n0x1,1,k{ESCAPES}\r\n".encode()

    def hostile(request):
        if request.url.path.endswith("kernels.csv"):
            return httpx.Response(200, content=body)
        return handler(request)

    from cascade_client import Cascade, cli

    monkeypatch.setattr(cli, "Cascade", functools.partial(Cascade, transport=httpx.MockTransport(hostile)))
    assert run("kernels", "opt", "-o", str(tmp_path / "k.csv"))[0] == 0
    assert (tmp_path / "k.csv").read_bytes() == body

    class Terminal(io.TextIOWrapper):
        def isatty(self):
            return True

    screen = io.BytesIO()
    monkeypatch.setattr(cli.sys, "stdout", Terminal(screen, encoding="utf-8"))
    assert cli.main(["kernels", "opt"]) == 0
    assert screen.getvalue().decode() == f"ctx,kernel_id,name\r\n0x1,1,k{SHOWN}\r\n"


def test_visible_escapes_every_control_character_and_keeps_the_rest():
    from cascade_client.terminal import visible

    assert visible("plain é ü 漢 _Z3fooi") == "plain é ü 漢 _Z3fooi"
    assert visible("a\tb\nc\x00\x7f") == "a\\x09b\\x0ac\\x00\\x7f"
    assert visible("a\nb", keep="\n") == "a\nb"
    assert all(ord(c) >= 0x20 for c in visible("".join(map(chr, range(0x100)))))


def test_show_says_what_an_upload_waits_for_and_the_trace_s_warnings(run, fake, monkeypatch):
    row = fake.summary_row() | {
        "state": "uploading",
        "waiting_for": "2 files listed in metadata.json: traces/stats_ctx_0x1, traces/kernelslist_ctx_0x1",
        "warnings": [{"file": "traces/a\x1b[2J", "offset": None, "what": "left out: a control character"}],
    }
    monkeypatch.setattr(fake, "summary_row", lambda: row)
    status, out, _ = run("show", "opt")
    assert status == 0
    assert "waiting for    2 files listed in metadata.json: traces/stats_ctx_0x1" in out
    assert "warning        traces/a\\x1b[2J: left out: a control character" in out
    assert "kernels        none yet: the trace is not ready" in out
