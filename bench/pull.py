"""The web server's memory during `cascade pull` (issue 21): flat, since no file byte passes
through it, beside the bytes pulled.

    python -m bench.pull [--scale small|full] [--json FILE]

Cascade runs as deployed (gunicorn, one worker, `manage.py` to ingest), on SQLite in a scratch
folder, reading moto's S3 server, which this process runs. For each size, a run of that many
bytes of trace files is uploaded and ingested, then pulled by the client (`cascade_client`, in
this process) through `/files`' presigned links. The worker's resident set is read from /proc
before the pull and its high-water mark (VmHWM) after: the same for 8 MB and for 1 GB means
the files went around the server, from the bucket to the client. The figures, in Markdown,
go to stdout; progress to stderr.

    python -m bench.pull --accel-sim ROOT      (or ACCEL_SIM_ROOT; issue 28)

adds `cascade simulate`'s rows: each real trace of ../shared/fixtures/real-simulatable/ whose
config ROOT has, uploaded with measured times, simulated by ROOT's own Accel-Sim, and Cascade's
share of the command's wall time (pull, upload, read, against the simulator's own; target 10 %
or less). Without a built Accel-Sim (CI) those rows are left out, saying so.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
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
    options = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "client"))

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-pull-") as tmp, common.moto_server() as endpoint:
        tmp = Path(tmp)
        s3 = common.s3_client(endpoint)
        s3.create_bucket(Bucket=BUCKET)
        env = common.child_env(
            DATABASE_URL=f"sqlite:///{tmp / 'db.sqlite3'}",
            CASCADE_VAR_DIR=str(tmp / "var"),
            CASCADE_S3_BUCKET=BUCKET,
            CASCADE_S3_ENDPOINT_URL=endpoint,
            CASCADE_API_RATE="",
            CASCADE_PARSE_PROCESSES="1",
            CASCADE_WEB_WORKERS="1",
        )
        manage("migrate", "-v", "0", env=env)
        runs = {size: upload_run(s3, f"pull-{size}mb", size) for size in SCALES[options.scale]}
        manage("ingest_traces", env=env)
        token = manage("create_token", "bench-pull", env=env).splitlines()[-1]
        with gunicorn(env) as (url, worker):
            from cascade_client import Cascade

            with Cascade(url, token) as cascade:
                cascade.traces()  # the worker's imports and first request done before measuring
                for run_id in runs.values():
                    assert cascade.trace(run_id)["state"] == "ready", run_id
                    cascade.files(run_id)
                    before = status(worker)["VmRSS"]
                    started = time.perf_counter()
                    result = cascade.pull(run_id, tmp / run_id, jobs=8)
                    seconds = time.perf_counter() - started
                    after = status(worker)
                    pulled = result.bytes
                    rows.append(
                        {
                            "run": run_id,
                            "files": result.downloaded,
                            "bytes": pulled,
                            "seconds": seconds,
                            "worker_rss_before": before,
                            "worker_rss_after": after["VmRSS"],
                            "worker_peak": after["VmHWM"],
                        }
                    )
                    log(
                        f"{run_id}: {pulled / 1e6:,.1f} MB in {seconds:.2f} s; worker peak {after['VmHWM'] / 1e6:.1f} MB"
                    )
                    shutil.rmtree(tmp / run_id)
            simulated = simulate_rows(options.accel_sim, s3, env, url, tmp)

    print(
        "| pull | files | bytes pulled | seconds | MB/s | server worker RSS before | its peak (VmHWM) after |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['run']} | {row['files']} | {row['bytes'] / 1e6:,.1f} MB | {row['seconds']:.2f} | "
            f"{row['bytes'] / 1e6 / row['seconds']:,.0f} | {row['worker_rss_before'] / 1e6:.1f} MB | "
            f"{row['worker_peak'] / 1e6:.1f} MB |"
        )
    if simulated:
        print()
        print(
            "| cascade simulate | config | kernels | wall s | simulator s | pull s | upload s | read s "
            "| Cascade / simulator |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for row in simulated:
            print(
                f"| {row['trace']} | {row['config']} | {row['kernels']} | {row['wall']:.2f} | "
                f"{row['simulator']:.2f} | {row['pull']:.2f} | {row['upload']:.2f} | {row['read']:.2f} | "
                f"{row['share'] * 100:.1f} % |"
            )
    if options.json:
        options.json.write_text(json.dumps({"rows": rows, "simulate": simulated}, indent=2) + "\n")
    return 0


# The real traces the real simulator runs (../shared/fixtures/real-simulatable/SOURCES.md), with
# the config each was recorded with.
SIMULATABLE = {
    "romnn+microgpusim__vectoradd-100-32-sm61": "SM6_TITANX",
    "MrTang-Yuhan+Accel-Sim-Flashinfer__flashinfer-gemm-sm80": "SM86_RTX3070",
    "qishao-chalmers+accel-sim-framework__vecadd-raw-sm75": "SM75_RTX2060",
    "qishao-chalmers+accel-sim-framework__vectoradd-vectorsub-sm75": "SM75_RTX2060",
}


def simulate_rows(accel_sim: str | None, s3, env: dict, url: str, tmp: Path) -> list[dict]:
    """`cascade simulate` on each sample that claims a config ROOT has and each real simulatable
    trace (with made-up measured times), timed by its parts."""
    if not accel_sim:
        log("no --accel-sim ROOT (or ACCEL_SIM_ROOT): the cascade simulate rows need a built Accel-Sim")
        return []
    from cascade_client import Cascade
    from cascade_client.simulate import simulate, tree_configs

    configs = tree_configs(Path(accel_sim))
    # The shipped samples that name a config the tree has (what `run.py demo` seeds), as they are.
    samples = {}
    for folder in sorted((ROOT / "samples").glob("sample__*")):
        config = json.loads((folder / "metadata.json").read_text()).get("suggested_sim_config")
        if config in configs:
            samples[folder.name] = config
            files = sorted(p for p in folder.rglob("*") if p.is_file())
            for path in sorted(files, key=lambda p: p.name == "metadata.json"):  # metadata.json last
                key = f"{PREFIX}{folder.name}/{path.relative_to(folder).as_posix()}"
                s3.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
    shared = Path(os.environ.get("CASCADE_SHARED_FIXTURES", ROOT.parent / "shared" / "fixtures"))
    folders = {f: c for f, c in SIMULATABLE.items() if (shared / "real-simulatable" / f / "traces").is_dir()}
    folders = {f: c for f, c in folders.items() if c in configs}
    if not folders and not samples:
        log(
            f"no sample or real simulatable trace under {shared} for the configs {accel_sim} has: no simulate rows"
        )
        return []
    for n, folder in enumerate(folders, start=1):
        base = f"{PREFIX}sim-{n}/"
        traces = shared / "real-simulatable" / folder / "traces"
        for path in sorted(traces.iterdir()):
            s3.put_object(Bucket=BUCKET, Key=f"{base}traces/{path.name}", Body=path.read_bytes())
        ctx = "".join(p.name[len("stats_ctx_") :] for p in traces.glob("stats_ctx_*"))[:64]
        ids = range(1, 1 + sum(1 for p in traces.iterdir() if ".trace" in p.name))
        rows = "".join(f"{ctx},{k},{k * 100_000},{k * 100_000 + 20_000},20000\n" for k in ids)
        s3.put_object(Bucket=BUCKET, Key=f"{base}timing.csv", Body=f"{TIMING_HEADER}\n{rows}".encode())
        s3.put_object(Bucket=BUCKET, Key=f"{base}metadata.json", Body=b'{"status": "ok"}')
    manage("ingest_traces", env=env)
    token = manage("create_token", "bench-simulate", "--scope", "write", env=env).splitlines()[-1]
    results = []
    runs = {name: (name, config) for name, config in samples.items()}
    runs |= {folder: (f"sim-{n}", config) for n, (folder, config) in enumerate(folders.items(), start=1)}
    with Cascade(url, token) as cascade:
        for folder, (trace_id, config) in runs.items():
            started = time.perf_counter()
            result = simulate(
                cascade, trace_id, config=config, root=accel_sim, name="bench", workdir=tmp / trace_id, jobs=8
            )
            wall = time.perf_counter() - started
            t = result.timing
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


TIMING_HEADER = "ctx,kernel_id,start_ns,end_ns,duration_ns"


def manage(*args: str, env: dict) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {args[0]} failed:\n{done.stderr[-3000:]}")
    return done.stdout


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


def status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0]) * 1024
    return values


class gunicorn:
    """gunicorn as production runs it, one worker; (its URL, the worker's pid)."""

    def __init__(self, env: dict):
        self.port = common.free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "cascade.wsgi"],
            cwd=ROOT,
            env={**env, "CASCADE_BIND": f"127.0.0.1:{self.port}", "GUNICORN_CMD_ARGS": "--log-level warning"},
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def __enter__(self):
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("gunicorn did not start")
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=5).close()
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.2)
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        return url, int(children[0])

    def __exit__(self, *exc):
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)


if __name__ == "__main__":
    sys.exit(main())
