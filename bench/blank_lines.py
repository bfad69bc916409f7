"""Blank lines against real rows: MB/s of a stats file's parse, as ingestion reads it.

    python -m bench.blank_lines [--mb 10] [--repeat 5] [--before REV ...]

Each workload (about `--mb` MB) goes through `ingest.bucket.iter_lines` (the stats read's
splitter, runs of blank lines as one piece) and `ingest.stats.parse_stats_lines`, best of
`--repeat`. Beside it, the same workloads through the splitter and parser of earlier commits
(`--before`, read with `git show`; by default the commit before blank lines were skipped in a
loop of their own, and the one before runs of them came as one piece), when git has them.
Real rows are the reference: issue 18, finding 13 asks blank lines to cost no more per byte.
"""

import argparse
import ast
import os
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterable, Iterator

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cascade.settings")

from bench.common import ROOT  # noqa: E402
from ingest import bucket, stats  # noqa: E402

MAX_LINE = 16 * 1024**2  # CASCADE_MAX_STATS_LINE's default
# (commit, what it read): before h2 skipped blank lines in a loop of their own, and before
# bucket._lines gave runs of them as one piece.
BEFORE = (("8541af8", "one line at a time"), ("231e086", "blank loop"))
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


Reading = Callable[[bytes], Iterable]


def current_reading(data: bytes) -> Iterable:
    return stats.parse_stats_lines(bucket.iter_lines(data, MAX_LINE, blank_runs=True))


def reading_at(commit: str) -> Reading | None:
    """The stats read of `commit` (its `_lines` and its parser), or None if git has no such commit."""
    try:
        bucket_source, stats_source = (
            subprocess.run(
                ["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, check=True, text=True
            ).stdout
            for path in ("ingest/bucket.py", "ingest/stats.py")
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    old_stats = types.ModuleType(f"stats_at_{commit}")
    exec(compile(stats_source, f"{commit}:ingest/stats.py", "exec"), old_stats.__dict__)
    # Only the splitter of bucket.py: the rest of the module talks to S3.
    splitter = next(
        node
        for node in ast.parse(bucket_source).body
        if isinstance(node, ast.FunctionDef) and node.name == "_lines"
    )
    namespace = {"Iterable": Iterable, "Iterator": Iterator, "LineTooLong": bucket.LineTooLong}
    exec(compile(ast.Module([splitter], []), f"{commit}:ingest/bucket.py", "exec"), namespace)
    old_lines = namespace["_lines"]

    def reading(data: bytes) -> Iterable:
        chunks = (data[start : start + bucket.READ_CHUNK] for start in range(0, len(data), bucket.READ_CHUNK))
        return old_stats.parse_stats_lines(old_lines(chunks, MAX_LINE))

    return reading


def megabytes_per_second(readings: list[Reading], data: bytes, repeat: int) -> list[float]:
    """Each reading's best of `repeat` parses of `data`, taken in turns (so that a busy
    machine weighs on every reading alike)."""
    best = [float("inf")] * len(readings)
    for _ in range(repeat):
        for index, reading in enumerate(readings):
            started = time.perf_counter()
            for _ in reading(data):
                pass
            best[index] = min(best[index], time.perf_counter() - started)
    return [len(data) / seconds / 1e6 for seconds in best]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=10, help="size of each workload, MB")
    parser.add_argument("--repeat", type=int, default=5, help="parses of each; the best is shown")
    parser.add_argument("--before", action="append", help="earlier commits to compare with (git revisions)")
    options = parser.parse_args(argv)
    before = [(commit, commit) for commit in options.before] if options.before else BEFORE
    readings = [(label, reading) for commit, label in before if (reading := reading_at(commit)) is not None]
    readings.append(("now", current_reading))
    columns = [f"{label} MB/s" for label, _ in readings]
    print(f"{'workload':<36}" + "".join(f"{column:>26}" for column in columns) + f"{'now / real rows':>18}")
    reference = None
    for name, data in workloads(int(options.mb * 1e6)).items():
        figures = megabytes_per_second([reading for _, reading in readings], data, options.repeat)
        reference = reference or figures[-1]
        print(
            f"{name:<36}"
            + "".join(f"{figure:>26.1f}" for figure in figures)
            + f"{figures[-1] / reference:>17.2f}x",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
