"""Many API clients at once against a running Cascade: throughput, latency, errors, invalid JSON.

    python -m bench.load --url http://127.0.0.1:8765 --token cas_... [--clients 50]
        [--duration 30 | --requests 5000] [--mix list:45,small:45,large:10]

Each client is a thread with its own keep-alive connection (http.client), spread over up to
four processes (one a core) so that decoding a large response in one client does not hold up the clock of the
others. A client loops until the duration is over (or the request budget is spent), each time
drawing `GET /api/traces`, or `GET /api/traces/{id}` of the small or the large trace, by the
weights of --mix. A request is timed from sending it to its body's last byte; then its body
is decoded as JSON (a detail must hold `kernel_count` kernels). The small and the large trace
are the ready traces with the fewest and the most kernels in the list.

Only 127.0.0.1, localhost and [::1] are accepted: this is a load test, not a tool to point at
someone else's server. docs/performance.md says how to start a Cascade to measure,
with gunicorn and a generated 100,000-launch trace, and records the figures.
"""

import argparse
import http.client
import json
import math
import multiprocessing
import os
import random
import select
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

try:
    import orjson  # in requirements.txt: decodes a 35 MB detail several times faster

    loads = orjson.loads
except ImportError:  # pragma: no cover - the standard library does the same job, slower
    loads = json.loads

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
MAX_CLIENTS = 500
MAX_DURATION = 600.0
REQUEST_TIMEOUT = 120.0
SPAWN_SECONDS = 2.0  # the client processes start; then every client starts at once
KINDS = ("list", "small", "large")
# What a kept-alive connection the server closed meanwhile gives, before any answer.
STALE_CONNECTION = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
SHOW_FAILURES = 10  # requests without an answer (or with a 5xx) listed after the figures


@dataclass(frozen=True)
class Sample:
    kind: str
    started: float  # time.time() when the request was sent
    status: int | None  # None: no HTTP answer (the error says why)
    seconds: float
    nbytes: int
    valid_json: bool
    consistent: bool  # a detail holds as many kernels as its kernel_count
    error: str = ""
    retried: bool = False  # sent again on a new connection: the server had closed the kept-alive one


@dataclass(frozen=True)
class Plan:
    host: str
    port: int
    token: str
    paths: dict  # kind -> path
    weights: dict  # kind -> weight
    start_at: float  # time.time() at which every client starts, once all processes are up
    deadline: float  # time.time() after which no request starts
    requests: int  # per process; 0: no budget, only the deadline
    seed: int


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="Cascade's base URL, e.g. http://127.0.0.1:8765")
    parser.add_argument("--token", default=os.environ.get("CASCADE_TOKEN"), help="API token ($CASCADE_TOKEN)")
    parser.add_argument("--clients", type=int, default=50, help="concurrent clients (50)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of load (30; at most 600)")
    parser.add_argument("--requests", type=int, default=0, help="stop after this many requests in all")
    parser.add_argument("--mix", default="list:45,small:45,large:10", help="weights of the three requests")
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("--token (or CASCADE_TOKEN) is required")
    url = urlsplit(args.url)
    if url.scheme != "http" or url.hostname not in LOCAL_HOSTS:
        parser.error(f"only http://127.0.0.1, localhost or [::1] may be loaded, not {args.url}")
    if not 1 <= args.clients <= MAX_CLIENTS:
        parser.error(f"--clients must be between 1 and {MAX_CLIENTS}")
    if not 0 < args.duration <= MAX_DURATION:
        parser.error(f"--duration must be more than 0 and at most {MAX_DURATION:.0f} seconds")
    if args.requests < 0:
        parser.error("--requests must be 0 (no budget) or more")
    args.processes = max(1, min(4, os.cpu_count() or 1, args.clients, args.requests or args.clients))
    try:
        args.weights = {kind: float(weight) for kind, weight in (p.split(":") for p in args.mix.split(","))}
    except ValueError:
        parser.error("--mix reads like list:45,small:45,large:10")
    if set(args.weights) - set(KINDS) or sum(args.weights.values()) <= 0:
        parser.error(f"--mix weighs {', '.join(KINDS)}")
    args.host, args.port = url.hostname, url.port or 80
    return args


def get_json(host: str, port: int, token: str, path: str):
    connection = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT)
    try:
        connection.request("GET", path, headers=headers(token))
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise SystemExit(f"GET {path}: {response.status} {body[:200]!r}")
        return loads(body)
    finally:
        connection.close()


def headers(token: str) -> dict:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json"}


def choose_traces(args) -> dict:
    """The paths of the three requests: the list, its smallest and its largest ready trace."""
    ready = [t for t in get_json(args.host, args.port, args.token, "/api/traces") if t["state"] == "ready"]
    if not ready:
        raise SystemExit("no ready trace to request: ingest one first (docs/performance.md)")
    ready.sort(key=lambda t: t["kernel_count"])
    small, large = (f"/api/traces/{quote(t['id'], safe='')}" for t in (ready[0], ready[-1]))
    return {"list": "/api/traces", "small": small, "large": large}


def closed_by_server(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle kept-alive connection was closed by the server (it reads as EOF)."""
    sock = connection.sock
    if sock is None:
        return False
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def one_request(connection: http.client.HTTPConnection, plan: Plan, kind: str) -> Sample:
    """One GET, timed to its body's last byte, then checked.

    gunicorn closes a kept-alive connection `keepalive` (5) seconds after it has written the
    last byte of a response into the socket, and a client still reading a large body out of
    its socket buffer may send its next request later than that. Like browsers and urllib3,
    the request then goes out again, once, on a new connection; `retried` counts those.
    """
    if closed_by_server(connection):
        connection.close()
    sent_at, started = time.time(), time.perf_counter()
    retried = False
    while True:
        reused = connection.sock is not None
        try:
            connection.request("GET", plan.paths[kind], headers=headers(plan.token))
            response = connection.getresponse()
            body = response.read()
            break
        except (OSError, http.client.HTTPException) as error:
            connection.close()  # the next request reconnects
            stale = isinstance(error, STALE_CONNECTION) and not retried
            if reused and stale:
                retried = True
                continue
            seconds = time.perf_counter() - started
            return Sample(kind, sent_at, None, seconds, 0, False, False, type(error).__name__, retried)
    seconds = time.perf_counter() - started
    try:
        document = loads(body)
        valid = True
    except ValueError:
        document, valid = None, False
    consistent = valid
    if valid and response.status == 200 and kind != "list":
        consistent = isinstance(document, dict) and (
            document.get("state") != "ready"
            or len(document.get("kernels", ())) == document.get("kernel_count")
        )
    return Sample(kind, sent_at, response.status, seconds, len(body), valid, consistent, "", retried)


def client_loop(plan: Plan, rng: random.Random, budget: "Budget", out: list) -> None:
    kinds = [kind for kind in KINDS if plan.weights.get(kind)]
    weights = [plan.weights[kind] for kind in kinds]
    connection = http.client.HTTPConnection(plan.host, plan.port, timeout=REQUEST_TIMEOUT)
    time.sleep(max(0.0, plan.start_at - time.time()))
    try:
        while time.time() < plan.deadline and budget.take():
            out.append(one_request(connection, plan, rng.choices(kinds, weights)[0]))
    finally:
        connection.close()


class Budget:
    """Requests left for this process's clients; unlimited when created with 0."""

    def __init__(self, requests: int):
        self._left = requests if requests > 0 else None
        self._lock = threading.Lock()

    def take(self) -> bool:
        if self._left is None:
            return True
        with self._lock:
            if self._left <= 0:
                return False
            self._left -= 1
            return True


def run_process(plan: Plan, clients: int, queue) -> None:
    """One process's clients, as threads; its samples go back through `queue` when all are done."""
    budget = Budget(plan.requests)
    outs = [[] for _ in range(clients)]
    threads = [
        threading.Thread(
            target=client_loop, args=(plan, random.Random(f"{plan.seed}:{n}"), budget, outs[n]), daemon=True
        )
        for n in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, plan.deadline - time.time()) + REQUEST_TIMEOUT + 5)
    queue.put([sample for out in outs for sample in out])


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted `values`."""
    if not values:
        return float("nan")
    return values[min(len(values), max(1, math.ceil(fraction * len(values)))) - 1]


def report(samples: list[Sample], seconds: float, args, paths: dict) -> str:
    budget = f" or {args.requests} requests" if args.requests else ""
    lines = [
        f"Cascade load: {args.clients} clients in {args.processes} processes against {args.url}; "
        f"requests sent for up to {args.duration:g} s{budget}, answered within {seconds:.1f} s",
        *(f"  {kind}: GET {paths[kind]}" for kind in KINDS if args.weights.get(kind)),
        "",
        f"{'request':<8} {'count':>7} {'req/s':>8} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9} "
        f"{'max ms':>9} {'MB/s':>8}",
    ]
    for kind in (*KINDS, "all"):
        chosen = [s for s in samples if kind in ("all", s.kind)]
        if not chosen:
            continue
        times = sorted(s.seconds * 1000 for s in chosen)
        megabytes = sum(s.nbytes for s in chosen) / 1e6
        lines.append(
            f"{kind:<8} {len(chosen):>7} {len(chosen) / seconds:>8.1f} {percentile(times, 0.50):>9.1f} "
            f"{percentile(times, 0.95):>9.1f} {percentile(times, 0.99):>9.1f} {times[-1]:>9.1f} "
            f"{megabytes / seconds:>8.1f}"
        )
    statuses = Counter(s.status if s.status is not None else f"no answer ({s.error})" for s in samples)
    errors = {status: n for status, n in statuses.items() if status != 200}
    answered = [s for s in samples if s.status is not None]
    lines += [
        "",
        f"statuses: {dict(sorted(statuses.items(), key=str))}",
        f"errors (not 200): {sum(errors.values())} {errors or ''}".rstrip(),
        f"5xx: {sum(n for status, n in statuses.items() if isinstance(status, int) and status >= 500)}",
        f"invalid JSON: {sum(not s.valid_json for s in answered)}",
        f"details whose kernels do not match kernel_count: {sum(not s.consistent for s in answered)}",
        f"sent again on a new connection (the server had closed the kept-alive one): "
        f"{sum(s.retried for s in samples)}",
    ]
    first = min((s.started for s in samples), default=0.0)
    failed = sorted((s for s in samples if s.status is None or s.status >= 500), key=lambda s: s.started)
    lines += [
        f"  at {s.started - first:6.2f} s: {s.kind} {s.status or 'no answer'} {s.error} after {s.seconds:.2f} s"
        for s in failed[:SHOW_FAILURES]
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    paths = choose_traces(args)
    counts = [
        args.clients // args.processes + (n < args.clients % args.processes) for n in range(args.processes)
    ]
    budgets = [
        args.requests // args.processes + (n < args.requests % args.processes) for n in range(args.processes)
    ]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    start_at = time.time() + SPAWN_SECONDS
    deadline = start_at + args.duration
    processes = [
        context.Process(
            target=run_process,
            args=(
                Plan(
                    args.host,
                    args.port,
                    args.token,
                    paths,
                    args.weights,
                    start_at,
                    deadline,
                    budgets[n],
                    n,
                ),
                counts[n],
                queue,
            ),
            daemon=True,
        )
        for n in range(args.processes)
    ]
    for process in processes:
        process.start()
    samples: list[Sample] = []
    for _ in processes:
        samples += queue.get(timeout=SPAWN_SECONDS + args.duration + REQUEST_TIMEOUT + 60)
    for process in processes:
        process.join(10)
    # Throughput over the time requests were in flight: from the first sent to the last answered.
    elapsed = max(s.started + s.seconds for s in samples) - min(s.started for s in samples) if samples else 0
    print(report(samples, max(elapsed, 1e-9), args, paths))
    bad = [s for s in samples if s.status is None or s.status >= 500 or not s.valid_json or not s.consistent]
    return 1 if bad or not samples else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
