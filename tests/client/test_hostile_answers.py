"""A hostile server's answers, over a real socket (tests/client/hostile.py), each ended by the
client in one line with its exit status: never a traceback, never a byte past the bound it
states (cascade_client.answers), never a file on disk from a listing it refuses.

The reproductions are the ones the client was found to fail: an endless `/files` body (read to
3.1 GB), a listing of 10^15 bytes (1.85 GB written), a redirect loop, a `/files` that is a list,
an `/upload` answer naming a file not asked for, a negative `part_size`, and a run key
`configs/\u202egifnoc.exe` (written to disk, showing as `exe.config`).
"""

import pytest

from tests.client.conftest import TOKEN
from tests.client.hostile import Answer, File, HostileServer

TRACE = "hostile"
FILES = f"/api/traces/{TRACE}/files"
CONFIG = b"-gpgpu_n_clusters 46\n"


@pytest.fixture
def env(monkeypatch):
    def point_at(server: HostileServer) -> None:
        monkeypatch.setenv("CASCADE_URL", server.url)
        monkeypatch.setenv("CASCADE_TOKEN", TOKEN)

    return point_at


def run(capsys, *argv: str) -> tuple[int, str]:
    from cascade_client import cli

    status = cli.main(list(argv))
    err = capsys.readouterr().err
    return status, err


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("cascade: ") and "Traceback" not in err, err
    return err


def landed(folder) -> list[str]:
    return (
        sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        if folder.exists()
        else []
    )


def test_an_endless_files_body_is_cut_off_at_the_stated_bound(env, capsys, tmp_path):
    from cascade_client.answers import ANSWER_MAX

    endless = Answer(endless=True)
    with HostileServer(TRACE, {}, {FILES: endless}) as server:
        env(server)
        status, err = run(capsys, "pull", TRACE, str(tmp_path / "run"))
    assert status == 11
    assert "larger than the 128.0 MiB the client reads" in one_line(err)
    # Read to the bound and no further than what a socket's buffers hold past it.
    assert ANSWER_MAX < endless.sent < ANSWER_MAX + 16 * 1024**2
    assert landed(tmp_path / "run") == []


def test_a_listed_size_past_the_bound_is_refused_before_any_byte(env, capsys, tmp_path):
    huge = File(CONFIG, listed=10**15)
    with HostileServer(TRACE, {"traces/kernel-1.traceg.xz": huge}) as server:
        env(server)
        status, err = run(capsys, "pull", TRACE, str(tmp_path / "run"))
    assert status == 11
    assert "at 1,000,000,000,000,000 bytes, past the 64.0 GiB a file of a run may have" in one_line(err)
    assert huge.sent == 0 and landed(tmp_path / "run") == []


def test_a_pull_that_does_not_fit_on_the_disk_is_refused_before_any_byte(env, capsys, tmp_path, monkeypatch):
    from cascade_client import pull

    files = {f"traces/kernel-{n}.traceg.xz": File(b"x" * 1024) for n in range(3)}
    monkeypatch.setattr(pull, "free_bytes", lambda folder: 2048)  # the disk's free space, as the OS says
    with HostileServer(TRACE, files) as server:
        env(server)
        status, err = run(capsys, "pull", TRACE, str(tmp_path / "run"))
    assert status == 10
    assert "the pull needs 3.0 KiB" in one_line(err) and "2.0 KiB free" in err
    assert all(file.sent == 0 for file in files.values())
    assert landed(tmp_path / "run") == ["cascade.json"]


def test_the_room_asked_for_counts_what_is_already_there(env, capsys, tmp_path, monkeypatch):
    """A resumed pull needs room only for what it still fetches."""
    from cascade_client import pull

    files = {f"traces/kernel-{n}.traceg.xz": File(bytes([n]) * 1024) for n in range(3)}
    with HostileServer(TRACE, files) as server:
        env(server)
        assert run(capsys, "pull", TRACE, str(tmp_path / "run"))[0] == 0
        (tmp_path / "run" / "traces" / "kernel-2.traceg.xz").unlink()
        monkeypatch.setattr(pull, "free_bytes", lambda folder: 1024)
        assert run(capsys, "pull", TRACE, str(tmp_path / "run"))[0] == 0


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (Answer(redirect=FILES), "a redirect to '/api/traces/hostile/files': Cascade's API never redirects"),
        (Answer(json=[]), "the answer is a list, where the API sends an object"),
        (Answer(json={"files": {"a": 1}}), "`files` is an object, where the API sends a list of files"),
        (Answer(json={"files": [1, 2]}), "`files` is a list, where the API sends a list of files"),
        (Answer(json={"files": [{"path": "configs/x", "bytes": 1, "url": 7}]}), "is not an http(s) URL"),
        (Answer(json={"files": [{"path": "configs/x", "bytes": "1"}]}), "without a size"),
        (Answer(json={"files": [], "state": ["ready"]}), "`state` is a list"),
    ],
    ids=["redirect-loop", "list", "files-object", "files-numbers", "url-number", "size-text", "state-list"],
)
def test_a_malformed_listing_ends_in_one_line(env, capsys, tmp_path, answer, said):
    with HostileServer(TRACE, {}, {FILES: answer}) as server:
        env(server)
        status, err = run(capsys, "pull", TRACE, str(tmp_path / "run"))
    assert status == 11
    assert said in one_line(err)
    assert landed(tmp_path / "run") == []


def test_a_bucket_link_that_redirects_in_a_loop_ends_in_one_line(env, capsys, tmp_path):
    loop = "/bucket/loop"
    with HostileServer(
        TRACE, {"configs/gpgpusim.config": File(CONFIG)}, {loop: Answer(redirect=loop)}
    ) as server:
        listing = server.listing()
        listing["files"][0]["url"] = server.url + loop
        server.answers[FILES] = Answer(json=listing)
        env(server)
        status, err = run(capsys, "pull", TRACE, str(tmp_path / "run"))
    assert status == 11
    assert "configs/gpgpusim.config: the bucket's link redirects in a loop" in one_line(err)


def test_a_bidi_run_key_is_never_written(env, capsys, tmp_path):
    """`configs/\u202egifnoc.exe` shows as `configs/exe.config`: refused like a path that leaves."""
    trick = File(b"MZ")
    with HostileServer(TRACE, {"configs/\u202egifnoc.exe": trick}) as server:
        env(server)
        status, err = run(capsys, "pull", TRACE, str(tmp_path / "run"))
    assert status == 11
    assert "an invisible or bidirectional formatting character (U+202E)" in one_line(err)
    assert "\u202e" not in err, "the name reaches the terminal escaped"
    assert trick.sent == 0 and landed(tmp_path / "run") == []


def test_an_endless_error_body_is_read_only_as_far_as_its_sentence_needs(env, capsys, tmp_path):
    from cascade_client.answers import ERROR_MAX

    endless = Answer(endless=True, status=500)
    with HostileServer(TRACE, {}, {FILES: endless}) as server:
        env(server)
        status, err = run(capsys, "pull", TRACE, str(tmp_path / "run"))
    assert status == 1 and "the server answered 500: " in one_line(err)
    assert endless.sent < ERROR_MAX + 16 * 1024**2


# --- an upload's answers (cascade simulate's upload step) -------------------------------------


@pytest.fixture
def upload_files(tmp_path):
    log = tmp_path / "sim.log.xz"
    log.write_bytes(b"\xfd7zXZ" + b"\0" * 100)
    marker = tmp_path / "simulation.json"
    marker.write_bytes(b'{"status": "ok"}')
    return {"sim.log.xz": log, "simulation.json": marker}


def upload_answer(server: HostileServer, files: list[dict]) -> Answer:
    return Answer(
        json={"trace_id": TRACE, "name": "sim", "expires_at": "2030-01-01T00:00:00Z", "files": files}
    )


def put(server: HostileServer, name: str) -> dict:
    return {"name": name, "url": f"{server.url}/bucket/{name}", "headers": {}}


@pytest.mark.parametrize(
    ("answered", "said"),
    [
        (
            lambda server: [
                put(server, "sim.log.xz"),
                put(server, "simulation.json"),
                put(server, "../../.bashrc"),
            ],
            "the server answered for '../../.bashrc', a file not asked for",
        ),
        (lambda server: [put(server, "sim.log.xz")], "the server's answer leaves out simulation.json"),
        (
            lambda server: [
                {
                    "name": "sim.log.xz",
                    "multipart": {
                        "upload_id": "u",
                        "part_size": -5,
                        "parts": [{"part_number": 1, "url": f"{server.url}/bucket/p1"}],
                    },
                },
                put(server, "simulation.json"),
            ],
            "sim.log.xz: `part_size` is '-5', not a size from 1 byte to 5.0 GiB",
        ),
        (
            lambda server: [
                {
                    "name": "sim.log.xz",
                    "multipart": {
                        "upload_id": "u",
                        "part_size": 10,
                        "parts": [{"part_number": 1, "url": f"{server.url}/bucket/p1"}],
                    },
                },
                put(server, "simulation.json"),
            ],
            "the parts (1) do not cover the file's 105 bytes in pieces of 10",
        ),
    ],
    ids=["not-asked-for", "left-out", "negative-part-size", "parts-short"],
)
def test_a_hostile_upload_answer_ends_in_one_line_before_any_put(capsys, upload_files, answered, said):
    from cascade_client import Cascade, cli
    from cascade_client.errors import BadAnswer
    from cascade_client.simulate import upload

    path = f"/api/traces/{TRACE}/simulations/sim/upload"
    with HostileServer(TRACE, {}) as server:
        server.answers[path] = upload_answer(server, answered(server))
        with Cascade(server.url, TOKEN) as client, pytest.raises(BadAnswer) as refused:
            upload(client, TRACE, "sim", upload_files)
        assert [posted for posted, _ in server.posted] == [path], "no PUT, no /complete"
    assert refused.value.exit_code == 11 and said in str(refused.value)
    assert "\n" not in str(refused.value)
    assert cli.visible(str(refused.value)) == str(refused.value)


def test_an_upload_answer_that_is_not_json_ends_in_one_line(upload_files):
    from cascade_client import Cascade
    from cascade_client.errors import BadAnswer
    from cascade_client.simulate import upload

    path = f"/api/traces/{TRACE}/simulations/sim/upload"
    with HostileServer(TRACE, {}, {path: Answer(redirect=path)}) as server:
        with Cascade(server.url, TOKEN) as client, pytest.raises(BadAnswer, match="never redirects"):
            upload(client, TRACE, "sim", upload_files)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (Answer(json={"traces": []}), "GET /api/traces: the answer is an object, where the API sends a list"),
        (Answer(json=[1, 2]), "GET /api/traces: the answer is not a list of traces"),
        (
            Answer(json=[{"id": "x"}]),
            "the server's answer is not what Cascade's API sends (KeyError: 'state')",
        ),
        (Answer(raw=b"[" * 100_000), "GET /api/traces: the answer is not JSON"),
    ],
    ids=["object", "numbers", "missing-field", "nested-deep"],
)
def test_a_malformed_list_of_traces_ends_in_one_line(env, capsys, answer, said):
    with HostileServer(TRACE, {}, {"/api/traces": answer}) as server:
        env(server)
        status, err = run(capsys, "traces")
    assert status == 11
    assert said in one_line(err)
