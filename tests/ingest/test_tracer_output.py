"""What the tracer really writes, through S3, the database and the API: real files, graphs, forks.

And the traces an older parser read: found by their parser version and read again.
"""

import io

import pytest
from django.core.management import call_command

from ingest import bucket, passes
from ingest.listing import inventory
from tests.helpers import STATS_HEADER, shared_fixture
from tests.traces.support import KERNEL_KEYS, migrate
from traces.models import CURRENT_PARSER_VERSION, Kernel, Trace, TraceState, files_fingerprint

KILLED_RUN = "MrTang-Yuhan+Accel-Sim-Flashinfer__test-traces__flashinfer-gemm__traces__"
OK = {"status": "ok", "trace_gpu_arch": "sm_90"}
# Launches 1 and 2 captured into a CUDA graph, 3 an ordinary launch.
GRAPH_LINE = (
    "kernel-1-ctx_0x1.trace.xz, _Z4gemmv, 8, 4, 1, 32, 128, 1, 1, 128, "
    "kernel-2-ctx_0x1.trace.xz, _Z7softmaxv, 16, 1, 1, 16, 256, 1, 1, 256, "
    "kernel-3-ctx_0x1.trace.xz, _Z4copyv, 2, 1, 1, 2, 64, 1, 1, 64, 900,900\n"
)


def killed_run_files() -> dict:
    return {
        "traces/stats.csv": shared_fixture("real-tracer", f"{KILLED_RUN}stats.csv").read_bytes(),
        "traces/kernelslist.g": shared_fixture("real-tracer", f"{KILLED_RUN}kernelslist.g").read_bytes(),
    }


def launches(trace_id: str) -> list[tuple]:
    return list(
        Kernel.objects.filter(trace_id=trace_id)
        .order_by("ctx", "device", "kernel_id")
        .values_list("kernel_id", "name", "total_insts", "total_reported_insts")
    )


def test_a_real_killed_run_is_ready_with_its_last_launch_without_totals(db, upload):
    upload("killed", killed_run_files(), OK)
    passes.poll_bucket()

    trace = Trace.objects.get(pk="killed")
    assert (trace.state, trace.error, trace.kernel_count) == (TraceState.READY, None, 10)
    assert (trace.kernels_without_totals, trace.parser_version) == (1, CURRENT_PARSER_VERSION)
    rows = launches("killed")
    assert [row[0] for row in rows] == list(range(1, 11))
    assert rows[0][2:] == (2531, 2531)
    assert rows[-1][1].startswith(
        "_ZN7cutlass6KernelINS_4gemm6kernel11GemmGroupedINS1_11threadblock13MmaMultistage"
    )
    assert rows[-1][2:] == (None, None)


def test_graph_captured_launches_are_each_a_kernel_in_the_api(db, upload, api):
    upload("graph", {"traces/stats_ctx_0x1": STATS_HEADER + GRAPH_LINE}, OK)
    passes.poll_bucket()

    body = api.get("/api/traces/graph").json()
    assert body["kernel_count"] == 3
    assert [
        (k["kernel_id"], k["name"], k["grid_dim"], k["blocks"], k["total_insts"]) for k in body["kernels"]
    ] == [
        (1, "_Z4gemmv", [8, 4, 1], 32, None),
        (2, "_Z7softmaxv", [16, 1, 1], 16, None),
        (3, "_Z4copyv", [2, 1, 1], 2, 900),
    ]
    # The standard kernel object: the reference's keys, then step and duration_ns.
    assert list(body["kernels"][0]) == KERNEL_KEYS
    assert Trace.objects.get(pk="graph").kernels_without_totals == 2


def test_device_id_fork_kernels_carry_device_and_stream_in_the_api(db, upload, api):
    stats = (
        "device_id, stream_id, kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, "
        "block_dimX, block_dimY, block_dimZ, #threads, total_insts, total_reported_insts\n"
        "0, 0, kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 10,10\n"
        "1, 0, kernel-1.trace, _Z1av, 2, 1, 1, 2, 32, 1, 1, 32, 20,20\n"
        "1, 0, kernel-2.trace, _Z1bv, 2, 1, 1, 2, 32, 1, 1, 32, 30,30\n"
    )
    upload("fork", {"traces/stats.csv": stats, "traces/kernelslist": "kernel-1.trace\n"}, OK)
    passes.poll_bucket()

    body = api.get("/api/traces/fork").json()
    assert body["state"] == "ready", body["error"]
    assert [(k["device_id"], k["stream_id"], k["kernel_id"], k["total_insts"]) for k in body["kernels"]] == [
        (0, 0, 1, 10),
        (1, 0, 1, 20),
        (1, 0, 2, 30),
    ]
    assert list(body["kernels"][0])[-5:] == ["traced", "step", "duration_ns", "device_id", "stream_id"]


@pytest.mark.parametrize(
    ("stats", "error"),
    [
        (
            "kernel name,total_insts,total_reported_insts\n1-_Z6vecAddPdS_S_i.trace,50066,50066\n",
            "traces/stats.csv: line 1: this is the 2019 tracer's stats format",
        ),
        (
            STATS_HEADER
            + "kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n"
            + "kernel-1.trace, _Z1av, 1, 1, 1, 1, 32, 1, 1, 32, 5,5\n",
            "traces/stats.csv: line 3: kernel ids start again at 1 after kernel id 1 (line 2): the file holds "
            "a second run",
        ),
    ],
    ids=["tracer-2019", "second-run-in-one-file"],
)
def test_what_cannot_be_read_fails_saying_what_it_is(db, upload, stats, error):
    upload("bad", {"traces/stats.csv": stats}, OK)
    passes.poll_bucket()
    trace = Trace.objects.get(pk="bad")
    assert trace.state == TraceState.FAILED
    assert trace.error.startswith(error), trace.error
    assert trace.parser_version == CURRENT_PARSER_VERSION, "a parser's failure: retried after an upgrade"


def test_profiler_failures_record_no_parser_version(db, upload):
    upload("crashed", killed_run_files(), {"status": "failed"})
    passes.poll_bucket()
    assert Trace.objects.get(pk="crashed").parser_version is None


# --- Traces an older parser read --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_traces_ingested_before_the_fix_are_read_again_by_reparse_outdated(upload):
    """What parser 1 left in the database, migrated, then `ingest_traces --reparse-outdated`."""
    upload("killed", killed_run_files(), OK)
    upload("graph", {"traces/stats_ctx_0x1": STATS_HEADER + GRAPH_LINE}, OK)
    upload("new", {"traces/stats_ctx_0x1": STATS_HEADER + GRAPH_LINE}, OK)
    try:
        old = migrate(("traces", "0001_initial")).loader.project_state([("traces", "0001_initial")]).apps
        OldTrace, OldKernel = old.get_model("traces", "Trace"), old.get_model("traces", "Kernel")
        listing = inventory(bucket.list_run_objects("killed"))
        OldTrace.objects.create(
            id="killed",
            files=listing,
            parsed_fingerprint=files_fingerprint(listing),
            state="failed",
            error="traces/stats.csv: line 11: expected 12 comma-separated fields (trace file, name, 10 numbers), "
            "got 11 fields of which the last 8 are numbers",
        )
        # Parser 1 merged the graph's three launches into one row: kernel 1, kernel 3's numbers.
        graph_listing = inventory(bucket.list_run_objects("graph"))
        graph = OldTrace.objects.create(
            id="graph",
            state="ready",
            kernel_count=1,
            files=graph_listing,
            parsed_fingerprint=files_fingerprint(graph_listing),
        )
        OldKernel.objects.create(
            trace=graph,
            ctx="0x1",
            kernel_id=1,
            name=GRAPH_LINE.split(", ", 1)[1].rsplit(", 2, 1, 1, 2", 1)[0],
            trace_file="kernel-1-ctx_0x1.trace.xz",
            grid_x=2,
            grid_y=1,
            grid_z=1,
            block_x=64,
            block_y=1,
            block_z=1,
            blocks=2,
            threads=64,
            total_insts=900,
            total_reported_insts=900,
        )
    finally:
        migrate()
    passes.poll_bucket()  # "new" is parsed by this version; the two old ones are not touched
    assert dict(Trace.objects.values_list("id", "parser_version")) == {
        "killed": 1,
        "graph": 1,
        "new": CURRENT_PARSER_VERSION,
    }
    assert Trace.objects.get(pk="graph").kernel_count == 1

    out = io.StringIO()
    call_command("ingest_traces", "--reparse-outdated", stdout=out, stderr=io.StringIO())

    assert "killed: failed -> ready, 10 kernels" in out.getvalue()
    assert "graph: ready -> ready, 3 kernels" in out.getvalue()
    assert "new:" not in out.getvalue()
    killed, graph = Trace.objects.get(pk="killed"), Trace.objects.get(pk="graph")
    assert (killed.state, killed.kernel_count, killed.kernels_without_totals) == ("ready", 10, 1)
    assert (graph.state, graph.kernel_count, graph.kernels_without_totals) == ("ready", 3, 2)
    assert [row[:3] for row in launches("graph")] == [
        (1, "_Z4gemmv", None),
        (2, "_Z7softmaxv", None),
        (3, "_Z4copyv", 900),
    ]
    assert set(Trace.objects.values_list("parser_version", flat=True)) == {CURRENT_PARSER_VERSION}


def test_scheduled_polls_read_outdated_traces_a_batch_at_a_time(db, upload, settings):
    for run in ("a", "b", "c"):
        upload(run, {"traces/stats_ctx_0x1": STATS_HEADER + GRAPH_LINE}, OK)
    passes.poll_bucket()
    Trace.objects.update(parser_version=1)

    first = passes.poll_bucket(reparse_outdated=True, outdated_batch=2)
    assert len(first.changes) == 2
    assert Trace.objects.filter(parser_version=1).count() == 1
    passes.poll_bucket(reparse_outdated=True, outdated_batch=2)
    assert not Trace.objects.filter(parser_version=1).exists()
    assert not passes.poll_bucket(reparse_outdated=True, outdated_batch=2).changes


@pytest.mark.parametrize("timing_format", ["cascade", "nsys"])
def test_a_generated_serving_run_has_every_launch_s_step_and_time(db, s3, tmp_path, timing_format):
    from tools.generator import RunSpec, write_run
    from tools.upload import upload_run_folder

    spec = RunSpec(kernels=700, contexts=2, seed=3, timing_format=timing_format)
    write_run(tmp_path / "run", spec, run_id="served")
    upload_run_folder(tmp_path / "run", "served")
    passes.poll_bucket()

    trace = Trace.objects.get(pk="served")
    assert (trace.state, trace.timing_error) == (TraceState.READY, None)
    assert (trace.has_step_timeline, trace.has_real_timing) == (True, True)
    assert not Kernel.objects.filter(trace_id="served", duration_ns__isnull=True).exists()
    assert not Kernel.objects.filter(trace_id="served", step__isnull=True).exists()
