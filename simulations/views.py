"""The Simulations API: a trace's simulations, `GET /api/traces/{trace_id}/simulations[/{name}]`;
every trace's, `GET /api/simulations[/accuracy]`; a simulation's upload with a `write` token,
`POST /api/traces/{trace_id}/simulations/{name}/upload` and `.../complete`, and its deletion,
`DELETE /api/traces/{trace_id}/simulations/{name}` (its owner's or staff's).

Each view is thin: the reads are in `accuracy`, the bytes in `encoders`, the upload's URLs and
completion in `uploads` (answered by ingestion).
"""

from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ParseError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from simulations import accuracy, encoders
from simulations.filters import SimulationFilter, simulation_filters
from simulations.models import Simulation
from simulations.openapi import (
    accuracy_schema,
    simulation_complete_schema,
    simulation_delete_schema,
    simulation_schema,
    simulation_upload_schema,
    simulations_schema,
    trace_simulations_schema,
)
from simulations.serializers import SimulationCompleteRequestSerializer, SimulationUploadRequestSerializer
from simulations.uploads import simulation_delete, simulation_upload, simulation_upload_complete
from traces import audit, http
from traces.models import AuditAction, Trace, TraceState
from traces.params import shown
from traces.permissions import CanDeleteSimulations, CanUploadSimulations, CanViewTraces
from traces.storable_text import is_storable
from traces.uploads import multipart_items, refusals, validated
from traces.views import (
    BROWSABLE_KERNELS_MAX,
    STREAM_KERNELS_ABOVE,
    OperatorDescribed,
    TraceNotReady,
    TraceViewSet,
    json_or_browsable,
)


class TraceSimulationsViewSet(OperatorDescribed, viewsets.ViewSet):
    """A trace's simulations (`<run>/simulations/<name>/`): the list, and one with its kernels,
    under the trace's own routes."""

    renderer_classes = TraceViewSet.renderer_classes
    operator_description = TraceViewSet.operator_description
    permission_classes = [CanViewTraces]
    lookup_value_regex = TraceViewSet.lookup_value_regex
    lookup_url_kwarg = TraceViewSet.lookup_url_kwarg

    def get_permissions(self):
        if self.request is not None and self.request.method == "DELETE":
            return [CanDeleteSimulations()]
        return super().get_permissions()

    def existing_trace(self, trace_id: str) -> None:
        if not is_storable(trace_id) or not Trace.objects.filter(pk=trace_id).exists():
            raise NotFound(f"trace {trace_id} not found")

    @trace_simulations_schema
    @action(detail=True, methods=["get"], url_path="simulations")
    def simulations(self, request, trace_id=None):
        self.existing_trace(trace_id)
        rows = accuracy.simulation_summary_rows(trace_id)
        return json_or_browsable(request, [encoders.simulation_summary_dict(row) for row in rows])

    @simulation_schema
    @action(detail=True, methods=["get"], url_path="simulations/(?P<name>[^/]+)")
    def simulation(self, request, trace_id=None, name=None):
        browsable = not isinstance(request.accepted_renderer, JSONRenderer)
        detail = (
            accuracy.simulation_detail(trace_id, name, BROWSABLE_KERNELS_MAX if browsable else None)
            if is_storable(trace_id) and is_storable(name)
            else None
        )
        if detail is None:
            self.existing_trace(trace_id)
            raise NotFound(f"simulation {name} of trace {trace_id} not found")
        head = encoders.simulation_detail_head(detail)
        if browsable:
            return Response(
                {**head, "kernels": [encoders.simulated_kernel_dict(row) for row in detail.kernels]}
            )
        coding = http.choose_coding(request.META.get("HTTP_ACCEPT_ENCODING"))
        body = encoders.encode_simulation_detail(head, detail.kernels)
        stream = head["kernels_simulated"] > STREAM_KERNELS_ABOVE
        return http.unversioned_json_response(body, coding, stream=stream)

    @simulation_delete_schema
    @simulation.mapping.delete
    def delete_simulation(self, request, trace_id=None, name=None):
        self.existing_trace(trace_id)
        if not is_storable(name):
            raise NotFound(f"simulation {name} of trace {trace_id} not found")
        with refusals():
            simulation_delete(trace_id, name, user=request.user)
        audit.record(AuditAction.DELETE, request=request, trace_id=trace_id, simulation=name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SimulationViewSet(OperatorDescribed, viewsets.ViewSet):
    """Every trace's simulations, and which simulator build or config is the most accurate."""

    operator_description = (
        "Simulations of every trace (<run>/simulations/<name>/ in the bucket). JSON clients: "
        "Authorization: Bearer <token>; ?format=json for the raw JSON."
    )

    permission_classes = [CanViewTraces]
    # Read by the OpenAPI schema for the list's parameters, as TraceViewSet's.
    queryset = Simulation.objects.none()
    filter_backends = [DjangoFilterBackend]
    filterset_class = SimulationFilter

    @simulations_schema
    def list(self, request):
        filters = simulation_filters(request.query_params)
        rows = accuracy.simulation_list_rows(filters.filter_queryset(Simulation.objects.all()))
        return json_or_browsable(request, encoders.simulation_list_dicts(rows))

    @accuracy_schema
    @action(detail=False, methods=["get"], url_path="accuracy")
    def accuracy_by(self, request):
        by = request.query_params.get("by", accuracy.ACCURACY_BY[0])
        if by not in accuracy.ACCURACY_BY:
            raise ParseError(f"by must be one of {', '.join(accuracy.ACCURACY_BY)}, not {shown(by)}")
        filters = simulation_filters(request.query_params, also=("by",))
        rows = accuracy.accuracy_by(by, filters.filter_queryset(Simulation.objects.all()))
        return json_or_browsable(request, rows)


# --- a simulation's upload: presigned PUTs, then its completion --------------------------------


class SimulationUploadViewSet(OperatorDescribed, viewsets.ViewSet):
    """A simulation uploaded by a script (`cascade simulate`), with a `write` token: where to PUT
    its files (presigned, into `<run>/simulations/<name>/`; no byte passes through Cascade),
    then the upload's completion, which has it read at once (`simulations.uploads`, ingestion's)."""

    operator_description = (
        "A simulation's upload: presigned PUT URLs, then its completion. Needs a write token "
        "(manage.py create_token NAME --scope write)."
    )
    permission_classes = [CanUploadSimulations]
    lookup_value_regex = TraceViewSet.lookup_value_regex
    lookup_url_kwarg = TraceViewSet.lookup_url_kwarg

    def ready_trace(self, trace_id: str) -> None:
        """404 for no such trace; 409, saying its state, for one that is not ready."""
        state = None
        if is_storable(trace_id):
            state = Trace.objects.filter(pk=trace_id).values_list("state", flat=True).first()
        if state is None:
            raise NotFound(f"trace {trace_id} not found")
        if state != TraceState.READY:
            raise TraceNotReady(
                f"trace {trace_id} is {state}: a simulation is uploaded once its trace is ready"
            )

    @simulation_upload_schema
    @action(
        detail=True,
        methods=["post"],
        url_path="simulations/(?P<name>[^/]+)/upload",
        url_name="simulation-upload",
    )
    def upload(self, request, trace_id=None, name=None):
        self.ready_trace(trace_id)
        files = [dict(item) for item in validated(SimulationUploadRequestSerializer, request)["files"]]
        with refusals():
            answer = simulation_upload(trace_id, name, files, user=request.user)
        listed = [{"name": item["name"], "size": item["size"]} for item in files]
        audit.record(
            AuditAction.UPLOAD, request=request, trace_id=trace_id, simulation=name, detail={"files": listed}
        )
        return Response(answer)

    @simulation_complete_schema
    @action(
        detail=True,
        methods=["post"],
        url_path="simulations/(?P<name>[^/]+)/complete",
        url_name="simulation-complete",
    )
    def complete(self, request, trace_id=None, name=None):
        self.ready_trace(trace_id)
        body = validated(SimulationCompleteRequestSerializer, request)
        multipart = multipart_items(body)
        with refusals():
            answer = simulation_upload_complete(trace_id, name, multipart, user=request.user)
        audit.record(
            AuditAction.COMPLETE,
            request=request,
            trace_id=trace_id,
            simulation=name,
            detail={"multipart": [item["name"] for item in multipart]},
        )
        return Response(answer, status=status.HTTP_202_ACCEPTED)
