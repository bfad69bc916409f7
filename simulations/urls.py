from django.urls import re_path
from rest_framework.routers import SimpleRouter

from simulations.sweep_accuracy_view import SweepAccuracyView
from simulations.sweep_views import SweepViewSet
from simulations.views import SimulationUploadViewSet, SimulationViewSet, TraceSimulationsViewSet

router = SimpleRouter()
router.trailing_slash = "/?"
# A trace's simulations, under the trace's routes: `/api/traces/{trace_id}/simulations[/{name}]`.
router.register("traces", TraceSimulationsViewSet, basename="trace-simulations")
router.register("simulations", SimulationViewSet, basename="simulation")
# A simulation's POST .../simulations/{name}/upload and .../complete, with a write token.
router.register("traces", SimulationUploadViewSet, basename="trace-uploads")
# Sweeps and their jobs: `/api/sweeps[/{id}]`, a worker's `/api/sweeps/{id}/jobs/{job_id}/...`.
router.register("sweeps", SweepViewSet, basename="sweep")

urlpatterns = [
    # Before the router's: a sweep's accuracy is its own view, beside the sweeps' viewset.
    re_path(r"^sweeps/(?P<id>[0-9]+)/accuracy/?$", SweepAccuracyView.as_view(), name="sweep-accuracy"),
    *router.urls,
]
