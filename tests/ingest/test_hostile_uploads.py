"""Uploads that try to hurt other users: each fails alone, with a message that names the bound.

One run's metadata.json made every list response 25 MB; a deeply
nested one left its trace `uploading` with a traceback on every pass; duplicate keys and
`1e999` were read silently.
"""

import importlib
import io

import orjson
import pytest
from django.apps import apps
from django.core.management import call_command

from ingest import passes
from tests.helpers import STATS_HEADER, stats_row, store_kernels
from traces.models import Kernel, Trace, TraceState

OK = {"status": "ok", "trace_gpu_arch": "sm_90"}


@pytest.mark.parametrize(
    ("metadata", "error"),
    [
        (
            b'{"status": "ok", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "metadata.json is nested more than",
        ),
        (
            b'{"status": "failed", "status": "ok"}',
            "metadata.json is not valid JSON: the key 'status' is given more",
        ),
        (
            b'{"status": "ok", "peak": 1e999}',
            "metadata.json is not valid JSON: the number 1e999 is too large",
        ),
        (
            b'{"status": "ok", "seed": ' + b"7" * 5000 + b"}",
            "metadata.json is not valid JSON: an integer of 5000 digits",
        ),
        (
            orjson.dumps({"status": "ok", "layers": [f"step {n}" for n in range(1_100_000)]}),
            "metadata.json: 15388916 bytes, more than the 8388608 expected (CASCADE_METADATA_MAX_BYTES)",
        ),
        (
            orjson.dumps({"status": "ok", "layers": [f"step {n}" for n in range(5000)]}),
            "metadata.json: 'layers' has 5000 entries, more than CASCADE_METADATA_MAX_LAYERS (1000)",
        ),
    ],
    ids=["100k-deep", "duplicate-status", "1e999", "5000-digits", "26MB-of-layers", "5000-layers"],
)
def test_hostile_metadata_fails_its_trace_alone(db, upload, vecadd_files, api, metadata, error):
    upload("good", vecadd_files, OK)
    upload("hostile", vecadd_files, metadata)
    out, err = io.StringIO(), io.StringIO()
    call_command("ingest_traces", stdout=out, stderr=err)  # exits 0: no traceback, nothing to retry

    hostile = Trace.objects.get(pk="hostile")
    assert hostile.state == TraceState.FAILED
    assert hostile.error.startswith(error), hostile.error
    assert (hostile.metadata_json, hostile.layers, hostile.model) == (None, [], None)
    assert Trace.objects.get(pk="good").state == TraceState.READY
    listing = api.get("/api/traces")
    assert len(listing.content) < 4096, "one run's metadata must not swell everyone's list"
    orjson.loads(listing.content)
    orjson.loads(api.get("/api/traces/hostile").content)


def test_a_big_metadata_json_is_refused_before_it_is_read(db, upload, vecadd_files, settings):
    settings.CASCADE_METADATA_MAX_BYTES = 1000
    upload("big", vecadd_files, orjson.dumps({**OK, "notes": "n" * 2000}))
    passes.poll_bucket()
    trace = Trace.objects.get(pk="big")
    assert trace.state == TraceState.FAILED
    assert trace.error == (
        "metadata.json: 2051 bytes, more than the 1000 expected (CASCADE_METADATA_MAX_BYTES)"
    ), trace.error


def test_stored_metadata_with_infinity_is_failed_by_the_migration(db, make_trace):
    """What earlier versions stored, the API emitted as `Infinity`: invalid JSON for every client."""
    make_trace("inf", state=TraceState.READY, kernel_count=1, metadata_json='{"status":"ok","peak":Infinity}')
    make_trace("fine", state=TraceState.READY, metadata_json='{"status":"ok","peak":1e300,"name":"nan"}')
    store_kernels(
        "inf",
        [
            dict(ctx="0x1", kernel_id=1, name="k", trace_file="kernel-1.trace", blocks=1, threads=1)
            | dict.fromkeys(["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"], 1)
        ],
    )
    migration = importlib.import_module("traces.migrations.0004_fail_non_finite_metadata")
    migration.fail_non_finite_metadata(apps, None)

    inf = Trace.objects.get(pk="inf")
    assert (inf.state, inf.metadata_json, inf.kernel_count) == ("failed", None, 0)
    assert inf.error.startswith("metadata.json is not valid JSON")
    assert not Kernel.objects.exists()
    assert Trace.objects.get(pk="fine").state == "ready"


# --- Files the run does not list, files with nothing in them, names with "/" --


def stats(count: int, ctx: str) -> str:
    return STATS_HEADER + "".join(stats_row(n, ctx, name="_Z1kv", insts=7) for n in range(1, count + 1))


def test_files_metadata_json_does_not_list_are_not_parsed(db, upload):
    """A run re-uploaded over an old one: the old run's other context must not be added in."""
    upload("run", {"traces/stats_ctx_0xa": stats(3, "0xa"), "traces/stats_ctx_0xb": stats(5, "0xb")}, OK)
    passes.poll_bucket()
    assert Trace.objects.get(pk="run").kernel_count == 8
    upload("run", {"traces/stats_ctx_0xc": stats(2, "0xc")}, OK, list_files=True)
    passes.poll_bucket(trace_id="run")
    trace = Trace.objects.get(pk="run")
    assert (trace.state, trace.kernel_count) == (TraceState.READY, 2)
    assert set(Kernel.objects.values_list("ctx", flat=True)) == {"0xc"}


def test_a_stats_file_of_blank_lines_is_not_a_run(db, upload):
    upload("blank", {"traces/stats_ctx_0x1": "\n" * 1000}, OK)
    upload("idle", {"traces/stats_ctx_0x1": STATS_HEADER}, {**OK, "kernel_count": 0})
    passes.poll_bucket()
    blank = Trace.objects.get(pk="blank")
    assert blank.state == TraceState.FAILED
    assert blank.error.startswith("no kernel launches in the stats files")
    idle = Trace.objects.get(pk="idle")
    assert (idle.state, idle.kernel_count) == (TraceState.READY, 0), "it says it launched none"


def test_a_run_name_with_a_slash_fails_saying_so(db, upload):
    upload("team/run-7", {"traces/stats_ctx_0x1": stats(1, "0x1")}, OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="team")
    assert trace.state == TraceState.FAILED
    assert trace.error.startswith(
        "metadata.json is at team/run-7/metadata.json, one folder down: a run's name cannot contain '/'"
    ), trace.error
