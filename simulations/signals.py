"""What a simulation's upload asks of ingestion, without importing it (as `traces.signals`):
`simulation_upload_requested` for the presigned PUT URLs of its files (`cascade simulate`),
`simulation_upload_completed` once they are PUT (the multipart uploads completed, the
checked files moved into place, the simulation registered and read at once in the background),
`simulation_delete_requested` to remove a simulation and its files. What ingestion refuses in
them it raises as `UploadRefused` (the API's 400, traces.signals', shared with a run's push) or
one of its kinds: `SimulationForbidden` (403: another user's simulation), `SimulationExists`
(409: a finished upload holds the name) or `SimulationMissing` (404).

Each carries the requester as `username` and `staff`: ownership is recorded beside the files
(ingest.owners), so ingestion is where it is checked.
"""

from django.dispatch import Signal

from traces.signals import UploadConflict, UploadForbidden, UploadMissing, UploadRefused

__all__ = [
    "SimulationExists",
    "SimulationForbidden",
    "SimulationMissing",
    "UploadRefused",
    "simulation_delete_requested",
    "simulation_upload_completed",
    "simulation_upload_requested",
]

# sender: the requester's class; trace_id, name (the simulation's folder), username, staff, files
# (`[{"name", "size"}]`), seconds: how long the URLs stay valid. The answer: the upload's
# files, `[{"name", "size", "url", "headers"} | {"name", "size", "multipart": {...}}]`,
# simulation.json last (POST /api/traces/{trace_id}/simulations/{name}/upload).
simulation_upload_requested = Signal()

# sender: the requester's class; trace_id, name, username, staff, multipart (`[{"name",
# "upload_id", "parts": [{"part_number", "etag"}]}]`). The answer: the simulation's state once registered, its read
# started in the background (POST .../simulations/{name}/complete).
simulation_upload_completed = Signal()

# sender: the requester's class; trace_id, name, username, staff. The answer: None, once the
# folder's every object and the simulation's row are gone (DELETE .../simulations/{name}).
simulation_delete_requested = Signal()


class SimulationForbidden(UploadForbidden):
    """Another user's simulation: only its owner or staff may replace or delete it (a 403 that
    names the owner)."""


class SimulationExists(UploadConflict):
    """A finished upload holds the name (the simulation is ready or failed, or being read): a
    409, whoever asks."""


class SimulationMissing(UploadMissing):
    """No simulation of that name, in the database or the bucket (a 404)."""
