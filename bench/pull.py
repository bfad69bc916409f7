"""The web server's memory during `cascade pull`: flat, since no file byte passes
through it, beside the bytes pulled.

    python -m bench.pull [--scale small|full] [--json FILE] [--real-traces DIR]

Cascade runs as deployed (gunicorn, one worker, `manage.py` to ingest), on SQLite in a scratch
folder, reading moto's S3 server, which this process runs. For each size, a run of that many
bytes of trace files is uploaded and ingested, then pulled by the client (`cascade_client`, in
this process) through `/files`' presigned links. The worker's resident set is read from /proc
before the pull and its high-water mark (VmHWM) after: the same for 8 MB and for 1 GB means
the files went around the server, from the bucket to the client. The figures, in Markdown,
go to stdout; progress to stderr.

    python -m bench.pull --accel-sim ROOT      (or ACCEL_SIM_ROOT)

adds `cascade simulate`'s rows: each shipped sample and each real trace of `--real-traces DIR` whose
config ROOT has, uploaded with measured times, simulated by ROOT's own Accel-Sim, and Cascade's
share of the command's wall time (pull, upload, read, against the simulator's own; target 10 %
or less). Without a built Accel-Sim (CI) those rows are left out, saying so.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench import common
from bench.common import log

ROOT = common.ROOT
BUCKET = "cascade-bench-pull"
PREFIX = "accelsim-traces/"
CTX = "0x5eed00"
SCALES = {"small": (8, 32), "full": (128, 1024)}  # MB of trace files per run
FILE_MB = 16  # each run's trace files are this large, the last one less


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pull", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=SCALES, default="full")
    parser.add_argument("--json", type=Path, help="write the figures there too")
    parser.add_argument("--accel-sim", metavar="ROOT", default=os.environ.get("ACCEL_SIM_ROOT"))
    parser.add_argument(
        "--real-traces",
        metavar="DIR",
        type=Path,
        default=common.shared_fixture("real-simulatable"),
        help="real simulatable traces for the simulate rows (default: under CASCADE_SHARED_FIXTURES)",
    )
    options = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "client"))
    with tempfile.TemporaryDirectory(prefix="bench-pull-") as tmp, common.moto_server() as endpoint:
        tmp = Path(tmp)
        s3 = common.s3_client(endpoint)
        s3.create_bucket(Bucket=BUCKET)
        env = common.child_env(
            tmp / "var",
            DATABASE_URL=f"sqlite:///{tmp / 'db.sqlite3'}",
            CASCADE_S3_BUCKET=BUCKET,
            CASCADE_S3_ENDPOINT_URL=endpoint,
            CASCADE_PARSE_PROCESSES="1",
            CASCADE_WEB_WORKERS="1",
        )
        common.manage("migrate", "-v", "0", env=env)
        runs = [upload_run(s3, f"pull-{size}mb", size) for size in SCALES[options.scale]]
        common.manage("ingest_traces", env=env)
        token = common.create_token(env, "bench-pull")
        with common.gunicorn(env) as port:
            url = f"http://127.0.0.1:{port}"
            rows = pull_rows(url, token, runs, common.gunicorn_workers(port)[0], tmp)
            simulated = simulate_rows(options.accel_sim, options.real_traces, s3, env, url, tmp)
    print(table(rows, simulated))
    if options.json:
        options.json.write_text(json.dumps({"rows": rows, "simulate": simulated}, indent=2) + "\n")
    return 0


def pull_rows(url: str, token: str, runs: list[str], worker: int, tmp: Path) -> list[dict]:
    """Each run pulled by the client, beside the worker's RSS before and its peak after."""
    from cascade_client import Cascade

    rows = []
    with Cascade(url, token) as cascade:
        cascade.traces()  # the worker's imports and first request done before measuring
        for run_id in runs:
            assert cascade.trace(run_id)["state"] == "ready", run_id
            cascade.files(run_id)
            before = common.proc_status(worker)["VmRSS"]
            started = time.perf_counter()
            result = cascade.pull(run_id, tmp / run_id, jobs=8)
            seconds = time.perf_counter() - started
            after = common.proc_status(worker)
            rows.append(
                {
                    "run": run_id,
                    "files": result.downloaded,
                    "bytes": result.bytes,
                    "seconds": seconds,
                    "worker_rss_before": before,
                    "worker_rss_after": after["VmRSS"],
                    "worker_peak": after["VmHWM"],
                }
            )
            log(
                f"{run_id}: {result.bytes / 1e6:,.1f} MB in {seconds:.2f} s; worker peak {after['VmHWM'] / 1e6:.1f} MB"
            )
            shutil.rmtree(tmp / run_id)
    return rows


def table(rows: list[dict], simulated: list[dict]) -> str:
    lines = [
        "| pull | files | bytes pulled | seconds | MB/s | server worker RSS before | its peak (VmHWM) after |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['run']} | {row['files']} | {row['bytes'] / 1e6:,.1f} MB | {row['seconds']:.2f} | "
            f"{row['bytes'] / 1e6 / row['seconds']:,.0f} | {row['worker_rss_before'] / 1e6:.1f} MB | "
            f"{row['worker_peak'] / 1e6:.1f} MB |"
        )
    if simulated:
        lines += [
            "",
            "| cascade simulate | config | kernels | wall s | simulator s | pull s | upload s | read s "
            "| Cascade / simulator |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in simulated:
            lines.append(
                f"| {row['trace']} | {row['config']} | {row['kernels']} | {row['wall']:.2f} | "
                f"{row['simulator']:.2f} | {row['pull']:.2f} | {row['upload']:.2f} | {row['read']:.2f} | "
                f"{row['share'] * 100:.1f} % |"
            )
    return "\n".join(lines)


# The real traces the real simulator runs (--real-traces: the shared fixtures' real-simulatable/,
# whose SOURCES.md names them), with the config each was recorded with.
SIMULATABLE = {
    "romnn+microgpusim__vectoradd-100-32-sm61": "SM6_TITANX",
    "MrTang-Yuhan+Accel-Sim-Flashinfer__flashinfer-gemm-sm80": "SM86_RTX3070",
    "qishao-chalmers+accel-sim-framework__vecadd-raw-sm75": "SM75_RTX2060",
    "qishao-chalmers+accel-sim-framework__vectoradd-vectorsub-sm75": "SM75_RTX2060",
}


def simulate_rows(
    accel_sim: str | None, real_traces: Path | None, s3, env: dict, url: str, tmp: Path
) -> list[dict]:
    """`cascade simulate` on each sample that claims a config ROOT has and each real simulatable
    trace under `real_traces` (with made-up measured times), timed by its parts."""
    if not accel_sim:
        log("no --accel-sim ROOT (or ACCEL_SIM_ROOT): the cascade simulate rows need a built Accel-Sim")
        return []
    from cascade_client import Cascade
    from cascade_client.simulate import simulate, tree_configs

    runs = upload_simulatable(s3, tree_configs(Path(accel_sim)), real_traces)
    if not runs:
        log(f"no sample or real simulatable trace (under {real_traces}) for the configs {accel_sim} has")
        return []
    common.manage("ingest_traces", env=env)
    token = common.create_token(env, "bench-simulate", "--scope", "write")
    results = []
    with Cascade(url, token) as cascade:
        for folder, (trace_id, config) in runs.items():
            started = time.perf_counter()
            result = simulate(
                cascade, trace_id, config=config, root=accel_sim, name="bench", workdir=tmp / trace_id, jobs=8
            )
            wall, t = time.perf_counter() - started, result.timing
            results.append(
                {
                    "trace": folder,
                    "config": config,
                    "kernels": result.simulation.get("kernels_simulated"),
                    "state": result.simulation.get("state"),
                    "wall": wall,
                    "simulator": t.simulator,
                    "pull": t.pull,
                    "prepare": t.prepare,
                    "upload": t.upload,
                    "read": t.read,
                    "share": t.cascade / t.simulator if t.simulator else None,
                }
            )
            log(
                f"{folder}: {result.simulation.get('state')}, simulator {t.simulator:.1f} s, Cascade {t.cascade:.2f} s"
            )
    return results


def upload_simulatable(s3, configs, real_traces: Path | None) -> dict[str, tuple[str, str]]:
    """The shipped samples that name a config the tree has (what `run.py demo` seeds), as they
    are, and the real traces of those configs with made-up times: {folder: (trace id, config)}."""
    runs = {}
    for folder in sorted((ROOT / "samples").glob("sample__*")):
        config = json.loads((folder / "metadata.json").read_text()).get("suggested_sim_config")
        if config in configs:
            runs[folder.name] = (folder.name, config)
            files = sorted(p for p in folder.rglob("*") if p.is_file())
            for path in sorted(files, key=lambda p: p.name == "metadata.json"):  # metadata.json last
                key = f"{PREFIX}{folder.name}/{path.relative_to(folder).as_posix()}"
                s3.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
    real = {f: c for f, c in SIMULATABLE.items() if real_traces and (real_traces / f / "traces").is_dir()}
    for n, (folder, config) in enumerate((f, c) for f, c in real.items() if c in configs):
        base, traces = f"{PREFIX}sim-{n + 1}/", real_traces / folder / "traces"
        for path in sorted(traces.iterdir()):
            s3.put_object(Bucket=BUCKET, Key=f"{base}traces/{path.name}", Body=path.read_bytes())
        ctx = "".join(p.name[len("stats_ctx_") :] for p in traces.glob("stats_ctx_*"))[:64]
        ids = range(1, 1 + sum(1 for p in traces.iterdir() if ".trace" in p.name))
        rows = "".join(f"{ctx},{k},{k * 100_000},{k * 100_000 + 20_000},20000\n" for k in ids)
        s3.put_object(Bucket=BUCKET, Key=f"{base}timing.csv", Body=f"{TIMING_HEADER}\n{rows}".encode())
        s3.put_object(Bucket=BUCKET, Key=f"{base}metadata.json", Body=b'{"status": "ok"}')
        runs[folder] = (f"sim-{n + 1}", config)
    return runs


TIMING_HEADER = "ctx,kernel_id,start_ns,end_ns,duration_ns"


def upload_run(s3, run_id: str, megabytes: int) -> str:
    """A run whose trace files hold `megabytes` of random bytes (xz does not shrink them either)."""
    from tools.tracer_format import STATS_HEADER, stats_launch_half, stats_totals

    sizes = [FILE_MB] * (megabytes // FILE_MB) + ([megabytes % FILE_MB] if megabytes % FILE_MB else [])
    names = [f"kernel-{n}-ctx_{CTX}.trace.xz" for n in range(1, len(sizes) + 1)]
    stats = STATS_HEADER + "".join(
        stats_launch_half(name, "_Z4pullv", (8, 1, 1), (128, 1, 1)) + stats_totals(1000, 1000)
        for name in names
    )
    base = f"{PREFIX}{run_id}/"
    for name, size in zip(names, sizes, strict=True):
        s3.put_object(Bucket=BUCKET, Key=f"{base}traces/{name}", Body=os.urandom(size * 1_000_000))
    s3.put_object(Bucket=BUCKET, Key=f"{base}traces/stats_ctx_{CTX}", Body=stats.encode())
    s3.put_object(
        Bucket=BUCKET,
        Key=f"{base}traces/kernelslist_ctx_{CTX}",
        Body="".join(f"{n}\n" for n in names).encode(),
    )
    s3.put_object(Bucket=BUCKET, Key=f"{base}configs/gpgpusim.config", Body=b"-gpgpu_n_clusters 1\n")
    s3.put_object(Bucket=BUCKET, Key=f"{base}metadata.json", Body=b'{"status": "ok"}')
    log(f"{run_id}: {megabytes} MB in {len(names)} trace files uploaded")
    return run_id


if __name__ == "__main__":
    sys.exit(main())
