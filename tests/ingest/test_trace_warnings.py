"""What a trace tells its reader truly: a stats file or kernel list cut short,
launches `traced` only where the run holds their trace file, files whose paths would leave a
client's folder left out, `waiting_for`, and `bytes`.

Expected values come from the real files beside the checkout (tests.helpers.shared_fixture),
read here with regular expressions from the formats, or from the folders' own contents.
"""

import io
import re
from pathlib import Path

import pytest
from django.core.management import call_command

from ingest import parse
from ingest.bucket import S3Object
from ingest.kernelslist import parse_kernelslist_lines
from ingest.paths import path_problem
from ingest.read_ahead import ReadAhead
from ingest.stats import StatsNote
from tests.helpers import PREFIX, shared_fixture
from traces.models import Kernel, Trace, TraceState

OK = {"status": "ok", "trace_gpu_arch": "sm_75"}
SIMPLETORCH = (
    "sinharudraneel+dp-performance-accel-sim__hw_run__traces__device-0__11.7__simpletorch__NO_ARGS__traces__"
)
# A kernel list's entry: a kernel's trace file, raw or grouped, xz or not (and a fork's `.tracez`).
ENTRY = re.compile(r"^(?:.*/)?(kernel-([0-9]+)(-ctx_0x[0-9a-fA-F]+)?\.trace[A-Za-z0-9.]*)\s*$")


def run_command(*args) -> str:
    out = io.StringIO()
    call_command("ingest_traces", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


# --- a stats file cut short, end to end (moto + ingest_traces + the API) ------------------------


def test_a_real_run_cut_inside_its_last_line_is_ready_with_its_complete_rows_and_the_cut_named(
    db, api, upload
):
    data = shared_fixture("real-tracer", SIMPLETORCH + "stats.csv").read_bytes()
    last_line = data.rfind(b"\n", 0, len(data) - 1) + 1
    complete = data[:last_line].count(b"\nkernel-")  # rows before the last line (after the header)
    cut = data[: last_line + len("kernel-1101.tra")]
    upload("cut", {"traces/stats.csv": cut}, metadata=OK)
    output = run_command()
    trace = Trace.objects.get(pk="cut")
    assert trace.state == TraceState.READY, trace.error
    assert f"cut: new -> ready, {complete} kernels" in output
    assert trace.kernel_count == complete == 1100
    (warning,) = trace.warnings
    assert warning["file"] == "traces/stats.csv"
    assert warning["offset"] == last_line
    assert "'kernel-1101.tra'" in warning["what"] and "dropped" in warning["what"]
    detail = api.get("/api/traces/cut").json()
    keys = list(detail)
    at = keys.index("metadata")
    assert keys[at : at + 5] == ["metadata", "kernels", "waiting_for", "warnings", "traced_launches"]
    assert detail["warnings"] == [warning]
    assert [k["kernel_id"] for k in detail["kernels"]] == list(range(1, 1101))
    (summary,) = api.get("/api/traces").json()
    assert summary["warnings"] == [warning]
    assert summary["traced_launches"] == 0  # no kernel list, no trace file


def test_a_killed_runs_unfinished_launch_is_counted_in_warnings(db, api, upload):
    data = shared_fixture(
        "real-tracer", "MrTang-Yuhan+Accel-Sim-Flashinfer__test-traces__flashinfer-gemm__traces__stats.csv"
    ).read_bytes()
    assert data.endswith(b", ")  # the tracer was stopped inside its last kernel
    upload("killed", {"traces/stats.csv": data}, metadata=OK)
    run_command()
    trace = Trace.objects.get(pk="killed")
    assert trace.state == TraceState.READY, trace.error
    (warning,) = api.get("/api/traces/killed").json()["warnings"]
    last = data.rsplit(b"\n", 1)[1]
    assert warning["offset"] == len(data)
    assert re.match(rb"kernel-[0-9]+\.trace\.xz", last)[0].decode() in warning["what"]
    assert "1 launch" in warning["what"]


def test_a_kernel_list_cut_mid_line_is_named_and_its_cut_entry_not_traced():
    lines = [b"MemcpyHtoD,0x00007f2b2d500000,400\n", b"kernel-1.traceg\n", b"kernel-2.tra"]
    notes = []
    held = {"kernel-1.traceg", "kernel-2.traceg"}.__contains__
    assert set(parse_kernelslist_lines(lines, held=held, notes=notes)) == {1}
    assert notes == [StatsNote(sum(map(len, lines[:2])), notes[0].what)]
    assert "'kernel-2.tra'" in notes[0].what
    # A whole last entry without its newline, naming a file the run holds, is no cut.
    notes = []
    assert set(parse_kernelslist_lines([b"kernel-2.traceg"], held=held, notes=notes)) == {2}
    assert notes == []


# --- traced truly -----------------------------------------------------------------


def real_kernelslists() -> list[Path]:
    lists = [p for folder in ("real-tracer", "real-tracer-2") for p in shared_fixture(folder).iterdir()]
    lists += list(shared_fixture("real-simulatable").glob("*/traces/kernelslist*"))
    return sorted(p for p in lists if re.search(r"kernelslist(_ctx_0x[0-9a-f]+)?(\.g)?$", p.name))


@pytest.mark.parametrize("path", real_kernelslists(), ids=lambda p: p.name[-50:])
def test_every_real_kernel_list_layout_is_read_and_traced_needs_the_file(path):
    lines = path.read_bytes().splitlines(keepends=True)
    named = {}
    for line in lines:
        match = ENTRY.match(line.decode())
        if match:
            named[match[1]] = int(match[2])
    assert named, "a real kernel list names kernels"
    # Held: every id; none held: none; every other file held: those.
    assert set(parse_kernelslist_lines(lines, held=named.__contains__)) == set(named.values())
    assert set(parse_kernelslist_lines(lines, held=lambda name: False)) == set()
    some = dict(list(named.items())[::2])
    assert set(parse_kernelslist_lines(lines, held=some.__contains__)) == set(some.values())


def objects_of(folder: Path) -> tuple[list[S3Object], dict]:
    objects, bodies = [], {}
    for path in sorted(folder.iterdir()):
        obj = S3Object(key=f"{PREFIX}run/traces/{path.name}", size=path.stat().st_size, etag=f'"{path.name}"')
        objects.append(obj)
        bodies[(obj.key, obj.etag)] = path.read_bytes()
    return objects, bodies


def traced_of(objects: list[S3Object], bodies: dict) -> tuple[list[tuple], parse.RunNotes]:
    notes = parse.RunNotes()
    sources = parse.stats_sources(objects)
    rows = parse.kernel_rows("run", sources, 0, None, ReadAhead(bodies), listed=objects, notes=notes)
    return [(row[0], row[1], row[3], row[14]) for row in rows], notes


@pytest.mark.parametrize(
    "folder", sorted(shared_fixture("real-simulatable").glob("*/traces")), ids=lambda p: p.parent.name[-40:]
)
def test_a_simulatable_runs_launches_are_traced_where_its_lists_name_a_file_it_holds(folder):
    """The real simulator ran on each folder; a launch is traced where a list names its file and
    the folder holds it (flashinfer-gemm's stats has 10 launches, its kernelslist.g 8)."""
    objects, bodies = objects_of(folder)
    present = {path.name for path in folder.iterdir()}
    expected = set()
    for listed in folder.glob("kernelslist*"):
        for line in listed.read_text().splitlines():
            match = ENTRY.match(line)
            if match and match[1] in present:
                expected.add(int(match[2]))
    rows, notes = traced_of(objects, bodies)
    assert expected and {kernel_id for _, kernel_id, _, traced in rows if traced} == expected
    assert notes.traced_launches == len(expected)
    stats = next(folder.glob("stats*")).read_bytes()
    assert len(notes.warnings) == (0 if stats.endswith(b"\n") else 1)  # a killed run's last launch


def test_vecadd_v5_names_a_trace_file_it_lacks_so_its_launch_is_not_traced(tmp_path):
    folder = shared_fixture("accelsim-vecadd-v5")
    objects, bodies = objects_of(folder)
    rows, notes = traced_of(objects, bodies)
    assert [traced for *_, traced in rows] == [False]
    assert notes.traced_launches == 0
    # With the grouped file kernelslist.g names, it is.
    named = next(
        line for line in (folder / "kernelslist.g").read_text().splitlines() if line.startswith("kernel-")
    )
    extra = S3Object(key=f"{PREFIX}run/traces/{named}", size=3, etag='"x"')
    rows, notes = traced_of([*objects, extra], bodies)
    assert [traced for *_, traced in rows] == [True]
    assert notes.traced_launches == 1


def test_traced_launches_through_ingest(db, api, upload, vecadd_files):
    upload(
        "vecadd", vecadd_files, metadata=OK
    )  # with kernel-1-ctx_<ctx>.trace.xz, which kernelslist_ctx names
    run_command()
    assert Trace.objects.get(pk="vecadd").traced_launches == 1
    assert api.get("/api/traces/vecadd/summary").json()["traced_launches"] == 1
    files = {name: body for name, body in vecadd_files.items() if ".trace" not in name}
    upload("bare", files, metadata=OK)
    run_command()
    assert Kernel.objects.get(trace=Trace.objects.get(pk="bare")).traced is False
    assert api.get("/api/traces/bare").json()["traced_launches"] == 0


# --- unsafe keys, waiting_for and bytes --------------------------------


@pytest.mark.parametrize(
    "path, why",
    [
        ("traces/../../x", ".."),
        ("a\\..\\..\\win.txt", "backslash"),
        ("C:/Windows/x.dll", "drive letter"),
        ("\\\\server\\share\\x", "backslash"),
        ("traces/\x1b]0;title\x07", "control character"),
    ],
)
def test_a_key_whose_path_would_leave_the_folder_is_left_out_and_named(
    db, api, upload, vecadd_files, path, why
):
    assert why in path_problem(path)
    upload("hostile", {**vecadd_files, path: b"x" * 1000}, metadata=OK)
    run_command()
    trace = Trace.objects.get(pk="hostile")
    assert trace.state == TraceState.READY, trace.error
    assert all(path_problem(item["key"].removeprefix(f"{PREFIX}hostile/")) is None for item in trace.files)
    (warning,) = trace.warnings
    assert why in warning["what"] and warning["offset"] is None
    assert "\x1b" not in warning["file"]
    assert trace.bytes == sum(len(b) for b in vecadd_files.values()) + len(
        b'{"status":"ok","trace_gpu_arch":"sm_75"}'
    )
    paths = [item["path"] for item in api.get("/api/traces/hostile/files").json()["files"]]
    assert path not in paths


def test_an_uploading_trace_says_what_it_waits_for(db, api, upload, vecadd_files):
    upload("early", {"traces/stats_ctx_0x1": b""})
    run_command()
    assert api.get("/api/traces/early").json()["waiting_for"] == "metadata.json"
    listed = {"status": "ok", "files": [{"key": "traces/a", "bytes": 1}, {"key": "traces/b", "bytes": 2}]}
    upload("late", {}, metadata=listed)
    run_command()
    expected = "2 files listed in metadata.json: traces/a, traces/b"
    assert api.get("/api/traces/late").json()["waiting_for"] == expected
    by_id = {t["id"]: t for t in api.get("/api/traces").json()}
    assert by_id["late"]["waiting_for"] == expected
    assert by_id["early"]["waiting_for"] == "metadata.json"
    upload("vecadd", vecadd_files, metadata=OK)
    run_command()
    assert api.get("/api/traces/vecadd").json()["waiting_for"] is None


def test_bytes_count_the_files_a_reader_gets(db, api, upload, vecadd_files):
    """metadata.json's list and itself: a file left over from an earlier upload is not counted."""
    upload("listed", {**vecadd_files, "leftover/old.bin": b"x" * 5000}, metadata=OK)
    keys = [f"{PREFIX}listed/{name}" for name in vecadd_files]
    metadata = {
        **OK,
        "files": [
            {"key": key, "bytes": len(vecadd_files[name])}
            for key, name in zip(keys, vecadd_files, strict=True)
        ],
    }
    upload("listed", {}, metadata=metadata)
    run_command()
    detail = api.get("/api/traces/listed").json()
    files = api.get("/api/traces/listed/files").json()["files"]
    assert detail["bytes"] == sum(item["bytes"] for item in files)
    assert "leftover/old.bin" not in [item["path"] for item in files]
