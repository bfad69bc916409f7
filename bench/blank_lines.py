"""Blank lines against real rows: MB/s of a stats file's parse, as ingestion reads it.

    python -m bench.blank_lines [--mb 10] [--repeat 5]

Each workload (about `--mb` MB) goes through `ingest.bucket.iter_lines` (the stats read's
splitter, runs of blank lines as one piece) and `ingest.stats.parse_stats_lines`, best of
`--repeat`. Real rows are the reference: blank lines must cost no more per byte.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cascade.settings")

from ingest import bucket, stats  # noqa: E402

MAX_LINE = 16 * 1024**2  # CASCADE_MAX_STATS_LINE's default
HEADER = (
    b"kernel id, kernel name, grid_dimX, grid_dimY, grid_dimZ, #blocks, block_dimX, block_dimY, "
    b"block_dimZ, #threads, total_insts, total_reported_insts\n"
)
ROW = (
    b"kernel-%d-ctx_0x6165bdd7ec90.trace.xz, _Z6vecAddPdS_S_i, 98, 1, 1, 98, 1024, 1, 1, 1024, 50066,50066\n"
)


def rows(size: int, after: bytes = b"") -> bytes:
    """Real rows as the tracer writes them (each followed by `after`), about `size` bytes."""
    count = size // (len(ROW % 1) + len(after))
    return HEADER + b"".join(ROW % n + after for n in range(1, count + 1))


def workloads(size: int) -> dict[str, bytes]:
    return {
        "real rows": rows(size),
        "blank lines (LF)": b"\n" * size,
        "blank lines (CRLF)": b"\r\n" * (size // 2),
        "blank lines (spaces)": b"    \n" * (size // 5),
        "rows, one blank line after each": rows(size, b"\n"),
        "rows, two blank lines after each": rows(size, b"\n\n"),
        "rows, ten blank lines after each": rows(size, b"\n" * 10),
    }


def megabytes_per_second(data: bytes, repeat: int) -> float:
    """The best of `repeat` parses of `data`, as ingestion reads a stats file."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in stats.parse_stats_lines(bucket.iter_lines(data, MAX_LINE, blank_runs=True)):
            pass
        best = min(best, time.perf_counter() - started)
    return len(data) / best / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.blank_lines", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=10, help="size of each workload, MB")
    parser.add_argument("--repeat", type=int, default=5, help="parses of each; the best is shown")
    options = parser.parse_args(argv)
    print("| workload | MB/s | beside real rows |\n|---|---|---|")
    reference = None
    for name, data in workloads(int(options.mb * 1e6)).items():
        figure = megabytes_per_second(data, options.repeat)
        reference = reference or figure
        print(f"| {name} | {figure:,.1f} | {figure / reference:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
