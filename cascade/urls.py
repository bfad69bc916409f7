from django.contrib import admin
from django.http import HttpResponsePermanentRedirect
from django.urls import include, path, re_path
from django.utils.encoding import escape_uri_path
from django.views.generic import RedirectView

from cascade import health, metrics
from traces.errors import api_not_found
from traces.openapi import ApiIndexView

admin.autodiscover()  # SimpleAdminConfig (settings): the pages registered where they are served
admin.site.site_header = "Cascade"
admin.site.site_title = "Cascade"
admin.site.index_title = "Trace registry"


def simulation_admin_moved(request, rest: str):
    """`/admin/traces/simulation/...`, where the simulations' admin was before it had an app."""
    query = request.META.get("QUERY_STRING")
    target = f"/admin/simulations/simulation/{escape_uri_path(rest)}"
    return HttpResponsePermanentRedirect(f"{target}?{query}" if query else target)


urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    # The simulations' admin pages moved with their app: links and bookmarks kept.
    re_path(r"^admin/traces/simulation/(?P<rest>.*)$", simulation_admin_moved),
    path("admin/", admin.site.urls),
    # The index without its slash too, as every route of the API: no redirect for a script.
    path("api", ApiIndexView.as_view(), name="api-index-no-slash"),
    path("api/", include("traces.urls")),
    path("api/", include("simulations.urls")),
    # Last under /api/: whatever else is asked of it gets a JSON 404, not Django's HTML page.
    re_path(r"^api/(?P<path>.*)$", api_not_found, name="api-not-found"),
    path("api-auth/", include("rest_framework.urls")),
    # For orchestrators and Prometheus (cascade.health, cascade.metrics): no slash, no token.
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
]

# Errors that no view answers: JSON under /api/, Django's pages elsewhere.
handler400 = "traces.errors.bad_request"
handler404 = "traces.errors.not_found"
handler500 = "traces.errors.server_error"
