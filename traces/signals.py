"""Requests that the traces app makes of the apps that feed it, without importing them.

`ingest` depends on `traces`, never the other way round: the admin asks for a re-ingest by
sending `reingest_requested` once for the traces selected, and whatever ingestion is installed
answers with a sentence saying what it did (queued; started, waiting or refused in the
background). The API asks for a run's files with presigned download URLs by sending
`files_requested`: which keys a run's files are and how a URL is signed is ingestion's
knowledge (and boto3 its dependency), so `traces` never imports it.

A simulation's upload asks the same way (`simulations.signals`), and so does a run pushed through
the API (`cascade push`): `push_requested` for the presigned PUTs of its files, `push_completed`
once they are PUT. What ingestion refuses in an upload it raises as `UploadRefused` (a 400), or
as one of its kinds: `UploadForbidden` (a 403: someone else's), `UploadConflict` (a 409: what
must stay), `UploadMissing` (a 404: nothing of that name).

`trace_parsed` is what `traces` announces to itself once a parse is committed: the admin keeps
a big trace's page reads ahead of its first view (traces/apps.py connects it).
"""

from django.dispatch import Signal

# sender: the requester's class; trace_ids: the traces to read again from the bucket.
reingest_requested = Signal()

# sender: the requester's class; trace_id, files (Trace.files: the run's last listing),
# metadata_json (Trace.metadata_json), seconds: how long the URLs stay valid. The answer: the
# files a client downloads, `[{"path", "key", "bytes", "etag", "url"}]` in path order
# (`GET /api/traces/{trace_id}/files`), URLs presigned without a request to S3.
files_requested = Signal()

# sender: Trace; trace: the trace just made ready by a parse, sent once its transaction committed.
trace_parsed = Signal()

# sender: the requester's class; trace_id, files (`[{"name", "size", "upload_id"?}]`: paths in the
# run's folder, metadata.json among them), username and staff (who pushes), seconds: how long the
# URLs stay valid. The answer: `{"owner", "files"}`, each file but metadata.json with its PUT or
# multipart upload (`upload_id` given: that upload resumed) (POST /api/traces/{trace_id}/upload).
push_requested = Signal()

# sender: the requester's class; trace_id, files (as above), multipart (`[{"name", "upload_id",
# "parts": [{"part_number", "etag"}]}]`), username, staff, seconds. The answer: metadata.json's
# presigned PUT, once every other file named has landed with its size (POST .../complete).
push_completed = Signal()


class UploadRefused(ValueError):
    """What the app that answers an upload's signal refuses in it (a file name, a size, a part),
    said in a sentence for a 400."""


class UploadForbidden(UploadRefused):
    """An upload to what someone else owns: a 403 that names the owner."""


class UploadConflict(UploadRefused):
    """An upload that would replace what must stay (a ready trace, a finished simulation): a 409."""


class UploadMissing(UploadRefused):
    """Nothing of that name to complete or delete, in the database or the bucket: a 404."""
