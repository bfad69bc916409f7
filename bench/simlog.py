"""Reading a simulator log against `grep`: the bar, "at most 3x the grep time, peak RSS under 100 MB".

    python -m bench.simlog [--scale small] [--repeat 3] [--json FILE] [--real-log FILE]

Builds a log of the scale's size (small: 8 MB, full: 1 GB) in a temp dir from a real one (halUW's, `--real-log`, under the shared fixtures:
its build lines and option dump, then kernel after kernel as Accel-Sim prints them: the trace
header, the launch line, the chatter, `Destroy streams`, the whole stat block with its cache
statistics, its footer), each kernel with the next uid and kernel-N, its cycles adding up; and a
gzip'd copy. Then prints, side by side, the wall time of `grep -c '^gpu_sim_cycle'` over the file
(`zcat | grep -c` over the .gz), the reader's (`simulations.simlog.read_sim_log_chunks` over the file
read in chunks, a zlib decompressor's for the .gz), their ratio, and the reader's peak RSS. The
reader runs in a child process of its own (its peak RSS is its own high-water mark), best of
`--repeat`; so does grep. The file is read once before any timing, so both read it from the page cache.
Then the reader over logs of 40,000 uids: a block each, and one block listing them all.

    python -m bench.simlog blank-lines [--mb 10] [--repeat 5]

The stats file's parse beside it: each workload (about `--mb` MB) through `ingest.bucket.iter_lines`
(the stats read's splitter, runs of blank lines as one piece) and `ingest.stats.parse_stats_lines`,
best of `--repeat`, in MB/s. Real rows are the reference: blank lines must cost no more per byte.
"""

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from bench import common

REAL_LOG = ("real-sim-logs", "halUW__benchmark_1_stream_clean.log")  # under the shared fixtures
CHUNK = 1024**2  # what the reader is given at a time (an S3 body's or a decompressor's chunks)
SCALES = {"small": 8, "full": 1024}  # MB


def _real_lines(real_log: Path) -> list[bytes]:
    data = real_log.read_bytes()
    return (gzip.decompress(data) if real_log.suffix == ".gz" else data).split(b"\n")


def log_pieces(size: int, real_log: Path):
    """The bytes of a log of about `size` bytes, piece by piece (a kernel at a time)."""
    lines = _real_lines(real_log)
    # halUW, by line number: 1-271 the build lines and option dump, 276-289 the trace header of
    # kernel-1, 4905-4914 the chatter after a launch, 4916-7179 uid 2's stat block and footer.
    yield b"\n".join(lines[:271]) + b"\n"
    header = b"\n".join(lines[275:289]) + b"\n"
    chatter = b"\n".join(lines[4904:4914]) + b"\n"
    block = lines[4915:7179]
    counts = ("gpu_sim_cycle = ", "gpu_sim_insn = ", "gpu_tot_sim_cycle = ", "kernel_launch_uid = ")
    at = {name: next(i for i, line in enumerate(block) if line.startswith(name.encode())) for name in counts}
    head = b"\n".join(block[: at["kernel_launch_uid = "]]) + b"\n"
    # Between the uid and the first count, and between the counts: as printed.
    gap1 = b"\n".join(block[at["kernel_launch_uid = "] + 1 : at["gpu_sim_cycle = "]])
    gap2 = b"\n".join(block[at["gpu_sim_insn = "] + 1 : at["gpu_tot_sim_cycle = "]]) + b"\n"
    rest = b"\n".join(block[at["gpu_tot_sim_cycle = "] + 1 :]) + b"\n"
    written = 0
    uid = 0
    total = 0
    while written < size:
        uid += 1
        cycles = 400 + uid % 997
        total += cycles
        kernel_header = header.replace(b"kernel-1.traceg", b"kernel-%d.traceg" % uid).replace(
            b"-kernel id = 1\n", b"-kernel id = %d\n" % uid
        )
        piece = b"".join(
            (
                kernel_header,
                b"launching kernel name: _Z5scaleifPf uid: %d\n" % uid,
                chatter,
                b"Destroy streams for kernel %d: size 0\n" % uid,
                head,
                b"kernel_launch_uid = %d \n" % uid,
                gap1 + (b"\n" if gap1 else b""),
                b"gpu_sim_cycle = %d\ngpu_sim_insn = %d\n" % (cycles, cycles * 46),
                gap2,
                b"gpu_tot_sim_cycle = %d\n" % total,
                rest,
            )
        )
        written += len(piece)
        yield piece
    yield b"GPGPU-Sim: *** simulation thread exiting ***\nGPGPU-Sim: *** exit detected ***\n"


def write_log(path: Path, size: int, real_log: Path) -> int:
    """Write the log; its number of stat blocks."""
    blocks = 0
    with open(path, "wb") as out:
        for piece in log_pieces(size, real_log):
            blocks += piece.count(b"\ngpgpu_simulation_time = ")
            out.write(piece)
    return blocks


def write_gzip(path: Path, gz: Path) -> None:
    if shutil.which("gzip"):
        with open(gz, "wb") as out:
            subprocess.run(["gzip", "-c", "-6", str(path)], stdout=out, check=True)
    else:
        with open(path, "rb") as src, gzip.open(gz, "wb", 6) as out:
            shutil.copyfileobj(src, out, CHUNK)


# --- the child: one reading, its time and peak RSS as JSON on stdout ---------------------------


def _chunks(path: str, compressed: bool):
    with open(path, "rb") as source:
        if not compressed:
            while chunk := source.read(CHUNK):
                yield chunk
            return
        inflate = zlib.decompressobj(31)  # wbits 31: a gzip member
        while chunk := source.read(CHUNK // 4):
            yield inflate.decompress(chunk)
        yield inflate.flush()


def child(path: str, mode: str) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cascade.settings")
    from simulations.simlog import read_sim_log_chunks

    started = time.perf_counter()
    if mode == "inflate":  # the decompressor alone: what zlib costs before the reader
        size = sum(len(chunk) for chunk in _chunks(path, True))
        result = {"bytes": size}
    else:
        log = read_sim_log_chunks(_chunks(path, mode == "gzip"))
        result = {"blocks": log.blocks, "uids": len(log.kernels), "lines": log.lines, "stopped": log.stopped}
    result.update(seconds=time.perf_counter() - started, peak_rss=common.peak_rss())
    print(json.dumps(result))
    return 0


# --- the parent ---------------------------------------------------------------------------------


def _grep(command: str) -> tuple[float, int]:
    """Wall time and the count."""
    started = time.perf_counter()
    out = subprocess.run(["sh", "-c", command], capture_output=True, check=True).stdout
    return time.perf_counter() - started, int(out)


def _reader(path: Path, mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench.simlog", "--child", str(path), mode],
        cwd=common.ROOT,
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    return json.loads(out)


def measure(path: Path, gz: Path, repeat: int) -> list[dict]:
    with open(path, "rb") as warm:  # into the page cache, for grep and the reader alike
        while warm.read(16 * CHUNK):
            pass
    quoted, quoted_gz = (re.sub(r"'", r"'\\''", str(p)) for p in (path, gz))
    rows = []
    for label, grep, mode, source in (
        ("log", f"grep -c '^gpu_sim_cycle' '{quoted}'", "plain", path),
        ("log.gz", f"zcat '{quoted_gz}' | grep -c '^gpu_sim_cycle'", "gzip", gz),
    ):
        grep_best, reader_best, inflate_best = float("inf"), None, None
        for _ in range(repeat):  # in turns, so that a busy machine weighs on both alike
            seconds, count = _grep(grep)
            grep_best = min(grep_best, seconds)
            reading = _reader(source, mode)
            if reader_best is None or reading["seconds"] < reader_best["seconds"]:
                reader_best = reading
            if mode == "gzip":
                inflate = _reader(source, "inflate")
                if inflate_best is None or inflate["seconds"] < inflate_best["seconds"]:
                    inflate_best = inflate
        if reader_best["blocks"] != count:
            raise RuntimeError(
                f"{label}: the reader read {reader_best['blocks']} blocks, grep counted {count}"
            )
        rows.append(
            {
                "file": label,
                "bytes": source.stat().st_size,
                "grep_seconds": grep_best,
                "reader_seconds": reader_best["seconds"],
                "ratio": reader_best["seconds"] / grep_best,
                "peak_rss": reader_best["peak_rss"],
                "blocks": count,
                "uids": reader_best["uids"],
                "inflate_seconds": inflate_best["seconds"] if inflate_best else None,
            }
        )
    return rows


# The figures for closing a log's kernels before it was linear (quadratic: a cycle-limit log
# whose last block lists every uid): 6.5 s at 40,000 uids (7.6 s measured here at the time).
UIDS = 40_000
UIDS_TARGET_SECONDS = 1.0


def uids_log(uids: int, shape: str) -> bytes:
    """A trace-driven log of `uids` kernels: `each` closes one a block (a normal run), `one`
    lists them all in the block the cycle limit stopped (the shape that was quadratic)."""
    out = [
        b"Accel-Sim [build accelsim-commit-bench]\n",
        b"        *** GPGPU-Sim Simulator Version 4.2.0  [build gpgpu-sim_git-commit-bench] ***\n",
        b"-gpgpu_clock_domains 1000.0:1000.0:1000.0:1000.0\n",
    ]
    for uid in range(1, uids + 1):
        out.append(b"Header info loaded for kernel command : /t/kernel-%d.traceg\n" % uid)
        out.append(b"launching kernel name: _Z1kv uid: %d cuda_stream_id: 0\n" % uid)
        if shape == "each":
            out.append(
                b"Destroy streams for kernel %d: size 0\nkernel_name = _Z1kv\nkernel_launch_uid = %d\n"
                b"gpu_sim_cycle = 5\ngpu_sim_insn = 5\ngpu_tot_sim_cycle = %d\ngpgpu_simulation_time = 1\n"
                % (uid, uid, 5 * uid)
            )
    if shape == "one":
        out.append(
            b"kernel_name = _Z1kv\nkernel_launch_uid = " + b" ".join(b"%d" % u for u in range(1, uids + 1))
        )
        out.append(
            b"\ngpu_sim_cycle = 5\ngpu_sim_insn = 5\ngpu_tot_sim_cycle = 5\ngpgpu_simulation_time = 1\n"
        )
        out.append(b"GPGPU-Sim: ** break due to reaching the maximum cycles (or instructions) **\n")
    out.append(b"GPGPU-Sim: *** exit detected ***\n")
    return b"".join(out)


def measure_uids(uids: int = UIDS, repeat: int = 3) -> list[dict]:
    """The reader's time over a log of `uids` kernels, each shape, best of `repeat`."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cascade.settings")
    django.setup()
    from simulations.simlog import read_sim_log_chunks

    rows = []
    for shape in ("each", "one"):
        data = uids_log(uids, shape)
        chunks = [data[at : at + CHUNK] for at in range(0, len(data), CHUNK)]
        best, log = common.best_of(repeat, lambda: read_sim_log_chunks(chunks))  # noqa: B023
        if len(log.kernels) != uids:
            raise RuntimeError(f"{shape}: the reader read {len(log.kernels)} uids, not {uids}")
        rows.append({"shape": shape, "uids": uids, "bytes": len(data), "reader_seconds": best})
    return rows


def uids_table(rows: list[dict]) -> str:
    lines = [
        "| kernels closed | uids | reader | target |",
        "|---|---|---|---|",
    ]
    words = {"each": "a block per kernel", "one": "one block lists every uid (cycle limit)"}
    for row in rows:
        lines.append(
            f"| {words[row['shape']]} | {row['uids']:,} | {row['reader_seconds']:.3f} s "
            f"| < {UIDS_TARGET_SECONDS:g} s |"
        )
    return "\n".join(lines)


def table(rows: list[dict]) -> str:
    lines = [
        "| file | size | stat blocks | grep -c '^gpu_sim_cycle' | reader | ratio (target <= 3x) "
        "| reader's peak RSS (target < 100 MB) | zlib alone |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        inflate = f"{row['inflate_seconds']:.2f} s" if row["inflate_seconds"] is not None else ""
        lines.append(
            f"| {row['file']} | {row['bytes'] / 1e6:,.1f} MB | {row['blocks']:,} | {row['grep_seconds']:.3f} s "
            f"| {row['reader_seconds']:.3f} s | {row['ratio']:.2f}x | {row['peak_rss'] / 1e6:.1f} MB | {inflate} |"
        )
    return "\n".join(lines)


STATS_MAX_LINE = 16 * 1024**2  # CASCADE_MAX_STATS_LINE's default
HEADER = (
    b"kernel id, kernel name, grid_dimX, grid_dimY, grid_dimZ, #blocks, block_dimX, block_dimY, "
    b"block_dimZ, #threads, total_insts, total_reported_insts\n"
)
ROW = (
    b"kernel-%d-ctx_0x6165bdd7ec90.trace.xz, _Z6vecAddPdS_S_i, 98, 1, 1, 98, 1024, 1, 1, 1024, 50066,50066\n"
)


def stats_rows(size: int, after: bytes = b"") -> bytes:
    """Real rows as the tracer writes them (each followed by `after`), about `size` bytes."""
    count = size // (len(ROW % 1) + len(after))
    return HEADER + b"".join(ROW % n + after for n in range(1, count + 1))


def stats_workloads(size: int) -> dict[str, bytes]:
    return {
        "real rows": stats_rows(size),
        "blank lines (LF)": b"\n" * size,
        "blank lines (CRLF)": b"\r\n" * (size // 2),
        "blank lines (spaces)": b"    \n" * (size // 5),
        "rows, one blank line after each": stats_rows(size, b"\n"),
        "rows, two blank lines after each": stats_rows(size, b"\n\n"),
        "rows, ten blank lines after each": stats_rows(size, b"\n" * 10),
    }


def megabytes_per_second(data: bytes, repeat: int) -> float:
    """The best of `repeat` parses of `data`, as ingestion reads a stats file."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cascade.settings")
    from ingest import bucket, stats

    def parse() -> None:
        for _ in stats.parse_stats_lines(bucket.iter_lines(data, STATS_MAX_LINE, blank_runs=True)):
            pass

    return len(data) / common.best_of(repeat, parse)[0] / 1e6


def blank_lines(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.simlog blank-lines",
        description="Blank lines against real rows: MB/s of a stats file's parse.",
    )
    parser.add_argument("--mb", type=float, default=10, help="size of each workload, MB")
    parser.add_argument("--repeat", type=int, default=5, help="parses of each; the best is shown")
    options = parser.parse_args(argv)
    print("| workload | MB/s | beside real rows |\n|---|---|---|")
    reference = None
    for name, data in stats_workloads(int(options.mb * 1e6)).items():
        figure = megabytes_per_second(data, options.repeat)
        reference = reference or figure
        print(f"| {name} | {figure:,.1f} | {figure / reference:.2f}x |", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(*argv[1:3])
    if argv[:1] == ["blank-lines"]:
        return blank_lines(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full", help="small: 8 MB, full: 1 GB")
    parser.add_argument("--repeat", type=int, default=3, help="readings of each; the best is shown")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    parser.add_argument(
        "--real-log",
        type=Path,
        default=common.shared_fixture(*REAL_LOG),
        help="halUW's real log (.log or .log.gz), the one the log is built from "
        "(default: under CASCADE_SHARED_FIXTURES; docs/formats.md#the-simulators-log)",
    )
    options = parser.parse_args(argv)
    if options.real_log is None or not options.real_log.is_file():
        parser.error(
            f"needs halUW's real log: --real-log FILE or CASCADE_SHARED_FIXTURES ({options.real_log})"
        )
    with tempfile.TemporaryDirectory(prefix="bench-simlog-") as directory:
        path, gz = Path(directory, "sim.log"), Path(directory, "sim.log.gz")
        started = time.perf_counter()
        blocks = write_log(path, SCALES[options.scale] * 1024**2, options.real_log)
        write_gzip(path, gz)
        common.log(
            f"built {path} ({path.stat().st_size / 1e6:,.1f} MB, {blocks:,} stat blocks) and its .gz "
            f"({gz.stat().st_size / 1e6:,.1f} MB) in {time.perf_counter() - started:.1f} s"
        )
        rows = measure(path, gz, options.repeat)
    uids_rows = measure_uids(UIDS, options.repeat)
    print(table(rows))
    print()
    print(uids_table(uids_rows))
    if options.json:
        options.json.write_text(json.dumps({"rows": rows, "uids_rows": uids_rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
