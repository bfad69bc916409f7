"""A simulation's answers for the OpenAPI schema, each built from its `traces.shapes` declaration
(`serializer_for`, never instantiated with data: the views answer bytes), and the two request
bodies of a simulation's upload, written out: the views validate them with these.
"""

from rest_framework import serializers

from simulations import shapes
from simulations.api_examples import SIMULATION_DETAIL_EXAMPLES
from simulations.models import SIMULATION_NAME_MAX
from traces.serializers import documented, serializer_for

SimulationSummarySerializer = serializer_for(shapes.SIMULATION_SUMMARY)
SimulationListItemSerializer = serializer_for(shapes.SIMULATION_LIST_ITEM)
SimulationDetailSerializer = documented(shapes.SIMULATION_DETAIL, SIMULATION_DETAIL_EXAMPLES)
SimulationAccuracySerializer = serializer_for(shapes.SIMULATION_ACCURACY)


# --- A simulation's upload: the requests (validated with these), then the answers (declared) ----

# A folder accepts six file names (ingest/uploads.py says which), each once.
UPLOAD_FILES_MAX = 8
# S3's limit on a multipart upload's parts.
UPLOAD_PARTS_MAX = 10_000
SIZE_MAX = 2**63 - 1


class UploadFileRequestSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=SIMULATION_NAME_MAX,
        trim_whitespace=False,
        help_text="sim.log, sim.log.gz or sim.log.xz (one), gpgpusim.config, trace.config, simulation.json.",
    )
    size = serializers.IntegerField(min_value=0, max_value=SIZE_MAX, help_text="Bytes.")

    class Meta:
        ref_name = "SimulationUploadFileRequest"


class SimulationUploadRequestSerializer(serializers.Serializer):
    """The files a client is about to PUT, simulation.json among them."""

    files = UploadFileRequestSerializer(many=True, min_length=1, max_length=UPLOAD_FILES_MAX)

    class Meta:
        ref_name = "SimulationUploadRequest"


class UploadPartRequestSerializer(serializers.Serializer):
    part_number = serializers.IntegerField(min_value=1, max_value=UPLOAD_PARTS_MAX)
    etag = serializers.CharField(
        max_length=200, trim_whitespace=False, help_text="The part's PUT's ETag, quotes included."
    )

    class Meta:
        ref_name = "SimulationUploadPartRequest"


class MultipartRequestSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=SIMULATION_NAME_MAX, trim_whitespace=False)
    upload_id = serializers.CharField(max_length=1024, trim_whitespace=False)
    parts = UploadPartRequestSerializer(many=True, min_length=1, max_length=UPLOAD_PARTS_MAX)

    class Meta:
        ref_name = "SimulationMultipartRequest"


class SimulationCompleteRequestSerializer(serializers.Serializer):
    """The multipart uploads to complete (none, or absent, when nothing was multipart)."""

    multipart = MultipartRequestSerializer(
        many=True, required=False, allow_null=True, max_length=UPLOAD_FILES_MAX
    )

    class Meta:
        ref_name = "SimulationCompleteRequest"


SimulationUploadSerializer = serializer_for(shapes.SIMULATION_UPLOAD)
SimulationCompleteSerializer = serializer_for(shapes.SIMULATION_COMPLETE)
