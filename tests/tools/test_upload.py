"""Run folders reach the bucket as the profiling harness uploads them; `load_samples` uploads the samples."""

import hashlib
import json
from pathlib import Path

from django.core.management import call_command

from ingest import bucket, passes
from tests.helpers import TEST_BUCKET
from tools.generator import RunSpec, write_run
from tools.samples import SAMPLES
from tools.upload import MULTIPART_THRESHOLD, local_etag, upload_run_folder
from traces.models import Kernel, Trace, TraceState

REPO = Path(__file__).resolve().parents[2]


def keys(s3) -> dict[str, str]:
    listing = s3.list_objects_v2(Bucket=TEST_BUCKET).get("Contents", [])
    return {item["Key"]: item["ETag"] for item in listing}


def test_load_samples_uploads_the_samples_once(s3, db, capsys):
    call_command("load_samples")
    first = keys(s3)
    assert f"accelsim-traces/{next(iter(SAMPLES))}/metadata.json" in first
    local = sum(1 for p in (REPO / "samples").rglob("*") if p.is_file())
    assert len(first) == local
    call_command("load_samples")
    assert keys(s3) == first
    assert capsys.readouterr().out.count(" 0 uploaded") == len(SAMPLES)


def test_load_samples_replaces_only_what_differs(s3, db, tmp_path):
    write_run(tmp_path / "samples" / "sample__x", RunSpec(kernels=30))
    call_command("load_samples", "--dir", str(tmp_path / "samples"))
    before = keys(s3)
    timing = "accelsim-traces/sample__x/timing.csv"
    s3.put_object(Bucket=TEST_BUCKET, Key=timing, Body=b"changed")
    result = upload_run_folder(tmp_path / "samples" / "sample__x", "sample__x")
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
    assert opt.kernel_count == 700 and opt.sample and opt.has_real_timing and opt.has_step_timeline
    assert Kernel.objects.filter(trace=opt).values("ctx").distinct().count() == 2
    # The three decode steps ran as CUDA graphs: their model forward left launch halves only.
    assert Kernel.objects.filter(trace=opt, total_insts__isnull=True).count() == 3 * 173
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
    opt = Trace.objects.get(pk="sample__facebook_opt-125m__h100-e2e")
    assert (opt.state, opt.kernel_count) == (TraceState.READY, 700), opt.error


def test_local_etag_matches_s3_for_small_and_multipart_files(s3, db, tmp_path):
    small = tmp_path / "small"
    small.write_bytes(b"x" * 1000)
    big = tmp_path / "big"
    big.write_bytes(hashlib.sha256(b"seed").digest() * (MULTIPART_THRESHOLD // 32 + 100))
    for path in (small, big):
        bucket.upload_file(path, f"etag/{path.name}")
        assert keys(s3)[f"etag/{path.name}"] == local_etag(path)
