"""Error answers under /api/: always JSON `{"detail": ...}`, as the API reference's are.

DRF answers JSON for the errors its views raise; these cover what never reaches a view (a
route that does not exist, an id with `/` in it) and a server error, which Django would
otherwise answer with an HTML page that a script cannot read.
"""

from django.http import HttpResponseServerError, JsonResponse
from django.utils.html import format_html
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt

from cascade.logs import current_request_id


@csrf_exempt  # a 404 changes nothing: a POST to no route is told so, not asked for a CSRF token
def api_not_found(request, path: str = ""):
    """Any /api/ path no route matches: which routes there are (from the OpenAPI schema, so a
    new route is listed without a line here). Under a trace (`traces/ID/steps`, or an id with a
    `%2F`, which no trace id holds) the routes under a trace: the route is missing, not the trace."""
    from traces.openapi import api_paths, routes_under_a_trace  # the schema imports the views

    if path.startswith("traces/") and "/" in path.removeprefix("traces/").rstrip("/"):
        return JsonResponse(
            {
                "detail": f"no such route: {request.path} (the routes under /api/traces/{{trace_id}} are "
                f"{', '.join(routes_under_a_trace())}; a trace id holds no /)"
            },
            status=404,
        )
    return JsonResponse(
        {
            "detail": f"no such route: {request.path} (the API's routes are {', '.join(api_paths())}; "
            "/api/ lists them with links, /api/docs describes them)"
        },
        status=404,
    )


def server_error(request, *args, **kwargs):
    """The 500 names the request's id (cascade.logs), which the logged traceback carries too.

    In the message, not a field of its own: the API reference's error bodies are `{"detail": ...}`.
    """
    request_id = getattr(request, "request_id", None) or current_request_id() or "-"
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"detail": f"server error; the operators have been told (request id {request_id})"}, status=500
        )
    return HttpResponseServerError(
        format_html("<h1>Server Error (500)</h1><p>Request id: <code>{}</code></p>", request_id)
    )


def bad_request(request, exception, *args, **kwargs):
    """What Django refuses before a view (a body past DATA_UPLOAD_MAX_MEMORY_SIZE read as a form,
    a bad Host): JSON under /api/."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"bad request: {exception}"}, status=400)
    return defaults.bad_request(request, exception, *args, **kwargs)


def not_found(request, exception, *args, **kwargs):
    if request.path.startswith("/api/") or request.path == "/api":
        return api_not_found(request, request.path.removeprefix("/api/"))
    return defaults.page_not_found(request, exception, *args, **kwargs)
