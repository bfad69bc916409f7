from django.urls import re_path
from drf_spectacular.views import SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter

from traces.errors import api_not_found
from traces.openapi import ApiIndexView, CachedSchemaView
from traces.views import SimulationUploadViewSet, SimulationViewSet, TraceDownloadsViewSet, TraceViewSet

router = SimpleRouter()
# Users' scripts call both `/api/traces` and `/api/traces/`.
router.trailing_slash = "/?"
router.register("traces", TraceViewSet, basename="trace")
# /files and /kernels.csv: detail routes of their own viewset under the same prefix.
router.register("traces", TraceDownloadsViewSet, basename="trace-downloads")
router.register("simulations", SimulationViewSet, basename="simulation")
# A simulation's POST .../simulations/{name}/upload and .../complete, with a write token.
router.register("traces", SimulationUploadViewSet, basename="trace-uploads")

urlpatterns = [
    # `/api/`: an index of the routes, with links (public, as the schema).
    re_path(r"^$", ApiIndexView.as_view(), name="api-index"),
    *router.urls,
    # The OpenAPI schema (built once per process) and Swagger UI, public (traces.openapi says
    # why), with or without a slash.
    re_path(r"^schema/?$", CachedSchemaView.as_view(), name="schema"),
    # Its start-up script from `?script`, not inline: the Content-Security-Policy runs no inline script.
    re_path(r"^docs/?$", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="swagger-ui"),
    # Last: whatever else is asked of /api/ gets a JSON 404, not Django's HTML page.
    re_path(r"^(?P<path>.*)$", api_not_found, name="api-not-found"),
]
