"""What an orchestrator asks a running Cascade: alive (`/healthz`), ready to serve (`/readyz`).

`/healthz` answers as long as the process serves requests, without touching the database:
a database outage must not get every web process restarted. `/readyz` says whether the
database answers and has every migration applied, so that traffic goes elsewhere meanwhile;
with a replica for reads (DATABASE_REPLICA_URL), whether each of the two does, and which not.

These two and `/metrics` are answered ahead of the rest of the middleware: a probe sends the
pod's address as its Host (not in DJANGO_ALLOWED_HOSTS), plain HTTP (no HTTPS redirect for
it), and needs no session or login.
"""

import logging

from django.db import DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import JsonResponse
from django.urls import resolve
from django.views.decorators.http import require_safe

from cascade.db_routers import PRIMARY, REPLICA

logger = logging.getLogger(__name__)

OPERATOR_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


@require_safe
def healthz(request):
    return JsonResponse({"status": "ok"})


@require_safe
def readyz(request):
    problem = readiness_problem()
    if problem is not None:
        return JsonResponse({"status": "unavailable", "reason": problem}, status=503)
    return JsonResponse({"status": "ok"})


def readiness_problem() -> str | None:
    """Why this process should not get traffic, or None. The details go to the log, not the
    answer: the probes are open to anyone. With a replica (DATABASE_REPLICA_URL) both databases
    are checked, and the answer names the one that fails: the web tier reads from the replica."""
    if REPLICA not in connections:
        return database_problem(connections[PRIMARY], "the database")
    problems = [
        database_problem(connections[PRIMARY], "the primary database (DATABASE_URL)"),
        database_problem(connections[REPLICA], "the replica database (DATABASE_REPLICA_URL)"),
    ]
    return "; ".join(problem for problem in problems if problem) or None


def database_problem(connection, name: str) -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError:
        logger.warning("not ready: %s does not answer", name, exc_info=True)
        return f"{name} does not answer"
    if plan:
        names = [f"{migration.app_label}.{migration.name}" for migration, _ in plan]
        where = "" if name == "the database" else f" on {name}"
        logger.warning("not ready: %d migrations not applied%s: %s", len(names), where, ", ".join(names))
        return f"{len(names)} migrations not applied{where} (run `python manage.py migrate`): {', '.join(names[:5])}"
    return None


class OperatorEndpointsMiddleware:
    """Answers /healthz, /readyz and /metrics before host checks, HTTPS redirects, sessions
    and logins (see the module's docstring); after the request id and the request metrics."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path_info not in OPERATOR_PATHS:
            return self.get_response(request)
        request.resolver_match = match = resolve(request.path_info)
        return match.func(request, *match.args, **match.kwargs)
