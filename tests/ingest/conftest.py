"""Uploading run folders to the test bucket, the way the profiler does."""

from pathlib import Path

import orjson
import pytest

DATA = Path(__file__).resolve().parent.parent / "data"
PREFIX = "accelsim-traces/"
VECADD_CTX = "0x6165bdd7ec90"


def stats_row(
    kernel_id: int, ctx: str | None = VECADD_CTX, name: str = "_Z6vecAddPdS_S_i", insts: int = 50066
) -> str:
    trace_file = f"kernel-{kernel_id}-ctx_{ctx}.trace.xz" if ctx else f"kernel-{kernel_id}.trace"
    return f"{trace_file}, {name}, 98, 1, 1, 98, 1024, 1, 1, 1024, {insts},{insts}\n"


STATS_HEADER = (
    "kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, block_dimX, "
    "block_dimY, block_dimZ, #threads, total_insts, total_reported_insts\n"
)


@pytest.fixture
def upload(s3):
    """upload(run_id, {relative key: bytes | str}, metadata=dict | bytes | None)

    Objects first, metadata.json last (as the profiler does); `metadata=None` leaves the
    upload unfinished. With `list_files=True` metadata.json lists every object it follows.
    """
    from tests.conftest import TEST_BUCKET

    def put(run_id: str, files: dict, metadata=None, list_files: bool = False) -> None:
        listed = []
        for name, body in files.items():
            body = body.encode() if isinstance(body, str) else body
            key = f"{PREFIX}{run_id}/{name}"
            s3.put_object(Bucket=TEST_BUCKET, Key=key, Body=body)
            listed.append({"key": key, "bytes": len(body)})
        if metadata is None:
            return
        if isinstance(metadata, dict):
            if list_files:
                metadata = {**metadata, "files": listed}
            metadata = orjson.dumps(metadata)
        s3.put_object(Bucket=TEST_BUCKET, Key=f"{PREFIX}{run_id}/metadata.json", Body=metadata)

    return put


@pytest.fixture
def vecadd_files() -> dict:
    folder = DATA / "accelsim-vecadd-v5"
    return {
        f"traces/stats_ctx_{VECADD_CTX}": (folder / f"stats_ctx_{VECADD_CTX}").read_bytes(),
        f"traces/kernelslist_ctx_{VECADD_CTX}": (folder / f"kernelslist_ctx_{VECADD_CTX}").read_bytes(),
        "traces/kernelslist.g": (folder / "kernelslist.g").read_bytes(),
        f"traces/kernel-1-ctx_{VECADD_CTX}.trace.xz": b"\xfd7zXZ\x00 not downloaded",
        "configs/gpgpusim.config": "-gpgpu_n_clusters 46\n",
    }
