from rest_framework.routers import SimpleRouter

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

urlpatterns = router.urls
