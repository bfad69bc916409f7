"""`pull` against a fake Cascade and bucket (conftest.FakeCascade): what lands on disk, what is
checked, what resumes, what a selection writes. Expected lists come from the sample's own
kernelslist files, read here with plain string work."""

import hashlib
import json

import pytest

from tests.client.conftest import SAMPLE, selection_of

CTX_A, CTX_B = "0x648ae66a3730", "0x7b50cedc2670"


def tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_pull_writes_the_run_byte_for_byte_and_no_token_reaches_the_bucket(cascade, fake, tmp_path):
    result = cascade.pull("opt", tmp_path / "run")
    pulled = tree(tmp_path / "run")
    assert {path: body for path, body in pulled.items() if path in fake.objects} == fake.objects
    assert set(pulled) - set(fake.objects) == {
        "cascade.json",
        "traces/kernelslist.cascade",
        "traces/kernelslist.g",
    }
    assert result.downloaded == len(fake.objects) and result.skipped == 0
    assert not any(p.name.endswith(".part") for p in (tmp_path / "run").rglob("*"))
    # (FakeCascade asserts no Authorization header reaches bucket.test.)
    assert sum(r.url.host == "bucket.test" for r in fake.requests) == len(fake.objects)


def test_a_raw_run_gets_one_list_for_post_processing_and_the_kernelslist_g_it_will_write(cascade, tmp_path):
    result = cascade.pull("opt", tmp_path)
    # The tracer's lists, contexts in name order, concatenated; then renamed as post-processing does.
    expected = []
    for ctx in sorted([CTX_A, CTX_B]):
        expected += [
            line for line in (SAMPLE / f"traces/kernelslist_ctx_{ctx}").read_text().splitlines() if line
        ]
    assert (tmp_path / "traces/kernelslist.cascade").read_text().splitlines() == expected
    renamed = [
        line if line.startswith("Memcpy") else line.replace(".trace.xz", ".traceg.xz") for line in expected
    ]
    assert (tmp_path / "traces/kernelslist.g").read_text().splitlines() == renamed
    assert result.postprocess == tmp_path / "traces/kernelslist.cascade"
    steps = result.next_steps("SM86_RTX3070")
    assert steps[1].endswith(f"post-traces-processing {tmp_path}/traces/kernelslist.cascade")
    assert (
        f"-trace {tmp_path}/traces/kernelslist.g -config ./gpgpusim.config -config ./trace.config" in steps[3]
    )


def test_a_run_without_configs_is_simulated_on_the_suggested_tested_config(cascade, tmp_path):
    """The samples carry no configs/: the next commands never name one, and use the tested
    config's files from the tree, as `cascade simulate` (the first of them) does."""
    result = cascade.pull("opt", tmp_path / "run")
    assert result.configs == []
    steps = result.next_steps("SM86_RTX3070")
    assert "configs/" not in " ".join(steps).replace("/configs/tested-cfgs/", "")
    run, folder = tmp_path / "run", tmp_path / "run/simulations/SM86_RTX3070"
    assert steps == [
        f"cascade simulate opt --config SM86_RTX3070 --accel-sim <ROOT> --workdir {run}",
        f"./util/tracer_nvbit/tracer_tool/traces-processing/post-traces-processing {run}/traces/kernelslist.cascade",
        f"mkdir -p {folder} && cp <ROOT>/gpu-simulator/gpgpu-sim/configs/tested-cfgs/SM86_RTX3070/* "
        f"<ROOT>/gpu-simulator/configs/tested-cfgs/SM86_RTX3070/trace.config {folder}/",
        f"(cd {folder} && <ROOT>/gpu-simulator/bin/release/accel-sim.out -trace {run}/traces/kernelslist.g "
        "-config ./gpgpusim.config -config ./trace.config)",
    ]
    known = result.next_steps("SM75_RTX2060", accel_sim=str(tmp_path / "accel sim"))
    assert known[0] == (
        f"cascade simulate opt --config SM75_RTX2060 --accel-sim '{tmp_path}/accel sim' --workdir {run}"
    )
    assert known[3].startswith(f"(cd {run}/simulations/SM75_RTX2060 && '{tmp_path}/accel sim'/gpu-simulator/")
    # A name that is no tested config's folder name is not written into a command.
    assert result.next_steps("../x; rm -rf ~")[0].startswith("cascade simulate opt --config <CONFIG> ")


def test_a_selection_is_simulated_as_it_was_pulled(cascade, fake, tmp_path):
    fake.selection = selection_of([(CTX_A, 143, 3)])
    result = cascade.pull("opt", tmp_path, select="step:step 0 (prefill)", cover=0.9)
    assert result.next_steps("SM86_RTX3070")[0] == (
        f"cascade simulate opt --config SM86_RTX3070 --accel-sim <ROOT> --workdir {tmp_path} "
        "--select 'step:step 0 (prefill)' --cover 0.9"
    )


def test_a_run_with_its_own_configs_is_simulated_with_them(fake, tmp_path):
    import httpx
    from cascade_client import Cascade

    from tests.client.conftest import TOKEN

    for name in ("gpgpusim.config", "trace.config"):
        fake.objects[f"configs/{name}"] = b"-gpgpu_n_clusters 1\n"
    fake.listed = dict(fake.objects)
    with Cascade("http://cascade.test", TOKEN, transport=httpx.MockTransport(fake.handler)) as cascade:
        result = cascade.pull("opt", tmp_path)
    assert result.configs == [tmp_path / "configs/gpgpusim.config", tmp_path / "configs/trace.config"]
    steps = result.next_steps("SM86_RTX3070")
    assert steps[0].endswith(f"post-traces-processing {tmp_path}/traces/kernelslist.cascade")
    assert steps[1] == (
        f"./gpu-simulator/bin/release/accel-sim.out -trace {tmp_path}/traces/kernelslist.g "
        f"-config {tmp_path}/configs/gpgpusim.config -config {tmp_path}/configs/trace.config"
    )
    assert len(steps) == 2


def test_a_complete_file_is_skipped_and_a_partial_one_fetched_again(cascade, fake, tmp_path):
    cascade.pull("opt", tmp_path)
    first = f"traces/kernel-142-ctx_{CTX_A}.trace.xz"
    second = f"traces/kernel-143-ctx_{CTX_A}.trace.xz"
    (tmp_path / first).unlink()
    (tmp_path / (first + ".part")).write_bytes(fake.objects[first][:10])  # a download killed midway
    (tmp_path / second).write_bytes(b"x" * len(fake.objects[second]))  # right size, wrong bytes
    fake.requests.clear()
    result = cascade.pull("opt", tmp_path)
    fetched = sorted(r.url.path.removeprefix("/") for r in fake.requests if r.url.host == "bucket.test")
    assert fetched == sorted([first, second])
    assert result.downloaded == 2 and result.skipped == len(fake.objects) - 2
    assert tree(tmp_path)[first] == fake.objects[first] and tree(tmp_path)[second] == fake.objects[second]
    assert not (tmp_path / (first + ".part")).exists()


def test_a_multipart_etag_checks_the_size_only(cascade, fake, tmp_path):
    path = f"traces/kernel-145-ctx_{CTX_A}.trace.xz"
    fake.multipart.add(path)
    cascade.pull("opt", tmp_path)
    assert (tmp_path / path).read_bytes() == fake.objects[path]


@pytest.mark.parametrize(
    "change",
    ["longer", "same size, other bytes", "deleted"],
)
def test_a_file_changed_in_the_bucket_since_the_listing_stops_the_pull(cascade, fake, tmp_path, change):
    from cascade_client import FileChanged

    path = f"traces/stats_ctx_{CTX_B}"
    body = fake.objects[path]
    if change == "longer":
        fake.objects[path] = body + b"\n"
    elif change == "deleted":
        del fake.objects[path]
    else:
        fake.objects[path] = bytes(reversed(body))
    with pytest.raises(FileChanged, match=path):
        cascade.pull("opt", tmp_path, jobs=1)
    assert not (tmp_path / path).exists() and not (tmp_path / (path + ".part")).exists()


def test_a_selection_fetches_the_representatives_and_names_only_them(cascade, fake, tmp_path):
    fake.selection = selection_of([(CTX_B, 179, 40), (CTX_A, 143, 30), (CTX_A, 148, 2)])
    result = cascade.pull("opt", tmp_path, select="unique")
    traces = sorted(p for p in tree(tmp_path) if p.startswith("traces/kernel-"))
    assert traces == sorted(
        [
            f"traces/kernel-143-ctx_{CTX_A}.trace.xz",
            f"traces/kernel-148-ctx_{CTX_A}.trace.xz",
            f"traces/kernel-179-ctx_{CTX_B}.trace.xz",
        ]
    )
    # Memcpy lines of every context in order, and the three launches in the run's order.
    memcpy = {
        ctx: [
            line
            for line in (SAMPLE / f"traces/kernelslist_ctx_{ctx}").read_text().splitlines()
            if line.startswith("Memcpy")
        ]
        for ctx in (CTX_A, CTX_B)
    }
    listed = (tmp_path / "traces/kernelslist.g").read_text().splitlines()
    assert listed == memcpy[CTX_A] + [
        f"kernel-143-ctx_{CTX_A}.traceg.xz",
        f"kernel-148-ctx_{CTX_A}.traceg.xz",
    ] + memcpy[CTX_B] + [f"kernel-179-ctx_{CTX_B}.traceg.xz"]
    saved = json.loads((tmp_path / "cascade.json").read_text())
    assert saved["trace_id"] == "opt" and saved["selection"]["by"] == "unique"
    assert [(g["representative"]["kernel_id"], g["weight"]) for g in saved["groups"]] == [
        (179, 40),
        (143, 30),
        (148, 2),
    ]
    assert all(g["in_kernelslist"] for g in saved["groups"])
    assert sum(g["weight"] for g in result.groups) == 72


def test_a_post_processed_run_keeps_its_list_beside_the_selected_one(tmp_path):
    import httpx
    from cascade_client import Cascade

    from tests.client.conftest import TOKEN, FakeCascade
    from tests.helpers import shared_fixture

    fake = FakeCascade(run=SAMPLE)
    ctx = "0x6165bdd7ec90"
    vecadd = shared_fixture("accelsim-vecadd-v5")
    fake.objects = {
        "traces/kernelslist.g": (vecadd / "kernelslist.g").read_bytes(),
        f"traces/kernel-1-ctx_{ctx}.traceg.xz": b"one",
        f"traces/kernel-2-ctx_{ctx}.traceg.xz": b"two",
        "configs/gpgpusim.config": b"-gpgpu_n_clusters 1\n",
    }
    fake.objects["traces/kernelslist.g"] += f"kernel-2-ctx_{ctx}.traceg.xz\n".encode()
    fake.listed = dict(fake.objects)
    fake.selection = selection_of([(ctx, 2, 2)])
    with Cascade("http://cascade.test", TOKEN, transport=httpx.MockTransport(fake.handler)) as cascade:
        result = cascade.pull("opt", tmp_path, select="unique")
    assert (tmp_path / "traces/kernelslist.g.run").read_bytes() == fake.objects["traces/kernelslist.g"]
    memcpy = [
        line for line in (vecadd / "kernelslist.g").read_text().splitlines() if line.startswith("Memcpy")
    ]
    assert (tmp_path / "traces/kernelslist.g").read_text().splitlines() == memcpy + [
        f"kernel-2-ctx_{ctx}.traceg.xz"
    ]
    assert not (tmp_path / f"traces/kernel-1-ctx_{ctx}.traceg.xz").exists()
    assert result.postprocess is None
    # A second pull finds everything in place, the run's list included.
    with Cascade("http://cascade.test", TOKEN, transport=httpx.MockTransport(fake.handler)) as cascade:
        again = cascade.pull("opt", tmp_path, select="unique")
    assert again.downloaded == 0 and again.skipped == 3


def test_the_server_cannot_write_outside_the_folder(cascade, fake, tmp_path):
    from cascade_client import CascadeError

    fake.listed = {"../escape": b"x"}
    fake.objects = dict(fake.listed)
    with pytest.raises(CascadeError, match="outside the run's folder"):
        cascade.pull("opt", tmp_path / "run")
    assert not (tmp_path / "escape").exists()


def test_md5_is_taken_from_quoted_32_hex_etags_only():
    from cascade_client.downloads import expected_md5

    digest = hashlib.md5(b"x").hexdigest()
    assert expected_md5(f'"{digest}"') == digest
    assert expected_md5(f'"{digest.upper()}"') == digest
    assert expected_md5(f'"{digest}-3"') is None
    assert expected_md5(digest) is None  # unquoted: not S3's form
    assert expected_md5(None) is None


def test_select_step_asks_for_that_step_and_unknown_forms_are_refused(cascade, fake):
    fake.selection = selection_of([(CTX_A, 6, 3)])
    cascade.selection("opt", "step:step 0 (prefill)", cover=0.9)
    params = dict(fake.requests[-1].url.params)
    assert params == {"by": "step", "step": "step 0 (prefill)", "cover": "0.9", "members": "0"}
    for wrong in ("step:", "steps", "unique:x"):
        with pytest.raises(ValueError, match="unique' or 'step:<name>'"):
            cascade.selection("opt", wrong)


def test_the_progress_bar_redraws_one_line_on_a_terminal():
    import io

    from cascade_client.progress import Progress

    out = io.StringIO()
    bar = Progress(2, 3000, out, bar=True)
    bar.advance(1000)
    bar.file_done("a", 1000)
    bar.advance(2000)
    bar.file_done("b", 2000)
    bar.close()
    drawn = out.getvalue()
    assert drawn.count("\n") == 1 and drawn.endswith("\n")
    assert (
        drawn.rstrip("\n").split("\r")[-1].startswith("[" + "#" * 30 + "] 100%  2/2 files  2.9 KiB/2.9 KiB")
    )


def test_an_untraced_representative_is_weighed_but_not_listed_and_said_once(cascade, fake, tmp_path):
    fake.selection = selection_of([(CTX_A, 143, 3), (CTX_A, 900, 5), (CTX_B, 901, 1)])
    result = cascade.pull("opt", tmp_path, select="unique")
    assert [(g["representative"]["kernel_id"], g["in_kernelslist"]) for g in result.groups] == [
        (143, True),
        (900, False),
        (901, False),
    ]
    assert len(result.warnings) == 1 and result.warnings[0].startswith(
        "2 of 3 representatives have no trace file"
    )
    kernels = [
        line
        for line in (tmp_path / "traces/kernelslist.g").read_text().splitlines()
        if line.startswith("kernel")
    ]
    assert kernels == [f"kernel-143-ctx_{CTX_A}.traceg.xz"]


# --- a pull that cannot mix or mislead ------------------------------------------------


def test_the_trace_id_is_in_the_folder_before_its_first_file(cascade, fake, tmp_path):
    seen = []
    fake.on_bucket = lambda request: seen.append(json.loads((tmp_path / "run/cascade.json").read_text()))
    cascade.pull("opt", tmp_path / "run")
    assert seen and all(claim["trace_id"] == "opt" and claim["complete"] is False for claim in seen)
    saved = json.loads((tmp_path / "run/cascade.json").read_text())
    assert saved["trace_id"] == "opt" and saved["complete"] is True


def test_a_folder_of_another_trace_is_refused_unless_forced(cascade, fake, tmp_path):
    from cascade_client import DestinationInUse

    theirs = f"traces/kernelslist_ctx_{CTX_A}"
    (tmp_path / "cascade.json").write_text(json.dumps({"trace_id": "llama"}))
    (tmp_path / "traces").mkdir()
    (tmp_path / theirs).write_text("llama's list\n")
    with pytest.raises(DestinationInUse) as refused:
        cascade.pull("opt", tmp_path)
    assert str(refused.value) == (
        f"{tmp_path} holds trace llama (its cascade.json): pull opt into another folder, or --force to pull over it"
    )
    assert not any(r.url.host == "bucket.test" for r in fake.requests)
    assert (tmp_path / theirs).read_text() == "llama's list\n"
    cascade.pull("opt", tmp_path, force=True)
    assert json.loads((tmp_path / "cascade.json").read_text())["trace_id"] == "opt"
    assert (tmp_path / theirs).read_bytes() == fake.objects[theirs]


def test_a_folder_of_run_files_that_no_trace_claims_is_refused(cascade, tmp_path):
    from cascade_client import DestinationInUse

    (tmp_path / "traces").mkdir()
    (tmp_path / "traces/kernelslist.g").write_text("kernel-1.traceg\n")
    with pytest.raises(DestinationInUse, match="holds a run's files but no cascade.json"):
        cascade.pull("opt", tmp_path)
    (tmp_path / "notes.txt").write_text("mine\n")  # other files are no run's: an empty run folder is fine
    (tmp_path / "traces/kernelslist.g").unlink()
    cascade.pull("opt", tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_a_destination_that_is_a_file_is_refused(cascade, fake, tmp_path):
    from cascade_client import DestinationInUse

    (tmp_path / "afile").write_text("x")
    with pytest.raises(
        DestinationInUse, match=f"^{tmp_path}/afile is a file, not a folder: pull into a folder$"
    ):
        cascade.pull("opt", tmp_path / "afile")
    with pytest.raises(
        DestinationInUse, match=f"^{tmp_path}/afile is a file, not a folder: cannot pull into "
    ):
        cascade.pull("opt", tmp_path / "afile" / "run")
    assert not fake.requests or not any(r.url.host == "bucket.test" for r in fake.requests)


@pytest.mark.parametrize(
    ("state", "error", "message"),
    [
        (
            "failed",
            "stats_ctx_0x1: line 3 is not a launch",
            "trace opt is failed: stats_ctx_0x1: line 3 is not a launch; nothing pulled",
        ),
        ("uploading", None, "trace opt is uploading; nothing pulled (its upload is not complete yet"),
        ("parsing", None, "trace opt is parsing; nothing pulled"),
    ],
)
def test_a_trace_that_is_not_ready_is_not_pulled(cascade, fake, tmp_path, state, error, message):
    from cascade_client import NotReady

    fake.state, fake.error = state, error
    with pytest.raises(NotReady) as refused:
        cascade.pull("opt", tmp_path / "run")
    assert str(refused.value).startswith(message)
    assert not (tmp_path / "run").exists()


def test_relative_destinations_become_absolute(cascade, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cascade.pull("opt", "rel/run")
    assert result.dest == tmp_path / "rel/run"
    assert all(str(tmp_path) in step for step in result.next_steps())


def test_paths_with_spaces_are_quoted_in_the_next_commands(cascade, tmp_path):
    result = cascade.pull("opt", tmp_path / "my runs")
    steps = result.next_steps()
    assert f"--workdir '{tmp_path}/my runs'" in steps[0]
    assert f"-trace '{tmp_path}/my runs/traces/kernelslist.g'" in steps[3]


def kernel_lines(path):
    return [line for line in path.read_text().splitlines() if line and not line.startswith("Memcpy")]


def test_trace_files_the_kernel_list_names_but_the_run_lacks_stop_the_pull(cascade, fake, tmp_path):
    from cascade_client import MissingTraceFiles

    named = kernel_lines(SAMPLE / f"traces/kernelslist_ctx_{CTX_A}")
    gone = [f"traces/{named[0]}", f"traces/{named[3]}"]
    for path in gone:
        del fake.listed[path], fake.objects[path]
    with pytest.raises(MissingTraceFiles) as refused:
        cascade.pull("opt", tmp_path)
    assert str(refused.value) == (
        f"the kernel lists name 2 instruction trace files that the run lacks: {named[0]}, {named[3]}; "
        "nothing else pulled (--allow-missing pulls the rest)"
    )
    fetched = {r.url.path.removeprefix("/") for r in fake.requests if r.url.host == "bucket.test"}
    assert fetched == {f"traces/kernelslist_ctx_{CTX_A}", f"traces/kernelslist_ctx_{CTX_B}"}

    result = cascade.pull("opt", tmp_path, allow_missing=True)
    assert result.missing == [named[0], named[3]] and result.warnings[0].startswith("the kernel lists name 2")
    assert json.loads((tmp_path / "cascade.json").read_text())["missing"] == [named[0], named[3]]
    assert tree(tmp_path).keys() >= set(fake.objects)


def test_the_real_vecadd_kernelslist_g_names_a_post_processed_trace_the_run_lacks(tmp_path):
    """The tracer's own kernelslist.g (v5) beside only the raw trace: the simulator would not
    find the .traceg.xz it names."""
    import httpx
    from cascade_client import Cascade, MissingTraceFiles

    from tests.client.conftest import TOKEN, FakeCascade
    from tests.helpers import shared_fixture

    listed = shared_fixture("accelsim-vecadd-v5", "kernelslist.g")
    (named,) = kernel_lines(listed)  # the one launch, as the tracer named it
    raw = named.replace(".traceg", ".trace")
    fake = FakeCascade()
    fake.objects = {"traces/kernelslist.g": listed.read_bytes(), f"traces/{raw}": b"\xfd7zXZ\x00raw"}
    fake.listed = dict(fake.objects)
    with Cascade("http://cascade.test", TOKEN, transport=httpx.MockTransport(fake.handler)) as cascade:
        with pytest.raises(MissingTraceFiles) as refused:
            cascade.pull("opt", tmp_path)
    assert str(refused.value).startswith(
        f"traces/kernelslist.g names 1 instruction trace file that the run lacks: {named} "
        "(1 of them only as raw .trace files: post-process them first)"
    )


def test_a_legacy_raw_list_names_trace_files_without_xz(tmp_path):
    import httpx
    from cascade_client import Cascade, MissingTraceFiles

    from tests.client.conftest import TOKEN, FakeCascade

    fake = FakeCascade()
    fake.objects = {
        "traces/kernelslist": b"MemcpyHtoD,0x1,8\nkernel-1.trace\nkernel-2.trace\n",
        "traces/kernel-1.trace": b"-k",
    }
    fake.listed = dict(fake.objects)
    with Cascade("http://cascade.test", TOKEN, transport=httpx.MockTransport(fake.handler)) as cascade:
        with pytest.raises(
            MissingTraceFiles, match="names 1 instruction trace file that the run lacks: kernel-2.trace;"
        ):
            cascade.pull("opt", tmp_path)


def test_an_sse_kms_etag_is_no_md5_and_the_size_is_checked_still(cascade, fake, tmp_path):
    from cascade_client import FileChanged

    path = f"traces/kernel-329-ctx_{CTX_A}.trace.xz"
    fake.kms.add(path)
    cascade.pull("opt", tmp_path / "a")
    assert (tmp_path / "a" / path).read_bytes() == fake.objects[path]
    fake.objects[path] += b"x"  # the same ETag (the fake pins the listed one), a longer body
    fake.kms.discard(path)
    fake.multipart.add(path)
    with pytest.raises(FileChanged, match="bytes, listed"):
        cascade.pull("opt", tmp_path / "b")


WINDOWS_HOSTILE = [
    "C:\\Windows\\x.dll",
    "C:/Windows/x.dll",
    "\\\\server\\share\\x",
    "//server/share/x",
    "a\\..\\..\\win.txt",
    "a/../../x",
    "/etc/x",
    "traces/x\x00.trace",
    "traces/\x1b[2Jx",
    "traces/CON",
    "",
]


@pytest.mark.parametrize("path", WINDOWS_HOSTILE, ids=[repr(p) for p in WINDOWS_HOSTILE])
def test_a_path_that_leaves_the_folder_on_posix_or_windows_is_never_written(cascade, fake, tmp_path, path):
    from cascade_client import CascadeError

    fake.listed = {"configs/gpgpusim.config": b"ok", path: b"x"}
    fake.objects = dict(fake.listed)
    with pytest.raises(CascadeError, match="the server listed a file outside the run's folder"):
        cascade.pull("opt", tmp_path / "run")
    assert list(tmp_path.rglob("*")) == []  # nothing written at all, not even cascade.json


def test_the_same_rule_as_the_server():
    """The server lists and signs by the client's own rule (requirements.txt installs the client),
    so what it offers and what a pull writes cannot differ."""
    from cascade_client.paths import path_problem as client_rule

    from ingest.downloads import path_problem as server_rule

    assert server_rule is client_rule


def test_what_the_server_left_out_is_said(cascade, fake, tmp_path):
    fake.refused = [
        {"key": "accelsim-traces/opt/a/../../x", "reason": "not listed: its path has a `..` component"}
    ]
    result = cascade.pull("opt", tmp_path)
    assert result.warnings == [
        "the server left out 1 file whose paths could leave the folder: 'accelsim-traces/opt/a/../../x'"
    ]


def test_programs_read_kernels_csv_raw(cascade, fake):
    list(cascade.kernel_rows("opt"))
    assert dict(fake.requests[-1].url.params) == {"raw": "1"}
    b"".join(cascade.kernels_csv("opt"))
    assert dict(fake.requests[-1].url.params) == {}


def test_a_token_with_surrounding_spaces_is_trimmed_and_an_inner_one_refused(fake):
    import httpx
    from cascade_client import BadToken, Cascade

    from tests.client.conftest import TOKEN

    with Cascade(
        "http://cascade.test", f"  {TOKEN} \n", transport=httpx.MockTransport(fake.handler)
    ) as client:
        assert client.traces()[0]["id"] == "opt"
    with Cascade("http://cascade.test", "cas_te st", transport=httpx.MockTransport(fake.handler)) as client:
        with pytest.raises(BadToken, match="^CASCADE_TOKEN is malformed: it holds a space or a character"):
            client.traces()


# --- the kernel list the simulator accepts ------------------------------------------
# Expected lists are the real files' own lines, read with plain string work: what Accel-Sim's
# docs (docs/formats.md#the-tracers-files) say the simulator needs of them.


def real_lines(path):
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def accepted(lines):
    """What the simulator needs of a real list that already names each launch once: memcpy lines
    of 3 fields (`MemcpyHtoD,ADDRESS,BYTES`), nothing after the last kernel line."""
    cut = [",".join(line.split(",")[:3]) if line.startswith("Memcpy") else line for line in lines]
    last = max(i for i, line in enumerate(cut) if not line.startswith("Memcpy"))
    return cut[: last + 1]


def real_lists():
    from tests.helpers import shared_fixture

    found = []
    for folder in ("real-tracer", "real-tracer-2"):
        found += sorted(p for p in shared_fixture(folder).iterdir() if "kernelslist" in p.name)
    found += sorted(shared_fixture("real-simulatable").glob("*/traces/*kernelslist*"))
    return found


def test_every_real_list_alone_is_accepted_as_it_is_with_its_memcpy_lines_cut():
    from cascade_client import kernelslist

    lists = real_lists()
    assert len(lists) > 30
    for path in lists:
        lines = real_lines(path)
        kernels = [line for line in lines if not line.startswith("Memcpy")]
        assert len(set(kernels)) == len(kernels), path  # the tracer names each launch once
        assert kernelslist.for_simulator([lines]) == accepted(lines), path


def test_a_run_wide_list_and_a_contexts_list_of_the_same_launches_list_each_once():
    """The real vecadd-raw run holds `kernelslist` and `kernelslist_ctx_0x189ec30`, the same
    lines (4-field memcpy lines): concatenated, the real simulator aborted (accel-sim.cc:144)."""
    from cascade_client import kernelslist

    from tests.helpers import shared_fixture

    traces = shared_fixture(
        "real-simulatable", "qishao-chalmers+accel-sim-framework__vecadd-raw-sm75", "traces"
    )
    paths = [f"traces/{p.name}" for p in traces.iterdir()]
    layout, lists = kernelslist.source_lists(paths)
    assert layout == "raw" and lists == ["traces/kernelslist", "traces/kernelslist_ctx_0x189ec30"]
    run_wide, context = (real_lines(traces / p.removeprefix("traces/")) for p in lists)
    assert run_wide == context and any(len(line.split(",")) == 4 for line in context)
    assert kernelslist.for_simulator([run_wide, context]) == accepted(context)


def test_two_contexts_and_a_run_wide_list_naming_both_list_each_launch_once_in_launch_order():
    """Two real contexts' lists (KevinWu2017's), and a run-wide list that names both in launch
    order: each launch once, with the copies before it, in the run-wide list's order."""
    from cascade_client import kernelslist

    from tests.helpers import shared_fixture

    folder = shared_fixture("real-tracer-2")
    a, b = (real_lines(p) for p in sorted(folder.glob("KevinWu2017*kernelslist_ctx_*")))
    assert kernelslist.for_simulator([a, b]) == accepted(a) + accepted(b)
    assert kernelslist.for_simulator([b + a, a, b]) == accepted(b) + accepted(a)
    # Memcpy lines after a context's last kernel, as a killed run can leave: never at the end.
    assert kernelslist.for_simulator([a + b[:1], a]) == accepted(a)


def test_a_selection_keeps_the_copies_before_a_launch_left_out_for_the_next_one_kept():
    from cascade_client import kernelslist

    from tests.helpers import shared_fixture

    bfs = real_lines(
        shared_fixture(
            "real-tracer-2",
            "nassosliak+accel-sim-framework__util__tracer_nvbit__traces__bfs-rodinia-3.1__kernelslist",
        )
    )
    kernels = [line for line in bfs if not line.startswith("Memcpy")]
    keep = {kernelslist.trace_stem(kernels[1]), kernelslist.trace_stem(kernels[5])}
    upto = bfs.index(kernels[5])
    expected = [
        line for line in bfs[: upto + 1] if line.startswith("Memcpy") or line in (kernels[1], kernels[5])
    ]
    assert kernelslist.for_simulator([bfs], keep) == expected
    # The repeated one-byte copy between bfs's kernels is the run's own: each one stays.
    assert len(set(expected)) < len(expected)


def pulled(objects, tmp_path, **options):
    import httpx
    from cascade_client import Cascade

    from tests.client.conftest import TOKEN, FakeCascade

    fake = FakeCascade()
    fake.objects = dict(objects)
    fake.listed = dict(fake.objects)
    with Cascade("http://cascade.test", TOKEN, transport=httpx.MockTransport(fake.handler)) as cascade:
        return cascade.pull("opt", tmp_path, **options)


def test_pull_of_a_run_with_both_lists_writes_each_launch_once_for_both_tools(tmp_path):
    """The real vecadd-raw run: the post-processor's input and the kernelslist.g it leads to name
    the one launch once, memcpy lines of 3 fields before it and none after."""
    from tests.helpers import shared_fixture

    traces = shared_fixture(
        "real-simulatable", "qishao-chalmers+accel-sim-framework__vecadd-raw-sm75", "traces"
    )
    objects = {f"traces/{p.name}": p.read_bytes() for p in traces.iterdir()}
    result = pulled(objects, tmp_path)
    expected = accepted(real_lines(traces / "kernelslist_ctx_0x189ec30"))
    assert (tmp_path / "traces/kernelslist.cascade").read_text().splitlines() == expected
    assert (tmp_path / "traces/kernelslist.g").read_text().splitlines() == [
        line.replace(".trace.xz", ".traceg.xz") for line in expected
    ]
    assert result.postprocess == tmp_path / "traces/kernelslist.cascade"
    assert (tmp_path / "traces/kernelslist").read_bytes() == objects[
        "traces/kernelslist"
    ]  # the run's, as it was


def test_a_post_processed_list_the_simulator_aborts_on_is_fixed_and_the_runs_kept_beside(tmp_path):
    """A fork's kernelslist.g: the real romnn list with a 4th field on its memcpy lines and a copy
    after its last kernel. The pulled kernelslist.g is the real list again; a second pull skips all."""
    from tests.helpers import shared_fixture

    traces = shared_fixture("real-simulatable", "romnn+microgpusim__vectoradd-100-32-sm61", "traces")
    real = real_lines(traces / "kernelslist.g")
    memcpy = [line for line in real if line.startswith("Memcpy")]
    forked = [f"{line},copy.bin" if line.startswith("Memcpy") else line for line in real] + memcpy[:1]
    objects = {
        "traces/kernelslist.g": "".join(line + "\n" for line in forked).encode(),
        "traces/kernel-1.traceg": (traces / "kernel-1.traceg").read_bytes(),
    }
    result = pulled(objects, tmp_path)
    assert (tmp_path / "traces/kernelslist.g").read_text().splitlines() == real
    assert (tmp_path / "traces/kernelslist.g.run").read_bytes() == objects["traces/kernelslist.g"]
    assert result.kernelslist == tmp_path / "traces/kernelslist.g"
    again = pulled(objects, tmp_path)
    assert again.downloaded == 0 and again.skipped == 2
    assert (tmp_path / "traces/kernelslist.g").read_text().splitlines() == real


@pytest.mark.parametrize(
    "config, launcher",
    # As Accel-Sim's util/job_launching/configs/define-standard-cfgs.yml names them.
    [("SM86_RTX3070", "RTX3070-SASS"), ("SM7_QV100", "QV100-SASS"), ("SM75_RTX2060", "RTX2060-SASS")],
)
def test_the_launcher_names_a_tested_config_without_its_sm_prefix(config, launcher):
    from cascade_client.pull import launcher_config

    assert launcher_config(config) == launcher


@pytest.mark.parametrize("listing", ["traces/kernelslist.g", "traces/kernelslist"])
def test_tracez_files_are_pulled_and_listed_as_named_never_for_post_processing(tmp_path, listing):
    """Accel-Sim 2.0's per-warp zstd `.tracez` (../shared/docs/accel-sim-simulator.md: layout and
    list name unknown): under a post-processed or a raw list's name, the simulator's list names
    them as the run did and nothing is handed to the post-processor."""
    import httpx
    from cascade_client import Cascade

    from tests.client.conftest import TOKEN, FakeCascade

    fake = FakeCascade()
    lines = ["MemcpyHtoD,0x1,8", "kernel-1.tracez", "kernel-2.tracez"]
    fake.objects = {
        listing: "".join(line + "\n" for line in lines).encode(),
        "traces/kernel-1.tracez": b"\x28\xb5\x2f\xfd one",
        "traces/kernel-2.tracez": b"\x28\xb5\x2f\xfd two",
    }
    fake.listed = dict(fake.objects)
    with Cascade("http://cascade.test", TOKEN, transport=httpx.MockTransport(fake.handler)) as cascade:
        result = cascade.pull("opt", tmp_path)
    assert (tmp_path / "traces/kernelslist.g").read_text().splitlines() == lines
    assert result.postprocess is None and not (tmp_path / "traces/kernelslist.cascade").exists()
    for name in ("kernel-1.tracez", "kernel-2.tracez"):
        assert (tmp_path / "traces" / name).read_bytes() == fake.objects[f"traces/{name}"]
