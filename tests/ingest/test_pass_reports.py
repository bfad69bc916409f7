"""What a pass says matches what the database holds (issue 12, finding 10)."""

import io

from django.core.management import call_command

from ingest import passes
from traces.models import Trace

OK = {"status": "ok", "trace_gpu_arch": "sm_90"}
HEADER = (
    "kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, block_dimX, "
    "block_dimY, block_dimZ, #threads, total_insts, total_reported_insts\n"
)


def stats(count: int) -> str:
    row = "kernel-{n}-ctx_0x1.trace.xz, _Z1kv, 1, 1, 1, 1, 32, 1, 1, 32, 7,7\n"
    return HEADER + "".join(row.format(n=n) for n in range(1, count + 1))


def test_a_re_uploaded_run_is_reported_with_the_kernels_it_now_holds(db, upload):
    upload("run", {"traces/stats_ctx_0x1": stats(1000)}, OK)
    passes.poll_bucket()
    upload("run", {"traces/stats_ctx_0x1": stats(3000)}, OK)
    out = io.StringIO()
    call_command("ingest_traces", "--trace", "run", stdout=out, stderr=io.StringIO())
    assert Trace.objects.get(pk="run").kernel_count == 3000
    assert "run: ready -> ready, 3000 kernels" in out.getvalue(), out.getvalue()
