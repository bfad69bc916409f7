from django.urls import re_path
from drf_spectacular.views import SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter

from traces.openapi import ApiIndexView, CachedSchemaView
from traces.views import TraceDownloadsViewSet, TracePushViewSet, TraceViewSet

router = SimpleRouter()
# Users' scripts call both `/api/traces` and `/api/traces/`.
router.trailing_slash = "/?"
router.register("traces", TraceViewSet, basename="trace")
# /files and /kernels.csv: detail routes of their own viewset under the same prefix.
router.register("traces", TraceDownloadsViewSet, basename="trace-downloads")
# A run pushed with a write token: POST .../upload and .../complete (`cascade push`).
router.register("traces", TracePushViewSet, basename="trace-push")

urlpatterns = [
    # `/api/`: an index of the routes, with links (public, as the schema).
    re_path(r"^$", ApiIndexView.as_view(), name="api-index"),
    *router.urls,
    # The OpenAPI schema (built once per process) and Swagger UI, public (traces.openapi says
    # why), with or without a slash.
    re_path(r"^schema/?$", CachedSchemaView.as_view(), name="schema"),
    # Its start-up script from `?script`, not inline: the Content-Security-Policy runs no inline script.
    re_path(r"^docs/?$", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="swagger-ui"),
]
