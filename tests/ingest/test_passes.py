"""Poll passes against moto's S3 server and the database: the upload contract, end to end."""

import io
import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from ingest import bucket, decision, passes
from tests.helpers import PREFIX, STATS_HEADER, TEST_BUCKET, VECADD_CTX, lock_held_elsewhere, stats_row
from traces.models import DeletedTrace, Kernel, KernelContext, Trace, TraceState
from traces.services import TraceBusy, trace_delete, trace_mark_failed

ROOT = Path(__file__).resolve().parents[2]
OK = {"status": "ok", "trace_gpu_arch": "sm_86"}


def kernels_of(trace_id: str) -> list[tuple]:
    return list(
        Kernel.objects.filter(trace_id=trace_id)
        .order_by("ctx", "kernel_id")
        .values_list("ctx", "kernel_id", "name", "total_insts", "traced")
    )


def run_command(*args) -> str:
    out = io.StringIO()
    call_command("ingest_traces", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def spy(monkeypatch):
    """Counts calls to the bucket's listing and reading functions."""
    calls = {"list_run_objects": 0, "read_object": 0, "iter_object_lines": 0, "read_head": 0}

    def counting(name):
        real = getattr(bucket, name)

        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        return wrapper

    for name in calls:
        monkeypatch.setattr(bucket, name, counting(name))
    return calls


# --- Registration and states --------------------------------------------------------------


def test_trace_appears_uploading_with_its_first_file(db, upload):
    upload("run1", {"configs/gpgpusim.config": "x" * 100})
    output = run_command()
    trace = Trace.objects.get(pk="run1")
    assert trace.state == TraceState.UPLOADING
    assert trace.bytes == 100
    assert trace.kernel_count == 0
    assert "run1: new -> uploading, 0 kernels, 100 bytes" in output
    assert output.strip().splitlines()[-1].startswith("pass: 1 traces looked at, 1 changed")


def test_bytes_and_updated_at_follow_new_files(db, upload):
    upload("run1", {"configs/a": "x" * 100})
    passes.poll_bucket()
    first = Trace.objects.get(pk="run1")
    upload("run1", {"configs/b": "y" * 50})
    passes.poll_bucket()
    second = Trace.objects.get(pk="run1")
    assert second.bytes == 150
    assert second.state == TraceState.UPLOADING
    assert second.updated_at > first.updated_at
    assert second.created_at == first.created_at


def test_real_vecadd_fixture_becomes_ready(db, upload, vecadd_files):
    upload("vecadd", vecadd_files, metadata=OK)
    output = run_command()
    trace = Trace.objects.get(pk="vecadd")
    assert trace.state == TraceState.READY, trace.error
    assert "vecadd: new -> ready, 1 kernels" in output
    assert trace.kernel_count == 1
    assert trace.trace_gpu_arch == "sm_86"
    assert trace.suggested_sim_config is None  # its metadata.json names neither a config nor its GPU
    assert trace.metadata == OK
    assert trace.bytes == sum(len(b) for b in vecadd_files.values()) + len(
        b'{"status":"ok","trace_gpu_arch":"sm_86"}'
    )
    kernel = Kernel.objects.get(trace=trace)
    assert (kernel.ctx, kernel.kernel_id, kernel.name) == (VECADD_CTX, 1, "_Z6vecAddPdS_S_i")
    assert kernel.trace_file == f"kernel-1-ctx_{VECADD_CTX}.trace.xz"
    assert (kernel.grid_x, kernel.grid_y, kernel.grid_z, kernel.blocks) == (98, 1, 1, 98)
    assert (kernel.block_x, kernel.block_y, kernel.block_z, kernel.threads) == (1024, 1, 1, 1024)
    assert (kernel.total_insts, kernel.total_reported_insts, kernel.traced) == (50066, 50066, True)


def tracez_run(vecadd_files: dict, *, held: bool) -> dict:
    """The real vecadd run as Accel-Sim 2.0 would name its instruction trace: per-warp zstd
    `.tracez` (../shared/docs/accel-sim-simulator.md: its layout is not known; only its name)."""
    raw, tracez = f"kernel-1-ctx_{VECADD_CTX}.trace.xz", f"kernel-1-ctx_{VECADD_CTX}.tracez"
    files = {
        name: body.replace(raw.encode(), tracez.encode()) if isinstance(body, bytes) else body
        for name, body in vecadd_files.items()
        if name not in (f"traces/{raw}", "traces/kernelslist.g")
    }
    if held:
        files[f"traces/{tracez}"] = b"\x28\xb5\x2f\xfd not downloaded"
    return files


@pytest.mark.parametrize("held", [True, False])
def test_a_tracez_the_kernel_list_names_and_the_run_holds_is_traced(db, upload, vecadd_files, held):
    upload("hopper", tracez_run(vecadd_files, held=held), metadata=OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="hopper")
    assert trace.state == TraceState.READY, trace.error
    kernel = Kernel.objects.get(trace=trace)
    assert kernel.trace_file == f"kernel-1-ctx_{VECADD_CTX}.tracez"
    assert kernel.traced is held  # named and held (decision 0007), whatever the file's layout


def test_ready_trace_through_the_api(db, api, upload, vecadd_files):
    upload("vecadd", vecadd_files, metadata=OK)
    passes.poll_bucket()
    detail = api.get("/api/traces/vecadd").json()
    assert detail["state"] == "ready"
    assert detail["metadata"] == OK
    assert [k["kernel_id"] for k in detail["kernels"]] == [1]


def test_never_downloads_instruction_traces(db, upload, vecadd_files, monkeypatch):
    read_keys = []
    # Streamed on the pass's thread, or read whole ahead on an S3 thread (small files).
    streamed, read_ahead = bucket.iter_object_lines, bucket.read_object_and_etag
    monkeypatch.setattr(
        bucket, "iter_object_lines", lambda key, **kw: read_keys.append(key) or streamed(key, **kw)
    )
    monkeypatch.setattr(
        bucket, "read_object_and_etag", lambda key, limit: read_keys.append(key) or read_ahead(key, limit)
    )
    upload("vecadd", vecadd_files, metadata=OK)
    passes.poll_bucket()
    assert f"{PREFIX}vecadd/traces/stats_ctx_{VECADD_CTX}" in read_keys
    assert not [key for key in read_keys if ".trace" in key]


def test_metadata_fields_are_copied(db, upload, vecadd_files):
    metadata = {
        "status": "ok",
        "model": "facebook/opt-125m",
        "source_gpu": "NVIDIA H100 80GB HBM3",
        "trace_gpu_arch": "sm_90",
        "suggested_sim_config": "SM90_H200",
        "layers": ["step 0 (prefill)", "step 2 (decode)"],
        "custom": {"kept": [1, 2]},
    }
    step = {"name": "step 0 (prefill)", "phase": "prefill", "ctx": VECADD_CTX, "first_kernel_id": 1}
    timeline = json.dumps({"steps": [{**step, "last_kernel_id": 1, "start_ns": 10, "end_ns": 900}]})
    timing = f"ctx,kernel_id,start_ns,end_ns,duration_ns\n{VECADD_CTX},1,100,880,780\n"
    upload(
        "sample__opt", {**vecadd_files, "timeline.json": timeline, "timing.csv": timing}, metadata=metadata
    )
    passes.poll_bucket()
    trace = Trace.objects.get(pk="sample__opt")
    assert trace.state == TraceState.READY
    assert (trace.model, trace.source_gpu, trace.trace_gpu_arch) == metadata_values(metadata)
    assert trace.suggested_sim_config == "SM90_H200"
    assert trace.layers == ["step 0 (prefill)", "step 2 (decode)"]
    assert trace.metadata == metadata
    assert (trace.has_step_timeline, trace.has_real_timing) == (True, True)
    assert trace.sample is False  # uploaded, whatever its name: only load_samples marks samples
    assert list(Kernel.objects.values_list("step", "duration_ns")) == [(0, 780)]


def test_timing_and_timeline_that_cannot_be_read_leave_the_trace_ready_saying_why(db, upload, vecadd_files):
    upload("run", {**vecadd_files, "timeline.json": "[]", "timing.csv": "k,us\n"}, metadata=OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.kernel_count) == (TraceState.READY, 1)
    assert (trace.has_step_timeline, trace.has_real_timing) == (False, False)
    assert trace.timing_error == (
        "timeline.json: expected an object with a \"steps\" list; timing.csv: unknown header 'k,us'; "
        "expected ctx,kernel_id,start_ns,end_ns,duration_ns or the columns of "
        "`nsys stats --report cuda_gpu_trace --format csv`"
    )
    assert list(Kernel.objects.values_list("step", "duration_ns")) == [(None, None)]


def metadata_values(metadata):
    return metadata["model"], metadata["source_gpu"], metadata["trace_gpu_arch"]


def test_flags_are_false_without_timeline_timing_or_sample_prefix(db, upload, vecadd_files):
    upload("plain", vecadd_files, metadata=OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="plain")
    assert (trace.has_step_timeline, trace.has_real_timing, trace.sample) == (False, False, False)
    assert (trace.model, trace.source_gpu, trace.layers) == (None, None, [])


@pytest.mark.parametrize(
    ("arch", "gpu", "config"),
    [
        # The config of the GPU the run was traced on, where upstream Accel-Sim has one ...
        ("sm_80", "NVIDIA A100-SXM4-80GB", "SM80_A100"),
        ("sm_90", "NVIDIA H100 80GB HBM3", "SM90_H100"),
        ("sm_75", "NVIDIA GeForce RTX 2060", "SM75_RTX2060"),
        # ... else none, whatever the arch.
        ("sm_86", None, None),
        ("sm_80", "NVIDIA A30", None),
    ],
)
def test_config_derived_from_the_gpu(db, upload, vecadd_files, arch, gpu, config):
    upload("run", vecadd_files, metadata={"status": "ok", "trace_gpu_arch": arch, "source_gpu": gpu})
    passes.poll_bucket()
    assert Trace.objects.values_list("trace_gpu_arch", "suggested_sim_config").get() == (arch, config)


@pytest.mark.parametrize(
    ("config", "arch"), [("SM90_H100", "sm_90"), ("SM7_TITANV", "sm_70"), ("SM86_RTX3070", "sm_86")]
)
def test_architecture_derived_from_config(db, upload, vecadd_files, config, arch):
    upload("run", vecadd_files, metadata={"status": "ok", "suggested_sim_config": config})
    passes.poll_bucket()
    assert Trace.objects.values_list("trace_gpu_arch", "suggested_sim_config").get() == (arch, config)


def test_profiler_failure(db, upload, vecadd_files):
    upload("demo-failed", vecadd_files, metadata={"status": "failed", "trace_gpu_arch": "sm_86"})
    output = run_command()
    trace = Trace.objects.get(pk="demo-failed")
    assert trace.state == TraceState.FAILED
    assert trace.error == "profiler reported status 'failed' in metadata.json"
    assert trace.kernel_count == 0
    assert not Kernel.objects.exists()
    assert trace.trace_gpu_arch == "sm_86"
    assert trace.suggested_sim_config is None
    assert (
        "demo-failed: new -> failed, 0 kernels (profiler reported status 'failed' in metadata.json)" in output
    )


def test_waits_for_every_listed_file(db, upload, vecadd_files, s3):
    stats_key = f"traces/stats_ctx_{VECADD_CTX}"
    listed = [{"key": f"{PREFIX}run/{name}", "bytes": len(body)} for name, body in vecadd_files.items()]
    partial = {name: body for name, body in vecadd_files.items() if name != stats_key}
    upload("run", partial, metadata={**OK, "files": listed})
    passes.poll_bucket()
    assert Trace.objects.get(pk="run").state == TraceState.UPLOADING
    # A file of the wrong size does not count either.
    s3.put_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}run/{stats_key}", Body=b"partial")
    passes.poll_bucket()
    assert Trace.objects.get(pk="run").state == TraceState.UPLOADING
    s3.put_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}run/{stats_key}", Body=vecadd_files[stats_key])
    passes.poll_bucket()
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.kernel_count) == (TraceState.READY, 1)


def test_listed_files_that_never_arrive_fail_after_the_timeout(db, upload, vecadd_files, settings):
    listed = [{"key": f"{PREFIX}run/traces/missing-{n}", "bytes": 10} for n in range(12)]
    upload("run", vecadd_files, metadata={**OK, "files": listed})
    passes.poll_bucket()
    assert Trace.objects.get(pk="run").state == TraceState.UPLOADING
    Trace.objects.update(
        files_changed_at=timezone.now() - timedelta(seconds=settings.CASCADE_UPLOAD_TIMEOUT - 60)
    )
    passes.poll_bucket()
    assert Trace.objects.get(pk="run").state == TraceState.UPLOADING
    Trace.objects.update(
        files_changed_at=timezone.now() - timedelta(seconds=settings.CASCADE_UPLOAD_TIMEOUT + 1)
    )
    passes.poll_bucket()
    trace = Trace.objects.get(pk="run")
    assert trace.state == TraceState.FAILED
    assert trace.error.startswith("upload incomplete: 12 file(s) listed in metadata.json did not arrive")
    assert f"{PREFIX}run/traces/missing-0" in trace.error and "and 2 more" in trace.error


def test_upload_without_metadata_stays_uploading(db, upload, vecadd_files):
    upload("run", vecadd_files)
    passes.poll_bucket()
    passes.poll_bucket()
    assert Trace.objects.get(pk="run").state == TraceState.UPLOADING


# --- Tracer formats -----------------------------------------------------------------------


def test_several_contexts_later_ones_without_header(db, upload):
    files = {
        "traces/stats_ctx_0xaaaa": STATS_HEADER + stats_row(1, "0xaaaa") + stats_row(2, "0xaaaa"),
        "traces/stats_ctx_0xbbbb": stats_row(1, "0xbbbb", insts=7)
        + stats_row(2, "0xbbbb")
        + stats_row(3, "0xbbbb"),
        "traces/kernelslist_ctx_0xaaaa": "MemcpyHtoD,0x1,8\nkernel-2-ctx_0xaaaa.trace.xz\n",
        "traces/kernelslist_ctx_0xbbbb": "kernel-1-ctx_0xbbbb.trace.xz\nkernel-3-ctx_0xbbbb.trace.xz\n",
        # Traced: named by a kernelslist, and the run holds the file.
        **{f"traces/kernel-{n}.trace.xz": b"x" for n in ("2-ctx_0xaaaa", "1-ctx_0xbbbb", "3-ctx_0xbbbb")},
    }
    upload("multi", files, metadata=OK)
    passes.poll_bucket()
    assert Trace.objects.get(pk="multi").kernel_count == 5
    assert [(ctx, kid, traced) for ctx, kid, _, _, traced in kernels_of("multi")] == [
        ("0xaaaa", 1, False),
        ("0xaaaa", 2, True),
        ("0xbbbb", 1, True),
        ("0xbbbb", 2, False),
        ("0xbbbb", 3, True),
    ]


def test_header_extra_columns_apply_to_every_context(db, upload):
    header = STATS_HEADER.rstrip("\n") + ", latency\n"
    row = "kernel-1-ctx_{c}.trace.xz, void f<1, 2>(), 1, 1, 1, 1, 32, 1, 1, 32, 5,6, 777\n"
    files = {
        "traces/stats_ctx_0xbbbb": row.format(c="0xbbbb"),
        "traces/stats_ctx_0xaaaa": header + row.format(c="0xaaaa"),
    }
    upload("fork", files, metadata=OK)
    passes.poll_bucket()
    assert Trace.objects.get(pk="fork").state == TraceState.READY
    assert [(ctx, name, insts) for ctx, _, name, insts, _ in kernels_of("fork")] == [
        ("0xaaaa", "void f<1, 2>()", 5),
        ("0xbbbb", "void f<1, 2>()", 5),
    ]


@pytest.mark.parametrize("with_header", ["0xaaaa", "0xbbbb"])
def test_header_extra_columns_apply_to_files_streamed_from_s3(db, upload, monkeypatch, with_header):
    """Nothing read ahead: the first file's header comes from the stream its parse goes on with,
    another file's from a ranged GET."""
    monkeypatch.setattr(decision, "PREFETCH_RUN_BYTES", 0)
    header = STATS_HEADER.rstrip("\n") + ", latency\n"
    row = "kernel-{k}-ctx_{c}.trace.xz, void f<1, 2>(), 1, 1, 1, 1, 32, 1, 1, 32, 5,6, 777\n"
    files = {
        f"traces/stats_ctx_{c}": (header if c == with_header else "")
        + row.format(k=1, c=c)
        + row.format(k=2, c=c)
        for c in ("0xaaaa", "0xbbbb")
    }
    upload("streamed", files, metadata=OK)
    passes.poll_bucket()
    assert Trace.objects.get(pk="streamed").state == TraceState.READY
    assert [(ctx, kernel_id, name, insts) for ctx, kernel_id, name, insts, _ in kernels_of("streamed")] == [
        ("0xaaaa", 1, "void f<1, 2>()", 5),
        ("0xaaaa", 2, "void f<1, 2>()", 5),
        ("0xbbbb", 1, "void f<1, 2>()", 5),
        ("0xbbbb", 2, "void f<1, 2>()", 5),
    ]


def test_legacy_stats_csv(db, upload):
    files = {
        "traces/stats.csv": STATS_HEADER + stats_row(1, None) + stats_row(2, None),
        "traces/kernelslist": "MemcpyHtoD,0x1,8\nkernel-1.trace\n",
        "traces/kernel-1.trace": b"x",
    }
    upload("legacy", files, metadata=OK)
    passes.poll_bucket()
    assert [(ctx, kid, traced) for ctx, kid, _, _, traced in kernels_of("legacy")] == [
        (None, 1, True),
        (None, 2, False),
    ]


def test_demangled_names_negative_values_crlf_and_unfinished_last_row(db, upload):
    stats = (
        STATS_HEADER
        + "kernel-1-ctx_0xaaaa.trace.xz, void at::native::f<float, 4>(int, float*), 98, 1, 1, 98, 1024, 1, 1, 1024, -2,-2\n"
        + "kernel-2-ctx_0xaaaa.trace.xz, _Z1gv, 4, 1, 1, 4, 64, 1, 1, 64, "  # killed: no totals
    ).replace("\n", "\r\n")
    upload("tricky", {"traces/stats_ctx_0xaaaa": stats}, metadata=OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="tricky")
    assert (trace.state, trace.kernel_count) == (TraceState.READY, 2)
    assert [(name, insts) for _, _, name, insts, _ in kernels_of("tricky")] == [
        ("void at::native::f<float, 4>(int, float*)", 2**32 - 2),
        ("_Z1gv", None),
    ]


def test_listings_longer_than_a_page_are_read_to_the_end(db, upload, settings):
    """S3 lists at most 1,000 keys a request (CASCADE_S3_PAGE_SIZE): both the bucket's run folders
    and a run's objects are followed from page to page. Pages of 2 here, as 1,000 would need 1,001
    uploads to be tested."""
    settings.CASCADE_S3_PAGE_SIZE = 2
    files = {f"traces/kernel-{n}-ctx_0xaaaa.trace.xz": b"x" for n in range(1, 6)}
    files["traces/stats_ctx_0xaaaa"] = STATS_HEADER + "".join(stats_row(n, "0xaaaa") for n in range(1, 6))
    runs = ["big-1", "big-2", "big-3", "big-4", "big-5"]
    for run_id in runs:
        upload(run_id, files, metadata=OK)
    requests = []
    bucket.client().meta.events.register("before-call.s3.ListObjectsV2", lambda **_: requests.append(1))
    assert list(bucket.list_run_ids()) == runs
    assert len(bucket.list_run_objects("big-1")) == 7
    assert len(requests) == 3 + 4, "pages of 2 keys: 5 folders in 3 requests, 7 objects in 4"
    passes.poll_bucket()
    assert sorted(Trace.objects.values_list("id", flat=True)) == runs
    trace = Trace.objects.get(pk="big-5")
    assert (trace.state, trace.kernel_count) == (TraceState.READY, 5)
    assert len(trace.files) == 7
    assert trace.bytes == sum(
        len(b) if isinstance(b, bytes) else len(b.encode()) for b in files.values()
    ) + len(b'{"status":"ok","trace_gpu_arch":"sm_86"}')


# --- Bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "metadata", "error"),
    [
        ({}, b"{not json", "metadata.json is not valid JSON"),
        ({}, b'["status", "ok"]', "metadata.json must be a JSON object, not list"),
        ({}, b'{"status": "ok", "layers": "step 0"}', "metadata.json: 'layers' must be a list of strings"),
        ({}, b'{"status": "ok", "files": "all"}', 'metadata.json: "files" must be a list'),
        ({}, b'{"trace_gpu_arch": "sm_90"}', 'metadata.json has no "status"'),
        (
            {"traces/stats_ctx_0xaaaa": STATS_HEADER + "kernel-1-ctx_0xaaaa.trace.xz, _Z1f, 1, 1\n"},
            None,
            "traces/stats_ctx_0xaaaa: line 2: expected 12 comma-separated fields",
        ),
        (
            {"traces/stats_ctx_0xaaaa": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"},
            None,
            "traces/stats_ctx_0xaaaa: line 1: binary data",
        ),
        (
            {"traces/stats_ctx_0xaaaa": STATS_HEADER, "traces/kernelslist_ctx_0xaaaa": b"\xff\xfe\x00"},
            None,
            "traces/kernelslist_ctx_0xaaaa: line 1: binary data",
        ),
        ({"configs/gpgpusim.config": "x"}, None, "no stats file in the upload"),
        ({"traces/stats_ctx_0x" + "a" * 70: STATS_HEADER}, None, "traces/stats_ctx_0xaaaa"),
        (
            {"traces/stats_ctx_0xaaaa": STATS_HEADER + stats_row(10**20, "0xaaaa")},
            None,
            "traces/stats_ctx_0xaaaa: line 2: kernel id 100000000000000000000 in "
            "'kernel-100000000000000000000-ctx_0xaaaa.trace.xz' is too large",
        ),
        (
            {"traces/stats_ctx_0xaaaa": STATS_HEADER + stats_row(1, "0xaaaa").replace(" 98,", " 9²,", 1)},
            None,
            "traces/stats_ctx_0xaaaa: line 2: expected 12 comma-separated fields",
        ),
        ({}, b'{"status": "ok", "x": NaN}', "metadata.json is not valid JSON: NaN is not a JSON value"),
    ],
    ids=[
        "invalid-json",
        "not-an-object",
        "bad-layers",
        "bad-files",
        "no-status",
        "malformed-line",
        "binary-stats",
        "binary-kernelslist",
        "no-stats",
        "long-ctx",
        "huge-kernel-id",
        "unicode-digit",
        "nan",
    ],
)
def test_bad_input_fails_that_trace_only(db, upload, vecadd_files, files, metadata, error):
    upload("good", vecadd_files, metadata=OK)
    upload("bad", files or vecadd_files, metadata=metadata if metadata is not None else OK)
    passes.poll_bucket()
    bad = Trace.objects.get(pk="bad")
    assert bad.state == TraceState.FAILED
    assert bad.error.startswith(error), bad.error
    assert bad.kernel_count == 0
    assert not Kernel.objects.filter(trace=bad).exists()
    assert Trace.objects.get(pk="good").state == TraceState.READY


def test_file_far_too_large_for_a_stats_file(db, upload, vecadd_files, settings, spy):
    settings.CASCADE_MAX_STATS_BYTES = 100
    upload("huge", vecadd_files, metadata=OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="huge")
    assert trace.state == TraceState.FAILED
    assert trace.error == (
        f"traces/stats_ctx_{VECADD_CTX}: 254 bytes is far too large for a tracer stats file (CASCADE_MAX_STATS_BYTES is 100)"
    )
    assert spy["iter_object_lines"] == 0


def recheck_is_due(trace_id: str) -> None:
    """As if the failed trace's wait before its next look had passed."""
    Trace.objects.filter(pk=trace_id).update(recheck_after=timezone.now() - timedelta(seconds=1))


def test_failed_trace_is_retried_only_when_its_files_change(db, upload, vecadd_files, spy):
    broken = {**vecadd_files, f"traces/stats_ctx_{VECADD_CTX}": STATS_HEADER + "garbage\n"}
    upload("run", broken, metadata=OK)
    passes.poll_bucket()
    assert Trace.objects.get(pk="run").state == TraceState.FAILED
    reads = spy["iter_object_lines"] + spy["read_object"]
    recheck_is_due("run")
    assert passes.poll_bucket().changes == []
    assert spy["iter_object_lines"] + spy["read_object"] == reads
    upload("run", vecadd_files, metadata=OK)
    recheck_is_due("run")
    result = passes.poll_bucket()
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.error, trace.kernel_count) == (TraceState.READY, None, 1)
    assert [str(change) for change in result.changes] == ["run: failed -> ready, 1 kernels"]


def test_a_ready_trace_that_fails_on_reparse_loses_its_kernels(db, upload, vecadd_files):
    upload("run", vecadd_files, metadata=OK)
    passes.poll_bucket()
    upload("run", {}, metadata={"status": "crashed"})
    passes.poll_bucket(trace_id="run")
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.kernel_count) == (TraceState.FAILED, 0)
    assert not Kernel.objects.exists()


# --- Idempotency and cost -----------------------------------------------------------------


def test_a_pass_with_nothing_new_writes_and_downloads_nothing(
    db, upload, vecadd_files, spy, django_assert_max_num_queries
):
    upload("ready", vecadd_files, metadata=OK)
    upload("waiting", {"configs/a": "x"})
    upload("failed", vecadd_files, metadata={"status": "failed"})
    passes.poll_bucket()
    before = dict(Trace.objects.values_list("id", "updated_at"))
    downloads = spy["read_object"] + spy["iter_object_lines"] + spy["read_head"]
    listings = spy["list_run_objects"]
    result = passes.poll_bucket()
    assert result.changes == []
    assert dict(Trace.objects.values_list("id", "updated_at")) == before
    assert spy["read_object"] + spy["iter_object_lines"] + spy["read_head"] == downloads
    # The ready trace is not listed again, nor the failed one before its recheck; the upload is.
    assert spy["list_run_objects"] - listings == 1


def test_reparse_replaces_kernels_never_appends(db, upload, vecadd_files):
    upload("run", vecadd_files, metadata=OK)
    passes.poll_bucket()
    # A launch's primary key is the launch itself; its context row is written anew by each parse.
    first_contexts = list(KernelContext.objects.values_list("pk", flat=True))
    output = run_command("--reparse")
    assert "run: ready -> ready, 1 kernels" in output
    assert Kernel.objects.count() == 1
    assert list(KernelContext.objects.values_list("pk", flat=True)) != first_contexts


def test_trace_option_limits_the_pass_to_one_trace(db, upload, vecadd_files):
    upload("one", vecadd_files, metadata=OK)
    upload("two", vecadd_files, metadata=OK)
    output = run_command("--trace", "one")
    assert "one: new -> ready, 1 kernels" in output
    assert list(Trace.objects.values_list("id", flat=True)) == ["one"]
    assert "one: nothing new" in run_command("--trace", "one")


def test_trace_option_with_unknown_trace_is_an_error(db, s3):
    with pytest.raises(CommandError, match=f"no objects under {PREFIX}nope/ in bucket"):
        run_command("--trace", "nope")


def test_interval_without_watch_is_an_error(db, s3):
    with pytest.raises(CommandError, match="--interval goes with --watch"):
        run_command("--interval", "3")


def test_missing_bucket_setting_is_explained(db, settings):
    settings.STORAGES = {
        **settings.STORAGES,
        "traces": {**settings.STORAGES["traces"], "OPTIONS": {"bucket_name": ""}},
    }
    with pytest.raises(Exception, match="CASCADE_S3_BUCKET is not set"):
        run_command()


# --- Concurrency and crashes (separate processes, PostgreSQL) --------------------------------


def big_stats(count: int, ctx: str = "0xaaaa") -> str:
    return STATS_HEADER + "".join(
        f"kernel-{n}-ctx_{ctx}.trace.xz, _ZN2at6native29vectorized_elementwise_kernelILi4EEEvi, "
        f"{n % 100 + 1}, 1, 1, {n % 100 + 1}, 256, 1, 1, 256, {n * 7},{n * 7}\n"
        for n in range(1, count + 1)
    )


def start_pass(child_env, *args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "ingest_traces", *args],
        cwd=ROOT,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_two_concurrent_passes_parse_each_trace_once(transactional_db, upload, child_env):
    for n in range(4):
        upload(f"run{n}", {"traces/stats_ctx_0xaaaa": big_stats(20_000)}, metadata=OK)
    first, second = start_pass(child_env), start_pass(child_env)
    outputs = [process.communicate(timeout=240) for process in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    readied = [line for out, _ in outputs for line in out.splitlines() if "-> ready" in line]
    assert sorted(line.split(":")[0] for line in readied) == ["run0", "run1", "run2", "run3"]
    for n in range(4):
        trace = Trace.objects.get(pk=f"run{n}")
        assert (trace.state, trace.kernel_count) == (TraceState.READY, 20_000)
        assert Kernel.objects.filter(trace=trace).count() == 20_000


@pytest.mark.slow
def test_a_pass_killed_mid_parse_is_finished_by_the_next(transactional_db, upload, child_env):
    count = 10_000
    upload("killed", {"traces/stats_ctx_0xaaaa": big_stats(count)}, metadata=OK)
    # The pass reports progress after every kernel, about 50 bytes a line, and the test reads only
    # the first line: the pass fills the pipe (64 KiB; it would write 500 KB) and waits there,
    # mid-transaction, however slow or loaded the machine, until it is killed.
    process = start_pass({**child_env, "CASCADE_PROGRESS_EVERY": "1"})
    for line in process.stderr:
        if "kernels read" in line:
            os.kill(process.pid, signal.SIGKILL)
            break
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    trace = Trace.objects.get(pk="killed")
    assert trace.state == TraceState.PARSING
    assert not Kernel.objects.filter(trace=trace).exists()
    rerun = start_pass(child_env)
    out, err = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, err
    assert f"killed: parsing -> ready, {count} kernels" in out
    trace.refresh_from_db()
    assert (trace.state, trace.kernel_count) == (TraceState.READY, count)
    assert Kernel.objects.filter(trace=trace).count() == count


def test_a_trace_marked_failed_stays_failed_until_its_files_change(db, upload, vecadd_files):
    upload("run", vecadd_files, metadata=OK)
    passes.poll_bucket()
    trace_mark_failed("run", "marked failed by an operator")
    recheck_is_due("run")
    assert passes.poll_bucket().changes == []
    assert Trace.objects.get(pk="run").state == TraceState.FAILED
    upload("run", {"timing.csv": "kernel,us\n"})
    recheck_is_due("run")
    passes.poll_bucket()
    assert Trace.objects.get(pk="run").state == TraceState.READY


def test_a_trace_failed_for_retry_is_looked_at_by_the_next_poll(db, upload, vecadd_files):
    upload("run", vecadd_files, metadata=OK)
    passes.poll_bucket()
    trace_mark_failed("run", "S3 unreachable after 6 tries", retry=True)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.error, trace.kernel_count) == (TraceState.READY, None, 1)


def test_reparse_leaves_uploads_without_metadata_uploading(db, upload, vecadd_files):
    upload("ready", vecadd_files, metadata=OK)
    upload("waiting", vecadd_files)
    passes.poll_bucket()
    output = run_command("--reparse")
    assert "ready: ready -> ready, 1 kernels" in output
    assert Trace.objects.get(pk="waiting").state == TraceState.UPLOADING
    assert "waiting: nothing new" in run_command("--trace", "waiting", "--reparse")


def test_an_empty_stats_file_of_a_context_without_launches(db, upload):
    files = {
        "traces/stats_ctx_0x1111": "",
        "traces/stats_ctx_0x2222": STATS_HEADER + stats_row(1, "0x2222"),
    }
    upload("empty-ctx", files, metadata=OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="empty-ctx")
    assert (trace.state, trace.kernel_count) == (TraceState.READY, 1)


def test_metadata_is_kept_as_written(db, upload, vecadd_files, api):
    raw = b'{"status":"ok","zeta":1,"big":18446744073709551616,"alpha":[1.5,"\xc3\xa9"]}'
    upload("run", vecadd_files, metadata=raw)
    passes.poll_bucket()
    assert api.get("/api/traces/run").content.count(b'"metadata":' + raw) == 1


def test_one_trace_that_cannot_be_ingested_does_not_stop_the_others(db, upload, vecadd_files, monkeypatch):
    real = passes.ingest_trace

    def flaky(trace_id, **kwargs):
        if trace_id == "a-broken":
            raise ConnectionError("S3 went away")
        return real(trace_id, **kwargs)

    monkeypatch.setattr(passes, "ingest_trace", flaky)
    for run_id in ("a-broken", "b-good", "c-good"):
        upload(run_id, vecadd_files, metadata=OK)
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="some traces could not be ingested"):
        call_command("ingest_traces", stdout=out, stderr=err)
    assert "error: a-broken: ConnectionError: S3 went away" in err.getvalue()
    assert "1 could not be ingested (retried next pass)" in out.getvalue()
    states = dict(Trace.objects.values_list("id", "state"))
    assert states == {"a-broken": "uploading", "b-good": "ready", "c-good": "ready"}


def test_mark_failed_is_refused_while_a_pass_holds_the_trace(db, upload, vecadd_files):
    upload("run", vecadd_files, metadata=OK)
    passes.poll_bucket()
    with lock_held_elsewhere("run"):
        with pytest.raises(TraceBusy, match="trace run is being ingested right now"):
            trace_mark_failed("run", "marked failed by an operator")
    assert Trace.objects.get(pk="run").state == TraceState.READY
    trace_mark_failed("run", "marked failed by an operator")
    assert Trace.objects.get(pk="run").state == TraceState.FAILED


# --- Failed traces: looked at less and less often ---------------------------


def test_failed_runs_are_listed_again_with_a_doubling_wait_not_on_every_pass(db, upload, vecadd_files, spy):
    for run in ("a", "b", "c"):
        upload(run, vecadd_files, metadata={"status": "failed"})
    passes.poll_bucket()
    listings = spy["list_run_objects"]

    for _ in range(3):
        assert passes.poll_bucket().listed == 0
    assert spy["list_run_objects"] == listings, "1,000 failed runs must not cost 1,000 listings a pass"

    waits = []
    for _ in range(3):
        recheck_is_due("a")
        passes.poll_bucket()
        waits.append(Trace.objects.get(pk="a").recheck_seconds)
    assert waits == [120, 240, 480]
    assert spy["list_run_objects"] == listings + 3

    upload("a", {"timing.csv": "x"})
    recheck_is_due("a")
    passes.poll_bucket()
    assert Trace.objects.get(pk="a").recheck_seconds == 60, "a change of its files starts the wait over"


def test_a_failed_runs_recheck_changes_nothing_the_api_shows(db, upload, vecadd_files):
    """Its `updated_at` (and so its ETag) stays: clients holding the failed trace keep their copy."""
    upload("a", vecadd_files, metadata={"status": "failed"})
    passes.poll_bucket()
    shown = Trace.objects.get(pk="a").updated_at
    for _ in range(3):
        recheck_is_due("a")
        passes.poll_bucket()
    trace = Trace.objects.get(pk="a")
    assert (trace.recheck_seconds, trace.updated_at) == (480, shown)


def test_the_wait_for_a_failed_run_is_at_most_a_day(db, upload, vecadd_files):
    upload("a", vecadd_files, metadata={"status": "failed"})
    passes.poll_bucket()
    for _ in range(12):
        recheck_is_due("a")
        passes.poll_bucket()
    assert Trace.objects.get(pk="a").recheck_seconds == 24 * 3600


def test_a_ready_trace_whose_metadata_turns_invalid_keeps_nothing_it_said(db, upload, vecadd_files):
    """It was saved as failed with its previous model and metadata."""
    upload("run", vecadd_files, metadata={**OK, "model": "facebook/opt-125m", "layers": ["step 0"]})
    passes.poll_bucket()
    upload("run", {}, metadata=b'{"status": "ok", "model": ')
    passes.poll_bucket(trace_id="run")
    trace = Trace.objects.get(pk="run")
    assert trace.state == TraceState.FAILED
    assert trace.error.startswith("metadata.json is not valid JSON")
    assert (trace.model, trace.layers, trace.trace_gpu_arch, trace.metadata_json) == (None, [], None, None)


# --- Deleting a trace ------------------------------------------------


def test_a_deleted_trace_stays_deleted_until_its_files_change(db, upload, vecadd_files, spy):
    upload("run", vecadd_files, metadata=OK)
    passes.poll_bucket()
    trace_delete("run", deleted_by="operator")
    assert not Trace.objects.exists() and not Kernel.objects.exists()

    assert passes.poll_bucket().changes == []
    DeletedTrace.objects.update(recheck_after=timezone.now() - timedelta(seconds=1))
    assert passes.poll_bucket().changes == []
    assert not Trace.objects.exists(), "its folder is still in the bucket, unchanged"

    upload("run", {"timing.csv": "x"})
    DeletedTrace.objects.update(recheck_after=timezone.now() - timedelta(seconds=1))
    result = passes.poll_bucket()
    assert [str(change) for change in result.changes] == ["run: new -> ready, 1 kernels"]
    assert not DeletedTrace.objects.exists()


def test_a_deleted_run_folder_is_not_listed_on_every_pass(db, upload, vecadd_files, spy):
    upload("run", vecadd_files, metadata=OK)
    passes.poll_bucket()
    trace_delete("run")
    listings = spy["list_run_objects"]
    for _ in range(3):
        passes.poll_bucket()
    assert spy["list_run_objects"] == listings


def test_asking_for_a_deleted_trace_by_name_brings_it_back(db, upload, vecadd_files):
    upload("run", vecadd_files, metadata=OK)
    passes.poll_bucket()
    trace_delete("run")
    output = run_command("--trace", "run")
    assert "run: new -> ready, 1 kernels" in output


def test_a_trace_being_ingested_is_not_deleted_under_the_pass(db, upload, vecadd_files):
    upload("run", vecadd_files, metadata=OK)
    passes.poll_bucket()
    with lock_held_elsewhere("run"), pytest.raises(TraceBusy, match="being ingested right now"):
        trace_delete("run")
    assert Trace.objects.filter(pk="run").exists()
    assert Kernel.objects.filter(trace_id="run").count() == 1


NSYS_HEADER = (
    "Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),"
    "Bytes (MB),Throughput (MBps),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name\n"
)


@pytest.mark.parametrize(
    ("grid", "duration", "error"),
    [
        ("98,1,1", 4321, None),
        (
            "97,1,1",
            None,
            f"timing.csv (nsys) does not match the stats at context {VECADD_CTX} kernel 1: grid (98, 1, 1) "
            "block (1024, 1, 1) in the stats, grid (97, 1, 1) block (1024, 1, 1) at CorrId 112",
        ),
    ],
    ids=["matches", "mismatch"],
)
def test_nsight_systems_timing_is_matched_to_the_launches(db, upload, vecadd_files, grid, duration, error):
    nsys = (
        NSYS_HEADER
        + f"5000,4321,112,{grid},1024,1,1,16,0.000,0.000,,,,,NVIDIA H100 (0),1,,7,_Z6vecAddPdS_S_i\n"
    )
    upload("run", {**vecadd_files, "timing.csv": nsys}, metadata=OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.has_real_timing, trace.timing_error) == (
        TraceState.READY,
        error is None,
        error,
    )
    assert list(Kernel.objects.values_list("duration_ns", flat=True)) == [duration]


def test_an_operators_reparse_is_in_the_audit_log_and_a_plain_pass_is_not(db, upload, vecadd_files):
    from traces.models import AuditEntry

    upload("vecadd", vecadd_files)
    run_command()
    assert not AuditEntry.objects.exists(), "the poller's routine pass is no operator's action"
    run_command("--trace", "vecadd", "--reparse")
    run_command("--reparse-outdated")
    first, second = AuditEntry.objects.order_by("id")
    assert (first.action, first.trace_id, first.source) == ("reingest", "vecadd", "command")
    assert first.detail == {"command": "ingest_traces", "reparse": True, "reparse_outdated": False}
    assert (second.trace_id, second.detail["reparse_outdated"]) == ("", True)
