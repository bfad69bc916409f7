from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from cascade import health, metrics
from traces.openapi import ApiIndexView

admin.site.site_header = "Cascade"
admin.site.site_title = "Cascade"
admin.site.index_title = "Trace registry"

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    # The index without its slash too, as every route of the API: no redirect for a script.
    path("api", ApiIndexView.as_view(), name="api-index-no-slash"),
    path("api/", include("traces.urls")),
    path("api-auth/", include("rest_framework.urls")),
    # For orchestrators and Prometheus (cascade.health, cascade.metrics): no slash, no token.
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
]

# Errors that no view answers: JSON under /api/, Django's pages elsewhere.
handler404 = "traces.errors.not_found"
handler500 = "traces.errors.server_error"
