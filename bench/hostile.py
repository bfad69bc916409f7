"""`python -m bench.hostile`: how long hostile uploads can stall other clients.

Cascade as deployed (gunicorn, its 2 gthread workers, PostgreSQL, moto's S3 in a process of its
own), one real trace ready (CASCADE_SHARED_FIXTURES' real-simulatable vectoradd). Clients GET
the trace's `/summary` and `/api/simulations` in a loop, first alone (the reference), then while
a write token uploads each hostile simulation of the issue through `POST .../upload`, the
presigned PUTs and `POST .../complete` (which reads the folder at once, on a thread of the web
process), three at a time, and posts hostile request bodies. Printed: the other clients' worst
and median request time in each phase, and what became of each hostile upload, with the time
from its `/complete` to its final state.

    python -m bench.hostile [--clients 4] [--seconds 20] [--at-once 3] [--server URL]

Needs PostgreSQL (`--server`, else BENCH_DATABASE_URL's server, else 127.0.0.1:5432).
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import common
from bench.common import BUCKET, log

RUN = "romnn+microgpusim__vectoradd-100-32-sm61"
LOG_NAME = "accel-sim.SM6_TITANX.log"
MARKER = {"status": "ok", "simulator": "accel-sim", "config": "SM6_TITANX"}
MiB = 1024**2


def fixtures() -> Path:
    root = os.environ.get("CASCADE_SHARED_FIXTURES") or str(common.ROOT.parent / "shared" / "fixtures")
    return Path(root, "real-simulatable", RUN)


def hostile_simulations(real_log: bytes) -> dict[str, tuple[bytes, dict]]:
    """name -> (sim.log, simulation.json): the issue's reproductions, and the real log as a control."""
    block = real_log.index(b"gpu_sim_cycle = ")
    line_end = real_log.index(b"\n", block)
    return {
        "control": (real_log, MARKER),
        "header-64k-spaces": (b"Header info loaded for kernel command : " + b" " * 64_000 + b"x\n", MARKER),
        "header-1mib-spaces": (
            b"Header info loaded for kernel command : " + b" " * (MiB - 100) + b"x\n",
            MARKER,
        ),
        "assertion-352kb": (b"Assertion `" * 32_000 + b"\n", MARKER),
        "error-lines-8mib": (b"x ERROR\n" * (MiB), MARKER),
        "cycle-2-63-minus-1": (
            real_log[:block] + b"gpu_sim_cycle = 9223372036854775807" + real_log[line_end:],
            MARKER,
        ),
        "cover-1e20": (real_log, {**MARKER, "selection": {"select": "unique", "cover": 1e20}}),
    }


class Api:
    def __init__(self, port: int, token: str):
        self.port, self.headers = port, {"Authorization": f"Bearer {token}"}

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes, float]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            started = time.perf_counter()
            headers = (
                {**self.headers, "Content-Type": "application/json"} if body is not None else self.headers
            )
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            return response.status, data, time.perf_counter() - started
        finally:
            conn.close()


def put(url: str, headers: dict, body: bytes) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    try:
        conn.request(
            "PUT", parts.path + ("?" + parts.query if parts.query else ""), body=body, headers=headers
        )
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"PUT {parts.path}: {response.status}")
    finally:
        conn.close()


def upload_simulation(api: Api, name: str, log_bytes: bytes, marker: dict) -> tuple[str, float]:
    """One simulation through the API; (its final state and error, seconds from /complete)."""
    base = f"/api/traces/{RUN}/simulations/{name}"
    files = {"sim.log": log_bytes, "simulation.json": json.dumps(marker).encode()}
    body = json.dumps({"files": [{"name": n, "size": len(b)} for n, b in files.items()]}).encode()
    status, data, _ = api.request("POST", base + "/upload", body)
    if status != 200:
        return f"upload {status}: {data[:200]!r}", 0.0
    for item in json.loads(data)["files"]:
        put(item["url"], item.get("headers") or {}, files[item["name"]])
    started = time.perf_counter()
    status, data, _ = api.request("POST", base + "/complete", b"{}")
    if status not in (200, 202):
        return f"complete {status}: {data[:200]!r}", 0.0
    while True:
        status, data, _ = api.request("GET", base)
        answer = json.loads(data) if status == 200 else {}
        if answer.get("state") in ("ready", "failed"):
            error = answer.get("error") or ""
            return f"{answer['state']}{': ' + error[:90] if error else ''}", time.perf_counter() - started
        if time.perf_counter() - started > 600:
            return "still reading after 600 s", time.perf_counter() - started
        time.sleep(0.2)


def other_clients(api: Api, clients: int, stop: threading.Event) -> list[float]:
    """GETs of the trace's summary and every simulation, in a loop on `clients` threads, until `stop`."""
    times: list[float] = []
    paths = [f"/api/traces/{RUN}/summary", "/api/simulations"]

    def loop(k: int) -> None:
        n = k
        while not stop.is_set():
            status, _, seconds = api.request("GET", paths[n % len(paths)])
            if status != 200:
                raise RuntimeError(f"GET {paths[n % len(paths)]}: {status}")
            times.append(seconds)
            n += 1

    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(loop, k) for k in range(clients)]
        for future in futures:
            future.result()
    return times


def phase(api: Api, clients: int, seconds: float, hostile=None) -> tuple[list[float], object]:
    """The other clients' request times for `seconds`, or for as long as `hostile()` runs."""
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        others = pool.submit(other_clients, api, clients, stop)
        time.sleep(1.0)  # the clients at their pace first
        result = hostile() if hostile is not None else time.sleep(seconds)
        time.sleep(1.0)
        stop.set()
        return others.result(), result


def figures(times: list[float]) -> str:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"{len(times)} GETs, median {statistics.median(times) * 1000:,.0f} ms, "
        f"p99 {p99 * 1000:,.0f} ms, worst {max(times) * 1000:,.0f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=4, help="other clients' threads (default 4)")
    parser.add_argument("--seconds", type=float, default=20, help="the reference phase's length (default 20)")
    parser.add_argument("--at-once", type=int, default=3, help="hostile uploads at a time (default 3)")
    parser.add_argument("--server", help="postgres://user@host:port (default: BENCH_DATABASE_URL's server)")
    args = parser.parse_args(argv)

    folder = fixtures()
    if not folder.is_dir():
        print(f"bench.hostile: no {folder} (set CASCADE_SHARED_FIXTURES)", file=sys.stderr)
        return 2
    real_log = (folder / LOG_NAME).read_bytes()
    server = args.server or common.server_url(
        os.environ.get("BENCH_DATABASE_URL", common.DEFAULT_DATABASE_URL)
    )
    with common.scratch_database(server, "hostile") as url, common.moto_server(own_process=True) as s3:
        env = common.child_env(DATABASE_URL=url, CASCADE_S3_BUCKET=BUCKET, CASCADE_S3_ENDPOINT_URL=s3)
        client = common.s3_client(s3)
        client.create_bucket(Bucket=BUCKET)
        prefix = "accelsim-traces/"
        for path in sorted((folder / "traces").iterdir()):
            client.put_object(Bucket=BUCKET, Key=f"{prefix}{RUN}/traces/{path.name}", Body=path.read_bytes())
        client.put_object(Bucket=BUCKET, Key=f"{prefix}{RUN}/metadata.json", Body=b'{"status": "ok"}')
        common.manage("migrate", env=env)
        common.manage("ingest_traces", env=env)
        token = common.create_token(env, "bench-hostile", "--scope", "write")
        with common.gunicorn(env) as port:
            api = Api(port, token)
            phase(api, args.clients, 3)  # warm: each worker's first answers build what it keeps
            log("reference: the other clients alone")
            alone, _ = phase(api, args.clients, args.seconds)
            sims = hostile_simulations(real_log)

            def hostile() -> dict:
                outcomes = {}
                bodies = {
                    "body-1000-nested": b"[" * 1000 + b"]" * 1000,
                    "body-5000-digits": b'{"files": ' + b"9" * 5000 + b"}",
                }
                for name, body in bodies.items():
                    status, data, seconds = api.request(
                        "POST", f"/api/traces/{RUN}/simulations/h/upload", body
                    )
                    outcomes[name] = (f"{status}: {data[:90].decode('utf-8', 'replace')}", seconds)
                with ThreadPoolExecutor(args.at_once) as pool:
                    done = pool.map(
                        lambda item: (item[0], upload_simulation(api, item[0], *item[1])), sims.items()
                    )
                    outcomes.update(done)
                return outcomes

            log(f"hostile: {len(sims)} simulations, {args.at_once} at a time, and hostile bodies")
            during, outcomes = phase(api, args.clients, args.seconds, hostile)

    print(
        f"other clients ({args.clients} threads, `/summary` and `/api/simulations`, gunicorn 2 gthread workers):"
    )
    print(f"  alone:                  {figures(alone)}")
    print(f"  during hostile uploads: {figures(during)}")
    print("hostile uploads (final state, seconds from /complete or of the request):")
    for name, (what, seconds) in outcomes.items():
        print(f"  {name:20} {seconds:7.2f} s  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
