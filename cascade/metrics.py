"""Prometheus metrics for the dashboards operators already run: `GET /metrics`.

Counters and histograms (passes, S3 requests, parse failures, HTTP requests) are kept in
prometheus_client's multiprocess mode: each process (every gunicorn worker, the
`ingest_traces --watch` poller, a parse process, a Celery worker) writes its own files in
CASCADE_METRICS_DIR, and a scrape, whichever worker answers it, sums them all. So the counts
are right with several workers and a poller on the same host. What the database holds
(traces by state, launches stored) is counted at scrape time instead, so it is the same for
every host.

/metrics is open to the addresses in CASCADE_METRICS_ALLOWED and to the bearer token
CASCADE_METRICS_TOKEN; anyone else gets a 403.
"""

import functools
import ipaddress
import logging
import os
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_safe

# prometheus_client chooses per-process files or memory when it is imported: the directory
# must be in the environment first (child processes inherit it).
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(settings.CASCADE_METRICS_DIR)

import prometheus_client  # noqa: E402
from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess  # noqa: E402
from prometheus_client.core import GaugeMetricFamily  # noqa: E402
from prometheus_client.values import MutexValue, ValueClass  # noqa: E402

# A private detail of prometheus_client, checked once: MutexValue is its one-process memory.
if ValueClass is MutexValue:
    raise ImproperlyConfigured(
        "prometheus_client was imported before cascade.metrics set PROMETHEUS_MULTIPROC_DIR: "
        "each process would count alone"
    )

# Every metric has labels: a process creates its files only when it first counts something
# (a `manage.py migrate` leaves none behind).
PASSES = Counter(
    "cascade_passes",
    "Ingestion passes (ingest_traces) and scheduled polls (poll_bucket_task), by how they ended",
    ["entry", "outcome"],
)
PASS_SECONDS = Histogram(
    "cascade_pass_duration_seconds",
    "How long a pass or poll took",
    ["entry"],
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf")),
)
S3_REQUESTS = Counter("cascade_s3_requests", "HTTP requests sent to S3 (each retry too)", ["operation"])
S3_ERRORS = Counter(
    "cascade_s3_errors",
    "S3 requests that failed: the S3 error code (or HTTP status), or the exception for no answer",
    ["operation", "error"],
)
PARSE_FAILURES = Counter(
    "cascade_parse_failures",
    "Parse failures by kind: a trace failed (input, internal, upload, profiler, timeout, worker_lost,"
    " unreachable), or a try left for later (transient, retry)",
    ["kind"],
)
HTTP_REQUESTS = Counter(
    "cascade_http_requests",
    "Requests answered, by route (URL pattern) and status",
    ["route", "method", "status"],
)
HTTP_SECONDS = Histogram(
    "cascade_http_request_duration_seconds",
    "Time until the response starts, by route (URL pattern)",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, float("inf")),
)

logger = logging.getLogger(__name__)

METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
_LABEL_BOUND = 64  # a label value from outside Cascade's code is cut to this


# --- What the code counts ------------------------------------------------------------------


def measured_pass(entry: str) -> Callable:
    """Counts and times each call of the decorated pass (`ingest_traces`' or a scheduled poll).

    The outcome is `failed` when it raised, `errors` when its result lists traces it could not
    ingest (PassResult.errors), else `ok`.
    """

    def decorate(function: Callable) -> Callable:
        @functools.wraps(function)
        def measured(*args, **kwargs):
            started = time.monotonic()
            outcome = "failed"
            try:
                result = function(*args, **kwargs)
                outcome = "errors" if getattr(result, "errors", None) else "ok"
                return result
            finally:
                PASSES.labels(entry, outcome).inc()
                PASS_SECONDS.labels(entry).observe(time.monotonic() - started)

        return measured

    return decorate


def count_parse_failure(kind: str) -> None:
    """One trace's parse failed: `input` (the upload's fault), `internal` (ours), `transient`
    (S3 or the database, retried), `timeout`, `worker_lost`..."""
    PARSE_FAILURES.labels(kind[:_LABEL_BOUND]).inc()


def count_s3_request(operation: str, error: str | None) -> None:
    """One S3 request answered (ingest.storage's meter), `error` its code when it failed."""
    S3_REQUESTS.labels(operation).inc()
    if error is not None:
        S3_ERRORS.labels(operation, error[:_LABEL_BOUND]).inc()


def route_of(request) -> str:
    """The URL pattern's name (`trace-detail`, `admin:traces_trace_change`; its view's dotted
    path when it has none): never the raw path, whose ids would make a series per trace."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        return "unmatched"
    return match.view_name or match.route or "unmatched"


class RequestMetricsMiddleware:
    """Counts and times every request Django answers, by route and status."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.monotonic()
        response = self.get_response(request)
        route = route_of(request)
        method = request.method if request.method in METHODS else "other"
        HTTP_REQUESTS.labels(route, method, str(response.status_code)).inc()
        HTTP_SECONDS.labels(route).observe(time.monotonic() - started)
        return response


# --- What a scrape reads -------------------------------------------------------------------


class DatabaseCollector:
    """Traces by state and launches stored, counted when scraped (one query).

    Left out while the database does not answer: the processes' counters still tell what
    happened meanwhile, and /readyz says why.
    """

    def collect(self):
        from django.db import DatabaseError
        from django.db.models import Count, Sum

        from traces.models import Trace, TraceState

        traces = GaugeMetricFamily("cascade_traces", "Traces registered, by state", labels=["state"])
        try:
            rows = {
                row["state"]: row
                for row in Trace.objects.order_by()
                .values("state")
                .annotate(n=Count("pk"), launches=Sum("kernel_count"))
            }
        except DatabaseError:
            logger.warning(
                "/metrics without the database's gauges: the database does not answer", exc_info=True
            )
            return
        for state in TraceState.values:
            traces.add_metric([state], rows.get(state, {}).get("n", 0))
        yield traces
        yield GaugeMetricFamily(
            "cascade_launches_stored",
            "Kernel launches stored, over every trace",
            value=sum(row["launches"] or 0 for row in rows.values()),
        )


def exposition() -> bytes:
    """Every process's counters on this host, and the database's gauges, in the text format."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(DatabaseCollector())
    return prometheus_client.generate_latest(registry)


def allowed_networks() -> list:
    networks = []
    for item in settings.CASCADE_METRICS_ALLOWED:
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ImproperlyConfigured(
                f"CASCADE_METRICS_ALLOWED: {item!r} is not an address or a network (CIDR)"
            ) from None
    return networks


def _address_allowed(address: str | None) -> bool:
    try:
        ip = ipaddress.ip_address((address or "").strip())
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in network for network in allowed_networks())


def scrape_allowed(request) -> bool:
    """The bearer token CASCADE_METRICS_TOKEN, or an address in CASCADE_METRICS_ALLOWED.

    Behind a proxy the peer is the proxy, often 127.0.0.1: a request it forwarded
    (X-Forwarded-For) must come from an allowed address as the proxy saw it (the list's last
    entry), as well as from an allowed peer, or everyone on the Internet would pass as the proxy.
    """
    token = settings.CASCADE_METRICS_TOKEN
    scheme, _, credentials = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if token and scheme.lower() == "bearer" and secrets.compare_digest(credentials.strip(), token):
        return True
    if not _address_allowed(request.META.get("REMOTE_ADDR")):
        return False
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR")
    return forwarded is None or _address_allowed(forwarded.split(",")[-1])


@require_safe
def metrics_view(request):
    if not scrape_allowed(request):
        return JsonResponse(
            {
                "detail": "/metrics is open to CASCADE_METRICS_ALLOWED addresses and the CASCADE_METRICS_TOKEN token"
            },
            status=403,
        )
    return HttpResponse(exposition(), content_type=prometheus_client.CONTENT_TYPE_LATEST)


# --- The directory's life (gunicorn.conf.py) -----------------------------------------------

_PID_IN_NAME = re.compile(r"_(\d+)\.db$")


def forget_dead_processes(directory: Path) -> None:
    """Removes the files of processes that no longer run: their counts start again from zero.

    For the server's start: what a poller still running on this host counted stays.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for path in directory.glob("*.db"):
        found = _PID_IN_NAME.search(path.name)
        if found is None or not _process_alive(int(found.group(1))):
            path.unlink(missing_ok=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def worker_exited(pid: int) -> None:
    """A gunicorn worker died: its live gauges go (its counters stay, as counts of the past)."""
    multiprocess.mark_process_dead(pid)
