"""What a simulation's upload asks of ingestion, without importing it (as `traces.signals`):
`simulation_upload_requested` for the presigned PUT URLs of its files (`cascade simulate`),
`simulation_upload_completed` once they are PUT (the multipart uploads completed, the
simulation registered and read at once in the background). What ingestion refuses in them it
raises as `UploadRefused` (traces.signals', shared with a run's push), which the API answers
with a 400.
"""

from django.dispatch import Signal

from traces.signals import UploadRefused

__all__ = ["UploadRefused", "simulation_upload_completed", "simulation_upload_requested"]

# sender: the requester's class; trace_id, name (the simulation's folder), files
# (`[{"name", "size"}]`), seconds: how long the URLs stay valid. The answer: the upload's
# files, `[{"name", "size", "url", "headers"} | {"name", "size", "multipart": {...}}]`,
# simulation.json last (POST /api/traces/{trace_id}/simulations/{name}/upload).
simulation_upload_requested = Signal()

# sender: the requester's class; trace_id, name, multipart (`[{"name", "upload_id", "parts":
# [{"part_number", "etag"}]}]`). The answer: the simulation's state once registered, its read
# started in the background (POST .../simulations/{name}/complete).
simulation_upload_completed = Signal()
