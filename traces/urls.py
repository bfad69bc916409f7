from rest_framework.routers import SimpleRouter

from traces.views import TraceViewSet

router = SimpleRouter()
# Users' scripts call both `/api/traces` and `/api/traces/`.
router.trailing_slash = "/?"
router.register("traces", TraceViewSet, basename="trace")

urlpatterns = router.urls
