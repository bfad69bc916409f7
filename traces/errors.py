"""Error answers under /api/: always JSON `{"detail": ...}`, as the API reference's are.

DRF answers JSON for the errors its views raise; these cover what never reaches a view (a
route that does not exist, an id with `/` in it) and a server error, which Django would
otherwise answer with an HTML page that a script cannot read.
"""

from django.http import JsonResponse
from django.views import defaults

ROUTES = "the API's routes are /api/traces, /api/traces/{trace_id}, its /summary, /api/traces/{a}/compare/{b}; /api/docs describes them"


def api_not_found(request, path: str = ""):
    """Any /api/ path no route matches. `traces/a/b` (a `%2F` in an id) is a trace that cannot exist."""
    rest = path.removeprefix("traces/").rstrip("/")
    if path.startswith("traces/") and rest:
        return JsonResponse({"detail": f"trace {rest} not found"}, status=404)
    return JsonResponse({"detail": f"not found: {request.path} ({ROUTES})"}, status=404)


def server_error(request, *args, **kwargs):
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "server error; the operators have been told"}, status=500)
    return defaults.server_error(request, *args, **kwargs)


def not_found(request, exception, *args, **kwargs):
    if request.path.startswith("/api/") or request.path == "/api":
        return api_not_found(request, request.path.removeprefix("/api/"))
    return defaults.page_not_found(request, exception, *args, **kwargs)
