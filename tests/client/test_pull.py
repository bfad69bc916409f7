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
    steps = result.next_steps("SM90_H100")
    assert steps[0].endswith(f"post-traces-processing {tmp_path}/traces/kernelslist.cascade")
    assert f"-trace {tmp_path}/traces/kernelslist.g -config {tmp_path}/configs/gpgpusim.config" in steps[1]


def test_a_complete_file_is_skipped_and_a_partial_one_fetched_again(cascade, fake, tmp_path):
    cascade.pull("opt", tmp_path)
    first = f"traces/kernel-5-ctx_{CTX_A}.trace.xz"
    second = f"traces/kernel-6-ctx_{CTX_A}.trace.xz"
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
    path = "configs/gpgpusim.config"
    fake.multipart.add(path)
    cascade.pull("opt", tmp_path)
    assert (tmp_path / path).read_bytes() == fake.objects[path]


@pytest.mark.parametrize(
    "change",
    ["longer", "same size, other bytes", "deleted"],
)
def test_a_file_changed_in_the_bucket_since_the_listing_stops_the_pull(cascade, fake, tmp_path, change):
    from cascade_client import FileChanged

    path = "configs/trace.config"
    body = fake.objects[path]
    if change == "longer":
        fake.objects[path] = body + b"\n"
    elif change == "deleted":
        del fake.objects[path]
    else:
        fake.objects[path] = bytes(reversed(body))
    with pytest.raises(FileChanged, match="configs/trace.config"):
        cascade.pull("opt", tmp_path, jobs=1)
    assert not (tmp_path / path).exists() and not (tmp_path / (path + ".part")).exists()


def test_a_selection_fetches_the_representatives_and_names_only_them(cascade, fake, tmp_path):
    fake.selection = selection_of([(CTX_B, 175, 40), (CTX_A, 6, 30), (CTX_A, 10, 2)])
    result = cascade.pull("opt", tmp_path, select="unique")
    traces = sorted(p for p in tree(tmp_path) if p.startswith("traces/kernel-"))
    assert traces == sorted(
        [
            f"traces/kernel-6-ctx_{CTX_A}.trace.xz",
            f"traces/kernel-10-ctx_{CTX_A}.trace.xz",
            f"traces/kernel-175-ctx_{CTX_B}.trace.xz",
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
        f"kernel-6-ctx_{CTX_A}.traceg.xz",
        f"kernel-10-ctx_{CTX_A}.traceg.xz",
    ] + memcpy[CTX_B] + [f"kernel-175-ctx_{CTX_B}.traceg.xz"]
    saved = json.loads((tmp_path / "cascade.json").read_text())
    assert saved["trace_id"] == "opt" and saved["selection"]["by"] == "unique"
    assert [(g["representative"]["kernel_id"], g["weight"]) for g in saved["groups"]] == [
        (175, 40),
        (6, 30),
        (10, 2),
    ]
    assert all(g["in_kernelslist"] for g in saved["groups"])
    assert sum(g["weight"] for g in result.groups) == 72


def test_a_post_processed_run_keeps_its_list_beside_the_selected_one(tmp_path):
    import httpx
    from cascade_client import Cascade

    from tests.client.conftest import TOKEN, FakeCascade
    from tests.helpers import DATA

    fake = FakeCascade(run=SAMPLE)
    ctx = "0x6165bdd7ec90"
    vecadd = DATA / "accelsim-vecadd-v5"
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
    from cascade_client.pull import expected_md5

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
    assert drawn.rstrip("\n").split("\r")[-1].startswith("[" + "#" * 30 + "] 100%  2/2 files  3.0 KB/3.0 KB")


def test_an_untraced_representative_is_weighed_but_not_listed_and_said_once(cascade, fake, tmp_path):
    fake.selection = selection_of([(CTX_A, 6, 3), (CTX_A, 900, 5), (CTX_B, 901, 1)])
    result = cascade.pull("opt", tmp_path, select="unique")
    assert [(g["representative"]["kernel_id"], g["in_kernelslist"]) for g in result.groups] == [
        (6, True),
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
    assert kernels == [f"kernel-6-ctx_{CTX_A}.traceg.xz"]
