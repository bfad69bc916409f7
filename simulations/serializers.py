"""A simulation's answers for the OpenAPI schema, each built from its `traces.shapes` declaration
(`serializer_for`, never instantiated with data: the views answer bytes), and the two request
bodies of a simulation's upload, written out: the views validate them with these.
"""

from rest_framework import serializers

from simulations import shapes
from simulations.api_examples import SIMULATION_DETAIL_EXAMPLES
from traces.serializers import (
    MultipartRequestSerializer,
    UploadFileRequestSerializer,
    documented,
    serializer_for,
)

SimulationSummarySerializer = serializer_for(shapes.SIMULATION_SUMMARY)
SimulationListItemSerializer = serializer_for(shapes.SIMULATION_LIST_ITEM)
SimulationDetailSerializer = documented(shapes.SIMULATION_DETAIL, SIMULATION_DETAIL_EXAMPLES)
SimulationAccuracySerializer = serializer_for(shapes.SIMULATION_ACCURACY)
SweepAccuracySerializer = serializer_for(shapes.SWEEP_ACCURACY)


# --- A simulation's upload: the requests (validated with these; a file's and a multipart upload's
# are traces.serializers', shared with a pushed run's), then the answers (declared) ----------------

# A folder accepts six file names (ingest/uploads.py says which), each once.
UPLOAD_FILES_MAX = 8


class SimulationUploadRequestSerializer(serializers.Serializer):
    """The files a client is about to PUT, simulation.json among them."""

    files = UploadFileRequestSerializer(many=True, min_length=1, max_length=UPLOAD_FILES_MAX)

    class Meta:
        ref_name = "SimulationUploadRequest"


class SimulationCompleteRequestSerializer(serializers.Serializer):
    """The multipart uploads to complete (none, or absent, when nothing was multipart)."""

    multipart = MultipartRequestSerializer(
        many=True, required=False, allow_null=True, max_length=UPLOAD_FILES_MAX
    )

    class Meta:
        ref_name = "SimulationCompleteRequest"


SimulationUploadSerializer = serializer_for(shapes.SIMULATION_UPLOAD)
SimulationCompleteSerializer = serializer_for(shapes.SIMULATION_COMPLETE)
