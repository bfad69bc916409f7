"""The Simulations API: a trace's simulations, `GET /api/traces/{trace_id}/simulations[/{name}]`;
every trace's, `GET /api/simulations[/accuracy]`; a simulation's upload with a `write` token,
`POST /api/traces/{trace_id}/simulations/{name}/upload` and `.../complete`.

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
    simulation_schema,
    simulation_upload_schema,
    simulations_schema,
    trace_simulations_schema,
)
from simulations.serializers import SimulationCompleteRequestSerializer, SimulationUploadRequestSerializer
from simulations.signals import UploadRefused
from simulations.uploads import simulation_upload, simulation_upload_complete
from traces import http
from traces.models import Trace, TraceState
from traces.params import shown
from traces.parsers import BodyTooLarge
from traces.permissions import CanUploadSimulations, CanViewTraces
from traces.storable_text import is_storable
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

# A request body past this is a 413 before it is read: a dozen files, or a log's few hundred parts.
UPLOAD_BODY_MAX = 1024**2


def validated(serializer_class, request) -> dict:
    """The body checked by its serializer; the first problem a 400 in the API's one-sentence
    shape (`files[1].size: ...`), not DRF's field map."""
    length = request.META.get("CONTENT_LENGTH") or ""
    if length.isdigit() and int(length) > UPLOAD_BODY_MAX:
        raise BodyTooLarge(f"the request body is {length} bytes, more than {UPLOAD_BODY_MAX}")
    serializer = serializer_class(data=request.data)
    if not serializer.is_valid():
        raise ParseError(first_error(serializer.errors))
    return serializer.validated_data


def first_error(errors, where: str = "") -> str:
    if isinstance(errors, dict):
        key, value = next(iter(errors.items()))
        if key == "non_field_errors":
            place = where
        elif isinstance(key, int) or str(key).isdigit():  # a list's item, as DRF keys them
            place = f"{where}[{key}]"
        else:
            place = f"{where}.{key}" if where else key
        return first_error(value, place)
    if isinstance(errors, list) and errors and isinstance(errors[0], (dict, list)):
        index, value = next((i, e) for i, e in enumerate(errors) if e)
        return first_error(value, f"{where}[{index}]")
    message = str(errors[0]) if isinstance(errors, list) else str(errors)
    return f"{where}: {message}" if where else message


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
        try:
            answer = simulation_upload(trace_id, name, files)
        except UploadRefused as refused:
            raise ParseError(str(refused)) from None
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
        multipart = [
            {
                "name": item["name"],
                "upload_id": item["upload_id"],
                "parts": [dict(part) for part in item["parts"]],
            }
            for item in body.get("multipart") or []
        ]
        try:
            answer = simulation_upload_complete(trace_id, name, multipart)
        except UploadRefused as refused:
            raise ParseError(str(refused)) from None
        return Response(answer, status=status.HTTP_202_ACCEPTED)
