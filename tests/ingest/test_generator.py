"""The trace generator writes what the tracer and the profiling harness upload, and Cascade reads it."""

import hashlib
import json
import lzma
import re
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from ingest import bucket, generator, passes
from ingest.generator import RunSpec
from tests.conftest import TEST_BUCKET
from traces.models import Kernel, Trace, TraceState

REPO = Path(__file__).resolve().parents[2]
# A row exactly as the tracer writes it: ", " between fields, none before the last total.
V5_ROW = re.compile(r"^kernel-(\d+)-ctx_(0x[0-9a-f]+)\.trace\.xz, [A-Za-z_]\w*(, \d+){9},\d+$")
LEGACY_ROW = re.compile(r"^kernel-(\d+)\.trace, [A-Za-z_]\w*(, \d+){9},\d+$")


def tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def stats_files(folder: Path) -> list[Path]:
    return sorted((folder / "traces").glob("stats_ctx_*"))


# --- Local folders -----------------------------------------------------------------------------


def test_v5_run_has_one_stats_and_kernelslist_per_context_and_the_header_only_in_the_first(tmp_path):
    generator.write_run(tmp_path / "run", RunSpec(kernels=300, contexts=3, seed=1))
    files = stats_files(tmp_path / "run")
    assert len(files) == 3
    ctxs = [f.name.removeprefix("stats_ctx_") for f in files]
    assert all((tmp_path / "run" / "traces" / f"kernelslist_ctx_{ctx}").exists() for ctx in ctxs)
    starts_with_header = [f.read_text().startswith("kernel id, kernel mangled name,") for f in files]
    first = [f for f in files if f.read_text().startswith(generator.STATS_HEADER)]
    assert starts_with_header.count(True) == 1 and len(first) == 1
    rows = [line for f in files for line in f.read_text().splitlines() if not line.startswith("kernel id")]
    assert len(rows) == 300
    assert all(V5_ROW.match(row) for row in rows), [row for row in rows if not V5_ROW.match(row)][:1]
    for f in files:  # kernel ids restart at 1 in each context
        ids = [int(V5_ROW.match(line)[1]) for line in f.read_text().splitlines() if V5_ROW.match(line)]
        assert ids == list(range(1, len(ids) + 1))


def test_stats_columns_are_consistent(tmp_path):
    generator.write_run(tmp_path / "run", RunSpec(kernels=200, seed=2))
    (stats,) = stats_files(tmp_path / "run")
    for line in stats.read_text().splitlines()[1:]:
        fields = line.replace(",", ", ").split(", ")
        gx, gy, gz, blocks, bx, by, bz, threads, insts, reported = map(int, [f for f in fields[2:] if f])
        assert blocks == gx * gy * gz and threads == bx * by * bz
        assert 0 < insts < 2**32 and reported == insts


def test_names_are_real_pytorch_cublas_and_flash_attention_kernels(tmp_path):
    generator.write_run(tmp_path / "run", RunSpec(seed=3))
    text = "".join(f.read_text() for f in stats_files(tmp_path / "run"))
    for marker in (
        "_ZN2at6native",
        "sm90_xmma_gemm",
        "_ZN5flash15flash_fwd_kernel",
        "_ZN5flash23flash_fwd_splitkv",
    ):
        assert marker in text


def test_traced_kernels_are_listed_and_have_a_real_xz_instruction_trace(tmp_path):
    run = tmp_path / "run"
    generator.write_run(run, RunSpec(kernels=400, contexts=2, seed=4, max_traced=10))
    listed = [
        line
        for f in sorted((run / "traces").glob("kernelslist_ctx_*"))
        for line in f.read_text().splitlines()
        if not line.startswith("MemcpyHtoD,")
    ]
    assert len(listed) == 10
    xz_files = sorted(p.name for p in (run / "traces").glob("*.trace.xz"))
    assert xz_files == sorted(listed)
    header = lzma.decompress((run / "traces" / listed[0]).read_bytes()).decode()
    assert header.startswith("-kernel name = ")
    assert "-binary version = 90\n" in header and "-accelsim tracer version = 5\n" in header


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


def test_legacy_run_has_stats_csv_and_kernelslist(tmp_path):
    run = tmp_path / "run"
    generator.write_run(run, RunSpec(kernels=30, format="legacy", seed=6))
    names = set(tree(run))
    assert {"traces/stats.csv", "traces/kernelslist"} <= names
    assert not any("ctx_" in name for name in names)
    lines = (run / "traces" / "stats.csv").read_text().splitlines()
    assert lines[0] + "\n" == generator.STATS_HEADER
    assert len(lines) == 31 and all(LEGACY_ROW.match(line) for line in lines[1:])


def test_failed_unfinished_and_crashed_runs(tmp_path):
    generator.write_run(tmp_path / "failed", RunSpec(kernels=5, status="failed"))
    assert json.loads((tmp_path / "failed" / "metadata.json").read_text())["status"] == "failed"
    generator.write_run(tmp_path / "unfinished", RunSpec(kernels=5, unfinished=True))
    assert "metadata.json" not in tree(tmp_path / "unfinished")
    generator.write_run(tmp_path / "crashed", RunSpec(kernels=5, crashed=True))
    (stats,) = stats_files(tmp_path / "crashed")
    text = stats.read_text()
    assert not text.endswith("\n")
    assert len(text.splitlines()[-1].split(", ")) == 10  # launched, never finished: no totals


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    spec = RunSpec(kernels=150, contexts=2, seed=42)
    generator.write_run(tmp_path / "a" / "run", spec)
    generator.write_run(tmp_path / "b" / "run", spec)
    generator.write_run(tmp_path / "c" / "run", RunSpec(kernels=150, contexts=2, seed=43))
    assert tree(tmp_path / "a" / "run") == tree(tmp_path / "b" / "run")
    assert tree(tmp_path / "a" / "run") != tree(tmp_path / "c" / "run")


def test_shipped_samples_are_what_the_generator_makes_and_small(tmp_path):
    generator.write_samples(tmp_path)
    for run_id in generator.SAMPLES:
        assert tree(REPO / "samples" / run_id) == tree(tmp_path / run_id), f"regenerate samples/{run_id}"
    total = sum(p.stat().st_size for p in (REPO / "samples").rglob("*") if p.is_file())
    assert total < 2 * 1024**2


def test_generate_trace_command_writes_a_folder(tmp_path, capsys):
    call_command("generate_trace", "--out", str(tmp_path / "cli-run"), "--kernels", "25", "--contexts", "2")
    assert len(stats_files(tmp_path / "cli-run")) == 2
    assert "cli-run" in capsys.readouterr().out


def test_generate_trace_command_refuses_a_folder_with_files(tmp_path):
    (tmp_path / "old-run").mkdir()
    (tmp_path / "old-run" / "stats_ctx_0x1").write_text("left over\n")
    with pytest.raises(CommandError, match="old-run is not empty: give a new folder"):
        call_command("generate_trace", "--out", str(tmp_path / "old-run"), "--kernels", "5")


# --- The bucket and Cascade's ingestion ---------------------------------------------------------


def keys(s3) -> dict[str, str]:
    listing = s3.list_objects_v2(Bucket=TEST_BUCKET).get("Contents", [])
    return {item["Key"]: item["ETag"] for item in listing}


def test_upload_puts_metadata_last(s3, db, monkeypatch):
    order = []
    monkeypatch.setattr(bucket, "put_object", lambda key, body: order.append(key))
    monkeypatch.setattr(bucket, "upload_file", lambda path, key: order.append(key))
    generator.upload_run("run-1", RunSpec(kernels=20))
    assert order[-1] == "accelsim-traces/run-1/metadata.json"
    assert len(order) == len(set(order)) > 5


@pytest.mark.parametrize(
    "spec, state, kernels",
    [
        (RunSpec(kernels=744, contexts=2, seed=1), TraceState.READY, 744),
        (RunSpec(kernels=120, format="legacy", seed=2), TraceState.READY, 120),
        (RunSpec(kernels=10, status="failed"), TraceState.FAILED, 0),
        (RunSpec(kernels=10, unfinished=True), TraceState.UPLOADING, 0),
    ],
    ids=["v5-two-contexts", "legacy", "failed", "unfinished"],
)
def test_cascade_ingests_generated_runs(s3, db, spec, state, kernels):
    generator.upload_run("generated", spec)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="generated")
    assert (trace.state, trace.kernel_count, Kernel.objects.filter(trace=trace).count()) == (
        state,
        kernels,
        kernels,
    )
    if state == TraceState.READY:
        traced = Kernel.objects.filter(trace=trace, traced=True).count()
        assert 0 < traced <= spec.max_traced
        assert trace.has_step_timeline and trace.has_real_timing


def test_load_samples_uploads_the_samples_once(s3, db, capsys):
    call_command("load_samples")
    first = keys(s3)
    assert f"accelsim-traces/{next(iter(generator.SAMPLES))}/metadata.json" in first
    local = sum(1 for p in (REPO / "samples").rglob("*") if p.is_file())
    assert len(first) == local
    call_command("load_samples")
    assert keys(s3) == first
    assert capsys.readouterr().out.count(" 0 uploaded") == len(generator.SAMPLES)


def test_load_samples_replaces_only_what_differs(s3, db, tmp_path):
    generator.write_run(tmp_path / "samples" / "sample__x", RunSpec(kernels=30))
    call_command("load_samples", "--dir", str(tmp_path / "samples"))
    before = keys(s3)
    timing = "accelsim-traces/sample__x/timing.csv"
    s3.put_object(Bucket=TEST_BUCKET, Key=timing, Body=b"changed")
    result = generator.upload_run_folder(tmp_path / "samples" / "sample__x", "sample__x")
    assert result.uploaded == [timing]
    assert keys(s3) == before


def test_samples_become_ready_and_failed_with_their_metadata(s3, db, settings):
    call_command("load_samples")
    passes.poll_bucket()
    opt = Trace.objects.get(pk="sample__facebook_opt-125m__h100-e2e")
    assert opt.state == TraceState.READY, opt.error
    assert (opt.model, opt.source_gpu, opt.trace_gpu_arch, opt.suggested_sim_config) == (
        "facebook/opt-125m",
        "NVIDIA H100 80GB HBM3",
        "sm_90",
        "SM90_H100",
    )
    assert opt.layers == ["step 0 (prefill)", "step 2 (decode)", "step 10 (decode)", "step 26 (decode)"]
    assert opt.kernel_count == 744 and opt.sample and opt.has_real_timing and opt.has_step_timeline
    assert Kernel.objects.filter(trace=opt).values("ctx").distinct().count() == 2
    failed = Trace.objects.get(pk="sample__failed-run")
    assert failed.state == TraceState.FAILED and "failed" in failed.error


def test_load_samples_follows_the_configured_prefix(s3, db, settings):
    settings.CASCADE_S3_PREFIX = "elsewhere/traces/"
    call_command("load_samples")
    metadata = json.loads(
        s3.get_object(Bucket=TEST_BUCKET, Key="elsewhere/traces/sample__failed-run/metadata.json")[
            "Body"
        ].read()
    )
    assert all(f["key"].startswith("elsewhere/traces/sample__failed-run/") for f in metadata["files"])
    passes.poll_bucket()
    assert Trace.objects.get(pk="sample__facebook_opt-125m__h100-e2e").state == TraceState.READY


def test_local_etag_matches_s3_for_small_and_multipart_files(s3, db, tmp_path):
    small = tmp_path / "small"
    small.write_bytes(b"x" * 1000)
    big = tmp_path / "big"
    big.write_bytes(hashlib.sha256(b"seed").digest() * (generator.MULTIPART_THRESHOLD // 32 + 100))
    for path in (small, big):
        bucket.upload_file(path, f"etag/{path.name}")
        assert keys(s3)[f"etag/{path.name}"] == generator.local_etag(path)
