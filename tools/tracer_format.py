"""The stats rows as the Accel-Sim NVBit tracer writes them: the one definition.

The generator, the tests' fixtures and the benchmarks build rows with these functions, so a
correction to the format is made once. `ingest/stats.py` keeps its own reading of the format.
These and the parser come from one reading of tracer_tool.cu, so a test that fed one to the
other would pass on a shared mistake: the parser's exactness is checked on real tracer files
(tests/ingest/test_stats_real.py) and on rows rendered from the tracer's own format strings
(tests/ingest/test_stats_properties.py). What the tracer writes and why is in
docs/formats.md#the-tracers-files.
"""

STATS_HEADER = (
    "kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, "
    "block_dimX, block_dimY, block_dimZ, #threads, total_insts, total_reported_insts\n"
)
# The device-id fork's header: `device_id, stream_id` in front of the standard columns.
DEVICE_STATS_HEADER = "device_id, stream_id, " + STATS_HEADER


def printed_d(value: int) -> int:
    """What C's `%d` prints for an unsigned 32-bit value: 2^31 and above come out negative."""
    value %= 2**32
    return value - 2**32 if value >= 2**31 else value


def stats_launch_half(
    trace_file: str,
    name: str,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    *,
    device_id: int | None = None,
    stream_id: int | None = None,
) -> str:
    """What the tracer appends at launch: `"%s, %s, %d, %d, %d, %d, %d, %d, %d, %d, "`.

    Trailing comma and space, no newline: the totals follow when the kernel exits, or never
    (a killed run, a launch captured into a CUDA graph). The device-id fork prints
    `"%d, %d, "` (device, stream) first. `#blocks` and `#threads` are unsigned products.
    """
    gx, gy, gz = grid
    bx, by, bz = block
    numbers = (gx, gy, gz, gx * gy * gz, bx, by, bz, bx * by * bz)
    prefix = "" if device_id is None else f"{printed_d(device_id)}, {printed_d(stream_id or 0)}, "
    return prefix + f"{trace_file}, {name}, " + "".join(f"{printed_d(n)}, " for n in numbers)


def stats_totals(total_insts: int, total_reported_insts: int, *extra: str) -> str:
    """What the tracer appends when the kernel exits: `"%d,%d\\n"` (a fork adds `",%.6f"` latency)."""
    return ",".join((str(printed_d(total_insts)), str(printed_d(total_reported_insts)), *extra)) + "\n"
