"""The trace generator writes what the tracer and the profiling harness upload, and Cascade reads it."""

import json
import re
from ctypes import c_int32
from pathlib import Path
from typing import NamedTuple

import pytest
from django.core.management import CommandError, call_command

from ingest import bucket, passes
from tools import generator, workload
from tools.generator import RunSpec
from tools.samples import SAMPLES, write_samples
from tools.upload import upload_run_folder
from traces.models import Kernel, Trace, TraceState

REPO = Path(__file__).resolve().parents[2]
OPT_SAMPLE = "sample__facebook_opt-125m__h100-e2e"
# The header tracer_tool.cu writes at the top of a run's first stats file, spelled out here rather
# than imported from tools.tracer_format, which the generator writes with.
STATS_HEADER = (
    "kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, "
    "block_dimX, block_dimY, block_dimZ, #threads, total_insts, total_reported_insts\n"
)

# The tracer's two fprintf formats (tracer_tool.cu), applied here with Python's `%`, as C's printf
# would: the launch half when a kernel is launched (trailing ", ", no newline), the totals and the
# newline when it exits. A launch captured into a CUDA graph, or one the run was killed during,
# never gets the second.
LAUNCH_FORMAT = "%s, %s, %d, %d, %d, %d, %d, %d, %d, %d, "
EXIT_FORMAT = "%d,%d\n"
# One launch as the tracer wrote it: its launch half, then its totals if it exited.
LAUNCH = re.compile(
    r"(kernel-\d+(?:-ctx_0x[0-9a-f]+)?\.trace(?:\.xz)?), ([A-Za-z_]\w*), ((?:-?\d+, ){8})(?:(-?\d+),(-?\d+)\n)?"
)


class Written(NamedTuple):
    trace_file: str
    name: str
    numbers: list[int]  # grid x/y/z, #blocks, block x/y/z, #threads
    totals: tuple[int, int] | None

    @property
    def kernel_id(self) -> int:
        return int(self.trace_file.split("-")[1].split(".")[0])


def written_launches(stats: Path) -> list[Written]:
    """Every launch in a stats file, read with the tracer's formats (not Cascade's parser).

    Fails unless the launches cover the whole file after the header, byte for byte.
    """
    body = stats.read_text().removeprefix(STATS_HEADER)
    launches, position = [], 0
    while position < len(body):
        match = LAUNCH.match(body, position)
        assert match, (
            f"{stats.name}: not the tracer's format at byte {position}: {body[position : position + 80]!r}"
        )
        trace_file, name, numbers, insts, reported = match.groups()
        totals = (int(insts), int(reported)) if insts is not None else None
        launches.append(Written(trace_file, name, [int(n) for n in numbers.split(", ")[:-1]], totals))
        position = match.end()
    return launches


def tracer_bytes(launch: workload.Launch, *, counted: int | None) -> str:
    """What the tracer writes for `launch`: its launch half, then `counted` if it exited.

    C's `%d` of an unsigned 32-bit value, emulated with ctypes (2^31 and above print negative).
    """
    gx, gy, gz = launch.grid
    bx, by, bz = launch.block
    numbers = (gx, gy, gz, gx * gy * gz, bx, by, bz, bx * by * bz)
    half = LAUNCH_FORMAT % (launch.trace_file, launch.name, *(c_int32(n).value for n in numbers))
    if counted is None:
        return half
    return half + EXIT_FORMAT % (c_int32(counted).value, c_int32(counted).value)


def tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def stats_files(folder: Path) -> list[Path]:
    return sorted((folder / "traces").glob("stats_ctx_*"))


# --- The stats files: the tracer's bytes --------------------------------------------------------


def test_one_launch_as_the_tracer_writes_it_and_graph_halves_running_together():
    def launch(kernel_id, name, grid, block, insts, *, captured=False, replayed=0):
        return workload.Launch(
            "0x1", kernel_id, name, grid, block, insts, False, 0, captured=captured, replayed_insts=replayed
        )

    ordinary = [launch(1, "_Z6vecAddPdS_S_i", (98, 1, 1), (1024, 1, 1), 50066)]
    assert "".join(row for _, row in workload.stats_rows(ordinary)) == (
        "kernel-1-ctx_0x1.trace.xz, _Z6vecAddPdS_S_i, 98, 1, 1, 98, 1024, 1, 1, 1024, 50066,50066\n"
    )
    step = [
        launch(1, "_Z4gemmv", (8, 4, 1), (128, 1, 1), 700, captured=True),
        launch(2, "_Z7softmaxv", (16, 1, 1), (256, 1, 1), 800, captured=True),
        launch(3, "_Z4copyv", (2, 1, 1), (64, 1, 1), 900),
        launch(4, "_Z6argmaxv", (1, 1, 1), (32, 1, 1), 2**31 + 5),
    ]
    assert "".join(row for _, row in workload.stats_rows(step)) == (
        "kernel-1-ctx_0x1.trace.xz, _Z4gemmv, 8, 4, 1, 32, 128, 1, 1, 128, "
        "kernel-2-ctx_0x1.trace.xz, _Z7softmaxv, 16, 1, 1, 16, 256, 1, 1, 256, "
        "kernel-3-ctx_0x1.trace.xz, _Z4copyv, 2, 1, 1, 2, 64, 1, 1, 64, 900,900\n"
        "kernel-4-ctx_0x1.trace.xz, _Z6argmaxv, 1, 1, 1, 1, 32, 1, 1, 32, -2147483643,-2147483643\n"
    )
    # Killed during kernel 4: its launch half ends the file. Or the file ends in captured halves.
    assert "".join(row for _, row in workload.stats_rows(step, killed=True)).endswith(
        "900,900\nkernel-4-ctx_0x1.trace.xz, _Z6argmaxv, 1, 1, 1, 1, 32, 1, 1, 32, "
    )
    assert "".join(row for _, row in workload.stats_rows(step[:2])) == (
        "kernel-1-ctx_0x1.trace.xz, _Z4gemmv, 8, 4, 1, 32, 128, 1, 1, 128, "
        "kernel-2-ctx_0x1.trace.xz, _Z7softmaxv, 16, 1, 1, 16, 256, 1, 1, 256, "
    )
    # The graph replayed before kernel 3 ran: the counters, read at kernel 3's exit, hold both.
    after_replay = [launch(3, "_Z4copyv", (2, 1, 1), (64, 1, 1), 900, replayed=700 + 800)]
    assert "".join(row for _, row in workload.stats_rows(after_replay)) == (
        "kernel-3-ctx_0x1.trace.xz, _Z4copyv, 2, 1, 1, 2, 64, 1, 1, 64, 2400,2400\n"
    )


@pytest.mark.parametrize(
    "spec",
    [
        RunSpec(kernels=700, contexts=2, seed=11),
        RunSpec(kernels=500, contexts=3, seed=12, crashed=True),
        RunSpec(kernels=300, seed=13, cuda_graphs=False, crashed=True),
        RunSpec(kernels=400, format="legacy", seed=14),
    ],
    ids=["graphs-two-contexts", "killed-in-a-graph-step", "no-graphs-killed", "legacy"],
)
def test_stats_files_are_the_tracers_printf_output_byte_for_byte(tmp_path, spec):
    """The tracer's counters are global, read at an ordinary launch's exit: a graph step's forward,
    replayed after its capture, is counted into the step's first eager launch."""
    run = tmp_path / "run"
    generator.write_run(run, spec)
    all_launches = list(workload.launches(spec))
    expected: dict[str | None, str] = {}
    counters = 0  # what the GPU executed since the last ordinary launch's exit
    for index, launch in enumerate(all_launches):
        killed = spec.crashed and index == len(all_launches) - 1
        header = STATS_HEADER if not expected and launch.ctx not in expected else ""
        counters += launch.total_insts
        exits = not launch.captured and not killed
        expected[launch.ctx] = expected.get(launch.ctx, header) + tracer_bytes(
            launch, counted=counters if exits else None
        )
        counters = 0 if exits else counters
    for ctx, text in expected.items():
        name = "stats.csv" if ctx is None else f"stats_ctx_{ctx}"
        assert (run / "traces" / name).read_bytes() == text.encode()


def test_the_legacy_formats_tracers_know_no_cuda_graphs(tmp_path):
    assert not RunSpec(format="legacy").decode_graphs and RunSpec().decode_graphs
    with pytest.raises(ValueError, match="predate CUDA graph support"):
        RunSpec(format="legacy", cuda_graphs=True)
    with pytest.raises(CommandError, match="predate CUDA graph support"):
        call_command("generate_trace", "--out", str(tmp_path / "run"), "--format", "legacy", "--cuda-graphs")


# --- Local folders -----------------------------------------------------------------------------


def test_metadata_is_written_last_and_lists_every_other_file_with_its_size(tmp_path):
    run = tmp_path / "my-run"
    written = generator.write_run(run, RunSpec(kernels=50, seed=5))
    assert written[-1].name == "metadata.json"
    metadata = json.loads((run / "metadata.json").read_text())
    assert metadata["status"] == "ok"
    assert metadata["trace_gpu_arch"] == "sm_90" and metadata["model"] == "facebook/opt-125m"
    on_disk = {name: len(data) for name, data in tree(run).items() if name != "metadata.json"}
    assert {f["key"]: f["bytes"] for f in metadata["files"]} == {
        f"accelsim-traces/my-run/{name}": size for name, size in on_disk.items()
    }


def test_timeline_and_timing_are_optional(tmp_path):
    generator.write_run(tmp_path / "with", RunSpec(kernels=20))
    generator.write_run(tmp_path / "without", RunSpec(kernels=20, timeline=False, timing=False))
    assert {"timeline.json", "timing.csv"} <= set(tree(tmp_path / "with"))
    assert not {"timeline.json", "timing.csv"} & set(tree(tmp_path / "without"))
    timing = (tmp_path / "with" / "timing.csv").read_text().splitlines()
    assert timing[0] == "ctx,kernel_id,start_ns,end_ns,duration_ns" and len(timing) == 21


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    spec = RunSpec(kernels=150, contexts=2, seed=42)
    generator.write_run(tmp_path / "a" / "run", spec)
    generator.write_run(tmp_path / "b" / "run", spec)
    generator.write_run(tmp_path / "c" / "run", RunSpec(kernels=150, contexts=2, seed=43))
    assert tree(tmp_path / "a" / "run") == tree(tmp_path / "b" / "run")
    assert tree(tmp_path / "a" / "run") != tree(tmp_path / "c" / "run")


def test_shipped_samples_are_what_the_generator_makes_and_small(tmp_path):
    write_samples(tmp_path)
    for run_id in SAMPLES:
        assert tree(REPO / "samples" / run_id) == tree(tmp_path / run_id), (
            f"regenerate samples/{run_id}: python -m tools.samples"
        )
    total = sum(p.stat().st_size for p in (REPO / "samples").rglob("*") if p.is_file())
    assert total < 2 * 1024**2


def test_the_shipped_opt_sample_has_graph_captured_decode_steps_and_the_failed_one_a_killed_launch():
    opt = [launch for f in stats_files(REPO / "samples" / OPT_SAMPLE) for launch in written_launches(f)]
    assert len(opt) == 700 and sum(launch.totals is None for launch in opt) == 3 * 173
    timeline = json.loads((REPO / "samples" / OPT_SAMPLE / "timeline.json").read_text())
    assert [(step["phase"], step["captured_kernels"]) for step in timeline["steps"]] == [
        ("prefill", 0),
        ("decode", 173),
        ("decode", 173),
        ("decode", 173),
    ]
    (failed,) = stats_files(REPO / "samples" / "sample__failed-run")
    assert failed.read_bytes().endswith(b", ")
    launches = written_launches(failed)
    assert len(launches) == 40 and [launch.totals is None for launch in launches] == [False] * 39 + [True]


def test_generate_trace_command_writes_a_folder(tmp_path, capsys):
    call_command("generate_trace", "--out", str(tmp_path / "cli-run"), "--kernels", "25", "--contexts", "2")
    assert len(stats_files(tmp_path / "cli-run")) == 2
    assert "cli-run" in capsys.readouterr().out


def test_generate_trace_command_cuda_graphs_flags(tmp_path):
    for flag in ("--cuda-graphs", "--no-cuda-graphs"):
        call_command("generate_trace", "--out", str(tmp_path / flag), "--kernels", "400", flag)
    (graphs,) = stats_files(tmp_path / "--cuda-graphs")
    (eager,) = stats_files(tmp_path / "--no-cuda-graphs")
    assert sum(launch.totals is None for launch in written_launches(graphs)) == 173 + 68
    assert eager.read_text().count("\n") == 401 and all(launch.totals for launch in written_launches(eager))


def test_generate_trace_command_crashed_leaves_the_last_launch_half(tmp_path):
    call_command("generate_trace", "--out", str(tmp_path / "run"), "--kernels", "7", "--crashed")
    (stats,) = stats_files(tmp_path / "run")
    assert stats.read_bytes().endswith(b", 768, 1, 1, 768, ") and written_launches(stats)[-1].totals is None


def test_generate_trace_command_trace_layouts_and_configs(tmp_path):
    options = ["--kernels", "360", "--layers", "step 0 (prefill),step 2 (decode)"]
    call_command("generate_trace", "--out", str(tmp_path / "raw"), *options)
    call_command("generate_trace", "--out", str(tmp_path / "grouped"), *options, "--trace-files", "grouped")
    call_command("generate_trace", "--out", str(tmp_path / "configs"), *options, "--configs")
    raw = sorted(p.name for p in (tmp_path / "raw" / "traces").glob("kernel-*"))
    grouped = sorted(p.name for p in (tmp_path / "grouped" / "traces").glob("kernel-*"))
    assert raw and all(name.endswith(".trace.xz") for name in raw)
    assert grouped == [name.replace(".trace.xz", ".traceg.xz") for name in raw]
    assert list((tmp_path / "grouped" / "traces").glob("kernelslist_ctx_*.g"))
    # No configs/ unless asked: a run names one of the simulator's own tested configs.
    assert not (tmp_path / "raw" / "configs").exists() and (tmp_path / "configs" / "configs").is_dir()
    assert "-gpgpu_subwarp_size" not in (tmp_path / "configs" / "configs" / "trace.config").read_text()


def test_generate_trace_command_refuses_a_folder_with_files(tmp_path):
    (tmp_path / "old-run").mkdir()
    (tmp_path / "old-run" / "stats_ctx_0x1").write_text("left over\n")
    with pytest.raises(CommandError, match="old-run is not empty: give a new folder"):
        call_command("generate_trace", "--out", str(tmp_path / "old-run"), "--kernels", "5")


# --- Uploaded: Cascade's ingestion -----------------------------------------------------------------


def test_upload_puts_metadata_last(s3, db, monkeypatch):
    order = []
    monkeypatch.setattr(bucket, "put_object", lambda key, body: order.append(key))
    monkeypatch.setattr(bucket, "upload_file", lambda path, key: order.append(key))
    generator.upload_run("run-1", RunSpec(kernels=20))
    assert order[-1] == "accelsim-traces/run-1/metadata.json"
    # stats, kernelslist, timing, timeline, metadata (configs/ are off by default: no files of ours
    # pose as simulator configs)
    assert len(order) == len(set(order)) >= 5


@pytest.mark.parametrize(
    "spec, state, kernels, without_totals",
    [
        (RunSpec(kernels=700, contexts=2, seed=1), TraceState.READY, 700, 3 * 173),
        (RunSpec(kernels=700, contexts=2, seed=1, cuda_graphs=False), TraceState.READY, 700, 0),
        (RunSpec(kernels=400, seed=3), TraceState.READY, 400, 173 + 68),
        (RunSpec(kernels=120, format="legacy", seed=2), TraceState.READY, 120, 0),
        (RunSpec(kernels=10, status="failed"), TraceState.FAILED, 0, 0),
        (RunSpec(kernels=10, unfinished=True), TraceState.UPLOADING, 0, 0),
    ],
    ids=[
        "v5-two-contexts-graphs",
        "v5-two-contexts-no-graphs",
        "ends-in-graph-halves",
        "legacy",
        "failed",
        "unfinished",
    ],
)
def test_cascade_ingests_generated_runs(s3, db, tmp_path, spec, state, kernels, without_totals):
    """Every launch becomes a kernel with the totals its line holds; one the tracer wrote only the
    launch half of (captured into a CUDA graph) has unknown totals (null).

    What each launch should hold is read off the uploaded stats files with the tracer's printf
    formats (`written_launches`), not taken from the generator's model of the run, which wrote
    those files: a writer and a reader that shared one mistaken reading would pass otherwise.
    """
    folder = tmp_path / "generated"
    generator.write_run(folder, spec, run_id="generated", key_prefix=bucket.prefix())
    upload_run_folder(folder, "generated", skip_unchanged=False)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="generated")
    assert (trace.state, trace.kernel_count, Kernel.objects.filter(trace=trace).count()) == (
        state,
        kernels,
        kernels,
    ), trace.error
    if state == TraceState.READY:
        traced = Kernel.objects.filter(trace=trace, traced=True).count()
        assert 0 < traced <= spec.max_traced
        assert trace.has_step_timeline and trace.has_real_timing
        stored = {
            (ctx, kernel_id): (insts, reported)
            for ctx, kernel_id, insts, reported in Kernel.objects.filter(trace=trace).values_list(
                "ctx", "kernel_id", "total_insts", "total_reported_insts"
            )
        }
        assert stored == written_totals(folder)
        assert sum(totals == (None, None) for totals in stored.values()) == without_totals


def written_totals(folder: Path) -> dict[tuple[str | None, int], tuple[int | None, int | None]]:
    """Each launch's totals as its stats file holds them: `%d` of an unsigned 32-bit value, read
    back unsigned; (None, None) for a launch half without them. A legacy stats.csv has no context."""
    files = stats_files(folder) or [folder / "traces" / "stats.csv"]
    return {
        (None if f.name == "stats.csv" else f.name.removeprefix("stats_ctx_"), launch.kernel_id): (
            (None, None) if launch.totals is None else tuple(total % 2**32 for total in launch.totals)
        )
        for f in files
        for launch in written_launches(f)
    }
